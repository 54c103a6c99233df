//! The hand-written corpus in `tests/corpus/*.kir` is in canonical form: parsing and
//! printing each file gives it back byte for byte, and every graph verifies.

use kiln_ir::interp::{eval, Value};
use kiln_ir::text::{parse_graph, parse_module, print_graph, print_module};
use kiln_ir::{verify, Arg, BinaryOp, DType, Domain, Graph, Op, Shape, TensorType, UnaryOp};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/corpus exists")
        .map(|e| e.expect("readable corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable corpus file");
            (p, text)
        })
        .collect()
}

fn parse(path: &Path, text: &str) -> Vec<Graph> {
    parse_module(text).unwrap_or_else(|e| panic!("{}:{e}", path.display()))
}

#[test]
fn corpus_is_large_enough() {
    assert!(corpus().len() >= 18, "only {} corpus files", corpus().len());
}

#[test]
fn print_of_parse_is_identity() {
    for (path, text) in corpus() {
        let printed = print_module(&parse(&path, &text));
        assert_eq!(printed, text, "{} is not canonical", path.display());
    }
}

#[test]
fn parsed_graphs_verify_and_reparse_one_by_one() {
    for (path, text) in corpus() {
        for g in parse(&path, &text) {
            verify(&g).unwrap_or_else(|e| panic!("{}: @{}: {e}", path.display(), g.name()));
            let one = print_graph(&g);
            assert_eq!(g.to_string(), one);
            let again = parse_graph(&one).unwrap_or_else(|e| panic!("{e}\n{one}"));
            assert_eq!(print_graph(&again), one);
        }
    }
}

#[test]
fn corpus_uses_every_op() {
    let mut used = BTreeSet::new();
    for (path, text) in corpus() {
        for g in parse(&path, &text) {
            used.extend(g.nodes().map(|(_, n)| n.op.name()));
        }
    }
    // every row of the op table but `input`, which is never an instruction, and the
    // attribute-free pointwise rows, which `every_pointwise_row_as_a_one_op_graph` writes
    // as graphs itself (so a new one needs no corpus edit)
    let generated: BTreeSet<&str> = UnaryOp::ALL
        .iter()
        .map(|u| u.name())
        .chain(BinaryOp::ALL.iter().map(|b| b.name()))
        .collect();
    let all: Vec<&str> = kiln_ir::ops::rows()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| *n != "input" && !generated.contains(n))
        .collect();
    let missing: Vec<&str> = all.into_iter().filter(|n| !used.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "ops missing from the corpus: {missing:?}"
    );
}

/// Sample operands from an op's test domain (integers for integer-only ops).
fn domain_values(d: Domain) -> (DType, Vec<f64>) {
    match d {
        Domain::Real => (
            DType::F32,
            vec![-1.5, -0.0, 0.0, 2.5, f64::INFINITY, f64::NAN],
        ),
        Domain::Positive => (DType::F32, vec![0.5, 1.5, 2.5, 7.0, 1e-3, 100.0]),
        Domain::AboveMinusOne => (DType::F32, vec![-0.5, 0.5, 2.0, 1e-4, 3.0, -0.9]),
        Domain::Small => (DType::F32, vec![-2.0, 0.5, 2.0, -0.25, 1.0, 3.0]),
        Domain::NonZero => (DType::F32, vec![-1.5, 0.5, 2.5, -3.0, 4.0, 0.25]),
        Domain::Integer => (DType::I32, vec![-3.0, 0.0, 5.0, 7.0, -8.0, 1.0]),
    }
}

/// Every attribute-free pointwise row (the unary and binary families) as a one-op graph
/// built from its row: it prints, parses back to the same text, verifies, and the
/// interpreter gives the row's f64 reference rounded to the result dtype. A new row is
/// covered without an edit here or in the corpus.
#[test]
fn every_pointwise_row_as_a_one_op_graph() {
    let check = |op: Op, doms: &[Domain]| {
        let mut g = Graph::new("one");
        let mut args = Vec::new();
        let mut inputs = Vec::new();
        for (i, &d) in doms.iter().enumerate() {
            let (dtype, data) = domain_values(d);
            let ty = TensorType::new(dtype, Shape::of(&[data.len()]));
            args.push(Arg::Value(g.add_input(format!("x{i}"), ty).unwrap()));
            inputs.push(Value::new(dtype, vec![data.len()], data).unwrap());
        }
        let y = g
            .add_op(op.clone(), &args, None)
            .unwrap_or_else(|e| panic!("{op}: {e}"));
        g.set_outputs(vec![y]).unwrap();
        verify(&g).unwrap_or_else(|e| panic!("{op}: {e}"));
        let text = print_graph(&g);
        let back = parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(print_graph(&back), text);
        let got = eval(&back, &inputs).unwrap_or_else(|e| panic!("{op}: {e}"));
        let ty = &back.node(y).ty;
        let want: Vec<f64> = (0..inputs[0].data.len())
            .map(|k| {
                let a = inputs[0].data[k];
                match &op {
                    Op::Unary(u) => u.eval_f64(a),
                    Op::Binary(b) => b.eval_f64(a, inputs[1].data[k]),
                    _ => unreachable!(),
                }
            })
            .collect();
        let want = Value::new(ty.dtype, vec![want.len()], want).unwrap();
        for (k, (w, x)) in want.data.iter().zip(&got[0].data).enumerate() {
            assert!(
                w.to_bits() == x.to_bits() || (w.is_nan() && x.is_nan()),
                "{op} element {k}: interpreter {x} vs reference {w}\n{text}"
            );
        }
    };
    for u in UnaryOp::ALL {
        check(Op::Unary(u), &u.info().domain[..1]);
    }
    for b in BinaryOp::ALL {
        let d = b.info().domain;
        check(Op::Binary(b), &[d[0], *d.get(1).unwrap_or(&d[0])]);
    }
}

#[test]
fn blank_lines_and_comments_are_not_canonical_but_parse() {
    let text = "# a module\n\ngraph @g(%x: f32[2]) -> f32[2] {  # header\n\n  # body comment\n  %a = relu %x : f32[2]   #   here.rs:1:2  \n  return %a\n}\n# trailing\n";
    let g = parse_graph(text).expect("parses");
    assert_eq!(
        print_graph(&g),
        "graph @g(%x: f32[2]) -> f32[2] {\n  %0 = relu %x                             : f32[2]        # here.rs:1:2\n  return %0\n}\n"
    );
}
