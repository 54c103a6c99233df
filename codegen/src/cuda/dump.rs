//! The text of `kiln dump --stage cuda`: each kernel group's CUDA C, or why it has none.

use super::source::cuda_kernel;
use crate::loops::lower_kernel;
use kiln_passes::schedule::Schedule;
use std::fmt::Write;

/// The CUDA C of every kernel of `s` that lowers to a loop nest, in schedule order; the
/// other kernels (matmuls, which go to cuBLAS, and groups loop nests do not cover) get a
/// comment saying why.
pub fn describe(s: &Schedule) -> String {
    let mut out = String::new();
    for k in &s.kernels {
        let name = k.body.name();
        match lower_kernel(&k.body) {
            Ok(nest) => match cuda_kernel(&nest) {
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
                Err(e) => {
                    let _ = writeln!(out, "// kernel {name}: no CUDA C ({})\n", e.reason);
                }
            },
            Err(e) => {
                let _ = writeln!(out, "// kernel {name}: no CUDA C ({})\n", e.reason);
            }
        }
    }
    out
}
