//! [`Tensor`]: an eager, strided tensor on the CPU, and the one place ops are dispatched.

use crate::error::{invalid, Result};
use crate::Operand;
use kiln_ir::{DType, Op, Scalar, Shape, TensorType};
use kiln_runtime::{execute, CpuTensor, EagerArg, Element};

/// A tensor. Cloning is cheap: clones share storage (like PyTorch's tensors); views
/// (`reshape`, `permute`, `transpose`, `expand`, `narrow`, `slice`) share it too. In-place
/// ops (`copy_`, `fill_`, `add_`, `mul_`) write through to every tensor sharing the storage
/// and bump its version counter.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) inner: CpuTensor,
}

impl Tensor {
    /// Wraps a runtime tensor.
    pub fn from_cpu(inner: CpuTensor) -> Tensor {
        Tensor { inner }
    }

    /// The runtime tensor underneath.
    pub fn as_cpu(&self) -> &CpuTensor {
        &self.inner
    }

    /// Applies `op` to operands eagerly: the single dispatch point of every tensor op.
    pub(crate) fn apply(op: &Op, args: &[Operand<'_>]) -> Result<Tensor> {
        let eager: smallvec::SmallVec<[EagerArg<'_>; 3]> = args
            .iter()
            .map(|a| match a {
                Operand::Tensor(t) => EagerArg::Tensor(&t.inner),
                Operand::Scalar(s) => EagerArg::Scalar(*s),
            })
            .collect();
        Ok(Tensor {
            inner: execute(op, &eager)?,
        })
    }

    /// Applies `op` with `self` as the only operand.
    pub(crate) fn apply1(&self, op: Op) -> Result<Tensor> {
        Tensor::apply(&op, &[Operand::Tensor(self)])
    }

    // ---- creation ----

    /// A tensor from row-major data of a Rust element type (`f32`, `f64`, `half::f16`,
    /// `half::bf16`, `i32`, `i64`, `bool`).
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Ok(Tensor {
            inner: CpuTensor::from_slice(&data, shape)?,
        })
    }

    /// A tensor of `dtype` from f64 values (converted as a cast would).
    pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        Ok(Tensor {
            inner: CpuTensor::from_f64(values, shape, dtype)?,
        })
    }

    /// A 0-d f32 tensor.
    pub fn scalar(v: f32) -> Tensor {
        Tensor::full(&[], v, DType::F32).expect("a 0-d full never fails")
    }

    /// A tensor of `shape` filled with `value`.
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
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 0i64, dtype)
    }

    /// Ones.
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1i64, dtype)
    }

    /// `start, start+step, ...` below `end` (as `torch.arange`).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        Tensor::apply(
            &Op::Arange {
                start,
                end,
                step,
                dtype,
            },
            &[],
        )
    }

    /// Uniform samples in [0, 1); the same `seed` gives the same tensor everywhere.
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
        self.inner.dtype()
    }

    /// The sizes of the dims.
    pub fn shape(&self) -> &[usize] {
        self.inner.shape()
    }

    /// The strides of the dims, in elements.
    pub fn strides(&self) -> &[isize] {
        self.inner.strides()
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.inner.numel()
    }

    /// True when the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.inner.is_contiguous()
    }

    /// The dtype and shape as an IR type.
    pub fn tensor_type(&self) -> TensorType {
        self.inner.tensor_type()
    }

    /// The storage's version counter: it grows with every in-place write.
    pub fn version(&self) -> u64 {
        self.inner.version()
    }

    /// True when both tensors are views of the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.inner.shares_storage(&other.inner)
    }

    // ---- reading values ----

    /// The elements in row-major order as `T`, which must be the tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.inner.to_vec::<T>()?)
    }

    /// The elements in row-major order, converted to f64.
    pub fn to_vec_f64(&self) -> Vec<f64> {
        self.inner.to_f64_vec()
    }

    /// The value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(invalid(
                "item",
                self.shape(),
                "only a tensor with one element has an item",
            ));
        }
        Ok(self.inner.to_f64_vec()[0])
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
