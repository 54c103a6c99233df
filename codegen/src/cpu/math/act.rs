//! The exp-based activations: `tanh`, `sigmoid`, `silu` and the tanh form of `gelu`.

use super::emit::Em;
use super::exp_log::{exp_in, expm1_nonpositive};
use crate::loops::ValueRange;
use cranelift_codegen::ir::{InstBuilder, Value};

/// tanh(|x|) rounds to 1 in f32 past |x| ≈ 9.01, so `2|x|` is clamped here, which keeps
/// `expm1` in its exact-scale range.
const TANH_CLAMP: f32 = 20.0;
/// `2·sqrt(2/π)`
const GELU_K1: f32 = 1.5957692;
/// `2·sqrt(2/π)·0.044715`
const GELU_K2: f32 = 0.071354814;

/// `tanh x = sign(x)·(-t/(2 + t))` with `t = expm1(-2|x|) ∈ (-1, 0]`: one path for every x
/// (no polynomial branch and select), accurate relatively for tiny x (`t ≈ -2|x|`) and
/// with no cancellation anywhere (`2 + t ∈ (1, 2]`). `2|x|` is clamped to 20 (tanh is 1
/// in f32 well before); NaN passes through; ±inf gives ±1; ±0 gives ±0.
pub(super) fn tanh(e: &mut Em, x: Value, range: ValueRange) -> Value {
    let ax = e.abs(x);
    let y = e.mulc(ax, -2.0);
    // the clamp only where `range` reaches past it (NaN passes either way)
    let y = if tanh_needs_clamp(range) {
        e.max_keep_nan(y, -TANH_CLAMP)
    } else {
        y
    };
    let t = expm1_nonpositive(e, y);
    let nt = e.neg(t);
    let d = e.addc(t, 2.0);
    let q = e.div(nt, d);
    // |tanh x|, then x's sign (at x = 0, `-t` is -0: a bare OR gave tanh(+0) = -0)
    let q = e.abs(q);
    let sign = e.sign_of(x);
    e.b.ins().bor(q, sign)
}

/// Whether [`tanh`] of an argument in `range` clamps `-2|x|` at `-TANH_CLAMP` (where
/// `2|x|` can pass it; the C tier's `kiln_tanh` does, `kiln_tanh_noclamp` does not).
pub(crate) fn tanh_needs_clamp(range: ValueRange) -> bool {
    2.0 * range.lo.abs().max(range.hi.abs()) > f64::from(TANH_CLAMP)
}

/// `num / (1 + e^-arg)`, the shape of sigmoid, silu and gelu-tanh (`e^-arg` → +inf gives
/// `num/inf`, → 0 gives `num`); `neg_range` bounds `-arg`.
fn over_one_plus_exp(e: &mut Em, num: Value, neg_arg: Value, neg_range: ValueRange) -> Value {
    let ex = exp_in(e, neg_arg, neg_range);
    let d = e.addc(ex, 1.0);
    e.div(num, d)
}

/// `sigmoid x = 1/(1 + e^-x)` for `x` in `range`.
pub(super) fn sigmoid(e: &mut Em, x: Value, range: ValueRange) -> Value {
    let neg = e.neg(x);
    let one = e.c(1.0);
    over_one_plus_exp(e, one, neg, negated(range))
}

/// `silu x = x/(1 + e^-x)` for `x` in `range`.
pub(super) fn silu(e: &mut Em, x: Value, range: ValueRange) -> Value {
    let neg = e.neg(x);
    over_one_plus_exp(e, x, neg, negated(range))
}

/// The range of `-x` for `x` in `r`.
pub(crate) fn negated(r: ValueRange) -> ValueRange {
    ValueRange::new(-r.hi, -r.lo, r.nan)
}

/// `gelu_tanh x = 0.5·x·(1 + tanh(u))`, `u = sqrt(2/π)·(x + 0.044715x³)`, computed as
/// `x/(1 + e^-2u)` (the same function: `(1 + tanh u)/2 = 1/(1 + e^-2u)`), one exp and one
/// division with no cancellation. Its error is dominated by the rounding of the f32
/// argument `-2u` (relative ~|2u|·2^-24 in the result: up to ~13 ulp where x ≈ -3, about one
/// ulp of backward error, as the function's condition number there is ~13).
pub(super) fn gelu_tanh(e: &mut Em, x: Value) -> Value {
    let z = e.mul(x, x);
    let nk1 = e.c(-GELU_K1);
    let k = e.mul_add_c(z, -GELU_K2, nk1);
    let neg_2u = e.mul(x, k);
    over_one_plus_exp(e, x, neg_2u, ValueRange::ANY)
}
