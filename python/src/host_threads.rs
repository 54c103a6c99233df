//! Kernel pool jobs on torch's OpenMP team (see `kiln_runtime::host_team` for why).

use pyo3::prelude::*;
use std::ffi::CStr;

/// The address of `name` among the process's global symbols (null when none).
fn global_symbol(name: &CStr) -> *mut libc::c_void {
    // SAFETY: RTLD_DEFAULT searches the symbols already loaded; `name` is NUL-terminated.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// Runs kiln's parallel kernel work on the GNU OpenMP team torch's eager ops use (libgomp's
/// `GOMP_parallel`, found among the process's symbols once `import torch` has loaded it),
/// instead of kiln's own spinning workers, which would compete with that team for the same
/// cores. True when adopted (now or before); false when no libgomp is loaded (a torch
/// built with another threading runtime), and kiln keeps its own pool.
#[pyfunction]
pub(crate) fn adopt_torch_threads() -> bool {
    if kiln_runtime::host_team::adopted() {
        return true;
    }
    let parallel = global_symbol(c"GOMP_parallel");
    let max_threads = global_symbol(c"omp_get_max_threads");
    if parallel.is_null() || max_threads.is_null() {
        return false;
    }
    // SAFETY: the symbols are libgomp's GOMP_parallel and omp_get_max_threads, with these
    // signatures; torch keeps libgomp loaded for the life of the process.
    unsafe {
        let parallel: kiln_runtime::host_team::GompParallel = std::mem::transmute(parallel);
        let max_threads: kiln_runtime::host_team::OmpMaxThreads = std::mem::transmute(max_threads);
        kiln_runtime::host_team::adopt(parallel, max_threads);
    }
    true
}
