//! Per-kernel timing of compiled CPU plans, for finding where a step's time goes (the
//! question `torch.profiler` answers for PyTorch). Off by default: each kernel then pays one
//! relaxed atomic load. On (`KILN_PROFILE=1` in the environment, or [`set_enabled`]), every
//! kernel a plan runs adds its wall time to a process-wide table keyed by plan and kernel,
//! read back by [`report`] and printed by [`format_report`].

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// 0: not yet read from the environment; 1: off; 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// The table: (plan, kernel) to its entry.
static TABLE: Mutex<Option<HashMap<(String, String), KernelTime>>> = Mutex::new(None);

/// Whether kernels are being timed: [`set_enabled`]'s last value, or else whether
/// `KILN_PROFILE` is set to something other than empty or `0`.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("KILN_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0");
            // a racing set_enabled wins over the environment
            let _ = STATE.compare_exchange(0, 1 + on as u8, Ordering::Relaxed, Ordering::Relaxed);
            STATE.load(Ordering::Relaxed) == 2
        }
        s => s == 2,
    }
}

/// Turns kernel timing on or off for the whole process (overrides `KILN_PROFILE`).
pub fn set_enabled(on: bool) {
    STATE.store(1 + on as u8, Ordering::Relaxed);
}

/// Forgets every time recorded so far.
pub fn reset() {
    *TABLE.lock() = None;
}

/// The time one kernel of one plan took, summed over its calls.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// the plan's (the compiled graph's) name
    pub plan: String,
    /// the kernel's name in the plan (`k12`, as `kiln dump --stage schedule` shows it)
    pub kernel: String,
    /// how it runs: `nest` (generated code), `matmul` (GEMM and epilogue) or `eager`
    pub kind: &'static str,
    /// the kernel's ops in order, each once (`matmul,add,gelu`)
    pub ops: String,
    /// the number of calls timed
    pub calls: u64,
    /// their summed wall time
    pub total: Duration,
}

/// Adds one call of `kernel` in `plan` taking `elapsed`; `ops` is asked for only on the
/// kernel's first call.
pub(crate) fn record(
    plan: &str,
    kernel: &str,
    kind: &'static str,
    ops: impl FnOnce() -> String,
    elapsed: Duration,
) {
    let mut table = TABLE.lock();
    let table = table.get_or_insert_with(HashMap::new);
    let key = (plan.to_string(), kernel.to_string());
    let entry = table.entry(key).or_insert_with(|| KernelTime {
        plan: plan.to_string(),
        kernel: kernel.to_string(),
        kind,
        ops: ops(),
        calls: 0,
        total: Duration::ZERO,
    });
    entry.calls += 1;
    entry.total += elapsed;
}

/// Every kernel timed since the last [`reset`], the most total time first.
pub fn report() -> Vec<KernelTime> {
    let mut rows: Vec<KernelTime> = TABLE
        .lock()
        .as_ref()
        .map(|t| t.values().cloned().collect())
        .unwrap_or_default();
    rows.sort_by(|a, b| {
        b.total
            .cmp(&a.total)
            .then_with(|| (&a.plan, &a.kernel).cmp(&(&b.plan, &b.kernel)))
    });
    rows
}

/// `rows` as a table: the top `limit` kernels by total time (each with its calls, total ms,
/// mean µs per call and share of all kernel time), then the time of all kernels by kind.
pub fn format_report(rows: &[KernelTime], limit: usize) -> String {
    let all: Duration = rows.iter().map(|r| r.total).sum();
    let share = |d: Duration| 100.0 * d.as_secs_f64() / all.as_secs_f64().max(1e-12);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<12} {:<7} {:>7} {:>10} {:>10} {:>6}  ops",
        "plan", "kernel", "kind", "calls", "total ms", "mean us", "share"
    );
    for r in rows.iter().take(limit) {
        let mut ops = r.ops.clone();
        if ops.len() > 60 {
            ops.truncate(57);
            ops.push_str("...");
        }
        let _ = writeln!(
            s,
            "{:<16} {:<12} {:<7} {:>7} {:>10.3} {:>10.1} {:>5.1}%  {ops}",
            r.plan,
            r.kernel,
            r.kind,
            r.calls,
            r.total.as_secs_f64() * 1e3,
            r.total.as_secs_f64() * 1e6 / r.calls.max(1) as f64,
            share(r.total),
        );
    }
    if rows.len() > limit {
        let _ = writeln!(s, "({} more kernels)", rows.len() - limit);
    }
    for kind in ["matmul", "nest", "eager"] {
        let t: Duration = rows
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.total)
            .sum();
        let _ = writeln!(
            s,
            "{:<16} {:>10.3} ms, {:>5.1}%",
            format!("{kind} kernels:"),
            t.as_secs_f64() * 1e3,
            share(t)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_sums_calls_per_kernel_and_orders_by_total_time() {
        record("p", "k0", "nest", || "add".into(), Duration::from_micros(5));
        record(
            "p",
            "k1",
            "matmul",
            || "matmul,add".into(),
            Duration::from_micros(30),
        );
        record(
            "p",
            "k0",
            "nest",
            || unreachable!("ops are asked once"),
            Duration::from_micros(7),
        );
        let rows: Vec<KernelTime> = report().into_iter().filter(|r| r.plan == "p").collect();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].kernel.as_str(), rows[0].calls), ("k1", 1));
        assert_eq!((rows[1].kernel.as_str(), rows[1].calls), ("k0", 2));
        assert_eq!(rows[1].total, Duration::from_micros(12));
        assert_eq!(rows[1].ops, "add");
        let text = format_report(&rows, 1);
        assert!(text.contains("k1") && text.contains("matmul,add"), "{text}");
        assert!(text.contains("(1 more kernels)"), "{text}");
        assert!(text.contains("71.4%"), "30 of 42 us: {text}");
    }

    #[test]
    fn set_enabled_overrides_the_environment() {
        set_enabled(true);
        assert!(enabled());
        set_enabled(false);
        assert!(!enabled());
    }
}
