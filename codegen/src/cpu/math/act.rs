//! The exp-based activations: `tanh`, `sigmoid`, `silu` and the tanh form of `gelu`.

use super::emit::Em;
use super::exp_log::exp;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// Below this |x|, tanh is the odd polynomial; above, `±(1 - 2/(e^2|x| + 1))`.
const TANH_SMALL: f32 = 0.625;
/// `(tanh(x) - x)/x³` as a polynomial in `x²` on |x| ≤ 0.625 (minimax relative, 4.4e-9).
const TANH_P: [f32; 5] = [
    -0.0057049873,
    0.020639088,
    -0.053739715,
    0.13331442,
    -0.3333328,
];
/// `2·sqrt(2/π)`
const GELU_K1: f32 = 1.5957692;
/// `2·sqrt(2/π)·0.044715`
const GELU_K2: f32 = 0.071354814;

/// `tanh x`: `x + x³·P(x²)` for |x| < 0.625, else `±(1 - 2/(e^2|x| + 1))` with the sign of
/// x (no cancellation: the quotient is ≤ 0.9). `e^2|x|` overflowing to +inf gives ±1.
pub(super) fn tanh(e: &mut Em, x: Value) -> Value {
    let z = e.mul(x, x);
    let p = e.horner(z, &TANH_P);
    let xz = e.mul(x, z);
    let small = e.mul_add(p, xz, x);
    let ax = e.abs(x);
    let x2 = e.add(ax, ax);
    let e2 = exp(e, x2);
    let d = e.addc(e2, 1.0);
    let q = e.cdiv(2.0, d);
    let big = e.csub(1.0, q);
    let sign = e.sign_of(x);
    let big = e.b.ins().bor(big, sign);
    let is_small = e.cmpc(FloatCC::LessThan, ax, TANH_SMALL);
    e.sel(is_small, small, big)
}

/// `num / (1 + e^-arg)`, the shape of sigmoid, silu and gelu-tanh (`e^-arg` → +inf gives
/// `num/inf`, → 0 gives `num`).
fn over_one_plus_exp(e: &mut Em, num: Value, neg_arg: Value) -> Value {
    let ex = exp(e, neg_arg);
    let d = e.addc(ex, 1.0);
    e.div(num, d)
}

/// `sigmoid x = 1/(1 + e^-x)`.
pub(super) fn sigmoid(e: &mut Em, x: Value) -> Value {
    let neg = e.neg(x);
    let one = e.c(1.0);
    over_one_plus_exp(e, one, neg)
}

/// `silu x = x/(1 + e^-x)`.
pub(super) fn silu(e: &mut Em, x: Value) -> Value {
    let neg = e.neg(x);
    over_one_plus_exp(e, x, neg)
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
    over_one_plus_exp(e, x, neg_2u)
}
