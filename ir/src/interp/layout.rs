//! Layout ops (permute, transpose, expand, slice, cat, index_select, triu/tril) and the
//! contractions (matmul, linear). Every result is materialised row-major.

use super::index::{broadcast_strides, for_each_offsets, gather, numel, strides};
use super::reduce::norm_dim;
use super::{tensor, Fail, Operand, Out, Value};
use crate::DType;

/// `torch.matmul`: 1-d operands are promoted (a `[k]` on the left is a row `[1,k]`, on the
/// right a column `[k,1]`) and the added dim is dropped from the result; batch dims
/// broadcast. Products accumulate in f64 and are rounded once.
pub(crate) fn matmul(a: &Value, b: &Value, out: &Out) -> Value {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (a_batch, m, k) = if ra == 1 {
        (&a.shape[..0], 1, a.shape[0])
    } else {
        (&a.shape[..ra - 2], a.shape[ra - 2], a.shape[ra - 1])
    };
    let (b_batch, n) = if rb == 1 {
        (&b.shape[..0], 1)
    } else {
        (&b.shape[..rb - 2], b.shape[rb - 1])
    };
    let matrix_dims = usize::from(ra >= 2) + usize::from(rb >= 2);
    let batch = &out.shape[..out.shape.len() - matrix_dims];
    let scale = |s: Vec<usize>, by: usize| s.into_iter().map(|x| x * by).collect::<Vec<_>>();
    let a_st = scale(broadcast_strides(a_batch, batch), m * k);
    let b_st = scale(broadcast_strides(b_batch, batch), k * n);
    let mut data = Vec::with_capacity(out.numel());
    let mut row = vec![0.0f64; n];
    for_each_offsets(batch, [&a_st, &b_st], |[ao, bo]| {
        for i in 0..m {
            row.iter_mut().for_each(|r| *r = 0.0);
            for kk in 0..k {
                let x = a.data[ao + i * k + kk];
                let b_row = &b.data[bo + kk * n..bo + (kk + 1) * n];
                for (r, &y) in row.iter_mut().zip(b_row) {
                    *r += x * y;
                }
            }
            if out.dtype.is_int() {
                // integer products wrap as torch's do (the f64 sums above are exact while
                // they stay below 2^53; wrapping sums are recomputed past that)
                for (j, r) in row.iter_mut().enumerate() {
                    let mut acc = 0i64;
                    for kk in 0..k {
                        let (x, y) = (a.data[ao + i * k + kk], b.data[bo + kk * n + j]);
                        acc = acc.wrapping_add((x as i64).wrapping_mul(y as i64));
                    }
                    *r = match out.dtype {
                        DType::I32 => acc as i32 as f64,
                        _ => acc as f64,
                    };
                }
            }
            data.extend_from_slice(&row);
        }
    });
    out.finish(data)
}

/// `x @ w^T + b` with `x: [..., in]`, `w: [out, in]`, `b: [out]` (optional).
pub(crate) fn linear(args: &[Operand<'_>], out: &Out) -> Result<Value, Fail> {
    let (x, w) = (tensor(args, 0)?, tensor(args, 1)?);
    let bias = if args.len() > 2 {
        Some(tensor(args, 2)?)
    } else {
        None
    };
    let r = x.shape.len();
    let (rows, inf, outf) = (numel(&x.shape[..r - 1]), x.shape[r - 1], w.shape[0]);
    let mut data = Vec::with_capacity(rows * outf);
    for i in 0..rows {
        let xr = &x.data[i * inf..(i + 1) * inf];
        for o in 0..outf {
            let wr = &w.data[o * inf..(o + 1) * inf];
            let dot: f64 = xr.iter().zip(wr).map(|(p, q)| p * q).sum();
            data.push(dot + bias.map_or(0.0, |b| b.data[o]));
        }
    }
    Ok(out.finish(data))
}

/// Reads `x` through per-output-dim strides (from its own row-major strides) and an offset.
fn view(x: &Value, out: &Out, st: &[usize], offset: usize) -> Value {
    out.finish(gather(&x.data, &out.shape, st, offset))
}

/// Result dim i is input dim `dims[i]`.
pub(crate) fn permute(x: &Value, dims: &[usize], out: &Out) -> Value {
    let own = strides(&x.shape);
    let st: Vec<usize> = dims.iter().map(|&d| own[d]).collect();
    view(x, out, &st, 0)
}

/// Swaps two dims.
pub(crate) fn transpose(x: &Value, dim0: i64, dim1: i64, out: &Out) -> Value {
    let r = x.shape.len();
    let mut st = strides(&x.shape);
    st.swap(norm_dim(dim0, r), norm_dim(dim1, r));
    view(x, out, &st, 0)
}

/// Broadcasts to the result shape.
pub(crate) fn expand(x: &Value, out: &Out) -> Value {
    view(x, out, &broadcast_strides(&x.shape, &out.shape), 0)
}

/// `x[start:end:step]` along `dim` (the result shape already has the sliced length).
pub(crate) fn slice(x: &Value, dim: i64, start: usize, step: usize, out: &Out) -> Value {
    let d = norm_dim(dim, x.shape.len());
    let mut st = strides(&x.shape);
    let offset = start * st[d];
    st[d] *= step;
    view(x, out, &st, offset)
}

/// Concatenation along `dim`, converting every operand to the promoted dtype.
pub(crate) fn cat(args: &[Operand<'_>], dim: i64, out: &Out) -> Result<Value, Fail> {
    let d = norm_dim(dim, out.shape.len());
    let (outer, inner) = (numel(&out.shape[..d]), numel(&out.shape[d + 1..]));
    let parts = (0..args.len())
        .map(|i| tensor(args, i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut data = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for t in &parts {
            let blk = t.shape[d] * inner;
            data.extend_from_slice(&t.data[o * blk..(o + 1) * blk]);
        }
    }
    Ok(out.finish(data))
}

/// `x.index_select(dim, idx)`; an index outside `0..size` (negative ones included, as
/// PyTorch) is an error naming the index and the size.
pub(crate) fn index_select(x: &Value, idx: &Value, dim: i64, out: &Out) -> Result<Value, Fail> {
    let d = norm_dim(dim, x.shape.len());
    let n = x.shape[d];
    let rows = checked_rows(idx, d, n)?;
    let (outer, inner) = (numel(&x.shape[..d]), numel(&x.shape[d + 1..]));
    let mut data = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for &i in &rows {
            let at = (o * n + i) * inner;
            data.extend_from_slice(&x.data[at..at + inner]);
        }
    }
    Ok(out.finish(data))
}

/// `x.index_add(dim, idx, src)`: a copy of `x` with each slice of `src` added at its index
/// (repeated indices accumulate, in index order); an index outside `0..size` is an error as
/// in `index_select`.
pub(crate) fn index_add(
    x: &Value,
    idx: &Value,
    src: &Value,
    dim: i64,
    out: &Out,
) -> Result<Value, Fail> {
    let d = norm_dim(dim, x.shape.len());
    let n = x.shape[d];
    let rows = checked_rows(idx, d, n)?;
    let (outer, inner) = (numel(&x.shape[..d]), numel(&x.shape[d + 1..]));
    let mut data = x.data.clone();
    let mut from = 0;
    for o in 0..outer {
        for &i in &rows {
            let at = (o * n + i) * inner;
            for (dst, &v) in data[at..at + inner].iter_mut().zip(&src.data[from..]) {
                *dst += v;
            }
            from += inner;
        }
    }
    Ok(out.finish(data))
}

/// The indices of `idx` as rows of a dim `d` of size `n`, each checked to be in `0..n`.
fn checked_rows(idx: &Value, d: usize, n: usize) -> Result<Vec<usize>, Fail> {
    idx.data
        .iter()
        .map(|&i| {
            if (0.0..n as f64).contains(&i) {
                Ok(i as usize)
            } else {
                Err(format!("index {i} is out of range for dim {d} of size {n}"))
            }
        })
        .collect()
}

/// `triu` (`upper`) or `tril` over the last two dims, batched: element (i, j) is kept when
/// `j - i >= diagonal` (triu) or `j - i <= diagonal` (tril), else zeroed.
pub(crate) fn triangle(x: &Value, diagonal: i64, upper: bool, out: &Out) -> Value {
    let r = x.shape.len();
    let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
    let data = x
        .data
        .iter()
        .enumerate()
        .map(|(l, &v)| {
            let (i, j) = (((l / cols) % rows) as i64, (l % cols) as i64);
            let keep = if upper {
                j - i >= diagonal
            } else {
                j - i <= diagonal
            };
            if keep {
                v
            } else {
                0.0
            }
        })
        .collect();
    out.finish(data)
}
