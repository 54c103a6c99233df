//! Row-major copies of matmul operands that stay the same from call to call (a Linear's
//! weight, read as `wᵀ` by every call of a compiled model), kept and reused while their
//! storage lives and is not written: the weights are transposed once, not on every call
//! (what inductor's freezing and oneDNN call weight prepacking).
//!
//! A copy is kept only for a storage seen twice at the same version, so the intermediates
//! of a call (fresh storages every call) never fill the cache; a write to the storage (an
//! optimizer step: every in-place write bumps the version) makes its copy stale, and the
//! next read packs it again only if the storage then stays unchanged for two calls. Storages
//! borrowed from another library (a PyTorch tensor's memory) are cached only when the lender
//! vouches for their identity and version ([`ForeignPin`]: the backend's `pin_weights`
//! passes a parameter's key and `_version`), since the lender's writes do not bump kiln's
//! version counter; such an entry lives until [`forget_pinned`]. The copies come from the
//! caching allocator (they count in [`crate::allocator_stats`]), are bounded by
//! [`MAX_BYTES`] (least recently used first out) and dropped by [`crate::empty_cache`].

use crate::storage::{ForeignPin, Storage};
use crate::tensor::{CpuTensor, Dims, Strides};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// The most bytes the cached copies hold together; past it the least recently used go.
pub const MAX_BYTES: usize = 1 << 30;

/// Whose memory an entry copies.
enum Owner {
    /// kiln's own storage (weakly: the cache never keeps a storage alive)
    Own(Weak<Storage>),
    /// borrowed memory its lender vouches for: the lender's key and the memory's address
    /// (each borrow is a new [`Storage`], so a weak reference would die with the call)
    Pinned { key: u64, addr: usize },
}

/// One operand view seen before: whose memory, the view, the version it had (kiln's own
/// counter; for pinned memory also the lender's), and its copy once it has been seen twice.
struct Entry {
    owner: Owner,
    offset: usize,
    shape: Dims,
    strides: Strides,
    version: (u64, u64),
    packed: Option<CpuTensor>,
    last_use: u64,
}

impl Entry {
    fn same_view(&self, t: &CpuTensor) -> bool {
        let same_owner = match (&self.owner, t.storage().foreign_pin()) {
            (Owner::Own(s), None) => std::ptr::eq(s.as_ptr(), Arc::as_ptr(t.storage())),
            (Owner::Pinned { key, addr }, Some(pin)) => {
                *key == pin.key && *addr == t.storage().elements_ptr() as usize
            }
            _ => false,
        };
        same_owner
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
    if !is_cacheable(t) {
        return t.contiguous();
    }
    // read before packing: a write racing the copy leaves the copy newer than its label,
    // so at worst a later call packs again, never reads a stale copy
    let pin = t.storage().foreign_pin();
    let version = (pin.map_or(0, |p| p.version), t.storage().version());
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
                let owner = match pin {
                    None => Owner::Own(Arc::downgrade(t.storage())),
                    Some(ForeignPin { key, .. }) => Owner::Pinned {
                        key,
                        addr: t.storage().elements_ptr() as usize,
                    },
                };
                c.entries.push(Entry {
                    owner,
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

/// True when copies of `t` may be kept: kiln's own storage, or borrowed memory whose lender
/// vouches for it ([`ForeignPin`]).
pub(crate) fn is_cacheable(t: &CpuTensor) -> bool {
    !t.storage().is_foreign() || t.storage().foreign_pin().is_some()
}

/// Forgets the entries of the lender's tensor `key` ([`ForeignPin::key`]) and frees their
/// copies: the lender calls it when the tensor goes (or its memory is written in a way its
/// version does not show).
pub fn forget_pinned(key: u64) {
    let dropped: Vec<Entry> = {
        let mut c = CACHE.lock();
        let (gone, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut c.entries)
            .into_iter()
            .partition(|e| matches!(e.owner, Owner::Pinned { key: k, .. } if k == key));
        c.entries = kept;
        c.bytes -= gone.iter().map(Entry::packed_bytes).sum::<usize>();
        gone
    };
    drop(dropped);
}

/// Forgets the entries whose storage has gone (and frees their copies); pinned entries go
/// by [`forget_pinned`].
fn prune(c: &mut Cache) {
    let mut freed = 0;
    c.entries.retain(|e| {
        let live = match &e.owner {
            Owner::Own(s) => s.strong_count() > 0,
            Owner::Pinned { .. } => true,
        };
        if !live {
            freed += e.packed_bytes();
        }
        live
    });
    c.bytes -= freed;
}

/// Keeps `packed` as the copy of `t` at `version` (unless the entry moved on meanwhile),
/// then drops the least recently used copies while the total is over [`MAX_BYTES`].
fn store(t: &CpuTensor, version: (u64, u64), packed: &CpuTensor) {
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
    use kiln_ir::DType;

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

        // borrowed memory: a new Storage on every borrow (as on every backend call)
        let mem: Arc<Vec<f32>> = Arc::new((0..64 * 48).map(|i| i as f32 * 0.5).collect());
        let borrow = |pin: Option<ForeignPin>| {
            let owner = Box::new(mem.clone());
            let ptr = mem.as_ptr() as *mut u8;
            let (shape, strides) = ([64, 48], [1, 64]);
            // SAFETY: `owner` keeps the Vec alive, nothing writes it
            unsafe {
                CpuTensor::from_foreign_pinned(
                    ptr,
                    DType::F32,
                    64 * 48,
                    &shape,
                    &strides,
                    0,
                    owner,
                    pin,
                )
            }
            .unwrap()
        };
        // unpinned: copied every time, never kept
        for _ in 0..3 {
            let t = borrow(None);
            assert_eq!(values(&row_major(&t)), values(&t));
            assert!(!cached(&t));
        }
        // pinned: kept from the second borrow at the same version, across borrows
        let pin = ForeignPin {
            key: u64::MAX - 7,
            version: 3,
        };
        let first = row_major(&borrow(Some(pin)));
        assert!(!cached(&borrow(Some(pin))));
        let kept = row_major(&borrow(Some(pin)));
        assert!(cached(&borrow(Some(pin))));
        let again = row_major(&borrow(Some(pin)));
        assert!(
            again.shares_storage(&kept),
            "the kept copy serves a later borrow"
        );
        assert!(!first.shares_storage(&kept));
        assert_eq!(values(&again), values(&borrow(None)));
        // another key at the same address is other memory
        let other = ForeignPin {
            key: u64::MAX - 8,
            version: 3,
        };
        assert!(!cached(&borrow(Some(other))));
        // a new lender version: packed again, the old copy dropped
        let newer = ForeignPin { version: 4, ..pin };
        assert!(!row_major(&borrow(Some(newer))).shares_storage(&kept));
        assert!(!cached(&borrow(Some(pin))));
        assert!(!cached(&borrow(Some(newer))));
        row_major(&borrow(Some(newer)));
        assert!(cached(&borrow(Some(newer))));
        // forgetting the key drops its copies
        forget_pinned(newer.key);
        assert!(!cached(&borrow(Some(newer))));
        assert_eq!(pack_cache_bytes(), 0);
    }
}
