//! Side effects inside a trace, made functional so that a training step traces to one graph:
//! in-place updates (`add_`, `mul_`, `copy_`, `fill_`) become out-of-place nodes whose
//! results are written back into the same storage once the graph has run (the version
//! counter bumped, as the eager update would); `backward()` appends the backward of the
//! traced nodes to the graph (the op table's derivative rules, as eager autograd runs them)
//! and sets each leaf's `.grad` to a value of the graph; a leaf's `.grad` read in the trace
//! is an input fetched from the leaf on every call, never a stale tensor.
//!
//! What cannot be made functional stays a graph break, as before: an update of a view, or
//! of a tensor some other live view aliases.

use super::lazy::LazyValue;
use super::tracer::{graph_error, loc_string, TraceState, TracedEffects, Tracer};
use crate::error::{Error, Result};
use crate::tensor::Repr;
use crate::{Operand, Tensor};
use kiln_ir::{infer, Arg, ArgType, BinaryOp, InplaceOp, NodeId, Op, Scalar, Shape};
use kiln_runtime::{execute_inplace, CpuTensor, EagerArg};
use std::collections::HashMap;
use std::panic::Location;
use std::sync::{Arc, OnceLock};

impl TracedEffects {
    /// The node holding `v`'s current value (its own, unless updated in place).
    pub(super) fn current_node(&self, v: &Arc<LazyValue>) -> NodeId {
        *self
            .redirect
            .get(&(Arc::as_ptr(v) as usize))
            .unwrap_or(&v.node)
    }

    /// Forgets what belongs to the segment that just ran.
    pub(super) fn end_segment(&mut self) {
        self.redirect.clear();
        self.writes.clear();
        self.grad_slots.clear();
        self.stop.clear();
    }
}

/// Writes a graph's new value of an updated tensor into its storage (bumping its version).
pub(super) fn write_back(dst: &CpuTensor, value: &CpuTensor) -> Result<()> {
    execute_inplace(InplaceOp::Copy, dst, EagerArg::Tensor(value))?;
    Ok(())
}

/// What a whole-function graph leaves to do after it runs, and what its inputs depend on
/// beyond the tensors themselves (see [`Tracer::whole_effects`]).
#[derive(Clone, Default)]
pub(crate) struct WholeEffects {
    /// how many of the graph's outputs are the function's
    pub(crate) user_outputs: usize,
    /// (graph input, graph output): the output is the input's new value, written back
    pub(crate) writes: Vec<(usize, usize)>,
    /// each leaf's `.grad` after the call: a graph output, or `None`
    pub(crate) set_grads: Vec<(Tensor, Option<usize>)>,
    /// (parameter index, leaf): the parameter is the leaf's `.grad`, fetched on every call
    pub(crate) grad_slots: Vec<(usize, Tensor)>,
    /// leaves whose `.grad` must be `None` when the graph is reused (the trace saw none and
    /// accumulated nothing into it)
    pub(crate) grad_absent: Vec<Tensor>,
    /// the function called `backward()`: its outputs carry no autograd history
    pub(crate) backward: bool,
    /// guards on values the trace baked into the graph (optimiser hyperparameters)
    pub(crate) value_guards: Vec<super::ValueGuard>,
    /// checks of arguments' values run before the graph on every call: (argument, check)
    pub(crate) arg_checks: Vec<(usize, super::ValueCheck)>,
    /// an output depends on a tensor that requires grad through ops recorded with grad
    /// mode on (so the outputs need autograd history)
    pub(crate) outputs_need_grad: bool,
}

/// Identity of a leaf: its autograd metadata (shared by its clones).
fn same_leaf(a: &Tensor, b: &Tensor) -> bool {
    match (&a.grad_meta, &b.grad_meta) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

/// The storage identity of a tensor with data (real, or a value of an earlier graph).
fn storage_of(t: &Tensor) -> Option<usize> {
    match &t.repr {
        Repr::Real(r) => Some(Arc::as_ptr(r.storage()) as usize),
        Repr::Lazy(v) => v.value.get().map(|r| Arc::as_ptr(r.storage()) as usize),
        Repr::Cuda(_) => None,
    }
}

impl Tracer {
    /// The tensor standing behind graph input `i` of the current segment: for an argument
    /// of the first segment, the caller's tensor (with its autograd state).
    fn source_of<'a>(&'a self, st: &'a TraceState, i: usize) -> &'a Tensor {
        if st.segment == 0 && i < self.args.len() {
            &self.args[i]
        } else {
            &st.inputs[i]
        }
    }

    /// True when `t` is not itself a tensor updated in place in this segment but shares
    /// storage with one (another view of it): reading it needs the update to land first.
    pub(super) fn aliases_pending_write(&self, st: &TraceState, t: &Tensor) -> bool {
        if st.effects.writes.is_empty() {
            return false;
        }
        let Some(s) = storage_of(t) else {
            return false;
        };
        let key = self.key_of(st, t);
        st.effects.writes.iter().any(|(i, _)| {
            let w = &st.inputs[*i];
            storage_of(w) == Some(s) && self.key_of(st, w) != key
        })
    }

    /// True when a live value of the segment is a view whose data comes from `dst`'s.
    fn has_live_view(&self, st: &TraceState, dst: &Tensor) -> bool {
        let dst_storage = storage_of(dst);
        st.live.iter().filter_map(|w| w.upgrade()).any(|v| {
            let mut cur = v;
            loop {
                let Some((_, base)) = &cur.view_of else {
                    return false;
                };
                match (&base.repr, &dst.repr) {
                    (Repr::Lazy(b), Repr::Lazy(d)) if Arc::ptr_eq(b, d) => return true,
                    (Repr::Lazy(b), _) if b.value.get().is_none() => cur = b.clone(),
                    _ => return dst_storage.is_some() && storage_of(base) == dst_storage,
                }
            }
        })
    }

    /// Runs `check` on `t` when it is an argument of the traced function, and keeps it to
    /// run on that argument before every later call of the compiled graph; `None` when
    /// `t` is not an argument.
    pub(crate) fn check_argument(
        &self,
        t: &Tensor,
        check: &super::ValueCheck,
    ) -> Option<Result<()>> {
        let Repr::Lazy(v) = &t.repr else {
            return None;
        };
        let i = self
            .arg_values
            .lock()
            .iter()
            .position(|a| std::ptr::eq(a.as_ptr(), Arc::as_ptr(v)))?;
        let r = check(v.value.get()?);
        if r.is_ok() {
            self.state
                .lock()
                .effects
                .arg_checks
                .push((i, check.clone()));
        }
        Some(r)
    }

    /// Guards the graph being traced on a value it bakes in: a change fails the guard.
    pub(crate) fn guard_value(&self, guard: super::ValueGuard) {
        self.state.lock().effects.value_guards.push(guard);
    }

    /// Records the in-place op `op` of `dst` by `arg` as a functional update; `false` when
    /// it cannot be (the caller then breaks the graph and runs it eagerly).
    pub(crate) fn record_inplace(
        &self,
        op: InplaceOp,
        dst: &Tensor,
        arg: Operand<'_>,
        loc: &'static Location<'static>,
    ) -> Result<bool> {
        let mut st = self.state.lock();
        if matches!(dst.repr, Repr::Cuda(_)) || self.has_live_view(&st, dst) {
            return Ok(false);
        }
        let of_segment = match &dst.repr {
            Repr::Lazy(v) if v.tracer.ptr_eq(&self.me) && v.segment == st.segment => {
                if v.view_of.is_some() {
                    return Ok(false);
                }
                Some(v.clone())
            }
            _ => {
                // another lifted view of the same storage would not see the update
                let s = storage_of(dst);
                let key = self.key_of(&st, dst);
                if st
                    .inputs
                    .iter()
                    .any(|t| storage_of(t) == s && self.key_of(&st, t) != key)
                {
                    return Ok(false);
                }
                None
            }
        };
        let old = self.node_for(&mut st, dst)?;
        let arg = match arg {
            Operand::Tensor(t) => Arg::Value(self.node_for(&mut st, t)?),
            Operand::Scalar(s) => Arg::Scalar(s),
        };
        let traced = |e: Error| Error::Traced {
            source: Box::new(e),
            loc: loc_string(loc),
            function: self.name.clone(),
        };
        let dst_ty = st.graph.node(old).ty.clone();
        let arg_ty = match arg {
            Arg::Value(v) => ArgType::Tensor(st.graph.node(v).ty.clone()),
            Arg::Scalar(s) => ArgType::Scalar(s),
        };
        infer(&Op::Inplace(op), &[ArgType::Tensor(dst_ty.clone()), arg_ty])
            .map_err(|e| traced(Error::Runtime(kiln_runtime::RuntimeError::Type(e))))?;
        let l = Some(loc_string(loc));
        let add = |st: &mut TraceState, op: Op, args: &[Arg]| {
            st.graph
                .add_op(op, args, l.clone())
                .map_err(|e| traced(graph_error(&self.name, e)))
        };
        let dtype = dst_ty.dtype;
        let cast = |st: &mut TraceState, v: NodeId| -> Option<Op> {
            (st.graph.node(v).ty.dtype != dtype).then_some(Op::Cast { dtype })
        };
        let new = match (op, arg) {
            (InplaceOp::Add | InplaceOp::Mul, arg) => {
                let b = if op == InplaceOp::Add {
                    BinaryOp::Add
                } else {
                    BinaryOp::Mul
                };
                let r = add(&mut st, Op::Binary(b), &[Arg::Value(old), arg])?;
                match cast(&mut st, r) {
                    Some(c) => add(&mut st, c, &[Arg::Value(r)])?,
                    None => r,
                }
            }
            (InplaceOp::Copy | InplaceOp::Fill, Arg::Scalar(s)) => add(
                &mut st,
                Op::Full {
                    shape: dst_ty.shape.clone(),
                    value: s,
                    dtype,
                },
                &[],
            )?,
            (InplaceOp::Copy | InplaceOp::Fill, Arg::Value(v)) => {
                let c = match cast(&mut st, v) {
                    Some(c) => add(&mut st, c, &[Arg::Value(v)])?,
                    None => v,
                };
                if st.graph.node(c).ty.shape == dst_ty.shape && c != old {
                    c
                } else {
                    let e = add(
                        &mut st,
                        Op::Expand {
                            shape: dst_ty.shape.clone(),
                        },
                        &[Arg::Value(c)],
                    )?;
                    add(&mut st, Op::Contiguous, &[Arg::Value(e)])?
                }
            }
        };
        st.ops += 1;
        let input = match &of_segment {
            Some(v) => {
                st.effects.redirect.insert(Arc::as_ptr(v) as usize, new);
                // an argument of the first segment is an input: its storage is written too
                st.graph.inputs().iter().position(|(_, id)| *id == v.node)
            }
            None => {
                let key = self.key_of(&st, dst).expect("a lifted tensor has a key");
                st.input_keys.insert(key.clone(), new);
                st.inputs
                    .iter()
                    .position(|t| self.key_of(&st, t).as_ref() == Some(&key))
            }
        };
        if let Some(i) = input {
            match st.effects.writes.iter_mut().find(|(j, _)| *j == i) {
                Some(w) => w.1 = new,
                None => st.effects.writes.push((i, new)),
            }
        }
        Ok(true)
    }

    /// Notes that the trace looked at `leaf`'s `.grad` (`clears`: to set it to `None`,
    /// not to read it). A gradient read is lifted as an input fetched from the leaf on
    /// every call of a compiled graph.
    pub(crate) fn note_grad(&self, leaf: &Tensor, clears: bool) -> Result<()> {
        let current = leaf.grad_meta.as_ref().and_then(|m| m.grad.lock().clone());
        let mut st = self.state.lock();
        if !st
            .effects
            .grad_touched
            .iter()
            .any(|(l, _)| same_leaf(l, leaf))
        {
            let first = (!clears).then_some(current.is_none());
            st.effects.grad_touched.push((leaf.clone(), first));
        }
        if clears {
            return Ok(());
        }
        if let Some(g) = current {
            if matches!(g.repr, Repr::Real(_)) {
                let node = self.node_for(&mut st, &g)?;
                let i = st
                    .graph
                    .inputs()
                    .iter()
                    .position(|(_, id)| *id == node)
                    .expect("a real tensor is lifted as an input");
                if !st.effects.grad_slots.iter().any(|(j, _)| *j == i) {
                    st.effects.grad_slots.push((i, leaf.clone()));
                }
            }
        }
        Ok(())
    }

    /// A value equal to `t` that no traced gradient flows through (`detach`).
    pub(crate) fn detach(&self, t: &Tensor) -> Result<Tensor> {
        let shape = Shape::of(t.shape());
        let out = self.record(
            &Op::Expand { shape },
            &[Operand::Tensor(t)],
            Location::caller(),
        )?;
        if let Repr::Lazy(v) = &out.repr {
            self.state.lock().effects.stop.insert(v.node);
        }
        Ok(out)
    }

    /// `root.backward(gradient)` inside the trace: appends the backward of the segment's
    /// nodes and accumulates each gradient into its leaf's `.grad` (a value of the graph).
    pub(crate) fn backward(
        &self,
        root: &Tensor,
        gradient: Option<&Tensor>,
        loc: &'static Location<'static>,
    ) -> Result<()> {
        let autograd = |m: String| Error::Autograd(m);
        let mut st = self.state.lock();
        let of_segment = matches!(&root.repr,
            Repr::Lazy(v) if v.tracer.ptr_eq(&self.me) && v.segment == st.segment);
        if !of_segment {
            return Err(Error::Compile {
                function: self.name.clone(),
                reason: format!(
                    "backward() at {} inside a compiled function needs the value it \
                     differentiates in the same graph, but a graph break ran that graph \
                     already (see `explain`); remove the break or call backward() outside \
                     the compiled function",
                    loc_string(loc)
                ),
            });
        }
        let root_node = self.node_for(&mut st, root)?;
        let root_ty = st.graph.node(root_node).ty.clone();
        let seed = match gradient {
            Some(g) => {
                if g.shape() != root.shape() {
                    return Err(autograd(format!(
                        "backward: the gradient has shape {:?}, the output {:?}",
                        g.shape(),
                        root.shape()
                    )));
                }
                self.node_for(&mut st, g)?
            }
            None => {
                if root.numel() != 1 {
                    return Err(autograd(
                        "grad can be implicitly created only for scalar outputs".into(),
                    ));
                }
                st.graph
                    .add_op(
                        Op::Full {
                            shape: root_ty.shape.clone(),
                            value: Scalar::Float(1.0),
                            dtype: root_ty.dtype,
                        },
                        &[],
                        Some(loc_string(loc)),
                    )
                    .map_err(|e| graph_error(&self.name, e))?
            }
        };
        let n_inputs = st.graph.inputs().len();
        let mut needed = vec![false; n_inputs];
        let mut leaves: Vec<Option<Tensor>> = vec![None; n_inputs];
        for (i, slot) in needed.iter_mut().enumerate() {
            let t = self.source_of(&st, i);
            if t.requires_grad() {
                if !t.is_leaf() {
                    return Err(Error::Compile {
                        function: self.name.clone(),
                        reason: format!(
                            "backward() at {}: input {i} of the graph carries autograd \
                             history from outside the compiled function; only leaves can \
                             be differentiated inside it (detach it, or call backward() \
                             outside)",
                            loc_string(loc)
                        ),
                    });
                }
                *slot = true;
                leaves[i] = Some(t.clone());
            }
        }
        let stop = st.effects.stop.clone();
        let grads = kiln_passes::joint::backward_into(
            &mut st.graph,
            HashMap::from([(root_node, seed)]),
            &needed,
            &stop,
        )
        .map_err(|e| Error::Compile {
            function: self.name.clone(),
            reason: format!("backward() at {}: {e}", loc_string(loc)),
        })?;
        if grads.is_empty() && !st.breaks_seen() {
            return Err(autograd(
                "element 0 of tensors does not require grad and does not have a grad_fn".into(),
            ));
        }
        if grads.is_empty() {
            return Err(Error::Compile {
                function: self.name.clone(),
                reason: format!(
                    "backward() at {} inside a compiled function reaches no tensor that \
                     requires grad in this graph: a graph break ran the forward already (see \
                     `explain`); remove the break or call backward() outside the compiled \
                     function",
                    loc_string(loc)
                ),
            });
        }
        st.ops += 1;
        st.effects.backward = true;
        let mut order: Vec<(usize, NodeId)> = grads.into_iter().collect();
        order.sort();
        let mut new_grads = Vec::with_capacity(order.len());
        for (i, node) in order {
            let ty = st.graph.node(node).ty.clone();
            let shape = ty.shape.as_consts().map(|s| s.to_vec()).unwrap_or_default();
            let v = Arc::new(LazyValue {
                tracer: self.me.clone(),
                segment: st.segment,
                node,
                dtype: ty.dtype,
                strides: kiln_runtime::contiguous_strides(&shape).to_vec(),
                shape,
                value: OnceLock::new(),
                view_of: None,
            });
            st.live.push(Arc::downgrade(&v));
            let leaf = leaves[i].clone().expect("a gradient only for a leaf");
            new_grads.push((leaf, Tensor::lazy(v)));
        }
        drop(st);
        // hooks and accumulation record ops of their own (the lock is released)
        let _off = crate::autograd::no_grad();
        for (leaf, mut g) in new_grads {
            let Some(meta) = leaf.grad_meta.clone() else {
                continue;
            };
            for h in meta.hooks.lock().iter() {
                if let Some(r) = h(&g)? {
                    g = r;
                }
            }
            self.note_grad(&leaf, false)?;
            let old = meta.grad.lock().clone();
            let total = match old {
                Some(prev) => prev.add(&g)?,
                None => g,
            };
            *meta.grad.lock() = Some(total);
        }
        Ok(())
    }

    /// At the end of a trace without breaks: appends to `outputs` the values the call must
    /// write back and the leaves' new gradients, and says what to do with them.
    pub(super) fn whole_effects(
        &self,
        st: &mut TraceState,
        outputs: &mut Vec<NodeId>,
        n_args: usize,
    ) -> Result<WholeEffects> {
        let mut leads = vec![false; st.graph.len()];
        for (i, (_, id)) in st.graph.inputs().iter().enumerate() {
            leads[id.index()] = self.source_of(st, i).requires_grad();
        }
        for (id, node) in st.graph.nodes() {
            if node.op != Op::Input && !st.effects.stop.contains(&id) {
                leads[id.index()] = node
                    .args
                    .iter()
                    .any(|a| matches!(a, Arg::Value(v) if leads[v.index()]));
            }
        }
        let mut fx = WholeEffects {
            arg_checks: st.effects.arg_checks.clone(),
            value_guards: st.effects.value_guards.clone(),
            user_outputs: outputs.len(),
            backward: st.effects.backward,
            outputs_need_grad: outputs.iter().any(|o| leads[o.index()]),
            ..WholeEffects::default()
        };
        for (input, node) in st.effects.writes.clone() {
            outputs.push(node);
            fx.writes.push((input, outputs.len() - 1));
        }
        for (leaf, first) in st.effects.grad_touched.clone() {
            if first == Some(true) {
                fx.grad_absent.push(leaf.clone());
            }
            let now = leaf.grad_meta.as_ref().and_then(|m| m.grad.lock().clone());
            match now {
                None => fx.set_grads.push((leaf, None)),
                Some(g) if matches!(g.repr, Repr::Lazy(_)) => {
                    outputs.push(self.node_for(st, &g)?);
                    fx.set_grads.push((leaf, Some(outputs.len() - 1)));
                }
                Some(_) => {}
            }
        }
        fx.grad_slots = st
            .effects
            .grad_slots
            .iter()
            .filter(|(i, _)| *i >= n_args)
            .map(|(i, l)| (i - n_args, l.clone()))
            .collect();
        Ok(fx)
    }

    /// After a trace with breaks: every segment has run; leaves whose `.grad` is a traced
    /// value get it as a plain tensor.
    pub(super) fn settle_grads(&self, st: &TraceState) -> Result<()> {
        for (leaf, _) in &st.effects.grad_touched {
            let Some(meta) = &leaf.grad_meta else {
                continue;
            };
            let mut slot = meta.grad.lock();
            if let Some(g) = slot.as_ref() {
                if matches!(g.repr, Repr::Lazy(_)) {
                    *slot = Some(Tensor::from_cpu(g.real()?.clone()));
                }
            }
        }
        Ok(())
    }
}
