use super::*;
use crate::{DType, Scalar, TensorType, F64};

fn round_trip(op: &Op) -> Op {
    let attrs: Vec<(String, AttrValue)> = op
        .attrs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    Op::from_parts(op.name(), &attrs).unwrap()
}

#[test]
fn every_op_round_trips_through_name_and_attrs() {
    let ops = vec![
        Op::Unary(UnaryOp::GeluTanh),
        Op::Unary(UnaryOp::Gelu),
        Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![-1, 0],
            keepdim: true,
            dtype: None,
        },
        Op::Full {
            shape: [Dim::sym("B"), Dim::Const(3)].into_iter().collect(),
            value: Scalar::Float(0.5),
            dtype: DType::F16,
        },
        Op::Slice {
            dim: 1,
            start: 2,
            end: 9,
            step: 3,
        },
        Op::Inplace(InplaceOp::Fill),
        Op::LayerNorm {
            ndim: 1,
            eps: F64::new(1e-5),
        },
        Op::LeakyRelu {
            negative_slope: F64::new(0.2),
        },
        Op::FromVec {
            values: Constant::new(vec![1.0, -2.5]),
            shape: Shape::of(&[2]),
            dtype: DType::F32,
        },
    ];
    for op in ops {
        assert_eq!(round_trip(&op), op);
    }
    for u in UnaryOp::ALL {
        assert_eq!(round_trip(&Op::Unary(u)), Op::Unary(u));
    }
    for b in BinaryOp::ALL {
        assert_eq!(round_trip(&Op::Binary(b)), Op::Binary(b));
    }
}

#[test]
fn unknown_attrs_are_errors() {
    let e = Op::from_parts("relu", &[("dim".into(), AttrValue::Int(1))]).unwrap_err();
    assert_eq!(e.to_string(), "op `relu` has no attribute `dim`");
    let e = Op::from_parts(
        "gelu",
        &[("approximate".into(), AttrValue::Str("x".into()))],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "op `gelu`: attribute `approximate` must be \"none\" or \"tanh\""
    );
}

#[test]
fn absent_attributes_take_torch_defaults() {
    let var = Op::from_parts("var", &[]).unwrap();
    assert_eq!(
        var,
        Op::Var {
            dims: vec![],
            correction: 1,
            keepdim: false
        }
    );
    assert_eq!(
        Op::from_parts("sum", &[]).unwrap(),
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![],
            keepdim: false,
            dtype: None,
        }
    );
    // layer_norm normalises over the weight's dims
    let t = |s: &[usize]| ArgType::Tensor(TensorType::new(DType::F32, Shape::of(s)));
    let ln = Op::from_parts_with("layer_norm", &[], &[t(&[2, 3, 4]), t(&[3, 4])]).unwrap();
    assert_eq!(
        ln,
        Op::LayerNorm {
            ndim: 2,
            eps: F64::new(1e-5)
        }
    );
    let e = Op::from_parts_with("layer_norm", &[], &[t(&[2, 3, 4])]).unwrap_err();
    assert!(e.to_string().contains("needs attribute `ndim`"), "{e}");
    let rms = Op::from_parts_with("rms_norm", &[], &[t(&[2, 3]), t(&[3])]).unwrap();
    assert_eq!(
        rms,
        Op::RmsNorm {
            ndim: 1,
            eps: F64::new(f32::EPSILON as f64)
        }
    );
    // full takes its dtype from the value, as torch.full
    let full = Op::from_parts(
        "full",
        &[
            ("shape".into(), AttrValue::List(vec![AttrValue::Int(2)])),
            ("value".into(), AttrValue::Int(3)),
        ],
    )
    .unwrap();
    assert!(matches!(
        full,
        Op::Full {
            dtype: DType::I64,
            ..
        }
    ));
    assert_eq!(
        Op::from_parts("triu", &[]).unwrap(),
        Op::Triu { diagonal: 0 }
    );
}

#[test]
fn both_torch_spellings_parse() {
    let t = ArgType::Tensor(TensorType::new(DType::F32, Shape::of(&[5, 7])));
    let narrow = Op::from_parts_with(
        "narrow",
        &[
            ("dim".into(), AttrValue::Int(1)),
            ("start".into(), AttrValue::Int(2)),
            ("length".into(), AttrValue::Int(3)),
        ],
        std::slice::from_ref(&t),
    )
    .unwrap();
    assert_eq!(
        narrow,
        Op::Slice {
            dim: 1,
            start: 2,
            end: 5,
            step: 1
        }
    );
    let whole = Op::from_parts_with("slice", &[("dim".into(), AttrValue::Int(1))], &[t]).unwrap();
    assert!(matches!(whole, Op::Slice { end: 7, .. }));
    assert_eq!(Op::from_parts("clip", &[]).unwrap(), Op::Clamp);
    assert_eq!(Op::from_parts("clamp", &[]).unwrap(), Op::Clamp);
    assert_eq!(
        Op::from_parts("max", &[]).unwrap(),
        Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![],
            keepdim: false,
            dtype: None,
        }
    );
    assert_eq!(
        Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![],
            keepdim: false,
            dtype: None,
        }
        .name(),
        "amax"
    );
}

#[test]
fn ops_hash_and_compare_by_value() {
    use std::collections::HashSet;
    let a = Op::LayerNorm {
        ndim: 1,
        eps: F64::new(1e-5),
    };
    let b = Op::LayerNorm {
        ndim: 1,
        eps: F64::new(1e-5),
    };
    let set: HashSet<Op> = [a.clone(), b, Op::Unary(UnaryOp::Exp)]
        .into_iter()
        .collect();
    assert_eq!(set.len(), 2);
    assert!(set.contains(&a));
}

/// Every row states what the compiler needs: a reference of the right shape for its kind,
/// a range rule for float pointwise primitives, a domain per operand.
#[test]
fn every_row_is_complete() {
    let all = rows();
    assert!(all.len() > 80, "{} rows", all.len());
    for row in &all {
        if row.kind == OpKind::Pointwise {
            assert!(
                !matches!(row.reference, Reference::Interpreter),
                "{} is pointwise but has no elementwise reference",
                row.name
            );
            assert!(
                row.cost != CostClass::Data,
                "{}: a pointwise cost class",
                row.name
            );
            if row.arity.max != usize::MAX {
                assert_eq!(
                    row.domain.len(),
                    row.arity.max,
                    "{}: one domain per operand",
                    row.name
                );
            }
        }
    }
    // names are unique except gelu's two forms
    let mut names: Vec<&str> = all.iter().map(|r| r.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len() + 1, all.len());
}
