//! The e-graph language: IR ops (interned), graph inputs, scalar literals and fused
//! kernel groups.

use egg::{Id, Language};
use kiln_ir::{Arg, Graph, Op, Scalar, TensorType};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;

/// An interned op (its index in [`Interner::ops`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

/// An interned kernel group (its index in [`Interner::groups`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

/// A scalar literal, compared and hashed by its bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lit {
    /// an integer literal
    Int(i64),
    /// a float literal (its bits)
    Float(u64),
    /// a boolean literal
    Bool(bool),
}

impl Lit {
    /// The literal of a scalar.
    pub fn of(s: Scalar) -> Lit {
        match s {
            Scalar::Int(i) => Lit::Int(i),
            Scalar::Float(f) => Lit::Float(f.to_bits()),
            Scalar::Bool(b) => Lit::Bool(b),
        }
    }

    /// The scalar it stands for.
    pub fn scalar(self) -> Scalar {
        match self {
            Lit::Int(i) => Scalar::Int(i),
            Lit::Float(b) => Scalar::Float(f64::from_bits(b)),
            Lit::Bool(b) => Scalar::Bool(b),
        }
    }
}

/// An e-node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TNode {
    /// graph input number `n`
    Input(u32),
    /// a scalar operand
    Lit(Lit),
    /// a primitive IR op applied to e-classes (tensor values or literals)
    Op(OpId, SmallVec<[Id; 3]>),
    /// a fused kernel group applied to its tensor inputs
    Group(GroupId, SmallVec<[Id; 4]>),
}

impl Language for TNode {
    type Discriminant = (u8, u32, usize);

    fn discriminant(&self) -> Self::Discriminant {
        match self {
            TNode::Input(n) => (0, *n, 0),
            TNode::Lit(_) => (1, 0, 0),
            TNode::Op(o, a) => (2, o.0, a.len()),
            TNode::Group(g, a) => (3, g.0, a.len()),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (TNode::Lit(a), TNode::Lit(b)) => a == b,
            _ => self.discriminant() == other.discriminant(),
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            TNode::Input(_) | TNode::Lit(_) => &[],
            TNode::Op(_, a) => a,
            TNode::Group(_, a) => a,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            TNode::Input(_) | TNode::Lit(_) => &mut [],
            TNode::Op(_, a) => a,
            TNode::Group(_, a) => a,
        }
    }
}

impl fmt::Display for TNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TNode::Input(n) => write!(f, "in{n}"),
            TNode::Lit(l) => write!(f, "{}", l.scalar()),
            TNode::Op(o, _) => write!(f, "op{}", o.0),
            TNode::Group(g, _) => write!(f, "group{}", g.0),
        }
    }
}

/// The kind of loop nest a kernel group becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// elementwise over the output's shape
    Pointwise,
    /// a reduction, with a pointwise prologue on its input and epilogue on its output
    Reduction,
    /// one pass per row: reductions over the last dim and pointwise ops over the row
    /// (softmax, layer norm)
    Row,
    /// a matrix product with a pointwise epilogue on its output tile
    Matmul,
    /// an op left on its own that moves data (a layout copy, `cat`, `index_select`, ...)
    Copy,
}

impl GroupKind {
    /// The kind's name in the textual forms.
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Pointwise => "pointwise",
            GroupKind::Reduction => "reduction",
            GroupKind::Row => "row",
            GroupKind::Matmul => "matmul",
            GroupKind::Copy => "copy",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<GroupKind> {
        Some(match s {
            "pointwise" => GroupKind::Pointwise,
            "reduction" => GroupKind::Reduction,
            "row" => GroupKind::Row,
            "matmul" => GroupKind::Matmul,
            "copy" => GroupKind::Copy,
            _ => return None,
        })
    }
}

/// A fused kernel group: a small graph over the group's inputs with one output.
#[derive(Clone, Debug)]
pub struct GroupBody {
    /// the loop nest it becomes
    pub kind: GroupKind,
    /// the body: inputs `in0, in1, ...` are the group's operands, in order
    pub graph: Graph,
    /// the output type
    pub ty: TensorType,
    /// the shape of the iteration space the group's loads run over (its largest shape)
    pub space: TensorType,
}

/// What makes two group bodies the same kernel: the kind and, node by node in graph order,
/// the op, its operands and its type (source locations and input names do not count).
#[derive(Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    kind: GroupKind,
    nodes: Vec<(Op, Vec<Arg>, TensorType)>,
}

impl GroupKey {
    fn of(body: &GroupBody) -> GroupKey {
        GroupKey {
            kind: body.kind,
            nodes: body
                .graph
                .nodes()
                .map(|(_, n)| (n.op.clone(), n.args.to_vec(), n.ty.clone()))
                .collect(),
        }
    }
}

/// A merge: (consumer group, producer group, operand index, both groups' operands).
pub type MergeKey = (u32, u32, usize, Vec<egg::Id>);

/// The interned ops and group bodies of one e-graph.
#[derive(Default)]
pub struct Interner {
    /// every op, by id
    pub ops: Vec<Op>,
    op_ids: HashMap<Op, OpId>,
    /// every group body, by id
    pub groups: Vec<GroupBody>,
    group_ids: HashMap<GroupKey, GroupId>,
    /// merges already tried: (consumer group, producer group, operand, operands) -> the
    /// merged group and its operands, or `None` when illegal
    pub merge_cache: HashMap<MergeKey, Option<(usize, Vec<egg::Id>)>>,
    /// all-at-once merges already tried: (group, operands)
    pub merge_alls: std::collections::HashSet<(u32, Vec<egg::Id>)>,
    /// singleton groups already tried: (op, operands)
    pub wraps: std::collections::HashSet<(OpId, Vec<egg::Id>)>,
}

impl Interner {
    /// The id of `op`, interning it.
    pub fn op(&mut self, op: &Op) -> OpId {
        if let Some(id) = self.op_ids.get(op) {
            return *id;
        }
        let id = OpId(self.ops.len() as u32);
        self.ops.push(op.clone());
        self.op_ids.insert(op.clone(), id);
        id
    }

    /// The id of a group body, interning it (bodies are keyed by kind and structure).
    pub fn group(&mut self, body: GroupBody) -> GroupId {
        let key = GroupKey::of(&body);
        if let Some(id) = self.group_ids.get(&key) {
            return *id;
        }
        let id = GroupId(self.groups.len() as u32);
        self.groups.push(body);
        self.group_ids.insert(key, id);
        id
    }
}
