//! The communication thread the MPI and NCCL backends share: it owns the engine (MPI's
//! world, an NCCL communicator), runs the submitted collectives in order, and is told to
//! stop (and joined) when the group is dropped.

use super::buffer::CommBuffer;
use super::dist_err;
use super::group::{Backend, Collective};
use crate::error::Result;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the communication thread is asked to do.
pub(crate) enum Job {
    /// run a collective and send its result
    Run(Collective, Sender<Result<CommBuffer>>),
    /// finish (the group was dropped)
    Shutdown,
}

/// A backend served by a communication thread.
pub(crate) struct CommThread {
    name: &'static str,
    rank: usize,
    size: usize,
    timeout: Duration,
    jobs: Mutex<Sender<Job>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl CommThread {
    /// Starts thread `kiln-{name}` running `serve`, which sets its engine up, reports
    /// (rank, world size) or why it cannot, then serves the jobs until they end.
    pub(crate) fn spawn(
        name: &'static str,
        timeout: Duration,
        serve: impl FnOnce(Receiver<Job>, Sender<Result<(usize, usize)>>) + Send + 'static,
    ) -> Result<CommThread> {
        let (jobs, rx) = channel();
        let (ready_tx, ready_rx) = channel();
        let thread = std::thread::Builder::new()
            .name(format!("kiln-{name}"))
            .spawn(move || serve(rx, ready_tx))
            .map_err(|e| dist_err("init_process_group", e))?;
        let (rank, size) = ready_rx
            .recv()
            .map_err(|_| dist_err("init_process_group", format!("the {name} thread stopped")))??;
        Ok(CommThread {
            name,
            rank,
            size,
            timeout,
            jobs: Mutex::new(jobs),
            thread: Mutex::new(Some(thread)),
        })
    }
}

impl Backend for CommThread {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn submit(&self, c: Collective) -> Receiver<Result<CommBuffer>> {
        let (tx, rx) = channel();
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(std::sync::mpsc::SendError(Job::Run(c, tx))) = jobs.send(Job::Run(c, tx)) {
            let why = format!("the {} thread has stopped", self.name);
            let _ = tx.send(Err(dist_err(c.name(), why)));
        }
        rx
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        let _ = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Job::Shutdown);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}
