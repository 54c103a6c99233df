//! Hand-written reference kernels that `kiln bench` measures kiln's own code against: what
//! a person would write in C with the host's widest vector intrinsics (AVX-512, else AVX2
//! with FMA) for one workload on this machine. They are built by the C tier's compiler with
//! its flags (and cached as its kernels are), take the generated kernels' signature, and run
//! over the same kernel pool with the same row split, so that a comparison measures the loop
//! bodies alone.

use super::cache::Cache;
use super::compiler::{build_kernel, CTierError, Compiler};
use crate::cpu::jit::KernelFn;
use kiln_runtime::pool;
use std::time::Duration;

/// The softmax reference's AVX-512 source (see its header comment).
const SOFTMAX_AVX512_SOURCE: &str = include_str!("reference_softmax.c");
/// The same loop at AVX2's 8 lanes, for hosts without AVX-512.
const SOFTMAX_AVX2_SOURCE: &str = include_str!("reference_softmax_avx2.c");

/// The instruction sets a reference is written in, widest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceIsa {
    /// 16 f32 lanes (AVX-512F)
    Avx512,
    /// 8 f32 lanes (AVX2 with FMA)
    Avx2,
}

impl ReferenceIsa {
    /// The widest one this host runs, if any.
    #[cfg(target_arch = "x86_64")]
    pub fn of_host() -> Option<ReferenceIsa> {
        if std::arch::is_x86_feature_detected!("avx512f") {
            Some(ReferenceIsa::Avx512)
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            Some(ReferenceIsa::Avx2)
        } else {
            None
        }
    }

    /// The widest one this host runs: none off x86-64.
    #[cfg(not(target_arch = "x86_64"))]
    pub fn of_host() -> Option<ReferenceIsa> {
        None
    }

    /// What the softmax reference in these instructions is and where its source lives.
    pub fn softmax_description(self) -> &'static str {
        match self {
            ReferenceIsa::Avx512 => {
                "hand-written AVX-512 C loop (codegen/src/cpu/c_tier/reference_softmax.c)"
            }
            ReferenceIsa::Avx2 => {
                "hand-written AVX2 C loop (codegen/src/cpu/c_tier/reference_softmax_avx2.c)"
            }
        }
    }
}

/// A reference kernel over row-major f32 rows, made ready to run.
pub struct RowReference {
    name: &'static str,
    f: KernelFn,
    /// the time the C compiler took (zero when the object came from the cache)
    pub compile_time: Duration,
}

/// Why a reference cannot run here or was called with bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// the host lacks the instructions every version of the reference is written in
    #[error("{0}: this host has neither AVX-512F nor AVX2 with FMA")]
    NoVectorIsa(&'static str),
    /// the C compiler was not found or failed
    #[error(transparent)]
    Build(#[from] CTierError),
    /// the buffers do not hold `rows × cols` elements
    #[error("{name}: {rows}×{cols} rows need {} elements, got input {input} and output {output}", rows * cols)]
    Shape {
        /// the reference
        name: &'static str,
        /// rows asked for
        rows: usize,
        /// row length asked for
        cols: usize,
        /// input elements
        input: usize,
        /// output elements
        output: usize,
    },
}

/// The softmax over the last dim in the host's widest instructions (`reference_softmax.c`
/// with AVX-512, `reference_softmax_avx2.c` with AVX2), built with the C tier's compiler and
/// flags; its cache is the C tier's (`KILN_CACHE_DIR`, else the default).
pub fn softmax_reference() -> Result<RowReference, ReferenceError> {
    let name = "softmax_reference";
    let source = match ReferenceIsa::of_host().ok_or(ReferenceError::NoVectorIsa(name))? {
        ReferenceIsa::Avx512 => SOFTMAX_AVX512_SOURCE,
        ReferenceIsa::Avx2 => SOFTMAX_AVX2_SOURCE,
    };
    build(name, source)
}

fn build(name: &'static str, source: &str) -> Result<RowReference, ReferenceError> {
    let compiler = Compiler::find()?;
    let dir = std::env::var_os("KILN_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(Cache::default_dir);
    let cache = Cache::open(&dir);
    let built = build_kernel(compiler, cache.as_ref(), name, source)?;
    Ok(RowReference {
        name,
        f: built.f,
        compile_time: built.compile_time,
    })
}

impl RowReference {
    /// The reference's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the kernel over `rows` contiguous rows of `cols` elements of `input` into
    /// `output`, the rows split over the kernel pool in four chunks per thread (as kiln's
    /// row kernels of this size are).
    pub fn run(
        &self,
        input: &[f32],
        output: &mut [f32],
        rows: usize,
        cols: usize,
    ) -> Result<(), ReferenceError> {
        if input.len() != rows * cols || output.len() != rows * cols {
            return Err(ReferenceError::Shape {
                name: self.name,
                rows,
                cols,
                input: input.len(),
                output: output.len(),
            });
        }
        let row_bytes = (cols * 4) as i64;
        let strides = [row_bytes, 4, row_bytes, 4];
        let sizes = [rows as i64, cols as i64];
        // the pool shares the closure between threads: addresses travel as integers
        let (src, dst) = (input.as_ptr() as usize, output.as_mut_ptr() as usize);
        let chunks = (pool::threads() * 4).min(rows.max(1));
        let per = rows.div_ceil(chunks.max(1));
        pool::run(chunks, pool::Wake::Sleepers, &|c| {
            let r0 = c * per;
            let r1 = (r0 + per).min(rows);
            if r0 < r1 {
                let ptrs = [src as *mut u8, dst as *mut u8];
                // SAFETY: the buffers hold rows × cols f32 (checked above); each chunk
                // writes its own rows of the output, which nothing else reads meanwhile.
                unsafe {
                    (self.f)(
                        ptrs.as_ptr(),
                        strides.as_ptr(),
                        sizes.as_ptr(),
                        r0 as i64,
                        r1 as i64,
                        0,
                        cols as i64,
                    )
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// softmax in f64, row by row
    fn softmax64(x: &[f32], cols: usize) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|row| {
                let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / s)
            })
            .collect()
    }

    #[test]
    fn the_softmax_reference_is_a_softmax() {
        let r = match softmax_reference() {
            Ok(r) => r,
            Err(e @ (ReferenceError::NoVectorIsa(_) | ReferenceError::Build(_))) => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        for (rows, cols) in [(1, 1), (3, 17), (5, 64), (7, 1024), (2, 1000), (9, 15)] {
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 30.0)
                .collect();
            let mut y = vec![f32::NAN; rows * cols];
            r.run(&x, &mut y, rows, cols).unwrap();
            for (i, (got, want)) in y.iter().zip(softmax64(&x, cols)).enumerate() {
                let err = (*got as f64 - want).abs();
                assert!(
                    err <= 4e-6 * want + 1e-30,
                    "{rows}×{cols} element {i}: {got} vs {want}"
                );
            }
        }
        let mut y = vec![0.0; 5];
        assert!(matches!(
            r.run(&[0.0; 6], &mut y, 2, 3),
            Err(ReferenceError::Shape { .. })
        ));
    }
}
