//! The real CUDA device: [`DriverGpu`] implements [`GpuDevice`] through the CUDA driver
//! API and cuBLAS, both reached through cudarc with dynamic loading (never linked), so
//! kiln builds and runs on machines without CUDA and only this layer needs a GPU.
//!
//! # Presence first
//!
//! cudarc panics when it has to call into a library it cannot load. So
//! [`DriverGpu::open`] first asks whether `libcuda.so.1` can be loaded at all, and creates
//! the context inside [`std::panic::catch_unwind`] as a second guard; any failure there
//! (no driver, no device, an ordinal past the last device) is a [`GpuError`], never a
//! panic. cuBLAS is checked the same way, lazily, at the first [`GpuDevice::gemm`]
//! (`KILN_CUBLAS`, the library file or its directory, is opened by absolute path first,
//! as NVRTC's `KILN_NVRTC` is: see [`super::nvrtc`]).
//!
//! # Stream order
//!
//! Each device has one context (the device's primary context) and one stream. Uploads,
//! launches and GEMMs are queued on that stream and run in the order they were queued;
//! [`GpuDevice::download`] queues its copy and then waits for the stream, so it sees all
//! earlier work without the caller synchronising. Every call binds the context to the
//! calling thread first, so the device may be used from any thread. While one thread
//! captures a stream, the other threads' stream operations on that GPU wait ([`CaptureGate`],
//! one per GPU and process: every [`DriverGpu`] of a GPU shares its primary context, where
//! some calls would break any stream's capture).
//!
//! # Memory
//!
//! Device memory comes from a [`CachingAllocator`] over `cuMemAlloc`/`cuMemFree`, one per
//! device, with the stream's handle as the stream id: a dropped buffer goes back to the
//! cache and is reused by later allocations on the same stream, which stream order makes
//! safe without synchronising. Memory goes back to the driver only through
//! [`DriverGpu::empty_cache`] (or when an allocation fails and the allocator empties its
//! cache to retry), and when the device is dropped.
//!
//! # Kernels
//!
//! A [`CudaKernel`] is compiled to PTX by NVRTC ([`compile_ptx_cached`], which also caches
//! on disk) for the virtual architecture matching the device ([`compute_arch`]: the largest
//! of a fixed list not above the device's compute capability; the driver JIT-compiles the
//! PTX for the real GPU), loaded as a module, and cached per device, keyed by the kernel's
//! name and a hash of its source. A launch passes the kernel's one by-value argument struct
//! as one kernel parameter: a pointer to [`KernelLaunch::arg_words`].
//!
//! # GEMM
//!
//! [`Gemm`] is row-major and cuBLAS column-major. The same memory read row-major with row
//! stride `ld` and read column-major with leading dimension `ld` gives transposed matrices,
//! so the product is computed as `Cᵀ = op(B)ᵀ · op(A)ᵀ`
//! ([`super::gemm_args::cublas_gemm_args`] has the proof), one `cublasSgemmStridedBatched` on the device's stream.

use super::capture_gate::CaptureGate;
use super::gemm_args::cublas_gemm_args;
use super::gpu::{
    DevicePtr, Gemm, GpuBuffer, GpuCounters, GpuDevice, GpuError, GpuGraph, KernelLaunch,
};
use super::nvrtc::{compile_ptx_cached, WHEEL_VERSION};
use super::CudaKernel;
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use kiln_runtime::device::{CachingAllocator, DeviceAllocStats, DeviceBuffer, DeviceMemory};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Why there is no driver, and what to do about it.
const NO_DRIVER: &str = "no CUDA driver: libcuda.so.1 not found; this needs an NVIDIA GPU with \
     its driver installed (libcuda.so.1 comes with the driver, not with a pip wheel or the CUDA \
     toolkit), on the loader's path";

/// The PyPI package and version cuBLAS is installed from (CUDA 12.9, as cudarc's
/// `cuda-12090` feature).
pub const CUBLAS_WHEEL: &str = "nvidia-cublas-cu12==12.9.1.4";

/// The virtual architectures kernels are compiled for: `(capability × 10, arch)`, ascending.
const ARCHES: [(i32, &str); 8] = [
    (70, "compute_70"),
    (75, "compute_75"),
    (80, "compute_80"),
    (86, "compute_86"),
    (89, "compute_89"),
    (90, "compute_90"),
    (100, "compute_100"),
    (120, "compute_120"),
];

/// The NVRTC architecture for a device of compute capability `major.minor`: the largest in
/// a fixed list (`compute_70` … `compute_120`) not above it (PTX runs on later GPUs, JIT
/// compiled by the driver); `None` below 7.0.
pub fn compute_arch(major: i32, minor: i32) -> Option<&'static str> {
    let cc = major * 10 + minor;
    ARCHES
        .iter()
        .rev()
        .find(|(a, _)| *a <= cc)
        .map(|(_, name)| *name)
}

/// The capture gate of GPU `ordinal`, shared by every [`DriverGpu`] of this process on it.
fn device_gate(ordinal: usize) -> Arc<CaptureGate> {
    static GATES: Mutex<std::collections::BTreeMap<usize, Arc<CaptureGate>>> =
        Mutex::new(std::collections::BTreeMap::new());
    GATES.lock().entry(ordinal).or_default().clone()
}

/// `cuMemAlloc`/`cuMemFree` for the caching allocator, with the context bound to the
/// calling thread. Both go through the device's capture gate: a free synchronises the
/// device, which breaks another thread's capture (on an H100, cuBLAS then failed a captured
/// GEMM with `CUBLAS_STATUS_EXECUTION_FAILED` now and then while other tests' devices were
/// dropped).
struct DriverMemory {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    gate: Arc<CaptureGate>,
}

impl DeviceMemory for DriverMemory {
    fn allocate(&self, bytes: usize) -> Result<u64, String> {
        let _stream_use = self.gate.enter();
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // SAFETY: the context is current; the memory is handed out uninitialised, which
        // the trait allows (contents unspecified).
        unsafe { result::malloc_sync(bytes) }.map_err(|e| e.to_string())
    }

    fn free(&self, ptr: u64, _bytes: usize) {
        let _stream_use = self.gate.enter();
        // the trait cannot report errors: a failure here leaks the block (and the
        // context's destruction frees it at the end)
        if self.ctx.bind_to_thread().is_ok() && self.stream.synchronize().is_ok() {
            // SAFETY: `ptr` came from `malloc_sync` in this context and is no longer used:
            // it was in the cache (no live buffer) and the work queued on the stream, the
            // only stream using it, has finished.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
}

/// A block of device memory from a [`DriverGpu`]: it goes back to the device's cache when
/// dropped.
#[derive(Debug)]
pub struct DriverBuffer(DeviceBuffer<DriverMemory>);

impl GpuBuffer for DriverBuffer {
    fn ptr(&self) -> DevicePtr {
        self.0.ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A loaded module and its kernel function; unloaded on drop (through the capture gate:
/// loading and unloading modules may synchronise the device).
struct LoadedKernel {
    ctx: Arc<CudaContext>,
    gate: Arc<CaptureGate>,
    module: sys::CUmodule,
    func: sys::CUfunction,
}

// SAFETY: module and function handles are plain driver handles, valid in any thread that
// has the context current (every use binds it first); the driver API is thread safe.
unsafe impl Send for LoadedKernel {}
// SAFETY: as above; launching one function from several threads is allowed.
unsafe impl Sync for LoadedKernel {}

impl Drop for LoadedKernel {
    fn drop(&mut self) {
        let _stream_use = self.gate.enter();
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded in this context and is unloaded once; its
            // function is dropped with it.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// A cuBLAS handle bound to the device's stream; destroyed on drop (through the capture
/// gate: `cublasDestroy` synchronises the device).
struct BlasHandle {
    ctx: Arc<CudaContext>,
    gate: Arc<CaptureGate>,
    handle: cudarc::cublas::sys::cublasHandle_t,
}

// SAFETY: the handle is only used under the device's mutex (one thread at a time), with the
// context bound to that thread.
unsafe impl Send for BlasHandle {}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        let _stream_use = self.gate.enter();
        // not cudarc's CudaBlas: its drop unwraps the destroy's result (a panic)
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the handle was created once and is destroyed once.
            let _ = unsafe { cudarc::cublas::result::destroy_handle(self.handle) };
        }
    }
}

/// A CUDA device through the driver API (see the [module doc](self)): one context, one
/// stream, a caching allocator, a kernel cache and a lazily created cuBLAS handle.
pub struct DriverGpu {
    /// `cuda:N`, for errors
    device: String,
    /// `cuda:N (NAME)`, for [`GpuDevice::name`]
    long_name: String,
    /// NVRTC's target for this device
    arch: &'static str,
    /// compute capability
    capability: (i32, i32),
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    memory: CachingAllocator<DriverMemory>,
    /// (name, hash of source) -> the loaded kernel
    kernels: Mutex<HashMap<(String, u64), Arc<LoadedKernel>>>,
    blas: Mutex<Option<BlasHandle>>,
    /// launches and GEMMs run (or queued), for [`GpuDevice::counters`]
    launches: Arc<AtomicU64>,
    gemms: Arc<AtomicU64>,
    /// true while the stream is being captured
    capturing: AtomicBool,
    /// keeps other threads off the stream while one captures it
    gate: Arc<CaptureGate>,
    /// launches and GEMMs recorded since the capture began
    recorded: (AtomicU64, AtomicU64),
}

impl std::fmt::Debug for DriverGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverGpu")
            .field("device", &self.long_name)
            .field("arch", &self.arch)
            .finish_non_exhaustive()
    }
}

/// The message of a caught panic (cudarc panics when a library it needs cannot be loaded;
/// the NCCL backend of `kiln::distributed` reports these too).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

impl DriverGpu {
    /// Opens device `ordinal`: its primary context, a new stream, its name and compute
    /// capability. An error (never a panic) when the driver library is missing, there is
    /// no such device, or the device is older than compute capability 7.0.
    pub fn open(ordinal: usize) -> Result<DriverGpu, GpuError> {
        let device = format!("cuda:{ordinal}");
        let fail = |reason: String| GpuError {
            device: device.clone(),
            op: "open".to_string(),
            reason,
        };
        // SAFETY: only tries to open the library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return Err(fail(NO_DRIVER.to_string()));
        }
        let gate = device_gate(ordinal);
        // making the stream is no stream work, but waits out a capture all the same
        let opening = gate.enter();
        let opened = std::panic::catch_unwind(move || -> Result<_, String> {
            let ctx = CudaContext::new(ordinal)
                .map_err(|e| format!("no device: cannot create a context on it: {e}"))?;
            // SAFETY: kiln never uses cudarc's CudaSlice, whose reads and writes the events
            // track; without tracking, the first stream of a context no longer synchronises
            // the whole context, which fails while another device value captures a stream.
            unsafe { ctx.disable_event_tracking() };
            let name = ctx.name().map_err(|e| format!("no device name: {e}"))?;
            let capability = ctx
                .compute_capability()
                .map_err(|e| format!("no compute capability: {e}"))?;
            let stream = ctx
                .new_stream()
                .map_err(|e| format!("cannot create a stream: {e}"))?;
            Ok((ctx, stream, name, capability))
        });
        drop(opening);
        let (ctx, stream, name, capability) = match opened {
            Ok(Ok(v)) => v,
            Ok(Err(reason)) => return Err(fail(reason)),
            Err(p) => {
                return Err(fail(format!(
                    "no device: the CUDA driver failed: {}",
                    panic_message(p.as_ref())
                )))
            }
        };
        let arch = compute_arch(capability.0, capability.1).ok_or_else(|| {
            fail(format!(
                "{name} has compute capability {}.{}; kiln needs 7.0 or later",
                capability.0, capability.1
            ))
        })?;
        let memory = CachingAllocator::new(DriverMemory {
            ctx: ctx.clone(),
            stream: stream.clone(),
            gate: gate.clone(),
        });
        Ok(DriverGpu {
            long_name: format!("{device} ({name})"),
            device,
            arch,
            capability,
            ctx,
            stream,
            memory,
            kernels: Mutex::new(HashMap::new()),
            blas: Mutex::new(None),
            launches: Arc::new(AtomicU64::new(0)),
            gemms: Arc::new(AtomicU64::new(0)),
            capturing: AtomicBool::new(false),
            gate,
            recorded: (AtomicU64::new(0), AtomicU64::new(0)),
        })
    }

    /// The device's compute capability, `(major, minor)`.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// The NVRTC architecture kernels are compiled for (`compute_90`).
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The caching allocator's counters.
    pub fn stats(&self) -> DeviceAllocStats {
        self.memory.stats()
    }

    /// Gives the allocator's cached blocks back to the driver (live buffers stay).
    pub fn empty_cache(&self) {
        self.memory.empty_cache();
    }

    /// A [`GpuError`] on this device.
    fn err(&self, op: impl Into<String>, reason: impl std::fmt::Display) -> GpuError {
        GpuError {
            device: self.device.clone(),
            op: op.into(),
            reason: reason.to_string(),
        }
    }

    /// Makes the context current on this thread.
    fn bind(&self, op: &str) -> Result<(), GpuError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.err(op, format!("cannot bind the context: {e}")))
    }

    /// The loaded kernel, compiled and loaded on first use.
    fn kernel(&self, kernel: &CudaKernel) -> Result<Arc<LoadedKernel>, GpuError> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        kernel.source.hash(&mut h);
        let key = (kernel.name.clone(), h.finish());
        if let Some(k) = self.kernels.lock().get(&key) {
            return Ok(k.clone());
        }
        // compiled outside the lock: another thread may compile the same kernel, and the
        // first one inserted wins
        let op = format!("compile kernel {} for {}", kernel.name, self.arch);
        let (ptx, _) = compile_ptx_cached(kernel, self.arch).map_err(|e| self.err(&op, e))?;
        let op = format!("load kernel {}", kernel.name);
        let image = CString::new(ptx).map_err(|_| self.err(&op, "the PTX holds a NUL byte"))?;
        let name = CString::new(kernel.name.clone())
            .map_err(|_| self.err(&op, "the kernel's name holds a NUL byte"))?;
        let _stream_use = self.gate.enter();
        self.bind(&op)?;
        // SAFETY: the image is a NUL-terminated PTX string, alive for the call (the driver
        // copies it); the context is current.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| {
                self.err(
                    &op,
                    format!(
                        "the driver rejected the PTX ({e}); a driver older than NVRTC \
                         {WHEEL_VERSION} cannot load its PTX"
                    ),
                )
            })?;
        // owned at once, so an error below unloads it
        let mut loaded = LoadedKernel {
            ctx: self.ctx.clone(),
            gate: self.gate.clone(),
            module,
            func: std::ptr::null_mut(),
        };
        // SAFETY: the module was just loaded and is alive (owned by `loaded`).
        loaded.func = unsafe { result::module::get_function(module, name) }
            .map_err(|e| self.err(&op, format!("no entry point {}: {e}", kernel.name)))?;
        Ok(self
            .kernels
            .lock()
            .entry(key)
            .or_insert(Arc::new(loaded))
            .clone())
    }

    /// The cuBLAS handle, created on first use (after checking cuBLAS can be loaded).
    fn blas<'a>(
        &self,
        guard: &'a mut Option<BlasHandle>,
        op: &str,
    ) -> Result<&'a BlasHandle, GpuError> {
        if guard.is_none() {
            load_cublas().map_err(|r| self.err(op, r))?;
            self.bind(op)?;
            let handle = cudarc::cublas::result::create_handle()
                .map_err(|e| self.err(op, format!("cannot create a cuBLAS handle: {e}")))?;
            let h = BlasHandle {
                ctx: self.ctx.clone(),
                gate: self.gate.clone(),
                handle,
            };
            // SAFETY: a live handle and the device's live stream (kept as long as the handle,
            // which the device owns).
            unsafe { cudarc::cublas::result::set_stream(h.handle, self.stream.cu_stream() as _) }
                .map_err(|e| self.err(op, format!("cannot set cuBLAS's stream: {e}")))?;
            *guard = Some(h);
        }
        Ok(guard.as_ref().expect("set above"))
    }
}

/// Loads cuBLAS once: `KILN_CUBLAS` (the library file, or the directory holding
/// `libcublas.so.12` and `libcublasLt.so.12`) by absolute path, then cudarc's lookup by
/// name; the error says how to install it.
fn load_cublas() -> Result<(), String> {
    static LOADED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("KILN_CUBLAS") {
                let path = std::path::PathBuf::from(p);
                let (dir, file) = if path.is_dir() {
                    (path.clone(), path.join("libcublas.so.12"))
                } else {
                    (
                        path.parent().map(|d| d.to_path_buf()).unwrap_or_default(),
                        path.clone(),
                    )
                };
                // cuBLAS needs cuBLASLt: opened first from the same directory, when there
                for f in [dir.join("libcublasLt.so.12"), file] {
                    if !f.exists() && f.file_name() == Some("libcublasLt.so.12".as_ref()) {
                        continue;
                    }
                    // SAFETY: loading runs the library's initialisers, which have no
                    // preconditions; it stays loaded for the process (leaked on purpose).
                    match unsafe { libloading::Library::new(&f) } {
                        Ok(lib) => std::mem::forget(lib),
                        Err(e) => {
                            return Err(format!(
                                "KILN_CUBLAS={} cannot be loaded: {e}",
                                path.display()
                            ))
                        }
                    }
                }
            }
            // SAFETY: only tries to open the library by its usual names.
            if unsafe { cudarc::cublas::sys::is_culib_present() } {
                Ok(())
            } else {
                Err(format!(
                    "cuBLAS (libcublas.so.12) was not found: install it with `pip install \
                     {CUBLAS_WHEEL}` and set KILN_CUBLAS to its site-packages/nvidia/cublas/lib \
                     directory, or add that directory to LD_LIBRARY_PATH"
                ))
            }
        })
        .clone()
}

impl Drop for DriverGpu {
    fn drop(&mut self) {
        // waiting on the stream and freeing are stream work: not while another thread
        // captures
        let _stream_use = self.gate.enter();
        // queued work may still use cached blocks: wait, then give the cache back (live
        // buffers, still held elsewhere, are freed with the context)
        if self.ctx.bind_to_thread().is_ok() {
            let _ = self.stream.synchronize();
        }
        self.memory.empty_cache();
    }
}

impl GpuDevice for DriverGpu {
    fn name(&self) -> String {
        self.long_name.clone()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn GpuBuffer>, GpuError> {
        let stream = self.stream.cu_stream() as u64;
        let b = self
            .memory
            .alloc(bytes, stream)
            .map_err(|e| self.err(format!("allocate {bytes} bytes"), e))?;
        Ok(Arc::new(DriverBuffer(b)))
    }

    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<(), GpuError> {
        if src.is_empty() {
            return Ok(());
        }
        let op = format!("upload {} bytes to {dst:#x}", src.len());
        let stream_use = self.gate.enter();
        if stream_use.capturing() {
            return Err(self.err(&op, "copies are not allowed while capturing a graph"));
        }
        self.bind(&op)?;
        // SAFETY: the caller gives a device address with `src.len()` bytes; the copy is
        // queued on the device's stream. A copy from pageable host memory is staged by the
        // driver before the call returns, so `src` may go away then; from page-locked
        // memory it is truly asynchronous, so that case waits for it (below).
        unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(&op, e))?;
        if is_page_locked(src.as_ptr()) {
            self.stream.synchronize().map_err(|e| self.err(&op, e))?;
        }
        Ok(())
    }

    fn download(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), GpuError> {
        if dst.is_empty() {
            return Ok(());
        }
        let op = format!("download {} bytes from {src:#x}", dst.len());
        let stream_use = self.gate.enter();
        if stream_use.capturing() {
            return Err(self.err(&op, "copies are not allowed while capturing a graph"));
        }
        self.bind(&op)?;
        // SAFETY: the caller gives a device address with `dst.len()` bytes; the copy is
        // queued after earlier work and waited for before `dst` is released.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(&op, e))?;
        self.stream.synchronize().map_err(|e| self.err(&op, e))
    }

    fn launch(&self, launch: &KernelLaunch<'_>) -> Result<(), GpuError> {
        let op = format!(
            "launch {} ({} blocks of {} threads)",
            launch.kernel.name, launch.grid, launch.block
        );
        launch.check().map_err(|r| self.err(&op, r))?;
        if launch.grid == 0 {
            return Err(self.err(&op, "an empty grid"));
        }
        let kernel = self.kernel(launch.kernel)?;
        let _stream_use = self.gate.enter();
        self.bind(&op)?;
        // the kernel's one parameter: its argument struct, by value; the driver copies the
        // bytes during the call, so `words` only needs to outlive it
        let mut words = launch.arg_words();
        let mut params = [words.as_mut_ptr() as *mut c_void];
        // SAFETY: the function is loaded in this (current) context; its one parameter is a
        // struct of `words.len()` 8-byte words (the source's contract, checked above against
        // the kernel's NB and ND); the pointers in it are the caller's device addresses.
        unsafe {
            result::launch_kernel(
                kernel.func,
                (launch.grid, 1, 1),
                (launch.block, 1, 1),
                0,
                self.stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| self.err(&op, e))?;
        drop(words);
        self.count(false);
        Ok(())
    }

    fn gemm(&self, gemm: &Gemm) -> Result<(), GpuError> {
        use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let op = format!(
            "gemm {}x{}x{} (batch {})",
            gemm.m, gemm.n, gemm.k, gemm.batch
        );
        let args = cublas_gemm_args(gemm).map_err(|r| self.err(&op, r))?;
        if gemm.m == 0 || gemm.n == 0 || gemm.batch == 0 {
            return Ok(());
        }
        // the gate before the handle's lock: a capturer never waits for a thread the gate holds
        let _stream_use = self.gate.enter();
        let mut guard = self.blas.lock();
        let blas = self.blas(&mut guard, &op)?;
        self.bind(&op)?;
        let trans = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the handle is live and on the device's stream; the pointers and sizes are
        // the caller's (checked for cuBLAS's bounds by `cublas_gemm_args`); alpha and beta
        // are host values alive for the call (host pointer mode, the default).
        unsafe {
            cudarc::cublas::result::sgemm_strided_batched(
                blas.handle,
                trans(args.transa),
                trans(args.transb),
                args.m,
                args.n,
                args.k,
                &alpha,
                args.a as *const f32,
                args.lda,
                args.stride_a,
                args.b as *const f32,
                args.ldb,
                args.stride_b,
                &beta,
                args.c as *mut f32,
                args.ldc,
                args.stride_c,
                args.batch,
            )
        }
        .map_err(|e| self.err(&op, e))?;
        self.count(true);
        Ok(())
    }

    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), GpuError> {
        if bytes == 0 {
            return Ok(());
        }
        let op = format!("zero {bytes} bytes at {dst:#x}");
        let _stream_use = self.gate.enter();
        self.bind(&op)?;
        // SAFETY: the caller gives a device address with `bytes` bytes; queued on the stream.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream.cu_stream()) }
            .map_err(|e| self.err(&op, e))
    }

    fn counters(&self) -> GpuCounters {
        GpuCounters {
            launches: self.launches.load(Ordering::Relaxed),
            gemms: self.gemms.load(Ordering::Relaxed),
        }
    }

    fn begin_capture(&self) -> Result<(), GpuError> {
        let op = "begin capture";
        // waits for another thread's capture and for operations in flight
        if !self.gate.begin() {
            return Err(self.err(op, "already capturing"));
        }
        self.capturing.store(true, Ordering::Release);
        self.recorded.0.store(0, Ordering::Relaxed);
        self.recorded.1.store(0, Ordering::Relaxed);
        let begun = self.bind(op).and_then(|()| {
            // SAFETY: the device's live stream; relaxed mode lets a first use load a kernel
            // or allocate while capturing.
            unsafe {
                result::stream::begin_capture(
                    self.stream.cu_stream(),
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            }
            .map_err(|e| self.err(op, e))
        });
        if begun.is_err() {
            self.capturing.store(false, Ordering::Release);
            self.gate.end();
        }
        begun
    }

    fn end_capture(&self) -> Result<Box<dyn GpuGraph>, GpuError> {
        let op = "end capture";
        if !self.gate.is_capturer() {
            return Err(self.err(op, "not capturing"));
        }
        self.capturing.store(false, Ordering::Release);
        let ended = self.bind(op).and_then(|()| {
            // SAFETY: this thread captures the stream (begun above); the graph is ours.
            unsafe { result::stream::end_capture(self.stream.cu_stream()) }
                .map_err(|e| self.err(op, e))
        });
        // the stream is free for the other threads once the capture has ended
        self.gate.end();
        let graph = ended?;
        let mut exec = std::mem::MaybeUninit::uninit();
        // SAFETY: a graph just captured; no instantiation flags.
        let r = unsafe { sys::cuGraphInstantiateWithFlags(exec.as_mut_ptr(), graph, 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the graph is destroyed once, never used again.
            let _ = unsafe { result::graph::destroy(graph) };
            return Err(self.err(op, format!("cannot instantiate the graph: {r:?}")));
        }
        Ok(Box::new(DriverGraph {
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            gate: self.gate.clone(),
            graph,
            // SAFETY: instantiation succeeded, so `exec` is set.
            exec: unsafe { exec.assume_init() },
            recorded: (
                self.recorded.0.load(Ordering::Relaxed),
                self.recorded.1.load(Ordering::Relaxed),
            ),
            launches: self.launches.clone(),
            gemms: self.gemms.clone(),
        }))
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        let stream_use = self.gate.enter();
        if stream_use.capturing() {
            return Err(self.err("synchronize", "cannot wait for a stream being captured"));
        }
        self.bind("synchronize")?;
        self.stream
            .synchronize()
            .map_err(|e| self.err("synchronize", e))
    }
}

impl DriverGpu {
    /// Counts a launch (or a GEMM): run now, or recorded while capturing.
    fn count(&self, gemm: bool) {
        let (run, rec) = if gemm {
            (&self.gemms, &self.recorded.1)
        } else {
            (&self.launches, &self.recorded.0)
        };
        if self.capturing.load(Ordering::Acquire) {
            rec.fetch_add(1, Ordering::Relaxed);
        } else {
            run.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A captured and instantiated CUDA graph; destroyed on drop.
struct DriverGraph {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// the device's capture gate: a replay is a stream operation
    gate: Arc<CaptureGate>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// (launches, GEMMs) recorded
    recorded: (u64, u64),
    launches: Arc<AtomicU64>,
    gemms: Arc<AtomicU64>,
}

// SAFETY: graph handles are plain driver handles, used with the context bound to the calling
// thread; launching an executable graph from several threads is allowed by the driver.
unsafe impl Send for DriverGraph {}
// SAFETY: as above.
unsafe impl Sync for DriverGraph {}

impl GpuGraph for DriverGraph {
    fn replay(&self) -> Result<(), GpuError> {
        let fail = |reason: String| GpuError {
            device: "cuda".to_string(),
            op: "replay a graph".to_string(),
            reason,
        };
        let _stream_use = self.gate.enter();
        self.ctx.bind_to_thread().map_err(|e| fail(e.to_string()))?;
        // SAFETY: an instantiated graph of this context and its live stream.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }
            .map_err(|e| fail(e.to_string()))?;
        self.launches.fetch_add(self.recorded.0, Ordering::Relaxed);
        self.gemms.fetch_add(self.recorded.1, Ordering::Relaxed);
        Ok(())
    }

    fn len(&self) -> usize {
        (self.recorded.0 + self.recorded.1) as usize
    }
}

impl Drop for DriverGraph {
    fn drop(&mut self) {
        let _stream_use = self.gate.enter();
        if self.ctx.bind_to_thread().is_ok() {
            // a replay may still run: wait before destroying what it uses
            let _ = self.stream.synchronize();
            // SAFETY: both are destroyed once and never used again.
            unsafe {
                let _ = result::graph::exec_destroy(self.exec);
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}

/// Whether host memory at `p` is page-locked (or managed): known to the driver, so an
/// asynchronous copy from it really is asynchronous.
fn is_page_locked(p: *const u8) -> bool {
    let mut memory_type: u32 = 0;
    // SAFETY: the driver only looks `p` up; for pageable memory it answers an error.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            &mut memory_type as *mut u32 as *mut c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            p as sys::CUdeviceptr,
        )
    };
    r == sys::CUresult::CUDA_SUCCESS
}

/// For tests that need a GPU: `Ok(Some)` with device 0; `Ok(None)` when there is none and
/// it is not required (the reason is printed: the test should pass without it); `Err` when
/// there is none and `KILN_REQUIRE_GPU` is set (`scripts/gpu-check.sh` sets it on a
/// machine with a GPU), which makes its absence a failure.
pub fn gpu_for_tests() -> Result<Option<DriverGpu>, String> {
    match DriverGpu::open(0) {
        Ok(gpu) => Ok(Some(gpu)),
        Err(e) if std::env::var_os("KILN_REQUIRE_GPU").is_some() => {
            Err(format!("KILN_REQUIRE_GPU is set but {e}"))
        }
        Err(e) => {
            eprintln!("skipped: no GPU: {e}");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::gpu::GemmOperand;

    #[test]
    fn open_without_a_driver_is_an_error_not_a_panic() {
        // SAFETY: only tries to open the library by its usual names.
        let driver = unsafe { sys::is_culib_present() };
        match DriverGpu::open(0) {
            Ok(gpu) => assert!(driver, "opened {} without a driver", gpu.name()),
            Err(e) => {
                assert_eq!(e.device, "cuda:0");
                assert_eq!(e.op, "open");
                if !driver {
                    assert!(e.reason.contains("CUDA driver"), "{e}");
                    assert!(e.reason.contains("libcuda.so.1"), "{e}");
                }
            }
        }
        // an ordinal past any machine's devices is an error too, never a panic
        let e = DriverGpu::open(4096).expect_err("no machine has 4097 GPUs");
        assert_eq!(e.device, "cuda:4096");
    }

    #[test]
    fn gpu_for_tests_skips_without_a_gpu_unless_required() {
        let required = std::env::var_os("KILN_REQUIRE_GPU").is_some();
        match gpu_for_tests() {
            Ok(Some(gpu)) => assert!(DriverGpu::open(0).is_ok(), "{}", gpu.name()),
            Ok(None) => {
                assert!(!required);
                assert!(DriverGpu::open(0).is_err());
            }
            Err(e) => {
                assert!(required, "{e}");
                assert!(e.contains("KILN_REQUIRE_GPU"), "{e}");
            }
        }
    }

    #[test]
    fn arches_map_capabilities_to_the_largest_not_above() {
        assert_eq!(compute_arch(6, 1), None);
        assert_eq!(compute_arch(7, 0), Some("compute_70"));
        assert_eq!(compute_arch(7, 2), Some("compute_70"));
        assert_eq!(compute_arch(7, 5), Some("compute_75"));
        assert_eq!(compute_arch(8, 0), Some("compute_80"));
        assert_eq!(compute_arch(8, 7), Some("compute_86"));
        assert_eq!(compute_arch(8, 9), Some("compute_89"));
        assert_eq!(compute_arch(9, 0), Some("compute_90"));
        assert_eq!(compute_arch(10, 3), Some("compute_100"));
        assert_eq!(compute_arch(12, 1), Some("compute_120"));
    }

    /// Host memory standing for device memory: a "device address" is a byte offset.
    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn bytes_f32(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A kernel obeying the generated source's contract (one argument struct by value):
    /// `out[i] = 2·in[i] + 1` over `size[0]` elements, grid-stride, strides honoured.
    fn axpb_kernel() -> CudaKernel {
        let source = r#"
struct kiln_test_axpb_args {
    void* ptr[2];
    long long size[1];
    long long stride[2][1];
};
extern "C" __global__ void kiln_test_axpb(kiln_test_axpb_args a) {
    const float* x = (const float*)a.ptr[0];
    float* y = (float*)a.ptr[1];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.size[0];
         i += (long long)gridDim.x * blockDim.x) {
        y[i * a.stride[1][0]] = 2.0f * x[i * a.stride[0][0]] + 1.0f;
    }
}
"#;
        CudaKernel {
            name: "kiln_test_axpb".to_string(),
            source: source.to_string(),
            block_threads: 256,
            per_row: false,
            ndims: 1,
            nbuffers: 2,
        }
    }

    #[test]
    fn gpu_upload_launch_download() {
        let gpu = match gpu_for_tests() {
            Ok(Some(g)) => g,
            Ok(None) => return,
            Err(e) => panic!("{e}"),
        };
        let n = 1000usize;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 100.0).collect();
        let bx = gpu.alloc(n * 4).unwrap();
        let by = gpu.alloc(n * 4).unwrap();
        assert!(bx.len() >= n * 4);
        gpu.upload(bx.ptr(), &f32_bytes(&x)).unwrap();
        let kernel = axpb_kernel();
        let strides = vec![vec![1i64], vec![1i64]];
        // a small grid: grid-stride loops cover the rest; launched twice (the second from
        // the kernel cache)
        for grid in [2, 4] {
            let launch = KernelLaunch {
                kernel: &kernel,
                grid,
                block: 128,
                ptrs: &[bx.ptr(), by.ptr()],
                sizes: &[n as i64],
                strides: &strides,
            };
            gpu.launch(&launch).unwrap();
            let mut out = vec![0u8; n * 4];
            gpu.download(by.ptr(), &mut out).unwrap();
            let y = bytes_f32(&out);
            for i in 0..n {
                assert_eq!(y[i], 2.0 * x[i] + 1.0, "element {i}");
            }
        }
        // a bad launch is an error naming the kernel
        let bad = KernelLaunch {
            kernel: &kernel,
            grid: 1,
            block: 100,
            ptrs: &[bx.ptr(), by.ptr()],
            sizes: &[n as i64],
            strides: &strides,
        };
        let e = gpu.launch(&bad).unwrap_err();
        assert!(e.op.contains("kiln_test_axpb"), "{e}");
        gpu.synchronize().unwrap();
        // buffers go back to the cache and are reused
        let before = gpu.stats();
        drop((bx, by));
        let again = gpu.alloc(n * 4).unwrap();
        assert_eq!(gpu.stats().cache_hits, before.cache_hits + 1);
        drop(again);
        gpu.empty_cache();
        assert_eq!(gpu.stats().cached_blocks, 0);
    }

    #[test]
    fn gpu_gemm_matches_the_cpu() {
        let gpu = match gpu_for_tests() {
            Ok(Some(g)) => g,
            Ok(None) => return,
            Err(e) => panic!("{e}"),
        };
        // batch 2: A [2, 3, 5] plain; B stored transposed, broadcast ([4, 5] holding B);
        // C [2, 3, 4] with padded rows (ldc 6)
        let (m, n, k, batch) = (3usize, 4usize, 5usize, 2usize);
        let a: Vec<f32> = (0..batch * m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
        let ldc = 6usize;
        let ba = gpu.alloc(a.len() * 4).unwrap();
        let bb = gpu.alloc(bt.len() * 4).unwrap();
        let bc = gpu.alloc(batch * m * ldc * 4).unwrap();
        gpu.upload(ba.ptr(), &f32_bytes(&a)).unwrap();
        gpu.upload(bb.ptr(), &f32_bytes(&bt)).unwrap();
        let pad = vec![-7.0f32; batch * m * ldc];
        gpu.upload(bc.ptr(), &f32_bytes(&pad)).unwrap();
        let g = Gemm {
            m,
            n,
            k,
            batch,
            a: GemmOperand {
                ptr: ba.ptr(),
                ld: k as i64,
                batch_stride: (m * k) as i64,
                transposed: false,
            },
            b: GemmOperand {
                ptr: bb.ptr(),
                ld: k as i64,
                batch_stride: 0,
                transposed: true,
            },
            c: bc.ptr(),
            ldc: ldc as i64,
            batch_stride_c: (m * ldc) as i64,
        };
        gpu.gemm(&g).unwrap();
        let mut out = vec![0u8; batch * m * ldc * 4];
        gpu.download(bc.ptr(), &mut out).unwrap();
        let c = bytes_f32(&out);
        for p in 0..batch {
            for i in 0..m {
                for j in 0..ldc {
                    let got = c[p * m * ldc + i * ldc + j];
                    if j >= n {
                        assert_eq!(got, -7.0, "padding [{p}, {i}, {j}]");
                        continue;
                    }
                    let want: f32 = (0..k)
                        .map(|l| a[p * m * k + i * k + l] * bt[j * k + l])
                        .sum();
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "C[{p}, {i}, {j}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
