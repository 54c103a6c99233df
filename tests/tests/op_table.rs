//! Every row of the op table has what the compiler needs, checked row by row (a new row is
//! checked without editing this file):
//!
//! * an f64 reference: pointwise rows an elementwise one (the interpreter's kernels, an
//!   exhaustive match, are the reference of the others);
//! * a CPU lowering: each pointwise op of a family, on the operands its dtype rule takes,
//!   becomes loop nests after the cpu pipeline (rendered, or decomposed into rendered ops),
//!   except integer-only ops, which the loop form does not hold (they run on the eager
//!   kernels, whose match is exhaustive);
//! * a CUDA lowering: the same through the cuda pipeline, to generated CUDA C;
//! * a composite row: a decomposition;
//! * a differential case: each family member belongs to a suite of `cpu_differential.rs`.

use kiln::ir::{Arg, BinaryOp, DType, DTypeRule, Graph, Op, OpKind, Shape, TensorType, UnaryOp};
use kiln_codegen::loops::{lower_kernel, lower_kernel_half};
use kiln_passes::decompose::decomposition;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use kiln_tests::{binary_suite, unary_suite};

/// Every pointwise op of the families, with the operand dtype the loop form can hold for it.
fn family_ops() -> Vec<(Op, usize, DType)> {
    let dtype = |rule: DTypeRule| {
        if rule == DTypeRule::Integral {
            DType::Bool
        } else {
            DType::F32
        }
    };
    UnaryOp::ALL
        .into_iter()
        .map(|u| (Op::Unary(u), 1, dtype(u.info().dtype)))
        .chain(
            BinaryOp::ALL
                .into_iter()
                .map(|b| (Op::Binary(b), 2, dtype(b.info().dtype))),
        )
        .collect()
}

fn one_op(op: &Op, arity: usize, dtype: DType) -> Graph {
    let mut g = Graph::new("one_op");
    let args: Vec<Arg> = (0..arity)
        .map(|i| {
            g.add_input(format!("x{i}"), TensorType::new(dtype, Shape::of(&[3, 5])))
                .unwrap()
                .into()
        })
        .collect();
    let y = g.add_op(op.clone(), &args, None).unwrap();
    g.set_outputs(vec![y]).unwrap();
    g
}

#[test]
fn every_pointwise_row_has_an_elementwise_reference() {
    for row in kiln::ir::ops::rows() {
        if row.kind == OpKind::Pointwise {
            assert!(
                !matches!(row.reference, kiln::ir::Reference::Interpreter),
                "{}",
                row.name
            );
        }
    }
}

#[test]
fn every_family_op_lowers_for_the_cpu_and_cuda_backends() {
    for (op, arity, dtype) in family_ops() {
        let g = one_op(&op, arity, dtype);
        for (backend, renders) in [
            ("cpu", kiln_codegen::cpu::renders as fn(&Op) -> bool),
            ("cuda", kiln_codegen::cuda::renders),
        ] {
            assert!(
                renders(&op) || decomposition(&op).is_some(),
                "{backend}: {op} is neither rendered nor decomposed"
            );
            for fusion in [&["decompose", "fuse"][..], &["decompose"]] {
                let f = run_passes(&g, fusion, &PassOptions::rendering(renders), true)
                    .unwrap_or_else(|e| panic!("{backend} {op}: {e}"));
                let s = schedule(&f).unwrap();
                for k in &s.kernels {
                    let what = format!("{backend} {op} ({fusion:?}): kernel {}", k.body.name());
                    if backend == "cpu" {
                        lower_kernel(&k.body).unwrap_or_else(|e| panic!("{what}: {e}"));
                    } else {
                        let nest =
                            lower_kernel_half(&k.body).unwrap_or_else(|e| panic!("{what}: {e}"));
                        kiln_codegen::cuda::cuda_kernel(&nest)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                    }
                }
            }
        }
    }
}

#[test]
fn every_composite_row_decomposes() {
    // one op of each composite row, with attributes at their defaults
    let f32s = |shapes: &[&[usize]]| -> Vec<kiln::ir::ArgType> {
        shapes
            .iter()
            .map(|s| kiln::ir::ArgType::Tensor(TensorType::new(DType::F32, Shape::of(s))))
            .collect()
    };
    for row in kiln::ir::ops::rows().into_iter().filter(|r| r.composite) {
        let operands = match row.name {
            "layer_norm" | "rms_norm" => f32s(&[&[3, 5], &[5]]),
            "linear" => f32s(&[&[3, 5], &[4, 5]]),
            "clamp" => f32s(&[&[3, 5], &[3, 5], &[3, 5]]),
            "softmax" | "log_softmax" => {
                let op = Op::from_parts(row.name, &[("dim".into(), kiln::ir::AttrValue::Int(-1))])
                    .unwrap();
                assert!(decomposition(&op).is_some(), "{}", row.name);
                continue;
            }
            _ => f32s(&[&[3, 5]]),
        };
        let op = Op::from_parts_with(row.name, &[], &operands)
            .unwrap_or_else(|e| panic!("{}: {e}", row.name));
        assert!(
            decomposition(&op).is_some(),
            "{} has no decomposition",
            row.name
        );
    }
}

#[test]
fn every_family_op_has_a_differential_suite() {
    for u in UnaryOp::ALL {
        assert!(unary_suite(u).is_some(), "{u:?} is in no suite");
    }
    for b in BinaryOp::ALL {
        assert!(binary_suite(b).is_some(), "{b:?} is in no suite");
    }
}
