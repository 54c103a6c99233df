//! `mlp`: `relu(x @ W1 + b1) @ W2 + b2` with `x: [batch, d]`, `W1: [d, hidden]`,
//! `W2: [hidden, d]` (default `x [256, 1024]`, hidden 4096).

use super::{expect_inputs, weight, Model};
use crate::{Result, Tensor};

/// The `mlp` workload. Weights are stored `[in, out]`: `w1 [d, hidden]`, `b1 [hidden]`
/// (fan-in `d`, seeds 2000/2001), `w2 [hidden, d]`, `b2 [d]` (fan-in `hidden`, seeds
/// 2002/2003).
#[derive(Debug, Clone)]
pub struct Mlp {
    batch: usize,
    d: usize,
    hidden: usize,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Mlp {
    /// The workload over `x: [batch, d]` with a hidden width of `hidden` ([`super::build`]
    /// uses `4 * d`).
    pub fn new(batch: usize, d: usize, hidden: usize) -> Result<Mlp> {
        Ok(Mlp {
            batch,
            d,
            hidden,
            w1: weight(&[d, hidden], d, 2000)?,
            b1: weight(&[hidden], d, 2001)?,
            w2: weight(&[hidden, d], hidden, 2002)?,
            b2: weight(&[d], hidden, 2003)?,
        })
    }
}

impl Model for Mlp {
    fn name(&self) -> &'static str {
        "mlp"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.d]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("mlp", inputs, 1)?;
        let h = (inputs[0].matmul(&self.w1)? + &self.b1)?.relu()?;
        Ok(vec![(h.matmul(&self.w2)? + &self.b2)?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.d]]
    }

    fn weights(&self) -> Vec<(&'static str, Tensor)> {
        vec![
            ("w1", self.w1.clone()),
            ("b1", self.b1.clone()),
            ("w2", self.w2.clone()),
            ("b2", self.b2.clone()),
        ]
    }

    fn flops(&self) -> Option<f64> {
        let (b, d, h) = (self.batch as f64, self.d as f64, self.hidden as f64);
        Some(2.0 * b * d * h * 2.0)
    }
}
