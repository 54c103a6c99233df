//! The fuzzer's checker and minifier against a deliberately wrong executor: the cpu
//! executor compiles every `exp` as `expm1` (a miscompile by exactly 1). Random graphs
//! that use `exp` must diverge on that executor alone, and the minifier must shrink each to
//! a handful of nodes that still holds an `exp` and still diverges the same way, while the
//! real executors agree on the small graph (the bug is the executor's, not the graph's).

use kiln::fuzz::minify::minify;
use kiln::fuzz::{check_graph, CheckOptions, Executor, Outcome, Sabotage};
use kiln::ir::gen::{build, Recipe};
use kiln::ir::text::{parse_graph, print_graph};
use kiln::ir::{Op, UnaryOp};
use kiln::Graph;
use std::sync::Arc;

/// Random graphs drawn; about one in sixty uses `exp`.
const SEEDS: u64 = 4000;

fn exp_as_expm1(g: &Graph) -> Graph {
    let text = print_graph(g).replace(" = exp ", " = expm1 ");
    parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn has_exp(g: &Graph) -> bool {
    g.nodes().any(|(_, n)| n.op == Op::Unary(UnaryOp::Exp))
}

fn options(seed: u64, grad: bool, sabotage: bool) -> CheckOptions {
    CheckOptions {
        executors: vec![Executor::Cpu, Executor::CpuUnfused],
        cases: CheckOptions::default_cases(seed),
        grad,
        sabotage: sabotage.then(|| Sabotage {
            executor: Executor::Cpu,
            rewrite: Arc::new(exp_as_expm1),
        }),
    }
}

#[test]
fn a_miscompiled_exp_is_found_and_minimised_to_a_few_nodes() {
    let mut shrunk = 0;
    for seed in 0..SEEDS {
        let recipe = Recipe::random(seed, 24, true, true);
        let g = build(&recipe);
        if !has_exp(&g) || g.nodes().count() < 10 {
            continue;
        }
        let grad = seed % 2 == 1;
        let opts = options(seed, grad, true);
        let Outcome::Diverged(d) = check_graph(&g, &opts) else {
            // exp's result never reached an output the checker compares (a discontinuous
            // consumer, or eager rejected the inputs): nothing to shrink
            continue;
        };
        assert_eq!(d.executor, Executor::Cpu, "graph {seed}: {d}");
        let (_, small, small_d) = minify(&recipe, &d, &opts, 300);
        assert_eq!(small_d.kind(), d.kind(), "graph {seed}");
        let (before, after) = (g.nodes().count(), small.nodes().count());
        assert!(
            has_exp(&small) && after <= 6 && after < before,
            "graph {seed}: {before} nodes minimised to {after}:\n{}",
            print_graph(&small)
        );
        assert!(matches!(check_graph(&small, &opts), Outcome::Diverged(_)));
        assert!(
            matches!(
                check_graph(&small, &options(seed, grad, false)),
                Outcome::Agree { .. }
            ),
            "graph {seed}: the small graph agrees without the sabotage:\n{}",
            print_graph(&small)
        );
        eprintln!("graph {seed}: {before} nodes -> {after}: {small_d}");
        shrunk += 1;
        if shrunk == 3 {
            return;
        }
    }
    panic!("only {shrunk} of {SEEDS} random graphs used exp and diverged");
}
