//! `sin` and `cos`: Cody–Waite reduction by π/2 and two short polynomials.

use super::emit::Em;
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
    let shifter = e.c(SHIFTER);
    let t = e.mul_add_c(x, TWO_OVER_PI, shifter);
    let j = e.sub(t, shifter);
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
    e.b.ins().bxor(v, sign)
}
