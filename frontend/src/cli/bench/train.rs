//! The training workloads of `kiln bench` (`train_mlp`, `train_block`, `train_minilm`): one
//! optimiser step, eager against compiled, in one process.
//!
//! A step is `loss = f(batch)`, `loss.backward()`, `opt.step()`, `opt.zero_grad()` with
//! `AdamW(lr 1e-3, fused)` over the model's parameters (leaves that require grad), `f` the
//! model's forward and the loss. Eagerly, that runs op by op (the fused AdamW kernel for the
//! update); compiled, the whole step is one function through `kiln::compile` (the batch is
//! the argument; the weights, their gradients and the optimiser's state are captured), so
//! forward, backward and the AdamW update are one graph whose in-place updates are written
//! back. Each side trains its own copy of the weights, built from the same seeds, on the
//! same fixed batch.
//!
//! 1. **Verify.** [`VERIFY_STEPS`] steps eagerly, then as many compiled; the losses of every
//!    step must agree to a relative `1e-4` (`1e-3` on `interp`, which computes in f64) or
//!    the row is unverified and has no times. Since step `k`'s loss is computed from the
//!    weights after `k - 1` updates, this checks gradients and updates too.
//! 2. **Peak memory** is taken from the caching allocator during those steps: the most
//!    bytes held by live tensors during steps 2.. of a side, less the bytes held before its
//!    first step. So it counts what training adds to the weights (AdamW's two moments,
//!    gradients, what the forward saves for the backward, buffers a compiled plan keeps
//!    between calls) and leaves out the first step's one-off work (the compile). The other
//!    side's tensors are the same before and after, so they cancel.
//! 3. **Compile time** is the first call of the compiled step (trace, differentiate,
//!    compile, run it once); `first_step_ms` is the same call.
//! 4. **Times**: steps of the two sides in alternation after a warm-up, as for the forward
//!    workloads ([`super::run::alternate`]).
//!
//! Flops: a step is counted as 3× the forward's matmul flops (the forward once; the
//! backward twice, one product for the gradient of each operand), embedding gathers and
//! pointwise work not counted. It is a slight overcount where a first layer's input needs
//! no gradient (`train_mlp`, `train_block`: the batch). Forward matmul flops:
//!
//! - `train_mlp`: `Σ 2·B·in·out` over the Linear layers;
//! - `train_block`: `24·b·s·d² + 4·b·s²·d` (see [`kiln::models::Block`]);
//! - `train_minilm`: `layers · (2·b·s·(4d² + 2·d·ffn) + 4·b·s²·d)`.

use super::run::{alternate, Budget, Timing};
use kiln::models::{Block, Model};
use kiln::nn::functional::{cross_entropy, mse_loss, CrossEntropyOptions, Reduction};
use kiln::nn::{BertConfig, BertModel, MiniLm, Module, Sequential, Weights};
use kiln::optim::{AdamW, Optimizer};
use kiln::{allocator_stats, compile_with, reset_peak_stats, Backend, CompileOptions};
use kiln::{DType, Tensor};
use std::sync::Arc;
use std::time::Instant;

/// The training workloads, in the order `kiln bench` runs them.
pub const NAMES: &[&str] = &["train_mlp", "train_block", "train_minilm"];

/// Steps each side runs before timing; their losses are compared.
pub const VERIFY_STEPS: usize = 3;

/// The learning rate of every workload's AdamW (torch's defaults otherwise).
pub const LR: f64 = 1e-3;

/// The loss of a batch (the model's forward and the loss function), shared by the eager
/// side and the compiled function.
pub type LossFn = Arc<dyn Fn(&[Tensor]) -> kiln::Result<Tensor> + Send + Sync>;

/// One copy of a workload's trainable state.
pub struct Trainee {
    /// the parameters: leaves that require grad, shared with the loss function's model
    pub params: Vec<Tensor>,
    /// the loss of a batch
    pub loss: LossFn,
}

/// A training workload at its shape.
#[derive(Clone, Debug)]
pub enum Workload {
    /// `Sequential::mlp(sizes)` (ReLU between) on `batch` rows of standard-normal features
    /// with labels `(7 i) mod classes`, mean cross-entropy: the `kiln train` model
    Mlp {
        /// rows per batch
        batch: usize,
        /// the Linear layers' sizes, inputs first
        sizes: Vec<usize>,
    },
    /// the `block` workload's pre-LN transformer block; loss: mean squared error of its
    /// output against a fixed standard-normal tensor
    Block {
        /// sequences per batch
        batch: usize,
        /// tokens per sequence
        seq: usize,
        /// the model width
        d_model: usize,
    },
    /// a BERT encoder with mean pooling and L2 normalisation (`nn::MiniLm`); loss: mean
    /// squared error of the sentence embeddings against a fixed standard-normal `[B, D]`
    MiniLm {
        /// sentences per batch
        batch: usize,
        /// tokens per sentence (all attended)
        seq: usize,
        /// the encoder's shape
        config: BertConfig,
        /// load the published weights from `KILN_MINILM` when it is set
        published: bool,
    },
}

/// The small BERT of `train_minilm --quick`: 2 layers of width 64, 4 heads, MLP 256, a
/// vocabulary of 512.
fn quick_bert() -> BertConfig {
    BertConfig {
        vocab_size: 512,
        hidden_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 256,
        max_position_embeddings: 64,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
    }
}

impl Workload {
    /// The workload `name` at its default shape, or (`quick`) a small one; `None` for a
    /// name that is not a training workload.
    pub fn new(name: &str, quick: bool) -> Option<Workload> {
        Some(match (name, quick) {
            ("train_mlp", false) => Workload::Mlp {
                batch: 64,
                sizes: vec![64, 128, 10],
            },
            ("train_mlp", true) => Workload::Mlp {
                batch: 16,
                sizes: vec![64, 32, 10],
            },
            ("train_block", false) => Workload::Block {
                batch: 4,
                seq: 256,
                d_model: 512,
            },
            ("train_block", true) => Workload::Block {
                batch: 1,
                seq: 32,
                d_model: 64,
            },
            ("train_minilm", false) => Workload::MiniLm {
                batch: 8,
                seq: 128,
                config: BertConfig::minilm_l6(),
                published: true,
            },
            ("train_minilm", true) => Workload::MiniLm {
                batch: 2,
                seq: 16,
                config: quick_bert(),
                published: false,
            },
            _ => return None,
        })
    }

    /// The workload's id.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Mlp { .. } => "train_mlp",
            Workload::Block { .. } => "train_block",
            Workload::MiniLm { .. } => "train_minilm",
        }
    }

    /// The first input's shape.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Workload::Mlp { batch, sizes } => vec![*batch, sizes[0]],
            Workload::Block {
                batch,
                seq,
                d_model,
            } => vec![*batch, *seq, *d_model],
            Workload::MiniLm { batch, seq, .. } => vec![*batch, *seq],
        }
    }

    /// The fixed batch every step trains on (the same for both sides).
    pub fn inputs(&self) -> kiln::Result<Vec<Tensor>> {
        match self {
            Workload::Mlp { batch, sizes } => {
                let classes = *sizes.last().expect("two sizes at least") as i64;
                let x = Tensor::randn(&[*batch, sizes[0]], DType::F32, 5000)?;
                let y: Vec<i64> = (0..*batch as i64).map(|i| (7 * i) % classes).collect();
                Ok(vec![x, Tensor::from_vec(y, &[*batch])?])
            }
            Workload::Block {
                batch,
                seq,
                d_model,
            } => {
                let shape = [*batch, *seq, *d_model];
                Ok(vec![
                    Tensor::randn(&shape, DType::F32, 5001)?,
                    Tensor::randn(&shape, DType::F32, 5002)?,
                ])
            }
            Workload::MiniLm {
                batch, seq, config, ..
            } => {
                let (b, s) = (*batch, *seq);
                let vocab = config.vocab_size as u64;
                let mut state = 0x5EED_u64;
                let ids: Vec<i64> = (0..b * s)
                    .map(|_| (splitmix64(&mut state) % vocab) as i64)
                    .collect();
                let positions: Vec<i64> = (0..b).flat_map(|_| 0..s as i64).collect();
                Ok(vec![
                    Tensor::from_vec(ids, &[b, s])?,
                    Tensor::from_vec(vec![1f32; b * s], &[b, s])?,
                    Tensor::from_vec(positions, &[b, s])?,
                    Tensor::randn(&[b, config.hidden_size], DType::F32, 5003)?,
                ])
            }
        }
    }

    /// A fresh copy of the model, its parameters requiring grad: every call gives the same
    /// initial weights (fixed seeds, or the published file).
    pub fn build(&self) -> kiln::Result<Trainee> {
        match self {
            Workload::Mlp { sizes, .. } => {
                let model = Sequential::mlp(sizes, 0)?;
                let params = model.parameters();
                let ce = CrossEntropyOptions::default();
                let loss: LossFn = Arc::new(move |xy: &[Tensor]| {
                    cross_entropy(&model.forward(&xy[0])?, &xy[1], &ce)
                });
                Ok(Trainee { params, loss })
            }
            Workload::Block {
                batch,
                seq,
                d_model,
            } => {
                let heads = Block::default_heads(*d_model).ok_or_else(|| kiln::Error::Invalid {
                    op: "train_block",
                    shape: self.shape(),
                    reason: "d_model must be even".into(),
                })?;
                let block = Block::new(*batch, *seq, *d_model, heads)?.requires_grad_(true)?;
                let params = block.weights().into_iter().map(|(_, w)| w).collect();
                let loss: LossFn = Arc::new(move |xt: &[Tensor]| {
                    let y = block.forward(&xt[..1])?;
                    mse_loss(&y[0], &xt[1], Reduction::Mean)
                });
                Ok(Trainee { params, loss })
            }
            Workload::MiniLm {
                config, published, ..
            } => {
                let mut params = Vec::new();
                let mut leaf = |t: Tensor| -> kiln::Result<Tensor> {
                    let t = t.requires_grad_(true)?;
                    params.push(t.clone());
                    Ok(t)
                };
                let dir = published.then(MiniLm::dir_from_env).flatten();
                let bert = match dir {
                    Some(dir) => {
                        let config = BertConfig::from_file(&dir.join("config.json"))?;
                        let weights = Weights::open(&dir.join("model.safetensors"))?;
                        BertModel::from_source(config, &mut |name: &str, shape: &[usize]| {
                            leaf(weights.get(name, shape)?)
                        })?
                    }
                    // as BertModel::random draws them (seed 4000, as the minilm workload)
                    None => {
                        let mut n = 0u64;
                        BertModel::from_source(
                            config.clone(),
                            &mut |name: &str, shape: &[usize]| {
                                n += 1;
                                leaf(if name.ends_with("LayerNorm.weight") {
                                    Tensor::ones(shape, DType::F32)?
                                } else if name.ends_with("LayerNorm.bias") {
                                    Tensor::zeros(shape, DType::F32)?
                                } else {
                                    (Tensor::randn(shape, DType::F32, 4000u64.wrapping_add(n))?
                                        * 0.02)?
                                })
                            },
                        )?
                    }
                };
                let model = MiniLm {
                    bert,
                    tokenizer: None,
                };
                let loss: LossFn = Arc::new(move |xs: &[Tensor]| {
                    let e = model.forward(&xs[0], &xs[1], &xs[2])?;
                    mse_loss(&e, &xs[3], Reduction::Mean)
                });
                Ok(Trainee { params, loss })
            }
        }
    }

    /// The forward pass's matmul flops (see the module's documentation).
    pub fn forward_flops(&self) -> f64 {
        match self {
            Workload::Mlp { batch, sizes } => sizes
                .windows(2)
                .map(|p| 2.0 * *batch as f64 * p[0] as f64 * p[1] as f64)
                .sum(),
            Workload::Block {
                batch,
                seq,
                d_model,
            } => {
                let (b, s, d) = (*batch as f64, *seq as f64, *d_model as f64);
                24.0 * b * s * d * d + 4.0 * b * s * s * d
            }
            Workload::MiniLm {
                batch, seq, config, ..
            } => {
                let (b, s, d, f) = (
                    *batch as f64,
                    *seq as f64,
                    config.hidden_size as f64,
                    config.intermediate_size as f64,
                );
                let layer = 2.0 * b * s * (4.0 * d * d + 2.0 * d * f) + 4.0 * b * s * s * d;
                config.num_hidden_layers as f64 * layer
            }
        }
    }

    /// Flops of one training step: 3× the forward's.
    pub fn step_flops(&self) -> f64 {
        3.0 * self.forward_flops()
    }

    /// Items one step trains on and what they are (`train_minilm`: sentences).
    pub fn items(&self) -> Option<(usize, &'static str)> {
        match self {
            Workload::MiniLm { batch, .. } => Some((*batch, "sentences")),
            _ => None,
        }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Why a training workload has no times.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// building the model or its batch failed
    #[error("building the workload: {0}")]
    Build(kiln::Error),
    /// a step of one side failed
    #[error("{side} step {step}: {stage}: {source}")]
    Step {
        /// `eager` or `compiled`
        side: &'static str,
        /// the step, from 1
        step: usize,
        /// `forward` (the loss), `backward` or `optimiser step`
        stage: &'static str,
        /// kiln's error (boxed: it is large)
        source: Box<kiln::Error>,
    },
    /// the compiled side's loss is too far from the eager one
    #[error(
        "step {step}: compiled loss {compiled} differs from eager {eager} by {rel_error:.3e} \
         (relative), tolerance {tolerance:.0e}"
    )]
    Mismatch {
        /// the step, from 1
        step: usize,
        /// the eager loss
        eager: f64,
        /// the compiled loss
        compiled: f64,
        /// `|compiled − eager| / |eager|` (NaN when either is not finite)
        rel_error: f64,
        /// the largest error accepted
        tolerance: f64,
    },
}

/// The measurements of one verified training workload.
#[derive(Clone, Debug)]
pub struct TrainMeasured {
    /// the first call of the compiled function (trace + compile + the forward), ms
    pub compile_ms: f64,
    /// the whole first compiled step, ms
    pub first_step_ms: f64,
    /// eager steps
    pub eager: Timing,
    /// compiled steps
    pub compiled: Timing,
    /// the losses of the verification steps, eager
    pub eager_losses: Vec<f64>,
    /// the losses of the verification steps, compiled
    pub compiled_losses: Vec<f64>,
    /// the largest relative loss difference of a verification step
    pub rel_error: f64,
    /// peak bytes of the eager steps above the bytes held before them (see the module doc)
    pub eager_peak_bytes: usize,
    /// the same for the compiled steps
    pub compiled_peak_bytes: usize,
    /// graphs the compiled function compiled
    pub graphs: u64,
}

/// The relative loss tolerance of the check: `1e-4`, `1e-3` on `interp` (f64 inside).
pub fn tolerance(backend: Backend) -> f64 {
    if backend == Backend::Interp {
        1e-3
    } else {
        1e-4
    }
}

/// The optimiser of every workload: AdamW with lr [`LR`], fused.
fn optimizer(params: Vec<Tensor>) -> kiln::Result<AdamW> {
    Ok(AdamW::new(params, LR)?.fused(true))
}

/// What one step of a side returns: its loss, or the stage that failed.
pub type StepResult = Result<Tensor, (&'static str, kiln::Error)>;

/// Builds two copies of `w`, compiles one's whole training step with `backend`, verifies
/// and times.
pub fn measure(
    w: &Workload,
    backend: Backend,
    budget: Budget,
) -> Result<TrainMeasured, TrainError> {
    let inputs = w.inputs().map_err(TrainError::Build)?;
    let eager = w.build().map_err(TrainError::Build)?;
    let compiled = w.build().map_err(TrainError::Build)?;
    let eager_opt = std::cell::RefCell::new(optimizer(eager.params).map_err(TrainError::Build)?);
    let compiled_opt =
        std::sync::Mutex::new(optimizer(compiled.params).map_err(TrainError::Build)?);
    let f = compiled.loss;
    let compiled_fn = compile_with(
        move |xs: &[Tensor]| -> kiln::Result<Tensor> {
            let mut opt = compiled_opt.lock().unwrap_or_else(|e| e.into_inner());
            let loss = f(xs)?;
            loss.backward()?;
            opt.step()?;
            opt.zero_grad();
            Ok(loss)
        },
        CompileOptions::default().backend(backend).name(w.name()),
    );
    let mut m = compare(
        &|xs: &[Tensor]| step(&*eager.loss, xs, &mut *eager_opt.borrow_mut()),
        &|xs: &[Tensor]| compiled_fn.call(xs).map_err(|e| ("compiled step", e)),
        &inputs,
        budget,
        tolerance(backend),
    )?;
    m.graphs = compiled_fn.stats().compiles;
    Ok(m)
}

/// One eager step: the loss of `inputs`, backward, the optimiser's step, the gradients
/// cleared.
fn step(
    loss_of: &dyn Fn(&[Tensor]) -> kiln::Result<Tensor>,
    inputs: &[Tensor],
    opt: &mut dyn Optimizer,
) -> StepResult {
    let loss = loss_of(inputs).map_err(|e| ("forward", e))?;
    loss.backward().map_err(|e| ("backward", e))?;
    opt.step().map_err(|e| ("optimiser step", e))?;
    opt.zero_grad();
    Ok(loss)
}

/// What the verification steps of one side measured.
struct Verified {
    /// the loss of each step
    losses: Vec<f64>,
    /// the peak bytes of steps 2.. above the bytes held before step 1
    peak_bytes: usize,
    /// the whole first step, ms
    first_step_ms: f64,
}

/// [`VERIFY_STEPS`] steps of a side (see [`Verified`]).
fn verify_side(
    side: &'static str,
    step: &dyn Fn(&[Tensor]) -> StepResult,
    inputs: &[Tensor],
) -> Result<Verified, TrainError> {
    let fail = |step: usize| {
        move |(stage, source)| TrainError::Step {
            side,
            step,
            stage,
            source: Box::new(source),
        }
    };
    let before = allocator_stats().allocated_bytes;
    let start = Instant::now();
    let loss = step(inputs).map_err(fail(1))?;
    let first_step_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut losses = vec![item(loss, side, 1)?];
    reset_peak_stats();
    for k in 2..=VERIFY_STEPS {
        let loss = step(inputs).map_err(fail(k))?;
        losses.push(item(loss, side, k)?);
    }
    let peak_bytes = allocator_stats()
        .peak_allocated_bytes
        .saturating_sub(before);
    Ok(Verified {
        losses,
        peak_bytes,
        first_step_ms,
    })
}

/// The value of a loss.
fn item(loss: Tensor, side: &'static str, step: usize) -> Result<f64, TrainError> {
    loss.item().map_err(|source| TrainError::Step {
        side,
        step,
        stage: "reading the loss",
        source: Box::new(source),
    })
}

/// Verifies the `compiled` step against the `eager` one (each training its own copy of the
/// weights with its own optimiser), then times their steps in alternation.
pub fn compare(
    eager: &dyn Fn(&[Tensor]) -> StepResult,
    compiled: &dyn Fn(&[Tensor]) -> StepResult,
    inputs: &[Tensor],
    budget: Budget,
    tolerance: f64,
) -> Result<TrainMeasured, TrainError> {
    let e = verify_side("eager", eager, inputs)?;
    let c = verify_side("compiled", compiled, inputs)?;
    let mut rel_error = 0.0f64;
    for (k, (&el, &cl)) in e.losses.iter().zip(&c.losses).enumerate() {
        let err = if el.is_finite() && cl.is_finite() {
            (cl - el).abs() / el.abs().max(f64::MIN_POSITIVE)
        } else {
            f64::NAN
        };
        if err.is_nan() || err > tolerance {
            return Err(TrainError::Mismatch {
                step: k + 1,
                eager: el,
                compiled: cl,
                rel_error: err,
                tolerance,
            });
        }
        rel_error = rel_error.max(err);
    }
    // steps continue from the verification's, numbered on for errors
    let (mut ne, mut nc) = (VERIFY_STEPS, VERIFY_STEPS);
    let timed = |side: &'static str, n: &mut usize, f: &dyn Fn(&[Tensor]) -> StepResult| {
        *n += 1;
        let k = *n;
        f(inputs)
            .map(drop)
            .map_err(|(stage, source)| TrainError::Step {
                side,
                step: k,
                stage,
                source: Box::new(source),
            })
    };
    let (eager_t, compiled_t) = alternate(
        budget,
        || timed("eager", &mut ne, eager),
        || timed("compiled", &mut nc, compiled),
    )?;
    Ok(TrainMeasured {
        compile_ms: c.first_step_ms,
        first_step_ms: c.first_step_ms,
        eager: eager_t,
        compiled: compiled_t,
        eager_losses: e.losses,
        compiled_losses: c.losses,
        rel_error,
        eager_peak_bytes: e.peak_bytes,
        compiled_peak_bytes: c.peak_bytes,
        graphs: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    const BUDGET: Budget = Budget {
        min_runs: 3,
        min_secs: 0.0,
        warmup: 1,
    };

    /// Every workload builds at its quick shape; two builds start from the same weights,
    /// which require grad, and the loss is a finite scalar whose backward reaches them all.
    #[test]
    fn quick_workloads_build_twice_alike_and_backward_reaches_every_parameter() {
        let _serial = crate::cli::tensor_test_lock();
        for name in NAMES {
            let w = Workload::new(name, true).unwrap();
            assert_eq!(w.name(), *name);
            let inputs = w.inputs().unwrap();
            assert_eq!(inputs[0].shape(), w.shape().as_slice());
            let (a, b) = (w.build().unwrap(), w.build().unwrap());
            assert_eq!(a.params.len(), b.params.len());
            for (p, q) in a.params.iter().zip(&b.params) {
                assert!(p.requires_grad() && p.is_leaf(), "{name}");
                assert_eq!(p.to_vec_f64().unwrap(), q.to_vec_f64().unwrap(), "{name}");
            }
            let loss = (a.loss)(&inputs).unwrap();
            assert!(
                loss.shape().is_empty() && loss.item().unwrap().is_finite(),
                "{name}"
            );
            loss.backward().unwrap();
            for (i, p) in a.params.iter().enumerate() {
                assert!(p.grad().is_some(), "{name}: parameter {i} has no gradient");
            }
            assert!(w.step_flops() > 0.0 && w.step_flops() == 3.0 * w.forward_flops());
        }
        assert!(Workload::new("block", true).is_none());
        assert_eq!(
            Workload::new("train_block", false).unwrap().forward_flops(),
            Block::new(4, 256, 512, 8).unwrap().flops().unwrap()
        );
    }

    /// The eager machinery, with eager on both sides: equal losses (to the bit), peaks
    /// that count at least the optimiser's moments, and times for each side.
    #[test]
    fn eager_against_eager_verifies_and_measures() {
        let _serial = crate::cli::tensor_test_lock();
        let w = Workload::new("train_mlp", true).unwrap();
        let inputs = w.inputs().unwrap();
        let (a, b) = (w.build().unwrap(), w.build().unwrap());
        let moments: usize = a.params.iter().map(|p| 2 * 4 * p.numel()).sum();
        let (oa, ob) = (
            RefCell::new(optimizer(a.params.clone()).unwrap()),
            RefCell::new(optimizer(b.params.clone()).unwrap()),
        );
        let m = compare(
            &|xs: &[Tensor]| step(&*a.loss, xs, &mut *oa.borrow_mut()),
            &|xs: &[Tensor]| step(&*b.loss, xs, &mut *ob.borrow_mut()),
            &inputs,
            BUDGET,
            1e-4,
        )
        .unwrap();
        assert_eq!(m.eager_losses.len(), VERIFY_STEPS);
        assert_eq!(m.eager_losses, m.compiled_losses);
        assert_eq!(m.rel_error, 0.0);
        assert!(
            m.eager_losses[VERIFY_STEPS - 1] < m.eager_losses[0],
            "{:?}",
            m.eager_losses
        );
        // the moments at least, unless another test of this binary freed more meanwhile
        // (the allocator's counters are global): only a positive peak is certain
        assert!(m.eager_peak_bytes > 0 && m.compiled_peak_bytes > 0);
        println!(
            "peak {} / {}, moments {moments}",
            m.eager_peak_bytes, m.compiled_peak_bytes
        );
        assert!(m.compile_ms > 0.0 && m.first_step_ms >= m.compile_ms);
        assert_eq!((m.eager.runs, m.compiled.runs), (3, 3));
        // both copies trained alike through the timed steps too
        for (p, q) in a.params.iter().zip(&b.params) {
            assert_eq!(p.to_vec_f64().unwrap(), q.to_vec_f64().unwrap());
        }
    }

    /// A compiled side whose loss differs is a mismatch naming the step; one that fails is
    /// an error naming the side, the step and the stage.
    #[test]
    fn mismatches_and_failures_are_errors() {
        let _serial = crate::cli::tensor_test_lock();
        let w = Workload::new("train_mlp", true).unwrap();
        let inputs = w.inputs().unwrap();
        let (a, b) = (w.build().unwrap(), w.build().unwrap());
        let (oa, ob) = (
            RefCell::new(optimizer(a.params.clone()).unwrap()),
            RefCell::new(optimizer(b.params.clone()).unwrap()),
        );
        let eager = |xs: &[Tensor]| step(&*a.loss, xs, &mut *oa.borrow_mut());
        let off = |xs: &[Tensor]| (b.loss)(xs)?.mul(1.001);
        let off_step = |xs: &[Tensor]| step(&off, xs, &mut *ob.borrow_mut());
        let e = compare(&eager, &off_step, &inputs, BUDGET, 1e-4).unwrap_err();
        assert!(matches!(e, TrainError::Mismatch { step: 1, .. }), "{e}");
        // a loss outside autograd: backward fails, and the error names the stage
        let detached = |xs: &[Tensor]| Ok((b.loss)(xs)?.detach());
        let detached_step = |xs: &[Tensor]| step(&detached, xs, &mut *ob.borrow_mut());
        let e = compare(&eager, &detached_step, &inputs, BUDGET, 1e-4)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("compiled step 1: backward:"), "{e}");
    }
}
