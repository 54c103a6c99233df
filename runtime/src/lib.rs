//! kiln's CPU runtime: the caching allocator, storages, strided tensors with views, and eager
//! kernels for every op of [`kiln_ir::Op`].
//!
//! * [`CpuTensor`]: shape, strides (in elements) and offset over a shared [`Storage`].
//! * [`execute`] / [`execute_inplace`]: run one op eagerly; operand types are checked by
//!   [`kiln_ir::infer`], so bad input is a [`RuntimeError`], never a panic.
//! * [`allocator_stats`] / [`empty_cache`] / [`reset_peak_stats`]: the caching allocator that
//!   every storage uses.
//! * [`device`]: the device caching allocator of accelerator backends (size classes, pools
//!   per stream, stats, `empty_cache`), generic over the device's memory.
//!
//! Semantics follow PyTorch and match `kiln_ir::interp` (the oracle): inputs are converted to
//! the promoted dtype, f16/bf16 compute in f32, integers wrap, float-to-int casts truncate.

#![warn(missing_docs)]

mod alloc;
pub mod device;
mod element;
mod error;
mod exec;
pub mod host_blas;
pub mod host_team;
mod iter;
mod kernels;
mod pack_cache;
mod pages;
pub mod pool;
mod pool_sync;
#[cfg(test)]
mod pool_tests;
mod raw;
mod storage;
mod tensor;
mod tensor_copy;
mod transpose;

pub use alloc::{allocator_stats, empty_cache, reset_peak_stats, AllocStats};
pub use element::Element;
pub use error::RuntimeError;
pub use exec::{execute, execute_inplace, index_add_owned, EagerArg};
pub use kernels::layout::view_strides;
pub use kernels::matmul::{matmul_into, RowEpilogue};
pub use pack_cache::{forget_pinned, pack_cache_bytes, MAX_BYTES as PACK_CACHE_MAX_BYTES};
pub use raw::{ReadLock, WriteLock};
pub use storage::{ForeignPin, Storage};
pub use tensor::{contiguous_strides, CpuTensor};
