//! CUDA tensors in eager mode. [`Tensor::to_cuda`] copies a tensor to the process's CUDA
//! device (`KILN_CUDA_DEVICE`: an ordinal, default 0, or `emulated`); ops on CUDA tensors
//! run there, each as a one-op [`CudaPlan`] (the same code generator the cuda backend
//! uses: a generated kernel, a gather, or cuBLAS plus an epilogue), compiled on first use
//! and cached by the op's graph text (its attributes, operand dtypes and shapes), as
//! PyTorch's eager CUDA kernels are compiled once per signature. Views are layouts over the
//! same device memory. An op the generator does not cover runs on the CPU (a host step of
//! its plan: operands copied to the host, the result copied back; logged once per
//! signature).
//!
//! Reading values (`to_vec`, `item`, `Display`) copies to the host once per tensor. All
//! tensor operands of an op must be on the same device. In-place ops and `compile` on CUDA
//! tensors are errors for now (a compiled function with `backend: cuda` takes host tensors
//! and copies them itself).

use crate::error::{invalid, Error, Result};
use crate::tensor::Repr;
use crate::{Operand, Tensor};
use kiln_codegen::cuda::device_tensor::DeviceTensor;
use kiln_codegen::cuda::gpu::GpuDevice;
use kiln_codegen::cuda::plan::CudaPlan;
use kiln_ir::{Arg, Graph, Op, Shape, TensorType};
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use kiln_runtime::{execute, CpuTensor, EagerArg};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A tensor in device memory, with its host copy once something has read its values.
pub(crate) struct CudaValue {
    pub(crate) dev: DeviceTensor,
    pub(crate) gpu: Arc<dyn GpuDevice>,
    host: OnceLock<CpuTensor>,
}

impl CudaValue {
    /// The values on the host (copied on first use).
    pub(crate) fn host(&self) -> Result<&CpuTensor> {
        if let Some(h) = self.host.get() {
            return Ok(h);
        }
        let h = self.dev.download(&*self.gpu).map_err(|e| Error::Device {
            function: "to_cpu".to_string(),
            reason: e.to_string(),
        })?;
        Ok(self.host.get_or_init(|| h))
    }
}

/// The process's CUDA device, or why there is none.
fn device() -> Result<Arc<dyn GpuDevice>> {
    kiln_codegen::cuda::select::default_gpu().map_err(|e| Error::Device {
        function: "to_cuda".to_string(),
        reason: e.to_string(),
    })
}

/// A CUDA tensor holding `dev`.
fn wrap(dev: DeviceTensor, gpu: Arc<dyn GpuDevice>) -> Tensor {
    Tensor {
        repr: Repr::Cuda(Arc::new(CudaValue {
            dev,
            gpu,
            host: OnceLock::new(),
        })),
        grad_meta: None,
    }
}

/// Copies host data to the device.
pub(crate) fn upload(t: &CpuTensor) -> Result<Tensor> {
    let gpu = device()?;
    let dev = DeviceTensor::upload(&*gpu, t).map_err(|e| Error::Device {
        function: "to_cuda".to_string(),
        reason: e.to_string(),
    })?;
    Ok(wrap(dev, gpu))
}

/// A compiled one-op program, or why the op runs on the CPU.
type CachedOp = std::result::Result<Arc<CudaPlan>, String>;

/// One-op plans kept at most (scalar operands are part of the key, so a loop over many
/// scalars would grow the cache without bound); past it the cache starts over.
const PLAN_CACHE_LIMIT: usize = 4096;

/// One-op plans by graph text.
fn plans() -> &'static Mutex<HashMap<String, CachedOp>> {
    static PLANS: OnceLock<Mutex<HashMap<String, CachedOp>>> = OnceLock::new();
    PLANS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The one-op graph of `op` on operands of these types, and its CUDA plan.
fn plan_for(op: &Op, args: &[Operand<'_>]) -> Result<(String, CachedOp)> {
    let mut g = Graph::new(format!("eager_{}", op.name()));
    let mut gargs = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        gargs.push(match a {
            Operand::Tensor(t) => {
                let ty = TensorType::new(t.dtype(), Shape::of(t.shape()));
                Arg::Value(
                    g.add_input(format!("x{i}"), ty)
                        .map_err(|e| invalid(op.name(), &[], e.to_string()))?,
                )
            }
            Operand::Scalar(s) => Arg::Scalar(*s),
        });
    }
    let shapes: Vec<Vec<usize>> = args
        .iter()
        .filter_map(|a| match a {
            Operand::Tensor(t) => Some(t.shape().to_vec()),
            Operand::Scalar(_) => None,
        })
        .collect();
    let first = shapes.first().cloned().unwrap_or_default();
    // a type error is the op's own error, as eager mode reports it
    let out = g
        .add_op(op.clone(), &gargs, None)
        .map_err(|e| invalid(op.name(), &first, e.to_string()))?;
    g.set_outputs(vec![out])
        .map_err(|e| invalid(op.name(), &first, e.to_string()))?;
    let key = g.to_string();
    if let Some(p) = plans().lock().get(&key) {
        return Ok((key, p.clone()));
    }
    let mut opts = PassOptions::default();
    opts.decompose.renders = kiln_codegen::cuda::renders;
    let built = run_passes(&g, &["decompose", "fuse"], &opts, false)
        .map_err(|e| e.to_string())
        .and_then(|opt| schedule(&opt).map_err(|e| e.to_string()))
        .and_then(|s| CudaPlan::new(&s).map_err(|e| e.to_string()))
        .map(Arc::new);
    if let Err(reason) = &built {
        tracing::warn!(target: "kiln::code", "{reason}; `{}` on CUDA tensors runs on the CPU", op.name());
    }
    let mut map = plans().lock();
    if map.len() >= PLAN_CACHE_LIMIT {
        // one-op plans are cheap to rebuild; the device keeps its compiled kernels
        map.clear();
    }
    map.insert(key.clone(), built.clone());
    Ok((key, built))
}

/// Runs `op` on operands of which at least one is a CUDA tensor (see the module doc).
pub(crate) fn apply(op: &Op, args: &[Operand<'_>]) -> Result<Tensor> {
    let mut devs: Vec<&CudaValue> = Vec::new();
    for a in args {
        if let Operand::Tensor(t) = a {
            match &t.repr {
                Repr::Cuda(v) => devs.push(v),
                _ => {
                    return Err(invalid(
                        op.name(),
                        t.shape(),
                        "expected all tensors on the same device, found a CUDA tensor and a \
                         CPU one (move one with to_cuda or to_cpu)",
                    ))
                }
            }
        }
    }
    let gpu = devs[0].gpu.clone();
    let (_, plan) = plan_for(op, args)?;
    match plan {
        Ok(plan) => {
            let ins: Vec<&DeviceTensor> = devs.iter().map(|v| &v.dev).collect();
            let mut outs = plan.run(&*gpu, &ins).map_err(|e| Error::Device {
                function: op.name().to_string(),
                reason: e.to_string(),
            })?;
            Ok(wrap(outs.remove(0), gpu))
        }
        Err(_) => {
            // on the CPU: operands to the host, the result back
            let mut eager = Vec::with_capacity(args.len());
            for a in args {
                eager.push(match a {
                    Operand::Tensor(t) => EagerArg::Tensor(t.real()?),
                    Operand::Scalar(s) => EagerArg::Scalar(*s),
                });
            }
            upload(&execute(op, &eager)?)
        }
    }
}
