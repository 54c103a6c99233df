//! kiln's graph passes: decompositions, e-graph simplification and fusion, kernel
//! scheduling and memory planning.
//!
//! The pipeline ([`pipeline`]): `decompose` (composite ops to primitives), then `fuse`
//! (an e-graph with exact identities, constant folding and fusion rules, extracted by a
//! cost model of bytes and launches, against greedy fusion; the chosen program is a
//! [`fused::Fused`]: the graph and each node's kernel, as data), then
//! [`schedule::schedule`] (kernel groups with iteration spaces, inputs, outputs, and a
//! memory plan). Every stage prints as text.

#![warn(missing_docs)]

pub mod decompose;
pub mod egraph;
mod error;
pub mod fused;
pub mod grad;
pub mod greedy;
pub mod joint;
mod kernel_order;
mod log;
pub mod memory;
pub mod optimize;
pub mod partition;
pub mod pipeline;
pub mod rules;
pub mod schedule;

pub use error::PassError;
pub use fused::{Fused, GroupKind, KernelTag};
