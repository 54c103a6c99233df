//! What a tensor that takes part in autograd carries, and the recorded graph.

use super::is_grad_enabled;
use crate::error::Result;
use crate::{Operand, Tensor};
use kiln_ir::ops::derivative::differentiable;
use kiln_ir::ops::Derivative;
use kiln_ir::{Op, Scalar};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A gradient hook: sees the gradient, may replace it.
pub(crate) type Hook = Box<dyn Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync>;

/// A hook run after a leaf's gradient is accumulated into its `.grad`: sees the new `.grad`.
pub(crate) type PostAccumulateHook = Box<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// What a tensor that requires grad (or did) carries; shared by its clones, as a Python
/// reference to a torch tensor is.
pub(crate) struct Meta {
    /// the flag `requires_grad_` sets (always true for a recorded result)
    pub(crate) requires_grad: AtomicBool,
    /// the node that made it and which of its outputs it is; `None` for a leaf (replaced
    /// when an in-place op rebases the tensor's history, so every clone sees the new node)
    pub(crate) grad_fn: Mutex<Option<(Arc<Node>, usize)>>,
    /// the accumulated gradient (leaves, and non-leaves that retain it)
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// a non-leaf that keeps its gradient (`retain_grad`)
    pub(crate) retains_grad: AtomicBool,
    /// hooks run on its gradient, in registration order
    pub(crate) hooks: Mutex<Vec<Hook>>,
    /// hooks run after its gradient is accumulated (leaves), in registration order
    pub(crate) post_accumulate_hooks: Mutex<Vec<PostAccumulateHook>>,
}

impl Meta {
    pub(crate) fn leaf(requires_grad: bool) -> Meta {
        Meta {
            requires_grad: AtomicBool::new(requires_grad),
            grad_fn: Mutex::new(None),
            grad: Mutex::new(None),
            retains_grad: AtomicBool::new(false),
            hooks: Mutex::new(Vec::new()),
            post_accumulate_hooks: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn requires_grad(&self) -> bool {
        self.requires_grad.load(Ordering::Relaxed)
    }

    /// The node that made the tensor, if any.
    pub(crate) fn grad_fn(&self) -> Option<Arc<Node>> {
        self.grad_fn.lock().as_ref().map(|(n, _)| n.clone())
    }

    /// The node that made the tensor and the tensor's output number on it.
    pub(crate) fn grad_fn_output(&self) -> Option<(Arc<Node>, usize)> {
        self.grad_fn.lock().clone()
    }
}

/// A tensor saved for backward: its data (detached) and its version when saved.
pub(crate) struct SavedTensor {
    pub(crate) data: Tensor,
    pub(crate) version: u64,
    /// the name of the node that made it when saved (for the version error), if any
    pub(crate) creator: Option<String>,
    /// the tensor's meta: the version error names its node at the time of the error (an
    /// in-place update makes a new one), as torch does
    pub(crate) owner: Weak<Meta>,
}

impl SavedTensor {
    /// The name of the node that made the saved tensor's current value.
    pub(crate) fn current_creator(&self) -> Option<String> {
        self.owner
            .upgrade()
            .and_then(|m| m.grad_fn())
            .map(|n| n.name.clone())
            .or_else(|| self.creator.clone())
    }
}

/// An operand as saved.
pub(crate) enum SavedArg {
    Tensor(SavedTensor),
    Scalar(Scalar),
}

/// What backward needs of an op: its operands and its result.
pub(crate) struct Saved {
    pub(crate) args: Vec<SavedArg>,
    pub(crate) out: SavedTensor,
}

/// Where an operand's gradient goes.
#[derive(Clone)]
pub(crate) enum Edge {
    /// accumulated into a leaf
    Leaf(Arc<Meta>),
    /// passed on to the node that made the operand, as its output number `.1`
    Node(Arc<Node>, usize),
}

/// The backward of a compiled function (its compiled backward graph and what its forward
/// saved): one node with an output per result of the compiled forward.
pub(crate) trait CompiledBackward: Send + Sync {
    /// The gradients of the node's operands (one per edge; `None`: no gradient) from the
    /// gradients of its outputs (`None`: zeros). `retain` keeps the saved tensors.
    fn backward(&self, grads: Vec<Option<Tensor>>, retain: bool) -> Result<Vec<Option<Tensor>>>;
    /// Drops the saved tensors (a backward without `retain_graph`).
    fn free(&self);
}

/// How a node computes its operands' gradients. (One-op nodes are the common case, one per
/// recorded op: they stay inline rather than boxed.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum NodeKind {
    /// one op, by its derivative rule
    Op {
        op: Op,
        /// the operands and result; `None` once freed by a backward without
        /// `retain_graph`
        saved: Mutex<Option<Saved>>,
    },
    /// a compiled function's backward graph
    Compiled(Box<dyn CompiledBackward>),
}

/// A recorded op (torch's `grad_fn`): how its result's gradient reaches its operands.
pub struct Node {
    pub(crate) kind: NodeKind,
    /// torch's name for it (`MulBackward`, `CompiledFunctionBackward`)
    pub(crate) name: String,
    /// per operand, where its gradient goes (`None`: it needs none)
    pub(crate) edges: Vec<Option<Edge>>,
    /// each result's meta, for its hooks and `retain_grad` (one per output)
    pub(crate) out_meta: Mutex<Vec<Weak<Meta>>>,
}

impl Node {
    /// The op of a one-op node.
    pub(crate) fn op(&self) -> Option<&Op> {
        match &self.kind {
            NodeKind::Op { op, .. } => Some(op),
            NodeKind::Compiled(_) => None,
        }
    }

    /// torch's name of the node (`MulBackward`, `LogSoftmaxBackward`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// `MulBackward` for `mul`, `LogSoftmaxBackward` for `log_softmax`.
pub(super) fn backward_name(op: &Op) -> String {
    let mut s = String::new();
    for part in op.name().split('_').filter(|p| !p.is_empty()) {
        let mut c = part.chars();
        if let Some(f) = c.next() {
            s.extend(f.to_uppercase());
            s.push_str(c.as_str());
        }
    }
    s + "Backward"
}

impl Tensor {
    /// Where this tensor's gradient goes, if it requires grad.
    pub(crate) fn edge(&self) -> Option<Edge> {
        let m = self.grad_meta.as_ref()?;
        match m.grad_fn_output() {
            Some((n, i)) => Some(Edge::Node(n, i)),
            None if m.requires_grad() => Some(Edge::Leaf(m.clone())),
            None => None,
        }
    }

    /// This tensor saved for backward.
    pub(crate) fn saved(&self) -> SavedTensor {
        SavedTensor {
            data: self.detach(),
            version: self.version(),
            creator: self
                .grad_meta
                .as_ref()
                .and_then(|m| m.grad_fn().map(|n| n.name.clone())),
            owner: self.grad_meta.as_ref().map_or(Weak::new(), Arc::downgrade),
        }
    }
}

/// `out`, the result of `op` on `args`, with a node recorded when grad mode is on, an
/// operand requires grad and the result is differentiable (floating, the op not declared
/// non-differentiable). An op without a rule yet is recorded too: backward through it is
/// the error.
pub(crate) fn record(op: &Op, args: &[Operand<'_>], out: Tensor) -> Tensor {
    if !is_grad_enabled()
        || !args
            .iter()
            .any(|a| matches!(a, Operand::Tensor(t) if t.requires_grad()))
        || matches!(op.info().derivative, Derivative::NonDifferentiable)
        || !differentiable(out.dtype())
    {
        return out;
    }
    let edges = args
        .iter()
        .map(|a| match a {
            Operand::Tensor(t) => t.edge(),
            Operand::Scalar(_) => None,
        })
        .collect();
    let saved_args = args
        .iter()
        .map(|a| match a {
            Operand::Tensor(t) => SavedArg::Tensor(t.saved()),
            Operand::Scalar(s) => SavedArg::Scalar(*s),
        })
        .collect();
    let name = backward_name(op);
    let mut saved_out = out.saved();
    saved_out.creator = Some(name.clone());
    let node = Arc::new(Node {
        kind: NodeKind::Op {
            op: op.clone(),
            saved: Mutex::new(Some(Saved {
                args: saved_args,
                out: saved_out,
            })),
        },
        name,
        edges,
        out_meta: Mutex::new(vec![Weak::new()]),
    });
    let out = attach(out, &node, 0);
    if let (NodeKind::Op { saved, .. }, Some(m)) = (&node.kind, &out.grad_meta) {
        if let Some(saved) = saved.lock().as_mut() {
            saved.out.owner = Arc::downgrade(m);
        }
    }
    out
}

/// `out` as output `index` of `node`: a fresh meta whose `grad_fn` is the node.
pub(crate) fn attach(out: Tensor, node: &Arc<Node>, index: usize) -> Tensor {
    let meta = Arc::new(Meta {
        requires_grad: AtomicBool::new(true),
        grad_fn: Mutex::new(Some((node.clone(), index))),
        grad: Mutex::new(None),
        retains_grad: AtomicBool::new(false),
        hooks: Mutex::new(Vec::new()),
        post_accumulate_hooks: Mutex::new(Vec::new()),
    });
    node.out_meta.lock()[index] = Arc::downgrade(&meta);
    Tensor {
        repr: out.repr,
        grad_meta: Some(meta),
    }
}
