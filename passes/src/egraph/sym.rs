//! [`OpSym`]: an op interned in a process-wide pool, as egg's own `Symbol` interns names,
//! so that an e-node prints and parses without an e-graph at hand.
//!
//! The pool holds each distinct op once (keyed by the `Op` value, which is `Eq + Hash`) and
//! holds it weakly, like `kiln_ir::Constant`'s pool: an op lives as long as some e-node or
//! rule refers to it, so a long-running process does not keep every op (and every
//! `from_vec` literal) it ever optimised. Two handles are equal exactly when they are the
//! same pooled entry, so comparing and hashing an e-node's op costs a pointer comparison and
//! a precomputed hash.
//!
//! Besides ops, the pool holds the *op variables* of rule patterns: `transpose{?t}` matches
//! every `transpose` whatever its attributes, `unary{?u}` every op of the `unary` family
//! (`neg`, `exp`, ...), `binary{?b}` every op of the `binary` family. They never enter an
//! e-graph; see [`super::lang`] for how matching stays sound.

use kiln_ir::{BinaryOp, Op, UnaryOp};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What an op variable of a pattern matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// every op with this (canonical) name, whatever its attributes
    Named(&'static str),
    /// every op of the `unary` family ([`Op::Unary`])
    Unary,
    /// every op of the `binary` family ([`Op::Binary`])
    Binary,
}

impl OpClass {
    /// The class written `name` in a pattern: `unary`, `binary`, or an op's name or alias.
    pub fn parse(name: &str) -> Option<OpClass> {
        match name {
            "unary" => return Some(OpClass::Unary),
            "binary" => return Some(OpClass::Binary),
            _ => {}
        }
        kiln_ir::ops::rows()
            .into_iter()
            .find(|r| r.name == name || r.aliases.contains(&name))
            .map(|r| OpClass::Named(r.name))
    }

    /// True when `op` belongs to the class.
    pub fn contains(self, op: &Op) -> bool {
        match self {
            OpClass::Named(n) => op.name() == n,
            OpClass::Unary => matches!(op, Op::Unary(_)),
            OpClass::Binary => matches!(op, Op::Binary(_)),
        }
    }

    /// The [`family`] every op of the class has.
    pub fn family(self) -> &'static str {
        match self {
            OpClass::Unary => "unary",
            OpClass::Binary => "binary",
            OpClass::Named(n) if UnaryOp::ALL.iter().any(|u| u.name() == n) => "unary",
            OpClass::Named(n) if BinaryOp::ALL.iter().any(|b| b.name() == n) => "binary",
            OpClass::Named(n) => n,
        }
    }

    /// How many operands the class's ops take, at fewest and at most.
    pub fn arity(self) -> (usize, usize) {
        match self {
            OpClass::Unary => (1, 1),
            OpClass::Binary => (2, 2),
            OpClass::Named(n) => kiln_ir::ops::rows()
                .into_iter()
                .filter(|r| r.name == n)
                .fold((usize::MAX, 0), |(lo, hi), r| {
                    (lo.min(r.arity.min), hi.max(r.arity.max))
                }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            OpClass::Named(n) => n,
            OpClass::Unary => "unary",
            OpClass::Binary => "binary",
        }
    }
}

/// The group of ops an e-node's discriminant names: `unary` for every [`Op::Unary`],
/// `binary` for every [`Op::Binary`], else the op's name. A pattern's op variable has the
/// family of every op it can match.
pub fn family(op: &Op) -> &'static str {
    match op {
        Op::Unary(_) => "unary",
        Op::Binary(_) => "binary",
        other => other.name(),
    }
}

/// What a pooled entry stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// an op
    Op(Op),
    /// an op variable of a pattern: its class and its name (`t` of `transpose{?t}`)
    Var(OpClass, Box<str>),
}

struct Entry {
    key: Key,
    /// the printed form: the compact op text, or `class{?name}`
    text: Box<str>,
    /// the discriminant family
    family: &'static str,
    /// a hash of `key`, the same in every run
    hash: u64,
}

/// An op (or a pattern's op variable) interned in the process-wide pool. Cloning is a
/// reference-count increment; equality is identity of the pooled entry, which the pool makes
/// the same as equality of the ops.
#[derive(Clone)]
pub struct OpSym(Arc<Entry>);

type Pool = Mutex<HashMap<u64, Vec<Weak<Entry>>>>;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(HashMap::new()))
}

fn stable_hash(key: &Key) -> u64 {
    // fixed keys: the same in every run, so egg's hash-ordered tables are too
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl OpSym {
    /// The pooled symbol of `op`.
    pub fn new(op: &Op) -> OpSym {
        OpSym::intern(Key::Op(op.clone()))
    }

    /// The pooled op variable `class{?name}` of a pattern.
    pub fn var(class: OpClass, name: &str) -> OpSym {
        OpSym::intern(Key::Var(class, name.into()))
    }

    fn intern(key: Key) -> OpSym {
        let hash = stable_hash(&key);
        let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
        let bucket = pool.entry(hash).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        if let Some(e) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|e| e.key == key)
        {
            return OpSym(e);
        }
        let (text, family) = match &key {
            Key::Op(op) => (kiln_ir::text::compact_op(op), family(op)),
            Key::Var(class, name) => (format!("{}{{?{name}}}", class.name()), class.family()),
        };
        let entry = Arc::new(Entry {
            key,
            text: text.into_boxed_str(),
            family,
            hash,
        });
        bucket.push(Arc::downgrade(&entry));
        OpSym(entry)
    }

    /// The op; `None` for a pattern's op variable (which never enters an e-graph).
    pub fn op(&self) -> Option<&Op> {
        match &self.0.key {
            Key::Op(op) => Some(op),
            Key::Var(..) => None,
        }
    }

    /// The op of an e-graph's node. Panics on a pattern's op variable: those are never added
    /// to an e-graph (appliers add ops only), so reaching one is a bug.
    pub fn expect_op(&self) -> &Op {
        self.op()
            .unwrap_or_else(|| panic!("the op variable `{self}` of a pattern entered an e-graph"))
    }

    /// The op variable's class and name; `None` for an op.
    pub fn as_var(&self) -> Option<(OpClass, &str)> {
        match &self.0.key {
            Key::Op(_) => None,
            Key::Var(class, name) => Some((*class, name)),
        }
    }

    /// The discriminant family ([`family`]).
    pub fn family(&self) -> &'static str {
        self.0.family
    }

    /// True when this (a pattern's node) matches `other` (an e-graph's node): the same op,
    /// or an op variable whose class holds `other`'s op.
    pub fn matches(&self, other: &OpSym) -> bool {
        if self == other {
            return true;
        }
        match (&self.0.key, other.op()) {
            (Key::Var(class, _), Some(op)) => class.contains(op),
            _ => false,
        }
    }
}

impl PartialEq for OpSym {
    fn eq(&self, other: &OpSym) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for OpSym {}

impl Hash for OpSym {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash.hash(state);
    }
}

/// Symbols sort by family first (`family_order`; so that the nodes one discriminant names
/// are adjacent in a sorted e-class), then by printed form: an order that is the same in
/// every run, whatever order the pool met the ops in. See [`super::lang`] for why that
/// matters.
impl Ord for OpSym {
    fn cmp(&self, other: &OpSym) -> Ordering {
        if self == other {
            return Ordering::Equal;
        }
        let (a, b) = (&self.0, &other.0);
        family_order(a.family, b.family)
            .then_with(|| a.text.cmp(&b.text))
            .then_with(|| a.hash.cmp(&b.hash))
            // distinct ops that print alike and collide in the hash (NaN payloads):
            // the entries' addresses, fixed while both are alive
            .then_with(|| Arc::as_ptr(a).cmp(&Arc::as_ptr(b)))
    }
}

impl PartialOrd for OpSym {
    fn partial_cmp(&self, other: &OpSym) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The order of families: by name. Any fixed order is sound (see [`super::lang`]); it
/// decides some ties in extraction (egg keeps the first of equally cheap nodes it meets).
fn family_order(a: &str, b: &str) -> Ordering {
    a.cmp(b)
}

impl fmt::Display for OpSym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.text)
    }
}

impl fmt::Debug for OpSym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.text)
    }
}
