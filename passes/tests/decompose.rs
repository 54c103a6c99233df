//! The decomposition pass: every composite op, decomposed, computes what the composite
//! computes (the reference interpreter before vs after, on random normal inputs, across
//! shapes, dims, dtypes and symbolic dims); no composite remains; the pass is idempotent;
//! snapshots of the decomposed text; and a property test over random graphs.

#[path = "../../ir/tests/common/graph_gen.rs"]
mod graph_gen;

use kiln_ir::interp::{eval, Value};
use kiln_ir::text::{parse_graph, print_graph};
use kiln_ir::{
    rng, verify, Arg, BinaryOp, DType, Dim, Graph, InplaceOp, NodeId, Op, ReduceOp, Scalar, Shape,
    TensorType, UnaryOp,
};
use kiln_passes::decompose::{decompose, decompose_with, decomposition, DecomposeOptions};
use proptest::prelude::*;
use std::collections::HashMap;

// ---------------------------------------------------------------------------------------
// Helpers

/// A shape from text: `"B,7"` (empty: 0-d).
fn sh(s: &str) -> Shape {
    s.split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| match d.trim().parse::<usize>() {
            Ok(n) => Dim::Const(n),
            Err(_) => Dim::sym(d.trim()),
        })
        .collect()
}

fn tt(dtype: DType, shape: &str) -> TensorType {
    TensorType::new(dtype, sh(shape))
}

const LOC: &str = "model.rs:12:5";
const NAMES: [&str; 3] = ["x", "w", "b"];

/// A graph with one node, `op` applied to inputs of the given types (named x, w, b).
fn single(op: Op, operands: &[TensorType]) -> Graph {
    let mut g = Graph::new("t");
    let args: Vec<Arg> = operands
        .iter()
        .zip(NAMES)
        .map(|(t, n)| Arg::Value(g.add_input(n, t.clone()).unwrap()))
        .collect();
    let y = g
        .add_op(op.clone(), &args, Some(LOC.into()))
        .unwrap_or_else(|e| panic!("{op} on {operands:?}: {e}"));
    g.set_outputs(vec![y]).unwrap();
    g
}

/// Random inputs for `g`: `offset + scale * N(0, 1)` (rounded to each input's dtype),
/// symbolic dims bound by `binds`.
fn inputs(g: &Graph, binds: &[(&str, usize)], seed: u64, offset: f64, scale: f64) -> Vec<Value> {
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
                    Dim::Sym(s) => {
                        binds
                            .iter()
                            .find(|(b, _)| *b == s.as_ref())
                            .unwrap_or_else(|| panic!("symbol {s} is not bound"))
                            .1
                    }
                })
                .collect();
            let n: usize = shape.iter().product();
            let stream = seed.wrapping_mul(1000).wrapping_add(k as u64);
            let data = (0..n as u64)
                .map(|i| offset + scale * rng::normal(stream, i))
                .collect();
            Value::new(ty.dtype, shape, data).unwrap()
        })
        .collect()
}

/// Elementwise tolerance: `|a - b| <= abs + rel * |a| + scaled * max|a over the tensor|`.
#[derive(Clone, Copy, Debug)]
struct Tol {
    rel: f64,
    abs: f64,
    scaled: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// gelu, silu
    Pointwise,
    /// reductions, norms, softmax
    Reduction,
    /// linear: matmul then a rounded add (norm-wise relative in narrow dtypes)
    Contraction,
}

/// The tolerances of the task: f32 1e-5 rel + 1e-6 abs pointwise, 1e-4 (+ 1e-5 abs) for
/// reductions; f64 1e-9; f16/bf16 two ulps (they compute in f32 and round once).
fn tol(dtype: DType, kind: Kind) -> Tol {
    let t = |rel, abs| Tol {
        rel,
        abs,
        scaled: 0.0,
    };
    match (dtype, kind) {
        (DType::F64, _) => t(1e-9, 1e-12),
        (DType::F16, Kind::Contraction) => Tol {
            rel: 2f64.powi(-9),
            abs: 1e-6,
            scaled: 2f64.powi(-9),
        },
        (DType::BF16, Kind::Contraction) => Tol {
            rel: 2f64.powi(-6),
            abs: 1e-6,
            scaled: 2f64.powi(-6),
        },
        (DType::F16, _) => t(2f64.powi(-9), 1e-6),
        (DType::BF16, _) => t(2f64.powi(-6), 1e-6),
        (_, Kind::Pointwise) => t(1e-5, 1e-6),
        (_, _) => t(1e-4, 1e-5),
    }
}

/// Where `got` differs from `want` beyond `tol` (NaN equals NaN; integers and bools
/// compare exactly), as a message.
fn mismatch(want: &Value, got: &Value, tol: Tol) -> Option<String> {
    if want.dtype != got.dtype || want.shape != got.shape {
        return Some(format!(
            "types differ: {} vs {}",
            want.tensor_type(),
            got.tensor_type()
        ));
    }
    let exact = !want.dtype.is_float();
    let top = want
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in want.data.iter().zip(&got.data).enumerate() {
        if a == b || (a.is_nan() && b.is_nan()) {
            continue;
        }
        let ok = !exact
            && a.is_finite()
            && b.is_finite()
            && (a - b).abs() <= tol.abs + tol.rel * a.abs() + tol.scaled * top;
        if !ok {
            return Some(format!(
                "element {i} of {}: want {a:e}, got {b:e} ({tol:?})",
                want.tensor_type()
            ));
        }
    }
    None
}

/// True when a reduced dim of `mean {dims}` on `shape` is symbolic (the only composite
/// allowed to remain).
fn symbolic_mean(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    let Op::Reduce {
        op: ReduceOp::Mean,
        dims,
        ..
    } = &n.op
    else {
        return false;
    };
    let Arg::Value(x) = n.args[0] else {
        return false;
    };
    let shape = &g.node(x).ty.shape;
    let r = shape.rank();
    let reduced: Vec<usize> = if dims.is_empty() {
        (0..r).collect()
    } else {
        dims.iter()
            .filter_map(|&d| kiln_ir::shape::normalize_dim(d, r.max(1)))
            .filter(|&d| d < r)
            .collect()
    };
    reduced
        .iter()
        .any(|&d| matches!(shape.dims()[d], Dim::Sym(_)))
}

/// The structural checks every decomposed graph passes: it verifies, keeps the name,
/// inputs and output types, no composite remains (but `mean` over symbolic dims), and
/// decomposing it again changes nothing.
fn structural(g: &Graph, d: &Graph) {
    verify(d).unwrap_or_else(|e| panic!("{e}\n{}", print_graph(d)));
    assert_eq!(g.name(), d.name());
    let sig = |g: &Graph| -> Vec<(String, TensorType)> {
        g.inputs()
            .iter()
            .map(|(n, id)| (n.clone(), g.node(*id).ty.clone()))
            .collect()
    };
    assert_eq!(sig(g), sig(d));
    let outs = |g: &Graph| -> Vec<TensorType> {
        g.outputs().iter().map(|o| g.node(*o).ty.clone()).collect()
    };
    assert_eq!(outs(g), outs(d));
    for (id, n) in d.nodes() {
        assert!(
            !n.op.is_composite() || symbolic_mean(d, id),
            "composite {} remains in\n{}",
            n.op,
            print_graph(d)
        );
    }
    let again = decompose(d).unwrap();
    assert_eq!(print_graph(&again), print_graph(d), "not idempotent");
}

/// Decomposes `g`, runs the structural checks, checks that every emitted node carries
/// the composite's location, and compares the interpreter before and after on random
/// inputs (several seeds) within `tol(dtype, kind)` of each output's dtype.
fn check_with(g: &Graph, binds: &[(&str, usize)], kind: Kind, offset: f64, scale: f64) -> Graph {
    let d = decompose(g).unwrap_or_else(|e| panic!("{e}\n{}", print_graph(g)));
    structural(g, &d);
    for (_, n) in d.nodes().filter(|(_, n)| n.op != Op::Input) {
        assert_eq!(n.loc.as_deref(), Some(LOC), "{}", print_graph(&d));
    }
    for seed in 0..3 {
        let x = inputs(g, binds, seed, offset, scale);
        let want = eval(g, &x).unwrap_or_else(|e| panic!("{e}\n{}", print_graph(g)));
        let got = eval(&d, &x).unwrap_or_else(|e| panic!("{e}\n{}", print_graph(&d)));
        for (a, b) in want.iter().zip(&got) {
            if let Some(m) = mismatch(a, b, tol(a.dtype, kind)) {
                panic!(
                    "{m}\nbinds {binds:?}, seed {seed}\n{}\ndecomposed:\n{}",
                    print_graph(g),
                    print_graph(&d)
                );
            }
        }
    }
    d
}

fn check(g: &Graph, kind: Kind) -> Graph {
    check_with(g, &[], kind, 0.0, 3.0)
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

// ---------------------------------------------------------------------------------------
// The table

/// One op of every kind (every variant of the op set).
fn sample_ops() -> Vec<Op> {
    let mut ops: Vec<Op> = UnaryOp::ALL.iter().map(|u| Op::Unary(*u)).collect();
    ops.extend(BinaryOp::ALL.iter().map(|b| Op::Binary(*b)));
    ops.extend(ReduceOp::ALL.iter().map(|r| Op::Reduce {
        op: *r,
        dims: vec![-1],
        keepdim: false,
        dtype: None,
    }));
    ops.extend(InplaceOp::ALL.iter().map(|i| Op::Inplace(*i)));
    ops.extend([
        Op::Input,
        Op::Full {
            shape: sh("2"),
            value: Scalar::Float(1.0),
            dtype: DType::F32,
        },
        Op::Arange {
            start: 0.0.into(),
            end: 3.0.into(),
            step: 1.0.into(),
            dtype: DType::F32,
        },
        Op::Rand {
            shape: sh("2"),
            dtype: DType::F32,
            seed: 1,
        },
        Op::Randn {
            shape: sh("2"),
            dtype: DType::F32,
            seed: 1,
        },
        Op::FromVec {
            values: vec![1.0].into(),
            shape: sh("1"),
            dtype: DType::F32,
        },
        Op::Where,
        Op::Argmax {
            dim: 0,
            keepdim: false,
        },
        Op::Var {
            dims: vec![],
            correction: 1,
            keepdim: false,
        },
        Op::Softmax { dim: -1 },
        Op::LogSoftmax { dim: -1 },
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-5),
        },
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-5),
        },
        Op::Linear,
        Op::Matmul,
        Op::Reshape { shape: sh("2") },
        Op::Permute { dims: vec![0] },
        Op::Transpose { dim0: 0, dim1: 1 },
        Op::Expand { shape: sh("2") },
        Op::Slice {
            dim: 0,
            start: 0,
            end: 1,
            step: 1,
        },
        Op::Cat { dim: 0 },
        Op::IndexSelect { dim: 0 },
        Op::IndexAdd { dim: 0 },
        Op::Embedding {
            padding_idx: Some(1),
        },
        Op::Cast { dtype: DType::F16 },
        Op::Contiguous,
        Op::Triu { diagonal: 0 },
        Op::Tril { diagonal: 0 },
        Op::Clamp,
        Op::Hardtanh {
            min_val: (-1.0).into(),
            max_val: 1.0.into(),
        },
        Op::LeakyRelu {
            negative_slope: 0.01.into(),
        },
        Op::Elu { alpha: 1.0.into() },
        Op::Softplus {
            beta: 1.0.into(),
            threshold: 20.0.into(),
        },
        Op::NanToNum {
            nan: 0.0.into(),
            posinf: 1.0.into(),
            neginf: (-1.0).into(),
        },
    ]);
    ops
}

#[test]
fn the_table_covers_exactly_the_composite_ops() {
    let mut names: Vec<&str> = Vec::new();
    for op in sample_ops() {
        assert_eq!(
            decomposition(&op).is_some(),
            op.is_composite(),
            "{op}: table and is_composite disagree"
        );
        if op.is_composite() && !names.contains(&op.name()) {
            names.push(op.name());
        }
    }
    // every composite row of the op table is among the samples
    let mut want: Vec<&str> = kiln_ir::ops::rows()
        .into_iter()
        .filter(|r| r.composite)
        .map(|r| r.name)
        .collect();
    want.sort_unstable();
    want.dedup();
    names.sort_unstable();
    assert_eq!(names, want);
}

// ---------------------------------------------------------------------------------------
// Every op of the table

/// `embedding` (with or without a padding index, which only its gradient reads) is the
/// `index_select` of the table's rows, n-d indices included.
#[test]
fn embedding_is_an_index_select_of_rows() {
    for padding in ["", " {padding_idx = -1}"] {
        let g = parse_graph(&format!(
            "graph @e(%w: f32[4,3], %ids: i64[2,3]) -> f32[2,3,3] {{\n  %0 = embedding %w, %ids{padding} : f32[2,3,3]\n  return %0\n}}\n"
        ))
        .unwrap();
        let d = decompose(&g).unwrap();
        let ops: Vec<&str> = d.nodes().map(|(_, n)| n.op.name()).collect();
        assert_eq!(ops, ["input", "input", "index_select"], "{padding}");
        let w = Value::new(DType::F32, vec![4, 3], (0..12).map(f64::from).collect()).unwrap();
        let ids = Value::new(DType::I64, vec![2, 3], vec![3.0, 0.0, 3.0, 1.0, 2.0, 0.0]).unwrap();
        let (want, got) = (
            eval(&g, &[w.clone(), ids.clone()]).unwrap(),
            eval(&d, &[w, ids]).unwrap(),
        );
        assert_eq!(want[0].data, got[0].data);
        assert_eq!(&got[0].data[..6], &[9.0, 10.0, 11.0, 0.0, 1.0, 2.0]);
    }
}

#[test]
fn softmax_and_log_softmax() {
    let cases: &[(&str, &[i64])] = &[
        ("7,33", &[-1, 1, 0, -2]),
        ("1", &[0, -1]),
        ("5", &[-1]),
        ("3,1,4", &[0, 1, 2]),
        ("2,3,5", &[-3, -1]),
        ("", &[0, -1]),
    ];
    for dtype in FLOATS {
        for (shape, dims) in cases {
            for &dim in *dims {
                for op in [Op::Softmax { dim }, Op::LogSoftmax { dim }] {
                    check(&single(op, &[tt(dtype, shape)]), Kind::Reduction);
                }
            }
        }
    }
}

#[test]
fn softmax_over_an_empty_dim_gives_the_empty_result() {
    for op in [Op::Softmax { dim: 1 }, Op::LogSoftmax { dim: -1 }] {
        let d = check(&single(op, &[tt(DType::F32, "3,0")]), Kind::Reduction);
        assert!(d.nodes().any(|(_, n)| matches!(n.op, Op::Full { .. })));
    }
}

#[test]
fn layer_norm_with_and_without_weight_and_bias() {
    let cases: &[(&str, &[usize])] = &[
        ("7,33", &[1, 2]),
        ("33", &[1]),
        ("3,1,5", &[1, 2]),
        ("2,3,4", &[1, 2, 3]),
        ("1,1", &[1, 2]),
    ];
    for dtype in FLOATS {
        for (shape, ndims) in cases {
            for &ndim in *ndims {
                let s = sh(shape);
                let tail: Shape = s.dims()[s.rank() - ndim..].iter().cloned().collect();
                let p = TensorType::new(dtype, tail);
                for params in 0..=2 {
                    for eps in [1e-5, 0.1] {
                        let mut operands = vec![tt(dtype, shape)];
                        operands.extend(std::iter::repeat_n(p.clone(), params));
                        let g = single(
                            Op::LayerNorm {
                                ndim,
                                eps: eps.into(),
                            },
                            &operands,
                        );
                        // Rows with a non-zero mean, so the centring matters.
                        check_with(&g, &[], Kind::Reduction, 1.5, 2.0);
                    }
                }
            }
        }
    }
}

#[test]
fn rms_norm_with_and_without_weight() {
    let cases: &[(&str, &[usize])] = &[
        ("7,33", &[1, 2]),
        ("33", &[1]),
        ("3,1,5", &[1, 2]),
        ("2,3,4", &[2, 3]),
        ("1", &[1]),
    ];
    for dtype in FLOATS {
        for (shape, ndims) in cases {
            for &ndim in *ndims {
                let s = sh(shape);
                let tail: Shape = s.dims()[s.rank() - ndim..].iter().cloned().collect();
                for params in 0..=1 {
                    for eps in [1e-6, 0.1] {
                        let mut operands = vec![tt(dtype, shape)];
                        if params == 1 {
                            operands.push(TensorType::new(dtype, tail.clone()));
                        }
                        check(
                            &single(
                                Op::RmsNorm {
                                    ndim,
                                    eps: eps.into(),
                                },
                                &operands,
                            ),
                            Kind::Reduction,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gelu_both_forms_and_silu() {
    let shapes = ["7,33", "1", "", "2,1,3", "4,5,6"];
    for u in [UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Silu] {
        for dtype in FLOATS {
            for shape in shapes {
                check(&single(Op::Unary(u), &[tt(dtype, shape)]), Kind::Pointwise);
            }
        }
        // Integer and bool tensors compute in (and give) f32.
        for dtype in [DType::I32, DType::I64, DType::Bool] {
            let g = single(Op::Unary(u), &[tt(dtype, "7,33")]);
            let d = check(&g, Kind::Pointwise);
            assert_eq!(d.node(d.outputs()[0]).ty.dtype, DType::F32);
        }
    }
}

#[test]
fn gelu_and_silu_in_the_tails() {
    // Large magnitudes: saturated tanh / erf / sigmoid, and x*x*x overflowing in f16.
    for u in [UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Silu] {
        for dtype in FLOATS {
            let g = single(Op::Unary(u), &[tt(dtype, "7,33")]);
            check_with(&g, &[], Kind::Pointwise, 0.0, 12.0);
        }
    }
}

#[test]
fn linear_with_and_without_bias() {
    let cases: &[(&str, &str)] = &[
        ("7,33", "5,33"),
        ("33", "4,33"),
        ("2,3,33", "1,33"),
        ("1,1", "1,1"),
        ("3,2,1,7", "9,7"),
    ];
    for dtype in FLOATS {
        for (x, w) in cases {
            let out_f = sh(w).dims()[0].clone();
            for bias in [false, true] {
                let mut operands = vec![tt(dtype, x), tt(dtype, w)];
                if bias {
                    operands.push(TensorType::new(
                        dtype,
                        [out_f.clone()].into_iter().collect(),
                    ));
                }
                check(&single(Op::Linear, &operands), Kind::Contraction);
            }
        }
    }
}

/// Shapes and dims lists for var and mean (negative dims, all dims, size-1 dims, 0-d).
const REDUCTIONS: &[(&str, &[&[i64]])] = &[
    ("7,33", &[&[], &[-1], &[0], &[0, 1], &[1, -2]]),
    ("3,1,5", &[&[0, 2], &[-1], &[1], &[-3, -1]]),
    ("2,3,4", &[&[-3, -1], &[1, 2], &[]]),
    ("5", &[&[0], &[]]),
    ("1", &[&[0]]),
    ("", &[&[], &[0]]),
];

#[test]
fn var_every_correction_and_keepdim() {
    for dtype in FLOATS {
        for (shape, dims_list) in REDUCTIONS {
            for dims in *dims_list {
                for correction in [0, 1, 2] {
                    for keepdim in [false, true] {
                        let op = Op::Var {
                            dims: dims.to_vec(),
                            correction,
                            keepdim,
                        };
                        check_with(
                            &single(op, &[tt(dtype, shape)]),
                            &[],
                            Kind::Reduction,
                            1.0,
                            2.0,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn mean_every_keepdim() {
    for dtype in FLOATS {
        for (shape, dims_list) in REDUCTIONS {
            for dims in *dims_list {
                for keepdim in [false, true] {
                    let op = Op::Reduce {
                        op: ReduceOp::Mean,
                        dims: dims.to_vec(),
                        keepdim,
                        dtype: None,
                    };
                    let d = check_with(
                        &single(op, &[tt(dtype, shape)]),
                        &[],
                        Kind::Reduction,
                        1.0,
                        2.0,
                    );
                    assert!(d.nodes().all(|(_, n)| !n.op.is_composite()));
                }
            }
        }
    }
}

#[test]
fn rows_of_equal_values_normalise_to_zero() {
    // sum / n is exact for rows of equal values, so the centred row is exactly zero.
    let g = parse_graph(
        "graph @t(%x: f32[4,1]) -> f32[4,3] {
  %0 = expand %x {shape = [4, 3]} : f32[4,3]
  %1 = layer_norm %0 {ndim = 1, eps = 1e-6} : f32[4,3]
  return %1
}",
    )
    .unwrap();
    let d = decompose(&g).unwrap();
    let x = Value::new(DType::F32, vec![4, 1], vec![0.1, -2.5, 3.0, 1e-3]).unwrap();
    let y = &eval(&d, &[x]).unwrap()[0];
    assert!(y.data.iter().all(|v| *v == 0.0), "{y:?}");
}

// ---------------------------------------------------------------------------------------
// Symbolic dims

/// Bindings of `B` and `T` to evaluate symbolic graphs with (size 1 included).
const BINDS: &[&[(&str, usize)]] = &[
    &[("B", 3), ("T", 5)],
    &[("B", 1), ("T", 2)],
    &[("B", 4), ("T", 1)],
];

#[test]
fn symbolic_dims() {
    let bt = || tt(DType::F32, "B,T");
    let b7 = || tt(DType::F32, "B,7");
    let var = |dims: &[i64], correction, keepdim| Op::Var {
        dims: dims.to_vec(),
        correction,
        keepdim,
    };
    let mean = |dims: &[i64], keepdim| Op::Reduce {
        op: ReduceOp::Mean,
        dims: dims.to_vec(),
        keepdim,
        dtype: None,
    };
    let mut graphs = vec![
        (single(Op::Softmax { dim: -1 }, &[bt()]), Kind::Reduction),
        (single(Op::LogSoftmax { dim: 0 }, &[b7()]), Kind::Reduction),
        (
            single(
                Op::LayerNorm {
                    ndim: 1,
                    eps: kiln_ir::F64::new(1e-5),
                },
                &[bt(), tt(DType::F32, "T"), tt(DType::F32, "T")],
            ),
            Kind::Reduction,
        ),
        (
            single(
                Op::LayerNorm {
                    ndim: 2,
                    eps: kiln_ir::F64::new(1e-5),
                },
                &[bt()],
            ),
            Kind::Reduction,
        ),
        (
            single(
                Op::LayerNorm {
                    ndim: 1,
                    eps: kiln_ir::F64::new(1e-5),
                },
                &[b7(), tt(DType::F32, "7")],
            ),
            Kind::Reduction,
        ),
        (
            single(
                Op::RmsNorm {
                    ndim: 1,
                    eps: kiln_ir::F64::new(1e-5),
                },
                &[bt(), tt(DType::F32, "T")],
            ),
            Kind::Reduction,
        ),
        (
            single(
                Op::RmsNorm {
                    ndim: 1,
                    eps: kiln_ir::F64::new(1e-5),
                },
                &[b7()],
            ),
            Kind::Reduction,
        ),
        (
            single(Op::Unary(UnaryOp::GeluTanh), &[bt()]),
            Kind::Pointwise,
        ),
        (single(Op::Unary(UnaryOp::Silu), &[bt()]), Kind::Pointwise),
        (
            single(
                Op::Linear,
                &[
                    tt(DType::F32, "B,T,16"),
                    tt(DType::F32, "5,16"),
                    tt(DType::F32, "5"),
                ],
            ),
            Kind::Contraction,
        ),
        (
            single(
                Op::Linear,
                &[tt(DType::F32, "B,16"), tt(DType::F32, "T,16")],
            ),
            Kind::Contraction,
        ),
        (single(mean(&[1], false), &[bt()]), Kind::Reduction),
        (single(mean(&[1], true), &[b7()]), Kind::Reduction),
        (single(mean(&[], false), &[b7()]), Kind::Reduction),
    ];
    for correction in [0, 1, 2] {
        for keepdim in [false, true] {
            for dims in [&[1][..], &[0, 1], &[], &[-2]] {
                graphs.push((
                    single(var(dims, correction, keepdim), &[bt()]),
                    Kind::Reduction,
                ));
                graphs.push((
                    single(var(dims, correction, keepdim), &[b7()]),
                    Kind::Reduction,
                ));
            }
        }
    }
    // The f16 forms compute in f32 as well with symbolic dims.
    graphs.push((
        single(
            Op::LayerNorm {
                ndim: 1,
                eps: kiln_ir::F64::new(1e-5),
            },
            &[tt(DType::F16, "B,T")],
        ),
        Kind::Reduction,
    ));
    graphs.push((
        single(var(&[1], 1, false), &[tt(DType::BF16, "B,T")]),
        Kind::Reduction,
    ));
    for (g, kind) in &graphs {
        for binds in BINDS {
            check_with(g, binds, *kind, 0.5, 2.0);
        }
    }
    // `mean` over a constant dim of a symbolic shape becomes sum / 7.
    let d = decompose(&single(mean(&[1], true), &[b7()])).unwrap();
    assert!(d.nodes().all(|(_, n)| !n.op.is_composite()));
    // Over a symbolic dim it stays a primitive `mean`, accumulated in f64 (the precision
    // as an attribute) and rounded once; decomposing that again changes nothing.
    let g = single(mean(&[1], false), &[bt()]);
    let d = decompose(&g).unwrap();
    let means: Vec<&Op> = d
        .nodes()
        .map(|(_, n)| &n.op)
        .filter(|op| {
            matches!(
                op,
                Op::Reduce {
                    op: ReduceOp::Mean,
                    ..
                }
            )
        })
        .collect();
    assert!(
        matches!(
            means.as_slice(),
            [Op::Reduce {
                dtype: Some(DType::F64),
                ..
            }]
        ),
        "{}",
        print_graph(&d)
    );
    assert_eq!(print_graph(&decompose(&d).unwrap()), print_graph(&d));
}

// ---------------------------------------------------------------------------------------
// Whole graphs

const HEAD: &str = "graph @head(%h: f32[B,T,384], %w: f32[96,384], %b: f32[96], %g: f32[96]) -> (f32[B,T,96], f32[B,T]) {
  %0 = mul %h, 0.125                       : f32[B,T,384]   # models/head.rs:3:9
  %1 = softmax %0 {dim = -1}               : f32[B,T,384]   # models/head.rs:4:9
  %2 = linear %1, %w, %b                   : f32[B,T,96]    # models/head.rs:5:9
  %3 = gelu %2 {approximate = \"tanh\"}      : f32[B,T,96]    # models/head.rs:6:9
  %4 = layer_norm %3, %g {ndim = 1, eps = 1e-5} : f32[B,T,96]
  %5 = var %4 {dims = [2], correction = 1, keepdim = false} : f32[B,T]
  return %4, %5
}";

#[test]
fn a_whole_graph_keeps_inputs_outputs_order_and_locations() {
    let g = parse_graph(HEAD).unwrap();
    let d = decompose(&g).unwrap();
    structural(&g, &d);
    // Every decomposed node carries its composite's location, in order.
    let locs: Vec<Option<&str>> = d
        .nodes()
        .filter(|(_, n)| n.op != Op::Input)
        .map(|(_, n)| n.loc.as_deref())
        .collect();
    let first_of = |l: &str| locs.iter().position(|x| *x == Some(l)).unwrap();
    assert!(first_of("models/head.rs:3:9") < first_of("models/head.rs:4:9"));
    assert!(first_of("models/head.rs:4:9") < first_of("models/head.rs:5:9"));
    assert!(first_of("models/head.rs:5:9") < first_of("models/head.rs:6:9"));
    assert_eq!(locs[0], Some("models/head.rs:3:9"));
    assert_eq!(*locs.last().unwrap(), None);
    for binds in BINDS {
        let x = inputs(&g, binds, 7, 0.0, 1.0);
        let (want, got) = (eval(&g, &x).unwrap(), eval(&d, &x).unwrap());
        for (a, b) in want.iter().zip(&got) {
            assert_eq!(mismatch(a, b, tol(DType::F32, Kind::Reduction)), None);
        }
    }
    // A graph without composites is copied as it is.
    let plain = parse_graph(&print_graph(&d)).unwrap();
    assert_eq!(print_graph(&decompose(&plain).unwrap()), print_graph(&d));
}

#[test]
fn an_ill_formed_graph_is_an_error_not_a_panic() {
    let mut g = single(Op::Softmax { dim: -1 }, &[tt(DType::F32, "3,4")]);
    let y = g.outputs()[0];
    g.node_mut(y).ty = tt(DType::F64, "3,4");
    assert!(decompose(&g).is_err());
}

// ---------------------------------------------------------------------------------------
// Snapshots

fn snap(text: &str) -> String {
    let g = parse_graph(text).unwrap();
    let d = decompose(&g).unwrap();
    structural(&g, &d);
    print_graph(&d)
}

#[test]
fn snapshot_softmax() {
    insta::assert_snapshot!(snap(
        "graph @softmax(%x: f32[4,7]) -> f32[4,7] {
  %0 = softmax %x {dim = -1} : f32[4,7] # model.rs:3:9
  return %0
}"
    ));
}

#[test]
fn snapshot_layer_norm_weight_bias() {
    insta::assert_snapshot!(snap(
        "graph @ln(%x: f32[2,5,16], %w: f32[16], %b: f32[16]) -> f32[2,5,16] {
  %0 = layer_norm %x, %w, %b {ndim = 1, eps = 1e-5} : f32[2,5,16] # model.rs:8:13
  return %0
}"
    ));
}

#[test]
fn snapshot_gelu_tanh() {
    insta::assert_snapshot!(snap(
        "graph @gelu(%x: f32[8,32]) -> f32[8,32] {
  %0 = gelu %x {approximate = \"tanh\"} : f32[8,32]
  return %0
}"
    ));
}

#[test]
fn snapshot_linear_bias() {
    insta::assert_snapshot!(snap(
        "graph @linear(%x: f32[4,16], %w: f32[8,16], %b: f32[8]) -> f32[4,8] {
  %0 = linear %x, %w, %b : f32[4,8]
  return %0
}"
    ));
}

#[test]
fn snapshot_var_correction_1_two_dims() {
    insta::assert_snapshot!(snap(
        "graph @var(%x: f32[3,4,5]) -> f32[4] {
  %0 = var %x {dims = [0, -1], correction = 1, keepdim = false} : f32[4]
  return %0
}"
    ));
}

#[test]
fn snapshot_symbolic_reduced_dim() {
    insta::assert_snapshot!(snap(
        "graph @sym(%x: f32[B,T], %g: f32[T]) -> (f32[B,T], f32[B], f32[B,1]) {
  %0 = layer_norm %x, %g {ndim = 1, eps = 1e-5} : f32[B,T]
  %1 = var %x {dims = [1], correction = 1, keepdim = false} : f32[B]
  %2 = mean %x {dims = [-1], keepdim = true} : f32[B,1]
  return %0, %1, %2
}"
    ));
}

#[test]
fn snapshot_f16_gelu_computes_in_f32() {
    insta::assert_snapshot!(snap(
        "graph @gelu16(%x: f16[8,32]) -> f16[8,32] {
  %0 = gelu %x : f16[8,32]
  return %0
}"
    ));
}

// ---------------------------------------------------------------------------------------
// Random graphs

/// Random inputs for a generated graph, with `B` and `T` bound to 2 and 3.
fn gen_inputs(g: &Graph, seed: u64) -> Vec<Value> {
    inputs(g, &[("B", 2), ("T", 3)], seed, 0.0, 4.0)
}

fn bits_equal(a: &Value, b: &Value) -> bool {
    a.dtype == b.dtype
        && a.shape == b.shape
        && a.data
            .iter()
            .zip(&b.data)
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
}

/// The largest finite magnitude of a value (0 for none).
fn max_abs(v: &Value) -> f64 {
    v.data
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()))
}

/// The tolerance of a composite evaluated on `operands`: the dtype's tolerance, plus
/// what f32 rounding of the parts can cost on these values (softmax of large logits,
/// norms of nearly constant rows, var of large values, long dot products). `None` when
/// an intermediate can overflow the compute dtype where the interpreter's f64 does not
/// (`x * x` of 1e20 in f32): there the parts may give inf or NaN where the composite
/// gives a finite value, as eager f32 code would.
fn composite_tol(op: &Op, dtype: DType, operands: &[&Value]) -> Option<Tol> {
    let kind = match op {
        Op::Unary(_) => Kind::Pointwise,
        Op::Linear => Kind::Contraction,
        _ => Kind::Reduction,
    };
    let mut t = tol(dtype, kind);
    let (eps, max) = if dtype == DType::F64 {
        (f64::EPSILON, f64::MAX)
    } else {
        (f32::EPSILON as f64, f32::MAX as f64)
    };
    let x = max_abs(operands[0]);
    let numel = operands[0].numel() as f64;
    let p = |i: usize| operands.get(i).map_or(1.0, |v| max_abs(v));
    let bias = operands.get(2).map_or(0.0, |v| max_abs(v));
    let (scale, risk) = match op {
        Op::Var { .. } => (x * x, x * x * numel),
        Op::LayerNorm { eps: e, .. } | Op::RmsNorm { eps: e, .. } => {
            (x / e.get().sqrt() * p(1) + bias, x * x * numel)
        }
        Op::Linear => {
            let k = operands[0].shape.last().copied().unwrap_or(1) as f64;
            let s = x * p(1) * k + bias;
            (s, s)
        }
        Op::Reduce { .. } => (x, x * numel),
        _ => (x, 0.0),
    };
    if risk > max / 16.0 {
        return None;
    }
    t.abs += 16.0 * eps * scale;
    Some(t)
}

/// Decomposition preserves results, node by node: the graph with every node as an output
/// is decomposed and both are evaluated. A node whose operands are bit-identical before
/// and after must give a bit-identical value if it was copied, and a value within
/// [`composite_tol`] if it was decomposed. A node whose operands already differ (within
/// tolerance) may differ in any way (argmax, comparisons and casts amplify rounding).
/// Returns whether the graph's own outputs all matched within the plain tolerance.
fn preserves_results(g: &Graph, seed: u64) -> Result<bool, TestCaseError> {
    let d = decompose(g).map_err(|e| TestCaseError::fail(format!("{e}\n{}", print_graph(g))))?;
    structural(g, &d);
    let x = gen_inputs(g, seed);
    let (want, got) = match (eval(g, &x), eval(&d, &x)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(_), Err(_)) => return Ok(true),
        (a, b) => {
            return Err(TestCaseError::fail(format!(
                "one run failed: {:?} vs {:?}\n{}",
                a.err(),
                b.err(),
                print_graph(g)
            )))
        }
    };
    let outputs_match = want.iter().zip(&got).all(|(a, b)| {
        let kind = Kind::Reduction;
        mismatch(a, b, tol(a.dtype, kind)).is_none()
    });

    if g.len() == g.inputs().len() {
        return Ok(outputs_match);
    }
    let mut every = g.clone();
    let nodes: Vec<NodeId> = g
        .nodes()
        .filter(|(_, n)| n.op != Op::Input)
        .map(|(id, _)| id)
        .collect();
    every.set_outputs(nodes.clone()).unwrap();
    let de = decompose(&every).unwrap();
    let (a, b) = (eval(&every, &x).unwrap(), eval(&de, &x).unwrap());
    let pos: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let input_pos: HashMap<NodeId, usize> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, (_, n))| (*n, i))
        .collect();
    for (i, id) in nodes.iter().enumerate() {
        let n = g.node(*id);
        let mut operands: Vec<&Value> = Vec::new();
        let mut same = true;
        for arg in &n.args {
            if let Arg::Value(v) = arg {
                match pos.get(v) {
                    Some(&p) => {
                        same &= bits_equal(&a[p], &b[p]);
                        operands.push(&a[p]);
                    }
                    None => operands.push(&x[input_pos[v]]),
                }
            }
        }
        if !same {
            continue;
        }
        let fail = |m: String| {
            TestCaseError::fail(format!(
                "node {id} ({}): {m}\n{}\ndecomposed:\n{}",
                n.op,
                print_graph(g),
                print_graph(&d)
            ))
        };
        if n.op.is_composite() {
            if let Some(tol) = composite_tol(&n.op, a[i].dtype, &operands) {
                if let Some(m) = mismatch(&a[i], &b[i], tol) {
                    return Err(fail(m));
                }
            }
        } else if !bits_equal(&a[i], &b[i]) {
            return Err(fail("a copied node computes something else".into()));
        }
    }
    Ok(outputs_match)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn decomposition_preserves_results(
        g in graph_gen::arb_graph_with(graph_gen::GenConfig { symbolic: true, max_steps: 16 }),
        seed in 0u64..1000,
    ) {
        preserves_results(&g, seed)?;
    }
}

/// Most random graphs hold a composite, and most outputs match without excuses.
#[test]
fn random_graphs_hold_composites_and_mostly_match_outright() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = graph_gen::arb_graph_with(graph_gen::GenConfig {
        symbolic: true,
        max_steps: 16,
    });
    let (mut composite, mut outright) = (0, 0);
    let total = 300;
    for seed in 0..total {
        let g = strategy.new_tree(&mut runner).unwrap().current();
        composite += g.nodes().any(|(_, n)| n.op.is_composite()) as usize;
        outright += preserves_results(&g, seed).unwrap_or_else(|e| panic!("{e}")) as usize;
    }
    assert!(
        composite >= total as usize / 3,
        "only {composite} of {total} graphs hold a composite"
    );
    assert!(
        outright >= total as usize * 9 / 10,
        "only {outright} of {total} match outright"
    );
}

// ---------------------------------------------------------------------------------------
// f64 reductions (one kernel per op)

fn decompose_f64(g: &Graph) -> Graph {
    decompose_with(
        g,
        &DecomposeOptions {
            f64_reductions: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn snapshot_var_in_f64() {
    let g = parse_graph(
        "graph @v(%x: f32[2,16]) -> f32[2,1] {
  %0 = var %x {dims = [-1], correction = 1, keepdim = true} : f32[2,1]
  return %0
}",
    )
    .unwrap();
    let d = decompose_f64(&g);
    structural(&g, &d);
    insta::assert_snapshot!(print_graph(&d));
}

#[test]
fn f64_reductions_widen_only_f32_means_and_variances() {
    // f32 mean and var compute in f64; norms and softmax decompose as without the option
    // (eager computes a norm's values in the compute type too); f16 and f64 ones are
    // unchanged
    let widened = [
        Op::Reduce {
            op: ReduceOp::Mean,
            dims: vec![-1],
            keepdim: false,
            dtype: None,
        },
        Op::Var {
            dims: vec![-1],
            correction: 1,
            keepdim: true,
        },
    ];
    for op in widened {
        let g = single(op.clone(), &[tt(DType::F32, "3,8")]);
        let d = decompose_f64(&g);
        structural(&g, &d);
        let text = print_graph(&d);
        assert!(text.contains("cast %x {dtype = f64}"), "{op}:\n{text}");
        assert_ne!(text, print_graph(&decompose(&g).unwrap()), "{op}");
        for dtype in [DType::F16, DType::F64] {
            let g = single(op.clone(), &[tt(dtype, "3,8")]);
            assert_eq!(
                print_graph(&decompose_f64(&g)),
                print_graph(&decompose(&g).unwrap()),
                "{op} of {dtype}"
            );
        }
    }
    let kept = [
        Op::Softmax { dim: -1 },
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-5),
        },
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-6),
        },
    ];
    for op in kept {
        let g = single(op.clone(), &[tt(DType::F32, "3,8")]);
        assert_eq!(
            print_graph(&decompose_f64(&g)),
            print_graph(&decompose(&g).unwrap()),
            "{op}"
        );
    }
}

#[test]
fn f64_reductions_keep_constant_rows_exact_and_large_rows_finite() {
    // each op evaluated alone stands for one kernel: its f32 result is what the next reads
    let g = parse_graph(
        "graph @t(%x: f32[2,5]) -> (f32[2,5], f32[2,5]) {
  %0 = layer_norm %x {ndim = 1, eps = 1e-5} : f32[2,5]
  %1 = rms_norm %x {ndim = 1, eps = 1e-6} : f32[2,5]
  return %0, %1
}",
    )
    .unwrap();
    let d = decompose_f64(&g);
    let x = Value::new(
        DType::F32,
        vec![2, 5],
        vec![0.1, 0.1, 0.1, 0.1, 0.1, 3e20, -3e20, 1e20, 2e20, -1e20],
    )
    .unwrap();
    let want = eval(&g, std::slice::from_ref(&x)).unwrap();
    let got = eval(&d, &[x]).unwrap();
    for (w, g) in want.iter().zip(&got) {
        for (a, b) in w.data.iter().zip(&g.data) {
            assert!(
                b.is_finite() && (a - b).abs() <= 1e-6 * a.abs().max(1.0),
                "{a} vs {b}"
            );
        }
    }
    // the constant row normalises to exactly 0
    assert!(got[0].data[..5].iter().all(|v| *v == 0.0), "{:?}", got[0]);
}

/// A backend that renders a composite keeps it whole; the others are lowered.
#[test]
fn composites_a_backend_renders_are_kept() {
    fn renders_gelu(op: &Op) -> bool {
        !op.is_composite() || *op == Op::Unary(UnaryOp::Gelu)
    }
    let x = TensorType::new(DType::F32, Shape::of(&[3, 5]));
    let mut g = Graph::new("g");
    let i = g.add_input("x", x).unwrap();
    let a = g
        .add_op(Op::Unary(UnaryOp::Gelu), &[i.into()], None)
        .unwrap();
    let b = g
        .add_op(Op::Unary(UnaryOp::Silu), &[a.into()], None)
        .unwrap();
    g.set_outputs(vec![b]).unwrap();
    let d = decompose_with(
        &g,
        &DecomposeOptions {
            renders: renders_gelu,
            ..Default::default()
        },
    )
    .unwrap();
    let ops: Vec<&str> = d.nodes().map(|(_, n)| n.op.name()).collect();
    assert!(ops.contains(&"gelu"), "{ops:?}");
    assert!(
        !ops.contains(&"silu") && ops.contains(&"sigmoid"),
        "{ops:?}"
    );
}
