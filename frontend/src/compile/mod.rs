//! `kiln::compile`: capture eager code into graphs, with guards, recompiles, automatic
//! dynamic shapes and graph breaks (kiln's Dynamo).
//!
//! ```
//! use kiln::{compile, DType, Tensor};
//! let w = Tensor::randn(&[16, 8], DType::F32, 1)?;
//! let f = compile(|x: &Tensor| (&x.matmul(&w)?.relu()? * 2.0));
//! let x = Tensor::randn(&[4, 16], DType::F32, 2)?;
//! let y = f.call(&x)?;               // traces, compiles, runs
//! let y2 = f.call(&x)?;              // guards pass: the compiled graph runs
//! assert_eq!(y.to_vec::<f32>()?, y2.to_vec::<f32>()?);
//! assert_eq!(f.stats().compiles, 1);
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! Tensors the function reads that are not arguments (weights captured by the closure)
//! become inputs of the graph *by reference*: an in-place update of a weight between calls
//! is seen by the next call. Swapping a captured tensor for another one through interior
//! mutability (`RefCell`, `Mutex`) is not visible to the guards: call
//! [`CompiledFn::reset`] after doing so.

mod args;
mod backend;
mod compiled_fn;
mod dynamic;
mod explain;
mod functional;
mod guards;
pub(crate) mod lazy;
mod logs;
mod repro;
mod split_training;
mod stats;
mod tracer;
mod training;

pub use args::{TensorArgs, TensorOutputs};
pub use backend::Backend;
pub use compiled_fn::CompiledFn;
pub use explain::ExplainReport;
pub use guards::{GuardFailure, Guards, TensorGuard};
pub use logs::{enabled as log_enabled, parse_log_spec, LogCategory};
pub use split_training::GradientSplit;
pub use stats::CompileStats;
pub use tracer::GraphBreak;

use crate::error::Result;

/// When dims are compiled as symbols.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dynamic {
    /// a dim whose size changed between calls becomes a symbol at the recompile
    #[default]
    Auto,
    /// every dim of every argument is a symbol from the first compile (sizes 0 and 1 stay
    /// specialised)
    Always,
    /// every dim stays a constant; each new size compiles a new entry
    Never,
}

/// What compiled code optimises for (torch.compile's `mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// plain plans
    #[default]
    Default,
    /// the cuda backend records each plan as a CUDA graph per input shape and replays it
    /// (one launch of recorded work per call instead of one per kernel); plans that need
    /// host copies run unrecorded. Other backends ignore it.
    ReduceOverhead,
}

/// Options of [`compile_with`].
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// where compiled graphs run
    pub backend: Backend,
    /// a graph break is an error instead
    pub fullgraph: bool,
    /// automatic dynamic shapes
    pub dynamic: Dynamic,
    /// at most this many cache entries; past it the function runs eagerly
    pub cache_limit: usize,
    /// the name of the graphs (`@name`) and of the function in logs and errors
    pub name: String,
    /// `(argument, dim)` pairs compiled as symbols from the start
    pub mark_dynamic: Vec<(usize, usize)>,
    /// fuse ops into kernel groups (the cpu backend); off, every op is its own kernel
    pub fusion: bool,
    /// what compiled code optimises for
    pub mode: Mode,
    /// allow the optimiser's value-changing rewrites (the fast-math rules of
    /// `passes/RULES.md`, such as `x / c` → `x * (1/c)`); off (the default), compiled code
    /// rounds as eager code does
    pub fast_math: bool,
    /// rewrite rules not to run, by name (`passes/RULES.md`); an unknown name is a compile
    /// error
    pub disabled_rules: Vec<String>,
    /// how the cpu backend generates code (defaults with the `KILN_*` overrides of the
    /// environment: `KILN_UNROLL`, `KILN_ROW_GROUP`, `KILN_NO_CHAIN_FITS`, `KILN_NO_CUTS`,
    /// `KILN_CLIF_OPT`, `KILN_ASM`, read here and nowhere below)
    pub codegen: kiln_codegen::CodegenOptions,
    /// compiled training: the bytes the forward may save for the backward, as a fraction
    /// of what the default partition saves (`None`: no limit). Below 1 the partitioner
    /// recomputes more (large reductions, then matmuls) until it fits
    /// (`torch._functorch.config.activation_memory_budget`)
    pub memory_budget: Option<f64>,
    /// compiled training: cut the graph into one forward and backward per run of
    /// parameters in the same gradient bucket, so that each bucket's gradients are complete
    /// while earlier segments' backwards still run (data-parallel training overlaps its
    /// all-reduces with them; see [`CompileOptions::split_gradients`])
    pub gradient_split: Option<GradientSplit>,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            backend: Backend::default(),
            fullgraph: false,
            dynamic: Dynamic::Auto,
            cache_limit: 8,
            name: "compiled".into(),
            mark_dynamic: Vec::new(),
            fusion: true,
            mode: Mode::Default,
            fast_math: false,
            disabled_rules: Vec::new(),
            codegen: kiln_codegen::CodegenOptions::from_env(),
            memory_budget: None,
            gradient_split: None,
        }
    }
}

impl CompileOptions {
    /// Sets the backend.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Compiled training runs as a chain of graphs cut where the parameters used change
    /// gradient bucket (torch's DDPOptimizer): each segment records its own autograd node,
    /// so a bucket's post-accumulate hooks fire as soon as the segments using its parameters
    /// have run their backward. Gradients equal the unsplit graph's.
    pub fn split_gradients(mut self, split: GradientSplit) -> Self {
        self.gradient_split = Some(split);
        self
    }

    /// Sets the memory budget of compiled training (see [`CompileOptions::memory_budget`]).
    pub fn memory_budget(mut self, fraction: f64) -> Self {
        self.memory_budget = Some(fraction);
        self
    }

    /// Which code the cpu backend's loop-nest kernels run: Cranelift code with hot kernels
    /// rebuilt by the C compiler in the background ([`crate::TierPolicy::Auto`], the
    /// default),
    /// Cranelift only, or every kernel built by the C compiler at its first call
    /// ([`crate::TierPolicy::CUpFront`]). `KILN_TIER` sets the default.
    pub fn tier(mut self, tier: kiln_codegen::TierPolicy) -> Self {
        self.codegen.tier = tier;
        self
    }

    /// Under the automatic tier policy, the time a kernel's calls take in all before the C
    /// compiler rebuilds it (`KILN_C_TIER_AFTER_MS` sets the default).
    pub fn c_tier_after(mut self, after: std::time::Duration) -> Self {
        self.codegen.c_tier_after = after;
        self
    }

    /// The C tier writes a kernel's outputs with streaming (non-temporal) stores in calls
    /// that store at least `bytes` (`None`: never). The default is three quarters of the
    /// host's last-level cache (`KILN_STREAM_MIN_BYTES`: a number of bytes, or `never`).
    pub fn stream_stores_from(mut self, bytes: Option<u64>) -> Self {
        self.codegen.stream_min_bytes = bytes;
        self
    }

    /// Turns fusion on or off (off: every op is its own kernel).
    pub fn fusion(mut self, fusion: bool) -> Self {
        self.fusion = fusion;
        self
    }

    /// Sets the mode (`ReduceOverhead`: CUDA graphs on the cuda backend).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Allows value-changing rewrites (see [`CompileOptions::fast_math`]).
    pub fn fast_math(mut self, on: bool) -> Self {
        self.fast_math = on;
        self
    }

    /// Switches a rewrite rule off by name (see `passes/RULES.md`).
    pub fn disable_rule(mut self, name: impl Into<String>) -> Self {
        self.disabled_rules.push(name.into());
        self
    }

    /// Makes graph breaks errors.
    pub fn fullgraph(mut self, fullgraph: bool) -> Self {
        self.fullgraph = fullgraph;
        self
    }

    /// Sets the dynamic-shape policy.
    pub fn dynamic(mut self, dynamic: Dynamic) -> Self {
        self.dynamic = dynamic;
        self
    }

    /// Sets the cache limit.
    pub fn cache_limit(mut self, limit: usize) -> Self {
        self.cache_limit = limit;
        self
    }

    /// Names the function (and its graphs).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Compiles dim `dim` of argument `arg` as a symbol from the first compile.
    pub fn mark_dynamic(mut self, arg: usize, dim: usize) -> Self {
        self.mark_dynamic.push((arg, dim));
        self
    }
}

/// Compiles `f` with the default options (the fastest backend, automatic dynamic shapes,
/// graph breaks allowed, 8 cache entries).
pub fn compile<'f, A, O>(f: impl Fn(&A) -> Result<O> + Send + Sync + 'f) -> CompiledFn<'f, A, O>
where
    A: ?Sized + TensorArgs,
    O: TensorOutputs,
{
    CompiledFn::new(f, CompileOptions::default())
}

/// Compiles `f` with `options`.
pub fn compile_with<'f, A, O>(
    f: impl Fn(&A) -> Result<O> + Send + Sync + 'f,
    options: CompileOptions,
) -> CompiledFn<'f, A, O>
where
    A: ?Sized + TensorArgs,
    O: TensorOutputs,
{
    CompiledFn::new(f, options)
}

/// Compiles `f` and calls it once on `args`, and reports what was captured: the graphs,
/// the ops in each, each graph break with its reason and source line, and the guards.
pub fn explain<A, O>(f: impl Fn(&A) -> Result<O> + Send + Sync, args: &A) -> Result<ExplainReport>
where
    A: ?Sized + TensorArgs,
    O: TensorOutputs,
{
    let compiled = compile_with(f, CompileOptions::default().name("explain"));
    compiled.call(args)?;
    let mut report = compiled.explain_last();
    report.stats = Some(compiled.stats());
    Ok(report)
}

/// A check of a tensor's values (`Err` names the op and the offending value).
pub(crate) type ValueCheck =
    std::sync::Arc<dyn Fn(&kiln_runtime::CpuTensor) -> crate::error::Result<()> + Send + Sync>;

/// Runs `check` on `t`'s values. Inside a compiled function, when `t` is one of its
/// arguments, the check also runs before the compiled graph on every later call (a guard on
/// values that does not shape the graph, like cross-entropy's target bounds) instead of
/// breaking the graph; any other traced tensor is read, which is a graph break.
#[track_caller]
pub(crate) fn check_values(
    t: &crate::Tensor,
    op: &'static str,
    check: impl Fn(&kiln_runtime::CpuTensor) -> crate::error::Result<()> + Send + Sync + 'static,
) -> crate::error::Result<()> {
    let check: ValueCheck = std::sync::Arc::new(check);
    if let Some(tracer) = lazy::current() {
        if let Some(r) = tracer.check_argument(t, &check) {
            return r;
        }
    }
    check(t.read(op)?)
}

/// A guard on a value the trace baked into the graph (an optimiser's learning rate):
/// `Some(reason)` when it has changed since.
pub(crate) type ValueGuard = std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>;
