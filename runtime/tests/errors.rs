//! Bad input is an Err naming the op, never a panic.

mod common;
use common::*;
use kiln_ir::{BinaryOp, DType, InplaceOp, Op, ReduceOp, Scalar, Shape, UnaryOp};
use kiln_runtime::{execute, execute_inplace, EagerArg, RuntimeError};

fn err(op: Op, args: &[EagerArg]) -> RuntimeError {
    execute(&op, args).expect_err("should fail")
}

#[test]
fn index_select_out_of_range() {
    let x = randn(&[4, 3], DType::F32, 1);
    for bad in [4.0, -1.0] {
        let idx = t(&[0.0, bad], &[2], DType::I64);
        let e = err(
            Op::IndexSelect { dim: 0 },
            &[EagerArg::Tensor(&x), EagerArg::Tensor(&idx)],
        );
        assert_eq!(
            e,
            RuntimeError::IndexOutOfRange {
                op: "index_select",
                index: bad as i64,
                size: 4
            }
        );
        assert!(e.to_string().contains("index_select"), "{e}");
    }
}

#[test]
fn inplace_into_overlapping_layouts() {
    let x = randn(&[1, 3], DType::F32, 2);
    let e = ex(
        Op::Expand {
            shape: Shape::of(&[4, 3]),
        },
        &[&x],
    );
    let before = x.to_f64_vec();
    for op in InplaceOp::ALL {
        let r = execute_inplace(op, &e, EagerArg::Scalar(Scalar::Float(1.0)));
        if op == InplaceOp::Copy {
            assert!(
                matches!(r, Err(RuntimeError::Type(_))),
                "copy_ needs a tensor source"
            );
        } else {
            assert!(
                matches!(r, Err(RuntimeError::Layout { .. })),
                "{op:?}: {r:?}"
            );
        }
    }
    assert_eq!(x.to_f64_vec(), before, "nothing was written");
    let y = t(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[12],
        DType::F32,
    );
    let overlap = y.with_layout(&[3, 3], &[1, 1], 0).unwrap();
    assert!(execute_inplace(InplaceOp::Fill, &overlap, EagerArg::Scalar(Scalar::Int(0))).is_err());
}

#[test]
fn shape_and_type_mismatches() {
    let a = randn(&[2, 3], DType::F32, 3);
    let b = randn(&[4, 3], DType::F32, 4);
    let i = t(&[1.0, 2.0], &[2], DType::I32);
    let bl = t(&[1.0, 0.0], &[2], DType::Bool);
    let a64 = randn(&[3, 2], DType::F64, 5);
    let wide = randn(&[2, 4], DType::F32, 6);
    let empty = t(&[], &[0, 2], DType::F32);
    let ta = EagerArg::Tensor(&a);
    let tb = EagerArg::Tensor(&b);
    let cases: Vec<(Op, Vec<EagerArg>)> = vec![
        (Op::Binary(BinaryOp::Add), vec![ta, tb]),
        (Op::Matmul, vec![ta, ta]),
        (Op::Matmul, vec![ta, EagerArg::Tensor(&a64)]),
        (Op::Linear, vec![ta, EagerArg::Tensor(&wide)]),
        (
            Op::Reshape {
                shape: Shape::of(&[5]),
            },
            vec![ta],
        ),
        (
            Op::Expand {
                shape: Shape::of(&[3, 3]),
            },
            vec![ta],
        ),
        (Op::Permute { dims: vec![0, 0] }, vec![ta]),
        (Op::Transpose { dim0: 0, dim1: 2 }, vec![ta]),
        (
            Op::Slice {
                dim: 1,
                start: 0,
                end: 4,
                step: 1,
            },
            vec![ta],
        ),
        (
            Op::Slice {
                dim: 1,
                start: 0,
                end: 2,
                step: 0,
            },
            vec![ta],
        ),
        (Op::Cat { dim: 0 }, vec![ta, EagerArg::Tensor(&wide)]),
        (
            Op::Reduce {
                op: ReduceOp::Sum,
                dims: vec![2],
                keepdim: false,
                dtype: None,
            },
            vec![ta],
        ),
        (
            Op::Reduce {
                op: ReduceOp::Max,
                dims: vec![0],
                keepdim: false,
                dtype: None,
            },
            vec![EagerArg::Tensor(&empty)],
        ),
        (
            Op::Reduce {
                op: ReduceOp::Mean,
                dims: vec![],
                keepdim: false,
                dtype: None,
            },
            vec![EagerArg::Tensor(&i)],
        ),
        (Op::Softmax { dim: 5 }, vec![ta]),
        (
            Op::LayerNorm {
                ndim: 3,
                eps: kiln_ir::F64::new(1e-5),
            },
            vec![ta],
        ),
        (
            Op::LayerNorm {
                ndim: 1,
                eps: kiln_ir::F64::new(1e-5),
            },
            vec![ta, tb],
        ),
        (Op::Unary(UnaryOp::Neg), vec![EagerArg::Tensor(&bl)]),
        (
            Op::Unary(UnaryOp::Exp),
            vec![EagerArg::Scalar(Scalar::Float(1.0))],
        ),
        (
            Op::Binary(BinaryOp::Add),
            vec![EagerArg::Tensor(&bl), EagerArg::Tensor(&bl)],
        ),
        (
            Op::Binary(BinaryOp::Add),
            vec![
                EagerArg::Scalar(Scalar::Int(1)),
                EagerArg::Scalar(Scalar::Int(1)),
            ],
        ),
        (Op::Where, vec![ta, ta, ta]),
        (Op::IndexSelect { dim: 0 }, vec![ta, ta]),
        (Op::Triu { diagonal: 0 }, vec![EagerArg::Tensor(&i)]),
        (
            Op::Arange {
                start: 0.0.into(),
                end: 1.0.into(),
                step: 0.0.into(),
                dtype: DType::F32,
            },
            vec![],
        ),
        (
            Op::Rand {
                shape: Shape::of(&[2]),
                dtype: DType::I32,
                seed: 0,
            },
            vec![],
        ),
        (
            Op::Full {
                shape: [kiln_ir::Dim::sym("B")].into_iter().collect(),
                value: Scalar::Int(0),
                dtype: DType::F32,
            },
            vec![],
        ),
        (Op::Input, vec![]),
        (
            Op::Full {
                shape: Shape::of(&[1 << 40, 1 << 40]),
                value: Scalar::Int(0),
                dtype: DType::F32,
            },
            vec![],
        ),
        (
            Op::Expand {
                shape: Shape::of(&[1 << 40, 1 << 40, 2, 3]),
            },
            vec![ta],
        ),
        (Op::Unary(UnaryOp::Exp), vec![]),
    ];
    for (op, args) in cases {
        let e = execute(&op, &args).expect_err(&format!("{op} should fail"));
        let msg = e.to_string();
        assert!(!msg.is_empty());
    }
    // Errors carry the op name and shapes.
    let e = err(Op::Binary(BinaryOp::Add), &[ta, tb]);
    assert!(
        e.to_string().contains("add") && e.to_string().contains("[4,3]"),
        "{e}"
    );
    // In-place type errors.
    assert!(execute_inplace(InplaceOp::Add, &i, EagerArg::Scalar(Scalar::Float(0.5))).is_err());
    assert!(execute_inplace(InplaceOp::Copy, &a, EagerArg::Tensor(&b)).is_err());
    assert!(execute_inplace(InplaceOp::Fill, &a, EagerArg::Tensor(&a)).is_err());
    assert!(execute_inplace(InplaceOp::Add, &bl, EagerArg::Tensor(&bl)).is_err());
}
