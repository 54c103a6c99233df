//! `block`: a pre-LN transformer block over `x: [batch, seq, d_model]` (default
//! `[4, 256, 512]`, 8 heads):
//!
//! ```text
//! h   = layer_norm(x; ln1_w, ln1_b)
//! q,k,v = h @ wq + bq, h @ wk + bk, h @ wv + bv      split into heads [b, heads, s, hd]
//! a   = softmax(q @ kᵀ / sqrt(hd) + causal_mask) @ v  (position i attends to j <= i)
//! x1  = x + merge_heads(a) @ wo + bo
//! y   = x1 + gelu_erf(layer_norm(x1; ln2_w, ln2_b) @ w1 + b1) @ w2 + b2   (hidden 4 d_model)
//! ```

use super::{expect_inputs, norm_params, weight, Model};
use crate::{DType, Error, Result, Tensor};

/// The `block` workload. Weights are stored `[in, out]` and made by [`super::weight`]
/// (fan-in `d_model` for `wq wk wv wo w1` and their biases, `4 d_model` for `w2, b2`);
/// layer norms' weight and bias by [`super::norm_params`]; all with fixed seeds from 3000.
#[derive(Debug, Clone)]
pub struct Block {
    batch: usize,
    seq: usize,
    d: usize,
    heads: usize,
    ln1_w: Tensor,
    ln1_b: Tensor,
    wq: Tensor,
    bq: Tensor,
    wk: Tensor,
    bk: Tensor,
    wv: Tensor,
    bv: Tensor,
    wo: Tensor,
    bo: Tensor,
    ln2_w: Tensor,
    ln2_b: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Block {
    /// Epsilon of both layer norms.
    pub const EPS: f64 = 1e-5;

    /// The head count [`super::build`] uses for `d_model`: 8 when `d_model % 8 == 0` and
    /// `d_model >= 64`, else 2 when `d_model` is even; `None` for an odd `d_model`.
    pub fn default_heads(d_model: usize) -> Option<usize> {
        if d_model >= 64 && d_model.is_multiple_of(8) {
            Some(8)
        } else if d_model >= 2 && d_model.is_multiple_of(2) {
            Some(2)
        } else {
            None
        }
    }

    /// The block over `x: [batch, seq, d_model]` with `heads` attention heads (`heads` must
    /// divide `d_model`).
    pub fn new(batch: usize, seq: usize, d_model: usize, heads: usize) -> Result<Block> {
        if heads == 0 || !d_model.is_multiple_of(heads) {
            return Err(Error::Invalid {
                op: "models::Block::new",
                shape: vec![batch, seq, d_model],
                reason: format!("{heads} heads do not divide d_model {d_model}"),
            });
        }
        let d = d_model;
        let hidden = 4 * d;
        let (ln1_w, ln1_b) = norm_params(d, 3000)?;
        let (ln2_w, ln2_b) = norm_params(d, 3002)?;
        Ok(Block {
            batch,
            seq,
            d,
            heads,
            ln1_w,
            ln1_b,
            wq: weight(&[d, d], d, 3010)?,
            bq: weight(&[d], d, 3011)?,
            wk: weight(&[d, d], d, 3012)?,
            bk: weight(&[d], d, 3013)?,
            wv: weight(&[d, d], d, 3014)?,
            bv: weight(&[d], d, 3015)?,
            wo: weight(&[d, d], d, 3016)?,
            bo: weight(&[d], d, 3017)?,
            ln2_w,
            ln2_b,
            w1: weight(&[d, hidden], d, 3020)?,
            b1: weight(&[hidden], d, 3021)?,
            w2: weight(&[hidden, d], hidden, 3022)?,
            b2: weight(&[d], hidden, 3023)?,
        })
    }

    /// The number of attention heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// The block with every weight made a leaf that requires grad (or not), for training:
    /// [`Model::weights`] then returns the parameters (clones sharing `.grad`) that an
    /// optimiser updates in place, and `forward` records autograd history.
    pub fn requires_grad_(mut self, requires_grad: bool) -> Result<Block> {
        for w in [
            &mut self.ln1_w,
            &mut self.ln1_b,
            &mut self.wq,
            &mut self.bq,
            &mut self.wk,
            &mut self.bk,
            &mut self.wv,
            &mut self.bv,
            &mut self.wo,
            &mut self.bo,
            &mut self.ln2_w,
            &mut self.ln2_b,
            &mut self.w1,
            &mut self.b1,
            &mut self.w2,
            &mut self.b2,
        ] {
            *w = w.clone().requires_grad_(requires_grad)?;
        }
        Ok(self)
    }

    /// `[b, s, d] -> [b, heads, s, hd]`.
    fn split_heads(&self, t: &Tensor, b: i64, s: i64) -> Result<Tensor> {
        let h = self.heads as i64;
        let hd = self.d as i64 / h;
        t.reshape(&[b, s, h, hd])?.transpose(1, 2)
    }
}

impl Model for Block {
    fn name(&self) -> &'static str {
        "block"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.seq, self.d]]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("block", inputs, 1)?;
        let x = &inputs[0];
        if x.rank() != 3 || x.shape()[2] != self.d {
            return Err(Error::Invalid {
                op: "block",
                shape: x.shape().to_vec(),
                reason: format!("expects [batch, seq, {}]", self.d),
            });
        }
        let (b, s) = (x.shape()[0], x.shape()[1]);
        let (bi, si, di) = (b as i64, s as i64, self.d as i64);
        let hd = self.d / self.heads;

        // attention
        let h = x.layer_norm(&[self.d], Some(&self.ln1_w), Some(&self.ln1_b), Self::EPS)?;
        let q = (h.matmul(&self.wq)? + &self.bq)?;
        let k = (h.matmul(&self.wk)? + &self.bk)?;
        let v = (h.matmul(&self.wv)? + &self.bv)?;
        let q = self.split_heads(&q, bi, si)?;
        let k = self.split_heads(&k, bi, si)?;
        let v = self.split_heads(&v, bi, si)?;
        let scores = (q.matmul(&k.transpose(-2, -1)?)? * (1.0 / (hd as f64).sqrt()))?;
        // -inf strictly above the diagonal (j > i), 0 elsewhere; broadcasts over [b, heads].
        let mask = Tensor::full(&[s, s], f64::NEG_INFINITY, DType::F32)?.triu(1)?;
        let probs = (scores + mask)?.softmax(-1)?;
        let att = probs.matmul(&v)?.transpose(1, 2)?.reshape(&[bi, si, di])?;
        let x1 = (x + (att.matmul(&self.wo)? + &self.bo)?)?;

        // MLP
        let h2 = x1.layer_norm(&[self.d], Some(&self.ln2_w), Some(&self.ln2_b), Self::EPS)?;
        let m = (h2.matmul(&self.w1)? + &self.b1)?.gelu()?;
        let m = (m.matmul(&self.w2)? + &self.b2)?;
        Ok(vec![(x1 + m)?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.seq, self.d]]
    }

    fn weights(&self) -> Vec<(&'static str, Tensor)> {
        vec![
            ("ln1_w", self.ln1_w.clone()),
            ("ln1_b", self.ln1_b.clone()),
            ("wq", self.wq.clone()),
            ("bq", self.bq.clone()),
            ("wk", self.wk.clone()),
            ("bk", self.bk.clone()),
            ("wv", self.wv.clone()),
            ("bv", self.bv.clone()),
            ("wo", self.wo.clone()),
            ("bo", self.bo.clone()),
            ("ln2_w", self.ln2_w.clone()),
            ("ln2_b", self.ln2_b.clone()),
            ("w1", self.w1.clone()),
            ("b1", self.b1.clone()),
            ("w2", self.w2.clone()),
            ("b2", self.b2.clone()),
        ]
    }

    /// Matmuls only: q, k, v, o projections `4 · 2bsd²`, `q kᵀ` and `probs v` `2 · 2bs²d`
    /// (the full square, masked or not), MLP `2 · 2bs·d·4d`: `24bsd² + 4bs²d`.
    fn flops(&self) -> Option<f64> {
        let (b, s, d) = (self.batch as f64, self.seq as f64, self.d as f64);
        Some(24.0 * b * s * d * d + 4.0 * b * s * s * d)
    }
}
