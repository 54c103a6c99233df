//! The flat host data a collective moves, and its conversions from and to tensors.

use super::dist_err;
use crate::error::Result;
use crate::{DType, Tensor};

/// A collective's data: one contiguous host array of a type the engines reduce natively.
#[derive(Clone, Debug, PartialEq)]
pub enum CommBuffer {
    /// f32 elements
    F32(Vec<f32>),
    /// f64 elements
    F64(Vec<f64>),
    /// i64 elements (counts, flags, shape signatures)
    I64(Vec<i64>),
}

impl CommBuffer {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            CommBuffer::F32(v) => v.len(),
            CommBuffer::F64(v) => v.len(),
            CommBuffer::I64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CommBuffer::F32(_) => DType::F32,
            CommBuffer::F64(_) => DType::F64,
            CommBuffer::I64(_) => DType::I64,
        }
    }

    /// Bytes of data.
    pub fn bytes(&self) -> usize {
        self.len() * 8 / if self.dtype() == DType::F32 { 2 } else { 1 }
    }

    /// An all-zero buffer of `len` elements of `dtype` (f32, f64 or i64).
    pub(crate) fn zeros(dtype: DType, len: usize, op: &str) -> Result<CommBuffer> {
        Ok(match dtype {
            DType::F32 => CommBuffer::F32(vec![0.0; len]),
            DType::F64 => CommBuffer::F64(vec![0.0; len]),
            DType::I64 => CommBuffer::I64(vec![0; len]),
            other => return Err(unsupported(op, other)),
        })
    }

    /// The values of `t` in row-major order (f32, f64 or i64 tensors).
    pub(crate) fn from_tensor(t: &Tensor, op: &str) -> Result<CommBuffer> {
        Ok(match t.dtype() {
            DType::F32 => CommBuffer::F32(t.to_vec()?),
            DType::F64 => CommBuffer::F64(t.to_vec()?),
            DType::I64 => CommBuffer::I64(t.to_vec()?),
            other => return Err(unsupported(op, other)),
        })
    }

    /// Elements `[start, start + len)` as a tensor of `shape`.
    pub(crate) fn tensor(&self, start: usize, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        match self {
            CommBuffer::F32(v) => Tensor::from_vec(v[start..start + n].to_vec(), shape),
            CommBuffer::F64(v) => Tensor::from_vec(v[start..start + n].to_vec(), shape),
            CommBuffer::I64(v) => Tensor::from_vec(v[start..start + n].to_vec(), shape),
        }
    }

    /// Copies `t`'s values to elements `[start, start + t.numel())` (same dtype).
    pub(crate) fn write(&mut self, start: usize, t: &Tensor) -> Result<()> {
        let n = t.numel();
        match self {
            CommBuffer::F32(v) => v[start..start + n].copy_from_slice(&t.to_vec::<f32>()?),
            CommBuffer::F64(v) => v[start..start + n].copy_from_slice(&t.to_vec::<f64>()?),
            CommBuffer::I64(v) => v[start..start + n].copy_from_slice(&t.to_vec::<i64>()?),
        }
        Ok(())
    }

    /// Every element divided by `d` (integers: truncated, as torch's integer division).
    pub(crate) fn divide(&mut self, d: usize) {
        match self {
            CommBuffer::F32(v) => v.iter_mut().for_each(|x| *x /= d as f32),
            CommBuffer::F64(v) => v.iter_mut().for_each(|x| *x /= d as f64),
            CommBuffer::I64(v) => v.iter_mut().for_each(|x| *x /= d as i64),
        }
    }
}

fn unsupported(op: &str, dtype: DType) -> crate::Error {
    dist_err(
        op,
        format!("{dtype} tensors are not supported (f32, f64 and i64 are)"),
    )
}
