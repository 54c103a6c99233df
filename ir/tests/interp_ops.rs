//! The reference interpreter, one op at a time: pointwise ops, promotion and rounding,
//! creation ops and in-place ops, against hand-computed values.

use kiln_ir::interp::{eval_op, InterpArg, InterpError, Value};
use kiln_ir::{rng, BinaryOp, DType, Dim, InplaceOp, Op, Scalar, Shape, UnaryOp};

fn t(dtype: DType, shape: &[usize], data: &[f64]) -> InterpArg {
    InterpArg::Tensor(Value::new(dtype, shape.to_vec(), data.to_vec()).unwrap())
}

fn f32t(shape: &[usize], data: &[f64]) -> InterpArg {
    t(DType::F32, shape, data)
}

fn sc(s: impl Into<Scalar>) -> InterpArg {
    InterpArg::Scalar(s.into())
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

fn bin(b: BinaryOp, x: InterpArg, y: InterpArg) -> Value {
    run(Op::Binary(b), vec![x, y])
}

#[test]
fn add_broadcasts_numpy_style() {
    let v = bin(
        BinaryOp::Add,
        f32t(&[2, 1], &[10.0, 20.0]),
        f32t(&[3], &[1.0, 2.0, 3.0]),
    );
    check(
        &v,
        DType::F32,
        &[2, 3],
        &[11.0, 12.0, 13.0, 21.0, 22.0, 23.0],
    );
    // A 0-d tensor broadcasts like a scalar; sub is not commutative.
    let v = bin(
        BinaryOp::Sub,
        t(DType::F32, &[], &[1.0]),
        f32t(&[1, 2], &[5.0, 7.0]),
    );
    check(&v, DType::F32, &[1, 2], &[-4.0, -6.0]);
}

#[test]
fn int_tensor_times_float_scalar_gives_f32() {
    let v = bin(
        BinaryOp::Mul,
        t(DType::I32, &[3], &[1.0, 2.0, 3.0]),
        sc(1.5),
    );
    check(&v, DType::F32, &[3], &[1.5, 3.0, 4.5]);
    // An int scalar keeps an i32 tensor i32.
    let v = bin(BinaryOp::Add, t(DType::I32, &[2], &[1.0, -2.0]), sc(3i64));
    check(&v, DType::I32, &[2], &[4.0, 1.0]);
    // A 0-d tensor of the same category does not widen; one of a higher category decides.
    let v = bin(
        BinaryOp::Add,
        t(DType::I32, &[1], &[1.0]),
        t(DType::I64, &[], &[2.0]),
    );
    check(&v, DType::I32, &[1], &[3.0]);
    let v = bin(
        BinaryOp::Add,
        t(DType::I32, &[1], &[1.0]),
        t(DType::F64, &[], &[0.1]),
    );
    check(&v, DType::F64, &[1], &[1.1]);
}

#[test]
fn integer_division_is_true_division() {
    let v = bin(
        BinaryOp::Div,
        t(DType::I32, &[3], &[7.0, -7.0, 1.0]),
        sc(2i64),
    );
    check(&v, DType::F32, &[3], &[3.5, -3.5, 0.5]);
    let v = bin(BinaryOp::Div, t(DType::I64, &[2], &[1.0, 0.0]), sc(0i64));
    check(&v, DType::F32, &[2], &[f64::INFINITY, f64::NAN]);
}

#[test]
fn half_precision_rounds_operands_and_results() {
    // 0.1 is stored in f16 as 0.0999755859375; times 3 is 0.2999267578125 -> f16.
    let x = t(DType::F16, &[1], &[0.1]);
    let v = bin(BinaryOp::Mul, x.clone(), sc(3.0));
    check(&v, DType::F16, &[1], &[0.2998046875]);
    // The f16 value equals the scalar 0.1 once the scalar is rounded to f16 as well.
    check(
        &bin(BinaryOp::Eq, x.clone(), sc(0.1)),
        DType::Bool,
        &[1],
        &[1.0],
    );
    // f16 with f32: compared in f32, where 0.1 is a different number.
    check(
        &bin(BinaryOp::Eq, x, f32t(&[1], &[0.1])),
        DType::Bool,
        &[1],
        &[0.0],
    );
    // bf16 keeps 8 significant bits (spacing 2^-7 at 1): 1 + 2^-8 and 1 + 3*2^-8 are both
    // ties, which go to the even neighbour: 1 and 1 + 2^-6.
    let one = t(DType::BF16, &[2], &[1.0, 1.0]);
    let v = bin(
        BinaryOp::Add,
        one,
        t(DType::BF16, &[2], &[0.00390625, 0.01171875]),
    );
    check(&v, DType::BF16, &[2], &[1.0, 1.015625]);
    // f16 with bf16 promotes to f32.
    let v = bin(
        BinaryOp::Add,
        t(DType::F16, &[1], &[1.0 / 3.0]),
        t(DType::BF16, &[1], &[1.0]),
    );
    check(&v, DType::F32, &[1], &[1.333251953125]);
}

#[test]
fn comparisons_round_to_the_promoted_type() {
    let x = t(DType::I32, &[3], &[1.0, 2.0, 3.0]);
    check(
        &bin(BinaryOp::Lt, x.clone(), sc(2.5)),
        DType::Bool,
        &[3],
        &[1.0, 1.0, 0.0],
    );
    check(
        &bin(BinaryOp::Ge, x.clone(), sc(2i64)),
        DType::Bool,
        &[3],
        &[0.0, 1.0, 1.0],
    );
    check(
        &bin(BinaryOp::Ne, x, sc(2.0)),
        DType::Bool,
        &[3],
        &[1.0, 0.0, 1.0],
    );
    // f32(0.1) == 0.1 in f32 (the scalar is rounded to f32 first).
    check(
        &bin(BinaryOp::Eq, f32t(&[1], &[0.1]), sc(0.1)),
        DType::Bool,
        &[1],
        &[1.0],
    );
    let nan = f32t(&[2], &[f64::NAN, 1.0]);
    check(
        &bin(BinaryOp::Le, nan.clone(), sc(1.0)),
        DType::Bool,
        &[2],
        &[0.0, 1.0],
    );
    check(
        &bin(BinaryOp::Gt, nan, sc(0.0)),
        DType::Bool,
        &[2],
        &[0.0, 1.0],
    );
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    let a = f32t(&[3], &[1.0, f64::NAN, 3.0]);
    let b = f32t(&[3], &[2.0, 0.0, f64::NAN]);
    check(
        &bin(BinaryOp::Maximum, a.clone(), b.clone()),
        DType::F32,
        &[3],
        &[2.0, f64::NAN, f64::NAN],
    );
    check(
        &bin(BinaryOp::Minimum, a, b),
        DType::F32,
        &[3],
        &[1.0, f64::NAN, f64::NAN],
    );
    // On bools they are logical or / and.
    let p = t(DType::Bool, &[2], &[1.0, 0.0]);
    check(
        &bin(BinaryOp::Maximum, p, t(DType::Bool, &[2], &[0.0, 0.0])),
        DType::Bool,
        &[2],
        &[1.0, 0.0],
    );
}

#[test]
fn pow_and_int_arithmetic() {
    check(
        &bin(BinaryOp::Pow, f32t(&[3], &[2.0, 3.0, -2.0]), sc(2i64)),
        DType::F32,
        &[3],
        &[4.0, 9.0, 4.0],
    );
    check(
        &bin(BinaryOp::Pow, sc(2.0), f32t(&[2], &[0.5, -1.0])),
        DType::F32,
        &[2],
        &[std::f32::consts::SQRT_2 as f64, 0.5],
    );
    check(
        &bin(
            BinaryOp::Mul,
            t(DType::I64, &[2], &[-3.0, 4.0]),
            t(DType::I32, &[2], &[5.0, 6.0]),
        ),
        DType::I64,
        &[2],
        &[-15.0, 24.0],
    );
}

#[test]
fn unary_ops() {
    let x = f32t(&[4], &[-1.0, 0.0, 2.0, f64::NAN]);
    check(
        &run(Op::Unary(UnaryOp::Relu), vec![x.clone()]),
        DType::F32,
        &[4],
        &[0.0, 0.0, 2.0, f64::NAN],
    );
    check(
        &run(Op::Unary(UnaryOp::Abs), vec![x.clone()]),
        DType::F32,
        &[4],
        &[1.0, 0.0, 2.0, f64::NAN],
    );
    check(
        &run(Op::Unary(UnaryOp::Recip), vec![x]),
        DType::F32,
        &[4],
        &[-1.0, f64::INFINITY, 0.5, f64::NAN],
    );
    // neg keeps ints; exp of ints computes in the default float dtype.
    let i = t(DType::I32, &[2], &[0.0, 3.0]);
    check(
        &run(Op::Unary(UnaryOp::Neg), vec![i.clone()]),
        DType::I32,
        &[2],
        &[0.0, -3.0],
    );
    check(
        &run(Op::Unary(UnaryOp::Exp), vec![i]),
        DType::F32,
        &[2],
        &[1.0, 3f64.exp() as f32 as f64],
    );
    let s = run(Op::Unary(UnaryOp::Sigmoid), vec![f32t(&[1], &[0.0])]);
    check(&s, DType::F32, &[1], &[0.5]);
    // gelu(1) = 0.5 * (1 + erf(1/sqrt 2)) = 0.8413447460685429; tanh form 0.8411919906082768.
    let one = t(DType::F64, &[1], &[1.0]);
    let g = run(Op::Unary(UnaryOp::Gelu), vec![one.clone()]);
    assert!((g.data[0] - 0.841_344_746_068_542_9).abs() < 1e-15);
    let g = run(Op::Unary(UnaryOp::GeluTanh), vec![one.clone()]);
    assert!((g.data[0] - 0.841_191_990_608_276_8).abs() < 1e-15);
    let s = run(Op::Unary(UnaryOp::Silu), vec![one]);
    assert!((s.data[0] - 0.731_058_578_630_004_9).abs() < 1e-15);
    // f16 results are rounded: sqrt(2) in f16 is 1.4140625.
    let r = run(Op::Unary(UnaryOp::Sqrt), vec![t(DType::F16, &[1], &[2.0])]);
    check(&r, DType::F16, &[1], &[1.4140625]);
}

#[test]
fn where_broadcasts_and_promotes() {
    let cond = t(DType::Bool, &[2, 1], &[1.0, 0.0]);
    let v = run(
        Op::Where,
        vec![cond.clone(), f32t(&[3], &[1.0, 2.0, 3.0]), sc(0.5)],
    );
    check(&v, DType::F32, &[2, 3], &[1.0, 2.0, 3.0, 0.5, 0.5, 0.5]);
    let v = run(Op::Where, vec![cond, t(DType::I32, &[1], &[7.0]), sc(2.5)]);
    check(&v, DType::F32, &[2, 1], &[7.0, 2.5]);
}

#[test]
fn cast_truncates_and_rounds() {
    let x = f32t(&[5], &[-2.7, 2.7, f64::NAN, 0.0, 0.5]);
    check(
        &run(Op::Cast { dtype: DType::I32 }, vec![x.clone()]),
        DType::I32,
        &[5],
        &[-2.0, 2.0, 0.0, 0.0, 0.0],
    );
    check(
        &run(Op::Cast { dtype: DType::Bool }, vec![x]),
        DType::Bool,
        &[5],
        &[1.0, 1.0, 1.0, 0.0, 1.0],
    );
    check(
        &run(
            Op::Cast { dtype: DType::F16 },
            vec![t(DType::F64, &[2], &[1000.7, 1.0 / 3.0])],
        ),
        DType::F16,
        &[2],
        &[1000.5, 0.333251953125],
    );
    let c = run(Op::Contiguous, vec![f32t(&[2], &[1.0, 2.0])]);
    check(&c, DType::F32, &[2], &[1.0, 2.0]);
}

#[test]
fn creation_ops() {
    let full = |value: Scalar, dtype| Op::Full {
        shape: Shape::of(&[2, 2]),
        value,
        dtype,
    };
    check(
        &run(full(Scalar::Float(0.1), DType::F16), vec![]),
        DType::F16,
        &[2, 2],
        &[0.0999755859375; 4],
    );
    check(
        &run(full(Scalar::Float(2.7), DType::I32), vec![]),
        DType::I32,
        &[2, 2],
        &[2.0; 4],
    );
    check(
        &run(full(Scalar::Bool(true), DType::F32), vec![]),
        DType::F32,
        &[2, 2],
        &[1.0; 4],
    );
    let arange = |start: f64, end: f64, step: f64, dtype| Op::Arange {
        start: start.into(),
        end: end.into(),
        step: step.into(),
        dtype,
    };
    check(
        &run(arange(0.0, 5.0, 1.0, DType::I64), vec![]),
        DType::I64,
        &[5],
        &[0.0, 1.0, 2.0, 3.0, 4.0],
    );
    check(
        &run(arange(0.0, 1.0, 0.25, DType::F64), vec![]),
        DType::F64,
        &[4],
        &[0.0, 0.25, 0.5, 0.75],
    );
    check(
        &run(arange(5.0, 0.0, -2.0, DType::F32), vec![]),
        DType::F32,
        &[3],
        &[5.0, 3.0, 1.0],
    );
    check(
        &run(arange(0.0, 1.0, 0.3, DType::F32), vec![]),
        DType::F32,
        &[4],
        &[0.0, 0.3f32 as f64, 0.6f32 as f64, 0.9f32 as f64],
    );
    check(
        &run(arange(0.5, 3.0, 1.0, DType::I32), vec![]),
        DType::I32,
        &[3],
        &[0.0, 1.0, 2.0],
    );
    check(
        &run(arange(3.0, 3.0, 1.0, DType::F32), vec![]),
        DType::F32,
        &[0],
        &[],
    );
    let r = run(
        Op::Rand {
            shape: Shape::of(&[2, 3]),
            dtype: DType::F32,
            seed: 42,
        },
        vec![],
    );
    let want: Vec<f64> = (0..6).map(|i| rng::uniform(42, i) as f32 as f64).collect();
    check(&r, DType::F32, &[2, 3], &want);
    let r = run(
        Op::Randn {
            shape: Shape::of(&[5]),
            dtype: DType::BF16,
            seed: 7,
        },
        vec![],
    );
    let want: Vec<f64> = (0..5)
        .map(|i| DType::BF16.round_f64(rng::normal(7, i)))
        .collect();
    check(&r, DType::BF16, &[5], &want);
    let r = run(
        Op::FromVec {
            values: vec![1.9, -1.9].into(),
            shape: Shape::of(&[2, 1]),
            dtype: DType::I64,
        },
        vec![],
    );
    check(&r, DType::I64, &[2, 1], &[1.0, -1.0]);
}

#[test]
fn symbolic_attribute_without_bindings_is_an_error() {
    let op = Op::Full {
        shape: [Dim::sym("B")].into_iter().collect(),
        value: Scalar::Float(1.0),
        dtype: DType::F32,
    };
    let e = eval_op(&op, &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "full: symbolic dim `B` is not bound (operands: )"
    );
}

#[test]
fn inplace_ops_are_functional() {
    let dst = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let v = run(
        Op::Inplace(InplaceOp::Copy),
        vec![dst.clone(), t(DType::F64, &[2], &[0.1, 7.0])],
    );
    check(
        &v,
        DType::F32,
        &[2, 2],
        &[0.1f32 as f64, 7.0, 0.1f32 as f64, 7.0],
    );
    let v = run(Op::Inplace(InplaceOp::Fill), vec![dst.clone(), sc(0.1)]);
    check(&v, DType::F32, &[2, 2], &[0.1f32 as f64; 4]);
    let v = run(
        Op::Inplace(InplaceOp::Fill),
        vec![t(DType::I32, &[3], &[0.0; 3]), t(DType::F64, &[], &[-2.5])],
    );
    check(&v, DType::I32, &[3], &[-2.0; 3]);
    let v = run(
        Op::Inplace(InplaceOp::Add),
        vec![dst.clone(), f32t(&[2], &[10.0, 20.0])],
    );
    check(&v, DType::F32, &[2, 2], &[11.0, 22.0, 13.0, 24.0]);
    let v = run(
        Op::Inplace(InplaceOp::Mul),
        vec![t(DType::I32, &[2], &[3.0, -5.0]), sc(2i64)],
    );
    check(&v, DType::I32, &[2], &[6.0, -10.0]);
    // f16 destination, f32 operand: computed in f32, rounded to f16.
    let v = run(
        Op::Inplace(InplaceOp::Add),
        vec![t(DType::F16, &[1], &[0.1]), f32t(&[1], &[0.2])],
    );
    let want = DType::F16.round_f64((0.0999755859375f64 + 0.2f32 as f64) as f32 as f64);
    check(&v, DType::F16, &[1], &[want]);
    // An int destination cannot take a float result.
    let e = eval_op(
        &Op::Inplace(InplaceOp::Add),
        &[t(DType::I32, &[1], &[1.0]), sc(0.5)],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("add_: result type f32 can't be cast"),
        "{e}"
    );
}

#[test]
fn value_constructors_and_errors() {
    let v = Value::new(DType::F16, vec![2], vec![0.1, 2.0]).unwrap();
    assert_eq!(v.data, vec![0.0999755859375, 2.0]);
    assert_eq!(v.numel(), 2);
    assert_eq!(v.tensor_type().to_string(), "f16[2]");
    let s = Value::scalar(DType::I32, 3.9);
    assert_eq!((s.shape.len(), s.data[0]), (0, 3.0));
    let e = Value::new(DType::F32, vec![2, 3], vec![0.0; 5]).unwrap_err();
    assert_eq!(
        e,
        InterpError::BadValue {
            shape: vec![2, 3],
            len: 5,
            numel: 6
        }
    );
    let bad = InterpArg::Tensor(Value {
        dtype: DType::F32,
        shape: vec![3],
        data: vec![1.0],
    });
    assert!(matches!(
        eval_op(&Op::Unary(UnaryOp::Neg), &[bad]),
        Err(InterpError::BadValue { .. })
    ));
    let e = eval_op(
        &Op::Binary(BinaryOp::Add),
        &[f32t(&[4], &[0.0; 4]), f32t(&[3], &[0.0; 3])],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "add: shapes [4] and [3] do not broadcast (operands: f32[4], f32[3])"
    );
    assert!(eval_op(&Op::Input, &[]).is_err());
}
