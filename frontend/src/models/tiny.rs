//! `tiny`: 20 chained pointwise ops on `x: [n]` (default 1024), measuring per-call overhead.

use super::{expect_inputs, Model};
use crate::{Result, Tensor};

/// The `tiny` workload: [`Tiny::STEPS`] chained pointwise ops. Step `i` (0-based, with
/// `k = i / 4`) is, by `i % 4`: `0` → `+ (0.25 + 0.05 k)`, `1` → `* (1.5 - 0.1 k)`,
/// `2` → `tanh`, `3` → `sigmoid`. No weights.
#[derive(Debug, Clone)]
pub struct Tiny {
    n: usize,
}

/// One step of [`Tiny`]'s chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TinyStep {
    /// `x + c`
    Add(f64),
    /// `x * c`
    Mul(f64),
    /// `tanh(x)`
    Tanh,
    /// `sigmoid(x)`
    Sigmoid,
}

impl Tiny {
    /// The number of chained ops.
    pub const STEPS: usize = 20;

    /// The workload over `x: [n]`.
    pub fn new(n: usize) -> Tiny {
        Tiny { n }
    }

    /// Step `i` of the chain (see [`Tiny`]).
    pub fn step(i: usize) -> TinyStep {
        let k = (i / 4) as f64;
        match i % 4 {
            0 => TinyStep::Add(0.25 + 0.05 * k),
            1 => TinyStep::Mul(1.5 - 0.1 * k),
            2 => TinyStep::Tanh,
            _ => TinyStep::Sigmoid,
        }
    }
}

impl Model for Tiny {
    fn name(&self) -> &'static str {
        "tiny"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.n]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("tiny", inputs, 1)?;
        let mut x = inputs[0].clone();
        for i in 0..Self::STEPS {
            x = match Self::step(i) {
                TinyStep::Add(c) => (&x + c)?,
                TinyStep::Mul(c) => (&x * c)?,
                TinyStep::Tanh => x.tanh()?,
                TinyStep::Sigmoid => x.sigmoid()?,
            };
        }
        Ok(vec![x])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.n]]
    }

    fn flops(&self) -> Option<f64> {
        None
    }
}
