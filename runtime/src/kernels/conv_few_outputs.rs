//! Forward convolutions with fewer output positions than kernel taps: above all the weight
//! gradients `convolution_backward` asks for as a forward convolution of the input (its
//! channels as the batch) with the output's gradient as the kernel, whose "output" is the
//! weight's few taps and whose "taps" are the gradient's positions. Per output position `q`,
//! `y[:, :, q] = cols_q [B, cin·taps] @ wᵀ` with `cols_q` the input each tap of `q` reads:
//! one GEMM of the whole batch a position. Gathered per batch item instead (`conv.rs`), the
//! columns are copied a few elements at a time: EfficientNet-B0's training step (batch 4,
//! 64×64) spent 1.7 ms in the weight gradient of a 1152→320 1×1 convolution at 2×2, a
//! 1152×16 @ 16×320 product.

use super::conv::{Dims, SendPtr, TapMap};
use super::matmul::{gemm_into, GemmT, MatRef};
use crate::pool;
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use gemm::Parallelism;
use kiln_ir::conv::ConvGeometry;

/// Most elements the stacked columns of one GEMM hold (16 MiB of f32); more output
/// positions than fit run as several GEMMs.
const MAX_COLUMNS: usize = 1 << 22;

/// Whether [`convolve`] runs this convolution: a forward one with fewer output positions
/// than taps, or with fewer than `BATCHED_BELOW` and a batch larger than its channels (the
/// weight gradient of a 3×3 convolution at 2×2: 1.1 ms here against 2.9 by `conv.rs`'s
/// batched GEMM, for 512 channels and a batch of 4). Forward convolutions of few outputs,
/// more taps and more channels than batch items, such as a ResNet's last 3×3 ones, measured
/// level with the batched GEMM, or slower (its columns are laid out for the product with
/// the weight as the left operand).
pub(super) fn applies(g: &ConvGeometry<'_>, d: &Dims) -> bool {
    !g.transposed
        && (d.space_out < d.taps || (d.space_out < super::conv::BATCHED_BELOW && d.batch > d.cin))
}

/// The forward convolution of `x [B, G·cin, S]` with `w [G·cout, cin, taps]` into a fresh
/// `[B, G·cout, Q]` (`x` and `w` contiguous; `applies` holds): per group, the columns of
/// every (output position, batch item) stacked as the rows of one matrix, one GEMM with the
/// weight's transpose, and the `[Q, B, cout]` result transposed into place.
pub(super) fn convolve<T: GemmT>(
    g: &ConvGeometry<'_>,
    d: &Dims,
    (xs, ks, ys): (&[usize], &[usize], &[usize]),
    x: &CpuTensor,
    w: &CpuTensor,
    threads: usize,
) -> CpuTensor {
    let groups = g.groups;
    let (batch, cin, cout, space) = (d.batch, d.cin, d.cout, d.space_in);
    let (taps, outputs) = (d.taps, d.space_out);
    // the tap map with the roles of output positions and taps exchanged: its "taps" are the
    // output positions, and each one's runs step through the kernel taps
    let exchanged = ConvGeometry {
        stride: g.dilation,
        dilation: g.stride,
        ..*g
    };
    let map = TapMap::new(&exchanged, ks, ys, xs);
    // one output position that reads the whole input plane in order: x is its own columns
    let whole_plane = outputs == 1 && space == taps && {
        let runs = map.runs(0);
        map.step == 1 && runs.len() == 1 && runs[0].from == 0 && runs[0].len == taps
    };
    let width = cin * taps;
    // output positions a GEMM: as many as fit MAX_COLUMNS, at least one
    let block = (MAX_COLUMNS / (batch * width).max(1)).clamp(1, outputs);
    let mut cols = if whole_plane {
        Vec::new()
    } else {
        vec![T::default(); block * batch * width]
    };
    // the longer side as the rows of every GEMM, decided once for the layout of tmp:
    // [G, cout, Q, B] when the weight is the left operand, else [G, Q, B, cout]
    let weight_left = cout > block * batch;
    let tmp = Storage::zeros(T::DTYPE, groups * outputs * batch * cout);
    let tp = tmp.elements_ptr() as *mut T;
    let (gx, gw) = (x.storage().guard(), w.storage().guard());
    let xp = gx.slice::<T>()[x.offset()..].as_ptr();
    let wp = gw.slice::<T>()[w.offset()..].as_ptr();
    for grp in 0..groups {
        for q0 in (0..outputs).step_by(block) {
            let qn = block.min(outputs - q0);
            // SAFETY: x holds B·G·cin·S elements and w G·cout·cin·taps (contiguous, as
            // infer checked); the map's indices lie inside a plane; tmp holds this group's
            // [Q, B, cout] block, written by this GEMM alone.
            unsafe {
                let a = if whole_plane {
                    MatRef {
                        ptr: xp.add(grp * cin * space),
                        rs: (groups * cin * space) as isize,
                        cs: 1,
                    }
                } else {
                    cols.fill(T::default());
                    for q in 0..qn {
                        for b in 0..batch {
                            let row = &mut cols[(q * batch + b) * width..][..width];
                            for c in 0..cin {
                                let plane = xp.add(((b * groups + grp) * cin + c) * space);
                                map.gather(q0 + q, plane, &mut row[c * taps..][..taps]);
                            }
                        }
                    }
                    MatRef {
                        ptr: cols.as_ptr(),
                        rs: width as isize,
                        cs: 1,
                    }
                };
                let rows = qn * batch;
                if weight_left {
                    // [cout, rows] = w [cout, width] @ colsᵀ
                    let weight = MatRef {
                        ptr: wp.add(grp * cout * width),
                        rs: width as isize,
                        cs: 1,
                    };
                    let cols_t = MatRef {
                        ptr: a.ptr,
                        rs: a.cs,
                        cs: a.rs,
                    };
                    let dst = tp.add((grp * cout * outputs + q0) * batch);
                    shared_gemm(
                        dst,
                        outputs * batch,
                        cout,
                        rows,
                        width,
                        weight,
                        cols_t,
                        threads,
                    );
                } else {
                    let weight_t = MatRef {
                        ptr: wp.add(grp * cout * width),
                        rs: 1,
                        cs: width as isize,
                    };
                    let dst = tp.add((grp * outputs + q0) * batch * cout);
                    shared_gemm(dst, cout, rows, cout, width, a, weight_t, threads);
                }
            }
        }
    }
    drop((gx, gw));
    // y[b, grp·cout + o, q] = tmp[grp, q, b, o], or tmp[grp, o, q, b] for the transposed
    // product
    let (qi, bi, ci) = (outputs as isize, batch as isize, cout as isize);
    let strides = if weight_left {
        [1, ci * qi * bi, qi * bi, bi]
    } else {
        [ci, qi * bi * ci, 1, bi * ci]
    };
    CpuTensor::from_storage(tmp, &[groups * outputs * batch * cout])
        .view_unchecked(&[batch, groups, cout, outputs], &strides, 0)
        .contiguous()
}

/// `dst [m, n] (row stride dst_rs) = a [m, k] @ b [k, n]`, the rows shared among up to
/// `threads` threads of the kernel pool (16 rows a share at least).
///
/// # Safety
/// As `gemm_into`.
#[allow(clippy::too_many_arguments)]
unsafe fn shared_gemm<T: GemmT>(
    dst: *mut T,
    dst_rs: usize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    threads: usize,
) {
    let shares = threads.min(m.div_ceil(16)).max(1);
    let per = m.div_ceil(shares);
    let (dp, ap) = (SendPtr(dst), SendPtr(a.ptr as *mut T));
    let (bp, brs, bcs, ars, acs) = (SendPtr(b.ptr as *mut T), b.rs, b.cs, a.rs, a.cs);
    let share = |i: usize| {
        let (r0, r1) = (i * per, ((i + 1) * per).min(m));
        if r0 >= r1 {
            return;
        }
        let a = MatRef {
            ptr: ap.get().offset(r0 as isize * ars) as *const T,
            rs: ars,
            cs: acs,
        };
        let b = MatRef {
            ptr: bp.get() as *const T,
            rs: brs,
            cs: bcs,
        };
        // SAFETY: share i writes rows r0..r1 of dst alone
        unsafe {
            gemm_into(
                dp.get().add(r0 * dst_rs),
                dst_rs as isize,
                r1 - r0,
                n,
                k,
                a,
                b,
                false,
                Parallelism::None,
            )
        };
    };
    if shares > 1 {
        pool::run(shares, pool::Wake::Sleepers, &share);
    } else {
        share(0);
    }
}
