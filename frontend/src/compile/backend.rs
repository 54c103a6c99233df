//! Backends: what a captured graph is compiled into. `cpu` (the default) runs the pass
//! pipeline (decompose, e-graph fusion, schedule) and generates machine code for each kernel
//! group with Cranelift; `eager` runs the graph node by node with the runtime's kernels (a
//! precomputed step list, no per-call graph walking); `interp` runs it on the IR
//! interpreter; `cuda` runs the same pipeline and generates CUDA C for each kernel group
//! (NVRTC on first launch, cuBLAS for matmuls), on the device `KILN_CUDA_DEVICE` names
//! (see [`kiln_codegen::cuda::select`]); inputs and outputs are copied to and from it.

use super::{CompileOptions, Mode};
use crate::error::{Error, Result};
use kiln_codegen::cpu::c_tier::KernelTier;
use kiln_codegen::cpu::CpuPlan;
use kiln_codegen::cuda::gpu::GpuDevice;
use kiln_codegen::cuda::plan::{CapturedPlan, CudaPlan};
use kiln_codegen::CodegenError;
use kiln_ir::interp::{eval, Value};
use kiln_ir::{Arg, Dim, Graph, Op};
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::{schedule, Schedule};
use kiln_runtime::{execute, CpuTensor, EagerArg};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where compiled graphs run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// generated code: the pass pipeline, then Cranelift machine code per kernel group
    #[default]
    Cpu,
    /// the captured graph run op by op with the eager kernels
    Eager,
    /// the IR interpreter (the oracle: slow, f64 inside)
    Interp,
    /// generated CUDA code on the process's CUDA device (an error where there is none)
    Cuda,
}

impl Backend {
    /// The backend's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Eager => "eager",
            Backend::Interp => "interp",
            Backend::Cuda => "cuda",
        }
    }

    /// True when the generated code depends on the inputs' strides, so that layouts are
    /// part of the guards.
    pub fn layout_sensitive(self) -> bool {
        false
    }

    /// Compiles `g` (already verified) into something that runs; `fusion: false` keeps
    /// every op its own kernel (the generated-code backends), `mode` is the cuda backend's.
    pub(crate) fn compile(self, g: &Graph, opts: &CompileOptions) -> Result<Box<dyn Executable>> {
        Ok(match self {
            Backend::Cpu => Box::new(CpuExecutable::new(g, opts)?),
            Backend::Eager => Box::new(EagerPlan::new(g)),
            Backend::Interp => Box::new(InterpPlan { graph: g.clone() }),
            Backend::Cuda => CudaExecutable::compile(g, opts)?,
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Backend, String> {
        match s {
            "cpu" => Ok(Backend::Cpu),
            "eager" => Ok(Backend::Eager),
            "interp" => Ok(Backend::Interp),
            "cuda" => Ok(Backend::Cuda),
            other => Err(format!(
                "unknown backend `{other}` (expected cpu, cuda, eager or interp)"
            )),
        }
    }
}

/// A compiled graph: runs on input data in the graph's input order.
pub(crate) trait Executable: Send + Sync {
    /// Runs on `inputs` and returns the outputs in return order.
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>>;

    /// Runs like [`Executable::run`], computing the output of each `(input, output)` pair
    /// into the input's memory where the backend can (a graph updating its inputs); says
    /// per pair whether it did (then the input already holds the new value, its version
    /// bumped). By default nothing is donated.
    fn run_donating(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>)> {
        Ok((self.run(inputs)?, vec![false; donate.len()]))
    }

    /// Runs like [`Executable::run_donating`] as the only reader of its lent inputs
    /// (`CpuTensor::from_foreign_lent`): the backend may let go of each once its last
    /// reader has run. The caller must not read a lent input after the call. By default
    /// nothing is let go of before the call ends.
    fn run_releasing_lent(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>)> {
        self.run_donating(inputs, donate)
    }

    /// The tiers of the generated CPU kernels' specialisations compiled so far (none for
    /// backends without tiers).
    fn kernel_tiers(&self) -> Vec<KernelTier> {
        Vec::new()
    }
}

/// One operand of a step: a slot (value computed earlier or an input) or a literal.
#[derive(Clone, Copy)]
enum Slot {
    Value(usize),
    Scalar(kiln_ir::Scalar),
}

struct Step {
    op: Op,
    /// slots whose last use is this step (freed after it, so intermediates do not pile up)
    frees: Vec<usize>,
    /// true when the op's attributes name symbols that must be bound per call
    symbolic: bool,
    args: Vec<Slot>,
    out: usize,
}

/// The eager backend's compiled form: the graph flattened to a list of kernel calls over
/// numbered slots; symbolic dims bound from the inputs' shapes per call.
pub(crate) struct EagerPlan {
    name: String,
    inputs: Vec<(usize, Vec<Dim>)>,
    steps: Vec<Step>,
    outputs: Vec<usize>,
    slots: usize,
    has_symbols: bool,
}

impl EagerPlan {
    fn new(g: &Graph) -> EagerPlan {
        let mut slot_of: HashMap<kiln_ir::NodeId, usize> = HashMap::new();
        let mut inputs = Vec::new();
        for (_, id) in g.inputs() {
            let slot = slot_of.len();
            slot_of.insert(*id, slot);
            inputs.push((slot, g.node(*id).ty.shape.dims().to_vec()));
        }
        let mut steps = Vec::new();
        for (id, node) in g.nodes() {
            if node.op == Op::Input {
                continue;
            }
            let out = slot_of.len();
            slot_of.insert(id, out);
            let args = node
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => Slot::Value(slot_of[v]),
                    Arg::Scalar(s) => Slot::Scalar(*s),
                })
                .collect();
            let symbolic = node.op.shape_attr().is_some_and(|s| !s.is_static());
            steps.push(Step {
                frees: Vec::new(),
                op: node.op.clone(),
                symbolic,
                args,
                out,
            });
        }
        let outputs: Vec<usize> = g.outputs().iter().map(|o| slot_of[o]).collect();
        let mut last_use: HashMap<usize, usize> = HashMap::new();
        for (i, step) in steps.iter().enumerate() {
            for a in &step.args {
                if let Slot::Value(v) = a {
                    last_use.insert(*v, i);
                }
            }
        }
        for (slot, i) in last_use {
            if !outputs.contains(&slot) {
                steps[i].frees.push(slot);
            }
        }
        let has_symbols = inputs
            .iter()
            .any(|(_, d)| d.iter().any(|d| d.as_const().is_none()));
        EagerPlan {
            name: g.name().to_string(),
            inputs,
            outputs,
            slots: slot_of.len(),
            steps,
            has_symbols,
        }
    }
}

impl Executable for EagerPlan {
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::Compile {
                function: self.name.clone(),
                reason: format!(
                    "the plan takes {} inputs, got {}",
                    self.inputs.len(),
                    inputs.len()
                ),
            });
        }
        let mut bound: Vec<(&str, usize)> = Vec::new();
        if self.has_symbols {
            for ((_, dims), t) in self.inputs.iter().zip(inputs) {
                for (d, &n) in dims.iter().zip(t.shape()) {
                    if let Dim::Sym(s) = d {
                        if !bound.iter().any(|(b, _)| *b == &**s) {
                            bound.push((s, n));
                        }
                    }
                }
            }
        }
        let mut slots: Vec<Option<CpuTensor>> = vec![None; self.slots];
        for ((slot, _), t) in self.inputs.iter().zip(inputs) {
            slots[*slot] = Some((*t).clone());
        }
        for step in &self.steps {
            let args: smallvec::SmallVec<[EagerArg<'_>; 3]> = step
                .args
                .iter()
                .map(|a| match a {
                    Slot::Scalar(s) => EagerArg::Scalar(*s),
                    Slot::Value(v) => {
                        EagerArg::Tensor(slots[*v].as_ref().expect("slots are filled in order"))
                    }
                })
                .collect();
            let out = if step.symbolic {
                let lookup = |s: &str| bound.iter().find(|(b, _)| *b == s).map(|(_, n)| *n);
                let op = step.op.bind_symbols(&lookup).map_err(|s| Error::Compile {
                    function: self.name.clone(),
                    reason: format!("symbolic dim `{s}` is not bound by any input"),
                })?;
                execute(&op, &args)?
            } else {
                execute(&step.op, &args)?
            };
            drop(args);
            slots[step.out] = Some(out);
            for &f in &step.frees {
                slots[f] = None;
            }
        }
        Ok(self
            .outputs
            .iter()
            .map(|&o| slots[o].clone().expect("outputs are computed"))
            .collect())
    }
}

/// The interpreter backend: converts to the interpreter's f64 values and back.
struct InterpPlan {
    graph: Graph,
}

impl Executable for InterpPlan {
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        let compile_err = |reason: String| Error::Compile {
            function: self.graph.name().to_string(),
            reason,
        };
        let values = inputs
            .iter()
            .map(|t| Value::new(t.dtype(), t.shape().to_vec(), t.to_f64_vec()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| compile_err(e.to_string()))?;
        let outs = eval(&self.graph, &values).map_err(|e| compile_err(e.to_string()))?;
        outs.iter()
            .map(|v| Ok(CpuTensor::from_f64(&v.data, &v.shape, v.dtype)?))
            .collect()
    }
}

/// Why a program could not be built for a generated-code backend: a compiler bug (an
/// error, whatever the fallbacks), or something the backend does not support (the caller
/// falls back: a fused program to one kernel per op, a cuda plan to the cpu backend), or
/// options that make no sense (an error).
enum BuildError {
    Bug(String),
    Unsupported(String),
    Invalid(String),
}

impl BuildError {
    fn pass(e: kiln_passes::PassError) -> BuildError {
        if e.is_bug() {
            BuildError::Bug(e.to_string())
        } else {
            BuildError::Unsupported(e.to_string())
        }
    }

    fn codegen(e: CodegenError) -> BuildError {
        if e.is_bug() {
            BuildError::Bug(e.to_string())
        } else {
            BuildError::Unsupported(e.to_string())
        }
    }

    fn into_error(self, g: &Graph) -> Error {
        let reason = match self {
            BuildError::Bug(r) => format!("compiler bug: {r}"),
            BuildError::Unsupported(r) | BuildError::Invalid(r) => r,
        };
        Error::Compile {
            function: g.name().to_string(),
            reason,
        }
    }
}

/// The schedule the generated-code backends compile: decompose (the composites the
/// backend does not render) and fuse, or decompose alone (one kernel per op). Verified
/// after every pass in debug builds and tests.
fn schedule_for(
    g: &Graph,
    fusion: bool,
    renders: kiln_passes::decompose::Renders,
    options: &CompileOptions,
) -> std::result::Result<Schedule, BuildError> {
    let mut opts = PassOptions::rendering(renders);
    opts.egraph.fast_math = options.fast_math;
    opts.egraph.disabled_rules = options.disabled_rules.clone();
    // a rule name that does not exist is the caller's mistake, whether or not fusion runs
    kiln_passes::rules::select(options.fast_math, &options.disabled_rules)
        .map_err(|e| BuildError::Invalid(e.to_string()))?;
    // one kernel per op stores every intermediate in its dtype: f32 means and variances
    // then decompose wholly in f64, as eager computes them (fused kernels keep the graph's
    // f64 statistics in registers; norms decompose as eager computes them either way)
    let passes: &[&str] = if fusion {
        &["decompose", "fuse"]
    } else {
        opts.decompose.f64_reductions = true;
        &["decompose"]
    };
    let opt = run_passes(g, passes, &opts, false).map_err(BuildError::pass)?;
    schedule(&opt).map_err(BuildError::pass)
}

/// Builds `build(fusion)`; a fused build that fails for want of support falls back to one
/// kernel per op (logged with the reason), while a compiler bug is an error.
fn fused_or_unfused<T>(
    g: &Graph,
    fusion: bool,
    build: impl Fn(bool) -> std::result::Result<T, BuildError>,
) -> std::result::Result<T, BuildError> {
    match build(fusion) {
        Err(BuildError::Unsupported(reason)) if fusion => {
            tracing::warn!(
                target: "kiln::code",
                "@{}: the fused program is not supported ({reason}); one kernel per op",
                g.name()
            );
            build(false)
        }
        other => other,
    }
}

/// The cpu backend's compiled form: a plan of generated kernels.
pub(crate) struct CpuExecutable {
    plan: CpuPlan,
}

impl CpuExecutable {
    fn new(g: &Graph, opts: &CompileOptions) -> Result<CpuExecutable> {
        let plan = fused_or_unfused(g, opts.fusion, |fusion| {
            let s = schedule_for(g, fusion, kiln_codegen::cpu::renders, opts)?;
            CpuPlan::with_options(&s, &opts.codegen).map_err(BuildError::codegen)
        })
        .map_err(|e| e.into_error(g))?;
        Ok(CpuExecutable { plan })
    }
}

impl CpuExecutable {
    fn error(&self, e: CodegenError) -> Error {
        match e {
            CodegenError::Runtime { source, .. } => Error::Runtime(source),
            other => Error::Compile {
                function: self.plan.name().to_string(),
                reason: other.to_string(),
            },
        }
    }
}

impl Executable for CpuExecutable {
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        self.plan.run(inputs).map_err(|e| self.error(e))
    }

    fn run_donating(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>)> {
        self.plan
            .run_donating(inputs, donate)
            .map_err(|e| self.error(e))
    }

    fn run_releasing_lent(
        &self,
        inputs: &[&CpuTensor],
        donate: &[(usize, usize)],
    ) -> Result<(Vec<CpuTensor>, Vec<bool>)> {
        self.plan
            .run_releasing_lent(inputs, donate)
            .map_err(|e| self.error(e))
    }

    fn kernel_tiers(&self) -> Vec<KernelTier> {
        self.plan.tiers()
    }
}

/// Recorded graphs one cuda executable keeps (one per input shape); past it, new shapes
/// run unrecorded.
const GRAPHS_PER_PLAN: usize = 8;

/// The input dtypes and shapes a recorded graph is for.
type GraphKey = Vec<(kiln_ir::DType, Vec<usize>)>;

/// The cuda backend's compiled form: a [`CudaPlan`] and the device it runs on; in
/// `reduce_overhead` mode, the plan recorded as a graph per input shape (`None`: it cannot
/// be recorded, it runs unrecorded).
pub(crate) struct CudaExecutable {
    plan: CudaPlan,
    gpu: Arc<dyn GpuDevice>,
    graphs: Option<Mutex<HashMap<GraphKey, Option<Arc<CapturedPlan>>>>>,
}

impl CudaExecutable {
    /// The CUDA plan of `g` (fused, else one kernel per op; groups without CUDA code are
    /// host steps of the plan). A graph whose plan cannot be built runs on the cpu backend
    /// instead (logged); no device is an error.
    fn compile(g: &Graph, opts: &CompileOptions) -> Result<Box<dyn Executable>> {
        let gpu = kiln_codegen::cuda::select::default_gpu().map_err(|e| Error::Compile {
            function: g.name().to_string(),
            reason: format!("backend cuda: {e}"),
        })?;
        let built = fused_or_unfused(g, opts.fusion, |fusion| {
            let s = schedule_for(g, fusion, kiln_codegen::cuda::renders, opts)?;
            CudaPlan::new(&s).map_err(BuildError::codegen)
        });
        match built {
            Ok(plan) => Ok(Box::new(CudaExecutable {
                plan,
                gpu,
                graphs: (opts.mode == Mode::ReduceOverhead).then(|| Mutex::new(HashMap::new())),
            })),
            Err(BuildError::Unsupported(reason)) => {
                tracing::warn!(
                    target: "kiln::code",
                    "{reason}; @{} runs on the cpu backend",
                    g.name()
                );
                Ok(Box::new(CpuExecutable::new(g, opts)?))
            }
            Err(bug) => Err(bug.into_error(g)),
        }
    }
}

impl CudaExecutable {
    /// The recorded graph for these inputs: made on first sight of their shapes, `None`
    /// when the plan cannot be recorded (logged once) or the executable holds its limit.
    fn graph_for(&self, inputs: &[&CpuTensor]) -> Option<Arc<CapturedPlan>> {
        let graphs = self.graphs.as_ref()?;
        let key: GraphKey = inputs
            .iter()
            .map(|t| (t.dtype(), t.shape().to_vec()))
            .collect();
        let mut map = graphs.lock();
        if let Some(g) = map.get(&key) {
            return g.clone();
        }
        if map.len() >= GRAPHS_PER_PLAN {
            return None;
        }
        let captured = match self.plan.capture(&*self.gpu, &key) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::warn!(target: "kiln::code", "{e}; it runs unrecorded");
                None
            }
        };
        map.insert(key, captured.clone());
        captured
    }
}

impl Executable for CudaExecutable {
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        let result = match self.graph_for(inputs) {
            Some(g) => g.run_host(&*self.gpu, inputs),
            None => self.plan.run_host(&*self.gpu, inputs),
        };
        result.map_err(|e| match e {
            CodegenError::Device { .. } => Error::Device {
                function: self.plan.name().to_string(),
                reason: e.to_string(),
            },
            other => Error::Compile {
                function: self.plan.name().to_string(),
                reason: other.to_string(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `start + i·step` for element `i`, row-major.
    fn ramp(shape: &[usize], start: f32, step: f32) -> CpuTensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| start + i as f32 * step).collect();
        CpuTensor::from_slice(&v, shape).unwrap()
    }

    fn cpu(text: &str) -> CpuExecutable {
        let g = kiln_ir::parse_graph(text).expect("parses");
        CpuExecutable::new(&g, &CompileOptions::default()).expect("compiles")
    }

    /// An update computed into its input's memory: no copy back, the version bumped, and
    /// the values those of the plain run.
    #[test]
    fn a_pointwise_update_is_computed_into_the_donated_input() {
        let exe = cpu(
            "graph @g(%p0: f32[1000], %p1: f32[1000]) -> (f32[], f32[1000]) {\n  \
             %0 = sum %p1 {dims = [], keepdim = false} : f32[]\n  \
             %1 = mul %p0, 2.0 : f32[1000]\n  \
             %2 = add %1, %p1 : f32[1000]\n  \
             return %0, %2\n}\n",
        );
        let p0 = CpuTensor::from_slice(&(0..1000).map(|i| i as f32).collect::<Vec<_>>(), &[1000])
            .unwrap();
        let p1 = CpuTensor::from_slice(&vec![0.5f32; 1000], &[1000]).unwrap();
        let plain = exe.run(&[&p0, &p1]).unwrap();
        let v = p0.storage().version();
        let (outs, donated) = exe.run_donating(&[&p0, &p1], &[(0, 1)]).unwrap();
        assert_eq!(donated, vec![true]);
        assert!(
            outs[1].shares_storage(&p0),
            "the new value lives in the input"
        );
        assert_eq!(p0.to_f64_vec(), plain[1].to_f64_vec());
        assert_eq!(outs[0].to_f64_vec(), plain[0].to_f64_vec());
        assert!(p0.storage().version() > v, "the version is bumped");
    }

    /// A parameter read by kernels before its update (the forward's matmul reads the
    /// weight a training step then updates) is still donated: those kernels have run when
    /// the update writes into its memory. Values equal the plain run's.
    #[test]
    fn an_input_read_only_before_its_update_is_donated() {
        let exe = cpu(
            "graph @g(%x: f32[3,8], %p0: f32[8,5]) -> (f32[3,5], f32[8,5]) {\n  \
             %0 = matmul %x, %p0 : f32[3,5]\n  \
             %1 = sum %0 {dims = [], keepdim = false} : f32[]\n  \
             %2 = mul %p0, %1 : f32[8,5]\n  \
             %3 = sub %p0, %2 : f32[8,5]\n  \
             return %0, %3\n}\n",
        );
        let x = ramp(&[3, 8], 0.0, 0.1);
        let p0 = ramp(&[8, 5], 1.0, -0.05);
        let plain = exe.run(&[&x, &p0]).unwrap();
        let (outs, donated) = exe.run_donating(&[&x, &p0], &[(1, 1)]).unwrap();
        assert_eq!(donated, vec![true]);
        assert!(outs[1].shares_storage(&p0));
        assert_eq!(p0.to_f64_vec(), plain[1].to_f64_vec());
        assert_eq!(outs[0].to_f64_vec(), plain[0].to_f64_vec());
    }

    /// Optimiser state updated in a matmul's epilogue (AdamW's first moment from a weight
    /// gradient): computed into the state's memory, the product kept out of it (in a
    /// scratch buffer, or in another output of the product's shape), values those of the
    /// plain run.
    #[test]
    fn an_update_in_a_matmul_epilogue_is_donated() {
        for second_output in [false, true] {
            let extra = if second_output {
                "  %4 = mul %0, %0 : f32[8,5]\n  return %3, %4\n}\n"
            } else {
                "  return %3\n}\n"
            };
            let outs_ty = if second_output {
                "(f32[8,5], f32[8,5])"
            } else {
                "f32[8,5]"
            };
            let exe = cpu(&format!(
                "graph @g(%x: f32[3,8], %gy: f32[3,5], %m: f32[8,5]) -> {outs_ty} {{\n  \
                 %t = transpose %x {{dim0 = -2, dim1 = -1}} : f32[8,3]\n  \
                 %0 = matmul %t, %gy : f32[8,5]\n  \
                 %1 = sub %0, %m : f32[8,5]\n  \
                 %2 = mul %1, 0.1 : f32[8,5]\n  \
                 %3 = add %m, %2 : f32[8,5]\n{extra}"
            ));
            let x = ramp(&[3, 8], 0.0, 0.1);
            let gy = ramp(&[3, 5], 0.5, -0.07);
            let m = ramp(&[8, 5], 0.0, 0.01);
            let plain = exe.run(&[&x, &gy, &m]).unwrap();
            let (outs, donated) = exe.run_donating(&[&x, &gy, &m], &[(2, 0)]).unwrap();
            assert_eq!(donated, vec![true], "second output: {second_output}");
            assert!(outs[0].shares_storage(&m));
            assert_eq!(m.to_f64_vec(), plain[0].to_f64_vec());
            for (a, b) in outs.iter().zip(&plain).skip(1) {
                assert_eq!(a.to_f64_vec(), b.to_f64_vec());
            }
        }
    }

    /// An input another kernel reads after the update (here a reduction the update does
    /// not feed) keeps its memory: the pair is not donated and the input is unchanged.
    #[test]
    fn an_input_read_elsewhere_is_not_donated() {
        let exe = cpu(
            "graph @g(%p0: f32[8,1000]) -> (f32[8,1000], f32[1000]) {\n  \
             %0 = mul %p0, 2.0 : f32[8,1000]\n  \
             %1 = sum %p0 {dims = [0], keepdim = false} : f32[1000]\n  \
             return %0, %1\n}\n",
        );
        let p0 = CpuTensor::from_slice(&vec![1.5f32; 8000], &[8, 1000]).unwrap();
        let (outs, donated) = exe.run_donating(&[&p0], &[(0, 0)]).unwrap();
        assert_eq!(donated, vec![false]);
        assert!(!outs[0].shares_storage(&p0));
        assert!(p0.to_f64_vec().iter().all(|&x| x == 1.5));
        assert!(outs[1].to_f64_vec().iter().all(|&x| x == 12.0));
    }
}
