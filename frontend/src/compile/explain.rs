//! [`ExplainReport`]: what compiling a function captured, like `torch._dynamo.explain`.

use super::guards::Guards;
use super::stats::CompileStats;
use super::tracer::GraphBreak;
use kiln_codegen::cpu::c_tier::KernelTier;
use kiln_ir::{Graph, Op};
use kiln_passes::partition::PartitionReport;
use std::fmt;

/// The graphs a call captured, its graph breaks, the guards of each cache entry, and the
/// tier each generated CPU kernel runs.
#[derive(Clone, Debug)]
pub struct ExplainReport {
    /// the compiled function's name
    pub name: String,
    /// the captured graphs, in execution order
    pub graphs: Vec<Graph>,
    /// the graph breaks, in order, with reasons and source lines
    pub breaks: Vec<GraphBreak>,
    /// each cache entry's guards
    pub guards: Vec<Guards>,
    /// the compiled function's counters, when known
    pub stats: Option<CompileStats>,
    /// for each cache entry compiled for gradients: what its forward saves for the
    /// backward (each tensor with its size, the total against eager autograd's) and what
    /// the backward recomputes
    pub partitions: Vec<PartitionReport>,
    /// the cpu backend: each generated kernel specialisation compiled so far with the tier
    /// it runs (C or Cranelift) and why (see [`crate::TierPolicy`])
    pub tiers: Vec<KernelTier>,
}

impl ExplainReport {
    /// The number of graphs.
    pub fn graph_count(&self) -> usize {
        self.graphs.len()
    }

    /// The number of graph breaks.
    pub fn break_count(&self) -> usize {
        self.breaks.len()
    }

    /// The number of ops (nodes other than inputs) of each graph.
    pub fn ops_per_graph(&self) -> Vec<usize> {
        self.graphs
            .iter()
            .map(|g| g.nodes().filter(|(_, n)| n.op != Op::Input).count())
            .collect()
    }
}

impl fmt::Display for ExplainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "@{}: {} graph(s), {} graph break(s)",
            self.name,
            self.graph_count(),
            self.break_count()
        )?;
        for (i, (g, ops)) in self.graphs.iter().zip(self.ops_per_graph()).enumerate() {
            writeln!(f, "graph {i} (@{}): {ops} op(s)", g.name())?;
        }
        for (i, b) in self.breaks.iter().enumerate() {
            writeln!(f, "break {i}: {b}")?;
        }
        for (i, g) in self.guards.iter().enumerate() {
            writeln!(f, "cache entry {i} guards: {g}")?;
        }
        if let Some(s) = &self.stats {
            writeln!(
                f,
                "compiles: {}, traces: {}, recompiles: {}",
                s.compiles, s.traces, s.recompiles
            )?;
        }
        for (i, p) in self.partitions.iter().enumerate() {
            writeln!(f, "partition {i}: {p}")?;
        }
        for t in &self.tiers {
            writeln!(f, "tier: {t}")?;
        }
        for g in &self.graphs {
            write!(f, "\n{g}")?;
        }
        Ok(())
    }
}
