//! How the ranks of an NCCL group agree on NCCL's unique id (128 bytes that rank 0 makes):
//! as PyTorch's `init_process_group` does, through a shared file, a TCP address rank 0
//! listens on, or MPI (a broadcast from rank 0, when launched by `mpirun`). Plain byte
//! exchange, testable without a GPU.

use super::dist_err;
use crate::error::Result;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The size of NCCL's unique id.
pub const ID_BYTES: usize = 128;

/// Where the ranks meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// rank 0 writes the id to this file (atomically, by rename); the others wait for it
    File(PathBuf),
    /// rank 0 listens on this address and sends the id to each rank that connects
    Tcp(SocketAddr),
    /// rank 0 broadcasts it over MPI's world (kiln's `mpi` feature, under `mpirun`)
    Mpi,
}

impl Rendezvous {
    /// Parses `file:PATH`, `tcp:HOST:PORT` or `mpi` (`KILN_RENDEZVOUS`).
    pub fn parse(s: &str) -> Result<Rendezvous> {
        let bad = || {
            dist_err(
                "rendezvous",
                format!("`{s}`: expected file:PATH, tcp:HOST:PORT or mpi"),
            )
        };
        if s == "mpi" {
            return Ok(Rendezvous::Mpi);
        }
        if let Some(p) = s.strip_prefix("file:") {
            return if p.is_empty() {
                Err(bad())
            } else {
                Ok(Rendezvous::File(PathBuf::from(p)))
            };
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            use std::net::ToSocketAddrs;
            return a
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.next())
                .map(Rendezvous::Tcp)
                .ok_or_else(bad);
        }
        Err(bad())
    }

    /// Rank 0 passes `id`; every rank gets rank 0's id back, or an error after `timeout`.
    pub fn exchange(
        &self,
        rank: usize,
        world: usize,
        id: Option<[u8; ID_BYTES]>,
        timeout: Duration,
    ) -> Result<[u8; ID_BYTES]> {
        if world == 1 {
            return id.ok_or_else(|| dist_err("rendezvous", "rank 0 must make the id"));
        }
        match (self, rank, id) {
            (Rendezvous::File(p), 0, Some(id)) => {
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                std::fs::write(&tmp, id)
                    .and_then(|_| std::fs::rename(&tmp, p))
                    .map_err(|e| dist_err("rendezvous", format!("{}: {e}", p.display())))?;
                Ok(id)
            }
            (Rendezvous::File(p), _, _) => {
                let start = Instant::now();
                loop {
                    if let Ok(b) = std::fs::read(p) {
                        if let Ok(id) = <[u8; ID_BYTES]>::try_from(b.as_slice()) {
                            return Ok(id);
                        }
                    }
                    if start.elapsed() > timeout {
                        return Err(dist_err(
                            "rendezvous",
                            format!(
                                "rank {rank}: rank 0 did not write {} within {:.1} s",
                                p.display(),
                                timeout.as_secs_f64()
                            ),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            (Rendezvous::Tcp(a), 0, Some(id)) => {
                let l = TcpListener::bind(a)
                    .map_err(|e| dist_err("rendezvous", format!("rank 0 listening on {a}: {e}")))?;
                l.set_nonblocking(true)
                    .map_err(|e| dist_err("rendezvous", e))?;
                let start = Instant::now();
                let mut served = 0;
                while served < world - 1 {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false)
                                .and_then(|_| s.write_all(&id))
                                .map_err(|e| dist_err("rendezvous", e))?;
                            served += 1;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if start.elapsed() > timeout {
                                return Err(dist_err(
                                    "rendezvous",
                                    format!(
                                        "rank 0: {} of {} ranks connected to {a} within {:.1} s",
                                        served,
                                        world - 1,
                                        timeout.as_secs_f64()
                                    ),
                                ));
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => return Err(dist_err("rendezvous", e)),
                    }
                }
                Ok(id)
            }
            (Rendezvous::Tcp(a), _, _) => {
                let start = Instant::now();
                loop {
                    let got = TcpStream::connect_timeout(a, Duration::from_millis(500)).and_then(
                        |mut s| {
                            s.set_read_timeout(Some(timeout))?;
                            let mut id = [0u8; ID_BYTES];
                            s.read_exact(&mut id)?;
                            Ok(id)
                        },
                    );
                    match got {
                        Ok(id) => return Ok(id),
                        Err(e) if start.elapsed() > timeout => {
                            return Err(dist_err(
                                "rendezvous",
                                format!("rank {rank}: no id from rank 0 at {a}: {e}"),
                            ))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
            (Rendezvous::Mpi, _, id) => mpi_exchange(rank, id),
        }
    }
}

/// The id broadcast from rank 0 over MPI's world.
#[cfg(feature = "mpi")]
fn mpi_exchange(rank: usize, id: Option<[u8; ID_BYTES]>) -> Result<[u8; ID_BYTES]> {
    use super::{CommBuffer, ProcessGroup};
    let g = ProcessGroup::mpi()?;
    if g.rank() != rank {
        return Err(dist_err(
            "rendezvous",
            format!("rank {rank} is rank {} in MPI's world", g.rank()),
        ));
    }
    let words: Vec<i64> = match id {
        Some(id) => id
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        None => vec![0; ID_BYTES / 8],
    };
    let out = g
        .submit_buffer(
            "broadcast",
            super::group::Collective::Broadcast(CommBuffer::I64(words), 0),
        )
        .wait()?;
    let CommBuffer::I64(w) = out else {
        unreachable!("an i64 broadcast returns i64")
    };
    let mut id = [0u8; ID_BYTES];
    for (i, x) in w.iter().enumerate() {
        id[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    Ok(id)
}

#[cfg(not(feature = "mpi"))]
fn mpi_exchange(_rank: usize, _id: Option<[u8; ID_BYTES]>) -> Result<[u8; ID_BYTES]> {
    Err(dist_err(
        "rendezvous",
        "mpi: this kiln was built without MPI (cargo's `mpi` feature)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> [u8; ID_BYTES] {
        std::array::from_fn(|i| (i * 7 + 3) as u8)
    }

    /// Three ranks as threads: every rank gets rank 0's id.
    fn three_ranks(r: Rendezvous) {
        let t = Duration::from_secs(10);
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                let r = r.clone();
                std::thread::spawn(move || r.exchange(rank, 3, (rank == 0).then(id), t))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap().unwrap(), id());
        }
    }

    #[test]
    fn through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        three_ranks(Rendezvous::File(dir.path().join("nccl.id")));
    }

    #[test]
    fn through_tcp() {
        // a free port: bind to 0, read it, release it
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        three_ranks(Rendezvous::parse(&format!("tcp:127.0.0.1:{port}")).unwrap());
    }

    #[test]
    fn a_missing_rank_zero_times_out_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let r = Rendezvous::File(dir.path().join("never"));
        let e = r
            .exchange(1, 2, None, Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 1: rank 0 did not write"), "{e}");
    }

    #[test]
    fn parsing() {
        assert_eq!(Rendezvous::parse("mpi").unwrap(), Rendezvous::Mpi);
        assert_eq!(
            Rendezvous::parse("file:/tmp/x").unwrap(),
            Rendezvous::File("/tmp/x".into())
        );
        for bad in ["", "file:", "tcp:nohost", "udp:1.2.3.4:5"] {
            assert!(Rendezvous::parse(bad).is_err(), "{bad}");
        }
        // a world of one needs no exchange
        let r = Rendezvous::Mpi;
        assert_eq!(r.exchange(0, 1, Some(id()), Duration::ZERO).unwrap(), id());
    }
}
