//! Value ranges of a loop nest's body: for each float value, an interval that holds every
//! value it takes (bounds may be infinite) and whether it may be NaN. The code generators
//! use them to leave out the special-case handling of a transcendental where its argument
//! cannot reach the special cases: `sigmoid(tanh(..))` never overflows `exp`, and softmax's
//! `exp(x - max(x))` never overflows either. Inputs are unknown (any float, NaN included),
//! so the ranges come from constants and from what the ops themselves bound.
//!
//! The analysis is conservative: every rule returns an interval that contains the exact
//! result of the op on any arguments in the argument intervals, widened by a small margin
//! (see [`ValueRange::widened`]) so that it holds for the rounded f32 results and the
//! approximations of the transcendentals too.

use super::{Expr, ScalarType, Stmt, ValueId};
pub use kiln_ir::ValueRange;
use kiln_ir::{BinaryOp, RangeRule, ReduceOp, UnaryOp};

/// The range of every body value (Bool values get [`ValueRange::ANY`]).
pub fn value_ranges(body: &[Stmt]) -> Vec<ValueRange> {
    let mut r: Vec<ValueRange> = Vec::with_capacity(body.len());
    for (v, s) in body.iter().enumerate() {
        // the body is in dependency order except for values appended by later rewrites
        // (which use only earlier values); an operand not yet ranged counts as unknown
        let get = |x: ValueId| r.get(x).copied().unwrap_or(ValueRange::ANY);
        let range = if s.ty != ScalarType::F32 {
            ValueRange::ANY
        } else {
            match &s.expr {
                Expr::Load(_) => ValueRange::ANY,
                Expr::Const(c) => ValueRange::new(*c, *c, c.is_nan()),
                Expr::InnerLen => ValueRange::new(0.0, f64::INFINITY, false),
                Expr::BoolToF32(_) => ValueRange::new(0.0, 1.0, false),
                Expr::Widen(_) | Expr::Narrow(_) | Expr::Round(..) => ValueRange::ANY,
                Expr::Where(_, a, b) => ValueRange::hull(get(*a), get(*b)),
                Expr::Reduce(op, x) => reduce(*op, get(*x)),
                Expr::Unary(op, x) => unary(*op, get(*x)),
                Expr::Binary(BinaryOp::Sub, x, m) if is_max_of(body, *m, *x) => {
                    // `x - max(x)` over the same row: at most 0 (NaN from inf - inf)
                    let x = get(*x);
                    let nan = x.nan || x.may_be_infinite();
                    // exactly at most 0 (x ≤ max, and rounding is monotone); the lower
                    // bound is widened for rounding
                    let lo = ValueRange::new(x.lo - x.hi, 0.0, nan).widened().lo;
                    ValueRange::new(lo.min(0.0), 0.0, nan)
                }
                Expr::Binary(op, x, y) => binary(*op, get(*x), get(*y)),
            }
        };
        debug_assert_eq!(r.len(), v);
        r.push(range);
    }
    r
}

/// True when `m` is the row maximum of the point value `x` itself.
fn is_max_of(body: &[Stmt], m: ValueId, x: ValueId) -> bool {
    matches!(body[m].expr, Expr::Reduce(ReduceOp::Max, y) if y == x) && !body[x].row
}

fn reduce(op: ReduceOp, x: ValueRange) -> ValueRange {
    match op {
        // an empty row gives the identity: -inf for max, +inf for min
        ReduceOp::Max => ValueRange::new(f64::NEG_INFINITY, x.hi, x.nan),
        ReduceOp::Min => ValueRange::new(x.lo, f64::INFINITY, x.nan),
        // a sum of one-signed terms keeps the sign (and adds no NaN: no inf - inf)
        ReduceOp::Sum if x.lo >= 0.0 => ValueRange::new(0.0, f64::INFINITY, x.nan),
        ReduceOp::Sum if x.hi <= 0.0 => ValueRange::new(f64::NEG_INFINITY, 0.0, x.nan),
        ReduceOp::Sum | ReduceOp::Mean => ValueRange::ANY,
    }
}

/// The range of `op(x)`, by the op's rule in the table.
fn unary(op: UnaryOp, x: ValueRange) -> ValueRange {
    match op.info().range {
        RangeRule::Unary(f) => f(x),
        RangeRule::Binary(_) | RangeRule::NotFloat | RangeRule::None => ValueRange::ANY,
    }
}

/// The range of `x op y`, by the op's rule in the table.
fn binary(op: BinaryOp, x: ValueRange, y: ValueRange) -> ValueRange {
    match op.info().range {
        RangeRule::Binary(f) => f(x, y),
        RangeRule::Unary(_) | RangeRule::NotFloat | RangeRule::None => ValueRange::ANY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(expr: Expr, row: bool) -> Stmt {
        Stmt::f32(expr, row)
    }

    #[test]
    fn loads_are_unknown_and_constants_exact() {
        let body = vec![stmt(Expr::Load(0), false), stmt(Expr::Const(2.5), true)];
        let r = value_ranges(&body);
        assert_eq!(r[0], ValueRange::ANY);
        assert_eq!(r[1], ValueRange::new(2.5, 2.5, false));
    }

    #[test]
    fn tiny_chain_bounds_the_sigmoid_argument_and_the_tanh_input() {
        // sigmoid(tanh((x + 0.25) * 1.5)) + 0.3, times 1.4, into tanh
        let body = vec![
            stmt(Expr::Load(0), false),                     // 0
            stmt(Expr::Const(0.25), true),                  // 1
            stmt(Expr::Binary(BinaryOp::Add, 0, 1), false), // 2
            stmt(Expr::Const(1.5), true),                   // 3
            stmt(Expr::Binary(BinaryOp::Mul, 2, 3), false), // 4
            stmt(Expr::Unary(UnaryOp::Tanh, 4), false),     // 5
            stmt(Expr::Unary(UnaryOp::Sigmoid, 5), false),  // 6
            stmt(Expr::Const(0.3), true),                   // 7
            stmt(Expr::Binary(BinaryOp::Add, 6, 7), false), // 8
            stmt(Expr::Const(1.4), true),                   // 9
            stmt(Expr::Binary(BinaryOp::Mul, 8, 9), false), // 10
        ];
        let r = value_ranges(&body);
        assert_eq!(r[4], ValueRange::ANY);
        assert!(r[5].lo >= -1.0 && r[5].hi <= 1.0 && r[5].nan);
        let s = r[6];
        assert!(
            s.lo > 0.26 && s.lo < 0.27 && s.hi > 0.73 && s.hi < 0.74,
            "{s:?}"
        );
        let t = r[10];
        assert!(t.lo > 0.78 && t.hi < 1.46 && t.nan, "{t:?}");
    }

    #[test]
    fn softmax_exp_argument_is_at_most_zero() {
        let body = vec![
            stmt(Expr::Load(0), false),                     // 0: x
            stmt(Expr::Reduce(ReduceOp::Max, 0), true),     // 1: max
            stmt(Expr::Binary(BinaryOp::Sub, 0, 1), false), // 2: x - max
            stmt(Expr::Unary(UnaryOp::Exp, 2), false),      // 3
            stmt(Expr::Reduce(ReduceOp::Sum, 3), true),     // 4
            stmt(Expr::Load(1), false),                     // 5: y
            stmt(Expr::Binary(BinaryOp::Sub, 5, 1), false), // 6: y - max(x)
        ];
        let r = value_ranges(&body);
        assert_eq!(r[2], ValueRange::new(f64::NEG_INFINITY, 0.0, true));
        assert!(r[3].lo == 0.0 && r[3].hi <= 1.0 + 1e-4 && r[3].nan);
        assert_eq!(r[4].lo, 0.0);
        assert_eq!(r[6], ValueRange::ANY);
    }

    #[test]
    fn products_with_zero_and_infinity_are_unknown() {
        let body = vec![
            stmt(Expr::Load(0), false),
            stmt(Expr::Unary(UnaryOp::Exp, 0), false), // [0, inf]
            stmt(Expr::Const(0.0), true),
            stmt(Expr::Binary(BinaryOp::Mul, 1, 2), false), // inf · 0 possible
            stmt(Expr::Unary(UnaryOp::Neg, 1), false),
            stmt(Expr::Binary(BinaryOp::Add, 1, 4), false), // inf - inf possible
        ];
        let r = value_ranges(&body);
        assert_eq!(r[3], ValueRange::ANY);
        assert!(r[5].nan);
    }

    #[test]
    fn ranges_hold_on_samples() {
        // every op's range holds its f32 results at the bounds and inside
        let cases = [-3.0f64, -0.5, 0.0, 0.25, 2.0];
        for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Abs] {
            for (i, &a) in cases.iter().enumerate() {
                for &b in &cases[i..] {
                    let r = unary(op, ValueRange::new(a, b, false));
                    for k in 0..=16 {
                        let t = (a + (b - a) * k as f64 / 16.0) as f32;
                        let y = match op {
                            UnaryOp::Exp => t.exp(),
                            UnaryOp::Tanh => t.tanh(),
                            UnaryOp::Sigmoid => 1.0 / (1.0 + (-t).exp()),
                            _ => t.abs(),
                        } as f64;
                        assert!(
                            r.lo <= y && y <= r.hi,
                            "{op:?} on [{a}, {b}]: {y} outside {r:?}"
                        );
                    }
                }
            }
        }
    }
}
