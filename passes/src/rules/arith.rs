//! Algebraic identities: a unit operand, a double negation, a select between equal values.
//! All exact; each applies only when the kept operand has the result's type (`x * 1.0` with
//! an `i32` tensor `x` is an `f32` tensor, not `x`).

use super::cond::{is_neutral_zero, is_value, keeps_type};
use super::{rule, Rule};

/// The rules of this family.
pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule!("mul-one", Exact, "x * 1 = x",
            "(mul ?x ?c)" => "?x" if is_value("?c", 1.0) if keeps_type("?x")),
        rule!("one-mul", Exact, "1 * x = x",
            "(mul ?c ?x)" => "?x" if is_value("?c", 1.0) if keeps_type("?x")),
        // for floats only -0 is the additive identity (-0 + +0 is +0)
        rule!("add-zero", Exact, "x + -0 = x",
            "(add ?x ?c)" => "?x" if is_neutral_zero("?c", "?x", true) if keeps_type("?x")),
        rule!("zero-add", Exact, "-0 + x = x",
            "(add ?c ?x)" => "?x" if is_neutral_zero("?c", "?x", true) if keeps_type("?x")),
        rule!("sub-zero", Exact, "x - +0 = x",
            "(sub ?x ?c)" => "?x" if is_neutral_zero("?c", "?x", false) if keeps_type("?x")),
        rule!("div-one", Exact, "x / 1 = x",
            "(div ?x ?c)" => "?x" if is_value("?c", 1.0) if keeps_type("?x")),
        rule!("neg-neg", Exact, "-(-x) = x",
            "(neg (neg ?x))" => "?x" if keeps_type("?x")),
        rule!("where-same", Exact, "where(c, x, x) = x",
            "(where ?c ?x ?x)" => "?x" if keeps_type("?x")),
    ]
}
