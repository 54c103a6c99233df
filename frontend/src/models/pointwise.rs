//! `pointwise`: `y = gelu_tanh(x * 1.5 + 0.5) * sigmoid(x)` over `x: [n]` (default 16M).

use super::{expect_inputs, Model};
use crate::{Result, Tensor};

/// The `pointwise` workload: `gelu_tanh(x * 1.5 + 0.5) * sigmoid(x)`, no weights.
#[derive(Debug, Clone)]
pub struct Pointwise {
    n: usize,
}

impl Pointwise {
    /// The workload over `x: [n]`.
    pub fn new(n: usize) -> Pointwise {
        Pointwise { n }
    }
}

impl Model for Pointwise {
    fn name(&self) -> &'static str {
        "pointwise"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.n]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("pointwise", inputs, 1)?;
        let x = &inputs[0];
        let a = ((x * 1.5)? + 0.5)?.gelu_tanh()?;
        Ok(vec![(a * x.sigmoid()?)?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.n]]
    }

    fn flops(&self) -> Option<f64> {
        None
    }
}
