//! Spot checks of values against f64 reference formulas (the interpreter's semantics).

mod common;
use common::*;
use kiln_ir::{rng, BinaryOp, DType, InplaceOp, Op, ReduceOp, Scalar, Shape, UnaryOp};
use kiln_runtime::{execute, execute_inplace, CpuTensor, EagerArg};

fn tol(dt: DType) -> (f64, f64) {
    match dt {
        DType::F32 => (2e-6, 1e-6),
        DType::F64 => (1e-12, 1e-12),
        DType::F16 => (2e-3, 1e-3),
        DType::BF16 => (1.6e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

#[test]
fn unary_matches_f64_formulas() {
    let xs: Vec<f64> = (0..41).map(|i| -5.0 + 0.25 * i as f64 + 0.01).collect();
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = t(&xs, &[41], dt);
        let xr = x.to_f64_vec();
        for u in UnaryOp::ALL
            .into_iter()
            .filter(|u| u.info().dtype.result(dt).is_ok())
        {
            let got = ex(Op::Unary(u), &[&x]).to_f64_vec();
            let want: Vec<f64> = xr.iter().map(|&v| dt.round_f64(u.eval_f64(v))).collect();
            let (r, a) = tol(dt);
            assert_close(&got, &want, r, a);
        }
    }
    let n = t(&[f64::NAN, -1.0, 2.0], &[3], DType::F32);
    let r = ex(Op::Unary(UnaryOp::Relu), &[&n]).to_f64_vec();
    assert!(r[0].is_nan() && r[1] == 0.0 && r[2] == 2.0);
    // Integer inputs of float ops compute in f32.
    let i = t(&[1.0, 4.0], &[2], DType::I32);
    let s = ex(Op::Unary(UnaryOp::Sqrt), &[&i]);
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.to_f64_vec(), vec![1.0, 2.0]);
    let m = t(&[i32::MIN as f64, -3.0], &[2], DType::I32);
    assert_eq!(
        ex(Op::Unary(UnaryOp::Abs), &[&m]).to_vec::<i32>().unwrap(),
        vec![i32::MIN, 3]
    );
}

#[test]
fn binary_promotion_and_wrapping() {
    let i = t(&[1.0, 2.0, 3.0], &[3], DType::I32);
    let r = ex_s(Op::Binary(BinaryOp::Add), &i, Scalar::Float(1.5));
    assert_eq!(
        (r.dtype(), r.to_f64_vec()),
        (DType::F32, vec![2.5, 3.5, 4.5])
    );
    let r = ex_s(Op::Binary(BinaryOp::Div), &i, Scalar::Int(2));
    assert_eq!(
        (r.dtype(), r.to_f64_vec()),
        (DType::F32, vec![0.5, 1.0, 1.5])
    );
    let big = t(&[i32::MAX as f64], &[1], DType::I32);
    let r = ex_s(Op::Binary(BinaryOp::Add), &big, Scalar::Int(1));
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![i32::MIN]);
    let l = t(&[5.0, 6.0, 7.0], &[3], DType::I64);
    let r = ex(Op::Binary(BinaryOp::Mul), &[&i, &l]);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![5, 12, 21]);
    let r = ex_s(Op::Binary(BinaryOp::Lt), &i, Scalar::Float(1.5));
    assert_eq!(r.to_vec::<bool>().unwrap(), vec![true, false, false]);
    let r = ex_s(Op::Binary(BinaryOp::Pow), &i, Scalar::Int(3));
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![1, 8, 27]);
    let a = t(&[1.0, f64::NAN, 3.0], &[3], DType::F32);
    let b = t(&[2.0, 0.0, f64::NAN], &[3], DType::F32);
    let mx = ex(Op::Binary(BinaryOp::Maximum), &[&a, &b]).to_f64_vec();
    assert!(mx[0] == 2.0 && mx[1].is_nan() && mx[2].is_nan());
    let p = t(&[true as u8 as f64, 0.0], &[2], DType::Bool);
    let q = t(&[0.0, 0.0], &[2], DType::Bool);
    assert_eq!(
        ex(Op::Binary(BinaryOp::Maximum), &[&p, &q])
            .to_vec::<bool>()
            .unwrap(),
        vec![true, false]
    );
    // Broadcasting [3,1] with [4] gives [3,4].
    let c = t(&[0.0, 10.0, 20.0], &[3, 1], DType::F64);
    let d = t(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F64);
    let r = ex(Op::Binary(BinaryOp::Sub), &[&c, &d]);
    assert_eq!(r.shape(), &[3, 4]);
    assert_eq!(r.to_f64_vec()[4..8], [9.0, 8.0, 7.0, 6.0]);
    // f16 with a float scalar stays f16.
    let h = t(&[1.0, 2.0], &[2], DType::F16);
    let r = ex_s(Op::Binary(BinaryOp::Mul), &h, Scalar::Float(0.125));
    assert_eq!((r.dtype(), r.to_f64_vec()), (DType::F16, vec![0.125, 0.25]));
}

#[test]
fn casts_and_where() {
    let x = t(&[-2.7, 2.7, f64::NAN, 0.0], &[4], DType::F32);
    assert_eq!(
        ex(Op::Cast { dtype: DType::I32 }, &[&x])
            .to_vec::<i32>()
            .unwrap(),
        vec![-2, 2, 0, 0]
    );
    assert_eq!(
        ex(Op::Cast { dtype: DType::Bool }, &[&x])
            .to_vec::<bool>()
            .unwrap(),
        vec![true, true, true, false]
    );
    let l = t(&[3_000_000_000.0], &[1], DType::I64);
    assert_eq!(
        ex(Op::Cast { dtype: DType::I32 }, &[&l])
            .to_vec::<i32>()
            .unwrap(),
        vec![3_000_000_000i64 as i32]
    );
    let c = t(&[1.0, 0.0, 1.0], &[3], DType::Bool);
    let a = t(&[1.0, 2.0, 3.0], &[3], DType::F32);
    let r = execute(
        &Op::Where,
        &[
            EagerArg::Tensor(&c),
            EagerArg::Tensor(&a),
            EagerArg::Scalar(Scalar::Float(-1.0)),
        ],
    )
    .unwrap();
    assert_eq!(r.to_f64_vec(), vec![1.0, -1.0, 3.0]);
}

#[test]
fn reductions_follow_torch() {
    let i = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], DType::I32);
    let s = ex(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![1],
            keepdim: true,
            dtype: None,
        },
        &[&i],
    );
    assert_eq!((s.dtype(), s.shape()), (DType::I64, &[2usize, 1][..]));
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![6, 15]);
    let b = t(&[1.0, 0.0, 1.0], &[3], DType::Bool);
    assert_eq!(
        ex(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: vec![],
                keepdim: false,
                dtype: None
            },
            &[&b]
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![2]
    );
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F32);
    let v1 = ex(
        Op::Var {
            dims: vec![],
            correction: 1,
            keepdim: false,
        },
        &[&x],
    )
    .to_f64_vec();
    let v0 = ex(
        Op::Var {
            dims: vec![0],
            correction: 0,
            keepdim: false,
        },
        &[&x],
    )
    .to_f64_vec();
    assert_close(&v1, &[5.0 / 3.0], 1e-6, 0.0);
    assert_eq!(v0, vec![1.25]);
    let n = t(&[1.0, f64::NAN, 5.0, f64::NAN], &[4], DType::F32);
    assert!(ex(
        Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![],
            keepdim: false,
            dtype: None
        },
        &[&n]
    )
    .to_f64_vec()[0]
        .is_nan());
    assert_eq!(
        ex(
            Op::Argmax {
                dim: 0,
                keepdim: false
            },
            &[&n]
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![1]
    );
    let ties = t(&[1.0, 5.0, 5.0, 2.0, 0.0, 9.0], &[2, 3], DType::F64);
    assert_eq!(
        ex(
            Op::Argmax {
                dim: 1,
                keepdim: false
            },
            &[&ties]
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![1, 2]
    );
    assert_eq!(
        ex(
            Op::Argmax {
                dim: 0,
                keepdim: true
            },
            &[&ties]
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![1, 0, 1]
    );
    // A long f32 row stays close to the f64 sum.
    let r = randn(&[4096], DType::F32, 3);
    let want: f64 = r.to_f64_vec().iter().sum();
    let got = ex(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![],
            keepdim: false,
            dtype: None,
        },
        &[&r],
    )
    .to_f64_vec()[0];
    assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0));
    // 0-d and empty inputs.
    let z = t(&[3.5], &[], DType::F32);
    assert_eq!(
        ex(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: vec![],
                keepdim: false,
                dtype: None
            },
            &[&z]
        )
        .to_f64_vec(),
        vec![3.5]
    );
    assert_eq!(
        ex(
            Op::Argmax {
                dim: 0,
                keepdim: false
            },
            &[&z]
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![0]
    );
    let e = t(&[], &[0, 3], DType::F32);
    assert_eq!(
        ex(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: vec![0],
                keepdim: false,
                dtype: None
            },
            &[&e]
        )
        .to_f64_vec(),
        vec![0.0; 3]
    );
    assert!(ex(
        Op::Reduce {
            op: ReduceOp::Mean,
            dims: vec![0],
            keepdim: false,
            dtype: None
        },
        &[&e]
    )
    .to_f64_vec()[0]
        .is_nan());
    assert_eq!(
        ex(
            Op::Reduce {
                op: ReduceOp::Max,
                dims: vec![1],
                keepdim: false,
                dtype: None
            },
            &[&e]
        )
        .shape(),
        &[0]
    );
}

#[test]
fn norms_match_formulas() {
    let x = randn(&[3, 4096], DType::F32, 5);
    let xs = x.to_f64_vec();
    let sm = ex(Op::Softmax { dim: -1 }, &[&x]).to_f64_vec();
    let lsm = ex(Op::LogSoftmax { dim: 1 }, &[&x]).to_f64_vec();
    let ln = ex(
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-5),
        },
        &[&x],
    )
    .to_f64_vec();
    let rms = ex(
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(1e-6),
        },
        &[&x],
    )
    .to_f64_vec();
    for r in 0..3 {
        let row = &xs[r * 4096..][..4096];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
        let mean = row.iter().sum::<f64>() / 4096.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4096.0;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / 4096.0;
        let f = |v: f64| v as f32 as f64;
        let want_sm: Vec<f64> = row.iter().map(|v| f((v - m).exp() / z)).collect();
        let want_lsm: Vec<f64> = row.iter().map(|v| f(v - m - z.ln())).collect();
        let want_ln: Vec<f64> = row
            .iter()
            .map(|v| f((v - mean) / (var + 1e-5).sqrt()))
            .collect();
        let want_rms: Vec<f64> = row.iter().map(|v| f(v / (ms + 1e-6).sqrt())).collect();
        assert_close(&sm[r * 4096..][..4096], &want_sm, 1e-6, 1e-9);
        assert_close(&lsm[r * 4096..][..4096], &want_lsm, 1e-6, 1e-6);
        assert_close(&ln[r * 4096..][..4096], &want_ln, 1e-6, 1e-6);
        assert_close(&rms[r * 4096..][..4096], &want_rms, 1e-6, 1e-6);
    }
    let inf = t(
        &[f64::NEG_INFINITY, 0.0, f64::NAN, 1.0],
        &[2, 2],
        DType::F32,
    );
    let s = ex(Op::Softmax { dim: 1 }, &[&inf]).to_f64_vec();
    assert_eq!(s[..2], [0.0, 1.0]);
    assert!(s[2].is_nan() && s[3].is_nan());
}

/// The sign bits of a tensor's values (`true` for -0, -1, ...).
fn signs(x: &CpuTensor) -> Vec<bool> {
    x.to_f64_vec()
        .iter()
        .map(|v| v.is_sign_negative())
        .collect()
}

#[test]
fn zeros_carry_torchs_signs() {
    // torch 2.15: layer_norm of [-0, -0] is +0 (its kernel adds the default bias, +0), -0
    // again with weight 1 and bias -0; rms_norm has no bias and keeps -0
    let z = t(&[-0.0, -0.0], &[1, 2], DType::F32);
    let (one, nz) = (
        t(&[1.0, 1.0], &[2], DType::F32),
        t(&[-0.0, -0.0], &[2], DType::F32),
    );
    let ln = |args: &[&CpuTensor]| {
        let eps = kiln_ir::F64::new(1e-5);
        signs(&ex(Op::LayerNorm { ndim: 1, eps }, args))
    };
    assert_eq!(ln(&[&z]), [false, false]);
    assert_eq!(ln(&[&z, &one]), [false, false]);
    assert_eq!(ln(&[&z, &one, &nz]), [true, true]);
    let eps = kiln_ir::F64::new(1e-6);
    assert_eq!(
        signs(&ex(Op::RmsNorm { ndim: 1, eps }, &[&z])),
        [true, true]
    );
    // a product with k = 1 is summed from +0, as for k = 2 (torch's bmm and f16 products)
    for dt in [DType::F32, DType::F64, DType::F16] {
        let col = ex(
            Op::Cast { dtype: dt },
            &[&t(&[1.0, 1.0], &[2, 1], DType::F32)],
        );
        let row = ex(Op::Cast { dtype: dt }, &[&z]);
        assert_eq!(
            signs(&ex(Op::Matmul, &[&col, &row])),
            [false; 4],
            "{dt} k = 1"
        );
        assert_eq!(signs(&ex(Op::Matmul, &[&row, &col])), [false], "{dt} k = 2");
    }
}

#[test]
fn matmul_shapes_and_values() {
    let a = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], DType::F32);
    let b = t(&[1.0, 0.0, 2.0, 1.0, 0.0, 1.0], &[3, 2], DType::F32);
    assert_eq!(
        ex(Op::Matmul, &[&a, &b]).to_f64_vec(),
        vec![5.0, 5.0, 14.0, 11.0]
    );
    let v = t(&[1.0, 1.0, 1.0], &[3], DType::F32);
    let mv = ex(Op::Matmul, &[&a, &v]);
    assert_eq!(
        (mv.shape(), mv.to_f64_vec()),
        (&[2usize][..], vec![6.0, 15.0])
    );
    let dot = ex(Op::Matmul, &[&v, &v]);
    assert_eq!((dot.shape(), dot.to_f64_vec()), (&[][..], vec![3.0]));
    let vm = ex(Op::Matmul, &[&v, &b]);
    assert_eq!(vm.to_f64_vec(), vec![3.0, 2.0]);
    let bat = randn(&[5, 1, 2, 3], DType::F64, 1);
    let rhs = randn(&[4, 3, 7], DType::F64, 2);
    let r = ex(Op::Matmul, &[&bat, &rhs]);
    assert_eq!(r.shape(), &[5, 4, 2, 7]);
    let (bv, rv, out) = (bat.to_f64_vec(), rhs.to_f64_vec(), r.to_f64_vec());
    let want: f64 = (0..3)
        .map(|p| bv[3 * 6 + 3 + p] * rv[2 * 21 + p * 7 + 5])
        .sum();
    assert!((out[((3 * 4 + 2) * 2 + 1) * 7 + 5] - want).abs() < 1e-12);
    let ia = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I32);
    assert_eq!(
        ex(Op::Matmul, &[&ia, &ia]).to_vec::<i32>().unwrap(),
        vec![7, 10, 15, 22]
    );
    // f32 vs f64 on a bigger problem.
    let x = randn(&[70, 130], DType::F64, 3);
    let y = randn(&[130, 90], DType::F64, 4);
    let want = ex(Op::Matmul, &[&x, &y]).to_f64_vec();
    let x32 = ex(Op::Cast { dtype: DType::F32 }, &[&x]);
    let y32 = ex(Op::Cast { dtype: DType::F32 }, &[&y]);
    assert_close(
        &ex(Op::Matmul, &[&x32, &y32]).to_f64_vec(),
        &want,
        1e-4,
        1e-4,
    );
    // linear = x @ wᵀ + b
    let w = t(&[1.0, 0.0, 1.0, 0.0, 1.0, 0.0], &[2, 3], DType::F32);
    let bias = t(&[10.0, 20.0], &[2], DType::F32);
    assert_eq!(
        ex(Op::Linear, &[&a, &w, &bias]).to_f64_vec(),
        vec![14.0, 22.0, 20.0, 25.0]
    );
    let h = ex(Op::Cast { dtype: DType::F16 }, &[&a]);
    let hw = ex(Op::Cast { dtype: DType::F16 }, &[&w]);
    let l = ex(Op::Linear, &[&h, &hw]);
    assert_eq!(
        (l.dtype(), l.to_f64_vec()),
        (DType::F16, vec![4.0, 2.0, 10.0, 5.0])
    );
}

#[test]
fn layout_ops() {
    let a = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I32);
    let b = t(&[0.5, 1.5], &[2, 1], DType::F32);
    let c = ex(Op::Cat { dim: 1 }, &[&a, &b]);
    assert_eq!(
        (c.dtype(), c.to_f64_vec()),
        (DType::F32, vec![1.0, 2.0, 0.5, 3.0, 4.0, 1.5])
    );
    let idx = t(&[1.0, 1.0, 0.0], &[3], DType::I32);
    assert_eq!(
        ex(Op::IndexSelect { dim: 0 }, &[&a, &idx])
            .to_vec::<i32>()
            .unwrap(),
        vec![3, 4, 3, 4, 1, 2]
    );
    let m = t(
        &(1..=9).map(|v| v as f64).collect::<Vec<_>>(),
        &[3, 3],
        DType::F64,
    );
    assert_eq!(
        ex(Op::Triu { diagonal: 1 }, &[&m]).to_f64_vec(),
        vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        ex(Op::Tril { diagonal: 0 }, &[&m]).to_f64_vec(),
        vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]
    );
    let s = ex(
        Op::Slice {
            dim: 1,
            start: 0,
            end: 3,
            step: 2,
        },
        &[&m],
    );
    assert_eq!(s.to_f64_vec(), vec![1.0, 3.0, 4.0, 6.0, 7.0, 9.0]);
    let tr = ex(Op::Transpose { dim0: 0, dim1: -1 }, &[&m]);
    assert_eq!(tr.to_f64_vec()[..3], [1.0, 4.0, 7.0]);
    let r = ex(
        Op::Reshape {
            shape: Shape::of(&[9]),
        },
        &[&tr],
    );
    assert!(!r.shares_storage(&m), "a transposed reshape copies");
    assert_eq!(r.to_f64_vec()[..4], [1.0, 4.0, 7.0, 2.0]);
}

#[test]
fn creation_ops() {
    let ar = execute(
        &Op::Arange {
            start: 1.0.into(),
            end: 2.0.into(),
            step: 0.25.into(),
            dtype: DType::F32,
        },
        &[],
    )
    .unwrap();
    assert_eq!(ar.to_f64_vec(), vec![1.0, 1.25, 1.5, 1.75]);
    let ai = execute(
        &Op::Arange {
            start: 0.0.into(),
            end: 5.0.into(),
            step: 2.0.into(),
            dtype: DType::I64,
        },
        &[],
    )
    .unwrap();
    assert_eq!(ai.to_vec::<i64>().unwrap(), vec![0, 2, 4]);
    let r = execute(
        &Op::Rand {
            shape: Shape::of(&[300, 200]),
            dtype: DType::F32,
            seed: 9,
        },
        &[],
    )
    .unwrap();
    let v = r.to_f64_vec();
    assert!((0..v.len()).all(|i| v[i] == rng::uniform(9, i as u64) as f32 as f64));
    let n = execute(
        &Op::Randn {
            shape: Shape::of(&[5]),
            dtype: DType::F64,
            seed: 2,
        },
        &[],
    )
    .unwrap();
    assert_eq!(
        n.to_f64_vec(),
        (0..5).map(|i| rng::normal(2, i)).collect::<Vec<_>>()
    );
    let f = execute(
        &Op::Full {
            shape: Shape::of(&[2, 2]),
            value: Scalar::Float(-1.5),
            dtype: DType::I32,
        },
        &[],
    )
    .unwrap();
    assert_eq!(f.to_vec::<i32>().unwrap(), vec![-1; 4]);
    let z = execute(
        &Op::Full {
            shape: Shape::of(&[3]),
            value: Scalar::Int(0),
            dtype: DType::F64,
        },
        &[],
    )
    .unwrap();
    assert_eq!(z.to_f64_vec(), vec![0.0; 3]);
    let fv = execute(
        &Op::FromVec {
            values: vec![1.9, -1.9].into(),
            shape: Shape::of(&[2]),
            dtype: DType::I64,
        },
        &[],
    )
    .unwrap();
    assert_eq!(fv.to_vec::<i64>().unwrap(), vec![1, -1]);
    let x = CpuTensor::from_slice(&[half::bf16::from_f32(1.5)], &[1]).unwrap();
    assert_eq!(x.dtype(), DType::BF16);
    assert_eq!(x.to_vec::<half::bf16>().unwrap()[0].to_f32(), 1.5);
}

#[test]
fn inplace_ops() {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32);
    execute_inplace(InplaceOp::Add, &x, EagerArg::Scalar(Scalar::Int(1))).unwrap();
    assert_eq!(x.to_f64_vec(), vec![2.0, 3.0, 4.0, 5.0]);
    let row = t(&[10.0, 100.0], &[2], DType::F64);
    execute_inplace(InplaceOp::Mul, &x, EagerArg::Tensor(&row)).unwrap();
    assert_eq!(
        (x.dtype(), x.to_f64_vec()),
        (DType::F32, vec![20.0, 300.0, 40.0, 500.0])
    );
    let zero_d = t(&[7.0], &[], DType::I64);
    execute_inplace(InplaceOp::Fill, &x, EagerArg::Tensor(&zero_d)).unwrap();
    assert_eq!(x.to_f64_vec(), vec![7.0; 4]);
    execute_inplace(InplaceOp::Copy, &x, EagerArg::Tensor(&row)).unwrap();
    assert_eq!(x.to_f64_vec(), vec![10.0, 100.0, 10.0, 100.0]);
    // Through a transposed view.
    let tv = ex(Op::Transpose { dim0: 0, dim1: 1 }, &[&x]);
    execute_inplace(
        InplaceOp::Add,
        &tv,
        EagerArg::Tensor(&t(&[1.0, 2.0], &[2], DType::F32)),
    )
    .unwrap();
    assert_eq!(x.to_f64_vec(), vec![11.0, 101.0, 12.0, 102.0]);
    // Integer destination with a wider integer operand wraps.
    let i = t(&[i32::MAX as f64], &[1], DType::I32);
    execute_inplace(
        InplaceOp::Add,
        &i,
        EagerArg::Tensor(&t(&[1.0], &[1], DType::I64)),
    )
    .unwrap();
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![i32::MIN]);
    // Source aliasing the destination: shift a row by one, as torch does with a copy.
    let v = t(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F32);
    let head = ex(
        Op::Slice {
            dim: 0,
            start: 0,
            end: 3,
            step: 1,
        },
        &[&v],
    );
    let tail = ex(
        Op::Slice {
            dim: 0,
            start: 1,
            end: 4,
            step: 1,
        },
        &[&v],
    );
    execute_inplace(InplaceOp::Copy, &tail, EagerArg::Tensor(&head)).unwrap();
    assert_eq!(v.to_f64_vec(), vec![1.0, 1.0, 2.0, 3.0]);
    // Functional form through execute leaves the input untouched.
    let y = execute(
        &Op::Inplace(InplaceOp::Add),
        &[EagerArg::Tensor(&v), EagerArg::Scalar(Scalar::Float(0.5))],
    )
    .unwrap();
    assert_eq!(y.to_f64_vec(), vec![1.5, 1.5, 2.5, 3.5]);
    assert_eq!(v.to_f64_vec(), vec![1.0, 1.0, 2.0, 3.0]);
    // A big contiguous destination takes the parallel path.
    let big = randn(&[200_000], DType::F32, 4);
    let before = big.to_f64_vec();
    execute_inplace(InplaceOp::Mul, &big, EagerArg::Scalar(Scalar::Float(2.0))).unwrap();
    assert!(big
        .to_f64_vec()
        .iter()
        .zip(&before)
        .all(|(a, b)| *a == 2.0 * b));
}

#[test]
fn zero_size_tensors() {
    let e = t(&[], &[0, 3], DType::F32);
    let r = ex(
        Op::Binary(BinaryOp::Add),
        &[&e, &t(&[1.0, 2.0, 3.0], &[3], DType::F32)],
    );
    assert_eq!(r.shape(), &[0, 3]);
    let w = randn(&[3, 4], DType::F32, 1);
    assert_eq!(ex(Op::Matmul, &[&e, &w]).shape(), &[0, 4]);
    let k0a = t(&[], &[2, 0], DType::F32);
    let k0b = t(&[], &[0, 3], DType::F32);
    assert_eq!(ex(Op::Matmul, &[&k0a, &k0b]).to_f64_vec(), vec![0.0; 6]);
    let k0i = t(&[], &[2, 0], DType::I32);
    let k0j = t(&[], &[0, 3], DType::I32);
    assert_eq!(
        ex(Op::Matmul, &[&k0i, &k0j]).to_vec::<i32>().unwrap(),
        vec![0; 6]
    );
    let c = ex(
        Op::Cat { dim: 0 },
        &[&e, &t(&[1.0, 2.0, 3.0], &[1, 3], DType::F32)],
    );
    assert_eq!(c.to_f64_vec(), vec![1.0, 2.0, 3.0]);
    assert_eq!(ex(Op::Softmax { dim: 0 }, &[&e]).shape(), &[0, 3]);
    assert_eq!(
        ex(
            Op::LayerNorm {
                ndim: 1,
                eps: kiln_ir::F64::new(1e-5)
            },
            &[&e]
        )
        .shape(),
        &[0, 3]
    );
    assert_eq!(
        ex(
            Op::Reshape {
                shape: Shape::of(&[3, 0, 5])
            },
            &[&e]
        )
        .shape(),
        &[3, 0, 5]
    );
    assert_eq!(
        ex(
            Op::Slice {
                dim: 1,
                start: 3,
                end: 3,
                step: 1
            },
            &[&w]
        )
        .shape(),
        &[3, 0]
    );
    let idx = t(&[], &[0], DType::I64);
    assert_eq!(ex(Op::IndexSelect { dim: 1 }, &[&w, &idx]).shape(), &[3, 0]);
    execute_inplace(InplaceOp::Fill, &e, EagerArg::Scalar(Scalar::Float(1.0))).unwrap();
}

/// `index_add_owned` adds into its own destination and gives `execute`'s values (repeated
/// indices, every dtype, a negative dim); a strided destination, or one sharing storage
/// with the source, takes the copy; bad indices are the same typed error.
#[test]
fn index_add_into_an_owned_destination_equals_execute() {
    use kiln_runtime::index_add_owned;
    let idx = t(&[0.0, 2.0, 2.0, 4.0, 0.0], &[5], DType::I64);
    for dt in [DType::F32, DType::F64, DType::I64, DType::BF16] {
        let x = randn(&[5, 6], DType::F32, 7);
        let x = ex(Op::Cast { dtype: dt }, &[&x]);
        let src = ex(Op::Cast { dtype: dt }, &[&randn(&[5, 6], DType::F32, 8)]);
        for dim in [0, -2] {
            let want = ex(Op::IndexAdd { dim }, &[&x, &idx, &src]).to_f64_vec();
            let dst = x.deep_copy();
            let before = dst.version();
            let got = index_add_owned(dst.clone(), dim, &idx, &src).expect("adds");
            assert!(got.shares_storage(&dst), "{dt:?}: computed in place");
            assert!(dst.version() > before, "{dt:?}: version bumped");
            assert_eq!(got.to_f64_vec(), want, "{dt:?} dim {dim}");
        }
        // a transposed destination: the copy, the same values
        let xt = ex(Op::Transpose { dim0: 0, dim1: 1 }, &[&x.deep_copy()]);
        let srct = ex(Op::Transpose { dim0: 0, dim1: 1 }, &[&src]);
        let want = ex(Op::IndexAdd { dim: 1 }, &[&xt, &idx, &srct]).to_f64_vec();
        let got = index_add_owned(xt.clone(), 1, &idx, &srct).expect("adds");
        assert!(!got.shares_storage(&xt));
        assert_eq!(got.to_f64_vec(), want, "{dt:?} strided");
    }
    let x = randn(&[3, 2], DType::F32, 9);
    let src = randn(&[5, 2], DType::F32, 10);
    let e = index_add_owned(x.deep_copy(), 0, &idx, &src).expect_err("index 4 of 3");
    assert!(e.to_string().contains("index_add"), "{e}");
}

/// `op` over `dims` of `x` computed naively in f64 (row-major, reduced dims folded in order).
fn reduce_reference(op: ReduceOp, x: &CpuTensor, dims: &[usize]) -> Vec<f64> {
    let shape = x.shape().to_vec();
    let v = x.to_f64_vec();
    let out_shape: Vec<usize> = (0..shape.len())
        .filter(|d| !dims.contains(d))
        .map(|d| shape[d])
        .collect();
    let n_out: usize = out_shape.iter().product();
    let mut acc: Vec<Vec<f64>> = vec![Vec::new(); n_out];
    for (flat, &val) in v.iter().enumerate() {
        let mut rem = flat;
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let mut o = 0;
        for d in 0..shape.len() {
            if !dims.contains(&d) {
                o = o * shape[d] + idx[d];
            }
        }
        acc[o].push(val);
    }
    acc.into_iter()
        .map(|xs| match op {
            ReduceOp::Sum => xs.iter().sum(),
            ReduceOp::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
            ReduceOp::Max if xs.iter().any(|x| x.is_nan()) => f64::NAN,
            ReduceOp::Min if xs.iter().any(|x| x.is_nan()) => f64::NAN,
            ReduceOp::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
        })
        .collect()
}

/// Many reduced rows into few output columns (a bias's gradient: `[B,T,N]` summed over
/// `B` and `T`): every op, float and int, NaN propagation, leading and middle reduced
/// dims, and strided layouts, against a naive f64 reference; the sum of ones counts
/// exactly.
#[test]
fn reductions_of_many_rows_into_few_columns_match_a_reference() {
    let cases: [(&[usize], &[usize]); 4] = [
        (&[8, 128, 384], &[0, 1]),
        (&[3, 700, 20], &[1]),
        (&[20000, 5], &[0]),
        (&[2, 30000, 3], &[0, 1]),
    ];
    for (shape, dims) in cases {
        let mut x = randn(shape, DType::F32, 11);
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            if op == ReduceOp::Max {
                // one NaN in one output column
                let mut v = x.to_f64_vec();
                v[shape.iter().product::<usize>() / 2] = f64::NAN;
                x = t(&v, shape, DType::F32);
            }
            let want = reduce_reference(op, &x, dims);
            for xl in std::iter::once(x.clone()).chain(layouts(&x)) {
                let got = ex(
                    Op::Reduce {
                        op,
                        dims: dims.iter().map(|&d| d as i64).collect(),
                        keepdim: false,
                        dtype: None,
                    },
                    &[&xl],
                );
                assert_close(&got.to_f64_vec(), &want, 1e-5, 1e-5);
            }
        }
        let ones = ex(
            Op::Full {
                shape: Shape::of(shape),
                value: Scalar::Int(1),
                dtype: DType::I32,
            },
            &[],
        );
        let got = ex(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: dims.iter().map(|&d| d as i64).collect(),
                keepdim: false,
                dtype: None,
            },
            &[&ones],
        );
        let count: usize = dims.iter().map(|&d| shape[d]).product();
        assert_eq!(
            got.to_vec::<i64>().unwrap(),
            vec![count as i64; reduce_reference(ReduceOp::Sum, &ones, dims).len()]
        );
    }
}
