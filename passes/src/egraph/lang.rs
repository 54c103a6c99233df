//! The e-graph language: IR ops, graph inputs, scalar literals and fused kernel groups.
//!
//! # Representation
//!
//! An op node is `TNode::Op(OpSym, children)`. [`OpSym`] interns the `Op` value (which is
//! `Eq + Hash`) in a process-wide pool, the way egg interns its `Symbol`s: so a node prints
//! as kiln op text and parses back without an e-graph at hand (`Display`, `egg::FromOp`),
//! and rewrite rules are plain egg patterns over that text:
//!
//! ```text
//! in0   1.0   true   (mul in0 1.0)   (transpose{dim0=0,dim1=1} in0)   (group3 in0 in1)
//! ```
//!
//! Ops print in their compact form (`kiln_ir::text::compact_op`: the IR's op text without
//! spaces, so that it is one token of an s-expression); literals as the IR writes scalars;
//! `inN` is graph input `N`; `groupN` is kernel group `N` of the e-graph's [`Interner`]
//! (group bodies are graphs, interned per e-graph by their structure). A pattern may also
//! name an *op variable*: `transpose{?t}` matches any `transpose`, `unary{?u}` any op of
//! the unary family, `binary{?b}` any binary op (see [`super::sym::OpClass`]); appliers
//! read the matched ops' attributes from the e-class (`crate::rules`).
//!
//! # Matching and ordering
//!
//! egg finds a pattern node's matches in an e-class by its [`Language::discriminant`], and in
//! classes of 50 nodes or more by binary search: it looks up the pattern node's place in the
//! class's sorted nodes, walks back while the discriminant is the same, and takes the nodes
//! forward while it stays the same, keeping those [`Language::matches`] accepts. That is
//! sound when (1) every node a pattern node matches has the pattern node's discriminant,
//! and (2) the nodes of one discriminant are adjacent in the order, so that the pattern
//! node's place falls inside (or at an end of) their run. Here:
//!
//! * the discriminant of an op node is its op's *family*: `unary` for every unary op,
//!   `binary` for every binary op, else the op's name; an op variable has the family of
//!   every op its class holds (`transpose{?t}`: `transpose`; `unary{?u}`: `unary`), so (1);
//! * nodes order by variant (inputs, literals, ops, groups), then ops by family (in a fixed
//!   order, see `sym.rs`), then by printed text, then children: families are a prefix of
//!   the order, so (2). An op variable sorts somewhere inside its family's run, which is all
//!   the walk needs;
//! * `matches` compares the op (or the op variable's class) and the number of children,
//!   never the children themselves.
//!
//! The order is the same in every run: it depends on the ops' text, not on the order the
//! pool first saw them (a process optimises many graphs, on several threads). Extraction
//! breaks cost ties by it (egg keeps the first of equally cheap nodes), so it is part of
//! the optimiser's output.

use super::sym::OpSym;
use egg::{FromOp, Id, Language};
use kiln_ir::{Arg, Graph, Op, Scalar, TensorType};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;

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

    /// The literal written `s` (`1`, `-0.5`, `1e-5`, `inf`, `nan`, `true`), as
    /// [`Scalar`]'s `Display` writes it.
    pub fn parse(s: &str) -> Option<Lit> {
        match s {
            "true" => return Some(Lit::Bool(true)),
            "false" => return Some(Lit::Bool(false)),
            _ => {}
        }
        if let Ok(i) = s.parse::<i64>() {
            return Some(Lit::Int(i));
        }
        let starts_like_a_number = s
            .trim_start_matches(['-', '+'])
            .starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == 'i' || c == 'n');
        if !starts_like_a_number {
            return None;
        }
        s.parse::<f64>().ok().map(|v| Lit::Float(v.to_bits()))
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
    Op(OpSym, SmallVec<[Id; 3]>),
    /// a fused kernel group applied to its tensor inputs
    Group(GroupId, SmallVec<[Id; 4]>),
}

impl TNode {
    /// The node applying `op` to `args`.
    pub fn op(op: &Op, args: &[Id]) -> TNode {
        TNode::Op(OpSym::new(op), args.iter().copied().collect())
    }
}

/// What egg looks nodes up by (see the module docs): inputs by number, every literal alike
/// (`matches` compares values), ops by family, groups by group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Discriminant {
    /// graph input `n`
    Input(u32),
    /// a literal
    Lit,
    /// an op of this family ([`super::sym::family`])
    Op(&'static str),
    /// a kernel group
    Group(GroupId),
}

impl Language for TNode {
    type Discriminant = Discriminant;

    fn discriminant(&self) -> Discriminant {
        match self {
            TNode::Input(n) => Discriminant::Input(*n),
            TNode::Lit(_) => Discriminant::Lit,
            TNode::Op(o, _) => Discriminant::Op(o.family()),
            TNode::Group(g, _) => Discriminant::Group(*g),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (TNode::Input(a), TNode::Input(b)) => a == b,
            (TNode::Lit(a), TNode::Lit(b)) => a == b,
            (TNode::Op(p, a), TNode::Op(q, b)) => a.len() == b.len() && p.matches(q),
            (TNode::Group(g, a), TNode::Group(h, b)) => g == h && a.len() == b.len(),
            _ => false,
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
            TNode::Op(o, _) => write!(f, "{o}"),
            TNode::Group(g, _) => write!(f, "group{}", g.0),
        }
    }
}

/// Why a token does not make an e-node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{token}` with {children} operand(s): {reason}")]
pub struct NodeParseError {
    /// the token
    pub token: String,
    /// how many operands it was given
    pub children: usize,
    /// what is wrong
    pub reason: String,
}

fn numbered(token: &str, prefix: &str) -> Option<u32> {
    let digits = token.strip_prefix(prefix)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Reads the printed form back: `inN`, a literal, `groupN`, op text (`mul`,
/// `transpose{dim0=0,dim1=1}`), or a pattern's op variable (`transpose{?t}`, `unary{?u}`).
impl FromOp for TNode {
    type Error = NodeParseError;

    fn from_op(op: &str, children: Vec<Id>) -> Result<TNode, NodeParseError> {
        let err = |reason: String| NodeParseError {
            token: op.to_string(),
            children: children.len(),
            reason,
        };
        let leaf = |node: TNode| {
            if children.is_empty() {
                Ok(node)
            } else {
                Err(err("takes no operands".into()))
            }
        };
        if let Some(n) = numbered(op, "in") {
            return leaf(TNode::Input(n));
        }
        if let Some(g) = numbered(op, "group") {
            return Ok(TNode::Group(GroupId(g), children.into_iter().collect()));
        }
        if let Some(l) = Lit::parse(op) {
            return leaf(TNode::Lit(l));
        }
        let (sym, (lo, hi)) = match op.split_once("{?") {
            Some((class, var)) => {
                let var = var
                    .strip_suffix('}')
                    .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_alphanumeric() || c == '_'))
                    .ok_or_else(|| err("an op variable is written `name{?var}`".into()))?;
                let class = super::sym::OpClass::parse(class)
                    .ok_or_else(|| err(format!("`{class}` is not an op, `unary` or `binary`")))?;
                (OpSym::var(class, var), class.arity())
            }
            None => {
                let parsed = kiln_ir::text::parse_op(op).map_err(|e| err(e.to_string()))?;
                let a = parsed.info().arity;
                (OpSym::new(&parsed), (a.min, a.max))
            }
        };
        if children.len() < lo || children.len() > hi {
            return Err(err(format!("the op takes {lo} to {hi} operands")));
        }
        Ok(TNode::Op(sym, children.into_iter().collect()))
    }
}

pub use crate::fused::GroupKind;

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

/// The interned group bodies of one e-graph, and the fusion rules' memory of what they
/// tried.
#[derive(Default)]
pub struct Interner {
    /// every group body, by id
    pub groups: Vec<GroupBody>,
    group_ids: HashMap<GroupKey, GroupId>,
    /// merges already tried: (consumer group, producer group, operand, operands) -> the
    /// merged group and its operands, or `None` when illegal
    pub merge_cache: HashMap<MergeKey, Option<(usize, Vec<egg::Id>)>>,
    /// all-at-once merges already tried: (group, operands)
    pub merge_alls: std::collections::HashSet<(u32, Vec<egg::Id>)>,
    /// singleton groups already tried: (op, operands)
    pub wraps: std::collections::HashSet<(OpSym, Vec<egg::Id>)>,
}

impl Interner {
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
