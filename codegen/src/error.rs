//! The code generators' error type.

/// Why a kernel could not be compiled or run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// Cranelift rejected a generated function (a bug in the generator: the message names
    /// the kernel).
    #[error("kernel {kernel}: the JIT failed: {reason}")]
    Jit {
        /// the kernel's name
        kernel: String,
        /// Cranelift's message
        reason: String,
    },
    /// A plan was called with inputs it cannot take.
    #[error("plan {plan}: {reason}")]
    Inputs {
        /// the plan's (graph's) name
        plan: String,
        /// what is wrong
        reason: String,
    },
    /// An eager kernel failed while running a kernel group.
    #[error("kernel {kernel}: {source}")]
    Runtime {
        /// the kernel's name
        kernel: String,
        /// the runtime's error
        source: kiln_runtime::RuntimeError,
    },
    /// A device (CUDA, or the emulated one) failed a copy, launch or GEMM of a plan.
    #[error("plan {plan}, kernel {kernel}: {reason}")]
    Device {
        /// the plan's (graph's) name
        plan: String,
        /// the kernel (or copy) that failed
        kernel: String,
        /// the device's error
        reason: String,
    },
    /// The schedule could not be turned into a plan.
    #[error("plan {plan}: {reason}")]
    Plan {
        /// the plan's (graph's) name
        plan: String,
        /// what is wrong
        reason: String,
    },
}

impl CodegenError {
    /// True for a bug of the code generator (Cranelift rejected what it generated); false
    /// for what the plan does not support or the inputs or device did, which callers may
    /// fall back from.
    pub fn is_bug(&self) -> bool {
        match self {
            CodegenError::Jit { .. } => true,
            CodegenError::Inputs { .. }
            | CodegenError::Runtime { .. }
            | CodegenError::Device { .. }
            | CodegenError::Plan { .. } => false,
        }
    }
}
