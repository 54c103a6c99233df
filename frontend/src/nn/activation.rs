//! Activation layers (`torch.nn.ReLU`, `Tanh`, `GELU`, `Sigmoid`): modules without
//! parameters, so that they can stand in a [`Sequential`](super::Sequential) and take an
//! index there as torch's do.

use super::Module;
use crate::{Result, Tensor};

/// `torch.nn.ReLU`: `max(x, 0)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relu;

/// `torch.nn.Tanh`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tanh;

/// `torch.nn.Sigmoid`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sigmoid;

/// `torch.nn.GELU`: the erf form, or the tanh approximation (`approximate="tanh"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gelu {
    /// `approximate="tanh"`
    pub tanh: bool,
}

impl Module for Relu {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.relu()
    }
}

impl Module for Tanh {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.tanh()
    }
}

impl Module for Sigmoid {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.sigmoid()
    }
}

impl Module for Gelu {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.tanh {
            x.gelu_tanh()
        } else {
            x.gelu()
        }
    }
}
