//! Every graph of the text-format corpus (`ir/tests/corpus/*.kir`) runs through the eager
//! runtime (`kiln::graph_exec`) and through the interpreter on the same random inputs, with
//! symbolic dims bound to small sizes, and the outputs agree.

use kiln::ir::interp::{eval, Value};
use kiln::ir::text::parse_module;
use kiln::{DType, Dim, Graph, Tensor};
use kiln_tests::{compare, tolerance};

fn inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
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
                    // Distinct small sizes per symbol, so that a mix-up of two symbols shows.
                    Dim::Sym(s) => 2 + s.bytes().map(usize::from).sum::<usize>() % 4,
                })
                .collect();
            let s = seed + k as u64;
            match ty.dtype {
                // Integer inputs are often indices: keep them valid for any table of size ≥ 2.
                DType::I32 | DType::I64 => (&Tensor::rand(&shape, DType::F64, s).unwrap() * 2.0)
                    .unwrap()
                    .cast(ty.dtype)
                    .unwrap(),
                DType::Bool => Tensor::rand(&shape, DType::F32, s)
                    .unwrap()
                    .lt(0.5)
                    .unwrap(),
                d => Tensor::randn(&shape, d, s).unwrap(),
            }
        })
        .collect()
}

#[test]
fn corpus_graphs_agree() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut checked = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for g in parse_module(&text).unwrap() {
            let name = format!("{}:@{}", f.file_name().unwrap().to_string_lossy(), g.name());
            let x = inputs(&g, 17);
            let values: Vec<Value> = x
                .iter()
                .map(|t| {
                    Value::new(t.dtype(), t.shape().to_vec(), t.to_vec_f64().unwrap()).unwrap()
                })
                .collect();
            let eager = kiln::graph_exec::run_graph(&g, &x)
                .unwrap_or_else(|e| panic!("{name}: eager: {e}"));
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
    }
    assert!(checked >= 40, "only {checked} corpus graphs");
}
