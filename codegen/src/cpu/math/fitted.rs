//! Range-specialised approximations: a transcendental whose argument is known to lie in a
//! short interval (from [`ValueRange`], e.g. `sigmoid(tanh(..))`, whose argument is in
//! [-1, 1]) is computed as one polynomial fitted to the function on that interval when the
//! kernel is compiled, instead of the general routine's range reduction, special cases and
//! division. tiny's chain of `tanh`/`sigmoid` is the case in point: most of its
//! transcendentals see bounded arguments.
//!
//! The fit is a Chebyshev interpolant (near-minimax for these smooth functions) of the
//! lowest degree that passes a check: the f32 evaluation the emitter builds (the same
//! roundings, fused or not) is run on a dense sweep of the interval and compared with the
//! f64 reference ([`UnaryOp::eval_f64`]); its relative error must stay within [`TOLERANCE`]
//! (1.5 ulp of 1, no worse than the general routines' measured 1.2–2.5 ulp). If no degree up
//! to the op's limit passes, or the interval is not finite, the general routine is used.
//!
//! Two forms: an odd function (`tanh`, `erf`, and `sigmoid - 1/2`) on an interval holding 0
//! is fitted on the symmetric interval as `base + x·Q(x²)` (relative accuracy at tiny x,
//! half the terms); anything else as `P(x·s + c)` with the interval mapped onto [-1, 1].
//! NaN passes through either (every step is an add or a multiply of the argument).
//!
//! The same search fits a unary chain's function (`loops/chains.rs`: several ops in a row on
//! one value, e.g. tiny's 17 steps after its first `tanh`) to its input's interval
//! ([`fit_chain`]), against the steps composed in f64; only the `P(x·s + c)` form, and only
//! where the function is finite and non-zero on the whole interval.
//!
//! Fits are cached process-wide by (op, interval, FMA): a kernel's unrolled copies, its
//! scalar tail and every later kernel with the same range reuse one fit.

use super::emit::Em;
use crate::c_literal::hex_float;
use crate::loops::{eval_chain, ChainStep, ValueRange};
use cranelift_codegen::ir::Value;
use kiln_ir::UnaryOp;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The largest relative error a fit may have on its sweep: 1.5 × 2⁻²³ (1.5 ulp of 1).
pub(super) const TOLERANCE: f64 = 1.5 / 8_388_608.0;

/// What the check that picks a degree allows: under [`TOLERANCE`], so that the fit holds
/// it between the sweep's points too (tested on a 25× finer sweep).
const CHECK: f64 = 0.9 * TOLERANCE;

/// Points of the checking sweep (evenly spaced, both ends included).
const SWEEP: usize = 4097;
/// Points of the quick sweep run before it.
const COARSE_SWEEP: usize = 257;

/// A polynomial approximation of a function on an interval, in the form it is evaluated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fitted {
    /// How the argument enters.
    pub(super) form: Form,
    /// The polynomial's coefficients, highest degree first (for [`Em::horner`]).
    pub(super) coefs: Vec<f32>,
}

/// How a [`Fitted`] polynomial is applied to the argument `x`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Form {
    /// `P(x·scale + shift)`: the interval mapped onto [-1, 1].
    Shifted {
        /// `2 / (hi - lo)`
        scale: f32,
        /// `-(hi + lo) / (hi - lo)`
        shift: f32,
    },
    /// `base + x·Q(x²)` for an odd function plus a constant.
    Odd {
        /// the function's value at 0
        base: f32,
    },
}

/// The fit for `op` on `range` (computed once per distinct key), or `None` when the general
/// routine is to be used: an op with no fitted form, an interval that is not finite or is
/// too wide for a polynomial of the op's largest degree to reach [`TOLERANCE`].
pub(crate) fn fit(op: UnaryOp, range: ValueRange, fma: bool) -> Option<Fitted> {
    max_degree(op)?;
    if !range.lo.is_finite() || !range.hi.is_finite() || range.lo >= range.hi {
        return None;
    }
    type Key = (UnaryOp, u64, u64, bool);
    static CACHE: OnceLock<Mutex<HashMap<Key, Option<Fitted>>>> = OnceLock::new();
    let key = (op, range.lo.to_bits(), range.hi.to_bits(), fma);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(f) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return f.clone();
    }
    let f = search(op, range.lo, range.hi, fma);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, f.clone());
    f
}

/// The fit for a [`Chain`](crate::loops::Chain)'s function (its `steps`, applied in turn)
/// on `range`, of degree at most `max_degree`, or `None`: an interval that is not finite, a
/// function that is not finite and non-zero on all of it (relative accuracy needs that), or
/// one no polynomial of that degree follows within [`TOLERANCE`] of the f64 composition
/// ([`eval_chain`]: no rounding between the steps, so the fit is nearer the exact function
/// than the ops rounded one by one). Cached like [`fit`].
pub(crate) fn fit_chain(
    steps: &[ChainStep],
    range: ValueRange,
    fma: bool,
    max_degree: usize,
) -> Option<Fitted> {
    if !range.lo.is_finite() || !range.hi.is_finite() || range.lo >= range.hi || max_degree < 2 {
        return None;
    }
    type Key = (String, u64, u64, bool, usize);
    static CACHE: OnceLock<Mutex<HashMap<Key, Option<Fitted>>>> = OnceLock::new();
    let key = (
        format!("{steps:?}"),
        range.lo.to_bits(),
        range.hi.to_bits(),
        fma,
        max_degree,
    );
    let cache = CACHE.get_or_init(Default::default);
    if let Some(f) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return f.clone();
    }
    let f = search_fn(
        &|x| eval_chain(steps, x),
        None,
        range.lo,
        range.hi,
        max_degree,
        fma,
    );
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, f.clone());
    f
}

/// The largest polynomial degree worth using for `op` (a fit that needs more costs about as
/// much as the general routine), or `None` for ops with no fitted form.
fn max_degree(op: UnaryOp) -> Option<usize> {
    match op {
        // the general routines: ~25 instructions and a division (tanh, sigmoid), ~35 (erf)
        UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Erf => Some(13),
        // exp's own reduction is ~13 instructions with no division
        UnaryOp::Exp => Some(6),
        // the others have no fitted form (cheap already, not smooth, a bool result, or not
        // measured worth it: a chain of them may still be fitted as a whole by `fit_chain`);
        // fitting is only ever a speed-up, so an op not listed is computed by its routine
        _ => None,
    }
}

/// For odd ops (`f(x) - base` odd), the base.
fn odd_base(op: UnaryOp) -> Option<f64> {
    match op {
        UnaryOp::Tanh | UnaryOp::Erf => Some(0.0),
        UnaryOp::Sigmoid => Some(0.5),
        // only the fitted ops of `max_degree` are asked
        _ => None,
    }
}

/// The lowest-degree fit of `op` that passes the check, if any.
fn search(op: UnaryOp, lo: f64, hi: f64, fma: bool) -> Option<Fitted> {
    let max = max_degree(op)?;
    search_fn(&|x| op.eval_f64(x), odd_base(op), lo, hi, max, fma)
}

/// The lowest-degree fit of `f` on `[lo, hi]` (degree 2 to `max`) that passes the check, if
/// any; in the odd form when `odd` gives the base of an `f - base` odd about 0 and the
/// interval holds 0.
fn search_fn(
    f: &dyn Fn(f64) -> f64,
    odd: Option<f64>,
    lo: f64,
    hi: f64,
    max: usize,
    fma: bool,
) -> Option<Fitted> {
    // the references are computed once for every degree tried
    let coarse = Sweep::new(f, lo, hi, COARSE_SWEEP);
    if !coarse.usable() {
        return None;
    }
    let full = Sweep::new(f, lo, hi, SWEEP);
    if !full.usable() {
        return None;
    }
    let passes = |fitted: &Fitted| {
        // the coarse sweep first: most degrees that fail, fail there, at 1/16 of the cost
        fitted.coefs.iter().all(|c| c.is_finite())
            && fitted.max_error_on(&coarse, fma) <= CHECK
            && fitted.max_error_on(&full, fma) <= CHECK
    };
    match odd {
        Some(base) if lo < 0.0 && hi > 0.0 => {
            let m = lo.abs().max(hi);
            // odd degrees 3, 5, …: the interpolant on [-m, m] in t = x/m, its odd part
            (1..=max / 2).find_map(|k| {
                let deg = 2 * k + 1;
                let a = chebyshev_monomial(|t| f(t * m) - base, deg);
                // Q's coefficients in x², highest first: a_{2i+1} / m^{2i+1}
                let coefs: Vec<f32> = (0..=k)
                    .rev()
                    .map(|i| (a[2 * i + 1] / m.powi(2 * i as i32 + 1)) as f32)
                    .collect();
                let fitted = Fitted {
                    form: Form::Odd { base: base as f32 },
                    coefs,
                };
                passes(&fitted).then_some(fitted)
            })
        }
        _ => {
            let (mid, half) = ((hi + lo) / 2.0, (hi - lo) / 2.0);
            (2..=max).find_map(|deg| {
                let a = chebyshev_monomial(|t| f(mid + half * t), deg);
                let fitted = Fitted {
                    form: Form::Shifted {
                        scale: (1.0 / half) as f32,
                        shift: (-mid / half) as f32,
                    },
                    coefs: a.iter().rev().map(|&c| c as f32).collect(),
                };
                passes(&fitted).then_some(fitted)
            })
        }
    }
}

/// The points a fit is checked on: f32 arguments spread evenly over an interval (both ends
/// included), with the f64 reference at each.
struct Sweep {
    xs: Vec<f32>,
    refs: Vec<f64>,
}

impl Sweep {
    fn new(f: &dyn Fn(f64) -> f64, lo: f64, hi: f64, points: usize) -> Sweep {
        let xs: Vec<f32> = (0..points)
            .map(|i| {
                let x = (lo + (hi - lo) * i as f64 / (points - 1) as f64) as f32;
                x.clamp(lo as f32, hi as f32)
            })
            .collect();
        let refs = xs.iter().map(|&x| f(f64::from(x))).collect();
        Sweep { xs, refs }
    }

    /// True when every reference is finite and non-zero: a relative error bound means
    /// something there (the ops fitted one by one never reach 0 or inf on a finite interval
    /// except `tanh`/`erf` at 0, which the odd form keeps exact).
    fn usable(&self) -> bool {
        self.refs
            .iter()
            .zip(&self.xs)
            .all(|(r, &x)| r.is_finite() && (*r != 0.0 || x == 0.0))
    }
}

/// The monomial coefficients (lowest degree first) of the degree-`deg` polynomial that
/// interpolates `g` at the Chebyshev nodes of [-1, 1].
fn chebyshev_monomial(g: impl Fn(f64) -> f64, deg: usize) -> Vec<f64> {
    let n = deg + 1;
    let nodes: Vec<f64> = (0..n)
        .map(|k| (std::f64::consts::PI * (k as f64 + 0.5) / n as f64).cos())
        .collect();
    let values: Vec<f64> = nodes.iter().map(|&t| g(t)).collect();
    // Chebyshev coefficients c_j = (2/n) Σ g(t_k) T_j(t_k), c_0 halved
    let cheb: Vec<f64> = (0..n)
        .map(|j| {
            let s: f64 = nodes
                .iter()
                .zip(&values)
                .map(|(&t, &v)| v * (j as f64 * t.acos()).cos())
                .sum();
            let c = 2.0 * s / n as f64;
            if j == 0 {
                c / 2.0
            } else {
                c
            }
        })
        .collect();
    // Σ c_j T_j in monomials, T_{j+1} = 2t·T_j - T_{j-1}
    let mut out = vec![0.0; n];
    let mut prev = vec![0.0; n];
    let mut cur = vec![0.0; n];
    prev[0] = 1.0; // T_0
    if n > 1 {
        cur[1] = 1.0; // T_1
    }
    for (j, &c) in cheb.iter().enumerate() {
        let tj = if j == 0 { &prev } else { &cur };
        for (o, &t) in out.iter_mut().zip(tj.iter()) {
            *o += c * t;
        }
        if j >= 1 && j + 1 < n {
            let mut next = vec![0.0; n];
            for i in 0..n {
                let up = if i > 0 { 2.0 * cur[i - 1] } else { 0.0 };
                next[i] = up - prev[i];
            }
            prev = std::mem::replace(&mut cur, next);
        }
    }
    out
}

/// `a·m + c` in f32 as the emitter computes it: fused or two roundings.
fn mul_add(a: f32, m: f32, c: f32, fma: bool) -> f32 {
    if fma {
        a.mul_add(m, c)
    } else {
        a * m + c
    }
}

impl Fitted {
    /// The f32 value the emitted code computes for `x` (the emitter's exact steps).
    pub(super) fn eval(&self, x: f32, fma: bool) -> f32 {
        let horner = |t: f32| {
            let (first, rest) = self.coefs.split_first().expect("a fit has coefficients");
            rest.iter().fold(*first, |p, &k| mul_add(p, t, k, fma))
        };
        match self.form {
            Form::Shifted { scale, shift } => horner(mul_add(x, scale, shift, fma)),
            Form::Odd { base } => {
                let q = horner(x * x);
                if base == 0.0 {
                    x * q
                } else {
                    mul_add(x, q, base, fma)
                }
            }
        }
    }

    /// Emits [`Fitted::eval`] on `x` (an `F32` or `F32X4` value).
    pub(super) fn emit(&self, e: &mut Em, x: Value) -> Value {
        match self.form {
            Form::Shifted { scale, shift } => {
                let s = e.c(scale);
                let t = e.mul_addc(x, s, shift);
                e.horner(t, &self.coefs)
            }
            Form::Odd { base } => {
                let x2 = e.mul(x, x);
                let q = e.horner(x2, &self.coefs);
                if base == 0.0 {
                    e.mul(x, q)
                } else {
                    e.mul_addc(x, q, base)
                }
            }
        }
    }

    /// [`Fitted::eval`] as a C expression of the vector expression `x` for the C tier
    /// (`kiln_math.h`: `kiln__fma` is fused when the host has FMA, as `fma` says here; f32
    /// literals written exactly in hex).
    pub(crate) fn c_expr(&self, x: &str) -> String {
        let lit = |c: f32| format!("kf_splat({})", hex_float(c));
        let horner = |t: &str| {
            let (first, rest) = self.coefs.split_first().expect("a fit has coefficients");
            rest.iter().fold(lit(*first), |p, &k| {
                format!("kiln__fma({p}, {t}, {})", lit(k))
            })
        };
        match self.form {
            Form::Shifted { scale, shift } => format!(
                "({{ const kf t_ = kiln__fma({x}, {}, {}); {}; }})",
                lit(scale),
                lit(shift),
                horner("t_")
            ),
            Form::Odd { base } => {
                let q = horner("(x_ * x_)");
                let y = if base == 0.0 {
                    format!("x_ * {q}")
                } else {
                    format!("kiln__fma(x_, {q}, {})", lit(base))
                };
                format!("({{ const kf x_ = {x}; {y}; }})")
            }
        }
    }

    /// The polynomial's degree (in the argument, or in x² for the odd form).
    pub(crate) fn degree(&self) -> usize {
        self.coefs.len() - 1
    }

    /// The cost of evaluating it, in vector instructions: a multiply-add per coefficient
    /// and about two for the argument's scaling.
    pub(crate) fn cost(&self) -> usize {
        self.coefs.len() + 2
    }

    /// The largest relative error of [`Fitted::eval`] against the f64 reference `f` on an
    /// even sweep of `points` f32 values of `[lo, hi]`.
    #[cfg(test)]
    pub(super) fn max_error(
        &self,
        f: &dyn Fn(f64) -> f64,
        lo: f64,
        hi: f64,
        points: usize,
        fma: bool,
    ) -> f64 {
        self.max_error_on(&Sweep::new(f, lo, hi, points), fma)
    }

    /// The largest relative error of [`Fitted::eval`] on a sweep's points.
    fn max_error_on(&self, sweep: &Sweep, fma: bool) -> f64 {
        sweep
            .xs
            .iter()
            .zip(&sweep.refs)
            .map(|(&x, &r)| relative_error(self.eval(x, fma), r))
            .fold(0.0, f64::max)
    }
}

/// `|y - r| / |r|` (0 when both are 0; infinite when only `r` is, or when either is NaN).
fn relative_error(y: f32, r: f64) -> f64 {
    let d = (f64::from(y) - r).abs();
    if d == 0.0 {
        0.0
    } else if d.is_nan() {
        f64::INFINITY
    } else {
        d / r.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(lo: f64, hi: f64) -> ValueRange {
        ValueRange::new(lo, hi, true)
    }

    #[test]
    fn chebyshev_interpolation_reproduces_polynomials() {
        // a cubic is its own degree-3 interpolant
        let a = chebyshev_monomial(|t| 2.0 - t + 0.5 * t * t * t, 3);
        for (got, want) in a.iter().zip([2.0, -1.0, 0.0, 0.5]) {
            assert!((got - want).abs() < 1e-12, "{a:?}");
        }
    }

    #[test]
    fn bounded_sigmoid_and_tanh_get_short_polynomials() {
        for fma in [true, false] {
            // sigmoid of a tanh: the odd form, a few terms in x²
            let s = fit(UnaryOp::Sigmoid, range(-1.0001, 1.0001), fma).expect("sigmoid fits");
            assert!(matches!(s.form, Form::Odd { base } if base == 0.5));
            assert!(s.coefs.len() <= 7, "{s:?}");
            // tiny's tanh argument: (sigmoid + 0.3)·1.4, away from 0
            let t = fit(UnaryOp::Tanh, range(0.796, 1.444), fma).expect("tanh fits");
            assert!(matches!(t.form, Form::Shifted { .. }));
            assert!(t.coefs.len() <= 11, "{t:?}");
            // tanh around 0: odd, exact at 0 and relative for tiny x
            let z = fit(UnaryOp::Tanh, range(-0.5, 0.25), fma).expect("tanh fits");
            assert!(matches!(z.form, Form::Odd { base } if base == 0.0));
            assert_eq!(z.eval(0.0, fma).to_bits(), 0);
            assert_eq!(z.eval(-0.0, fma).to_bits(), (-0.0f32).to_bits());
            assert_eq!(z.eval(1e-30, fma), 1e-30);
        }
    }

    #[test]
    fn wide_unbounded_and_unfitted_ops_use_the_general_routine() {
        assert_eq!(fit(UnaryOp::Tanh, ValueRange::ANY, true), None);
        assert_eq!(
            fit(UnaryOp::Tanh, range(f64::NEG_INFINITY, 0.0), true),
            None
        );
        assert_eq!(fit(UnaryOp::Exp, range(-87.0, 88.0), true), None);
        assert_eq!(fit(UnaryOp::Sigmoid, range(-40.0, 40.0), true), None);
        // tanh's poles at ±iπ/2 are too near [-1.2, 1.2] for degree 13
        assert_eq!(fit(UnaryOp::Tanh, range(-1.2, 0.7), true), None);
        assert_eq!(fit(UnaryOp::Exp, range(-1.0, 1.0), true), None);
        assert_eq!(fit(UnaryOp::Log, range(1.0, 2.0), true), None);
        assert_eq!(fit(UnaryOp::Sin, range(0.0, 0.5), true), None);
    }

    #[test]
    fn fits_hold_their_tolerance_on_a_finer_sweep() {
        // 25x denser than the check that chose them, NaN passing through
        let cases = [
            (UnaryOp::Sigmoid, -1.0001, 1.0001),
            (UnaryOp::Sigmoid, 0.2, 3.0),
            (UnaryOp::Tanh, 0.796, 1.444),
            (UnaryOp::Tanh, -0.8, 0.7),
            (UnaryOp::Erf, -0.9, 0.9),
            (UnaryOp::Exp, -0.5, 0.5),
        ];
        for fma in [true, false] {
            for (op, lo, hi) in cases {
                let f =
                    fit(op, range(lo, hi), fma).unwrap_or_else(|| panic!("{op:?} [{lo}, {hi}]"));
                let err = f.max_error(&|x| op.eval_f64(x), lo, hi, 100_001, fma);
                assert!(
                    err <= TOLERANCE,
                    "{op:?} on [{lo}, {hi}] (fma {fma}): {err:e}"
                );
                assert!(f.eval(f32::NAN, fma).is_nan());
            }
        }
    }

    /// tiny's chain after its first `tanh`: sigmoid, then four times (+ a, · m, tanh, sigmoid).
    fn tiny_chain() -> Vec<ChainStep> {
        use kiln_ir::BinaryOp::{Add, Mul};
        let mut steps = vec![ChainStep::Unary(UnaryOp::Sigmoid)];
        for (a, m) in [(0.3, 1.4), (0.35, 1.3), (0.4, 1.2), (0.45, 1.1)] {
            steps.extend([
                ChainStep::Right(Add, a),
                ChainStep::Right(Mul, m),
                ChainStep::Unary(UnaryOp::Tanh),
                ChainStep::Unary(UnaryOp::Sigmoid),
            ]);
        }
        steps
    }

    #[test]
    fn chains_fit_as_one_polynomial_within_tolerance() {
        use kiln_ir::BinaryOp::{Add, Div, Mul};
        let cases: Vec<(Vec<ChainStep>, f64, f64, usize)> = vec![
            // contracting: a short polynomial follows all 17 steps
            (tiny_chain(), -1.0001, 1.0001, 5),
            // softplus, log(1 + exp(x))
            (
                vec![
                    ChainStep::Unary(UnaryOp::Exp),
                    ChainStep::Right(Add, 1.0),
                    ChainStep::Unary(UnaryOp::Log),
                ],
                -1.0,
                1.0,
                9,
            ),
            // 1 / sigmoid(x / 2) + a square root
            (
                vec![
                    ChainStep::Right(Mul, 0.5),
                    ChainStep::Unary(UnaryOp::Sigmoid),
                    ChainStep::Left(Div, 1.0),
                    ChainStep::Unary(UnaryOp::Sqrt),
                ],
                0.2,
                3.0,
                16,
            ),
        ];
        for fma in [true, false] {
            for (steps, lo, hi, most) in &cases {
                let f = fit_chain(steps, range(*lo, *hi), fma, 16)
                    .unwrap_or_else(|| panic!("{steps:?} on [{lo}, {hi}] fits"));
                assert!(f.coefs.len() <= *most, "{steps:?}: {f:?}");
                // 25x denser than the check that chose it
                let err = f.max_error(&|x| eval_chain(steps, x), *lo, *hi, 100_001, fma);
                assert!(err <= TOLERANCE, "{steps:?} (fma {fma}): {err:e}");
                assert!(f.eval(f32::NAN, fma).is_nan());
                // the same key gives the cached fit
                assert_eq!(fit_chain(steps, range(*lo, *hi), fma, 16), Some(f));
            }
        }
    }

    #[test]
    fn chains_no_short_polynomial_follows_are_not_fitted() {
        use kiln_ir::BinaryOp::Mul;
        let sin3 = [ChainStep::Right(Mul, 3.0), ChainStep::Unary(UnaryOp::Sin)];
        // through 0: no relative accuracy there
        assert_eq!(fit_chain(&sin3, range(-1.0, 1.0), true, 16), None);
        // not bounded
        assert_eq!(fit_chain(&sin3, ValueRange::ANY, true, 16), None);
        // fits, but not within the degree allowed
        assert!(fit_chain(&sin3, range(0.2, 0.8), true, 16).is_some());
        assert_eq!(fit_chain(&sin3, range(0.2, 0.8), true, 3), None);
        // the f32 Horner form's rounding, relative to values 7x smaller than the terms
        // (sin 3 ≈ 0.14), exceeds the tolerance at every degree: a limit of the form
        assert_eq!(fit_chain(&sin3, range(0.1, 1.0), true, 16), None);
        // e^(20x) over [0, 1] spans 2^29: too wide for degree 16
        let exp20 = [ChainStep::Right(Mul, 20.0), ChainStep::Unary(UnaryOp::Exp)];
        assert_eq!(fit_chain(&exp20, range(0.0, 1.0), true, 16), None);
        // a log reaching 0 or below in the interval
        let log = [ChainStep::Right(Mul, 2.0), ChainStep::Unary(UnaryOp::Log)];
        assert_eq!(fit_chain(&log, range(-0.5, 1.0), true, 16), None);
    }
}
