//! The kernel pool's synchronisation primitives ([`super::pool`]): std's atomics and
//! parking_lot's lock. `runtime/tests/pool_loom.rs` gives the same names from loom to model
//! check the pool's protocol.

pub(super) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

/// False: the pool runs for real (workers spin for a while before they sleep). The model
/// checker's primitives set it, and workers then go straight to sleep.
pub(super) const MODEL_CHECKED: bool = false;

/// Where idle workers sleep until `ready` holds.
#[derive(Default)]
pub(super) struct Sleep {
    lock: parking_lot::Mutex<()>,
    wake: parking_lot::Condvar,
}

impl Sleep {
    /// Blocks until `ready()` (checked under the lock, first before any wait).
    pub(super) fn until(&self, mut ready: impl FnMut() -> bool) {
        let mut guard = self.lock.lock();
        while !ready() {
            self.wake.wait(&mut guard);
        }
    }

    /// Wakes every sleeper (under the lock, so none is between its check and its wait).
    pub(super) fn wake_all(&self) {
        let _guard = self.lock.lock();
        self.wake.notify_all();
    }
}

/// A pause in a spin loop.
pub(super) fn spin_loop() {
    std::hint::spin_loop();
}
