//! Eager vs interpreter on layout ops (reshape, permute, transpose, expand, slice, cat,
//! index_select, contiguous, triu, tril) and creation ops; and the view semantics users
//! rely on: views share storage, copies do not.

use kiln::ir::{Op, Scalar};
use kiln::{DType, Shape, Tensor};
use kiln_tests::{assert_op, make, Dist, Layout, TestArg};

#[test]
fn reshape_from_every_layout() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[6], &[2, 3]),
        (&[2, 3, 4], &[4, 6]),
        (&[2, 3, 4], &[24]),
        (&[1, 1], &[1]),
        (&[5, 7], &[7, 5]),
        (&[4, 1, 5], &[2, 10, 1]),
    ];
    for dtype in [DType::F32, DType::I64, DType::Bool, DType::BF16] {
        for (from, to) in cases {
            for layout in Layout::ALL {
                let x = make(from, dtype, 1, Dist::Normal, layout);
                assert_op(
                    &Op::Reshape {
                        shape: Shape::of(to),
                    },
                    &[TestArg::T(x)],
                );
            }
        }
    }
}

#[test]
fn permute_transpose_expand() {
    for layout in Layout::ALL {
        let x = make(&[2, 3, 4], DType::F32, 2, Dist::Normal, layout);
        for dims in [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]] {
            assert_op(
                &Op::Permute {
                    dims: dims.to_vec(),
                },
                &[TestArg::T(x.clone())],
            );
        }
        for (a, b) in [(0, 1), (-1, 0), (1, 2), (2, 2)] {
            assert_op(
                &Op::Transpose { dim0: a, dim1: b },
                &[TestArg::T(x.clone())],
            );
        }
        let y = make(&[3, 1], DType::I32, 3, Dist::Normal, layout);
        assert_op(
            &Op::Expand {
                shape: Shape::of(&[2, 3, 5]),
            },
            &[TestArg::T(y.clone())],
        );
        assert_op(
            &Op::Expand {
                shape: Shape::of(&[3, 1]),
            },
            &[TestArg::T(y)],
        );
    }
}

#[test]
fn slices_with_steps() {
    for layout in Layout::ALL {
        let x = make(&[7, 9], DType::F32, 4, Dist::Normal, layout);
        for (dim, start, end, step) in [
            (0, 0, 7, 1),
            (1, 2, 9, 3),
            (0, 6, 7, 1),
            (1, 4, 4, 1),
            (-1, 1, 8, 2),
            (0, 0, 7, 10),
        ] {
            assert_op(
                &Op::Slice {
                    dim,
                    start,
                    end,
                    step,
                },
                &[TestArg::T(x.clone())],
            );
        }
    }
}

#[test]
fn cat_along_each_dim_with_promotion() {
    for dim in [0i64, 1, -1] {
        let a = make(&[2, 3], DType::F32, 5, Dist::Normal, Layout::Transposed);
        let b = make(&[2, 3], DType::F64, 6, Dist::Normal, Layout::Contiguous);
        let c = make(&[2, 3], DType::I32, 7, Dist::Normal, Layout::Strided);
        assert_op(
            &Op::Cat { dim },
            &[TestArg::T(a.clone()), TestArg::T(b), TestArg::T(c)],
        );
        assert_op(&Op::Cat { dim }, &[TestArg::T(a)]);
    }
    let a = make(&[1, 4], DType::BF16, 8, Dist::Normal, Layout::Contiguous);
    let b = make(&[5, 4], DType::BF16, 9, Dist::Normal, Layout::Offset);
    assert_op(&Op::Cat { dim: 0 }, &[TestArg::T(a), TestArg::T(b)]);
}

#[test]
fn index_select_is_an_embedding_lookup() {
    let table = make(&[10, 4], DType::F32, 10, Dist::Normal, Layout::Transposed);
    for dtype in [DType::I64, DType::I32] {
        let idx = Tensor::from_f64(&[3.0, 0.0, 9.0, 3.0, 1.0], &[5], dtype).unwrap();
        assert_op(
            &Op::IndexSelect { dim: 0 },
            &[TestArg::T(table.clone()), TestArg::T(idx.clone())],
        );
        let idx2 = Tensor::from_f64(&[1.0, 2.0], &[2], dtype).unwrap();
        assert_op(
            &Op::IndexSelect { dim: 1 },
            &[TestArg::T(table.clone()), TestArg::T(idx2)],
        );
    }
    // n-d indices: the dim is replaced by the indices' dims ([B, S] ids -> [B, S, D] rows),
    // contiguous and transposed index tensors
    let ids = Tensor::from_f64(&[3.0, 0.0, 9.0, 3.0, 1.0, 7.0], &[2, 3], DType::I64).unwrap();
    for idx in [ids.clone(), ids.transpose(0, 1).unwrap()] {
        assert_op(
            &Op::IndexSelect { dim: 0 },
            &[TestArg::T(table.clone()), TestArg::T(idx.clone())],
        );
        let cols = (idx.clone() / 3i64).unwrap().cast(DType::I64).unwrap();
        assert_op(
            &Op::IndexSelect { dim: -1 },
            &[TestArg::T(table.clone()), TestArg::T(cols)],
        );
    }
    let ids = ids.reshape(&[1, 2, 3]).unwrap();
    let x = make(&[3, 10, 2], DType::F32, 12, Dist::Normal, Layout::Strided);
    assert_op(
        &Op::IndexSelect { dim: 1 },
        &[TestArg::T(x), TestArg::T(ids)],
    );
    let empty = Tensor::from_vec(Vec::<i64>::new(), &[0]).unwrap();
    assert_op(
        &Op::IndexSelect { dim: 0 },
        &[TestArg::T(table), TestArg::T(empty)],
    );
}

#[test]
fn contiguous_triu_tril() {
    for layout in Layout::ALL {
        for dtype in [DType::F32, DType::I64, DType::Bool] {
            let x = make(&[2, 5, 4], dtype, 11, Dist::Normal, layout);
            assert_op(&Op::Contiguous, &[TestArg::T(x.clone())]);
            for diagonal in [-5, -1, 0, 1, 3, 7] {
                assert_op(&Op::Triu { diagonal }, &[TestArg::T(x.clone())]);
                assert_op(&Op::Tril { diagonal }, &[TestArg::T(x.clone())]);
            }
        }
    }
}

#[test]
fn creation_ops_match_the_interpreter() {
    let ops = vec![
        Op::Full {
            shape: Shape::of(&[2, 3]),
            value: Scalar::Float(1.5),
            dtype: DType::F32,
        },
        Op::Full {
            shape: Shape::of(&[]),
            value: Scalar::Int(-7),
            dtype: DType::I32,
        },
        Op::Full {
            shape: Shape::of(&[4]),
            value: Scalar::Bool(true),
            dtype: DType::Bool,
        },
        Op::Full {
            shape: Shape::of(&[3]),
            value: Scalar::Float(0.1),
            dtype: DType::BF16,
        },
        Op::Arange {
            start: 0.0.into(),
            end: 10.0.into(),
            step: 1.0.into(),
            dtype: DType::I64,
        },
        Op::Arange {
            start: (-1.0).into(),
            end: 1.0.into(),
            step: 0.3.into(),
            dtype: DType::F32,
        },
        Op::Arange {
            start: 5.0.into(),
            end: 0.0.into(),
            step: (-2.0).into(),
            dtype: DType::F64,
        },
        Op::Arange {
            start: 0.0.into(),
            end: 0.0.into(),
            step: 1.0.into(),
            dtype: DType::F32,
        },
        Op::Rand {
            shape: Shape::of(&[3, 1027]),
            dtype: DType::F32,
            seed: 1,
        },
        Op::Randn {
            shape: Shape::of(&[3, 1027]),
            dtype: DType::F32,
            seed: 2,
        },
        Op::Randn {
            shape: Shape::of(&[5]),
            dtype: DType::F16,
            seed: 3,
        },
        Op::Rand {
            shape: Shape::of(&[1]),
            dtype: DType::F64,
            seed: 4,
        },
        Op::FromVec {
            values: vec![1.0, -2.5, 3.25, 4.0, 5.0, 6.5].into(),
            shape: Shape::of(&[3, 2]),
            dtype: DType::F32,
        },
        Op::FromVec {
            values: vec![1.7, -2.5].into(),
            shape: Shape::of(&[2]),
            dtype: DType::I32,
        },
    ];
    for op in ops {
        assert_op(&op, &[]);
    }
}

#[test]
fn randn_is_deterministic_and_normal() {
    let a = Tensor::randn(&[10000], DType::F32, 9)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    let b = Tensor::randn(&[10000], DType::F32, 9)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    assert_eq!(a, b);
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    let var = a.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / a.len() as f64;
    assert!(
        mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
        "mean {mean} var {var}"
    );
    assert_ne!(
        a,
        Tensor::randn(&[10000], DType::F32, 10)
            .unwrap()
            .to_vec_f64()
            .unwrap()
    );
}

#[test]
fn views_share_storage_and_copies_do_not() {
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[3, 4])
        .unwrap();
    for view in [
        x.transpose(0, 1).unwrap(),
        x.reshape(&[4, 3]).unwrap(),
        x.permute(&[1, 0]).unwrap(),
        x.narrow(1, 1, 2).unwrap(),
        x.slice(0, 0, 3, 2).unwrap(),
        x.narrow(0, 0, 1).unwrap().expand(&[5, 3, 4]).unwrap(),
    ] {
        assert!(view.shares_storage(&x));
    }
    assert!(!x
        .transpose(0, 1)
        .unwrap()
        .contiguous()
        .unwrap()
        .shares_storage(&x));
    assert!(!x.cast(DType::F64).unwrap().shares_storage(&x));
    // A view of a non-contiguous tensor that cannot be expressed with strides is a copy.
    let t = x.transpose(0, 1).unwrap();
    assert!(!t.reshape(&[12]).unwrap().shares_storage(&x));
    assert_eq!(
        t.reshape(&[12]).unwrap().to_vec::<f32>().unwrap(),
        vec![0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]
    );
}
