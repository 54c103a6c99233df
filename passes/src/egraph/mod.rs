//! The e-graph kiln optimises in (egg): its language ([`lang`]: pooled IR ops, inputs,
//! literals and fused kernel groups, [`sym`] the op pool), the class analysis ([`analysis`]:
//! types, bytes, constants), the fusion rules ([`fusion`]) and the cost model ([`cost`]).
//! The rewrite rules over it live in `crate::rules`; saturation and extraction in
//! `crate::optimize`.

pub mod analysis;
pub mod class_rule;
pub mod cost;
pub mod fusion;
pub mod lang;
pub mod sym;

pub use analysis::TensorAnalysis;
pub use class_rule::TEGraph;
