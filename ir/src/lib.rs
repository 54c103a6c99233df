//! kiln's graph IR.
//!
//! * [`DType`], [`Dim`], [`Shape`], [`TensorType`]: what a value is.
//! * [`Op`]: the closed op set, declared once in the op table ([`ops`]): names,
//!   attributes with PyTorch's defaults, kinds, costs, ranges and f64 references.
//! * [`infer()`]: PyTorch's typing rules for every op (shared by the verifier, the eager
//!   runtime and the tracer).
//! * [`Graph`]: nodes in an arena with typed ids, named inputs, ordered outputs.
//! * [`verify()`]: the graph invariants.
//! * [`rng`]: the counter-based random generator that eager and the interpreter share.

#![warn(missing_docs)]

pub mod conv;
mod dtype;
pub mod gen;
mod graph;
pub mod infer;
pub mod interp;
pub mod math;
pub mod ops;
pub mod rng;
mod scalar;
pub mod shape;
pub mod text;
mod types;
mod verify;

pub use dtype::{Category, DType};
pub use graph::{Arg, Graph, GraphError, Node, NodeId};
pub use infer::{infer, result_type, TypeError};
pub use ops::{
    AttrValue, BinaryOp, Constant, CostClass, DTypeRule, Domain, InplaceOp, Op, OpInfo, OpKind,
    OpParseError, RangeRule, ReduceOp, Reference, UnaryOp, ValueRange,
};
pub use scalar::{format_float, Scalar, F64};
pub use shape::{broadcast, Dim, Shape};
pub use text::{parse_graph, parse_module, print_graph, print_module, ParseError};
pub use types::{ArgType, TensorType};
pub use verify::{verify, VerifyError};
