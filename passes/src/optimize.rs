//! E-graph rewriting and fusion with egg: saturation and extraction.
//!
//! [`optimize`] loads a graph into an e-graph ([`crate::egraph::lang::TNode`] nodes, [`crate::egraph::analysis`] types
//! and constants), saturates it in two bounded phases (the rewrite rules of
//! [`crate::rules`], then the fusion rules of [`crate::egraph::fusion`], which only add group nodes the
//! rewrite rules do not match), extracts the cheapest program under the cost model of
//! [`crate::egraph::cost`], and writes it back as a [`Fused`] program: an IR graph and, as data, each
//! node's kernel (views and constants have none: they cost no kernel). It also gives the
//! e-graph's best program without groups (the simplified graph).
//!
//! egg's extraction sums costs over a tree, which charges a value read by several kernels
//! once per reader and lets a group have only one output. So the pipeline
//! (`crate::pipeline`'s `fuse` pass) compares the extracted program, as a scheduled
//! program, with greedy fusion of the simplified graph and keeps the cheaper; this module
//! neither schedules nor walks greedily.

use crate::egraph::analysis::{self, add_lit};
use crate::egraph::cost::KernelCost;
use crate::egraph::lang::TNode;
use crate::egraph::{fusion, TEGraph, TensorAnalysis};
use crate::fused::{Fused, KernelTag};
use crate::PassError;
use egg::{Extractor, Id, Language, Runner, SimpleScheduler, StopReason};
use kiln_ir::{Arg, Graph, NodeId, Op};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Limits and switches of [`optimize`].
#[derive(Clone, Debug)]
pub struct OptimizeOptions {
    /// add the fusion rules (else only simplify)
    pub fuse: bool,
    /// allow rewrites that change floating-point rounding
    pub fast_math: bool,
    /// stop saturating past this many e-nodes
    pub node_limit: usize,
    /// stop after this many iterations (per phase)
    pub iter_limit: usize,
    /// stop after this long (both phases together)
    pub time_limit: Duration,
    /// rewrite rules not to run, by name (`crate::rules`, `RULES.md`); an unknown name is a
    /// [`PassError::UnknownRule`]
    pub disabled_rules: Vec<String>,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        OptimizeOptions {
            fuse: true,
            fast_math: false,
            node_limit: 20_000,
            iter_limit: 30,
            // a safety net: the node and iteration limits stop first on every corpus graph,
            // which keeps results deterministic
            time_limit: Duration::from_secs(5),
            disabled_rules: Vec::new(),
        }
    }
}

/// What saturation did.
#[derive(Clone, Debug)]
pub struct OptimizeReport {
    /// why each phase stopped (`saturated`, or the limit that stopped it)
    pub stop_reasons: Vec<String>,
    /// e-nodes at the end
    pub enodes: usize,
    /// e-classes at the end
    pub eclasses: usize,
    /// the cost of the input graph as it was (every op its own kernel)
    pub cost_before: f64,
    /// the cost of the extracted program
    pub cost_after: f64,
    /// the cost of the input graph with every op its own kernel, ops as the e-graph's
    /// classes first hold them
    pub unfused_cost: f64,
    /// time spent
    pub elapsed: Duration,
    /// how often each rule fired (rewrite rules in their order, then the fusion rules), for
    /// the rules that fired; `KILN_LOGS=rules` logs it
    pub rules_fired: Vec<(String, usize)>,
}

/// Adds the applications each iteration of `runner` counted to `fired`, in `names` order.
fn count_fired<'a>(
    runner: &Runner<TNode, TensorAnalysis>,
    names: impl Iterator<Item = &'a str>,
    fired: &mut Vec<(String, usize)>,
) {
    for name in names {
        let n: usize = runner
            .iterations
            .iter()
            .filter_map(|it| it.applied.get(&egg::Symbol::from(name)))
            .sum();
        if n > 0 {
            fired.push((name.to_string(), n));
        }
    }
}

fn stop_reason(r: &Option<StopReason>) -> String {
    match r {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
        Some(StopReason::NodeLimit(n)) => format!("node limit ({n})"),
        Some(StopReason::TimeLimit(t)) => format!("time limit ({:.0} ms)", t * 1e3),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

/// Loads `g` into a fresh e-graph; returns it with the class of every node.
fn load(g: &Graph) -> Result<(TEGraph, HashMap<NodeId, Id>), PassError> {
    let mut analysis = TensorAnalysis::default();
    for (_, id) in g.inputs() {
        analysis.input_types.push(g.node(*id).ty.clone());
    }
    let mut eg = TEGraph::new(analysis);
    let mut class = HashMap::new();
    let inputs: HashMap<NodeId, u32> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (*id, i as u32))
        .collect();
    for (id, node) in g.nodes() {
        let c = if node.op == Op::Input {
            eg.add(TNode::Input(inputs[&id]))
        } else {
            let args: Vec<Id> = node
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => class[v],
                    Arg::Scalar(s) => add_lit(&mut eg, *s),
                })
                .collect();
            let c = analysis::add_op(&mut eg, &node.op, &args).ok_or_else(|| {
                PassError::Unsupported {
                    pass: "egraph",
                    reason: format!("node {id} ({}) does not type-check", node.op.name()),
                }
            })?;
            if let Some(loc) = &node.loc {
                eg.analysis.locs.push((c, loc.clone()));
            }
            c
        };
        class.insert(id, c);
    }
    eg.rebuild();
    Ok((eg, class))
}

/// What [`optimize`] gives: the extracted program and the simplified one.
#[derive(Clone, Debug)]
pub struct Optimized {
    /// the e-graph's extraction: simplified and, with `fuse`, fused into kernel groups
    pub extracted: Fused,
    /// the e-graph's best program without groups (the simplified graph)
    pub simplified: Graph,
    /// what saturation and extraction did
    pub report: OptimizeReport,
}

/// Simplifies (and, with `opts.fuse`, fuses) `g` in an e-graph and extracts the cheapest
/// program under the cost model.
pub fn optimize(g: &Graph, opts: &OptimizeOptions) -> Result<Optimized, PassError> {
    let start = Instant::now();
    let (eg, class) = load(g)?;
    let roots: Vec<Id> = g.outputs().iter().map(|o| class[o]).collect();
    let cost_before = {
        let cf = KernelCost::new(&eg, true);
        g.nodes()
            .filter(|(_, n)| n.op != Op::Input)
            .map(|(id, _)| {
                let c = eg.find(class[&id]);
                eg[c].nodes.first().map_or(0.0, |n| cf.own(n))
            })
            .sum::<f64>()
    };
    let simplify = crate::rules::select(opts.fast_math, &opts.disabled_rules)?;
    let half = opts.time_limit / 2;
    let runner = Runner::default()
        .with_scheduler(SimpleScheduler)
        .with_node_limit(opts.node_limit)
        .with_iter_limit(opts.iter_limit)
        .with_time_limit(half)
        .with_egraph(eg)
        .run(simplify.iter().map(|r| &r.rewrite));
    let mut fired = Vec::new();
    count_fired(&runner, simplify.iter().map(|r| r.name), &mut fired);
    let mut reasons = vec![format!(
        "simplify: {} after {} iterations, {:.1} ms",
        stop_reason(&runner.stop_reason),
        runner.iterations.len(),
        start.elapsed().as_secs_f64() * 1e3
    )];
    let mut eg = runner.egraph;
    if opts.fuse {
        // fusion adds only group nodes, which the simplification rules do not match:
        // after phase one saturated, they would find nothing new
        let all = fusion::fusion_rules();
        let left = opts
            .time_limit
            .saturating_sub(start.elapsed())
            .max(half / 4);
        let runner = Runner::default()
            .with_scheduler(SimpleScheduler)
            .with_node_limit(opts.node_limit)
            .with_iter_limit(opts.iter_limit)
            .with_time_limit(left)
            .with_egraph(eg)
            .run(all.iter().map(|r| r.rewrite()).collect::<Vec<_>>().iter());
        count_fired(&runner, all.iter().map(|r| r.name), &mut fired);
        reasons.push(format!(
            "fuse: {} after {} iterations, {} e-nodes, {:.1} ms",
            stop_reason(&runner.stop_reason),
            runner.iterations.len(),
            runner.egraph.total_number_of_nodes(),
            start.elapsed().as_secs_f64() * 1e3
        ));
        eg = runner.egraph;
    }
    let extractor = Extractor::new(&eg, KernelCost::for_extraction(&eg, true));
    let (extracted, cost_after) = emit(g, &eg, &extractor, &roots)?;
    let simplified = if opts.fuse {
        let plain = Extractor::new(&eg, KernelCost::for_extraction(&eg, false));
        emit(g, &eg, &plain, &roots)?.0.graph
    } else {
        extracted.graph.clone()
    };
    if crate::log::passes() {
        for r in &reasons {
            tracing::info!(target: "kiln::passes", "e-graph {r}");
        }
    }
    if crate::log::rules() {
        let list: Vec<String> = fired.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let list = if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        };
        tracing::info!(target: "kiln::rules", "@{}: rules fired: {list}", g.name());
    }
    kiln_ir::verify(&extracted.graph).map_err(|e| PassError::Verify {
        pass: "optimize",
        reason: e.to_string(),
    })?;
    let report = OptimizeReport {
        stop_reasons: reasons,
        enodes: eg.total_number_of_nodes(),
        eclasses: eg.number_of_classes(),
        cost_before,
        cost_after,
        unfused_cost: unfused_cost(g)?,
        elapsed: start.elapsed(),
        rules_fired: fired,
    };
    Ok(Optimized {
        extracted,
        simplified,
        report,
    })
}

/// The cost of `g` with every op its own kernel, under the e-graph's cost model.
fn unfused_cost(g: &Graph) -> Result<f64, PassError> {
    let (eg, class) = load(g)?;
    let cf = KernelCost::new(&eg, true);
    let mut cost = 0.0;
    for (id, node) in g.nodes() {
        if node.op == Op::Input {
            continue;
        }
        let c = eg.find(class[&id]);
        let en = eg[c]
            .nodes
            .iter()
            .find(|n| matches!(n, TNode::Op(..)))
            .cloned();
        cost += en.map_or(0.0, |n| cf.own(&n));
    }
    Ok(cost)
}

struct Emitter<'a, 'b> {
    eg: &'a TEGraph,
    ex: &'b Extractor<'a, KernelCost<'a>, TNode, TensorAnalysis>,
    out: Graph,
    inputs: Vec<NodeId>,
    memo: HashMap<Id, Arg>,
    kernels: usize,
    /// the kernel of each emitted node
    tags: Vec<(NodeId, KernelTag)>,
    /// the extracted program's cost, each class counted once
    cost: f64,
}

impl Emitter<'_, '_> {
    fn loc_of(&self, id: Id) -> Option<String> {
        let c = self.eg.find(id);
        self.eg
            .analysis
            .locs
            .iter()
            .find(|(k, _)| self.eg.find(*k) == c)
            .map(|(_, l)| l.clone())
    }

    /// Emits class `root` and everything it reads: operands first, in the order a
    /// left-to-right recursion would take, walked with an explicit stack (a 20,000-op
    /// chain overflowed the recursion), so [`Emitter::emit`] finds every operand emitted.
    fn emit_from(&mut self, root: Id) -> Result<Arg, PassError> {
        let mut stack = vec![(self.eg.find(root), false)];
        let mut expanded = std::collections::HashSet::new();
        while let Some((id, operands_done)) = stack.pop() {
            if self.memo.contains_key(&id) {
                continue;
            }
            if operands_done {
                self.emit(id)?;
                continue;
            }
            if !expanded.insert(id) {
                continue;
            }
            stack.push((id, true));
            let node = self.ex.find_best_node(id);
            for c in node.children().iter().rev() {
                let c = self.eg.find(*c);
                if !self.memo.contains_key(&c) {
                    stack.push((c, false));
                }
            }
        }
        self.emit(root)
    }

    fn emit(&mut self, id: Id) -> Result<Arg, PassError> {
        let id = self.eg.find(id);
        if let Some(a) = self.memo.get(&id) {
            return Ok(*a);
        }
        let node = self.ex.find_best_node(id).clone();
        self.cost += KernelCost::new(self.eg, true).own(&node);
        let bad = |e: kiln_ir::GraphError| PassError::Graph {
            pass: "optimize",
            source: e,
        };
        let arg = match &node {
            TNode::Input(n) => Arg::Value(self.inputs[*n as usize]),
            TNode::Lit(l) => Arg::Scalar(l.scalar()),
            TNode::Op(o, args) => {
                let args = args
                    .iter()
                    .map(|a| self.emit(*a))
                    .collect::<Result<Vec<_>, _>>()?;
                let op = o.expect_op().clone();
                let kernel = !(op.is_view() || op.is_creation());
                let kind = fusion::node_kind(&self.out, &op, &args);
                let n = self.out.add_op(op, &args, self.loc_of(id)).map_err(bad)?;
                if kernel {
                    self.tags.push((
                        n,
                        KernelTag {
                            id: self.kernels,
                            kind,
                        },
                    ));
                    self.kernels += 1;
                }
                Arg::Value(n)
            }
            TNode::Group(g, args) => {
                let args = args
                    .iter()
                    .map(|a| self.emit(*a))
                    .collect::<Result<Vec<_>, _>>()?;
                let body = self.eg.analysis.interner.groups[g.0 as usize].clone();
                let tag = KernelTag {
                    id: self.kernels,
                    kind: body.kind,
                };
                self.kernels += 1;
                // node ids are dense and in insertion order: the group's nodes are the
                // ones inlining adds (it reuses none of other kernels')
                let first = self.out.len();
                let out = fusion::inline_with(&mut self.out, &body.graph, &args, false)
                    .ok_or_else(|| PassError::Unsupported {
                        pass: "optimize",
                        reason: "a fused group's body did not re-type".into(),
                    })?;
                let added: Vec<NodeId> = self
                    .out
                    .nodes()
                    .map(|(i, _)| i)
                    .filter(|i| i.index() >= first)
                    .collect();
                self.tags.extend(added.into_iter().map(|i| (i, tag)));
                Arg::Value(out)
            }
        };
        self.memo.insert(id, arg);
        Ok(arg)
    }
}

fn emit<'a>(
    g: &Graph,
    eg: &'a TEGraph,
    ex: &Extractor<'a, KernelCost<'a>, TNode, TensorAnalysis>,
    roots: &[Id],
) -> Result<(Fused, f64), PassError> {
    let mut out = Graph::new(g.name());
    let mut inputs = Vec::new();
    for (name, id) in g.inputs() {
        inputs.push(
            out.add_input(name.clone(), g.node(*id).ty.clone())
                .map_err(|e| PassError::Graph {
                    pass: "optimize",
                    source: e,
                })?,
        );
    }
    let mut em = Emitter {
        eg,
        ex,
        out,
        inputs,
        memo: HashMap::new(),
        kernels: 0,
        tags: Vec::new(),
        cost: 0.0,
    };
    let mut outs = Vec::new();
    for r in roots {
        match em.emit_from(*r)? {
            Arg::Value(v) => outs.push(v),
            Arg::Scalar(s) => {
                return Err(PassError::Unsupported {
                    pass: "optimize",
                    reason: format!("an output became the scalar {s}"),
                })
            }
        }
    }
    em.out.set_outputs(outs).map_err(|e| PassError::Graph {
        pass: "optimize",
        source: e,
    })?;
    Ok((Fused::new(em.out, em.tags), em.cost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::text::parse_module;

    /// Extraction with the own costs computed up front (`KernelCost::for_extraction`) finds
    /// the same cost for every class, with and without groups, as costing each e-node when
    /// asked, over the corpus graphs' e-graphs after the fusion rules ran.
    #[test]
    fn precomputed_own_costs_extract_what_costing_on_demand_does() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
        let mut checked = 0;
        for name in [
            "bert_encoder_layer.kir",
            "block_workload.kir",
            "attention_causal.kir",
        ] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            for g in parse_module(&text).unwrap() {
                let (eg, _) = load(&g).unwrap();
                let rules = fusion::fusion_rules();
                let eg = Runner::default()
                    .with_scheduler(SimpleScheduler)
                    .with_iter_limit(4)
                    .with_egraph(eg)
                    .run(rules.iter().map(|r| r.rewrite()).collect::<Vec<_>>().iter())
                    .egraph;
                for groups in [true, false] {
                    let slow = Extractor::new(&eg, KernelCost::new(&eg, groups));
                    let fast = Extractor::new(&eg, KernelCost::for_extraction(&eg, groups));
                    for class in eg.classes() {
                        let (a, b) = (slow.find_best_cost(class.id), fast.find_best_cost(class.id));
                        assert_eq!(a.to_bits(), b.to_bits(), "{name} class {}", class.id);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100, "{checked} classes");
    }
}
