//! MPI's world as a [`Backend`]: one communication thread initialises MPI
//! (`MPI_THREAD_FUNNELED`: only it calls MPI) and runs the submitted collectives in order,
//! so the thread that submitted one (the backward pass) keeps computing meanwhile.
//!
//! A rank that dies or hangs must not hang the others: before each collective, each rank
//! sends each peer a small arrival message carrying the collective's sequence number and
//! polls for theirs (non-blocking, backing off). Peers whose arrival is missing after the
//! timeout are the ranks named in the error (a peer that arrived at another sequence number
//! means the ranks called collectives in different orders). Once every peer has arrived the
//! collective itself is MPI's blocking one, which progresses at full speed (a non-blocking
//! collective progresses only inside `MPI_Test`, so polling it with back-off slows it). The group is then broken: later
//! collectives fail at once, and dropping it aborts the MPI job (`MPI_Abort`) instead of
//! finalising, so the hung ranks are stopped too.

use super::buffer::CommBuffer;
use super::comm_thread::{CommThread, Job};
use super::dist_err;
use super::group::{Backend, Collective, ReduceOp};
use crate::error::Result;
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The tag of arrival messages on their own communicator.
const ARRIVAL_TAG: c_int = 7;

/// An all-reduce of a larger buffer runs as one `MPI_Allreduce` per piece of this many
/// bytes, in order (likely because a piece, both ranks' copies and Open MPI's scratch, stays
/// in the 32 MiB L3 cache through the all-reduce's phases, where a whole 25 MiB bucket goes
/// out to memory in each). Measured: 2 ranks, a C loop of 30 calls in place, medians
/// 3.2-3.6 ms in 2 MiB pieces against 4.8-6.0 ms whole on huge pages (7.4-8.1 ms against
/// 10.5-11.1 on 4 KiB pages), where 1, 4 and 8 MiB pieces took 3.6-4.0, 3.4-3.6 and
/// 3.9-7.4 ms. Every rank splits the buffer the same way
/// and each element is reduced by exactly one call (with 2 ranks, to the same sum as one
/// whole call; with more, in whatever order Open MPI's algorithm for that size takes, as
/// for a buffer of that size). It also lifts MPI's 2^31 - 1 element limit on one call.
pub(crate) const ALL_REDUCE_CHUNK_BYTES: usize = 2 << 20;

/// The live world (a second `ProcessGroup::mpi()` shares it), and whether MPI was
/// finalised (it cannot be initialised again in this process).
static WORLD: Mutex<(Option<Weak<CommThread>>, bool)> = Mutex::new((None, false));

/// MPI's world: the live one, or a new communication thread that initialises MPI.
pub(crate) fn world(timeout: Duration) -> Result<Arc<dyn Backend>> {
    let mut w = WORLD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(live) = w.0.as_ref().and_then(Weak::upgrade) {
        return Ok(live);
    }
    if w.1 {
        return Err(dist_err(
            "init_process_group",
            "MPI was finalised when the last process group was dropped; it cannot be \
             initialised twice in one process",
        ));
    }
    let m = Arc::new(CommThread::spawn("mpi", timeout, move |jobs, ready| {
        serve(jobs, ready, timeout)
    })?);
    w.1 = true;
    w.0 = Some(Arc::downgrade(&m));
    Ok(m)
}

/// The communicators the thread uses: one for collectives, one for arrival messages (both
/// duplicates of the world, returning errors instead of aborting).
struct Comms {
    coll: ffi::MPI_Comm,
    arrive: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// The library's `MPI_IN_PLACE`, where it is known (see [`in_place_marker`]).
    in_place: Option<*mut c_void>,
}

/// `MPI_IN_PLACE` of the MPI library this process runs on, from its version string: the
/// `mpi` crate does not export the constant, and it differs between the two ABI families
/// (`(void *) 1` in Open MPI's mpi.h, `(void *) -1` in MPICH's and its derivatives').
/// `None` for a library of neither family: all-reduces then use a separate output buffer.
///
/// In place, an all-reduce took 26-37% less time than into a separate buffer here (Open MPI
/// 4.1.4, 2 ranks, 25 MiB f32, a C loop of 30 calls: medians 10.2-11.2 ms against
/// 14.1-16.9, whichever algorithm Open MPI's tuned component was told to use), and `kiln
/// bench --ddp`'s all-reduce row went from 32-34% to 41-49% of a memory copy.
fn in_place_marker(library_version: &str) -> Option<*mut c_void> {
    if library_version.starts_with("Open MPI") {
        Some(std::ptr::without_provenance_mut(1))
    } else if ["MPICH", "Intel(R) MPI", "MVAPICH"]
        .iter()
        .any(|family| library_version.starts_with(family))
    {
        Some(std::ptr::without_provenance_mut(usize::MAX))
    } else {
        None
    }
}

/// `MPI_Get_library_version`'s string (empty if it fails).
///
/// # Safety
/// MPI is initialised.
unsafe fn library_version() -> String {
    let mut buf = vec![0u8; ffi::RSMPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    if ffi::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) != 0 {
        return String::new();
    }
    buf.truncate((len.max(0) as usize).min(buf.len()));
    String::from_utf8_lossy(&buf).trim_start().to_string()
}

/// The communication thread: initialises MPI, reports (rank, size), runs jobs in order,
/// then finalises (or aborts the job if a collective failed).
fn serve(jobs: Receiver<Job>, ready: Sender<Result<(usize, usize)>>, timeout: Duration) {
    let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Funneled)
    else {
        let _ = ready.send(Err(dist_err(
            "init_process_group",
            "MPI was already initialised in this process",
        )));
        return;
    };
    if threading < mpi::Threading::Funneled {
        let _ = ready.send(Err(dist_err(
            "init_process_group",
            format!("MPI provides {threading:?} threading; kiln needs Funneled"),
        )));
        return;
    }
    // SAFETY: MPI is initialised on this thread, the only one that calls it; the handles
    // written are MPI's.
    let comms = unsafe {
        let mut coll: ffi::MPI_Comm = std::mem::zeroed();
        let mut arrive: ffi::MPI_Comm = std::mem::zeroed();
        ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut coll);
        ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut arrive);
        ffi::MPI_Comm_set_errhandler(coll, ffi::RSMPI_ERRORS_RETURN);
        ffi::MPI_Comm_set_errhandler(arrive, ffi::RSMPI_ERRORS_RETURN);
        let (mut rank, mut size) = (0, 0);
        ffi::MPI_Comm_rank(coll, &mut rank);
        ffi::MPI_Comm_size(coll, &mut size);
        Comms {
            coll,
            arrive,
            rank: rank as usize,
            size: size as usize,
            in_place: in_place_marker(&library_version()),
        }
    };
    let _ = ready.send(Ok((comms.rank, comms.size)));
    let mut broken: Option<String> = None;
    let mut seq = 0u64;
    // without MPI_IN_PLACE: the last all-reduce's input, reused as the next one's output
    // when it fits (a fresh 25 MiB buffer costs thousands of page faults on first touch)
    let mut spare: Option<CommBuffer> = None;
    for job in jobs {
        let (c, reply) = match job {
            Job::Run(c, reply) => (c, reply),
            Job::Shutdown => break,
        };
        if let Some(why) = &broken {
            let _ = reply.send(Err(dist_err(
                c.name(),
                format!("the process group is broken by an earlier failure: {why}"),
            )));
            continue;
        }
        seq += 1;
        // SAFETY: this thread is MPI's only caller; the buffers live until the collective
        // completes (or are leaked if it does not).
        let r = unsafe { run(&comms, seq, c, timeout, &mut spare) };
        if let Err(e) = &r {
            broken = Some(e.to_string());
        }
        let _ = reply.send(r);
    }
    if broken.is_some() {
        // collectives are still pending on dead or hung ranks: finalising would wait for
        // them forever, so the whole job is stopped
        // SAFETY: MPI is initialised on this thread.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
    }
    drop(universe);
}

/// An MPI datatype for the buffer's elements, its data pointer and length.
unsafe fn raw(b: &mut CommBuffer) -> (ffi::MPI_Datatype, *mut c_void, usize) {
    match b {
        CommBuffer::F32(v) => (ffi::RSMPI_FLOAT, v.as_mut_ptr().cast(), v.len()),
        CommBuffer::F64(v) => (ffi::RSMPI_DOUBLE, v.as_mut_ptr().cast(), v.len()),
        CommBuffer::I64(v) => (ffi::RSMPI_INT64_T, v.as_mut_ptr().cast(), v.len()),
    }
}

/// An element count as MPI's `int`.
fn count(op: &str, n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        dist_err(
            op,
            format!("{n} elements is more than one MPI call moves (2^31 - 1)"),
        )
    })
}

/// Runs one collective in two phases: arrival messages to and from every peer, polled until
/// every peer has arrived or the timeout passes (the error names the missing ranks); then
/// the blocking MPI collective, which runs at MPI's full speed since every rank is in it.
unsafe fn run(
    c: &Comms,
    seq: u64,
    coll: Collective,
    timeout: Duration,
    spare: &mut Option<CommBuffer>,
) -> Result<CommBuffer> {
    let name = coll.name();
    let what = format!("{name} #{seq}");
    let fail = |code: c_int, call: &str| {
        if code == 0 {
            Ok(())
        } else {
            Err(dist_err(&what, format!("{call} returned MPI error {code}")))
        }
    };
    // phase 1: each peer is told this rank reached collective `seq`, and heard from
    let peers: Vec<usize> = (0..c.size).filter(|&p| p != c.rank).collect();
    let sent = Box::new(seq);
    let mut got: Vec<u64> = vec![0; peers.len()];
    let mut reqs: Vec<ffi::MPI_Request> = Vec::with_capacity(2 * peers.len());
    for (i, &p) in peers.iter().enumerate() {
        let (mut s, mut r) = (std::mem::zeroed(), std::mem::zeroed());
        fail(
            ffi::MPI_Isend(
                (&*sent as *const u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                p as c_int,
                ARRIVAL_TAG,
                c.arrive,
                &mut s,
            ),
            "MPI_Isend",
        )?;
        fail(
            ffi::MPI_Irecv(
                (&mut got[i] as *mut u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                p as c_int,
                ARRIVAL_TAG,
                c.arrive,
                &mut r,
            ),
            "MPI_Irecv",
        )?;
        reqs.push(s);
        reqs.push(r);
    }
    // poll: spin a millisecond, then back off so that waiting for a slow peer does not
    // take a core from this rank's computation
    let start = Instant::now();
    let mut done = vec![false; reqs.len()];
    loop {
        for (i, r) in reqs.iter_mut().enumerate() {
            if !done[i] {
                let mut flag: c_int = 0;
                fail(
                    ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE),
                    "MPI_Test",
                )?;
                done[i] = flag != 0;
            }
        }
        if done.iter().all(|d| *d) {
            break;
        }
        let waited = start.elapsed();
        if waited > timeout {
            let missing: Vec<String> = peers
                .iter()
                .enumerate()
                .filter(|(i, _)| !done[2 * i + 1])
                .map(|(_, &p)| p.to_string())
                .collect();
            // the pending messages still own their buffers
            std::mem::forget(sent);
            std::mem::forget(got);
            return Err(dist_err(
                &what,
                format!(
                    "timed out after {:.1} s: rank {} did not reach it (rank {} of {} waited)",
                    timeout.as_secs_f64(),
                    missing.join(", rank "),
                    c.rank,
                    c.size
                ),
            ));
        }
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    for (i, &p) in peers.iter().enumerate() {
        if got[i] != seq {
            return Err(dist_err(
                &what,
                format!(
                    "rank {p} is at collective #{} while rank {} is at #{seq}: the ranks \
                     called collectives in different orders",
                    got[i], c.rank
                ),
            ));
        }
    }
    // phase 2: the collective, every rank in it
    Ok(match coll {
        Collective::AllReduce(mut b, op) => {
            let mop = match op {
                ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
                ReduceOp::Max => ffi::RSMPI_MAX,
                ReduceOp::Min => ffi::RSMPI_MIN,
            };
            // in place, or into a separate buffer (the spare) where MPI_IN_PLACE is unknown
            let (ty, bp, n) = raw(&mut b);
            let mut out = None;
            let (send, recv) = match c.in_place {
                Some(in_place) => (in_place, bp),
                None => {
                    let o = out.insert(match spare.take() {
                        Some(s) if s.dtype() == b.dtype() && s.len() == b.len() => s,
                        _ => CommBuffer::zeros(b.dtype(), b.len(), name)?,
                    });
                    (bp, raw(o).1)
                }
            };
            let elem = b.dtype().size_bytes();
            let per_call = (ALL_REDUCE_CHUNK_BYTES / elem).max(1);
            let in_place = c.in_place.is_some();
            for start in (0..n).step_by(per_call) {
                let len = per_call.min(n - start);
                let at = |p: *mut c_void| p.cast::<u8>().add(start * elem).cast::<c_void>();
                let send = if in_place { send } else { at(send) };
                fail(
                    ffi::MPI_Allreduce(send, at(recv), count(&what, len)?, ty, mop, c.coll),
                    "MPI_Allreduce",
                )?;
            }
            let mut result = match out {
                Some(o) => {
                    *spare = Some(b);
                    o
                }
                None => b,
            };
            if op == ReduceOp::Avg {
                result.divide(c.size);
            }
            result
        }
        Collective::Broadcast(mut b, root) => {
            let (ty, p, n) = raw(&mut b);
            fail(
                ffi::MPI_Bcast(p, count(&what, n)?, ty, root as c_int, c.coll),
                "MPI_Bcast",
            )?;
            b
        }
        Collective::AllGather(mut b) => {
            let mut out = CommBuffer::zeros(b.dtype(), b.len() * c.size, name)?;
            let (ty, sp, n) = raw(&mut b);
            let (_, rp, _) = raw(&mut out);
            let n = count(&what, n)?;
            fail(
                ffi::MPI_Allgather(sp, n, ty, rp, n, ty, c.coll),
                "MPI_Allgather",
            )?;
            out
        }
        Collective::Barrier => {
            fail(ffi::MPI_Barrier(c.coll), "MPI_Barrier")?;
            CommBuffer::I64(Vec::new())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::in_place_marker;

    #[test]
    fn mpi_in_place_is_the_value_of_the_library_family_or_none() {
        let open_mpi = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4";
        assert_eq!(
            in_place_marker(open_mpi),
            Some(std::ptr::without_provenance_mut(1))
        );
        assert_eq!(
            in_place_marker("MPICH Version:\t4.0.2\nMPICH Release date: ..."),
            Some(std::ptr::without_provenance_mut(usize::MAX))
        );
        assert_eq!(
            in_place_marker("Intel(R) MPI Library 2021.10"),
            Some(std::ptr::without_provenance_mut(usize::MAX))
        );
        assert_eq!(in_place_marker("Some Other MPI 1.0"), None);
        assert_eq!(in_place_marker(""), None);
    }
}
