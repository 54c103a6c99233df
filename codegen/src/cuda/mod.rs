//! The CUDA backend's code generation: loop nests to CUDA C ([`source`]), and an emulation
//! harness that compiles the same source with g++ against a small shim header and runs it
//! on the CPU ([`emulate`]), so generated kernels are tested without a GPU;
//! [`emulate_check`] runs one kernel group that way and compares it with the interpreter;
//! embedding lookups, which have no loop nest, get a gather kernel ([`gather`]).
//!
//! # The generated source
//!
//! One kernel per nest. The source holds no `#include`: NVRTC's built-ins, or the
//! emulation shim, provide everything it uses. It declares the argument struct and the
//! kernel, both named after [`CudaKernel::name`]:
//!
//! ```c
//! struct NAME_args {
//!     void* ptr[NB];             // the nest's buffers, in order (f32; f16, bf16 = unsigned short; bool = unsigned char)
//!     long long size[ND];        // the loop sizes, outer dims first, the inner dim last
//!     long long stride[NB][ND];  // element strides of each buffer along each loop dim (0: not indexed)
//! };
//! extern "C" __global__ void NAME(NAME_args a);
//! ```
//!
//! `NB ≥ 1` and `ND ≥ 1` (a nest without dims has one dim of size 1). The kernel is launched
//! with `blockDim.x == CudaKernel::block_threads` (and `y = z = 1`) and any grid: every loop
//! over rows or elements is grid-stride, so a small grid is correct, only slower.

pub mod capture_gate;
pub mod captured;
pub mod device_tensor;
pub mod driver_gpu;
pub mod dump;
pub mod emulate;
pub mod emulate_check;
pub mod emulated_gpu;
pub mod gather;
pub mod gemm_args;
pub mod gpu;
pub mod launch;
pub mod nvrtc;
pub mod plan;
mod ptx_cache;
pub mod select;
pub mod source;

pub use gather::gather_kernel;
pub use source::{cuda_kernel, CudaKernel, CudaUnsupported, BLOCK_THREADS};

use crate::loops::lower_kernel_half;
use kiln_ir::Graph;

/// The CUDA kernel of a kernel group's body: its loop nest's ([`cuda_kernel`]; f16 and bf16
/// values computed in f32, see [`lower_kernel_half`]), or, for an
/// embedding lookup (one `index_select`), the gather kernel ([`gather_kernel`]); else why it
/// has none (matmuls go to cuBLAS; other groups loop nests do not cover).
pub fn group_kernel(body: &Graph) -> Result<CudaKernel, String> {
    match lower_kernel_half(body) {
        Ok(nest) => cuda_kernel(&nest).map_err(|e| e.reason),
        Err(e) => gather_kernel(body).map_err(|_| e.reason),
    }
}

/// The ops the cuda backend renders itself: every primitive (as a generated kernel, a
/// gather, cuBLAS or a host step), and the composite activations its C has an expression
/// for (`gelu`, `silu`, `relu6`, `hardswish`, `mish`); `decompose` lowers the rest. One
/// exhaustive match: a new op must say.
pub fn renders(op: &kiln_ir::Op) -> bool {
    use kiln_ir::Op;
    match op {
        Op::Unary(_) => true,
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Linear
        | Op::Var { .. }
        | Op::Clamp
        | Op::Hardtanh { .. }
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Softplus { .. }
        | Op::NanToNum { .. }
        | Op::Embedding { .. } => false,
        Op::Reduce { op, .. } => !matches!(op, kiln_ir::ReduceOp::Mean),
        Op::Input
        | Op::Full { .. }
        | Op::Arange { .. }
        | Op::Rand { .. }
        | Op::Randn { .. }
        | Op::FromVec { .. }
        | Op::Binary(_)
        | Op::Inplace(_)
        | Op::Where
        | Op::Argmax { .. }
        | Op::Matmul
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Slice { .. }
        | Op::Cat { .. }
        | Op::IndexSelect { .. }
        | Op::IndexAdd { .. }
        | Op::Convolution { .. }
        | Op::Cast { .. }
        | Op::Contiguous
        | Op::Triu { .. }
        | Op::Tril { .. } => true,
    }
}
