//! Strided iteration: broadcast strides, dim collapsing, runs along the innermost dim, and the
//! pointwise drivers `map1`/`map2`/`map3`. Fast paths: inner loops specialised for unit and
//! zero (broadcast) strides on typed slices; outputs split into chunks over the kernel pool when
//! large.

use crate::element::Element;
use crate::storage::Storage;
use crate::tensor::{CpuTensor, Dims, Strides};
use smallvec::{smallvec, SmallVec};
use std::mem::MaybeUninit;
use std::ops::Range;

/// Chunk size (elements) for cheap pointwise ops: below it, run on the calling thread.
pub(crate) const GRAIN_CHEAP: usize = 1 << 15;
/// Chunk size for ops that cost a transcendental call per element.
pub(crate) const GRAIN_COSTLY: usize = 1 << 11;

/// The strides of `t` aligned to the broadcast shape `shape` (0 where `t` is broadcast).
pub(crate) fn broadcast_strides(t: &CpuTensor, shape: &[usize]) -> Strides {
    let (r, tr) = (shape.len(), t.rank());
    debug_assert!(tr <= r);
    let mut s: Strides = smallvec![0; r];
    for i in 0..tr {
        let o = r - tr + i;
        if t.shape()[i] == shape[o] && shape[o] != 1 {
            s[o] = t.strides()[i];
        }
    }
    s
}

/// An iteration space over `N` operands: the output shape with size-1 dims dropped and
/// adjacent dims merged where every operand's strides allow (at least one dim).
pub(crate) struct Space<const N: usize> {
    shape: Dims,
    strides: [Strides; N],
}

impl<const N: usize> Space<N> {
    /// Collapses `shape` with each operand's `strides` (aligned to `shape`).
    pub(crate) fn new(shape: &[usize], strides: [&[isize]; N]) -> Self {
        let mut cs: Dims = SmallVec::new();
        let mut cst: [Strides; N] = std::array::from_fn(|_| SmallVec::new());
        for d in (0..shape.len()).rev() {
            let n = shape[d];
            if n == 1 {
                continue;
            }
            if let Some(&inner_n) = cs.last() {
                if (0..N).all(|k| {
                    strides[k][d] == cst[k].last().expect("same length") * inner_n as isize
                }) {
                    *cs.last_mut().expect("non-empty") *= n;
                    continue;
                }
            }
            cs.push(n);
            for k in 0..N {
                cst[k].push(strides[k][d]);
            }
        }
        if cs.is_empty() {
            cs.push(1);
            for s in cst.iter_mut() {
                s.push(0);
            }
        }
        cs.reverse();
        for s in cst.iter_mut() {
            s.reverse();
        }
        Space {
            shape: cs,
            strides: cst,
        }
    }

    /// The offsets of each operand at row-major position `pos`.
    pub(crate) fn offsets_at(&self, base: [isize; N], mut pos: usize) -> [isize; N] {
        let mut offs = base;
        for d in (0..self.shape.len()).rev() {
            let i = (pos % self.shape[d]) as isize;
            pos /= self.shape[d];
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += i * st[d];
            }
        }
        offs
    }

    /// The collapsed shape (innermost dim last).
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Operand `k`'s strides over the collapsed shape.
    pub(crate) fn strides(&self, k: usize) -> &[isize] {
        &self.strides[k]
    }

    /// The strides of the innermost (collapsed) dim.
    pub(crate) fn inner_strides(&self) -> [isize; N] {
        let d = self.shape.len() - 1;
        std::array::from_fn(|k| self.strides[k][d])
    }

    /// Calls `f(pos, offsets, len)` for each run of the row-major positions in `range`:
    /// `len` consecutive positions from `pos` along the innermost dim, whose first elements
    /// lie at `offsets` (each operand's `base` plus its strided offset).
    pub(crate) fn runs(
        &self,
        base: [isize; N],
        range: Range<usize>,
        mut f: impl FnMut(usize, [isize; N], usize),
    ) {
        if range.is_empty() {
            return;
        }
        let nd = self.shape.len();
        let inner = self.shape[nd - 1];
        let ist = self.inner_strides();
        let mut idx: Dims = smallvec![0; nd];
        let mut rem = range.start / inner;
        let mut j = range.start % inner;
        for d in (0..nd - 1).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs = base;
        for d in 0..nd - 1 {
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += idx[d] as isize * st[d];
            }
        }
        let mut pos = range.start;
        loop {
            let len = (inner - j).min(range.end - pos);
            f(
                pos,
                std::array::from_fn(|k| offs[k] + j as isize * ist[k]),
                len,
            );
            pos += len;
            j = 0;
            if pos >= range.end {
                return;
            }
            let mut d = nd - 1;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                for (o, st) in offs.iter_mut().zip(&self.strides) {
                    *o += st[d];
                }
                if idx[d] < self.shape[d] {
                    break;
                }
                for (o, st) in offs.iter_mut().zip(&self.strides) {
                    *o -= st[d] * self.shape[d] as isize;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Runs `f(start, chunk)` over `out` split into chunks of `grain` elements, in parallel on
/// the kernel pool ([`crate::pool`]) when there is more than one chunk.
///
/// Not on rayon: the kernel pool's workers spin a while after each compiled kernel, and a
/// rayon job started then waited for its sleeping workers to get a core from them. A
/// squeeze-and-excitation block's spatial mean (`x.mean((2, 3))` of 4 × 32 × 32 × 32) took
/// 1359 µs after a convolution on the pool, 52 µs with rayon off (KILN_PROFILE, 2 cores).
pub(crate) fn for_chunks<T: Send>(
    out: &mut [T],
    grain: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let (len, grain) = (out.len(), grain.max(1));
    if len <= grain {
        return f(0, out);
    }
    let base = ChunkPtr(out.as_mut_ptr());
    crate::pool::run(len.div_ceil(grain), crate::pool::Wake::Sleepers, &|i| {
        let start = i * grain;
        let n = grain.min(len - start);
        // the whole wrapper, not its field (closures capture fields apart)
        let base = &base;
        // SAFETY: chunk i is out[start..start + n], disjoint from every other chunk, and
        // `out` is borrowed mutably until every chunk has run.
        f(start, unsafe {
            std::slice::from_raw_parts_mut(base.0.add(start), n)
        })
    });
}

/// The output of [`for_chunks`], shared by the chunks that write disjoint parts of it.
struct ChunkPtr<T>(*mut T);
// SAFETY: chunks write disjoint ranges; the pointer outlives the parallel region, and the
// elements are `Send`.
unsafe impl<T: Send> Send for ChunkPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for ChunkPtr<T> {}

/// Writes `f(x)` for every element of `x` (row-major) into `out`.
pub(crate) fn map1_into<A: Element, B: Element>(
    x: &CpuTensor,
    out: &mut [MaybeUninit<B>],
    grain: usize,
    f: &(impl Fn(A) -> B + Sync + Send),
) {
    debug_assert_eq!(out.len(), x.numel());
    let g = x.storage().guard();
    let data = g.slice::<A>();
    let space = Space::new(x.shape(), [x.strides()]);
    let [ia] = space.inner_strides();
    let nd = space.shape.len();
    if nd >= 2
        && ia.unsigned_abs() > SCATTERED
        && space.strides[0][nd - 2].unsigned_abs() < ia.unsigned_abs()
        && out.len() >= 4 * TILE * TILE
    {
        return map1_tiled(&space, data, x.ioffset(), out, grain, f);
    }
    if let Some(k) = block_transpose_split(&space, out.len()) {
        return map1_block_tiled(&space, k, data, x.ioffset(), out, grain, f);
    }
    for_chunks(out, grain, |start, chunk| {
        space.runs(
            [x.ioffset()],
            start..start + chunk.len(),
            |pos, [oa], len| {
                let o = &mut chunk[pos - start..][..len];
                if ia == 1 {
                    for (o, &v) in o.iter_mut().zip(&data[oa as usize..][..len]) {
                        o.write(f(v));
                    }
                } else {
                    for (i, o) in o.iter_mut().enumerate() {
                        o.write(f(data[(oa + i as isize * ia) as usize]));
                    }
                }
            },
        )
    });
}

/// An inner stride (in elements) above which consecutive reads touch different cache lines.
pub(crate) const SCATTERED: usize = 16;
/// Tile edge of the blocked (transposing) copy.
pub(crate) const TILE: usize = 32;

/// `map1_into` for a layout whose innermost dim is scattered but whose next dim is denser
/// (a transpose): walks TILE×TILE blocks so both reads and writes stay in cache.
fn map1_tiled<A: Element, B: Element>(
    space: &Space<1>,
    data: &[A],
    base: isize,
    out: &mut [MaybeUninit<B>],
    grain: usize,
    f: &(impl Fn(A) -> B + Sync + Send),
) {
    let nd = space.shape.len();
    let (rows, cols) = (space.shape[nd - 2], space.shape[nd - 1]);
    let (sr, sc) = (space.strides[0][nd - 2], space.strides[0][nd - 1]);
    let rows_per_chunk = (grain / cols).max(1).next_multiple_of(TILE);
    for_chunks(out, rows_per_chunk * cols, |start, chunk| {
        let (row0, nrows) = (start / cols, chunk.len() / cols);
        let mut buf: Vec<B> = Vec::with_capacity(TILE * TILE);
        let mut r = 0;
        while r < nrows {
            let i = (row0 + r) % rows;
            let tb = TILE.min(rows - i).min(nrows - r);
            let [off] = space.offsets_at([base], (row0 + r) * cols);
            for j0 in (0..cols).step_by(TILE) {
                let tj = TILE.min(cols - j0);
                // Read the tile along the dense input dim into a buffer, then write it
                // out along output rows: both sides stream (no cache-set thrashing when
                // the sizes are powers of two).
                buf.clear();
                for j in j0..j0 + tj {
                    let col = off + j as isize * sc;
                    if sr == 1 {
                        buf.extend(data[col as usize..][..tb].iter().map(|&v| f(v)));
                    } else {
                        buf.extend((0..tb).map(|ii| f(data[(col + ii as isize * sr) as usize])));
                    }
                }
                for ii in 0..tb {
                    let orow = &mut chunk[(r + ii) * cols + j0..][..tj];
                    for (o, &v) in orow.iter_mut().zip(buf[ii..].iter().step_by(tb)) {
                        o.write(v);
                    }
                }
            }
            r += tb;
        }
    })
}

/// Most elements of the small inner block [`map1_block_tiled`] copies whole.
const BLOCK_MAX: usize = 256;
/// Edge of [`map1_block_tiled`]'s tiles over the two transposed dims.
const BLOCK_TILE: usize = 16;

/// Where the inner block starts when the layout is a transpose of two dims over small
/// contiguous-ish blocks: dims `k-2` and `k-1` before a block `k..` of at most [`BLOCK_MAX`]
/// elements, dim `k-1` scattered and dim `k-2` denser (a convolution's weight gradient
/// [cout, cin, kh, kw] as a permuted view of [cin, cout, kh', kw']). None otherwise.
fn block_transpose_split(space: &Space<1>, numel: usize) -> Option<usize> {
    let nd = space.shape.len();
    if nd < 3 || numel < 4 * TILE * TILE {
        return None;
    }
    let mut inner = 1;
    for k in (2..nd).rev() {
        inner *= space.shape[k];
        if inner > BLOCK_MAX {
            return None;
        }
        let (sa, sb) = (space.strides[0][k - 2], space.strides[0][k - 1]);
        if sb.unsigned_abs() > SCATTERED && sa.unsigned_abs() < sb.unsigned_abs() {
            return Some(k);
        }
    }
    None
}

/// `map1_into` for [`block_transpose_split`]'s layouts: output rows of dim `k-2` in chunks,
/// and within a chunk tiles of [`BLOCK_TILE`] × [`BLOCK_TILE`] (dims `k-2`, `k-1`), each
/// element's inner block copied whole, so the reads of a tile share their cache lines where
/// an element-order walk touched a new line every few elements. ResNet-18's 512×256×3×3
/// weight gradient viewed from [256, 512, 4, 4]: 3.2 ms in element order, torch's `copy_`
/// 5.5 ms (2 threads, medians).
fn map1_block_tiled<A: Element, B: Element>(
    space: &Space<1>,
    k: usize,
    data: &[A],
    base: isize,
    out: &mut [MaybeUninit<B>],
    grain: usize,
    f: &(impl Fn(A) -> B + Sync + Send),
) {
    let (na, nb) = (space.shape[k - 2], space.shape[k - 1]);
    let (sa, sb) = (space.strides[0][k - 2], space.strides[0][k - 1]);
    // each inner element's offset from its block's first, in row-major order
    let inner_space = Space::new(&space.shape[k..], [&space.strides[0][k..]]);
    let inner: usize = space.shape[k..].iter().product();
    let mut offs = Vec::with_capacity(inner);
    inner_space.runs([0], 0..inner, |_, [o], len| {
        let [st] = inner_space.inner_strides();
        offs.extend((0..len).map(|i| o + i as isize * st));
    });
    let row = nb * inner; // output elements of one index of dim k-2
    let rows_per_chunk = (grain / row).max(1).next_multiple_of(BLOCK_TILE);
    for_chunks(out, rows_per_chunk * row, |start, chunk| {
        let (row0, nrows) = (start / row, chunk.len() / row);
        let mut r = 0;
        while r < nrows {
            // rows r.. of this chunk, within one index of the dims before k-2
            let a0 = (row0 + r) % na;
            let ta = BLOCK_TILE.min(na - a0).min(nrows - r);
            let [first] = space.offsets_at([base], (row0 + r) * row);
            for b0 in (0..nb).step_by(BLOCK_TILE) {
                let tb = BLOCK_TILE.min(nb - b0);
                for i in 0..ta {
                    let src_a = first + i as isize * sa;
                    let dst = &mut chunk[(r + i) * row + b0 * inner..][..tb * inner];
                    for (j, block) in dst.chunks_exact_mut(inner).enumerate() {
                        let at = src_a + (b0 + j) as isize * sb;
                        for (o, &io) in block.iter_mut().zip(&offs) {
                            o.write(f(data[(at + io) as usize]));
                        }
                    }
                }
            }
            r += ta;
        }
    })
}

/// `t` itself, or a contiguous copy when its inner stride in an iteration space is so large
/// that a blocked copy first is cheaper than scattered reads.
pub(crate) fn densify(t: &CpuTensor, inner_stride: isize) -> Option<CpuTensor> {
    (inner_stride.unsigned_abs() > SCATTERED && t.numel() >= 4 * TILE * TILE)
        .then(|| t.contiguous())
}

/// A fresh contiguous tensor of `f(x)` for every element of `x`.
pub(crate) fn map1<A: Element, B: Element>(
    x: &CpuTensor,
    grain: usize,
    f: impl Fn(A) -> B + Sync + Send,
) -> CpuTensor {
    let s = Storage::build::<B>(x.numel(), |out| map1_into(x, out, grain, &f));
    CpuTensor::from_storage(s, x.shape())
}

/// `f(x)` for every element of `x`, in row-major order, as a Vec.
pub(crate) fn gather<A: Element, B: Element>(
    x: &CpuTensor,
    f: impl Fn(A) -> B + Sync + Send,
) -> Vec<B> {
    let n = x.numel();
    let mut v: Vec<B> = Vec::with_capacity(n);
    map1_into(x, &mut v.spare_capacity_mut()[..n], GRAIN_CHEAP, &f);
    // SAFETY: map1_into wrote all n elements.
    unsafe { v.set_len(n) };
    v
}

/// A fresh contiguous tensor of shape `shape` of `f(a, b)`, with `a` and `b` broadcast.
pub(crate) fn map2<A: Element, B: Element, O: Element>(
    a: &CpuTensor,
    b: &CpuTensor,
    shape: &[usize],
    grain: usize,
    f: impl Fn(A, B) -> O + Sync + Send,
) -> CpuTensor {
    let (sa, sb) = (broadcast_strides(a, shape), broadcast_strides(b, shape));
    let space = Space::new(shape, [&sa, &sb]);
    let [ia, ib] = space.inner_strides();
    let (da_, db_) = (densify(a, ia), densify(b, ib));
    if da_.is_some() || db_.is_some() {
        return map2(
            da_.as_ref().unwrap_or(a),
            db_.as_ref().unwrap_or(b),
            shape,
            grain,
            f,
        );
    }
    let (ga, gb) = (a.storage().guard(), b.storage().guard());
    let (da, db) = (ga.slice::<A>(), gb.slice::<B>());
    let n = shape.iter().product();
    let s = Storage::build::<O>(n, |out| {
        for_chunks(out, grain, |start, chunk| {
            space.runs(
                [a.ioffset(), b.ioffset()],
                start..start + chunk.len(),
                |pos, [oa, ob], len| {
                    let o = &mut chunk[pos - start..][..len];
                    match (ia, ib) {
                        (1, 1) => {
                            let (x, y) = (&da[oa as usize..][..len], &db[ob as usize..][..len]);
                            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                                o.write(f(x, y));
                            }
                        }
                        (1, 0) => {
                            let (x, y) = (&da[oa as usize..][..len], db[ob as usize]);
                            for (o, &x) in o.iter_mut().zip(x) {
                                o.write(f(x, y));
                            }
                        }
                        (0, 1) => {
                            let (x, y) = (da[oa as usize], &db[ob as usize..][..len]);
                            for (o, &y) in o.iter_mut().zip(y) {
                                o.write(f(x, y));
                            }
                        }
                        _ => {
                            for (i, o) in o.iter_mut().enumerate() {
                                let i = i as isize;
                                o.write(f(da[(oa + i * ia) as usize], db[(ob + i * ib) as usize]));
                            }
                        }
                    }
                },
            )
        })
    });
    CpuTensor::from_storage(s, shape)
}

/// A fresh contiguous tensor of shape `shape` of `f(a, b, c)`, all three broadcast.
pub(crate) fn map3<A: Element, B: Element, C: Element, O: Element>(
    a: &CpuTensor,
    b: &CpuTensor,
    c: &CpuTensor,
    shape: &[usize],
    f: impl Fn(A, B, C) -> O + Sync + Send,
) -> CpuTensor {
    let (sa, sb, sc) = (
        broadcast_strides(a, shape),
        broadcast_strides(b, shape),
        broadcast_strides(c, shape),
    );
    let space = Space::new(shape, [&sa, &sb, &sc]);
    let [ia, ib, ic] = space.inner_strides();
    let (da_, db_, dc_) = (densify(a, ia), densify(b, ib), densify(c, ic));
    if da_.is_some() || db_.is_some() || dc_.is_some() {
        let (a, b, c) = (
            da_.as_ref().unwrap_or(a),
            db_.as_ref().unwrap_or(b),
            dc_.as_ref().unwrap_or(c),
        );
        return map3(a, b, c, shape, f);
    }
    let (ga, gb, gc) = (
        a.storage().guard(),
        b.storage().guard(),
        c.storage().guard(),
    );
    let (da, db, dc) = (ga.slice::<A>(), gb.slice::<B>(), gc.slice::<C>());
    let n = shape.iter().product();
    let base = [a.ioffset(), b.ioffset(), c.ioffset()];
    let s = Storage::build::<O>(n, |out| {
        for_chunks(out, GRAIN_CHEAP, |start, chunk| {
            space.runs(
                base,
                start..start + chunk.len(),
                |pos, [oa, ob, oc], len| {
                    let o = &mut chunk[pos - start..][..len];
                    if (ia, ib, ic) == (1, 1, 1) {
                        let (x, y, z) = (
                            &da[oa as usize..][..len],
                            &db[ob as usize..][..len],
                            &dc[oc as usize..][..len],
                        );
                        for (((o, &x), &y), &z) in o.iter_mut().zip(x).zip(y).zip(z) {
                            o.write(f(x, y, z));
                        }
                    } else {
                        for (i, o) in o.iter_mut().enumerate() {
                            let i = i as isize;
                            o.write(f(
                                da[(oa + i * ia) as usize],
                                db[(ob + i * ib) as usize],
                                dc[(oc + i * ic) as usize],
                            ));
                        }
                    }
                },
            )
        })
    });
    CpuTensor::from_storage(s, shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapses_contiguous_dims() {
        let s = Space::new(&[2, 3, 4], [&[12, 4, 1], &[0, 0, 1]]);
        assert_eq!(s.shape.as_slice(), &[6, 4]);
        let s = Space::new(&[2, 3, 4], [&[12, 4, 1]]);
        assert_eq!(s.shape.as_slice(), &[24]);
        let s = Space::new(&[1, 1], [&[5, 7]]);
        assert_eq!(s.shape.as_slice(), &[1]);
    }

    #[test]
    fn runs_cover_ranges() {
        let s = Space::new(&[3, 4], [&[1, 3]]); // transposed [4,3]
        let mut seen = vec![];
        s.runs([0], 2..11, |pos, [o], len| seen.push((pos, o, len)));
        assert_eq!(seen, vec![(2, 6, 2), (4, 1, 4), (8, 2, 3)]);
    }
}
