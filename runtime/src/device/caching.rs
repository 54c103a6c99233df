//! The device caching allocator (what PyTorch's CUDA caching allocator does, in small):
//! device memory is obtained in size classes and never given back on the hot path: a freed
//! block returns to the free list of its size class **and its stream** (work queued on
//! that stream may still use it; a block is reused only by allocations on the same
//! stream, so stream order keeps reuse safe without synchronising). Memory goes back to the
//! device only through [`CachingAllocator::empty_cache`], or when an allocation fails: then
//! the cache is emptied and the allocation tried once more before the error.
//!
//! Size classes ([`device_size_class`]): multiples of 512 bytes below 1 MiB, multiples of
//! 2 MiB from there (as PyTorch rounds).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// A stream's identity (the driver's handle, or any number a backend chooses).
pub type StreamId = u64;

/// Memory a device hands out: the allocator calls these only on a cache miss and when
/// emptying its cache.
pub trait DeviceMemory: Send + Sync {
    /// `bytes` of device memory (a device address), or why not (out of memory).
    fn allocate(&self, bytes: usize) -> Result<u64, String>;
    /// Gives back memory [`DeviceMemory::allocate`] returned, with its size.
    fn free(&self, ptr: u64, bytes: usize);
}

/// A failed device allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "device allocation of {requested} bytes (size class {class}) failed after emptying the \
     cache: {reason} ({allocated} bytes allocated, {reserved} reserved)"
)]
pub struct DeviceAllocError {
    /// the bytes asked for
    pub requested: usize,
    /// their size class
    pub class: usize,
    /// the device's reason
    pub reason: String,
    /// bytes in live blocks at the time
    pub allocated: usize,
    /// bytes obtained from the device at the time
    pub reserved: usize,
}

/// The allocator's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAllocStats {
    /// bytes in live blocks (at their size class)
    pub allocated_bytes: usize,
    /// the most `allocated_bytes` has been
    pub peak_allocated_bytes: usize,
    /// bytes obtained from the device and not given back: allocated plus cached
    pub reserved_bytes: usize,
    /// blocks in the cache
    pub cached_blocks: usize,
    /// allocations served
    pub alloc_calls: u64,
    /// allocations served from the cache
    pub cache_hits: u64,
    /// calls of [`DeviceMemory::allocate`] that succeeded
    pub device_allocs: u64,
    /// calls of [`DeviceMemory::free`]
    pub device_frees: u64,
}

/// The size class a request of `bytes` is served from.
pub fn device_size_class(bytes: usize) -> usize {
    const SMALL: usize = 1 << 20;
    const ROUND_SMALL: usize = 512;
    const ROUND_LARGE: usize = 2 << 20;
    let b = bytes.max(1);
    // saturating: an absurd request becomes a class the device refuses, never an overflow
    if b < SMALL {
        b.div_ceil(ROUND_SMALL) * ROUND_SMALL
    } else {
        b.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

struct State {
    /// (stream, size class) -> cached blocks
    free: HashMap<(StreamId, usize), Vec<u64>>,
    stats: DeviceAllocStats,
}

struct Inner<M> {
    mem: M,
    state: Mutex<State>,
}

/// A caching allocator over device memory `M`. Cheap to clone (shared).
pub struct CachingAllocator<M: DeviceMemory> {
    inner: Arc<Inner<M>>,
}

impl<M: DeviceMemory> Clone for CachingAllocator<M> {
    fn clone(&self) -> Self {
        CachingAllocator {
            inner: self.inner.clone(),
        }
    }
}

/// A live block of device memory; it returns to its allocator's cache when dropped.
pub struct DeviceBuffer<M: DeviceMemory> {
    ptr: u64,
    len: usize,
    class: usize,
    stream: StreamId,
    owner: Arc<Inner<M>>,
}

impl<M: DeviceMemory> std::fmt::Debug for DeviceBuffer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("class", &self.class)
            .field("stream", &self.stream)
            .finish()
    }
}

impl<M: DeviceMemory> DeviceBuffer<M> {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when zero bytes were asked for.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes the block really has (its size class).
    pub fn capacity(&self) -> usize {
        self.class
    }
    /// The stream it was allocated for (and whose cache it returns to).
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

impl<M: DeviceMemory> Drop for DeviceBuffer<M> {
    fn drop(&mut self) {
        let mut st = self.owner.state.lock();
        st.free
            .entry((self.stream, self.class))
            .or_default()
            .push(self.ptr);
        st.stats.allocated_bytes -= self.class;
        st.stats.cached_blocks += 1;
    }
}

impl<M: DeviceMemory> CachingAllocator<M> {
    /// An allocator over `mem`, with an empty cache.
    pub fn new(mem: M) -> Self {
        CachingAllocator {
            inner: Arc::new(Inner {
                mem,
                state: Mutex::new(State {
                    free: HashMap::new(),
                    stats: DeviceAllocStats::default(),
                }),
            }),
        }
    }

    /// `bytes` of device memory for work on `stream`: a cached block of the size class on
    /// that stream, else new device memory (after emptying the cache and trying once more
    /// if the device is out of memory).
    pub fn alloc(
        &self,
        bytes: usize,
        stream: StreamId,
    ) -> Result<DeviceBuffer<M>, DeviceAllocError> {
        let class = device_size_class(bytes);
        let buffer = |ptr: u64| DeviceBuffer {
            ptr,
            len: bytes,
            class,
            stream,
            owner: self.inner.clone(),
        };
        {
            let mut st = self.inner.state.lock();
            st.stats.alloc_calls += 1;
            if let Some(ptr) = st.free.get_mut(&(stream, class)).and_then(Vec::pop) {
                st.stats.cache_hits += 1;
                st.stats.cached_blocks -= 1;
                Self::count_live(&mut st.stats, class);
                return Ok(buffer(ptr));
            }
        }
        let ptr = match self.inner.mem.allocate(class) {
            Ok(p) => p,
            Err(_) => {
                self.empty_cache();
                self.inner.mem.allocate(class).map_err(|reason| {
                    let st = self.inner.state.lock();
                    DeviceAllocError {
                        requested: bytes,
                        class,
                        reason,
                        allocated: st.stats.allocated_bytes,
                        reserved: st.stats.reserved_bytes,
                    }
                })?
            }
        };
        let mut st = self.inner.state.lock();
        st.stats.device_allocs += 1;
        st.stats.reserved_bytes += class;
        Self::count_live(&mut st.stats, class);
        Ok(buffer(ptr))
    }

    fn count_live(stats: &mut DeviceAllocStats, class: usize) {
        stats.allocated_bytes += class;
        stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
    }

    /// Gives every cached block back to the device (live blocks are untouched).
    pub fn empty_cache(&self) {
        let blocks: Vec<(u64, usize)> = {
            let mut st = self.inner.state.lock();
            let blocks: Vec<(u64, usize)> = st
                .free
                .drain()
                .flat_map(|((_, class), ptrs)| ptrs.into_iter().map(move |p| (p, class)))
                .collect();
            st.stats.cached_blocks = 0;
            st.stats.reserved_bytes -= blocks.iter().map(|(_, c)| c).sum::<usize>();
            st.stats.device_frees += blocks.len() as u64;
            blocks
        };
        for (ptr, class) in blocks {
            self.inner.mem.free(ptr, class);
        }
    }

    /// The counters now.
    pub fn stats(&self) -> DeviceAllocStats {
        self.inner.state.lock().stats
    }

    /// The device memory underneath.
    pub fn memory(&self) -> &M {
        &self.inner.mem
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// A fake device: addresses from a counter, a capacity, and a record of live bytes.
    struct FakeDevice {
        next: AtomicU64,
        capacity: usize,
        used: AtomicUsize,
        live: Mutex<HashMap<u64, usize>>,
    }

    impl FakeDevice {
        fn new(capacity: usize) -> Self {
            FakeDevice {
                next: AtomicU64::new(0x1000_0000),
                capacity,
                used: AtomicUsize::new(0),
                live: Mutex::new(HashMap::new()),
            }
        }
    }

    impl DeviceMemory for FakeDevice {
        fn allocate(&self, bytes: usize) -> Result<u64, String> {
            let used = self.used.load(Ordering::SeqCst);
            if used.checked_add(bytes).is_none_or(|u| u > self.capacity) {
                return Err("out of memory".into());
            }
            self.used.fetch_add(bytes, Ordering::SeqCst);
            let p = self.next.fetch_add(bytes as u64, Ordering::SeqCst);
            self.live.lock().insert(p, bytes);
            Ok(p)
        }
        fn free(&self, ptr: u64, bytes: usize) {
            let had = self.live.lock().remove(&ptr);
            assert_eq!(
                had,
                Some(bytes),
                "freed {ptr:#x} of {bytes} bytes it did not hand out"
            );
            self.used.fetch_sub(bytes, Ordering::SeqCst);
        }
    }

    #[test]
    fn size_classes_round_like_pytorch() {
        assert_eq!(device_size_class(0), 512);
        assert_eq!(device_size_class(1), 512);
        assert_eq!(device_size_class(513), 1024);
        assert_eq!(device_size_class((1 << 20) - 1), 1 << 20);
        assert_eq!(device_size_class(1 << 20), 2 << 20);
        assert_eq!(device_size_class((2 << 20) + 1), 4 << 20);
        assert_eq!(device_size_class(usize::MAX), usize::MAX);
    }

    #[test]
    fn a_freed_block_is_reused_without_the_device() {
        let a = CachingAllocator::new(FakeDevice::new(1 << 30));
        let p = {
            let b = a.alloc(1000, 0).unwrap();
            assert_eq!((b.len(), b.capacity()), (1000, 1024));
            b.ptr()
        };
        let s = a.stats();
        assert_eq!(
            (s.allocated_bytes, s.reserved_bytes, s.cached_blocks),
            (0, 1024, 1)
        );
        let b = a.alloc(900, 0).unwrap();
        assert_eq!(b.ptr(), p, "same class, same stream: the cached block");
        let s = a.stats();
        assert_eq!((s.alloc_calls, s.cache_hits, s.device_allocs), (2, 1, 1));
        assert_eq!((s.allocated_bytes, s.reserved_bytes), (1024, 1024));
        // another class is new memory
        let c = a.alloc(3 << 20, 0).unwrap();
        assert_ne!(c.ptr(), p);
        assert_eq!(a.stats().peak_allocated_bytes, 1024 + (4 << 20));
    }

    #[test]
    fn blocks_stay_with_their_stream() {
        let a = CachingAllocator::new(FakeDevice::new(1 << 30));
        let p = a.alloc(4096, 1).unwrap().ptr();
        let q = a.alloc(4096, 2).unwrap();
        assert_ne!(
            q.ptr(),
            p,
            "a block freed on stream 1 is not handed to stream 2"
        );
        drop(q);
        let again = a.alloc(4096, 1).unwrap();
        assert_eq!(again.ptr(), p);
        assert_eq!(
            a.stats().cached_blocks,
            1,
            "stream 2's block waits in its own cache"
        );
    }

    #[test]
    fn empty_cache_gives_cached_blocks_back_and_keeps_live_ones() {
        let a = CachingAllocator::new(FakeDevice::new(1 << 30));
        let live = a.alloc(10_000, 0).unwrap();
        for n in [100, 5000, 2 << 20] {
            drop(a.alloc(n, 0).unwrap());
        }
        assert_eq!(a.stats().cached_blocks, 3);
        a.empty_cache();
        let s = a.stats();
        assert_eq!((s.cached_blocks, s.device_frees), (0, 3));
        assert_eq!(s.reserved_bytes, s.allocated_bytes);
        assert_eq!(a.memory().used.load(Ordering::SeqCst), live.capacity());
        drop(live);
        a.empty_cache();
        assert_eq!(a.memory().used.load(Ordering::SeqCst), 0);
        assert_eq!(a.stats().reserved_bytes, 0);
    }

    #[test]
    fn out_of_memory_empties_the_cache_and_retries_then_errors() {
        let a = CachingAllocator::new(FakeDevice::new(8 << 20));
        // 6 MiB cached on stream 7: a 4 MiB request on stream 0 does not fit beside it
        drop(a.alloc(6 << 20, 7).unwrap());
        let b = a
            .alloc(4 << 20, 0)
            .expect("the cache is emptied and the request retried");
        assert_eq!(a.stats().device_frees, 1);
        // more than the device has: a typed error with the numbers
        let e = a.alloc(6 << 20, 0).unwrap_err();
        assert_eq!((e.requested, e.class), (6 << 20, 6 << 20));
        assert_eq!(e.allocated, 4 << 20);
        assert!(e.to_string().contains("out of memory"), "{e}");
        // an absurd size is the same typed error, not an overflow
        assert!(a.alloc(usize::MAX, 0).is_err());
        drop(b);
    }

    #[test]
    fn threads_share_one_allocator() {
        let a = CachingAllocator::new(FakeDevice::new(1 << 30));
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let a = a.clone();
                s.spawn(move || {
                    for i in 0..200 {
                        let b = a.alloc(512 * (1 + (i % 7)), t).unwrap();
                        assert!(b.capacity() >= b.len());
                    }
                });
            }
        });
        let s = a.stats();
        assert_eq!(s.alloc_calls, 800);
        assert_eq!(s.allocated_bytes, 0);
        // each stream needs at most one block of each of the 7 classes
        assert!(s.device_allocs <= 28, "{s:?}");
        assert_eq!(s.cache_hits + s.device_allocs, 800);
    }
}
