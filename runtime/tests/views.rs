//! Views share storage; in-place writes bump the shared version counter and are seen
//! through every view; with_layout checks bounds.

mod common;
use common::*;
use kiln_ir::{DType, InplaceOp, Op, Scalar, Shape};
use kiln_runtime::{execute_inplace, CpuTensor, EagerArg, RuntimeError};

#[test]
fn view_ops_share_storage() {
    let x = randn(&[2, 3, 4], DType::F32, 1);
    let views = [
        ex(
            Op::Reshape {
                shape: Shape::of(&[6, 4]),
            },
            &[&x],
        ),
        ex(
            Op::Permute {
                dims: vec![2, 0, 1],
            },
            &[&x],
        ),
        ex(Op::Transpose { dim0: 0, dim1: 2 }, &[&x]),
        ex(
            Op::Slice {
                dim: 2,
                start: 1,
                end: 4,
                step: 2,
            },
            &[&x],
        ),
        ex(
            Op::Expand {
                shape: Shape::of(&[5, 2, 3, 4]),
            },
            &[&x],
        ),
    ];
    for v in &views {
        assert!(v.shares_storage(&x), "{v:?}");
    }
    let p = &views[1];
    assert_eq!(
        (p.shape(), p.strides()),
        (&[4usize, 2, 3][..], &[1isize, 12, 4][..])
    );
    let s = &views[3];
    assert_eq!(
        (s.shape(), s.strides(), s.offset()),
        (&[2usize, 3, 2][..], &[12isize, 4, 2][..], 1)
    );
    // A reshape of a non-contiguous view that strides allow is still a view.
    let r = ex(
        Op::Reshape {
            shape: Shape::of(&[2, 3, 2, 1]),
        },
        &[s],
    );
    assert!(r.shares_storage(&x));
    // Copies do not share.
    for op in [Op::Contiguous, Op::Cast { dtype: DType::F32 }] {
        assert!(!ex(op, &[&x]).shares_storage(&x));
    }
}

#[test]
fn versions_bump_and_writes_show_through_views() {
    let x = t(&[0.0; 6], &[2, 3], DType::F32);
    let v = ex(Op::Transpose { dim0: 0, dim1: 1 }, &[&x]);
    assert_eq!(x.version(), 0);
    execute_inplace(InplaceOp::Fill, &v, EagerArg::Scalar(Scalar::Float(2.0))).unwrap();
    assert_eq!((x.version(), v.version()), (1, 1));
    let col = ex(
        Op::Slice {
            dim: 1,
            start: 1,
            end: 2,
            step: 1,
        },
        &[&x],
    );
    execute_inplace(InplaceOp::Add, &col, EagerArg::Scalar(Scalar::Float(1.0))).unwrap();
    assert_eq!(x.version(), 2);
    assert_eq!(x.to_f64_vec(), vec![2.0, 3.0, 2.0, 2.0, 3.0, 2.0]);
    // Out-of-place ops never bump.
    let _ = ex(Op::Unary(kiln_ir::UnaryOp::Exp), &[&x]);
    assert_eq!(x.version(), 2);
    // A failed in-place op leaves the version alone.
    let e = ex(
        Op::Expand {
            shape: Shape::of(&[4, 2, 3]),
        },
        &[&x],
    );
    assert!(execute_inplace(InplaceOp::Add, &e, EagerArg::Scalar(Scalar::Int(1))).is_err());
    assert_eq!(x.version(), 2);
}

#[test]
fn with_layout_is_bounds_checked() {
    let x = t(
        &(0..12).map(|v| v as f64).collect::<Vec<_>>(),
        &[12],
        DType::F64,
    );
    let v = x.with_layout(&[3, 2], &[4, 2], 1).unwrap();
    assert_eq!(v.to_f64_vec(), vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
    let flip = x.with_layout(&[4], &[-1], 3).unwrap();
    assert_eq!(flip.to_f64_vec(), vec![3.0, 2.0, 1.0, 0.0]);
    assert!(matches!(
        x.with_layout(&[3, 2], &[4, 2], 2),
        Err(RuntimeError::Layout { .. })
    ));
    assert!(x.with_layout(&[4], &[-1], 2).is_err());
    assert!(x.with_layout(&[2], &[1, 1], 0).is_err());
    assert!(x.with_layout(&[0, 5], &[100, 100], 12).is_ok());
    assert!(x.with_layout(&[usize::MAX, 2], &[0, 0], 0).is_err());
    // Kernels read negative strides correctly.
    let d = ex(Op::Binary(kiln_ir::BinaryOp::Mul), &[&flip, &flip]);
    assert_eq!(d.to_f64_vec(), vec![9.0, 4.0, 1.0, 0.0]);
}

#[test]
fn typed_access_checks_dtype() {
    let x = t(&[1.0, 2.0], &[2], DType::I32);
    assert!(matches!(
        x.to_vec::<f32>(),
        Err(RuntimeError::DTypeMismatch { .. })
    ));
    assert!(x.storage().read::<i64>().is_err());
    assert_eq!(&*x.storage().read::<i32>().unwrap(), &[1, 2]);
    {
        let mut w = x.storage().write::<i32>().unwrap();
        w[0] = 5;
    }
    assert_eq!(x.version(), 1);
    assert_eq!(x.to_vec::<i32>().unwrap(), vec![5, 2]);
    assert!(CpuTensor::from_f64(&[1.0, 2.0, 3.0], &[2], DType::F32).is_err());
    assert!(CpuTensor::from_slice(&[1.0f32], &[2]).is_err());
}

#[test]
fn tensors_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CpuTensor>();
    let x = randn(&[1000], DType::F32, 2);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let x = x.clone();
            std::thread::spawn(move || {
                if i % 2 == 0 {
                    execute_inplace(InplaceOp::Add, &x, EagerArg::Scalar(Scalar::Float(1.0)))
                        .unwrap();
                } else {
                    let _ = ex(Op::Unary(kiln_ir::UnaryOp::Neg), &[&x]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(x.version(), 2);
}
