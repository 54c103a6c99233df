//! The text of `kiln dump --stage cuda` (each kernel group's CUDA C, or why it has none) and
//! `--stage ptx` (its PTX from NVRTC).

use super::group_kernel;
use super::nvrtc::{compile_ptx_cached, NvrtcError};
use kiln_passes::schedule::Schedule;
use std::fmt::Write;

/// The PTX (NVRTC, `compute_90`, through the disk cache) of every kernel of `s` that has
/// CUDA C, with a comment for the others; an error when NVRTC is missing or rejects a
/// kernel.
pub fn describe_ptx(s: &Schedule) -> Result<String, NvrtcError> {
    let mut out = String::new();
    for k in &s.kernels {
        let name = k.body.name();
        match group_kernel(&k.body) {
            Ok(c) => {
                let (ptx, _) = compile_ptx_cached(&c, "compute_90")?;
                let _ = writeln!(out, "// kernel {name}: {}\n{ptx}", c.name);
            }
            Err(reason) => {
                let _ = writeln!(out, "// kernel {name}: no CUDA C ({reason})\n");
            }
        }
    }
    Ok(out)
}

/// The CUDA C of every kernel of `s` that has one (a loop nest's, or an embedding lookup's
/// gather kernel), in schedule order; the other kernels (matmuls, which go to cuBLAS, and
/// groups neither covers) get a comment saying why.
pub fn describe(s: &Schedule) -> String {
    let mut out = String::new();
    for k in &s.kernels {
        let name = k.body.name();
        match group_kernel(&k.body) {
            Ok(c) => {
                let _ = writeln!(
                    out,
                    "// kernel {name}: {} threads per block, {}\n{}",
                    c.block_threads,
                    if c.per_row {
                        "one block per row"
                    } else {
                        "grid-stride over the elements"
                    },
                    c.source
                );
            }
            Err(reason) => {
                let _ = writeln!(out, "// kernel {name}: no CUDA C ({reason})\n");
            }
        }
    }
    out
}
