//! Eager vs interpreter on every pointwise op: all unary ops, all binary ops (tensor and
//! scalar operands, broadcasting), `where`, and every cast, over dtypes, awkward shapes
//! (size 1, odd sizes, non-multiples of the vector width) and non-contiguous layouts.

use kiln::ir::{BinaryOp, Op, Scalar, UnaryOp};
use kiln::DType;
use kiln_tests::{assert_op, make, Dist, Layout, TestArg};

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
    match u {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => Dist::Positive,
        UnaryOp::Exp
        | UnaryOp::Tanh
        | UnaryOp::Sigmoid
        | UnaryOp::Erf
        | UnaryOp::Silu
        | UnaryOp::Gelu
        | UnaryOp::GeluTanh => Dist::Scaled(6.0),
        _ => Dist::Normal,
    }
}

#[test]
fn unary_ops_on_floats_every_shape_and_layout() {
    let mut seed = 100;
    for u in UnaryOp::ALL {
        for dtype in FLOATS {
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
        for dtype in [DType::I32, DType::I64] {
            let dist = if matches!(dist_for(u), Dist::Positive) {
                Dist::Positive
            } else {
                Dist::Normal
            };
            let x = make(&[3, 7], dtype, 7, dist, Layout::Transposed);
            let out = assert_op(&Op::Unary(u), &[TestArg::T(x)]);
            let want = if u.keeps_int() { dtype } else { DType::F32 };
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
        for dtype in [DType::F32, DType::F64] {
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

fn dist_for_binary(b: BinaryOp) -> Dist {
    if b == BinaryOp::Pow {
        Dist::Positive
    } else {
        Dist::Normal
    }
}

#[test]
fn binary_ops_broadcast_across_layouts() {
    let mut seed = 5000;
    for b in BinaryOp::ALL {
        for dtype in FLOATS {
            for (sa, sb) in BROADCAST_PAIRS {
                for (la, lb) in [
                    (Layout::Contiguous, Layout::Contiguous),
                    (Layout::Transposed, Layout::Strided),
                    (Layout::Offset, Layout::Expanded),
                ] {
                    seed += 2;
                    let a = make(sa, dtype, seed, dist_for_binary(b), la);
                    let c = make(sb, dtype, seed + 1, Dist::Normal, lb);
                    let c = if b == BinaryOp::Pow {
                        make(sb, dtype, seed + 1, Dist::Scaled(2.0), lb)
                    } else {
                        c
                    };
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
                let x = make(&[5, 3], dtype, 31, dist_for_binary(b), Layout::Strided);
                assert_op(&Op::Binary(b), &[TestArg::T(x.clone()), TestArg::S(s)]);
                // The scalar may come first too (`2.0 - x`).
                if b != BinaryOp::Pow {
                    assert_op(&Op::Binary(b), &[TestArg::S(s), TestArg::T(x)]);
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
