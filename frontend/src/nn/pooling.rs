//! Sentence-embedding pooling: the mean of the token vectors the attention mask keeps, and
//! L2 normalisation (what sentence-transformers' `Pooling` and `Normalize` modules do).

use crate::{Result, Tensor};

/// `sum(h · mask) / max(sum(mask), 1e-9)` over the sequence dim: `h: [B, S, D]`,
/// `mask: [B, S]` (1 for a token, 0 for padding; any dtype) → `[B, D]`.
pub fn mean_pool(h: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let m = if mask.dtype() == h.dtype() {
        mask.unsqueeze(-1)?
    } else {
        mask.cast(h.dtype())?.unsqueeze(-1)?
    }; // [B, S, 1]
    let summed = (h * &m)?.sum(&[1], false)?; // [B, D]
    let counts = m.sum(&[1], false)?.maximum(1e-9)?; // [B, 1]
    &summed / &counts
}

/// `x / max(‖x‖₂, 1e-12)` along the last dim (`torch.nn.functional.normalize`).
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let norm = (x * x)?.sum(&[-1], true)?.sqrt()?.maximum(1e-12)?;
    x / &norm
}
