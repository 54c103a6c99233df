//! Row-normalising kernels: softmax, log_softmax (over any dim, as [outer, n, inner]),
//! layer_norm and rms_norm (over the trailing dims). Fast paths: inner == 1 runs a row kernel
//! (max, exp-sum with f64 accumulation, scale) per row; inner > 1 runs the same passes on
//! whole inner vectors; both parallel over rows / outer slabs. Statistics are f64.

use crate::element::{with_float, CFloat, FloatKern};
use crate::iter::{for_chunks, GRAIN_CHEAP};
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use num_traits::Float as _;
use std::mem::MaybeUninit;

/// Splits the output of [outer, slab] into chunks of whole slabs and calls `f(slab_index,
/// out_slab)` for each, in parallel when large.
fn per_slab<T: Send>(
    out: &mut [MaybeUninit<T>],
    slab: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    if slab == 0 {
        return;
    }
    let grain = (GRAIN_CHEAP / slab).max(1) * slab;
    for_chunks(out, grain, |start, chunk| {
        for (k, s) in chunk.chunks_mut(slab).enumerate() {
            f(start / slab + k, s);
        }
    })
}

/// softmax (or log_softmax) of `x` along dim `d`.
pub(crate) fn softmax(x: &CpuTensor, d: usize, log: bool) -> CpuTensor {
    let x = x.contiguous();
    let s = with_float!(x.dtype(), T => softmax_typed::<T>(&x, d, log), _ => unreachable!("softmax needs floats"));
    CpuTensor::from_storage(s, x.shape())
}

fn softmax_typed<T: FloatKern>(x: &CpuTensor, d: usize, log: bool) -> Storage {
    let shape = x.shape();
    let (n, inner) = if shape.is_empty() {
        (1, 1)
    } else {
        (shape[d], shape[d + 1..].iter().product::<usize>())
    };
    let numel = x.numel();
    let g = x.storage().guard();
    let data = &g.slice::<T>()[x.offset()..][..numel];
    let nan = <T::C as CFloat>::of(f64::NAN);
    Storage::build::<T>(numel, |out| {
        per_slab(out, n * inner, |o, slab| {
            let src = &data[o * n * inner..][..n * inner];
            if inner == 1 {
                softmax_row::<T>(src, slab, log, nan);
            } else {
                softmax_cols::<T>(src, slab, n, inner, log, nan);
            }
        })
    })
}

fn softmax_row<T: FloatKern>(row: &[T], out: &mut [MaybeUninit<T>], log: bool, nan: T::C) {
    // Max with 8 independent lanes (vectorisable); NaN tracked separately.
    let mut lanes = [<T::C as CFloat>::NEG_INF; 8];
    let mut has_nan = false;
    let chunks = row.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            let v = c[l].up();
            lanes[l] = if v > lanes[l] { v } else { lanes[l] };
            has_nan |= v.is_nan();
        }
    }
    for &v in rem {
        let v = v.up();
        lanes[0] = if v > lanes[0] { v } else { lanes[0] };
        has_nan |= v.is_nan();
    }
    let mut m = lanes
        .iter()
        .fold(<T::C as CFloat>::NEG_INF, |a, &b| if b > a { b } else { a });
    if has_nan {
        m = nan;
    }
    // exp(x - max) into a row buffer (exact compute-type values), then sum it with
    // independent f64 lanes, then scale: the exp loop carries no dependency.
    let e: Vec<T::C> = row.iter().map(|&v| (v.up() - m).exp()).collect();
    let sum = sum_lanes(&e);
    if log {
        let (mf, ls) = (m.f64(), sum.ln());
        for (o, &v) in out.iter_mut().zip(row) {
            o.write(T::from_f64(v.up().f64() - mf - ls));
        }
    } else {
        let inv = 1.0 / sum;
        for (o, &e) in out.iter_mut().zip(&e) {
            o.write(T::from_f64(e.f64() * inv));
        }
    }
}

/// Σ x over compute-type values in f64, with 8 independent lanes.
fn sum_lanes<C: CFloat>(xs: &[C]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = xs.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l].f64();
        }
    }
    let s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    rem.iter().fold(s, |s, &v| s + v.f64())
}

fn softmax_cols<T: FloatKern>(
    src: &[T],
    out: &mut [MaybeUninit<T>],
    n: usize,
    inner: usize,
    log: bool,
    nan: T::C,
) {
    let mut m = vec![<T::C as CFloat>::NEG_INF; inner];
    let mut has_nan = vec![false; inner];
    for r in 0..n {
        for ((m, h), &v) in m
            .iter_mut()
            .zip(has_nan.iter_mut())
            .zip(&src[r * inner..][..inner])
        {
            let v = v.up();
            if v > *m {
                *m = v;
            }
            *h |= v.is_nan();
        }
    }
    for (m, &h) in m.iter_mut().zip(&has_nan) {
        if h {
            *m = nan;
        }
    }
    let mut sum = vec![0.0f64; inner];
    for r in 0..n {
        for ((s, &m), &v) in sum.iter_mut().zip(&m).zip(&src[r * inner..][..inner]) {
            *s += (v.up() - m).exp().f64();
        }
    }
    for s in sum.iter_mut() {
        *s = if log { s.ln() } else { 1.0 / *s };
    }
    for r in 0..n {
        let row = &src[r * inner..][..inner];
        let orow = &mut out[r * inner..][..inner];
        for (((o, &v), &m), &s) in orow.iter_mut().zip(row).zip(&m).zip(&sum) {
            let y = if log {
                v.up().f64() - m.f64() - s
            } else {
                (v.up() - m).exp().f64() * s
            };
            o.write(T::from_f64(y));
        }
    }
}

/// Reads an optional affine parameter as a contiguous tensor.
fn param(p: Option<&CpuTensor>) -> Option<CpuTensor> {
    p.map(|t| t.contiguous())
}

/// layer_norm (`rms == false`) or rms_norm over the last `ndim` dims of `x`.
pub(crate) fn norm(
    x: &CpuTensor,
    ndim: usize,
    eps: f64,
    weight: Option<&CpuTensor>,
    bias: Option<&CpuTensor>,
    rms: bool,
) -> CpuTensor {
    let x = x.contiguous();
    let (w, b) = (param(weight), param(bias));
    let r = x.rank();
    let row: usize = x.shape()[r - ndim..].iter().product();
    let s = with_float!(x.dtype(), T => norm_typed::<T>(&x, row, eps, w.as_ref(), b.as_ref(), rms), _ => unreachable!("norms need floats"));
    CpuTensor::from_storage(s, x.shape())
}

fn norm_typed<T: FloatKern>(
    x: &CpuTensor,
    row: usize,
    eps: f64,
    w: Option<&CpuTensor>,
    b: Option<&CpuTensor>,
    rms: bool,
) -> Storage {
    let numel = x.numel();
    let g = x.storage().guard();
    let data = &g.slice::<T>()[x.offset()..][..numel];
    let gw = w.map(|t| t.storage().guard());
    let gb = b.map(|t| t.storage().guard());
    let wd: Option<&[T]> = gw
        .as_ref()
        .zip(w)
        .map(|(g, t)| &g.slice::<T>()[t.offset()..][..row]);
    let bd: Option<&[T]> = gb
        .as_ref()
        .zip(b)
        .map(|(g, t)| &g.slice::<T>()[t.offset()..][..row]);
    Storage::build::<T>(numel, |out| {
        per_slab(out, row, |o, orow| {
            let src = &data[o * row..][..row];
            let (shift, scale) = norm_stats::<T>(src, eps, rms);
            let centred = |v: T| (v.up() - shift) * scale;
            // torch's layer norm adds its default bias, +0 (so -0 becomes +0); an rms norm
            // has no bias, and x + -0 is x itself
            let zero = <T::C as CFloat>::of(if rms { -0.0 } else { 0.0 });
            match (wd, bd) {
                (Some(w), Some(b)) => {
                    for (((o, &v), &w), &b) in orow.iter_mut().zip(src).zip(w).zip(b) {
                        o.write(T::down(centred(v) * w.up() + b.up()));
                    }
                }
                (Some(w), None) => {
                    for ((o, &v), &w) in orow.iter_mut().zip(src).zip(w) {
                        o.write(T::down(centred(v) * w.up() + zero));
                    }
                }
                (None, Some(b)) => {
                    for ((o, &v), &b) in orow.iter_mut().zip(src).zip(b) {
                        o.write(T::down(centred(v) + b.up()));
                    }
                }
                (None, None) => {
                    for (o, &v) in orow.iter_mut().zip(src) {
                        o.write(T::down(centred(v) + zero));
                    }
                }
            }
        })
    })
}

/// A row's shift (its mean, 0 for an rms norm) and scale (the reciprocal root), each
/// computed in f64 and rounded once to the compute type, where the normalised values are
/// then computed and rounded op by op: `(x - mean) · scale`, `· w`, `+ b`. So the values
/// are the decomposition's (which every backend compiles) and torch's precision (it
/// computes an f32 norm in f32); the variance is of the centred values `x - mean` as the
/// compute type holds them.
fn norm_stats<T: FloatKern>(src: &[T], eps: f64, rms: bool) -> (T::C, T::C) {
    let n = src.len() as f64;
    let shift = if rms {
        <T::C as CFloat>::ZERO
    } else {
        <T::C as CFloat>::of(sum8(src, |v| v) / n)
    };
    let ms = if rms {
        sum8(src, |v| v * v) / n
    } else {
        sum8(src, |v| {
            // v - shift in the compute type (v is exact there), squared in f64 (exact,
            // finite)
            let c = (<T::C as CFloat>::of(v) - shift).f64();
            c * c
        }) / n
    };
    (shift, <T::C as CFloat>::of(1.0 / (ms + eps).sqrt()))
}

/// Σ f(x) over a row in f64 with 8 independent accumulators.
#[inline(always)]
fn sum8<T: FloatKern>(row: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += f(c[l].to_f64());
        }
    }
    let s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    rem.iter().fold(s, |s, &v| s + f(v.to_f64()))
}
