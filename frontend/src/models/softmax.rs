//! `softmax`: softmax over the last dim of `x: [rows, cols]` (default `[8192, 1024]`).

use super::{expect_inputs, Model};
use crate::{Result, Tensor};

/// The `softmax` workload: `softmax(x, dim=-1)`, no weights.
#[derive(Debug, Clone)]
pub struct Softmax {
    rows: usize,
    cols: usize,
}

impl Softmax {
    /// The workload over `x: [rows, cols]`.
    pub fn new(rows: usize, cols: usize) -> Softmax {
        Softmax { rows, cols }
    }
}

impl Model for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows, self.cols]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("softmax", inputs, 1)?;
        Ok(vec![inputs[0].softmax(-1)?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows, self.cols]]
    }

    fn flops(&self) -> Option<f64> {
        None
    }
}
