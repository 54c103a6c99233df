//! Large blocks of the caching allocator ([`crate::alloc`]) as memory mapped from the
//! kernel directly: 2 MiB aligned (so that transparent huge pages can back them), zero on
//! arrival, and unmapped when they go back, so their pages leave the process at once.
//!
//! Through `malloc` they did not always leave: glibc raises its mmap threshold to the size
//! of each mapped chunk freed, so once blocks went back, later blocks of up to 32 MiB came
//! from its heap, which keeps freed pages. Giving cached blocks back made BERT at base size
//! through the torch backend 350 MiB larger at its peak, not smaller.

use std::ptr::NonNull;

/// The alignment of every mapped block.
pub(crate) const ALIGN: usize = 2 << 20;

/// Maps `len` bytes (a multiple of [`ALIGN`]) of zeroed memory at an [`ALIGN`]-aligned
/// address; `None` when the system has none.
#[cfg(target_os = "linux")]
pub(crate) fn map(len: usize) -> Option<NonNull<u8>> {
    // over-map by one alignment, then unmap the unaligned head and the tail
    let span = len + ALIGN;
    // SAFETY: an anonymous private mapping of `span` bytes at an address the kernel picks;
    // nothing else refers to the memory it returns.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(ALIGN);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: both ranges lie inside the mapping just made, outside the block kept.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    advise_huge_pages(aligned as *mut u8, len);
    NonNull::new(aligned as *mut u8)
}

/// Unmaps a block [`map`] made.
///
/// # Safety
/// `ptr` and `len` must be a block [`map`] returned, which nothing uses any more.
#[cfg(target_os = "linux")]
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller's contract: the whole mapping, unused.
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}

/// Asks the kernel to back a block with transparent huge pages (fewer page faults on first
/// touch, fewer TLB misses for strided kernels). Advisory: failures are ignored.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    // SAFETY: `ptr..ptr+len` is a mapping of ours; MADV_HUGEPAGE only changes how the
    // kernel backs it, never its contents.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn layout(len: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(len, ALIGN).expect("a block's size overflows a Layout")
}

/// Allocates `len` bytes (a multiple of [`ALIGN`]) of zeroed memory, [`ALIGN`]-aligned.
#[cfg(not(target_os = "linux"))]
pub(crate) fn map(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: the layout has non-zero size.
    NonNull::new(unsafe { std::alloc::alloc_zeroed(layout(len)) })
}

/// Frees a block [`map`] made.
///
/// # Safety
/// `ptr` and `len` must be a block [`map`] returned, which nothing uses any more.
#[cfg(not(target_os = "linux"))]
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller's contract: allocated by `map` with this layout.
    unsafe { std::alloc::dealloc(ptr.as_ptr(), layout(len)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_blocks_are_aligned_zeroed_and_writable() {
        for len in [ALIGN, 3 * ALIGN] {
            let p = map(len).expect("memory");
            assert_eq!(p.as_ptr() as usize % ALIGN, 0);
            // SAFETY: the block holds `len` bytes, ours until unmapped below.
            let s = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) };
            assert!(s.iter().all(|&b| b == 0));
            s.fill(7);
            assert_eq!(s[len - 1], 7);
            // SAFETY: made by `map` with `len`, no longer used.
            unsafe { unmap(p, len) };
        }
    }
}
