//! Eager vs interpreter on every pointwise op: all unary ops, all binary ops (tensor and
//! scalar operands, broadcasting), `where`, and every cast, over dtypes, awkward shapes
//! (size 1, odd sizes, non-multiples of the vector width) and non-contiguous layouts.

use kiln::ir::{BinaryOp, Op, Scalar, UnaryOp};
use kiln::DType;
use kiln_tests::{accepts, assert_op, make, Dist, Layout, TestArg};

const SHAPES: &[&[usize]] = &[
    &[1],
    &[7],
    &[1, 1],
    &[3, 5],
    &[2, 3, 4],
    &[17, 33],
    &[4, 1, 5],
    &[1027],
];
const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

fn dist_for(u: UnaryOp) -> Dist {
    Dist::of(u.info(), 0)
}

#[test]
fn unary_ops_on_floats_every_shape_and_layout() {
    let mut seed = 100;
    for u in UnaryOp::ALL {
        for dtype in FLOATS.into_iter().filter(|d| accepts(u.info(), *d)) {
            for shape in SHAPES {
                for layout in Layout::ALL {
                    seed += 1;
                    let x = make(shape, dtype, seed, dist_for(u), layout);
                    assert_op(&Op::Unary(u), &[TestArg::T(x)]);
                }
            }
        }
    }
}

#[test]
fn unary_ops_on_integers() {
    for u in UnaryOp::ALL {
        for dtype in [DType::I32, DType::I64, DType::Bool] {
            let Ok(want) = u.info().dtype.result(dtype) else {
                continue;
            };
            let dist = if matches!(dist_for(u), Dist::Positive) {
                Dist::Positive
            } else {
                Dist::Normal
            };
            let x = make(&[3, 7], dtype, 7, dist, Layout::Transposed);
            let out = assert_op(&Op::Unary(u), &[TestArg::T(x)]);
            assert_eq!(out.dtype(), want, "{u:?} on {dtype}");
        }
    }
}

#[test]
fn unary_special_values() {
    let vals = [
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        88.0,
        -88.0,
        100.0,
        -100.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.5,
    ];
    for u in UnaryOp::ALL {
        for dtype in [DType::F32, DType::F64]
            .into_iter()
            .filter(|d| accepts(u.info(), *d))
        {
            let x = kiln::Tensor::from_f64(&vals, &[vals.len()], dtype).unwrap();
            assert_op(&Op::Unary(u), &[TestArg::T(x)]);
        }
    }
}

const BROADCAST_PAIRS: &[(&[usize], &[usize])] = &[
    (&[1], &[1]),
    (&[7], &[7]),
    (&[3, 1], &[1, 4]),
    (&[2, 3, 4], &[4]),
    (&[5], &[1]),
    (&[17, 33], &[17, 1]),
    (&[4, 1, 5], &[3, 1]),
    (&[1], &[2, 3]),
];

#[test]
fn binary_ops_broadcast_across_layouts() {
    let mut seed = 5000;
    for b in BinaryOp::ALL {
        for dtype in FLOATS.into_iter().chain([DType::I64, DType::Bool]) {
            if !accepts(b.info(), dtype) {
                continue;
            }
            for (sa, sb) in BROADCAST_PAIRS {
                for (la, lb) in [
                    (Layout::Contiguous, Layout::Contiguous),
                    (Layout::Transposed, Layout::Strided),
                    (Layout::Offset, Layout::Expanded),
                ] {
                    seed += 2;
                    let a = make(sa, dtype, seed, Dist::of(b.info(), 0), la);
                    let c = make(sb, dtype, seed + 1, Dist::of(b.info(), 1), lb);
                    assert_op(&Op::Binary(b), &[TestArg::T(a), TestArg::T(c)]);
                }
            }
        }
    }
}

#[test]
fn binary_ops_with_equal_values_for_comparisons() {
    // Comparisons need ties: compare a tensor with a copy of itself, partly perturbed.
    for b in BinaryOp::ALL.into_iter().filter(|b| b.is_comparison()) {
        for dtype in [DType::F32, DType::I32, DType::I64, DType::Bool, DType::F16] {
            let a = make(&[6, 5], dtype, 11, Dist::Normal, Layout::Contiguous);
            let c = make(&[6, 5], dtype, 11, Dist::Normal, Layout::Contiguous);
            let c = kiln::Tensor::cat(
                &[
                    &c.narrow(0, 0, 3).unwrap(),
                    &make(&[3, 5], dtype, 12, Dist::Normal, Layout::Contiguous),
                ],
                0,
            )
            .unwrap();
            let out = assert_op(&Op::Binary(b), &[TestArg::T(a), TestArg::T(c)]);
            assert_eq!(out.dtype(), DType::Bool);
        }
    }
}

#[test]
fn binary_ops_mixed_dtypes_promote() {
    let pairs = [
        (DType::I32, DType::F32),
        (DType::F16, DType::BF16),
        (DType::I32, DType::I64),
        (DType::F32, DType::F64),
        (DType::Bool, DType::I32),
        (DType::F16, DType::F32),
    ];
    for b in BinaryOp::ALL {
        for (da, db) in pairs {
            if !accepts(b.info(), da.promote(db)) {
                continue;
            }
            let a = make(&[4, 3], da, 21, Dist::Positive, Layout::Transposed);
            let c = make(&[3], db, 22, Dist::Positive, Layout::Contiguous);
            assert_op(&Op::Binary(b), &[TestArg::T(a), TestArg::T(c)]);
        }
    }
}

#[test]
fn binary_ops_with_scalar_operands() {
    let scalars = [
        Scalar::Float(1.5),
        Scalar::Float(-0.25),
        Scalar::Int(3),
        Scalar::Int(-2),
        Scalar::Bool(true),
    ];
    for b in BinaryOp::ALL {
        for dtype in [DType::F32, DType::F16, DType::I32, DType::I64, DType::F64] {
            for s in scalars {
                let promoted = kiln::ir::result_type(&[
                    kiln::ir::ArgType::Tensor(kiln::ir::TensorType::new(
                        dtype,
                        kiln::ir::Shape::of(&[5, 3]),
                    )),
                    kiln::ir::ArgType::Scalar(s),
                ]);
                if !accepts(b.info(), promoted) {
                    continue;
                }
                // integers to a negative literal power are refused, as in torch
                if b == BinaryOp::Pow && !promoted.is_float() && s == Scalar::Int(-2) {
                    continue;
                }
                let x = make(&[5, 3], dtype, 31, Dist::of(b.info(), 0), Layout::Strided);
                assert_op(&Op::Binary(b), &[TestArg::T(x.clone()), TestArg::S(s)]);
                // The scalar may come first too (`2.0 - x`), against a tensor drawn as the
                // second operand.
                if b != BinaryOp::Pow {
                    let y = make(&[5, 3], dtype, 32, Dist::of(b.info(), 1), Layout::Strided);
                    assert_op(&Op::Binary(b), &[TestArg::S(s), TestArg::T(y)]);
                }
            }
        }
    }
}

#[test]
fn integer_division_is_true_division() {
    let a = make(&[9], DType::I32, 41, Dist::Normal, Layout::Contiguous);
    let c = make(&[9], DType::I32, 42, Dist::Positive, Layout::Contiguous);
    let out = assert_op(&Op::Binary(BinaryOp::Div), &[TestArg::T(a), TestArg::T(c)]);
    assert_eq!(out.dtype(), DType::F32);
}

#[test]
fn where_broadcasts_and_promotes() {
    for (sc, sa, sb) in [
        (&[3, 4][..], &[3, 4][..], &[3, 4][..]),
        (&[3, 1], &[1, 4], &[4]),
        (&[1], &[2, 5], &[1]),
    ] {
        for (da, db) in [
            (DType::F32, DType::F32),
            (DType::I32, DType::F64),
            (DType::F16, DType::F16),
        ] {
            let c = make(sc, DType::Bool, 51, Dist::Normal, Layout::Contiguous);
            let a = make(sa, da, 52, Dist::Normal, Layout::Transposed);
            let b = make(sb, db, 53, Dist::Normal, Layout::Contiguous);
            assert_op(
                &Op::Where,
                &[TestArg::T(c.clone()), TestArg::T(a.clone()), TestArg::T(b)],
            );
            assert_op(
                &Op::Where,
                &[
                    TestArg::T(c),
                    TestArg::T(a),
                    TestArg::S(Scalar::Float(-1.0)),
                ],
            );
        }
    }
}

#[test]
fn every_cast() {
    for from in DType::ALL {
        for to in DType::ALL {
            for layout in [Layout::Contiguous, Layout::Transposed] {
                let x = make(&[5, 7], from, 61, Dist::Scaled(4.0), layout);
                assert_op(&Op::Cast { dtype: to }, &[TestArg::T(x)]);
            }
        }
    }
}
