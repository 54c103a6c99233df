//! The rules of the unary family, by name in the table.

use super::*;

/// `-g`
pub fn neg(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |_, _, _| Ok(-1.0))
}

/// `g * sign(x)` (0 at 0)
pub fn abs(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| o.unary(UnaryOp::Sign, x))
}

/// `g * y`
pub fn exp(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |_, _, y| Ok(y))
}

/// `g / x`
pub fn log(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| o.unary(UnaryOp::Recip, x))
}

/// `g / (2 y)`
pub fn sqrt(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let r = o.unary(UnaryOp::Recip, y)?;
        o.mul(r, 0.5)
    })
}

/// `-g y³ / 2`
pub fn rsqrt(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let y2 = o.mul(y, y)?;
        let y3 = o.mul(y2, y)?;
        o.mul(y3, -0.5)
    })
}

/// `-g y²`
pub fn recip(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let y2 = o.mul(y, y)?;
        o.neg(y2)
    })
}

/// `g cos x`
pub fn sin(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| o.unary(UnaryOp::Cos, x))
}

/// `-g sin x`
pub fn cos(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let s = o.unary(UnaryOp::Sin, x)?;
        o.neg(s)
    })
}

/// `g (1 - y²)`
pub fn tanh(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let y2 = o.mul(y, y)?;
        o.sub(1.0, y2)
    })
}

/// `g 2/√π e^(-x²)`
pub fn erf(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let x2 = o.mul(x, x)?;
        let n = o.mul(x2, -1.0)?;
        let e = o.unary(UnaryOp::Exp, n)?;
        o.mul(e, 2.0 / PI.sqrt())
    })
}

/// `g y (1 - y)`
pub fn sigmoid(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let one_minus = o.sub(1.0, y)?;
        o.mul(y, one_minus)
    })
}

/// `g` where `x > 0`, else 0
pub fn relu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, y| {
        let pos = o.binary(BinaryOp::Gt, x, 0.0)?;
        let dt = o.ty(y).dtype;
        o.cast(pos, dt)
    })
}

/// `g (Φ(x) + x φ(x))`, with `Φ(x) = y / x` from the output `y = x Φ(x)` (½ at 0): no second
/// erf beside gelu's own (a training step computes both in one kernel), and no `1 + erf`
/// cancellation in the left tail. ±inf and NaN give NaN, as torch's formula does.
pub fn gelu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, y| {
        let ratio = o.div(y, x)?;
        let at_zero = o.binary(BinaryOp::Eq, x, 0.0)?;
        let cdf = o.select(at_zero, 0.5, ratio)?;
        let x2 = o.mul(x, x)?;
        let n = o.mul(x2, -0.5)?;
        let ex = o.unary(UnaryOp::Exp, n)?;
        let pdf = o.mul(ex, 1.0 / (2.0 * PI).sqrt())?;
        let xp = o.mul(x, pdf)?;
        o.add(cdf, xp)
    })
}

/// torch's tanh-gelu derivative: `½(1 + t) + ½ x (1 - t²) k (1 + 3·0.044715 x²)`,
/// `t = tanh(k (x + 0.044715 x³))`, `k = √(2/π)`
pub fn gelu_tanh(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let k = (2.0 / PI).sqrt();
        let x2 = o.mul(x, x)?;
        let x3 = o.mul(x2, x)?;
        let a = o.mul(x3, 0.044715)?;
        let inner = o.add(x, a)?;
        let inner = o.mul(inner, k)?;
        let t = o.unary(UnaryOp::Tanh, inner)?;
        let left = o.add(t, 1.0)?;
        let left = o.mul(left, 0.5)?;
        let t2 = o.mul(t, t)?;
        let sech2 = o.sub(1.0, t2)?;
        let q = o.mul(x2, 3.0 * 0.044715)?;
        let q = o.add(q, 1.0)?;
        let right = o.mul(sech2, q)?;
        let right = o.mul(right, x)?;
        let right = o.mul(right, 0.5 * k)?;
        o.add(left, right)
    })
}

/// `g s (1 + x (1 - s))`, `s = sigmoid(x)`
pub fn silu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let s = o.unary(UnaryOp::Sigmoid, x)?;
        let one_minus = o.sub(1.0, s)?;
        let xs = o.mul(x, one_minus)?;
        let inner = o.add(xs, 1.0)?;
        o.mul(s, inner)
    })
}

/// 0 (a step function: torch's gradient is zero everywhere)
pub fn zero(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |_, _, _| Ok(0.0))
}

/// `g / (1 + x)`
pub fn log1p(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let x1 = o.add(x, 1.0)?;
        o.unary(UnaryOp::Recip, x1)
    })
}

/// `g (y + 1)`
pub fn expm1(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| o.add(y, 1.0))
}

/// `g / (x ln 2)`
pub fn log2(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let xl = o.mul(x, LN_2)?;
        o.unary(UnaryOp::Recip, xl)
    })
}

/// `g y ln 2`
pub fn exp2(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| o.mul(y, LN_2))
}

/// `g (1 + y²)`
pub fn tan(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, _, y| {
        let y2 = o.mul(y, y)?;
        o.add(y2, 1.0)
    })
}

/// `g / (1 + x²)`
pub fn atan(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let x2 = o.mul(x, x)?;
        let d = o.add(x2, 1.0)?;
        o.unary(UnaryOp::Recip, d)
    })
}

/// `g cosh x`, `cosh x = (e^x + e^-x) / 2`
pub fn sinh(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let e = o.unary(UnaryOp::Exp, x)?;
        let nx = o.mul(x, -1.0)?;
        let en = o.unary(UnaryOp::Exp, nx)?;
        let s = o.add(e, en)?;
        o.mul(s, 0.5)
    })
}

/// `g` where `0 < x < 6`, else 0 (torch's hardtanh backward)
pub fn relu6(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, y| {
        let above = o.binary(BinaryOp::Gt, x, 0.0)?;
        let below = o.binary(BinaryOp::Lt, x, 6.0)?;
        let inside = o.binary(BinaryOp::LogicalAnd, above, below)?;
        let dt = o.ty(y).dtype;
        o.cast(inside, dt)
    })
}

/// 0 below -3, `x/3 + 1/2` up to 3, then 1 (torch's hardswish backward)
pub fn hardswish(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        let mid = o.div(x, 3.0)?;
        let mid = o.add(mid, 0.5)?;
        let upper = o.binary(BinaryOp::Le, x, 3.0)?;
        let inner = o.select(upper, mid, 1.0)?;
        let lower = o.binary(BinaryOp::Lt, x, -3.0)?;
        o.select(lower, 0.0, inner)
    })
}

/// `t + x s (1 - t²)`, `t = tanh(softplus(x))`, `s = sigmoid(x)`
pub fn mish(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    unary_rule(o, c, |o, x, _| {
        // softplus with torch's threshold 20, as the forward computes it
        let e = o.unary(UnaryOp::Exp, x)?;
        let lp = o.unary(UnaryOp::Log1p, e)?;
        let big = o.binary(BinaryOp::Gt, x, 20.0)?;
        let sp = o.select(big, x, lp)?;
        let t = o.unary(UnaryOp::Tanh, sp)?;
        let s = o.unary(UnaryOp::Sigmoid, x)?;
        let t2 = o.mul(t, t)?;
        let sech2 = o.sub(1.0, t2)?;
        let xs = o.mul(x, s)?;
        let r = o.mul(xs, sech2)?;
        o.add(t, r)
    })
}
