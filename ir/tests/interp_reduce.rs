//! The reference interpreter's reductions and normalising ops against hand-computed values.

use kiln_ir::interp::{eval_op, InterpArg, Value};
use kiln_ir::{DType, Op, ReduceOp};

fn t(dtype: DType, shape: &[usize], data: &[f64]) -> InterpArg {
    InterpArg::Tensor(Value::new(dtype, shape.to_vec(), data.to_vec()).unwrap())
}

fn run(op: Op, args: Vec<InterpArg>) -> Value {
    eval_op(&op, &args).unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Exact comparison where NaN equals NaN.
fn check(v: &Value, dtype: DType, shape: &[usize], data: &[f64]) {
    assert_eq!((v.dtype, v.shape.as_slice()), (dtype, shape), "{v:?}");
    assert_eq!(v.data.len(), data.len(), "{v:?}");
    for (a, b) in v.data.iter().zip(data) {
        assert!(
            a == b || (a.is_nan() && b.is_nan()),
            "{:?} != {data:?}",
            v.data
        );
    }
}

fn close(v: &Value, data: &[f64], tol: f64) {
    assert_eq!(v.data.len(), data.len(), "{v:?}");
    for (a, b) in v.data.iter().zip(data) {
        assert!((a - b).abs() <= tol, "{:?} != {data:?}", v.data);
    }
}

fn red(op: ReduceOp, dims: &[i64], keepdim: bool, x: InterpArg) -> Value {
    run(
        Op::Reduce {
            op,
            dims: dims.to_vec(),
            keepdim,
            dtype: None,
        },
        vec![x],
    )
}

fn m23() -> InterpArg {
    t(DType::F32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn sum_over_dims_with_keepdim() {
    check(
        &red(ReduceOp::Sum, &[], false, m23()),
        DType::F32,
        &[],
        &[21.0],
    );
    check(
        &red(ReduceOp::Sum, &[0], false, m23()),
        DType::F32,
        &[3],
        &[5.0, 7.0, 9.0],
    );
    check(
        &red(ReduceOp::Sum, &[-1], true, m23()),
        DType::F32,
        &[2, 1],
        &[6.0, 15.0],
    );
    check(
        &red(ReduceOp::Sum, &[0, 1], true, m23()),
        DType::F32,
        &[1, 1],
        &[21.0],
    );
    // x[a,b,c] = 6a + 2b + c; summing over a and c leaves 14 + 8b.
    let x: Vec<f64> = (0..12).map(f64::from).collect();
    for dims in [[0, 2], [2, 0], [-1, -3]] {
        check(
            &red(ReduceOp::Sum, &dims, false, t(DType::F64, &[2, 3, 2], &x)),
            DType::F64,
            &[3],
            &[14.0, 22.0, 30.0],
        );
    }
    check(
        &red(ReduceOp::Sum, &[1], true, t(DType::F64, &[2, 3, 2], &x)),
        DType::F64,
        &[2, 1, 2],
        &[6.0, 9.0, 24.0, 27.0],
    );
}

#[test]
fn int_and_bool_sums_are_i64() {
    check(
        &red(
            ReduceOp::Sum,
            &[],
            false,
            t(DType::I32, &[3], &[1.0, -5.0, 7.0]),
        ),
        DType::I64,
        &[],
        &[3.0],
    );
    check(
        &red(
            ReduceOp::Sum,
            &[1],
            false,
            t(DType::Bool, &[2, 3], &[1.0, 0.0, 1.0, 1.0, 1.0, 1.0]),
        ),
        DType::I64,
        &[2],
        &[2.0, 3.0],
    );
    // Reductions of a 0-d tensor (dims [] or [0]) are the tensor itself.
    check(
        &red(ReduceOp::Sum, &[0], false, t(DType::I32, &[], &[4.0])),
        DType::I64,
        &[],
        &[4.0],
    );
}

#[test]
fn mean_rounds_once_and_empty_is_nan() {
    check(
        &red(
            ReduceOp::Mean,
            &[1],
            false,
            t(DType::F32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
        ),
        DType::F32,
        &[2],
        &[1.5, 3.5],
    );
    // 7/3 in bf16 (spacing 2^-6 above 2) is 2.328125.
    check(
        &red(
            ReduceOp::Mean,
            &[],
            false,
            t(DType::BF16, &[3], &[1.0, 2.0, 4.0]),
        ),
        DType::BF16,
        &[],
        &[2.328125],
    );
    let empty = t(DType::F32, &[2, 0], &[]);
    check(
        &red(ReduceOp::Mean, &[1], false, empty.clone()),
        DType::F32,
        &[2],
        &[f64::NAN, f64::NAN],
    );
    check(
        &red(ReduceOp::Sum, &[1], false, empty.clone()),
        DType::F32,
        &[2],
        &[0.0, 0.0],
    );
    check(
        &red(ReduceOp::Sum, &[0], true, empty),
        DType::F32,
        &[1, 0],
        &[],
    );
}

#[test]
fn max_min_propagate_nan() {
    let x = t(DType::F32, &[2, 2], &[1.0, f64::NAN, 3.0, 2.0]);
    check(
        &red(ReduceOp::Max, &[1], false, x.clone()),
        DType::F32,
        &[2],
        &[f64::NAN, 3.0],
    );
    check(
        &red(ReduceOp::Min, &[0], false, x.clone()),
        DType::F32,
        &[2],
        &[1.0, f64::NAN],
    );
    check(
        &red(ReduceOp::Max, &[], false, x),
        DType::F32,
        &[],
        &[f64::NAN],
    );
    check(
        &red(
            ReduceOp::Max,
            &[],
            false,
            t(DType::I32, &[3], &[3.0, -1.0, 7.0]),
        ),
        DType::I32,
        &[],
        &[7.0],
    );
    check(
        &red(
            ReduceOp::Min,
            &[0],
            true,
            t(DType::F64, &[3], &[f64::INFINITY, -2.0, 5.0]),
        ),
        DType::F64,
        &[1],
        &[-2.0],
    );
    // max over an empty dim has no identity.
    let e = eval_op(
        &Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![1],
            keepdim: false,
            dtype: None,
        },
        &[t(DType::F32, &[2, 0], &[])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("size 0"), "{e}");
}

fn argmax(dim: i64, keepdim: bool, x: InterpArg) -> Value {
    run(Op::Argmax { dim, keepdim }, vec![x])
}

#[test]
fn argmax_first_index_and_nan() {
    check(
        &argmax(0, false, t(DType::F32, &[4], &[1.0, 3.0, 3.0, 2.0])),
        DType::I64,
        &[],
        &[1.0],
    );
    check(
        &argmax(-1, true, t(DType::F32, &[2, 2], &[5.0, 5.0, 1.0, 2.0])),
        DType::I64,
        &[2, 1],
        &[0.0, 1.0],
    );
    check(
        &argmax(0, false, t(DType::I32, &[2, 2], &[1.0, 9.0, 4.0, 2.0])),
        DType::I64,
        &[2],
        &[1.0, 0.0],
    );
    check(
        &argmax(
            0,
            false,
            t(DType::F32, &[4], &[1.0, f64::NAN, 5.0, f64::NAN]),
        ),
        DType::I64,
        &[],
        &[1.0],
    );
    check(
        &argmax(
            0,
            false,
            t(DType::F32, &[3], &[f64::NEG_INFINITY, -1.0, -1.0]),
        ),
        DType::I64,
        &[],
        &[1.0],
    );
    check(
        &argmax(0, false, t(DType::F32, &[], &[4.0])),
        DType::I64,
        &[],
        &[0.0],
    );
    // dim 1 of [2,3,2]: x[a,b,c] = 6a + 2b + c, so the max is always b = 2.
    let x: Vec<f64> = (0..12).map(f64::from).collect();
    check(
        &argmax(1, false, t(DType::F64, &[2, 3, 2], &x)),
        DType::I64,
        &[2, 2],
        &[2.0; 4],
    );
}

fn var(dims: &[i64], correction: i64, keepdim: bool, x: InterpArg) -> Value {
    run(
        Op::Var {
            dims: dims.to_vec(),
            correction,
            keepdim,
        },
        vec![x],
    )
}

#[test]
fn var_with_correction() {
    let x = t(DType::F64, &[4], &[1.0, 2.0, 3.0, 4.0]);
    check(
        &var(&[], 1, false, x.clone()),
        DType::F64,
        &[],
        &[5.0 / 3.0],
    );
    check(&var(&[], 0, false, x.clone()), DType::F64, &[], &[1.25]);
    check(&var(&[0], 1, true, x), DType::F64, &[1], &[5.0 / 3.0]);
    let rows = t(DType::F32, &[2, 2], &[1.0, 3.0, 2.0, 2.0]);
    check(
        &var(&[1], 1, false, rows.clone()),
        DType::F32,
        &[2],
        &[2.0, 0.0],
    );
    // N - correction <= 0: x/0 is inf, 0/0 is NaN (as PyTorch).
    check(
        &var(&[1], 2, false, rows.clone()),
        DType::F32,
        &[2],
        &[f64::INFINITY, f64::NAN],
    );
    check(
        &var(&[-1], 3, false, rows),
        DType::F32,
        &[2],
        &[f64::INFINITY, f64::NAN],
    );
    check(
        &var(&[0], 1, false, t(DType::F32, &[1, 2], &[5.0, 6.0])),
        DType::F32,
        &[2],
        &[f64::NAN, f64::NAN],
    );
}

#[test]
fn softmax_and_log_softmax() {
    let (l2, l3, l6) = (2f64.ln(), 3f64.ln(), 6f64.ln());
    let x = t(DType::F64, &[3], &[0.0, l2, l3]);
    close(
        &run(Op::Softmax { dim: 0 }, vec![x.clone()]),
        &[1.0 / 6.0, 1.0 / 3.0, 0.5],
        1e-15,
    );
    close(
        &run(Op::LogSoftmax { dim: -1 }, vec![x]),
        &[-l6, l2 - l6, l3 - l6],
        1e-15,
    );
    // Along dim 0 of [[0, 0], [ln 3, 0]]: columns [1/4, 3/4] and [1/2, 1/2].
    let m = t(DType::F64, &[2, 2], &[0.0, 0.0, l3, 0.0]);
    close(
        &run(Op::Softmax { dim: 0 }, vec![m]),
        &[0.25, 0.5, 0.75, 0.5],
        1e-15,
    );
    // Large logits do not overflow; results are rounded to f32.
    let v = run(
        Op::Softmax { dim: 1 },
        vec![t(DType::F32, &[1, 3], &[1000.0, 1000.0, 1000.0])],
    );
    check(&v, DType::F32, &[1, 3], &[(1.0f64 / 3.0) as f32 as f64; 3]);
    let v = run(
        Op::Softmax { dim: 0 },
        vec![t(DType::F32, &[2], &[f64::NAN, 1.0])],
    );
    check(&v, DType::F32, &[2], &[f64::NAN, f64::NAN]);
    check(
        &run(Op::Softmax { dim: 0 }, vec![t(DType::F32, &[], &[3.0])]),
        DType::F32,
        &[],
        &[1.0],
    );
}

#[test]
fn layer_norm_biased_variance() {
    let x = t(
        DType::F64,
        &[2, 4],
        &[1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0],
    );
    let s = 1.25f64.sqrt(); // biased variance of 1..4 is 1.25
    let z = [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s];
    let v = run(
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(0.0),
        },
        vec![x.clone()],
    );
    let want: Vec<f64> = z.iter().chain(z.iter().rev()).copied().collect();
    close(&v, &want, 1e-15);
    let w = t(DType::F64, &[4], &[1.0, 2.0, 1.0, 2.0]);
    let b = t(DType::F64, &[4], &[0.0, 0.0, 1.0, 1.0]);
    let v = run(
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(0.0),
        },
        vec![x.clone(), w.clone(), b],
    );
    close(
        &v,
        &[
            z[0],
            2.0 * z[1],
            z[2] + 1.0,
            2.0 * z[3] + 1.0,
            z[3],
            2.0 * z[2],
            z[1] + 1.0,
            2.0 * z[0] + 1.0,
        ],
        1e-15,
    );
    let v = run(
        Op::LayerNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(0.0),
        },
        vec![x, w],
    );
    close(
        &v,
        &[
            z[0],
            2.0 * z[1],
            z[2],
            2.0 * z[3],
            z[3],
            2.0 * z[2],
            z[1],
            2.0 * z[0],
        ],
        1e-15,
    );
    // Over the last two dims, with eps.
    let x2 = t(DType::F32, &[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let v = run(
        Op::LayerNorm {
            ndim: 2,
            eps: kiln_ir::F64::new(2.75),
        },
        vec![x2],
    );
    let want: Vec<f64> = [-1.5, -0.5, 0.5, 1.5]
        .iter()
        .map(|d| (d / 2.0f64) as f32 as f64)
        .collect();
    check(&v, DType::F32, &[1, 2, 2], &want);
}

#[test]
fn rms_norm() {
    let x = t(DType::F64, &[2, 2], &[3.0, 4.0, 1.0, 1.0]);
    let r = 12.5f64.sqrt();
    let v = run(
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(0.0),
        },
        vec![x.clone()],
    );
    close(&v, &[3.0 / r, 4.0 / r, 1.0, 1.0], 1e-15);
    let w = t(DType::F64, &[2], &[2.0, 0.5]);
    let v = run(
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(0.0),
        },
        vec![x, w],
    );
    close(&v, &[6.0 / r, 2.0 / r, 2.0, 0.5], 1e-15);
    let v = run(
        Op::RmsNorm {
            ndim: 1,
            eps: kiln_ir::F64::new(3.0),
        },
        vec![t(DType::F16, &[2], &[1.0, 1.0])],
    );
    check(&v, DType::F16, &[2], &[0.5, 0.5]);
}

#[test]
fn large_reduction_is_fast_and_exact() {
    // 100k elements: sum over the leading dim forces the permuted path.
    let n = 100_000usize;
    let data: Vec<f64> = (0..n).map(|i| (i % 7) as f64).collect();
    let x = t(DType::F64, &[1000, 100], &data);
    let v = red(ReduceOp::Sum, &[0], false, x.clone());
    let want: Vec<f64> = (0..100)
        .map(|j| (0..1000).map(|i| ((i * 100 + j) % 7) as f64).sum())
        .collect();
    check(&v, DType::F64, &[100], &want);
    let v = run(Op::Softmax { dim: 0 }, vec![x]);
    assert_eq!(v.shape, vec![1000, 100]);
}

/// torch's integer semantics where they differ from f64 arithmetic: sums start from +0
/// (Rust's f64 `Sum` starts from -0), i32 products wrap, integer narrowing casts wrap (float
/// to integer saturates). Each was found by `kiln fuzz` as a divergence from eager.
#[test]
fn signed_zero_sums_and_wrapping_integers_follow_torch() {
    let s = red(ReduceOp::Sum, &[], false, t(DType::F64, &[1], &[-0.0]));
    assert!(s.data[0] == 0.0 && s.data[0].is_sign_positive(), "{s:?}");
    let m = red(ReduceOp::Mean, &[], false, t(DType::F32, &[1], &[-0.0]));
    assert!(m.data[0].is_sign_positive(), "{m:?}");
    let big = 2147483647.0;
    let p = run(
        Op::Matmul,
        vec![
            t(DType::I32, &[1, 2], &[big, 1.0]),
            t(DType::I32, &[2, 1], &[2.0, 3.0]),
        ],
    );
    // 2·(2³¹-1) + 3 wraps to 1
    check(&p, DType::I32, &[1, 1], &[1.0]);
    let c = run(
        Op::Cast { dtype: DType::I32 },
        vec![t(DType::I64, &[2], &[9223372036854775807.0, 4294967298.0])],
    );
    check(&c, DType::I32, &[2], &[-1.0, 2.0]);
    let f = run(
        Op::Cast { dtype: DType::I32 },
        vec![t(DType::F32, &[2], &[3e19, f64::NAN])],
    );
    check(&f, DType::I32, &[2], &[big, 0.0]);
    // i64 sums wrap: 3 · 2⁶² is -2⁶² (torch gives -4611686018427387904)
    let q = 4611686018427387904.0;
    let w = red(ReduceOp::Sum, &[], false, t(DType::I64, &[3], &[q, q, q]));
    check(&w, DType::I64, &[], &[-q]);
}
