//! `torch.autograd.gradcheck` for every differentiable op of the table, through eager
//! autograd: for each row with a derivative rule, `sum(op(inputs) * w)` is differentiated by
//! `backward()` and by central differences in f64 (eps 1e-6, atol 1e-5, rtol 1e-3, as
//! gradcheck), on odd sizes, size 1, 0-d, broadcast operands and non-contiguous inputs
//! (leaves that are transposed views of their storage), so the rules, the engine and the
//! strided kernels are checked together. The unary and binary families are generated from
//! the table; every other row must have a case below (a test checks), so a new op's rule
//! cannot go unchecked, and a new op without a rule does not compile (the table has no
//! "missing" derivative).

use kiln::autograd::no_grad;
use kiln::ir::ops::{rows, Derivative, Domain};
use kiln::ir::{BinaryOp, InplaceOp, Op, UnaryOp};
use kiln::{DType, Operand, Scalar, Tensor};
use std::collections::HashSet;

/// One operand of a case.
#[derive(Clone, Debug)]
enum In {
    /// a contiguous f64 tensor of this shape with values from the domain
    F(Vec<usize>, Domain),
    /// the same values in a non-contiguous layout: the transpose of storage whose last two
    /// dims are swapped
    T(Vec<usize>, Domain),
    /// i64 indices
    Ids(Vec<usize>, Vec<i64>),
    /// a bool mask (every third element true)
    B(Vec<usize>),
    /// a scalar literal
    S(f64),
}

use In::{Ids, B, F, S, T};

fn f(shape: &[usize]) -> In {
    F(shape.to_vec(), Domain::Real)
}

fn t(shape: &[usize]) -> In {
    T(shape.to_vec(), Domain::Real)
}

fn ids(shape: &[usize], v: &[i64]) -> In {
    Ids(shape.to_vec(), v.to_vec())
}

/// Distinct values of a domain, away from the table's kinks (0, integers, ±3, 6).
fn values(d: Domain, n: usize, seed: usize) -> Vec<f64> {
    let p: [f64; 5] = match d {
        Domain::Real | Domain::Integer => [-2.3, -0.7, 0.4, 1.3, 2.6],
        Domain::Positive => [0.3, 0.9, 1.7, 2.6, 4.1],
        Domain::AboveMinusOne => [-0.6, -0.2, 0.5, 1.4, 3.3],
        Domain::Small => [-1.7, -0.45, 0.35, 1.1, 2.2],
        Domain::NonZero => [-1.9, -0.6, 0.7, 1.6, 2.45],
    };
    (0..n)
        .map(|i| p[(i * 3 + seed) % 5] + 0.011 * ((i * 7 + seed) % 13) as f64)
        .collect()
}

/// The operand `x` with these (logical, row-major) values.
fn make(x: &In, vals: &[f64]) -> Tensor {
    match x {
        F(shape, _) => Tensor::from_f64(vals, shape, DType::F64).unwrap(),
        T(shape, _) => {
            let r = shape.len();
            let (a, b) = (shape[r - 2], shape[r - 1]);
            let mut swapped = shape.clone();
            swapped.swap(r - 2, r - 1);
            let mut data = vec![0.0; vals.len()];
            for (k, &v) in vals.iter().enumerate() {
                let (m, i, j) = (k / (a * b), (k / b) % a, k % b);
                data[m * a * b + j * a + i] = v;
            }
            let view = Tensor::from_f64(&data, &swapped, DType::F64)
                .unwrap()
                .transpose(-2, -1)
                .unwrap();
            assert!(a == 1 || b == 1 || !view.is_contiguous());
            view
        }
        Ids(shape, v) => Tensor::from_vec(v.clone(), shape).unwrap(),
        B(shape) => {
            let n = shape.iter().product();
            Tensor::from_vec((0..n).map(|i| i % 3 == 0).collect::<Vec<bool>>(), shape).unwrap()
        }
        S(_) => unreachable!("a literal is not a tensor"),
    }
}

fn numel(x: &In) -> usize {
    match x {
        F(s, _) | T(s, _) => s.iter().product(),
        _ => 0,
    }
}

/// `sum(op(inputs) * w)`.
fn loss(op: &Op, inputs: &[In], tensors: &[Option<Tensor>]) -> (Tensor, Vec<f64>) {
    let args: Vec<Operand<'_>> = inputs
        .iter()
        .zip(tensors)
        .map(|(x, t)| match (x, t) {
            (S(v), _) => Operand::Scalar(Scalar::Float(*v)),
            (_, Some(t)) => Operand::Tensor(t),
            _ => unreachable!(),
        })
        .collect();
    let y = match op {
        // the in-place methods, on a non-leaf copy of the destination (torch's gradcheck of
        // `x.clone().add_(y)`): the update rebases its history
        Op::Inplace(i) => {
            let Operand::Tensor(dst) = args[0] else {
                unreachable!("a destination tensor")
            };
            let y = dst.mul(1.0).unwrap();
            let r = match i {
                InplaceOp::Copy => match args[1] {
                    Operand::Tensor(t) => y.copy_(t),
                    Operand::Scalar(_) => unreachable!("copy_ takes a tensor"),
                },
                InplaceOp::Fill => y.fill_(args[1]),
                InplaceOp::Add => y.add_(args[1]),
                InplaceOp::Mul => y.mul_(args[1]),
            };
            r.unwrap_or_else(|e| panic!("{op}: {e}"));
            y
        }
        _ => Tensor::call(op, &args).unwrap_or_else(|e| panic!("{op}: {e}")),
    };
    let n = y.numel();
    let w: Vec<f64> = (0..n).map(|i| 0.5 + ((i * 5) % 7) as f64 * 0.25).collect();
    let wt = Tensor::from_f64(&w, y.shape(), DType::F64).unwrap();
    (y.mul(&wt).unwrap().sum(&[], false).unwrap(), w)
}

/// Backward against central differences for every float operand of `op(inputs)`.
fn gradcheck(op: &Op, inputs: &[In]) {
    let vals: Vec<Vec<f64>> = inputs
        .iter()
        .enumerate()
        .map(|(k, x)| match x {
            F(_, d) | T(_, d) => values(*d, numel(x), k),
            _ => vec![],
        })
        .collect();
    let leaves: Vec<Option<Tensor>> = inputs
        .iter()
        .zip(&vals)
        .map(|(x, v)| match x {
            S(_) => None,
            Ids(..) | B(_) => Some(make(x, v)),
            _ => Some(make(x, v).requires_grad_(true).unwrap()),
        })
        .collect();
    let (l, _) = loss(op, inputs, &leaves);
    l.backward().unwrap_or_else(|e| panic!("{op}: {e}"));
    for (k, x) in inputs.iter().enumerate() {
        if !matches!(x, F(..) | T(..)) {
            continue;
        }
        let leaf = leaves[k].as_ref().unwrap();
        let analytic = match leaf.grad() {
            Some(g) => {
                assert_eq!(
                    g.shape(),
                    leaf.shape(),
                    "{op}: operand {k}'s gradient shape"
                );
                g.to_vec_f64().unwrap()
            }
            None => vec![0.0; numel(x)],
        };
        let _guard = no_grad();
        for j in 0..numel(x) {
            let at = |d: f64| {
                let mut ts: Vec<Option<Tensor>> = leaves.to_vec();
                let mut v = vals[k].clone();
                v[j] += d;
                ts[k] = Some(make(x, &v));
                loss(op, inputs, &ts).0.item().unwrap()
            };
            let eps = 1e-6;
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (analytic[j] - numeric).abs() <= 1e-5 + 1e-3 * numeric.abs(),
                "{op} on {inputs:?}: operand {k} element {j}: backward {} vs finite difference {numeric}",
                analytic[j]
            );
        }
    }
}

fn parse(text: &str) -> Op {
    kiln::ir::text::parse_op(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The shapes every unary rule is checked on: odd sizes, size 1, 0-d, non-contiguous.
#[test]
fn every_unary_rule_passes_gradcheck() {
    let mut checked = 0;
    for u in UnaryOp::ALL {
        if !matches!(u.info().derivative, Derivative::Rule(_)) {
            continue;
        }
        let d = u.info().domain[0];
        for x in [
            F(vec![3, 5], d),
            F(vec![1], d),
            F(vec![], d),
            T(vec![2, 3, 5], d),
        ] {
            gradcheck(&Op::Unary(u), &[x]);
        }
        checked += 1;
    }
    assert!(checked >= 30, "{checked} unary rules");
}

/// Same shapes, broadcast operands (either side, leading and size-1 dims), a literal
/// operand, and non-contiguous operands.
#[test]
fn every_binary_rule_passes_gradcheck() {
    let mut checked = 0;
    for b in BinaryOp::ALL {
        if !matches!(b.info().derivative, Derivative::Rule(_)) {
            continue;
        }
        let (da, db) = (b.info().domain[0], b.info().domain[1]);
        let lit = values(db, 1, 3)[0];
        for pair in [
            [F(vec![3, 5], da), F(vec![3, 5], db)],
            [F(vec![3, 5], da), F(vec![1, 5], db)],
            [F(vec![5], da), F(vec![3, 1], db)],
            [F(vec![1], da), F(vec![1], db)],
            [T(vec![3, 5], da), F(vec![5], db)],
            [F(vec![2, 3, 5], da), T(vec![3, 5], db)],
            [F(vec![3, 5], da), S(lit)],
        ] {
            gradcheck(&Op::Binary(b), &pair);
        }
        checked += 1;
    }
    assert!(checked >= 10, "{checked} binary rules");
}

/// The other rows with a rule, each in its forms (odd sizes, size 1, non-contiguous).
fn cases() -> Vec<(&'static str, Vec<In>)> {
    vec![
        ("sum {dims = [1]}", vec![t(&[3, 5])]),
        ("sum {dims = [0], keepdim = true}", vec![f(&[1, 5])]),
        ("sum", vec![f(&[])]),
        ("mean {dims = [-1]}", vec![t(&[2, 3, 5])]),
        ("mean {dims = [0, 2], keepdim = true}", vec![f(&[3, 1, 5])]),
        ("amax {dims = [1]}", vec![t(&[3, 5])]),
        ("amin", vec![f(&[1])]),
        ("reshape {shape = [5, 3]}", vec![t(&[3, 5])]),
        ("transpose {dim0 = 0, dim1 = 2}", vec![f(&[2, 1, 3])]),
        ("permute {dims = [2, 0, 1]}", vec![t(&[2, 3, 5])]),
        ("expand {shape = [3, 5]}", vec![f(&[1, 5])]),
        ("expand {shape = [2, 3, 5]}", vec![t(&[3, 5])]),
        ("contiguous", vec![t(&[3, 5])]),
        ("cast {dtype = f64}", vec![t(&[3, 5])]),
        ("where", vec![B(vec![3, 5]), t(&[3, 5]), f(&[5])]),
        ("where", vec![B(vec![3, 5]), f(&[1, 5]), t(&[3, 5])]),
        ("matmul", vec![t(&[3, 5]), f(&[5, 1])]),
        ("matmul", vec![f(&[2, 1, 3, 5]), t(&[3, 5, 2])]),
        ("matmul", vec![f(&[5]), t(&[2, 5, 3])]),
        ("matmul", vec![t(&[3, 5]), f(&[5])]),
        ("matmul", vec![f(&[1]), f(&[1])]),
        // a batch times a matrix: the weight's gradient is one product over all rows
        ("matmul", vec![t(&[2, 3, 5]), f(&[5, 4])]),
        ("matmul", vec![f(&[2, 1, 3, 5]), t(&[5, 4])]),
        ("softmax {dim = 0}", vec![t(&[3, 5])]),
        ("log_softmax {dim = -1}", vec![f(&[1, 5])]),
        ("linear", vec![t(&[3, 5]), f(&[2, 5]), f(&[2])]),
        ("linear", vec![f(&[5]), t(&[1, 5])]),
        ("linear", vec![t(&[2, 3, 5]), f(&[4, 5]), f(&[4])]),
        ("var {dims = [1], correction = 1}", vec![t(&[3, 5])]),
        ("var {dims = [], correction = 0}", vec![f(&[1, 5])]),
        (
            "layer_norm {ndim = 1, eps = 1e-5}",
            vec![t(&[3, 5]), f(&[5]), f(&[5])],
        ),
        ("layer_norm {ndim = 2, eps = 1e-5}", vec![f(&[2, 3, 5])]),
        ("rms_norm {ndim = 1, eps = 1e-6}", vec![t(&[3, 5]), f(&[5])]),
        ("clamp", vec![t(&[3, 5]), f(&[5]), f(&[1, 5])]),
        ("hardtanh {min_val = -1.0, max_val = 1.0}", vec![t(&[3, 5])]),
        ("leaky_relu {negative_slope = 0.1}", vec![t(&[3, 5])]),
        ("elu {alpha = 1.5}", vec![f(&[1])]),
        ("softplus {beta = 2.0, threshold = 3.0}", vec![t(&[3, 5])]),
        (
            "nan_to_num {nan = 0.0, posinf = 100.0, neginf = -100.0}",
            vec![f(&[3, 5])],
        ),
        ("slice {dim = 1, start = 1, end = 4}", vec![t(&[3, 5])]),
        (
            "slice {dim = 1, start = 0, end = 5, step = 2}",
            vec![t(&[3, 5])],
        ),
        ("slice {dim = 0, start = 0, end = 1}", vec![f(&[1, 5])]),
        ("cat {dim = 1}", vec![t(&[3, 5]), f(&[3, 1])]),
        ("cat {dim = 0}", vec![f(&[1, 5]), t(&[3, 5])]),
        ("triu {diagonal = 1}", vec![t(&[3, 5])]),
        ("tril {diagonal = 0}", vec![f(&[1, 1])]),
        (
            "index_select {dim = 0}",
            vec![t(&[3, 5]), ids(&[4], &[2, 0, 2, 1])],
        ),
        (
            "index_select {dim = 1}",
            vec![f(&[3, 5]), ids(&[2, 2], &[4, 4, 0, 1])],
        ),
        ("index_select {dim = 0}", vec![f(&[1]), ids(&[1], &[0])]),
        (
            "index_add {dim = 1}",
            vec![t(&[3, 5]), ids(&[3], &[4, 0, 4]), f(&[3, 3])],
        ),
        (
            "index_add {dim = 0}",
            vec![f(&[3, 5]), ids(&[1], &[2]), t(&[1, 5])],
        ),
        ("embedding", vec![t(&[3, 5]), ids(&[2, 2], &[2, 0, 2, 1])]),
        (
            "convolution {stride = [2, 1], padding = [1, 1], groups = 2}",
            vec![t(&[2, 4, 3, 5]), f(&[4, 2, 3, 2])],
        ),
        (
            "convolution {stride = [1], padding = [1], groups = 3}",
            vec![f(&[1, 3, 5]), t(&[3, 1, 3])],
        ),
        (
            "convolution {stride = [2], padding = [1], transposed = true, output_padding = [1]}",
            vec![t(&[2, 3, 4]), f(&[3, 2, 3])],
        ),
        ("add_", vec![t(&[3, 5]), f(&[5])]),
        ("add_", vec![f(&[1]), S(0.5)]),
        ("mul_", vec![f(&[3, 5]), t(&[3, 5])]),
        ("mul_", vec![t(&[3, 5]), f(&[3, 1])]),
        ("mul_", vec![f(&[3, 5]), S(1.7)]),
        ("copy_", vec![f(&[3, 5]), t(&[1, 5])]),
        ("fill_", vec![t(&[3, 5]), f(&[])]),
    ]
}

#[test]
fn every_other_rule_passes_gradcheck() {
    for (text, inputs) in cases() {
        gradcheck(&parse(text), &inputs);
    }
}

/// A padding row gets no gradient, however often it is looked up (torch's
/// `embedding(..., padding_idx)`); counted from the end when negative.
#[test]
fn an_embedding_padding_row_gets_no_gradient() {
    for p in [1, -2] {
        let w = Tensor::ones(&[3, 2], DType::F64)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let ids = Tensor::from_vec(vec![1i64, 2, 1, 0], &[4]).unwrap();
        w.embedding(&ids, Some(p))
            .unwrap()
            .sum(&[], false)
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            w.grad().unwrap().to_vec_f64().unwrap(),
            vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
        );
    }
}

/// Every row with a rule is checked: the unary and binary families by the generated tests,
/// every other row (the in-place family included) by a case here.
#[test]
fn every_rule_has_a_gradcheck_case() {
    let checked: HashSet<String> = cases()
        .iter()
        .map(|(text, _)| parse(text).name().to_string())
        .collect();
    let families: HashSet<&str> = UnaryOp::ALL
        .iter()
        .map(|u| u.name())
        .chain(BinaryOp::ALL.iter().map(|b| b.name()))
        .collect();
    let unchecked: Vec<&str> = rows()
        .into_iter()
        .filter(|r| matches!(r.derivative, Derivative::Rule(_)))
        .map(|r| r.name)
        .filter(|n| !families.contains(n) && !checked.contains(*n))
        .collect();
    assert!(
        unchecked.is_empty(),
        "rules without a gradcheck case: {unchecked:?}"
    );
}
