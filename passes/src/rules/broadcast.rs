//! Broadcast elimination: a pointwise op broadcasts its operands itself, so an `expand`
//! feeding it can go when the op's result keeps its type (`add(expand(x), y) = add(x, y)`)
//! and the op computes in the same dtype (an expanded 0-d `x` of another dtype than `y`
//! stays: see [`expand_keeps_promotion`]). Exact: the same elements meet.

use super::cond::expand_keeps_promotion;
use super::{rule, Rule};

/// The rules of this family.
pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule!("broadcast-lhs", Exact, "a binary op broadcasts an expanded first operand itself",
            "(binary{?b} (expand{?e} ?x) ?y)" => build "(binary{?b} ?x ?y)"
            if expand_keeps_promotion("?x", "?y")),
        rule!("broadcast-rhs", Exact, "a binary op broadcasts an expanded second operand itself",
            "(binary{?b} ?x (expand{?e} ?y))" => build "(binary{?b} ?x ?y)"
            if expand_keeps_promotion("?y", "?x")),
        rule!("broadcast-where-cond", Exact, "where broadcasts an expanded condition itself",
            "(where (expand{?e} ?c) ?x ?y)" => build "(where ?c ?x ?y)"),
        rule!("broadcast-where-then", Exact, "where broadcasts an expanded first value itself",
            "(where ?c (expand{?e} ?x) ?y)" => build "(where ?c ?x ?y)"
            if expand_keeps_promotion("?x", "?y")),
        rule!("broadcast-where-else", Exact, "where broadcasts an expanded second value itself",
            "(where ?c ?x (expand{?e} ?y))" => build "(where ?c ?x ?y)"
            if expand_keeps_promotion("?y", "?x")),
    ]
}
