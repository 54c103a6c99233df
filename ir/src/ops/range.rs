//! Value ranges and the range rule of each pointwise op: for a value, an interval that holds
//! every value it takes (bounds may be infinite) and whether it may be NaN. The op table
//! names one rule per pointwise op ([`crate::ops::RangeRule`]); the loop-nest analysis
//! (`codegen/src/loops/ranges.rs`) applies them to a kernel's body, and the code generators
//! leave out special cases an argument cannot reach.
//!
//! Every rule is conservative: it returns an interval that contains the exact result of the
//! op on any arguments in the argument intervals, widened by a small margin
//! ([`ValueRange::widened`]) so that it holds for rounded f32 results and for the
//! approximations of the transcendentals too. A rule that knows nothing returns
//! [`ValueRange::ANY`].

/// The values a value may take: every value lies in `[lo, hi]`, or is NaN when `nan`.
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
    pub fn may_be_infinite(&self) -> bool {
        self.lo == f64::NEG_INFINITY || self.hi == f64::INFINITY
    }

    /// The smallest interval holding both.
    pub fn hull(a: ValueRange, b: ValueRange) -> ValueRange {
        ValueRange::new(a.lo.min(b.lo), a.hi.max(b.hi), a.nan || b.nan)
    }

    /// `f` applied to both bounds of a non-decreasing `f`, widened.
    pub fn monotone(self, f: impl Fn(f64) -> f64) -> ValueRange {
        ValueRange::new(f(self.lo), f(self.hi), self.nan).widened()
    }

    /// The interval intersected with `[lo, hi]` (the function's own range).
    pub fn clamped(self, lo: f64, hi: f64) -> ValueRange {
        ValueRange::new(self.lo.max(lo), self.hi.min(hi), self.nan)
    }
}

/// The rules the op table names. Unary rules take the argument's range, binary ones both.
pub mod rules {
    use super::ValueRange;

    /// Nothing is known of the result.
    pub fn any1(_: ValueRange) -> ValueRange {
        ValueRange::ANY
    }

    /// Nothing is known of the result.
    pub fn any2(_: ValueRange, _: ValueRange) -> ValueRange {
        ValueRange::ANY
    }

    /// `-x`
    pub fn neg(x: ValueRange) -> ValueRange {
        ValueRange::new(-x.hi, -x.lo, x.nan)
    }

    /// `|x|`
    pub fn abs(x: ValueRange) -> ValueRange {
        if x.lo >= 0.0 {
            x
        } else if x.hi <= 0.0 {
            ValueRange::new(-x.hi, -x.lo, x.nan)
        } else {
            ValueRange::new(0.0, x.hi.max(-x.lo), x.nan)
        }
    }

    /// `max(x, 0)` (NaN stays NaN)
    pub fn relu(x: ValueRange) -> ValueRange {
        ValueRange::new(x.lo.max(0.0), x.hi.max(0.0), x.nan)
    }

    /// `e^x`, in `[0, inf]`
    pub fn exp(x: ValueRange) -> ValueRange {
        x.monotone(f64::exp).clamped(0.0, f64::INFINITY)
    }

    /// `2^x`, in `[0, inf]`
    pub fn exp2(x: ValueRange) -> ValueRange {
        x.monotone(f64::exp2).clamped(0.0, f64::INFINITY)
    }

    /// `e^x - 1`, in `[-1, inf]`
    pub fn expm1(x: ValueRange) -> ValueRange {
        x.monotone(f64::exp_m1).clamped(-1.0, f64::INFINITY)
    }

    /// `log(1 + x)`: non-decreasing above -1 (below it NaN)
    pub fn log1p(x: ValueRange) -> ValueRange {
        if x.lo >= -1.0 {
            x.monotone(f64::ln_1p)
        } else {
            ValueRange::ANY
        }
    }

    /// `tanh x`, in `[-1, 1]`
    pub fn tanh(x: ValueRange) -> ValueRange {
        x.monotone(f64::tanh).clamped(-1.0, 1.0)
    }

    /// `1/(1+e^-x)`, in `[0, 1]`
    pub fn sigmoid(x: ValueRange) -> ValueRange {
        x.monotone(|t| 1.0 / (1.0 + (-t).exp())).clamped(0.0, 1.0)
    }

    /// `atan x`, in `[-π/2, π/2]`
    pub fn atan(x: ValueRange) -> ValueRange {
        let h = std::f64::consts::FRAC_PI_2;
        x.monotone(f64::atan).clamped(-h, h)
    }

    /// `|erf x| ≤ 1`
    pub fn erf(x: ValueRange) -> ValueRange {
        ValueRange::new(-1.0, 1.0, x.nan)
    }

    /// `|sin x|, |cos x| ≤ 1`; sin and cos of ±inf are NaN
    pub fn sin_cos(x: ValueRange) -> ValueRange {
        ValueRange::new(-1.0, 1.0, x.nan || x.may_be_infinite())
    }

    /// floor, ceil, round, trunc: non-decreasing
    pub fn rounding(x: ValueRange) -> ValueRange {
        ValueRange::new(x.lo.floor(), x.hi.ceil(), x.nan)
    }

    /// `sign x` in `{-1, 0, 1}`
    pub fn sign(x: ValueRange) -> ValueRange {
        ValueRange::new(x.lo.signum().min(0.0), x.hi.signum().max(0.0), x.nan)
    }

    /// `x + y` (inf + -inf is NaN)
    pub fn add(x: ValueRange, y: ValueRange) -> ValueRange {
        let nan = x.nan || y.nan;
        let opposite = (x.lo == f64::NEG_INFINITY && y.hi == f64::INFINITY)
            || (x.hi == f64::INFINITY && y.lo == f64::NEG_INFINITY);
        ValueRange::new(x.lo + y.lo, x.hi + y.hi, nan || opposite).widened()
    }

    /// `x - y`
    pub fn sub(x: ValueRange, y: ValueRange) -> ValueRange {
        add(x, neg(y))
    }

    /// `x · y` (0 · inf is NaN)
    pub fn mul(x: ValueRange, y: ValueRange) -> ValueRange {
        let p = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi];
        if p.iter().any(|v| v.is_nan()) {
            return ValueRange::ANY;
        }
        let lo = p.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        ValueRange::new(lo, hi, x.nan || y.nan).widened()
    }

    /// `maximum(x, y)` (NaN propagates)
    pub fn maximum(x: ValueRange, y: ValueRange) -> ValueRange {
        ValueRange::new(x.lo.max(y.lo), x.hi.max(y.hi), x.nan || y.nan)
    }

    /// `minimum(x, y)` (NaN propagates)
    pub fn minimum(x: ValueRange, y: ValueRange) -> ValueRange {
        ValueRange::new(x.lo.min(y.lo), x.hi.min(y.hi), x.nan || y.nan)
    }

    /// `atan2(y, x)`, in `[-π, π]`
    pub fn atan2(y: ValueRange, x: ValueRange) -> ValueRange {
        let p = std::f64::consts::PI;
        ValueRange::new(-p, p, y.nan || x.nan).widened()
    }

    /// `remainder(x, y)` and `fmod(x, y)`: `|r| < |y|` (NaN where y may be 0 or x infinite)
    pub fn modulo(x: ValueRange, y: ValueRange) -> ValueRange {
        let m = y.lo.abs().max(y.hi.abs());
        let nan = x.nan || y.nan || x.may_be_infinite() || (y.lo <= 0.0 && y.hi >= 0.0);
        if m.is_finite() {
            ValueRange::new(-m, m, nan)
        } else {
            ValueRange::ANY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rules::*;
    use super::ValueRange;

    #[test]
    fn ranges_hold_on_samples() {
        // each rule holds its op's f32 results at the bounds and inside
        let cases = [-3.0f64, -0.5, 0.0, 0.25, 2.0];
        type Rule = fn(ValueRange) -> ValueRange;
        type Case = (Rule, fn(f32) -> f32);
        let ops: [Case; 9] = [
            (exp, f32::exp),
            (tanh, f32::tanh),
            (sigmoid, |t| 1.0 / (1.0 + (-t).exp())),
            (abs, f32::abs),
            (exp2, f32::exp2),
            (expm1, f32::exp_m1),
            (atan, f32::atan),
            (rounding, f32::floor),
            (sign, f32::signum),
        ];
        for (i, (rule, f)) in ops.iter().enumerate() {
            for (j, &a) in cases.iter().enumerate() {
                for &b in &cases[j..] {
                    let r = rule(ValueRange::new(a, b, false));
                    for k in 0..=16 {
                        let t = (a + (b - a) * k as f64 / 16.0) as f32;
                        let y = f(t) as f64;
                        assert!(
                            r.lo <= y && y <= r.hi,
                            "rule {i} on [{a}, {b}]: {y} outside {r:?}"
                        );
                    }
                }
            }
        }
    }
}
