//! The autograd methods of [`Tensor`].

use super::meta::{Hook, Meta};
use crate::error::{Error, Result};
use crate::Tensor;
use kiln_ir::ops::derivative::differentiable;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// PyTorch's message for a refused call, after the call's name.
fn err(op: &'static str, reason: &str) -> Error {
    Error::Autograd(reason.to_string()).within(op)
}

impl Tensor {
    /// True when gradients flow to this tensor: a leaf marked with
    /// [`Tensor::requires_grad_`], or the result of an op on such tensors (recorded while
    /// grad mode is on).
    pub fn requires_grad(&self) -> bool {
        self.grad_meta.as_ref().is_some_and(|m| m.requires_grad())
    }

    /// Marks a leaf as requiring grad (or not) and returns it (`torch.Tensor.requires_grad_`).
    /// Clones made afterwards share the flag and the gradient. Only floating leaves can
    /// require grad; a non-leaf's flag cannot be turned off (use [`Tensor::detach`]).
    pub fn requires_grad_(mut self, requires_grad: bool) -> Result<Tensor> {
        if self.is_traced() {
            return Err(err(
                "requires_grad_",
                "not supported inside a compiled function (mark the parameters before \
                 compiling)",
            ));
        }
        match &self.grad_meta {
            Some(m) if m.grad_fn().is_some() => {
                if requires_grad {
                    return Ok(self);
                }
                return Err(err(
                    "requires_grad_",
                    "you can only change requires_grad flags of leaf variables. If you want to \
                     use a computed variable in a subgraph that doesn't require differentiation \
                     use var_no_grad = var.detach().",
                ));
            }
            _ => {}
        }
        if requires_grad && !differentiable(self.dtype()) {
            return Err(err(
                "requires_grad_",
                "only Tensors of floating point dtype can require gradients",
            ));
        }
        match &self.grad_meta {
            Some(m) => m.requires_grad.store(requires_grad, Ordering::Relaxed),
            None => self.grad_meta = Some(Arc::new(Meta::leaf(requires_grad))),
        }
        Ok(self)
    }

    /// True for a tensor no recorded op made (every tensor that does not require grad,
    /// and the ones marked with [`Tensor::requires_grad_`]).
    pub fn is_leaf(&self) -> bool {
        self.grad_meta
            .as_ref()
            .is_none_or(|m| m.grad_fn().is_none())
    }

    /// The accumulated gradient: `None` until a backward reaches this tensor (a leaf, or a
    /// non-leaf that called [`Tensor::retain_grad`]), and after [`Tensor::zero_grad`].
    /// Inside a compiled function, a gradient read is an input the compiled graph fetches
    /// from this tensor on every call.
    pub fn grad(&self) -> Option<Tensor> {
        let meta = self.grad_meta.as_ref()?;
        if let Some(t) = crate::compile::lazy::current() {
            // a failure to lift it leaves the value to the ops that use it, which report it
            let _ = t.note_grad(self, false);
        }
        meta.grad.lock().clone()
    }

    /// Replaces the accumulated gradient (DDP writes the averaged gradient back this way);
    /// nothing for a tensor outside autograd.
    pub(crate) fn set_grad(&self, g: Option<Tensor>) {
        if let Some(m) = &self.grad_meta {
            *m.grad.lock() = g;
        }
    }

    /// Clears the gradient to `None` (what `optimizer.zero_grad()` does by default).
    pub fn zero_grad(&self) {
        if let Some(m) = &self.grad_meta {
            if let Some(t) = crate::compile::lazy::current() {
                let _ = t.note_grad(self, true);
            }
            *m.grad.lock() = None;
        }
    }

    /// The same data, cut from the graph: no gradient flows through the result, which
    /// does not require grad (it shares storage and the version counter).
    ///
    /// Inside a compiled function it is a value no traced `backward()` differentiates.
    #[track_caller]
    pub fn detach(&self) -> Tensor {
        if let (Some(t), crate::tensor::Repr::Lazy(_)) =
            (crate::compile::lazy::current(), &self.repr)
        {
            if let Ok(d) = t.detach(self) {
                return d;
            }
        }
        Tensor {
            repr: self.repr.clone(),
            grad_meta: None,
        }
    }

    /// torch's name of the node that made this tensor (`MulBackward`), `None` for a leaf.
    pub fn grad_fn_name(&self) -> Option<String> {
        let m = self.grad_meta.as_ref()?;
        m.grad_fn().map(|n| n.name().to_string())
    }

    /// Backward from this one-element tensor: accumulates d(self)/d(leaf) into every leaf
    /// that requires grad and frees the graph (`tensor.backward()`).
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// Backward with a given gradient of `self` (of its shape; `None`: ones, for a
    /// one-element tensor), keeping the graph for another backward when `retain_graph`.
    ///
    /// Inside a compiled function the backward is traced into the same graph (the whole
    /// training step compiles to one graph; `retain_graph` is then moot: nothing is freed).
    #[track_caller]
    pub fn backward_with(&self, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        if let Some(t) = crate::compile::lazy::current() {
            return t.backward(self, gradient, std::panic::Location::caller());
        }
        let g = gradient.map(std::slice::from_ref);
        super::engine::run(std::slice::from_ref(self), g, retain_graph, None)
            .map(|_| ())
            .map_err(|e| e.within("backward"))
    }

    /// Keeps this non-leaf's gradient in `.grad` during backward (a leaf always does).
    pub fn retain_grad(&self) -> Result<()> {
        match &self.grad_meta {
            Some(m) if m.requires_grad() => {
                m.retains_grad.store(true, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(err(
                "retain_grad",
                "can't retain_grad on Tensor that has requires_grad=False",
            )),
        }
    }

    /// Registers `hook`, run on this tensor's gradient each backward before it is used or
    /// accumulated; returning `Some(g)` replaces the gradient.
    pub fn register_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync + 'static,
    ) -> Result<()> {
        match &self.grad_meta {
            Some(m) if m.requires_grad() => {
                let h: Hook = Box::new(hook);
                m.hooks.lock().push(h);
                Ok(())
            }
            _ => Err(err(
                "register_hook",
                "cannot register a hook on a tensor that doesn't require gradient",
            )),
        }
    }

    /// Registers `hook`, run each backward right after this leaf's gradient of the pass is
    /// complete and accumulated into `.grad`, with the new `.grad`
    /// (`register_post_accumulate_grad_hook`; torch passes the tensor, whose `.grad` this
    /// is). A leaf's gradient is accumulated as soon as every node that contributes to it
    /// has run, so the hook may fire while the rest of the backward is still running.
    /// Not run by [`crate::autograd::grad`], which accumulates nothing.
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<()> + Send + Sync + 'static,
    ) -> Result<()> {
        match &self.grad_meta {
            Some(m) if m.requires_grad() && m.grad_fn().is_none() => {
                m.post_accumulate_hooks.lock().push(Box::new(hook));
                Ok(())
            }
            _ => Err(err(
                "register_post_accumulate_grad_hook",
                "post accumulate grad hooks cannot be registered on non-leaf tensors or \
                 tensors that do not require grad",
            )),
        }
    }
}
