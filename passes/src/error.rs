//! The error type of the passes.

use kiln_ir::GraphError;

/// Why a pass could not transform a graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PassError {
    /// Building the output graph failed (a pass produced an ill-typed node).
    #[error("pass `{pass}`: {source}")]
    Graph {
        /// the pass
        pass: &'static str,
        /// what the graph builder said
        source: GraphError,
    },
    /// The pass's result does not verify.
    #[error("pass `{pass}`: the result does not verify: {reason}")]
    Verify {
        /// the pass
        pass: &'static str,
        /// the verifier's message
        reason: String,
    },
    /// A pass name that does not exist (in `kiln opt --passes`).
    #[error("unknown pass `{0}` (known: {1})")]
    UnknownPass(String, String),
    /// A rewrite rule name that does not exist (in `OptimizeOptions::disabled_rules`).
    #[error("unknown rewrite rule `{0}` (known: {1})")]
    UnknownRule(String, String),
    /// Anything else a pass rejects, with the node and reason.
    #[error("pass `{pass}`: {reason}")]
    Unsupported {
        /// the pass
        pass: &'static str,
        /// what is unsupported
        reason: String,
    },
}

impl PassError {
    /// True for a bug of a pass (its result is ill-typed or does not verify); false for
    /// what a pass does not support, which callers may fall back from.
    pub fn is_bug(&self) -> bool {
        match self {
            PassError::Graph { .. } | PassError::Verify { .. } => true,
            PassError::UnknownPass(..)
            | PassError::UnknownRule(..)
            | PassError::Unsupported { .. } => false,
        }
    }
}
