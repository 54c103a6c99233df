//! Reductions: sum, mean, max, min, var, argmax. The input is brought to a contiguous
//! [outer, red, inner] form (a permuted copy only when reduced dims are not adjacent). Fast
//! paths: inner == 1 reduces rows with 8 independent accumulators (float sums in f64),
//! parallel over rows or, for few long rows, over pieces of a row; inner > 1 accumulates
//! whole inner vectors per reduced index (vectorised), parallel over output chunks.

use crate::element::{with_dtype, with_float, Element, Kern};
use crate::iter::{for_chunks, GRAIN_CHEAP};
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use kiln_ir::ReduceOp;
use std::mem::MaybeUninit;

/// A contiguous input viewed as [outer, red, inner], or (for reductions that merge
/// pieces, `split` plans) as [outer_red, outer, red] with both `outer_red` and `red` reduced
/// (`inner` 1): the per-channel sums of a batch norm over [N, C, H, W], read in place where
/// a permuted copy would move the whole input first.
struct Plan {
    x: CpuTensor,
    outer_red: usize,
    outer: usize,
    red: usize,
    inner: usize,
}

/// Normalised, sorted reduced dims (empty `dims` means all), as `infer` computes them.
pub(crate) fn reduced_dims(dims: &[i64], rank: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..rank).collect();
    }
    let mut v: Vec<usize> = dims
        .iter()
        .filter_map(|&d| kiln_ir::shape::normalize_dim(d, rank.max(1)))
        .filter(|&d| d < rank)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn plan(x: &CpuTensor, dims: &[usize], split: bool) -> Plan {
    let x = x.contiguous();
    let mut groups: Vec<(bool, usize)> = Vec::new();
    for (i, &n) in x.shape().iter().enumerate() {
        if n == 1 {
            continue;
        }
        let r = dims.contains(&i);
        match groups.last_mut() {
            Some(last) if last.0 == r => last.1 *= n,
            _ => groups.push((r, n)),
        }
    }
    let (outer, red, inner) = match groups.as_slice() {
        [] => (1, 1, 1),
        [(false, k)] => (*k, 1, 1),
        [(true, r)] => (1, *r, 1),
        [(false, k), (true, r)] => (*k, *r, 1),
        [(true, r), (false, k)] => (1, *r, *k),
        [(false, k), (true, r), (false, k2)] => (*k, *r, *k2),
        [(true, r0), (false, k), (true, r)] if split => {
            return Plan {
                x,
                outer_red: *r0,
                outer: *k,
                red: *r,
                inner: 1,
            }
        }
        _ => {
            // Non-adjacent reduced dims: move them last and copy.
            let mut perm: Vec<usize> = (0..x.rank()).filter(|d| !dims.contains(d)).collect();
            perm.extend(dims.iter().copied());
            let p = crate::kernels::layout::permute(&x, &perm).contiguous();
            let outer = (0..x.rank())
                .filter(|d| !dims.contains(d))
                .map(|d| x.shape()[d])
                .product();
            let red = dims.iter().map(|&d| x.shape()[d]).product();
            return Plan {
                x: p,
                outer_red: 1,
                outer,
                red,
                inner: 1,
            };
        }
    };
    Plan {
        x,
        outer_red: 1,
        outer,
        red,
        inner,
    }
}

/// Fills the [outer, inner] output: `row(o)` when inner == 1, else `cols(o, j0, out)` for
/// segments of consecutive inner positions `j0..j0 + out.len()` of outer index `o`.
fn drive<O: Element>(
    p: &Plan,
    row: impl Fn(usize) -> O + Sync + Send,
    cols: impl Fn(usize, usize, &mut [MaybeUninit<O>]) + Sync + Send,
) -> Storage {
    let (inner, red) = (p.inner, (p.outer_red * p.red).max(1));
    Storage::build::<O>(p.outer * inner, |out| {
        if inner == 1 {
            for_chunks(out, (GRAIN_CHEAP / red).max(1), |start, chunk| {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    slot.write(row(start + k));
                }
            })
        } else {
            // segments of 256 positions at least: whole cache lines of each row, and work
            // for every thread when the rows are long
            for_chunks(out, (GRAIN_CHEAP / red).max(256), |start, chunk| {
                let end = start + chunk.len();
                let mut pos = start;
                while pos < end {
                    let (o, j0) = (pos / inner, pos % inner);
                    let seg = (inner - j0).min(end - pos);
                    cols(o, j0, &mut chunk[pos - start..][..seg]);
                    pos += seg;
                }
            })
        }
    })
}

/// An associative reduction with an accumulator.
trait Reducer<T>: Sync {
    type A: Copy + Send + Sync;
    type O: Element;
    fn init(&self) -> Self::A;
    fn step(&self, a: Self::A, x: T) -> Self::A;
    fn merge(&self, a: Self::A, b: Self::A) -> Self::A;
    fn finish(&self, a: Self::A, count: usize) -> Self::O;
}

/// Reduces one contiguous row with 8 independent accumulators.
#[inline(always)]
fn row_acc<T: Copy, R: Reducer<T>>(r: &R, row: &[T]) -> R::A {
    let mut acc = [r.init(); 8];
    let chunks = row.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] = r.step(acc[l], c[l]);
        }
    }
    let a = r.merge(
        r.merge(r.merge(acc[0], acc[1]), r.merge(acc[2], acc[3])),
        r.merge(r.merge(acc[4], acc[5]), r.merge(acc[6], acc[7])),
    );
    rem.iter().fold(a, |a, &x| r.step(a, x))
}

fn run<T: Element, R: Reducer<T>>(p: &Plan, r: &R) -> Storage {
    let g = p.x.storage().guard();
    let n = p.outer_red * p.outer * p.red * p.inner;
    let data = &g.slice::<T>()[p.x.offset()..][..n];
    let (red, inner) = (p.red, p.inner);
    if p.outer_red > 1 {
        // [outer_red, outer, red]: output o merges its row in each outer_red slab
        let (slabs, stride) = (p.outer_red, p.outer * red);
        return drive(
            p,
            |o| {
                let a = (0..slabs).fold(r.init(), |a, s| {
                    r.merge(a, row_acc(r, &data[s * stride + o * red..][..red]))
                });
                r.finish(a, slabs * red)
            },
            |_, _, _| unreachable!("a split plan has inner 1"),
        );
    }
    if inner == 1 && p.outer < crate::pool::threads() && red >= 2 * GRAIN_CHEAP {
        // Few long rows: split each row over the pool and merge the pieces in order.
        return Storage::build::<R::O>(p.outer, |out| {
            let mut parts = vec![r.init(); red.div_ceil(GRAIN_CHEAP)];
            for (o, slot) in out.iter_mut().enumerate() {
                let row = &data[o * red..][..red];
                for_chunks(&mut parts, 1, |i, part| {
                    part[0] = row_acc(
                        r,
                        &row[i * GRAIN_CHEAP..][..GRAIN_CHEAP.min(red - i * GRAIN_CHEAP)],
                    );
                });
                let a = parts.iter().fold(r.init(), |a, &b| r.merge(a, b));
                slot.write(r.finish(a, red));
            }
        });
    }
    drive(
        p,
        |o| r.finish(row_acc(r, &data[o * red..][..red]), red),
        |o, j0, out| {
            let len = out.len();
            let mut acc = vec![r.init(); len];
            let rows = &data[o * red * inner..][..red * inner];
            accumulate_columns(r, &mut acc, rows, inner, j0);
            for (slot, &a) in out.iter_mut().zip(&acc) {
                slot.write(r.finish(a, red));
            }
        },
    )
}

/// Folds columns `j0..j0 + acc.len()` of the `[rows.len() / inner, inner]` block `rows` into
/// `acc`, row by row (the order of one accumulator a column). The loop is the hot one of a
/// reduction over an outer dim (a bias gradient's sum over the batch); where the CPU has
/// AVX2 it is compiled for it, so that the conversions and adds of a float sum run eight
/// lanes wide, not two.
fn accumulate_columns<T: Copy, R: Reducer<T>>(
    r: &R,
    acc: &mut [R::A],
    rows: &[T],
    inner: usize,
    j0: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if super::few_rows::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { accumulate_columns_avx2(r, acc, rows, inner, j0) };
    }
    accumulate_columns_portable(r, acc, rows, inner, j0)
}

/// [`accumulate_columns`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_columns_avx2<T: Copy, R: Reducer<T>>(
    r: &R,
    acc: &mut [R::A],
    rows: &[T],
    inner: usize,
    j0: usize,
) {
    accumulate_columns_portable(r, acc, rows, inner, j0)
}

#[inline(always)]
fn accumulate_columns_portable<T: Copy, R: Reducer<T>>(
    r: &R,
    acc: &mut [R::A],
    rows: &[T],
    inner: usize,
    j0: usize,
) {
    let (len, red) = (acc.len(), rows.len() / inner);
    let row = |rr: usize| &rows[rr * inner + j0..][..len];
    // four reduced indices a pass: a quarter of the accumulator loads and stores
    let mut rr = 0;
    while rr + 4 <= red {
        let (x0, x1, x2, x3) = (row(rr), row(rr + 1), row(rr + 2), row(rr + 3));
        for (j, a) in acc.iter_mut().enumerate() {
            *a = r.step(r.step(r.step(r.step(*a, x0[j]), x1[j]), x2[j]), x3[j]);
        }
        rr += 4;
    }
    for rr in rr..red {
        for (a, &v) in acc.iter_mut().zip(row(rr)) {
            *a = r.step(*a, v);
        }
    }
}

/// Float sums (and means) accumulate in f64, giving `O` (the input's dtype, or f64 for
/// torch's `dtype=torch.float64`: the same sums as over a converted copy, without the copy).
struct FloatSum<T, O = T> {
    mean: bool,
    _t: std::marker::PhantomData<(T, O)>,
}
impl<T: Kern, O: Kern> Reducer<T> for FloatSum<T, O> {
    type A = f64;
    type O = O;
    fn init(&self) -> f64 {
        0.0
    }
    #[inline(always)]
    fn step(&self, a: f64, x: T) -> f64 {
        a + x.to_f64()
    }
    fn merge(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn finish(&self, a: f64, count: usize) -> O {
        O::from_f64(if self.mean { a / count as f64 } else { a })
    }
}

/// Integer and bool sums accumulate in i64 (wrapping), giving i64.
struct IntSum;
impl<T: Kern> Reducer<T> for IntSum {
    type A = i64;
    type O = i64;
    fn init(&self) -> i64 {
        0
    }
    #[inline(always)]
    fn step(&self, a: i64, x: T) -> i64 {
        a.wrapping_add(x.to_i64())
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a.wrapping_add(b)
    }
    fn finish(&self, a: i64, _: usize) -> i64 {
        a
    }
}

/// max (or min): the extreme value plus a NaN flag (NaN propagates).
struct Extreme {
    max: bool,
}
impl<T: Kern> Reducer<T> for Extreme {
    type A = (T, bool);
    type O = T;
    fn init(&self) -> (T, bool) {
        (if self.max { T::lowest() } else { T::highest() }, false)
    }
    #[inline(always)]
    fn step(&self, a: (T, bool), x: T) -> (T, bool) {
        let better = if self.max { x > a.0 } else { x < a.0 };
        (if better { x } else { a.0 }, a.1 | x.is_nan_())
    }
    fn merge(&self, a: (T, bool), b: (T, bool)) -> (T, bool) {
        let s = self.step(a, b.0);
        (s.0, s.1 | b.1)
    }
    fn finish(&self, a: (T, bool), _: usize) -> T {
        if a.1 {
            T::from_f64(f64::NAN)
        } else {
            a.0
        }
    }
}

/// `op` over `dims` (normalised) of `x`, giving `out_shape`.
pub(crate) fn reduce(
    op: ReduceOp,
    x: &CpuTensor,
    dims: &[usize],
    out_shape: &[usize],
) -> CpuTensor {
    let p = plan(x, dims, true);
    let s = match op {
        ReduceOp::Sum | ReduceOp::Mean => match x.dtype() {
            d if d.is_float() => {
                with_float!(d, T => run::<T, _>(&p, &FloatSum::<T> { mean: op == ReduceOp::Mean, _t: std::marker::PhantomData }), _ => unreachable!())
            }
            d => with_dtype!(d, T => run::<T, _>(&p, &IntSum)),
        },
        ReduceOp::Max | ReduceOp::Min => {
            with_dtype!(x.dtype(), T => run::<T, _>(&p, &Extreme { max: op == ReduceOp::Max }))
        }
    };
    CpuTensor::from_storage(s, out_shape)
}

/// A float sum or mean over `dims` of `x` given in f64 (torch's `dtype=torch.float64` on a
/// narrower float), or `None` where the operand must be converted first.
pub(crate) fn sum_to_f64(
    op: ReduceOp,
    x: &CpuTensor,
    dims: &[usize],
    out_shape: &[usize],
) -> Option<CpuTensor> {
    let mean = match op {
        ReduceOp::Sum => false,
        ReduceOp::Mean => true,
        ReduceOp::Max | ReduceOp::Min => return None,
    };
    if !x.dtype().is_float() || x.dtype() == kiln_ir::DType::F64 {
        return None;
    }
    let p = plan(x, dims, true);
    let s = with_float!(x.dtype(), T => run::<T, _>(&p, &FloatSum::<T, f64> { mean, _t: std::marker::PhantomData }), _ => return None);
    Some(CpuTensor::from_storage(s, out_shape))
}

/// Variance over `dims` with `correction` (two passes in f64: mean, then squared deviations).
pub(crate) fn var(
    x: &CpuTensor,
    dims: &[usize],
    correction: i64,
    out_shape: &[usize],
) -> CpuTensor {
    let p = plan(x, dims, false);
    let s = with_float!(x.dtype(), T => var_typed::<T>(&p, correction), _ => unreachable!("var needs floats"));
    CpuTensor::from_storage(s, out_shape)
}

fn var_typed<T: Kern>(p: &Plan, correction: i64) -> Storage {
    let g = p.x.storage().guard();
    let n = p.outer * p.red * p.inner;
    let data = &g.slice::<T>()[p.x.offset()..][..n];
    let (red, inner) = (p.red, p.inner);
    let denom = (red as f64 - correction as f64).max(0.0);
    let sum = FloatSum::<T> {
        mean: false,
        _t: std::marker::PhantomData,
    };
    drive(
        p,
        |o| {
            let row = &data[o * red..][..red];
            let mean = row_acc(&sum, row) / red as f64;
            let mut acc = [0.0f64; 8];
            let chunks = row.chunks_exact(8);
            let rem = chunks.remainder();
            for c in chunks {
                for l in 0..8 {
                    let d = c[l].to_f64() - mean;
                    acc[l] += d * d;
                }
            }
            let mut ss: f64 = acc.iter().sum();
            for &v in rem {
                let d = v.to_f64() - mean;
                ss += d * d;
            }
            T::from_f64(ss / denom)
        },
        |o, j0, out| {
            let len = out.len();
            let mut mean = vec![0.0f64; len];
            for rr in 0..red {
                for (m, &v) in mean
                    .iter_mut()
                    .zip(&data[(o * red + rr) * inner + j0..][..len])
                {
                    *m += v.to_f64();
                }
            }
            for m in mean.iter_mut() {
                *m /= red as f64;
            }
            let mut ss = vec![0.0f64; len];
            for rr in 0..red {
                let src = &data[(o * red + rr) * inner + j0..][..len];
                for ((s, &m), &v) in ss.iter_mut().zip(&mean).zip(src) {
                    let d = v.to_f64() - m;
                    *s += d * d;
                }
            }
            for (slot, &s) in out.iter_mut().zip(&ss) {
                slot.write(T::from_f64(s / denom));
            }
        },
    )
}

/// Index of the first maximum along dim `d` (NaN counts as the maximum), as i64.
pub(crate) fn argmax(x: &CpuTensor, d: Option<usize>, out_shape: &[usize]) -> CpuTensor {
    let dims: Vec<usize> = d.into_iter().collect();
    let p = plan(x, &dims, false);
    let s = with_dtype!(x.dtype(), T => argmax_typed::<T>(&p));
    CpuTensor::from_storage(s, out_shape)
}

#[inline(always)]
fn beats<T: Kern>(v: T, best: T) -> bool {
    !best.is_nan_() && (v > best || v.is_nan_())
}

fn argmax_typed<T: Kern>(p: &Plan) -> Storage {
    let g = p.x.storage().guard();
    let n = p.outer * p.red * p.inner;
    let data = &g.slice::<T>()[p.x.offset()..][..n];
    let (red, inner) = (p.red, p.inner);
    drive::<i64>(
        p,
        |o| {
            let row = &data[o * red..][..red];
            let mut best = 0usize;
            for (i, &v) in row.iter().enumerate().skip(1) {
                if beats(v, row[best]) {
                    best = i;
                }
            }
            best as i64
        },
        |o, j0, out| {
            let len = out.len();
            let mut bv: Vec<T> = data[o * red * inner + j0..][..len].to_vec();
            let mut bi = vec![0i64; len];
            for rr in 1..red {
                let src = &data[(o * red + rr) * inner + j0..][..len];
                for ((b, i), &v) in bv.iter_mut().zip(bi.iter_mut()).zip(src) {
                    if beats(v, *b) {
                        *b = v;
                        *i = rr as i64;
                    }
                }
            }
            for (slot, &i) in out.iter_mut().zip(&bi) {
                slot.write(i);
            }
        },
    )
}
