//! Reverse-mode automatic differentiation on eager tensors, with PyTorch's semantics (the
//! autograd mechanics notes): leaves made with [`Tensor::requires_grad_`], a graph of
//! [`Node`]s recorded by every op on tensors that require grad, [`Tensor::backward`]
//! accumulating into the leaves' `.grad`, [`grad`] returning gradients without touching
//! them, [`no_grad`] as a scope guard, `retain_graph`, `detach`, `retain_grad`, hooks, and
//! version counters that catch a saved tensor modified in place.
//!
//! Each op's gradient is its row's derivative rule (`kiln_ir::ops::derivative`), applied to
//! tensors by an eager [`GradBuilder`], so eager autograd and the `grad` pass on graphs
//! compute the same formulas.
//!
//! | file | holds |
//! | --- | --- |
//! | `meta.rs` | what a tensor carries ([`Meta`]), the recorded [`Node`]s, recording |
//! | `engine.rs` | the backward pass: ordering, accumulation, hooks, errors |
//! | `inplace.rs` | in-place ops on tensors that require grad: recording, rebasing |
//! | `tensor_api.rs` | the `Tensor` methods (`requires_grad_`, `backward`, `grad`, ...) |

mod engine;
mod inplace;
mod meta;
mod tensor_api;

pub use engine::queue_callback;
pub(crate) use engine::FREED;
pub(crate) use inplace::run as record_inplace;
pub use meta::Node;
pub(crate) use meta::{attach, record, CompiledBackward, Edge, Meta, NodeKind};

use crate::error::Result;
use crate::Tensor;
use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True unless a [`no_grad`] guard is alive on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Turns gradient recording off on this thread until the guard drops (`torch.no_grad()`).
pub fn no_grad() -> NoGradGuard {
    let prev = GRAD_ENABLED.with(|g| g.replace(false));
    NoGradGuard { prev }
}

/// Restores gradient recording as it was when dropped.
pub struct NoGradGuard {
    prev: bool,
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev));
    }
}

/// The gradients of the sum of `outputs` (each scalar, or weighted by `grad_outputs`) with
/// respect to `inputs`, without touching any `.grad` (`torch.autograd.grad`): `None` for
/// an input the outputs do not depend on. The graph is freed unless `retain_graph`.
pub fn grad(
    outputs: &[Tensor],
    inputs: &[Tensor],
    grad_outputs: Option<&[Tensor]>,
    retain_graph: bool,
) -> Result<Vec<Option<Tensor>>> {
    engine::run(outputs, grad_outputs, retain_graph, Some(inputs))
}
