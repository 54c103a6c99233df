//! Data-parallel training across processes (`torch.distributed` and
//! `DistributedDataParallel`) on existing collective engines: MPI (Open MPI, behind the
//! `mpi` cargo feature) for CPU machines and clusters, NCCL (behind the `nccl` feature,
//! loaded at run time) for GPUs, and a world of size 1 that needs no launcher.
//!
//! | file | holds |
//! | --- | --- |
//! | `group.rs` | [`ProcessGroup`]: rank, world size, `all_reduce`, `broadcast`, `all_gather`, `barrier`, asynchronous [`Work`] |
//! | `buffer.rs` | [`CommBuffer`], the flat host data a collective moves, and its tensor conversions |
//! | `comm_thread.rs` | the communication thread MPI and NCCL share: collectives in submission order, stopped when the group drops |
//! | `local.rs` | the world of size 1 |
//! | `mpi_backend.rs` | MPI: one communication thread, non-blocking collectives, timeouts that name the missing rank |
//! | `bucket.rs` | DDP's bucket assignment (reverse parameter order, 1 MiB first bucket, 25 MiB after) |
//! | `ddp.rs` | [`DistributedDataParallel`]: broadcast and shape check at start, bucketed all-reduce from gradient hooks, `no_sync`, unused parameters |
//! | `nccl_backend.rs` | NCCL (the `nccl` feature): buffers reduced in device memory on a communication thread's stream |
//! | `rendezvous.rs` | how NCCL's ranks share its unique id: a file, TCP, or MPI |
//! | `split.rs` | compiled DDP: a `Sequential`'s forward compiled as one graph per bucket group, so all-reduces overlap the compiled backward |

mod bucket;
mod buffer;
#[cfg(any(feature = "mpi", feature = "nccl"))]
mod comm_thread;
mod ddp;
mod group;
mod local;
#[cfg(feature = "mpi")]
mod mpi_backend;
#[cfg(feature = "nccl")]
mod nccl_backend;
mod rendezvous;
mod split;

pub use bucket::{assign_buckets, BucketInfo};
pub use buffer::{advise_huge_pages, CommBuffer};
pub use ddp::{DdpOptions, DistributedDataParallel, NoSyncGuard};
pub use group::{ProcessGroup, ReduceOp, Work};
#[cfg(feature = "nccl")]
pub use nccl_backend::NcclInit;
pub use rendezvous::Rendezvous;
pub use split::SplitCompiled;

use crate::error::Error;

/// A distributed error: `op` failed for `reason` (a timeout names the ranks that did not
/// arrive).
pub(crate) fn dist_err(op: impl std::fmt::Display, reason: impl std::fmt::Display) -> Error {
    Error::Distributed {
        op: op.to_string(),
        reason: reason.to_string(),
    }
}
