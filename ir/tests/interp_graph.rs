//! The reference interpreter on whole graphs: symbol binding, input checks, symbolic shape
//! attributes, run-time op failures and outputs.

use kiln_ir::interp::{eval, InterpError, Value};
use kiln_ir::{
    rng, Arg, BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, Scalar, Shape, TensorType, UnaryOp,
};

fn shape(dims: &[&str]) -> Shape {
    dims.iter()
        .map(|d| match d.parse::<usize>() {
            Ok(n) => Dim::Const(n),
            Err(_) => Dim::sym(d),
        })
        .collect()
}

fn ty(dtype: DType, dims: &[&str]) -> TensorType {
    TensorType::new(dtype, shape(dims))
}

fn val(dtype: DType, shape: &[usize], data: &[f64]) -> Value {
    Value::new(dtype, shape.to_vec(), data.to_vec()).unwrap()
}

fn iota(shape: &[usize]) -> Value {
    let n: usize = shape.iter().product();
    val(
        DType::F32,
        shape,
        &(0..n).map(|i| i as f64).collect::<Vec<_>>(),
    )
}

fn op(g: &mut Graph, op: Op, args: &[Arg]) -> NodeId {
    g.add_op(op, args, None).unwrap()
}

/// `relu(x @ w + 1)` and its row sums, plus `x` itself, for x: f32[B,3].
fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.add_input("x", ty(DType::F32, &["B", "3"])).unwrap();
    let w = g.add_input("w", ty(DType::F32, &["3", "2"])).unwrap();
    let mm = op(&mut g, Op::Matmul, &[x.into(), w.into()]);
    let a = op(
        &mut g,
        Op::Binary(BinaryOp::Add),
        &[mm.into(), Scalar::Float(-4.0).into()],
    );
    let r = op(&mut g, Op::Unary(UnaryOp::Relu), &[a.into()]);
    let s = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![1],
            keepdim: false,
            dtype: None,
        },
        &[r.into()],
    );
    g.set_outputs(vec![r, s, x, r]).unwrap();
    g
}

#[test]
fn graph_with_symbolic_batch_runs_at_any_size() {
    let g = mlp();
    let w = val(DType::F32, &[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    // row i of x is [3i, 3i+1, 3i+2]; x @ w = [6i+2, 6i+3]; minus 4, relu.
    for b in [1usize, 2, 4] {
        let x = iota(&[b, 3]);
        let out = eval(&g, &[x.clone(), w.clone()]).unwrap();
        let r: Vec<f64> = (0..b)
            .flat_map(|i| [6.0 * i as f64 - 2.0, 6.0 * i as f64 - 1.0])
            .map(|v: f64| v.max(0.0))
            .collect();
        let s: Vec<f64> = r.chunks(2).map(|c| c[0] + c[1]).collect();
        assert_eq!(out.len(), 4);
        assert_eq!((out[0].shape.clone(), &out[0].data), (vec![b, 2], &r));
        assert_eq!((out[1].shape.clone(), &out[1].data), (vec![b], &s));
        assert_eq!(out[2], x);
        assert_eq!(out[3], out[0]);
    }
}

#[test]
fn inputs_are_checked_against_the_signature() {
    let g = mlp();
    let w = iota(&[3, 2]);
    let e = eval(&g, &[iota(&[2, 3])]).unwrap_err();
    assert_eq!(e.to_string(), "graph @mlp takes 2 inputs, got 1");
    let e = eval(&g, &[iota(&[2, 3]), iota(&[3, 3])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input %w: the graph expects f32[3,2], got f32[3,3]"
    );
    let x64 = val(DType::F64, &[2, 3], &[0.0; 6]);
    let e = eval(&g, &[x64, w.clone()]).unwrap_err();
    assert_eq!(
        e,
        InterpError::InputType {
            name: "x".into(),
            expected: "f32[B,3]".into(),
            got: "f64[2,3]".into()
        }
    );
    let e = eval(&g, &[iota(&[6]), w.clone()]).unwrap_err();
    assert!(matches!(e, InterpError::InputType { .. }), "{e}");
    let bad = Value {
        dtype: DType::F32,
        shape: vec![2, 3],
        data: vec![0.0; 5],
    };
    assert!(matches!(
        eval(&g, &[bad, w]),
        Err(InterpError::BadValue { .. })
    ));
}

#[test]
fn symbols_bind_consistently() {
    let mut g = Graph::new("pair");
    let x = g.add_input("x", ty(DType::F32, &["B"])).unwrap();
    let y = g.add_input("y", ty(DType::F32, &["B"])).unwrap();
    let z = g.add_input("z", ty(DType::F32, &["T", "T"])).unwrap();
    let s = op(&mut g, Op::Binary(BinaryOp::Mul), &[x.into(), y.into()]);
    g.set_outputs(vec![s, z]).unwrap();
    let e = eval(&g, &[iota(&[3]), iota(&[4]), iota(&[2, 2])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "symbol `B` is bound to 3 by %x and to 4 by %y"
    );
    let e = eval(&g, &[iota(&[3]), iota(&[3]), iota(&[2, 5])]).unwrap_err();
    assert_eq!(
        e,
        InterpError::SymbolMismatch {
            symbol: "T".into(),
            first: 2,
            first_input: "z".into(),
            second: 5,
            second_input: "z".into()
        }
    );
    let out = eval(&g, &[iota(&[3]), iota(&[3]), iota(&[2, 2])]).unwrap();
    assert_eq!(out[0].data, vec![0.0, 1.0, 4.0]);
}

#[test]
fn shape_attributes_resolve_symbols() {
    let mut g = Graph::new("syms");
    let x = g.add_input("x", ty(DType::F32, &["B", "3"])).unwrap();
    let row = g.add_input("row", ty(DType::F32, &["1", "3"])).unwrap();
    let full = op(
        &mut g,
        Op::Full {
            shape: shape(&["B", "3"]),
            value: Scalar::Float(0.5),
            dtype: DType::F32,
        },
        &[],
    );
    let sum = op(&mut g, Op::Binary(BinaryOp::Add), &[x.into(), full.into()]);
    let re = op(
        &mut g,
        Op::Reshape {
            shape: shape(&["3", "B"]),
        },
        &[x.into()],
    );
    let ex = op(
        &mut g,
        Op::Expand {
            shape: shape(&["B", "3"]),
        },
        &[row.into()],
    );
    let rnd = op(
        &mut g,
        Op::Rand {
            shape: shape(&["B"]),
            dtype: DType::F64,
            seed: 9,
        },
        &[],
    );
    g.set_outputs(vec![sum, re, ex, rnd]).unwrap();
    let out = eval(
        &g,
        &[iota(&[2, 3]), val(DType::F32, &[1, 3], &[7.0, 8.0, 9.0])],
    )
    .unwrap();
    assert_eq!(out[0].data, vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
    assert_eq!(
        (out[1].shape.clone(), out[1].data.clone()),
        (vec![3, 2], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    assert_eq!(out[2].data, vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);
    assert_eq!(out[3].data, vec![rng::uniform(9, 0), rng::uniform(9, 1)]);
}

#[test]
fn run_time_op_failures_name_the_node() {
    let mut g = Graph::new("late");
    let x = g.add_input("x", ty(DType::F32, &["B"])).unwrap();
    let idx = g.add_input("idx", ty(DType::I64, &["3"])).unwrap();
    let sl = op(
        &mut g,
        Op::Slice {
            dim: 0,
            start: 0,
            end: 4,
            step: 1,
        },
        &[x.into()],
    );
    let sel = op(&mut g, Op::IndexSelect { dim: 0 }, &[x.into(), idx.into()]);
    g.set_outputs(vec![sel, sl]).unwrap();
    let ok_idx = val(DType::I64, &[3], &[4.0, 0.0, 1.0]);
    let out = eval(&g, &[iota(&[5]), ok_idx.clone()]).unwrap();
    assert_eq!(out[0].data, vec![4.0, 0.0, 1.0]);
    assert_eq!(out[1].data, vec![0.0, 1.0, 2.0, 3.0]);
    let e = eval(&g, &[iota(&[3]), val(DType::I64, &[3], &[0.0; 3])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %2 (slice): slice end 4 is past the size 3 of dim 0 (operands: f32[3])"
    );
    let e = eval(&g, &[iota(&[5]), val(DType::I64, &[3], &[0.0, 5.0, 1.0])]).unwrap_err();
    assert_eq!(
        e,
        InterpError::Op {
            node: Some(3),
            op: "index_select",
            operands: vec!["f32[5]".into(), "i64[3]".into()],
            reason: "index 5 is out of range for dim 0 of size 5".into()
        }
    );
}

#[test]
fn unverifiable_graphs_are_rejected() {
    let mut g = Graph::new("empty");
    g.add_input("x", ty(DType::F32, &["2"])).unwrap();
    let e = eval(&g, &[iota(&[2])]).unwrap_err();
    assert!(matches!(e, InterpError::Verify(_)), "{e}");
    assert!(e.to_string().starts_with("graph fails verification"), "{e}");
}

#[test]
fn values_shared_by_many_nodes_and_half_precision() {
    let mut g = Graph::new("share");
    let x = g.add_input("x", ty(DType::F16, &["N"])).unwrap();
    let a = op(
        &mut g,
        Op::Binary(BinaryOp::Mul),
        &[x.into(), Scalar::Float(3.0).into()],
    );
    let b = op(&mut g, Op::Binary(BinaryOp::Add), &[a.into(), x.into()]);
    let c = op(&mut g, Op::Binary(BinaryOp::Sub), &[b.into(), a.into()]);
    let d = op(&mut g, Op::Cast { dtype: DType::F32 }, &[c.into()]);
    g.set_outputs(vec![d]).unwrap();
    let x = val(DType::F16, &[2], &[0.1, 2.0]);
    let out = eval(&g, &[x]).unwrap();
    // 0.1 -> 0.0999755859375; *3 -> 0.2998046875; +x -> 0.39978027... -> f16 0.39990234375;
    // minus a -> 0.10009765625.
    assert_eq!(out[0].dtype, DType::F32);
    assert_eq!(out[0].data, vec![0.10009765625, 2.0]);
}
