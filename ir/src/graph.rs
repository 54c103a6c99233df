//! The graph: an arena of nodes (petgraph underneath) with typed ids, named inputs and
//! ordered outputs.
//!
//! Invariant: node ids are handed out in insertion order and every operand refers to an
//! earlier node, so iteration order ([`Graph::nodes`]) is a topological order. Every node
//! carries its inferred type; [`Graph::add_op`] infers it when the node is added.

use crate::infer::{infer, TypeError};
use crate::{ArgType, Op, Scalar, TensorType};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use smallvec::SmallVec;
use std::fmt;

/// A node's id (the SSA value it defines).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The id's position in insertion order.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    fn ix(self) -> NodeIndex<u32> {
        NodeIndex::new(self.0 as usize)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// One operand of a node: the value of another node or a scalar literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arg {
    /// the value defined by a node
    Value(NodeId),
    /// a literal
    Scalar(Scalar),
}

impl From<NodeId> for Arg {
    fn from(n: NodeId) -> Arg {
        Arg::Value(n)
    }
}

impl From<Scalar> for Arg {
    fn from(s: Scalar) -> Arg {
        Arg::Scalar(s)
    }
}

/// A node: an op, its operands, its (inferred) type and the source location it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// the operation
    pub op: Op,
    /// the operands, in order
    pub args: SmallVec<[Arg; 3]>,
    /// the result type
    pub ty: TensorType,
    /// the user's source location (`file.rs:14:17`), if known
    pub loc: Option<String>,
}

/// Errors from building a graph.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// An op was applied to operands it does not accept.
    #[error("node {node}: {source}")]
    Type {
        /// the node that would have been added (or that is wrong)
        node: NodeId,
        /// the type error
        source: TypeError,
    },
    /// An operand names a node that does not exist (yet).
    #[error("operand refers to {0}, which is not an earlier node of the graph")]
    UnknownNode(NodeId),
    /// Two inputs share a name.
    #[error("input name `{0}` is used twice")]
    DuplicateInput(String),
}

/// A dataflow graph of tensor ops with named inputs and ordered outputs.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    name: String,
    g: StableDiGraph<Node, u32, u32>,
    inputs: Vec<(String, NodeId)>,
    outputs: Vec<NodeId>,
}

impl Graph {
    /// An empty graph called `name` (printed as `@name`).
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds a named input of type `ty`.
    pub fn add_input(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
    ) -> Result<NodeId, GraphError> {
        let name = name.into();
        if self.inputs.iter().any(|(n, _)| *n == name) {
            return Err(GraphError::DuplicateInput(name));
        }
        let ix = self.g.add_node(Node {
            op: Op::Input,
            args: SmallVec::new(),
            ty,
            loc: None,
        });
        let id = NodeId(ix.index() as u32);
        self.inputs.push((name, id));
        Ok(id)
    }

    /// The types of operands, checking that each value operand exists.
    pub fn arg_types(&self, args: &[Arg]) -> Result<Vec<ArgType>, GraphError> {
        args.iter()
            .map(|a| match a {
                Arg::Value(v) => self
                    .try_node(*v)
                    .map(|n| ArgType::Tensor(n.ty.clone()))
                    .ok_or(GraphError::UnknownNode(*v)),
                Arg::Scalar(s) => Ok(ArgType::Scalar(*s)),
            })
            .collect()
    }

    /// Adds `op` applied to `args`, inferring its type; fails if the op rejects the operands.
    pub fn add_op(
        &mut self,
        op: Op,
        args: &[Arg],
        loc: Option<String>,
    ) -> Result<NodeId, GraphError> {
        let types = self.arg_types(args)?;
        let next = NodeId(self.g.node_count() as u32);
        let ty = infer(&op, &types).map_err(|source| GraphError::Type { node: next, source })?;
        let ix = self.g.add_node(Node {
            op,
            args: args.iter().copied().collect(),
            ty,
            loc,
        });
        for (i, a) in args.iter().enumerate() {
            if let Arg::Value(v) = a {
                self.g.add_edge(v.ix(), ix, i as u32);
            }
        }
        Ok(NodeId(ix.index() as u32))
    }

    /// Sets the outputs, in return order.
    pub fn set_outputs(&mut self, outputs: Vec<NodeId>) -> Result<(), GraphError> {
        if let Some(bad) = outputs.iter().find(|o| self.try_node(**o).is_none()) {
            return Err(GraphError::UnknownNode(*bad));
        }
        self.outputs = outputs;
        Ok(())
    }

    /// The node with id `id`, if it exists.
    pub fn try_node(&self, id: NodeId) -> Option<&Node> {
        self.g.node_weight(id.ix())
    }

    /// The node with id `id`. Panics if `id` did not come from this graph.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id.ix()]
    }

    /// Mutable access to a node (passes use it; re-run the verifier afterwards).
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.g[id.ix()]
    }

    /// All nodes (inputs included) in insertion order, which is a topological order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.g
            .node_indices()
            .map(|ix| (NodeId(ix.index() as u32), &self.g[ix]))
    }

    /// The number of nodes, inputs included.
    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// The inputs, with their names, in signature order.
    pub fn inputs(&self) -> &[(String, NodeId)] {
        &self.inputs
    }

    /// The outputs, in return order.
    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// The nodes that use `id` as an operand.
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let mut u: Vec<NodeId> = self
            .g
            .neighbors_directed(id.ix(), petgraph::Direction::Outgoing)
            .map(|ix| NodeId(ix.index() as u32))
            .collect();
        u.sort();
        u.dedup();
        u
    }

    /// The input name of `id`, if it is an input.
    pub fn input_name(&self, id: NodeId) -> Option<&str> {
        self.inputs
            .iter()
            .find(|(_, n)| *n == id)
            .map(|(s, _)| s.as_str())
    }
}
