//! One workload, eager and compiled: the first compiled call (timed on its own), the check of
//! the compiled outputs against eager ones, the peak memory of one call of each, and the
//! timing loop that runs the two in alternation so that drift of the machine (frequency,
//! neighbours) affects both alike.
//!
//! Peak memory is read from the caching allocator: for an eager call, the most bytes held by
//! live tensors during it above those held before it (its intermediates and outputs); for a
//! compiled call (a cache hit), the same above the bytes held before the *first* compiled
//! call, so that buffers the compiled plan keeps between calls count too.

use kiln::models::Model;
use kiln::{
    allocator_stats, compile_with, reset_peak_stats, Backend, CompileOptions, Tensor, TierPolicy,
};
use std::hint::black_box;
use std::time::Instant;

/// How much to time: at least `min_runs` runs AND at least `min_secs` seconds per side,
/// after `warmup` untimed runs per side.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// the fewest timed runs per side
    pub min_runs: usize,
    /// the least total time per side, seconds
    pub min_secs: f64,
    /// untimed runs per side before timing
    pub warmup: usize,
}

/// Statistics of one side's timed runs, milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// the median run
    pub median_ms: f64,
    /// the fastest run
    pub min_ms: f64,
    /// the slowest run
    pub max_ms: f64,
    /// runs timed
    pub runs: usize,
}

impl Timing {
    fn from_secs(mut t: Vec<f64>) -> Timing {
        t.sort_by(f64::total_cmp);
        let ms = |s: f64| s * 1e3;
        let n = t.len();
        let median = if n % 2 == 1 {
            t[n / 2]
        } else {
            0.5 * (t[n / 2 - 1] + t[n / 2])
        };
        Timing {
            median_ms: ms(median),
            min_ms: ms(t[0]),
            max_ms: ms(t[n - 1]),
            runs: n,
        }
    }
}

/// Why a workload has no times.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// building the model, its inputs, or running it eagerly or compiled failed
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// the compiled function returned a different number of outputs than eager mode
    #[error("compiled returned {got} outputs, eager {expected}")]
    OutputCount {
        /// eager's count
        expected: usize,
        /// compiled's count
        got: usize,
    },
    /// an output of the compiled function has another shape than eager's
    #[error("output {output}: compiled shape {got:?}, eager {expected:?}")]
    Shape {
        /// the output's index
        output: usize,
        /// eager's shape
        expected: Vec<usize>,
        /// compiled's shape
        got: Vec<usize>,
    },
    /// an output of the compiled function is too far from eager's
    #[error(
        "output {output}: compiled differs from eager by {rel_error:.3e} (relative L2), \
         tolerance {tolerance:.0e}"
    )]
    Mismatch {
        /// the output's index
        output: usize,
        /// `‖compiled − eager‖₂ / ‖eager‖₂` (NaN when either has non-finite values)
        rel_error: f64,
        /// the largest error accepted
        tolerance: f64,
    },
}

/// The measurements of one verified workload.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// the first compiled call (trace + compile + one run), ms
    pub compile_ms: f64,
    /// eager calls of the model's forward
    pub eager: Timing,
    /// calls of the compiled function (cache hits)
    pub compiled: Timing,
    /// the largest relative L2 error of an output, compiled vs eager
    pub rel_error: f64,
    /// graphs the compiled function holds (more than one: graph breaks)
    pub graphs: u64,
    /// peak bytes of one eager call above those held before it
    pub eager_peak_bytes: usize,
    /// peak bytes of one compiled call above those held before the first compiled call
    pub compiled_peak_bytes: usize,
    /// the cpu backend's tiers once at steady state
    pub tiers: Option<super::report::TierSummary>,
    /// the cpu backend: calls of the same function compiled with the Cranelift tier only,
    /// timed in the same rotation
    pub cranelift: Option<Timing>,
    /// calls of the hand-written reference kernel, when the workload has one
    pub reference: Option<Timing>,
    /// calls of the compiled function back to back, after the rotation (no other side's
    /// call between two: caches hold what the last call left, as in a loop of inferences
    /// and as the peers' scripts time torch)
    pub compiled_alone: Timing,
}

/// The tolerance of the compiled-vs-eager check: relative L2 `1e-4`, and `1e-3` for
/// matmul workloads on the interpreter (f64 accumulation against eager's f32 GEMM).
pub fn tolerance(model: &dyn Model, backend: Backend) -> f64 {
    if backend == Backend::Interp && model.flops().is_some() {
        1e-3
    } else {
        1e-4
    }
}

/// Compiles `model.forward` with `backend`, times the first call, checks its outputs against
/// eager ones, then times eager and compiled calls in turn. On the cpu backend the compiled
/// function runs under the automatic tier policy and reaches its steady state (hot kernels
/// on the C tier) before the timing, and the same function compiled with the Cranelift tier
/// only is checked and timed in the same rotation. `hand_written`, when given, is timed in the
/// rotation too (a hand-written kernel on the same data, checked when prepared).
pub fn measure(
    model: &dyn Model,
    inputs: &[Tensor],
    backend: Backend,
    budget: Budget,
    hand_written: Option<&mut super::reference::Prepared>,
) -> Result<Measured, WorkloadError> {
    let eager = |xs: &[Tensor]| model.forward(xs);
    let compiled = compile_with(
        |xs: &[Tensor]| model.forward(xs),
        CompileOptions::default()
            .backend(backend)
            .name(model.name()),
    );

    let before_compile = allocator_stats().allocated_bytes;
    let start = Instant::now();
    let first = compiled.call(inputs)?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let reference = eager(inputs)?;
    let rel_error = check(&reference, &first, tolerance(model, backend))?;
    drop((first, reference));
    let eager_peak_bytes = peak_above(allocator_stats().allocated_bytes, || {
        eager(inputs).map(drop)
    })?;
    let compiled_peak_bytes = peak_above(before_compile, || compiled.call(inputs).map(drop))?;
    let tiers = if backend == Backend::Cpu {
        Some(steady_state(budget, start, || {
            compiled.call(inputs).map(drop)
        })?)
    } else {
        None
    };

    let cranelift = if backend == Backend::Cpu {
        let f = compile_with(
            |xs: &[Tensor]| model.forward(xs),
            CompileOptions::default()
                .backend(backend)
                .name(model.name())
                .tier(TierPolicy::CraneliftOnly),
        );
        check(&eager(inputs)?, &f.call(inputs)?, tolerance(model, backend))?;
        Some(f)
    } else {
        None
    };

    let mut eager_side = || eager(inputs).map(drop);
    let mut compiled_side = || compiled.call(inputs).map(drop);
    let mut cranelift_side = || match &cranelift {
        Some(f) => f.call(inputs).map(drop),
        None => Ok(()),
    };
    let mut hand_written = hand_written;
    let has_reference = hand_written.is_some();
    let mut reference_side = || {
        if let Some(r) = hand_written.as_mut() {
            r.run();
        }
        Ok(())
    };
    let mut sides: Vec<&mut dyn FnMut() -> Result<(), kiln::Error>> =
        vec![&mut eager_side, &mut compiled_side];
    let has_cranelift = cranelift.is_some();
    if has_cranelift {
        sides.push(&mut cranelift_side);
    }
    if has_reference {
        sides.push(&mut reference_side);
    }
    // one timing per side, in the order pushed
    let t = rotate(budget, &mut sides)?;
    drop(sides);
    let alone = rotate(budget, &mut [&mut compiled_side])?[0];
    let cranelift_t = has_cranelift.then(|| t[2]);
    let reference_t = has_reference.then(|| t[t.len() - 1]);
    Ok(Measured {
        compile_ms,
        eager: t[0],
        compiled: t[1],
        rel_error,
        graphs: compiled.stats().compiles,
        eager_peak_bytes,
        compiled_peak_bytes,
        tiers,
        cranelift: cranelift_t,
        reference: reference_t,
        compiled_alone: alone,
    })
}

/// Runs `call` for up to a second (less with a smaller budget) so that hot kernels pass
/// the C tier's threshold, then waits until none is queued (two minutes at most), and again
/// while a round sent more kernels to the C tier (kernels slower to reach the threshold
/// cross it during the later rounds; four rounds at most): the timed calls then see the
/// steady state. Returns the kernels' tiers and the time from `first_call` until the last
/// kernel swapped in since then took its C code (each kernel records when).
pub fn steady_state<E>(
    budget: Budget,
    first_call: Instant,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<super::report::TierSummary, E> {
    let secs = budget.min_secs.clamp(0.05, 1.0);
    let on_c = || {
        kiln::tiers()
            .iter()
            .filter(|t| t.tier == kiln::Tier::C)
            .count()
    };
    let mut last = None;
    for _ in 0..4 {
        let warm = Instant::now();
        while warm.elapsed().as_secs_f64() < secs {
            call()?;
        }
        kiln::wait_for_c_tier(std::time::Duration::from_secs(120));
        let now = on_c();
        if last == Some(now) {
            break;
        }
        last = Some(now);
    }
    let tiers = kiln::tiers();
    // the workload's own kernels: those swapped in since its first call
    let full_speed_ms = tiers
        .iter()
        .filter_map(|t| t.c_since)
        .filter(|&at| at >= first_call)
        .map(|at| (at - first_call).as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    let c_kernels = tiers.iter().filter(|t| t.tier == kiln::Tier::C).count();
    Ok(super::report::TierSummary {
        c_kernels,
        cranelift_kernels: tiers.len() - c_kernels,
        full_speed_ms,
    })
}

/// Runs `f` and returns the allocator's peak during it less `before` (0 if below).
pub fn peak_above<E>(before: usize, f: impl FnOnce() -> Result<(), E>) -> Result<usize, E> {
    reset_peak_stats();
    f()?;
    Ok(allocator_stats()
        .peak_allocated_bytes
        .saturating_sub(before))
}

/// The largest relative L2 error over the outputs, or the first that is over `tolerance`.
fn check(eager: &[Tensor], compiled: &[Tensor], tolerance: f64) -> Result<f64, WorkloadError> {
    if eager.len() != compiled.len() {
        return Err(WorkloadError::OutputCount {
            expected: eager.len(),
            got: compiled.len(),
        });
    }
    let mut worst = 0.0f64;
    for (output, (e, c)) in eager.iter().zip(compiled).enumerate() {
        if e.shape() != c.shape() {
            return Err(WorkloadError::Shape {
                output,
                expected: e.shape().to_vec(),
                got: c.shape().to_vec(),
            });
        }
        let rel_error = relative_l2(&e.to_vec_f64()?, &c.to_vec_f64()?);
        if rel_error.is_nan() || rel_error > tolerance {
            return Err(WorkloadError::Mismatch {
                output,
                rel_error,
                tolerance,
            });
        }
        worst = worst.max(rel_error);
    }
    Ok(worst)
}

/// `‖got − want‖₂ / ‖want‖₂` (the plain norm of the difference when `want` is all zeros);
/// NaN when a value is not finite.
pub fn relative_l2(want: &[f64], got: &[f64]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (w, g) in want.iter().zip(got) {
        if !w.is_finite() || !g.is_finite() {
            return f64::NAN;
        }
        diff += (w - g) * (w - g);
        norm += w * w;
    }
    if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        diff.sqrt()
    }
}

/// Times `a` and `b` in alternation (`a b`, then `b a`, ...) after `budget.warmup` untimed
/// runs of each, until each side has at least `budget.min_runs` runs and `budget.min_secs`
/// seconds.
pub fn alternate<E>(
    budget: Budget,
    mut a: impl FnMut() -> Result<(), E>,
    mut b: impl FnMut() -> Result<(), E>,
) -> Result<(Timing, Timing), E> {
    let t = rotate(budget, &mut [&mut a, &mut b])?;
    Ok((t[0], t[1]))
}

/// Times every side in turn, each round starting one side later than the last (`a b c`,
/// `b c a`, `c a b`, ...) so that no side always follows the same one, after
/// `budget.warmup` untimed runs of each, until each side has at least `budget.min_runs`
/// runs and `budget.min_secs` seconds. One [`Timing`] per side, in order.
pub fn rotate<E>(
    budget: Budget,
    sides: &mut [&mut dyn FnMut() -> Result<(), E>],
) -> Result<Vec<Timing>, E> {
    let n = sides.len();
    for _ in 0..budget.warmup {
        for side in sides.iter_mut() {
            side()?;
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut totals = vec![0.0f64; n];
    let min_runs = budget.min_runs.max(1);
    let mut round = 0usize;
    while n > 0 && (times[0].len() < min_runs || totals.iter().any(|&t| t < budget.min_secs)) {
        for k in 0..n {
            let s = (round + k) % n;
            let t = time(&mut *sides[s])?;
            totals[s] += t;
            times[s].push(t);
        }
        round += 1;
    }
    Ok(times.into_iter().map(Timing::from_secs).collect())
}

/// Seconds one call of `f` takes.
fn time<E>(f: &mut dyn FnMut() -> Result<(), E>) -> Result<f64, E> {
    let start = Instant::now();
    black_box(f()?);
    Ok(start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_statistics() {
        let t = Timing::from_secs(vec![0.003, 0.001, 0.002, 0.004]);
        assert_eq!(t.runs, 4);
        assert!((t.median_ms - 2.5).abs() < 1e-9);
        assert!((t.min_ms - 1.0).abs() < 1e-9);
        assert!((t.max_ms - 4.0).abs() < 1e-9);
    }

    #[test]
    fn alternation_meets_the_budget() {
        let budget = Budget {
            min_runs: 7,
            min_secs: 0.0,
            warmup: 2,
        };
        let (mut na, mut nb) = (0, 0);
        let (ta, tb) = alternate::<()>(
            budget,
            || {
                na += 1;
                Ok(())
            },
            || {
                nb += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((ta.runs, tb.runs), (7, 7));
        assert_eq!((na, nb), (9, 9));
    }

    #[test]
    fn relative_error() {
        assert_eq!(relative_l2(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        assert!((relative_l2(&[3.0, 4.0], &[3.0, 4.5]) - 0.1).abs() < 1e-12);
        assert!(relative_l2(&[1.0], &[f64::NAN]).is_nan());
        assert_eq!(relative_l2(&[0.0], &[0.0]), 0.0);
    }

    #[test]
    fn the_cpu_backend_times_both_tiers_and_the_softmax_reference() {
        let _serial = crate::cli::tensor_test_lock();
        let model = kiln::models::build("softmax", Some(&[5, 33])).unwrap();
        let inputs = model.example_inputs(0).unwrap();
        let other = kiln::models::build("reduce", Some(&[4, 8])).unwrap();
        let other_inputs = other.example_inputs(0).unwrap();
        assert!(super::super::reference::for_workload(&*other, &other_inputs, 1e-4).is_none());
        let mut outcome = super::super::reference::for_workload(&*model, &inputs, 1e-4)
            .expect("softmax has a reference");
        let budget = Budget {
            min_runs: 3,
            min_secs: 0.0,
            warmup: 1,
        };
        let m = measure(
            &*model,
            &inputs,
            Backend::Cpu,
            budget,
            outcome.prepared.as_mut(),
        )
        .unwrap();
        assert_eq!(m.cranelift.map(|t| t.runs), Some(3));
        assert!(m.tiers.is_some());
        match &outcome.skipped {
            None => assert_eq!(m.reference.map(|t| t.runs), Some(3)),
            Some(why) => {
                // no AVX-512 or AVX2, or no C compiler here: the rotation leaves the side out
                eprintln!("the reference did not run: {why}");
                assert!(m.reference.is_none());
            }
        }
    }

    #[test]
    fn a_workload_verifies() {
        let _serial = crate::cli::tensor_test_lock();
        let model = kiln::models::build("softmax", Some(&[4, 8])).unwrap();
        let inputs = model.example_inputs(0).unwrap();
        let budget = Budget {
            min_runs: 3,
            min_secs: 0.0,
            warmup: 1,
        };
        let m = measure(&*model, &inputs, Backend::Eager, budget, None).unwrap();
        assert!(m.rel_error <= 1e-4);
        // each call allocates its output at least (other tests of this binary allocate
        // concurrently, so the figures are not compared exactly)
        assert!(m.eager_peak_bytes > 0 && m.compiled_peak_bytes > 0, "{m:?}");
        assert_eq!((m.eager.runs, m.compiled.runs), (3, 3));
        assert_eq!(m.compiled_alone.runs, 3);
    }
}
