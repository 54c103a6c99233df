//! Rewrite rules over e-classes, and the exact algebraic identities.
//!
//! The exact rules: `x*1, x+0, x-0, x/1 -> x` (when the type is kept), `where(c, x, x)`,
//! `neg∘neg`, `transpose∘transpose`, `permute∘permute`, `reshape∘reshape`, no-op
//! reshapes, expands and casts, `contiguous` (a layout-only copy), expand elimination
//! under broadcasting, and transposes/permutes moved through pointwise ops. Constant
//! folding lives in the analysis; common subexpressions are shared by construction.
//!
//! A [`ClassRule`] looks at one e-class at a time and adds nodes equal to it; it is wrapped
//! as an egg `Rewrite` so that egg's `Runner` applies it with its node, iteration and time
//! limits. Identities are exact: each checks that the rewritten value has the same type
//! (`x * 1` is `x` only when the product does not promote `x`'s dtype). Rewrites that change
//! floating-point rounding are only in [`fast_math_rules`].

use super::analysis::{add_lit, add_op, ClassData, TensorAnalysis};
use super::lang::TNode;
use egg::{Applier, EGraph, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use kiln_ir::shape::normalize_dim;
use kiln_ir::{BinaryOp, Op, Scalar, UnaryOp};

/// The e-graph kiln optimises.
pub type TEGraph = EGraph<TNode, TensorAnalysis>;

/// A rule applied class by class: returns ids equal to the class (added as needed).
#[derive(Clone)]
pub struct ClassRule {
    /// the rule's name (in logs)
    pub name: &'static str,
    /// equal forms of the class
    pub apply: fn(&mut TEGraph, Id) -> Vec<Id>,
}

impl Searcher<TNode, TensorAnalysis> for ClassRule {
    fn search_eclass_with_limit(
        &self,
        egraph: &TEGraph,
        eclass: Id,
        _limit: usize,
    ) -> Option<SearchMatches<'_, TNode>> {
        matches!(egraph[eclass].data, ClassData::Tensor { .. }).then(|| SearchMatches {
            eclass,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<TNode, TensorAnalysis> for ClassRule {
    fn apply_one(
        &self,
        egraph: &mut TEGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TNode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let mut changed = Vec::new();
        for id in (self.apply)(egraph, eclass) {
            if egraph.union(eclass, id) {
                changed.push(eclass);
            }
        }
        changed
    }
}

impl ClassRule {
    /// As an egg rewrite.
    pub fn rewrite(&self) -> Rewrite<TNode, TensorAnalysis> {
        Rewrite::new(self.name, self.clone(), self.clone()).expect("class rules bind no vars")
    }
}

/// The ops (with their children) of a class.
pub fn ops_of(egraph: &TEGraph, id: Id) -> Vec<(Op, Vec<Id>)> {
    egraph[id]
        .nodes
        .iter()
        .filter_map(|n| match n {
            TNode::Op(o, args) => Some((o.expect_op().clone(), args.to_vec())),
            _ => None,
        })
        .collect()
}

fn lit_of(egraph: &TEGraph, id: Id) -> Option<Scalar> {
    match &egraph[id].data {
        ClassData::Scalar(s) => Some(*s),
        ClassData::Tensor { .. } => None,
    }
}

fn same_type(egraph: &TEGraph, a: Id, b: Id) -> bool {
    match (&egraph[a].data, &egraph[b].data) {
        (ClassData::Tensor { ty: x, .. }, ClassData::Tensor { ty: y, .. }) => x == y,
        _ => false,
    }
}

fn is_value(egraph: &TEGraph, id: Id, v: f64) -> bool {
    match &egraph[id].data {
        ClassData::Scalar(s) => !matches!(s, Scalar::Bool(_)) && s.to_f64() == v,
        ClassData::Tensor { konst: Some(s), .. } => {
            !matches!(s, Scalar::Bool(_)) && s.to_f64() == v
        }
        _ => false,
    }
}

/// `x*1, 1*x, x+0, 0+x, x-0, x/1 -> x`, `where(c, x, x) -> x`, `neg(neg(x))`,
/// `transpose∘transpose`,
/// `permute∘permute`, `reshape∘reshape`, and layout ops or casts that change nothing.
fn identities(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for (op, args) in ops_of(egraph, id) {
        match (&op, args.as_slice()) {
            (Op::Binary(b), &[x, y]) => {
                let keep = |keep: Id, other: Id, unit: f64| {
                    is_value(egraph, other, unit) && same_type(egraph, keep, id)
                };
                match b {
                    BinaryOp::Mul if keep(x, y, 1.0) => out.push(x),
                    BinaryOp::Mul if keep(y, x, 1.0) => out.push(y),
                    BinaryOp::Add if keep(x, y, 0.0) => out.push(x),
                    BinaryOp::Add if keep(y, x, 0.0) => out.push(y),
                    BinaryOp::Sub if keep(x, y, 0.0) => out.push(x),
                    BinaryOp::Div if keep(x, y, 1.0) => out.push(x),
                    _ => {}
                }
            }
            (Op::Unary(UnaryOp::Neg), &[x]) => {
                for (inner, a) in ops_of(egraph, x) {
                    if inner == Op::Unary(UnaryOp::Neg) {
                        out.push(a[0]);
                    }
                }
            }
            (Op::Transpose { dim0, dim1 }, &[x]) => {
                let rank = egraph[x].data.ty().map_or(0, |t| t.shape.rank());
                let norm = |a: i64, b: i64| {
                    let (a, b) = (normalize_dim(a, rank), normalize_dim(b, rank));
                    (a.min(b), a.max(b))
                };
                if norm(*dim0, *dim1).0 == norm(*dim0, *dim1).1 {
                    out.push(x);
                }
                for (inner, a) in ops_of(egraph, x) {
                    if let Op::Transpose { dim0: e0, dim1: e1 } = inner {
                        if norm(e0, e1) == norm(*dim0, *dim1) {
                            out.push(a[0]);
                        }
                    }
                }
            }
            (Op::Permute { dims }, &[x]) => {
                if dims.iter().enumerate().all(|(i, d)| i == *d) {
                    out.push(x);
                }
                for (inner, a) in ops_of(egraph, x) {
                    if let Op::Permute { dims: q } = inner {
                        let r: Vec<usize> = dims.iter().map(|&p| q[p]).collect();
                        if let Some(n) = add_op(egraph, &Op::Permute { dims: r }, &[a[0]]) {
                            out.push(n);
                        }
                    }
                }
            }
            (Op::Reshape { shape }, &[x]) => {
                if egraph[x].data.ty().is_some_and(|t| t.shape == *shape) {
                    out.push(x);
                }
                for (inner, a) in ops_of(egraph, x) {
                    if matches!(inner, Op::Reshape { .. }) {
                        if let Some(n) = add_op(egraph, &op, &[a[0]]) {
                            out.push(n);
                        }
                    }
                }
            }
            (Op::Expand { shape }, &[x])
                if egraph[x].data.ty().is_some_and(|t| t.shape == *shape) =>
            {
                out.push(x)
            }
            (Op::Cast { dtype }, &[x])
                if egraph[x].data.ty().is_some_and(|t| t.dtype == *dtype) =>
            {
                out.push(x)
            }
            (Op::Contiguous, &[x]) => out.push(x),
            (Op::Where, &[_, a, b])
                if egraph.find(a) == egraph.find(b) && same_type(egraph, a, id) =>
            {
                out.push(a)
            }
            _ => {}
        }
    }
    out
}

/// Layout ops moved through pointwise ops: `u(transpose(x)) = transpose(u(x))`, and
/// `b(transpose(x), transpose(y)) = transpose(b(x, y))` for equal shapes (the same for
/// `permute`), so that layout ops meet and cancel.
fn layout_through_pointwise(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for (op, args) in ops_of(egraph, id) {
        let layout_of = |egraph: &TEGraph, x: Id| -> Vec<(Op, Id)> {
            ops_of(egraph, x)
                .into_iter()
                .filter(|(o, _)| matches!(o, Op::Transpose { .. } | Op::Permute { .. }))
                .map(|(o, a)| (o, a[0]))
                .collect()
        };
        match (&op, args.as_slice()) {
            (Op::Unary(_) | Op::Cast { .. }, &[x]) => {
                for (l, inner) in layout_of(egraph, x) {
                    if let Some(u) = add_op(egraph, &op, &[inner]) {
                        if let Some(t) = add_op(egraph, &l, &[u]) {
                            out.push(t);
                        }
                    }
                }
            }
            (Op::Binary(_), &[x, y]) => {
                let (lx, ly) = (layout_of(egraph, x), layout_of(egraph, y));
                for (l1, a) in &lx {
                    for (l2, b) in &ly {
                        let same_shape = egraph[*a].data.ty().map(|t| &t.shape)
                            == egraph[*b].data.ty().map(|t| &t.shape);
                        if l1 == l2 && same_shape {
                            if let Some(v) = add_op(egraph, &op, &[*a, *b]) {
                                if let Some(t) = add_op(egraph, l1, &[v]) {
                                    out.push(t);
                                }
                            }
                        }
                    }
                    if lit_of(egraph, y).is_some() {
                        if let Some(v) = add_op(egraph, &op, &[*a, y]) {
                            if let Some(t) = add_op(egraph, l1, &[v]) {
                                out.push(t);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Broadcast elimination: a pointwise op broadcasts its operands itself, so an `expand`
/// feeding it can go when the op's result keeps its type: `add(expand(x), y) = add(x, y)`.
fn broadcast_elimination(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for (op, args) in ops_of(egraph, id) {
        if !matches!(op, Op::Binary(_) | Op::Where) {
            continue;
        }
        for (i, a) in args.iter().enumerate() {
            for (inner, ia) in ops_of(egraph, *a) {
                if matches!(inner, Op::Expand { .. }) {
                    let mut new_args = args.clone();
                    new_args[i] = ia[0];
                    if let Some(n) = add_op(egraph, &op, &new_args) {
                        if same_type(egraph, n, id) {
                            out.push(n);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Value-changing float rewrites, only with `fast_math`: `x / c = x * (1/c)` and
/// `(x * a) * b = x * (a*b)` for literals.
fn reassociate(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for (op, args) in ops_of(egraph, id) {
        match (&op, args.as_slice()) {
            (Op::Binary(BinaryOp::Div), &[x, c]) => {
                if let Some(Scalar::Float(v)) = lit_of(egraph, c) {
                    let r = add_lit(egraph, Scalar::Float(1.0 / v));
                    if let Some(n) = add_op(egraph, &Op::Binary(BinaryOp::Mul), &[x, r]) {
                        if same_type(egraph, n, id) {
                            out.push(n);
                        }
                    }
                }
            }
            (Op::Binary(BinaryOp::Mul), &[xa, b]) => {
                let Some(Scalar::Float(bv)) = lit_of(egraph, b) else {
                    continue;
                };
                for (inner, ia) in ops_of(egraph, xa) {
                    if inner == Op::Binary(BinaryOp::Mul) {
                        if let Some(Scalar::Float(av)) = lit_of(egraph, ia[1]) {
                            let ab = add_lit(egraph, Scalar::Float(av * bv));
                            if let Some(n) = add_op(egraph, &inner, &[ia[0], ab]) {
                                if same_type(egraph, n, id) {
                                    out.push(n);
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The exact simplification rules.
pub fn simplify_rules() -> Vec<ClassRule> {
    vec![
        ClassRule {
            name: "identities",
            apply: identities,
        },
        ClassRule {
            name: "layout-through-pointwise",
            apply: layout_through_pointwise,
        },
        ClassRule {
            name: "broadcast-elimination",
            apply: broadcast_elimination,
        },
    ]
}

/// The value-changing rules enabled by `fast_math`.
pub fn fast_math_rules() -> Vec<ClassRule> {
    vec![ClassRule {
        name: "reassociate",
        apply: reassociate,
    }]
}
