//! Model checks of the kernel pool's job protocol (`src/pool.rs`) with loom: every
//! interleaving (to a preemption bound) of a caller publishing jobs and a worker that may be
//! asleep, awake or late. The pool's file is compiled here again, its synchronisation
//! primitives (`super::pool_sync`, std's and parking_lot's in the library) taken from loom.

/// loom's atomics, lock and condition variable under the names `src/pool_sync.rs` gives.
mod pool_sync {
    pub(super) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

    /// True: workers go straight to sleep instead of spinning on the clock (the model has
    /// no time).
    pub(super) const MODEL_CHECKED: bool = true;

    /// Where idle workers sleep until `ready` holds.
    #[derive(Default)]
    pub(super) struct Sleep {
        lock: loom::sync::Mutex<()>,
        wake: loom::sync::Condvar,
    }

    impl Sleep {
        pub(super) fn until(&self, mut ready: impl FnMut() -> bool) {
            let mut guard = self.lock.lock().unwrap();
            while !ready() {
                guard = self.wake.wait(guard).unwrap();
            }
        }

        pub(super) fn wake_all(&self) {
            let _guard = self.lock.lock().unwrap();
            self.wake.notify_all();
        }
    }

    /// A pause in a spin loop: a yield to the model.
    pub(super) fn spin_loop() {
        loom::thread::yield_now();
    }
}

/// The host-team hook `run` and `threads` consult (never adopted here).
#[path = "../src/host_team.rs"]
#[allow(dead_code)]
mod host_team;

// the pool's spin, clock and affinity code, and its `run` entry point, are unused here
#[allow(dead_code)]
#[path = "../src/pool.rs"]
mod pool;

use loom::sync::Arc;
use pool::{Affinity, Shared};
use pool_sync::AtomicUsize;
use std::sync::atomic::Ordering;

/// A worker that takes part in jobs until it has seen job `until`.
fn worker(s: Arc<Shared>, until: u64) -> loom::thread::JoinHandle<()> {
    loom::thread::spawn(move || {
        let affinity = Affinity::current();
        let mut last = 0;
        while last != until {
            let seq = s.wait_for_job(last, &affinity);
            s.work(seq);
            last = seq;
        }
    })
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

#[test]
fn every_chunk_runs_once_and_the_caller_returns_after_all() {
    model(|| {
        let s = Arc::new(Shared::new());
        let w = worker(s.clone(), 1);
        let hits = [AtomicUsize::new(0), AtomicUsize::new(0)];
        s.run_job(1, 2, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        // run_job returned: every chunk has finished, exactly once
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1);
        }
        // and the worker was woken (or never slept): the join would deadlock otherwise
        w.join().unwrap();
    });
}

#[test]
fn a_late_worker_takes_no_chunk_of_the_next_job() {
    model(|| {
        let s = Arc::new(Shared::new());
        let w = worker(s.clone(), 2);
        let first = [AtomicUsize::new(0), AtomicUsize::new(0)];
        s.run_job(1, 2, &|i| {
            first[i].fetch_add(1, Ordering::Relaxed);
        });
        let second = [AtomicUsize::new(0), AtomicUsize::new(0)];
        s.run_job(2, 2, &|i| {
            second[i].fetch_add(1, Ordering::Relaxed);
        });
        for h in first.iter().chain(&second) {
            assert_eq!(h.load(Ordering::Relaxed), 1);
        }
        w.join().unwrap();
    });
}
