//! What one statement of a loop nest costs per element in generated CPU code, from its op's
//! cost class in the op table (and, for a transcendental on a bounded argument, the length of
//! the polynomial fitted to it). The unroll choice, the chain fitter and the thread split
//! read it.

use super::math::fitted_cost;
use crate::loops::{Expr, ValueRange};
use kiln_ir::CostClass;

/// The rough cost of one statement per element, in simple vector instructions: a
/// transcendental is about 24 (or its fitted polynomial's length plus 2 where its argument's
/// range, from `ranges`, allows one: see `math/fitted.rs`), `pow` (libm per lane) about 48.
pub(crate) fn stmt_cost(e: &Expr, ranges: &[ValueRange]) -> usize {
    match e {
        Expr::Unary(u, x) => match u.info().cost {
            CostClass::Transcendental => {
                let range = ranges.get(*x).copied().unwrap_or(ValueRange::ANY);
                fitted_cost(*u, range).unwrap_or(CostClass::Transcendental.instructions())
            }
            cost => cost.instructions(),
        },
        Expr::Binary(b, ..) => b.info().cost.instructions(),
        _ => 1,
    }
}
