//! Runs generated CUDA C kernels on the CPU, so the CUDA code generator is tested without a
//! GPU. The kernel source is compiled by `g++` (C++20) together with a small shim header
//! (`shim.h`) that emulates the CUDA features the generator uses; a generated `main` reads
//! the buffers, launches the grid (blocks one after another, one `std::thread` per CUDA
//! thread, `__syncthreads()` and warp shuffles through `std::barrier`s) and writes the
//! buffers back.
//!
//! Needs `g++` on the `PATH`. A launch that runs longer than 60 s is killed and reported as
//! a deadlock (a `__syncthreads()` or shuffle reached by only some threads).

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The shim header, written next to every kernel it compiles.
const SHIM: &str = include_str!("shim.h");
/// How long a launch may run before it is killed as a deadlock.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The C++ compiler.
const COMPILER: &str = "g++";
/// Lines of the kernel source quoted in a compilation error.
const QUOTED_LINES: usize = 20;
/// Characters of compiler or program output quoted in an error (the tail is kept).
const QUOTED_CHARS: usize = 8000;

/// One buffer of a launch: its bytes (f32 little-endian, or bool bytes 0/1), read and
/// written by the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmuBuffer {
    /// The buffer's contents; replaced by what the kernel left in them.
    pub bytes: Vec<u8>,
}

/// Runs kernel `name` of `source` over `grid` blocks of `block` threads, with the args
/// struct filled from `buffers` (`ptr[i]` points at `buffers[i].bytes`), `sizes` (ND
/// entries) and `strides` (NB rows of ND entries); the buffers' bytes are replaced by what
/// the kernel left in them.
///
/// Errors on mismatched argument counts, a missing `g++`, a compilation failure (with the
/// compiler's messages), a crashing kernel, or a launch still running after 60 s (a
/// deadlock).
pub fn emulate(
    source: &str,
    name: &str,
    block: u32,
    grid: u32,
    buffers: &mut [EmuBuffer],
    sizes: &[i64],
    strides: &[Vec<i64>],
) -> Result<(), String> {
    let launch = Launch {
        source,
        name,
        block,
        grid,
        sizes,
        strides,
    };
    launch.run(
        buffers,
        &Options {
            compiler: COMPILER,
            timeout: TIMEOUT,
        },
    )
}

/// Everything about a launch but its buffers.
struct Launch<'a> {
    source: &'a str,
    name: &'a str,
    block: u32,
    grid: u32,
    sizes: &'a [i64],
    strides: &'a [Vec<i64>],
}

/// How a launch is compiled and run (tests shorten the timeout).
struct Options<'a> {
    compiler: &'a str,
    timeout: Duration,
}

impl Launch<'_> {
    /// Compiles and runs the launch in a fresh temporary directory.
    fn run(&self, buffers: &mut [EmuBuffer], opts: &Options) -> Result<(), String> {
        self.check(buffers.len())?;
        let dir = TempDir::new()?;
        let pch = if opts.compiler == "g++" {
            precompiled_shim()
        } else {
            None
        };
        if pch.is_none() {
            write(&dir.0.join("shim.h"), SHIM.as_bytes())?;
        }
        write(&dir.0.join("main.cpp"), self.main_cpp().as_bytes())?;
        let files: Vec<String> = (0..buffers.len()).map(|i| format!("buf{i}.bin")).collect();
        for (file, buf) in files.iter().zip(buffers.iter()) {
            write(&dir.0.join(file), &buf.bytes)?;
        }
        self.compile(&dir.0, opts.compiler, pch.as_deref())?;
        self.execute(&dir.0, &files, opts.timeout)?;
        for (file, buf) in files.iter().zip(buffers.iter_mut()) {
            let bytes =
                fs::read(dir.0.join(file)).map_err(|e| format!("cannot read back {file}: {e}"))?;
            if bytes.len() != buf.bytes.len() {
                return Err(format!(
                    "{file} came back with {} bytes, not {}",
                    bytes.len(),
                    buf.bytes.len()
                ));
            }
            buf.bytes = bytes;
        }
        Ok(())
    }

    /// Checks the launch shape and that the argument counts agree.
    fn check(&self, buffers: usize) -> Result<(), String> {
        let ident = |s: &str| {
            let mut chars = s.chars();
            chars
                .next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        };
        if !ident(self.name) {
            return Err(format!("kernel name `{}` is not a C identifier", self.name));
        }
        if !(1..=1024).contains(&self.block) || self.grid == 0 {
            return Err(format!(
                "cannot launch {} blocks of {} threads (1..=1024 threads, ≥ 1 block)",
                self.grid, self.block
            ));
        }
        if buffers == 0 || self.sizes.is_empty() {
            return Err(format!(
                "a launch needs ≥ 1 buffer and ≥ 1 size, got {buffers} and {}",
                self.sizes.len()
            ));
        }
        if self.strides.len() != buffers {
            return Err(format!(
                "{} stride rows for {buffers} buffers",
                self.strides.len()
            ));
        }
        match self
            .strides
            .iter()
            .position(|row| row.len() != self.sizes.len())
        {
            Some(i) => Err(format!(
                "stride row {i} has {} entries for {} sizes",
                self.strides[i].len(),
                self.sizes.len()
            )),
            None => Ok(()),
        }
    }

    /// The translation unit: the shim, the kernel source, and a `main` that reads the
    /// buffers from the files named on its command line, launches, and writes them back.
    fn main_cpp(&self) -> String {
        let (name, nb, nd) = (self.name, self.strides.len(), self.sizes.len());
        let sizes: String = (self.sizes.iter().enumerate())
            .map(|(d, &v)| format!("    a.size[{d}] = {};\n", c_i64(v)))
            .collect();
        let strides: String = (self.strides.iter().enumerate())
            .flat_map(|(b, row)| row.iter().enumerate().map(move |(d, &v)| (b, d, v)))
            .map(|(b, d, v)| format!("    a.stride[{b}][{d}] = {};\n", c_i64(v)))
            .collect();
        let (grid, block) = (self.grid, self.block);
        format!(
            r#"#include "shim.h"
#line 1 "kernel.cu"
{source}
#line 1 "kiln_main.cpp"
static_assert(sizeof({name}_args::ptr) == {nb} * sizeof(void*), "{name}_args::ptr must hold {nb} buffers");
static_assert(sizeof({name}_args::size) == {nd} * sizeof(long long), "{name}_args::size must hold {nd} sizes");
static_assert(sizeof({name}_args::stride) == {nb} * {nd} * sizeof(long long), "{name}_args::stride must be [{nb}][{nd}]");

int main(int argc, char** argv) {{
    if (argc != {nb} + 1) {{
        std::fprintf(stderr, "kiln emulation: expected {nb} buffer files\n");
        return 2;
    }}
    std::vector<std::vector<unsigned char>> bufs({nb});
    std::size_t lens[{nb}];
    {name}_args a;
    for (int i = 0; i < {nb}; ++i) {{
        bufs[i] = kiln_emu::read_file(argv[i + 1], lens[i]);
        a.ptr[i] = bufs[i].data();
    }}
{sizes}{strides}    kiln_emu::launch({grid}u, {block}u, [&] {{ {name}(a); }});
    for (int i = 0; i < {nb}; ++i) kiln_emu::write_file(argv[i + 1], bufs[i], lens[i]);
    return 0;
}}
"#,
            source = self.source,
        )
    }

    /// Compiles `main.cpp` in `dir` to `prog` (finding `shim.h` in `dir`, or precompiled in
    /// `pch`).
    fn compile(&self, dir: &Path, compiler: &str, pch: Option<&Path>) -> Result<(), String> {
        let mut cmd = Command::new(compiler);
        cmd.args(FLAGS);
        if let Some(p) = pch {
            cmd.arg("-I").arg(p);
        }
        let out = cmd
            .args(["-o", "prog", "main.cpp"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => format!(
                    "{compiler} is needed for the CUDA emulation tests (it compiles the kernels \
                     against shim.h), but it was not found on the PATH"
                ),
                _ => format!("cannot run {compiler}: {e}"),
            })?;
        if out.status.success() {
            return Ok(());
        }
        let head: Vec<&str> = self.source.lines().take(QUOTED_LINES).collect();
        Err(format!(
            "{compiler} failed to compile kernel `{}` ({}):\n{}\nthe kernel source (kernel.cu) begins:\n{}",
            self.name,
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr)),
            head.join("\n")
        ))
    }

    /// Runs `prog` in `dir` on the buffer files, killing it after `timeout`.
    fn execute(&self, dir: &Path, files: &[String], timeout: Duration) -> Result<(), String> {
        let log_path = dir.join("output.txt");
        let log = File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("cannot share the output log: {e}"))?;
        let mut child = Command::new(dir.join("prog"))
            .args(files)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot start the emulated kernel `{}`: {e}", self.name))?;
        let status = wait(&mut child, timeout)?;
        let log = String::from_utf8_lossy(&fs::read(&log_path).unwrap_or_default()).into_owned();
        let output = tail(&log);
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!("the emulated kernel `{}` failed ({s}):\n{output}", self.name)),
            None => Err(format!(
                "the emulated kernel `{}` timed out after {} s and was killed: a deadlock, probably a \
                 __syncthreads() or warp shuffle reached by only some threads\n{output}",
                self.name,
                timeout.as_secs_f64()
            )),
        }
    }
}

/// Waits for `child`; kills it and returns `None` once `timeout` has passed.
fn wait(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>, String> {
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("cannot wait for the emulated kernel: {e}"))?
        {
            return Ok(Some(status));
        }
        if start.elapsed() >= timeout {
            // The kill fails only if the child has just exited; either way it is gone after `wait`.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// `v` as a C `long long` literal (`i64::MIN` has none).
fn c_i64(v: i64) -> String {
    match v {
        i64::MIN => "(-9223372036854775807LL - 1)".to_string(),
        _ => format!("{v}LL"),
    }
}

/// The last [`QUOTED_CHARS`] characters of `text`.
fn tail(text: &str) -> &str {
    let skip = text.chars().count().saturating_sub(QUOTED_CHARS);
    text.char_indices()
        .nth(skip)
        .map_or("", |(i, _)| &text[i..])
}

/// Writes `bytes` to `path`.
fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The g++ flags of every compile (the precompiled shim must be built with the same); no
/// contraction of products and sums into fused multiply-adds, as NVRTC is told
/// (`nvrtc::NVRTC_OPTIONS`).
const FLAGS: [&str; 5] = ["-std=c++20", "-O1", "-pthread", "-w", "-ffp-contract=off"];

/// A directory holding `shim.h` and its precompiled `shim.h.gch` (g++ reads the `.gch`
/// instead of parsing `<thread>` and `<barrier>` again: ~0.5 s per kernel instead of ~2 s),
/// built once and reused by later processes: under `KILN_EMU_CACHE` (the tests point it into
/// `target/`) or the system's temporary directory, named after a hash of the shim. `None`
/// when it cannot be built; kernels then compile against the plain header.
fn precompiled_shim() -> Option<PathBuf> {
    static PCH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PCH.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        SHIM.hash(&mut h);
        FLAGS.hash(&mut h);
        let base = std::env::var_os("KILN_EMU_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("kiln-cuda-emu-pch-{:016x}", h.finish()));
        if dir.join("shim.h.gch").is_file() {
            return Some(dir);
        }
        let tmp = base.join(format!(
            "kiln-cuda-emu-pch-{:016x}-{}",
            h.finish(),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).ok()?;
        write(&tmp.join("shim.h"), SHIM.as_bytes()).ok()?;
        let ok = Command::new("g++")
            .args(FLAGS)
            .args(["-x", "c++-header", "shim.h", "-o", "shim.h.gch"])
            .current_dir(&tmp)
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let _ = fs::remove_dir_all(&tmp);
            return None;
        }
        // another process may have won the race: then use its directory
        if fs::rename(&tmp, &dir).is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        dir.join("shim.h.gch").is_file().then_some(dir)
    })
    .clone()
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates a directory named after the process id and a per-process counter.
    fn new() -> Result<Self, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("kiln-cuda-emu-{}-{n}", std::process::id()));
        // A leftover from an earlier process that had the same id.
        let _ = fs::remove_dir_all(&path);
        fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_buffer(values: &[f32]) -> EmuBuffer {
        EmuBuffer {
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    fn f32s(buf: &EmuBuffer) -> Vec<f32> {
        buf.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn with_timeout(
        source: &str,
        name: &str,
        block: u32,
        buffers: &mut [EmuBuffer],
        secs: u64,
    ) -> Result<(), String> {
        let strides = vec![vec![1]; buffers.len()];
        let launch = Launch {
            source,
            name,
            block,
            grid: 1,
            sizes: &[32],
            strides: &strides,
        };
        launch.run(
            buffers,
            &Options {
                compiler: COMPILER,
                timeout: Duration::from_secs(secs),
            },
        )
    }

    const POINTWISE: &str = r#"
struct pw_args {
    void* ptr[2];
    long long size[1];
    long long stride[2][1];
};
extern "C" __global__ void __launch_bounds__(64) pw(pw_args a) {
    const float* __restrict__ x = (const float*)a.ptr[0];
    float* __restrict__ y = (float*)a.ptr[1];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.size[0];
         i += (long long)blockDim.x * gridDim.x) {
        y[i * a.stride[1][0]] = x[i * a.stride[0][0]] * 2.0f + 1.0f;
    }
}
"#;

    #[test]
    fn grid_stride_pointwise() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 100.0).collect();
        let mut bufs = [f32_buffer(&x), f32_buffer(&[0.0; 1000])];
        emulate(
            POINTWISE,
            "pw",
            64,
            3,
            &mut bufs,
            &[1000],
            &[vec![1], vec![1]],
        )
        .unwrap();
        let want: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
        assert_eq!(f32s(&bufs[0]), x);
        assert_eq!(f32s(&bufs[1]), want);
    }

    const ROW_SUM: &str = r#"
struct rsum_args {
    void* ptr[2];
    long long size[2];
    long long stride[2][2];
};
static __device__ __forceinline__ double warp_sum(double v) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void __launch_bounds__(256) rsum(rsum_args a) {
    const float* __restrict__ x = (const float*)a.ptr[0];
    float* __restrict__ y = (float*)a.ptr[1];
    __shared__ double red[32];
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const int warps = blockDim.x / warpSize;
    for (long long r = blockIdx.x; r < a.size[0]; r += gridDim.x) {
        double acc = 0.0;
        for (long long c = threadIdx.x; c < a.size[1]; c += blockDim.x)
            acc += (double)x[r * a.stride[0][0] + c * a.stride[0][1]];
        acc = warp_sum(acc);
        if (lane == 0) red[warp] = acc;
        __syncthreads();
        if (warp == 0) {
            double v = warp_sum(lane < warps ? red[lane] : 0.0);
            if (lane == 0) y[r * a.stride[1][0]] = (float)v;
        }
        __syncthreads();
    }
}
"#;

    #[test]
    fn block_per_row_sum_reduction() {
        let (rows, cols) = (5usize, 777usize);
        // Multiples of 2^-10 in [-1, 1): every partial sum is exact, in any order, in f32 too.
        let mut state = 12345u32;
        let x: Vec<f32> = (0..rows * cols)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 21) as f32 - 1024.0) / 1024.0
            })
            .collect();
        let mut bufs = [f32_buffer(&x), f32_buffer(&[f32::NAN; 5])];
        let strides = [vec![cols as i64, 1], vec![1, 0]];
        emulate(
            ROW_SUM,
            "rsum",
            256,
            2,
            &mut bufs,
            &[rows as i64, cols as i64],
            &strides,
        )
        .unwrap();
        for (r, got) in f32s(&bufs[1]).into_iter().enumerate() {
            let want: f64 = x[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .sum();
            assert!(
                (f64::from(got) - want).abs() <= 1e-9 * want.abs(),
                "row {r}: {got} vs {want}"
            );
        }
    }

    const WARP_MAX: &str = r#"
struct wmax_args {
    void* ptr[2];
    long long size[1];
    long long stride[2][1];
};
extern "C" __global__ void wmax(wmax_args a) {
    const float* x = (const float*)a.ptr[0];
    float* y = (float*)a.ptr[1];
    float v = x[threadIdx.x];
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
    y[threadIdx.x] = v;
}
"#;

    #[test]
    fn shfl_xor_butterfly_max() {
        // Two warps, so each must reduce on its own.
        let x: Vec<f32> = (0..64).map(|i| ((i * 37) % 64) as f32 - 20.0).collect();
        let mut bufs = [f32_buffer(&x), f32_buffer(&[0.0; 64])];
        emulate(
            WARP_MAX,
            "wmax",
            64,
            1,
            &mut bufs,
            &[64],
            &[vec![1], vec![1]],
        )
        .unwrap();
        let got = f32s(&bufs[1]);
        for w in 0..2 {
            let want = x[w * 32..(w + 1) * 32]
                .iter()
                .copied()
                .fold(f32::MIN, f32::max);
            assert!(
                got[w * 32..(w + 1) * 32].iter().all(|&v| v == want),
                "warp {w}: {got:?}"
            );
        }
    }

    const POSITIVE: &str = r#"
struct pos_args {
    void* ptr[2];
    long long size[1];
    long long stride[2][1];
};
extern "C" __global__ void pos(pos_args a) {
    const float* x = (const float*)a.ptr[0];
    unsigned char* y = (unsigned char*)a.ptr[1];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.size[0];
         i += (long long)blockDim.x * gridDim.x) {
        bool p = x[i * a.stride[0][0]] > 0.0f;
        y[i * a.stride[1][0]] = p ? 1 : 0;
    }
}
"#;

    #[test]
    fn bool_output_buffer() {
        let mut x: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) / 7.0).collect();
        x[3] = f32::NAN;
        x[4] = f32::INFINITY;
        x[5] = -0.0;
        let mut bufs = [
            f32_buffer(&x),
            EmuBuffer {
                bytes: vec![7; 100],
            },
        ];
        emulate(
            POSITIVE,
            "pos",
            32,
            2,
            &mut bufs,
            &[100],
            &[vec![1], vec![1]],
        )
        .unwrap();
        let want: Vec<u8> = x.iter().map(|&v| u8::from(v > 0.0)).collect();
        assert_eq!(bufs[1].bytes, want);
    }

    const MATH: &str = r#"
struct math_args {
    void* ptr[1];
    long long size[1];
    long long stride[1][1];
};
extern "C" __global__ void math(math_args a) {
    float* y = (float*)a.ptr[0];
    if (threadIdx.x != 0) return;
    float x = 0.75f;
    float r[] = {
        expf(x), logf(x), sqrtf(x), rsqrtf(x), tanhf(x), erff(x), erfcf(x), sinf(x), cosf(x),
        powf(x, 2.5f), fabsf(-x), fmaxf(x, 1.0f), fminf(x, 1.0f), floorf(-x), ceilf(x),
        fmaf(x, 2.0f, 1.0f), normcdff(1.0f), (float)exp((double)x), (float)log((double)x),
        (float)sqrt((double)x), (float)fma((double)x, 2.0, 1.0),
        (float)(isnan(NAN) && !isnan(x)), (float)(isinf(-INFINITY) && !isinf(x)),
        __int_as_float(0x3f800000), (float)__float_as_int(1.0f)};
    for (int i = 0; i < (int)(sizeof r / sizeof r[0]); ++i) y[i] = r[i];
}
"#;

    #[test]
    fn math_functions() {
        let mut bufs = [f32_buffer(&[0.0; 25])];
        emulate(MATH, "math", 32, 1, &mut bufs, &[1], &[vec![0]]).unwrap();
        let x = 0.75f32;
        let want = [
            x.exp(),
            x.ln(),
            x.sqrt(),
            1.0 / x.sqrt(),
            x.tanh(),
            0.711_155_6,
            0.288_844_4,
            x.sin(),
            x.cos(),
            x.powf(2.5),
            x,
            1.0,
            x,
            -1.0,
            1.0,
            2.5,
            0.841_344_7,
            x.exp(),
            x.ln(),
            x.sqrt(),
            2.5,
            1.0,
            1.0,
            1.0,
            1_065_353_216.0,
        ];
        for (i, (got, want)) in f32s(&bufs[0]).into_iter().zip(want).enumerate() {
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "result {i}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn divergent_syncthreads_times_out() {
        let source = r#"
struct dv_args { void* ptr[1]; long long size[1]; long long stride[1][1]; };
extern "C" __global__ void dv(dv_args a) {
    if (threadIdx.x < 16) __syncthreads();
    ((float*)a.ptr[0])[threadIdx.x] = 1.0f;
}
"#;
        let mut bufs = [f32_buffer(&[0.0; 32])];
        let err = with_timeout(source, "dv", 32, &mut bufs, 3).unwrap_err();
        assert!(
            err.contains("timed out") && err.contains("deadlock"),
            "{err}"
        );
    }

    #[test]
    fn syntax_error_reports_compiler_message() {
        let source = r#"
struct bad_args { void* ptr[1]; long long size[1]; long long stride[1][1]; };
extern "C" __global__ void bad(bad_args a) {
    float x = ;
}
"#;
        let mut bufs = [f32_buffer(&[0.0; 32])];
        let err = emulate(source, "bad", 32, 1, &mut bufs, &[32], &[vec![1]]).unwrap_err();
        assert!(
            err.contains("kernel.cu:4") && err.contains("expected primary-expression"),
            "{err}"
        );
        assert!(
            err.contains("struct bad_args"),
            "the source is quoted: {err}"
        );
    }

    #[test]
    fn mismatched_args_struct_fails_to_compile() {
        let mut bufs = [f32_buffer(&[0.0; 8])];
        let err = emulate(POINTWISE, "pw", 32, 1, &mut bufs, &[8], &[vec![1]]).unwrap_err();
        assert!(err.contains("pw_args::ptr must hold 1 buffers"), "{err}");
    }

    #[test]
    fn missing_compiler_is_explained() {
        let launch = Launch {
            source: POINTWISE,
            name: "pw",
            block: 32,
            grid: 1,
            sizes: &[1],
            strides: &[vec![1], vec![1]],
        };
        let mut bufs = [f32_buffer(&[0.0]), f32_buffer(&[0.0])];
        let opts = Options {
            compiler: "kiln-no-such-compiler",
            timeout: TIMEOUT,
        };
        let err = launch.run(&mut bufs, &opts).unwrap_err();
        assert!(
            err.contains("kiln-no-such-compiler is needed for the CUDA emulation tests"),
            "{err}"
        );
    }

    #[test]
    fn argument_counts_are_checked() {
        let mut bufs = [f32_buffer(&[0.0]), f32_buffer(&[0.0])];
        let err = emulate(POINTWISE, "pw", 32, 1, &mut bufs, &[1], &[vec![1]]).unwrap_err();
        assert!(err.contains("1 stride rows for 2 buffers"), "{err}");
        let err = emulate(
            POINTWISE,
            "pw",
            32,
            1,
            &mut bufs,
            &[1],
            &[vec![1], vec![1, 1]],
        )
        .unwrap_err();
        assert!(
            err.contains("stride row 1 has 2 entries for 1 sizes"),
            "{err}"
        );
        let err = emulate(POINTWISE, "pw", 0, 1, &mut bufs, &[1], &[vec![1], vec![1]]).unwrap_err();
        assert!(err.contains("cannot launch"), "{err}");
        let err = emulate(
            POINTWISE,
            "p w",
            32,
            1,
            &mut bufs,
            &[1],
            &[vec![1], vec![1]],
        )
        .unwrap_err();
        assert!(err.contains("not a C identifier"), "{err}");
    }
}
