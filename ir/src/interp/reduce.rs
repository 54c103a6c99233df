//! Reductions (sum, mean, max, min, argmax, var) and the normalising composites
//! (softmax, log_softmax, layer_norm, rms_norm). All accumulate in f64 and round once.

use super::index::{gather, numel, strides};
use super::{tensor, Fail, Operand, Out, Value};
use crate::shape::normalize_dim;
use crate::ReduceOp;
use std::borrow::Cow;

/// Normalises a dim attribute that inference has accepted (a 0-d tensor accepts 0 and -1).
pub(crate) fn norm_dim(dim: i64, rank: usize) -> usize {
    normalize_dim(dim, rank.max(1)).expect("inference checked the dim")
}

/// The reduced dims, sorted and unique: empty means all dims; on a 0-d tensor every dim
/// attribute (0 or -1) means "no dim", as the reduction of a 0-d tensor is itself.
fn reduced_dims(dims: &[i64], rank: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..rank).collect();
    }
    let mut out: Vec<usize> = dims
        .iter()
        .map(|&d| norm_dim(d, rank))
        .filter(|&d| d < rank)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// `x`'s elements arranged so that each reduction group is contiguous, groups in
/// row-major order of the kept dims; returns the data and the group size.
fn grouped<'a>(x: &'a Value, dims: &[usize]) -> (Cow<'a, [f64]>, usize) {
    let rank = x.shape.len();
    let perm: Vec<usize> = (0..rank)
        .filter(|d| !dims.contains(d))
        .chain(dims.iter().copied())
        .collect();
    let group = dims.iter().map(|&d| x.shape[d]).product();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return (Cow::Borrowed(&x.data), group);
    }
    let own = strides(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let st: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
    (Cow::Owned(gather(&x.data, &shape, &st, 0)), group)
}

/// Applies `f` to each reduction group (in output order) and builds the result.
fn per_group(x: &Value, dims: &[usize], out: &Out, f: impl Fn(&[f64]) -> f64) -> Value {
    let (data, n) = grouped(x, dims);
    out.finish(
        (0..out.numel())
            .map(|g| f(&data[g * n..(g + 1) * n]))
            .collect(),
    )
}

/// sum / mean / max / min over `dims` (max and min propagate NaN; mean of nothing is NaN).
pub(crate) fn reduce(op: ReduceOp, x: &Value, dims: &[i64], out: &Out) -> Value {
    let dims = reduced_dims(dims, x.shape.len());
    per_group(x, &dims, out, |s| match op {
        // from +0 as torch's sums (Rust's f64 `Sum` starts from -0: the sum of [-0] is -0)
        // integer sums wrap, as torch's
        ReduceOp::Sum if out.dtype.is_int() => {
            s.iter().fold(0i64, |a, &b| a.wrapping_add(b as i64)) as f64
        }
        ReduceOp::Sum => s.iter().fold(0.0, |a, b| a + b),
        ReduceOp::Mean => s.iter().fold(0.0, |a, b| a + b) / s.len() as f64,
        ReduceOp::Max | ReduceOp::Min => {
            if s.iter().any(|v| v.is_nan()) {
                f64::NAN
            } else if op == ReduceOp::Max {
                s.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                s.iter().copied().fold(f64::INFINITY, f64::min)
            }
        }
    })
}

/// argmax along `dim`: the first index of the maximum; a NaN counts as the maximum (the
/// first NaN wins), as in PyTorch.
pub(crate) fn argmax(x: &Value, dim: i64, out: &Out) -> Value {
    let rank = x.shape.len();
    let dims = if rank == 0 {
        vec![]
    } else {
        vec![norm_dim(dim, rank)]
    };
    per_group(x, &dims, out, |s| {
        let mut best = 0usize;
        for (i, &v) in s.iter().enumerate().skip(1) {
            if s[best].is_nan() {
                break;
            }
            if v.is_nan() || v > s[best] {
                best = i;
            }
        }
        best as f64
    })
}

/// Variance over `dims`, dividing by `max(N - correction, 0)` (so 0/0 gives NaN and x/0
/// gives inf, as PyTorch).
pub(crate) fn var(x: &Value, dims: &[i64], correction: i64, out: &Out) -> Value {
    let dims = reduced_dims(dims, x.shape.len());
    per_group(x, &dims, out, |s| {
        let n = s.len() as f64;
        let mean = s.iter().fold(0.0, |a, b| a + b) / n;
        let m2 = s.iter().fold(0.0, |a, v| a + (v - mean) * (v - mean));
        m2 / (n - correction as f64).max(0.0)
    })
}

/// The `(outer, n, inner)` split of a shape around `dim` (a 0-d shape is `(1, 1, 1)`).
fn split_at_dim(shape: &[usize], dim: i64) -> (usize, usize, usize) {
    if shape.is_empty() {
        return (1, 1, 1);
    }
    let d = norm_dim(dim, shape.len());
    (numel(&shape[..d]), shape[d], numel(&shape[d + 1..]))
}

/// softmax (or log_softmax) along `dim`, subtracting the maximum for stability.
pub(crate) fn softmax(x: &Value, dim: i64, log: bool, out: &Out) -> Value {
    let (outer, n, inner) = split_at_dim(&x.shape, dim);
    let mut data = vec![0.0; x.data.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let at = |k: usize| base + k * inner;
            let max = (0..n)
                .map(|k| x.data[at(k)])
                .fold(
                    f64::NEG_INFINITY,
                    |m, v| if v.is_nan() || v > m { v } else { m },
                );
            let sum: f64 = (0..n).map(|k| (x.data[at(k)] - max).exp()).sum();
            for k in 0..n {
                let z = x.data[at(k)] - max;
                data[at(k)] = if log { z - sum.ln() } else { z.exp() / sum };
            }
        }
    }
    out.finish(data)
}

/// The optional per-position parameter operand `i` (weight or bias) of a norm.
fn param<'a>(args: &[Operand<'a>], i: usize) -> Result<Option<&'a Value>, Fail> {
    if args.len() > i {
        tensor(args, i).map(Some)
    } else {
        Ok(None)
    }
}

/// The size of the normalised trailing block of `ndim` dims.
fn block(x: &Value, ndim: usize) -> usize {
    numel(&x.shape[x.shape.len() - ndim..])
}

/// `(x - mean) / sqrt(var + eps) * w + b` over the last `ndim` dims (biased variance),
/// sums from +0, and without a bias `+ 0` (torch's kernel adds its default bias, so an x
/// equal to its row's mean, -0 included, normalises to +0).
pub(crate) fn layer_norm(
    args: &[Operand<'_>],
    ndim: usize,
    eps: f64,
    out: &Out,
) -> Result<Value, Fail> {
    let x = tensor(args, 0)?;
    let (w, b) = (param(args, 1)?, param(args, 2)?);
    let n = block(x, ndim);
    let mut data = Vec::with_capacity(x.data.len());
    for g in x.data.chunks(n.max(1)) {
        let mean = g.iter().fold(0.0, |a, b| a + b) / n as f64;
        let var = g.iter().fold(0.0, |a, v| a + (v - mean) * (v - mean)) / n as f64;
        let den = (var + eps).sqrt();
        for (j, &v) in g.iter().enumerate() {
            let mut y = (v - mean) / den;
            if let Some(w) = w {
                y *= w.data[j];
            }
            y += b.map_or(0.0, |b| b.data[j]);
            data.push(y);
        }
    }
    Ok(out.finish(data))
}

/// `x / sqrt(mean(x^2) + eps) * w` over the last `ndim` dims.
pub(crate) fn rms_norm(
    args: &[Operand<'_>],
    ndim: usize,
    eps: f64,
    out: &Out,
) -> Result<Value, Fail> {
    let x = tensor(args, 0)?;
    let w = param(args, 1)?;
    let n = block(x, ndim);
    let mut data = Vec::with_capacity(x.data.len());
    for g in x.data.chunks(n.max(1)) {
        let den = (g.iter().fold(0.0, |a, v| a + v * v) / n as f64 + eps).sqrt();
        for (j, &v) in g.iter().enumerate() {
            let y = v / den;
            data.push(w.map_or(y, |w| y * w.data[j]));
        }
    }
    Ok(out.finish(data))
}
