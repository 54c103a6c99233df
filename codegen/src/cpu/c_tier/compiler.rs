//! The system C compiler: found once per process (`CC`, then `cc`, `gcc`, `clang` on the
//! `PATH`), asked for its identity (`--version`, part of every cache key), and run on one
//! kernel's source at a time to make a shared object, which is loaded from a private copy
//! of exactly the bytes that were checked.

use super::cache::{self, Cache};
use super::source::SYMBOL;
use crate::cpu::jit::KernelFn;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The flags every kernel is compiled with. `-fno-math-errno` lets `sqrt` vectorise (errno
/// is not a result); `-fno-trapping-math` assumes no floating-point trap handler. Neither
/// changes a NaN or an infinity; nothing like `-ffast-math` is used. `-ffp-contract=off`
/// keeps `a * b + c` two roundings, as eager and the Cranelift tier compute it (GNU C fuses
/// it by default: a contracted `x * y - max` was finite where eager's is not, as NVRTC's
/// `--fmad=false` and the CUDA emulator's flag record); `kiln_math.h` fuses where it means
/// to, through `kiln__fma`.
pub const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-fPIC",
    "-shared",
    "-w",
];

/// A C compiler that works on this machine.
#[derive(Clone, Debug)]
pub struct Compiler {
    /// the program run
    pub program: PathBuf,
    /// the first line of its `--version` (part of the cache key)
    pub identity: String,
}

/// Why a C kernel was not made.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CTierError {
    /// no C compiler was found, or it fails on a trivial source
    #[error("no working C compiler ({0})")]
    NoCompiler(String),
    /// the compiler rejected the kernel's source
    #[error("{kernel}: the C compiler failed: {stderr}")]
    Compile {
        /// the kernel
        kernel: String,
        /// what the compiler printed
        stderr: String,
    },
    /// the shared object could not be loaded or lacks the kernel
    #[error("{kernel}: loading the C kernel failed: {reason}")]
    Load {
        /// the kernel
        kernel: String,
        /// why
        reason: String,
    },
    /// a file of the build could not be written or read
    #[error("{kernel}: {reason}")]
    Io {
        /// the kernel
        kernel: String,
        /// what failed
        reason: String,
    },
}

/// The scratch directory for sources and objects, shared by every process (each file is
/// named by its process and removed after use).
fn scratch_dir() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join("kiln-c-scratch");
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(d)
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(Clone::clone)
}

/// A fresh path in the scratch directory.
fn scratch_path(ext: &str) -> Result<PathBuf, String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    Ok(scratch_dir()?.join(format!("p{}-k{n}.{ext}", std::process::id())))
}

impl Compiler {
    /// The compiler `CC` names, else the first of `cc`, `gcc`, `clang` that compiles a
    /// trivial shared object with [`FLAGS`] (found once per process).
    pub fn find() -> Result<&'static Compiler, CTierError> {
        static FOUND: OnceLock<Result<Compiler, String>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                let mut tried = Vec::new();
                let candidates: Vec<String> = match std::env::var("CC") {
                    Ok(cc) if !cc.trim().is_empty() => vec![cc],
                    _ => ["cc", "gcc", "clang"].map(String::from).to_vec(),
                };
                for c in candidates {
                    match Compiler::probe(&c) {
                        Ok(found) => return Ok(found),
                        Err(e) => tried.push(format!("{c}: {e}")),
                    }
                }
                Err(tried.join("; "))
            })
            .as_ref()
            .map_err(|e| CTierError::NoCompiler(e.clone()))
    }

    fn probe(program: &str) -> Result<Compiler, String> {
        let out = Command::new(program)
            .arg("--version")
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("--version exited with {}", out.status));
        }
        let identity = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let c = Compiler {
            program: PathBuf::from(program),
            identity,
        };
        c.build("probe", "int kiln_probe(void) { return 1; }\n")?;
        Ok(c)
    }

    /// Compiles `source` to a shared object; returns its bytes.
    fn build(&self, kernel: &str, source: &str) -> Result<Vec<u8>, String> {
        let src = scratch_path("c")?;
        let obj = scratch_path("so")?;
        std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
        let out = Command::new(&self.program)
            .args(FLAGS)
            .arg("-o")
            .arg(&obj)
            .arg(&src)
            .arg("-lm")
            .output()
            .map_err(|e| format!("{kernel}: running {}: {e}", self.program.display()));
        let _ = std::fs::remove_file(&src);
        let out = out?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&obj);
            let err = String::from_utf8_lossy(&out.stderr);
            let short: String = err.lines().take(12).collect::<Vec<_>>().join("\n");
            return Err(short);
        }
        let bytes = std::fs::read(&obj).map_err(|e| format!("{}: {e}", obj.display()));
        let _ = std::fs::remove_file(&obj);
        bytes
    }

    /// The cache key of `source` compiled by this compiler with [`FLAGS`].
    pub fn key(&self, source: &str) -> String {
        cache::key(&[
            source.as_bytes(),
            self.identity.as_bytes(),
            FLAGS.join(" ").as_bytes(),
        ])
    }
}

/// A C kernel made ready: its function, and how it was obtained.
pub struct Built {
    /// the kernel
    pub f: KernelFn,
    /// true when its object came from the on-disk cache
    pub cached: bool,
    /// the time the C compiler took (zero on a cache hit)
    pub compile_time: Duration,
}

/// The kernel of `source`: from `cache` when it holds a verified object for it, else
/// compiled (and stored there). The library stays loaded for the rest of the process.
pub fn build_kernel(
    compiler: &Compiler,
    cache: Option<&Cache>,
    kernel: &str,
    source: &str,
) -> Result<Built, CTierError> {
    let key = compiler.key(source);
    let hit = cache.and_then(|c| c.get(&key));
    let (bytes, cached, compile_time) = match hit {
        Some(b) => (b, true, Duration::ZERO),
        None => {
            let t = Instant::now();
            let b = compiler
                .build(kernel, source)
                .map_err(|stderr| CTierError::Compile {
                    kernel: kernel.to_string(),
                    stderr,
                })?;
            let took = t.elapsed();
            if let Some(c) = cache {
                // a cache that cannot be written only costs the next process a compile
                let _ = c.put(&key, &b);
            }
            (b, false, took)
        }
    };
    let f = load(kernel, &bytes)?;
    Ok(Built {
        f,
        cached,
        compile_time,
    })
}

/// The kernel of `source` from `cache`, if it holds a verified object for it (never
/// compiles): what a kernel's first call looks for, so that a process after the one that
/// compiled it starts on C code.
pub fn load_cached(
    compiler: &Compiler,
    cache: &Cache,
    kernel: &str,
    source: &str,
) -> Result<Option<KernelFn>, CTierError> {
    match cache.get(&compiler.key(source)) {
        Some(bytes) => load(kernel, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Loads a shared object from `bytes` (written to a private file first, so that what is
/// loaded is exactly what was checked) and finds the kernel in it.
fn load(kernel: &str, bytes: &[u8]) -> Result<KernelFn, CTierError> {
    let io = |reason: String| CTierError::Io {
        kernel: kernel.to_string(),
        reason,
    };
    let path = scratch_path("so").map_err(io)?;
    std::fs::write(&path, bytes).map_err(|e| io(format!("{}: {e}", path.display())))?;
    // SAFETY: the object was built by the C compiler from a kiln kernel source (or read
    // back from the cache after its checksum matched); it has no initialisers.
    let lib = unsafe { libloading::Library::new(&path) };
    let _ = std::fs::remove_file(&path);
    let lib = lib.map_err(|e| CTierError::Load {
        kernel: kernel.to_string(),
        reason: e.to_string(),
    })?;
    // SAFETY: every kernel source defines `SYMBOL` with the `KernelFn` signature.
    let f: KernelFn = unsafe {
        *lib.get::<KernelFn>(SYMBOL.as_bytes())
            .map_err(|e| CTierError::Load {
                kernel: kernel.to_string(),
                reason: e.to_string(),
            })?
    };
    // the code must outlive every kernel call: the library is never unloaded
    std::mem::forget(lib);
    Ok(f)
}
