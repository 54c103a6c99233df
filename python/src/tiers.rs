//! The C tier's state, for benchmarks and debugging from Python: which tier each kernel
//! runs, and waiting until no kernel is queued for the C compiler.

use pyo3::prelude::*;
use std::time::Duration;

/// Each live kernel's tier as `(kernel, description)`, the description as `kiln::tiers()`
/// prints it (the tier and why).
#[pyfunction]
pub(crate) fn tiers() -> Vec<(String, String)> {
    kiln::tiers()
        .into_iter()
        .map(|t| (t.kernel.clone(), t.to_string()))
        .collect()
}

/// Waits (without the interpreter lock) until no kernel is queued for the C tier or
/// `timeout` seconds have passed; true when none is queued.
#[pyfunction]
pub(crate) fn wait_for_c_tier(py: Python<'_>, timeout: f64) -> bool {
    let timeout = Duration::from_secs_f64(timeout.max(0.0));
    py.detach(|| kiln::wait_for_c_tier(timeout))
}

/// How many seconds ago each live kernel on C code was swapped to it (kernels still on
/// Cranelift code are left out): a benchmark's time to full speed is its first call's
/// start to the last swap of its kernels.
#[pyfunction]
pub(crate) fn c_tier_swap_ages() -> Vec<f64> {
    kiln::tiers()
        .iter()
        .filter_map(|t| t.c_since)
        .map(|at| at.elapsed().as_secs_f64())
        .collect()
}

/// The per-kernel timing table of compiled CPU plans (`KILN_PROFILE=1` turns timing on;
/// see `kiln::profile`), its `limit` longest rows formatted as `kiln run` prints them; with
/// `reset`, the table is emptied afterwards.
#[pyfunction]
#[pyo3(signature = (limit = 30, reset = false))]
pub(crate) fn profile_report(limit: usize, reset: bool) -> String {
    let text = kiln::profile::format_report(&kiln::profile::report(), limit);
    if reset {
        kiln::profile::reset();
    }
    text
}
