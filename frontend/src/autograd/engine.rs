//! The backward pass: the nodes reachable from the outputs, each run once all its users
//! have sent it their gradients (Kahn's order over the recorded graph), its rule applied
//! to the saved operands with eager ops (grad mode off), gradients summed per operand and
//! accumulated into leaves (or returned, for [`super::grad`]).

use super::meta::{Edge, Meta, Node, NodeKind, SavedArg, SavedTensor};
use super::no_grad;
use crate::error::{Error, Result};
use crate::{Operand, Tensor};
use kiln_ir::ops::{gradients, GArg, GVal, GradBuilder, GradCall, GradError};
use kiln_ir::{Op, TensorType};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn err(reason: impl Into<String>) -> Error {
    Error::Autograd(reason.into())
}

pub(crate) const FREED: &str =
    "Trying to backward through the graph a second time (or directly access \
saved tensors after they have already been freed). Saved intermediate values of the graph are \
freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to \
backward through the graph a second time or if you need to access saved tensors after calling \
backward.";

/// Applies the ops a rule asks for to tensors. A saved tensor is checked against its
/// version when a rule first computes with it (reading only its type needs no check), so,
/// as in torch, updating in place a value no rule reads is no error.
struct EagerBuilder<'s> {
    vals: Vec<Tensor>,
    /// per value, the saved tensor it is (checked on use)
    saved: HashMap<usize, &'s SavedTensor>,
    failure: Option<Error>,
}

impl<'s> EagerBuilder<'s> {
    fn push(&mut self, t: Tensor) -> GVal {
        self.vals.push(t);
        GVal(self.vals.len() - 1)
    }

    fn push_saved(&mut self, s: &'s SavedTensor) -> GVal {
        let v = self.push(s.data.clone());
        self.saved.insert(v.0, s);
        v
    }
}

impl GradBuilder for EagerBuilder<'_> {
    fn apply(&mut self, op: Op, args: &[GArg]) -> std::result::Result<GVal, GradError> {
        for a in args {
            if let GArg::Val(v) = a {
                if let Some(s) = self.saved.remove(&v.0) {
                    if let Err(e) = check_version(s) {
                        let reason = e.to_string();
                        self.failure = Some(e);
                        return Err(GradError::Build {
                            op: op.name().to_string(),
                            reason,
                        });
                    }
                }
            }
        }
        let operands: Vec<Operand<'_>> = args
            .iter()
            .map(|a| match *a {
                GArg::Val(v) => Operand::Tensor(&self.vals[v.0]),
                GArg::Scalar(s) => Operand::Scalar(s),
            })
            .collect();
        match Tensor::apply_eager(&op, &operands) {
            Ok(t) => Ok(self.push(t)),
            Err(e) => {
                let reason = e.to_string();
                self.failure = Some(e);
                Err(GradError::Build {
                    op: op.name().to_string(),
                    reason,
                })
            }
        }
    }

    fn ty(&self, v: GVal) -> TensorType {
        self.vals[v.0].tensor_type()
    }
}

/// The version error of a saved tensor modified in place, in PyTorch's words.
fn check_version(s: &SavedTensor) -> Result<()> {
    let now = s.data.version();
    if now == s.version {
        return Ok(());
    }
    let what = match s.current_creator() {
        Some(n) => format!(", which is output 0 of {n},"),
        None => String::new(),
    };
    Err(err(format!(
        "one of the variables needed for gradient computation has been modified by an \
         inplace operation: [{} {:?}]{what} is at version {now}; expected version {} instead",
        s.data.dtype(),
        s.data.shape(),
        s.version
    )))
}

/// `a + b` (a gradient sum), with recording off.
fn sum(a: Option<Tensor>, b: Tensor) -> Result<Tensor> {
    match a {
        Some(a) => Tensor::apply_eager(
            &Op::Binary(kiln_ir::BinaryOp::Add),
            &[Operand::Tensor(&a), Operand::Tensor(&b)],
        ),
        None => Ok(b),
    }
}

/// Runs `meta`'s hooks on `g` (each may replace it).
fn run_hooks(meta: &Meta, mut g: Tensor) -> Result<Tensor> {
    for h in meta.hooks.lock().iter() {
        if let Some(r) = h(&g)? {
            g = r;
        }
    }
    Ok(g)
}

/// A leaf's complete gradient of this pass: its hooks, then accumulation into `.grad` and
/// the post-accumulate hooks (or capture, for `grad`).
fn finish_leaf(
    m: &Arc<Meta>,
    g: Tensor,
    wanted: &HashMap<(usize, usize), usize>,
    captured: &mut [Option<Tensor>],
    capturing: bool,
) -> Result<()> {
    let k = Arc::as_ptr(m) as usize;
    let g = run_hooks(m, g)?;
    if capturing {
        if let Some(&i) = wanted.get(&(k, 0)) {
            captured[i] = Some(sum(captured[i].take(), g)?);
        }
        return Ok(());
    }
    let acc = {
        let mut slot = m.grad.lock();
        let acc = sum(slot.take(), g)?;
        *slot = Some(acc.clone());
        acc
    };
    for h in m.post_accumulate_hooks.lock().iter() {
        h(&acc)?;
    }
    Ok(())
}

/// Adds a contribution to a leaf's gradient of this pass (its hooks run once, on the sum).
fn add_leaf(acc: &mut Vec<(Arc<Meta>, Tensor)>, m: &Arc<Meta>, g: Tensor) -> Result<()> {
    match acc.iter_mut().find(|(x, _)| Arc::ptr_eq(x, m)) {
        Some((_, prev)) => *prev = sum(Some(prev.clone()), g)?,
        None => acc.push((m.clone(), g)),
    }
    Ok(())
}

/// Identity of an edge's target, for `grad`'s inputs.
fn key(e: &Edge) -> (usize, usize) {
    match e {
        Edge::Leaf(m) => (Arc::as_ptr(m) as usize, 0),
        Edge::Node(n, i) => (Arc::as_ptr(n) as usize, *i),
    }
}

/// Adds `g` to output `index` of the gradients gathered for `node`.
fn add_node_grad(
    grads: &mut HashMap<usize, Vec<Option<Tensor>>>,
    node: &Node,
    index: usize,
    g: Tensor,
) -> Result<()> {
    let slots = grads
        .entry(node as *const Node as usize)
        .or_insert_with(|| vec![None; node.out_meta.lock().len()]);
    slots[index] = Some(sum(slots[index].take(), g)?);
    Ok(())
}

/// The gradients of a one-op node's operands, by its rule.
fn op_gradients(
    n: &Node,
    op: &Op,
    saved: &parking_lot::Mutex<Option<super::meta::Saved>>,
    g: Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let saved = saved.lock();
    let saved = saved.as_ref().ok_or_else(|| err(FREED))?;
    let mut b = EagerBuilder {
        vals: Vec::new(),
        saved: HashMap::new(),
        failure: None,
    };
    let mut args = Vec::new();
    for a in &saved.args {
        args.push(match a {
            SavedArg::Tensor(s) => GArg::Val(b.push_saved(s)),
            SavedArg::Scalar(s) => GArg::Scalar(*s),
        });
    }
    let out = b.push_saved(&saved.out);
    let gv = b.push(g);
    let call = GradCall {
        op,
        args: &args,
        out,
        grad: gv,
    };
    let gs = gradients(&mut b, &call).map_err(|e| match b.failure.take() {
        Some(f) => f,
        None => err(format!("{}: {e}", n.name)),
    })?;
    Ok(gs
        .into_iter()
        .map(|g| g.map(|v| b.vals[v.0].clone()))
        .collect())
}

/// Backward from `outputs` (seeded with `grad_outputs`, or ones for one-element outputs).
/// With `inputs`, returns their gradients and touches no `.grad`; without, accumulates
/// into the leaves and returns nothing.
pub(super) fn run(
    outputs: &[Tensor],
    grad_outputs: Option<&[Tensor]>,
    retain_graph: bool,
    inputs: Option<&[Tensor]>,
) -> Result<Vec<Option<Tensor>>> {
    let outer = CALLBACKS.with(|c| c.borrow_mut().replace(Vec::new()));
    let result = run_pass(outputs, grad_outputs, retain_graph, inputs);
    let queued = CALLBACKS.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    let result = result?;
    for f in queued.unwrap_or_default() {
        f()?;
    }
    Ok(result)
}

/// A function queued by [`queue_callback`].
type Callback = Box<dyn FnOnce() -> Result<()>>;

thread_local! {
    /// the callbacks queued during the backward pass running on this thread, if any
    static CALLBACKS: std::cell::RefCell<Option<Vec<Callback>>> =
        const { std::cell::RefCell::new(None) };
}

/// Queues `f` to run once the backward pass running on this thread has finished (after
/// every gradient is accumulated), in queueing order; an error it returns is the
/// backward's error. PyTorch's `Variable._execution_engine.queue_callback`: DDP waits for
/// its last all-reduces this way. Outside a backward pass it is an error.
pub fn queue_callback(f: impl FnOnce() -> Result<()> + 'static) -> Result<()> {
    CALLBACKS.with(|c| match c.borrow_mut().as_mut() {
        Some(q) => {
            q.push(Box::new(f));
            Ok(())
        }
        None => Err(err(
            "queue_callback: no backward pass is running on this thread",
        )),
    })
}

/// One backward pass (see [`run`]).
fn run_pass(
    outputs: &[Tensor],
    grad_outputs: Option<&[Tensor]>,
    retain_graph: bool,
    inputs: Option<&[Tensor]>,
) -> Result<Vec<Option<Tensor>>> {
    let _off = no_grad();
    // the inputs `grad` returns gradients for, by edge identity
    let mut wanted: HashMap<(usize, usize), usize> = HashMap::new();
    if let Some(ins) = inputs {
        for (i, t) in ins.iter().enumerate() {
            let e = t.edge().ok_or_else(|| {
                err(format!(
                    "One of the differentiated Tensors (input {i}) does not require grad"
                ))
            })?;
            wanted.insert(key(&e), i);
        }
    }
    let mut captured: Vec<Option<Tensor>> = vec![None; inputs.map_or(0, |i| i.len())];
    // seeds
    let mut grads: HashMap<usize, Vec<Option<Tensor>>> = HashMap::new();
    let mut roots: Vec<Arc<Node>> = Vec::new();
    let mut leaf_grads: Vec<(Arc<Meta>, Tensor)> = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        let edge = out.edge().ok_or_else(|| {
            err(format!(
                "element {i} of tensors does not require grad and does not have a grad_fn"
            ))
        })?;
        let seed = match grad_outputs.and_then(|g| g.get(i)) {
            Some(g) => {
                if g.shape() != out.shape() {
                    return Err(err(format!(
                        "Mismatch in shape: grad_output[{i}] has a shape of {:?} and output[{i}] \
                         has a shape of {:?}.",
                        g.shape(),
                        out.shape()
                    )));
                }
                g.detach()
            }
            None if out.numel() == 1 => Tensor::ones(out.shape(), out.dtype())?,
            None => {
                return Err(err(
                    "grad can be implicitly created only for scalar outputs",
                ))
            }
        };
        match edge {
            Edge::Node(n, i) => {
                add_node_grad(&mut grads, &n, i, seed)?;
                roots.push(n);
            }
            Edge::Leaf(m) => add_leaf(&mut leaf_grads, &m, seed)?,
        }
    }
    // the nodes reachable from the roots, and how many users each has among them
    let mut deps: HashMap<usize, usize> = HashMap::new();
    // per leaf, how many edges of those nodes still have to deliver its gradient: at 0
    // its gradient is complete and is accumulated at once (DDP starts a bucket's
    // all-reduce from the post-accumulate hooks while the rest of the backward runs)
    let mut leaf_deps: HashMap<usize, usize> = HashMap::new();
    let mut nodes: HashMap<usize, Arc<Node>> = HashMap::new();
    let mut stack: Vec<Arc<Node>> = roots.clone();
    while let Some(n) = stack.pop() {
        let k = Arc::as_ptr(&n) as usize;
        if nodes.insert(k, n.clone()).is_some() {
            continue;
        }
        for e in n.edges.iter().flatten() {
            match e {
                Edge::Node(m, _) => {
                    *deps.entry(Arc::as_ptr(m) as usize).or_insert(0) += 1;
                    stack.push(m.clone());
                }
                Edge::Leaf(m) => *leaf_deps.entry(Arc::as_ptr(m) as usize).or_insert(0) += 1,
            }
        }
    }
    let mut ready: Vec<Arc<Node>> = Vec::new();
    for r in roots {
        let k = Arc::as_ptr(&r) as usize;
        if deps.get(&k).copied().unwrap_or(0) == 0 && !ready.iter().any(|n| Arc::ptr_eq(n, &r)) {
            ready.push(r);
        }
    }
    let mut processed: Vec<Arc<Node>> = Vec::new();
    while let Some(n) = ready.pop() {
        let k = Arc::as_ptr(&n) as usize;
        let Some(mut slots) = grads.remove(&k) else {
            continue;
        };
        // each result's hooks, retain_grad, and `grad` of a non-leaf input
        let metas: Vec<_> = n.out_meta.lock().iter().map(|m| m.upgrade()).collect();
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(g) = slot.take() else {
                continue;
            };
            let mut g = g;
            if let Some(Some(meta)) = metas.get(i) {
                g = run_hooks(meta, g)?;
                if meta.retains_grad.load(Ordering::Relaxed) && inputs.is_none() {
                    let mut slot = meta.grad.lock();
                    *slot = Some(sum(slot.take(), g.clone())?);
                }
            }
            if let Some(&w) = wanted.get(&(k, i)) {
                captured[w] = Some(sum(captured[w].take(), g.clone())?);
            }
            *slot = Some(g);
        }
        let operand_grads = match &n.kind {
            NodeKind::Op { op, saved } => match slots.into_iter().next().flatten() {
                Some(g) => op_gradients(&n, op, saved, g)?,
                None => continue,
            },
            NodeKind::Compiled(c) => c.backward(slots, retain_graph)?,
        };
        for (edge, gi) in n.edges.iter().zip(operand_grads) {
            let (Some(edge), Some(gi)) = (edge, gi) else {
                continue;
            };
            match edge {
                Edge::Leaf(m) => {
                    add_leaf(&mut leaf_grads, m, gi)?;
                    let d = leaf_deps
                        .get_mut(&(Arc::as_ptr(m) as usize))
                        .expect("a discovered leaf edge");
                    *d -= 1;
                    if *d == 0 {
                        let i = leaf_grads
                            .iter()
                            .position(|(x, _)| Arc::ptr_eq(x, m))
                            .expect("a leaf gradient just added");
                        let (m, g) = leaf_grads.swap_remove(i);
                        finish_leaf(&m, g, &wanted, &mut captured, inputs.is_some())?;
                    }
                }
                Edge::Node(m, i) => {
                    let mk = Arc::as_ptr(m) as usize;
                    add_node_grad(&mut grads, m, *i, gi)?;
                    let d = deps.get_mut(&mk).expect("a discovered node");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(m.clone());
                    }
                }
            }
        }
        processed.push(n);
    }
    // the leaves not finished above (seeded directly, or behind a node that got no
    // gradient)
    for (m, g) in leaf_grads {
        finish_leaf(&m, g, &wanted, &mut captured, inputs.is_some())?;
    }
    if !retain_graph {
        for n in processed {
            match &n.kind {
                NodeKind::Op { saved, .. } => *saved.lock() = None,
                NodeKind::Compiled(c) => c.free(),
            }
        }
    }
    Ok(captured)
}
