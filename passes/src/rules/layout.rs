//! Layout: views and copies that change nothing, cancel or compose, and layout ops moved
//! through pointwise ops so that they meet and cancel (`neg(transpose(x))` is
//! `transpose(neg(x))`). All exact: they move values, never compute them.

use super::cond::{is_literal, keeps_type, same_shape};
use super::{rule, Binding, Hook, Rule};
use crate::egraph::TEGraph;
use egg::{Subst, Var};
use kiln_ir::shape::normalize_dim;
use kiln_ir::Op;
use std::sync::Arc;

/// The rules of this family.
pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule!("transpose-noop", Exact, "a transpose of a dim with itself is its operand",
            "(transpose{?t} ?x)" => build "?x" with swaps_nothing("t", "?x")),
        rule!("transpose-transpose", Exact, "a transpose undone by the same swap is its operand",
            "(transpose{?a} (transpose{?b} ?x))" => build "?x" with same_swap("a", "b", "?x")),
        rule!("permute-noop", Exact, "the identity permutation is its operand",
            "(permute{?p} ?x)" => build "?x" with identity("p")),
        rule!("permute-permute", Exact, "two permutes are one, of the composed permutation",
            "(permute{?p} (permute{?q} ?x))"
                => build "(permute{?r} ?x)" with compose("p", "q", "r")),
        rule!("reshape-noop", Exact, "a reshape to the operand's shape is its operand",
            "(reshape{?s} ?x)" => "?x" if keeps_type("?x")),
        rule!("reshape-reshape", Exact, "two reshapes are one, to the outer shape",
            "(reshape{?a} (reshape{?b} ?x))" => build "(reshape{?a} ?x)"),
        rule!("expand-noop", Exact, "an expand to the operand's shape is its operand",
            "(expand{?s} ?x)" => "?x" if keeps_type("?x")),
        rule!("cast-noop", Exact, "a cast to the operand's dtype is its operand",
            "(cast{?d} ?x)" => "?x" if keeps_type("?x")),
        rule!("contiguous", Exact, "a row-major copy has its operand's values",
            "(contiguous ?x)" => "?x" if keeps_type("?x")),
        rule!("unary-transpose", Exact, "a unary op moves inside a transpose",
            "(unary{?u} (transpose{?t} ?y))" => build "(transpose{?t} (unary{?u} ?y))"),
        rule!("unary-permute", Exact, "a unary op moves inside a permute",
            "(unary{?u} (permute{?t} ?y))" => build "(permute{?t} (unary{?u} ?y))"),
        rule!("cast-transpose", Exact, "a cast moves inside a transpose",
            "(cast{?c} (transpose{?t} ?y))" => build "(transpose{?t} (cast{?c} ?y))"),
        rule!("cast-permute", Exact, "a cast moves inside a permute",
            "(cast{?c} (permute{?t} ?y))" => build "(permute{?t} (cast{?c} ?y))"),
        rule!("binary-transpose", Exact, "op(transpose(x), transpose(y)) = transpose(op(x, y))",
            "(binary{?b} (transpose{?t} ?x) (transpose{?t} ?y))"
                => build "(transpose{?t} (binary{?b} ?x ?y))" if same_shape("?x", "?y")),
        rule!("binary-permute", Exact, "op(permute(x), permute(y)) = permute(op(x, y))",
            "(binary{?b} (permute{?t} ?x) (permute{?t} ?y))"
                => build "(permute{?t} (binary{?b} ?x ?y))" if same_shape("?x", "?y")),
        rule!("binary-transpose-literal", Exact, "op(transpose(x), c) = transpose(op(x, c))",
            "(binary{?b} (transpose{?t} ?x) ?s)"
                => build "(transpose{?t} (binary{?b} ?x ?s))" if is_literal("?s")),
        rule!("binary-permute-literal", Exact, "op(permute(x), c) = permute(op(x, c))",
            "(binary{?b} (permute{?t} ?x) ?s)"
                => build "(permute{?t} (binary{?b} ?x ?s))" if is_literal("?s")),
    ]
}

fn var(name: &str) -> Var {
    name.parse().expect("a pattern variable")
}

fn rank(eg: &TEGraph, s: &Subst, x: Var) -> usize {
    eg[s[x]].data.ty().map_or(0, |t| t.shape.rank())
}

/// The two dims a transpose swaps, normalised against `rank`, smaller first.
fn swapped(op: &Op, rank: usize) -> Option<(Option<usize>, Option<usize>)> {
    match op {
        Op::Transpose { dim0, dim1 } => {
            let (a, b) = (normalize_dim(*dim0, rank), normalize_dim(*dim1, rank));
            Some((a.min(b), a.max(b)))
        }
        _ => None,
    }
}

/// Transpose `t` of `?x` swaps a dim with itself.
fn swaps_nothing(t: &'static str, x: &str) -> Hook {
    let x = var(x);
    Arc::new(move |eg, s, b| {
        let r = rank(eg, s, x);
        b.get(t)
            .and_then(|op| swapped(op, r))
            .is_some_and(|(a, b)| a == b)
    })
}

/// Transposes `a` and `b` (of `?x`'s rank) swap the same two dims.
fn same_swap(a: &'static str, b: &'static str, x: &str) -> Hook {
    let x = var(x);
    Arc::new(move |eg, s, bind: &mut Binding| {
        let r = rank(eg, s, x);
        let swap = |n| bind.get(n).and_then(|op| swapped(op, r));
        swap(a).is_some() && swap(a) == swap(b)
    })
}

/// Permute `p` is the identity.
fn identity(p: &'static str) -> Hook {
    Arc::new(move |_, _, b| match b.get(p) {
        Some(Op::Permute { dims }) => dims.iter().enumerate().all(|(i, d)| i == *d),
        _ => false,
    })
}

/// Binds `r` to permute `p` after permute `q`: result dim `i` is `q[p[i]]`.
fn compose(p: &'static str, q: &'static str, r: &'static str) -> Hook {
    Arc::new(move |_, _, b| {
        let (Some(Op::Permute { dims: outer }), Some(Op::Permute { dims: inner })) =
            (b.get(p), b.get(q))
        else {
            return false;
        };
        let Some(dims) = outer.iter().map(|&i| inner.get(i).copied()).collect() else {
            return false;
        };
        b.bind(r, &Op::Permute { dims })
    })
}
