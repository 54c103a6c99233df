//! Convolutions (`Op::Convolution`, any spatial rank, groups, transposed; the geometry is
//! `kiln_ir::conv`'s). Per batch item and group, a forward convolution gathers the input
//! under every kernel tap into columns (im2col; a 1×1 kernel of stride 1 reads the input as
//! it is) and multiplies the group's weight rows by them with `gemm`; a transposed one
//! multiplies the weight's transpose by the input and adds the columns back to the positions
//! they reach (col2im). Depthwise convolutions (one input channel a group) skip the GEMM,
//! whose one-row products would waste it, and sum the taps directly. Items run in parallel
//! on the kernel pool; f16/bf16 compute in f32 and round once. Two shapes take their own
//! paths first: one output channel a group over 16 groups or more (`conv_by_channel`:
//! vectors across the groups) and fewer output positions than taps, the weight gradient's
//! shape (`conv_few_outputs`: one GEMM over every position and batch item).

use super::matmul::{gemm_into, GemmT, MatRef};
use super::{conv_by_channel, conv_few_outputs};
use crate::error::RuntimeError;
use crate::pool;
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use gemm::Parallelism;
use kiln_ir::conv::ConvGeometry;
use kiln_ir::DType;

/// Below this many multiply-adds a convolution runs on the calling thread alone.
const PAR_FLOPS: usize = 1 << 17;

/// A forward convolution with fewer output positions than this gathers the columns of the
/// whole batch into one matrix and runs one GEMM a group, its rows shared on the pool: a
/// GEMM a batch item would have as few columns as positions (4 in a ResNet's last stage at
/// 64×64 inputs), where packing dominates. ResNet-18 (batch 4, 64×64) through the torch
/// backend, inference, by threshold: never 12.5 ms, 16: 9.1, 32: 7.7-7.9, 64: 7.8, 128:
/// 8.2, 1024: 9.5 (its 3×3 convolutions at 2×2 outputs went from 1.24 to 0.58 ms with a
/// GEMM over the batch, and at 16×16 outputs from 0.26 to 0.50 ms).
pub(super) const BATCHED_BELOW: usize = 64;

/// For each kernel tap `k` and each position `q` of the side the taps are enumerated over
/// (output positions of a forward convolution, input positions of a transposed one), the
/// flat spatial index on the other side, or -1 where the tap falls in the padding; and the
/// same as runs: consecutive positions whose indices step by the innermost dim's stride
/// (a row of the output between the padding), so that the loops over a tap's positions copy
/// and multiply-add slices instead of looking every index up (KILN_PROFILE, ConvNeXt-atto's
/// first 7×7 depthwise convolution at batch 4 and 64×64 images: 1.43 ms a call looked up
/// position by position, measured while a build shared the machine; 0.33 ms by runs, on a
/// quiet one).
pub(super) struct TapMap {
    taps: usize,
    /// How far a run's index moves from one position to the next.
    pub(super) step: isize,
    /// Every tap's runs, tap `t`'s at `runs[run_start[t]..run_start[t + 1]]`.
    runs: Vec<Run>,
    run_start: Vec<usize>,
}

/// `len` consecutive positions from `at` whose indices are `from`, `from + step`, ...
#[derive(Clone, Copy)]
pub(super) struct Run {
    at: usize,
    pub(super) from: isize,
    pub(super) len: usize,
}

impl TapMap {
    pub(super) fn new(
        g: &ConvGeometry<'_>,
        from: &[usize],
        kernel: &[usize],
        to: &[usize],
    ) -> TapMap {
        let taps: usize = kernel.iter().product();
        let positions: usize = from.iter().product();
        let rank = from.len();
        let mut index = vec![-1isize; taps * positions];
        let mut k = vec![0usize; rank];
        for t in 0..taps {
            let mut q = vec![0usize; rank];
            for p in 0..positions {
                let mut flat = 0usize;
                let mut inside = true;
                for i in 0..rank {
                    let at = if g.transposed {
                        g.target(i, q[i], k[i], to[i])
                    } else {
                        g.source(i, q[i], k[i], to[i])
                    };
                    match at {
                        Some(a) => flat = flat * to[i] + a,
                        None => {
                            inside = false;
                            break;
                        }
                    }
                }
                if inside {
                    index[t * positions + p] = flat as isize;
                }
                advance(&mut q, from);
            }
            advance(&mut k, kernel);
        }
        let step = g.stride.last().map_or(1, |&s| s as isize);
        let (mut runs, mut run_start) = (Vec::new(), Vec::with_capacity(taps + 1));
        for t in 0..taps {
            run_start.push(runs.len());
            let row = &index[t * positions..(t + 1) * positions];
            let mut p = 0;
            while p < positions {
                if row[p] < 0 {
                    p += 1;
                    continue;
                }
                let mut len = 1;
                while p + len < positions && row[p + len] == row[p] + len as isize * step {
                    len += 1;
                }
                runs.push(Run {
                    at: p,
                    from: row[p],
                    len,
                });
                p += len;
            }
        }
        run_start.push(runs.len());
        TapMap {
            taps,
            step,
            runs,
            run_start,
        }
    }

    /// Tap `tap`'s runs.
    pub(super) fn runs(&self, tap: usize) -> &[Run] {
        &self.runs[self.run_start[tap]..self.run_start[tap + 1]]
    }

    /// `dst[q] = src[index(tap, q)]` for every position `q` the tap reaches (the others
    /// untouched).
    ///
    /// # Safety
    /// `src` valid for reads at every index of the map; `dst` holds every position.
    pub(super) unsafe fn gather<T: Copy>(&self, tap: usize, src: *const T, dst: &mut [T]) {
        for r in self.runs(tap) {
            let out = &mut dst[r.at..r.at + r.len];
            if self.step == 1 {
                out.copy_from_slice(std::slice::from_raw_parts(src.offset(r.from), r.len));
            } else {
                for (j, v) in out.iter_mut().enumerate() {
                    *v = *src.offset(r.from + j as isize * self.step);
                }
            }
        }
    }

    /// `dst[q] += w·src[index(tap, q)]` for every position `q` the tap reaches.
    ///
    /// # Safety
    /// As [`TapMap::gather`].
    unsafe fn multiply_add<T: GemmT>(&self, tap: usize, w: T, src: *const T, dst: &mut [T]) {
        for r in self.runs(tap) {
            let out = &mut dst[r.at..r.at + r.len];
            if self.step == 1 {
                let x = std::slice::from_raw_parts(src.offset(r.from), r.len);
                for (v, &xv) in out.iter_mut().zip(x) {
                    *v = *v + w * xv;
                }
            } else {
                for (j, v) in out.iter_mut().enumerate() {
                    *v = *v + w * *src.offset(r.from + j as isize * self.step);
                }
            }
        }
    }

    /// `dst[index(tap, q)] += w·src[q]` for every position `q` the tap reaches (the
    /// transpose of [`TapMap::multiply_add`]; `w` one: a plain scatter-add).
    ///
    /// # Safety
    /// `dst` valid for reads and writes at every index of the map, and not overlapping
    /// `src`, which holds every position.
    unsafe fn scatter_add<T: GemmT>(&self, tap: usize, w: T, src: &[T], dst: *mut T) {
        for r in self.runs(tap) {
            let x = &src[r.at..r.at + r.len];
            if self.step == 1 {
                let out = std::slice::from_raw_parts_mut(dst.offset(r.from), r.len);
                for (v, &xv) in out.iter_mut().zip(x) {
                    *v = *v + w * xv;
                }
            } else {
                for (j, &xv) in x.iter().enumerate() {
                    let at = dst.offset(r.from + j as isize * self.step);
                    *at = *at + w * xv;
                }
            }
        }
    }
}

/// The next multi-index of `shape` in row-major order (wrapping to zeros at the end).
pub(super) fn advance(at: &mut [usize], shape: &[usize]) {
    for d in (0..shape.len()).rev() {
        at[d] += 1;
        if at[d] < shape[d] {
            return;
        }
        at[d] = 0;
    }
}

/// The convolution of `x` with `w` into a fresh contiguous tensor of `out_shape` (operands
/// as `kiln_ir::infer` accepted them).
pub(crate) fn convolution(
    x: &CpuTensor,
    w: &CpuTensor,
    g: &ConvGeometry<'_>,
    out_shape: &[usize],
) -> Result<CpuTensor, RuntimeError> {
    Ok(match x.dtype() {
        DType::F32 => conv_float::<f32>(&x.contiguous(), &w.contiguous(), g, out_shape),
        DType::F64 => conv_float::<f64>(&x.contiguous(), &w.contiguous(), g, out_shape),
        DType::F16 | DType::BF16 => {
            let (x32, w32) = (x.copy_as(DType::F32), w.copy_as(DType::F32));
            conv_float::<f32>(&x32, &w32, g, out_shape).copy_as(x.dtype())
        }
        DType::I32 | DType::I64 | DType::Bool => {
            return Err(RuntimeError::unsupported(
                "convolution",
                &[x.shape(), w.shape()],
                "convolutions take floating operands",
            ))
        }
    })
}

/// Sizes of one convolution call.
pub(super) struct Dims {
    pub(super) batch: usize,
    /// input channels of a group
    pub(super) cin: usize,
    /// output channels of a group
    pub(super) cout: usize,
    /// input positions
    pub(super) space_in: usize,
    /// output positions
    pub(super) space_out: usize,
    pub(super) taps: usize,
}

#[derive(Clone, Copy)]
pub(super) struct SendPtr<T>(pub(super) *mut T);
// SAFETY: every parallel chunk writes a disjoint part of the output; the pointer outlives
// the parallel region.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the wrapper, not the raw field).
    pub(super) fn get(self) -> *mut T {
        self.0
    }
}

fn conv_float<T: GemmT>(
    x: &CpuTensor,
    w: &CpuTensor,
    g: &ConvGeometry<'_>,
    out_shape: &[usize],
) -> CpuTensor {
    let (xs, ks, ys) = (&x.shape()[2..], &w.shape()[2..], &out_shape[2..]);
    let groups = g.groups;
    let d = Dims {
        batch: x.shape()[0],
        cin: x.shape()[1] / groups,
        cout: out_shape[1] / groups,
        space_in: xs.iter().product(),
        space_out: ys.iter().product(),
        taps: ks.iter().product(),
    };
    let numel: usize = out_shape.iter().product();
    let macs = d.batch * groups * d.cin * d.cout * d.taps * d.space_in.max(d.space_out);
    let threads = if macs >= PAR_FLOPS {
        pool::threads()
    } else {
        1
    };
    if numel > 0 && conv_by_channel::applies(g, &d) {
        let y = conv_by_channel::convolve::<T>(g, &d, (xs, ks, ys), x, w, threads);
        return y.view_unchecked(out_shape, &crate::tensor::contiguous_strides(out_shape), 0);
    }
    if numel > 0 && d.cin > 0 && conv_few_outputs::applies(g, &d) {
        let y = conv_few_outputs::convolve::<T>(g, &d, (xs, ks, ys), x, w, threads);
        return y.view_unchecked(out_shape, &crate::tensor::contiguous_strides(out_shape), 0);
    }
    let storage = Storage::zeros(T::DTYPE, numel);
    if numel > 0 && d.cin > 0 {
        let (gx, gw) = (x.storage().guard(), w.storage().guard());
        let xp = SendPtr(gx.slice::<T>()[x.offset()..].as_ptr() as *mut T);
        let wp = SendPtr(gw.slice::<T>()[w.offset()..].as_ptr() as *mut T);
        let yp = SendPtr(storage.elements_ptr() as *mut T);
        let items = d.batch * groups;
        let inner = if items < threads {
            Parallelism::Rayon(0)
        } else {
            Parallelism::None
        };
        let (fmap, tmap) = if g.transposed {
            (None, Some(TapMap::new(g, xs, ks, ys)))
        } else {
            (forward_map(g, xs, ks, ys), None)
        };
        if !g.transposed && d.cin > 1 && d.space_out < BATCHED_BELOW && d.batch > 1 {
            // one GEMM a group over the whole batch's columns, its rows shared on the pool
            for grp in 0..groups {
                // SAFETY: as below; group grp writes only its own output channels.
                unsafe {
                    forward_group_batched(&d, fmap.as_ref(), grp, groups, xp, wp, yp, threads)
                }
            }
            return CpuTensor::from_storage(storage, out_shape);
        }
        let run = |item: usize| {
            let (n, grp) = (item / groups, item % groups);
            // SAFETY: x and w are contiguous with the shapes infer checked; item (n, grp)
            // reads its own input channels and writes only its own output channels.
            unsafe {
                let xi = xp.get().add((n * groups + grp) * d.cin * d.space_in) as *const T;
                let yi = yp.get().add((n * groups + grp) * d.cout * d.space_out);
                let wi = wp.get().add(grp * d.cin * d.cout * d.taps) as *const T;
                match &tmap {
                    Some(map) => transposed_item(&d, map, xi, wi, yi, inner),
                    None => forward_item(&d, fmap.as_ref(), xi, wi, yi, inner),
                }
            }
        };
        if threads > 1 && items > 1 {
            pool::run(items, pool::Wake::Sleepers, &run);
        } else {
            (0..items).for_each(run);
        }
    }
    CpuTensor::from_storage(storage, out_shape)
}

/// The forward tap map, or `None` for a 1×1 kernel of stride 1 and no padding (the input
/// is its own column matrix).
fn forward_map(g: &ConvGeometry<'_>, xs: &[usize], ks: &[usize], ys: &[usize]) -> Option<TapMap> {
    let identity = ks.iter().all(|&k| k == 1)
        && g.stride.iter().all(|&s| s == 1)
        && g.padding.iter().all(|&p| p == 0);
    (!identity).then(|| TapMap::new(g, ys, ks, xs))
}

/// One (batch item, group) of a forward convolution: `y [cout, L] = w [cout, cin·taps] @
/// cols [cin·taps, L]`.
///
/// # Safety
/// `x` holds `cin·space_in` readable elements, `w` `cout·cin·taps`, `y` `cout·space_out`
/// writable zeros nothing else writes.
unsafe fn forward_item<T: GemmT>(
    d: &Dims,
    map: Option<&TapMap>,
    x: *const T,
    w: *const T,
    y: *mut T,
    par: Parallelism,
) {
    let l = d.space_out;
    let Some(map) = map else {
        let a = MatRef {
            ptr: w,
            rs: d.cin as isize,
            cs: 1,
        };
        let b = MatRef {
            ptr: x,
            rs: d.space_in as isize,
            cs: 1,
        };
        gemm_into(y, l as isize, d.cout, l, d.cin, a, b, false, par);
        return;
    };
    if d.cin == 1 {
        // depthwise: each output channel sums its taps over its one input channel
        for o in 0..d.cout {
            let yo = std::slice::from_raw_parts_mut(y.add(o * l), l);
            for t in 0..map.taps {
                map.multiply_add(t, *w.add(o * map.taps + t), x, yo);
            }
        }
        return;
    }
    let rows = d.cin * map.taps;
    let mut cols = vec![T::default(); rows * l];
    for c in 0..d.cin {
        let xc = x.add(c * d.space_in);
        for t in 0..map.taps {
            map.gather(t, xc, &mut cols[(c * map.taps + t) * l..][..l]);
        }
    }
    let a = MatRef {
        ptr: w,
        rs: rows as isize,
        cs: 1,
    };
    let b = MatRef {
        ptr: cols.as_ptr(),
        rs: l as isize,
        cs: 1,
    };
    gemm_into(y, l as isize, d.cout, l, rows, a, b, false, par);
}

/// One group of a forward convolution over the whole batch: `cols [cin·taps, N·L]` (the
/// columns of item n at `n·L`), `tmp [cout, N·L] = w @ cols`, scattered back to `y [N, G·cout,
/// L]`.
///
/// # Safety
/// `x`, `w` and `y` are the whole contiguous input, weight and (zeroed) output; nothing
/// else writes group `grp`'s output channels.
#[allow(clippy::too_many_arguments)]
unsafe fn forward_group_batched<T: GemmT>(
    d: &Dims,
    map: Option<&TapMap>,
    grp: usize,
    groups: usize,
    x: SendPtr<T>,
    w: SendPtr<T>,
    y: SendPtr<T>,
    threads: usize,
) {
    let (x, y) = (x.get(), y.get());
    let (l, taps) = (d.space_out, d.taps);
    let width = d.batch * l;
    let rows = d.cin * taps;
    let mut cols = vec![T::default(); rows * width];
    for n in 0..d.batch {
        let xn = x.add((n * groups + grp) * d.cin * d.space_in) as *const T;
        for c in 0..d.cin {
            let xc = xn.add(c * d.space_in);
            for t in 0..taps {
                let dst = &mut cols[(c * taps + t) * width + n * l..][..l];
                match map {
                    Some(map) => map.gather(t, xc, dst),
                    None => dst.copy_from_slice(std::slice::from_raw_parts(xc, l)),
                }
            }
        }
    }
    let mut tmp = vec![T::default(); d.cout * width];
    let shares = threads.min(d.cout.div_ceil(16)).max(1);
    let per = d.cout.div_ceil(shares);
    let (tp, cp) = (SendPtr(tmp.as_mut_ptr()), SendPtr(cols.as_mut_ptr()));
    let share = |i: usize| {
        let (r0, r1) = (i * per, ((i + 1) * per).min(d.cout));
        if r0 >= r1 {
            return;
        }
        let a = MatRef {
            ptr: w.get().add((grp * d.cout + r0) * rows) as *const T,
            rs: rows as isize,
            cs: 1,
        };
        let b = MatRef {
            ptr: cp.get() as *const T,
            rs: width as isize,
            cs: 1,
        };
        gemm_into(
            tp.get().add(r0 * width),
            width as isize,
            r1 - r0,
            width,
            rows,
            a,
            b,
            false,
            Parallelism::None,
        );
    };
    if shares > 1 {
        pool::run(shares, pool::Wake::Sleepers, &share);
    } else {
        share(0);
    }
    for n in 0..d.batch {
        for o in 0..d.cout {
            let dst = y.add(((n * groups + grp) * d.cout + o) * l);
            std::ptr::copy_nonoverlapping(tmp.as_ptr().add(o * width + n * l), dst, l);
        }
    }
}

/// One (batch item, group) of a transposed convolution: `cols [cout·taps, S] = wᵀ @ x
/// [cin, S]` (w is [cin, cout·taps]), each column added to the outputs its taps reach.
///
/// # Safety
/// As [`forward_item`], with `y` zeroed.
unsafe fn transposed_item<T: GemmT>(
    d: &Dims,
    map: &TapMap,
    x: *const T,
    w: *const T,
    y: *mut T,
    par: Parallelism,
) {
    let s = d.space_in;
    let rows = d.cout * map.taps;
    if d.cin == 1 {
        let xs = std::slice::from_raw_parts(x, s);
        for o in 0..d.cout {
            let yo = y.add(o * d.space_out);
            for t in 0..map.taps {
                map.scatter_add(t, *w.add(o * map.taps + t), xs, yo);
            }
        }
        return;
    }
    let mut cols = vec![T::default(); rows * s];
    let a = MatRef {
        ptr: w,
        rs: 1,
        cs: rows as isize,
    };
    let b = MatRef {
        ptr: x,
        rs: s as isize,
        cs: 1,
    };
    gemm_into(
        cols.as_mut_ptr(),
        s as isize,
        rows,
        s,
        d.cin,
        a,
        b,
        false,
        par,
    );
    for o in 0..d.cout {
        let yo = y.add(o * d.space_out);
        for t in 0..map.taps {
            map.scatter_add(t, T::ONE, &cols[(o * map.taps + t) * s..][..s], yo);
        }
    }
}
