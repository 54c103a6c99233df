//! DDP equivalence (PyTorch's `_test_DDP_niter` pattern): ranks training on their shards of
//! each global batch must follow one process training on the whole batch. Shared by the
//! world-size-1 tests and the `mpirun -np 2` tests.

use kiln::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup};
use kiln::nn::functional::{mse_loss, Reduction};
use kiln::nn::{Linear, Module, Sequential};
use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{compile_with, CompileOptions, TierPolicy};
use kiln::{DType, Result, Tensor};
use std::cell::Cell;

/// The global batch (rows) of every step.
pub const GLOBAL: usize = 16;

/// The optimiser of a case.
#[derive(Clone, Copy, Debug)]
pub enum Opt {
    /// SGD, momentum 0.9, weight decay 1e-4
    SgdMomentum,
    /// AdamW, lr 1e-2
    AdamW,
}

/// One equivalence case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// the optimiser
    pub opt: Opt,
    /// forward and loss through `kiln::compile`
    pub compiled: bool,
    /// micro-batches per step (all but the last under `no_sync`)
    pub micro: usize,
    /// compiled as one graph per bucket group (`compile_split`) instead of one graph
    pub split: bool,
    /// the loss function compiled with the model's bucket split (`ddp.compile`: the traced
    /// graph cut at bucket boundaries) instead of one graph
    pub graph_split: bool,
}

/// Every case the tests run.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for opt in [Opt::SgdMomentum, Opt::AdamW] {
        for (compiled, split, graph_split) in [
            (false, false, false),
            (true, false, false),
            (true, true, false),
            (true, false, true),
        ] {
            for micro in [1, 2] {
                v.push(Case {
                    opt,
                    compiled,
                    micro,
                    split,
                    graph_split,
                });
            }
        }
    }
    v
}

/// Bucket limits small enough that the 8-16-4 MLP has two buckets (`2.bias, 2.weight`
/// past 210 bytes, then `0.bias, 0.weight`), so a split compile has two graphs.
pub fn small_buckets() -> DdpOptions {
    DdpOptions {
        first_bucket_mb: 0.0002,
        bucket_cap_mb: 0.002,
        ..DdpOptions::default()
    }
}

/// Step `i`'s global batch: x [GLOBAL, 8], y [GLOBAL, 4].
pub fn global_batch(i: usize) -> (Tensor, Tensor) {
    let x = Tensor::randn(&[GLOBAL, 8], DType::F32, 500 + i as u64).unwrap();
    let y = (x.narrow(1, 2, 4).unwrap().tanh().unwrap() * 0.7).unwrap();
    (x, y)
}

fn optimiser(opt: Opt, params: Vec<Tensor>) -> Box<dyn Optimizer> {
    match opt {
        Opt::SgdMomentum => Box::new(
            Sgd::new(params, 0.05)
                .unwrap()
                .momentum(0.9, 0.0, false)
                .weight_decay(1e-4),
        ),
        Opt::AdamW => Box::new(AdamW::new(params, 1e-2).unwrap()),
    }
}

/// Compile options for the runs compared bit for bit: every kernel on its Cranelift code.
/// The automatic tier swaps a kernel to C code (equal within the op's error budget, not to
/// the bit) once its calls take long enough, or at once where its object is in the on-disk
/// cache, so two runs could differ in which kernels ran which code.
fn cranelift_only() -> CompileOptions {
    CompileOptions::default().tier(TierPolicy::CraneliftOnly)
}

/// Trains `steps` steps: on `group` (each rank its contiguous shard of every micro-batch,
/// the model built with a seed that differs per rank so that DDP's broadcast must make
/// the replicas equal), or without DDP on the whole batch (`group` None). Returns the
/// parameters after each step.
pub fn train(group: Option<ProcessGroup>, case: Case, steps: usize) -> Result<Vec<Vec<f64>>> {
    let (rank, world) = group
        .as_ref()
        .map_or((0, 1), |g| (g.rank(), g.world_size()));
    let model = Sequential::mlp(&[8, 16, 4], 7 + rank as u64)?;
    let net = match group {
        Some(g) => Net::Ddp(DistributedDataParallel::new(model, g, small_buckets())?),
        None => Net::Plain(model),
    };
    let mut opt = optimiser(case.opt, net.params());
    let loss_of = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![mse_loss(&net.fwd(&xs[0])?, &xs[1], Reduction::Mean)?])
    };
    let compiled = match (&net, case.graph_split) {
        (Net::Ddp(d), true) => d.compile(loss_of, cranelift_only()),
        _ => compile_with(loss_of, cranelift_only()),
    };
    let split = match (&net, case.split) {
        (Net::Ddp(d), true) => Some(d.compile_split(cranelift_only())),
        _ => None,
    };
    let mut out = Vec::new();
    for i in 0..steps {
        let (x, y) = global_batch(i);
        opt.zero_grad();
        let per_micro = GLOBAL / case.micro;
        let shard = per_micro / world;
        for m in 0..case.micro {
            let start = m * per_micro + rank * shard;
            let xs = [x.narrow(0, start, shard)?, y.narrow(0, start, shard)?];
            let loss = if let Some(s) = &split {
                mse_loss(&s.forward(&xs[0])?, &xs[1], Reduction::Mean)?
            } else if case.compiled {
                compiled.call(xs.as_ref())?.remove(0)
            } else {
                loss_of(&xs)?.remove(0)
            };
            let last = m + 1 == case.micro;
            let _no_sync = match &net {
                Net::Ddp(d) if !last => Some(d.no_sync()),
                _ => None,
            };
            loss.backward()?;
        }
        opt.step()?;
        out.push(net.values());
    }
    Ok(out)
}

/// The model, or its DDP wrapper.
enum Net {
    Plain(Sequential),
    Ddp(DistributedDataParallel<Sequential>),
}

impl Net {
    fn fwd(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Net::Plain(m) => m.forward(x),
            Net::Ddp(d) => d.forward(x),
        }
    }

    fn params(&self) -> Vec<Tensor> {
        match self {
            Net::Plain(m) => m.parameters(),
            Net::Ddp(d) => d.module().parameters(),
        }
    }

    fn values(&self) -> Vec<f64> {
        self.params()
            .iter()
            .flat_map(|p| p.to_vec_f64().unwrap())
            .collect()
    }
}

/// The largest difference between two runs' parameters, relative to max(|reference|, 1e-2).
#[allow(dead_code)] // used by ddp_mpi.rs only
pub fn max_rel_diff(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y))
        .map(|(x, y)| (x - y).abs() / y.abs().max(1e-2))
        .fold(0.0, f64::max)
}

/// Two linear heads `a` and `b` (parameters `a.weight`, `a.bias`, `b.weight`, `b.bias`);
/// `b` joins the output only while `use_b` is set, so it can go unused.
#[allow(dead_code)] // used by ddp.rs and ddp_mpi.rs
pub struct TwoHeads {
    pub a: Linear,
    pub b: Linear,
    pub use_b: Cell<bool>,
}

impl Module for TwoHeads {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        for (head, m) in [("a", &self.a), ("b", &self.b)] {
            v.extend(
                m.named_parameters()
                    .into_iter()
                    .map(|(n, t)| (format!("{head}.{n}"), t)),
            );
        }
        v
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.a.forward(x)?;
        if self.use_b.get() {
            y.add(&self.b.forward(x)?)
        } else {
            Ok(y)
        }
    }
}

/// Heads `a` and `b` from `inputs` to `outputs` features (seeds 1 and 2).
#[allow(dead_code)] // used by ddp.rs and ddp_mpi.rs
pub fn two_heads(inputs: usize, outputs: usize, use_b: bool) -> TwoHeads {
    TwoHeads {
        a: Linear::init(inputs, outputs, true, 1).unwrap(),
        b: Linear::init(inputs, outputs, true, 2).unwrap(),
        use_b: Cell::new(use_b),
    }
}

/// The backward of the sum of `m`'s output on `x`.
#[allow(dead_code)] // used by ddp.rs and ddp_mpi.rs
pub fn sum_backward(m: &impl Module, x: &Tensor) -> Result<()> {
    m.forward(x)?.sum(&[0, 1], false)?.backward()
}
