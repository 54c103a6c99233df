//! Random inputs for a graph, the same in every test and tool that compares executors.

use super::{InterpError, Value};
use crate::{rng, DType, Dim, Graph};

/// Inputs for `g`: floats standard normal, integers in {0, 1} (valid indices into any table
/// of size ≥ 2, and 0/1 masks), booleans true with probability 1/2; input `k` uses the
/// generator stream `seed + k`. Symbolic dims take the size `size_of` gives them.
pub fn random_inputs(
    g: &Graph,
    seed: u64,
    size_of: &dyn Fn(&str) -> usize,
) -> Result<Vec<Value>, InterpError> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(k, (_, id))| {
            let ty = &g.node(*id).ty;
            let shape: Vec<usize> = ty
                .shape
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Const(n) => *n,
                    Dim::Sym(s) => size_of(s),
                })
                .collect();
            let s = seed + k as u64;
            let n = shape.iter().product::<usize>() as u64;
            let data: Vec<f64> = (0..n)
                .map(|i| match ty.dtype {
                    DType::I32 | DType::I64 => (rng::uniform(s, i) * 2.0).floor(),
                    DType::Bool => f64::from(u8::from(rng::uniform(s, i) < 0.5)),
                    _ => rng::normal(s, i),
                })
                .collect();
            Value::new(ty.dtype, shape, data)
        })
        .collect()
}
