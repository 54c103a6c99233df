//! The CPU backend: loop nests to Cranelift machine code ([`emit`], [`jit`]), run over
//! tensors by [`nest_exec`]; GEMM kernels with generated epilogues and an eager fallback
//! ([`kernels`]); the compiled program over an arena of buffers ([`plan`]).

mod chain_fits;
pub(crate) mod const_pool;
mod cuts;
pub mod dump;
pub mod emit;
pub mod jit;
pub mod kernels;
pub(crate) mod math;
pub mod nest_exec;
pub mod plan;
mod pool;
#[cfg(test)]
mod row_group_tests;

pub use emit::{InnerAccess, Spec};
pub use jit::{clif_text, jit_stats, KernelFn};
pub use plan::{kernel_for, CpuKernel, CpuPlan};
