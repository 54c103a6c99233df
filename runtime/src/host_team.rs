//! The host's OpenMP team as the kernel pool's workers.
//!
//! Inside PyTorch (the torch backend), torch's eager ops run on a GNU OpenMP team whose
//! idle threads spin for a while after each op, as [`crate::pool`]'s do after each kernel.
//! A compiled graph called between eager ops (a training step: the loss, autograd's
//! accumulations and the optimizer around the compiled forward and backward) then has two
//! spinning teams on the same cores: each pool job's worker waits for a core the OpenMP
//! thread holds. BERT (hidden 128, batch 4, sequence 64) trained through the backend on 2
//! cores spent 12.4 ms a step in kiln's kernels with the pool's 2 threads and 12.4 ms with
//! 1: the second thread gained nothing. With `OMP_WAIT_POLICY=PASSIVE` (torch's threads
//! sleep at once) it was 8.9 ms with 2 and 14.0 ms with 1 (KILN_PROFILE, one session).
//! Running the pool's jobs on torch's own team removes the contention, and the team is
//! awake from the op before. Training steps, team against own pool (one process, the two
//! alternated in rounds, medians): BERT 0.78-0.85, GPT-2 0.86, ViT 0.87-0.90, ConvNeXt-atto
//! 0.84-0.94, ResNet-18 1.05-1.07 (slower); BERT inference, separate processes in turns:
//! within the noise (2.8-3.7 ms either way).
//!
//! [`adopt`] hands the pool libgomp's `GOMP_parallel` and `omp_get_max_threads` (the
//! Python extension looks them up once torch has loaded libgomp); from then on
//! [`crate::pool::run`] forks the job on that team and [`crate::pool::threads`] counts its
//! threads. Without a host team the pool's own workers run as before.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// libgomp's `GOMP_parallel(fn, data, num_threads, flags)`: runs `fn(data)` on every
/// thread of a team of `num_threads` (the caller one of them) and returns when all have.
pub type GompParallel =
    unsafe extern "C" fn(f: unsafe extern "C" fn(*mut c_void), data: *mut c_void, u32, u32);

/// OpenMP's `omp_get_max_threads()`: the team size a parallel region started by the
/// calling thread gets.
pub type OmpMaxThreads = unsafe extern "C" fn() -> i32;

/// An adopted OpenMP runtime.
pub(crate) struct HostTeam {
    parallel: GompParallel,
    max_threads: OmpMaxThreads,
}

static HOST: OnceLock<HostTeam> = OnceLock::new();

/// Makes the pool run its jobs on the host's OpenMP team from now on; false when a team was
/// adopted already (the first stays).
///
/// # Safety
/// `parallel` and `max_threads` are libgomp's `GOMP_parallel` and `omp_get_max_threads`
/// (or functions with their contracts), loaded for the rest of the process.
pub unsafe fn adopt(parallel: GompParallel, max_threads: OmpMaxThreads) -> bool {
    HOST.set(HostTeam {
        parallel,
        max_threads,
    })
    .is_ok()
}

/// Whether the pool runs on a host team ([`adopt`]).
pub fn adopted() -> bool {
    HOST.get().is_some()
}

/// The adopted team, if any.
pub(crate) fn get() -> Option<&'static HostTeam> {
    HOST.get()
}

/// One job forked on the team: every thread claims chunks until none is left.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    chunks: usize,
    next: AtomicUsize,
}

/// The body every team thread runs.
///
/// # Safety
/// `data` points to a live [`Job`].
unsafe extern "C" fn claim_chunks(data: *mut c_void) {
    // SAFETY: `HostTeam::run` passes its `Job`, which outlives the parallel region
    // (GOMP_parallel returns after every thread has left this function).
    let job = unsafe { &*(data as *const Job<'_>) };
    loop {
        let i = job.next.fetch_add(1, Ordering::Relaxed);
        if i >= job.chunks {
            return;
        }
        (job.f)(i);
    }
}

impl HostTeam {
    /// The team size a region forked by this thread gets (at least 1).
    pub(crate) fn threads(&self) -> usize {
        // SAFETY: `adopt`'s contract: omp_get_max_threads takes nothing and only reads the
        // calling thread's settings.
        (unsafe { (self.max_threads)() }).max(1) as usize
    }

    /// Runs `f(0)`, …, `f(chunks - 1)` on the team (at most `chunks` threads, the caller one
    /// of them) and returns when all have run. Inside another parallel region OpenMP gives
    /// the nested region one thread: the caller runs every chunk. A panic in `f` aborts (it
    /// cannot unwind out of the `extern "C"` body).
    pub(crate) fn run(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        let job = Job {
            f,
            chunks,
            next: AtomicUsize::new(0),
        };
        let threads = self.threads().min(chunks) as u32;
        // SAFETY: `adopt`'s contract; `job` lives until GOMP_parallel has returned, which it
        // does after every thread of the team has finished `claim_chunks`.
        unsafe {
            (self.parallel)(
                claim_chunks,
                &job as *const Job<'_> as *mut c_void,
                threads,
                0,
            )
        };
    }
}
