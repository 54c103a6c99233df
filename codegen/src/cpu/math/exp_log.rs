//! The exponentials and logarithms: `exp` (and the two-part-argument `exp_hl` the erfc tails
//! use), `exp2`, `expm1`, `log`, `log1p` and `log2`, all on exp's reduction
//! ([`exp_poly`]'s polynomial) or log's ([`log_reduce`], [`log_of`]).

use super::emit::Em;
use crate::loops::ValueRange;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// log2(e)
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// log2(e) - LOG2E
const LOG2E_LO: f32 = 1.925963e-8;
/// ln 2 (for `exp2`'s `r·ln2`)
const LN2: f32 = std::f32::consts::LN_2;
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
/// Below this `expm1` is -1 in f32 (`e^x < 2^-25` from -17.4 on): [`expm1`] clamps x here.
const EXPM1_LO: f32 = -20.0;
/// [`expm1`] clamps x here: above ln(f32::MAX) ≈ 88.72 (so the result overflows to +inf)
/// and below 128.5·ln2 (so `n ≤ 128` and `2^(n-1)` is normal).
const EXPM1_HI: f32 = 89.0;
/// [`exp2`] clamps x to ±this: past it 2^x is inf or 0 in f32, and `n = round(x)` splits
/// into two halves whose powers of two are normal.
const EXP2_CLAMP: f32 = 160.0;
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
    (exp_poly(e, r), t)
}

/// `e^r = 1 + r·(1 + r·P(r))` for |r| ≤ ln2/2 (two multiply-adds after P); exactly 1 for
/// `r = 0`.
fn exp_poly(e: &mut Em, r: Value) -> Value {
    let p = e.horner(r, &EXP_P);
    let q = e.mul_addc(p, r, 1.0);
    e.mul_addc(q, r, 1.0)
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
    pow2_times(e, t, 1.0)
}

/// `k·2^n` for a power of two `k` and the `n` held in `t` as for [`pow2_of`] (normal while
/// the exponent of `k` plus `n` is in [-126, 127]).
fn pow2_times(e: &mut Em, t: Value, k: f32) -> Value {
    let ti = e.int_bits(t);
    let sh = e.b.ins().ishl_imm_u(ti, 23);
    let k_bits = e.ci(k.to_bits() as i32);
    let si = e.b.ins().iadd(sh, k_bits);
    e.float_bits(si)
}

/// `e^y - 1` for `y ∈ [-20, 0]` (or NaN): `y = n·ln2 + r` as in [`exp_core`], `e^r - 1 =
/// r + r²·P(r)` with exp's own `P` (it is `(e^r - 1 - r)/r²`), and `e^y - 1 =
/// 2^n·(e^r - 1) + (2^n - 1)`, where `2^n - 1` is exact for `n ∈ [-24, 0]` (below, it is
/// -1 rounded, within an ulp of the result, which is ≈ -1 there). No cancellation
/// near 0 (`n = 0` there: the result is `r + r²P`), so it is accurate relatively for tiny
/// `y`.
pub(super) fn expm1_nonpositive(e: &mut Em, y: Value) -> Value {
    let (em, t) = expm1_reduced(e, y);
    let scale = pow2_of(e, t);
    let sm1 = e.addc(scale, -1.0);
    e.mul_add(scale, em, sm1)
}

/// The reduction of `expm1`: `y = n·ln2 + r` as in [`exp_core`] (|r| ≤ ln2/2 for |y| <
/// 2^15·ln2), and `e^r - 1 = r + r²·P(r)` with exp's `P`. Returns `e^r - 1` and `t`, whose
/// bits hold `n` as for [`pow2_of`].
fn expm1_reduced(e: &mut Em, y: Value) -> (Value, Value) {
    let shifter = e.c(SHIFTER);
    let t = e.mul_add_c(y, LOG2E, shifter);
    let n = e.sub(t, shifter);
    let r = e.mul_add_c(n, -LN2_HI, y);
    let r = e.mul_add_c(n, -LN2_LO, r);
    let p = e.horner(r, &EXP_P);
    let r2 = e.mul(r, r);
    (e.mul_add(r2, p, r), t)
}

/// `e^x - 1` for every x: x clamped to [[`EXPM1_LO`], [`EXPM1_HI`]] (NaN passes), then
/// [`expm1_reduced`] and `2·(h·(e^r - 1) + (h - 1/2))` with `h = 2^(n-1)`, normal for every
/// `n` the clamp allows (n ≤ 128, where `2^n` itself is not a float) and the doubling exact:
/// the same value as [`expm1_nonpositive`]'s `2^n·(e^r - 1) + (2^n - 1)` (bit for bit on
/// x ≤ 0), overflowing to +inf by itself past ln(f32::MAX). `h - 1/2` is exact for
/// `n ∈ [-24, 24]`; outside, it is within an ulp of a result dominated by `-1/2` or `h`.
/// No cancellation near 0 (`n = 0`: the result is `r + r²P`), so tiny x are accurate
/// relatively; the sign of x is OR-ed in (expm1 keeps the sign, and -0 stays -0).
pub(super) fn expm1(e: &mut Em, x: Value) -> Value {
    let y = e.max_keep_nan(x, EXPM1_LO);
    let y = e.min_keep_nan(y, EXPM1_HI);
    let (em, t) = expm1_reduced(e, y);
    let h = pow2_times(e, t, 0.5);
    let hm = e.addc(h, -0.5);
    let half = e.mul_add(h, em, hm);
    let r = e.add(half, half);
    let sign = e.sign_of(x);
    let r = e.b.ins().bor(r, sign);
    keep_tiny(e, x, r)
}

/// Below this |x|, `expm1 x` and `sinh x` round to `x` itself (the next term, x²/2 or
/// x³/6, is under a quarter ulp).
pub(super) const TINY: f32 = 2.980_232_2e-8; // 2^-25

/// `x` where `|x| <` [`TINY`], else `y`: the halvings in `expm1` and `sinh` would round a
/// subnormal `x` to zero or lose its low bits (`expm1(1e-45)` gave 0).
pub(super) fn keep_tiny(e: &mut Em, x: Value, y: Value) -> Value {
    let ax = e.abs(x);
    let tiny = e.cmpc(FloatCC::LessThan, ax, TINY);
    e.sel(tiny, x, y)
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
    match exp_variant(range) {
        ExpVariant::Core => exp_core(e, x, None),
        ExpVariant::Scaled => exp_scaled(e, x),
        ExpVariant::ScaledFlush => {
            let y = exp_scaled(e, x);
            let under = e.cmpc(FloatCC::LessThan, x, EXP_LO);
            e.zero_if(under, y)
        }
        ExpVariant::Full => exp(e, x),
    }
}

/// Which of exp's routines [`exp_in`] takes for arguments in a range (the C tier's
/// `kiln_math.h` has the same four: `kiln_exp_core`, `kiln_exp_scaled`,
/// `kiln_exp_scaled_flush`, `kiln_exp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExpVariant {
    /// no NaN, within `[EXP_LO, EXP_HI]`: the core alone
    Core,
    /// at most `SCALED_HI`, at least `EXP_LO` (NaN passes): e^r times 2^n as a float
    Scaled,
    /// at most `SCALED_HI`, any lower end: `Scaled` plus the flush below `EXP_LO`
    ScaledFlush,
    /// anything: every special case handled
    Full,
}

/// The routine [`exp_in`] takes for arguments in `range`.
pub(crate) fn exp_variant(range: ValueRange) -> ExpVariant {
    let above_lo = range.lo >= f64::from(EXP_LO);
    if !range.nan && above_lo && range.hi <= f64::from(EXP_HI) {
        ExpVariant::Core
    } else if range.hi <= f64::from(SCALED_HI) {
        if above_lo {
            ExpVariant::Scaled
        } else {
            ExpVariant::ScaledFlush
        }
    } else {
        ExpVariant::Full
    }
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

/// `2^x`: x clamped to ±[`EXP2_CLAMP`] (NaN passes), `n = round(x)` by the shifter,
/// `r = x - n` exact (|r| ≤ 1/2), `2^r = e^(r·ln2)` by [`exp_poly`], and `2^n` applied as
/// `2^(n>>1)·2^(n - (n>>1))`, two normal powers of two: the first product is exact, the
/// second rounds once, so overflow gives +inf, and results under 2^-126 are correctly
/// rounded denormals (no flush) down to 0. Exact for integers in [-149, 127]; NaN → NaN
/// (`NaN·s`).
pub(super) fn exp2(e: &mut Em, x: Value) -> Value {
    let x = e.max_keep_nan(x, -EXP2_CLAMP);
    let x = e.min_keep_nan(x, EXP2_CLAMP);
    let shifter = e.c(SHIFTER);
    let t = e.add(x, shifter);
    let n = e.sub(t, shifter);
    let r = e.sub(x, n);
    let q = e.mulc(r, LN2);
    let mut y = exp_poly(e, q);
    // n = bits(t) - bits(SHIFTER), then its halves as exponent fields
    let ti = e.int_bits(t);
    let sb = e.ci(SHIFTER.to_bits() as i32);
    let ni = e.b.ins().isub(ti, sb);
    let n1 = e.b.ins().sshr_imm_u(ni, 1);
    let n2 = e.b.ins().isub(ni, n1);
    let one_bits = e.ci(0x3f80_0000);
    for ni in [n1, n2] {
        let sh = e.b.ins().ishl_imm_u(ni, 23);
        let si = e.b.ins().iadd(sh, one_bits);
        let s = e.float_bits(si);
        y = e.mul(y, s);
    }
    y
}

/// `ln x`: denormals are scaled by 2^23 first; `x = m·2^k` with `m ∈ [√½, √2)`, and
/// `ln x = k·ln2 + f - f²/2 + f³·P(f)` with `f = m - 1` exact. Special cases: `ln 0 = -inf`,
/// `ln(x<0) = NaN`, `ln(+inf) = +inf`, `ln(NaN) = NaN`.
pub(super) fn log(e: &mut Em, x: Value) -> Value {
    let (f, k) = log_reduce(e, x, true);
    let r = log_of(e, f, k);
    log_specials(e, x, r)
}

/// `k·ln2 + ln(1 + f)` for `f` in (about) [√½ - 1, √2 - 1]: `f - f²/2 + f³·P(f)`, with ln2 in
/// two parts (`k·LN2_HI` exact).
fn log_of(e: &mut Em, f: Value, k: Value) -> Value {
    let z = e.mul(f, f);
    let p = e.horner(f, &LOG_P);
    let fz = e.mul(f, z);
    let y = e.mul(p, fz);
    let y = e.mul_add_c(k, LN2_LO, y);
    let y = e.mul_add_c(z, -0.5, y);
    let r = e.add(f, y);
    e.mul_add_c(k, LN2_HI, r)
}

/// `ln(1 + x)`: `u = 1 + x` rounded and its rounding error `c = x - (u - 1)` (exact for
/// x ≤ 2^24; beyond, |c| ≤ ulp(u) is far below what the result can show), `u = m·2^k` by
/// log's reduction (u is never denormal), and `ln(1 + x) = k·ln2 + ln(1 + f)` with
/// `f = (m - 1) + c·2^-k`, `(1 + x)/2^k - 1` rounded once ([`log_of`]). For |x| small
/// `k = 0` and `f = x` exactly: no cancellation, tiny x give x. Special cases from `u`
/// ([`log_specials`]: x = -1 → -inf, x < -1 → NaN, +inf → +inf) and the sign of x OR-ed
/// in (log1p keeps the sign; -0 stays -0).
pub(super) fn log1p(e: &mut Em, x: Value) -> Value {
    let u = e.addc(x, 1.0);
    let um1 = e.addc(u, -1.0);
    let c = e.sub(x, um1);
    let (f, k) = log_reduce(e, u, false);
    // 2^-k through the shifter's bits, k capped where 2^-k stays normal (c is 0 there)
    let kc = e.min_keep_nan(k, 126.0);
    let t = e.csub(SHIFTER, kc);
    let s = pow2_of(e, t);
    let f = e.mul_add(c, s, f);
    let r = log_of(e, f, k);
    let r = log_specials(e, u, r);
    let sign = e.sign_of(x);
    e.b.ins().bor(r, sign)
}

/// `log2 x`: log's reduction (denormals included), then `log2(1 + f) = L·(f + y)` with
/// `y = -f²/2 + f³·P(f)` and `L = log2(e)` in two parts, summed small terms first
/// (`y·L`, `+ f·L_lo`, `+ f·L`), and `+ k` last (exact where it cancels). Exact for powers
/// of two (`f = 0`); special cases as `ln`'s.
pub(super) fn log2(e: &mut Em, x: Value) -> Value {
    let (f, k) = log_reduce(e, x, true);
    let z = e.mul(f, f);
    let p = e.horner(f, &LOG_P);
    let fz = e.mul(f, z);
    let y = e.mul(p, fz);
    let y = e.mul_add_c(z, -0.5, y);
    let l = e.mulc(y, LOG2E);
    let l = e.mul_add_c(f, LOG2E_LO, l);
    let l = e.mul_add_c(f, LOG2E, l);
    let r = e.add(l, k);
    log_specials(e, x, r)
}

/// Splits a positive finite `x` into `f = m - 1` and the float exponent `k`, `x = m·2^k`,
/// `m ∈ [√½, √2)`; `denormals`: whether `x` may be denormal (then scaled by 2^23 first).
fn log_reduce(e: &mut Em, x: Value, denormals: bool) -> (Value, Value) {
    let (xs, bias) = if denormals {
        let den = e.cmpc(FloatCC::LessThan, x, f32::MIN_POSITIVE);
        let scaled = e.mulc(x, 8_388_608.0); // 2^23
        let xs = e.sel(den, scaled, x);
        let bias_den = e.c(126.0 + 23.0);
        let bias_norm = e.c(126.0);
        (xs, e.sel(den, bias_den, bias_norm))
    } else {
        (x, e.c(126.0))
    };
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
