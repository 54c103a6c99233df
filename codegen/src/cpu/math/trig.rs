//! The circular functions: `sin` and `cos` (Cody–Waite reduction by π/2 and two short
//! polynomials), `tan` (the same quadrant, a reduction exact enough for its poles and roots,
//! one polynomial and a reciprocal) and `atan` (`1/|x|` past 1, one polynomial).

use super::emit::Em;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// 2/π
const TWO_OVER_PI: f32 = std::f32::consts::FRAC_2_PI;
/// 1.5·2^23, the round-to-integer shifter (see `exp_log::SHIFTER`).
const SHIFTER: f32 = 12_582_912.0;
/// π/2 = PIO2_1 + PIO2_2 + PIO2_3 (+ 5.4e-15). The first two have 8 significant bits, so
/// `j·PIO2_1` and `j·PIO2_2` are exact for |j| < 2^16, which bounds the accurate range.
const PIO2_1: f32 = 1.570_312_5;
/// Second part of π/2.
const PIO2_2: f32 = 0.00048446655;
/// Third part of π/2.
const PIO2_3: f32 = -6.3975784e-7;
/// `(sin(r) - r)/r³` as a polynomial in `r²` on |r| ≤ π/4 (minimax relative, 3.8e-9).
const SIN_P: [f32; 3] = [-0.00019515284, 0.00833216, -0.16666655];
/// `(cos(r) - 1 + r²/2)/r⁴` as a polynomial in `r²` on |r| ≤ π/4 (1.2e-10).
const COS_P: [f32; 3] = [2.4433157e-5, -0.0013887316, 0.041666646];

/// `sin x` (`cos == false`) or `cos x` (`cos == true`): `j = round(x·2/π)`,
/// `r = x - j·π/2` in three parts, then `±sin r` or `±cos r` by the quadrant `j mod 4`
/// (`cos x = sin(x + π/2)`: the quadrant plus one). NaN and ±inf give NaN. Accurate while
/// |j| < 2^16 (|x| ≲ 1e5); past that `r` is clamped to [-1, 1], so the result stays in
/// [-1, 1] but means nothing.
pub(super) fn sin_cos(e: &mut Em, x: Value, cos: bool) -> Value {
    let (j, t) = quadrant(e, x);
    let r = e.mul_add_c(j, -PIO2_1, x);
    let r = e.mul_add_c(j, -PIO2_2, r);
    let r = e.mul_add_c(j, -PIO2_3, r);
    // |r| ≤ π/4 (plus a rounding slack) in the accurate range; past it r is meaningless and
    // clamping keeps the polynomials in [-1, 1]. NaN (from ±inf or NaN) passes through.
    let r = e.min_keep_nan(r, 1.0);
    let r = e.max_keep_nan(r, -1.0);
    let z = e.mul(r, r);
    let sp = e.horner(z, &SIN_P);
    let rz = e.mul(r, z);
    let s = e.mul_add(sp, rz, r);
    let cp = e.horner(z, &COS_P);
    let zz = e.mul(z, z);
    let one = e.c(1.0);
    let c0 = e.mul_add_c(z, -0.5, one);
    let c = e.mul_add(cp, zz, c0);
    // The low bits of t's bits are j (two's complement).
    let mut q = e.int_bits(t);
    if cos {
        let one = e.ci(1);
        q = e.b.ins().iadd(q, one);
    }
    let odd = e.odd_mask(q);
    let v = e.sel(odd, c, s);
    // Quadrants 2 and 3 negate: bit 1 of q moved to the sign bit.
    let sign = e.b.ins().ishl_imm_u(q, 30);
    let sign = e.float_bits(sign);
    let sign = e.sign_of(sign);
    let v = e.b.ins().bxor(v, sign);
    if cos {
        return v;
    }
    // sin(-0) = -0: the reduction's last step adds +0 (j·-PIO2_3 for j = +0) to r = -0,
    // which rounds to +0, so zeros take x itself
    let zero = e.c(0.0);
    let is_zero = e.cmp(FloatCC::Equal, x, zero);
    e.sel(is_zero, x, v)
}

/// The quadrant of `x`: `j = round(x·2/π)` (a float) by the shifter, and `t = j + SHIFTER`,
/// whose bits hold `j` in their low mantissa bits (two's complement).
fn quadrant(e: &mut Em, x: Value) -> (Value, Value) {
    let shifter = e.c(SHIFTER);
    let t = e.mul_add_c(x, TWO_OVER_PI, shifter);
    (e.sub(t, shifter), t)
}

/// π/2 = TAN_C1 + TAN_C2 + TAN_C3 (+ 3.3e-22): each rounded down from what is left (24 bits,
/// all positive, so `j·(-C)` is -0 for `j = 0` and `tan(-0)` keeps its sign).
const TAN_C1: f32 = f32::from_bits(0x3fc9_0fda); // 1.5707963, under f32's π/2
/// Second part of π/2 for [`tan`] (with FMA).
const TAN_C2: f32 = 7.549_789_4e-8;
/// Third part of π/2 for [`tan`] (with FMA).
const TAN_C3: f32 = 5.390_302_5e-15;
/// π/2 = TAN_D1 + TAN_D2 + TAN_D3 (+ 1e-37) in f64 for [`tan`] without FMA: the first two
/// have 33 bits, so `j·D` is exact in f64 for |j| < 2^20.
const TAN_D1: f64 = 1.570_796_326_734_125_6;
/// Second part of π/2 in f64.
const TAN_D2: f64 = 6.077_100_506_303_966e-11;
/// Third part of π/2 in f64.
const TAN_D3: f64 = 2.022_266_248_795_950_6e-21;
/// `(tan(r) - r)/r³` as a polynomial in `r²` on |r| ≤ 0.8 (π/4 and the slack of a rounded
/// quadrant), minimax for the relative error of tan (3.3e-9), highest degree first.
const TAN_P: [f32; 7] = [
    0.004_584_030_2,
    -0.000_327_869_1,
    0.011_161_609,
    0.021_158_05,
    0.054_083_61,
    0.133_324_58,
    0.333_333_55,
];

/// `tan x`: the quadrant `j = round(2x/π)` and `r = x - j·π/2`, `tan x = tan r` for even `j`
/// and `-1/tan r` for odd, with `tan r = r + r³·T(r²)`. Near its roots and poles tan needs
/// `r` accurate relatively (|r| gets down to 4e-9 for |x| ≤ 1e5), so the reduction is exact
/// up to one or two roundings: with FMA, three fused steps (`x - j·C1` is exact, then the
/// two low parts each round once); without, in f64 ([`reduce_f64`]) and rounded once. Valid
/// for |j| < 2^16 (|x| ≲ 1e5; beyond, the caller takes libm's path). ±0 → ±0, NaN and ±inf
/// → NaN.
pub(super) fn tan(e: &mut Em, x: Value) -> Value {
    let (j, t) = quadrant(e, x);
    let r = if e.fma {
        let r = e.mul_add_c(j, -TAN_C1, x);
        let r = e.mul_add_c(j, -TAN_C2, r);
        e.mul_add_c(j, -TAN_C3, r)
    } else {
        reduce_f64(e, x, j)
    };
    let z = e.mul(r, r);
    let p = e.horner(z, &TAN_P);
    let rz = e.mul(r, z);
    let tr = e.mul_add(p, rz, r);
    let inv = e.cdiv(-1.0, tr);
    let q = e.int_bits(t);
    let odd = e.odd_mask(q);
    e.sel(odd, inv, tr)
}

/// `x - j·π/2` computed in f64 and rounded to f32: `j·TAN_D1` and `j·TAN_D2` are exact, the
/// first difference is exact and the others round at 2^-53 of |r| (or are exact where r is
/// small), so the result is within ~0.5 ulp of the true r.
fn reduce_f64(e: &mut Em, x: Value, j: Value) -> Value {
    let xs = e.widen(x);
    let js = e.widen(j);
    let mut rs = Vec::with_capacity(xs.len());
    for (x, j) in xs.into_iter().zip(js) {
        let mut r = x;
        for d in [TAN_D1, TAN_D2, TAN_D3] {
            let d = e.c64(d);
            let p = e.mul(j, d);
            r = e.sub(r, p);
        }
        rs.push(r);
    }
    e.narrow(&rs)
}

/// π/2 rounded to f32 (up): `atan` past 1 is `PIO2_HI + (PIO2_LO - atan(1/|x|))`.
const PIO2_HI: f32 = std::f32::consts::FRAC_PI_2;
/// π/2 - PIO2_HI
const PIO2_LO: f32 = -4.371_139e-8;
/// `(atan(w) - w)/w³` as a polynomial in `w²` on [0, 1], minimax for the relative error of
/// atan (3.4e-9), highest degree first.
const ATAN_P: [f32; 9] = [
    -0.001_793_622_9,
    0.010_914_612,
    -0.031_177_856,
    0.057_957_61,
    -0.084_034_51,
    0.109_521_866,
    -0.142_642_42,
    0.199_985_47,
    -0.333_333,
];

/// `atan x = sign(x)·a(|x|)`: `w = min(|x|, 1)/max(|x|, 1)` (|x| itself up to 1, else
/// `1/|x|`, one division either way), `atan w = w + w³·A(w²)`, and past 1
/// `π/2 - atan w` (π/2 in two parts; no cancellation, the result is ≥ π/4). ±0 → ±0,
/// ±inf → ±π/2 (`w = 0`), NaN → NaN (`minps`/`maxps` keep it).
pub(super) fn atan(e: &mut Em, x: Value) -> Value {
    let a = e.abs(x);
    let num = e.min_keep_nan(a, 1.0);
    let den = e.max_keep_nan(a, 1.0);
    let w = e.div(num, den);
    let z = e.mul(w, w);
    let p = e.horner(z, &ATAN_P);
    let wz = e.mul(w, z);
    let y = e.mul_add(p, wz, w);
    let lo = e.csub(PIO2_LO, y);
    let far = e.addc(lo, PIO2_HI);
    let big = e.cmpc(FloatCC::GreaterThan, a, 1.0);
    let r = e.sel(big, far, y);
    let sign = e.sign_of(x);
    e.b.ins().bor(r, sign)
}
