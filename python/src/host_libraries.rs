//! What kiln takes from the torch it runs in: the OpenMP team its kernel pool forks on
//! (`kiln_runtime::host_team` says why) and the BLAS its matrix products call
//! (`kiln_runtime::host_blas`).

use pyo3::prelude::*;
use std::ffi::{CStr, CString};

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

/// Computes kiln's matrix products with the BLAS torch's eager matmuls use: `sgemm_` and
/// `dgemm_` of the shared library at `path` (torch's `libtorch_cpu`, which links MKL in),
/// opened only if it is loaded already (`RTLD_NOLOAD`) and kept loaded. Returns None when
/// adopted (now or before), else why not: the library is not loaded, lacks the symbols, or
/// its products disagree with a naive product (kiln keeps its own gemm).
#[pyfunction]
pub(crate) fn adopt_torch_blas(path: &str) -> Option<String> {
    if kiln_runtime::host_blas::adopted() {
        return None;
    }
    let Ok(c_path) = CString::new(path) else {
        return Some(format!("{path:?} holds a NUL byte"));
    };
    // SAFETY: a NUL-terminated path; RTLD_NOLOAD opens nothing new, and the handle is
    // never closed, so the library stays loaded for the life of the process.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return Some(format!("{path} is not loaded"));
    }
    // SAFETY: a live handle and NUL-terminated names.
    let (sgemm, dgemm) = unsafe {
        (
            libc::dlsym(handle, c"sgemm_".as_ptr()),
            libc::dlsym(handle, c"dgemm_".as_ptr()),
        )
    };
    if sgemm.is_null() || dgemm.is_null() {
        return Some(format!("{path} has no sgemm_ and dgemm_"));
    }
    // SAFETY: sgemm_ and dgemm_ of a loaded BLAS follow the Fortran BLAS contract (adopt
    // checks their products before using them); the library stays loaded (above).
    let adopted = unsafe {
        use kiln_runtime::host_blas::{adopt, FortranGemm};
        let sgemm = std::mem::transmute::<*mut libc::c_void, FortranGemm<f32>>(sgemm);
        let dgemm = std::mem::transmute::<*mut libc::c_void, FortranGemm<f64>>(dgemm);
        adopt(sgemm, dgemm)
    };
    adopted.err().map(|e| e.to_string())
}
