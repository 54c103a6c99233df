//! Products of a few rows against a right operand read by columns (`x @ wᵀ` with a handful
//! of rows: a classifier head over a small batch, one token's projections): one dot product
//! per output element, each column of the right operand read in place once and kept in L1
//! for every row.
//!
//! `gemm` packs the right operand into panels on every call, which for a few rows costs more
//! than the product itself: ResNet-18's head (4 × 512 @ 512 × 1000 read through `wᵀ`) took
//! 219 µs through `gemm` against 89 µs for eager torch's whole call. f32 dots use AVX2 and FMA
//! where the CPU has them (detected once), else a portable loop of independent accumulators.

use crate::kernels::matmul::{GemmT, MatRef};

/// At most this many rows take the dot-product path.
pub(crate) const FEW_ROWS: usize = 8;

/// At least this long a dot (the shared dim) before the path pays: shorter sums are few
/// multiply-adds for `gemm`'s packing too.
const MIN_DEPTH: usize = 32;

/// Whether `dst[m, n] (+)= a[m, k] @ b[k, n]` takes [`few_rows_into`]: few rows, a's rows and
/// b's columns contiguous, and a dot long enough.
pub(crate) fn applies<T: GemmT>(m: usize, k: usize, a: MatRef<T>, b: MatRef<T>) -> bool {
    T::FAST_DOT && m <= FEW_ROWS && k >= MIN_DEPTH && a.cs == 1 && b.rs == 1
}

/// `dst[m, n] (row stride dst_rs, column stride 1) (+)= a[m, k] @ b[k, n]` as `m·n` dot
/// products, column after column.
///
/// # Safety
/// As [`crate::kernels::matmul::gemm_into`]; [`applies`] must hold.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn few_rows_into<T: GemmT>(
    dst: *mut T,
    dst_rs: isize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    accumulate: bool,
) {
    for j in 0..n as isize {
        let column = b.ptr.offset(j * b.cs);
        for i in 0..m as isize {
            let v = T::dot(a.ptr.offset(i * a.rs), column, k);
            let out = dst.offset(i * dst_rs + j);
            out.write(if accumulate { *out + v } else { v });
        }
    }
}

/// Σ x[i]·y[i] over `k` contiguous f32s, from +0.
///
/// # Safety
/// `x` and `y` valid for `k` reads.
pub(crate) unsafe fn dot_f32(x: *const f32, y: *const f32, k: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        return dot_f32_avx2(x, y, k);
    }
    dot_portable(x, y, k)
}

/// Σ x[i]·y[i] over `k` contiguous elements, from +0, in 8 independent partial sums.
///
/// # Safety
/// `x` and `y` valid for `k` reads.
pub(crate) unsafe fn dot_portable<T: GemmT>(x: *const T, y: *const T, k: usize) -> T {
    let mut acc = [T::default(); 8];
    let mut i = 0;
    while i + 8 <= k {
        for (l, a) in acc.iter_mut().enumerate() {
            *a = *a + *x.add(i + l) * *y.add(i + l);
        }
        i += 8;
    }
    let mut sum = T::default();
    for a in acc {
        sum = sum + a;
    }
    while i < k {
        sum = sum + *x.add(i) * *y.add(i);
        i += 1;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx2_fma() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

/// [`dot_f32`] in four 8-lane fused multiply-add accumulators.
///
/// # Safety
/// The CPU has AVX2 and FMA; `x` and `y` valid for `k` reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_avx2(x: *const f32, y: *const f32, k: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= k {
        for (l, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * l;
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(o)), _mm256_loadu_ps(y.add(o)), *a);
        }
        i += 32;
    }
    while i + 8 <= k {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i)), acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
    while i < k {
        sum = x.add(i).read().mul_add(y.add(i).read(), sum);
        i += 1;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(x: &[f32], y: &[f32]) -> f64 {
        x.iter().zip(y).map(|(a, b)| *a as f64 * *b as f64).sum()
    }

    #[test]
    fn dots_match_a_float64_sum_at_every_length() {
        let mut seed = 1u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1 << 23) as f32 - 1.0
        };
        for k in [0usize, 1, 7, 8, 9, 31, 32, 33, 63, 100, 515] {
            let x: Vec<f32> = (0..k).map(|_| next()).collect();
            let y: Vec<f32> = (0..k).map(|_| next()).collect();
            let want = reference(&x, &y);
            let bound = 1e-6
                * x.iter()
                    .zip(&y)
                    .map(|(a, b)| (a * b).abs() as f64)
                    .sum::<f64>();
            // SAFETY: both slices hold k elements.
            let (fast, portable) = unsafe {
                (
                    dot_f32(x.as_ptr(), y.as_ptr(), k),
                    dot_portable(x.as_ptr(), y.as_ptr(), k),
                )
            };
            assert!(
                (fast as f64 - want).abs() <= bound + 1e-30,
                "k={k}: {fast} vs {want}"
            );
            assert!(
                (portable as f64 - want).abs() <= bound + 1e-30,
                "k={k}: {portable} vs {want}"
            );
        }
    }

    #[test]
    fn an_all_negative_zero_dot_is_positive_zero() {
        let x = [-0.0f32; 40];
        let y = [1.0f32; 40];
        // SAFETY: both arrays hold 40 elements.
        let v = unsafe { dot_f32(x.as_ptr(), y.as_ptr(), 40) };
        assert!(v == 0.0 && v.is_sign_positive());
    }
}
