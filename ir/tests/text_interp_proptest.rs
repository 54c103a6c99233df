//! A reparsed graph computes exactly what the original computes: random well-formed graphs
//! are printed, parsed back and both are run by the interpreter on the same random inputs.

#[path = "common/graph_gen.rs"]
mod graph_gen;

use graph_gen::{arb_graph_with, GenConfig};
use kiln_ir::interp::{eval, Value};
use kiln_ir::text::{parse_graph, print_graph};
use kiln_ir::{rng, Dim, Graph};
use proptest::prelude::*;

/// Random inputs for `g`, with symbolic dims bound to small sizes.
fn inputs(g: &Graph, seed: u64) -> Vec<Value> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(k, (_, id))| {
            let ty = &g.node(*id).ty;
            let shape: Vec<usize> = ty
                .shape
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Const(n) => *n,
                    Dim::Sym(s) if s.as_ref() == "B" => 2,
                    Dim::Sym(_) => 3,
                })
                .collect();
            let n: usize = shape.iter().product();
            let data = (0..n as u64)
                .map(|i| 4.0 * rng::normal(seed + k as u64, i))
                .collect();
            Value::new(ty.dtype, shape, data).expect("sizes match")
        })
        .collect()
}

fn same_bits(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.dtype == y.dtype
                && x.shape == y.shape
                && x.data
                    .iter()
                    .zip(&y.data)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reparsed_graphs_compute_identical_values(g in arb_graph_with(GenConfig { symbolic: true, max_steps: 12 }), seed in 0u64..1000) {
        let reparsed = parse_graph(&print_graph(&g)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let x = inputs(&g, seed);
        match (eval(&g, &x), eval(&reparsed, &x)) {
            (Ok(a), Ok(b)) => prop_assert!(same_bits(&a, &b), "results differ for\n{}", print_graph(&g)),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "one run failed: {:?} vs {:?}", a.err(), b.err()),
        }
    }
}

#[test]
fn most_generated_graphs_evaluate() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = arb_graph_with(GenConfig {
        symbolic: true,
        max_steps: 12,
    });
    let mut ok = 0;
    for seed in 0..200 {
        let g = strategy.new_tree(&mut runner).expect("a graph").current();
        ok += eval(&g, &inputs(&g, seed)).is_ok() as usize;
    }
    assert!(ok >= 150, "only {ok} of 200 generated graphs evaluate");
}
