//! Reading and copying a tensor's elements: its values in row-major order, row-major and
//! converted copies, and the densified copy strided kernels read. Apart from `tensor.rs`
//! so that the tensor type does not depend on the iteration and copy kernels that use it.

use crate::element::{with_dtype, Element, Kern};
use crate::error::RuntimeError;
use crate::iter;
use crate::tensor::CpuTensor;
use kiln_ir::DType;
use std::fmt;

impl CpuTensor {
    /// The values as f64, in logical row-major order, whatever the layout.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_dtype!(self.dtype, T => iter::gather::<T, f64>(self, |x: T| x.to_f64()))
    }

    /// The values in logical row-major order; `T` must be the tensor's element type.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, RuntimeError> {
        if T::DTYPE != self.dtype {
            return Err(RuntimeError::DTypeMismatch {
                expected: T::DTYPE,
                got: self.dtype,
            });
        }
        Ok(iter::gather::<T, T>(self, |x: T| x))
    }

    /// Writes the values in logical row-major order into `out`, which must hold exactly
    /// `self.numel()` elements of the tensor's element type `T` (one pass, any layout).
    pub fn copy_to_slice<T: Element>(&self, out: &mut [T]) -> Result<(), RuntimeError> {
        if T::DTYPE != self.dtype {
            return Err(RuntimeError::DTypeMismatch {
                expected: T::DTYPE,
                got: self.dtype,
            });
        }
        if out.len() != self.numel() {
            return Err(RuntimeError::ShapeMismatch {
                op: "copy_to_slice",
                shape: self.shape().to_vec(),
                reason: format!(
                    "a slice of {} elements does not hold {}",
                    out.len(),
                    self.numel()
                ),
            });
        }
        // SAFETY: MaybeUninit<T> has T's layout, and map1_into only writes initialised values
        // (T is Copy, so nothing is dropped when an element is overwritten).
        let out = unsafe { &mut *(out as *mut [T] as *mut [std::mem::MaybeUninit<T>]) };
        iter::map1_into(self, out, iter::GRAIN_CHEAP, &|x: T| x);
        Ok(())
    }

    /// A row-major copy of this tensor when a loop along its last dim would read scattered
    /// memory (that dim's stride is over 16 elements, and the tensor has at least 4096
    /// elements and no broadcast dims), so that a blocked copy first is cheaper than the
    /// scattered reads; `None` otherwise. The eager kernels use the same rule; generated
    /// kernels ask before reading an input along its last dim.
    pub fn densified(&self) -> Option<CpuTensor> {
        let last = self.rank().checked_sub(1)?;
        if self.shape[last] <= 1 || self.strides.contains(&0) {
            return None;
        }
        crate::iter::densify(self, self.strides[last])
    }

    /// This tensor if contiguous, else a contiguous copy (for kernels that read rows).
    pub(crate) fn contiguous(&self) -> CpuTensor {
        if self.is_contiguous() {
            self.clone()
        } else {
            self.copy_as(self.dtype)
        }
    }

    /// A fresh contiguous copy converted to `dtype` (cast semantics).
    pub(crate) fn copy_as(&self, dtype: DType) -> CpuTensor {
        if dtype == self.dtype {
            let fast = with_dtype!(self.dtype, T => crate::transpose::transposed_copy::<T>(self));
            if let Some(t) = fast {
                return t;
            }
        }
        with_dtype!(self.dtype, A => with_dtype!(dtype, B => iter::map1::<A, B>(self, 1 << 15, |x: A| x.cast::<B>())))
    }

    /// This tensor if it already has `dtype`, else a converted copy (for reading only).
    pub(crate) fn to_dtype(&self, dtype: DType) -> CpuTensor {
        if self.dtype == dtype {
            self.clone()
        } else {
            self.copy_as(dtype)
        }
    }
}

impl fmt::Debug for CpuTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuTensor({}{:?}", self.dtype, self.shape.as_slice())?;
        if !self.is_contiguous() || self.offset != 0 {
            write!(
                f,
                ", strides {:?}, offset {}",
                self.strides.as_slice(),
                self.offset
            )?;
        }
        let n = self.numel();
        if n <= 16 {
            write!(f, ", {:?})", self.to_f64_vec())
        } else {
            // Only the first row-major elements: view the leading ones without copying all.
            let head = crate::kernels::layout::view_strides(&self.shape, &self.strides, &[n])
                .map(|st| self.view_unchecked(&[8], &st, self.offset).to_f64_vec());
            match head {
                Some(v) => write!(f, ", {v:?} ... ({n} values))"),
                None => write!(f, ", {n} values)"),
            }
        }
    }
}
