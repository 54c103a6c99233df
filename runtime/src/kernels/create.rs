//! Creation kernels: full, arange, rand, randn, from_vec. Fast paths: zero fills come from the
//! allocator's zeroed blocks; the rest fill chunks in parallel (random numbers are a pure
//! function of (seed, index), so any order gives the interpreter's values).

use crate::element::{with_dtype, Element, Kern};
use crate::iter::{for_chunks, GRAIN_CHEAP, GRAIN_COSTLY};
use crate::storage::Storage;
use crate::tensor::CpuTensor;
use kiln_ir::{rng, DType, Scalar};

/// A tensor of `shape` filled with `value` converted to `dtype`.
pub(crate) fn full(shape: &[usize], value: Scalar, dtype: DType) -> CpuTensor {
    let n = shape.iter().product();
    if value.to_f64() == 0.0 && !value.to_f64().is_sign_negative() {
        return CpuTensor::from_storage(Storage::zeros(dtype, n), shape);
    }
    with_dtype!(dtype, T => {
        let v = T::from_scalar(value);
        let s = Storage::build::<T>(n, |out| {
            for_chunks(out, GRAIN_CHEAP, |_, c| {
                for o in c {
                    o.write(v);
                }
            })
        });
        CpuTensor::from_storage(s, shape)
    })
}

/// Fills a fresh tensor with `f(i)` for each row-major index `i`.
fn from_fn<T: Kern>(
    shape: &[usize],
    grain: usize,
    f: impl Fn(usize) -> T + Sync + Send,
) -> CpuTensor {
    let n = shape.iter().product();
    let s = Storage::build::<T>(n, |out| {
        for_chunks(out, grain, |start, c| {
            for (i, o) in c.iter_mut().enumerate() {
                o.write(f(start + i));
            }
        })
    });
    CpuTensor::from_storage(s, shape)
}

/// `start + i * step` for `i < n`, converted to `dtype`.
pub(crate) fn arange(start: f64, step: f64, n: usize, dtype: DType) -> CpuTensor {
    with_dtype!(dtype, T => from_fn::<T>(&[n], GRAIN_CHEAP, |i| T::from_f64(start + i as f64 * step)))
}

/// Uniform samples in [0, 1): element i is `rng::uniform(seed, i)`.
pub(crate) fn rand(shape: &[usize], dtype: DType, seed: u64) -> CpuTensor {
    with_dtype!(dtype, T => from_fn::<T>(shape, GRAIN_COSTLY, |i| T::from_f64(rng::uniform(seed, i as u64))))
}

/// Standard normal samples: element i is `rng::normal(seed, i)`.
pub(crate) fn randn(shape: &[usize], dtype: DType, seed: u64) -> CpuTensor {
    with_dtype!(dtype, T => from_fn::<T>(shape, GRAIN_COSTLY, |i| T::from_f64(rng::normal(seed, i as u64))))
}

/// A literal tensor (the values were checked against the shape by `infer`).
pub(crate) fn from_vec(values: &[f64], shape: &[usize], dtype: DType) -> CpuTensor {
    with_dtype!(dtype, T => from_fn::<T>(shape, GRAIN_CHEAP, |i| T::from_f64(values[i])))
}
