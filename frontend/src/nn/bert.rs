//! A BERT encoder as Hugging Face's `BertModel` computes it (post-LN layers, absolute
//! position embeddings, erf gelu), with the published safetensors names
//! (`embeddings.word_embeddings.weight`, `encoder.layer.{i}.attention.self.query.weight`, …).
//!
//! ```text
//! h0 = LN(word[ids] + position[pos] + token_type[types])
//! per layer:  a  = LN(h + Wo·attention(Wq·h, Wk·h, Wv·h, mask))      (12 heads for MiniLM)
//!             h' = LN(a + W2·gelu(W1·a))
//! attention   softmax(q·kᵀ/√d_head + (mask - 1)·f32::MAX)·v         per head
//! ```

use super::layers::{Embedding, LayerNorm, Linear};
use crate::error::invalid;
use crate::{DType, Error, Result, Tensor};
use serde::Deserialize;
use std::path::Path;

/// The fields of a Hugging Face BERT `config.json` that the encoder uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// rows of the word embedding table
    pub vocab_size: usize,
    /// the model width
    pub hidden_size: usize,
    /// encoder layers
    pub num_hidden_layers: usize,
    /// attention heads per layer (divides `hidden_size`)
    pub num_attention_heads: usize,
    /// the MLP's hidden width
    pub intermediate_size: usize,
    /// rows of the position embedding table (the longest sequence)
    pub max_position_embeddings: usize,
    /// rows of the token type table
    pub type_vocab_size: usize,
    /// every layer norm's epsilon
    pub layer_norm_eps: f64,
    /// the MLP's activation: only `gelu` (the erf form) is supported
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_act() -> String {
    "gelu".to_string()
}

impl BertConfig {
    /// all-MiniLM-L6-v2's configuration (6 layers, width 384, 12 heads, MLP 1536).
    pub fn minilm_l6() -> BertConfig {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 384,
            num_hidden_layers: 6,
            num_attention_heads: 12,
            intermediate_size: 1536,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_act: "gelu".to_string(),
        }
    }

    /// Reads a `config.json` and checks what the encoder relies on.
    pub fn from_file(path: &Path) -> Result<BertConfig> {
        let io = |reason: String| Error::Io {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| io(e.to_string()))?;
        let c: BertConfig = serde_json::from_str(&text).map_err(|e| io(e.to_string()))?;
        c.check().map_err(|e| io(e.to_string()))?;
        Ok(c)
    }

    fn check(&self) -> Result<()> {
        let shape = [self.hidden_size, self.num_attention_heads];
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(invalid(
                "BertConfig",
                &shape,
                "the heads must divide hidden_size",
            ));
        }
        if self.hidden_act != "gelu" {
            return Err(invalid(
                "BertConfig",
                &shape,
                format!(
                    "hidden_act `{}` is not supported (only `gelu`)",
                    self.hidden_act
                ),
            ));
        }
        Ok(())
    }

    /// The width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// A source of named weights: `(name, expected shape) -> tensor` (a file, or random).
pub type WeightSource<'a> = dyn FnMut(&str, &[usize]) -> Result<Tensor> + 'a;

/// The embedding layer: word + position + token type, then a layer norm.
#[derive(Debug, Clone)]
pub struct BertEmbeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
}

/// One post-LN encoder layer.
#[derive(Debug, Clone)]
pub struct BertLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

/// The encoder: embeddings and layers (no pooler: sentence embeddings pool themselves).
#[derive(Debug, Clone)]
pub struct BertModel {
    /// its configuration
    pub config: BertConfig,
    embeddings: BertEmbeddings,
    layers: Vec<BertLayer>,
}

fn linear(src: &mut WeightSource<'_>, name: &str, out: usize, inp: usize) -> Result<Linear> {
    Linear::new(
        src(&format!("{name}.weight"), &[out, inp])?,
        Some(src(&format!("{name}.bias"), &[out])?),
    )
}

fn norm(src: &mut WeightSource<'_>, name: &str, d: usize, eps: f64) -> Result<LayerNorm> {
    LayerNorm::new(
        src(&format!("{name}.weight"), &[d])?,
        src(&format!("{name}.bias"), &[d])?,
        eps,
    )
}

impl BertModel {
    /// Builds the encoder from `source`, asked for every weight by its published name and
    /// shape.
    pub fn from_source(config: BertConfig, source: &mut WeightSource<'_>) -> Result<BertModel> {
        config.check()?;
        let c = &config;
        let (d, eps) = (c.hidden_size, c.layer_norm_eps);
        let embeddings = BertEmbeddings {
            word: Embedding::new(source(
                "embeddings.word_embeddings.weight",
                &[c.vocab_size, d],
            )?)?,
            position: Embedding::new(source(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, d],
            )?)?,
            token_type: Embedding::new(source(
                "embeddings.token_type_embeddings.weight",
                &[c.type_vocab_size, d],
            )?)?,
            norm: norm(source, "embeddings.LayerNorm", d, eps)?,
        };
        let mut layers = Vec::new();
        for i in 0..c.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            layers.push(BertLayer {
                query: linear(source, &format!("{p}.attention.self.query"), d, d)?,
                key: linear(source, &format!("{p}.attention.self.key"), d, d)?,
                value: linear(source, &format!("{p}.attention.self.value"), d, d)?,
                attn_out: linear(source, &format!("{p}.attention.output.dense"), d, d)?,
                attn_norm: norm(source, &format!("{p}.attention.output.LayerNorm"), d, eps)?,
                intermediate: linear(
                    source,
                    &format!("{p}.intermediate.dense"),
                    c.intermediate_size,
                    d,
                )?,
                output: linear(source, &format!("{p}.output.dense"), d, c.intermediate_size)?,
                out_norm: norm(source, &format!("{p}.output.LayerNorm"), d, eps)?,
                heads: c.num_attention_heads,
            });
        }
        Ok(BertModel {
            config,
            embeddings,
            layers,
        })
    }

    /// The encoder with random weights of the right shapes (fixed seeds from `seed`; normal
    /// with std 0.02 as BERT initialises, norms' weights 1 and biases 0): for benchmarks and
    /// IR dumps where the published files are absent.
    pub fn random(config: BertConfig, seed: u64) -> Result<BertModel> {
        let mut n = 0u64;
        BertModel::from_source(config, &mut |name: &str, shape: &[usize]| {
            n += 1;
            if name.ends_with("LayerNorm.weight") {
                Tensor::ones(shape, DType::F32)
            } else if name.ends_with("LayerNorm.bias") {
                Tensor::zeros(shape, DType::F32)
            } else {
                Tensor::randn(shape, DType::F32, seed.wrapping_add(n))? * 0.02
            }
        })
    }

    /// The last layer's hidden states `[B, S, hidden]` for `input_ids: [B, S]` (integers),
    /// `attention_mask: [B, S]` (1 keeps a token, 0 is padding; any dtype) and
    /// `position_ids: [B, S]` or `[S]` (integers; `0..S` for unpadded left-aligned text).
    /// Token types are all 0 (single sentences).
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: &Tensor,
        position_ids: &Tensor,
    ) -> Result<Tensor> {
        if input_ids.rank() != 2 || attention_mask.shape() != input_ids.shape() {
            return Err(invalid(
                "BertModel::forward",
                input_ids.shape(),
                format!(
                    "input_ids must be [batch, seq] and attention_mask the same, got mask {:?}",
                    attention_mask.shape()
                ),
            ));
        }
        let e = &self.embeddings;
        let words = e.word.forward(input_ids)?;
        let positions = e.position.forward(position_ids)?;
        // token type 0 for every token: row 0 of the table, broadcast
        let types = e.token_type.weight.narrow(0, 0, 1)?;
        let mut h = e.norm.forward(&((&words + &positions)? + &types)?)?;
        // [B, 1, 1, S]: 0 where attended, the most negative f32 at padding (as HF does)
        let mask = as_f32(attention_mask)?
            .sub(1.0)?
            .mul(f64::from(f32::MAX))?
            .unsqueeze(1)?
            .unsqueeze(1)?;
        for layer in &self.layers {
            h = layer.forward(&h, &mask)?;
        }
        Ok(h)
    }
}

/// `t` as f32 (itself when it already is: no cast node in a traced graph).
pub(crate) fn as_f32(t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F32 {
        Ok(t.clone())
    } else {
        t.cast(DType::F32)
    }
}

impl BertLayer {
    /// `[B, S, D] -> [B, heads, S, head_dim]`
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.shape();
        let (b, t, d) = (s[0] as i64, s[1] as i64, s[2] as i64);
        let heads = self.heads as i64;
        x.reshape(&[b, t, heads, d / heads])?.permute(&[0, 2, 1, 3])
    }

    /// One layer over `h: [B, S, D]` with the additive mask `[B, 1, 1, S]`.
    pub fn forward(&self, h: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let s = h.shape();
        let (b, t, d) = (s[0] as i64, s[1] as i64, s[2] as i64);
        let q = self.split_heads(&self.query.forward(h)?)?;
        let k = self.split_heads(&self.key.forward(h)?)?;
        let v = self.split_heads(&self.value.forward(h)?)?;
        let head_dim = (d / self.heads as i64) as f64;
        let scores = (q.matmul(&k.transpose(-1, -2)?)? / head_dim.sqrt())?;
        let probs = (&scores + mask)?.softmax(-1)?;
        let ctx = probs
            .matmul(&v)?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b, t, d])?;
        let a = self
            .attn_norm
            .forward(&(self.attn_out.forward(&ctx)? + h)?)?;
        let m = self.intermediate.forward(&a)?.gelu()?;
        self.out_norm.forward(&(self.output.forward(&m)? + &a)?)
    }
}
