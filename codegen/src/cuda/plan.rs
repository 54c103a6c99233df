//! A compiled program for a CUDA device: the schedule's kernel groups in order, each a
//! generated CUDA kernel (launched with the strides of its operands, so views cost no copy)
//! or a GEMM (cuBLAS on a GPU) followed by its generated epilogue kernel. The work of a call
//! is queued on the device's stream; nothing waits for it until a result is copied back.
//!
//! Values between kernels live in device memory from the device's caching allocator (a call
//! allocates, and frees back to the cache, without a device malloc once warm). Views
//! (reshape, permute, transpose, expand, slice) are layouts over their base's memory; a
//! reshape that no layout can express, and a GEMM operand cuBLAS cannot read as it is
//! (neither its rows nor its columns contiguous, or batch dims that do not fold into one
//! stride), are copied row-major first (through the host: slow, correct, and logged).
//!
//! Embedding lookups (a group of one `index_select`) run the gather kernel. A group no
//! generator covers (an op without CUDA code, such as `triu` or `cat`) runs on the host: its
//! operands are copied there, the CPU's eager kernels compute it, and the results are copied
//! back (correct and slow; logged when the plan is built, listed by [`CudaPlan::steps`], and
//! it makes the plan unrecordable as a graph).

pub use super::captured::CapturedPlan;
use super::captured::GatherCheck;
use super::device_tensor::DeviceTensor;
use super::gpu::{Gemm, GemmOperand, GpuDevice, GpuError, KernelLaunch};
use super::launch::{folded_stride, gather_operands, launch_nest, GatherOperands};
pub use super::launch::{gemm_operand, grid_for, NestLaunch};
use super::{cuda_kernel, gather_kernel, CudaKernel};
use crate::cpu::kernels::{bind_inputs, concrete, run_graph, Bindings};
use crate::error::CodegenError;
use crate::loops::lower_kernel_half;
use crate::matmul_group::{matmul_shape, split_matmul_group};
use kiln_ir::{Graph, NodeId, Op};
use kiln_passes::schedule::Schedule;
use kiln_passes::GroupKind;
use kiln_runtime::CpuTensor;
use smallvec::SmallVec;
use std::time::{Duration, Instant};

impl NestLaunch {
    fn new(body: &Graph) -> Result<NestLaunch, String> {
        let nest = lower_kernel_half(body).map_err(|e| e.reason)?;
        let kernel = cuda_kernel(&nest).map_err(|e| e.reason)?;
        Ok(NestLaunch { nest, kernel })
    }
}

/// How one kernel group runs.
pub enum CudaStepKind {
    /// one generated kernel
    Nest(NestLaunch),
    /// an embedding lookup (one `index_select`): the gather kernel
    Gather {
        /// the kernel ([`super::gather_kernel`])
        kernel: CudaKernel,
        /// the gathered dim and where the operands are among the group's inputs
        operands: GatherOperands,
    },
    /// a group without CUDA code: the CPU's eager kernels, with copies both ways
    Host {
        /// the group's body
        body: Graph,
        /// why it has no CUDA code
        reason: String,
    },
    /// a GEMM, then the generated epilogue kernel (if the group has more ops)
    Matmul {
        /// input positions of the operands
        a: usize,
        /// (the right operand)
        b: usize,
        /// the product is the group's first output
        mm_is_output: bool,
        /// the epilogue kernel and, per epilogue input, `None` for the product or the
        /// group input it is
        epilogue: Option<(NestLaunch, Vec<Option<usize>>)>,
    },
}

struct Step {
    name: String,
    kind: CudaStepKind,
    inputs: Vec<NodeId>,
    outputs: Vec<NodeId>,
}

/// A compiled program for a CUDA device (see the module doc).
pub struct CudaPlan {
    name: String,
    graph: Graph,
    inputs: Vec<NodeId>,
    steps: Vec<Step>,
    slots: usize,
    /// time spent building the plan (lowering and CUDA C; NVRTC runs on first launch)
    pub build_time: Duration,
}

impl std::fmt::Debug for CudaPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPlan")
            .field("name", &self.name)
            .field("kernels", &self.steps.len())
            .finish()
    }
}

impl CudaPlan {
    /// Builds the plan of a schedule: every group must have CUDA code or be a matmul.
    pub fn new(s: &Schedule) -> Result<CudaPlan, CodegenError> {
        let start = Instant::now();
        let g = &s.graph;
        let mut steps = Vec::new();
        for k in s.kernels.iter().filter(|k| !k.outputs.is_empty()) {
            let name = k.body.name().to_string();
            let is_mm =
                k.kind == GroupKind::Matmul || k.body.nodes().any(|(_, n)| n.op == Op::Matmul);
            let kind = match device_kind(&k.body, is_mm) {
                Ok(kind) => kind,
                Err(reason) => {
                    tracing::warn!(
                        target: "kiln::code",
                        "plan {}: kernel {name} has no CUDA code ({reason}); it runs on the host",
                        g.name()
                    );
                    CudaStepKind::Host {
                        body: k.body.clone(),
                        reason,
                    }
                }
            };
            steps.push(Step {
                name,
                kind,
                inputs: k.inputs.clone(),
                outputs: k.outputs.clone(),
            });
        }
        Ok(CudaPlan {
            name: g.name().to_string(),
            graph: g.clone(),
            inputs: g.inputs().iter().map(|(_, id)| *id).collect(),
            slots: g.nodes().map(|(id, _)| id.index() + 1).max().unwrap_or(0),
            steps,
            build_time: start.elapsed(),
        })
    }

    /// The plan's (graph's) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel groups: name and how each runs.
    pub fn steps(&self) -> impl Iterator<Item = (&str, &CudaStepKind)> {
        self.steps.iter().map(|s| (s.name.as_str(), &s.kind))
    }

    /// Queues the plan on `gpu` for device `inputs` (graph input order); the outputs are
    /// device tensors whose values are ready once the queued work is (a download waits).
    pub fn run(
        &self,
        gpu: &dyn GpuDevice,
        inputs: &[&DeviceTensor],
    ) -> Result<Vec<DeviceTensor>, CodegenError> {
        self.run_ctx(gpu, inputs, &mut RunCtx::default())
    }

    fn run_ctx(
        &self,
        gpu: &dyn GpuDevice,
        inputs: &[&DeviceTensor],
        ctx: &mut RunCtx,
    ) -> Result<Vec<DeviceTensor>, CodegenError> {
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
        let typed: SmallVec<[_; 8]> = inputs.iter().map(|t| (t.dtype(), t.shape())).collect();
        let bound = bind_inputs(&self.name, &self.graph, &self.inputs, &typed)?;
        let mut vals: Vec<Option<DeviceTensor>> = vec![None; self.slots];
        for (id, t) in self.inputs.iter().zip(inputs) {
            vals[id.index()] = Some((*t).clone());
        }
        for step in &self.steps {
            for v in &step.inputs {
                self.ensure(gpu, *v, &mut vals, &bound, ctx)?;
            }
            let ins: Vec<DeviceTensor> = step
                .inputs
                .iter()
                .map(|v| vals[v.index()].clone().expect("ensured above"))
                .collect();
            let outs = self.run_step(gpu, step, &ins, &bound, ctx)?;
            for (o, t) in step.outputs.iter().zip(outs) {
                ctx.keep(&t);
                vals[o.index()] = Some(t);
            }
        }
        let mut res = Vec::with_capacity(self.graph.outputs().len());
        for &o in self.graph.outputs() {
            self.ensure(gpu, o, &mut vals, &bound, ctx)?;
            res.push(vals[o.index()].clone().expect("ensured above"));
        }
        Ok(res)
    }

    /// Records the plan for inputs of these dtypes and shapes as a device graph
    /// (`mode: reduce_overhead`): later calls copy their inputs into the graph's input
    /// buffers and replay it, one launch of recorded work instead of one per kernel. A plan
    /// that needs a copy through the host (a reshape no view expresses, a GEMM operand
    /// cuBLAS cannot read) cannot be recorded: that is an error, and the plan runs
    /// unrecorded.
    pub fn capture(
        &self,
        gpu: &dyn GpuDevice,
        inputs: &[(kiln_ir::DType, Vec<usize>)],
    ) -> Result<CapturedPlan, CodegenError> {
        let dev = |e| self.gpu_err("capture", e);
        let statics: Vec<DeviceTensor> = inputs
            .iter()
            .map(|(dtype, shape)| DeviceTensor::empty(gpu, *dtype, shape))
            .collect::<Result<_, _>>()
            .map_err(dev)?;
        let refs: Vec<&DeviceTensor> = statics.iter().collect();
        let mut ctx = RunCtx {
            capture: Some(Capture::default()),
        };
        gpu.begin_capture().map_err(dev)?;
        let run = self.run_ctx(gpu, &refs, &mut ctx);
        // end the recording even when the run failed
        let graph = gpu.end_capture().map_err(dev);
        let outputs = run?;
        let graph = graph?;
        let capture = ctx.capture.take().expect("capturing");
        Ok(CapturedPlan {
            name: self.name.clone(),
            graph,
            inputs: statics,
            outputs,
            checks: capture.checks,
            _keep: capture.keep,
        })
    }

    /// [`CudaPlan::run`] from and to host tensors: uploads, runs, downloads.
    pub fn run_host(
        &self,
        gpu: &dyn GpuDevice,
        inputs: &[&CpuTensor],
    ) -> Result<Vec<CpuTensor>, CodegenError> {
        let dev = |e: GpuError| self.gpu_err("copy", e);
        let up: Vec<DeviceTensor> = inputs
            .iter()
            .map(|t| DeviceTensor::upload(gpu, t))
            .collect::<Result<_, _>>()
            .map_err(dev)?;
        let refs: Vec<&DeviceTensor> = up.iter().collect();
        let outs = self.run(gpu, &refs)?;
        outs.iter()
            .map(|t| t.download(gpu))
            .collect::<Result<_, _>>()
            .map_err(dev)
    }

    fn gpu_err(&self, kernel: &str, e: GpuError) -> CodegenError {
        CodegenError::Device {
            plan: self.name.clone(),
            kernel: kernel.to_string(),
            reason: e.to_string(),
        }
    }

    fn shape_of(&self, id: NodeId, bound: &Bindings) -> Result<Vec<usize>, CodegenError> {
        concrete(self.graph.node(id).ty.shape.dims(), bound).ok_or_else(|| CodegenError::Plan {
            plan: self.name.clone(),
            reason: format!("the shape of %{} has an unbound symbol", id.index()),
        })
    }

    /// Makes sure `vals` holds value `id`: computed already, or a view of its base.
    fn ensure(
        &self,
        gpu: &dyn GpuDevice,
        id: NodeId,
        vals: &mut [Option<DeviceTensor>],
        bound: &Bindings,
        ctx: &mut RunCtx,
    ) -> Result<(), CodegenError> {
        if vals[id.index()].is_some() {
            return Ok(());
        }
        let n = self.graph.node(id);
        let base = match (n.op.is_view(), n.args.first()) {
            (true, Some(kiln_ir::Arg::Value(v))) => *v,
            _ => {
                return Err(CodegenError::Plan {
                    plan: self.name.clone(),
                    reason: format!("value %{} is used before a kernel computes it", id.index()),
                })
            }
        };
        self.ensure(gpu, base, vals, bound, ctx)?;
        let x = vals[base.index()].clone().expect("ensured above");
        let rank = x.shape().len();
        let norm = |d: i64| -> usize {
            if d < 0 {
                (d + rank as i64) as usize
            } else {
                d as usize
            }
        };
        let shape = self.shape_of(id, bound)?;
        let layout = |e: super::device_tensor::LayoutError| CodegenError::Plan {
            plan: self.name.clone(),
            reason: format!("value %{}: {e}", id.index()),
        };
        let t = match &n.op {
            Op::Reshape { .. } => match x.reshape(&shape) {
                Some(t) => t,
                None => {
                    let c = self.contiguous(gpu, &x, "reshape", ctx)?;
                    c.reshape(&shape)
                        .expect("a contiguous tensor reshapes as a view")
                }
            },
            Op::Permute { dims } => x.permute(dims).map_err(layout)?,
            Op::Transpose { dim0, dim1 } => {
                x.transpose(norm(*dim0), norm(*dim1)).map_err(layout)?
            }
            Op::Expand { .. } => x.expand(&shape).map_err(layout)?,
            Op::Slice {
                dim,
                start,
                end,
                step,
            } => x.slice(norm(*dim), *start, *end, *step).map_err(layout)?,
            other => {
                return Err(CodegenError::Plan {
                    plan: self.name.clone(),
                    reason: format!("{} is not a view", other.name()),
                })
            }
        };
        vals[id.index()] = Some(t);
        Ok(())
    }

    /// A row-major copy of `x`, made through the host (see the module doc).
    fn contiguous(
        &self,
        gpu: &dyn GpuDevice,
        x: &DeviceTensor,
        why: &str,
        ctx: &mut RunCtx,
    ) -> Result<DeviceTensor, CodegenError> {
        if ctx.capture.is_some() {
            return Err(CodegenError::Plan {
                plan: self.name.clone(),
                reason: format!(
                    "cannot be recorded as a graph: a {why} operand of shape {:?} strides {:?} \
                     needs a copy through the host",
                    x.shape(),
                    x.strides()
                ),
            });
        }
        tracing::warn!(
            target: "kiln::code",
            "plan {}: a {why} operand of shape {:?} strides {:?} is copied through the host",
            self.name,
            x.shape(),
            x.strides()
        );
        let e = |e| self.gpu_err(why, e);
        let host = x.download(gpu).map_err(e)?;
        DeviceTensor::upload(gpu, &host).map_err(e)
    }

    fn run_step(
        &self,
        gpu: &dyn GpuDevice,
        step: &Step,
        ins: &[DeviceTensor],
        bound: &Bindings,
        ctx: &mut RunCtx,
    ) -> Result<Vec<DeviceTensor>, CodegenError> {
        let mut outs = Vec::with_capacity(step.outputs.len());
        let dev = |e| self.gpu_err(&step.name, e);
        match &step.kind {
            CudaStepKind::Nest(k) => {
                for o in &step.outputs {
                    let dtype = self.graph.node(*o).ty.dtype;
                    outs.push(
                        DeviceTensor::empty(gpu, dtype, &self.shape_of(*o, bound)?).map_err(dev)?,
                    );
                }
                let all: Vec<&DeviceTensor> = ins.iter().chain(&outs).collect();
                launch_nest(gpu, k, &all, bound).map_err(dev)?;
            }
            CudaStepKind::Host { body, reason } => {
                if ctx.capture.is_some() {
                    return Err(CodegenError::Plan {
                        plan: self.name.clone(),
                        reason: format!(
                            "cannot be recorded as a graph: kernel {} runs on the host ({reason})",
                            step.name
                        ),
                    });
                }
                let host: Vec<CpuTensor> = ins
                    .iter()
                    .map(|t| t.download(gpu))
                    .collect::<Result<_, _>>()
                    .map_err(dev)?;
                let refs: Vec<&CpuTensor> = host.iter().collect();
                for t in run_graph(body, &refs, bound)? {
                    outs.push(DeviceTensor::upload(gpu, &t).map_err(dev)?);
                }
            }
            CudaStepKind::Gather { kernel, operands } => {
                let o = step.outputs[0];
                let dtype = self.graph.node(o).ty.dtype;
                let out =
                    DeviceTensor::empty(gpu, dtype, &self.shape_of(o, bound)?).map_err(dev)?;
                let (x, idx) = (&ins[operands.x], &ins[operands.idx]);
                self.gather(gpu, &step.name, kernel, operands.dim, x, idx, &out, ctx)?;
                outs.push(out);
            }
            CudaStepKind::Matmul {
                a,
                b,
                mm_is_output,
                epilogue,
            } => {
                let product = self.gemm(gpu, &step.name, &ins[*a], &ins[*b], ctx)?;
                ctx.keep(&product);
                if *mm_is_output {
                    outs.push(product.clone());
                }
                if let Some((k, map)) = epilogue {
                    let first = outs.len();
                    for o in &step.outputs[first..] {
                        let dtype = self.graph.node(*o).ty.dtype;
                        outs.push(
                            DeviceTensor::empty(gpu, dtype, &self.shape_of(*o, bound)?)
                                .map_err(dev)?,
                        );
                    }
                    let mut all: Vec<&DeviceTensor> = map
                        .iter()
                        .map(|m| match m {
                            None => &product,
                            Some(p) => &ins[*p],
                        })
                        .collect();
                    all.extend(&outs[first..]);
                    launch_nest(gpu, k, &all, bound).map_err(dev)?;
                }
            }
        }
        Ok(outs)
    }

    /// `out = index_select(x, dim, idx)` by the gather kernel (its argument layout is in
    /// [`super::gather`]); an index out of range is an error naming it (the launch's error
    /// cell is read back, which waits for the queued work).
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &self,
        gpu: &dyn GpuDevice,
        name: &str,
        kernel: &CudaKernel,
        dim: usize,
        x: &DeviceTensor,
        idx: &DeviceTensor,
        out: &DeviceTensor,
        ctx: &mut RunCtx,
    ) -> Result<(), CodegenError> {
        let dev = |e| self.gpu_err(name, e);
        let shape = x.shape();
        let (outer, inner): (usize, usize) = (
            shape[..dim].iter().product(),
            shape[dim + 1..].iter().product(),
        );
        let (n, dsize) = (idx.numel(), shape[dim]);
        if outer * n * inner == 0 {
            return Ok(());
        }
        // x's dims before and after `dim` must each fold into one stride
        let x = match (
            folded_stride(x, 0..dim),
            folded_stride(x, dim + 1..shape.len()),
        ) {
            (Some(_), Some(_)) => x.clone(),
            _ => self.contiguous(gpu, x, name, ctx)?,
        };
        // the indices in row-major order, one stride apart: a 1-d tensor as it is, a
        // contiguous one of any rank with stride 1, anything else copied first
        let (idx, idx_stride) = match idx.shape() {
            [] => (idx.clone(), 1),
            [_] => (idx.clone(), idx.strides()[0] as i64),
            _ if idx.is_contiguous() => (idx.clone(), 1),
            _ => (self.contiguous(gpu, idx, name, ctx)?, 1),
        };
        ctx.keep(&x);
        ctx.keep(&idx);
        let (so, si) = (
            folded_stride(&x, 0..dim).expect("checked or copied"),
            folded_stride(&x, dim + 1..shape.len()).expect("checked or copied"),
        );
        let err = DeviceTensor::empty(gpu, kiln_ir::DType::I64, &[2]).map_err(dev)?;
        ctx.keep(&err);
        gpu.zero(err.ptr(), 16).map_err(dev)?;
        let sizes = [outer as i64, n as i64, inner as i64, dsize as i64];
        let strides = vec![
            vec![so, 0, si, x.strides()[dim] as i64],
            vec![0, idx_stride, 0, 0],
            vec![(n * inner) as i64, inner as i64, 1, 0],
            vec![0; 4],
        ];
        let ptrs = [x.ptr(), idx.ptr(), out.ptr(), err.ptr()];
        gpu.launch(&KernelLaunch {
            kernel,
            grid: grid_for(kernel, &sizes),
            block: kernel.block_threads,
            ptrs: &ptrs,
            sizes: &sizes,
            strides: &strides,
        })
        .map_err(dev)?;
        let check = GatherCheck {
            kernel: name.to_string(),
            cell: err,
            dim,
            shape: shape.to_vec(),
        };
        match ctx.capture.as_mut() {
            // read after each replay
            Some(c) => {
                c.checks.push(check);
                Ok(())
            }
            None => check.verify(gpu, &self.name),
        }
    }

    /// `a @ b` (torch.matmul's broadcasting and 1-d rules) into a fresh contiguous tensor.
    fn gemm(
        &self,
        gpu: &dyn GpuDevice,
        kernel: &str,
        a: &DeviceTensor,
        b: &DeviceTensor,
        ctx: &mut RunCtx,
    ) -> Result<DeviceTensor, CodegenError> {
        let dev = |e| self.gpu_err(kernel, e);
        let out_shape = matmul_shape(a.shape(), b.shape());
        // 1-d operands as matrices: [K] -> [1, K] on the left, [K, 1] on the right
        let a2 = if a.shape().len() == 1 {
            a.reshape(&[1, a.shape()[0]])
                .expect("a 1-d tensor views as a row")
        } else {
            a.clone()
        };
        let b2 = if b.shape().len() == 1 {
            b.reshape(&[b.shape()[0], 1])
                .expect("a 1-d tensor views as a column")
        } else {
            b.clone()
        };
        let (ra, rb) = (a2.shape().len(), b2.shape().len());
        let (m, k, n) = (a2.shape()[ra - 2], a2.shape()[ra - 1], b2.shape()[rb - 1]);
        let batch_shape: Vec<usize> = {
            let r = (ra - 2).max(rb - 2);
            let mut s = vec![1usize; r];
            for t in [&a2, &b2] {
                let bt = &t.shape()[..t.shape().len() - 2];
                for (i, &x) in bt.iter().enumerate() {
                    if x != 1 {
                        s[r - bt.len() + i] = x;
                    }
                }
            }
            s
        };
        let batch: usize = batch_shape.iter().product();
        let full = |t: &DeviceTensor, rows: usize, cols: usize| {
            let mut s = batch_shape.clone();
            s.extend([rows, cols]);
            t.expand(&s).map_err(|e| CodegenError::Plan {
                plan: self.name.clone(),
                reason: format!("kernel {kernel}: {e}"),
            })
        };
        let a_op = self.operand(gpu, kernel, full(&a2, m, k)?, ctx)?;
        let b_op = self.operand(gpu, kernel, full(&b2, k, n)?, ctx)?;
        let mut c_shape = batch_shape.clone();
        c_shape.extend([m, n]);
        let c = DeviceTensor::empty(gpu, kiln_ir::DType::F32, &c_shape).map_err(dev)?;
        if batch > 0 && m > 0 && n > 0 {
            gpu.gemm(&Gemm {
                m,
                n,
                k,
                batch,
                a: a_op.0,
                b: b_op.0,
                c: c.ptr(),
                ldc: n as i64,
                batch_stride_c: (m * n) as i64,
            })
            .map_err(dev)?;
        }
        drop((a_op.1, b_op.1));
        Ok(c.reshape(&out_shape)
            .expect("a contiguous product reshapes as a view"))
    }

    /// A GEMM operand for `t` (`[batch..., rows, cols]`), copied row-major first when its
    /// layout is not one cuBLAS reads; the copy (if any) is returned to keep it alive.
    fn operand(
        &self,
        gpu: &dyn GpuDevice,
        kernel: &str,
        t: DeviceTensor,
        ctx: &mut RunCtx,
    ) -> Result<(GemmOperand, Option<DeviceTensor>), CodegenError> {
        if let Some(op) = gemm_operand(&t) {
            ctx.keep(&t);
            return Ok((op, None));
        }
        let c = self.contiguous(gpu, &t, kernel, ctx)?;
        let op = gemm_operand(&c).expect("a row-major batch is a GEMM operand");
        Ok((op, Some(c)))
    }
}

/// How a group runs on the device: a generated kernel, a gather, or a GEMM and its
/// epilogue; else why it cannot.
fn device_kind(body: &Graph, is_mm: bool) -> Result<CudaStepKind, String> {
    if is_mm {
        let split = split_matmul_group(body).map_err(|e| e.reason)?;
        let epilogue = match split.epilogue {
            None => None,
            Some(e) => Some((NestLaunch::new(&e.graph)?, e.inputs)),
        };
        return Ok(CudaStepKind::Matmul {
            a: split.a,
            b: split.b,
            mm_is_output: split.mm_is_output,
            epilogue,
        });
    }
    match NestLaunch::new(body) {
        Ok(n) => Ok(CudaStepKind::Nest(n)),
        Err(nest_reason) => match (gather_kernel(body), gather_operands(body)) {
            (Ok(kernel), Some(operands)) => Ok(CudaStepKind::Gather { kernel, operands }),
            _ => Err(nest_reason),
        },
    }
}

/// The state of one run: when recording a graph, what it must keep alive and check.
#[derive(Default)]
struct RunCtx {
    capture: Option<Capture>,
}

#[derive(Default)]
struct Capture {
    /// every tensor the recorded work reads or writes (their memory must outlive the graph)
    keep: Vec<DeviceTensor>,
    /// the gathers' error cells, read after each replay
    checks: Vec<GatherCheck>,
}

impl RunCtx {
    /// Keeps `t`'s memory for the recorded graph (nothing when not recording).
    fn keep(&mut self, t: &DeviceTensor) {
        if let Some(c) = self.capture.as_mut() {
            c.keep.push(t.clone());
        }
    }
}
