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

    /// A fresh copy of this tensor laid out with `strides`, or `None` when `strides` is not
    /// a dense layout of its shape (row-major over some order of its dims, what
    /// `torch.empty_strided` gets for a permuted tensor; the strides of dims of size 1 are
    /// free) or the tensor is empty. The PyTorch bridge returns each output with the strides
    /// eager PyTorch gives it.
    pub fn copy_with_strides(&self, strides: &[isize]) -> Option<CpuTensor> {
        if strides.len() != self.rank() || self.numel() == 0 {
            return None;
        }
        // the dims that reach more than one element, outermost (largest stride) first
        let mut order: Vec<usize> = (0..self.rank()).filter(|&d| self.shape[d] > 1).collect();
        order.sort_by_key(|&d| std::cmp::Reverse(strides[d]));
        let mut step = 1isize;
        for &d in order.iter().rev() {
            if strides[d] != step {
                return None;
            }
            step = step.checked_mul(self.shape[d] as isize)?;
        }
        let shape: Vec<usize> = order.iter().map(|&d| self.shape[d]).collect();
        let read: Vec<isize> = order.iter().map(|&d| self.strides[d]).collect();
        // the elements in `order`'s row-major order, which `strides` reads back as `self`
        let packed = self
            .view_unchecked(&shape, &read, self.offset)
            .copy_as(self.dtype);
        Some(packed.view_unchecked(&self.shape, strides, 0))
    }

    /// A fresh copy of this tensor laid out densely in the order of its strides (its own
    /// layout when that is dense; row-major when it broadcasts or runs backwards): what
    /// `torch.clone` gives (`memory_format=torch.preserve_format`).
    pub fn clone_preserving_layout(&self) -> CpuTensor {
        if let Some(same) = self.copy_with_strides(&self.strides) {
            return same;
        }
        let reaches = |d: usize| self.shape[d] > 1;
        if (0..self.rank()).any(|d| reaches(d) && self.strides[d] <= 0) {
            return self.copy_as(self.dtype);
        }
        let mut order: Vec<usize> = (0..self.rank()).collect();
        order.sort_by_key(|&d| std::cmp::Reverse(self.strides[d]));
        let mut strides = vec![0isize; self.rank()];
        let mut step = 1isize;
        for &d in order.iter().rev() {
            strides[d] = step;
            step = step.saturating_mul(self.shape[d].max(1) as isize);
        }
        self.copy_with_strides(&strides)
            .unwrap_or_else(|| self.copy_as(self.dtype))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::layout::permute;

    fn iota(shape: &[usize]) -> CpuTensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        CpuTensor::from_slice(&v, shape).unwrap()
    }

    #[test]
    fn copies_into_every_dense_layout_and_refuses_others() {
        // sdpa's output as eager lays it out: [b, h, s, d] over a [b, s, h, d] buffer
        let x = iota(&[2, 3, 5, 4]);
        let want = [60, 4, 12, 1];
        let y = x.copy_with_strides(&want).unwrap();
        assert_eq!(y.strides(), &want);
        assert!(!y.shares_storage(&x));
        assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
        // from a transposed source into row-major, and a size-1 dim's stride is free
        let t = permute(&iota(&[7, 1, 6]), &[2, 1, 0]);
        let r = t.copy_with_strides(&[7, 99, 1]).unwrap();
        assert_eq!(r.strides(), &[7, 99, 1]);
        assert_eq!(r.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
        // the source's own layout: a copy that keeps it (a fresh buffer for an alias)
        let k = t.clone_preserving_layout();
        assert_eq!(k.strides(), t.strides());
        assert!(!k.shares_storage(&t));
        assert_eq!(k.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
        // overlapping, gapped, broadcast, wrong rank, empty: not dense
        for bad in [
            &[4, 1, 1, 1][..],
            &[121, 40, 8, 1],
            &[0, 4, 12, 1],
            &[60, 20, 4],
        ] {
            assert!(x.copy_with_strides(bad).is_none(), "{bad:?}");
        }
        assert!(iota(&[0, 3]).copy_with_strides(&[3, 1]).is_none());
        // a broadcast view's clone is row-major; a gapped transpose's keeps its order
        let b = iota(&[1, 4]).view_unchecked(&[3, 4], &[0, 1], 0);
        let c = b.clone_preserving_layout();
        assert_eq!(c.strides(), &[4, 1]);
        assert_eq!(c.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let g = permute(
            &iota(&[4, 13]).view_unchecked(&[4, 6], &[13, 1], 2),
            &[1, 0],
        );
        let c = g.clone_preserving_layout();
        assert_eq!(c.strides(), &[1, 6]);
        assert_eq!(c.to_vec::<f32>().unwrap(), g.to_vec::<f32>().unwrap());
    }
}
