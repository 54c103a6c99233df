//! Scheduling: the optimised graph (each node tagged with its kernel by
//! [`crate::optimize::optimize`]) becomes a list of kernel groups in a backend-neutral form —
//! kind, iteration space, inputs, outputs and body — in execution order, plus the memory
//! plan of the values kernels write.
//!
//! The textual form is a module of graphs, one per kernel, each after a comment line with
//! its kind, iteration space, reads and writes; it parses as kiln IR, so a kernel can be
//! cut out and run on its own. A trailing comment reports the memory plan.

use crate::fused::{Fused, GroupKind};
use crate::kernel_order;
use crate::memory::{plan_memory, BufferRequest, MemoryPlan, SizeExpr};
use crate::PassError;
use kiln_ir::{Arg, Graph, NodeId, Op, TensorType};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// One kernel group.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// its number in the optimised graph's tags
    pub id: usize,
    /// the loop nest it becomes
    pub kind: GroupKind,
    /// its nodes, in order
    pub nodes: Vec<NodeId>,
    /// values it reads from memory (graph inputs, views, other kernels' outputs)
    pub inputs: Vec<NodeId>,
    /// values it writes (used after it, or returned)
    pub outputs: Vec<NodeId>,
    /// the iteration space: the largest type among its nodes' operands and results
    pub space: TensorType,
    /// the kernel as a graph of its own (inputs `%`-named as in the optimised graph)
    pub body: Graph,
}

/// A scheduled program.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// the optimised graph the kernels come from
    pub graph: Graph,
    /// the kernels in execution order
    pub kernels: Vec<Kernel>,
    /// the memory plan of the values kernels write (requests indexed like `values`)
    pub memory: MemoryPlan,
    /// the buffer requests the plan answers
    pub requests: Vec<BufferRequest>,
}

fn numel_hint(t: &TensorType) -> f64 {
    t.shape
        .dims()
        .iter()
        .map(|d| d.as_const().map_or(64.0, |c| c as f64))
        .product()
}

/// Fills (`full`, no kernel of their own) that only an `index_add` reads, as its base, each
/// with that `index_add`: the scheduler puts the two in one kernel, where the eager kernels
/// add into the fill in place (an embedding's gradient: zeros of the whole table and a
/// scatter of the rows used) instead of filling one buffer and copying it into another.
fn fills_of_index_adds(f: &Fused) -> HashMap<NodeId, NodeId> {
    let g = &f.graph;
    let mut fills = HashMap::new();
    for (id, n) in g.nodes() {
        if !matches!(n.op, Op::IndexAdd { .. }) {
            continue;
        }
        let Some(Arg::Value(x)) = n.args.first() else {
            continue;
        };
        let only_base =
            g.users(*x) == [id] && n.args.iter().filter(|a| **a == Arg::Value(*x)).count() == 1;
        if matches!(g.node(*x).op, Op::Full { .. })
            && f.kernel(*x).is_none()
            && f.kernel(id).is_none_or(|t| t.kind == GroupKind::Copy)
            && only_base
            && !g.outputs().contains(x)
        {
            fills.insert(*x, id);
        }
    }
    fills
}

/// Schedules a fused program. Ops without a kernel (constants, or every op of a program
/// that was never fused) become kernels of their own unless they are views, or fills
/// an `index_add` adds into (see `fills_of_index_adds`).
pub fn schedule(f: &Fused) -> Result<Schedule, PassError> {
    let g = &f.graph;
    let mut tag: HashMap<NodeId, (usize, GroupKind)> = HashMap::new();
    let mut next = g
        .nodes()
        .filter_map(|(id, _)| f.kernel(id))
        .map(|t| t.id + 1)
        .max()
        .unwrap_or(0);
    let fills = fills_of_index_adds(f);
    for (id, n) in g.nodes() {
        if n.op == Op::Input || n.op.is_view() || fills.contains_key(&id) {
            continue;
        }
        let t = match f.kernel(id) {
            Some(t) => (t.id, t.kind),
            None => {
                next += 1;
                (next - 1, GroupKind::Copy)
            }
        };
        tag.insert(id, t);
    }
    for (fill, index_add) in &fills {
        let t = tag[index_add];
        tag.insert(*fill, t);
    }
    // kernels in order of their first node
    let mut order: Vec<usize> = Vec::new();
    let mut members: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    for (id, _) in g.nodes() {
        if let Some((k, _)) = tag.get(&id) {
            if !members.contains_key(k) {
                order.push(*k);
            }
            members.entry(*k).or_default().push(id);
        }
    }
    let outputs: Vec<NodeId> = g.outputs().to_vec();
    let mut kernels = Vec::new();
    for k in order {
        let nodes = members[&k].clone();
        let kind = tag[&nodes[0]].1;
        let inside = |v: &NodeId| tag.get(v).is_some_and(|(kk, _)| *kk == k);
        let mut inputs: Vec<NodeId> = Vec::new();
        let mut space = g.node(nodes[0]).ty.clone();
        for id in &nodes {
            let n = g.node(*id);
            if numel_hint(&n.ty) > numel_hint(&space) {
                space = n.ty.clone();
            }
            for a in &n.args {
                if let Arg::Value(v) = a {
                    if numel_hint(&g.node(*v).ty) > numel_hint(&space) {
                        space = g.node(*v).ty.clone();
                    }
                    if !inside(v) && !inputs.contains(v) {
                        inputs.push(*v);
                    }
                }
            }
        }
        let kernel_outputs: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|id| outputs.contains(id) || g.users(*id).iter().any(|u| !inside(u)))
            .collect();
        let body = kernel_graph(g, k, kind, &nodes, &inputs, &kernel_outputs)?;
        kernels.push(Kernel {
            id: k,
            kind,
            nodes,
            inputs,
            outputs: kernel_outputs,
            space,
            body,
        });
    }
    // the order whose memory plan is smaller (on a tie, without producers moved late)
    let ordered = kernel_order::topological(g, kernels)?;
    let sunk = kernel_order::sink_producers(g, ordered.clone());
    let (requests, memory) = plan(g, &ordered);
    let (sunk_requests, sunk_memory) = plan(g, &sunk);
    let at = |_: &str| Some(64);
    let (kernels, requests, memory) =
        match (memory.planned_bytes(&at), sunk_memory.planned_bytes(&at)) {
            (Some(o), Some(s)) if s < o => (sunk, sunk_requests, sunk_memory),
            _ => (ordered, requests, memory),
        };
    Ok(Schedule {
        graph: g.clone(),
        kernels,
        memory,
        requests,
    })
}

/// The memory plan: each value a kernel writes lives from its kernel to the last kernel
/// that reads it (directly or through views); graph outputs are pinned.
fn plan(g: &Graph, kernels: &[Kernel]) -> (Vec<BufferRequest>, MemoryPlan) {
    // a view's reads are reads of what it views
    let mut base: HashMap<NodeId, NodeId> = HashMap::new();
    for (id, n) in g.nodes() {
        if n.op.is_view() {
            if let Some(Arg::Value(v)) = n.args.first() {
                let b = base.get(v).copied().unwrap_or(*v);
                base.insert(id, b);
            }
        }
    }
    let root = |v: NodeId| base.get(&v).copied().unwrap_or(v);
    let mut last: HashMap<NodeId, usize> = HashMap::new();
    for (step, k) in kernels.iter().enumerate() {
        for i in &k.inputs {
            last.insert(root(*i), step);
        }
    }
    let outputs: Vec<NodeId> = g.outputs().iter().map(|o| root(*o)).collect();
    let mut requests = Vec::new();
    for (step, k) in kernels.iter().enumerate() {
        for o in &k.outputs {
            requests.push(BufferRequest {
                value: o.index(),
                bytes: SizeExpr::of_type(&g.node(*o).ty),
                def: step,
                last_use: last.get(o).copied().unwrap_or(step),
                pinned: outputs.contains(o),
            });
        }
    }
    let plan = plan_memory(&requests);
    (requests, plan)
}

/// Kernel `k`'s body: `nodes` of `g` (in order) as a graph of their own, reading `inputs`
/// (named as in `g`, or `v<index>`) and returning `outputs`.
pub fn kernel_graph(
    g: &Graph,
    k: usize,
    kind: GroupKind,
    nodes: &[NodeId],
    inputs: &[NodeId],
    outputs: &[NodeId],
) -> Result<Graph, PassError> {
    let bad = |e| PassError::Graph {
        pass: "schedule",
        source: e,
    };
    let mut out = Graph::new(format!("k{k}_{}", kind.name()));
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    let named: std::collections::HashSet<&str> =
        inputs.iter().filter_map(|v| g.input_name(*v)).collect();
    for v in inputs {
        let name = match g.input_name(*v) {
            Some(n) => n.to_string(),
            // a computed value: `v<index>`, with `_` appended past any graph input of that name
            None => {
                let mut n = format!("v{}", v.index());
                while named.contains(n.as_str()) {
                    n.push('_');
                }
                n
            }
        };
        map.insert(*v, out.add_input(name, g.node(*v).ty.clone()).map_err(bad)?);
    }
    for id in nodes {
        let n = g.node(*id);
        let args: Vec<Arg> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => Arg::Value(map[v]),
                s => *s,
            })
            .collect();
        let loc = n.loc.clone();
        map.insert(*id, out.add_op(n.op.clone(), &args, loc).map_err(bad)?);
    }
    out.set_outputs(outputs.iter().map(|o| map[o]).collect())
        .map_err(bad)?;
    Ok(out)
}

impl Schedule {
    /// The cost model's figure for this program: bytes moved plus a launch
    /// ([`crate::egraph::cost::LAUNCH_BYTES`]) per kernel, symbolic dims at `hint`.
    pub fn cost(&self, hint: u64) -> f64 {
        self.bytes_moved(hint) as f64
            + self.kernels.len() as f64 * crate::egraph::cost::LAUNCH_BYTES
    }

    /// Bytes the kernels move (each input read once, each output written once), with
    /// symbolic dims at `hint`.
    pub fn bytes_moved(&self, hint: u64) -> u64 {
        let bind = |_: &str| Some(hint);
        let size = |v: &NodeId| {
            SizeExpr::of_type(&self.graph.node(*v).ty)
                .eval(&bind)
                .unwrap_or(0)
        };
        self.kernels
            .iter()
            .map(|k| {
                k.inputs.iter().map(size).sum::<u64>() + k.outputs.iter().map(size).sum::<u64>()
            })
            .sum()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |v: &NodeId| {
            self.graph
                .input_name(*v)
                .map(|n| format!("%{n}"))
                .unwrap_or_else(|| format!("%v{}", v.index()))
        };
        for k in &self.kernels {
            let reads: Vec<String> = k.inputs.iter().map(name).collect();
            let writes: Vec<String> = k.outputs.iter().map(name).collect();
            writeln!(
                f,
                "# kernel k{}: {} over {}; reads {}; writes {}",
                k.id,
                k.kind.name(),
                k.space,
                reads.join(", "),
                writes.join(", ")
            )?;
            writeln!(f, "{}", k.body)?;
        }
        let bind = |_: &str| Some(64u64);
        let mib = |b: Option<u64>| {
            b.map_or("?".to_string(), |b| {
                format!("{:.2} MiB", b as f64 / 1048576.0)
            })
        };
        writeln!(
            f,
            "# memory: {} kernel(s); {} intermediate value(s) in {} buffer(s): {} planned for \
             {} live at most, vs {} with one buffer per value (symbols at 64)",
            self.kernels.len(),
            self.requests.iter().filter(|r| !r.pinned).count(),
            self.memory.buffer_count(),
            mib(self.memory.planned_bytes(&bind)),
            mib(MemoryPlan::peak_live_bytes(&self.requests, &bind)),
            mib(MemoryPlan::naive_bytes(&self.requests, &bind)),
        )
    }
}
