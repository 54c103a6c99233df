//! NVRTC rejecting a source and ptxas failing or missing are typed errors naming the kernel
//! (with NVRTC's log and the source, or ptxas's output), never a panic or a PTX taken on
//! trust. Needs NVRTC: without it the test prints why and passes, unless
//! `KILN_REQUIRE_NVRTC` is set. (A file of its own: it sets `KILN_PTXAS`.)

use kiln_codegen::cuda::nvrtc::{compile_and_assemble, compile_ptx, nvrtc_for_tests, NvrtcError};
use kiln_codegen::cuda::CudaKernel;

fn kernel(name: &str, body: &str) -> CudaKernel {
    CudaKernel {
        name: name.into(),
        source: format!("extern \"C\" __global__ void {name}(float* p) {{ {body} }}\n"),
        block_threads: 32,
        per_row: false,
        ndims: 1,
        nbuffers: 1,
    }
}

#[test]
fn nvrtc_and_ptxas_failures_are_typed_errors() {
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let good = kernel("kiln_good", "p[0] = 1.0f;");
    assert!(compile_ptx(&good, "compute_90")
        .unwrap()
        .contains(".entry kiln_good"));

    // NVRTC rejects the source: its log and the source come back
    let bad = kernel("kiln_bad", "p[0] = undeclared_name;");
    match compile_ptx(&bad, "compute_90") {
        Err(NvrtcError::Compile { kernel, log, code }) => {
            assert_eq!(kernel, "kiln_bad");
            assert!(log.contains("undeclared_name"), "{log}");
            assert!(code.contains("undeclared_name"), "{code}");
        }
        other => panic!("{other:?}"),
    }

    // ptxas exits non-zero: an Assemble error naming the kernel
    // SAFETY: the only test in this process; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("KILN_PTXAS", "/bin/false") };
    match compile_and_assemble(&good, "compute_90", "sm_90") {
        Err(NvrtcError::Assemble { kernel, .. }) => assert_eq!(kernel, "kiln_good"),
        other => panic!("{other:?}"),
    }
    // ptxas is not there: Missing, saying where to get it
    // SAFETY: as above.
    unsafe { std::env::set_var("KILN_PTXAS", "/nonexistent/kiln/ptxas") };
    match compile_and_assemble(&good, "compute_90", "sm_90") {
        Err(e @ NvrtcError::Missing(_)) => {
            assert!(e.to_string().contains("KILN_PTXAS"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
