//! Every graph of the text-format corpus (`ir/tests/corpus/*.kir`) runs through the eager
//! runtime (`kiln::graph_exec`) and through the interpreter on the same random inputs, with
//! symbolic dims bound to small sizes, and the outputs agree.

use kiln::ir::interp::{eval, Value};
use kiln_tests::{compare, corpus, corpus_inputs, tolerance, value};

#[test]
fn corpus_graphs_agree() {
    let mut checked = 0;
    for (name, g) in corpus() {
        let x = corpus_inputs(&g, 17);
        let values: Vec<Value> = x.iter().map(value).collect();
        let eager =
            kiln::graph_exec::run_graph(&g, &x).unwrap_or_else(|e| panic!("{name}: eager: {e}"));
        let oracle = eval(&g, &values).unwrap_or_else(|e| panic!("{name}: interpreter: {e}"));
        for (i, (e, o)) in eager.iter().zip(&oracle).enumerate() {
            assert_eq!(
                (e.dtype(), e.shape()),
                (o.dtype, o.shape.as_slice()),
                "{name} output {i}"
            );
            let tol = tolerance(e.dtype(), true);
            // Chains of ops compound rounding: allow a few ulps more than a single op.
            let tol = (tol.0 * 10.0, tol.1 * 10.0);
            compare(
                &format!("{name} output {i}"),
                &e.to_vec_f64().unwrap(),
                &o.data,
                tol,
            )
            .unwrap();
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} corpus graphs");
}
