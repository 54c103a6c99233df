//! Copies out of and into tensors: `copy_to_slice` writes the row-major values of any
//! layout (the same as `to_vec`), `from_slice_mapped` builds a tensor of `f(x)`, and both
//! refuse a wrong dtype or length with an error naming it.

mod common;
use common::*;
use kiln_ir::DType;
use kiln_runtime::{CpuTensor, RuntimeError};

#[test]
fn copy_to_slice_equals_to_vec_for_every_layout() {
    for shape in [&[1usize][..], &[7], &[3, 5, 7], &[64, 1100], &[1, 1, 1]] {
        let x = randn(shape, DType::F32, 3);
        let mut views = layouts(&x);
        views.push(x.clone());
        for v in views {
            let want = v.to_vec::<f32>().unwrap();
            let mut got = vec![f32::NAN; v.numel()];
            v.copy_to_slice(&mut got).unwrap();
            assert_eq!(got, want, "{:?} {:?}", v.shape(), v.strides());
        }
    }
    let x = randn(&[4, 9], DType::F64, 4);
    for v in layouts(&x) {
        let mut got = vec![0.0f64; v.numel()];
        v.copy_to_slice(&mut got).unwrap();
        assert_eq!(got, v.to_vec::<f64>().unwrap());
    }
}

#[test]
fn copy_to_slice_refuses_a_wrong_dtype_or_length() {
    let x = randn(&[2, 3], DType::F32, 5);
    let mut wrong_type = vec![0.0f64; 6];
    assert!(matches!(
        x.copy_to_slice(&mut wrong_type),
        Err(RuntimeError::DTypeMismatch { .. })
    ));
    let mut short = vec![0.0f32; 5];
    let e = x.copy_to_slice(&mut short).unwrap_err();
    assert!(e.to_string().contains("5 elements"), "{e}");
    assert!(short.iter().all(|&v| v == 0.0), "nothing written on error");
}

#[test]
fn from_slice_mapped_applies_f_once_per_element() {
    let data: Vec<f32> = (0..35).map(|i| i as f32 * 0.25 - 3.0).collect();
    let t = CpuTensor::from_slice_mapped(&data, &[5, 7], |v| v / 3.0).unwrap();
    assert_eq!(t.shape(), &[5, 7]);
    assert!(t.is_contiguous());
    let want: Vec<f32> = data.iter().map(|v| v / 3.0).collect();
    assert_eq!(t.to_vec::<f32>().unwrap(), want);
    assert_eq!(
        CpuTensor::from_slice(&data, &[35])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        data
    );
    let e = CpuTensor::from_slice_mapped(&data, &[4, 7], |v| v).unwrap_err();
    assert!(e.to_string().contains("35 values"), "{e}");
}
