//! Row-major copies of matmul operands that stay the same from call to call (a Linear's
//! weight, read as `wᵀ` by every call of a compiled model), kept and reused while their
//! storage lives and is not written: the weights are transposed once, not on every call
//! (what inductor's freezing and oneDNN call weight prepacking).
//!
//! A copy is kept only for a storage seen twice at the same version, so the intermediates
//! of a call (fresh storages every call) never fill the cache; a write to the storage (an
//! optimizer step: every in-place write bumps the version) makes its copy stale, and the
//! next read packs it again only if the storage then stays unchanged for two calls. Storages
//! borrowed from another library (a PyTorch tensor's memory) are never cached: their writers
//! do not bump kiln's version counter. The copies come from the caching allocator (they
//! count in [`crate::allocator_stats`]), are bounded by [`MAX_BYTES`] (least recently used
//! first out) and dropped by [`crate::empty_cache`].

use crate::storage::Storage;
use crate::tensor::{CpuTensor, Dims, Strides};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// The most bytes the cached copies hold together; past it the least recently used go.
pub const MAX_BYTES: usize = 1 << 30;

/// One operand view seen before: its storage (weakly: the cache never keeps a storage
/// alive), the view, the version it had, and its copy once it has been seen twice.
struct Entry {
    storage: Weak<Storage>,
    offset: usize,
    shape: Dims,
    strides: Strides,
    version: u64,
    packed: Option<CpuTensor>,
    last_use: u64,
}

impl Entry {
    fn same_view(&self, t: &CpuTensor) -> bool {
        std::ptr::eq(self.storage.as_ptr(), Arc::as_ptr(t.storage()))
            && self.offset == t.offset()
            && self.shape.as_slice() == t.shape()
            && self.strides.as_slice() == t.strides()
    }

    fn packed_bytes(&self) -> usize {
        self.packed
            .as_ref()
            .map_or(0, |p| p.numel() * p.dtype().size_bytes())
    }
}

#[derive(Default)]
struct Cache {
    entries: Vec<Entry>,
    bytes: usize,
    tick: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    entries: Vec::new(),
    bytes: 0,
    tick: 0,
});

/// A row-major copy of `t` (which is not row-major), from the cache when `t`'s storage
/// and view were packed before and the storage has not been written since.
pub(crate) fn row_major(t: &CpuTensor) -> CpuTensor {
    if t.storage().is_foreign() {
        return t.contiguous();
    }
    // read before packing: a write racing the copy leaves the copy newer than its label,
    // so at worst a later call packs again, never reads a stale copy
    let version = t.storage().version();
    let keep = {
        let mut c = CACHE.lock();
        c.tick += 1;
        let tick = c.tick;
        match c.entries.iter_mut().find(|e| e.same_view(t)) {
            Some(e) if e.version == version => {
                e.last_use = tick;
                if let Some(p) = &e.packed {
                    return p.clone();
                }
                true // the second sighting at this version: pack and keep
            }
            Some(e) => {
                // written since: forget the copy, remember the new version
                let freed = e.packed_bytes();
                e.version = version;
                e.packed = None;
                e.last_use = tick;
                c.bytes -= freed;
                false
            }
            None => {
                prune(&mut c);
                c.entries.push(Entry {
                    storage: Arc::downgrade(t.storage()),
                    offset: t.offset(),
                    shape: t.shape().into(),
                    strides: t.strides().into(),
                    version,
                    packed: None,
                    last_use: tick,
                });
                false
            }
        }
    };
    let packed = t.contiguous();
    if keep {
        store(t, version, &packed);
    }
    packed
}

/// Forgets the entries whose storage has gone (and frees their copies).
fn prune(c: &mut Cache) {
    let mut freed = 0;
    c.entries.retain(|e| {
        let live = e.storage.strong_count() > 0;
        if !live {
            freed += e.packed_bytes();
        }
        live
    });
    c.bytes -= freed;
}

/// Keeps `packed` as the copy of `t` at `version` (unless the entry moved on meanwhile),
/// then drops the least recently used copies while the total is over [`MAX_BYTES`].
fn store(t: &CpuTensor, version: u64, packed: &CpuTensor) {
    let bytes = packed.numel() * packed.dtype().size_bytes();
    if bytes > MAX_BYTES {
        return;
    }
    let mut c = CACHE.lock();
    let Some(i) = c
        .entries
        .iter()
        .position(|e| e.same_view(t) && e.version == version && e.packed.is_none())
    else {
        return;
    };
    c.entries[i].packed = Some(packed.clone());
    c.bytes += bytes;
    while c.bytes > MAX_BYTES {
        let Some(old) = c
            .entries
            .iter()
            .enumerate()
            .filter(|(j, e)| *j != i && e.packed.is_some())
            .min_by_key(|(_, e)| e.last_use)
            .map(|(j, _)| j)
        else {
            break;
        };
        let freed = c.entries[old].packed_bytes();
        c.entries[old].packed = None;
        c.bytes -= freed;
    }
}

/// Drops every cached copy (their memory goes back to the allocator's pool).
pub(crate) fn clear() {
    let dropped = {
        let mut c = CACHE.lock();
        c.bytes = 0;
        std::mem::take(&mut c.entries)
    };
    drop(dropped);
}

/// Bytes the cached copies hold now.
pub fn pack_cache_bytes() -> usize {
    CACHE.lock().bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transposed(rows: usize, cols: usize, seed: f32) -> CpuTensor {
        let vals: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.25 + seed).collect();
        let stored = CpuTensor::from_slice(&vals, &[cols, rows]).unwrap();
        stored
            .with_layout(&[rows, cols], &[1, rows as isize], 0)
            .unwrap()
    }

    fn values(t: &CpuTensor) -> Vec<f32> {
        t.to_vec::<f32>().unwrap()
    }

    fn cached(t: &CpuTensor) -> bool {
        CACHE
            .lock()
            .entries
            .iter()
            .any(|e| e.same_view(t) && e.packed.is_some())
    }

    /// One test: the cache is process-wide, and tests of this binary run concurrently.
    #[test]
    fn copies_are_kept_from_the_second_call_and_never_outlive_a_write() {
        let w = transposed(64, 48, 1.0);
        let want = values(&w);
        // first sighting: packed, not kept
        let p1 = row_major(&w);
        assert!(p1.is_contiguous());
        assert_eq!(values(&p1), want);
        assert!(!cached(&w));
        // second sighting at the same version: kept, and the third call reuses it
        let p2 = row_major(&w);
        assert!(cached(&w));
        let p3 = row_major(&w);
        assert!(p3.shares_storage(&p2), "the kept copy is reused");
        assert_eq!(values(&p3), want);

        // an in-place write (bumps the version): the next read packs the new values and
        // keeps nothing until the storage stays unchanged for two calls
        {
            let mut g = w.storage().write::<f32>().unwrap();
            g[0] = -100.0;
        }
        let fresh = row_major(&w);
        assert!(!fresh.shares_storage(&p2));
        assert_eq!(values(&fresh), values(&w));
        assert_eq!(values(&fresh)[0], -100.0);
        assert!(!cached(&w));
        row_major(&w);
        assert!(cached(&w));

        // another view of the same storage is its own entry
        let narrow = w.view_unchecked(&[32, 48], &[1, 64], 0);
        assert_eq!(values(&row_major(&narrow)), values(&narrow));
        assert!(!cached(&narrow));

        // a storage's entry goes with it: a new storage (maybe at the same address) is new
        let before = pack_cache_bytes();
        drop((w, narrow, p1, p2, p3, fresh));
        let w2 = transposed(64, 48, 2.0);
        assert_eq!(values(&row_major(&w2)), values(&w2));
        assert!(!cached(&w2));
        assert!(pack_cache_bytes() <= before);

        // clear drops every copy
        row_major(&w2);
        assert!(cached(&w2));
        clear();
        assert!(!cached(&w2));
        assert_eq!(pack_cache_bytes(), 0);
    }
}
