//! [`Build`]: the applier of rules whose right side adds nodes. egg's own applier adds a
//! pattern's nodes as written, unchecked, and cannot say "the transpose the left side
//! matched"; `Build` can:
//!
//! 1. it matches the left side again at the matched class, under the match's substitution,
//!    to learn which op each op variable (`transpose{?t}`) matched — every consistent way:
//!    a variable written twice must match the same op both times;
//! 2. a hook ([`Hook`], optional) may refuse that match, or bind new op variables and
//!    pattern variables (a composed permutation, a folded literal);
//! 3. it adds the right side bottom-up with the bound ops, each node type-checked
//!    (`kiln_ir::infer`; an ill-typed node stops the build), and unions the result with the
//!    class when it has the class's type.
//!
//! Step 1 reads the e-class's nodes as they are when the rule applies (egg applies every
//! rule's matches before it rebuilds), so it can find more than the search did; every
//! binding it finds is a real set of nodes equal to the class, so each union is sound.

use super::cond::same_type;
use crate::egraph::analysis::add_op;
use crate::egraph::lang::TNode;
use crate::egraph::{TEGraph, TensorAnalysis};
use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Subst, Symbol, Var};
use kiln_ir::Op;
use std::sync::Arc;

/// The ops a match bound to the op variables of a rule's left side, by variable name (`t`
/// for `transpose{?t}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Binding(Vec<(Box<str>, Op)>);

impl Binding {
    /// The op bound to variable `name` (without the `?`).
    pub fn get(&self, name: &str) -> Option<&Op> {
        self.0.iter().find(|(n, _)| &**n == name).map(|(_, op)| op)
    }

    /// Binds `name` to `op`; false when it is bound to another op.
    pub fn bind(&mut self, name: &str, op: &Op) -> bool {
        match self.get(name) {
            Some(o) => o == op,
            None => {
                self.0.push((name.into(), op.clone()));
                true
            }
        }
    }
}

/// A rule's hook: sees the e-graph, the match's substitution and its op binding; may refuse
/// (false), bind new op variables, or add literals and bind them to new pattern variables.
pub type Hook = Arc<dyn Fn(&mut TEGraph, &mut Subst, &mut Binding) -> bool + Send + Sync>;

/// The applier that builds a rule's right side (see the module docs).
#[derive(Clone)]
pub struct Build {
    lhs: PatternAst<TNode>,
    rhs: PatternAst<TNode>,
    hook: Option<Hook>,
}

impl Build {
    /// Builds `rhs` for matches of `lhs` (both egg patterns over the e-graph language).
    /// Panics on a malformed pattern (rules are built once, in tests first).
    pub fn new(lhs: &str, rhs: &str) -> Build {
        let parse = |p: &str| {
            p.parse::<Pattern<TNode>>()
                .unwrap_or_else(|e| panic!("pattern `{p}`: {e}"))
                .ast
        };
        Build {
            lhs: parse(lhs),
            rhs: parse(rhs),
            hook: None,
        }
    }

    /// With a hook run on each binding before the right side is built.
    pub fn with(mut self, hook: Hook) -> Build {
        self.hook = Some(hook);
        self
    }
}

/// Every binding of `pat`'s node `at` matched at `class`, extending each of `partial`.
fn bind(
    eg: &TEGraph,
    pat: &PatternAst<TNode>,
    at: Id,
    class: Id,
    subst: &Subst,
    partial: Vec<Binding>,
) -> Vec<Binding> {
    match &pat[at] {
        ENodeOrVar::Var(v) => {
            let bound = subst
                .get(*v)
                .is_some_and(|&id| eg.find(id) == eg.find(class));
            if bound {
                partial
            } else {
                vec![]
            }
        }
        ENodeOrVar::ENode(p) => {
            let mut out: Vec<Binding> = Vec::new();
            for n in eg[class].nodes.iter().filter(|n| p.matches(n)) {
                let mut next: Vec<Binding> = partial.clone();
                if let (TNode::Op(ps, _), TNode::Op(ns, _)) = (p, n) {
                    if let (Some((_, name)), Some(op)) = (ps.as_var(), ns.op()) {
                        next.retain_mut(|b| b.bind(name, op));
                    }
                }
                for (pc, nc) in p.children().iter().zip(n.children()) {
                    if next.is_empty() {
                        break;
                    }
                    next = bind(eg, pat, *pc, *nc, subst, next);
                }
                for b in next {
                    if !out.contains(&b) {
                        out.push(b);
                    }
                }
            }
            out
        }
    }
}

/// Adds `pat` with `subst` and `binding`, bottom-up and type-checked: the root's class, or
/// `None` at the first node that does not type-check (the nodes below it stay added).
fn instantiate(
    eg: &mut TEGraph,
    pat: &PatternAst<TNode>,
    subst: &Subst,
    binding: &Binding,
) -> Option<Id> {
    let mut ids: Vec<Id> = Vec::with_capacity(pat.len());
    for node in pat.iter() {
        let id = match node {
            ENodeOrVar::Var(v) => *subst.get(*v)?,
            ENodeOrVar::ENode(TNode::Op(sym, children)) => {
                let op = match sym.as_var() {
                    Some((_, name)) => binding.get(name)?.clone(),
                    None => sym.op()?.clone(),
                };
                let args: Vec<Id> = children.iter().map(|c| ids[usize::from(*c)]).collect();
                add_op(eg, &op, &args)?
            }
            ENodeOrVar::ENode(other) => {
                let n = other.clone().map_children(|c| ids[usize::from(c)]);
                eg.add(n)
            }
        };
        ids.push(id);
    }
    ids.last().copied()
}

impl Applier<TNode, TensorAnalysis> for Build {
    fn apply_one(
        &self,
        egraph: &mut TEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<TNode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let root = Id::from(self.lhs.len() - 1);
        let mut changed = Vec::new();
        for mut binding in bind(
            egraph,
            &self.lhs,
            root,
            eclass,
            subst,
            vec![Binding::default()],
        ) {
            let mut subst = subst.clone();
            if let Some(hook) = &self.hook {
                if !hook(egraph, &mut subst, &mut binding) {
                    continue;
                }
            }
            let Some(id) = instantiate(egraph, &self.rhs, &subst, &binding) else {
                continue;
            };
            if same_type(egraph, id, eclass) && egraph.union(eclass, id) {
                changed.push(eclass);
            }
        }
        changed
    }

    fn vars(&self) -> Vec<Var> {
        // the variables the right side reads that the left side binds (a hook binds the rest)
        let lhs: Vec<Var> = self.lhs.iter().filter_map(as_var).collect();
        self.rhs
            .iter()
            .filter_map(as_var)
            .filter(|v| lhs.contains(v))
            .collect()
    }
}

fn as_var(n: &ENodeOrVar<TNode>) -> Option<Var> {
    match n {
        ENodeOrVar::Var(v) => Some(*v),
        ENodeOrVar::ENode(_) => None,
    }
}
