//! Tensor types (dtype + shape) and operand types.

use crate::{DType, Scalar, Shape};
use std::fmt;

/// The static type of a tensor value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// element type
    pub dtype: DType,
    /// shape (dims may be symbolic)
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type.
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// The type of one operand: a tensor or a scalar literal.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgType {
    /// a tensor operand
    Tensor(TensorType),
    /// a scalar literal operand
    Scalar(Scalar),
}

impl ArgType {
    /// The tensor type, if this operand is a tensor.
    pub fn tensor(&self) -> Option<&TensorType> {
        match self {
            ArgType::Tensor(t) => Some(t),
            ArgType::Scalar(_) => None,
        }
    }
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgType::Tensor(t) => write!(f, "{t}"),
            ArgType::Scalar(s) => write!(f, "scalar {s}"),
        }
    }
}
