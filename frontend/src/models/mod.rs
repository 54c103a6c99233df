//! A model zoo of the benchmark workloads of `shared/bench/WORKLOADS.md`, written as plain
//! Rust over the eager [`Tensor`] API: each [`Model`] owns its weights and has a `forward`
//! built only from public tensor ops, so the same code runs eagerly or under graph capture.
//!
//! ```
//! let m = kiln::models::build("mlp", Some(&[3, 16]))?;
//! let x = m.example_inputs(0)?;
//! let y = m.forward(&x)?;
//! assert_eq!(y[0].shape(), &[3, 16]);
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! All tensors are f32. Inputs come from [`Model::example_inputs`] (a fixed-seed standard
//! normal); weights are built once in [`build`] from fixed seeds (see [`weight`]).

mod block;
mod layernorm;
mod minilm;
mod mlp;
mod pointwise;
mod reduce;
mod softmax;
mod tiny;

pub use block::Block;
pub use layernorm::LayerNorm;
pub use minilm::MiniLm;
pub use mlp::Mlp;
pub use pointwise::Pointwise;
pub use reduce::Reduce;
pub use softmax::Softmax;
pub use tiny::Tiny;

use crate::{DType, Error, Result, Tensor};

/// A workload of ../shared/bench/WORKLOADS.md: weights it owns + a forward over input tensors.
pub trait Model: Send + Sync {
    /// The workload's id (one of [`NAMES`]).
    fn name(&self) -> &'static str;
    /// The inputs' shapes (the model's own weights are not inputs).
    fn input_shapes(&self) -> Vec<Vec<usize>>;
    /// Fresh f32 inputs (fixed-seed normal via Tensor::randn), one per input_shapes entry.
    fn example_inputs(&self, seed: u64) -> crate::Result<Vec<Tensor>> {
        self.input_shapes()
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::randn(s, DType::F32, seed.wrapping_add(i as u64)))
            .collect()
    }
    /// The forward pass; only tensor ops of the public API, no reading of values.
    fn forward(&self, inputs: &[Tensor]) -> crate::Result<Vec<Tensor>>;
    /// The outputs' shapes (what `forward` returns, without running it).
    fn output_shapes(&self) -> Vec<Vec<usize>>;
    /// The model's weights by name (empty for weight-free workloads), in a fixed order.
    fn weights(&self) -> Vec<(&'static str, Tensor)> {
        Vec::new()
    }
    /// Items one forward handles and what they are, for workloads reported per item
    /// (`minilm`: `(batch, "sentences")`); `None` for the others.
    fn items(&self) -> Option<(usize, &'static str)> {
        None
    }
    /// flops of one forward (matmul 2*m*n*k summed) or None for memory-bound ones
    fn flops(&self) -> Option<f64>;
    /// bytes moved: each input read once + each weight read once + each output written once
    fn bytes(&self) -> f64 {
        let numel = |s: &Vec<usize>| s.iter().product::<usize>();
        let inputs: usize = self.input_shapes().iter().map(numel).sum();
        let weights: usize = self.weights().iter().map(|(_, w)| w.numel()).sum();
        let outputs: usize = self.output_shapes().iter().map(numel).sum();
        ((inputs + weights + outputs) * std::mem::size_of::<f32>()) as f64
    }
}

/// The workload ids [`build`] knows, in WORKLOADS.md's order.
pub const NAMES: &[&str] = &[
    "pointwise",
    "layernorm",
    "softmax",
    "reduce",
    "mlp",
    "block",
    "tiny",
    "minilm",
];

/// Builds a model. `shape` overrides the workload's default input shape (the first input's
/// shape: `[n]` for pointwise/tiny, `[rows, cols]` for layernorm/softmax/reduce, `[B, D]` for
/// mlp, `[batch, seq, d_model]` for block, `[batch, seq]` for minilm). Weights are derived from it (see each model's
/// type) with [`Tensor::randn`] scaled by `1/sqrt(fan_in)` and fixed seeds. An unknown name,
/// or a shape of the wrong rank or with a zero dim, is an [`Error::Invalid`] listing
/// [`NAMES`].
pub fn build(name: &str, shape: Option<&[usize]>) -> crate::Result<Box<dyn Model>> {
    let default: &[usize] = match name {
        "pointwise" => &[16 << 20],
        "layernorm" | "softmax" => &[8192, 1024],
        "reduce" => &[4096, 4096],
        "mlp" => &[256, 1024],
        "block" => &[4, 256, 512],
        "tiny" => &[1024],
        "minilm" => &[8, 128],
        _ => {
            return Err(bad(
                &[],
                format!("unknown model {name:?}; the models are {NAMES:?}"),
            ))
        }
    };
    let shape = shape.unwrap_or(default);
    if shape.len() != default.len() || shape.contains(&0) {
        return Err(bad(
            shape,
            format!(
                "model {name:?} takes a non-empty shape of rank {} (default {default:?}); \
                 the models are {NAMES:?}",
                default.len()
            ),
        ));
    }
    Ok(match name {
        "pointwise" => Box::new(Pointwise::new(shape[0])),
        "layernorm" => Box::new(LayerNorm::new(shape[0], shape[1])?),
        "softmax" => Box::new(Softmax::new(shape[0], shape[1])),
        "reduce" => Box::new(Reduce::new(shape[0], shape[1])),
        "mlp" => Box::new(Mlp::new(shape[0], shape[1], 4 * shape[1])?),
        "block" => {
            let heads = Block::default_heads(shape[2]).ok_or_else(|| {
                bad(
                    shape,
                    format!(
                        "block needs an even d_model (got {}); the models are {NAMES:?}",
                        shape[2]
                    ),
                )
            })?;
            Box::new(Block::new(shape[0], shape[1], shape[2], heads)?)
        }
        "tiny" => Box::new(Tiny::new(shape[0])),
        "minilm" => Box::new(MiniLm::new(shape[0], shape[1])?),
        _ => unreachable!("every name with a default is built"),
    })
}

/// A weight of `shape` for a layer with `fan_in` inputs: `randn(shape, seed) / sqrt(fan_in)`.
/// It is an autograd leaf that does not require grad: a clone from [`Model::weights`]
/// shares its flag, so `w.requires_grad_(true)` on that clone trains the model's own
/// tensor.
pub fn weight(shape: &[usize], fan_in: usize, seed: u64) -> Result<Tensor> {
    (Tensor::randn(shape, DType::F32, seed)? * (1.0 / (fan_in as f64).sqrt()))?
        .requires_grad_(false)
}

/// A layer norm's `(weight, bias)` of size `n`: `1 + 0.1 * randn` and `0.1 * randn`, so that
/// both take part in the result (not the trivial ones and zeros). Leaves as [`weight`]'s.
pub fn norm_params(n: usize, seed: u64) -> Result<(Tensor, Tensor)> {
    let w = (Tensor::randn(&[n], DType::F32, seed)? * 0.1)? + 1.0;
    let b = Tensor::randn(&[n], DType::F32, seed + 1)? * 0.1;
    Ok((w?.requires_grad_(false)?, b?.requires_grad_(false)?))
}

fn bad(shape: &[usize], reason: String) -> Error {
    Error::Invalid {
        op: "models::build",
        shape: shape.to_vec(),
        reason,
    }
}

/// Checks that `forward` got `n` inputs (a typed error rather than an index panic).
fn expect_inputs(name: &'static str, inputs: &[Tensor], n: usize) -> Result<()> {
    if inputs.len() == n {
        return Ok(());
    }
    Err(Error::Invalid {
        op: name,
        shape: inputs
            .first()
            .map(|t| t.shape().to_vec())
            .unwrap_or_default(),
        reason: format!("expects {n} input(s), got {}", inputs.len()),
    })
}
