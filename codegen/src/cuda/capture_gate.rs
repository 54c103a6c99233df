//! Keeps other threads off a device's stream while one thread captures it.
//!
//! A device has one stream, shared by every thread that uses it. While a thread records a
//! graph ([`GpuDevice::begin_capture`](super::gpu::GpuDevice::begin_capture) …
//! `end_capture`), work another thread queued on that stream would be recorded into the
//! graph, and a copy or a wait on it would invalidate the capture (CUDA answers
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, then `…_INVALIDATED` for every later call).
//! So each stream operation first [`CaptureGate::enter`]s: it waits while another thread
//! captures, and a capture [`CaptureGate::begin`]s only once no other thread has an
//! operation in flight. The capturing thread's own operations pass (they are what it
//! records). Both devices, the driver's and the emulated one, use it, so they behave alike.

use parking_lot::{Condvar, Mutex};
use std::thread::ThreadId;

/// Who captures the stream, and how many operations of other threads are in flight.
#[derive(Debug, Default)]
struct GateState {
    capturer: Option<ThreadId>,
    in_flight: usize,
}

/// The gate of one device's stream (see the [module doc](self)).
#[derive(Debug, Default)]
pub struct CaptureGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// One stream operation let through the gate; the gate counts it until it is dropped.
#[must_use = "the operation is let through only while this is held"]
pub struct StreamUse<'a> {
    gate: &'a CaptureGate,
    /// whether this thread is the one capturing (its operations are not counted)
    capturing: bool,
}

impl StreamUse<'_> {
    /// Whether the calling thread is capturing the stream: its copies and waits would
    /// invalidate the capture.
    pub fn capturing(&self) -> bool {
        self.capturing
    }
}

impl Drop for StreamUse<'_> {
    fn drop(&mut self) {
        if !self.capturing {
            let mut s = self.gate.state.lock();
            s.in_flight -= 1;
            if s.in_flight == 0 {
                self.gate.changed.notify_all();
            }
        }
    }
}

impl CaptureGate {
    /// Waits while another thread captures the stream, then lets one operation through
    /// until the returned value is dropped.
    pub fn enter(&self) -> StreamUse<'_> {
        let me = std::thread::current().id();
        let mut s = self.state.lock();
        while s.capturer.is_some_and(|t| t != me) {
            self.changed.wait(&mut s);
        }
        let capturing = s.capturer == Some(me);
        if !capturing {
            s.in_flight += 1;
        }
        StreamUse {
            gate: self,
            capturing,
        }
    }

    /// Makes the calling thread the stream's capturer, once no other thread captures or has
    /// an operation in flight; false (and nothing changes) when it already captures.
    pub fn begin(&self) -> bool {
        let me = std::thread::current().id();
        let mut s = self.state.lock();
        if s.capturer == Some(me) {
            return false;
        }
        while s.capturer.is_some() || s.in_flight > 0 {
            self.changed.wait(&mut s);
        }
        s.capturer = Some(me);
        true
    }

    /// Whether the calling thread is the stream's capturer.
    pub fn is_capturer(&self) -> bool {
        self.state.lock().capturer == Some(std::thread::current().id())
    }

    /// Ends the calling thread's capture and wakes the threads waiting for it; false (and
    /// nothing changes) when it is not the capturer.
    pub fn end(&self) -> bool {
        let me = std::thread::current().id();
        let mut s = self.state.lock();
        if s.capturer != Some(me) {
            return false;
        }
        s.capturer = None;
        self.changed.notify_all();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_capturer_passes_and_others_wait_until_it_ends() {
        let gate = Arc::new(CaptureGate::default());
        assert!(gate.begin());
        assert!(!gate.begin(), "a second begin by the capturer is refused");
        assert!(gate.enter().capturing());
        let passed = Arc::new(AtomicBool::new(false));
        let other = {
            let (gate, passed) = (gate.clone(), passed.clone());
            std::thread::spawn(move || {
                assert!(!gate.end(), "only the capturer ends its capture");
                let op = gate.enter();
                assert!(!op.capturing());
                passed.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !passed.load(Ordering::SeqCst),
            "an operation passed during a capture"
        );
        assert!(gate.end());
        other.join().unwrap();
        assert!(passed.load(Ordering::SeqCst));
    }

    #[test]
    fn a_capture_waits_for_operations_in_flight() {
        let gate = Arc::new(CaptureGate::default());
        let op = gate.enter();
        let begun = Arc::new(AtomicBool::new(false));
        let capturer = {
            let (gate, begun) = (gate.clone(), begun.clone());
            std::thread::spawn(move || {
                assert!(gate.begin());
                begun.store(true, Ordering::SeqCst);
                assert!(gate.end());
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !begun.load(Ordering::SeqCst),
            "a capture began over an operation"
        );
        drop(op);
        capturer.join().unwrap();
        assert!(begun.load(Ordering::SeqCst));
    }
}
