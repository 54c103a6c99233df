//! The machine's limits, measured in the same process as the workloads: memory bandwidth by
//! a STREAM triad on all cores, and the f32 GEMM throughput of the library kiln uses.
//!
//! - **Triad** `a[i] = b[i] + s * c[i]` over three f32 arrays, split into one contiguous
//!   chunk per thread of rayon's global pool (the pool kiln's kernels use). Bandwidth counts
//!   the bytes read and written, 12 per element (STREAM convention: write-allocate traffic is
//!   not counted), and is the best of the repetitions. Arrays too small to share out run on
//!   fewer threads (at least [`MIN_CHUNK`] elements each), as a good kernel would, so that a
//!   tiny working set is not measured against thread start-up alone.
//! - **GEMM** `[n, n] @ [n, n]` in f32 through [`kiln::Tensor::matmul`] (the `gemm` crate),
//!   best of a few runs after a warm-up, counted as `2 n³` flops.

use super::run::Budget;
use kiln::{DType, Tensor};
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;

/// Bytes a triad moves per element: two f32 reads and one f32 write.
pub const TRIAD_BYTES_PER_ELEM: usize = 12;

/// The fewest elements a triad gives one thread.
pub const MIN_CHUNK: usize = 16 * 1024;

/// A triad's result.
#[derive(Clone, Copy, Debug)]
pub struct Triad {
    /// bytes moved per pass (`12 * len`)
    pub bytes: f64,
    /// the best pass, GB/s (10⁹ bytes per second)
    pub best_gbs: f64,
    /// the median pass, GB/s
    pub median_gbs: f64,
    /// passes timed
    pub passes: usize,
}

/// The array length for a triad that moves `bytes` per pass (three arrays of about
/// `bytes / 3`), at least one element.
pub fn triad_len_for_bytes(bytes: f64) -> usize {
    ((bytes / TRIAD_BYTES_PER_ELEM as f64).round() as usize).max(1)
}

/// Runs the triad over arrays of `len` f32 (`12 * len` bytes per pass): one untimed pass,
/// then passes until the budget's run count and time are both reached.
pub fn triad(len: usize, budget: Budget) -> Triad {
    let threads = rayon::current_num_threads().max(1);
    let chunk = len.div_ceil(threads).max(MIN_CHUNK).min(len.max(1));
    // zeroed pages come lazily from the OS: touch them in parallel, each by the thread
    // that will use it
    let mut a = vec![0f32; len];
    let mut b = vec![0f32; len];
    let mut c = vec![0f32; len];
    fill(&mut a, chunk, 0.0);
    fill(&mut b, chunk, 1.0);
    fill(&mut c, chunk, 2.0);
    let s = black_box(3.0f32);
    let pass = |a: &mut [f32], b: &[f32], c: &[f32]| {
        if chunk >= len {
            kernel(a, b, c, s);
        } else {
            a.par_chunks_mut(chunk)
                .zip(b.par_chunks(chunk))
                .zip(c.par_chunks(chunk))
                .for_each(|((a, b), c)| kernel(a, b, c, s));
        }
    };
    pass(&mut a, &b, &c);
    let mut times = Vec::new();
    let mut total = 0.0;
    while times.len() < budget.min_runs.max(1) || total < budget.min_secs {
        let start = Instant::now();
        pass(black_box(&mut a), black_box(&b), black_box(&c));
        let t = start.elapsed().as_secs_f64().max(1e-9);
        black_box(&a);
        total += t;
        times.push(t);
    }
    times.sort_by(f64::total_cmp);
    let bytes = (len * TRIAD_BYTES_PER_ELEM) as f64;
    Triad {
        bytes,
        best_gbs: bytes / times[0] / 1e9,
        median_gbs: bytes / times[times.len() / 2] / 1e9,
        passes: times.len(),
    }
}

#[inline(never)]
fn kernel(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + s * c;
    }
}

fn fill(x: &mut [f32], chunk: usize, v: f32) {
    x.par_chunks_mut(chunk.max(1)).for_each(|x| x.fill(v));
}

/// The f32 GEMM throughput at `n³`.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// the square size
    pub n: usize,
    /// the best run, GFLOP/s (`2 n³ / t`)
    pub best_gflops: f64,
    /// runs timed
    pub runs: usize,
}

/// Times `[n, n] @ [n, n]` through [`Tensor::matmul`]: one warm-up, then `runs` runs; the
/// best counts.
pub fn gemm(n: usize, runs: usize) -> kiln::Result<Gemm> {
    let a = Tensor::randn(&[n, n], DType::F32, 11)?;
    let b = Tensor::randn(&[n, n], DType::F32, 12)?;
    drop(a.matmul(&b)?);
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let y = a.matmul(black_box(&b))?;
        drop(black_box(y));
        best = best.min(start.elapsed().as_secs_f64().max(1e-9));
    }
    let flops = 2.0 * (n as f64).powi(3);
    Ok(Gemm {
        n,
        best_gflops: flops / best / 1e9,
        runs: runs.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triad_is_positive_and_counts_12_bytes() {
        let t = triad(
            100_000,
            Budget {
                min_runs: 3,
                min_secs: 0.0,
                warmup: 0,
            },
        );
        assert_eq!(t.bytes, 1_200_000.0);
        assert!(t.best_gbs.is_finite() && t.best_gbs > 0.0);
        assert!(t.best_gbs >= t.median_gbs);
        assert_eq!(triad_len_for_bytes(1_200_000.0), 100_000);
        assert_eq!(triad_len_for_bytes(0.0), 1);
    }

    #[test]
    fn gemm_is_positive() {
        let _serial = crate::cli::tensor_test_lock();
        let g = gemm(64, 2).unwrap();
        assert!(g.best_gflops.is_finite() && g.best_gflops > 0.0);
    }
}
