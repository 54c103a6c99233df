//! matmul (torch.matmul: 1-d operands, broadcast batch dims) and linear (x @ wᵀ + b). Fast
//! paths: f32/f64 through the `gemm` crate on the operands' own strides (transposed views need
//! no copy); a batch over a shared right operand folds into one tall gemm; batched problems run
//! in parallel over the batch (one single-threaded gemm per item) unless the items are few and
//! big; linear pre-fills the bias and accumulates into it. f16/bf16 compute in f32 (one
//! rounding at the end); integers use a plain wrapping loop.

use crate::element::{IntKern, Kern};
use crate::error::RuntimeError;
use crate::iter::{for_chunks, GRAIN_CHEAP};
use crate::kernels::few_rows;
use crate::kernels::layout::view_strides;
use crate::pool;
use crate::storage::Storage;
use crate::tensor::{contiguous_strides, CpuTensor};
use gemm::Parallelism;
use kiln_ir::DType;
use rayon::prelude::*;
use smallvec::SmallVec;

/// Problems with at least this many multiply-adds use gemm's own threads.
const PAR_FLOPS: usize = 1 << 18;

/// Element types `gemm` multiplies natively.
pub(crate) trait GemmT:
    Kern + crate::host_blas::BlasElement + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ONE: Self;
    /// Whether few-row products run as dot products ([`few_rows`]) rather than through gemm.
    const FAST_DOT: bool;
    /// `+0 + a·b`: a lone product summed from +0, so a -0 product is +0.
    fn product_from_zero(a: Self, b: Self) -> Self;
    /// Σ x[i]·y[i] over `k` contiguous elements, from +0.
    ///
    /// # Safety
    /// `x` and `y` valid for `k` reads.
    unsafe fn dot(x: *const Self, y: *const Self, k: usize) -> Self;
}
impl GemmT for f32 {
    const ONE: f32 = 1.0;
    const FAST_DOT: bool = true;
    fn product_from_zero(a: f32, b: f32) -> f32 {
        0.0 + a * b
    }
    unsafe fn dot(x: *const f32, y: *const f32, k: usize) -> f32 {
        few_rows::dot_f32(x, y, k)
    }
}
impl GemmT for f64 {
    const ONE: f64 = 1.0;
    const FAST_DOT: bool = false;
    fn product_from_zero(a: f64, b: f64) -> f64 {
        0.0 + a * b
    }
    unsafe fn dot(x: *const f64, y: *const f64, k: usize) -> f64 {
        few_rows::dot_portable(x, y, k)
    }
}

/// A matrix operand: base pointer plus row and column strides in elements.
#[derive(Clone, Copy)]
pub(crate) struct MatRef<T> {
    pub(crate) ptr: *const T,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl<T> MatRef<T> {
    /// The same matrix shape `off` elements further.
    fn at(self, off: isize) -> MatRef<T> {
        MatRef {
            ptr: self.ptr.wrapping_offset(off),
            ..self
        }
    }
}

/// `dst[m, n] (row stride dst_rs, column stride 1) (+)= a[m, k] @ b[k, n]`.
///
/// # Safety
/// Every element the strides reach must be valid for reads (a, b) or writes (dst, and reads
/// when `accumulate`), and dst must not overlap a or b.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_into<T: GemmT>(
    dst: *mut T,
    dst_rs: isize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    accumulate: bool,
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst.offset(i as isize * dst_rs + j as isize)
                        .write(T::default());
                }
            }
        }
        return;
    }
    if k == 1 && !accumulate {
        // gemm writes a lone product as it is (-0 · 1 stays -0), where sums from +0 give +0:
        // gemm's own for k > 1, the interpreter's, torch's bmm and half-precision products
        for i in 0..m as isize {
            let x = *a.ptr.offset(i * a.rs);
            for j in 0..n as isize {
                let y = *b.ptr.offset(j * b.cs);
                dst.offset(i * dst_rs + j).write(T::product_from_zero(x, y));
            }
        }
        return;
    }
    // the host's BLAS where one was adopted (inside PyTorch: eager's own products)
    if crate::host_blas::gemm(dst, dst_rs, m, n, k, a, b, accumulate) {
        return;
    }
    // single-threaded calls only: gemm's own threads share a big product of few rows
    if matches!(par, Parallelism::None) && few_rows::applies(m, k, a, b) {
        few_rows::few_rows_into(dst, dst_rs, m, n, k, a, b, accumulate);
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs,
        accumulate,
        a.ptr,
        a.cs,
        a.rs,
        b.ptr,
        b.cs,
        b.rs,
        T::ONE,
        T::ONE,
        false,
        false,
        false,
        par,
    );
}

/// Products with fewer multiply-adds read every operand in place (a copy would not pay).
const REPACK_MIN_FLOPS: usize = 1 << 22;
/// An operand is copied only when the product reuses each of its elements at least this
/// many times (the other dim of the result): the copy costs about one pass over the
/// operand (~0.3-0.4 ns an element here), the gain is 10-35% of the product's time.
const REPACK_MIN_REUSE: usize = 256;

/// The operands of `a @ b` (matrix stacks, [`as_matrices`]), each one whose rows are not
/// contiguous replaced by a row-major copy when the product is big enough to pay for it.
///
/// `gemm` is fastest with row-major operands and a row-major result: measured on this
/// machine (2 cores, AVX-512), both operands row-major reach 290-325 GFLOP/s on MiniLM's and
/// the block's training shapes, where a transposed right operand (`x @ wᵀ`, every Linear)
/// reaches 180-290, a transposed left one (`xᵀ @ dy`, every weight gradient) 140-300 and
/// both 120-300. Broadcast operands (a zero stride) are read in place: a copy would
/// multiply them.
fn repacked(a: CpuTensor, b: CpuTensor) -> (CpuTensor, CpuTensor) {
    repacked_with(a, b, false)
}

/// [`repacked`]; with `keep_weights` (the compiled kernels), the copies of kiln's own
/// storages (and of pinned borrowed ones) come from [`crate::pack_cache`], so that a weight
/// is transposed once, not every call.
fn repacked_with(a: CpuTensor, b: CpuTensor, keep_weights: bool) -> (CpuTensor, CpuTensor) {
    let copy = |t: &CpuTensor| {
        if keep_weights {
            crate::pack_cache::row_major(t)
        } else {
            t.contiguous()
        }
    };
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    // the broadcast batch, and how many of its matrices each operand's matrix serves: a
    // weight shared by every matrix of a batched left operand (`x[b, s, d] @ wᵀ`) is
    // reused by all b·s rows. Counted only where the copy is kept between calls: copied
    // every call, such a weight measured slower than read in place (MiniLM, A/B in turns:
    // 3-6% slower copied every call, 2-5% faster copied once and kept)
    let items = batch_layout(&a, &b).0.iter().product::<usize>().max(1);
    let served = |t: &CpuTensor| {
        if keep_weights && crate::pack_cache::is_cacheable(t) {
            items / t.shape()[..t.rank() - 2].iter().product::<usize>().max(1)
        } else {
            1
        }
    };
    let flops = items.saturating_mul(m).saturating_mul(n).saturating_mul(k);
    let worth = |t: &CpuTensor, rows: usize, cols: usize, reuse: usize| {
        flops >= REPACK_MIN_FLOPS
            && reuse >= REPACK_MIN_REUSE
            && rows > 1
            && cols > 1
            && t.strides()[t.rank() - 1] != 1
            && t.strides()
                .iter()
                .zip(t.shape())
                .all(|(&s, &d)| s != 0 || d == 1)
    };
    let a = if worth(&a, m, k, n.saturating_mul(served(&a))) {
        copy(&a)
    } else {
        a
    };
    let b = if worth(&b, k, n, m.saturating_mul(served(&b))) {
        copy(&b)
    } else {
        b
    };
    (a, b)
}

fn parallelism(m: usize, n: usize, k: usize) -> Parallelism {
    if m.saturating_mul(n).saturating_mul(k) >= PAR_FLOPS && rayon::current_num_threads() > 1 {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    }
}

/// `a` as a matrix stack [..., m, k] and `b` as [..., k, n] (1-d operands get a unit dim).
fn as_matrices(a: &CpuTensor, b: &CpuTensor) -> (CpuTensor, CpuTensor) {
    let a2 = if a.rank() == 1 {
        a.view_unchecked(&[1, a.shape()[0]], &[0, a.strides()[0]], a.offset())
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.view_unchecked(&[b.shape()[0], 1], &[b.strides()[0], 0], b.offset())
    } else {
        b.clone()
    };
    (a2, b2)
}

/// The broadcast batch shape and each operand's batch strides aligned to it.
fn batch_layout(a: &CpuTensor, b: &CpuTensor) -> (Vec<usize>, Vec<isize>, Vec<isize>) {
    let (ba, bb) = (&a.shape()[..a.rank() - 2], &b.shape()[..b.rank() - 2]);
    let r = ba.len().max(bb.len());
    let mut shape = vec![1usize; r];
    let (mut sa, mut sb) = (vec![0isize; r], vec![0isize; r]);
    for (t, bt, st) in [(a, ba, &mut sa), (b, bb, &mut sb)] {
        for (i, &n) in bt.iter().enumerate() {
            let o = r - bt.len() + i;
            if n != 1 {
                shape[o] = n;
                st[o] = t.strides()[i];
            }
        }
    }
    (shape, sa, sb)
}

/// `torch.matmul(a, b)` with result shape `out_shape` (checked by infer).
pub(crate) fn matmul(
    a: &CpuTensor,
    b: &CpuTensor,
    out_shape: &[usize],
) -> Result<CpuTensor, RuntimeError> {
    let (a2, b2) = as_matrices(a, b);
    let dtype = a.dtype();
    let (a2, b2) = if dtype.is_float() {
        repacked(a2, b2)
    } else {
        (a2, b2)
    };
    let out = match dtype {
        DType::F32 => matmul_float::<f32>(&a2, &b2),
        DType::F64 => matmul_float::<f64>(&a2, &b2),
        DType::F16 | DType::BF16 => {
            let r = matmul_float::<f32>(&a2.to_dtype(DType::F32), &b2.to_dtype(DType::F32));
            r.copy_as(dtype)
        }
        DType::I32 => matmul_int::<i32>(&a2, &b2),
        DType::I64 => matmul_int::<i64>(&a2, &b2),
        DType::Bool => {
            return Err(RuntimeError::unsupported(
                "matmul",
                &[a.shape(), b.shape()],
                "not defined for bool tensors",
            ))
        }
    };
    Ok(out.view_unchecked(out_shape, &contiguous_strides(out_shape), 0))
}

/// Row stride of `t`'s batch dims plus its row dim viewed as one dim, if they collapse.
fn folded_row_stride(t: &CpuTensor) -> Option<isize> {
    let r = t.rank();
    let dims: SmallVec<[(usize, isize); 6]> = t.shape()[..r - 1]
        .iter()
        .zip(&t.strides()[..r - 1])
        .filter(|(&n, _)| n != 1)
        .map(|(&n, &s)| (n, s))
        .collect();
    for w in dims.windows(2) {
        if w[0].1 != w[1].1 * w[1].0 as isize {
            return None;
        }
    }
    Some(dims.last().map_or(0, |d| d.1))
}

/// Sizes and element strides of a batched `a @ b` over operands of rank ≥ 2.
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    /// the number of batch items
    nb: usize,
    /// per-batch-dim strides of `a` and `b` (0 where broadcast)
    sa: Vec<isize>,
    sb: Vec<isize>,
    a_rs: isize,
    a_cs: isize,
    b_rs: isize,
    b_cs: isize,
    /// the result shape: batch dims then [m, n]
    shape: Vec<usize>,
}

fn geometry(a: &CpuTensor, b: &CpuTensor) -> Geometry {
    let (ra, rb) = (a.rank(), b.rank());
    let (batch, sa, sb) = batch_layout(a, b);
    let (m, n) = (a.shape()[ra - 2], b.shape()[rb - 1]);
    let mut shape = batch.clone();
    shape.extend([m, n]);
    Geometry {
        m,
        k: a.shape()[ra - 1],
        n,
        nb: batch.iter().product(),
        sa,
        sb,
        a_rs: a.strides()[ra - 2],
        a_cs: a.strides()[ra - 1],
        b_rs: b.strides()[rb - 2],
        b_cs: b.strides()[rb - 1],
        shape,
    }
}

/// The element offsets of batch item `bi`'s matrices in `a` and `b`: the row-major batch
/// index decomposed over `batch` and weighted by each operand's batch strides.
fn batch_offsets(
    bi: usize,
    batch: &[usize],
    (sa, sb): (&[isize], &[isize]),
    (oa, ob): (isize, isize),
) -> (isize, isize) {
    let (mut rem, mut oa, mut ob) = (bi, oa, ob);
    for d in (0..batch.len()).rev() {
        let i = (rem % batch[d]) as isize;
        rem /= batch[d];
        oa += i * sa[d];
        ob += i * sb[d];
    }
    (oa, ob)
}

fn matmul_float<T: GemmT>(a: &CpuTensor, b: &CpuTensor) -> CpuTensor {
    let Geometry {
        m,
        k,
        n,
        nb,
        sa,
        sb,
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        shape,
    } = geometry(a, b);
    let batch = &shape[..shape.len() - 2];
    let (ga, gb) = (a.storage().guard(), b.storage().guard());
    let (pa, pb) = (ga.slice::<T>().as_ptr(), gb.slice::<T>().as_ptr());
    let a_batched_fully = a.shape()[..a.rank() - 2].iter().product::<usize>() == nb;
    let s = Storage::build::<T>(nb * m * n, |out| {
        let dst = out.as_mut_ptr() as *mut T;
        if nb > 1 && sb.iter().all(|&s| s == 0) && a_batched_fully {
            if let Some(rs) = folded_row_stride(a) {
                // One tall gemm: [nb*m, k] @ [k, n].
                let mm = nb * m;
                // SAFETY: the layouts of a and b are in bounds of their storages (checked
                // when the views were made), dst has nb*m*n elements, and dst is fresh.
                unsafe {
                    gemm_into(
                        dst,
                        n as isize,
                        mm,
                        n,
                        k,
                        MatRef {
                            ptr: pa.wrapping_offset(a.ioffset()),
                            rs,
                            cs: a_cs,
                        },
                        MatRef {
                            ptr: pb.wrapping_offset(b.ioffset()),
                            rs: b_rs,
                            cs: b_cs,
                        },
                        false,
                        parallelism(mm, n, k),
                    )
                };
                return;
            }
        }
        let offsets = |bi: usize| batch_offsets(bi, batch, (&sa, &sb), (a.ioffset(), b.ioffset()));
        let (base_a, base_b) = (
            MatRef {
                ptr: pa,
                rs: a_rs,
                cs: a_cs,
            },
            MatRef {
                ptr: pb,
                rs: b_rs,
                cs: b_cs,
            },
        );
        let mats = |bi: usize| {
            let (oa, ob) = offsets(bi);
            (base_a.at(oa), base_b.at(ob))
        };
        let par = parallelism(m, n, k);
        // one gemm per thread over the batch when there are items enough for every thread
        // (attention's 96 products of [128, 32] @ [32, 128]: 1.1 ms with gemm's threads on
        // each item in turn, 0.62 ms so); gemm's threads only for a few big items
        let over_batch = matches!(par, Parallelism::None) || nb >= pool::threads();
        if nb > 1 && over_batch && m * n > 0 {
            for_chunks(out, m * n, |start, o| {
                let (ma, mb) = mats(start / (m * n));
                // SAFETY: as above; each batch item writes its own chunk of dst.
                unsafe {
                    gemm_into(
                        o.as_mut_ptr() as *mut T,
                        n as isize,
                        m,
                        n,
                        k,
                        ma,
                        mb,
                        false,
                        Parallelism::None,
                    )
                };
            });
        } else {
            for bi in 0..nb {
                let (ma, mb) = mats(bi);
                // SAFETY: as above; batch item bi owns dst[bi*m*n..(bi+1)*m*n].
                unsafe {
                    gemm_into(
                        dst.wrapping_add(bi * m * n),
                        n as isize,
                        m,
                        n,
                        k,
                        ma,
                        mb,
                        false,
                        par,
                    )
                };
            }
        }
    });
    CpuTensor::from_storage(s, &shape)
}

// SAFETY: MatRef only carries read-only pointers into storages whose read guards the caller
// holds for the whole parallel region.
unsafe impl<T> Send for MatRef<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for MatRef<T> {}

fn matmul_int<T: IntKern>(a: &CpuTensor, b: &CpuTensor) -> CpuTensor {
    let Geometry {
        m,
        k,
        n,
        nb,
        sa,
        sb,
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        shape,
    } = geometry(a, b);
    let batch = &shape[..shape.len() - 2];
    let (ga, gb) = (a.storage().guard(), b.storage().guard());
    let (da, db) = (ga.slice::<T>(), gb.slice::<T>());
    let s = Storage::build::<T>(nb * m * n, |out| {
        if n == 0 {
            return;
        }
        let grain = (GRAIN_CHEAP / (n * k).max(1)).max(1) * n;
        for_chunks(out, grain, |start, chunk| {
            let mut acc = vec![T::ZERO; n];
            for (r, orow) in chunk.chunks_mut(n).enumerate() {
                let row = start / n + r;
                let (bi, i) = (row / m, row % m);
                let (oa, ob) = batch_offsets(bi, batch, (&sa, &sb), (a.ioffset(), b.ioffset()));
                acc.iter_mut().for_each(|x| *x = T::ZERO);
                for p in 0..k {
                    let av = da[(oa + i as isize * a_rs + p as isize * a_cs) as usize];
                    let brow = ob + p as isize * b_rs;
                    for (j, x) in acc.iter_mut().enumerate() {
                        *x = x.wadd(av.wmul(db[(brow + j as isize * b_cs) as usize]));
                    }
                }
                for (o, &x) in orow.iter_mut().zip(&acc) {
                    o.write(x);
                }
            }
        })
    });
    CpuTensor::from_storage(s, &shape)
}

/// `x @ wᵀ + bias` with result shape `out_shape` (checked by infer).
pub(crate) fn linear(
    x: &CpuTensor,
    w: &CpuTensor,
    bias: Option<&CpuTensor>,
    out_shape: &[usize],
) -> CpuTensor {
    let dtype = x.dtype();
    let inf = x.shape()[x.rank() - 1];
    let rows: usize = x.shape()[..x.rank() - 1].iter().product();
    let x2 = match view_strides(x.shape(), x.strides(), &[rows, inf]) {
        Some(st) => x.view_unchecked(&[rows, inf], &st, x.offset()),
        None => x
            .copy_as(dtype)
            .view_unchecked(&[rows, inf], &contiguous_strides(&[rows, inf]), 0),
    };
    let out = match dtype {
        DType::F64 => linear_float::<f64>(&x2, w, bias),
        DType::F32 => linear_float::<f32>(&x2, w, bias),
        _ => {
            let b32 = bias.map(|b| b.to_dtype(DType::F32));
            linear_float::<f32>(
                &x2.to_dtype(DType::F32),
                &w.to_dtype(DType::F32),
                b32.as_ref(),
            )
            .copy_as(dtype)
        }
    };
    out.view_unchecked(out_shape, &contiguous_strides(out_shape), 0)
}

fn linear_float<T: GemmT>(x: &CpuTensor, w: &CpuTensor, bias: Option<&CpuTensor>) -> CpuTensor {
    let (m, k, n) = (x.shape()[0], x.shape()[1], w.shape()[0]);
    let bias = bias.map(|b| b.contiguous());
    // wᵀ as the right operand: a view, or a row-major copy where that is faster
    let wt = w.view_unchecked(&[k, n], &[w.strides()[1], w.strides()[0]], w.offset());
    let (x, wt) = repacked(x.clone(), wt);
    let (gx, gw) = (x.storage().guard(), wt.storage().guard());
    let gbias = bias.as_ref().map(|b| b.storage().guard());
    let bdata: Option<&[T]> = gbias
        .as_ref()
        .zip(bias.as_ref())
        .map(|(g, b)| &g.slice::<T>()[b.offset()..][..n]);
    let (px, pw) = (gx.slice::<T>().as_ptr(), gw.slice::<T>().as_ptr());
    let s = Storage::build::<T>(m * n, |out| {
        if let Some(bd) = bdata {
            for row in out.chunks_mut(n.max(1)) {
                for (o, &v) in row.iter_mut().zip(bd) {
                    o.write(v);
                }
            }
        }
        // SAFETY: x and w layouts are in bounds; dst (fresh, m*n elements) is initialised
        // above when accumulating into the bias.
        unsafe {
            gemm_into(
                out.as_mut_ptr() as *mut T,
                n as isize,
                m,
                n,
                k,
                MatRef {
                    ptr: px.wrapping_offset(x.ioffset()),
                    rs: x.strides()[0],
                    cs: x.strides()[1],
                },
                MatRef {
                    ptr: pw.wrapping_offset(wt.ioffset()),
                    rs: wt.strides()[0],
                    cs: wt.strides()[1],
                },
                bdata.is_some(),
                parallelism(m, n, k),
            )
        };
    });
    CpuTensor::from_storage(s, &[m, n])
}

/// A hook run over blocks of output rows right after they are computed (while they are
/// still in cache): `(first_row, rows)` over the rows of the output viewed as a matrix of
/// `batch·m` rows of `n` elements. Blocks may run on several threads at once.
pub type RowEpilogue<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// From this many multiply-adds on (about 1 ms on one core), a matmul of few rows uses gemm's
/// own (rayon) threads, whose wake-up (a futex each way, some 20 µs) is then noise; below it,
/// its column shares run on the kernel pool ([`crate::pool`]), whose workers spin between
/// the kernels of a plan.
const RAYON_FLOPS: usize = 1 << 26;

/// Column shares of a small matmul are a multiple of this many columns (gemm's widest
/// micro-kernel: 4 AVX-512 vectors of f32), so no share ends in a ragged tile but the last.
const COLUMN_ALIGN: usize = 64;

/// A thread's share of a matrix's rows is at least this many rows; below it, gemm's own
/// threads share the work (and the packing of the right operand, which every single-threaded
/// gemm on a share of the rows repeats). A/B in turns here: MiniLM (512 rows a thread)
/// faster shared out, the mlp workload (128 rows a thread, a 1024×4096 right operand)
/// slower, the block (512) within the noise.
const MIN_ROWS_PER_THREAD: usize = 256;

/// A product with more rows than columns shares its rows among the threads, each taking
/// at least this many, rather than its columns: a column share packs all of a's rows and
/// reads all of them again per share. BERT's training step through the torch backend (2
/// threads; kernel means, the two alternated in one process): its weight gradient of
/// 1000×256 @ 256×128 0.63× the time by column shares, the 512×256 @ 256×128 ones 0.80×, the
/// whole step's kernels 0.96×.
const ROW_SHARE_MIN_ROWS: usize = 64;

/// Rows per epilogue block: about 256 KiB of output, so a block stays in L2.
fn rows_per_block(n: usize) -> usize {
    ((256 << 10) / (4 * n.max(1))).clamp(8, 1 << 20)
}

/// `out = a @ b` for f32 operands (torch.matmul shapes, strided operands read in place)
/// into `out`, a contiguous tensor of the result's shape that shares storage with neither
/// operand; then `epilogue` over each block of output rows. Large problems are split into
/// row blocks computed in parallel, each followed by its epilogue.
pub fn matmul_into(
    a: &CpuTensor,
    b: &CpuTensor,
    out: &CpuTensor,
    epilogue: Option<RowEpilogue<'_>>,
) -> Result<(), RuntimeError> {
    let shapes = [a.shape(), b.shape(), out.shape()];
    if [a.dtype(), b.dtype(), out.dtype()] != [DType::F32; 3] {
        return Err(RuntimeError::unsupported(
            "matmul_into",
            &shapes,
            "operands and output must be f32",
        ));
    }
    if a.rank() == 0 || b.rank() == 0 {
        return Err(RuntimeError::unsupported(
            "matmul_into",
            &shapes,
            "operands must have rank ≥ 1",
        ));
    }
    let (a2, b2) = as_matrices(a, b);
    let g = geometry(&a2, &b2);
    if a2.shape()[a2.rank() - 1] != b2.shape()[b2.rank() - 2]
        || out.numel() != g.nb * g.m * g.n
        || !out.is_contiguous()
    {
        return Err(RuntimeError::unsupported(
            "matmul_into",
            &shapes,
            "the output must be contiguous with the result's element count",
        ));
    }
    if out.shares_storage(a) || out.shares_storage(b) {
        return Err(RuntimeError::unsupported(
            "matmul_into",
            &shapes,
            "the output shares storage with an operand",
        ));
    }
    // the operands as read: row-major copies where that is faster (checked above as given);
    // a weight's copy is kept between calls while the weight is unchanged
    let (a2, b2) = repacked_with(a2, b2, true);
    let g = geometry(&a2, &b2);
    let (ga, gb) = (a2.storage().guard(), b2.storage().guard());
    let (pa, pb) = (ga.slice::<f32>().as_ptr(), gb.slice::<f32>().as_ptr());
    let dst = out.data_ptr() as *mut f32;
    let batch = &g.shape[..g.shape.len() - 2];
    let (m, n, k) = (g.m, g.n, g.k);
    // One tall matrix when every batch item shares b and a's batch rows are evenly spaced.
    let a_batched_fully = a2.shape()[..a2.rank() - 2].iter().product::<usize>() == g.nb;
    let fold = if g.nb > 1 && g.sb.iter().all(|&s| s == 0) && a_batched_fully {
        folded_row_stride(&a2)
    } else {
        None
    };
    let (items, rows, a_rs) = match fold {
        Some(rs) => (1, g.nb * m, rs),
        None => (g.nb, m, g.a_rs),
    };
    let base_a = MatRef {
        ptr: pa,
        rs: a_rs,
        cs: g.a_cs,
    };
    let base_b = MatRef {
        ptr: pb,
        rs: g.b_rs,
        cs: g.b_cs,
    };
    let mats = |bi: usize| {
        let (oa, ob) = if fold.is_some() {
            (a2.ioffset(), b2.ioffset())
        } else {
            batch_offsets(bi, batch, (&g.sa, &g.sb), (a2.ioffset(), b2.ioffset()))
        };
        (base_a.at(oa), base_b.at(ob))
    };
    let dst = SendPtr(dst);
    // (batch item, first row, rows) blocks; each one is a gemm then its epilogue
    let block = rows_per_block(n);
    let threads = pool::threads();
    let big = rows
        .saturating_mul(n)
        .saturating_mul(k)
        .saturating_mul(items)
        >= PAR_FLOPS;
    let run_block = |bi: usize, r0: usize, nr: usize, par: Parallelism| {
        let (ma, mb) = mats(bi);
        let d = dst;
        // SAFETY: the operands' layouts are in bounds of their storages (checked when the
        // views were made) and their read guards are held; `out` is contiguous with
        // items·rows·n elements, and each block writes its own rows of it.
        unsafe {
            gemm_into(
                d.0.wrapping_add((bi * rows + r0) * n),
                n as isize,
                nr,
                n,
                k,
                ma.at(r0 as isize * a_rs),
                mb,
                false,
                par,
            )
        };
        if let Some(e) = epilogue {
            let first = bi * rows + r0;
            let mut r = 0;
            while r < nr {
                let c = block.min(nr - r);
                e(first + r, c);
                r += c;
            }
        }
    };
    // row shares per item: 1 when there are items enough for every thread
    let pieces = threads.div_ceil(items.max(1));
    let work = rows
        .saturating_mul(n)
        .saturating_mul(k)
        .saturating_mul(items);
    if !big || threads == 1 {
        for bi in 0..items {
            run_block(bi, 0, rows, Parallelism::None);
        }
    } else if pieces == 1
        || (epilogue.is_some() && rows >= MIN_ROWS_PER_THREAD * pieces)
        || (rows > n && rows >= ROW_SHARE_MIN_ROWS * pieces)
    {
        // One single-threaded gemm (then its epilogue) per item when there are items enough
        // for every thread; else each thread takes a share of every item's rows (tall
        // products, and those with an epilogue, which then runs on rows it just wrote,
        // still in cache). MiniLM's FFN and projection matmuls with their bias (and gelu)
        // epilogue: 2-15% faster per kernel so than gemm's own threads then a separate pass
        // (KILN_PROFILE, A/B)
        let per = rows.div_ceil(pieces);
        pool::run(items * pieces, pool::Wake::Sleepers, &|i| {
            let (bi, r0) = (i / pieces, (i % pieces) * per);
            if r0 < rows {
                run_block(bi, r0, per.min(rows - r0), Parallelism::None);
            }
        });
    } else if work < RAYON_FLOPS {
        // Few matrices of few rows: each thread takes a share of every item's columns
        // (packing all of a's few rows, and its own columns of b), then the epilogue runs
        // over row blocks. On the kernel pool, whose workers are still spinning from the
        // kernel before: rayon's would sleep between two matmuls of a small model and be
        // woken through the kernel (a futex each way, about a third of BERT's steady state
        // through the torch backend at hidden 128).
        let cols = n.div_ceil(pieces).next_multiple_of(COLUMN_ALIGN).min(n);
        let shares = n.div_ceil(cols);
        pool::run(items * shares, pool::Wake::Sleepers, &|i| {
            let (bi, c0) = (i / shares, (i % shares) * cols);
            let (ma, mb) = mats(bi);
            let d = dst; // the whole SendPtr, not its field (closures capture fields apart)
                         // SAFETY: as in `run_block`; item bi owns rows [bi·rows, (bi+1)·rows) of out and
                         // this share its columns [c0, c0 + nc) of them.
            unsafe {
                gemm_into(
                    d.0.wrapping_add(bi * rows * n + c0),
                    n as isize,
                    rows,
                    cols.min(n - c0),
                    k,
                    ma,
                    mb.at(c0 as isize * mb.cs),
                    false,
                    Parallelism::None,
                )
            };
        });
        if let Some(e) = epilogue {
            let total = items * rows;
            let blocks = total.div_ceil(block);
            pool::run(blocks, pool::Wake::Sleepers, &|i| {
                let r0 = i * block;
                e(r0, block.min(total - r0));
            });
        }
    } else {
        // Few big matrices and nothing after, or too few rows to share: gemm's own threads,
        // then any epilogue over row blocks in parallel.
        for bi in 0..items {
            let (ma, mb) = mats(bi);
            // SAFETY: as above; item bi owns rows [bi·rows, (bi+1)·rows) of out.
            unsafe {
                gemm_into(
                    dst.0.wrapping_add(bi * rows * n),
                    n as isize,
                    rows,
                    n,
                    k,
                    ma,
                    mb,
                    false,
                    Parallelism::Rayon(0),
                )
            };
        }
        if let Some(e) = epilogue {
            let total = items * rows;
            let blocks = total.div_ceil(block);
            (0..blocks).into_par_iter().for_each(|i| {
                let r0 = i * block;
                e(r0, block.min(total - r0));
            });
        }
    }
    out.storage().bump_version();
    Ok(())
}

/// A pointer to the output, shared by the blocks that write disjoint rows of it.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: blocks write disjoint rows; the pointer outlives the parallel region.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}
