//! NVRTC missing: `KILN_NVRTC` naming a file that is not there makes every compile a typed
//! `NvrtcError::Missing` that says what was tried and how to install NVRTC, with no panic
//! and nothing written to the PTX cache. (A file of its own: NVRTC is looked up once per
//! process.)

use kiln_codegen::cuda::nvrtc::{
    compile_and_assemble, compile_ptx, compile_ptx_cached_in, NvrtcError,
};
use kiln_codegen::cuda::CudaKernel;

#[test]
fn a_missing_nvrtc_is_a_typed_error_and_caches_nothing() {
    // SAFETY: the only test in this process; no other thread reads the environment yet.
    unsafe { std::env::set_var("KILN_NVRTC", "/nonexistent/kiln/libnvrtc.so.12") };
    let k = CudaKernel {
        name: "kiln_fault".into(),
        source: "extern \"C\" __global__ void kiln_fault(float* p) { p[0] = 1.0f; }\n".into(),
        block_threads: 32,
        per_row: false,
        ndims: 1,
        nbuffers: 1,
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-nvrtc-missing-{}", std::process::id()));
    for e in [
        compile_ptx(&k, "compute_90").unwrap_err(),
        compile_ptx_cached_in(&k, "compute_90", &dir).unwrap_err(),
        compile_and_assemble(&k, "compute_90", "sm_90").unwrap_err(),
    ] {
        assert!(matches!(e, NvrtcError::Missing(_)), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("KILN_NVRTC=/nonexistent/kiln/libnvrtc.so.12 cannot be loaded"),
            "{msg}"
        );
    }
    assert!(!dir.exists(), "a failed compile stores nothing");
}
