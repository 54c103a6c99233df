//! The CPU caching allocator: 64-byte aligned blocks in size-class pools (powers of two below
//! 1 MiB, multiples of 2 MiB above), returned to the pool on drop and reused; memory goes back
//! to the system only through [`empty_cache`].

use parking_lot::Mutex;
use rayon::prelude::*;
use std::alloc::{alloc, alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;

/// Alignment of every block, in bytes (a cache line; enough for AVX-512 loads).
pub const ALIGN: usize = 64;
/// Requests of at least this many bytes use the large classes (multiples of [`LARGE_GRANULE`]).
const LARGE_LIMIT: usize = 1 << 20;
/// The granule of large size classes.
const LARGE_GRANULE: usize = 2 << 20;

/// A snapshot of the allocator's counters (see [`allocator_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in blocks held by live storages (counted at their size-class size).
    pub allocated_bytes: usize,
    /// Bytes obtained from the system and not returned: allocated plus cached.
    pub reserved_bytes: usize,
    /// Blocks in the cache, ready for reuse.
    pub cached_blocks: usize,
    /// Allocation requests of non-zero size served so far.
    pub alloc_calls: u64,
    /// Requests served from the cache instead of the system.
    pub cache_hits: u64,
    /// The most `allocated_bytes` has been since the process started or since the last
    /// [`reset_peak_stats`] (torch's `max_memory_allocated`).
    pub peak_allocated_bytes: usize,
}

/// A cached block's address. The pool owns it exclusively.
struct FreePtr(NonNull<u8>);
// SAFETY: a cached block is owned by the pool alone; nothing else holds its address.
unsafe impl Send for FreePtr {}

struct Pool {
    /// size class -> free blocks of exactly that class
    free: BTreeMap<usize, Vec<FreePtr>>,
    stats: AllocStats,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: BTreeMap::new(),
    stats: AllocStats {
        allocated_bytes: 0,
        reserved_bytes: 0,
        cached_blocks: 0,
        alloc_calls: 0,
        cache_hits: 0,
        peak_allocated_bytes: 0,
    },
});

/// The size class a request of `nbytes` (> 0) is served from.
pub(crate) fn size_class(nbytes: usize) -> usize {
    if nbytes < LARGE_LIMIT {
        nbytes.next_power_of_two().max(ALIGN)
    } else {
        nbytes.div_ceil(LARGE_GRANULE) * LARGE_GRANULE
    }
}

fn layout(class: usize) -> Layout {
    // Large blocks are aligned to 2 MiB so that they can be backed by transparent huge pages.
    let align = if class >= LARGE_LIMIT {
        LARGE_GRANULE
    } else {
        ALIGN
    };
    Layout::from_size_align(class, align).expect("size class overflows a Layout")
}

/// Asks the kernel to back a large block with transparent huge pages (fewer page faults on
/// first touch, fewer TLB misses for strided kernels). Advisory: failures are ignored.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    const MADV_HUGEPAGE: i32 = 14;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    // SAFETY: `ptr..ptr+len` is a block we just allocated (2 MiB aligned); madvise with
    // MADV_HUGEPAGE only changes how the kernel backs it, never its contents.
    unsafe {
        madvise(ptr.cast(), len, MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}

/// An owned, 64-byte aligned block of memory from the caching allocator. Dropping it returns
/// it to the pool. A block of 0 bytes holds no memory (its pointer is dangling but aligned).
/// A *foreign* block borrows memory another library owns (a PyTorch tensor's storage): it
/// holds that owner alive and gives nothing back to the pool.
pub(crate) struct Block {
    ptr: NonNull<u8>,
    /// the size class (0 for an empty or foreign block)
    class: usize,
    /// what keeps a foreign block's memory alive (dropped with the block)
    _owner: Option<Box<dyn Send + Sync>>,
}

// SAFETY: a Block owns its memory exclusively (like a Box<[u8]>); access to the bytes is
// mediated by its owner (Storage's lock).
unsafe impl Send for Block {}
// SAFETY: as above; `&Block` exposes only the address, never the bytes.
unsafe impl Sync for Block {}

/// Blocks of at least this many bytes are zeroed by the pool's threads, a piece each.
const PARALLEL_ZERO_BYTES: usize = 4 << 20;

/// Zeroes the first `nbytes` bytes at `ptr` (a block of ours with at least that many),
/// in parallel pieces when large: one core writes some 9 GB/s here (an embedding table's
/// gradient, 47 MB of zeros every training step, took 5 ms).
fn zero_bytes(ptr: NonNull<u8>, nbytes: usize) {
    if nbytes < PARALLEL_ZERO_BYTES || rayon::current_num_threads() == 1 {
        // SAFETY: the block has at least `nbytes` writable bytes we own.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, nbytes) };
        return;
    }
    let piece = (1 << 20).max(nbytes.div_ceil(4 * rayon::current_num_threads()));
    let base = ptr.as_ptr() as usize;
    (0..nbytes.div_ceil(piece)).into_par_iter().for_each(|i| {
        let start = i * piece;
        let len = piece.min(nbytes - start);
        // SAFETY: pieces are disjoint ranges inside the block's first `nbytes` bytes,
        // which we own and nothing else reads while they are zeroed.
        unsafe { std::ptr::write_bytes((base + start) as *mut u8, 0, len) };
    });
}

impl Block {
    /// A block of at least `nbytes` bytes. Its contents are unspecified unless `zeroed`,
    /// in which case the first `nbytes` bytes are zero.
    pub(crate) fn new(nbytes: usize, zeroed: bool) -> Block {
        if nbytes == 0 {
            // Aligned, non-null, never dereferenced (slices over it have length 0).
            let ptr = NonNull::new(ALIGN as *mut u8).expect("non-zero");
            return Block {
                ptr,
                class: 0,
                _owner: None,
            };
        }
        let class = size_class(nbytes);
        let cached = {
            let mut pool = POOL.lock();
            pool.stats.alloc_calls += 1;
            let hit = take_cached(&mut pool, class);
            if let Some((_, c)) = hit {
                pool.stats.cache_hits += 1;
                pool.stats.cached_blocks -= 1;
                add_allocated(&mut pool.stats, c);
            }
            hit
        };
        if let Some((ptr, class)) = cached {
            if zeroed {
                zero_bytes(ptr, nbytes);
            }
            return Block {
                ptr,
                class,
                _owner: None,
            };
        }
        let ptr = system_alloc(class, zeroed);
        let mut pool = POOL.lock();
        add_allocated(&mut pool.stats, class);
        pool.stats.reserved_bytes += class;
        Block {
            ptr,
            class,
            _owner: None,
        }
    }

    /// A block over memory that `owner` keeps alive.
    ///
    /// # Safety
    /// `ptr` must stay valid for reads (and for writes, if anything writes the storage) of
    /// the storage's bytes for as long as `owner` lives, and be aligned for its dtype.
    pub(crate) unsafe fn foreign(ptr: NonNull<u8>, owner: Box<dyn Send + Sync>) -> Block {
        Block {
            ptr,
            class: 0,
            _owner: Some(owner),
        }
    }

    /// Takes a foreign block's owner (the caller keeps the memory alive from then on).
    pub(crate) fn take_owner(&mut self) -> Option<Box<dyn Send + Sync>> {
        self._owner.take()
    }

    /// The block's address.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.class == 0 {
            return;
        }
        let mut pool = POOL.lock();
        pool.stats.allocated_bytes -= self.class;
        pool.stats.cached_blocks += 1;
        pool.free
            .entry(self.class)
            .or_default()
            .push(FreePtr(self.ptr));
    }
}

/// Counts `class` more bytes as allocated, raising the peak when it passes it.
fn add_allocated(stats: &mut AllocStats, class: usize) {
    stats.allocated_bytes += class;
    stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
}

/// Takes a cached block for `class`: the exact class, or for large classes the smallest
/// cached block at most 25% larger.
fn take_cached(pool: &mut Pool, class: usize) -> Option<(NonNull<u8>, usize)> {
    let max = if class >= LARGE_LIMIT {
        class + (class / 4).max(LARGE_GRANULE)
    } else {
        class
    };
    let (&found, _) = pool
        .free
        .range_mut(class..=max)
        .find(|(_, v)| !v.is_empty())?;
    let list = pool.free.get_mut(&found).expect("just found");
    let p = list.pop().expect("non-empty").0;
    if list.is_empty() {
        pool.free.remove(&found);
    }
    Some((p, found))
}

fn system_alloc(class: usize, zeroed: bool) -> NonNull<u8> {
    let l = layout(class);
    let large = class >= LARGE_LIMIT;
    for attempt in 0..2 {
        // SAFETY: `l` has non-zero size.
        let p = unsafe {
            if zeroed && !large {
                alloc_zeroed(l)
            } else {
                alloc(l)
            }
        };
        if let Some(p) = NonNull::new(p) {
            if large {
                advise_huge_pages(p.as_ptr(), class);
                if zeroed {
                    // SAFETY: the fresh block has `class` writable bytes.
                    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, class) };
                }
            }
            return p;
        }
        if attempt == 0 {
            // Out of memory: give the cache back to the system and try once more.
            empty_cache();
        }
    }
    handle_alloc_error(l)
}

/// Returns every cached (unused) block to the system, after dropping the copies of weights
/// the compiled matmuls keep (they are made again when next needed). Live tensors are
/// unaffected.
pub fn empty_cache() {
    // the compiled matmuls' kept copies of their weights go back to the pool first
    crate::pack_cache::clear();
    let blocks: Vec<(usize, Vec<FreePtr>)> = {
        let mut pool = POOL.lock();
        let taken = std::mem::take(&mut pool.free);
        let mut freed = 0;
        let mut n = 0;
        for (class, list) in &taken {
            freed += class * list.len();
            n += list.len();
        }
        pool.stats.reserved_bytes -= freed;
        pool.stats.cached_blocks -= n;
        taken.into_iter().collect()
    };
    for (class, list) in blocks {
        for p in list {
            // SAFETY: the block came from `system_alloc` with this class's layout and is
            // owned by the pool (no live Block refers to it).
            unsafe { dealloc(p.0.as_ptr(), layout(class)) };
        }
    }
}

/// A snapshot of the allocator's counters.
pub fn allocator_stats() -> AllocStats {
    POOL.lock().stats
}

/// Starts a new peak: `peak_allocated_bytes` becomes the bytes allocated now (torch's
/// `reset_peak_memory_stats`), so that the peak of a region of code is read after it.
pub fn reset_peak_stats() {
    let mut pool = POOL.lock();
    pool.stats.peak_allocated_bytes = pool.stats.allocated_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes() {
        assert_eq!(size_class(1), 64);
        assert_eq!(size_class(65), 128);
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class((1 << 20) - 1), 1 << 20);
        assert_eq!(size_class(1 << 20), 2 << 20);
        assert_eq!(size_class((2 << 20) + 1), 4 << 20);
        assert_eq!(size_class(5 << 20), 6 << 20);
    }

    #[test]
    fn blocks_are_aligned_and_zeroed() {
        for n in [1usize, 100, 4096, 3 << 20] {
            let b = Block::new(n, true);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            // SAFETY: the block holds at least n bytes.
            let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), n) };
            assert!(s.iter().all(|&x| x == 0));
        }
        let e = Block::new(0, false);
        assert_eq!(e.as_ptr() as usize % ALIGN, 0);
    }

    /// A block taken from the cache and asked for zeroed is zero in every byte asked for,
    /// below and above the size that is zeroed in parallel pieces (an odd size: the last
    /// piece is short).
    #[test]
    fn cached_blocks_asked_for_zeroed_are_zeroed() {
        for n in [3 << 20, (9 << 20) + 12345] {
            let dirty = Block::new(n, false);
            // SAFETY: the block holds at least n bytes, ours.
            unsafe { std::ptr::write_bytes(dirty.as_ptr(), 0xFF, n) };
            drop(dirty);
            // the same size class: the dirty block, unless another test took it meanwhile
            let b = Block::new(n, true);
            // SAFETY: the block holds at least n bytes.
            let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), n) };
            assert!(s.iter().all(|&x| x == 0), "{n} bytes");
        }
    }
}
