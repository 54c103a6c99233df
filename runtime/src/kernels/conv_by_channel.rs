//! Grouped convolutions with one output channel a group (depthwise convolutions, their
//! input gradients, and the weight gradients of depthwise convolutions, which
//! `convolution_backward` asks for as a convolution of groups with the batch as channels),
//! vectorised across the groups: the operands are transposed so that the groups are the
//! innermost dim, and every (output position, input channel of a group, tap) adds one
//! vector of all groups. Sliced a plane at a time (`conv::forward_item`), such a convolution
//! runs short rows of a few elements: EfficientNet-B0's training step (batch 4, 64×64)
//! spent 0.87 ms in a 240-channel 5×5 depthwise convolution at 8×8 and 1.6 ms in the weight
//! gradient of a 144-channel 3×3 one at 16×16 (KILN_PROFILE, in PyTorch).

use super::conv::{Dims, SendPtr};
use super::matmul::GemmT;
use crate::pool;
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use kiln_ir::conv::ConvGeometry;

/// Fewest groups for which a vector across them pays for the transposes.
pub(super) const MIN_GROUPS: usize = 16;

/// Whether [`convolve`] runs this convolution: one output channel a group, and for a
/// transposed convolution one input channel a group too (its weight is then the same
/// `[groups, channels, taps]` matrix a forward one has).
pub(super) fn applies(g: &ConvGeometry<'_>, d: &Dims) -> bool {
    g.groups >= MIN_GROUPS && d.cout == 1 && (!g.transposed || d.cin == 1)
}

/// `table[q·taps + t]`: the input position that output position `q` reads through tap `t`
/// (a forward convolution), or whose tap `t` reaches output `q` (a transposed one); -1
/// where there is none (padding, a stride skipped over, a position cut off).
fn position_table(g: &ConvGeometry<'_>, xs: &[usize], ks: &[usize], ys: &[usize]) -> Vec<isize> {
    let (taps, outputs): (usize, usize) = (ks.iter().product(), ys.iter().product());
    let rank = xs.len();
    let mut table = vec![-1isize; outputs * taps];
    let (mut q, mut k) = (vec![0usize; rank], vec![0usize; rank]);
    for row in table.chunks_mut(taps.max(1)).take(outputs) {
        for at in row.iter_mut() {
            let mut flat = 0usize;
            let mut inside = true;
            for i in 0..rank {
                let source = if g.transposed {
                    // q = s·stride + k·dilation - padding, solved for s
                    (q[i] + g.padding[i])
                        .checked_sub(k[i] * g.dilation[i])
                        .filter(|v| v % g.stride[i] == 0)
                        .map(|v| v / g.stride[i])
                        .filter(|&s| s < xs[i])
                } else {
                    g.source(i, q[i], k[i], xs[i])
                };
                match source {
                    Some(s) => flat = flat * xs[i] + s,
                    None => {
                        inside = false;
                        break;
                    }
                }
            }
            if inside {
                *at = flat as isize;
            }
            super::conv::advance(&mut k, ks);
        }
        super::conv::advance(&mut q, ys);
    }
    table
}

/// The convolution of `x [B, G·cin, S]` with `w [G, cin, taps]` into a fresh `[B, G, Q]`
/// (`x` and `w` contiguous; `applies` holds).
pub(super) fn convolve<T: GemmT>(
    g: &ConvGeometry<'_>,
    d: &Dims,
    (xs, ks, ys): (&[usize], &[usize], &[usize]),
    x: &CpuTensor,
    w: &CpuTensor,
    threads: usize,
) -> CpuTensor {
    let groups = g.groups;
    let (cin, space, taps, outputs) = (d.cin, d.space_in, d.taps, d.space_out);
    let table = position_table(g, xs, ks, ys);
    // xt [B, cin·S, G], wt [cin·taps, G]: transposed copies (AVX block transposes)
    let plane = cin * space;
    let gi = groups as isize;
    let xt = x
        .view_unchecked(
            &[d.batch, plane, groups],
            &[(groups * plane) as isize, 1, plane as isize],
            x.offset(),
        )
        .contiguous();
    let wt = w
        .view_unchecked(
            &[cin * taps, groups],
            &[1, (cin * taps) as isize],
            w.offset(),
        )
        .contiguous();
    let rows = d.batch * outputs;
    let yt = Storage::zeros(T::DTYPE, rows * groups);
    {
        let (gx, gw) = (xt.storage().guard(), wt.storage().guard());
        let (xt, wt) = (gx.slice::<T>(), gw.slice::<T>());
        let chunks = if threads > 1 {
            rows.min(threads * 4)
        } else {
            1
        };
        let per = rows.div_ceil(chunks.max(1));
        let yp = SendPtr(yt.elements_ptr() as *mut T);
        let table = &table;
        let chunk = |i: usize| {
            for r in i * per..((i + 1) * per).min(rows) {
                let (b, q) = (r / outputs, r % outputs);
                // SAFETY: row r of yt is this chunk's alone, and yt outlives the region
                let acc =
                    unsafe { std::slice::from_raw_parts_mut(yp.get().add(r * groups), groups) };
                for c in 0..cin {
                    let xc = &xt[(b * cin + c) * space * groups..][..space * groups];
                    let row = &table[q * taps..][..taps];
                    for (t, &s) in row.iter().enumerate() {
                        if s < 0 {
                            continue;
                        }
                        let wv = &wt[(c * taps + t) * groups..][..groups];
                        let xv = &xc[s as usize * groups..][..groups];
                        for ((a, &wi), &xi) in acc.iter_mut().zip(wv).zip(xv) {
                            *a = *a + wi * xi;
                        }
                    }
                }
            }
        };
        if chunks > 1 {
            pool::run(chunks, pool::Wake::Sleepers, &chunk);
        } else {
            chunk(0);
        }
    }
    let qi = outputs as isize;
    CpuTensor::from_storage(yt, &[d.batch, outputs, groups])
        .view_unchecked(&[d.batch, groups, outputs], &[qi * gi, 1, gi], 0)
        .contiguous()
}
