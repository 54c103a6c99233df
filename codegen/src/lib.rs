//! kiln's code generators: loop nests, Cranelift CPU code and CUDA C through NVRTC.
//!
//! Empty for now: the CPU and CUDA backend issues fill it. Nothing here pretends to work yet.

#![warn(missing_docs)]
