//! `CpuTensor`: a strided view (shape, strides in elements, offset) of a shared [`Storage`].

use crate::element::{with_dtype, Element, Kern};
use crate::error::RuntimeError;
use crate::storage::Storage;
use kiln_ir::{DType, Shape, TensorType};
use smallvec::SmallVec;
use std::sync::Arc;

/// Sizes of a tensor's dims (rank ≤ 6 inline).
pub(crate) type Dims = SmallVec<[usize; 6]>;
/// Strides of a tensor's dims, in elements.
pub(crate) type Strides = SmallVec<[isize; 6]>;

/// A tensor on the CPU: a strided view of a shared, reference-counted [`Storage`].
/// Cloning is cheap (the storage is shared); views made by reshape, permute, transpose,
/// expand and slice share storage with their source.
#[derive(Clone)]
pub struct CpuTensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) dtype: DType,
    pub(crate) shape: Dims,
    pub(crate) strides: Strides,
    pub(crate) offset: usize,
}

/// Row-major (contiguous) strides of `shape`, in elements (dims of size 0 count as 1).
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut s: Strides = SmallVec::from_elem(0, shape.len());
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1) as isize);
    }
    s
}

/// The element count of `shape`, or `None` if it overflows.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

impl CpuTensor {
    /// A contiguous tensor over a fresh storage of exactly `shape`'s element count.
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> CpuTensor {
        debug_assert_eq!(storage.len(), shape.iter().product::<usize>());
        CpuTensor {
            dtype: storage.dtype(),
            storage: Arc::new(storage),
            shape: shape.into(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// A view of this tensor's storage with a layout already known to be in bounds.
    pub(crate) fn view_unchecked(
        &self,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> CpuTensor {
        debug_assert!(self.layout_in_bounds(shape, strides, offset));
        CpuTensor {
            storage: self.storage.clone(),
            dtype: self.dtype,
            shape: shape.into(),
            strides: strides.into(),
            offset,
        }
    }

    /// A tensor of `values` converted to `dtype` (cast semantics, as `DType::round_f64`).
    pub fn from_f64(
        values: &[f64],
        shape: &[usize],
        dtype: DType,
    ) -> Result<CpuTensor, RuntimeError> {
        check_len("from_f64", values.len(), shape)?;
        Ok(with_dtype!(dtype, T => {
            let s = Storage::build::<T>(values.len(), |out| {
                for (o, &v) in out.iter_mut().zip(values) {
                    o.write(T::from_f64(v));
                }
            });
            CpuTensor::from_storage(s, shape)
        }))
    }

    /// A tensor holding a copy of `data` (row-major) with the given shape.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<CpuTensor, RuntimeError> {
        Self::from_slice_mapped(data, shape, |v| v)
    }

    /// A tensor of `f(x)` for each `x` of `data` (row-major) with the given shape, written
    /// in one pass (a copy that also scales, for instance).
    pub fn from_slice_mapped<T: Element>(
        data: &[T],
        shape: &[usize],
        f: impl Fn(T) -> T,
    ) -> Result<CpuTensor, RuntimeError> {
        check_len("from_slice", data.len(), shape)?;
        let s = Storage::build::<T>(data.len(), |out| {
            for (o, &v) in out.iter_mut().zip(data) {
                o.write(f(v));
            }
        });
        Ok(CpuTensor::from_storage(s, shape))
    }

    /// A 0-d tensor holding `value` converted to `dtype`.
    pub(crate) fn scalar(value: kiln_ir::Scalar, dtype: DType) -> CpuTensor {
        with_dtype!(dtype, T => {
            let s = Storage::build::<T>(1, |out| {
                out[0].write(T::from_scalar(value));
            });
            CpuTensor::from_storage(s, &[])
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The sizes of the dims.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The strides of the dims, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// The offset of element `[0, ..., 0]` in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// True when the layout is row-major without gaps (strides of size-1 dims ignored).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1isize;
        for i in (0..self.rank()).rev() {
            if self.shape[i] != 1 {
                if self.strides[i] != expected {
                    return false;
                }
                expected *= self.shape[i] as isize;
            }
        }
        true
    }

    /// The tensor's type (all dims constant).
    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype, Shape::of(&self.shape))
    }

    /// The storage's version counter (bumped by every in-place write).
    pub fn version(&self) -> u64 {
        self.storage.version()
    }

    /// True when both tensors view the same storage.
    pub fn shares_storage(&self, other: &CpuTensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The shared storage.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// A view of the same storage with another layout; every reachable element must lie
    /// inside the storage.
    pub fn with_layout(
        &self,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<CpuTensor, RuntimeError> {
        let err = |reason: &str| RuntimeError::Layout {
            op: "with_layout",
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
            reason: reason.to_string(),
        };
        if shape.len() != strides.len() {
            return Err(err("shape and strides have different lengths"));
        }
        if checked_numel(shape).is_none() {
            return Err(err("the element count overflows"));
        }
        if !self.layout_in_bounds(shape, strides, offset) {
            return Err(err(&format!(
                "reaches outside the storage of {} elements",
                self.storage.len()
            )));
        }
        Ok(self.view_unchecked(shape, strides, offset))
    }

    /// True when every element the layout reaches lies inside the storage.
    fn layout_in_bounds(&self, shape: &[usize], strides: &[isize], offset: usize) -> bool {
        let len = self.storage.len() as i128;
        if shape.contains(&0) {
            return offset as i128 <= len;
        }
        let (mut lo, mut hi) = (offset as i128, offset as i128);
        for (&n, &s) in shape.iter().zip(strides) {
            let span = (n as i128 - 1) * s as i128;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        lo >= 0 && hi < len
    }

    /// True when no two index tuples reach the same element (safe to write through).
    pub(crate) fn is_non_overlapping(&self) -> bool {
        if self.numel() <= 1 {
            return true;
        }
        let mut dims: SmallVec<[(usize, usize); 6]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n > 1)
            .map(|(&n, &s)| (n, s.unsigned_abs()))
            .collect();
        dims.sort_by_key(|&(_, s)| s);
        let mut reach = 0usize; // the largest offset the smaller-stride dims reach
        for (n, s) in dims {
            if s <= reach {
                return false;
            }
            reach = reach.saturating_add((n - 1).saturating_mul(s));
        }
        true
    }

    /// Internal: the storage offset as isize (for stride arithmetic).
    pub(crate) fn ioffset(&self) -> isize {
        self.offset as isize
    }
}

fn check_len(op: &'static str, len: usize, shape: &[usize]) -> Result<(), RuntimeError> {
    match checked_numel(shape) {
        Some(n) if n == len => Ok(()),
        Some(n) => Err(RuntimeError::ShapeMismatch {
            op,
            shape: shape.to_vec(),
            reason: format!("{len} values do not fill {n} elements"),
        }),
        None => Err(RuntimeError::ShapeMismatch {
            op,
            shape: shape.to_vec(),
            reason: "the element count overflows".into(),
        }),
    }
}

/// Reads one element as a scalar (for 0-d operands such as `fill_` values).
pub(crate) fn item_scalar(t: &CpuTensor) -> kiln_ir::Scalar {
    with_dtype!(t.dtype, T => {
        let g = t.storage.guard();
        g.slice::<T>()[t.offset].to_scalar()
    })
}
