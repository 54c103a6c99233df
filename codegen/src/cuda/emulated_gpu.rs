//! A [`GpuDevice`] without a GPU: device memory is host memory at made-up addresses,
//! kernels run through the emulation harness ([`emulate`]: the generated CUDA C compiled by
//! g++ against the shim header), and GEMMs are computed on the CPU. CUDA plans run on it in
//! the tests, so everything above the driver (argument structs, strides of views, launch
//! shapes, GEMM operand layouts, epilogues) is checked here.
//!
//! Launches are small: at most [`EmulatedGpu::MAX_GRID`] blocks of [`EMU_THREADS`]
//! threads (the generated kernels are grid-stride, so any grid is correct), one g++ run per
//! launch. Work is done when queued, so [`GpuDevice::synchronize`] has nothing to wait for.
//! Capturing records launches and GEMMs as commands that a replay runs again; copies while
//! capturing are errors, as they invalidate a CUDA stream capture. While one thread
//! captures, the others' stream operations wait, as on the real device ([`CaptureGate`]).

use super::capture_gate::CaptureGate;
use super::emulate::{emulate, EmuBuffer};
use super::emulate_check::EMU_THREADS;
use super::gpu::{
    DevicePtr, Gemm, GemmOperand, GpuBuffer, GpuCounters, GpuDevice, GpuError, GpuGraph,
    KernelLaunch,
};
use super::CudaKernel;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where emulated addresses start (any non-zero value; not a host address).
const BASE: DevicePtr = 0x7e00_0000_0000;
/// Alignment of emulated blocks (as cudaMalloc's, at least 256 bytes).
const ALIGN: u64 = 256;

/// A launch or GEMM, owned (as recorded while capturing).
#[derive(Clone)]
enum Command {
    Launch {
        kernel: CudaKernel,
        grid: u32,
        block: u32,
        ptrs: Vec<DevicePtr>,
        sizes: Vec<i64>,
        strides: Vec<Vec<i64>>,
    },
    Gemm(Gemm),
    Zero {
        ptr: DevicePtr,
        bytes: usize,
    },
}

#[derive(Default)]
struct Memory {
    /// block address -> its bytes
    blocks: BTreeMap<DevicePtr, Vec<u8>>,
    next: DevicePtr,
    launches: u64,
    gemms: u64,
    /// the work recorded since `begin_capture`, while capturing
    recording: Option<Vec<Command>>,
}

impl Memory {
    /// The block holding `ptr` and the offset of `ptr` in it.
    fn find(&self, ptr: DevicePtr) -> Option<(DevicePtr, usize)> {
        let (&base, bytes) = self.blocks.range(..=ptr).next_back()?;
        let off = (ptr - base) as usize;
        (off <= bytes.len()).then_some((base, off))
    }
}

/// An emulated device (see the module doc). Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct EmulatedGpu {
    mem: Arc<Mutex<Memory>>,
    /// keeps other threads off the "stream" while one captures it
    gate: Arc<CaptureGate>,
}

#[derive(Debug)]
struct EmuBlock {
    ptr: DevicePtr,
    len: usize,
    mem: std::sync::Weak<Mutex<Memory>>,
}

impl GpuBuffer for EmuBlock {
    fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for EmuBlock {
    fn drop(&mut self) {
        if let Some(mem) = self.mem.upgrade() {
            mem.lock().blocks.remove(&self.ptr);
        }
    }
}

impl EmulatedGpu {
    /// Blocks per emulated launch at most (the kernels stride over the rest).
    pub const MAX_GRID: u32 = 3;

    /// A fresh device with no memory in use.
    pub fn new() -> EmulatedGpu {
        EmulatedGpu::default()
    }

    /// Blocks of memory alive now.
    pub fn live_blocks(&self) -> usize {
        self.mem.lock().blocks.len()
    }

    fn err(&self, op: impl Into<String>, reason: impl Into<String>) -> GpuError {
        GpuError {
            device: self.name(),
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// Runs `cmd` now, or records it while capturing.
    fn queue(&self, cmd: Command) -> Result<(), GpuError> {
        // the gate before the memory's lock, which the capturer needs
        let _stream_use = self.gate.enter();
        let mut m = self.mem.lock();
        if let Some(rec) = m.recording.as_mut() {
            rec.push(cmd);
            return Ok(());
        }
        self.exec(&mut m, &cmd)
    }

    fn exec(&self, m: &mut Memory, cmd: &Command) -> Result<(), GpuError> {
        match cmd {
            Command::Launch {
                kernel,
                grid,
                block,
                ptrs,
                sizes,
                strides,
            } => self.exec_launch(m, kernel, *grid, *block, ptrs, sizes, strides),
            Command::Gemm(g) => self.exec_gemm(m, g),
            Command::Zero { ptr, bytes } => {
                let (base, off) = m.find(*ptr).ok_or_else(|| {
                    self.err("zero", format!("address {ptr:#x} is not allocated"))
                })?;
                let block = m.blocks.get_mut(&base).expect("found above");
                if off + bytes > block.len() {
                    return Err(self.err("zero", "runs past the end of its block"));
                }
                block[off..off + bytes].fill(0);
                Ok(())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn exec_launch(
        &self,
        m: &mut Memory,
        kernel: &CudaKernel,
        grid: u32,
        block: u32,
        ptrs: &[DevicePtr],
        sizes: &[i64],
        strides: &[Vec<i64>],
    ) -> Result<(), GpuError> {
        let op = || format!("launch {}", kernel.name);
        // each buffer from its address to the end of its block; the bytes the kernel changed
        // are written back (buffers may alias: an epilogue reading and writing one block)
        let mut places = Vec::with_capacity(ptrs.len());
        let mut bufs = Vec::with_capacity(ptrs.len());
        for &p in ptrs {
            let (base, off) = m
                .find(p)
                .ok_or_else(|| self.err(op(), format!("address {p:#x} is not allocated")))?;
            places.push((base, off));
            bufs.push(EmuBuffer {
                bytes: m.blocks[&base][off..].to_vec(),
            });
        }
        let before: Vec<Vec<u8>> = bufs.iter().map(|b| b.bytes.clone()).collect();
        emulate(
            &kernel.source,
            &kernel.name,
            block.min(EMU_THREADS),
            grid.clamp(1, Self::MAX_GRID),
            &mut bufs,
            sizes,
            strides,
        )
        .map_err(|r| self.err(op(), r))?;
        for (((base, off), buf), old) in places.iter().zip(&bufs).zip(&before) {
            let dst = m.blocks.get_mut(base).expect("found above");
            for (i, (&new, &was)) in buf.bytes.iter().zip(old).enumerate() {
                if new != was {
                    dst[off + i] = new;
                }
            }
        }
        m.launches += 1;
        Ok(())
    }

    fn exec_gemm(&self, m: &mut Memory, g: &Gemm) -> Result<(), GpuError> {
        if g.batch == 0 || g.m == 0 || g.n == 0 {
            m.gemms += 1;
            return Ok(());
        }
        let a = self.read_f32(m, g.a.ptr, extent(&g.a, g.batch, g.m, g.k))?;
        let b = self.read_f32(m, g.b.ptr, extent(&g.b, g.batch, g.k, g.n))?;
        let c_ext = ((g.batch - 1) as i64 * g.batch_stride_c
            + (g.m - 1) as i64 * g.ldc
            + g.n as i64) as usize;
        let (base, off) = m
            .find(g.c)
            .ok_or_else(|| self.err("gemm", format!("address {:#x} is not allocated", g.c)))?;
        let block = m.blocks.get_mut(&base).expect("found above");
        if off + c_ext * 4 > block.len() {
            return Err(self.err("gemm", "the product runs past the end of its block"));
        }
        for i in 0..g.batch {
            for r in 0..g.m {
                for c in 0..g.n {
                    // f64 accumulation, rounded once: cuBLAS's order differs anyway
                    let mut acc = 0f64;
                    for k in 0..g.k {
                        acc += f64::from(a[element(&g.a, i, r, k) as usize])
                            * f64::from(b[element(&g.b, i, k, c) as usize]);
                    }
                    let at = off
                        + 4 * (i as i64 * g.batch_stride_c + r as i64 * g.ldc + c as i64) as usize;
                    block[at..at + 4].copy_from_slice(&(acc as f32).to_le_bytes());
                }
            }
        }
        m.gemms += 1;
        Ok(())
    }

    /// An error if copies are not allowed now (while capturing).
    fn no_capture(&self, m: &Memory, op: &str) -> Result<(), GpuError> {
        match m.recording {
            Some(_) => Err(self.err(op, "copies are not allowed while capturing a graph")),
            None => Ok(()),
        }
    }

    /// `len` f32 values at `ptr` (the matrix elements a GEMM operand reads).
    fn read_f32(&self, m: &Memory, ptr: DevicePtr, count: usize) -> Result<Vec<f32>, GpuError> {
        let (base, off) = m
            .find(ptr)
            .ok_or_else(|| self.err("gemm", format!("address {ptr:#x} is not allocated")))?;
        let bytes = &m.blocks[&base][off..];
        if bytes.len() < count * 4 {
            return Err(self.err(
                "gemm",
                format!("{count} floats at {ptr:#x} run past its block"),
            ));
        }
        Ok(bytes[..count * 4]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// Recorded work of the emulated device.
struct EmuGraph {
    gpu: EmulatedGpu,
    commands: Vec<Command>,
}

impl GpuGraph for EmuGraph {
    fn replay(&self) -> Result<(), GpuError> {
        for c in &self.commands {
            self.gpu.queue(c.clone())?;
        }
        Ok(())
    }
    fn len(&self) -> usize {
        self.commands.len()
    }
}

/// The element `(row, col)` of matrix `i` of an operand, as an offset in floats.
fn element(op: &GemmOperand, i: usize, row: usize, col: usize) -> i64 {
    let (r, c) = if op.transposed {
        (col, row)
    } else {
        (row, col)
    };
    i as i64 * op.batch_stride + r as i64 * op.ld + c as i64
}

/// The number of floats from an operand's first element to one past its last.
fn extent(op: &GemmOperand, batch: usize, rows: usize, cols: usize) -> usize {
    if rows == 0 || cols == 0 || batch == 0 {
        return 0;
    }
    element(op, batch - 1, rows - 1, cols - 1) as usize + 1
}

impl GpuDevice for EmulatedGpu {
    fn name(&self) -> String {
        "emulated".to_string()
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn GpuBuffer>, GpuError> {
        let mut m = self.mem.lock();
        if m.next == 0 {
            m.next = BASE;
        }
        let ptr = m.next;
        // garbage, as device memory is: kernels must write every element they own. All
        // ones: NaN in every float dtype, -1 in the integers, so a value read before it is
        // written fails a comparison (0xA5 bytes were a tiny f32, -2.9e-16, that a sum of an
        // empty slice left in place within every tolerance)
        m.blocks.insert(ptr, vec![0xFF; bytes]);
        m.next = ptr + (bytes as u64).max(1).div_ceil(ALIGN) * ALIGN + ALIGN;
        Ok(Arc::new(EmuBlock {
            ptr,
            len: bytes,
            mem: Arc::downgrade(&self.mem),
        }))
    }

    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<(), GpuError> {
        let _stream_use = self.gate.enter();
        let mut m = self.mem.lock();
        self.no_capture(&m, "upload")?;
        let op = || format!("upload of {} bytes to {dst:#x}", src.len());
        let (base, off) = m
            .find(dst)
            .ok_or_else(|| self.err(op(), "address not allocated"))?;
        let block = m.blocks.get_mut(&base).expect("found above");
        let end = off + src.len();
        if end > block.len() {
            return Err(self.err(op(), "runs past the end of its block"));
        }
        block[off..end].copy_from_slice(src);
        Ok(())
    }

    fn download(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), GpuError> {
        let _stream_use = self.gate.enter();
        let m = self.mem.lock();
        self.no_capture(&m, "download")?;
        let op = || format!("download of {} bytes from {src:#x}", dst.len());
        let (base, off) = m
            .find(src)
            .ok_or_else(|| self.err(op(), "address not allocated"))?;
        let block = &m.blocks[&base];
        let end = off + dst.len();
        if end > block.len() {
            return Err(self.err(op(), "runs past the end of its block"));
        }
        dst.copy_from_slice(&block[off..end]);
        Ok(())
    }

    fn launch(&self, l: &KernelLaunch<'_>) -> Result<(), GpuError> {
        l.check()
            .map_err(|r| self.err(format!("launch {}", l.kernel.name), r))?;
        self.queue(Command::Launch {
            kernel: l.kernel.clone(),
            grid: l.grid,
            block: l.block,
            ptrs: l.ptrs.to_vec(),
            sizes: l.sizes.to_vec(),
            strides: l.strides.to_vec(),
        })
    }

    fn gemm(&self, g: &Gemm) -> Result<(), GpuError> {
        self.queue(Command::Gemm(*g))
    }

    fn zero(&self, ptr: DevicePtr, bytes: usize) -> Result<(), GpuError> {
        self.queue(Command::Zero { ptr, bytes })
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        // work is done when queued: only waits for another thread's capture (and refuses the
        // capturer, as a stream being captured cannot be waited for)
        if self.gate.enter().capturing() {
            return Err(self.err("synchronize", "cannot wait for a stream being captured"));
        }
        Ok(())
    }

    fn counters(&self) -> GpuCounters {
        let m = self.mem.lock();
        GpuCounters {
            launches: m.launches,
            gemms: m.gemms,
        }
    }

    fn begin_capture(&self) -> Result<(), GpuError> {
        // waits for another thread's capture and for operations in flight
        if !self.gate.begin() {
            return Err(self.err("begin capture", "already capturing"));
        }
        self.mem.lock().recording = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn GpuGraph>, GpuError> {
        if !self.gate.is_capturer() {
            return Err(self.err("end capture", "not capturing"));
        }
        let commands = self.mem.lock().recording.take();
        self.gate.end();
        let commands = commands.ok_or_else(|| self.err("end capture", "not capturing"))?;
        Ok(Box::new(EmuGraph {
            gpu: self.clone(),
            commands,
        }))
    }
}
