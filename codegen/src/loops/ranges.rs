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
use kiln_ir::{BinaryOp, ReduceOp, UnaryOp};

/// The values a body value may take: every value lies in `[lo, hi]`, or is NaN when `nan`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValueRange {
    /// a lower bound (may be `-inf`)
    pub lo: f64,
    /// an upper bound (may be `+inf`)
    pub hi: f64,
    /// whether the value may be NaN
    pub nan: bool,
}

impl ValueRange {
    /// Any float, NaN included: what nothing is known of.
    pub const ANY: ValueRange = ValueRange {
        lo: f64::NEG_INFINITY,
        hi: f64::INFINITY,
        nan: true,
    };

    /// `[lo, hi]`, NaN when `nan`; an interval with a NaN bound is [`ValueRange::ANY`].
    pub fn new(lo: f64, hi: f64, nan: bool) -> ValueRange {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return ValueRange::ANY;
        }
        ValueRange { lo, hi, nan }
    }

    /// The interval grown by a relative 2^-16 and an absolute 2^-100 on each side: room
    /// for f32 rounding and for the approximations' errors (far smaller), so that a bound
    /// computed in f64 from the exact function also holds for the generated code.
    pub fn widened(self) -> ValueRange {
        let grow = |b: f64| b.abs() * (1.0 / 65536.0) + 1e-30;
        let lo = if self.lo.is_finite() {
            self.lo - grow(self.lo)
        } else {
            self.lo
        };
        let hi = if self.hi.is_finite() {
            self.hi + grow(self.hi)
        } else {
            self.hi
        };
        ValueRange { lo, hi, ..self }
    }

    /// True when every value is finite (no NaN, no infinity).
    pub fn is_finite(&self) -> bool {
        !self.nan && self.lo.is_finite() && self.hi.is_finite()
    }

    /// Whether the value may be `+inf` or `-inf`.
    fn may_be_infinite(&self) -> bool {
        self.lo == f64::NEG_INFINITY || self.hi == f64::INFINITY
    }

    /// The smallest interval holding both.
    fn hull(a: ValueRange, b: ValueRange) -> ValueRange {
        ValueRange::new(a.lo.min(b.lo), a.hi.max(b.hi), a.nan || b.nan)
    }

    /// `f` applied to both bounds of a non-decreasing `f`.
    fn monotone(self, f: impl Fn(f64) -> f64) -> ValueRange {
        ValueRange::new(f(self.lo), f(self.hi), self.nan).widened()
    }
}

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

fn unary(op: UnaryOp, x: ValueRange) -> ValueRange {
    use UnaryOp::*;
    match op {
        Neg => ValueRange::new(-x.hi, -x.lo, x.nan),
        Abs => {
            if x.lo >= 0.0 {
                x
            } else if x.hi <= 0.0 {
                ValueRange::new(-x.hi, -x.lo, x.nan)
            } else {
                ValueRange::new(0.0, x.hi.max(-x.lo), x.nan)
            }
        }
        Relu => ValueRange::new(x.lo.max(0.0), x.hi.max(0.0), x.nan),
        Exp => x.monotone(f64::exp).clamped(0.0, f64::INFINITY),
        Tanh => x.monotone(f64::tanh).clamped(-1.0, 1.0),
        Sigmoid => x.monotone(|t| 1.0 / (1.0 + (-t).exp())).clamped(0.0, 1.0),
        // |erf|, |sin| and |cos| are at most 1; sin and cos of ±inf are NaN
        Erf => ValueRange::new(-1.0, 1.0, x.nan),
        Sin | Cos => ValueRange::new(-1.0, 1.0, x.nan || x.may_be_infinite()),
        _ => ValueRange::ANY,
    }
}

impl ValueRange {
    /// The interval intersected with `[lo, hi]` (the function's own range).
    fn clamped(self, lo: f64, hi: f64) -> ValueRange {
        ValueRange::new(self.lo.max(lo), self.hi.min(hi), self.nan)
    }
}

fn binary(op: BinaryOp, x: ValueRange, y: ValueRange) -> ValueRange {
    let nan = x.nan || y.nan;
    match op {
        BinaryOp::Add => {
            // inf + -inf is NaN
            let opposite = (x.lo == f64::NEG_INFINITY && y.hi == f64::INFINITY)
                || (x.hi == f64::INFINITY && y.lo == f64::NEG_INFINITY);
            ValueRange::new(x.lo + y.lo, x.hi + y.hi, nan || opposite).widened()
        }
        BinaryOp::Sub => binary(BinaryOp::Add, x, unary(UnaryOp::Neg, y)),
        BinaryOp::Mul => {
            let p = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi];
            if p.iter().any(|v| v.is_nan()) {
                // 0 · inf is possible
                return ValueRange::ANY;
            }
            let lo = p.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            ValueRange::new(lo, hi, nan).widened()
        }
        BinaryOp::Maximum => ValueRange::new(x.lo.max(y.lo), x.hi.max(y.hi), nan),
        BinaryOp::Minimum => ValueRange::new(x.lo.min(y.lo), x.hi.min(y.hi), nan),
        _ => ValueRange::ANY,
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
