//! The runtime's error type: every bad input to an eager op becomes one of these, never a panic.

use kiln_ir::{DType, TypeError};

/// Why an eager op or a tensor constructor failed. Each variant names the op and what was
/// wrong with its operands.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The op rejects its operand types (from [`kiln_ir::infer`]).
    #[error(transparent)]
    Type(#[from] TypeError),
    /// The op (or this combination of operands) is not supported eagerly.
    #[error("{op}: {reason}{}", shapes_suffix(.shapes))]
    Unsupported {
        /// the op's name
        op: &'static str,
        /// the operand shapes, as text
        shapes: String,
        /// what is unsupported
        reason: String,
    },
    /// An index operand holds a value outside the indexed dim.
    #[error("{op}: index {index} is out of range for a dim of size {size}")]
    IndexOutOfRange {
        /// the op's name
        op: &'static str,
        /// the offending index
        index: i64,
        /// the size of the indexed dim
        size: usize,
    },
    /// A layout (shape, strides, offset) that is invalid for its storage or for the op.
    #[error("{op}: {reason} (shape {shape:?}, strides {strides:?}, offset {offset})")]
    Layout {
        /// the op's name (or `with_layout`)
        op: &'static str,
        /// the shape involved
        shape: Vec<usize>,
        /// the strides involved
        strides: Vec<isize>,
        /// the storage offset involved
        offset: usize,
        /// what is wrong
        reason: String,
    },
    /// A typed access asked for a dtype other than the tensor's.
    #[error("dtype mismatch: expected {expected}, got {got}")]
    DTypeMismatch {
        /// the dtype the caller asked for
        expected: DType,
        /// the tensor's dtype
        got: DType,
    },
    /// Data that does not fit the requested shape.
    #[error("{op}: {reason} (shape {shape:?})")]
    ShapeMismatch {
        /// the constructor or op's name
        op: &'static str,
        /// the requested shape
        shape: Vec<usize>,
        /// what is wrong
        reason: String,
    },
}

/// ` (shapes: …)` after an [`RuntimeError::Unsupported`] message, or nothing for an op
/// without operands.
fn shapes_suffix(shapes: &str) -> String {
    if shapes.is_empty() {
        String::new()
    } else {
        format!(" (shapes: {shapes})")
    }
}

impl RuntimeError {
    /// The same error reported under `op`, the call the user made (a constructor's or a
    /// composite's name in place of the kernel that failed inside it). Errors that name no
    /// op of their own (a type error names its op itself; a dtype mismatch none) come back
    /// unchanged.
    pub fn renamed(self, op: &'static str) -> RuntimeError {
        match self {
            RuntimeError::Unsupported { shapes, reason, .. } => {
                RuntimeError::Unsupported { op, shapes, reason }
            }
            RuntimeError::IndexOutOfRange { index, size, .. } => {
                RuntimeError::IndexOutOfRange { op, index, size }
            }
            RuntimeError::Layout {
                shape,
                strides,
                offset,
                reason,
                ..
            } => RuntimeError::Layout {
                op,
                shape,
                strides,
                offset,
                reason,
            },
            RuntimeError::ShapeMismatch { shape, reason, .. } => {
                RuntimeError::ShapeMismatch { op, shape, reason }
            }
            other => other,
        }
    }

    /// Whether [`RuntimeError::renamed`] changes the op this error names.
    pub fn names_an_op(&self) -> bool {
        !matches!(
            self,
            RuntimeError::Type(_) | RuntimeError::DTypeMismatch { .. }
        )
    }

    pub(crate) fn unsupported(
        op: &'static str,
        shapes: &[&[usize]],
        reason: impl Into<String>,
    ) -> Self {
        RuntimeError::Unsupported {
            op,
            shapes: shapes
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            reason: reason.into(),
        }
    }
}
