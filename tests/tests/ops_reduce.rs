//! Eager vs interpreter on reductions, row kernels and matmul: sum, mean, max, min,
//! argmax, var, softmax, log_softmax, layer_norm, rms_norm, linear, matmul, over dims,
//! keepdim, dtypes, odd sizes and non-contiguous layouts.

use kiln::ir::{Op, ReduceOp};
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
    &[3, 1027],
];

fn dim_lists(rank: usize) -> Vec<Vec<i64>> {
    let mut out = vec![vec![], vec![-1], vec![0]];
    if rank >= 2 {
        out.push(vec![0, -1]);
        out.push(vec![1]);
    }
    if rank >= 3 {
        out.push(vec![0, 2]);
    }
    out
}

#[test]
fn reductions_over_dims_with_keepdim() {
    let mut seed = 1;
    for op in ReduceOp::ALL {
        for dtype in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::Bool,
        ] {
            if op == ReduceOp::Mean && !dtype.is_float() {
                continue;
            }
            for shape in SHAPES {
                for dims in dim_lists(shape.len()) {
                    for keepdim in [false, true] {
                        for layout in [
                            Layout::Contiguous,
                            Layout::Transposed,
                            Layout::Strided,
                            Layout::Expanded,
                        ] {
                            seed += 1;
                            let x = make(shape, dtype, seed, Dist::Normal, layout);
                            assert_op(
                                &Op::Reduce {
                                    op,
                                    dims: dims.clone(),
                                    keepdim,
                                    dtype: None,
                                },
                                &[TestArg::T(x)],
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Reduced dims on both sides of a kept one (a batch norm's per-channel statistics over
/// [N, C, H, W], read in place slab by slab), and sums given in f64 from narrower floats
/// (accumulated from the operand as it is), in every layout.
#[test]
fn reductions_around_a_kept_dim_and_f64_sums_of_narrow_floats() {
    let mut seed = 9000;
    for shape in [
        &[4usize, 6, 5, 7][..],
        &[3, 17, 1, 33],
        &[2, 1, 3, 4],
        &[5, 2, 3],
    ] {
        let dims: Vec<i64> = (0..shape.len() as i64).filter(|&d| d != 1).collect();
        for op in ReduceOp::ALL {
            for (dtype, sum_dtype) in [
                (DType::F32, None),
                (DType::F32, Some(DType::F64)),
                (DType::F16, Some(DType::F64)),
                (DType::BF16, Some(DType::F64)),
                (DType::F64, Some(DType::F64)),
            ] {
                if sum_dtype.is_some() && !matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
                    continue;
                }
                for keepdim in [false, true] {
                    for layout in [Layout::Contiguous, Layout::Transposed, Layout::Strided] {
                        seed += 1;
                        let x = make(shape, dtype, seed, Dist::Normal, layout);
                        let out = assert_op(
                            &Op::Reduce {
                                op,
                                dims: dims.clone(),
                                keepdim,
                                dtype: sum_dtype,
                            },
                            &[TestArg::T(x)],
                        );
                        assert_eq!(out.dtype(), sum_dtype.unwrap_or(dtype), "{op:?} {shape:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn sum_of_integers_is_i64() {
    let x = make(&[4, 5], DType::I32, 3, Dist::Normal, Layout::Contiguous);
    let out = assert_op(
        &Op::Reduce {
            op: ReduceOp::Sum,
            dims: vec![1],
            keepdim: false,
            dtype: None,
        },
        &[TestArg::T(x)],
    );
    assert_eq!(out.dtype(), DType::I64);
}

#[test]
fn max_propagates_nan() {
    let x =
        kiln::Tensor::from_f64(&[1.0, f64::NAN, 3.0, 2.0, 5.0, -1.0], &[2, 3], DType::F32).unwrap();
    let out = assert_op(
        &Op::Reduce {
            op: ReduceOp::Max,
            dims: vec![1],
            keepdim: false,
            dtype: None,
        },
        &[TestArg::T(x)],
    );
    assert!(out.to_vec_f64().unwrap()[0].is_nan());
}

#[test]
fn argmax_every_dim() {
    let mut seed = 300;
    for dtype in [DType::F32, DType::F64, DType::I32, DType::F16] {
        for shape in SHAPES {
            for dim in 0..shape.len() as i64 {
                for keepdim in [false, true] {
                    for layout in [Layout::Contiguous, Layout::Transposed] {
                        seed += 1;
                        let x = make(shape, dtype, seed, Dist::Normal, layout);
                        let out = assert_op(&Op::Argmax { dim, keepdim }, &[TestArg::T(x)]);
                        assert_eq!(out.dtype(), DType::I64);
                    }
                }
            }
        }
    }
    // Ties pick the first index.
    let x = kiln::Tensor::from_f64(&[1.0, 3.0, 3.0, 0.0], &[4], DType::F32).unwrap();
    assert_eq!(
        assert_op(
            &Op::Argmax {
                dim: 0,
                keepdim: false
            },
            &[TestArg::T(x)]
        )
        .item()
        .unwrap(),
        1.0
    );
}

#[test]
fn var_with_corrections() {
    let mut seed = 400;
    for dtype in [DType::F32, DType::F64, DType::F16] {
        for shape in SHAPES {
            for dims in dim_lists(shape.len()) {
                for correction in [0, 1, 2] {
                    seed += 1;
                    let x = make(shape, dtype, seed, Dist::Normal, Layout::Transposed);
                    assert_op(
                        &Op::Var {
                            dims: dims.clone(),
                            correction,
                            keepdim: seed % 2 == 0,
                        },
                        &[TestArg::T(x)],
                    );
                }
            }
        }
    }
}

#[test]
fn softmax_and_log_softmax_every_dim() {
    let mut seed = 500;
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for shape in SHAPES {
            for dim in -(shape.len() as i64)..shape.len() as i64 {
                for layout in [Layout::Contiguous, Layout::Transposed, Layout::Strided] {
                    seed += 1;
                    let x = make(shape, dtype, seed, Dist::Scaled(5.0), layout);
                    assert_op(&Op::Softmax { dim }, &[TestArg::T(x.clone())]);
                    assert_op(&Op::LogSoftmax { dim }, &[TestArg::T(x)]);
                }
            }
        }
    }
}

#[test]
fn layer_norm_and_rms_norm() {
    let mut seed = 600;
    for dtype in [DType::F32, DType::F64, DType::F16] {
        for shape in [&[1, 1][..], &[3, 7], &[2, 3, 33], &[5, 1027], &[4, 2, 6]] {
            for ndim in 1..=2.min(shape.len()) {
                for layout in [Layout::Contiguous, Layout::Transposed, Layout::Offset] {
                    seed += 3;
                    let x = make(shape, dtype, seed, Dist::Scaled(3.0), layout);
                    let norm = &shape[shape.len() - ndim..];
                    let w = make(norm, dtype, seed + 1, Dist::Normal, Layout::Contiguous);
                    let b = make(norm, dtype, seed + 2, Dist::Normal, Layout::Strided);
                    let ln = Op::LayerNorm {
                        ndim,
                        eps: kiln_ir::F64::new(1e-5),
                    };
                    assert_op(&ln, &[TestArg::T(x.clone())]);
                    assert_op(&ln, &[TestArg::T(x.clone()), TestArg::T(w.clone())]);
                    assert_op(
                        &ln,
                        &[TestArg::T(x.clone()), TestArg::T(w.clone()), TestArg::T(b)],
                    );
                    let rms = Op::RmsNorm {
                        ndim,
                        eps: kiln_ir::F64::new(1e-6),
                    };
                    assert_op(&rms, &[TestArg::T(x.clone())]);
                    assert_op(&rms, &[TestArg::T(x), TestArg::T(w)]);
                }
            }
        }
    }
}

#[test]
fn linear_with_and_without_bias() {
    let mut seed = 700;
    for dtype in [DType::F32, DType::F64, DType::F16] {
        for (x_shape, out_f) in [
            (&[1, 1][..], 1),
            (&[3, 7][..], 5),
            (&[2, 3, 33][..], 17),
            (&[65][..], 3),
        ] {
            seed += 3;
            let in_f = *x_shape.last().unwrap();
            let x = make(x_shape, dtype, seed, Dist::Normal, Layout::Contiguous);
            let w = make(
                &[out_f, in_f],
                dtype,
                seed + 1,
                Dist::Normal,
                Layout::Transposed,
            );
            let b = make(&[out_f], dtype, seed + 2, Dist::Normal, Layout::Contiguous);
            assert_op(&Op::Linear, &[TestArg::T(x.clone()), TestArg::T(w.clone())]);
            assert_op(&Op::Linear, &[TestArg::T(x), TestArg::T(w), TestArg::T(b)]);
        }
    }
}

#[test]
fn matmul_shapes_layouts_and_dtypes() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[2, 3], &[3, 4]),
        (&[7, 33], &[33, 65]),
        (&[3], &[3]),
        (&[3], &[3, 5]),
        (&[4, 3], &[3]),
        (&[2, 4, 3], &[3, 5]),
        (&[2, 1, 4, 3], &[5, 3, 6]),
        (&[5], &[2, 5, 3]),
        (&[64, 64], &[64, 64]),
        // few rows with a long shared dim: dot products when b is read by columns
        (&[5, 70], &[70, 9]),
        (&[1, 32], &[32, 3]),
        (&[2, 4, 100], &[100, 1]),
    ];
    let mut seed = 800;
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ] {
        for (sa, sb) in cases {
            for (la, lb) in [
                (Layout::Contiguous, Layout::Contiguous),
                (Layout::Transposed, Layout::Transposed),
                (Layout::Contiguous, Layout::Transposed),
                (Layout::Strided, Layout::Offset),
            ] {
                seed += 2;
                let a = make(sa, dtype, seed, Dist::Normal, la);
                let b = make(sb, dtype, seed + 1, Dist::Normal, lb);
                assert_op(&Op::Matmul, &[TestArg::T(a), TestArg::T(b)]);
            }
        }
    }
}
