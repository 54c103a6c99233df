//! The verifier: checks that a graph is well formed and that every stored type is the
//! inferred one.
//!
//! Invariants checked, in order:
//! 1. Inputs are `input` nodes with no operands, named uniquely, and every `input` node is
//!    listed as an input.
//! 2. Every operand refers to an earlier node (so insertion order is topological).
//! 3. Every node's stored type equals [`crate::infer()`] of its op over its operands' types.
//! 4. Every symbolic dim of any type is bound by some input's shape.
//! 5. There is at least one output and every output is a node of the graph.

use crate::graph::{Arg, Graph, NodeId};
use crate::infer::{infer, TypeError};
use crate::Op;
use std::collections::HashSet;
use std::sync::Arc;

/// A violated invariant, naming the node, its op and the types involved.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// The op rejects its operands.
    #[error("node %{node} ({op}): {source}")]
    Type {
        /// the node
        node: usize,
        /// its op name
        op: &'static str,
        /// the inference error
        source: TypeError,
    },
    /// The stored type is not the inferred one.
    #[error("node %{node} ({op}): declared type {declared} but the op gives {inferred}")]
    TypeMismatch {
        /// the node
        node: usize,
        /// its op name
        op: &'static str,
        /// stored type
        declared: String,
        /// inferred type
        inferred: String,
    },
    /// An operand refers to a later or missing node.
    #[error("node %{node} ({op}): operand {operand} is not defined before it")]
    UseBeforeDef {
        /// the node
        node: usize,
        /// its op name
        op: &'static str,
        /// the operand's node index
        operand: usize,
    },
    /// An input node is malformed or unlisted.
    #[error("node %{node}: {reason}")]
    BadInput {
        /// the node
        node: usize,
        /// what is wrong
        reason: String,
    },
    /// A symbol is used but no input binds it.
    #[error("node %{node} ({op}): symbolic dim `{symbol}` is not bound by any input shape")]
    UnboundSymbol {
        /// the node
        node: usize,
        /// its op name
        op: &'static str,
        /// the symbol
        symbol: String,
    },
    /// No outputs, or an output that is not a node.
    #[error("graph @{graph}: {reason}")]
    BadOutputs {
        /// the graph's name
        graph: String,
        /// what is wrong
        reason: String,
    },
}

/// Checks every invariant listed in the module docs.
pub fn verify(g: &Graph) -> Result<(), VerifyError> {
    let listed: HashSet<NodeId> = g.inputs().iter().map(|(_, n)| *n).collect();
    let mut names = HashSet::new();
    for (name, id) in g.inputs() {
        if !names.insert(name.as_str()) {
            return Err(VerifyError::BadInput {
                node: id.index(),
                reason: format!("input name `{name}` is used twice"),
            });
        }
    }
    let bound: HashSet<Arc<str>> = g
        .inputs()
        .iter()
        .flat_map(|(_, n)| g.node(*n).ty.shape.symbols())
        .collect();
    for (id, node) in g.nodes() {
        let op = node.op.name();
        if node.op == Op::Input {
            if !listed.contains(&id) || !node.args.is_empty() {
                return Err(VerifyError::BadInput {
                    node: id.index(),
                    reason: "an input node must be listed in the signature and have no operands"
                        .into(),
                });
            }
            continue;
        }
        for a in &node.args {
            if let Arg::Value(v) = a {
                if *v >= id || g.try_node(*v).is_none() {
                    return Err(VerifyError::UseBeforeDef {
                        node: id.index(),
                        op,
                        operand: v.index(),
                    });
                }
            }
        }
        let types = g
            .arg_types(&node.args)
            .map_err(|_| VerifyError::UseBeforeDef {
                node: id.index(),
                op,
                operand: usize::MAX,
            })?;
        let inferred = infer(&node.op, &types).map_err(|source| VerifyError::Type {
            node: id.index(),
            op,
            source,
        })?;
        if inferred != node.ty {
            return Err(VerifyError::TypeMismatch {
                node: id.index(),
                op,
                declared: node.ty.to_string(),
                inferred: inferred.to_string(),
            });
        }
        if let Some(s) = node
            .ty
            .shape
            .symbols()
            .into_iter()
            .find(|s| !bound.contains(s))
        {
            return Err(VerifyError::UnboundSymbol {
                node: id.index(),
                op,
                symbol: s.to_string(),
            });
        }
    }
    if g.outputs().is_empty() {
        return Err(VerifyError::BadOutputs {
            graph: g.name().into(),
            reason: "the graph returns nothing".into(),
        });
    }
    if let Some(o) = g.outputs().iter().find(|o| g.try_node(**o).is_none()) {
        return Err(VerifyError::BadOutputs {
            graph: g.name().into(),
            reason: format!("output {o} is not a node"),
        });
    }
    Ok(())
}
