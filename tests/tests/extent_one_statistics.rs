//! Statistics over dims of extent 1 (a layer norm or a variance over a last dim of size 1)
//! compiled for the cpu backend. Their f64 statistic is then a point value of the loop
//! nest, not a row value; the nest used to fall back to the eager kernels for it, which
//! computed the normalised value's transcendental input with libm while the kernel that
//! made the mean used kiln's polynomial: `x - mean` was an ulp off zero, and the layer norm
//! of a single element (rstd = 1/√eps) came out 2e-4 instead of 0 (fuzz regression
//! `fuzz_cpu_20030466`). Now the nest computes the f64 point values itself (4 lanes as two
//! F64X2 halves), and every output equals eager's bit for bit, on the Cranelift code and on
//! the C tier's.

use kiln::{compile_with, Backend, CompileOptions, DType, Result, Tensor, TierPolicy};

/// Calls `check(got, want, what)` with `f` compiled for the cpu on each tier (Cranelift
/// code only, and every kernel built by the C compiler at its first call) against eager
/// `f`, on 1 row (scalar code), 4 and 9 (vector lanes and a tail), contiguous and strided.
fn on_each_tier(
    f: impl Fn(&Tensor) -> Result<Tensor> + Copy + Send + Sync + 'static,
    check: impl Fn(&Tensor, &Tensor, &str),
) {
    for tier in [TierPolicy::CraneliftOnly, TierPolicy::CUpFront] {
        let cf = compile_with(
            f,
            CompileOptions::default().backend(Backend::Cpu).tier(tier),
        );
        for rows in [1, 4, 9] {
            for x in layouts(rows) {
                let (got, want) = (cf.call(&x).unwrap(), f(&x).unwrap());
                check(&got, &want, &format!("{rows} rows, {tier:?}"));
            }
        }
    }
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// `x`'s values in a fresh row-major tensor and in a transposed view of one.
fn layouts(rows: usize) -> Vec<Tensor> {
    let x = Tensor::randn(&[rows, 1], DType::F32, 11).unwrap();
    let t = x.transpose(0, 1).unwrap().contiguous().unwrap();
    vec![x, t.transpose(0, 1).unwrap()]
}

#[test]
fn layer_norm_over_a_last_dim_of_size_one_is_exactly_zero_as_eager() {
    let f = |x: &Tensor| -> Result<Tensor> { x.tan()?.layer_norm(&[1], None, None, 1e-6) };
    on_each_tier(f, |got, want, what| {
        assert_eq!(bits(got), bits(want), "{what}");
        assert!(want.to_vec_f64().unwrap().iter().all(|&v| v == 0.0));
    });
}

#[test]
fn variance_over_a_dim_of_size_one_is_nan_as_eager() {
    // correction 1 over one element: 0/0 in eager; the kernel's exp must agree with the
    // mean's, or x - mean is not 0 and the quotient an infinity
    let f = |x: &Tensor| -> Result<Tensor> { x.exp()?.var(&[-1], 1, false) };
    on_each_tier(f, |got, want, what| {
        assert!(want.to_vec_f64().unwrap().iter().all(|v| v.is_nan()));
        assert!(
            got.to_vec_f64().unwrap().iter().all(|v| v.is_nan()),
            "{what}: {:?}",
            got.to_vec_f64()
        );
    });
}
