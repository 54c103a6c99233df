//! [`ProcessGroup`]: the ranks of a data-parallel job and their collectives
//! (`torch.distributed`'s process group), over a backend: the world of size 1, or MPI.

use super::buffer::CommBuffer;
use super::dist_err;
use crate::autograd::no_grad;
use crate::error::Result;
use crate::Tensor;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// How `all_reduce` combines the ranks' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// the sum
    Sum,
    /// the mean over ranks (the sum divided by the world size)
    Avg,
    /// the largest value
    Max,
    /// the smallest value
    Min,
}

/// One collective, as a backend runs it.
#[derive(Debug)]
// the world of size 1 needs neither the reduction nor the root
#[cfg_attr(not(any(feature = "mpi", feature = "nccl")), allow(dead_code))]
pub(crate) enum Collective {
    /// every rank gets the reduction of every rank's buffer
    AllReduce(CommBuffer, ReduceOp),
    /// every rank gets `root`'s buffer
    Broadcast(CommBuffer, usize),
    /// every rank gets the concatenation of every rank's buffer, in rank order
    AllGather(CommBuffer),
    /// every rank waits for every other
    Barrier,
}

impl Collective {
    /// The collective's name, for errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce(..) => "all_reduce",
            Collective::Broadcast(..) => "broadcast",
            Collective::AllGather(_) => "all_gather",
            Collective::Barrier => "barrier",
        }
    }
}

/// What runs collectives: the world of size 1, or MPI.
pub(crate) trait Backend: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// The backend's name (`local`, `mpi`).
    fn name(&self) -> &'static str;
    /// Starts `c`; the receiver gets its result. Collectives run in submission order, which
    /// must be the same on every rank.
    fn submit(&self, c: Collective) -> Receiver<Result<CommBuffer>>;
    /// How long a collective may wait for the other ranks.
    fn timeout(&self) -> Duration;
}

/// A collective in flight (`torch.distributed`'s `Work`): [`Work::wait`] blocks until it
/// has finished on this rank and returns its result.
#[must_use = "a collective's result is only seen through wait()"]
pub struct Work<T> {
    rx: Receiver<Result<CommBuffer>>,
    finish: Box<dyn FnOnce(CommBuffer) -> Result<T> + Send>,
    what: String,
    timeout: Duration,
}

impl<T> Work<T> {
    /// Waits for the collective, then applies its result (an all-reduce or broadcast writes
    /// into the tensor it was given).
    pub fn wait(self) -> Result<T> {
        // the backend times a collective out itself and names the missing ranks; this
        // bound is a backstop in case its thread has died
        let backstop = self.timeout + Duration::from_secs(30);
        let buf = match self.rx.recv_timeout(backstop) {
            Ok(r) => r?,
            Err(RecvTimeoutError::Timeout) => {
                return Err(dist_err(
                    &self.what,
                    format!("no result after {backstop:?}"),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(dist_err(
                    &self.what,
                    "the communication thread stopped without a result",
                ))
            }
        };
        (self.finish)(buf)
    }
}

/// The ranks of a data-parallel job and their collectives (`torch.distributed`'s default
/// process group). Cloning shares the group. Collectives must be called in the same order
/// on every rank; each one waits at most the group's timeout for the other ranks, then
/// fails with an error naming those that did not arrive.
#[derive(Clone)]
pub struct ProcessGroup {
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProcessGroup({}, rank {} of {})",
            self.backend.name(),
            self.rank(),
            self.world_size()
        )
    }
}

/// The default collective timeout: `KILN_DIST_TIMEOUT` seconds, else 300.
pub(crate) fn default_timeout() -> Duration {
    std::env::var("KILN_DIST_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(300))
}

/// The world size a launcher set in the environment (`mpirun`'s `OMPI_COMM_WORLD_SIZE`,
/// or `PMI_SIZE`), if any.
pub(crate) fn launcher_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// The ranks the launcher started on this host (Open MPI's, MPICH's or PMIx's variable).
#[cfg(feature = "mpi")]
fn launcher_local_size() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMIX_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// The kernel threads each of `local` ranks on a host of `cores` gets: an equal share, one
/// at least.
#[cfg(any(feature = "mpi", test))]
fn threads_per_rank(cores: usize, local: usize) -> usize {
    (cores / local.max(1)).max(1)
}

/// Ranks sharing a host share its cores (torchrun's `OMP_NUM_THREADS` default, the same
/// idea): each rank's kernel threads (rayon's global pool, which kiln's kernel pool
/// follows) are set to its share, unless `RAYON_NUM_THREADS` says otherwise. Without it, 2
/// ranks on 2 cores ran 4 busy kernel threads, and a compiled `train_block` step took 2.5x
/// one rank's time against 1.1-1.2x with a thread each.
#[cfg(feature = "mpi")]
fn share_cores_among_local_ranks() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let Some(local) = launcher_local_size().filter(|&n| n > 1) else {
        return;
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = threads_per_rank(cores, local);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        Ok(()) => tracing::info!(
            target: "kiln::distributed",
            "{local} ranks on this host's {cores} cores: {n} kernel threads each (RAYON_NUM_THREADS overrides)"
        ),
        Err(_) => tracing::warn!(
            target: "kiln::distributed",
            "{local} ranks share this host's {cores} cores, but this rank's kernel threads had \
             started before the process group ({} of them); set RAYON_NUM_THREADS={n}",
            rayon::current_num_threads()
        ),
    }
}

impl ProcessGroup {
    /// The world of size 1: rank 0, collectives that return their input. Needs no launcher.
    pub fn local() -> ProcessGroup {
        ProcessGroup {
            backend: Arc::new(super::local::Local {
                timeout: default_timeout(),
            }),
        }
    }

    /// The group the environment describes (`init_process_group`): under `mpirun` (or
    /// another MPI launcher) MPI's world, else the world of size 1. A launcher's world
    /// above 1 in a kiln built without the `mpi` feature is an error.
    pub fn from_env() -> Result<ProcessGroup> {
        match launcher_world_size() {
            None => Ok(ProcessGroup::local()),
            Some(_) => Self::mpi(),
        }
    }

    /// MPI's world (`mpirun -np N`): MPI is initialised on a communication thread of its
    /// own, which runs every collective; a second call while the group lives returns the
    /// same group. The timeout is `KILN_DIST_TIMEOUT` seconds (default 300). Ranks on one
    /// host split its cores between their kernel threads (unless `RAYON_NUM_THREADS` is
    /// set; call this before running kernels, or the share cannot be set, logged).
    pub fn mpi() -> Result<ProcessGroup> {
        #[cfg(feature = "mpi")]
        {
            share_cores_among_local_ranks();
            Ok(ProcessGroup {
                backend: super::mpi_backend::world(default_timeout())?,
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            match launcher_world_size() {
                Some(n) if n > 1 => Err(dist_err(
                    "init_process_group",
                    format!(
                        "the launcher started {n} ranks, but this kiln was built without MPI \
                         (cargo's `mpi` feature)"
                    ),
                )),
                _ => Err(dist_err(
                    "init_process_group",
                    "this kiln was built without MPI (cargo's `mpi` feature)",
                )),
            }
        }
    }

    /// An NCCL group (`init_process_group(backend="nccl")`): NCCL's unique id made by
    /// rank 0 and shared through `init.rendezvous`, collectives on device `init.device`.
    /// An error (never a panic) without a CUDA driver, a device or NCCL.
    #[cfg(feature = "nccl")]
    pub fn nccl(init: super::NcclInit) -> Result<ProcessGroup> {
        Ok(ProcessGroup {
            backend: super::nccl_backend::start(init, default_timeout())?,
        })
    }

    /// This process's rank, from 0.
    pub fn rank(&self) -> usize {
        self.backend.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.backend.size()
    }

    /// The backend's name: `local` or `mpi`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// How long a collective waits for the other ranks before failing.
    pub fn timeout(&self) -> Duration {
        self.backend.timeout()
    }

    /// Starts a collective on a flat buffer; the result is the collective's buffer.
    pub(crate) fn submit_buffer(&self, what: &str, c: Collective) -> Work<CommBuffer> {
        Work {
            rx: self.backend.submit(c),
            finish: Box::new(Ok),
            what: what.to_string(),
            timeout: self.timeout(),
        }
    }

    /// Starts an all-reduce of `buf` (flat data, as DDP's buckets are).
    pub fn all_reduce_buffer(&self, buf: CommBuffer, op: ReduceOp) -> Work<CommBuffer> {
        self.submit_buffer("all_reduce", Collective::AllReduce(buf, op))
    }

    /// Starts an all-reduce of `t` in place: after [`Work::wait`], `t` holds the reduction
    /// over every rank (f32, f64 or i64; written under `no_grad`).
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Work<()>> {
        let buf = CommBuffer::from_tensor(t, "all_reduce")?;
        Ok(self.writing_back(t, Collective::AllReduce(buf, op)))
    }

    /// Starts a broadcast of `root`'s `t` into every rank's `t` (in place, as `all_reduce`).
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<Work<()>> {
        self.check_rank("broadcast", root)?;
        let buf = CommBuffer::from_tensor(t, "broadcast")?;
        Ok(self.writing_back(t, Collective::Broadcast(buf, root)))
    }

    /// Starts an all-gather: every rank's `t` (same shape and dtype on every rank), in rank
    /// order.
    pub fn all_gather(&self, t: &Tensor) -> Result<Work<Vec<Tensor>>> {
        let buf = CommBuffer::from_tensor(t, "all_gather")?;
        let (shape, n, ranks) = (t.shape().to_vec(), t.numel(), self.world_size());
        let mut w = self.submit_buffer("all_gather", Collective::AllGather(buf));
        w.what = format!("all_gather of {:?} {}", shape, t.dtype());
        Ok(Work {
            rx: w.rx,
            finish: Box::new(move |b: CommBuffer| {
                (0..ranks).map(|r| b.tensor(r * n, &shape)).collect()
            }),
            what: w.what,
            timeout: w.timeout,
        })
    }

    /// Waits until every rank has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        self.submit_buffer("barrier", Collective::Barrier).wait()?;
        Ok(())
    }

    fn check_rank(&self, op: &str, r: usize) -> Result<()> {
        if r >= self.world_size() {
            return Err(dist_err(
                op,
                format!("rank {r} is outside a world of {}", self.world_size()),
            ));
        }
        Ok(())
    }

    /// A collective whose result is written back into `t`.
    fn writing_back(&self, t: &Tensor, c: Collective) -> Work<()> {
        let what = format!("{} of {:?} {}", c.name(), t.shape(), t.dtype());
        let dst = t.clone();
        Work {
            rx: self.backend.submit(c),
            finish: Box::new(move |b: CommBuffer| {
                let _g = no_grad();
                dst.copy_(&b.tensor(0, dst.shape())?)
            }),
            what,
            timeout: self.timeout(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::threads_per_rank;

    #[test]
    fn ranks_on_a_host_share_its_cores() {
        assert_eq!(threads_per_rank(2, 2), 1);
        assert_eq!(threads_per_rank(16, 3), 5);
        assert_eq!(threads_per_rank(8, 1), 8);
        // more ranks than cores: one thread each, never none
        assert_eq!(threads_per_rank(2, 4), 1);
        assert_eq!(threads_per_rank(4, 0), 4);
    }
}
