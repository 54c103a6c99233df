//! The kernel pool's tests on real threads ([`super::pool`]; its protocol's model checks are
//! `runtime/tests/pool_loom.rs`).

use super::pool::{run, threads, Pool, Wake, SPIN};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[test]
fn every_chunk_runs_once() {
    for chunks in [0, 1, 2, 3, 7, 64, 1000] {
        let hits: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
        run(chunks, Wake::Sleepers, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(
            hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "{chunks}"
        );
    }
}

#[test]
fn concurrent_callers_and_sleeping_workers_lose_no_chunk() {
    let _serial = TIMING.lock();
    let total = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for t in 0..4 {
            let total = &total;
            sc.spawn(move || {
                for round in 0..200 {
                    if round % 50 == 0 {
                        // let the workers fall asleep now and then
                        std::thread::sleep(SPIN * 2);
                    }
                    let n = 1 + (round + t) % 9;
                    run(n, Wake::Sleepers, &|_| {
                        total.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    let expected: usize = (0..4)
        .map(|t| (0..200).map(|r| 1 + (r + t) % 9).sum::<usize>())
        .sum();
    assert_eq!(total.load(Ordering::Relaxed), expected);
}

/// Serialises the tests that time the pool (a busy pool runs a caller's chunks serially).
static TIMING: Mutex<()> = Mutex::new(());

#[test]
fn a_worker_takes_part() {
    if threads() < 2 {
        return;
    }
    let _serial = TIMING.lock();
    // whichever thread runs one chunk waits (a while) for the other chunk to start,
    // which only another thread can do; another crate test's job holding the pool makes
    // an attempt run serially, so a few are allowed
    let two_threads = (0..20).any(|_| {
        let started = [AtomicBool::new(false), AtomicBool::new(false)];
        let ids = Mutex::new(Vec::new());
        run(2, Wake::Sleepers, &|i| {
            started[i].store(true, Ordering::SeqCst);
            ids.lock().push(std::thread::current().id());
            let t = Instant::now();
            while !started[1 - i].load(Ordering::SeqCst) && t.elapsed() < Duration::from_millis(250)
            {
                std::hint::spin_loop();
            }
        });
        let ids = ids.into_inner();
        ids.len() == 2 && ids[0] != ids[1]
    });
    assert!(two_threads, "no job ran on two threads");
}

#[test]
fn a_job_that_may_not_wake_runs_on_its_caller_while_the_workers_sleep() {
    if threads() < 2 {
        return;
    }
    let _serial = TIMING.lock();
    let s = Pool::get().shared;
    // the workers fall asleep after SPIN without jobs (another crate test's job may
    // keep one awake: a few attempts are allowed)
    let alone = (0..200).any(|_| {
        std::thread::sleep(SPIN * 3);
        if s.sleepers.load(Ordering::Acquire) == 0 {
            return false;
        }
        let me = std::thread::current().id();
        let ids = Mutex::new(Vec::new());
        run(8, Wake::SpinningOnly, &|_| {
            ids.lock().push(std::thread::current().id())
        });
        let ids = ids.into_inner();
        ids.len() == 8 && ids.iter().all(|i| *i == me)
    });
    assert!(alone, "a job woke a sleeping worker or lost a chunk");
}

#[test]
fn threads_counts_the_caller() {
    assert!(threads() >= 1);
    assert_eq!(threads(), rayon::current_num_threads().max(1));
}
