//! `layernorm`: layer norm over the last dim of `x: [rows, cols]` with weight and bias,
//! eps 1e-5 (default `[8192, 1024]`).

use super::{expect_inputs, norm_params, Model};
use crate::{Result, Tensor};

/// The `layernorm` workload: `layer_norm(x, [cols], weight, bias, 1e-5)`.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    rows: usize,
    cols: usize,
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    /// Epsilon of the norm.
    pub const EPS: f64 = 1e-5;

    /// The workload over `x: [rows, cols]`; weight and bias `[cols]` from [`norm_params`]
    /// (seed 1000).
    pub fn new(rows: usize, cols: usize) -> Result<LayerNorm> {
        let (weight, bias) = norm_params(cols, 1000)?;
        Ok(LayerNorm {
            rows,
            cols,
            weight,
            bias,
        })
    }
}

impl Model for LayerNorm {
    fn name(&self) -> &'static str {
        "layernorm"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows, self.cols]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("layernorm", inputs, 1)?;
        let y = inputs[0].layer_norm(
            &[self.cols],
            Some(&self.weight),
            Some(&self.bias),
            Self::EPS,
        )?;
        Ok(vec![y])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows, self.cols]]
    }

    fn weights(&self) -> Vec<(&'static str, Tensor)> {
        vec![("weight", self.weight.clone()), ("bias", self.bias.clone())]
    }

    fn flops(&self) -> Option<f64> {
        None
    }
}
