//! The error type of kiln's public API.

use kiln_runtime::RuntimeError;

/// Everything that can go wrong in a kiln call. Every variant names the op (or command)
/// and the shapes involved; no public function panics on bad input.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// An op rejected its operands, or a kernel failed (wrong index, overlapping write...).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An argument that is checked before an op is built (a `-1` in a shape, a dim list).
    #[error("{op}: {reason} (shape {shape:?})")]
    Invalid {
        /// the op's name
        op: &'static str,
        /// the shape of the tensor it was called on
        shape: Vec<usize>,
        /// what is wrong
        reason: String,
    },
    /// A graph was run on inputs that do not match its signature.
    #[error("graph @{graph}: input %{input} expects {expected}, got {got}")]
    InputMismatch {
        /// the graph's name
        graph: String,
        /// the input's name
        input: String,
        /// the declared type
        expected: String,
        /// what was passed (or why it does not fit)
        got: String,
    },
    /// `fullgraph: true` and the traced function did something that ends a graph (reading
    /// a tensor's values, an in-place op).
    #[error("fullgraph: `{op}` at {loc} would break the graph: {reason}")]
    GraphBreak {
        /// the op that reads values or mutates (`item`, `to_vec`, `add_`, ...)
        op: &'static str,
        /// the user's source location (`file.rs:line:col`)
        loc: String,
        /// why it breaks the graph
        reason: String,
    },
    /// An op failed while a compiled function was being traced: the op's error (the same
    /// error eager mode gives) and the user's source line.
    #[error("{source}\n  at {loc} (while tracing @{function})")]
    Traced {
        /// the error eager mode gives for the op
        source: Box<Error>,
        /// the user's source location, `file.rs:line:col`
        loc: String,
        /// the compiled function's name
        function: String,
    },
    /// A compiled function could not be traced or compiled.
    #[error("compile @{function}: {reason}")]
    Compile {
        /// the compiled function's name
        function: String,
        /// what went wrong
        reason: String,
    },
    /// A compiled function's device failed while running it (a copy, launch or GEMM).
    #[error("@{function} on the device: {reason}")]
    Device {
        /// the compiled function's name
        function: String,
        /// the device's error, naming the kernel
        reason: String,
    },
    /// Autograd refused: backward through a freed graph, a saved tensor modified in place,
    /// an in-place op on a leaf that requires grad, a gradient of the wrong shape, ... The
    /// messages are PyTorch's where it has one.
    #[error("{0}")]
    Autograd(String),
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// the file
        path: String,
        /// what went wrong
        reason: String,
    },
}

/// `Result` with kiln's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn invalid(op: &'static str, shape: &[usize], reason: impl Into<String>) -> Error {
    Error::Invalid {
        op,
        shape: shape.to_vec(),
        reason: reason.into(),
    }
}
