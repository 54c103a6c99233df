//! [`Tensor`]: an eager, strided tensor on the CPU, and the one place ops are dispatched.
//!
//! Inside a function being traced by [`crate::compile`], a tensor may be *lazy*: a value of
//! the graph being captured, with a known dtype and shape but no data yet. Ops on it record
//! nodes instead of running; reading its values ends the graph (a graph break) and runs it.

use crate::compile::lazy::{self, LazyValue};
use crate::cuda_tensor::CudaValue;
use crate::error::{invalid, Result};
use crate::Operand;
use kiln_ir::{DType, Op, Scalar, Shape, TensorType};
use kiln_runtime::{execute, CpuTensor, EagerArg, Element};
use std::sync::Arc;

/// A tensor. Cloning is cheap: clones share storage (like PyTorch's tensors); views
/// (`reshape`, `permute`, `transpose`, `expand`, `narrow`, `slice`) share it too. In-place
/// ops (`copy_`, `fill_`, `add_`, `mul_`) write through to every tensor sharing the storage
/// and bump its version counter.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) repr: Repr,
    /// autograd: whether it requires grad, its gradient, the node that made it
    pub(crate) grad_meta: Option<Arc<crate::autograd::Meta>>,
}

/// What a tensor holds: data, or a value of a graph being traced.
#[derive(Clone)]
pub(crate) enum Repr {
    /// a tensor with data
    Real(CpuTensor),
    /// a traced value (its data appears once the graph that computes it has run)
    Lazy(Arc<LazyValue>),
    /// a tensor in CUDA device memory (see [`crate::cuda_tensor`])
    Cuda(Arc<CudaValue>),
}

impl Tensor {
    /// Wraps a runtime tensor.
    pub fn from_cpu(inner: CpuTensor) -> Tensor {
        Tensor {
            repr: Repr::Real(inner),
            grad_meta: None,
        }
    }

    pub(crate) fn lazy(v: Arc<LazyValue>) -> Tensor {
        Tensor {
            repr: Repr::Lazy(v),
            grad_meta: None,
        }
    }

    /// The runtime tensor underneath. Inside a traced function this reads the tensor's
    /// values, so it ends the current graph (a graph break).
    #[track_caller]
    pub fn as_cpu(&self) -> Result<&CpuTensor> {
        self.read("as_cpu")
    }

    /// The data of a tensor whose value is known (a real tensor or a lazy one whose graph
    /// has run), without counting as a read of values.
    pub(crate) fn real(&self) -> Result<&CpuTensor> {
        match &self.repr {
            Repr::Real(t) => Ok(t),
            Repr::Lazy(v) => v.value(),
            Repr::Cuda(v) => v.host(),
        }
    }

    /// Reads the tensor's values on behalf of `op`: inside a trace this is a graph break.
    #[track_caller]
    pub(crate) fn read(&self, op: &'static str) -> Result<&CpuTensor> {
        lazy::before_read(op, std::panic::Location::caller())?;
        self.real()
    }

    /// Applies `op` to operands: the single dispatch point of every tensor op. Eagerly
    /// outside a trace; inside one, it records a node.
    #[track_caller]
    pub(crate) fn apply(op: &Op, args: &[Operand<'_>]) -> Result<Tensor> {
        if let Some(tracer) = lazy::current() {
            return tracer.record(op, args, std::panic::Location::caller());
        }
        Tensor::apply_eager(op, args)
    }

    /// Applies any op of the table to operands: the generic form of the named methods
    /// (`x.exp()` is `Tensor::call(&Op::Unary(UnaryOp::Exp), &[(&x).into()])`), for tools
    /// that iterate the op table. Eager outside a compiled function (and recorded for
    /// autograd), a node inside one; operands are checked by the op's type rule.
    #[track_caller]
    pub fn call(op: &Op, args: &[Operand<'_>]) -> Result<Tensor> {
        Tensor::apply(op, args)
    }

    /// Applies `op` eagerly, whatever the thread is doing (on the CUDA device when an
    /// operand is there).
    pub(crate) fn apply_eager(op: &Op, args: &[Operand<'_>]) -> Result<Tensor> {
        if args
            .iter()
            .any(|a| matches!(a, Operand::Tensor(t) if t.is_cuda()))
        {
            return crate::cuda_tensor::apply(op, args);
        }
        let mut eager: smallvec::SmallVec<[EagerArg<'_>; 3]> = smallvec::SmallVec::new();
        for a in args {
            eager.push(match a {
                Operand::Tensor(t) => EagerArg::Tensor(t.real()?),
                Operand::Scalar(s) => EagerArg::Scalar(*s),
            });
        }
        let out = if crate::fuzz::noise::active() {
            crate::fuzz::noise::execute_perturbed(op, &eager, execute)?
        } else {
            execute(op, &eager)?
        };
        Ok(crate::autograd::record(op, args, Tensor::from_cpu(out)))
    }

    /// Applies `op` with `self` as the only operand.
    #[track_caller]
    pub(crate) fn apply1(&self, op: Op) -> Result<Tensor> {
        Tensor::apply(&op, &[Operand::Tensor(self)])
    }

    // ---- creation ----

    /// A tensor from row-major data of a Rust element type (`f32`, `f64`, `half::f16`,
    /// `half::bf16`, `i32`, `i64`, `bool`).
    /// Inside a traced function the values become a constant of the graph.
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let t = CpuTensor::from_slice(&data, shape)
            .map_err(|e| crate::Error::from(e).within("from_vec"))?;
        Tensor::constant(t)
    }

    /// A tensor made from data inside a trace becomes a `from_vec` node (a literal of the
    /// graph), so that a cached graph does not keep one call's tensor as a parameter.
    #[track_caller]
    fn constant(t: CpuTensor) -> Result<Tensor> {
        if lazy::current().is_some() {
            let op = Op::FromVec {
                values: t.to_f64_vec().into(),
                shape: Shape::of(t.shape()),
                dtype: t.dtype(),
            };
            return Tensor::apply(&op, &[]);
        }
        Ok(Tensor::from_cpu(t))
    }

    /// A tensor of `dtype` from f64 values (converted as a cast would).
    #[track_caller]
    pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        // as `torch.tensor` refuses them
        if let Some(v) = values.iter().find(|&&v| !dtype.holds_element(v)) {
            return Err(crate::error::invalid(
                "from_f64",
                shape,
                format!(
                    "value {} cannot be converted to type {dtype} without overflow",
                    kiln_ir::format_float(*v)
                ),
            ));
        }
        Tensor::constant(CpuTensor::from_f64(values, shape, dtype)?)
    }

    /// A 0-d f32 tensor.
    pub fn scalar(v: f32) -> Tensor {
        Tensor::full(&[], v, DType::F32).expect("a 0-d full never fails")
    }

    /// A tensor of `shape` filled with `value`.
    #[track_caller]
    pub fn full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        Tensor::apply(
            &Op::Full {
                shape: Shape::of(shape),
                value: value.into(),
                dtype,
            },
            &[],
        )
    }

    /// Zeros.
    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 0i64, dtype).map_err(|e| e.within("zeros"))
    }

    /// Ones.
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1i64, dtype).map_err(|e| e.within("ones"))
    }

    /// `start, start+step, ...` below `end` (as `torch.arange`).
    #[track_caller]
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        Tensor::apply(
            &Op::Arange {
                start: start.into(),
                end: end.into(),
                step: step.into(),
                dtype,
            },
            &[],
        )
    }

    /// Uniform samples in [0, 1); the same `seed` gives the same tensor everywhere.
    #[track_caller]
    pub fn rand(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        Tensor::apply(
            &Op::Rand {
                shape: Shape::of(shape),
                dtype,
                seed,
            },
            &[],
        )
    }

    /// Standard normal samples; the same `seed` gives the same tensor everywhere.
    #[track_caller]
    pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        Tensor::apply(
            &Op::Randn {
                shape: Shape::of(shape),
                dtype,
                seed,
            },
            &[],
        )
    }

    // ---- properties ----

    /// The element type.
    pub fn dtype(&self) -> DType {
        match &self.repr {
            Repr::Real(t) => t.dtype(),
            Repr::Lazy(v) => v.dtype,
            Repr::Cuda(v) => v.dev.dtype(),
        }
    }

    /// The sizes of the dims.
    pub fn shape(&self) -> &[usize] {
        match &self.repr {
            Repr::Real(t) => t.shape(),
            Repr::Lazy(v) => &v.shape,
            Repr::Cuda(v) => v.dev.shape(),
        }
    }

    /// The strides of the dims, in elements (a traced value reports row-major strides).
    pub fn strides(&self) -> &[isize] {
        match &self.repr {
            Repr::Real(t) => t.strides(),
            Repr::Lazy(v) => &v.strides,
            Repr::Cuda(v) => v.dev.strides(),
        }
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// True when the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        match &self.repr {
            Repr::Real(t) => t.is_contiguous(),
            Repr::Lazy(_) => true,
            Repr::Cuda(v) => v.dev.is_contiguous(),
        }
    }

    /// The dtype and shape as an IR type.
    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype(), Shape::of(self.shape()))
    }

    /// The storage's version counter: it grows with every in-place write (0 for a traced
    /// value and a CUDA tensor, which no in-place op writes).
    pub fn version(&self) -> u64 {
        match &self.repr {
            Repr::Real(t) => t.version(),
            Repr::Lazy(_) | Repr::Cuda(_) => 0,
        }
    }

    /// True when both tensors are views of the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Real(a), Repr::Real(b)) => a.shares_storage(b),
            (Repr::Lazy(a), Repr::Lazy(b)) => Arc::ptr_eq(a, b),
            (Repr::Cuda(a), Repr::Cuda(b)) => a.dev.shares_buffer(&b.dev),
            _ => false,
        }
    }

    /// True while this tensor is a traced value whose data is not computed yet.
    pub fn is_traced(&self) -> bool {
        matches!(&self.repr, Repr::Lazy(v) if v.value.get().is_none())
    }

    // ---- devices ----

    /// True when the tensor is in CUDA device memory.
    pub fn is_cuda(&self) -> bool {
        matches!(self.repr, Repr::Cuda(_))
    }

    /// A copy on the process's CUDA device (`KILN_CUDA_DEVICE`; see
    /// [`crate::cuda_tensor`]); ops on it run there. Reads the values (a graph break inside
    /// a traced function); an error where there is no device.
    #[track_caller]
    pub fn to_cuda(&self) -> Result<Tensor> {
        if self.is_cuda() {
            return Ok(self.clone());
        }
        crate::cuda_tensor::upload(self.read("to_cuda")?)
    }

    /// A copy in host memory (the tensor itself when it is there).
    #[track_caller]
    pub fn to_cpu(&self) -> Result<Tensor> {
        match &self.repr {
            Repr::Cuda(v) => Ok(Tensor::from_cpu(v.host()?.clone())),
            _ => Ok(self.clone()),
        }
    }

    // ---- reading values ----

    /// The elements in row-major order as `T`, which must be the tensor's dtype.
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read("to_vec")?
            .to_vec::<T>()
            .map_err(|e| crate::Error::from(e).within("to_vec"))
    }

    /// The elements in row-major order, converted to f64.
    #[track_caller]
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        Ok(self.read("to_vec_f64")?.to_f64_vec())
    }

    /// The value of a one-element tensor.
    #[track_caller]
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(invalid(
                "item",
                self.shape(),
                "only a tensor with one element has an item",
            ));
        }
        Ok(self.read("item")?.to_f64_vec()[0])
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
