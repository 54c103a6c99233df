//! In-place ops: eager writes through views and bumps version counters; the values equal the
//! interpreter's functional form of the same op.

use kiln::ir::{InplaceOp, Op, Scalar};
use kiln::{DType, Tensor};
use kiln_tests::{assert_op, make, Dist, Layout, TestArg};

#[test]
fn inplace_ops_match_their_functional_form() {
    let mut seed = 10;
    for op in InplaceOp::ALL {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::I32] {
            for layout in [
                Layout::Contiguous,
                Layout::Transposed,
                Layout::Strided,
                Layout::Offset,
            ] {
                seed += 2;
                let dst = make(&[3, 5], dtype, seed, Dist::Normal, layout);
                let src = make(&[5], dtype, seed + 1, Dist::Normal, Layout::Contiguous);
                let scalar = if dtype.is_float() {
                    Scalar::Float(0.75)
                } else {
                    Scalar::Int(3)
                };
                let arg = match op {
                    InplaceOp::Fill => TestArg::S(scalar),
                    _ => TestArg::T(src.clone()),
                };
                assert_op(&Op::Inplace(op), &[TestArg::T(dst.clone()), arg]);
                if op != InplaceOp::Copy {
                    assert_op(&Op::Inplace(op), &[TestArg::T(dst), TestArg::S(scalar)]);
                }
            }
        }
    }
}

#[test]
fn eager_inplace_writes_through_views_and_bumps_versions() {
    let base = Tensor::zeros(&[3, 4], DType::F32).unwrap();
    let v0 = base.version();
    let col = base.narrow(1, 1, 1).unwrap();
    col.fill_(2.0).unwrap();
    assert!(base.version() > v0);
    assert_eq!(
        base.to_vec::<f32>().unwrap(),
        vec![0., 2., 0., 0., 0., 2., 0., 0., 0., 2., 0., 0.]
    );

    let t = base.transpose(0, 1).unwrap();
    let v1 = base.version();
    t.add_(&Tensor::arange(0.0, 3.0, 1.0, DType::F32).unwrap())
        .unwrap();
    assert!(base.version() > v1);
    assert_eq!(
        base.to_vec::<f32>().unwrap(),
        vec![0., 2., 0., 0., 1., 3., 1., 1., 2., 4., 2., 2.]
    );

    base.mul_(0.5).unwrap();
    assert_eq!(base.to_vec::<f32>().unwrap()[5], 1.5);
    let src = Tensor::from_vec(vec![7i64, 8, 9, 10], &[4]).unwrap();
    base.copy_(&src).unwrap(); // broadcast over rows, cast i64 -> f32
    assert_eq!(base.to_vec::<f32>().unwrap()[4..8], [7., 8., 9., 10.]);
}

#[test]
fn inplace_from_an_overlapping_view_of_itself() {
    // x.copy_(x.flip-like view): the source is read before it is overwritten.
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    let shifted = x.narrow(0, 0, 1).unwrap();
    x.add_(&shifted).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0., 2., 4., 3., 5., 7.]);
}

#[test]
fn inplace_errors_never_corrupt_data() {
    let x = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let before = x.to_vec::<i32>().unwrap();
    assert!(
        x.add_(1.5).is_err(),
        "an f32 result cannot be stored in an i32 tensor"
    );
    assert!(x.add_(&Tensor::ones(&[4], DType::I32).unwrap()).is_err());
    let e = Tensor::ones(&[1], DType::F32)
        .unwrap()
        .expand(&[3])
        .unwrap();
    assert!(
        e.add_(1.0).is_err(),
        "writing into an expanded tensor overlaps itself"
    );
    assert_eq!(x.to_vec::<i32>().unwrap(), before);
}
