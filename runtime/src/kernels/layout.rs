//! Layout kernels. Views (no copy): reshape when strides allow, permute, transpose, expand,
//! slice. Copies: contiguous, cat (row block copies), index_select (inner-block copies after
//! a bounds check of every index), index_add (a copy, then inner-block sums), triu/tril (one
//! pass over rows).

use crate::element::{with_dtype, Element, Kern};
use crate::error::RuntimeError;
use crate::iter::{for_chunks, GRAIN_CHEAP};
use crate::storage::Storage;
use crate::tensor::{contiguous_strides, CpuTensor, Strides};
use smallvec::smallvec;

/// The strides viewing `(shape, strides)` as `new_shape` without a copy, if any exist
/// (PyTorch's `computeStride`).
pub fn view_strides(shape: &[usize], strides: &[isize], new_shape: &[usize]) -> Option<Strides> {
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Some(contiguous_strides(new_shape));
    }
    let (shape, strides): (&[usize], &[isize]) = if shape.is_empty() {
        (&[1], &[1])
    } else {
        (shape, strides)
    };
    let mut new_strides: Strides = smallvec![0; new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *strides.last().expect("rank ≥ 1");
    let mut tensor_numel = 1usize;
    let mut view_numel = 1usize;
    for tensor_d in (0..shape.len()).rev() {
        tensor_numel *= shape[tensor_d];
        if tensor_d == 0
            || (shape[tensor_d - 1] != 1
                && strides[tensor_d - 1] != tensor_numel as isize * chunk_base_stride)
        {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel as isize * chunk_base_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

/// Same elements in `shape`: a view when the strides allow, else a contiguous copy.
pub(crate) fn reshape(x: &CpuTensor, shape: &[usize]) -> CpuTensor {
    match view_strides(x.shape(), x.strides(), shape) {
        Some(st) => x.view_unchecked(shape, &st, x.offset()),
        None => {
            let c = x.copy_as(x.dtype());
            c.view_unchecked(shape, &contiguous_strides(shape), 0)
        }
    }
}

/// Result dim i is input dim `dims[i]` (a view).
pub(crate) fn permute(x: &CpuTensor, dims: &[usize]) -> CpuTensor {
    let shape: Vec<usize> = dims.iter().map(|&d| x.shape()[d]).collect();
    let strides: Vec<isize> = dims.iter().map(|&d| x.strides()[d]).collect();
    x.view_unchecked(&shape, &strides, x.offset())
}

/// Swaps two (normalised) dims (a view).
pub(crate) fn transpose(x: &CpuTensor, a: usize, b: usize) -> CpuTensor {
    let mut shape = x.shape().to_vec();
    let mut strides = x.strides().to_vec();
    shape.swap(a, b);
    strides.swap(a, b);
    x.view_unchecked(&shape, &strides, x.offset())
}

/// Broadcasts to `shape` with stride 0 on stretched and new dims (a view).
pub(crate) fn expand(x: &CpuTensor, shape: &[usize]) -> CpuTensor {
    let strides = crate::iter::broadcast_strides(x, shape);
    let mut st = strides.to_vec();
    // Keep the real strides of dims that are 1 in both (harmless, and torch-like).
    let (r, tr) = (shape.len(), x.rank());
    for i in 0..tr {
        if x.shape()[i] == shape[r - tr + i] {
            st[r - tr + i] = x.strides()[i];
        }
    }
    x.view_unchecked(shape, &st, x.offset())
}

/// `x[start:end:step]` along dim `d` (a view).
pub(crate) fn slice(x: &CpuTensor, d: usize, start: usize, end: usize, step: usize) -> CpuTensor {
    let mut shape = x.shape().to_vec();
    let mut strides = x.strides().to_vec();
    let len = (end - start).div_ceil(step);
    shape[d] = len;
    let numel: usize = shape.iter().product();
    let offset = if numel == 0 {
        x.offset()
    } else {
        (x.ioffset() + start as isize * strides[d]) as usize
    };
    strides[d] *= step as isize;
    x.view_unchecked(&shape, &strides, offset)
}

/// A row-major copy.
pub(crate) fn contiguous(x: &CpuTensor) -> CpuTensor {
    x.copy_as(x.dtype())
}

/// Concatenates `parts` along dim `d` into `out_shape`, converting each to `dtype`.
pub(crate) fn cat(
    parts: &[&CpuTensor],
    d: usize,
    out_shape: &[usize],
    dtype: kiln_ir::DType,
) -> CpuTensor {
    let parts: Vec<CpuTensor> = parts
        .iter()
        .map(|t| t.to_dtype(dtype).contiguous())
        .collect();
    with_dtype!(dtype, T => cat_typed::<T>(&parts, d, out_shape))
}

fn cat_typed<T: Element>(parts: &[CpuTensor], d: usize, out_shape: &[usize]) -> CpuTensor {
    let outer: usize = out_shape[..d].iter().product();
    let inner: usize = out_shape[d + 1..].iter().product();
    let row = out_shape[d] * inner; // output elements per outer index
    let guards: Vec<_> = parts.iter().map(|p| p.storage().guard()).collect();
    // (data, offset, elements per outer index) of each part
    let srcs: Vec<(&[T], usize, usize)> = parts
        .iter()
        .zip(&guards)
        .map(|(p, g)| (g.slice::<T>(), p.offset(), p.shape()[d] * inner))
        .collect();
    let n = outer * row;
    let s = Storage::build::<T>(n, |out| {
        if row == 0 {
            return;
        }
        let rows_per_chunk = (GRAIN_CHEAP / row).max(1);
        for_chunks(out, rows_per_chunk * row, |start, chunk| {
            for (r, orow) in chunk.chunks_mut(row).enumerate() {
                let o = start / row + r;
                let mut at = 0;
                for &(data, off, len) in &srcs {
                    let src = &data[off + o * len..][..len];
                    for (dst, &v) in orow[at..at + len].iter_mut().zip(src) {
                        dst.write(v);
                    }
                    at += len;
                }
            }
        })
    });
    CpuTensor::from_storage(s, out_shape)
}

/// The indices of `idx` (row-major), each checked to be in `0..size` before any is used.
fn checked_indices(
    op: &'static str,
    idx: &CpuTensor,
    size: usize,
) -> Result<Vec<i64>, RuntimeError> {
    let indices: Vec<i64> =
        with_dtype!(idx.dtype(), I => crate::iter::gather::<I, i64>(idx, |v: I| v.to_i64()));
    match indices.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
        Some(&bad) => Err(RuntimeError::IndexOutOfRange {
            op,
            index: bad,
            size,
        }),
        None => Ok(indices),
    }
}

/// `x.index_select(d, idx)`: every index is checked (0 ≤ i < size) before any copy.
pub(crate) fn index_select(
    x: &CpuTensor,
    d: usize,
    idx: &CpuTensor,
    out_shape: &[usize],
) -> Result<CpuTensor, RuntimeError> {
    let indices = checked_indices("index_select", idx, x.shape()[d])?;
    let x = x.contiguous();
    Ok(with_dtype!(x.dtype(), T => index_select_typed::<T>(&x, d, &indices, out_shape)))
}

fn index_select_typed<T: Element>(
    x: &CpuTensor,
    d: usize,
    indices: &[i64],
    out_shape: &[usize],
) -> CpuTensor {
    let inner: usize = x.shape()[d + 1..].iter().product();
    let size = x.shape()[d];
    let row = indices.len() * inner;
    let n: usize = out_shape.iter().product();
    let g = x.storage().guard();
    let data = &g.slice::<T>()[x.offset()..];
    let s = Storage::build::<T>(n, |out| {
        if row == 0 {
            return;
        }
        let rows_per_chunk = (GRAIN_CHEAP / row).max(1);
        for_chunks(out, rows_per_chunk * row, |start, chunk| {
            for (r, orow) in chunk.chunks_mut(row).enumerate() {
                let o = start / row + r;
                for (j, &i) in indices.iter().enumerate() {
                    let src = &data[(o * size + i as usize) * inner..][..inner];
                    for (dst, &v) in orow[j * inner..(j + 1) * inner].iter_mut().zip(src) {
                        dst.write(v);
                    }
                }
            }
        })
    });
    CpuTensor::from_storage(s, out_shape)
}

/// `x.index_add(d, idx, src)`: a copy of `x` with each inner block of `src` added at its
/// index along `d` (repeated indices accumulate in index order); every index is checked
/// (0 ≤ i < size) before any addition. Sums of floats are rounded once to the dtype, as a
/// native addition; integers add exactly.
pub(crate) fn index_add(
    x: &CpuTensor,
    d: usize,
    idx: &CpuTensor,
    src: &CpuTensor,
) -> Result<CpuTensor, RuntimeError> {
    let indices = checked_indices("index_add", idx, x.shape()[d])?;
    let (x, src) = (x.contiguous(), src.contiguous());
    Ok(with_dtype!(x.dtype(), T => index_add_typed::<T>(&x, d, &indices, &src)))
}

fn index_add_typed<T: Kern>(
    x: &CpuTensor,
    d: usize,
    indices: &[i64],
    src: &CpuTensor,
) -> CpuTensor {
    let n = x.numel();
    let gx = x.storage().guard();
    let xd = &gx.slice::<T>()[x.offset()..][..n];
    let s = Storage::build::<T>(n, |out| {
        for (o, v) in out.iter_mut().zip(xd) {
            o.write(*v);
        }
    });
    drop(gx);
    {
        let mut g = s.guard_mut();
        add_rows::<T>(&mut g.slice_mut::<T>()[..n], x.shape(), d, indices, src);
    }
    CpuTensor::from_storage(s, x.shape())
}

/// `index_add` into `x`'s own storage (contiguous, sharing storage with neither `idx` nor
/// `src`), for a caller that owns `x` and would otherwise copy it: checked as
/// [`index_add`]; `x`'s version is bumped.
pub(crate) fn index_add_in_place(
    x: &CpuTensor,
    d: usize,
    idx: &CpuTensor,
    src: &CpuTensor,
) -> Result<(), RuntimeError> {
    let indices = checked_indices("index_add", idx, x.shape()[d])?;
    let src = src.contiguous();
    let n = x.numel();
    with_dtype!(x.dtype(), T => {
        let mut g = x.storage().guard_mut();
        add_rows::<T>(&mut g.slice_mut::<T>()[x.offset()..][..n], x.shape(), d, &indices, &src);
    });
    x.storage().bump_version();
    Ok(())
}

/// Adds `src`'s slices along dim `d` into `out` (a contiguous tensor of `shape`) at
/// `indices`: the part of `index_add` after the copy.
fn add_rows<T: Kern>(out: &mut [T], shape: &[usize], d: usize, indices: &[i64], src: &CpuTensor) {
    let inner: usize = shape[d + 1..].iter().product();
    let size = shape[d];
    let int = T::DTYPE.is_int();
    let add = |a: T, b: T| {
        if int {
            T::from_i64(a.to_i64().wrapping_add(b.to_i64()))
        } else {
            T::from_f64(a.to_f64() + b.to_f64())
        }
    };
    let gs = src.storage().guard();
    let sd = &gs.slice::<T>()[src.offset()..][..src.numel()];
    let block = size * inner;
    if block > 0 && inner > 0 {
        let rows = indices.len() * inner;
        // whole outer blocks per task: blocks are disjoint, and repeated indices within a
        // block accumulate in index order
        let grain = (GRAIN_CHEAP / block).max(1) * block;
        for_chunks(out, grain, |start, chunk| {
            for (k, blk) in chunk.chunks_mut(block).enumerate() {
                let o = start / block + k;
                let from = &sd[o * rows..(o + 1) * rows];
                for (j, &i) in indices.iter().enumerate() {
                    let dst = &mut blk[i as usize * inner..(i as usize + 1) * inner];
                    for (a, &b) in dst.iter_mut().zip(&from[j * inner..(j + 1) * inner]) {
                        *a = add(*a, b);
                    }
                }
            }
        });
    }
}

/// Keeps elements with `j - i >= diagonal` (triu, `upper`) or `j - i <= diagonal` (tril)
/// of each matrix in the last two dims; zeroes the rest.
pub(crate) fn tri(x: &CpuTensor, diagonal: i64, upper: bool) -> CpuTensor {
    let x = x.contiguous();
    with_dtype!(x.dtype(), T => tri_typed::<T>(&x, diagonal, upper))
}

fn tri_typed<T: Kern>(x: &CpuTensor, diagonal: i64, upper: bool) -> CpuTensor {
    let r = x.rank();
    let (rows, cols) = (x.shape()[r - 2], x.shape()[r - 1]);
    let n = x.numel();
    let g = x.storage().guard();
    let data = &g.slice::<T>()[x.offset()..][..n];
    let zero = T::default();
    let s = Storage::build::<T>(n, |out| {
        if cols == 0 {
            return;
        }
        let grain = (GRAIN_CHEAP / cols).max(1) * cols;
        for_chunks(out, grain, |start, chunk| {
            for (k, orow) in chunk.chunks_mut(cols).enumerate() {
                let flat_row = start / cols + k;
                let i = (flat_row % rows) as i64;
                let src = &data[flat_row * cols..][..cols];
                for (j, (o, &v)) in orow.iter_mut().zip(src).enumerate() {
                    let dj = j as i64 - i;
                    let keep = if upper {
                        dj >= diagonal
                    } else {
                        dj <= diagonal
                    };
                    o.write(if keep { v } else { zero });
                }
            }
        })
    });
    CpuTensor::from_storage(s, x.shape())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_strides_like_torch() {
        assert_eq!(
            view_strides(&[2, 3], &[3, 1], &[6]).unwrap().as_slice(),
            &[1]
        );
        assert_eq!(view_strides(&[2, 3], &[1, 2], &[6]), None); // transposed
        assert_eq!(
            view_strides(&[2, 3], &[1, 2], &[2, 3, 1])
                .unwrap()
                .as_slice(),
            &[1, 2, 2]
        );
        assert_eq!(
            view_strides(&[4, 6], &[12, 1], &[2, 2, 6])
                .unwrap()
                .as_slice(),
            &[24, 12, 1]
        );
        assert_eq!(view_strides(&[], &[], &[1, 1]).unwrap().as_slice(), &[1, 1]);
    }
}
