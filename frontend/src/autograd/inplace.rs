//! In-place ops under autograd, as torch does them: an in-place op on a tensor that requires
//! grad (or with a source that does) rebases the destination's history. The op runs on the
//! data, and a node for it (`AddBackward`, `MulBackward`, ...) becomes the tensor's
//! `grad_fn`, with an edge to the node that made the old value and one to the source; every
//! clone of the tensor sees the new node. The rule is the in-place family's (functional:
//! gradients of the old value and of the source), applied to the old value saved before the
//! update when the rule needs it (`mul_`), else to a zero-size stand-in of its type.
//!
//! As in torch: a leaf that requires grad cannot be updated in place (the error is
//! PyTorch's); saved tensors of earlier nodes that the update changes are caught by their
//! version counters at backward. Not supported yet (an error, never a wrong gradient): a
//! destination that is a view of another tensor's data (torch rebases the base through
//! `CopySlices`), and a destination that took no part in autograd receiving a source that
//! requires grad (its handle cannot start carrying a history through `&self`).

use super::meta::{backward_name, Meta, Node, NodeKind, Saved, SavedArg};
use crate::error::{Error, Result};
use crate::{Operand, Tensor};
use kiln_ir::{InplaceOp, Op, OpKind};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

fn err(reason: impl Into<String>) -> Error {
    Error::Autograd(reason.into())
}

/// Runs `update` (the in-place op `op` of `dst` by `arg` on the data) and records it for
/// autograd when grad mode is on and `dst` or `arg` requires grad.
pub(crate) fn run(
    op: InplaceOp,
    dst: &Tensor,
    arg: Operand<'_>,
    update: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let arg_requires = matches!(arg, Operand::Tensor(t) if t.requires_grad());
    if !super::is_grad_enabled() || !(dst.requires_grad() || arg_requires) {
        return update();
    }
    if dst.requires_grad() && dst.is_leaf() {
        return Err(err(
            "a leaf Variable that requires grad is being used in an in-place operation.",
        ));
    }
    let Some(meta) = dst.grad_meta.clone() else {
        return Err(err(format!(
            "{}: an in-place op whose destination does not take part in autograd and whose \
             source requires grad is not supported yet (use the out-of-place op)",
            op.name()
        )));
    };
    let old = meta.grad_fn();
    if let Some(n) = &old {
        if n.op().is_some_and(|o| o.kind() == OpKind::View) {
            return Err(err(format!(
                "{}: an in-place op on a view ({}) of a tensor that requires grad is not \
                 supported yet (use the out-of-place op, or update the base)",
                op.name(),
                n.name()
            )));
        }
    }
    // what the rule reads of the old value: the value itself for mul_, else only its type
    let _off = super::no_grad();
    let old_value = if op == InplaceOp::Mul {
        let copy = Tensor::zeros(dst.shape(), dst.dtype())?;
        copy.copy_(dst)?;
        copy
    } else {
        Tensor::zeros(&[], dst.dtype())?
            .expand(&dst.shape().iter().map(|&d| d as i64).collect::<Vec<_>>())?
    };
    let edges = vec![
        meta.grad_fn_output()
            .map(|(n, i)| super::meta::Edge::Node(n, i)),
        match arg {
            Operand::Tensor(t) => t.edge(),
            Operand::Scalar(_) => None,
        },
    ];
    let saved_arg = match arg {
        Operand::Tensor(t) => SavedArg::Tensor(t.saved()),
        Operand::Scalar(s) => SavedArg::Scalar(s),
    };
    update()?;
    let the_op = Op::Inplace(op);
    let name = backward_name(&the_op);
    let mut saved_out = dst.saved();
    saved_out.creator = Some(name.clone());
    saved_out.owner = Arc::downgrade(&meta);
    let node = Arc::new(Node {
        kind: NodeKind::Op {
            op: the_op,
            saved: Mutex::new(Some(Saved {
                args: vec![SavedArg::Tensor(old_value.saved()), saved_arg],
                out: saved_out,
            })),
        },
        name,
        edges,
        out_meta: Mutex::new(vec![Arc::downgrade(&meta)]),
    });
    rebase(&meta, meta.grad_fn_output(), node);
    Ok(())
}

/// Makes `node` the tensor's `grad_fn`; the old node no longer speaks for the tensor (its
/// hooks and `retain_grad` follow the tensor to the new node).
fn rebase(meta: &Arc<Meta>, old: Option<(Arc<Node>, usize)>, node: Arc<Node>) {
    if let Some((n, i)) = old {
        n.out_meta.lock()[i] = Weak::new();
    }
    meta.requires_grad.store(true, Ordering::Relaxed);
    *meta.grad_fn.lock() = Some((node, 0));
}
