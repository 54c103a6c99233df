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
    /// An error inside a call made of other ops (`clamp`, a loss, `backward`), with the
    /// call the user made in front of the inner op's error.
    #[error("{op}: {source}")]
    Within {
        /// the call the user made
        op: &'static str,
        /// the error of the op that failed inside it
        source: Box<Error>,
    },
    /// A collective or data-parallel call failed: a rank that did not arrive within the
    /// timeout (named), ranks whose parameters differ, a buffer of the wrong size.
    #[error("distributed {op}: {reason}")]
    Distributed {
        /// the collective or call (`all_reduce #12`, `DistributedDataParallel::new`)
        op: String,
        /// what went wrong, naming ranks and parameters
        reason: String,
    },
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

impl Error {
    /// This error as the failure of `op`, the call the user made: a runtime error that
    /// names a kernel is renamed; an op's type error, an invalid argument or an autograd
    /// refusal gets `op: ` in front unless its message already starts with it. Errors with
    /// a context of their own (a graph break, a traced op's source line, a compile or
    /// device failure, a file) are returned as they are: callers match on them.
    pub(crate) fn within(self, op: &'static str) -> Error {
        match self {
            Error::Runtime(e) if e.names_an_op() => Error::Runtime(e.renamed(op)),
            e @ (Error::Runtime(_) | Error::Invalid { .. } | Error::Autograd(_))
                if !e.to_string().starts_with(&format!("{op}:")) =>
            {
                Error::Within {
                    op,
                    source: Box::new(e),
                }
            }
            e => e,
        }
    }
}

pub(crate) fn invalid(op: &'static str, shape: &[usize], reason: impl Into<String>) -> Error {
    Error::Invalid {
        op,
        shape: shape.to_vec(),
        reason: reason.into(),
    }
}
