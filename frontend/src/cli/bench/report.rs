//! What `kiln bench` reports: the JSON document (`--json`) and the terminal table.
//!
//! The JSON's keys are a contract for scripts that compare runs over time:
//! `{"kiln_version", "machine": {"cpu", "cores", "isa"}, "limits": {"dram_bandwidth_gbs",
//! "gemm_gflops", ...}, "results": [{"workload", "backend", "eager_ms", "compiled_ms",
//! "speedup", "gbs", "gflops", "fraction_of_limit", "compile_ms", "limit", "verified", ...}]}`.
//! Keys may be added after those; a figure that does not apply (GB/s of a matmul workload,
//! any time of a workload that failed its check) is `null`.
//!
//! Training rows (`"kind": "train"`) time one optimiser step (forward + loss, backward,
//! AdamW) and count 3× the forward's matmul flops; they add the first compiled step's time,
//! the losses of the verification steps and the optimiser. Every row has the peak memory of
//! each side (`eager_peak_bytes`, `compiled_peak_bytes`: the caching allocator's peak above
//! the bytes held before; see `bench/train.rs` and `bench/run.rs` for what each counts).

use super::machine::Machine;
use serde::Serialize;

/// The whole report of one `kiln bench` run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// the version of the kiln crate that ran
    pub kiln_version: String,
    /// the machine
    pub machine: Machine,
    /// the machine's limits, measured in the same run
    pub limits: Limits,
    /// one row per workload, in the order run
    pub results: Vec<Row>,
    /// true for a `--quick` run (small sizes: a smoke test, not a measurement)
    pub quick: bool,
}

/// The machine's limits measured in the run.
#[derive(Debug, Serialize)]
pub struct Limits {
    /// triad bandwidth (bytes read + written) over arrays far larger than the last-level
    /// cache, best pass, GB/s (with `--quick`: small arrays, not a DRAM figure)
    pub dram_bandwidth_gbs: f64,
    /// f32 GEMM throughput through `Tensor::matmul` at `gemm_n`³, best run, GFLOP/s
    pub gemm_gflops: f64,
    /// the DRAM triad's median pass, GB/s
    pub dram_bandwidth_median_gbs: f64,
    /// bytes the DRAM triad moves per pass (three f32 arrays, 12 bytes per element)
    pub dram_triad_bytes: f64,
    /// passes of the DRAM triad timed
    pub dram_triad_passes: usize,
    /// the GEMM's square size
    pub gemm_n: usize,
    /// GEMM runs timed (after one warm-up)
    pub gemm_runs: usize,
    /// threads the triads, the GEMM and kiln's kernels run on
    pub threads: usize,
    /// a compiled kernel's cost beyond its work, ns: the median call of a compiled chain of
    /// tiny matmuls over the kernels it runs (`launch.rs`); None when the probe failed
    pub kernel_overhead_ns: Option<f64>,
    /// the kernels that chain runs per call
    pub kernel_overhead_kernels: usize,
}

/// One workload's figures. The first eleven keys are the contract; the rest are extras.
#[derive(Debug, Serialize)]
pub struct Row {
    /// the workload's id
    pub workload: String,
    /// the compile backend
    pub backend: String,
    /// median eager call, ms
    pub eager_ms: Option<f64>,
    /// median compiled call (a cache hit), ms
    pub compiled_ms: Option<f64>,
    /// `eager_ms / compiled_ms`
    pub speedup: Option<f64>,
    /// `bytes / compiled time`, GB/s (memory-bound workloads), from the compiled calls timed
    /// back to back (`compiled_alone_ms`), as the limits are measured
    pub gbs: Option<f64>,
    /// `flops / compiled time`, GFLOP/s (matmul workloads), likewise
    pub gflops: Option<f64>,
    /// `gbs` or `gflops` over `limit`
    pub fraction_of_limit: Option<f64>,
    /// the first compiled call: trace + compile + one run, ms
    pub compile_ms: Option<f64>,
    /// what the fraction is taken against: the triad at this workload's working set (GB/s)
    /// or the GEMM peak (GFLOP/s)
    pub limit: Option<f64>,
    /// the compiled outputs matched eager ones (false: no times are reported)
    pub verified: bool,
    /// `"GB/s"` or `"GFLOP/s"`: the unit of `limit`
    pub limit_unit: &'static str,
    /// the first input's shape
    pub shape: Vec<usize>,
    /// bytes moved per call (each input, weight and output once)
    pub bytes: f64,
    /// matmul flops per call (null for memory-bound workloads)
    pub flops: Option<f64>,
    /// the triad's best bandwidth over arrays totalling `bytes` (memory-bound workloads)
    pub working_set_bandwidth_gbs: Option<f64>,
    /// fastest eager call, ms
    pub eager_min_ms: Option<f64>,
    /// slowest eager call, ms
    pub eager_max_ms: Option<f64>,
    /// fastest compiled call, ms
    pub compiled_min_ms: Option<f64>,
    /// slowest compiled call, ms
    pub compiled_max_ms: Option<f64>,
    /// eager calls timed
    pub eager_runs: Option<usize>,
    /// compiled calls timed
    pub compiled_runs: Option<usize>,
    /// the largest relative L2 error of an output, compiled vs eager
    pub rel_error: Option<f64>,
    /// the relative L2 error accepted
    pub tolerance: f64,
    /// graphs compiled (more than one means graph breaks)
    pub graphs: Option<u64>,
    /// the cpu backend's tiers in the timed calls: how many kernel specialisations ran C
    /// code and how many Cranelift code, and how long after the first call the last queued
    /// kernel was swapped in (steady state; `None` on other backends)
    pub tiers: Option<TierSummary>,
    /// the cpu backend: the median call of the same function compiled with the Cranelift
    /// tier only (no C tier), timed in the same rotation as `compiled_ms`, ms
    pub cranelift_ms: Option<f64>,
    /// its fastest call, ms
    pub cranelift_min_ms: Option<f64>,
    /// its slowest call, ms
    pub cranelift_max_ms: Option<f64>,
    /// a hand-written kernel for the same workload on the same data, timed in the same
    /// rotation (softmax on the cpu backend)
    pub reference: Option<ReferenceRow>,
    /// the median compiled call timed back to back, alone (after the rotation), ms: no
    /// eager call between two evicts the caches, as in a loop of inferences and as
    /// `python -m kiln.bench` times torch
    pub compiled_alone_ms: Option<f64>,
    /// its fastest call, ms
    pub compiled_alone_min_ms: Option<f64>,
    /// its slowest call, ms
    pub compiled_alone_max_ms: Option<f64>,
    /// why the row has no times
    pub error: Option<String>,
    /// items per second for workloads that count items (minilm: sentences)
    pub throughput: Option<Throughput>,
    /// `"forward"` (one call of the model) or `"train"` (one optimiser step)
    pub kind: &'static str,
    /// peak bytes held by live tensors during eager calls or steps, above those held before
    pub eager_peak_bytes: Option<u64>,
    /// the same for the compiled calls or steps
    pub compiled_peak_bytes: Option<u64>,
    /// training rows: the whole first compiled step (trace + compile + the step), ms
    pub first_step_ms: Option<f64>,
    /// training rows: the loss of each verification step, eager
    pub eager_losses: Option<Vec<f64>>,
    /// training rows: the loss of each verification step, compiled
    pub compiled_losses: Option<Vec<f64>>,
    /// training rows: the optimiser of a step
    pub optimizer: Option<&'static str>,
}

/// Items per second, eager and compiled (from the median calls).
#[derive(Debug, Serialize)]
pub struct Throughput {
    /// what is counted (`sentences`)
    pub unit: &'static str,
    /// items in one call
    pub per_call: usize,
    /// items per second, eager
    pub eager_per_s: f64,
    /// items per second, compiled
    pub compiled_per_s: f64,
}

impl Report {
    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The terminal table, the machine line, the limits and the errors.
    pub fn render(&self) -> String {
        let header = [
            "workload",
            "backend",
            "eager",
            "compiled",
            "cranelift only",
            "compiled alone",
            "speedup",
            "achieved",
            "limit",
            "% of limit",
            "compile",
            "peak memory (eager / compiled)",
            "verified",
        ];
        let rows: Vec<Vec<String>> = self.results.iter().map(cells).collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, &w))| {
                    let pad = " ".repeat(w - c.chars().count());
                    // names left-aligned, figures right-aligned
                    if i < 2 {
                        format!("{c}{pad}")
                    } else {
                        format!("{pad}{c}")
                    }
                })
                .collect();
            padded.join("  ").trim_end().to_string()
        };
        let mut out = String::new();
        out.push_str(&line(&header.map(String::from)));
        out.push('\n');
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        out.push_str(&line(&rule));
        out.push('\n');
        for row in &rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out.push('\n');
        let l = &self.limits;
        out.push_str(&format!("machine: {}\n", self.machine.line()));
        out.push_str(&format!(
            "limits:  {} triad {:.1} GB/s (best of {}, median {:.1}; 3 arrays, {} in all, \
             {} threads), f32 GEMM {}³ {:.1} GFLOP/s (best of {})\n",
            if self.quick {
                "small-array (--quick, not DRAM)"
            } else {
                "DRAM"
            },
            l.dram_bandwidth_gbs,
            l.dram_triad_passes,
            l.dram_bandwidth_median_gbs,
            human_bytes(l.dram_triad_bytes),
            l.threads,
            l.gemm_n,
            l.gemm_gflops,
            l.gemm_runs,
        ));
        if let Some(ns) = l.kernel_overhead_ns {
            out.push_str(&format!(
                "kernels: {ns:.0} ns per kernel beyond its work (a compiled chain of {} tiny \
                 matmul kernels, median call over the kernels)\n",
                l.kernel_overhead_kernels,
            ));
        }
        out.push_str(
            "times: median (min–max) of eager and compiled calls timed in turn; compiled = \
             the steady state (hot kernels on the C tier, cpu backend); cranelift only = the \
             same function compiled with the Cranelift tier alone, timed in the same turns; \
             compiled alone = compiled calls back to back after the turns (caches warm from \
             the last call, as peer scripts time torch); compile = the first compiled call \
             (trace + compile + run)\n\
             limit: memory-bound rows against a triad over their own working set (bytes read + \
             written), matmul rows against the GEMM peak; achieved from the compiled alone \
             times, as the limits are measured back to back\n\
             peak memory: the allocator's most bytes in live tensors during a side's calls, \
             above what was held before them\n",
        );
        if self.results.iter().any(|r| r.backend == "cuda") {
            out.push_str(
                "cuda: compiled calls take and return host tensors, so their times include the \
                 copies to and from the device; the limits above are the host's, not the GPU's\n",
            );
        }
        if self.results.iter().any(|r| r.kind == "train") {
            out.push_str(
                "train_*: one step = forward + loss, backward, AdamW (fused); flops = 3 x the \
                 forward's matmul flops; compile = the first compiled call (trace + compile + \
                 the whole first step); peak over steps 2-3 above the bytes held before step 1 \
                 (optimiser state, gradients, saved activations)\n",
            );
        }
        for r in &self.results {
            if let Some(t) = &r.throughput {
                out.push_str(&format!(
                    "{}: {:.1} {unit}/s compiled, {:.1} {unit}/s eager ({} {unit} a call)\n",
                    r.workload,
                    t.compiled_per_s,
                    t.eager_per_s,
                    t.per_call,
                    unit = t.unit
                ));
            }
        }
        for r in &self.results {
            if let Some(t) = &r.tiers {
                out.push_str(&format!(
                    "tiers: {}: {} kernels on C, {} on Cranelift; full speed {:.0} ms after the \
                     first call\n",
                    r.workload, t.c_kernels, t.cranelift_kernels, t.full_speed_ms
                ));
            }
        }
        for r in &self.results {
            let Some(x) = &r.reference else { continue };
            match (
                &x.skipped,
                x.median_ms,
                x.min_ms,
                x.max_ms,
                x.compiled_over_reference,
            ) {
                (None, Some(m), Some(lo), Some(hi), Some(ratio)) => {
                    let (scale, unit) = unit_of(m);
                    out.push_str(&format!(
                        "reference: {}: {} {} ({}–{}) {unit}; compiled takes {ratio:.2}x its \
                         time\n",
                        r.workload,
                        x.kernel,
                        num(m * scale),
                        num(lo * scale),
                        num(hi * scale)
                    ));
                }
                (Some(why), ..) => {
                    out.push_str(&format!("reference: {}: not run: {why}\n", r.workload));
                }
                _ => {}
            }
        }
        for r in &self.results {
            if let Some(e) = &r.error {
                out.push_str(&format!("error: {} ({}): {e}\n", r.workload, r.backend));
            }
        }
        out
    }
}

/// A hand-written reference kernel's figures (see [`Row::reference`]).
#[derive(Clone, Debug, Serialize)]
pub struct ReferenceRow {
    /// what the reference is and where its source lives
    pub kernel: &'static str,
    /// its median call, ms
    pub median_ms: Option<f64>,
    /// its fastest call, ms
    pub min_ms: Option<f64>,
    /// its slowest call, ms
    pub max_ms: Option<f64>,
    /// the C compiler's time for it, ms (0 when its object was cached)
    pub compile_ms: Option<f64>,
    /// the compiled function's median over the reference's
    pub compiled_over_reference: Option<f64>,
    /// why it did not run (no AVX-512 or AVX2, no C compiler, a mismatch with eager)
    pub skipped: Option<String>,
}

/// The C tier's share of a workload's kernels (see [`Row::tiers`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TierSummary {
    /// kernel specialisations running C code
    pub c_kernels: usize,
    /// kernel specialisations running Cranelift code
    pub cranelift_kernels: usize,
    /// from the first compiled call until the last of the kernels swapped in since then took
    /// its C code, ms (0: none was)
    pub full_speed_ms: f64,
}

/// A row's table cells, in the header's order.
fn cells(r: &Row) -> Vec<String> {
    let dash = || "-".to_string();
    let time = |median: Option<f64>, min: Option<f64>, max: Option<f64>| match (median, min, max) {
        (Some(m), Some(lo), Some(hi)) => {
            let (scale, unit) = unit_of(m);
            format!(
                "{} ({}–{}) {unit}",
                num(m * scale),
                num(lo * scale),
                num(hi * scale)
            )
        }
        _ => dash(),
    };
    let (achieved, limit) = match (r.gbs, r.gflops) {
        (_, Some(g)) => (
            format!("{} GFLOP/s", num(g)),
            r.limit.map(|l| (l, "GFLOP/s")),
        ),
        (Some(b), None) => (format!("{} GB/s", num(b)), r.limit.map(|l| (l, "GB/s"))),
        (None, None) => (dash(), r.limit.map(|l| (l, r.limit_unit))),
    };
    vec![
        r.workload.clone(),
        r.backend.clone(),
        time(r.eager_ms, r.eager_min_ms, r.eager_max_ms),
        time(r.compiled_ms, r.compiled_min_ms, r.compiled_max_ms),
        time(r.cranelift_ms, r.cranelift_min_ms, r.cranelift_max_ms),
        time(
            r.compiled_alone_ms,
            r.compiled_alone_min_ms,
            r.compiled_alone_max_ms,
        ),
        r.speedup.map_or_else(dash, |s| format!("{s:.2}x")),
        achieved,
        limit.map_or_else(dash, |(l, unit)| format!("{} {unit}", num(l))),
        r.fraction_of_limit
            .map_or_else(dash, |f| format!("{:.1}%", f * 100.0)),
        r.compile_ms.map_or_else(dash, |c| {
            let (scale, unit) = unit_of(c);
            format!("{} {unit}", num(c * scale))
        }),
        match (r.eager_peak_bytes, r.compiled_peak_bytes) {
            (Some(e), Some(c)) => format!("{} / {}", human_bytes(e as f64), human_bytes(c as f64)),
            _ => dash(),
        },
        if r.verified { "yes" } else { "FAIL" }.to_string(),
    ]
}

/// The unit to show a time of `ms` milliseconds in: µs below 1 ms.
fn unit_of(ms: f64) -> (f64, &'static str) {
    if ms < 1.0 {
        (1e3, "µs")
    } else {
        (1.0, "ms")
    }
}

/// A figure with three or four significant digits.
fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Bytes as KiB / MiB / GiB.
pub fn human_bytes(b: f64) -> String {
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.2} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else {
        format!("{:.1} KiB", b / K)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, verified: bool) -> Row {
        Row {
            workload: workload.into(),
            backend: "eager".into(),
            eager_ms: verified.then_some(2.0),
            compiled_ms: verified.then_some(0.5),
            speedup: verified.then_some(4.0),
            gbs: verified.then_some(10.0),
            gflops: None,
            fraction_of_limit: verified.then_some(0.25),
            compile_ms: verified.then_some(12.0),
            limit: Some(40.0),
            verified,
            limit_unit: "GB/s",
            shape: vec![4],
            bytes: 32.0,
            flops: None,
            working_set_bandwidth_gbs: Some(40.0),
            eager_min_ms: verified.then_some(1.5),
            eager_max_ms: verified.then_some(3.0),
            compiled_min_ms: verified.then_some(0.4),
            compiled_max_ms: verified.then_some(0.9),
            eager_runs: verified.then_some(20),
            compiled_runs: verified.then_some(20),
            rel_error: verified.then_some(0.0),
            tolerance: 1e-4,
            graphs: verified.then_some(1),
            tiers: None,
            cranelift_ms: verified.then_some(0.8),
            cranelift_min_ms: verified.then_some(0.7),
            cranelift_max_ms: verified.then_some(1.2),
            compiled_alone_ms: verified.then_some(0.45),
            compiled_alone_min_ms: verified.then_some(0.3),
            compiled_alone_max_ms: verified.then_some(0.6),
            reference: verified.then_some(ReferenceRow {
                kernel: "hand-written loop",
                median_ms: Some(0.4),
                min_ms: Some(0.35),
                max_ms: Some(0.6),
                compile_ms: Some(300.0),
                compiled_over_reference: Some(1.25),
                skipped: None,
            }),
            error: (!verified).then(|| "output 0 differs".to_string()),
            throughput: verified.then_some(Throughput {
                unit: "sentences",
                per_call: 8,
                eager_per_s: 4000.0,
                compiled_per_s: 16000.0,
            }),
            kind: "forward",
            eager_peak_bytes: verified.then_some(3 << 20),
            compiled_peak_bytes: verified.then_some(1 << 20),
            first_step_ms: None,
            eager_losses: None,
            compiled_losses: None,
            optimizer: None,
        }
    }

    #[test]
    fn table_and_json() {
        let report = Report {
            kiln_version: "0.1.0".into(),
            machine: Machine {
                cpu: "Test CPU".into(),
                cores: 2,
                isa: vec!["avx2".into()],
            },
            limits: Limits {
                dram_bandwidth_gbs: 20.0,
                gemm_gflops: 100.0,
                dram_bandwidth_median_gbs: 19.0,
                dram_triad_bytes: 3.0 * 1024.0 * 1024.0 * 1024.0,
                dram_triad_passes: 10,
                gemm_n: 2048,
                gemm_runs: 5,
                threads: 2,
                kernel_overhead_ns: Some(412.0),
                kernel_overhead_kernels: 64,
            },
            results: vec![row("softmax", true), row("reduce", false)],
            quick: false,
        };
        let table = report.render();
        assert!(table.contains("500 (400–900) µs"), "{table}");
        assert!(table.contains("412 ns per kernel"), "{table}");
        // the Cranelift-only column, and the reference's line
        assert!(table.contains("800 (700–1200) µs"), "{table}");
        assert!(table.contains("450 (300–600) µs"), "{table}");
        assert!(
            table.contains(
                "reference: softmax: hand-written loop 400 (350–600) µs; compiled takes 1.25x"
            ),
            "{table}"
        );
        assert!(table.contains("25.0%"), "{table}");
        assert!(table.contains("FAIL"), "{table}");
        assert!(
            table.contains("error: reduce (eager): output 0 differs"),
            "{table}"
        );
        assert!(table.contains("3.00 GiB"), "{table}");
        assert!(table.contains("3.0 MiB / 1.0 MiB"), "{table}");
        assert!(!table.contains("train_*"), "{table}");
        assert!(
            !table.contains("the limits above are the host's"),
            "{table}"
        );
        assert!(
            table.contains("softmax: 16000.0 sentences/s compiled, 4000.0 sentences/s eager"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["results"][1]["eager_ms"], serde_json::Value::Null);
        assert_eq!(json["machine"]["isa"][0], "avx2");
        assert_eq!(json["results"][0]["throughput"]["per_call"], 8);
        assert_eq!(json["results"][0]["kind"], "forward");
        assert_eq!(json["results"][0]["cranelift_ms"], 0.8);
        assert_eq!(
            json["results"][0]["reference"]["compiled_over_reference"],
            1.25
        );
        assert_eq!(json["results"][0]["compiled_peak_bytes"], 1 << 20);
        assert_eq!(
            json["results"][1]["eager_peak_bytes"],
            serde_json::Value::Null
        );
        // cuda rows say that their times include the copies and their limits are the host's
        let mut cuda = report;
        cuda.results[0].backend = "cuda".into();
        let table = cuda.render();
        assert!(table.contains("the limits above are the host's"), "{table}");
    }
}
