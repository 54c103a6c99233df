//! The kernel pool on an adopted host team (`kiln_runtime::host_team`): a stand-in for
//! libgomp's `GOMP_parallel` (a team of scoped threads, the caller one of them) and
//! `omp_get_max_threads`. Its own test binary: adoption is for the life of the process.

use kiln_runtime::{host_team, pool};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Team threads the stand-in reports.
const TEAM: i32 = 3;
/// Forks the stand-in ran.
static FORKS: AtomicUsize = AtomicUsize::new(0);
/// The largest team it was asked for.
static WIDEST: AtomicUsize = AtomicUsize::new(0);

/// As `GOMP_parallel`: `f(data)` on `threads` threads, the caller one of them; returns when
/// all have.
unsafe extern "C" fn fake_parallel(
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
    threads: u32,
    _flags: u32,
) {
    FORKS.fetch_add(1, Ordering::SeqCst);
    WIDEST.fetch_max(threads as usize, Ordering::SeqCst);
    let data = data as usize;
    std::thread::scope(|s| {
        for _ in 1..threads {
            // SAFETY: GOMP_parallel's contract, which the pool relies on: every thread runs
            // f(data) while the caller waits.
            s.spawn(move || unsafe { f(data as *mut c_void) });
        }
        // SAFETY: as above, on the caller.
        unsafe { f(data as *mut c_void) };
    });
}

unsafe extern "C" fn fake_max_threads() -> i32 {
    TEAM
}

#[test]
fn an_adopted_team_runs_every_chunk_once_and_sets_the_thread_count() {
    assert!(!host_team::adopted());
    // SAFETY: the stand-ins keep GOMP_parallel's and omp_get_max_threads' contracts.
    assert!(unsafe { host_team::adopt(fake_parallel, fake_max_threads) });
    assert!(host_team::adopted());
    // a second adoption keeps the first
    // SAFETY: as above.
    assert!(!unsafe { host_team::adopt(fake_parallel, fake_max_threads) });
    assert_eq!(pool::threads(), TEAM as usize);

    // a job of many chunks runs each exactly once, across the team's threads
    let chunks = 97;
    let runs: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
    let threads_seen = std::sync::Mutex::new(std::collections::HashSet::new());
    pool::run(chunks, pool::Wake::Sleepers, &|i| {
        runs[i].fetch_add(1, Ordering::SeqCst);
        threads_seen
            .lock()
            .unwrap()
            .insert(std::thread::current().id());
        std::thread::sleep(std::time::Duration::from_micros(200));
    });
    assert!(runs.iter().all(|r| r.load(Ordering::SeqCst) == 1));
    assert_eq!(FORKS.load(Ordering::SeqCst), 1);
    assert_eq!(WIDEST.load(Ordering::SeqCst), TEAM as usize);
    assert!(
        threads_seen.lock().unwrap().len() > 1,
        "the team shared the job"
    );

    // a job of fewer chunks than threads asks for no more threads than chunks
    let two: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
    pool::run(2, pool::Wake::Sleepers, &|i| {
        two[i].fetch_add(1, Ordering::SeqCst);
    });
    assert!(two.iter().all(|r| r.load(Ordering::SeqCst) == 1));
    assert_eq!(FORKS.load(Ordering::SeqCst), 2);

    // small jobs and single chunks stay on the caller: no fork
    let caller = std::thread::current().id();
    let small: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
    pool::run(8, pool::Wake::SpinningOnly, &|i| {
        assert_eq!(std::thread::current().id(), caller);
        small[i].fetch_add(1, Ordering::SeqCst);
    });
    pool::run(1, pool::Wake::Sleepers, &|_| {
        assert_eq!(std::thread::current().id(), caller);
    });
    assert!(small.iter().all(|r| r.load(Ordering::SeqCst) == 1));
    assert_eq!(FORKS.load(Ordering::SeqCst), 2);
}
