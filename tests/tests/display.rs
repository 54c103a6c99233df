//! `Display` prints tensors the way PyTorch does.

use kiln::{DType, Tensor};

#[test]
fn prints_like_pytorch() {
    let f = |v: &[f64], s: &[usize], d: DType| Tensor::from_f64(v, s, d).unwrap().to_string();
    assert_eq!(
        f(&[1.0, 2.0, 3.0], &[3], DType::F32),
        "tensor([1., 2., 3.])"
    );
    assert_eq!(
        f(&[1.5, -2.25], &[2], DType::F32),
        "tensor([ 1.5000, -2.2500])"
    );
    assert_eq!(
        f(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F64),
        "tensor([[1., 2.],\n        [3., 4.]], dtype=f64)"
    );
    assert_eq!(f(&[3.0, -1.0], &[2], DType::I64), "tensor([ 3, -1])");
    assert_eq!(
        f(&[3.0, -1.0], &[2], DType::I32),
        "tensor([ 3, -1], dtype=i32)"
    );
    assert_eq!(f(&[1.0, 0.0], &[2], DType::Bool), "tensor([ True, False])");
    assert_eq!(f(&[0.5], &[], DType::F32), "tensor(0.5000)");
    assert_eq!(
        f(&[1e9, 1.0], &[2], DType::F32),
        "tensor([1.0000e+09, 1.0000e+00])"
    );
    assert_eq!(
        f(&[f64::NAN, f64::INFINITY, 1.5], &[3], DType::F32),
        "tensor([   nan,    inf, 1.5000])"
    );
    assert_eq!(f(&[], &[0, 3], DType::F32), "tensor([], size=(0, 3))");
    assert_eq!(
        f(
            &(0..8).map(|i| i as f64).collect::<Vec<_>>(),
            &[2, 2, 2],
            DType::F32
        ),
        "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])"
    );
}

#[test]
fn long_tensors_are_summarised() {
    let x = Tensor::arange(0.0, 2000.0, 1.0, DType::I64).unwrap();
    assert_eq!(
        x.to_string(),
        "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"
    );
}
