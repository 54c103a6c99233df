//! kiln: eager tensors on the CPU and (in later issues) a graph-capturing JIT compiler.
//!
//! ```
//! use kiln::{DType, Tensor};
//! let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, -4.0], &[2, 2])?;
//! let y = (&x.relu()? * 2.0)?;
//! assert_eq!(y.to_vec::<f32>()?, vec![2.0, 0.0, 6.0, 0.0]);
//! assert_eq!(x.sum(&[1], false)?.dtype(), DType::F32);
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! Every op returns [`Result`]: bad input (shapes that do not broadcast, a dim out of range,
//! an index past the end) is a typed [`Error`] naming the op and the shapes, never a panic.

#![warn(missing_docs)]

pub mod autograd;
pub mod compile;
pub mod cuda_tensor;
mod display;
pub mod distributed;
mod error;
pub mod fuzz;
pub mod graph_exec;
pub mod io;
pub mod models;
pub mod nn;
mod operand;
mod operators;
mod ops_inplace;
mod ops_layout;
mod ops_pointwise;
mod ops_reduce;
pub mod optim;
mod tensor;

pub use compile::{
    compile, compile_with, explain, Backend, CompileOptions, CompileStats, CompiledFn, Dynamic,
    ExplainReport, GradientSplit, Mode,
};
pub use error::{Error, Result};
pub use kiln_ir::{DType, Dim, Graph, Scalar, Shape, TensorType};
pub use kiln_runtime::{allocator_stats, empty_cache, reset_peak_stats, AllocStats, Element};
pub use operand::Operand;
pub use tensor::Tensor;

/// The C tier's state: each kernel's tier, and waiting for queued kernels.
pub use kiln_codegen::cpu::c_tier::{tiers, wait_for_c_tier, KernelTier, Tier};
/// Per-kernel timing of compiled CPU code (`KILN_PROFILE=1`, `kiln bench --profile`).
pub use kiln_codegen::profile;
/// Which code the cpu backend's kernels run (see [`CompileOptions::tier`]).
pub use kiln_codegen::TierPolicy;
/// The IR crate, for building, printing and interpreting graphs.
pub use kiln_ir as ir;
