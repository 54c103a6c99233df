//! Text to token ids with a Hugging Face `tokenizer.json` (for BERT: lower-casing and
//! accent handling, WordPiece, `[CLS] … [SEP]`), in Rust: no Python at inference.

use crate::{Error, Result, Tensor};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, TruncationParams};

/// A tokenizer read from a `tokenizer.json`, truncating to a maximum length and padding a
/// batch to its longest sentence (on the right, with the file's pad token).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    max_len: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("max_len", &self.max_len)
            .finish()
    }
}

/// A tokenized batch: `[B, S]` tensors (ids and positions i64, the mask f32) padded to the
/// longest sentence.
#[derive(Debug, Clone)]
pub struct Batch {
    /// token ids, `[PAD]` (0 for BERT) past each sentence's end
    pub input_ids: Tensor,
    /// 1.0 for a token, 0.0 for padding (f32: the additive attention mask and the pooling
    /// weights are then computed inside the model's fused f32 kernels, with no integer
    /// cast; an integer mask works too)
    pub attention_mask: Tensor,
    /// `0..S` on every row
    pub position_ids: Tensor,
    /// each sentence's ids without padding (what `reference.json` records)
    pub ids: Vec<Vec<i64>>,
}

impl Tokenizer {
    /// Reads `tokenizer.json`; sentences longer than `max_len` tokens (specials included) are
    /// truncated.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Tokenizer> {
        let err = |reason: String| Error::Io {
            path: path.display().to_string(),
            reason,
        };
        let mut inner = tokenizers::Tokenizer::from_file(path).map_err(|e| err(e.to_string()))?;
        let (pad_id, pad_token) = match inner.get_padding() {
            Some(p) => (p.pad_id, p.pad_token.clone()),
            None => (0, "[PAD]".to_string()),
        };
        inner
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| err(e.to_string()))?;
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token,
            ..Default::default()
        }));
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
            max_len,
        })
    }

    /// The longest sequence it produces.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes `texts` (at least one) into one padded batch.
    pub fn encode(&self, texts: &[&str]) -> Result<Batch> {
        if texts.is_empty() {
            return Err(crate::error::invalid(
                "Tokenizer::encode",
                &[0],
                "no sentences to encode",
            ));
        }
        let encs = self
            .inner
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Io {
                path: self.path.display().to_string(),
                reason: format!("tokenizing: {e}"),
            })?;
        let b = encs.len();
        let s = encs.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * s);
        let mut mask = Vec::with_capacity(b * s);
        let mut kept = Vec::with_capacity(b);
        for e in &encs {
            let row: Vec<i64> = e.get_ids().iter().map(|&i| i64::from(i)).collect();
            let m: Vec<i64> = e
                .get_attention_mask()
                .iter()
                .map(|&i| i64::from(i))
                .collect();
            kept.push(
                row.iter()
                    .zip(&m)
                    .filter(|(_, &m)| m != 0)
                    .map(|(&i, _)| i)
                    .collect(),
            );
            ids.extend(row);
            mask.extend(m);
        }
        let positions: Vec<i64> = (0..b).flat_map(|_| 0..s as i64).collect();
        Ok(Batch {
            input_ids: Tensor::from_vec(ids, &[b, s])?,
            attention_mask: Tensor::from_vec(
                mask.into_iter().map(|m| m as f32).collect::<Vec<f32>>(),
                &[b, s],
            )?,
            position_ids: Tensor::from_vec(positions, &[b, s])?,
            ids: kept,
        })
    }
}
