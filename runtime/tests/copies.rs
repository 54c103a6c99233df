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

/// Row-major copies of views that transpose two dims over small blocks (a convolution's
/// weight gradient [co, ci, kh, kw] read from [ci, co, kh', kw'], cut to kh × kw; with a
/// leading batch dim; blocks of one element and of many; odd sizes, several dtypes) hold
/// the values an index computation on the base tensor gives, in every dtype's bits.
#[test]
fn copies_of_block_transposed_views_equal_index_arithmetic() {
    use kiln_ir::Op;
    let cases: [(&[usize], &[usize], [usize; 2]); 4] = [
        // base shape, permutation, kept sizes of the last two dims
        (&[37, 70, 4, 4], &[1, 0, 2, 3], [3, 3]),
        (&[64, 96, 3, 3], &[1, 0, 2, 3], [3, 3]),
        (&[3, 40, 33, 2, 5], &[0, 2, 1, 3, 4], [2, 5]),
        (&[130, 70, 1, 2], &[1, 0, 2, 3], [1, 1]),
    ];
    for dt in [DType::F32, DType::F64, DType::F16, DType::I32] {
        for (base_shape, perm, keep) in cases {
            let base = ex(Op::Cast { dtype: dt }, &[&randn(base_shape, DType::F32, 9)]);
            let p = ex(
                Op::Permute {
                    dims: perm.to_vec(),
                },
                &[&base],
            );
            let r = p.rank();
            let mut v = p.clone();
            for (d, &k) in [r - 2, r - 1].iter().zip(&keep) {
                v = ex(
                    Op::Slice {
                        dim: *d as i64,
                        start: 0,
                        end: k,
                        step: 1,
                    },
                    &[&v],
                );
            }
            let got = ex(Op::Contiguous, &[&v]);
            assert!(got.is_contiguous());
            assert_eq!(got.shape(), v.shape());
            // the value at each index of v, from the base's row-major values
            let vals = base.to_f64_vec();
            let want: Vec<f64> = (0..v.numel())
                .map(|mut pos| {
                    let mut off = v.offset() as isize;
                    for d in (0..r).rev() {
                        off += (pos % v.shape()[d]) as isize * v.strides()[d];
                        pos /= v.shape()[d];
                    }
                    vals[off as usize]
                })
                .collect();
            assert_eq!(got.to_f64_vec(), want, "{dt:?} {base_shape:?} {perm:?}");
        }
    }
}
