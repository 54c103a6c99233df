//! The tracer: records the ops of one call of a compiled function into graphs.
//!
//! A trace is a sequence of *segments*. Ops append nodes to the current segment's graph;
//! tensors the function reads that are not its arguments (weights captured by a closure,
//! values computed before a break) become inputs of the graph, by reference. Reading a
//! tensor's values is a graph break: the live values of the segment become its outputs, the
//! segment runs, and a new segment starts. In-place updates, `backward()` and `.grad` are
//! kept inside the graph by `functional.rs` (an update it cannot make functional breaks).

use super::functional::WholeEffects;
use super::lazy::LazyValue;
use crate::error::{Error, Result};
use crate::tensor::Repr;
use crate::{Operand, Tensor};
use kiln_ir::{Arg, Graph, GraphError, NodeId, Op, Shape, TensorType};
use kiln_runtime::{execute, CpuTensor, EagerArg, RuntimeError};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::panic::Location;

/// Why a CUDA tensor cannot enter a traced function.
pub(crate) const CUDA_ARGUMENTS: &str = "CUDA tensors cannot be arguments or captured \
     tensors of a compiled function yet: pass host tensors (`backend: cuda` copies them to the \
     device itself) or call the function eagerly";
use std::sync::{Arc, OnceLock, Weak};

/// Runs a finished segment: compiles it (or finds it compiled) and executes it.
pub(crate) trait SegmentRunner: Send + Sync {
    /// Runs `g` on `inputs` (in `g`'s input order).
    fn run_segment(&self, g: &Graph, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>>;
}

/// A graph break seen while tracing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphBreak {
    /// the op that caused it (`item`, `to_vec`, `add_`, ...)
    pub op: &'static str,
    /// the user's source location, `file.rs:line:col`
    pub loc: String,
    /// why the graph had to end there
    pub reason: String,
}

impl fmt::Display for GraphBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` at {}: {}", self.op, self.loc, self.reason)
    }
}

/// How a trace ended.
pub(crate) enum TraceEnd {
    /// No break: the whole function is one graph, which has not run yet. Its inputs are
    /// the function's arguments (in order) followed by `params`.
    Whole {
        graph: Graph,
        params: Vec<Tensor>,
        effects: Box<WholeEffects>,
    },
    /// There were breaks: every segment has run and these are the outputs' data.
    /// `needs_grad`: grad mode is on and an argument or a captured tensor requires grad,
    /// so the outputs need autograd history the segments did not record.
    Done {
        outputs: Vec<Tensor>,
        needs_grad: bool,
    },
}

/// Identity of a tensor lifted as a graph input, so each one is lifted once per segment.
#[derive(Hash, PartialEq, Eq, Clone)]
pub(super) enum InputKey {
    Lazy(usize),
    Real {
        storage: usize,
        offset: usize,
        shape: Vec<usize>,
        strides: Vec<isize>,
    },
}

pub(super) struct TraceState {
    pub(super) segment: u32,
    pub(super) graph: Graph,
    /// the tensor feeding each graph input, in input order
    pub(super) inputs: Vec<Tensor>,
    pub(super) input_keys: HashMap<InputKey, NodeId>,
    pub(super) ops: usize,
    pub(super) live: Vec<Weak<LazyValue>>,
    graphs: Vec<Graph>,
    breaks: Vec<GraphBreak>,
    /// what in-place updates, `.grad` reads and traced `backward()` calls left to do
    pub(super) effects: TracedEffects,
}

impl TraceState {
    /// True once the trace has broken into several graphs.
    pub(super) fn breaks_seen(&self) -> bool {
        !self.breaks.is_empty()
    }
}

/// The side effects of a traced segment (`functional.rs`): in-place updates made
/// functional, `.grad` slots read and written, values no gradient flows through.
#[derive(Default)]
pub(super) struct TracedEffects {
    /// lazy values of the segment updated in place: the node of each one's current value
    pub(super) redirect: HashMap<usize, NodeId>,
    /// graph inputs updated in place: (input index, node of the new value), written back
    /// into the input's storage once the graph has run
    pub(super) writes: Vec<(usize, NodeId)>,
    /// lifted inputs that are a leaf's `.grad`: (input index, the leaf)
    pub(super) grad_slots: Vec<(usize, Tensor)>,
    /// leaves whose `.grad` the trace read or set, with whether the gradient was absent
    /// when the trace first looked (`None`: first cleared, so it did not matter)
    pub(super) grad_touched: Vec<(Tensor, Option<bool>)>,
    /// nodes recorded with grad mode off or detached: a traced backward stops there
    pub(super) stop: HashSet<NodeId>,
    /// a traced `backward()` ran
    pub(super) backward: bool,
    /// checks of arguments' values, run again before every later call
    pub(super) arg_checks: Vec<(usize, super::ValueCheck)>,
    /// guards on values baked into the graph
    pub(super) value_guards: Vec<super::ValueGuard>,
}

/// One call's trace.
pub(crate) struct Tracer {
    pub(super) me: Weak<Tracer>,
    pub(super) name: String,
    fullgraph: bool,
    n_args: usize,
    /// the arguments as the caller passed them (with their autograd state)
    pub(super) args: Vec<Tensor>,
    /// the traced values standing for the arguments
    pub(super) arg_values: Mutex<Vec<Weak<LazyValue>>>,
    runner: Arc<dyn SegmentRunner>,
    pub(super) state: Mutex<TraceState>,
    /// an argument or lifted tensor requires grad (with grad mode on)
    saw_grad: std::sync::atomic::AtomicBool,
}

pub(super) fn loc_string(loc: &Location<'_>) -> String {
    format!("{}:{}:{}", loc.file(), loc.line(), loc.column())
}

pub(super) fn graph_error(function: &str, e: GraphError) -> Error {
    match e {
        GraphError::Type { source, .. } => Error::Runtime(RuntimeError::Type(source)),
        other => Error::Compile {
            function: function.to_string(),
            reason: other.to_string(),
        },
    }
}

impl Tracer {
    /// Starts a trace of a function called with `args`; returns the tracer and the lazy
    /// tensors standing for the arguments (their data is the arguments' data).
    pub(crate) fn start(
        name: &str,
        fullgraph: bool,
        runner: Arc<dyn SegmentRunner>,
        args: &[Tensor],
    ) -> Result<(Arc<Tracer>, Vec<Tensor>)> {
        let tracer = Arc::new_cyclic(|me| Tracer {
            me: me.clone(),
            name: name.to_string(),
            fullgraph,
            n_args: args.len(),
            args: args.to_vec(),
            arg_values: Mutex::new(Vec::new()),
            runner,
            saw_grad: std::sync::atomic::AtomicBool::new(
                crate::autograd::is_grad_enabled() && args.iter().any(|a| a.requires_grad()),
            ),
            state: Mutex::new(TraceState {
                segment: 0,
                graph: Graph::new(name),
                inputs: Vec::new(),
                input_keys: HashMap::new(),
                ops: 0,
                live: Vec::new(),
                graphs: Vec::new(),
                breaks: Vec::new(),
                effects: TracedEffects::default(),
            }),
        });
        let mut lazy_args = Vec::with_capacity(args.len());
        {
            let mut st = tracer.state.lock();
            for (i, a) in args.iter().enumerate() {
                let real = a.real()?.clone();
                let node = st
                    .graph
                    .add_input(format!("arg{i}"), real.tensor_type())
                    .map_err(|e| graph_error(name, e))?;
                let v = Arc::new(LazyValue {
                    tracer: tracer.me.clone(),
                    segment: 0,
                    node,
                    dtype: real.dtype(),
                    shape: real.shape().to_vec(),
                    strides: real.strides().to_vec(),
                    value: OnceLock::from(real),
                    view_of: None,
                });
                st.inputs.push(Tensor::lazy(v.clone()));
                tracer.arg_values.lock().push(Arc::downgrade(&v));
                lazy_args.push(Tensor::lazy(v));
            }
        }
        Ok((tracer, lazy_args))
    }

    /// The traced function's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Records `op` applied to `args` as a node of the current segment.
    pub(crate) fn record(
        &self,
        op: &Op,
        args: &[Operand<'_>],
        loc: &'static Location<'static>,
    ) -> Result<Tensor> {
        let mut st = self.state.lock();
        if args
            .iter()
            .any(|a| matches!(a, Operand::Tensor(t) if self.aliases_pending_write(&st, t)))
        {
            // a different view of a tensor updated in this graph: let the update land first
            drop(st);
            self.graph_break("a view of a tensor updated in place", loc)?;
            st = self.state.lock();
        }
        let mut gargs: smallvec::SmallVec<[Arg; 3]> = smallvec::SmallVec::new();
        for a in args {
            gargs.push(match a {
                Operand::Scalar(s) => Arg::Scalar(*s),
                Operand::Tensor(t) => Arg::Value(self.node_for(&mut st, t)?),
            });
        }
        let node = st
            .graph
            .add_op(op.clone(), &gargs, Some(loc_string(loc)))
            .map_err(|e| Error::Traced {
                source: Box::new(graph_error(&self.name, e)),
                loc: loc_string(loc),
                function: self.name.clone(),
            })?;
        st.ops += 1;
        if !crate::autograd::is_grad_enabled() {
            st.effects.stop.insert(node);
        }
        let ty = &st.graph.node(node).ty;
        let dtype = ty.dtype;
        let shape: Vec<usize> = ty
            .shape
            .as_consts()
            .ok_or_else(|| Error::Compile {
                function: self.name.clone(),
                reason: format!("{} traced to a symbolic type {ty}", op.name()),
            })?
            .to_vec();
        let view_of = match (op.is_view(), args.first()) {
            (true, Some(Operand::Tensor(t))) => Some((op.clone(), (*t).clone())),
            _ => None,
        };
        let v = Arc::new(LazyValue {
            tracer: self.me.clone(),
            segment: st.segment,
            node,
            dtype,
            strides: kiln_runtime::contiguous_strides(&shape).to_vec(),
            shape,
            value: OnceLock::new(),
            view_of,
        });
        st.live.push(Arc::downgrade(&v));
        Ok(Tensor::lazy(v))
    }

    /// The input key `t` would be lifted under (`None` for a value of the segment).
    pub(super) fn key_of(&self, st: &TraceState, t: &Tensor) -> Option<InputKey> {
        match &t.repr {
            Repr::Lazy(v) if v.tracer.ptr_eq(&self.me) && v.segment == st.segment => None,
            Repr::Lazy(v) => Some(InputKey::Lazy(Arc::as_ptr(v) as usize)),
            Repr::Cuda(_) => None,
            Repr::Real(r) => Some(InputKey::Real {
                storage: Arc::as_ptr(r.storage()) as usize,
                offset: r.offset(),
                shape: r.shape().to_vec(),
                strides: r.strides().to_vec(),
            }),
        }
    }

    /// The node standing for `t` in the current segment, lifting it as an input if it
    /// is not a value of the segment.
    pub(super) fn node_for(&self, st: &mut TraceState, t: &Tensor) -> Result<NodeId> {
        let key = match &t.repr {
            Repr::Lazy(v) if v.tracer.ptr_eq(&self.me) && v.segment == st.segment => {
                return Ok(st.effects.current_node(v))
            }
            Repr::Cuda(_) => {
                return Err(crate::error::invalid("compile", t.shape(), CUDA_ARGUMENTS))
            }
            _ => self
                .key_of(st, t)
                .expect("a real tensor or an earlier segment's value has a key"),
        };
        if let Some(n) = st.input_keys.get(&key) {
            return Ok(*n);
        }
        let real = t.real()?;
        if crate::autograd::is_grad_enabled() && t.requires_grad() {
            self.saw_grad
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let prefix = match key {
            InputKey::Lazy(_) => "c",
            InputKey::Real { .. } => "p",
        };
        let name = format!("{prefix}{}", st.inputs.len());
        let ty = TensorType::new(real.dtype(), Shape::of(real.shape()));
        let node = st
            .graph
            .add_input(name, ty)
            .map_err(|e| graph_error(&self.name, e))?;
        st.inputs.push(t.clone());
        st.input_keys.insert(key, node);
        Ok(node)
    }

    /// A graph break caused by `op` at `loc`: an error under `fullgraph`, else the current
    /// segment runs and a new one starts.
    pub(crate) fn graph_break(
        &self,
        op: &'static str,
        loc: &'static Location<'static>,
    ) -> Result<()> {
        let reason = if op.ends_with('_') {
            format!("`{op}` mutates a tensor in place, which runs eagerly between graphs")
        } else {
            format!("`{op}` reads a tensor's values, so the graph before it has to run")
        };
        let brk = GraphBreak {
            op,
            loc: loc_string(loc),
            reason,
        };
        if self.fullgraph {
            return Err(Error::GraphBreak {
                op,
                loc: brk.loc,
                reason: brk.reason,
            });
        }
        super::logs::log_break(&self.name, &brk);
        let mut st = self.state.lock();
        st.breaks.push(brk);
        self.flush(&mut st)
    }

    /// Runs the current segment so that every live value of it has data, then starts a
    /// new segment.
    fn flush(&self, st: &mut TraceState) -> Result<()> {
        let live: Vec<Arc<LazyValue>> = st
            .live
            .drain(..)
            .filter_map(|w| w.upgrade())
            .filter(|v| v.value.get().is_none())
            .collect();
        let mut outs: Vec<Arc<LazyValue>> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        for v in &live {
            if let Some(root) = self.root_of(v, st.segment) {
                if seen.insert(Arc::as_ptr(&root) as usize) {
                    outs.push(root);
                }
            }
        }
        let writes = std::mem::take(&mut st.effects.writes);
        if !outs.is_empty() || !writes.is_empty() {
            let nodes = outs
                .iter()
                .map(|v| st.effects.current_node(v))
                .chain(writes.iter().map(|(_, n)| *n))
                .collect();
            st.graph
                .set_outputs(nodes)
                .map_err(|e| graph_error(&self.name, e))?;
            let inputs: Vec<&CpuTensor> =
                st.inputs.iter().map(|t| t.real()).collect::<Result<_>>()?;
            let mut results = self.runner.run_segment(&st.graph, &inputs)?.into_iter();
            for (v, r) in outs.iter().zip(results.by_ref()) {
                let _ = v.value.set(r);
            }
            for ((input, _), r) in writes.iter().zip(results) {
                super::functional::write_back(st.inputs[*input].real()?, &r)?;
            }
        }
        st.effects.end_segment();
        if st.ops > 0 {
            st.graphs.push(st.graph.clone());
        }
        for v in &live {
            regenerate(v)?;
        }
        st.segment += 1;
        st.graph = Graph::new(format!("{}_{}", self.name, st.segment));
        st.inputs.clear();
        st.input_keys.clear();
        st.ops = 0;
        Ok(())
    }

    /// The value whose data the graph must produce so that `v` can be had: `v` itself, or
    /// for a view, the base it views (views are regenerated from their base); `None` when
    /// the base already has data.
    fn root_of(&self, v: &Arc<LazyValue>, segment: u32) -> Option<Arc<LazyValue>> {
        let mut cur = v.clone();
        loop {
            let next = match &cur.view_of {
                None => return Some(cur),
                Some((_, base)) => match &base.repr {
                    Repr::Lazy(b)
                        if b.value.get().is_none()
                            && b.tracer.ptr_eq(&self.me)
                            && b.segment == segment =>
                    {
                        b.clone()
                    }
                    _ => return None,
                },
            };
            cur = next;
        }
    }

    /// Ends the trace with the function's `outputs`.
    pub(crate) fn finish(&self, outputs: &[Tensor]) -> Result<TraceEnd> {
        let mut st = self.state.lock();
        if st.breaks.is_empty() {
            let mut nodes = outputs
                .iter()
                .map(|t| self.node_for(&mut st, t))
                .collect::<Result<Vec<_>>>()?;
            let n_args = self.n_args;
            let effects = self.whole_effects(&mut st, &mut nodes, n_args)?;
            st.graph
                .set_outputs(nodes)
                .map_err(|e| graph_error(&self.name, e))?;
            let graph = std::mem::take(&mut st.graph);
            let params = st.inputs.split_off(n_args);
            return Ok(TraceEnd::Whole {
                graph,
                params,
                effects: Box::new(effects),
            });
        }
        self.flush(&mut st)?;
        self.settle_grads(&st)?;
        let outputs = outputs
            .iter()
            .map(|t| Ok(Tensor::from_cpu(t.real()?.clone())))
            .collect::<Result<Vec<_>>>()?;
        Ok(TraceEnd::Done {
            outputs,
            needs_grad: self.saw_grad.load(std::sync::atomic::Ordering::Relaxed)
                && !st.effects.backward,
        })
    }

    /// The graphs that ran (segments with at least one op) and the breaks seen.
    pub(crate) fn report(&self) -> (Vec<Graph>, Vec<GraphBreak>) {
        let st = self.state.lock();
        (st.graphs.clone(), st.breaks.clone())
    }
}

/// Gives a view its data from its base's data (as eager mode would make it).
fn regenerate(v: &Arc<LazyValue>) -> Result<()> {
    if v.value.get().is_some() {
        return Ok(());
    }
    let Some((op, base)) = &v.view_of else {
        return v.value().map(|_| ());
    };
    if let Repr::Lazy(b) = &base.repr {
        regenerate(b)?;
    }
    let base = base.real()?;
    let out = execute(op, &[EagerArg::Tensor(base)])?;
    let _ = v.value.set(out);
    Ok(())
}
