//! `erf` and the erf form of `gelu`, both built on a scaled complementary error function
//! `erfc(a) = e^(-a²)·R(a)` with `e^(-a²)` computed from an exact split of `a²`.

use super::emit::Em;
use super::exp_log::exp_hl;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// Below this |x|, erf is the odd polynomial; above, `1 - erfc(|x|)` with the sign of x.
const ERF_SMALL: f32 = 0.75;
/// `erf(x)/x = 2/√π + x²·Q(x²)` on |x| ≤ 0.75 (minimax relative, 1.4e-9): Q, highest
/// degree first.
const ERF_Q: [f32; 5] = [
    -0.00067495136,
    0.005114346,
    -0.026834624,
    0.11283377,
    -0.3761262,
];
/// 2/√π = ERF_C0_HI + ERF_C0_LO, so the leading term is not off by its own rounding.
const ERF_C0_HI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
/// The rest of 2/√π.
const ERF_C0_LO: f32 = -5.8635383e-8;
/// `R(a) = erfc(a)·e^(a²)` as a polynomial in `q = (a-3)/(a+3)` for a ∈ [0, 10]
/// (q ∈ [-1, 0.54]; minimax relative, 1.4e-9).
const ERFC_R: [f32; 11] = [
    5.5807217e-5,
    2.862433e-5,
    -0.000594689,
    0.00071584544,
    0.004268966,
    -0.024394244,
    0.071665846,
    -0.15011579,
    0.2456038,
    -0.32623357,
    0.17900115,
];
/// Keeps the 12 leading significant bits of a float, so its square is exact.
const HIGH_12_BITS: u32 = 0xffff_f000;

/// `R(a) = erfc(a)·e^(a²)` for `a ∈ [0, 10]` (NaN for a NaN `a`).
fn erfc_scaled(e: &mut Em, a: Value) -> Value {
    let num = e.addc(a, -3.0);
    let den = e.addc(a, 3.0);
    let q = e.div(num, den);
    e.horner(q, &ERFC_R)
}

/// `e^(-s·v²)` for `v ≥ 0` and `s ∈ {1, 1/2}`: `v = vh + vl` with `vh` of 12 bits, so
/// `s·vh²` is exact and `s·vl·(v + vh)` is the small rest (≤ 2^-10·v²), and both go to
/// [`exp_hl`] without rounding `v²`.
fn exp_neg_sq(e: &mut Em, v: Value, s: f32) -> Value {
    let vh = e.band_bits(v, HIGH_12_BITS);
    let vl = e.sub(v, vh);
    let sum = e.add(v, vh);
    let hh = e.mul(vh, vh);
    let hi = e.mulc(hh, -s);
    let ll = e.mul(vl, sum);
    let lo = e.mulc(ll, -s);
    exp_hl(e, hi, lo)
}

/// Past this |x|, `e^(-x²/2)` is 0 in f32 (flushed below the smallest normal from
/// |x| ≈ 13.2 on), so [`exp_neg_half_sq`] clamps |x| here: ±inf then give 0, not NaN.
const HALF_SQ_CLAMP: f32 = 15.0;

/// `e^(-x²/2)` for any `x` (0 for ±inf, NaN for NaN), with `x²` split exactly. Both gelu
/// and the pattern `exp(x·x·(-1/2))` (gelu's derivative, a normal density) call it, so a
/// kernel computing gelu and its derivative emits the same instructions twice on the same
/// value and Cranelift's value numbering keeps one copy.
pub(super) fn exp_neg_half_sq(e: &mut Em, x: Value) -> Value {
    let ax = e.abs(x);
    let v = e.min_keep_nan(ax, HALF_SQ_CLAMP);
    let y = exp_neg_sq(e, v, 0.5);
    // v - v: 0, or NaN for a NaN x (exp_hl's value is unspecified there)
    let zero_or_nan = e.sub(v, v);
    e.add(y, zero_or_nan)
}

/// Past this |x|, erf's `e^(-x²)` is taken as 0: erfc(9) = 4.1e-37 is far under half an ulp
/// of 1, so erf's bits are the same, and from |x| ≈ 9.2 on the product `e^(-x²)·R` would
/// be a denormal, which costs a microcode assist (~150 cycles) per instruction that makes
/// or reads one on x86.
const ERF_FLUSH: f32 = 9.0;

/// Past this |x|, the tail `Φ(-|x|)` (2.3e-38 at 12.9) that gelu's positive side
/// subtracts from 1 is taken as 0: it is under 2^-25 from |x| ≈ 5.6 on (1 - tail is 1),
/// and from |x| ≈ 13.05 on it would be a denormal, which costs a microcode assist (~150
/// cycles) per instruction that makes or reads one on x86 (gelu of N(0, 20²) values, a
/// Linear's outputs, ran at half speed).
const GELU_TAIL_FLUSH: f32 = 12.9;
/// Past this |x|, gelu's negative side `x·Φ(x)` is under the smallest normal (at
/// -13.1462 it is 1.1762e-38, at -13.147 1.164e-38), so its `e^(-x²/2)` is taken as 0;
/// below it a result under the smallest normal (|x| in [13.14625, 13.147], or a denormal
/// x) is taken as -0 too: a denormal result costs an assist.
const GELU_NEG_FLUSH: f32 = 13.147;

/// `erf x`: `x·(2/√π + x²·Q(x²))` for |x| < 0.75, else `±(1 - e^(-x²)·R(|x|))` with |x|
/// clamped to 10 (where erfc is already under the smallest denormal) and `e^(-x²)` taken
/// as 0 past [`ERF_FLUSH`]. ±inf give ±1, NaN gives NaN.
pub(super) fn erf(e: &mut Em, x: Value) -> Value {
    let ax = e.abs(x);
    let a = e.min_keep_nan(ax, 10.0);
    let r = erfc_scaled(e, a);
    let ex = exp_neg_sq(e, a, 1.0);
    let far = e.cmpc(FloatCC::GreaterThan, a, ERF_FLUSH);
    let zero = e.c(0.0);
    let ex = e.sel(far, zero, ex);
    let erfc = e.mul(ex, r);
    let big = e.csub(1.0, erfc);
    let sign = e.sign_of(x);
    let big = e.b.ins().bor(big, sign);
    // x·(C0_HI + (C0_LO + x²·Q(x²))): the leading product fused, the rest small.
    let z = e.mul(x, x);
    let q = e.horner(z, &ERF_Q);
    let lo = e.c(ERF_C0_LO);
    let rest = e.mul_add(q, z, lo);
    let xr = e.mul(x, rest);
    let small = e.mul_add_c(x, ERF_C0_HI, xr);
    let is_small = e.cmpc(FloatCC::LessThan, ax, ERF_SMALL);
    let y = e.sel(is_small, small, big);
    // erf is odd: the sign is x's (the small path's `-0·C0_HI + (+0)` gave +0 for -0)
    e.b.ins().bor(y, sign)
}

/// `gelu x = x·Φ(x)` with `Φ(-|x|) = erfc(|x|/√2)/2 = e^(-x²/2)·R(|x|/√2)/2` (relatively
/// accurate in the left tail, no `1 + erf` cancellation) and `Φ(|x|) = 1 - Φ(-|x|)`;
/// |x| is clamped to 14 in R (Φ(-14) is under the smallest denormal). The negative side
/// is `(x·R/2)·e^(-x²/2)`, in that order, so that no product is a denormal while the
/// result is normal, and it is ±0 where it would be under the smallest normal
/// ([`GELU_NEG_FLUSH`]); the positive side's tail is 0 past [`GELU_TAIL_FLUSH`]: no value
/// is ever a denormal. `ex` is [`exp_neg_half_sq`] of `x` (the caller's, so that a kernel
/// computing gelu's derivative too shares it).
/// gelu(+inf) = +inf, gelu(-inf) = NaN (as the reference's `-inf·0`), NaN gives NaN.
pub(super) fn gelu(e: &mut Em, x: Value, ex: Value) -> Value {
    let ax = e.abs(x);
    let axc = e.min_keep_nan(ax, 14.0);
    let a = e.mulc(axc, std::f32::consts::FRAC_1_SQRT_2);
    let r = erfc_scaled(e, a);
    let h = e.mulc(r, 0.5);
    // NaN compares false: a NaN x keeps its NaN ex
    let zero = e.c(0.0);
    let far = e.cmpc(FloatCC::GreaterThan, ax, GELU_NEG_FLUSH);
    let ex_neg = e.sel(far, zero, ex);
    let xh = e.mul(x, h);
    let lower = e.mul(xh, ex_neg);
    let mag = e.abs(lower);
    let tiny = e.cmpc(FloatCC::LessThan, mag, f32::MIN_POSITIVE);
    let signed_zero = e.sign_of(lower);
    let lower = e.sel(tiny, signed_zero, lower);
    let far = e.cmpc(FloatCC::GreaterThan, ax, GELU_TAIL_FLUSH);
    let ex_pos = e.sel(far, zero, ex);
    let tail = e.mul(ex_pos, h);
    let phi = e.csub(1.0, tail);
    let upper = e.mul(x, phi);
    let neg = e.cmpc(FloatCC::LessThan, x, 0.0);
    e.sel(neg, lower, upper)
}
