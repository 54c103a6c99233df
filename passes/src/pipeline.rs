//! The pass pipeline: named passes from graph to graph, the verifier after each (in tests
//! and debug builds), and `KILN_LOGS=passes` logging each pass's name, time and node
//! counts (as `tracing` events with target `kiln::passes`; `KILN_LOGS=rules` logs the
//! rewrite rules that fired, target `kiln::rules`).

use crate::decompose::{decompose_with, DecomposeOptions};
use crate::egraph::{optimize, OptimizeOptions};
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

/// A pass: a named function from graph to graph.
#[derive(Clone, Copy)]
pub struct Pass {
    /// its name in `kiln opt --passes`
    pub name: &'static str,
    /// what it does, in one line
    pub about: &'static str,
    /// the transformation
    pub run: fn(&Graph, &PassOptions) -> Result<Graph, PassError>,
}

fn run_decompose(g: &Graph, o: &PassOptions) -> Result<Graph, PassError> {
    decompose_with(g, &o.decompose)
}

fn run_simplify(g: &Graph, o: &PassOptions) -> Result<Graph, PassError> {
    let opts = OptimizeOptions {
        fuse: false,
        ..o.egraph.clone()
    };
    Ok(optimize(g, &opts)?.0)
}

fn run_fuse(g: &Graph, o: &PassOptions) -> Result<Graph, PassError> {
    let opts = OptimizeOptions {
        fuse: true,
        ..o.egraph.clone()
    };
    Ok(optimize(g, &opts)?.0)
}

/// Every pass, in pipeline order.
pub const PASSES: &[Pass] = &[
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

/// Runs the passes named in `names` in order, verifying after each one when `verify`.
pub fn run_passes(
    g: &Graph,
    names: &[&str],
    opts: &PassOptions,
    verify: bool,
) -> Result<Graph, PassError> {
    let mut cur = g.clone();
    for name in names {
        let p = pass(name)?;
        let start = Instant::now();
        let before = cur.len();
        cur = (p.run)(&cur, opts)?;
        if logging() {
            tracing::info!(
                target: "kiln::passes",
                "{}: {:.2} ms, {} -> {} nodes",
                p.name,
                start.elapsed().as_secs_f64() * 1e3,
                before,
                cur.len()
            );
        }
        if verify || cfg!(debug_assertions) {
            kiln_ir::verify(&cur).map_err(|e| PassError::Verify {
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
        _ => return None,
    })
}

/// True when `KILN_LOGS` names `passes` (or `all`).
pub fn logging() -> bool {
    logs("passes")
}

/// True when `KILN_LOGS` names `rules` (or `all`): each optimisation logs which rewrite
/// rules fired how often (target `kiln::rules`).
pub fn logging_rules() -> bool {
    logs("rules")
}

/// True when `KILN_LOGS` (read once) names `category` or `all`.
fn logs(category: &str) -> bool {
    static ON: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        std::env::var("KILN_LOGS")
            .map(|v| v.split(',').map(|c| c.trim().to_string()).collect())
            .unwrap_or_default()
    })
    .iter()
    .any(|c| c == category || c == "all")
}
