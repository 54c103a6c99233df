//! The conditions rules write after `if`: each reads the analysis data of the classes a match
//! bound (`?x`) or of the matched class itself, never the e-graph's structure.

use crate::egraph::analysis::ClassData;
use crate::egraph::TEGraph;
use egg::{Id, Subst, Var};
use kiln_ir::Scalar;

/// A condition of a rule (egg's `Condition` is implemented for such closures).
pub type Cond = Box<dyn Fn(&mut TEGraph, Id, &Subst) -> bool + Send + Sync>;

fn var(name: &str) -> Var {
    name.parse()
        .unwrap_or_else(|e| panic!("`{name}` is not a pattern variable: {e}"))
}

/// True when the classes are tensors of one type.
pub fn same_type(egraph: &TEGraph, a: Id, b: Id) -> bool {
    match (&egraph[a].data, &egraph[b].data) {
        (ClassData::Tensor { ty: x, .. }, ClassData::Tensor { ty: y, .. }) => x == y,
        _ => false,
    }
}

/// True when the class's value is `v`: a literal, or a tensor whose every element is `v`
/// (bools excluded: `true` is not the number 1 here).
pub fn value_is(egraph: &TEGraph, id: Id, v: f64) -> bool {
    let known = match &egraph[id].data {
        ClassData::Scalar(s) => Some(*s),
        ClassData::Tensor { konst, .. } => *konst,
    };
    known.is_some_and(|s| !matches!(s, Scalar::Bool(_)) && s.to_f64() == v)
}

/// The literal of a class, when it is one.
pub fn literal(egraph: &TEGraph, id: Id) -> Option<Scalar> {
    match &egraph[id].data {
        ClassData::Scalar(s) => Some(*s),
        ClassData::Tensor { .. } => None,
    }
}

/// `?c`'s value is `v` (a literal or a constant tensor).
pub fn is_value(c: &str, v: f64) -> Cond {
    let c = var(c);
    Box::new(move |eg, _, s| value_is(eg, s[c], v))
}

/// `?c` is a zero that leaves a float `?x` as it is when added (`negative`: only -0 does,
/// since -0 + +0 is +0) or subtracted (not `negative`: +0, an integer 0 included); for an
/// integer or bool `?x`, any zero.
pub fn is_neutral_zero(c: &str, x: &str, negative: bool) -> Cond {
    let (c, x) = (var(c), var(x));
    Box::new(move |eg, _, s| {
        if !value_is(eg, s[c], 0.0) {
            return false;
        }
        let float_x = eg[s[x]].data.ty().is_some_and(|t| t.dtype.is_float());
        let known = match &eg[s[c]].data {
            ClassData::Scalar(v) => Some(*v),
            ClassData::Tensor { konst, .. } => *konst,
        };
        !float_x
            || match known {
                Some(Scalar::Float(f)) => f.is_sign_negative() == negative,
                Some(Scalar::Int(_)) => !negative,
                _ => false,
            }
    })
}

/// `?x` has the matched class's type, so the class may be `?x` itself.
pub fn keeps_type(x: &str) -> Cond {
    let x = var(x);
    Box::new(move |eg, class, s| same_type(eg, s[x], class))
}

/// `?s` is a scalar literal.
pub fn is_literal(s: &str) -> Cond {
    let v = var(s);
    Box::new(move |eg, _, s| literal(eg, s[v]).is_some())
}

/// `?s` is a float literal.
pub fn is_float_literal(s: &str) -> Cond {
    let v = var(s);
    Box::new(move |eg, _, s| matches!(literal(eg, s[v]), Some(Scalar::Float(_))))
}

/// `?a` and `?b` have the same shape.
pub fn same_shape(a: &str, b: &str) -> Cond {
    let (a, b) = (var(a), var(b));
    Box::new(move |eg, _, s| {
        eg[s[a]].data.ty().map(|t| &t.shape) == eg[s[b]].data.ty().map(|t| &t.shape)
    })
}

/// Dropping an expand of the 0-d `?x` keeps the dtype an op computes in with `?y`: `?x`
/// has a dim, or `?y` is a literal or has `?x`'s dtype. A 0-d tensor takes part in type
/// promotion below the tensors that have dims, as in torch, where an expanded one is such a
/// tensor: `ne(f16[2], expand(f32[]))` compares in f32, `ne(f16[2], f32[])` in f16, and
/// the bool result's type does not show the difference.
pub fn expand_keeps_promotion(x: &str, y: &str) -> Cond {
    let (x, y) = (var(x), var(y));
    Box::new(move |eg, _, s| {
        let Some(tx) = eg[s[x]].data.ty() else {
            return true;
        };
        tx.shape.rank() > 0
            || match eg[s[y]].data.ty() {
                Some(ty) => ty.dtype == tx.dtype,
                None => true,
            }
    })
}
