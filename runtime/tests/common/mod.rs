//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

use kiln_ir::{DType, InplaceOp, Op, Scalar, Shape};
use kiln_runtime::{execute, execute_inplace, CpuTensor, EagerArg};

/// A tensor of `values` (converted to `dtype`).
pub fn t(values: &[f64], shape: &[usize], dtype: DType) -> CpuTensor {
    CpuTensor::from_f64(values, shape, dtype).unwrap()
}

/// Runs `op` on tensor operands.
pub fn ex(op: Op, args: &[&CpuTensor]) -> CpuTensor {
    let a: Vec<EagerArg> = args.iter().map(|t| EagerArg::Tensor(t)).collect();
    execute(&op, &a).unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Runs `op` on a tensor and a scalar.
pub fn ex_s(op: Op, x: &CpuTensor, s: Scalar) -> CpuTensor {
    execute(&op, &[EagerArg::Tensor(x), EagerArg::Scalar(s)]).unwrap()
}

/// Standard normal samples of `shape` in `dtype`.
pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> CpuTensor {
    execute(
        &Op::Randn {
            shape: Shape::of(shape),
            dtype,
            seed,
        },
        &[],
    )
    .unwrap()
}

/// Asserts elementwise closeness: |a - b| <= atol + rtol * |b| (NaNs must match).
pub fn assert_close(a: &[f64], b: &[f64], rtol: f64, atol: f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        if x.is_nan() || y.is_nan() {
            assert!(x.is_nan() && y.is_nan(), "element {i}: {x} vs {y}");
            continue;
        }
        if x == y {
            continue;
        }
        assert!(
            (x - y).abs() <= atol + rtol * y.abs(),
            "element {i}: {x} vs {y} (rtol {rtol}, atol {atol})"
        );
    }
}

/// Same values and shape, different layouts: transposed storage permuted back, a step-2
/// slice of a wider buffer, and an offset slice of a longer buffer.
pub fn layouts(x: &CpuTensor) -> Vec<CpuTensor> {
    let r = x.rank();
    let mut out = Vec::new();
    if r >= 2 {
        let rev: Vec<usize> = (0..r).rev().collect();
        let stored = ex(Op::Permute { dims: rev.clone() }, &[x]);
        let stored = ex(Op::Contiguous, &[&stored]);
        let back = ex(Op::Permute { dims: rev }, &[&stored]);
        assert!(!back.is_contiguous() || x.numel() <= 1);
        out.push(back);
    }
    if r >= 1 {
        let mut wide = x.shape().to_vec();
        wide[r - 1] *= 2;
        let buf = ex(
            Op::Full {
                shape: Shape::of(&wide),
                // poison between the kept elements (NaN is no integer: torch refuses it)
                value: if x.dtype().is_float() {
                    Scalar::Float(f64::NAN)
                } else {
                    Scalar::Int(-99)
                },
                dtype: x.dtype(),
            },
            &[],
        );
        let v = ex(
            Op::Slice {
                dim: -1,
                start: 0,
                end: wide[r - 1],
                step: 2,
            },
            &[&buf],
        );
        execute_inplace(InplaceOp::Copy, &v, EagerArg::Tensor(x)).unwrap();
        out.push(v);

        let mut long = x.shape().to_vec();
        long[0] += 3;
        let buf = ex(
            Op::Full {
                shape: Shape::of(&long),
                value: Scalar::Int(7),
                dtype: x.dtype(),
            },
            &[],
        );
        let v = ex(
            Op::Slice {
                dim: 0,
                start: 2,
                end: 2 + x.shape()[0],
                step: 1,
            },
            &[&buf],
        );
        execute_inplace(InplaceOp::Copy, &v, EagerArg::Tensor(x)).unwrap();
        assert!(v.offset() > 0 || x.numel() == 0);
        out.push(v);
    }
    for v in &out {
        assert_eq!(v.shape(), x.shape());
        assert_eq!(v.to_f64_vec().len(), x.numel());
    }
    out
}
