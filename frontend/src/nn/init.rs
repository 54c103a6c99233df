//! Layers with torch's default initialisation (`reset_parameters`), their parameters made
//! as f32 leaves that require grad, drawn from kiln's seeded generator (the same seed gives
//! the same values everywhere; the values are not torch's, whose generator differs).

use super::layers::{Embedding, LayerNorm, Linear};
use crate::{DType, Result, Tensor};

/// An independent seed for stream `stream` of `seed` (SplitMix64's finaliser over both), so
/// that a layer's weight and bias, and the layers of a model, never share a stream.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(stream.wrapping_add(1).wrapping_mul(0xd1b5_4a32_d192_ed03));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An f32 leaf that requires grad, uniform in `[-bound, bound)`.
fn uniform_leaf(shape: &[usize], bound: f64, seed: u64) -> Result<Tensor> {
    let u = Tensor::rand(shape, DType::F32, seed)?;
    u.mul(2.0 * bound)?.sub(bound)?.requires_grad_(true)
}

impl Linear {
    /// `torch.nn.Linear(in_features, out_features, bias)` as `reset_parameters` draws it:
    /// the weight `[out, in]` by `kaiming_uniform_(a = sqrt(5))`, which is
    /// `U(-1/sqrt(in), 1/sqrt(in))`, and the bias `[out]` from the same interval (both 0
    /// when `in_features` is 0, as torch). Weight and bias use streams 0 and 1 of `seed`.
    pub fn init(in_features: usize, out_features: usize, bias: bool, seed: u64) -> Result<Linear> {
        let bound = if in_features > 0 {
            1.0 / (in_features as f64).sqrt()
        } else {
            0.0
        };
        let weight = uniform_leaf(&[out_features, in_features], bound, derive_seed(seed, 0))?;
        let bias = if bias {
            Some(uniform_leaf(&[out_features], bound, derive_seed(seed, 1))?)
        } else {
            None
        };
        Linear::new(weight, bias)
    }
}

impl LayerNorm {
    /// `torch.nn.LayerNorm(features, eps)`: weight ones, bias zeros, both requiring grad
    /// (torch's default `eps` is `1e-5`).
    pub fn init(features: usize, eps: f64) -> Result<LayerNorm> {
        LayerNorm::new(
            Tensor::ones(&[features], DType::F32)?.requires_grad_(true)?,
            Tensor::zeros(&[features], DType::F32)?.requires_grad_(true)?,
            eps,
        )
    }
}

impl Embedding {
    /// `torch.nn.Embedding(num_embeddings, embedding_dim)`: the weight `[num, dim]` drawn
    /// from `N(0, 1)`, requiring grad.
    pub fn init(num_embeddings: usize, embedding_dim: usize, seed: u64) -> Result<Embedding> {
        Embedding::new(
            Tensor::randn(&[num_embeddings, embedding_dim], DType::F32, seed)?
                .requires_grad_(true)?,
        )
    }
}
