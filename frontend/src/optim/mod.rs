//! Optimisers with PyTorch's update rules and order: [`Sgd`] (momentum, dampening,
//! nesterov, weight decay) and [`AdamW`] (betas, eps, decoupled weight decay, bias
//! correction, amsgrad). Each holds its parameters (leaf tensors that require grad; clones
//! share storage with the model's, so updates in place are seen there), updates them in
//! place under `no_grad` in `step`, skips those whose `.grad` is `None`, and exposes its
//! state as named tensors (`state.<i>.<buffer>`) to save and restore. With `.fused(true)`
//! a step is one pass over each parameter's elements, all parameters in one parallel loop
//! (torch's `fused=True`, `fused.rs`).

mod adamw;
mod fused;
mod sgd;

pub use adamw::{AdamW, AdamWOptions};
pub use sgd::{Sgd, SgdOptions};

use crate::error::{Error, Result};
use crate::Tensor;

/// What every optimiser does.
pub trait Optimizer {
    /// One update of every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;
    /// Sets every parameter's gradient to `None` (torch's default `set_to_none=True`).
    fn zero_grad(&self);
    /// The state as named tensors (`state.<param index>.<buffer>`), for saving.
    fn state(&self) -> Vec<(String, Tensor)>;
    /// Restores a state [`Optimizer::state`] returned (an error names a missing or
    /// mismatched entry).
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()>;
}

/// Checks the learning rate (finite, not negative: torch's "Invalid learning rate") and
/// that there are parameters, each a leaf that requires grad.
fn check_params(which: &str, params: &[Tensor], lr: f64) -> Result<()> {
    if !(lr >= 0.0 && lr.is_finite()) {
        return Err(Error::Autograd(format!(
            "{which}: invalid learning rate: {lr}"
        )));
    }
    if params.is_empty() {
        return Err(Error::Autograd(format!(
            "{which}: optimizer got an empty parameter list"
        )));
    }
    for (i, p) in params.iter().enumerate() {
        if !p.requires_grad() || !p.is_leaf() {
            return Err(Error::Autograd(format!(
                "{which}: parameter {i} must be a leaf tensor that requires grad"
            )));
        }
    }
    Ok(())
}

/// The tensor named `name` in `state`, of `like`'s shape.
fn find(state: &[(String, Tensor)], name: &str, like: &Tensor) -> Result<Option<Tensor>> {
    match state.iter().find(|(n, _)| n == name) {
        None => Ok(None),
        Some((_, t)) if t.shape() == like.shape() => Ok(Some(t.detach())),
        Some((_, t)) => Err(Error::Autograd(format!(
            "optimizer state {name}: shape {:?}, the parameter's is {:?}",
            t.shape(),
            like.shape()
        ))),
    }
}

/// Inside a trace: guards the compiled graph on the hyperparameters `now` read from `cell`
/// (constants of the graph), so that a change recompiles instead of reusing the graph.
fn guard_hyperparameters<H>(
    which: &'static str,
    cell: &std::sync::Arc<parking_lot::Mutex<H>>,
    now: &H,
) where
    H: Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static,
{
    let Some(tracer) = crate::compile::lazy::current() else {
        return;
    };
    let (cell, traced) = (cell.clone(), now.clone());
    tracer.guard_value(std::sync::Arc::new(move || {
        let now = cell.lock();
        (*now != traced).then(|| {
            format!(
                "{which} hyperparameters changed: traced with {traced:?}, now {:?}",
                *now
            )
        })
    }));
}
