//! A fork-join pool for the generated kernels, built for low latency: a kernel of a few
//! microseconds (the `tiny` workload: 20 transcendental-heavy ops on 1024 floats) gains from
//! a second core only if handing it half the work costs far less than that. Rayon wakes a
//! sleeping worker through a futex (tens of microseconds here), so the nests use this pool.
//!
//! One job runs at a time. The caller publishes it and works on it too; idle workers spin
//! for [`SPIN`] after their last job (as OpenMP runtimes do) and then sleep. Work is split
//! into chunks that every participant claims from one counter, so a sleeping or descheduled
//! worker never delays a job: its share is simply taken by the others. A caller that finds
//! the pool busy (another thread's job) runs its chunks itself.
//!
//! A worker that finds itself on its caller's CPU moves off it (its affinity then excludes
//! that CPU): on this 2-core VM the scheduler was seen to keep the two together for whole
//! runs while the other core idled, which made the split a loss (10.2 µs per `tiny` call
//! instead of 6.7).
//!
//! Inside PyTorch the pool's jobs run on torch's OpenMP team instead ([`super::host_team`]):
//! two teams spinning on the same cores slowed each other's jobs.
//!
//! The job protocol (publishing, claiming, finishing, sleeping and waking) is model-checked
//! with loom by `runtime/tests/pool_loom.rs`, which compiles this file again with loom's
//! atomics, lock and condition variable in place of [`super::pool_sync`]'s (so the file uses
//! nothing else of the crate, and its unit tests live in `pool_tests.rs`): it explores every
//! interleaving of a caller and a worker (ThreadSanitizer needs a nightly toolchain this
//! project does not have). Under the model, workers skip the timed spin before sleeping.

use super::pool_sync as sync;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use sync::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Sleep};

/// How long an idle worker waits for the next job, spinning, before it sleeps.
pub(super) const SPIN: Duration = Duration::from_micros(200);
/// Spins between two looks at the clock (and a `yield_now`, so that a spinning worker gives
/// its core to any other runnable thread).
const SPINS_PER_CHECK: u32 = 256;

/// A job: runs chunk `i`. Chunks run at most once each, in any order, on any participant.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// The pool's shared state. `claim` packs the job's sequence number (high 32 bits) and the
/// next unclaimed chunk (low 32); `count` packs the sequence number and the chunk count.
/// Packing the sequence with the counters makes a late worker's claim on a finished job fail
/// instead of taking a chunk of the next one.
pub(super) struct Shared {
    claim: AtomicU64,
    count: AtomicU64,
    /// chunks of the current job finished
    done: AtomicUsize,
    /// the current job: a pointer to the caller's `&Job`, valid while a chunk is unfinished
    job: AtomicPtr<()>,
    /// held by the thread whose job is running
    busy: AtomicBool,
    /// workers sleeping (or about to) on `wake`
    pub(super) sleepers: AtomicUsize,
    /// the CPU the last job's caller ran on (see `wait_for_job`)
    caller_cpu: AtomicUsize,
    /// where idle workers sleep
    sleep: Sleep,
}

/// The pool: `workers` threads besides the callers.
pub(super) struct Pool {
    pub(super) shared: &'static Shared,
    workers: usize,
    /// the sequence number of the last job (used under `busy`)
    seq: AtomicU64,
}

const LOW: u64 = 0xffff_ffff;

impl Shared {
    /// A pool state with no job yet (sequence number 0).
    pub(super) fn new() -> Shared {
        Shared {
            claim: AtomicU64::new(0),
            count: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            busy: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            caller_cpu: AtomicUsize::new(usize::MAX),
            sleep: Sleep::default(),
        }
    }

    /// Claims a chunk of job `seq`: `None` when it has none left (or is no longer current).
    fn claim(&self, seq: u64) -> Option<usize> {
        let mut c = self.claim.load(Ordering::Acquire);
        loop {
            if c >> 32 != seq & LOW {
                return None;
            }
            let n = self.count.load(Ordering::Acquire);
            if n >> 32 != seq & LOW || (c & LOW) >= (n & LOW) {
                return None;
            }
            match self
                .claim
                .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((c & LOW) as usize),
                Err(now) => c = now,
            }
        }
    }

    /// Runs chunks of job `seq` until none is left.
    pub(super) fn work(&self, seq: u64) {
        while let Some(i) = self.claim(seq) {
            // SAFETY: a chunk of job `seq` was claimed and is not finished, so its caller is
            // still waiting in `Pool::run` and the `&Job` it published is alive; the pointer
            // was stored before the claim counter that this claim read (release/acquire).
            let job: &&Job = unsafe { &*(self.job.load(Ordering::Acquire) as *const &Job) };
            job(i);
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// A worker's life: wait for a job (spinning, then sleeping), help with it, repeat.
    fn worker(&self) {
        let _abort_on_panic = AbortOnPanic;
        let affinity = Affinity::current();
        // 0 is the sequence number before the first job: a worker started after a job was
        // published still joins it
        let mut last = 0;
        loop {
            let seq = self.wait_for_job(last, &affinity);
            self.work(seq);
            last = seq;
        }
    }

    /// Waits until a job newer than `last` is published; returns its sequence number.
    /// `affinity` is the worker's initial one (see the CPU check inside).
    pub(super) fn wait_for_job(&self, last: u64, affinity: &Affinity) -> u64 {
        if !sync::MODEL_CHECKED {
            if let Some(seq) = self.spin_for_job(last, affinity) {
                // found while spinning: the hot path, no lock and no sleeper count
                return seq;
            }
        }
        self.sleepers.fetch_add(1, Ordering::AcqRel);
        let mut seq = last;
        self.sleep.until(|| {
            seq = self.claim.load(Ordering::SeqCst) >> 32;
            seq != last
        });
        self.sleepers.fetch_sub(1, Ordering::AcqRel);
        seq
    }

    /// Spins for [`SPIN`] or until a job newer than `last` is published: returns that
    /// job's sequence number, or `None` when the spin ran out and the caller must sleep.
    fn spin_for_job(&self, last: u64, affinity: &Affinity) -> Option<u64> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let seq = self.claim.load(Ordering::Acquire) >> 32;
            if seq != last {
                return Some(seq);
            }
            std::hint::spin_loop();
            spins += 1;
            if spins == SPINS_PER_CHECK {
                spins = 0;
                if start.elapsed() >= SPIN {
                    return None;
                }
                // a worker on its caller's CPU only slows the caller down (the two share
                // the core), and the scheduler was seen to keep them there (waking the
                // worker next to its waker) while the other core idled: move off it
                let caller = self.caller_cpu.load(Ordering::Relaxed);
                if caller != usize::MAX && current_cpu() == caller {
                    affinity.avoid(caller);
                }
                std::thread::yield_now();
            }
        }
    }

    /// Publishes job `seq` (`chunks` calls of `f`), works on it, and returns when every
    /// chunk has finished. The caller holds `busy`.
    pub(super) fn run_job(&self, seq: u64, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        self.caller_cpu.store(current_cpu(), Ordering::Relaxed);
        let job: &Job = f;
        self.job
            .store(&job as *const &Job as *mut (), Ordering::Release);
        self.done.store(0, Ordering::Release);
        self.count
            .store(seq << 32 | chunks as u64, Ordering::Release);
        self.claim.store(seq << 32, Ordering::SeqCst);
        // A read-modify-write, not a load: it reads the latest count in `sleepers`'s
        // modification order, so either it sees a worker that is going to sleep (and wakes
        // it under the lock that worker checks `claim` under), or that worker's increment
        // comes later and acquires this release, and then it sees the job. A plain load
        // would rely on both sides' SeqCst for this (a store-buffering pattern), which loom
        // cannot check.
        if self.sleepers.fetch_add(0, Ordering::AcqRel) > 0 {
            self.sleep.wake_all();
        }
        self.work(seq);
        while self.done.load(Ordering::Acquire) < chunks {
            sync::spin_loop();
        }
    }
}

impl Pool {
    /// The process's pool, its workers started on first use.
    pub(super) fn get() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let shared: &'static Shared = Box::leak(Box::new(Shared::new()));
            let wanted = rayon::current_num_threads().saturating_sub(1);
            let mut workers = 0;
            for i in 0..wanted {
                let spawned = std::thread::Builder::new()
                    .name(format!("kiln-kernel-{i}"))
                    .spawn(move || shared.worker());
                // without a thread the pool is smaller, never wrong: callers do the work
                if spawned.is_ok() {
                    workers += 1;
                }
            }
            Pool {
                shared,
                workers,
                seq: AtomicU64::new(0),
            }
        })
    }
}

/// The CPU the calling thread runs on (`usize::MAX` when unknown).
#[cfg(target_os = "linux")]
fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).unwrap_or(usize::MAX)
}

#[cfg(not(target_os = "linux"))]
fn current_cpu() -> usize {
    usize::MAX
}

/// The CPUs a worker may run on, as it inherited them at its start.
#[cfg(target_os = "linux")]
pub(super) struct Affinity(Option<libc::cpu_set_t>);

#[cfg(target_os = "linux")]
impl Affinity {
    /// The calling thread's affinity (`None` inside when it cannot be read).
    pub(super) fn current() -> Affinity {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, filled by the call for the
        // calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            Affinity((ok == 0).then_some(set))
        }
    }

    /// Restricts the calling thread to these CPUs but `cpu` (advisory: nothing happens
    /// when the set is unknown, lacks `cpu`, or holds nothing else).
    fn avoid(&self, cpu: usize) {
        let Some(mut set) = self.0 else { return };
        // SAFETY: CPU_ISSET/CPU_CLR/CPU_COUNT read and write this set only (`cpu` is
        // checked against its size); sched_setaffinity applies it to the calling thread.
        unsafe {
            if cpu >= libc::CPU_SETSIZE as usize || !libc::CPU_ISSET(cpu, &set) {
                return;
            }
            libc::CPU_CLR(cpu, &mut set);
            if libc::CPU_COUNT(&set) > 0 {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) struct Affinity;

#[cfg(not(target_os = "linux"))]
impl Affinity {
    pub(super) fn current() -> Affinity {
        Affinity
    }
    fn avoid(&self, _: usize) {}
}

/// The threads a job can run on: the pool's workers and the caller.
pub fn threads() -> usize {
    match super::host_team::get() {
        Some(team) => team.threads(),
        None => Pool::get().workers + 1,
    }
}

/// Whether a job may wake sleeping workers (see [`run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// wake them: the job is long enough to pay for it
    Sleepers,
    /// share the job with spinning workers only; with any worker asleep, the caller runs it
    /// alone
    SpinningOnly,
}

/// Runs `f(0)`, …, `f(chunks - 1)`, spread over the pool's workers and the calling thread,
/// and returns when all have finished. Runs them all on the calling thread when there is one
/// chunk, no worker, another thread's job is running, or (with [`Wake::SpinningOnly`]) a
/// worker is asleep: waking one costs its caller a futex wake, 9.5 µs (median; 8 to 13)
/// measured on this 2-core VM, more than splitting a job of a few microseconds saves (the
/// compiled `train_mlp` step, whose one parallel nest came after the eager step's 110 µs
/// and the rest of the step, longer than [`SPIN`], went from 113 to 91 µs without it).
/// `f` must not panic (the generated kernels it calls cannot); a panic aborts the process
/// rather than leave a worker holding a dangling job.
///
/// With a host team adopted ([`super::host_team`]), a [`Wake::Sleepers`] job runs on that
/// team instead; a [`Wake::SpinningOnly`] one runs on the caller alone (whether the team's
/// threads still spin cannot be seen, and a fork that wakes them costs more than the job).
pub fn run(chunks: usize, wake: Wake, f: &(dyn Fn(usize) + Sync)) {
    if let Some(team) = super::host_team::get() {
        if chunks <= 1 || wake == Wake::SpinningOnly {
            (0..chunks).for_each(f);
        } else {
            team.run(chunks, f);
        }
        return;
    }
    let pool = Pool::get();
    let s = pool.shared;
    if chunks <= 1
        || pool.workers == 0
        || chunks as u64 > LOW
        || (wake == Wake::SpinningOnly && s.sleepers.load(Ordering::Acquire) > 0)
        || s.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        (0..chunks).for_each(f);
        return;
    }
    let abort_on_panic = AbortOnPanic;
    let seq = (pool.seq.load(Ordering::Relaxed) + 1) & LOW;
    pool.seq.store(seq, Ordering::Relaxed);
    s.run_job(seq, chunks, f);
    s.busy.store(false, Ordering::Release);
    std::mem::forget(abort_on_panic);
}

/// Aborts the process if dropped during a panic (see [`run`]).
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        std::process::abort();
    }
}
