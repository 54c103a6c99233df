//! A compiled program for the CPU: the schedule's kernels in order, each a generated loop
//! nest, a GEMM with a generated epilogue, or (for what the generators do not handle) the
//! eager kernels; intermediates live in an arena of reusable buffers laid out by the
//! schedule's memory plan, so a call allocates only its outputs.

use super::kernels::{bind_inputs, concrete, run_graph, Bindings, EagerKernel, MatmulKernel};
use super::nest_exec::NestKernel;
use crate::error::CodegenError;
use crate::loops::{lower_kernel, LoopNest};
use crate::CodegenOptions;
use kiln_ir::{DType, Graph, NodeId, Op, ReduceOp};
use kiln_passes::schedule::Schedule;
use kiln_passes::GroupKind;
use kiln_runtime::{contiguous_strides, execute, CpuTensor, EagerArg};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::fmt;
use std::time::{Duration, Instant};

/// How a kernel group runs.
pub enum CpuKernel {
    /// generated code
    Nest(NestKernel),
    /// GEMM plus a generated epilogue
    Matmul(MatmulKernel),
    /// the eager kernels, op by op
    Eager(EagerKernel),
}

impl CpuKernel {
    /// The tiers of the generated code's specialisations compiled so far (the loop nest's,
    /// or the GEMM epilogue's; none for eager kernels).
    pub fn tiers(&self) -> Vec<super::c_tier::KernelTier> {
        match self {
            CpuKernel::Nest(n) => n.tiers(),
            CpuKernel::Matmul(m) => m.tiers(),
            CpuKernel::Eager(_) => Vec::new(),
        }
    }

    /// How the kernel runs, in a word: `nest`, `matmul` or `eager`.
    pub fn kind(&self) -> &'static str {
        match self {
            CpuKernel::Nest(_) => "nest",
            CpuKernel::Matmul(_) => "matmul",
            CpuKernel::Eager(_) => "eager",
        }
    }
}

/// A kernel body's ops in order, each named once (`matmul,add,gelu`), inputs left out.
fn op_list(body: &Graph) -> String {
    let mut names: Vec<&'static str> = Vec::new();
    for (_, n) in body.nodes() {
        let name = n.op.name();
        if n.op != Op::Input && !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(",")
}

/// An output computed into an input's memory (see [`CpuPlan::donations`]).
#[derive(Clone)]
struct Donation {
    /// the pair's position in the caller's list
    pair: usize,
    /// the input's position
    input: usize,
    /// the output's node
    output: NodeId,
    /// the step that computes the output into the input's memory
    step: usize,
}

/// The locks a run holds on its inputs: shared ones, and the exclusive locks of donated
/// inputs taken as their writing steps start.
struct Locks<'a> {
    reads: Vec<Option<kiln_runtime::ReadLock<'a>>>,
    writes: SmallVec<[kiln_runtime::WriteLock<'a>; 4]>,
}

/// The pairs a caller asked to donate, and the donations they allow.
type DonationCache = (Vec<(usize, usize)>, Vec<Donation>);

struct Step {
    name: String,
    body: Graph,
    kernel: CpuKernel,
    inputs: Vec<NodeId>,
    outputs: Vec<NodeId>,
    /// values (and their views) no later step reads and the graph does not return: a
    /// call drops them once this step has run, so a value the eager kernels made, or one
    /// of another dtype, is not held to the end of the call
    release: Vec<NodeId>,
}

/// Per node index: the node whose memory it uses (a view's base, followed through views;
/// every other node itself).
fn view_roots(g: &Graph, slots: usize) -> Vec<usize> {
    let mut root: Vec<usize> = (0..slots).collect();
    for (id, n) in g.nodes() {
        if n.op.is_view() {
            if let Some(kiln_ir::Arg::Value(b)) = n.args.first() {
                root[id.index()] = root[b.index()];
            }
        }
    }
    root
}

/// Fills each step's [`Step::release`]: a value is released after the last step that reads
/// it or a view of it (a value nothing reads, after the step that makes it), unless it is a
/// graph input or output or a view of one.
///
/// Returns, per graph input, the step after which a call may let go of it when it is lent
/// ([`CpuTensor::from_foreign_lent`]): its last reader's (the first step when nothing reads
/// it), or None when an output is it or a view of it.
fn plan_releases(g: &Graph, steps: &mut [Step], slots: usize) -> Vec<Option<usize>> {
    let root = view_roots(g, slots);
    let mut keep = vec![false; slots];
    for (_, id) in g.inputs() {
        keep[root[id.index()]] = true;
    }
    for o in g.outputs() {
        keep[root[o.index()]] = true;
    }
    let mut last: Vec<Option<usize>> = vec![None; slots];
    for (t, st) in steps.iter().enumerate() {
        for v in st.outputs.iter().chain(&st.inputs) {
            let r = root[v.index()];
            last[r] = Some(last[r].map_or(t, |l| l.max(t)));
        }
    }
    for (id, _) in g.nodes() {
        let r = root[id.index()];
        if let (false, Some(t)) = (keep[r], last[r]) {
            steps[t].release.push(id);
        }
    }
    let returned: Vec<usize> = g.outputs().iter().map(|o| root[o.index()]).collect();
    g.inputs()
        .iter()
        .map(|(_, id)| {
            let r = root[id.index()];
            (!returned.contains(&r)).then(|| last[r].unwrap_or(0))
        })
        .collect()
}

/// Lent inputs of at least this many bytes are let go of after their last reader (see
/// [`CpuPlan::run_releasing_lent`]); smaller ones at the end of the call. Letting go costs
/// the lender's hand-back (the torch bridge takes the interpreter lock to drop its
/// reference), and frees little for a small tensor.
const RELEASE_LENT_BYTES: usize = 1 << 20;

/// Where a value's memory comes from.
#[derive(Clone, Copy)]
enum Home {
    /// a fresh tensor per call (graph outputs, and values the eager kernels make)
    Fresh,
    /// arena buffer `.0`
    Arena(usize),
}

/// A call's state, reused by later calls: the arena's buffers, and the value of each node
/// (by index) while the call runs (emptied when it ends, so no tensor outlives its call).
struct Scratch {
    arena: Vec<Option<CpuTensor>>,
    vals: Vec<Option<CpuTensor>>,
}

/// Arena buffers of at least this many bytes (f32 elements: 1 MiB, where the caching
/// allocator's large size classes start) go back to the allocator when a call ends; smaller
/// ones stay with the plan for its next call.
///
/// A plan that kept its whole arena between calls held its intermediates' memory while other
/// plans ran: a training step's forward arena sat idle through the backward, and the
/// backward's through the next forward. Through the torch backend, BERT at base size (768
/// wide, 12 layers, batch 8, sequence 128; arenas of 82 MiB forward, 854 MiB backward) held
/// 1659 MiB of kiln tensors between training steps, 591 MiB with large buffers given back
/// (`kiln._native.memory_stats`). The allocator's cached blocks then serve the next plan's
/// buffers. Small buffers stay: they hold little, and taking them from the allocator on
/// every call would add to the per-call cost of small graphs.
const KEEP_BETWEEN_CALLS_ELEMENTS: usize = (1 << 20) / 4;

/// Drops the arena's large buffers (see [`KEEP_BETWEEN_CALLS_ELEMENTS`]).
fn release_large_buffers(arena: &mut [Option<CpuTensor>]) {
    for slot in arena {
        if slot
            .as_ref()
            .is_some_and(|t| t.numel() >= KEEP_BETWEEN_CALLS_ELEMENTS)
        {
            *slot = None;
        }
    }
}

/// A compiled program.
pub struct CpuPlan {
    name: String,
    graph: Graph,
    inputs: Vec<NodeId>,
    steps: Vec<Step>,
    /// per node index: where its buffer comes from
    home: Vec<Home>,
    arena_size: usize,
    /// one past the largest node index (the length of a call's value slots)
    slots: usize,
    /// per-call state kept between calls (taken by one call at a time)
    scratch: Mutex<Vec<Scratch>>,
    has_symbols: bool,
    /// the donations worked out for the last list of pairs asked for
    donated: Mutex<Option<DonationCache>>,
    /// per input: the step after which a call may let go of it, when lent (see
    /// [`plan_releases`])
    input_release: Vec<Option<usize>>,
    /// time spent building the plan (lowering; kernels compile on first call)
    pub build_time: Duration,
}

impl CpuPlan {
    /// Every generated kernel specialisation of the plan with its tier, in step order.
    pub fn tiers(&self) -> Vec<super::c_tier::KernelTier> {
        self.steps.iter().flat_map(|s| s.kernel.tiers()).collect()
    }
}

impl fmt::Debug for CpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuPlan")
            .field("name", &self.name)
            .field("kernels", &self.steps.len())
            .finish()
    }
}

/// Why a kernel around one sum, max or min of an f32 value over dims that some kept dim
/// follows (a column reduction: a bias gradient's sum over the batch rows) runs op by op on
/// the runtime, or `None` for any other kernel. A loop nest folds its inner loop, so it walks
/// each column down the rows with scalar loads (a lone [256, 512] sum over dim 0: 175 us, its
/// 2 KiB stride mapping every row onto the same few cache sets; a sum of [4, 64, 128] over
/// dim 0 and a `where` on it, a position embedding's gradient: 86 us); the runtime reads the
/// input in place row by row, whole columns of accumulators at a time (vectorised, in f64:
/// the eager sum's own results), 5 to 20 us. The kernel's other ops must be cheap op by op:
/// each makes a value of the reduction's result shape (a `where`, a mean's division), except
/// at most one of the input's full shape (the product a sum takes), which costs one more
/// pass over the data.
fn column_reduction(body: &Graph) -> Option<String> {
    let mut reduce = None;
    for (_, n) in body.nodes() {
        if let Op::Reduce {
            op, dims, dtype, ..
        } = &n.op
        {
            if reduce.is_some() || dtype.is_some() {
                return None;
            }
            reduce = Some((*op, dims, n));
        }
    }
    let (op, dims, n) = reduce?;
    let kiln_ir::Arg::Value(x) = n.args.first()? else {
        return None;
    };
    let x = &body.node(*x).ty;
    if x.dtype != DType::F32 || !matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min) {
        return None;
    }
    let mut full = 0;
    for (_, m) in body.nodes() {
        if matches!(m.op, Op::Input | Op::Reduce { .. }) {
            continue;
        }
        if m.ty.shape == n.ty.shape {
            continue;
        }
        if m.ty.shape != x.shape || full == 1 {
            return None;
        }
        full += 1;
    }
    let rank = x.shape.rank();
    let reduced: Vec<bool> = (0..rank)
        .map(|d| {
            dims.is_empty()
                || dims
                    .iter()
                    .any(|&r| kiln_ir::shape::normalize_dim(r, rank) == Some(d))
        })
        .collect();
    // the dims that matter are those not statically of size 1
    let live: Vec<bool> = (0..rank)
        .filter(|&d| x.shape.dims()[d] != kiln_ir::Dim::Const(1))
        .map(|d| reduced[d])
        .collect();
    let first_reduced = live.iter().position(|&r| r)?;
    live[first_reduced..].iter().any(|&r| !r).then(|| {
        format!(
            "a {} over dims {dims:?} of {} that a kept dim follows runs on the runtime's \
             column reduction",
            op.name(),
            x.shape
        )
    })
}

/// The generated form of one kernel group: a nest, a GEMM with epilogue, or eager.
pub fn kernel_for(body: &Graph, kind: GroupKind, opts: &CodegenOptions) -> CpuKernel {
    if kind == GroupKind::Matmul || body.nodes().any(|(_, n)| n.op == Op::Matmul) {
        return match MatmulKernel::new(body, opts) {
            Ok(m) => CpuKernel::Matmul(m),
            Err(e) => CpuKernel::Eager(EagerKernel {
                body: body.clone(),
                reason: e.reason,
            }),
        };
    }
    if let Some(reason) = column_reduction(body) {
        return CpuKernel::Eager(EagerKernel {
            body: body.clone(),
            reason,
        });
    }
    // a nest whose f64 values the emitter has no vector form for runs eagerly
    let nest = lower_kernel(body).and_then(|n| {
        super::emit::f64_supported(&n)
            .map(|()| n)
            .map_err(|reason| crate::loops::Unsupported {
                kernel: body.name().to_string(),
                reason,
            })
    });
    match nest {
        Ok(nest) => CpuKernel::Nest(NestKernel::new(nest, opts)),
        Err(e) => CpuKernel::Eager(EagerKernel {
            body: body.clone(),
            reason: e.reason,
        }),
    }
}

impl CpuPlan {
    /// Builds the plan of a schedule with the default code generation options.
    pub fn new(s: &Schedule) -> Result<CpuPlan, CodegenError> {
        CpuPlan::with_options(s, &CodegenOptions::default())
    }

    /// Builds the plan of a schedule, its kernels generated with `opts`.
    pub fn with_options(s: &Schedule, opts: &CodegenOptions) -> Result<CpuPlan, CodegenError> {
        let start = Instant::now();
        let g = &s.graph;
        let mut steps = Vec::new();
        let kernels = super::fill_merge::merge_fills(s)?;
        // a kernel whose values nothing reads (dead code kept when fusion is off) is skipped
        for k in kernels.iter().filter(|k| !k.outputs.is_empty()) {
            steps.push(Step {
                name: k.body.name().to_string(),
                body: k.body.clone(),
                kernel: kernel_for(&k.body, k.kind, opts),
                inputs: k.inputs.clone(),
                outputs: k.outputs.clone(),
                release: Vec::new(),
            });
        }
        let slots = g.nodes().map(|(id, _)| id.index() + 1).max().unwrap_or(0);
        let input_release = plan_releases(g, &mut steps, slots);
        let mut home = vec![Home::Fresh; slots];
        for (r, b) in s.requests.iter().zip(&s.memory.buffer_of) {
            let id = g
                .nodes()
                .map(|(id, _)| id)
                .find(|id| id.index() == r.value)
                .ok_or_else(|| CodegenError::Plan {
                    plan: g.name().to_string(),
                    reason: format!("the memory plan names an unknown value {}", r.value),
                })?;
            let h = match b {
                Some(b) if g.node(id).ty.dtype == DType::F32 => Home::Arena(*b),
                _ => Home::Fresh,
            };
            home[id.index()] = h;
        }
        // values made by eager kernels are fresh: their tensors come from the kernels
        for st in &steps {
            if matches!(st.kernel, CpuKernel::Eager(_)) {
                for o in &st.outputs {
                    home[o.index()] = Home::Fresh;
                }
            }
        }
        let has_symbols = g
            .inputs()
            .iter()
            .any(|(_, id)| !g.node(*id).ty.shape.is_static());
        Ok(CpuPlan {
            name: g.name().to_string(),
            graph: g.clone(),
            inputs: g.inputs().iter().map(|(_, id)| *id).collect(),
            steps,
            home,
            arena_size: s.memory.buffers.len(),
            slots,
            scratch: Mutex::new(Vec::new()),
            has_symbols,
            donated: Mutex::new(None),
            input_release,
            build_time: start.elapsed(),
        })
    }

    /// The plan's (graph's) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernels: name and how each runs.
    pub fn kernels(&self) -> impl Iterator<Item = (&str, &CpuKernel)> {
        self.steps.iter().map(|s| (s.name.as_str(), &s.kernel))
    }

    /// The loop nests of the generated kernels (epilogues included).
    pub fn nests(&self) -> Vec<&LoopNest> {
        self.steps
            .iter()
            .filter_map(|s| match &s.kernel {
                CpuKernel::Nest(n) => Some(&n.nest),
                CpuKernel::Matmul(m) => m.epilogue_nest(),
                CpuKernel::Eager(_) => None,
            })
            .collect()
    }

    fn bind(&self, inputs: &[&CpuTensor]) -> Result<Bindings, CodegenError> {
        let typed: SmallVec<[(DType, &[usize]); 8]> =
            inputs.iter().map(|t| (t.dtype(), t.shape())).collect();
        bind_inputs(&self.name, &self.graph, &self.inputs, &typed)
    }

    /// Makes sure `vals` holds the value of `id`: computed already, or a view made now from
    /// its base.
    fn ensure(
        &self,
        id: NodeId,
        vals: &mut [Option<CpuTensor>],
        bound: &Bindings,
    ) -> Result<(), CodegenError> {
        if vals[id.index()].is_some() {
            return Ok(());
        }
        let n = self.graph.node(id);
        if !n.op.is_view() {
            return Err(CodegenError::Plan {
                plan: self.name.clone(),
                reason: format!("value %{} is used before a kernel computes it", id.index()),
            });
        }
        let mut args = Vec::new();
        for a in &n.args {
            match a {
                kiln_ir::Arg::Value(v) => {
                    self.ensure(*v, vals, bound)?;
                    args.push(vals[v.index()].clone());
                }
                kiln_ir::Arg::Scalar(_) => args.push(None),
            }
        }
        let eargs: Vec<EagerArg<'_>> = n
            .args
            .iter()
            .zip(&args)
            .map(|(a, t)| match (a, t) {
                (_, Some(t)) => EagerArg::Tensor(t),
                (kiln_ir::Arg::Scalar(s), None) => EagerArg::Scalar(*s),
                (kiln_ir::Arg::Value(_), None) => unreachable!("values were made above"),
            })
            .collect();
        let op =
            n.op.bind_symbols(&|s: &str| super::kernels::lookup(bound, s))
                .map_err(|s| CodegenError::Plan {
                    plan: self.name.clone(),
                    reason: format!("symbolic dim `{s}` is not bound by any input"),
                })?;
        let t = execute(&op, &eargs).map_err(|source| CodegenError::Runtime {
            kernel: format!("view %{}", id.index()),
            source,
        })?;
        drop(eargs);
        vals[id.index()] = Some(t);
        Ok(())
    }

    /// A buffer for value `id` of concrete `shape`: an arena buffer or a fresh tensor.
    fn buffer(
        &self,
        id: NodeId,
        shape: &[usize],
        arena: &mut [Option<CpuTensor>],
    ) -> Result<CpuTensor, CodegenError> {
        let dtype = self.graph.node(id).ty.dtype;
        let rt = |source| CodegenError::Runtime {
            kernel: format!("buffer %{}", id.index()),
            source,
        };
        match self.home.get(id.index()).copied().unwrap_or(Home::Fresh) {
            Home::Arena(b) if dtype == DType::F32 => {
                let n: usize = shape.iter().product();
                let fits = arena[b].as_ref().is_some_and(|t| t.numel() >= n);
                if !fits {
                    // SAFETY: every kernel writes all of its outputs' elements before any
                    // is read; the arena's stale contents are never read.
                    arena[b] =
                        Some(unsafe { CpuTensor::uninit(DType::F32, &[n.max(1)]) }.map_err(rt)?);
                }
                let base = arena[b].as_ref().expect("just made");
                let strides = contiguous_strides(shape);
                base.with_layout(shape, &strides, 0).map_err(rt)
            }
            _ => {
                // SAFETY: as above: the kernel writing this value writes every element.
                unsafe { CpuTensor::uninit(dtype, shape) }.map_err(rt)
            }
        }
    }

    /// Runs the plan on `inputs` (in the graph's input order).
    pub fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>, CodegenError> {
        self.run_donating(inputs, &[]).map(|(outs, _)| outs)
    }

    /// Which of the `(input, output)` pairs can be *donated*: the output computed into the
    /// input's own memory, so that a graph that updates its inputs (a training step) needs
    /// neither a buffer for the new value nor a copy back. A pair qualifies when the output
    /// is made by a pointwise generated kernel that reads the input itself (same type, so
    /// element `i` is read and written at the same index), that kernel reads no view of it,
    /// no later kernel reads the input or a view of it (earlier ones may: they have run),
    /// and the graph does not return it; each input at most once. Static: the same for
    /// every call.
    fn donations(&self, donate: &[(usize, usize)]) -> Vec<Donation> {
        let g = &self.graph;
        let roots = view_roots(g, self.slots);
        let mut out: Vec<Donation> = Vec::new();
        for (pair, &(input, output)) in donate.iter().enumerate() {
            let (Some(&i), Some(&o)) = (self.inputs.get(input), g.outputs().get(output)) else {
                continue;
            };
            if out.iter().any(|d| d.input == input || d.output == o)
                || g.node(i).ty != g.node(o).ty
                || !g.node(o).ty.shape.is_static()
            {
                continue;
            }
            let Some(si) = self.steps.iter().position(|s| s.outputs.contains(&o)) else {
                continue;
            };
            let step = &self.steps[si];
            let (Some(pi), Some(po)) = (
                step.inputs.iter().position(|v| *v == i),
                step.outputs.iter().position(|v| *v == o),
            ) else {
                continue;
            };
            let in_place = match &step.kernel {
                // a pointwise nest, or a reduction's epilogue, reading the input at the index
                // it stores the output at (a row kernel, which may store a row and read it
                // again in a later phase, is not)
                CpuKernel::Nest(n) => {
                    let bufs = &n.nest.buffers;
                    let reduced = n.nest.dims.len().checked_sub(1).filter(|_| n.nest.reduces);
                    bufs.len() == step.inputs.len() + step.outputs.len()
                        && bufs[pi].index == bufs[step.inputs.len() + po].index
                        && reduced.is_none_or(|r| !bufs[pi].index.contains(&Some(r)))
                }
                CpuKernel::Matmul(m) => m.updates_in_place(pi, po),
                CpuKernel::Eager(_) => false,
            };
            if !in_place {
                continue;
            }
            // the input and every view of it
            let aliases: Vec<bool> = roots.iter().map(|&r| r == i.index()).collect();
            // kernels before the update may read the input (the forward and backward read
            // the parameter a training step then updates): they have finished when it runs
            let read_elsewhere = self.steps.iter().enumerate().skip(si).any(|(t, st)| {
                st.inputs
                    .iter()
                    .any(|v| aliases[v.index()] && (t != si || *v != i))
            });
            if read_elsewhere || g.outputs().iter().any(|v| aliases[v.index()]) {
                continue;
            }
            out.push(Donation {
                pair,
                input,
                output: o,
                step: si,
            });
        }
        out
    }

    /// Runs the plan on `inputs`, computing each output of a donatable `(input, output)`
    /// pair (see [`CpuPlan::donations`]) into the input's memory, under the input's exclusive
    /// lock (its version bumped once the call ends). Returns the outputs (a donated one
    /// shares the input's storage) and, per pair, whether it was donated. A pair whose input
    /// is not contiguous, or shares its storage with another input, is not donated.
    pub fn run_donating(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>), CodegenError> {
        self.run_with(inputs, donate, false)
    }

    /// [`CpuPlan::run_donating`] as the only reader of its lent inputs
    /// ([`CpuTensor::from_foreign_lent`]): each lent input of at least
    /// [`RELEASE_LENT_BYTES`] that no output views and no pair donates is let go of once
    /// the last kernel reading it has run, so that memory its lender no longer holds (a
    /// saved activation, through the torch bridge) is freed while the call goes on. The
    /// caller must not read such an input after the call.
    pub fn run_releasing_lent(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>), CodegenError> {
        self.run_with(inputs, donate, true)
    }

    /// The lent inputs a call lets go of: `(step, input)` pairs in step order, the input
    /// released after the step (see [`CpuPlan::run_releasing_lent`]). An input sharing its
    /// storage with another waits for the later of the two.
    fn lent_releases(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (i, t) in inputs.iter().enumerate() {
            let s = t.storage();
            if !s.is_lent() || s.nbytes() < RELEASE_LENT_BYTES || donate.iter().any(|d| d.0 == i) {
                continue;
            }
            let mut after = self.input_release[i];
            for (j, u) in inputs.iter().enumerate() {
                if j != i && u.shares_storage(t) {
                    let donated = donate.iter().any(|d| d.0 == j);
                    after = match (after, self.input_release[j]) {
                        (Some(a), Some(b)) if !donated => Some(a.max(b)),
                        _ => None,
                    };
                }
            }
            if let Some(step) = after {
                out.push((step, i));
            }
        }
        out.sort_unstable();
        out
    }

    fn run_with(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
        release_lent: bool,
    ) -> Result<(Vec<CpuTensor>, Vec<bool>), CodegenError> {
        if inputs.len() != self.inputs.len() {
            return Err(CodegenError::Inputs {
                plan: self.name.clone(),
                reason: format!(
                    "the plan takes {} inputs, got {}",
                    self.inputs.len(),
                    inputs.len()
                ),
            });
        }
        let bound = if self.has_symbols || !inputs.is_empty() {
            self.bind(inputs)?
        } else {
            Vec::new()
        };
        let mut chosen = if donate.is_empty() {
            Vec::new()
        } else {
            let mut cache = self.donated.lock();
            match cache.as_ref() {
                Some((key, d)) if key.as_slice() == donate => d.clone(),
                _ => {
                    let d = self.donations(donate);
                    *cache = Some((donate.to_vec(), d.clone()));
                    d
                }
            }
        };
        chosen.retain(|d| {
            let t = inputs[d.input];
            t.is_contiguous()
                && inputs
                    .iter()
                    .enumerate()
                    .all(|(k, u)| k == d.input || !u.shares_storage(t))
        });
        // every input under a shared lock; a donated one's is traded for the exclusive lock
        // when the step that writes into it starts (the kernels before it may read it)
        let mut locks = Locks {
            reads: inputs.iter().map(|t| Some(t.read_lock())).collect(),
            writes: SmallVec::new(),
        };
        let mut scratch = self.scratch.lock().pop().unwrap_or_else(|| Scratch {
            arena: vec![None; self.arena_size],
            vals: vec![None; self.slots],
        });
        let releases = match release_lent {
            true => self.lent_releases(inputs, donate),
            false => Vec::new(),
        };
        let result = self.run_steps(inputs, &bound, &mut scratch, &chosen, &mut locks, &releases);
        drop(locks);
        scratch.vals.iter_mut().for_each(|v| *v = None);
        release_large_buffers(&mut scratch.arena);
        self.scratch.lock().push(scratch);
        let mut flags = vec![false; donate.len()];
        for d in &chosen {
            flags[d.pair] = true;
        }
        result.map(|outs| (outs, flags))
    }

    fn run_steps<'t>(
        &self,
        inputs: &[&'t CpuTensor],
        bound: &Bindings,
        scratch: &mut Scratch,
        donated: &[Donation],
        locks: &mut Locks<'t>,
        releases: &[(usize, usize)],
    ) -> Result<Vec<CpuTensor>, CodegenError> {
        let Scratch { arena, vals } = scratch;
        for (id, t) in self.inputs.iter().zip(inputs) {
            vals[id.index()] = Some((*t).clone());
        }
        let profiling = crate::profile::enabled();
        for (index, step) in self.steps.iter().enumerate() {
            let started = profiling.then(Instant::now);
            for d in donated.iter().filter(|d| d.step == index) {
                locks.reads[d.input] = None;
                locks.writes.push(inputs[d.input].write_lock());
            }
            for v in &step.inputs {
                self.ensure(*v, vals, bound)?;
            }
            let in_refs: SmallVec<[&CpuTensor; 8]> = step
                .inputs
                .iter()
                .map(|v| vals[v.index()].as_ref().expect("ensured above"))
                .collect();
            let shape_of = |id: &NodeId| -> Result<Vec<usize>, CodegenError> {
                concrete(self.graph.node(*id).ty.shape.dims(), bound).ok_or_else(|| {
                    CodegenError::Plan {
                        plan: self.name.clone(),
                        reason: format!("the shape of %{} has an unbound symbol", id.index()),
                    }
                })
            };
            let outs: Vec<CpuTensor> = match &step.kernel {
                CpuKernel::Eager(k) => {
                    let outs = k.run(&in_refs, bound)?;
                    // a result that aliases an input (an identity op) must not be the
                    // caller's memory or an arena buffer reused later: copy it
                    outs.into_iter()
                        .map(|o| {
                            if in_refs.iter().any(|i| i.shares_storage(&o)) {
                                o.deep_copy()
                            } else {
                                o
                            }
                        })
                        .collect()
                }
                CpuKernel::Nest(n) => {
                    let mut outs = Vec::new();
                    for o in &step.outputs {
                        outs.push(match donated.iter().find(|d| d.output == *o) {
                            // computed into the input's memory (donated, see `donations`)
                            Some(d) => (*inputs[d.input]).clone(),
                            None => self.buffer(*o, &shape_of(o)?, arena)?,
                        });
                    }
                    let dense = n.densified_inputs(&in_refs);
                    let all: SmallVec<[&CpuTensor; 8]> = in_refs
                        .iter()
                        .zip(dense.iter().chain(std::iter::repeat(&None)))
                        .map(|(t, d)| d.as_ref().unwrap_or(t))
                        .chain(&outs)
                        .collect();
                    let prepared = n.prepare(&all, false);
                    drop(all);
                    match prepared {
                        Ok(Some(call)) => {
                            call.run(n.nest.reduces);
                            outs
                        }
                        // an empty loop, or (a generator bug) a kernel Cranelift rejects:
                        // the eager kernels compute the group instead
                        Ok(None) => {
                            let fresh = run_graph(&step.body, &in_refs, bound)?;
                            into_donated(&step.outputs, fresh, donated, inputs)
                        }
                        Err(e) => {
                            tracing::warn!(target: "kiln::code", "{e}; running {} eagerly", step.name);
                            let fresh = run_graph(&step.body, &in_refs, bound)?;
                            into_donated(&step.outputs, fresh, donated, inputs)
                        }
                    }
                }
                CpuKernel::Matmul(m) => {
                    let mut outs = Vec::new();
                    let mut in_input_memory = SmallVec::<[bool; 4]>::new();
                    for o in &step.outputs {
                        let d = donated.iter().find(|d| d.output == *o);
                        in_input_memory.push(d.is_some());
                        outs.push(match d {
                            Some(d) => (*inputs[d.input]).clone(),
                            None => self.buffer(*o, &shape_of(o)?, arena)?,
                        });
                    }
                    let scratch = |shape: &[usize]| {
                        // SAFETY: the GEMM writes every element of the product.
                        unsafe { CpuTensor::uninit(DType::F32, shape) }.map_err(|source| {
                            CodegenError::Runtime {
                                kernel: step.name.clone(),
                                source,
                            }
                        })
                    };
                    // (an eager fallback's fresh results are copied into donated memory)
                    let fresh = m.run(&in_refs, &outs, &in_input_memory, &scratch)?;
                    into_donated(&step.outputs, fresh, donated, inputs)
                }
            };
            drop(in_refs);
            if let Some(started) = started {
                crate::profile::record(
                    &self.name,
                    &step.name,
                    step.kernel.kind(),
                    || op_list(&step.body),
                    started.elapsed(),
                );
            }
            for (o, t) in step.outputs.iter().zip(outs) {
                vals[o.index()] = Some(t);
            }
            for v in &step.release {
                vals[v.index()] = None;
            }
            for &(_, i) in releases.iter().filter(|r| r.0 == index) {
                // SAFETY: the caller lent this input to this call only and reads it no more
                // (`run_releasing_lent`); no later step reads it or a view of it, no output
                // views it and no pair donates it (`plan_releases`, `lent_releases`).
                unsafe { inputs[i].storage().release_lent() };
            }
        }
        let mut res = Vec::with_capacity(self.graph.outputs().len());
        for &o in self.graph.outputs() {
            self.ensure(o, vals, bound)?;
            res.push(vals[o.index()].clone().expect("ensured above"));
        }
        Ok(res)
    }
}

/// Eager results of a kernel some of whose outputs were donated: each such result is copied
/// into its input's memory (held under the exclusive lock by the caller, contiguous, of the
/// same type), so that a donated output always lives there.
fn into_donated(
    outputs: &[NodeId],
    fresh: Vec<CpuTensor>,
    donated: &[Donation],
    inputs: &[&CpuTensor],
) -> Vec<CpuTensor> {
    outputs
        .iter()
        .zip(fresh)
        .map(|(o, t)| match donated.iter().find(|d| d.output == *o) {
            Some(d) => {
                let dst = inputs[d.input];
                let src = if t.is_contiguous() { t } else { t.deep_copy() };
                let bytes = src.numel() * src.dtype().size_bytes();
                if bytes > 0 && !src.shares_storage(dst) {
                    // SAFETY: `dst` is contiguous with the type (so the size) of `src`, the
                    // caller holds its exclusive lock, and the two do not overlap
                    unsafe { std::ptr::copy_nonoverlapping(src.data_ptr(), dst.data_ptr(), bytes) };
                }
                (*dst).clone()
            }
            None => t,
        })
        .collect()
}

#[cfg(test)]
mod release_tests {
    use super::*;

    /// Each value a step makes is released once, after the last step that reads it or a
    /// view of it; inputs, outputs and views of outputs never are; results are unchanged.
    #[test]
    fn values_are_released_after_their_last_reader() {
        let g = kiln_ir::parse_graph(
            "graph @g(%x: f32[4,8]) -> (f32[4,8], f32[8,4]) {\n  \
             %0 = exp %x : f32[4,8]\n  \
             %1 = mul %0, 2.0 : f32[4,8]\n  \
             %2 = add %1, %x : f32[4,8]\n  \
             %3 = transpose %1 {dim0 = 0, dim1 = 1} : f32[8,4]\n  \
             %4 = neg %3 : f32[8,4]\n  \
             %5 = sum %4 {dims = [1], keepdim = false} : f32[8]\n  \
             return %2, %4\n}\n",
        )
        .expect("parses");
        let f = kiln_passes::pipeline::run_passes(&g, &["decompose"], &Default::default(), true)
            .expect("passes run");
        let s = kiln_passes::schedule::schedule(&f).expect("schedules");
        let plan = CpuPlan::new(&s).expect("plans");
        let pg = &plan.graph;
        let root = view_roots(pg, plan.slots);
        let kept: Vec<usize> = pg
            .outputs()
            .iter()
            .chain(plan.inputs.iter())
            .map(|v| root[v.index()])
            .collect();
        let mut released = vec![0; plan.slots];
        for (t, st) in plan.steps.iter().enumerate() {
            for v in &st.release {
                released[v.index()] += 1;
                assert!(!kept.contains(&root[v.index()]), "%{} is kept", v.index());
                let later = plan.steps[t + 1..]
                    .iter()
                    .flat_map(|s| &s.inputs)
                    .any(|u| root[u.index()] == root[v.index()]);
                assert!(!later, "%{} is read after step {t}", v.index());
            }
        }
        // every value a kernel makes that is not kept goes once (exp's and mul's results,
        // and the unread sum)
        let made: Vec<NodeId> = plan.steps.iter().flat_map(|s| s.outputs.clone()).collect();
        let mut dropped = 0;
        for v in made {
            if kept.contains(&root[v.index()]) {
                assert_eq!(released[v.index()], 0);
            } else {
                assert_eq!(released[v.index()], 1, "%{}", v.index());
                dropped += 1;
            }
        }
        assert!(dropped >= 2, "{dropped} values released");
        let x = CpuTensor::from_slice(
            &(0..32).map(|i| i as f32 * 0.1).collect::<Vec<_>>(),
            &[4, 8],
        )
        .expect("a tensor");
        let outs = plan.run(&[&x]).expect("runs");
        let xs = x.to_f64_vec();
        let want2: Vec<f64> = xs
            .iter()
            .map(|v| (*v as f32).exp() as f64 * 2.0 + v)
            .collect();
        for (a, b) in outs[0].to_f64_vec().iter().zip(&want2) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
        assert_eq!(outs[1].shape(), &[8, 4]);
    }
}

#[cfg(test)]
mod arena_tests {
    use super::*;

    /// The arena buffers a call kept for the next one, as their element counts.
    fn kept(plan: &CpuPlan) -> Vec<usize> {
        let scratch = plan.scratch.lock();
        assert_eq!(scratch.len(), 1, "one call's state is kept");
        scratch[0]
            .arena
            .iter()
            .flatten()
            .map(|t| t.numel())
            .collect()
    }

    /// A call gives its large arena buffers back to the allocator and keeps its small ones;
    /// the next call makes the large ones again and computes the same results.
    #[test]
    fn large_arena_buffers_go_back_to_the_allocator_between_calls() {
        // exp's result lives in the arena (the matmul reads it): 2 MiB, then 128 bytes
        for (rows, cols, kept_after) in [(512, 1024, vec![]), (4, 8, vec![4 * 8])] {
            let plan = crate::cpu::plan_of(&format!(
                "graph @g(%x: f32[{rows},{cols}], %w: f32[{cols},8]) -> f32[{rows},8] {{\n  \
                 %0 = exp %x : f32[{rows},{cols}]\n  \
                 %1 = matmul %0, %w : f32[{rows},8]\n  \
                 return %1\n}}\n"
            ));
            assert_eq!(plan.arena_size, 1);
            let fill = |shape: &[usize], scale: f32| {
                let n: usize = shape.iter().product();
                let v: Vec<f32> = (0..n).map(|i| ((i % 17) as f32 - 8.0) * scale).collect();
                CpuTensor::from_slice(&v, shape).expect("a tensor")
            };
            let (x, w) = (fill(&[rows, cols], 0.01), fill(&[cols, 8], 0.001));
            let first = plan.run(&[&x, &w]).expect("runs");
            assert_eq!(kept(&plan), kept_after, "{rows} rows");
            let second = plan.run(&[&x, &w]).expect("runs again");
            assert_eq!(first[0].to_f64_vec(), second[0].to_f64_vec());
            let (xs, ws) = (x.to_f64_vec(), w.to_f64_vec());
            for (i, got) in first[0].to_f64_vec().iter().enumerate() {
                let (r, c) = (i / 8, i % 8);
                let want: f64 = (0..cols)
                    .map(|k| (xs[r * cols + k] as f32).exp() as f64 * ws[k * 8 + c])
                    .sum();
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{got} vs {want}"
                );
            }
        }
    }
}

#[cfg(test)]
mod column_tests {
    use super::*;

    /// How each kernel of `src`'s plan runs, in order: `column` for the runtime's column
    /// reduction, otherwise its kind.
    fn kinds(src: &str) -> Vec<&'static str> {
        let plan = crate::cpu::plan_of(src);
        plan.kernels()
            .map(|(_, k)| match k {
                CpuKernel::Eager(e) if e.reason.contains("column reduction") => "column",
                k => k.kind(),
            })
            .collect()
    }

    /// An f32 sum, max or min over dims some kept dim follows (ignoring size-1 dims) runs on
    /// the runtime's column reduction, alone or with ops on its result and at most one op of
    /// its input's shape; over trailing dims or with more full-size ops it stays a loop nest,
    /// and another dtype keeps the path it had (f64 runs eagerly op by op).
    #[test]
    fn reductions_over_outer_dims_run_on_the_runtime() {
        let one = |ty: &str, out: &str, op: &str, dims: &str| {
            format!(
                "graph @g(%x: {ty}) -> {out} {{\n  \
                 %0 = {op} %x {{dims = {dims}, keepdim = false}} : {out}\n  \
                 return %0\n}}\n"
            )
        };
        for op in ["sum", "max", "min"] {
            assert_eq!(
                kinds(&one("f32[256,512]", "f32[512]", op, "[0]")),
                ["column"]
            );
            assert_eq!(
                kinds(&one("f32[4,64,128]", "f32[128]", op, "[0, 1]")),
                ["column"]
            );
            assert_eq!(
                kinds(&one("f32[4,6,5]", "f32[6]", op, "[0, 2]")),
                ["column"]
            );
            assert_eq!(kinds(&one("f32[256,512]", "f32[256]", op, "[1]")), ["nest"]);
            // a size-1 kept dim after the reduced one is no column
            assert_eq!(kinds(&one("f32[256,1]", "f32[1]", op, "[0]")), ["nest"]);
            assert_eq!(
                kinds(&one("f64[256,512]", "f64[512]", op, "[0]")),
                ["eager"]
            );
        }
        let around = |pre: &str, post: &str| {
            format!(
                "graph @g(%x: f32[4,64,128], %m: bool[1,64,1]) -> f32[1,64,128] {{\n  \
                 %0 = mul %x, 2.0 : f32[4,64,128]\n  \
                 %1 = add %0, %x : f32[4,64,128]\n  \
                 %2 = sum {pre} {{dims = [0], keepdim = true}} : f32[1,64,128]\n  \
                 %3 = where %m, 0.0, %2 : f32[1,64,128]\n  \
                 %4 = mul {post}, 0.5 : f32[1,64,128]\n  \
                 return %4\n}}\n"
            )
        };
        // a position embedding's gradient: a sum over the batch, then a where and a scale
        assert_eq!(kinds(&around("%x", "%3")), ["column"]);
        // one full-size op before the sum (dead code aside)
        assert_eq!(kinds(&around("%0", "%3")), ["column"]);
        // two: each would be a pass of its own
        assert_eq!(kinds(&around("%1", "%3")), ["nest"]);
    }
}

#[cfg(test)]
mod lent_tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// The owner of memory lent to a plan: the vector itself, so letting go of it frees
    /// the memory (a kernel reading it afterwards would read freed memory).
    struct Lender {
        _data: Vec<f32>,
        dropped: Arc<AtomicBool>,
    }

    impl Drop for Lender {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    /// A row-major f32 tensor of `shape` lent for one call, its values, and a flag set when
    /// its owner goes.
    fn lend(shape: &[usize], scale: f32) -> (CpuTensor, Vec<f64>, Arc<AtomicBool>) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|i| ((i % 13) as f32 - 6.0) * scale).collect();
        let values = data.iter().map(|&v| v as f64).collect();
        let mut strides = vec![1isize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1] as isize;
        }
        let ptr = data.as_ptr() as *mut u8;
        let dropped = Arc::new(AtomicBool::new(false));
        let owner = Box::new(Lender {
            _data: data,
            dropped: dropped.clone(),
        });
        // SAFETY: `ptr` is the vector's buffer, which `owner` holds (moving the vector
        // does not move it); nothing writes it; the tests pass the tensor to one call.
        let t = unsafe {
            CpuTensor::from_foreign_lent(ptr, DType::F32, n, shape, &strides, 0, owner, None)
        }
        .expect("a lent tensor");
        (t, values, dropped)
    }

    const GRAPH: &str = "graph @g(%x: f32[512,1024], %w: f32[1024,8], %v: f32[8,512]) \
                         -> (f32[512,8], f32[512,8]) {\n  \
                         %0 = exp %x : f32[512,1024]\n  \
                         %1 = matmul %0, %w : f32[512,8]\n  \
                         %2 = transpose %v {dim0 = 0, dim1 = 1} : f32[512,8]\n  \
                         return %1, %2\n}\n";

    /// A call lets go of a large lent input once its last reader has run (here the first
    /// kernel, exp, of two) and computes the same results; it keeps an input an output
    /// views and a small one, and lets go of nothing when not asked to.
    #[test]
    fn a_call_lets_go_of_a_lent_input_after_its_last_reader() {
        let plan = crate::cpu::plan_of(GRAPH);
        assert_eq!(plan.steps.len(), 2, "exp, then the matmul");
        let (x, xs, x_gone) = lend(&[512, 1024], 0.01);
        let (w, ws, w_gone) = lend(&[1024, 8], 0.001);
        let (v, vs, v_gone) = lend(&[8, 512], 1.0);
        assert_eq!(plan.lent_releases(&[&x, &w, &v], &[]), vec![(0, 0)]);
        // donated, or sharing its storage with an input an output views: kept
        assert_eq!(plan.lent_releases(&[&x, &w, &v], &[(0, 0)]), vec![]);
        assert_eq!(plan.lent_releases(&[&x, &w, &x], &[]), vec![]);

        let kept = plan.run_donating(&[&x, &w, &v], &[]).expect("runs").0;
        assert!(
            !x_gone.load(Ordering::SeqCst),
            "let go of without being asked"
        );
        let (outs, _) = plan.run_releasing_lent(&[&x, &w, &v], &[]).expect("runs");
        assert!(x_gone.load(Ordering::SeqCst) && x.storage().is_released());
        assert!(!w_gone.load(Ordering::SeqCst) && !v_gone.load(Ordering::SeqCst));
        let mut want = vec![0.0f64; 512 * 8];
        for r in 0..512 {
            for c in 0..8 {
                want[r * 8 + c] = (0..1024)
                    .map(|k| (xs[r * 1024 + k] as f32).exp() as f64 * ws[k * 8 + c])
                    .sum();
            }
        }
        for got in [&kept[0], &outs[0]] {
            for (a, b) in got.to_f64_vec().iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
        let vt: Vec<f64> = (0..512 * 8).map(|i| vs[(i % 8) * 512 + i / 8]).collect();
        assert_eq!(outs[1].to_f64_vec(), vt);
    }
}
