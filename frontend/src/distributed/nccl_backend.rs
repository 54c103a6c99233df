//! NCCL as a [`Backend`] (kiln's `nccl` feature: cudarc's NCCL bindings, NCCL loaded at
//! run time like the rest of CUDA, from `KILN_NCCL` (the library file or its directory: the
//! PyPI wheel `nvidia-nccl-cu12` has it under `site-packages/nvidia/nccl/lib`) or by name).
//!
//! One communication thread owns the CUDA stream and the NCCL communicator and runs the
//! collectives in submission order: a buffer is copied to the device, reduced there by
//! NCCL on the thread's stream, and copied back. The ranks agree on NCCL's unique id through
//! a [`Rendezvous`]. A missing driver, device or NCCL library is an error, never a panic
//! (cudarc panics when it calls into a library it cannot load, so presence is checked
//! first and every cudarc call runs under `catch_unwind`). A hung peer is caught by the
//! wait's deadline only, without naming the rank: NCCL has no side channel for arrival
//! messages.

use super::buffer::CommBuffer;
use super::comm_thread::{CommThread, Job};
use super::dist_err;
use super::group::{Backend, Collective, ReduceOp};
use super::rendezvous::{Rendezvous, ID_BYTES};
use crate::error::Result;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{Comm, Id, ReduceOp as NcclOp};
use kiln_codegen::cuda::driver_gpu::panic_message;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// How an NCCL group starts (`init_process_group(backend="nccl", ...)`).
#[derive(Clone, Debug)]
pub struct NcclInit {
    /// this process's rank
    pub rank: usize,
    /// the number of ranks
    pub world_size: usize,
    /// the CUDA device this rank uses
    pub device: usize,
    /// how the ranks exchange NCCL's unique id (unused for a world of size 1)
    pub rendezvous: Rendezvous,
}

impl NcclInit {
    /// From the environment: `KILN_RANK` and `KILN_WORLD_SIZE` (else `mpirun`'s
    /// `OMPI_COMM_WORLD_RANK`/`_SIZE`, else a world of size 1), `KILN_CUDA_DEVICE` (else the
    /// local rank, else 0) and `KILN_RENDEZVOUS` (`file:PATH`, `tcp:HOST:PORT` or `mpi`;
    /// default `mpi` under `mpirun`).
    pub fn from_env() -> Result<NcclInit> {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| -> Result<Option<usize>> {
            var(k)
                .map(|v| {
                    v.parse().map_err(|_| {
                        dist_err("init_process_group", format!("{k}={v}: not a number"))
                    })
                })
                .transpose()
        };
        let launched = var("OMPI_COMM_WORLD_SIZE").is_some();
        let rank = num("KILN_RANK")?
            .or(num("OMPI_COMM_WORLD_RANK")?)
            .unwrap_or(0);
        let world_size = num("KILN_WORLD_SIZE")?
            .or(num("OMPI_COMM_WORLD_SIZE")?)
            .unwrap_or(1);
        let device = num("KILN_CUDA_DEVICE")?
            .or(num("OMPI_COMM_WORLD_LOCAL_RANK")?)
            .unwrap_or(0);
        let rendezvous = match var("KILN_RENDEZVOUS") {
            Some(s) => Rendezvous::parse(&s)?,
            None if launched || world_size == 1 => Rendezvous::Mpi,
            None => {
                return Err(dist_err(
                    "init_process_group",
                    "KILN_RENDEZVOUS is not set (file:PATH, tcp:HOST:PORT or mpi)",
                ))
            }
        };
        Ok(NcclInit {
            rank,
            world_size,
            device,
            rendezvous,
        })
    }
}

/// Loads NCCL once: `KILN_NCCL` by absolute path first, then cudarc's lookup by name.
fn load_nccl() -> Result<()> {
    static LOADED: std::sync::OnceLock<std::result::Result<(), String>> =
        std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("KILN_NCCL") {
                let path = std::path::PathBuf::from(p);
                let file = if path.is_dir() {
                    path.join("libnccl.so.2")
                } else {
                    path.clone()
                };
                // SAFETY: loading runs the library's initialisers, which have no
                // preconditions; it stays loaded for the process (leaked on purpose).
                match unsafe { libloading::Library::new(&file) } {
                    Ok(lib) => std::mem::forget(lib),
                    Err(e) => return Err(format!("KILN_NCCL={}: {e}", path.display())),
                }
            }
            // SAFETY: only tries to open the libraries by their usual names.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err("no CUDA driver (libcuda.so.1) on this machine".into());
            }
            // SAFETY: as above.
            if !unsafe { cudarc::nccl::sys::is_culib_present() } {
                return Err(
                    "NCCL (libnccl.so.2) was not found: `pip install nvidia-nccl-cu12` \
                            and set KILN_NCCL to its site-packages/nvidia/nccl/lib directory"
                        .into(),
                );
            }
            Ok(())
        })
        .clone()
        .map_err(|e| dist_err("init_process_group", e))
}

/// Starts an NCCL group: loads NCCL, opens the device, exchanges the id, makes the
/// communicator on the communication thread.
pub(crate) fn start(init: NcclInit, timeout: Duration) -> Result<Arc<dyn Backend>> {
    if init.rank >= init.world_size {
        return Err(dist_err(
            "init_process_group",
            format!(
                "rank {} is outside a world of {}",
                init.rank, init.world_size
            ),
        ));
    }
    load_nccl()?;
    let id = if init.rank == 0 {
        let made = std::panic::catch_unwind(Id::new)
            .map_err(|p| dist_err("init_process_group", panic_message(p.as_ref())))?
            .map_err(|e| dist_err("init_process_group", format!("ncclGetUniqueId: {e:?}")))?;
        Some(std::array::from_fn(|i| made.internal()[i] as u8))
    } else {
        None
    };
    let bytes: [u8; ID_BYTES] =
        init.rendezvous
            .exchange(init.rank, init.world_size, id, timeout)?;
    let (rank, size, device) = (init.rank, init.world_size, init.device);
    Ok(Arc::new(CommThread::spawn(
        "nccl",
        timeout,
        move |jobs, ready| serve(jobs, ready, rank, size, device, bytes),
    )?))
}

/// The communication thread: the device's stream and the communicator, then the jobs.
fn serve(
    jobs: Receiver<Job>,
    ready: Sender<Result<(usize, usize)>>,
    rank: usize,
    size: usize,
    device: usize,
    id: [u8; ID_BYTES],
) {
    let made = std::panic::catch_unwind(move || -> std::result::Result<_, String> {
        let ctx = CudaContext::new(device).map_err(|e| format!("cuda:{device}: {e}"))?;
        let stream = ctx.new_stream().map_err(|e| format!("a stream: {e}"))?;
        let id = Id::uninit(std::array::from_fn(|i| id[i] as std::ffi::c_char));
        let comm = Comm::from_rank(stream.clone(), rank, size, id)
            .map_err(|e| format!("ncclCommInitRank: {e:?}"))?;
        Ok((stream, comm))
    });
    let (stream, comm) = match made {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            let _ = ready.send(Err(dist_err("init_process_group", e)));
            return;
        }
        Err(p) => {
            let _ = ready.send(Err(dist_err(
                "init_process_group",
                panic_message(p.as_ref()),
            )));
            return;
        }
    };
    let _ = ready.send(Ok((rank, size)));
    for job in jobs {
        let (c, reply) = match job {
            Job::Run(c, reply) => (c, reply),
            Job::Shutdown => break,
        };
        let name = c.name();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(&stream, &comm, size, c)
        }))
        .unwrap_or_else(|p| Err(panic_message(p.as_ref())))
        .map_err(|e| dist_err(name, e));
        let _ = reply.send(r);
    }
}

/// One collective through device memory on `stream`.
fn run(
    stream: &Arc<CudaStream>,
    comm: &Comm,
    size: usize,
    c: Collective,
) -> std::result::Result<CommBuffer, String> {
    macro_rules! on_device {
        ($v:expr, $wrap:path, |$d:ident| $body:expr) => {{
            let mut $d = stream.clone_htod(&$v).map_err(|e| e.to_string())?;
            $body.map_err(|e| format!("{e:?}"))?;
            $wrap(stream.clone_dtoh(&$d).map_err(|e| e.to_string())?)
        }};
    }
    let op = |op: ReduceOp| match op {
        ReduceOp::Sum | ReduceOp::Avg => NcclOp::Sum,
        ReduceOp::Max => NcclOp::Max,
        ReduceOp::Min => NcclOp::Min,
    };
    Ok(match c {
        Collective::AllReduce(b, o) => {
            let mut out = match b {
                CommBuffer::F32(v) => on_device!(v, CommBuffer::F32, |d| comm
                    .all_reduce_in_place(&mut d, &op(o))),
                CommBuffer::F64(v) => on_device!(v, CommBuffer::F64, |d| comm
                    .all_reduce_in_place(&mut d, &op(o))),
                CommBuffer::I64(v) => on_device!(v, CommBuffer::I64, |d| comm
                    .all_reduce_in_place(&mut d, &op(o))),
            };
            if o == ReduceOp::Avg {
                out.divide(size);
            }
            out
        }
        Collective::Broadcast(b, root) => match b {
            CommBuffer::F32(v) => on_device!(v, CommBuffer::F32, |d| comm
                .broadcast_in_place(&mut d, root as i32)),
            CommBuffer::F64(v) => on_device!(v, CommBuffer::F64, |d| comm
                .broadcast_in_place(&mut d, root as i32)),
            CommBuffer::I64(v) => on_device!(v, CommBuffer::I64, |d| comm
                .broadcast_in_place(&mut d, root as i32)),
        },
        Collective::AllGather(b) => {
            macro_rules! gather {
                ($v:expr, $wrap:path, $zero:expr) => {{
                    let d = stream.clone_htod(&$v).map_err(|e| e.to_string())?;
                    let mut out = stream
                        .clone_htod(&vec![$zero; $v.len() * size])
                        .map_err(|e| e.to_string())?;
                    comm.all_gather(&d, &mut out)
                        .map_err(|e| format!("{e:?}"))?;
                    $wrap(stream.clone_dtoh(&out).map_err(|e| e.to_string())?)
                }};
            }
            match b {
                CommBuffer::F32(v) => gather!(v, CommBuffer::F32, 0f32),
                CommBuffer::F64(v) => gather!(v, CommBuffer::F64, 0f64),
                CommBuffer::I64(v) => gather!(v, CommBuffer::I64, 0i64),
            }
        }
        Collective::Barrier => {
            // an all-reduce of one element stands in for a barrier, as torch's does
            on_device!(vec![0f32], CommBuffer::F32, |d| comm
                .all_reduce_in_place(&mut d, &NcclOp::Sum));
            CommBuffer::I64(Vec::new())
        }
    })
}
