//! `reduce`: `sum(x * x, dim=1)` over `x: [rows, cols]` (default `[4096, 4096]`).

use super::{expect_inputs, Model};
use crate::{Result, Tensor};

/// The `reduce` workload: `sum(x * x, dim=1)` giving `[rows]`, no weights.
#[derive(Debug, Clone)]
pub struct Reduce {
    rows: usize,
    cols: usize,
}

impl Reduce {
    /// The workload over `x: [rows, cols]`.
    pub fn new(rows: usize, cols: usize) -> Reduce {
        Reduce { rows, cols }
    }
}

impl Model for Reduce {
    fn name(&self) -> &'static str {
        "reduce"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows, self.cols]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("reduce", inputs, 1)?;
        let x = &inputs[0];
        Ok(vec![(x * x)?.sum(&[1], false)?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.rows]]
    }

    fn flops(&self) -> Option<f64> {
        None
    }
}
