//! Generated CUDA C to PTX with NVRTC, through cudarc with dynamic loading (CUDA is never
//! linked), and PTX to SASS with `ptxas` for register and spill counts.
//!
//! Finding NVRTC: `KILN_NVRTC` (the library file, or the directory holding
//! `libnvrtc.so.12`) is opened by absolute path first and kept loaded, so cudarc's lookup
//! by name finds it; otherwise cudarc searches the usual names on `LD_LIBRARY_PATH`. NVRTC
//! comes from PyPI (`pip install nvidia-cuda-nvrtc-cu12==12.9.86`, whose version matches
//! cudarc's `cuda-12090` feature; `scripts/fetch-cuda-tools.sh` downloads it). cudarc
//! panics when the library is missing, so its presence is checked before any call.
//!
//! `ptxas` comes from `nvidia-cuda-nvcc-cu12` (same version): `KILN_PTXAS`, else `ptxas` on
//! the `PATH`.

use super::CudaKernel;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Definitions NVRTC does not have built in and the generated source uses (the emulation
/// shim gets them from `<cmath>`).
const PRELUDE: &str =
    "#define INFINITY __int_as_float(0x7f800000)\n#define NAN __int_as_float(0x7fffffff)\n";

/// The PyPI package and version kiln's NVRTC and ptxas come from.
pub const WHEEL_VERSION: &str = "12.9.86";

/// A failure to compile or assemble a kernel.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    /// NVRTC (or ptxas) is not installed where kiln looks.
    #[error("{0}")]
    Missing(String),
    /// NVRTC rejected the source.
    #[error("NVRTC failed to compile kernel {kernel}:\n{log}\n--- source ---\n{code}")]
    Compile {
        /// the kernel's name
        kernel: String,
        /// NVRTC's log
        log: String,
        /// the source given to NVRTC
        code: String,
    },
    /// ptxas rejected the PTX.
    #[error("ptxas failed on kernel {kernel}: {log}")]
    Assemble {
        /// the kernel's name
        kernel: String,
        /// ptxas's output
        log: String,
    },
}

/// For tests that need NVRTC: `Ok(true)` when it loads; `Ok(false)` when it is missing and
/// not required (the reason is printed: the test should pass without it); `Err` when it is
/// missing and `KILN_REQUIRE_NVRTC` is set (CI sets it after installing the PyPI wheels),
/// which makes its absence a failure.
pub fn nvrtc_for_tests() -> Result<bool, String> {
    match load_nvrtc() {
        Ok(()) => Ok(true),
        Err(e) if std::env::var_os("KILN_REQUIRE_NVRTC").is_some() => {
            Err(format!("KILN_REQUIRE_NVRTC is set but {e}"))
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            Ok(false)
        }
    }
}

/// Loads NVRTC (see the module doc) once; the error says how to install it.
pub fn load_nvrtc() -> Result<(), NvrtcError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("KILN_NVRTC") {
                let mut path = PathBuf::from(p);
                if path.is_dir() {
                    path = path.join("libnvrtc.so.12");
                }
                // SAFETY: loading NVRTC runs its initialisers, which have no preconditions;
                // the library stays loaded for the rest of the process (leaked on purpose).
                match unsafe { libloading::Library::new(&path) } {
                    Ok(lib) => std::mem::forget(lib),
                    Err(e) => {
                        return Err(format!(
                            "KILN_NVRTC={} cannot be loaded: {e}",
                            path.display()
                        ))
                    }
                }
            }
            // SAFETY: only tries to open the library by its usual names.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                Ok(())
            } else {
                Err(format!(
                    "NVRTC (libnvrtc.so.12) was not found: install it with `pip install \
                     nvidia-cuda-nvrtc-cu12=={WHEEL_VERSION}` (or run scripts/fetch-cuda-tools.sh) \
                     and set KILN_NVRTC to its site-packages/nvidia/cuda_nvrtc/lib directory, \
                     or add that directory to LD_LIBRARY_PATH"
                ))
            }
        })
        .clone()
        .map_err(NvrtcError::Missing)
}

/// NVRTC's options beside the architecture: precise math (no fast-math), and no contraction
/// of a product and a sum into one fused multiply-add (`--fmad=false`). Eager rounds the
/// product first; a contracted `x·y - max` is the product's rounding error, which `exp`
/// turned into inf in a log_softmax on an H100 (fuzz_cuda_14003499). An explicit `fmaf` in
/// kiln's own math routines stays one.
const NVRTC_OPTIONS: [&str; 2] = ["--std=c++17", "--fmad=false"];

/// The PTX of `kernel` for `arch` (such as `compute_90`), compiled by NVRTC with
/// [`NVRTC_OPTIONS`] (kiln's results must match eager).
pub fn compile_ptx(kernel: &CudaKernel, arch: &'static str) -> Result<String, NvrtcError> {
    load_nvrtc()?;
    let source = format!("{PRELUDE}{}", kernel.source);
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        name: Some(format!("{}.cu", kernel.name)),
        options: NVRTC_OPTIONS.iter().map(|o| o.to_string()).collect(),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(&source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(e) => {
            let log = match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            };
            Err(NvrtcError::Compile {
                kernel: kernel.name.clone(),
                log,
                code: source,
            })
        }
    }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), NvrtcError> {
    load_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (checked above); the pointers are to live locals.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(NvrtcError::Missing(format!("nvrtcVersion failed: {r:?}")));
    }
    Ok((major, minor))
}

/// The directory compiled PTX is cached in: `KILN_CACHE_DIR/ptx`, else
/// `~/.cache/kiln/ptx`, else the temporary directory's `kiln-ptx`.
pub fn ptx_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KILN_CACHE_DIR") {
        return PathBuf::from(d).join("ptx");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/kiln/ptx"),
        None => std::env::temp_dir().join("kiln-ptx"),
    }
}

/// [`compile_ptx`] through an on-disk cache keyed by a hash of the source, the target and
/// NVRTC's version. A missing, unreadable, truncated or corrupt entry is recompiled (and
/// rewritten), never trusted; a cache that cannot be written is skipped with one warning
/// (see `ptx_cache`). Returns the PTX and whether it came from the cache.
pub fn compile_ptx_cached(
    kernel: &CudaKernel,
    arch: &'static str,
) -> Result<(String, bool), NvrtcError> {
    compile_ptx_cached_in(kernel, arch, &ptx_cache_dir())
}

/// [`compile_ptx_cached`] with the cache in `dir`.
pub fn compile_ptx_cached_in(
    kernel: &CudaKernel,
    arch: &'static str,
    dir: &std::path::Path,
) -> Result<(String, bool), NvrtcError> {
    use std::hash::{Hash, Hasher};
    let version = nvrtc_version()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (PRELUDE, &kernel.source, arch, version, NVRTC_OPTIONS).hash(&mut h);
    let file = dir.join(format!("{}-{:016x}.ptx", kernel.name, h.finish()));
    let (ptx, source) = super::ptx_cache::through_cache(&file, &kernel.name, next_id(), || {
        compile_ptx(kernel, arch)
    })?;
    Ok((ptx, source == super::ptx_cache::Source::Cache))
}

/// What ptxas reports for one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SassStats {
    /// registers per thread
    pub registers: u32,
    /// bytes of spill stores and loads
    pub spill_stores: u32,
    /// bytes of spill loads
    pub spill_loads: u32,
}

impl SassStats {
    /// Whether ptxas reported any spill.
    pub fn spills(&self) -> bool {
        self.spill_stores + self.spill_loads > 0
    }

    /// The larger of each count of `self` and `other` (the worst over several kernels).
    pub fn worst(&self, other: &SassStats) -> SassStats {
        SassStats {
            registers: self.registers.max(other.registers),
            spill_stores: self.spill_stores.max(other.spill_stores),
            spill_loads: self.spill_loads.max(other.spill_loads),
        }
    }
}

impl std::fmt::Display for SassStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} registers, {} B spill stores, {} B spill loads",
            self.registers, self.spill_stores, self.spill_loads
        )
    }
}

/// NVRTC then ptxas: `kernel`'s PTX for `arch` (such as `compute_90`), checked to hold the
/// kernel's entry, assembled for `sm` (such as `sm_90`); its register and spill counts.
pub fn compile_and_assemble(
    kernel: &CudaKernel,
    arch: &'static str,
    sm: &str,
) -> Result<SassStats, NvrtcError> {
    let ptx = compile_ptx(kernel, arch)?;
    if !ptx.contains(&kernel.name) {
        return Err(NvrtcError::Assemble {
            kernel: kernel.name.clone(),
            log: format!("the PTX has no entry {}", kernel.name),
        });
    }
    assemble(&kernel.name, &ptx, sm)
}

/// The ptxas executable: `KILN_PTXAS`, else `ptxas` on the `PATH`.
fn ptxas() -> PathBuf {
    std::env::var_os("KILN_PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"))
}

/// Assembles `ptx` with `ptxas -arch=<sm>` (such as `sm_90`) and returns its register and
/// spill counts.
pub fn assemble(kernel: &str, ptx: &str, sm: &str) -> Result<SassStats, NvrtcError> {
    let dir = std::env::temp_dir().join(format!("kiln-ptxas-{}-{}", std::process::id(), next_id()));
    std::fs::create_dir_all(&dir).map_err(|e| NvrtcError::Missing(e.to_string()))?;
    let file = dir.join("kernel.ptx");
    let result = (|| {
        std::fs::write(&file, ptx).map_err(|e| NvrtcError::Missing(e.to_string()))?;
        let out = Command::new(ptxas())
            .arg(format!("-arch={sm}"))
            .arg("-v")
            .arg(&file)
            .arg("-o")
            .arg(dir.join("kernel.cubin"))
            .output()
            .map_err(|e| {
                NvrtcError::Missing(format!(
                    "ptxas cannot be run ({e}): install it with `pip install \
                     nvidia-cuda-nvcc-cu12=={WHEEL_VERSION}` and set KILN_PTXAS to its \
                     nvidia/cuda_nvcc/bin/ptxas"
                ))
            })?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(NvrtcError::Assemble {
                kernel: kernel.to_string(),
                log,
            });
        }
        Ok(parse_ptxas(&log))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The counts in ptxas's `-v` output (`Used 24 registers`, `0 bytes spill stores, 0 bytes
/// spill loads`).
fn parse_ptxas(log: &str) -> SassStats {
    let number_before = |line: &str, word: &str| -> Option<u32> {
        let i = line.find(word)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let mut s = SassStats::default();
    for line in log.lines() {
        if let Some(r) = number_before(line, " registers") {
            s.registers = s.registers.max(r);
        }
        if let Some(v) = number_before(line, " bytes spill stores") {
            s.spill_stores = s.spill_stores.max(v);
        }
        if let Some(v) = number_before(line, " bytes spill loads") {
            s.spill_loads = s.spill_loads.max(v);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_output_is_parsed() {
        let log = "ptxas info    : Compiling entry function 'kiln_k0' for 'sm_90'\n\
                   ptxas info    : Function properties for kiln_k0\n    \
                   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 40 registers, 384 bytes cmem[0]";
        assert_eq!(
            parse_ptxas(log),
            SassStats {
                registers: 40,
                spill_stores: 4,
                spill_loads: 12
            }
        );
    }
}
