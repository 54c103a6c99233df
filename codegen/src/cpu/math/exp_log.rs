//! `exp` (and the two-part-argument `exp_hl` the erfc tails use) and `log`.

use super::emit::Em;
use crate::loops::ValueRange;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// log2(e)
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// 1.5·2^23: adding it rounds a float in (-2^22, 2^22) to an integer `n` and leaves `n` in
/// the low mantissa bits (`bits(t) << 23 == n << 23`).
const SHIFTER: f32 = 12_582_912.0;
/// ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 significant bits, so `n·LN2_HI` is exact for |n| < 2^15.
const LN2_HI: f32 = 0.6933594;
/// The rest of ln 2.
const LN2_LO: f32 = -0.00021219444;
/// `(exp(r) - 1 - r)/r²` on |r| ≤ ln2/2, minimax for the relative error of exp (3.1e-9),
/// highest degree first.
const EXP_P: [f32; 5] = [0.0013814613, 0.00836871, 0.04166839, 0.16666521, 0.49999994];
/// Above this (ln of f32::MAX, rounded down) exp overflows.
const EXP_HI: f32 = 88.72283;
/// Below this (ln 2^-126, rounded down) exp is under the smallest normal and flushed to 0.
const EXP_LO: f32 = -87.33655;
/// Up to this, `n = round(x/ln2) ≤ 127`, so `2^n` is a normal float ([`exp_scaled`]).
const SCALED_HI: f32 = 88.0;

/// sqrt(1/2): mantissas below it are doubled so the log argument is in [√½, √2).
const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `(log(1+f) - f + f²/2)/f³` on f ∈ [√½-1, √2-1], minimax relative (5.8e-9), highest
/// degree first.
const LOG_P: [f32; 8] = [
    -0.076345,
    0.12761578,
    -0.13160181,
    0.14201757,
    -0.16623357,
    0.20001227,
    -0.2500082,
    0.3333333,
];

/// The polynomial part of `exp(hi + lo)`: range reduction `n = round((hi+lo)/ln2)`,
/// `r = (hi - n·LN2_HI) + (lo - n·LN2_LO)` (`hi - n·LN2_HI` is exact while |r| < 1/2, i.e.
/// for |lo| ≲ 0.15), and `exp(r) = 1 + r·(1 + r·P(r))` ∈ [0.7, 1.42]. Returns `exp(r)` and
/// `t`, whose bits hold `n` in their low mantissa bits (two's complement).
fn exp_reduced(e: &mut Em, hi: Value, lo: Option<Value>) -> (Value, Value) {
    let s = match lo {
        Some(lo) => e.add(hi, lo),
        None => hi,
    };
    let shifter = e.c(SHIFTER);
    let t = e.mul_add_c(s, LOG2E, shifter);
    let n = e.sub(t, shifter);
    let r = e.mul_add_c(n, -LN2_HI, hi);
    let r = match lo {
        Some(lo) => {
            let l = e.mul_add_c(n, -LN2_LO, lo);
            e.add(r, l)
        }
        None => e.mul_add_c(n, -LN2_LO, r),
    };
    // 1 + r·(1 + r·P(r)): two multiply-adds after P.
    let p = e.horner(r, &EXP_P);
    let q = e.mul_addc(p, r, 1.0);
    (e.mul_addc(q, r, 1.0), t)
}

/// `exp(hi + lo)` for finite or NaN arguments, without the overflow and underflow fix-ups:
/// [`exp_reduced`], then `2^n` added into the exponent bits. Valid (normal results) while
/// `hi + lo ∈ [EXP_LO, EXP_HI]`; a NaN argument may give a non-NaN result.
fn exp_core(e: &mut Em, hi: Value, lo: Option<Value>) -> Value {
    let (y, t) = exp_reduced(e, hi, lo);
    // y ∈ [0.7, 1.42]: adding n to its exponent field scales it by 2^n (exponent 1..254 in
    // range; x in [EXP_LO, ln 2^-126) may land on exponent 0, a slightly-off denormal).
    let yi = e.int_bits(y);
    let ti = e.int_bits(t);
    let scale = e.b.ins().ishl_imm_u(ti, 23);
    let sum = e.b.ins().iadd(yi, scale);
    e.float_bits(sum)
}

/// `exp x` for `x ≤ SCALED_HI` or NaN: [`exp_reduced`] times `2^n` built as a float (one
/// multiplication more than [`exp_core`], but NaN stays NaN: `NaN · 2^n`). Valid while
/// `2^n` is normal, `x ≥ EXP_LO`; the same results as [`exp_core`] where those are normal.
fn exp_scaled(e: &mut Em, x: Value) -> Value {
    let (y, t) = exp_reduced(e, x, None);
    let scale = pow2_of(e, t);
    e.mul(y, scale)
}

/// `2^n` for the `n` held in `t`'s low mantissa bits (two's complement, `t = n + SHIFTER`):
/// `(bits(t) << 23) + bits(1.0)` has the exponent field `127 + n` (normal for `n ∈
/// [-126, 127]`).
fn pow2_of(e: &mut Em, t: Value) -> Value {
    let ti = e.int_bits(t);
    let sh = e.b.ins().ishl_imm_u(ti, 23);
    let one_bits = e.ci(0x3f80_0000);
    let si = e.b.ins().iadd(sh, one_bits);
    e.float_bits(si)
}

/// `e^y - 1` for `y ∈ [-20, 0]` (or NaN): `y = n·ln2 + r` as in [`exp_core`], `e^r - 1 =
/// r + r²·P(r)` with exp's own `P` (it is `(e^r - 1 - r)/r²`), and `e^y - 1 =
/// 2^n·(e^r - 1) + (2^n - 1)`, where `2^n - 1` is exact for `n ∈ [-29, 0]`. No cancellation
/// near 0 (`n = 0` there: the result is `r + r²P`), so it is accurate relatively for tiny
/// `y`.
pub(super) fn expm1_nonpositive(e: &mut Em, y: Value) -> Value {
    let shifter = e.c(SHIFTER);
    let t = e.mul_add_c(y, LOG2E, shifter);
    let n = e.sub(t, shifter);
    let r = e.mul_add_c(n, -LN2_HI, y);
    let r = e.mul_add_c(n, -LN2_LO, r);
    let p = e.horner(r, &EXP_P);
    let r2 = e.mul(r, r);
    let em = e.mul_add(r2, p, r);
    let scale = pow2_of(e, t);
    let sm1 = e.addc(scale, -1.0);
    e.mul_add(scale, em, sm1)
}

/// `e^x`: [`exp_core`] plus the special cases: `x > EXP_HI` (and +inf) → +inf, NaN → NaN,
/// `x < EXP_LO` (and -inf) → 0.
pub(super) fn exp(e: &mut Em, x: Value) -> Value {
    let y = exp_core(e, x, None);
    let over = e.cmpc(FloatCC::UnorderedOrGreaterThan, x, EXP_HI);
    let inf = e.addc(x, f32::INFINITY); // +inf, or NaN for a NaN x
    let y = e.sel(over, inf, y);
    let under = e.cmpc(FloatCC::LessThan, x, EXP_LO);
    e.zero_if(under, y)
}

/// `e^x` for `x` known to lie in `range`: the special cases `range` excludes are left out.
/// With no NaN and `range ⊆ [EXP_LO, EXP_HI]`, [`exp_core`] alone; with `range.hi ≤
/// SCALED_HI` (softmax's `x - max ≤ 0`, a sigmoid of a bounded value), [`exp_scaled`] and the
/// underflow check only if `range.lo < EXP_LO`; otherwise [`exp`]. Each gives [`exp`]'s
/// result on its range, except that below the smallest normal result [`exp_scaled`] rounds
/// correctly where [`exp_core`]'s denormal is slightly off.
pub(super) fn exp_in(e: &mut Em, x: Value, range: ValueRange) -> Value {
    if !range.nan && range.lo >= f64::from(EXP_LO) && range.hi <= f64::from(EXP_HI) {
        return exp_core(e, x, None);
    }
    if range.hi <= f64::from(SCALED_HI) {
        let y = exp_scaled(e, x);
        if range.lo >= f64::from(EXP_LO) {
            return y;
        }
        let under = e.cmpc(FloatCC::LessThan, x, EXP_LO);
        return e.zero_if(under, y);
    }
    exp(e, x)
}

/// `e^(hi+lo)` for `hi + lo ≤ 0` with a small `lo` (the erfc tails' `exp(-a²)` with `a²`
/// split exactly): results under the smallest normal are flushed to 0. A NaN argument gives
/// an unspecified value; callers multiply by a factor that is NaN then.
pub(super) fn exp_hl(e: &mut Em, hi: Value, lo: Value) -> Value {
    let y = exp_core(e, hi, Some(lo));
    let s = e.add(hi, lo);
    let under = e.cmpc(FloatCC::LessThan, s, EXP_LO);
    e.zero_if(under, y)
}

/// `ln x`: denormals are scaled by 2^23 first; `x = m·2^k` with `m ∈ [√½, √2)`, and
/// `ln x = k·ln2 + f - f²/2 + f³·P(f)` with `f = m - 1` exact. Special cases: `ln 0 = -inf`,
/// `ln(x<0) = NaN`, `ln(+inf) = +inf`, `ln(NaN) = NaN`.
pub(super) fn log(e: &mut Em, x: Value) -> Value {
    let (f, k) = log_reduce(e, x);
    let z = e.mul(f, f);
    let p = e.horner(f, &LOG_P);
    let fz = e.mul(f, z);
    let y = e.mul(p, fz);
    let y = e.mul_add_c(k, LN2_LO, y);
    let y = e.mul_add_c(z, -0.5, y);
    let r = e.add(f, y);
    let r = e.mul_add_c(k, LN2_HI, r);
    log_specials(e, x, r)
}

/// Splits a positive finite `x` into `f = m - 1` and the float exponent `k`, `x = m·2^k`,
/// `m ∈ [√½, √2)`.
fn log_reduce(e: &mut Em, x: Value) -> (Value, Value) {
    let den = e.cmpc(FloatCC::LessThan, x, f32::MIN_POSITIVE);
    let scaled = e.mulc(x, 8_388_608.0); // 2^23
    let xs = e.sel(den, scaled, x);
    let bias_den = e.c(126.0 + 23.0);
    let bias_norm = e.c(126.0);
    let bias = e.sel(den, bias_den, bias_norm);
    let xi = e.int_bits(xs);
    let ei = e.b.ins().ushr_imm_u(xi, 23);
    let ty = e.ty;
    let ef = e.b.ins().fcvt_from_sint(ty, ei);
    let k = e.sub(ef, bias);
    // m ∈ [0.5, 1): the mantissa with the exponent of 0.5.
    let mant = e.band_bits(xs, 0x007f_ffff);
    let m = e.bor_bits(mant, 0x3f00_0000);
    let small = e.cmpc(FloatCC::LessThan, m, SQRT_HALF);
    let km1 = e.addc(k, -1.0);
    let k = e.sel(small, km1, k);
    let m2 = e.add(m, m);
    let m = e.sel(small, m2, m);
    let f = e.addc(m, -1.0);
    (f, k)
}

/// The special cases of `ln`: `+inf`/NaN give `x`, negatives NaN, zeros `-inf`.
fn log_specials(e: &mut Em, x: Value, r: Value) -> Value {
    let inf = e.c(f32::INFINITY);
    let big = e.cmp(FloatCC::UnorderedOrGreaterThanOrEqual, x, inf);
    let r = e.sel(big, x, r);
    let neg = e.cmpc(FloatCC::LessThan, x, 0.0);
    let r = e.nan_if(neg, r);
    let zero = e.cmpc(FloatCC::Equal, x, 0.0);
    let ninf = e.c(f32::NEG_INFINITY);
    e.sel(zero, ninf, r)
}
