//! kiln's code generators: kernel groups lowered to loop nests ([`loops`]), then to machine
//! code by Cranelift ([`cpu`]).

#![warn(missing_docs)]

mod c_literal;
pub mod cpu;
pub mod cuda;
mod error;
pub mod logging;
pub mod loops;
pub mod matmul_group;
pub(crate) mod options;
pub mod profile;

pub use error::CodegenError;
pub use options::{ClifOpt, CodegenOptions, TierPolicy, C_TIER_AFTER_MS};
