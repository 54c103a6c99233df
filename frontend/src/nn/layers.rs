//! `Linear`, `LayerNorm` and `Embedding`, as `torch.nn` defines them.

use crate::error::invalid;
use crate::{Result, Tensor};

/// `y = x @ weightᵀ + bias`, `weight: [out, in]` (PyTorch's layout).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`
    pub weight: Tensor,
    /// `[out_features]`, if any
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A linear layer from its weight `[out, in]` and optional bias `[out]` (checked).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        if weight.rank() != 2 {
            return Err(invalid(
                "nn::Linear",
                weight.shape(),
                "the weight must be [out_features, in_features]",
            ));
        }
        if let Some(b) = &bias {
            if b.shape() != [weight.shape()[0]] {
                return Err(invalid(
                    "nn::Linear",
                    b.shape(),
                    format!(
                        "the bias must be [{}] for weight {:?}",
                        weight.shape()[0],
                        weight.shape()
                    ),
                ));
            }
        }
        Ok(Linear { weight, bias })
    }

    /// `x @ weightᵀ + bias` over the last dim of `x`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// Layer norm over the last dim with an elementwise weight and bias (biased variance).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// `[features]`
    pub weight: Tensor,
    /// `[features]`
    pub bias: Tensor,
    /// added to the variance
    pub eps: f64,
}

impl LayerNorm {
    /// A layer norm from its weight and bias, both `[features]` (checked).
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> Result<LayerNorm> {
        if weight.rank() != 1 || weight.shape() != bias.shape() {
            return Err(invalid(
                "nn::LayerNorm",
                weight.shape(),
                format!(
                    "weight and bias must both be [features], got bias {:?}",
                    bias.shape()
                ),
            ));
        }
        Ok(LayerNorm { weight, bias, eps })
    }

    /// Normalises the last dim of `x`.
    #[track_caller]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(
            self.weight.shape(),
            Some(&self.weight),
            Some(&self.bias),
            self.eps,
        )
    }
}

/// A lookup table: row `i` of `weight: [num, dim]` for each index `i`.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`
    pub weight: Tensor,
    /// the row that gets no gradient (`torch.nn.Embedding`'s `padding_idx`), if any
    pub padding_idx: Option<i64>,
}

impl Embedding {
    /// A table from its weight `[num, dim]` (checked).
    pub fn new(weight: Tensor) -> Result<Embedding> {
        if weight.rank() != 2 {
            return Err(invalid(
                "nn::Embedding",
                weight.shape(),
                "the weight must be [num_embeddings, embedding_dim]",
            ));
        }
        Ok(Embedding {
            weight,
            padding_idx: None,
        })
    }

    /// The same table with row `padding_idx` (negative: counted from the end) excluded from
    /// gradients, as `torch.nn.Embedding(..., padding_idx)`; an index outside the table is
    /// an error.
    pub fn with_padding_idx(self, padding_idx: i64) -> Result<Embedding> {
        let rows = self.weight.shape()[0] as i64;
        if !(-rows..rows).contains(&padding_idx) {
            return Err(invalid(
                "nn::Embedding",
                self.weight.shape(),
                format!("padding_idx {padding_idx} must be within the {rows} rows"),
            ));
        }
        Ok(Embedding {
            padding_idx: Some(padding_idx),
            ..self
        })
    }

    /// The rows of `indices` (an integer tensor of any shape): shape `indices.shape + [dim]`.
    /// An index past the table is an error (from `index_select`), never a panic.
    #[track_caller]
    pub fn forward(&self, indices: &Tensor) -> Result<Tensor> {
        // n-d indices select rows directly (no flattening reshape, so a symbolic sequence
        // dim stays symbolic under compile)
        self.weight.embedding(indices, self.padding_idx)
    }
}
