//! `minilm`: all-MiniLM-L6-v2 sentence embeddings over a batch of token ids
//! `[batch, seq]` (default `[8, 128]`): a 6-layer BERT (width 384, 12 heads), mean pooling
//! and L2 normalisation ([`crate::nn::MiniLm`]). Its weights are the published ones when
//! `KILN_MINILM` names their folder (see `scripts/fetch-minilm.sh`), else random ones of the
//! same shapes (speed and IR do not depend on the values).

use super::{expect_inputs, Model};
use crate::nn::MiniLm as Embedder;
use crate::{Result, Tensor};

/// The `minilm` workload.
#[derive(Debug)]
pub struct MiniLm {
    batch: usize,
    seq: usize,
    model: Embedder,
    /// true when the published weights were loaded
    pub published: bool,
}

impl MiniLm {
    /// The workload over `[batch, seq]` token ids (`seq` at most 512, the position table).
    pub fn new(batch: usize, seq: usize) -> Result<MiniLm> {
        if seq > 512 {
            return Err(crate::error::invalid(
                "models::MiniLm::new",
                &[batch, seq],
                "sequences are at most 512 tokens (the position table)",
            ));
        }
        let (model, published) = match Embedder::dir_from_env() {
            Some(dir) => (Embedder::load(&dir)?, true),
            None => (Embedder::random(4000)?, false),
        };
        Ok(MiniLm {
            batch,
            seq,
            model,
            published,
        })
    }

    /// The embedder behind the workload.
    pub fn embedder(&self) -> &Embedder {
        &self.model
    }
}

impl Model for MiniLm {
    fn name(&self) -> &'static str {
        "minilm"
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.seq]; 3]
    }

    /// Token ids drawn from the vocabulary by a fixed-seed generator between `[CLS]` and
    /// `[SEP]`, every token attended (no padding), positions `0..seq`.
    fn example_inputs(&self, seed: u64) -> Result<Vec<Tensor>> {
        let (b, s) = (self.batch, self.seq);
        let vocab = self.model.bert.config.vocab_size as u64;
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        let mut ids = Vec::with_capacity(b * s);
        for _ in 0..b {
            for j in 0..s {
                // splitmix64
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                ids.push(match j {
                    0 => 101,
                    _ if j + 1 == s && s > 1 => 102,
                    _ => (1000 + z % (vocab - 1000)) as i64,
                });
            }
        }
        let positions: Vec<i64> = (0..b).flat_map(|_| 0..s as i64).collect();
        Ok(vec![
            Tensor::from_vec(ids, &[b, s])?,
            Tensor::from_vec(vec![1f32; b * s], &[b, s])?,
            Tensor::from_vec(positions, &[b, s])?,
        ])
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        expect_inputs("minilm", inputs, 3)?;
        Ok(vec![self
            .model
            .forward(&inputs[0], &inputs[1], &inputs[2])?])
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        vec![vec![self.batch, self.model.bert.config.hidden_size]]
    }

    fn items(&self) -> Option<(usize, &'static str)> {
        Some((self.batch, "sentences"))
    }

    fn flops(&self) -> Option<f64> {
        let c = &self.model.bert.config;
        let (b, s, d, f) = (
            self.batch as f64,
            self.seq as f64,
            c.hidden_size as f64,
            c.intermediate_size as f64,
        );
        // per layer: q, k, v, out projections; the MLP; scores and context
        let layer = 2.0 * b * s * (4.0 * d * d + 2.0 * d * f) + 4.0 * b * s * s * d;
        Some(c.num_hidden_layers as f64 * layer)
    }
}
