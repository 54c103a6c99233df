//! Differential fuzzing (`kiln fuzz`): random graphs from the op table ([`kiln_ir::gen`]),
//! each run eagerly and through compiled executors (the cpu backend fused and unfused, the
//! interpreter backend, the cuda backend), on inputs with odd sizes, size 1, transposed
//! layouts and special values; every executor must agree with eager ([`compare`]), and with
//! `grad` so must the gradients of the first output's sum through compiled training.
//! A divergence is shrunk by [`minify`] and kept by [`regression`].

pub mod compare;
pub mod inputs;
pub mod minify;
pub mod noise;
pub mod regression;

use crate::compile::{compile_with, Backend, CompileOptions};
use crate::graph_exec::{replay, replay_with, run_graph};
use crate::{Result, Tensor, TierPolicy};
use inputs::{make_inputs, InputSpec};
use kiln_ir::ops::derivative::differentiable;
use kiln_ir::{Arg, BinaryOp, DType, Graph, NodeId, Op, UnaryOp};
use std::cell::OnceCell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Who computes a graph's outputs besides eager (the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Executor {
    /// `kiln::compile` with the cpu backend (fusion on), Cranelift code only
    Cpu,
    /// the cpu backend with every kernel built by the C compiler up front (the C tier),
    /// every aligned output store streaming
    CpuC,
    /// the cpu backend with the automatic tier switch after the first call of each kernel
    /// (a kernel runs Cranelift code until its C code is ready, then the C code)
    CpuTiered,
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
            Executor::CpuC => "cpu-c",
            Executor::CpuTiered => "cpu-tiered",
            Executor::CpuUnfused => "cpu-unfused",
            Executor::Interp => "interp",
            Executor::Cuda => "cuda",
        }
    }

    /// Parses [`Executor::name`].
    pub fn parse(s: &str) -> Option<Executor> {
        [
            Executor::Cpu,
            Executor::CpuC,
            Executor::CpuTiered,
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
            Executor::Cpu => o.backend(Backend::Cpu).tier(TierPolicy::CraneliftOnly),
            // every aligned output store streaming, so that small graphs run that path
            Executor::CpuC => o
                .backend(Backend::Cpu)
                .tier(TierPolicy::CUpFront)
                .stream_stores_from(Some(0)),
            Executor::CpuTiered => o
                .backend(Backend::Cpu)
                .tier(TierPolicy::Auto)
                .c_tier_after(std::time::Duration::ZERO),
            Executor::CpuUnfused => o
                .backend(Backend::Cpu)
                .fusion(false)
                .tier(TierPolicy::CraneliftOnly),
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
                // an overflow boundary a rounding crosses
                | UnaryOp::Isinf
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
                // the truth of a float is `x != 0`, which a rounding to exactly 0 flips
                | BinaryOp::LogicalAnd
                | BinaryOp::LogicalOr
                | BinaryOp::LogicalXor
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

/// `g` with its f16, bf16 and f32 values widened to f64 (types, casts and dtype
/// attributes); `None` when `g` has no such values or the widened graph does not verify.
/// Its results are the truth that disagreements are measured against
/// ([`compare::no_farther_from_truth`]).
pub fn widened(g: &Graph) -> Option<Graph> {
    widen(g).map(|w| w.graph)
}

/// [`widened`], with the unit roundoff each of its nodes computes at in `g` ([`noise`]).
struct Widened {
    graph: Graph,
    /// per node of `graph` (by index): the unit roundoff of the source node's dtype; 0
    /// for the inputs and the casts to f64 that widening adds
    units: Vec<f64>,
}

fn narrow(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16 | DType::F32)
}

/// `op` with its dtype attributes widened to f64.
fn widen_op(op: &Op) -> Option<Op> {
    use kiln_ir::ops::AttrValue;
    let attrs: Vec<(String, AttrValue)> = op
        .attrs()
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                AttrValue::DType(d) if narrow(d) => AttrValue::DType(DType::F64),
                v => v,
            };
            (k.to_string(), v)
        })
        .collect();
    Op::from_parts(op.name(), &attrs).ok()
}

/// Builds [`Widened`]: node by node, each op with widened attributes on widened operands.
/// Where an op would still compute in a narrow float (an f32 `mish` of a bool, the default
/// float dtype of a promotion), its bool and integer operands are cast to f64 first (an
/// exact conversion), or else its result is.
fn widen(g: &Graph) -> Option<Widened> {
    if !g.nodes().any(|(_, n)| narrow(n.ty.dtype)) {
        return None;
    }
    let mut w = Graph::new(g.name());
    let mut units = Vec::new();
    let mut map = vec![None; g.len()];
    let set_unit = |units: &mut Vec<f64>, id: NodeId, unit: f64| {
        if units.len() <= id.index() {
            units.resize(id.index() + 1, 0.0);
        }
        units[id.index()] = unit;
    };
    let to_f64 = |dtype: DType| if narrow(dtype) { DType::F64 } else { dtype };
    for (name, id) in g.inputs() {
        let ty = &g.node(*id).ty;
        let wide = kiln_ir::TensorType {
            dtype: to_f64(ty.dtype),
            shape: ty.shape.clone(),
        };
        map[id.index()] = Some(w.add_input(name.clone(), wide).ok()?);
    }
    let cast = Op::Cast { dtype: DType::F64 };
    for (id, n) in g.nodes() {
        if n.op == Op::Input {
            continue;
        }
        let op = widen_op(&n.op)?;
        let mut args: Vec<Arg> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => map[v.index()].map(Arg::Value),
                Arg::Scalar(s) => Some(Arg::Scalar(*s)),
            })
            .collect::<Option<_>>()?;
        let ty = kiln_ir::infer(&op, &w.arg_types(&args).ok()?).ok()?;
        if narrow(ty.dtype) {
            for a in &mut args {
                if let Arg::Value(v) = a {
                    if !w.node(*v).ty.dtype.is_float() {
                        let c = w.add_op(cast.clone(), &[Arg::Value(*v)], None).ok()?;
                        set_unit(&mut units, c, 0.0);
                        *a = Arg::Value(c);
                    }
                }
            }
        }
        let mut out = w.add_op(op, &args, n.loc.clone()).ok()?;
        set_unit(&mut units, out, noise::unit_roundoff(n.ty.dtype));
        if narrow(w.node(out).ty.dtype) {
            out = w.add_op(cast.clone(), &[Arg::Value(out)], None).ok()?;
            set_unit(&mut units, out, 0.0);
        }
        map[id.index()] = Some(out);
    }
    let outputs = g
        .outputs()
        .iter()
        .map(|o| map[o.index()])
        .collect::<Option<Vec<_>>>()?;
    w.set_outputs(outputs).ok()?;
    kiln_ir::verify(&w).ok()?;
    units.resize(w.len(), 0.0);
    Some(Widened { graph: w, units })
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
/// gradients (`None` where the graph has no float values or the widened run failed), and
/// their rounding noise ([`noise`]). The widened graph itself is made on first need too,
/// once for all cases of a graph.
struct Truth<'a> {
    source: &'a Graph,
    wide: &'a OnceCell<Option<Widened>>,
    xs: &'a [Tensor],
    outputs: Option<Option<Vec<Tensor>>>,
    grads: Option<Option<Vec<Option<Tensor>>>>,
    output_noise: Option<Option<Vec<Vec<f64>>>>,
    grad_noise: Option<Option<Vec<Vec<f64>>>>,
}

/// Per element, the largest distance of `runs`' values from `truth`'s (NaN where a run
/// is not finite and the truth is, or a run failed to give the value).
fn spread(truth: &[Option<Tensor>], runs: &[Vec<Option<Tensor>>]) -> Option<Vec<Vec<f64>>> {
    truth
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let Some(t) = t else {
                return Some(Vec::new());
            };
            let t = t.to_vec_f64().ok()?;
            let mut out = vec![0.0f64; t.len()];
            for run in runs {
                let v = run.get(i)?.as_ref()?.to_vec_f64().ok()?;
                if v.len() != t.len() {
                    return None;
                }
                for ((o, p), r) in out.iter_mut().zip(&v).zip(&t) {
                    let d = if p.is_finite() || !r.is_finite() {
                        (p - r).abs()
                    } else {
                        f64::NAN
                    };
                    *o = if d.is_nan() || o.is_nan() {
                        f64::NAN
                    } else {
                        o.max(d)
                    };
                }
            }
            Some(out)
        })
        .collect()
}

impl<'a> Truth<'a> {
    fn new(source: &'a Graph, wide: &'a OnceCell<Option<Widened>>, xs: &'a [Tensor]) -> Truth<'a> {
        Truth {
            source,
            wide,
            xs,
            outputs: None,
            grads: None,
            output_noise: None,
            grad_noise: None,
        }
    }

    /// Replays the widened graph under rounding noise: each node's ops at the unit
    /// roundoff of the dtype the source node computes in.
    fn noisy_replay(w: &Widened, ys: &[Tensor]) -> Result<Vec<Tensor>> {
        replay_with(&w.graph, ys, &mut |id| {
            noise::set_unit(w.units.get(id.index()).copied().unwrap_or(0.0));
        })
    }

    /// Per element of each of `truth`'s tensors, the rounding noise: `run` on the widened
    /// inputs, [`noise::SAMPLES`] times under [`noise::with_noise`] (a failed run gives no
    /// values, so no noise).
    fn noise_of(
        truth: &[Option<Tensor>],
        xs: &[Tensor],
        run: impl Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>>,
    ) -> Option<Vec<Vec<f64>>> {
        let wide = widen_inputs(xs).ok()?;
        let runs: Vec<Vec<Option<Tensor>>> = (0..noise::SAMPLES)
            .map(|k| guarded(|| noise::with_noise(k, 0.0, || run(&wide))).unwrap_or_default())
            .collect();
        spread(truth, &runs)
    }

    /// The rounding noise of each output's elements.
    fn output_noise(&mut self, i: usize) -> Option<&[f64]> {
        let (wide_graph, xs) = (self.widened(), self.xs);
        self.output(i)?;
        let truth: Vec<Option<Tensor>> = self.outputs.clone()??.into_iter().map(Some).collect();
        self.output_noise
            .get_or_insert_with(|| {
                let g = wide_graph?;
                Truth::noise_of(&truth, xs, |ys| {
                    Ok(Truth::noisy_replay(g, ys)?.into_iter().map(Some).collect())
                })
            })
            .as_ref()?
            .get(i)
            .map(|v| v.as_slice())
    }

    /// The rounding noise of each gradient's elements; the backward pass computes at the
    /// loosest unit roundoff of the graph (as gradients are compared within its bounds).
    fn grad_noise(&mut self, i: usize) -> Option<&[f64]> {
        let (source, wide_graph, xs) = (self.source, self.widened(), self.xs);
        self.grad(i)?;
        let truth = self.grads.clone()??;
        let loosest = source
            .nodes()
            .map(|(_, n)| noise::unit_roundoff(n.ty.dtype))
            .fold(0.0f64, f64::max);
        self.grad_noise
            .get_or_insert_with(|| {
                let g = wide_graph?;
                Truth::noise_of(&truth, xs, |ys| {
                    gradients(ys, |ys| {
                        let out = Truth::noisy_replay(g, ys)?;
                        noise::set_unit(loosest);
                        out[0].sum(&[], false)
                    })
                })
            })
            .as_ref()?
            .get(i)
            .map(|v| v.as_slice())
    }

    /// The widened graph with its nodes' units of roundoff.
    fn widened(&self) -> Option<&'a Widened> {
        let (source, wide) = (self.source, self.wide);
        wide.get_or_init(|| widen(source)).as_ref()
    }

    /// The widened graph.
    fn graph(&self) -> Option<&'a Graph> {
        self.widened().map(|w| &w.graph)
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

/// Which result of a case is compared.
#[derive(Clone, Copy)]
enum Compared {
    Output(usize),
    Grad(usize),
}

/// `same`, or when it failed: whether `got` is no farther from the truth than eager's
/// `want` ([`compare::no_farther_from_truth`]; not for the interpreter, `oracle`, which
/// computes the truth itself), or both are within the rounding noise of the truth
/// ([`compare::within_rounding_noise`]).
fn or_near_truth(
    same: std::result::Result<(), String>,
    got: &Tensor,
    want: &Tensor,
    truth: &mut Truth<'_>,
    which: Compared,
    bounds: (f64, f64),
    oracle: bool,
) -> std::result::Result<(), String> {
    let Err(m) = same else { return Ok(()) };
    let t = match which {
        Compared::Output(i) => truth.output(i).cloned(),
        Compared::Grad(i) => truth.grad(i).cloned(),
    };
    let Some(t) = t else { return Err(m) };
    let m = if oracle {
        m
    } else {
        match compare::no_farther_from_truth(got, want, &t, bounds) {
            Ok(()) => return Ok(()),
            Err(n) => format!("{m}; {n}"),
        }
    };
    let noise = match which {
        Compared::Output(i) => truth.output_noise(i),
        Compared::Grad(i) => truth.grad_noise(i),
    };
    let Some(noise) = noise else { return Err(m) };
    compare::within_rounding_noise(got, want, &t, noise, bounds, oracle)
        .map_err(|n| format!("{m}; {n}"))
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
                        let bounds = out_bounds[i];
                        let oracle = *e == Executor::Interp;
                        let same = if oracle {
                            compare::agree_with_f64_oracle_within(a, b, bounds)
                        } else {
                            compare::agree_within(a, b, bounds)
                        };
                        let which = Compared::Output(i);
                        let same = or_near_truth(same, a, b, &mut truth, which, bounds, oracle);
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
                                let oracle = *e == Executor::Interp;
                                let same = if oracle {
                                    compare::agree_with_f64_oracle_within(a, b, grad_bounds)
                                } else {
                                    compare::agree_within(a, b, grad_bounds)
                                };
                                let which = Compared::Grad(i);
                                or_near_truth(same, a, b, &mut truth, which, grad_bounds, oracle)
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
