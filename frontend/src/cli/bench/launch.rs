//! What a compiled kernel costs beyond its work: a compiled chain of [`CHAIN`] tiny matmuls
//! (`x ← tanh(x @ wᵢ)` at [`SIDE`]×[`SIDE`], one matmul kernel with its epilogue each, so
//! nothing fuses them), timed per call and divided by the kernels the plan runs (counted by
//! [`kiln::profile`]). Each kernel's arithmetic is a few hundred multiply-adds (tens of ns),
//! so the figure is the plan's per-kernel overhead: dispatch, argument binding, buffer
//! handling and any hand-off to threads. It is the overhead that decides small models, where
//! a plan runs hundreds of kernels of a few microseconds.

use super::run::Budget;
use kiln::{compile_with, CompileOptions, DType, Tensor};
use std::time::Instant;

/// Matmuls in the chain.
pub const CHAIN: usize = 64;
/// The square side of each matmul.
pub const SIDE: usize = 8;

/// The probe's result.
#[derive(Clone, Copy, Debug)]
pub struct LaunchCost {
    /// kernels one call of the compiled chain runs
    pub kernels: usize,
    /// the median call over the kernels, ns
    pub per_kernel_ns: f64,
}

/// Compiles the chain, warms it up, and times calls until the budget is met.
pub fn launch_cost(budget: Budget) -> kiln::Result<LaunchCost> {
    let mut inputs = vec![Tensor::randn(&[SIDE, SIDE], DType::F32, 0)?];
    for i in 0..CHAIN {
        // scaled so the chain neither vanishes nor saturates
        let w = Tensor::randn(&[SIDE, SIDE], DType::F32, 1 + i as u64)?;
        inputs.push(w.mul(1.0 / (SIDE as f64).sqrt())?);
    }
    let chain = compile_with(
        |xs: &[Tensor]| {
            let mut x = xs[0].clone();
            for w in &xs[1..] {
                x = x.matmul(w)?.tanh()?;
            }
            Ok(x)
        },
        CompileOptions::default().name("launch_chain"),
    );
    for _ in 0..budget.warmup.max(1) {
        chain.call(&inputs)?;
    }
    let was_profiling = kiln::profile::enabled();
    kiln::profile::set_enabled(true);
    kiln::profile::reset();
    chain.call(&inputs)?;
    let kernels: u64 = kiln::profile::report().iter().map(|k| k.calls).sum();
    kiln::profile::reset();
    kiln::profile::set_enabled(was_profiling);
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < budget.min_runs.max(1) || start.elapsed().as_secs_f64() < budget.min_secs {
        let t = Instant::now();
        chain.call(&inputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e9);
    }
    times.sort_by(f64::total_cmp);
    let call_ns = times[times.len() / 2];
    let kernels = (kernels as usize).max(1);
    Ok(LaunchCost {
        kernels,
        per_kernel_ns: call_ns / kernels as f64,
    })
}
