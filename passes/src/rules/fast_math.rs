//! Value-changing float rewrites, only with `OptimizeOptions::fast_math`: each saves an op
//! or a division but rounds differently (`x / 3` and `x * (1/3)` differ in the last bit).

use super::cond::{is_float_literal, literal};
use super::{rule, Hook, Rule};
use crate::egraph::analysis::add_lit;
use egg::Var;
use kiln_ir::Scalar;
use std::sync::Arc;

/// The rules of this family.
pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule!("div-literal", FastMath, "x / c = x * (1/c) for a float literal c",
            "(div ?x ?c)" => build "(mul ?x ?r)" with fold("?r", &["?c"], |v| 1.0 / v[0])
                if is_float_literal("?c")),
        rule!("mul-mul-literals", FastMath, "(x * a) * b = x * (a*b) for float literals a, b",
            "(mul (mul ?x ?a) ?b)"
                => build "(mul ?x ?ab)" with fold("?ab", &["?a", "?b"], |v| v[0] * v[1])
                if is_float_literal("?a") if is_float_literal("?b")),
    ]
}

/// Binds `out` to a new float literal: `f` of the float literals bound to `from`.
fn fold(out: &str, from: &[&str], f: fn(&[f64]) -> f64) -> Hook {
    let out: Var = out.parse().expect("a pattern variable");
    let from: Vec<Var> = from
        .iter()
        .map(|v| v.parse().expect("a pattern variable"))
        .collect();
    Arc::new(move |eg, s, _| {
        let mut vals = Vec::with_capacity(from.len());
        for v in &from {
            match literal(eg, s[*v]) {
                Some(Scalar::Float(x)) => vals.push(x),
                _ => return false,
            }
        }
        let lit = add_lit(eg, Scalar::Float(f(&vals)));
        s.insert(out, lit);
        true
    })
}
