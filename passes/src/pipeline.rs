//! The pass pipeline: named passes from program to program ([`Fused`]: a graph and, once
//! fused, each node's kernel), the verifier after each (in tests and debug builds), and
//! `KILN_LOGS=passes` logging each pass's name, time and node counts (as `tracing` events
//! with target `kiln::passes`; `KILN_LOGS=rules` logs the rewrite rules that fired, target
//! `kiln::rules`).
//!
//! The `fuse` pass chooses the program: the e-graph's extraction ([`optimize`]), greedy
//! fusion of the simplified graph (both walks of [`crate::greedy`]), or every op its own
//! kernel, each costed as a scheduled program (each value written once, read once per
//! kernel), since egg's tree costs overcharge values read by several kernels.

use crate::decompose::{decompose_with, DecomposeOptions};
use crate::fused::Fused;
use crate::greedy::{greedy_fuse, greedy_fuse_any_operand};
use crate::optimize::{optimize, OptimizeOptions};
use crate::schedule::schedule;
use crate::PassError;
use kiln_ir::Graph;
use std::time::Instant;

/// Options shared by the passes.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// limits and switches of the e-graph passes
    pub egraph: OptimizeOptions,
    /// how `decompose` decomposes
    pub decompose: DecomposeOptions,
}

impl PassOptions {
    /// The default options for a backend that renders the composite ops `renders` accepts
    /// (`decompose` lowers the others).
    pub fn rendering(renders: crate::decompose::Renders) -> PassOptions {
        let mut o = PassOptions::default();
        o.decompose.renders = renders;
        o
    }
}

/// A pass: a named function from program to program.
#[derive(Clone, Copy)]
pub struct Pass {
    /// its name in `kiln opt --passes`
    pub name: &'static str,
    /// what it does, in one line
    pub about: &'static str,
    /// the transformation
    pub run: fn(&Fused, &PassOptions) -> Result<Fused, PassError>,
}

fn run_decompose(f: &Fused, o: &PassOptions) -> Result<Fused, PassError> {
    decompose_with(&f.graph, &o.decompose).map(Fused::plain)
}

/// True (with a log line) when `g` is too big for the e-graph: past a quarter of its node limit
/// the e-graph stops within its first iteration, after seconds, with a program worse than
/// greedy fusion's (a 5,000-op chain: 3.0 s, 100x greedy's cost), so `pass` runs without it.
fn too_big_for_egraph(g: &Graph, o: &OptimizeOptions, pass: &str) -> bool {
    let big = g.len() > o.node_limit / 4;
    if big {
        tracing::warn!(
            target: "kiln::passes",
            "{pass}: @{} has {} nodes, over a quarter of the e-graph's node limit ({}): greedy fusion \
             without the e-graph",
            g.name(),
            g.len(),
            o.node_limit
        );
    }
    big
}

fn run_simplify(f: &Fused, o: &PassOptions) -> Result<Fused, PassError> {
    if too_big_for_egraph(&f.graph, &o.egraph, "simplify") {
        return Ok(Fused::unfused(f.graph.clone()));
    }
    let opts = OptimizeOptions {
        fuse: false,
        ..o.egraph.clone()
    };
    let optimized = optimize(&f.graph, &opts)?;
    let r = &optimized.report;
    // tree costs overcharge a value shared by several kernels, which can make extraction
    // prefer recomputation that costs more as a DAG: keep the input as it was then
    if r.cost_after > r.cost_before && r.unfused_cost <= r.cost_after {
        return Ok(Fused::unfused(f.graph.clone()));
    }
    Ok(optimized.extracted)
}

/// The cost of a program as the scheduler lays it out (symbolic dims at 64).
fn scheduled_cost(f: &Fused) -> f64 {
    schedule(f).map(|s| s.cost(64)).unwrap_or(f64::INFINITY)
}

/// The cheaper of the two greedy walks of `g` (first operand; any operand), with its
/// scheduled cost.
fn cheaper_greedy_walk(g: &Graph) -> (Fused, f64) {
    [greedy_fuse(g), greedy_fuse_any_operand(g)]
        .into_iter()
        .map(|f| {
            let f = f.keep_f64_in_kernels().store_outside_column_reductions();
            let c = scheduled_cost(&f);
            (f, c)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("two candidates")
}

/// The cheaper of the two greedy walks of `g` and one kernel per op, by scheduled cost.
fn greedy_only(g: &Graph) -> (Fused, String) {
    let unfused = Fused::unfused(g.clone());
    let c_unfused = scheduled_cost(&unfused);
    let (best, c) = cheaper_greedy_walk(g);
    if c_unfused < c {
        (
            unfused,
            format!("every op its own kernel ({c_unfused:.3e})"),
        )
    } else {
        (best, format!("greedy fusion without the e-graph ({c:.3e})"))
    }
}

fn run_fuse(f: &Fused, o: &PassOptions) -> Result<Fused, PassError> {
    let start = Instant::now();
    if too_big_for_egraph(&f.graph, &o.egraph, "fuse") {
        let (best, why) = greedy_only(&f.graph);
        if crate::log::passes() {
            tracing::info!(
                target: "kiln::passes",
                "fuse: chose {why}, {:.1} ms",
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        return Ok(best);
    }
    let opts = OptimizeOptions {
        fuse: true,
        ..o.egraph.clone()
    };
    let optimized = optimize(&f.graph, &opts)?;
    let report = &optimized.report;
    // the greedy candidate: the cheaper walk of the simplified graph
    let (greedy, c_greedy) = cheaper_greedy_walk(&optimized.simplified);
    let extracted = optimized
        .extracted
        .keep_f64_in_kernels()
        .store_outside_column_reductions();
    let c_egraph = scheduled_cost(&extracted);
    let (mut best, why) = if c_greedy < c_egraph {
        (
            greedy,
            format!("greedy fusion of the simplified graph ({c_greedy:.3e} vs {c_egraph:.3e})"),
        )
    } else {
        (
            extracted,
            format!("e-graph ({c_egraph:.3e}; greedy {c_greedy:.3e})"),
        )
    };
    let mut cost = report.cost_after.min(c_egraph.min(c_greedy));
    let mut why = why;
    // every op its own kernel, when nothing above beats the input as it was
    if cost > report.cost_before && report.unfused_cost <= cost {
        best = Fused::unfused(f.graph.clone());
        cost = report.unfused_cost;
        why = format!("every op its own kernel ({cost:.3e})");
    }
    if crate::log::passes() {
        tracing::info!(
            target: "kiln::passes",
            "fuse: chose {why}, {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(best)
}

fn run_grad(f: &Fused, _: &PassOptions) -> Result<Fused, PassError> {
    crate::grad::grad(&f.graph).map(Fused::plain)
}

/// Every pass, in pipeline order.
pub const PASSES: &[Pass] = &[
    Pass {
        name: "grad",
        about: "the joint graph that also returns d(out0)/d(input) for every floating input",
        run: run_grad,
    },
    Pass {
        name: "decompose",
        about: "composite ops (softmax, layer_norm, gelu, linear, ...) to primitives",
        run: run_decompose,
    },
    Pass {
        name: "simplify",
        about: "e-graph: exact identities, constant folding, common subexpressions",
        run: run_simplify,
    },
    Pass {
        name: "fuse",
        about: "e-graph: simplify and fuse into kernel groups by bytes and launches",
        run: run_fuse,
    },
];

/// The pass called `name`.
pub fn pass(name: &str) -> Result<Pass, PassError> {
    PASSES
        .iter()
        .copied()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            PassError::UnknownPass(
                name.to_string(),
                PASSES.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            )
        })
}

/// Runs the passes named in `names` in order on `g`, verifying after each one when `verify`
/// (and always in debug builds and tests).
pub fn run_passes(
    g: &Graph,
    names: &[&str],
    opts: &PassOptions,
    verify: bool,
) -> Result<Fused, PassError> {
    let mut cur = Fused::plain(g.clone());
    for name in names {
        let p = pass(name)?;
        let start = Instant::now();
        let before = cur.graph.len();
        cur = (p.run)(&cur, opts)?;
        if crate::log::passes() {
            tracing::info!(
                target: "kiln::passes",
                "{}: {:.2} ms, {} -> {} nodes",
                p.name,
                start.elapsed().as_secs_f64() * 1e3,
                before,
                cur.graph.len()
            );
        }
        if verify || cfg!(debug_assertions) {
            kiln_ir::verify(&cur.graph).map_err(|e| PassError::Verify {
                pass: p.name,
                reason: e.to_string(),
            })?;
        }
    }
    Ok(cur)
}

/// The pipeline up to each stage `kiln dump --stage` prints.
pub fn stage_passes(stage: &str) -> Option<&'static [&'static str]> {
    Some(match stage {
        "traced" => &[],
        "decomposed" => &["decompose"],
        "optimized" | "scheduled" => &["decompose", "fuse"],
        "grad" => &["grad"],
        _ => return None,
    })
}
