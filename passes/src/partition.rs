//! `partition`: splits a [`Joint`] graph into a forward graph and a backward graph, choosing
//! what the forward saves for the backward by a minimum cut (PyTorch's
//! `min_cut_rematerialization_partition` is the reference).
//!
//! The nodes that depend on a tangent run in the backward. Every other node the backward
//! needs is either computed in the forward and *saved*, or *recomputed* in the backward
//! from saved values. Each candidate node is split into `in → out` with the capacity of its
//! size in bytes (the cost of saving it); `out → user.in` edges are infinite; the primal
//! inputs and every node that may not be recomputed hang off the source with infinite
//! capacity, and the backward nodes feed the sink. A minimum cut then saves the cheapest
//! set of values that separates the inputs from the backward: a chain of pointwise ops saves
//! its one input instead of each intermediate.
//!
//! May be recomputed: pointwise ops, views, copies, gathers, row normalisations,
//! reductions whose output is not much smaller than their input (at most
//! [`REDUCTION_RATIO`] times), creation ops (`rand`/`randn` draw from a counter given by
//! their seed, so a recomputation replays the same numbers; nothing is drawn twice from a
//! generator). Never recomputed: matmuls and in-place updates. A memory budget
//! ([`PartitionOptions::memory_budget`]) relaxes the bans step by step until the saved bytes
//! fit.

use crate::joint::Joint;
use crate::PassError;
use kiln_ir::{Arg, Dim, Graph, NodeId, Op, OpKind, Shape, TensorType};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

const PASS: &str = "partition";

fn err(reason: impl Into<String>) -> PassError {
    PassError::Unsupported {
        pass: PASS,
        reason: reason.into(),
    }
}

/// A reduction may be recomputed when its input has at most this many times its output's
/// elements (the statistic of a row normalisation is not; a `max` over a short dim is).
pub const REDUCTION_RATIO: usize = 4;

/// The size a symbol is assumed to have when weighing bytes and no hint names it.
pub const DEFAULT_SYMBOL_SIZE: usize = 64;

/// How the partitioner weighs and what it may recompute.
#[derive(Clone, Debug, Default)]
pub struct PartitionOptions {
    /// a size per symbol, to weigh symbolic shapes (the sizes of the call being compiled)
    pub hints: HashMap<Arc<str>, usize>,
    /// saved bytes allowed, as a fraction of what the default policy saves (`None`: no
    /// limit). Below 1 the partitioner also recomputes large reductions, then matmuls,
    /// taking the first policy whose saved bytes fit (the last one if none does).
    pub memory_budget: Option<f64>,
}

/// What may be recomputed: each level allows more than the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// pointwise, views, copies, gathers, normalisations, small reductions
    Default,
    /// and every reduction
    Reductions,
    /// and matmuls: everything but in-place updates
    Everything,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Default => "default",
            Policy::Reductions => "recompute reductions",
            Policy::Everything => "recompute matmuls too",
        })
    }
}

/// Where a value the backward reads comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavedFrom {
    /// a forward input (already alive: passing it costs nothing new)
    Input(usize),
    /// a forward output
    Output(usize),
    /// an extra output of the forward graph, after the user's outputs
    Extra(usize),
}

/// One tensor the forward saves for the backward.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedValue {
    /// the joint graph's node
    pub node: NodeId,
    /// its op's name (`input` for a forward input)
    pub op: String,
    /// its type
    pub ty: TensorType,
    /// its size in bytes (symbols at their hints)
    pub bytes: u64,
    /// where the backward gets it
    pub from: SavedFrom,
    /// the source location of the node, if any
    pub loc: Option<String>,
}

/// What the partition decided, for `explain` and `kiln dump --stage partition`.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionReport {
    /// the saved values, in the backward graph's input order
    pub saved: Vec<SavedValue>,
    /// total bytes saved (inputs of the forward included)
    pub saved_bytes: u64,
    /// bytes saved excluding the forward's inputs (memory the forward would otherwise free)
    pub saved_activation_bytes: u64,
    /// what eager autograd would save for the same program: every operand and result of
    /// each recorded op, views counted with their base
    pub eager_saved_bytes: u64,
    /// the ops the backward recomputes instead of loading, with how many of each
    pub recomputed: Vec<(String, usize)>,
    /// the recomputation policy taken
    pub policy: Policy,
}

impl fmt::Display for PartitionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "saved {} tensors, {} bytes ({} of them activations); eager autograd saves {} bytes",
            self.saved.len(),
            self.saved_bytes,
            self.saved_activation_bytes,
            self.eager_saved_bytes
        )?;
        for s in &self.saved {
            let from = match s.from {
                SavedFrom::Input(i) => format!("input {i}"),
                SavedFrom::Output(i) => format!("output {i}"),
                SavedFrom::Extra(i) => format!("extra output {i}"),
            };
            write!(
                f,
                "  %{} {} : {} {} bytes, {from}",
                s.node.index(),
                s.op,
                s.ty,
                s.bytes
            )?;
            if let Some(l) = &s.loc {
                write!(f, "  # {l}")?;
            }
            writeln!(f)?;
        }
        if self.recomputed.is_empty() {
            writeln!(f, "recomputed: nothing")?;
        } else {
            let r: Vec<String> = self
                .recomputed
                .iter()
                .map(|(op, n)| format!("{op} ×{n}"))
                .collect();
            writeln!(f, "recomputed: {}", r.join(", "))?;
        }
        write!(f, "policy: {}", self.policy)
    }
}

/// The two graphs and how they connect.
#[derive(Clone, Debug)]
pub struct Partition {
    /// inputs: the joint's forward inputs; outputs: the forward outputs, then the extras
    /// (saved values that are neither inputs nor outputs)
    pub forward: Graph,
    /// inputs: the saved values (in [`PartitionReport::saved`] order), then the tangents;
    /// outputs: the gradients, as [`Joint::grads`]
    pub backward: Graph,
    /// what was saved and recomputed
    pub report: PartitionReport,
}

/// The elements of `shape`, symbols at their hints.
fn numel(shape: &Shape, hints: &HashMap<Arc<str>, usize>) -> u64 {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Const(n) => *n as u64,
            Dim::Sym(s) => hints.get(s).copied().unwrap_or(DEFAULT_SYMBOL_SIZE) as u64,
        })
        .product()
}

fn bytes(ty: &TensorType, hints: &HashMap<Arc<str>, usize>) -> u64 {
    numel(&ty.shape, hints) * ty.dtype.size_bytes() as u64
}

/// True when `policy` allows recomputing `id` in the backward.
fn recomputable(g: &Graph, id: NodeId, policy: Policy, hints: &HashMap<Arc<str>, usize>) -> bool {
    let node = g.node(id);
    match node.op.kind() {
        OpKind::Input | OpKind::Inplace => false,
        OpKind::Matmul | OpKind::Convolution => policy >= Policy::Everything,
        OpKind::Reduction => {
            if policy >= Policy::Reductions {
                return true;
            }
            let out = numel(&node.ty.shape, hints).max(1);
            let input = node
                .args
                .iter()
                .filter_map(|a| match a {
                    Arg::Value(v) => Some(numel(&g.node(*v).ty.shape, hints)),
                    Arg::Scalar(_) => None,
                })
                .max()
                .unwrap_or(0);
            input <= out * REDUCTION_RATIO as u64
        }
        _ => true,
    }
}

/// Dinic's maximum flow on a small graph of `u64` capacities.
struct Flow {
    /// per edge: target, capacity left
    to: Vec<usize>,
    cap: Vec<u64>,
    /// per vertex: its edges (the reverse edge of `e` is `e ^ 1`)
    adj: Vec<Vec<usize>>,
}

const INF: u64 = u64::MAX / 4;

impl Flow {
    fn new(n: usize) -> Flow {
        Flow {
            to: Vec::new(),
            cap: Vec::new(),
            adj: vec![Vec::new(); n],
        }
    }

    fn edge(&mut self, a: usize, b: usize, c: u64) {
        self.adj[a].push(self.to.len());
        self.to.push(b);
        self.cap.push(c);
        self.adj[b].push(self.to.len());
        self.to.push(a);
        self.cap.push(0);
    }

    fn levels(&self, s: usize) -> Vec<i64> {
        let mut level = vec![-1i64; self.adj.len()];
        level[s] = 0;
        let mut q = VecDeque::from([s]);
        while let Some(v) = q.pop_front() {
            for &e in &self.adj[v] {
                let w = self.to[e];
                if self.cap[e] > 0 && level[w] < 0 {
                    level[w] = level[v] + 1;
                    q.push_back(w);
                }
            }
        }
        level
    }

    fn push(&mut self, v: usize, t: usize, f: u64, level: &[i64], it: &mut [usize]) -> u64 {
        if v == t {
            return f;
        }
        while it[v] < self.adj[v].len() {
            let e = self.adj[v][it[v]];
            let w = self.to[e];
            if self.cap[e] > 0 && level[w] == level[v] + 1 {
                let d = self.push(w, t, f.min(self.cap[e]), level, it);
                if d > 0 {
                    self.cap[e] -= d;
                    self.cap[e ^ 1] += d;
                    return d;
                }
            }
            it[v] += 1;
        }
        0
    }

    /// Runs the maximum flow from `s` to `t`; returns the vertices on the source side of
    /// a minimum cut.
    fn min_cut(&mut self, s: usize, t: usize) -> Vec<bool> {
        loop {
            let level = self.levels(s);
            if level[t] < 0 {
                return level.iter().map(|l| *l >= 0).collect();
            }
            let mut it = vec![0; self.adj.len()];
            while self.push(s, t, INF, &level, &mut it) > 0 {}
        }
    }
}

/// The nodes of `g` that `roots` depend on (themselves included).
fn ancestors(g: &Graph, roots: &[NodeId]) -> Vec<bool> {
    let mut seen = vec![false; g.len()];
    let mut stack: Vec<NodeId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        for a in &g.node(id).args {
            if let Arg::Value(v) = a {
                stack.push(*v);
            }
        }
    }
    seen
}

/// The saved set under one policy: the nodes whose `in → out` edge the cut crosses.
fn cut(
    g: &Graph,
    joint: &Joint,
    tangent_dep: &[bool],
    needed_bw: &[bool],
    policy: Policy,
    hints: &HashMap<Arc<str>, usize>,
) -> Vec<NodeId> {
    let n = g.len();
    let (source, sink) = (2 * n, 2 * n + 1);
    let mut flow = Flow::new(2 * n + 2);
    let primal_ids: HashSet<NodeId> = g.inputs()[..joint.primals]
        .iter()
        .map(|(_, id)| *id)
        .collect();
    let candidate = |i: usize| needed_bw[i] && !tangent_dep[i];
    for (id, node) in g.nodes() {
        let i = id.index();
        if !candidate(i) {
            continue;
        }
        if primal_ids.contains(&id) || !recomputable(g, id, policy, hints) {
            flow.edge(source, 2 * i, INF);
        }
        // saving costs its bytes; ties go to the smaller number of tensors
        flow.edge(
            2 * i,
            2 * i + 1,
            bytes(&node.ty, hints).saturating_mul(16) + 1,
        );
        for u in g.users(id) {
            let ui = u.index();
            if !needed_bw[ui] {
                continue;
            }
            if tangent_dep[ui] {
                flow.edge(2 * i + 1, sink, INF);
            } else {
                flow.edge(2 * i + 1, 2 * ui, INF);
            }
        }
    }
    // a value the backward returns as it is (the gradient of an input is a saved value)
    for &o in &g.outputs()[joint.outputs..] {
        if candidate(o.index()) {
            flow.edge(2 * o.index() + 1, sink, INF);
        }
    }
    let side = flow.min_cut(source, sink);
    g.nodes()
        .map(|(id, _)| id)
        .filter(|id| {
            let i = id.index();
            candidate(i) && side[2 * i] && !side[2 * i + 1]
        })
        .collect()
}

/// What eager autograd saves for the forward part of `joint`: the operands and result of
/// every op it records (on a path from an input that wants a gradient), views counted with
/// their base.
fn eager_saved_bytes(g: &Graph, joint: &Joint, hints: &HashMap<Arc<str>, usize>) -> u64 {
    let mut requires = vec![false; g.len()];
    for &i in &joint.grads {
        requires[g.inputs()[i].1.index()] = true;
    }
    // the storage a value lives in: a view's is its base's
    let mut root: Vec<usize> = (0..g.len()).collect();
    let mut saved: HashSet<usize> = HashSet::new();
    for (id, node) in g.nodes().take(joint.forward_len) {
        let i = id.index();
        if node.op.kind() == OpKind::View {
            if let Some(Arg::Value(b)) = node.args.first() {
                root[i] = root[b.index()];
            }
        }
        if node.op == Op::Input {
            continue;
        }
        let records = node
            .args
            .iter()
            .any(|a| matches!(a, Arg::Value(v) if requires[v.index()]))
            && crate::joint::differentiable(node.ty.dtype)
            && !matches!(
                node.op.info().derivative,
                kiln_ir::ops::Derivative::NonDifferentiable
            );
        if !records {
            continue;
        }
        requires[i] = true;
        saved.insert(root[i]);
        for a in &node.args {
            if let Arg::Value(v) = a {
                saved.insert(root[v.index()]);
            }
        }
    }
    g.nodes()
        .filter(|(id, _)| saved.contains(&id.index()))
        .map(|(_, node)| bytes(&node.ty, hints))
        .sum()
}

/// Copies the nodes of `src` marked in `keep` into `dst` (in order), mapping operands
/// through `map` (pre-filled with the values `dst` already has).
fn copy_nodes(
    src: &Graph,
    dst: &mut Graph,
    keep: &[bool],
    map: &mut HashMap<NodeId, NodeId>,
) -> Result<(), PassError> {
    for (id, node) in src.nodes() {
        if !keep[id.index()] || map.contains_key(&id) {
            continue;
        }
        if node.op == Op::Input {
            return Err(err(format!("input %{} is not available here", id.index())));
        }
        let args: Vec<Arg> = node
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => map.get(v).map(|m| Arg::Value(*m)).ok_or_else(|| {
                    err(format!(
                        "%{} needs %{}, which is missing",
                        id.index(),
                        v.index()
                    ))
                }),
                Arg::Scalar(s) => Ok(Arg::Scalar(*s)),
            })
            .collect::<Result<_, _>>()?;
        let new = dst
            .add_op(node.op.clone(), &args, node.loc.clone())
            .map_err(|e| err(e.to_string()))?;
        map.insert(id, new);
    }
    Ok(())
}

/// The symbols `g`'s inputs do not bind but its nodes name.
fn unbound_symbols(g: &Graph) -> Vec<Arc<str>> {
    let mut bound: HashSet<Arc<str>> = HashSet::new();
    for (_, id) in g.inputs() {
        bound.extend(g.node(*id).ty.shape.symbols());
    }
    let mut out = Vec::new();
    for (_, node) in g.nodes() {
        for s in node.ty.shape.symbols() {
            if !bound.contains(&s) && !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// Splits `joint` into a forward and a backward graph (see the module docs).
pub fn partition(joint: &Joint, opts: &PartitionOptions) -> Result<Partition, PassError> {
    let g = &joint.graph;
    let n = g.len();
    let hints = &opts.hints;
    // which nodes depend on a tangent
    let mut tangent_dep = vec![false; n];
    for (_, id) in &g.inputs()[joint.primals..] {
        tangent_dep[id.index()] = true;
    }
    for (id, node) in g.nodes() {
        if node
            .args
            .iter()
            .any(|a| matches!(a, Arg::Value(v) if tangent_dep[v.index()]))
        {
            tangent_dep[id.index()] = true;
        }
    }
    let grad_outputs: Vec<NodeId> = g.outputs()[joint.outputs..].to_vec();
    let needed_bw = ancestors(g, &grad_outputs);

    let mut policy = Policy::Default;
    let mut saved = cut(g, joint, &tangent_dep, &needed_bw, policy, hints);
    if let Some(budget) = opts.memory_budget {
        let weigh =
            |s: &[NodeId]| -> u64 { s.iter().map(|id| bytes(&g.node(*id).ty, hints)).sum() };
        let limit = (weigh(&saved) as f64 * budget.max(0.0)) as u64;
        for p in [Policy::Reductions, Policy::Everything] {
            if weigh(&saved) <= limit {
                break;
            }
            policy = p;
            saved = cut(g, joint, &tangent_dep, &needed_bw, p, hints);
        }
    }
    // the backward must bind every symbol it names: save a forward input that carries it
    let primal_ids: Vec<NodeId> = g.inputs()[..joint.primals]
        .iter()
        .map(|(_, id)| *id)
        .collect();

    // the forward graph: the forward outputs and the saved values
    let mut fwd = Graph::new(g.name());
    let mut fmap: HashMap<NodeId, NodeId> = HashMap::new();
    for (name, id) in &g.inputs()[..joint.primals] {
        let new = fwd
            .add_input(name.clone(), g.node(*id).ty.clone())
            .map_err(|e| err(e.to_string()))?;
        fmap.insert(*id, new);
    }
    let fwd_outputs: Vec<NodeId> = g.outputs()[..joint.outputs].to_vec();
    let mut roots = fwd_outputs.clone();
    roots.extend(&saved);
    let keep = ancestors(g, &roots);
    copy_nodes(g, &mut fwd, &keep, &mut fmap)?;

    // where each saved value comes from
    let mut report_saved: Vec<SavedValue> = Vec::new();
    let mut extras: Vec<NodeId> = Vec::new();
    let add_saved = |id: NodeId, report_saved: &mut Vec<SavedValue>, extras: &mut Vec<NodeId>| {
        if report_saved.iter().any(|s| s.node == id) {
            return;
        }
        let from = if let Some(i) = primal_ids.iter().position(|p| *p == id) {
            SavedFrom::Input(i)
        } else if let Some(o) = fwd_outputs.iter().position(|o| *o == id) {
            SavedFrom::Output(o)
        } else {
            extras.push(id);
            SavedFrom::Extra(extras.len() - 1)
        };
        let node = g.node(id);
        report_saved.push(SavedValue {
            node: id,
            op: node.op.name().to_string(),
            ty: node.ty.clone(),
            bytes: bytes(&node.ty, hints),
            from,
            loc: node.loc.clone(),
        });
    };
    for &id in &saved {
        add_saved(id, &mut report_saved, &mut extras);
    }

    // the backward graph: saved values and tangents in, gradients out
    let build_backward = |report_saved: &[SavedValue]| -> Result<Graph, PassError> {
        let mut bwd = Graph::new(format!("{}_backward", g.name()));
        let mut bmap: HashMap<NodeId, NodeId> = HashMap::new();
        for (k, s) in report_saved.iter().enumerate() {
            let name = match s.from {
                SavedFrom::Input(i) => g.inputs()[i].0.clone(),
                _ => format!("saved{k}"),
            };
            let new = bwd
                .add_input(name, s.ty.clone())
                .map_err(|e| err(e.to_string()))?;
            bmap.insert(s.node, new);
        }
        for (name, id) in &g.inputs()[joint.primals..] {
            let new = bwd
                .add_input(name.clone(), g.node(*id).ty.clone())
                .map_err(|e| err(e.to_string()))?;
            bmap.insert(*id, new);
        }
        // recompute what is needed and not loaded
        let mut keep = vec![false; n];
        let mut stack = grad_outputs.clone();
        while let Some(id) = stack.pop() {
            if keep[id.index()] || bmap.contains_key(&id) {
                continue;
            }
            keep[id.index()] = true;
            for a in &g.node(id).args {
                if let Arg::Value(v) = a {
                    stack.push(*v);
                }
            }
        }
        copy_nodes(g, &mut bwd, &keep, &mut bmap)?;
        let outs = grad_outputs.iter().map(|o| bmap[o]).collect();
        bwd.set_outputs(outs).map_err(|e| err(e.to_string()))?;
        Ok(bwd)
    };
    let mut bwd = build_backward(&report_saved)?;
    // symbols the backward names but its inputs do not bind: pass a forward input with them
    for sym in unbound_symbols(&bwd) {
        let carrier = primal_ids
            .iter()
            .find(|id| g.node(**id).ty.shape.symbols().contains(&sym))
            .ok_or_else(|| err(format!("no input binds symbol {sym} for the backward")))?;
        add_saved(*carrier, &mut report_saved, &mut extras);
        bwd = build_backward(&report_saved)?;
    }
    let mut outs = fwd_outputs.iter().map(|o| fmap[o]).collect::<Vec<_>>();
    outs.extend(extras.iter().map(|e| fmap[e]));
    fwd.set_outputs(outs).map_err(|e| err(e.to_string()))?;
    kiln_ir::verify(&fwd).map_err(|e| err(format!("forward: {e}")))?;
    kiln_ir::verify(&bwd).map_err(|e| err(format!("backward: {e}")))?;

    // the report
    // a node of the backward that does not depend on a tangent was recomputed
    let n_tangents = joint.tangents.iter().flatten().count();
    let first_tangent = bwd.inputs().len() - n_tangents;
    let mut from_tangent = vec![false; bwd.len()];
    for (_, id) in &bwd.inputs()[first_tangent..] {
        from_tangent[id.index()] = true;
    }
    let mut recomputed: Vec<(String, usize)> = Vec::new();
    for (id, node) in bwd.nodes() {
        if node.op == Op::Input {
            continue;
        }
        if node
            .args
            .iter()
            .any(|a| matches!(a, Arg::Value(v) if from_tangent[v.index()]))
        {
            from_tangent[id.index()] = true;
            continue;
        }
        let name = node.op.name().to_string();
        match recomputed.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => recomputed.push((name, 1)),
        }
    }
    let saved_bytes = report_saved.iter().map(|s| s.bytes).sum();
    let saved_activation_bytes = report_saved
        .iter()
        .filter(|s| !matches!(s.from, SavedFrom::Input(_)))
        .map(|s| s.bytes)
        .sum();
    let report = PartitionReport {
        saved: report_saved,
        saved_bytes,
        saved_activation_bytes,
        eager_saved_bytes: eager_saved_bytes(g, joint, hints),
        recomputed,
        policy,
    };
    Ok(Partition {
        forward: fwd,
        backward: bwd,
        report,
    })
}
