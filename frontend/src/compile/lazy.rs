//! Lazy (traced) tensor values and the thread's current tracer.
//!
//! While a compiled function is being traced, the thread has a current [`Tracer`]: every
//! op dispatched on the thread records a node into its graph and returns a tensor holding a
//! [`LazyValue`]. A lazy value gets its data when the graph that computes it runs (at a
//! graph break, or when the function returns).

use super::tracer::Tracer;
use crate::error::{Error, Result};
use crate::Tensor;
use kiln_ir::{DType, NodeId, Op};
use kiln_runtime::CpuTensor;
use std::cell::RefCell;
use std::panic::Location;
use std::sync::{Arc, OnceLock, Weak};

/// A value of a traced graph: its type is known at once, its data once the graph has run.
pub(crate) struct LazyValue {
    /// the trace that records it
    pub(crate) tracer: Weak<Tracer>,
    /// the segment (graph between two breaks) it belongs to
    pub(crate) segment: u32,
    /// its node in that segment's graph
    pub(crate) node: NodeId,
    /// element type
    pub(crate) dtype: DType,
    /// sizes
    pub(crate) shape: Vec<usize>,
    /// row-major strides of `shape`
    pub(crate) strides: Vec<isize>,
    /// the data, once computed
    pub(crate) value: OnceLock<CpuTensor>,
    /// for a view op, the op and its operand: the data is regenerated from the operand's
    /// data, so that views share storage with their base as in eager mode
    pub(crate) view_of: Option<(Op, Tensor)>,
}

impl LazyValue {
    /// The data, or an error when the graph computing it never ran (the tensor escaped
    /// the traced function before a break or the return).
    pub(crate) fn value(&self) -> Result<&CpuTensor> {
        self.value.get().ok_or_else(|| Error::Compile {
            function: self
                .tracer
                .upgrade()
                .map(|t| t.name().to_string())
                .unwrap_or_else(|| "?".into()),
            reason: format!(
                "a traced tensor f32{:?} escaped its traced function before its graph ran \
                 (return it from the function instead of storing it elsewhere)",
                self.shape
            ),
        })
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Tracer>>> = const { RefCell::new(None) };
}

/// The tracer recording ops on this thread, if any.
pub(crate) fn current() -> Option<Arc<Tracer>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// True while this thread is tracing.
pub(crate) fn is_tracing() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Makes `tracer` the thread's tracer until the guard drops (restoring the previous one).
pub(crate) fn enter(tracer: Arc<Tracer>) -> TraceGuard {
    let prev = CURRENT.with(|c| c.borrow_mut().replace(tracer));
    TraceGuard { prev }
}

/// Restores the previous tracer on drop.
pub(crate) struct TraceGuard {
    prev: Option<Arc<Tracer>>,
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// Called before values are read on behalf of `op`: inside a trace, this is a graph break.
pub(crate) fn before_read(op: &'static str, loc: &'static Location<'static>) -> Result<()> {
    match current() {
        Some(t) => t.graph_break(op, loc),
        None => Ok(()),
    }
}

/// Runs `f` with no tracer on this thread (what it makes is real data, not graph values):
/// how optimisers create their state inside a compiled step, so that the state outlives
/// the trace as tensors the compiled graph reads and updates in place.
pub(crate) fn untraced<R>(f: impl FnOnce() -> R) -> R {
    let prev = CURRENT.with(|c| c.borrow_mut().take());
    let _restore = TraceGuard { prev };
    f()
}
