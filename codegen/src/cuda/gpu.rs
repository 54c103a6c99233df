//! What a CUDA plan needs from a device, as a trait: memory, copies, kernel launches, a
//! GEMM and a barrier. Two devices implement it: the real one through the CUDA driver
//! ([`super::driver_gpu::DriverGpu`], cudarc), and an emulated one
//! ([`super::emulated_gpu::EmulatedGpu`]: host memory, kernels run by the g++ emulation
//! harness, GEMMs on the CPU), so that plans are tested end to end without a GPU and only
//! the thin driver layer needs one.
//!
//! Work is queued in order on the device's stream; [`GpuDevice::synchronize`] waits for
//! it. Copies to the host wait for the work queued before them.

use super::CudaKernel;
use std::sync::Arc;

/// A device address.
pub type DevicePtr = u64;

/// A device failure: the operation and the device's reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{device}: {op} failed: {reason}")]
pub struct GpuError {
    /// the device (`cuda:0`, `emulated`)
    pub device: String,
    /// what was asked (`allocate 4096 bytes`, `launch k3_row`)
    pub op: String,
    /// why it failed
    pub reason: String,
}

/// A block of device memory, given back (to the device's caching allocator) on drop.
pub trait GpuBuffer: Send + Sync + std::fmt::Debug {
    /// Its device address.
    fn ptr(&self) -> DevicePtr;
    /// Its usable length, bytes.
    fn len(&self) -> usize;
    /// True when it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One launch of a generated kernel: the values of its argument struct (see the
/// [module doc](super) for the layout) and the launch shape.
#[derive(Clone, Copy, Debug)]
pub struct KernelLaunch<'a> {
    /// the kernel (source, name, block size)
    pub kernel: &'a CudaKernel,
    /// blocks in the grid (x)
    pub grid: u32,
    /// threads per block (x)
    pub block: u32,
    /// `ptr[NB]`: each buffer's address (its first element, offset included)
    pub ptrs: &'a [DevicePtr],
    /// `size[ND]`
    pub sizes: &'a [i64],
    /// `stride[NB][ND]`, elements
    pub strides: &'a [Vec<i64>],
}

impl KernelLaunch<'_> {
    /// The argument struct as the kernel takes it by value: 8-byte words, the buffer
    /// addresses, the sizes, then the strides buffer by buffer.
    pub fn arg_words(&self) -> Vec<u64> {
        let mut w: Vec<u64> = self.ptrs.to_vec();
        w.extend(self.sizes.iter().map(|&s| s as u64));
        for st in self.strides {
            w.extend(st.iter().map(|&s| s as u64));
        }
        w
    }

    /// Checks the counts against the kernel's `NB` and `ND`.
    pub fn check(&self) -> Result<(), String> {
        let (nb, nd) = (self.kernel.nbuffers, self.kernel.ndims);
        if self.ptrs.len() != nb
            || self.sizes.len() != nd
            || self.strides.len() != nb
            || self.strides.iter().any(|s| s.len() != nd)
        {
            return Err(format!(
                "kernel {} takes {nb} buffers over {nd} dims; the launch has {} pointers, {} \
                 sizes and {} stride rows",
                self.kernel.name,
                self.ptrs.len(),
                self.sizes.len(),
                self.strides.len()
            ));
        }
        if self.block == 0
            || !self.block.is_multiple_of(32)
            || self.block > self.kernel.block_threads
        {
            return Err(format!(
                "kernel {}: {} threads per block (a multiple of 32 up to {})",
                self.kernel.name, self.block, self.kernel.block_threads
            ));
        }
        Ok(())
    }
}

/// One operand of a [`Gemm`]: a batch of row-major matrices, or of their transposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmOperand {
    /// the first element of the first matrix
    pub ptr: DevicePtr,
    /// elements between rows of the stored matrix (≥ its columns)
    pub ld: i64,
    /// elements between matrices of the batch (0: one matrix for every batch entry)
    pub batch_stride: i64,
    /// true: the stored matrix is the transpose of the operand (`[K, M]` holding `A`)
    pub transposed: bool,
}

/// `C[i] = A[i] · B[i]` for `i < batch`, f32, row-major: `A[i]` is `m × k`, `B[i]` is
/// `k × n`, `C[i]` is `m × n` with rows `ldc` apart and matrices `batch_stride_c` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// rows of A and C
    pub m: usize,
    /// columns of B and C
    pub n: usize,
    /// columns of A, rows of B
    pub k: usize,
    /// matrices in the batch (≥ 1)
    pub batch: usize,
    /// the left operand
    pub a: GemmOperand,
    /// the right operand
    pub b: GemmOperand,
    /// the product's first element
    pub c: DevicePtr,
    /// elements between rows of C
    pub ldc: i64,
    /// elements between matrices of C
    pub batch_stride_c: i64,
}

/// What a device has run so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// kernel launches queued
    pub launches: u64,
    /// GEMMs queued
    pub gemms: u64,
}

/// Recorded device work ([`GpuDevice::begin_capture`]): a CUDA graph on a GPU.
pub trait GpuGraph: Send + Sync {
    /// Queues the recorded work once more, in the recorded order.
    fn replay(&self) -> Result<(), GpuError>;
    /// Launches and GEMMs recorded.
    fn len(&self) -> usize;
    /// True when nothing was recorded.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A device a [`super::plan::CudaPlan`] runs on.
pub trait GpuDevice: Send + Sync {
    /// A name for messages (`cuda:0 (NVIDIA H100)`, `emulated`).
    fn name(&self) -> String;
    /// At least `bytes` bytes of device memory (contents unspecified).
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn GpuBuffer>, GpuError>;
    /// Copies `src` to device address `dst` (queued after earlier work).
    fn upload(&self, dst: DevicePtr, src: &[u8]) -> Result<(), GpuError>;
    /// Copies device bytes at `src` into `dst`, after the work queued before.
    fn download(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), GpuError>;
    /// Queues setting `bytes` bytes at `dst` to zero (recorded while capturing).
    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), GpuError>;
    /// Queues a kernel launch; the kernel is compiled (and cached) on first use.
    fn launch(&self, launch: &KernelLaunch<'_>) -> Result<(), GpuError>;
    /// Queues an f32 GEMM.
    fn gemm(&self, gemm: &Gemm) -> Result<(), GpuError>;
    /// Waits for all queued work.
    fn synchronize(&self) -> Result<(), GpuError>;
    /// Launches and GEMMs queued so far.
    fn counters(&self) -> GpuCounters;
    /// Starts recording the launches and GEMMs queued from now on, instead of running them
    /// (CUDA stream capture). Copies are not allowed while recording.
    fn begin_capture(&self) -> Result<(), GpuError>;
    /// Stops recording; the recorded work as a graph to replay (it reads and writes the
    /// device addresses it was recorded with). After an error in between, call this to end
    /// the recording and drop the result.
    fn end_capture(&self) -> Result<Box<dyn GpuGraph>, GpuError>;
}
