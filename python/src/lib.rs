//! `kiln._native`: the native half of kiln's PyTorch backend (`torch.compile(m,
//! backend="kiln")`, see `python/kiln/backend.py`).
//!
//! Python hands over a graph in kiln's textual IR (translated from an FX graph by
//! `kiln/fx_to_kir.py`); [`compile`] parses and verifies it and wraps it in a
//! [`kiln::compile`]d function ([`Compiled`]). Calls take PyTorch tensors without copying
//! ([`inputs`]: their storage is borrowed, with their strides and offset) and give the
//! results back without copying ([`dlpack`]: capsules `torch.from_dlpack` adopts). The
//! interpreter lock is released while kiln compiles and runs.

mod compiled;
mod dlpack;
mod host_libraries;
mod inputs;
mod tiers;

use pyo3::prelude::*;

pyo3::create_exception!(
    _native,
    KilnError,
    pyo3::exceptions::PyRuntimeError,
    "An error from kiln: a graph it cannot parse, verify or run (the message names the op and shapes)."
);

/// Converts a kiln error into a Python `KilnError`.
pub(crate) fn to_py(e: impl std::fmt::Display) -> PyErr {
    KilnError::new_err(e.to_string())
}

/// How this module was built: `"debug"` for a build with debug assertions (cargo's dev
/// profile, as `maturin develop` and CI's test wheel build it: several times slower), else
/// `"release"`. `python -m kiln.bench` refuses to time a debug build.
const BUILD_PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// The module: `compile`, `verify`, `Compiled`, `tiers`, `wait_for_c_tier`,
/// `c_tier_swap_ages`, `forget_pinned`, `adopt_torch_threads`, `adopt_torch_blas`,
/// `pack_cache_bytes`, `KilnError`, `version`, `build_profile`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compiled::compile, m)?)?;
    m.add_function(wrap_pyfunction!(compiled::verify, m)?)?;
    m.add_function(wrap_pyfunction!(tiers::tiers, m)?)?;
    m.add_function(wrap_pyfunction!(tiers::wait_for_c_tier, m)?)?;
    m.add_function(wrap_pyfunction!(tiers::c_tier_swap_ages, m)?)?;
    m.add_function(wrap_pyfunction!(tiers::profile_report, m)?)?;
    m.add_function(wrap_pyfunction!(inputs::forget_pinned, m)?)?;
    m.add_function(wrap_pyfunction!(host_libraries::adopt_torch_threads, m)?)?;
    m.add_function(wrap_pyfunction!(host_libraries::adopt_torch_blas, m)?)?;
    m.add_function(wrap_pyfunction!(inputs::pack_cache_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(inputs::memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(inputs::reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(inputs::empty_cache, m)?)?;
    m.add_class::<compiled::Compiled>()?;
    m.add("KilnError", m.py().get_type::<KilnError>())?;
    m.add("version", env!("CARGO_PKG_VERSION"))?;
    m.add("build_profile", BUILD_PROFILE)?;
    Ok(())
}
