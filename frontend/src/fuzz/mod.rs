//! Differential fuzzing (`kiln fuzz`): random graphs from the op table ([`kiln_ir::gen`]),
//! each run eagerly and through compiled executors (the cpu backend fused and unfused, the
//! interpreter backend, the cuda backend), on inputs with odd sizes, size 1, transposed
//! layouts and special values; every executor must agree with eager ([`compare`]), and with
//! `grad` so must the gradients of the first output's sum through compiled training.
//! A divergence is shrunk by [`minify`] and kept by [`regression`].

pub mod compare;
pub mod inputs;
pub mod minify;
pub mod regression;

use crate::compile::{compile_with, Backend, CompileOptions};
use crate::graph_exec::{replay, run_graph};
use crate::{Result, Tensor};
use inputs::{make_inputs, InputSpec};
use kiln_ir::ops::derivative::differentiable;
use kiln_ir::{Arg, BinaryOp, DType, Graph, NodeId, Op, UnaryOp};
use std::cell::OnceCell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Who computes a graph's outputs besides eager (the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Executor {
    /// `kiln::compile` with the cpu backend (fusion on)
    Cpu,
    /// `kiln::compile` with the cpu backend, every op its own kernel
    CpuUnfused,
    /// `kiln::compile` with the interpreter backend (f64 inside: see
    /// [`compare::agree_with_f64_oracle`] for what it is not compared on)
    Interp,
    /// `kiln::compile` with the cuda backend (the device `KILN_CUDA_DEVICE` names)
    Cuda,
}

impl Executor {
    /// The executor's name as `kiln fuzz` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Executor::Cpu => "cpu",
            Executor::CpuUnfused => "cpu-unfused",
            Executor::Interp => "interp",
            Executor::Cuda => "cuda",
        }
    }

    /// Parses [`Executor::name`].
    pub fn parse(s: &str) -> Option<Executor> {
        [
            Executor::Cpu,
            Executor::CpuUnfused,
            Executor::Interp,
            Executor::Cuda,
        ]
        .into_iter()
        .find(|e| e.name() == s)
    }

    /// The compile options of the executor.
    pub fn options(self) -> CompileOptions {
        let o = CompileOptions::default().name("fuzz");
        match self {
            Executor::Cpu => o.backend(Backend::Cpu),
            Executor::CpuUnfused => o.backend(Backend::Cpu).fusion(false),
            Executor::Interp => o.backend(Backend::Interp),
            Executor::Cuda => o.backend(Backend::Cuda),
        }
    }
}

impl fmt::Display for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one graph is checked with.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// the executors compared with eager
    pub executors: Vec<Executor>,
    /// the input cases, in call order (one compiled function per executor sees them all,
    /// so later cases exercise the guards and recompiles)
    pub cases: Vec<InputSpec>,
    /// compare gradients too
    pub grad: bool,
    /// a deliberate miscompile, to test the checker and the minifier (`kiln fuzz` sets none)
    pub sabotage: Option<Sabotage>,
}

/// A deliberately wrong executor, for testing that divergences are found and shrunk:
/// `executor` compiles `rewrite(graph)` instead of the graph it is given (values and
/// gradients), as a miscompiling pass would.
#[derive(Clone)]
pub struct Sabotage {
    /// the executor that miscompiles
    pub executor: Executor,
    /// what it compiles instead of a graph
    pub rewrite: std::sync::Arc<dyn Fn(&Graph) -> Graph + Send + Sync>,
}

impl fmt::Debug for Sabotage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sabotage({})", self.executor)
    }
}

impl CheckOptions {
    /// The graph `e` compiles: `g`, or its sabotaged form.
    fn graph_for(&self, e: Executor, g: &Graph) -> Graph {
        match &self.sabotage {
            Some(s) if s.executor == e => (s.rewrite)(g),
            _ => g.clone(),
        }
    }
}

impl CheckOptions {
    /// The default cases for graph number `seed`: symbols at 2×3 (contiguous), 3×5
    /// (transposed, special values) and 1×1.
    pub fn default_cases(seed: u64) -> Vec<InputSpec> {
        vec![
            InputSpec {
                sizes: (2, 3),
                seed,
                transposed: false,
                special: false,
            },
            InputSpec {
                sizes: (3, 5),
                seed: seed.wrapping_add(1),
                transposed: true,
                special: true,
            },
            InputSpec {
                sizes: (1, 1),
                seed: seed.wrapping_add(2),
                transposed: false,
                special: false,
            },
        ]
    }
}

/// A disagreement between eager and an executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// the executor that disagreed
    pub executor: Executor,
    /// in the gradients (rather than the outputs)
    pub grad: bool,
    /// the inputs it disagreed on
    pub case: InputSpec,
    /// what differed
    pub detail: String,
}

impl Divergence {
    /// The kind of divergence, for the minifier: the executor, values or gradients, and
    /// whether it was a failure (an error or a panic) or a wrong value.
    pub fn kind(&self) -> (Executor, bool, bool) {
        (self.executor, self.grad, self.detail.starts_with("failed"))
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.case;
        write!(
            f,
            "{} {} differ from eager at B={} T={}{}{}: {}",
            self.executor,
            if self.grad { "gradients" } else { "outputs" },
            c.sizes.0,
            c.sizes.1,
            if c.transposed { ", transposed" } else { "" },
            if c.special { ", special values" } else { "" },
            self.detail
        )
    }
}

/// The result of checking one graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// every executor agreed on every case eager could run (`runs` executor calls)
    Agree {
        /// executor calls compared
        runs: usize,
    },
    /// eager rejected every case (an index out of range, ...): nothing to compare
    Skipped,
    /// the first disagreement
    Diverged(Divergence),
}

/// Runs `f`, turning a panic into an error message.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> std::result::Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("failed: {e}")),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(format!("failed: panicked: {msg}"))
        }
    }
}

/// True for ops whose result jumps at some operand values (rounding, comparisons, truth,
/// `fmod`, `atan2` across the negative axis, float-to-integer casts, argmax): a rounding
/// difference in a computed operand legitimately changes their result by a whole step.
fn discontinuous(op: &Op) -> bool {
    match op {
        Op::Unary(u) => matches!(
            u,
            // periodic: a rounding of a large computed argument moves them anywhere
            UnaryOp::Sin
                | UnaryOp::Cos
                | UnaryOp::Tan
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
                | UnaryOp::Trunc
                | UnaryOp::Sign
                | UnaryOp::LogicalNot
        ),
        Op::Binary(b) => matches!(
            b,
            BinaryOp::Remainder
                | BinaryOp::Fmod
                | BinaryOp::Atan2
                | BinaryOp::Eq
                | BinaryOp::Ne
                | BinaryOp::Lt
                | BinaryOp::Le
                | BinaryOp::Gt
                | BinaryOp::Ge
                | BinaryOp::Pow
        ),
        Op::Cast { dtype } => !dtype.is_float(),
        Op::Argmax { .. } => true,
        _ => false,
    }
}

/// Per output of `g`: true when it depends on a discontinuous op (see [`discontinuous`])
/// applied to a float value computed by the graph (not an input or a view of one). Such an
/// output is ill-conditioned: executors that round differently (within the op table's
/// error bounds) may disagree on it by whole steps, so its values are not compared; an
/// error or a panic still is a divergence.
pub fn ill_conditioned(g: &Graph) -> Vec<bool> {
    unstable_outputs(g, discontinuous, |_| false)
}

/// True for ops whose derivative jumps at operand values inputs reach by themselves:
/// `fmod` and `remainder` (`-trunc(a/b)`, `-floor(a/b)`: `fmod(x, x)` sits on the jump, and
/// a division rounded otherwise falls on either side).
fn derivative_jumps(op: &Op) -> bool {
    matches!(op, Op::Binary(BinaryOp::Fmod | BinaryOp::Remainder))
}

/// True for ops whose derivative jumps (`abs`, `relu`, `maximum`, `amax`, and every
/// discontinuous op): at ties and kinks executors may pick different one-sided derivatives.
fn kinked(op: &Op) -> bool {
    discontinuous(op)
        || match op {
            Op::Unary(_) | Op::Binary(_) => !op.info().smooth,
            Op::Reduce { op, .. } => matches!(op, kiln_ir::ReduceOp::Max | kiln_ir::ReduceOp::Min),
            _ => false,
        }
}

/// Per output of `g`: true when it depends on an op that `jumps_at` a computed float operand
/// (see [`ill_conditioned`]), or on an op that `always` jumps.
fn unstable_outputs(g: &Graph, jumps_at: fn(&Op) -> bool, always: fn(&Op) -> bool) -> Vec<bool> {
    let nodes: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
    let mut computed = std::collections::HashSet::new();
    let mut unstable = std::collections::HashSet::new();
    for id in &nodes {
        let n = g.node(*id);
        let view = matches!(
            n.op,
            Op::Input
                | Op::Reshape { .. }
                | Op::Transpose { .. }
                | Op::Permute { .. }
                | Op::Expand { .. }
                | Op::Slice { .. }
                | Op::Contiguous
        );
        let values = || {
            n.args.iter().filter_map(|a| match a {
                Arg::Value(v) => Some(*v),
                _ => None,
            })
        };
        if n.op != Op::Input && (!view || values().any(|v| computed.contains(&v))) {
            computed.insert(*id);
        }
        let jumps = always(&n.op)
            || jumps_at(&n.op)
                && values().any(|v| computed.contains(&v) && g.node(v).ty.dtype.is_float());
        if jumps || values().any(|v| unstable.contains(&v)) {
            unstable.insert(*id);
        }
    }
    g.outputs().iter().map(|o| unstable.contains(o)).collect()
}

/// `g` with its f16, bf16 and f32 values widened to f64 (types, casts and dtype attributes,
/// by way of the text form, which is parsed and verified again); `None` when `g` has no such
/// values or the widened text does not verify. Its results are the truth that disagreements
/// are measured against ([`compare::no_farther_from_truth`]).
pub fn widened(g: &Graph) -> Option<Graph> {
    if !g
        .nodes()
        .any(|(_, n)| matches!(n.ty.dtype, DType::F16 | DType::BF16 | DType::F32))
    {
        return None;
    }
    let text = g.to_string();
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(match word.as_str() {
            "f16" | "bf16" | "f32" => "f64",
            w => w,
        });
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    kiln_ir::text::parse_graph(&out).ok()
}

/// The inputs of [`widened`]: float tensors cast to f64 (exactly), others as they are.
fn widen_inputs(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    xs.iter()
        .map(|x| match x.dtype() {
            DType::F16 | DType::BF16 | DType::F32 => x.cast(DType::F64),
            _ => Ok(x.clone()),
        })
        .collect()
}

/// The truth of one case, computed on first need: the widened graph's outputs and
/// gradients (`None` where the graph has no float values or the widened run failed). The
/// widened graph itself is made on first need too, once for all cases of a graph.
struct Truth<'a> {
    source: &'a Graph,
    wide: &'a OnceCell<Option<Graph>>,
    xs: &'a [Tensor],
    outputs: Option<Option<Vec<Tensor>>>,
    grads: Option<Option<Vec<Option<Tensor>>>>,
}

impl<'a> Truth<'a> {
    fn new(source: &'a Graph, wide: &'a OnceCell<Option<Graph>>, xs: &'a [Tensor]) -> Truth<'a> {
        Truth {
            source,
            wide,
            xs,
            outputs: None,
            grads: None,
        }
    }

    /// The widened graph.
    fn graph(&self) -> Option<&'a Graph> {
        let (source, wide) = (self.source, self.wide);
        wide.get_or_init(|| widened(source)).as_ref()
    }

    fn output(&mut self, i: usize) -> Option<&Tensor> {
        let (graph, xs) = (self.graph(), self.xs);
        self.outputs
            .get_or_insert_with(|| {
                let g = graph?;
                guarded(|| run_graph(g, &widen_inputs(xs)?)).ok()
            })
            .as_ref()?
            .get(i)
    }

    fn grad(&mut self, i: usize) -> Option<&Tensor> {
        let (graph, xs) = (self.graph(), self.xs);
        self.grads
            .get_or_insert_with(|| {
                let g = graph?;
                guarded(|| gradients(&widen_inputs(xs)?, |ys| replay(g, ys)?[0].sum(&[], false)))
                    .ok()
            })
            .as_ref()?
            .get(i)?
            .as_ref()
    }
}

/// `same`, or when it failed, whether `got` is no farther from the `truth` than eager's
/// `want` ([`compare::no_farther_from_truth`]).
fn or_near_truth(
    same: std::result::Result<(), String>,
    got: &Tensor,
    want: &Tensor,
    truth: Option<&Tensor>,
    bounds: (f64, f64),
) -> std::result::Result<(), String> {
    match (same, truth) {
        (Ok(()), _) => Ok(()),
        (Err(m), None) => Err(m),
        (Err(m), Some(t)) => {
            compare::no_farther_from_truth(got, want, t, bounds).map_err(|n| format!("{m}; {n}"))
        }
    }
}

/// The bounds of an output: the loosest of the float dtypes it is computed through (a
/// bf16 linear cast to f32 carries bf16's rounding, as a gradient does: [`compare::loosest`]).
fn path_bounds(g: &Graph, out: NodeId) -> (f64, f64) {
    let mut seen = vec![false; g.len()];
    let mut work = vec![out];
    let mut dtypes = Vec::new();
    while let Some(n) = work.pop() {
        if std::mem::replace(&mut seen[n.index()], true) {
            continue;
        }
        let node = g.node(n);
        dtypes.push(node.ty.dtype);
        work.extend(node.args.iter().filter_map(|a| match a {
            Arg::Value(v) => Some(*v),
            Arg::Scalar(_) => None,
        }));
    }
    compare::loosest(dtypes)
}

/// Checks `g` with `opts` (see the module doc).
pub fn check_graph(g: &Graph, opts: &CheckOptions) -> Outcome {
    let unstable = ill_conditioned(g);
    let has_integers = g.nodes().any(|(_, n)| n.ty.dtype.is_int());
    // gradients of a loss through a kink or a jump are compared only for errors
    let grad_unstable = unstable_outputs(g, kinked, derivative_jumps)
        .first()
        .copied()
        .unwrap_or(true);
    let grad_bounds = compare::loosest(g.nodes().map(|(_, n)| n.ty.dtype));
    let out_bounds: Vec<(f64, f64)> = g.outputs().iter().map(|o| path_bounds(g, *o)).collect();
    let wide = OnceCell::new();
    let mut runs = 0;
    let mut any = false;
    let forward = |graph: Graph| move |xs: &[Tensor]| replay(&graph, xs);
    let compiled: Vec<_> = opts
        .executors
        .iter()
        .map(|e| {
            (
                *e,
                compile_with(forward(opts.graph_for(*e, g)), e.options()),
            )
        })
        .collect();
    let loss = |graph: Graph| {
        move |xs: &[Tensor]| -> Result<Tensor> { replay(&graph, xs)?[0].sum(&[], false) }
    };
    let differentiable_loss = g
        .outputs()
        .first()
        .is_some_and(|o| differentiable(g.node(*o).ty.dtype));
    let trained: Vec<_> = if opts.grad && differentiable_loss {
        opts.executors
            .iter()
            .map(|e| (*e, compile_with(loss(opts.graph_for(*e, g)), e.options())))
            .collect()
    } else {
        Vec::new()
    };
    for case in &opts.cases {
        let diverged = |executor, grad, detail| {
            Outcome::Diverged(Divergence {
                executor,
                grad,
                case: *case,
                detail,
            })
        };
        let xs = match make_inputs(g, *case) {
            Ok(xs) => xs,
            Err(_) => continue,
        };
        let Ok(want) = guarded(|| run_graph(g, &xs)) else {
            continue;
        };
        any = true;
        let mut truth = Truth::new(g, &wide, &xs);
        for (e, f) in &compiled {
            if *e == Executor::Interp && case.special && has_integers {
                // special values saturate into integers past 2^53, inexact in f64
                continue;
            }
            runs += 1;
            match guarded(|| f.call(&xs)) {
                Err(m) => return diverged(*e, false, m),
                Ok(got) => {
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        if unstable[i] {
                            continue;
                        }
                        let same = if *e == Executor::Interp {
                            compare::agree_with_f64_oracle(a, b)
                        } else {
                            let bounds = out_bounds[i];
                            let same = compare::agree_within(a, b, bounds);
                            let t = if same.is_err() { truth.output(i) } else { None };
                            or_near_truth(same, a, b, t, bounds)
                        };
                        if let Err(m) = same {
                            return diverged(*e, false, format!("output {i}: {m}"));
                        }
                    }
                }
            }
        }
        if trained.is_empty() {
            continue;
        }
        let eager_loss = loss(g.clone());
        let Ok(want) = guarded(|| gradients(&xs, |ys| eager_loss(ys))) else {
            continue;
        };
        for (e, f) in &trained {
            runs += 1;
            match guarded(|| gradients(&xs, |ys| f.call(ys))) {
                Err(m) => return diverged(*e, true, m),
                Ok(_) if grad_unstable => {}
                Ok(got) => {
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        let same = match (a, b) {
                            (None, None) => Ok(()),
                            (Some(a), Some(b)) => {
                                let same = if *e == Executor::Interp {
                                    compare::agree_with_f64_oracle_within(a, b, grad_bounds)
                                } else {
                                    compare::agree_within(a, b, grad_bounds)
                                };
                                let t = if same.is_err() { truth.grad(i) } else { None };
                                or_near_truth(same, a, b, t, grad_bounds)
                            }
                            (a, b) => Err(format!(
                                "a gradient {} vs {}",
                                if a.is_some() { "computed" } else { "missing" },
                                if b.is_some() { "computed" } else { "missing" }
                            )),
                        };
                        if let Err(m) = same {
                            let name = &g.inputs()[i].0;
                            return diverged(*e, true, format!("gradient of %{name}: {m}"));
                        }
                    }
                }
            }
        }
    }
    if any {
        Outcome::Agree { runs }
    } else {
        Outcome::Skipped
    }
}

/// The gradients of `loss` at `xs` for each float input (fresh leaves that require grad;
/// `None` for other inputs and for inputs the loss does not depend on).
fn gradients(
    xs: &[Tensor],
    loss: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let leaves = xs
        .iter()
        .map(|x| {
            if differentiable(x.dtype()) {
                x.detach().requires_grad_(true)
            } else {
                Ok(x.clone())
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let l = loss(&leaves)?;
    l.backward()?;
    Ok(leaves
        .iter()
        .map(|x| if x.requires_grad() { x.grad() } else { None })
        .collect())
}
