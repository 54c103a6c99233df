//! `kiln bench`: the workloads of `shared/bench/WORKLOADS.md`, eager and compiled in one
//! process, against the machine's limits measured in the same run.
//!
//! For each workload (in the order given):
//!
//! 1. the model is built at its default shape (`--quick`: a small one, see [`quick_shape`]) and
//!    its inputs drawn with `example_inputs(0)`;
//! 2. memory-bound workloads (`flops()` is `None`) get their own bandwidth limit: a triad over
//!    three arrays that together hold `model.bytes()` (the bytes the workload reads and
//!    writes), so an L3-resident working set is compared with L3 bandwidth (see [`limits`]);
//! 3. the forward pass is compiled with the chosen backend and the **first call is timed on
//!    its own** (`compile_ms`: trace + compile + one run, the cost a user sees once);
//! 4. the compiled outputs are checked against eager ones (relative L2 error ≤ 1e-4; 1e-3 for
//!    matmul workloads on `interp`) **before anything is timed**: a mismatch or an error is a
//!    row with `verified: false` and no times, and the command exits non-zero at the end;
//! 5. eager and compiled calls are timed in alternation after a warm-up, at least 20 runs and
//!    1 s per side (`--quick`: 5 runs and 0.1 s); median, min and max are reported, and
//!    `speedup = eager / compiled` (medians).
//!
//! The limits measured first: a triad on all cores over 3 × 1 GiB arrays, far larger than the
//! last-level cache (`--quick`: 3 × 16 MiB, which is *not* a DRAM figure), and the best f32
//! GEMM at 2048³ through `Tensor::matmul` (`--quick`: 512³).
//!
//! The training workloads (`train_mlp`, `train_block`, `train_minilm`; see [`train`]) time
//! one optimiser step instead of a forward call, verified by comparing the losses of the
//! first steps of the two sides, and count their flops as 3× the forward's. Every row has
//! the peak memory of each side, from the caching allocator's statistics.

mod distributed;
mod launch;
mod limits;
mod machine;
mod reference;
mod report;
mod run;
mod train;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kiln::models::{self, Model};
use kiln::Backend;
use kiln_codegen::cpu::c_tier::reference::ReferenceIsa;
use limits::{triad, triad_len_for_bytes};
use machine::Machine;
use report::{human_bytes, Limits, ReferenceRow, Report, Row, Throughput};
use run::{measure, tolerance, Budget, Measured, WorkloadError};
use std::path::PathBuf;
use std::time::Duration;

/// The options of `kiln bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// a workload to run (repeatable, or comma-separated): pointwise, layernorm, softmax,
    /// reduce, mlp, block, tiny, minilm (a forward call), train_mlp, train_block,
    /// train_minilm (a training step) [default: all but train_minilm]
    #[arg(long = "workload", value_name = "NAME", value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// the backend the workloads are compiled with (cuda: the device `KILN_CUDA_DEVICE` names)
    #[arg(long, value_enum, default_value_t = BenchBackend::Cpu)]
    pub backend: BenchBackend,
    /// also write every figure, the machine and the kiln version to this JSON file
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// a short run for smoke tests: small shapes, fewer runs, small limit probes
    #[arg(long)]
    pub quick: bool,
    /// after the report, the compiled kernels that took the most time in each workload
    /// (`KILN_PROFILE`'s table; timing each kernel adds about a microsecond per kernel)
    #[arg(long)]
    pub profile: bool,
    /// instead of the workloads, the data-parallel figures over the ranks of `mpirun -np N`
    /// (alone: a world of size 1): all-reduce bandwidth of 25 MiB buckets against a memory
    /// copy, and a data-parallel training step against one rank on its share of the batch
    #[arg(long)]
    pub ddp: bool,
}

/// Kernels listed per workload by `kiln bench --profile`.
const PROFILE_ROWS: usize = 25;

/// The backends `kiln bench --backend` names, including those not built yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// the captured graph run op by op with the eager kernels
    Eager,
    /// the IR interpreter (f64 inside, slow: the oracle)
    Interp,
    /// generated CPU code (Cranelift)
    Cpu,
    /// generated CUDA code on the process's CUDA device (`KILN_CUDA_DEVICE`)
    Cuda,
}

impl BenchBackend {
    /// The backend's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BenchBackend::Eager => "eager",
            BenchBackend::Interp => "interp",
            BenchBackend::Cpu => "cpu",
            BenchBackend::Cuda => "cuda",
        }
    }

    /// The compile backend, or an error naming the available ones.
    pub fn resolve(self) -> Result<Backend, BenchError> {
        match self {
            BenchBackend::Eager => Ok(Backend::Eager),
            BenchBackend::Interp => Ok(Backend::Interp),
            BenchBackend::Cpu => Ok(Backend::Cpu),
            BenchBackend::Cuda => match kiln_codegen::cuda::select::default_gpu() {
                Ok(_) => Ok(Backend::Cuda),
                Err(e) => Err(BenchError::BackendUnavailable {
                    backend: self.name(),
                    reason: e.to_string(),
                    available: AVAILABLE_BACKENDS.join(", "),
                }),
            },
        }
    }
}

/// The backends that run on every machine (cuda needs a device).
pub const AVAILABLE_BACKENDS: &[&str] = &["cpu", "eager", "interp"];

/// Why `kiln bench` failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `--backend` named a backend this machine cannot run
    #[error(
        "backend `{backend}` is not available here: {reason}; the backends every machine \
         has are: {available}"
    )]
    BackendUnavailable {
        /// the backend asked for
        backend: &'static str,
        /// why not (no driver, no device)
        reason: String,
        /// the backends that exist, comma-separated
        available: String,
    },
    /// `--workload` named no workload of the zoo
    #[error("unknown workload `{name}`{note}; the workloads are: {known}")]
    UnknownWorkload {
        /// the name given
        name: String,
        /// more about the name, when known (minilm: not in the zoo yet)
        note: &'static str,
        /// the known workloads, comma-separated
        known: String,
    },
    /// measuring a limit failed
    #[error("measuring the {what}: {source}")]
    Limit {
        /// the limit
        what: &'static str,
        /// kiln's error
        source: kiln::Error,
    },
    /// the JSON could not be made or written
    #[error("{path}: {reason}")]
    Json {
        /// the file
        path: String,
        /// what went wrong
        reason: String,
    },
    /// some workloads have no times: their check failed or they did not run
    #[error("{} workload(s) failed (see the table): {}", .workloads.len(), .workloads.join(", "))]
    Failed {
        /// the workloads that failed
        workloads: Vec<String>,
    },
}

/// The input shape of a workload under `--quick` (the first input's, as
/// [`models::build`] takes it); `None` for a name it does not know.
pub fn quick_shape(name: &str) -> Option<&'static [usize]> {
    Some(match name {
        "pointwise" => &[65536],
        "layernorm" | "softmax" => &[256, 1024],
        "reduce" => &[512, 512],
        // hidden = 4 * 256
        "mlp" => &[32, 256],
        "block" => &[1, 32, 64],
        "tiny" => &[1024],
        "minilm" => &[2, 16],
        _ => return None,
    })
}

/// The sizes and budgets of a run.
struct Plan {
    /// elements per array of the DRAM triad
    dram_len: usize,
    /// passes of the DRAM triad
    dram: Budget,
    /// passes of the working-set triads
    working_set: Budget,
    /// the GEMM's square size
    gemm_n: usize,
    /// GEMM runs timed (best counts)
    gemm_runs: usize,
    /// runs of each workload, per side
    workload: Budget,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                dram_len: 4 << 20,
                dram: Budget {
                    min_runs: 5,
                    min_secs: 0.0,
                    warmup: 1,
                },
                working_set: Budget {
                    min_runs: 5,
                    min_secs: 0.02,
                    warmup: 1,
                },
                gemm_n: 512,
                gemm_runs: 3,
                workload: Budget {
                    min_runs: 5,
                    min_secs: 0.1,
                    warmup: 1,
                },
            }
        } else {
            Plan {
                // 3 × 1 GiB: far beyond any last-level cache
                dram_len: 256 << 20,
                dram: Budget {
                    min_runs: 10,
                    min_secs: 0.5,
                    warmup: 1,
                },
                working_set: Budget {
                    min_runs: 20,
                    min_secs: 0.25,
                    warmup: 1,
                },
                gemm_n: 2048,
                gemm_runs: 10,
                workload: Budget {
                    min_runs: 20,
                    min_secs: 1.0,
                    warmup: 3,
                },
            }
        }
    }
}

/// Runs `kiln bench`: prints the table, writes the JSON when asked, and fails when a
/// workload failed its check (after reporting every workload).
pub fn bench(args: &BenchArgs) -> Result<(), BenchError> {
    if args.ddp {
        return distributed::bench_ddp(args.quick, args.json.as_deref());
    }
    let backend = args.backend.resolve()?;
    let workloads = select(&args.workloads)?;
    if let Some(path) = &args.json {
        // fail before a long run, not after it
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(BenchError::Json {
                path: path.display().to_string(),
                reason: "its folder does not exist".into(),
            });
        }
    }
    let plan = Plan::new(args.quick);

    let progress = ProgressBar::new(3 + workloads.len() as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
    ) {
        progress.set_style(style);
    }
    progress.enable_steady_tick(Duration::from_millis(120));

    let machine = Machine::detect();
    let dram_bytes = (plan.dram_len * limits::TRIAD_BYTES_PER_ELEM) as f64;
    progress.set_message(format!(
        "memory bandwidth: triad over {}",
        human_bytes(dram_bytes)
    ));
    let dram = triad(plan.dram_len, plan.dram);
    progress.inc(1);
    progress.set_message(format!("f32 GEMM peak at {}³", plan.gemm_n));
    let gemm = limits::gemm(plan.gemm_n, plan.gemm_runs).map_err(|source| BenchError::Limit {
        what: "GEMM peak",
        source,
    })?;
    progress.set_message("per-kernel overhead: a compiled chain of tiny matmuls");
    // a probe that fails costs its line, not the run
    let launch = launch::launch_cost(plan.workload).ok();
    progress.inc(1);

    let mut results = Vec::new();
    let mut profiles = Vec::new();
    for name in &workloads {
        if args.profile {
            kiln::profile::set_enabled(true);
            kiln::profile::reset();
        }
        results.push(match train::Workload::new(name, args.quick) {
            Some(w) => bench_train(&w, backend, &plan, gemm.best_gflops, &progress),
            None => bench_one(
                name,
                backend,
                args.quick,
                &plan,
                gemm.best_gflops,
                &progress,
            ),
        });
        if args.profile {
            kiln::profile::set_enabled(false);
            profiles.push((name.clone(), kiln::profile::report()));
        }
        progress.inc(1);
    }
    progress.finish_and_clear();

    let report = Report {
        kiln_version: env!("CARGO_PKG_VERSION").to_string(),
        machine,
        limits: Limits {
            dram_bandwidth_gbs: dram.best_gbs,
            gemm_gflops: gemm.best_gflops,
            dram_bandwidth_median_gbs: dram.median_gbs,
            dram_triad_bytes: dram.bytes,
            dram_triad_passes: dram.passes,
            gemm_n: gemm.n,
            gemm_runs: gemm.runs,
            threads: rayon::current_num_threads(),
            kernel_overhead_ns: launch.map(|l| l.per_kernel_ns),
            kernel_overhead_kernels: launch.map_or(0, |l| l.kernels),
        },
        results,
        quick: args.quick,
    };
    print!("{}", report.render());
    for (name, rows) in &profiles {
        println!(
            "\n## {name}: compiled kernels, every call of the run (verification, warm-up, timing)"
        );
        print!("{}", kiln::profile::format_report(rows, PROFILE_ROWS));
    }
    if let Some(path) = &args.json {
        let json_err = |reason: String| BenchError::Json {
            path: path.display().to_string(),
            reason,
        };
        let text = report.to_json().map_err(|e| json_err(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| json_err(e.to_string()))?;
    }
    let failed: Vec<String> = report
        .results
        .iter()
        .filter(|r| !r.verified)
        .map(|r| r.workload.clone())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Failed { workloads: failed })
    }
}

/// Every workload `--workload` may name: the zoo's forward calls, then the training steps.
fn known() -> Vec<&'static str> {
    models::NAMES.iter().chain(train::NAMES).copied().collect()
}

/// The workloads `kiln bench` runs when `--workload` names none: all but `train_minilm`,
/// whose steps (about 0.7 s each eagerly here, some 50 per side with the warm-up and the
/// check) would add most of a minute to the minute the others take.
pub const DEFAULT_WORKLOADS: &[&str] = &[
    "pointwise",
    "layernorm",
    "softmax",
    "reduce",
    "mlp",
    "block",
    "tiny",
    "minilm",
    "train_mlp",
    "train_block",
];

/// The workloads to run: `given` checked against [`known`], or [`DEFAULT_WORKLOADS`].
fn select(given: &[String]) -> Result<Vec<String>, BenchError> {
    if given.is_empty() {
        return Ok(DEFAULT_WORKLOADS.iter().map(|s| s.to_string()).collect());
    }
    let known = known();
    given
        .iter()
        .map(|name| {
            if known.contains(&name.as_str()) {
                Ok(name.clone())
            } else {
                Err(BenchError::UnknownWorkload {
                    name: name.clone(),
                    note: "",
                    known: known.join(", "),
                })
            }
        })
        .collect()
}

/// Builds, checks and times one workload; any failure becomes an error row.
fn bench_one(
    name: &str,
    backend: Backend,
    quick: bool,
    plan: &Plan,
    gemm_gflops: f64,
    progress: &ProgressBar,
) -> Row {
    let shape = if quick { quick_shape(name) } else { None };
    progress.set_message(format!("{name}: building the model and its inputs"));
    let built = models::build(name, shape).and_then(|m| {
        let inputs = m.example_inputs(0)?;
        Ok((m, inputs))
    });
    let (model, inputs) = match built {
        Ok(b) => b,
        Err(e) => return error_row(name, backend, shape.unwrap_or(&[]), e.to_string()),
    };
    let model: &dyn Model = &*model;
    let bytes = model.bytes();
    let flops = model.flops();
    let working_set = match flops {
        Some(_) => None,
        None => {
            progress.set_message(format!(
                "{name}: triad over its working set ({})",
                human_bytes(bytes)
            ));
            Some(triad(triad_len_for_bytes(bytes), plan.working_set).best_gbs)
        }
    };
    let mut reference = match backend {
        Backend::Cpu => reference::for_workload(model, &inputs, tolerance(model, backend)),
        _ => None,
    };
    progress.set_message(format!("{name}: eager vs compiled ({backend})"));
    let prepared = reference.as_mut().and_then(|r| r.prepared.as_mut());
    let measured = measure(model, &inputs, backend, plan.workload, prepared);
    let mut r = row(
        model,
        backend,
        bytes,
        flops,
        working_set,
        gemm_gflops,
        measured.as_ref(),
    );
    if let Some(outcome) = reference {
        r.reference = Some(reference_row(&outcome, measured.as_ref().ok()));
    }
    r
}

/// The report's entry for a workload's hand-written reference.
fn reference_row(outcome: &reference::Outcome, m: Option<&Measured>) -> ReferenceRow {
    let timing = m.and_then(|m| m.reference);
    ReferenceRow {
        kernel: ReferenceIsa::of_host().map_or(
            "hand-written vector C loop (codegen/src/cpu/c_tier/reference_softmax*.c)",
            ReferenceIsa::softmax_description,
        ),
        median_ms: timing.map(|t| t.median_ms),
        min_ms: timing.map(|t| t.min_ms),
        max_ms: timing.map(|t| t.max_ms),
        compile_ms: outcome.prepared.as_ref().map(|p| p.compile_ms()),
        compiled_over_reference: m
            .zip(timing)
            .map(|(m, t)| m.compiled.median_ms / t.median_ms),
        skipped: outcome.skipped.clone(),
    }
}

/// The row of a workload that could not be built.
fn error_row(name: &str, backend: Backend, shape: &[usize], error: String) -> Row {
    Row {
        workload: name.to_string(),
        backend: backend.name().to_string(),
        eager_ms: None,
        compiled_ms: None,
        speedup: None,
        gbs: None,
        gflops: None,
        fraction_of_limit: None,
        compile_ms: None,
        limit: None,
        verified: false,
        limit_unit: "GB/s",
        shape: shape.to_vec(),
        bytes: 0.0,
        flops: None,
        working_set_bandwidth_gbs: None,
        eager_min_ms: None,
        eager_max_ms: None,
        compiled_min_ms: None,
        compiled_max_ms: None,
        eager_runs: None,
        compiled_runs: None,
        rel_error: None,
        tolerance: 1e-4,
        graphs: None,
        tiers: None,
        cranelift_ms: None,
        cranelift_min_ms: None,
        cranelift_max_ms: None,
        reference: None,
        compiled_alone_ms: None,
        compiled_alone_min_ms: None,
        compiled_alone_max_ms: None,
        error: Some(error),
        throughput: None,
        kind: "forward",
        eager_peak_bytes: None,
        compiled_peak_bytes: None,
        first_step_ms: None,
        eager_losses: None,
        compiled_losses: None,
        optimizer: None,
    }
}

/// A workload's row from its measurements (or its failure).
fn row(
    model: &dyn Model,
    backend: Backend,
    bytes: f64,
    flops: Option<f64>,
    working_set_gbs: Option<f64>,
    gemm_gflops: f64,
    measured: Result<&Measured, &WorkloadError>,
) -> Row {
    let (limit, limit_unit) = match flops {
        Some(_) => (Some(gemm_gflops), "GFLOP/s"),
        None => (working_set_gbs, "GB/s"),
    };
    let mut r = error_row(
        model.name(),
        backend,
        &model.input_shapes().first().cloned().unwrap_or_default(),
        String::new(),
    );
    r.limit = limit;
    r.limit_unit = limit_unit;
    r.bytes = bytes;
    r.flops = flops;
    r.working_set_bandwidth_gbs = working_set_gbs;
    r.tolerance = tolerance(model, backend);
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            if let WorkloadError::Mismatch { rel_error, .. } = e {
                r.rel_error = Some(*rel_error).filter(|e| e.is_finite());
            }
            r.error = Some(e.to_string());
            return r;
        }
    };
    // against the limits, which are measured back to back (a triad pass after a pass over
    // the same arrays), the compiled calls timed back to back
    let secs = m.compiled_alone.median_ms / 1e3;
    let achieved = match flops {
        Some(f) => f / secs / 1e9,
        None => bytes / secs / 1e9,
    };
    r.error = None;
    r.verified = true;
    r.eager_ms = Some(m.eager.median_ms);
    r.compiled_ms = Some(m.compiled.median_ms);
    r.speedup = Some(m.eager.median_ms / m.compiled.median_ms);
    if flops.is_some() {
        r.gflops = Some(achieved);
    } else {
        r.gbs = Some(achieved);
    }
    r.fraction_of_limit = limit.map(|l| achieved / l);
    r.compile_ms = Some(m.compile_ms);
    r.tiers = m.tiers;
    r.compiled_alone_ms = Some(m.compiled_alone.median_ms);
    r.compiled_alone_min_ms = Some(m.compiled_alone.min_ms);
    r.compiled_alone_max_ms = Some(m.compiled_alone.max_ms);
    if let Some(c) = m.cranelift {
        r.cranelift_ms = Some(c.median_ms);
        r.cranelift_min_ms = Some(c.min_ms);
        r.cranelift_max_ms = Some(c.max_ms);
    }
    r.throughput = model.items().map(|(per_call, unit)| Throughput {
        unit,
        per_call,
        eager_per_s: per_call as f64 / (m.eager.median_ms / 1e3),
        compiled_per_s: per_call as f64 / (m.compiled.median_ms / 1e3),
    });
    r.eager_min_ms = Some(m.eager.min_ms);
    r.eager_max_ms = Some(m.eager.max_ms);
    r.compiled_min_ms = Some(m.compiled.min_ms);
    r.compiled_max_ms = Some(m.compiled.max_ms);
    r.eager_runs = Some(m.eager.runs);
    r.compiled_runs = Some(m.compiled.runs);
    r.rel_error = Some(m.rel_error);
    r.graphs = Some(m.graphs);
    r.eager_peak_bytes = Some(m.eager_peak_bytes as u64);
    r.compiled_peak_bytes = Some(m.compiled_peak_bytes as u64);
    r
}

/// Builds, verifies and times one training workload; any failure becomes an error row.
fn bench_train(
    w: &train::Workload,
    backend: Backend,
    plan: &Plan,
    gemm_gflops: f64,
    progress: &ProgressBar,
) -> Row {
    progress.set_message(format!(
        "{}: eager vs compiled training steps ({backend})",
        w.name()
    ));
    train_row(
        w,
        backend,
        gemm_gflops,
        train::measure(w, backend, plan.workload),
    )
}

/// A training workload's row from its measurements (or its failure).
fn train_row(
    w: &train::Workload,
    backend: Backend,
    gemm_gflops: f64,
    measured: Result<train::TrainMeasured, train::TrainError>,
) -> Row {
    let flops = w.step_flops();
    let mut r = error_row(w.name(), backend, &w.shape(), String::new());
    r.kind = "train";
    r.optimizer = Some("adamw (fused, lr 1e-3)");
    r.limit = Some(gemm_gflops);
    r.limit_unit = "GFLOP/s";
    r.flops = Some(flops);
    r.bytes = w
        .inputs()
        .map(|xs| {
            xs.iter()
                .map(|x| x.numel() * x.dtype().size_bytes())
                .sum::<usize>() as f64
        })
        .unwrap_or(0.0);
    r.tolerance = train::tolerance(backend);
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            if let train::TrainError::Mismatch { rel_error, .. } = &e {
                r.rel_error = Some(*rel_error).filter(|e| e.is_finite());
            }
            r.error = Some(e.to_string());
            return r;
        }
    };
    let gflops = flops / (m.compiled.median_ms / 1e3) / 1e9;
    r.error = None;
    r.verified = true;
    r.eager_ms = Some(m.eager.median_ms);
    r.compiled_ms = Some(m.compiled.median_ms);
    r.speedup = Some(m.eager.median_ms / m.compiled.median_ms);
    r.gflops = Some(gflops);
    r.fraction_of_limit = Some(gflops / gemm_gflops);
    r.compile_ms = Some(m.compile_ms);
    r.first_step_ms = Some(m.first_step_ms);
    r.throughput = w.items().map(|(per_call, unit)| Throughput {
        unit,
        per_call,
        eager_per_s: per_call as f64 / (m.eager.median_ms / 1e3),
        compiled_per_s: per_call as f64 / (m.compiled.median_ms / 1e3),
    });
    r.eager_min_ms = Some(m.eager.min_ms);
    r.eager_max_ms = Some(m.eager.max_ms);
    r.compiled_min_ms = Some(m.compiled.min_ms);
    r.compiled_max_ms = Some(m.compiled.max_ms);
    r.eager_runs = Some(m.eager.runs);
    r.compiled_runs = Some(m.compiled.runs);
    r.rel_error = Some(m.rel_error);
    r.graphs = Some(m.graphs);
    r.eager_peak_bytes = Some(m.eager_peak_bytes as u64);
    r.compiled_peak_bytes = Some(m.compiled_peak_bytes as u64);
    r.eager_losses = Some(m.eager_losses);
    r.compiled_losses = Some(m.compiled_losses);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_has_a_quick_shape_that_builds() {
        let _serial = crate::cli::tensor_test_lock();
        for name in models::NAMES {
            let shape = quick_shape(name).unwrap();
            assert!(models::build(name, Some(shape)).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_failed_check_is_an_error_row_without_times() {
        let _serial = crate::cli::tensor_test_lock();
        let model = models::build("softmax", Some(&[2, 4])).unwrap();
        let failure = Err(WorkloadError::Mismatch {
            output: 0,
            rel_error: 0.5,
            tolerance: 1e-4,
        });
        let r = row(
            &*model,
            Backend::Eager,
            64.0,
            None,
            Some(10.0),
            100.0,
            failure.as_ref(),
        );
        assert!(!r.verified);
        assert_eq!(r.workload, "softmax");
        assert!(r.eager_ms.is_none() && r.compiled_ms.is_none() && r.compile_ms.is_none());
        assert!(r.gbs.is_none() && r.fraction_of_limit.is_none());
        assert_eq!(r.rel_error, Some(0.5));
        assert!(r.error.unwrap().contains("differs from eager"));
    }

    #[test]
    fn unknown_names_and_missing_backends_are_errors() {
        let _serial = crate::cli::tensor_test_lock();
        let e = select(&["softmax".into(), "resnet".into()]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("resnet") && msg.contains("pointwise, layernorm"),
            "{msg}"
        );
        assert!(
            msg.contains("train_mlp, train_block, train_minilm"),
            "{msg}"
        );
        let chosen = select(&["train_block".into(), "softmax".into()]).unwrap();
        assert_eq!(chosen, ["train_block", "softmax"]);
        // cuda resolves where there is a device, and says why not elsewhere
        match BenchBackend::Cuda.resolve() {
            Ok(b) => assert_eq!(b, Backend::Cuda),
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("cuda") && e.contains("eager, interp"), "{e}");
            }
        }
        assert_eq!(select(&[]).unwrap(), DEFAULT_WORKLOADS);
    }
}
