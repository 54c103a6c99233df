//! The rules of the binary family, by name in the table.

use super::*;

fn two(o: &mut Ops<'_>, c: &GradCall<'_>, da: GArg, db: GArg) -> Out {
    Ok(vec![o.through(c, 0, da)?, o.through(c, 1, db)?])
}

/// `g`, `g`
pub fn add(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    two(o, c, 1.0.into(), 1.0.into())
}

/// `g`, `-g`
pub fn sub(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    two(o, c, 1.0.into(), (-1.0).into())
}

/// `g b`, `g a`
pub fn mul(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    two(o, c, c.args[1], c.args[0])
}

/// `f(x)` of an operand: the op on a value, the f64 function on a literal.
fn map(o: &mut Ops<'_>, x: GArg, u: UnaryOp, f: fn(f64) -> f64) -> Result<GArg, GradError> {
    Ok(match x {
        GArg::Val(v) => o.unary(u, v)?.into(),
        GArg::Scalar(s) => f(s.to_f64()).into(),
    })
}

/// `x * x` of an operand (a literal squared is a literal).
fn square(o: &mut Ops<'_>, x: GArg) -> Result<GArg, GradError> {
    Ok(match x {
        GArg::Val(v) => o.mul(v, v)?.into(),
        GArg::Scalar(s) => (s.to_f64() * s.to_f64()).into(),
    })
}

/// `g / b`, `-g y / b`
pub fn div(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let rb = map(o, c.args[1], UnaryOp::Recip, |b| 1.0 / b)?;
    let yb = o.mul(c.out, rb)?;
    let nyb = o.neg(yb)?;
    two(o, c, rb, nyb.into())
}

/// `g b a^(b-1)`, and `g y ln a` (0 where `a = 0` and `b ≥ 0`, as torch)
pub fn pow(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (a, b) = (c.args[0], c.args[1]);
    let bm1: GArg = match b {
        GArg::Val(v) => o.sub(v, 1.0)?.into(),
        GArg::Scalar(s) => (s.to_f64() - 1.0).into(),
    };
    let p = o.apply(Op::Binary(BinaryOp::Pow), &[a, bm1])?;
    let da = o.apply(Op::Binary(BinaryOp::Mul), &[b, p.into()])?;
    let db = if matches!(b, GArg::Val(_)) {
        let la = map(o, a, UnaryOp::Log, f64::ln)?;
        let d = o.mul(c.out, la)?;
        let b0 = o.apply(Op::Binary(BinaryOp::Ge), &[b, 0.0.into()])?;
        let mask = match a {
            GArg::Val(_) => {
                let a0 = o.apply(Op::Binary(BinaryOp::Eq), &[a, 0.0.into()])?;
                o.binary(BinaryOp::LogicalAnd, a0, b0)?
            }
            GArg::Scalar(s) if s.to_f64() == 0.0 => b0,
            GArg::Scalar(_) => return two(o, c, da.into(), d.into()),
        };
        o.select(mask, 0.0, d)?.into()
    } else {
        0.0.into()
    };
    two(o, c, da.into(), db)
}

/// The gradient's share for `x` in `maximum`/`minimum`: 1 where `x` wins, ½ on ties.
fn share(o: &mut Ops<'_>, x: GArg, y: GArg, wins: BinaryOp, dt: DType) -> Result<GVal, GradError> {
    let w = o.apply(Op::Binary(wins), &[x, y])?;
    let tie = o.apply(Op::Binary(BinaryOp::Eq), &[x, y])?;
    let half = o.select(tie, 0.5, 0.0)?;
    let w = o.cast(w, dt)?;
    o.add(w, half)
}

/// the gradient to the larger operand, halves on ties (torch)
pub fn maximum(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let dt = o.ty(c.out).dtype;
    let da = share(o, c.args[0], c.args[1], BinaryOp::Gt, dt)?;
    let db = share(o, c.args[1], c.args[0], BinaryOp::Gt, dt)?;
    two(o, c, da.into(), db.into())
}

/// the gradient to the smaller operand, halves on ties (torch)
pub fn minimum(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let dt = o.ty(c.out).dtype;
    let da = share(o, c.args[0], c.args[1], BinaryOp::Lt, dt)?;
    let db = share(o, c.args[1], c.args[0], BinaryOp::Lt, dt)?;
    two(o, c, da.into(), db.into())
}

/// `g`, `-g floor(a / b)`
pub fn remainder(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let q = o.apply(Op::Binary(BinaryOp::Div), &[c.args[0], c.args[1]])?;
    let f = o.unary(UnaryOp::Floor, q)?;
    let nf = o.neg(f)?;
    two(o, c, 1.0.into(), nf.into())
}

/// `g`, `-g trunc(a / b)`
pub fn fmod(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let q = o.apply(Op::Binary(BinaryOp::Div), &[c.args[0], c.args[1]])?;
    let t = o.unary(UnaryOp::Trunc, q)?;
    let nt = o.neg(t)?;
    two(o, c, 1.0.into(), nt.into())
}

/// `g b / (a² + b²)`, `-g a / (a² + b²)`
pub fn atan2(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (a, b) = (c.args[0], c.args[1]);
    let a2 = square(o, a)?;
    let b2 = square(o, b)?;
    let r2 = o.apply(Op::Binary(BinaryOp::Add), &[a2, b2])?;
    let inv = o.unary(UnaryOp::Recip, r2)?;
    let da = o.apply(Op::Binary(BinaryOp::Mul), &[b, inv.into()])?;
    let na = o.apply(Op::Binary(BinaryOp::Mul), &[a, inv.into()])?;
    let db = o.neg(na)?;
    two(o, c, da.into(), db.into())
}
