//! Derivative rules: the table's `derivative` column. A rule is written with ops, through
//! a [`GradBuilder`], so that one rule serves every place gradients are built: eager
//! autograd applies each op to tensors, a graph transformation adds each op as a node, and
//! the tests evaluate each op with the interpreter. A rule receives the op, its operands,
//! its result and the gradient of the result, and returns the gradient of each operand
//! (`None` for a literal operand or one no gradient flows to). Broadcasting is undone by
//! summing ([`Ops::sum_to`]). The formulas are PyTorch's (`derivatives.yaml`), including
//! its conventions at kinks: `relu'(0) = 0`, `abs'(0) = 0`, ties of `maximum`/`minimum`
//! split the gradient in halves.

use super::info::DTypeRule;
use crate::{BinaryOp, DType, Op, ReduceOp, Scalar, TensorType, UnaryOp};
use std::f64::consts::{LN_2, PI};

/// A value a [`GradBuilder`] made or was given (an index into the builder's own values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GVal(pub usize);

/// An operand of an op a rule applies: a value or a literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GArg {
    /// a value
    Val(GVal),
    /// a scalar literal
    Scalar(Scalar),
}

impl From<GVal> for GArg {
    fn from(v: GVal) -> GArg {
        GArg::Val(v)
    }
}

impl From<f64> for GArg {
    fn from(x: f64) -> GArg {
        GArg::Scalar(Scalar::Float(x))
    }
}

/// Why a gradient could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GradError {
    /// the op has no derivative rule yet
    #[error("{op}: no derivative rule yet (backward through it is not supported)")]
    Missing {
        /// the op's name
        op: String,
    },
    /// an op the rule applies was rejected
    #[error("{op}: building its gradient failed: {reason}")]
    Build {
        /// the op whose gradient was being built
        op: String,
        /// what failed
        reason: String,
    },
}

/// What a rule builds with: applies ops to values and tells a value's type.
pub trait GradBuilder {
    /// `op` applied to `args` (type-checked as everywhere else); an error names the op.
    fn apply(&mut self, op: Op, args: &[GArg]) -> Result<GVal, GradError>;
    /// The type of a value.
    fn ty(&self, v: GVal) -> TensorType;
}

/// One application of a rule: the op, its operands, its result and the result's gradient.
#[derive(Clone, Copy, Debug)]
pub struct GradCall<'a> {
    /// the op
    pub op: &'a Op,
    /// its operands
    pub args: &'a [GArg],
    /// its result
    pub out: GVal,
    /// the gradient of the result (of the result's type)
    pub grad: GVal,
}

/// A derivative rule: the gradient of each operand, in operand order.
pub type Rule = fn(&mut Ops<'_>, &GradCall<'_>) -> Result<Vec<Option<GVal>>, GradError>;

/// How gradients flow through an op (the table's `derivative` column).
#[derive(Clone, Copy)]
pub enum Derivative {
    /// gradients of the operands by this rule
    Rule(Rule),
    /// no gradient flows: the result is not differentiable (bool or integer results,
    /// comparisons, `argmax`); its operands get none from it
    NonDifferentiable,
    /// not written yet: building a gradient through the op is a [`GradError::Missing`]
    Missing,
}

impl std::fmt::Debug for Derivative {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Derivative::Rule(_) => "Rule",
            Derivative::NonDifferentiable => "NonDifferentiable",
            Derivative::Missing => "Missing",
        })
    }
}

/// The gradients of `call.op`'s operands, by its row's rule. A non-differentiable op gives
/// `None` for every operand.
pub fn gradients(
    b: &mut dyn GradBuilder,
    call: &GradCall<'_>,
) -> Result<Vec<Option<GVal>>, GradError> {
    match call.op.info().derivative {
        Derivative::Rule(rule) => {
            let mut ops = Ops { b, op: call.op };
            rule(&mut ops, call)
        }
        Derivative::NonDifferentiable => Ok(vec![None; call.args.len()]),
        Derivative::Missing => Err(GradError::Missing {
            op: call.op.name().to_string(),
        }),
    }
}

/// The ops rules are written with, over a [`GradBuilder`].
pub struct Ops<'a> {
    b: &'a mut dyn GradBuilder,
    op: &'a Op,
}

impl Ops<'_> {
    /// Applies `op`; a failure names the op whose gradient is being built.
    pub fn apply(&mut self, op: Op, args: &[GArg]) -> Result<GVal, GradError> {
        self.b.apply(op, args).map_err(|e| match e {
            GradError::Build { reason, .. } => GradError::Build {
                op: self.op.name().to_string(),
                reason,
            },
            other => other,
        })
    }

    /// The type of `v`.
    pub fn ty(&self, v: GVal) -> TensorType {
        self.b.ty(v)
    }

    /// A unary op.
    pub fn unary(&mut self, u: UnaryOp, x: impl Into<GArg>) -> Result<GVal, GradError> {
        self.apply(Op::Unary(u), &[x.into()])
    }

    /// A binary op.
    pub fn binary(
        &mut self,
        op: BinaryOp,
        x: impl Into<GArg>,
        y: impl Into<GArg>,
    ) -> Result<GVal, GradError> {
        self.apply(Op::Binary(op), &[x.into(), y.into()])
    }

    /// `x + y`
    pub fn add(&mut self, x: impl Into<GArg>, y: impl Into<GArg>) -> Result<GVal, GradError> {
        self.binary(BinaryOp::Add, x, y)
    }

    /// `x - y`
    pub fn sub(&mut self, x: impl Into<GArg>, y: impl Into<GArg>) -> Result<GVal, GradError> {
        self.binary(BinaryOp::Sub, x, y)
    }

    /// `x * y`
    pub fn mul(&mut self, x: impl Into<GArg>, y: impl Into<GArg>) -> Result<GVal, GradError> {
        self.binary(BinaryOp::Mul, x, y)
    }

    /// `x / y`
    pub fn div(&mut self, x: impl Into<GArg>, y: impl Into<GArg>) -> Result<GVal, GradError> {
        self.binary(BinaryOp::Div, x, y)
    }

    /// `-x`
    pub fn neg(&mut self, x: GVal) -> Result<GVal, GradError> {
        self.unary(UnaryOp::Neg, x)
    }

    /// `mask ? x : y` (`mask` a bool value)
    pub fn select(
        &mut self,
        mask: GVal,
        x: impl Into<GArg>,
        y: impl Into<GArg>,
    ) -> Result<GVal, GradError> {
        self.apply(Op::Where, &[mask.into(), x.into(), y.into()])
    }

    /// `x` cast to `dtype` (no op when it has it).
    pub fn cast(&mut self, x: GVal, dtype: DType) -> Result<GVal, GradError> {
        if self.ty(x).dtype == dtype {
            return Ok(x);
        }
        self.apply(Op::Cast { dtype }, &[x.into()])
    }

    /// `g` summed down to `target`'s shape: the leading dims broadcasting added, and the
    /// dims where `target` has size 1 and `g` does not (undoing a broadcast), then cast to
    /// `target`'s dtype.
    pub fn sum_to(&mut self, g: GVal, target: &TensorType) -> Result<GVal, GradError> {
        let gt = self.ty(g);
        let (gd, td) = (gt.shape.dims().to_vec(), target.shape.dims());
        let lead = gd.len().saturating_sub(td.len());
        let mut g = g;
        if lead > 0 {
            let dims = (0..lead as i64).collect();
            g = self.reduce_sum(g, dims, false)?;
        }
        let ones: Vec<i64> = td
            .iter()
            .zip(&gd[lead..])
            .enumerate()
            .filter(|(_, (t, d))| t.is_one() && !d.is_one())
            .map(|(i, _)| i as i64)
            .collect();
        if !ones.is_empty() {
            g = self.reduce_sum(g, ones, true)?;
        }
        self.cast(g, target.dtype)
    }

    /// `sum(x, dims, keepdim)`
    pub fn reduce_sum(
        &mut self,
        x: GVal,
        dims: Vec<i64>,
        keepdim: bool,
    ) -> Result<GVal, GradError> {
        self.apply(
            Op::Reduce {
                op: ReduceOp::Sum,
                dims,
                keepdim,
                dtype: None,
            },
            &[x.into()],
        )
    }

    /// The gradient of operand `i` of a pointwise op whose local derivative is `d`: `g * d`
    /// summed down to the operand's shape; `None` for a literal operand.
    fn through(
        &mut self,
        call: &GradCall<'_>,
        i: usize,
        d: impl Into<GArg>,
    ) -> Result<Option<GVal>, GradError> {
        let GArg::Val(x) = call.args[i] else {
            return Ok(None);
        };
        let gd = self.mul(call.grad, d)?;
        let t = self.ty(x);
        self.sum_to(gd, &t).map(Some)
    }

    /// Operand `i` as an op argument (a value or the literal).
    fn arg(call: &GradCall<'_>, i: usize) -> GArg {
        call.args[i]
    }
}

/// True when a value of `dtype` carries gradients (floating point).
pub fn differentiable(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

/// The dtype rule a family row must have for its op to be differentiable.
pub fn differentiable_rule(rule: DTypeRule) -> bool {
    matches!(rule, DTypeRule::Float | DTypeRule::Numeric | DTypeRule::Any)
}

type Out = Result<Vec<Option<GVal>>, GradError>;

/// A one-operand rule from the local derivative `d(ops, x, y)`.
fn unary_rule<L: Into<GArg>>(
    o: &mut Ops<'_>,
    c: &GradCall<'_>,
    d: impl FnOnce(&mut Ops<'_>, GArg, GVal) -> Result<L, GradError>,
) -> Out {
    let x = Ops::arg(c, 0);
    let local = d(o, x, c.out)?;
    Ok(vec![o.through(c, 0, local)?])
}

/// The rules of the unary family, by name in the table.
pub(crate) mod unary {
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

    /// `g (Φ(x) + x φ(x))`
    pub fn gelu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        unary_rule(o, c, |o, x, _| {
            let s = o.mul(x, std::f64::consts::FRAC_1_SQRT_2)?;
            let e = o.unary(UnaryOp::Erf, s)?;
            let e1 = o.add(e, 1.0)?;
            let cdf = o.mul(e1, 0.5)?;
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
}

/// The rules of the binary family, by name in the table.
pub(crate) mod binary {
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
    fn share(
        o: &mut Ops<'_>,
        x: GArg,
        y: GArg,
        wins: BinaryOp,
        dt: DType,
    ) -> Result<GVal, GradError> {
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
}

/// The rules of reductions, layouts, casts, `where` and `matmul`.
pub(crate) mod structural {
    use super::*;
    use crate::shape::normalize_dim;
    use crate::{Dim, Shape};

    /// The reduced dims of `x`'s shape (`dims` empty: all), normalised.
    pub(super) fn reduced(x: &TensorType, dims: &[i64]) -> Vec<usize> {
        let r = x.shape.rank();
        if dims.is_empty() {
            return (0..r).collect();
        }
        let mut v: Vec<usize> = dims.iter().filter_map(|&d| normalize_dim(d, r)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// `g` (a reduction's result gradient) broadcast back to `x`'s shape: size-1 dims put
    /// back where the reduction dropped them, then expanded.
    pub(super) fn unreduce(
        o: &mut Ops<'_>,
        g: GVal,
        x: &TensorType,
        dims: &[usize],
        keepdim: bool,
    ) -> Result<GVal, GradError> {
        let mut g = g;
        if !keepdim {
            let kept: Shape = x
                .shape
                .dims()
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    if dims.contains(&i) {
                        Dim::Const(1)
                    } else {
                        d.clone()
                    }
                })
                .collect();
            g = o.apply(Op::Reshape { shape: kept }, &[g.into()])?;
        }
        o.apply(
            Op::Expand {
                shape: x.shape.clone(),
            },
            &[g.into()],
        )
    }

    fn operand(c: &GradCall<'_>, i: usize) -> GVal {
        match c.args[i] {
            GArg::Val(v) => v,
            GArg::Scalar(_) => unreachable!("the op's type rule makes operand {i} a tensor"),
        }
    }

    /// `sum`: the gradient broadcast back; `mean`: also divided by the count; `max`/`min`:
    /// shared evenly among the elements equal to the result (torch's `amax`/`amin`).
    pub fn reduce(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Reduce {
            op,
            ref dims,
            keepdim,
            ..
        } = *c.op
        else {
            unreachable!("a reduction's rule")
        };
        let x = operand(c, 0);
        let xt = o.ty(x);
        if !differentiable(xt.dtype) {
            return Ok(vec![None]);
        }
        let dims = reduced(&xt, dims);
        let g = o.cast(c.grad, xt.dtype)?;
        let ge = unreduce(o, g, &xt, &dims, keepdim)?;
        let gx = match op {
            ReduceOp::Sum => ge,
            ReduceOp::Mean => {
                let mut n = 1usize;
                for &d in &dims {
                    match xt.shape.dims()[d] {
                        Dim::Const(k) => n *= k,
                        Dim::Sym(_) => {
                            return Err(GradError::Build {
                                op: c.op.name().to_string(),
                                reason: "a mean over a symbolic dim (its count is not known \
                                         while the gradient is built)"
                                    .into(),
                            })
                        }
                    }
                }
                o.div(ge, n as f64)?
            }
            ReduceOp::Max | ReduceOp::Min => {
                let y = o.cast(c.out, xt.dtype)?;
                let ye = unreduce(o, y, &xt, &dims, keepdim)?;
                let hit = o.binary(BinaryOp::Eq, x, ye)?;
                let hit = o.cast(hit, xt.dtype)?;
                let count = o.reduce_sum(hit, dims.iter().map(|&d| d as i64).collect(), true)?;
                let share = o.div(hit, count)?;
                o.mul(ge, share)?
            }
        };
        Ok(vec![Some(gx)])
    }

    /// The gradient cast back to the operand's dtype (none for a non-float operand).
    pub fn cast(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let x = operand(c, 0);
        let dt = o.ty(x).dtype;
        if !differentiable(dt) {
            return Ok(vec![None]);
        }
        Ok(vec![Some(o.cast(c.grad, dt)?)])
    }

    /// The gradient reshaped to the operand's shape.
    pub fn reshape(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let x = operand(c, 0);
        let shape = o.ty(x).shape;
        Ok(vec![Some(
            o.apply(Op::Reshape { shape }, &[c.grad.into()])?,
        )])
    }

    /// The same transpose of the gradient.
    pub fn transpose(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        Ok(vec![Some(o.apply(c.op.clone(), &[c.grad.into()])?)])
    }

    /// The gradient permuted back (the inverse permutation).
    pub fn permute(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Permute { ref dims } = *c.op else {
            unreachable!("permute's rule")
        };
        let mut inverse = vec![0; dims.len()];
        for (i, &d) in dims.iter().enumerate() {
            inverse[d] = i;
        }
        Ok(vec![Some(
            o.apply(Op::Permute { dims: inverse }, &[c.grad.into()])?,
        )])
    }

    /// The gradient summed over the expanded dims.
    pub fn expand(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let x = operand(c, 0);
        let t = o.ty(x);
        Ok(vec![Some(o.sum_to(c.grad, &t)?)])
    }

    /// The gradient itself.
    pub fn identity(_: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        Ok(vec![Some(c.grad)])
    }

    /// `where(c, a, b)`: `g` where `c` to `a`, elsewhere to `b`; none to the condition.
    pub fn select(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let cond = operand(c, 0);
        let mut out = vec![None];
        for (i, then) in [(1, true), (2, false)] {
            let GArg::Val(v) = c.args[i] else {
                out.push(None);
                continue;
            };
            let g = if then {
                o.select(cond, c.grad, 0.0)?
            } else {
                o.select(cond, 0.0, c.grad)?
            };
            let t = o.ty(v);
            out.push(Some(o.sum_to(g, &t)?));
        }
        Ok(out)
    }

    /// `x` with its last two dims swapped.
    fn t(o: &mut Ops<'_>, x: GVal) -> Result<GVal, GradError> {
        o.apply(Op::Transpose { dim0: -2, dim1: -1 }, &[x.into()])
    }

    /// `x` reshaped to `dims`.
    fn reshaped(o: &mut Ops<'_>, x: GVal, dims: Vec<Dim>) -> Result<GVal, GradError> {
        o.apply(
            Op::Reshape {
                shape: dims.into_iter().collect(),
            },
            &[x.into()],
        )
    }

    fn matmul(o: &mut Ops<'_>, x: GVal, y: GVal) -> Result<GVal, GradError> {
        o.apply(Op::Matmul, &[x.into(), y.into()])
    }

    /// torch.matmul's gradients: `g @ bᵀ` and `aᵀ @ g`, with 1-d operands as a row (`a`)
    /// or a column (`b`), and batch broadcasting undone by summing.
    pub fn matmul_rule(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let (a, b) = (operand(c, 0), operand(c, 1));
        let (at, bt) = (o.ty(a), o.ty(b));
        let g = c.grad;
        let gd = o.ty(g).shape.dims().to_vec();
        let (ra, rb) = (at.shape.rank(), bt.shape.rank());
        let (da, db) = match (ra, rb) {
            (1, 1) => (o.mul(g, b)?, o.mul(g, a)?),
            (1, _) => {
                // a as [1, k]: g gains the row dim it lost
                let mut g2 = gd.clone();
                g2.insert(g2.len() - 1, Dim::Const(1));
                let g2 = reshaped(o, g, g2)?;
                let bt_ = t(o, b)?;
                let da = matmul(o, g2, bt_)?; // [..., 1, k]
                let k = at.shape.dims()[0].clone();
                let a2 = reshaped(o, a, vec![k, Dim::Const(1)])?;
                let db = matmul(o, a2, g2)?; // [..., k, n]
                let row = TensorType::new(
                    at.dtype,
                    [Dim::Const(1), at.shape.dims()[0].clone()]
                        .into_iter()
                        .collect(),
                );
                let da = o.sum_to(da, &row)?;
                (reshaped(o, da, at.shape.dims().to_vec())?, db)
            }
            (_, 1) => {
                // b as [k, 1]: g gains the column dim it lost
                let mut g2 = gd.clone();
                g2.push(Dim::Const(1));
                let g2 = reshaped(o, g, g2)?;
                let k = bt.shape.dims()[0].clone();
                let b2 = reshaped(o, b, vec![Dim::Const(1), k])?;
                let da = matmul(o, g2, b2)?; // [..., m, k]
                let at_ = t(o, a)?;
                let db = matmul(o, at_, g2)?; // [..., k, 1]
                let col = TensorType::new(
                    bt.dtype,
                    [bt.shape.dims()[0].clone(), Dim::Const(1)]
                        .into_iter()
                        .collect(),
                );
                let db = o.sum_to(db, &col)?;
                (da, reshaped(o, db, bt.shape.dims().to_vec())?)
            }
            _ => {
                let bt_ = t(o, b)?;
                let at_ = t(o, a)?;
                (matmul(o, g, bt_)?, matmul(o, at_, g)?)
            }
        };
        Ok(vec![Some(o.sum_to(da, &at)?), Some(o.sum_to(db, &bt)?)])
    }
}

/// The rules of the composite ops (softmaxes, norms, `linear`, `var`), the attributed
/// activations, `clamp`, and the copies (`slice`, `cat`, `triu`, `tril`), written with
/// primitives.
pub(crate) mod composite {
    use super::structural::{reduced, unreduce};
    use super::*;
    use crate::shape::normalize_dim;
    use crate::{Dim, Shape};

    fn operand(c: &GradCall<'_>, i: usize) -> Option<GVal> {
        match c.args.get(i) {
            Some(GArg::Val(v)) => Some(*v),
            _ => None,
        }
    }

    fn x_of(c: &GradCall<'_>) -> GVal {
        operand(c, 0).expect("the op's type rule makes operand 0 a tensor")
    }

    fn build_err(c: &GradCall<'_>, reason: &str) -> GradError {
        GradError::Build {
            op: c.op.name().to_string(),
            reason: reason.to_string(),
        }
    }

    /// `y (g - Σ g y)` over `dim`
    pub fn softmax(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let (Op::Softmax { dim } | Op::LogSoftmax { dim }) = *c.op else {
            unreachable!("softmax's rule")
        };
        let gy = o.mul(c.grad, c.out)?;
        let s = o.reduce_sum(gy, vec![dim], true)?;
        let d = o.sub(c.grad, s)?;
        let gx = o.mul(c.out, d)?;
        let t = o.ty(x_of(c));
        Ok(vec![Some(o.cast(gx, t.dtype)?)])
    }

    /// `g - e^y Σ g` over `dim`
    pub fn log_softmax(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::LogSoftmax { dim } = *c.op else {
            unreachable!("log_softmax's rule")
        };
        let p = o.unary(UnaryOp::Exp, c.out)?;
        let s = o.reduce_sum(c.grad, vec![dim], true)?;
        let ps = o.mul(p, s)?;
        let gx = o.sub(c.grad, ps)?;
        let t = o.ty(x_of(c));
        Ok(vec![Some(o.cast(gx, t.dtype)?)])
    }

    /// `x @ wᵀ + b`: `g @ w`, `Σ gᵀ @ x` over the batch dims, `Σ g` over all but the last
    pub fn linear(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let (x, w) = (x_of(c), operand(c, 1).expect("linear's weight is a tensor"));
        let (xt, wt) = (o.ty(x), o.ty(w));
        let g = c.grad;
        let gx = o.apply(Op::Matmul, &[g.into(), w.into()])?;
        let gx = o.sum_to(gx, &xt)?;
        let gw = if xt.shape.rank() == 1 {
            let gd = o.ty(g).shape.dims().to_vec();
            let col = o.apply(
                Op::Reshape {
                    shape: [gd[0].clone(), Dim::Const(1)].into_iter().collect(),
                },
                &[g.into()],
            )?;
            let row = o.apply(
                Op::Reshape {
                    shape: [Dim::Const(1), xt.shape.dims()[0].clone()]
                        .into_iter()
                        .collect(),
                },
                &[x.into()],
            )?;
            o.apply(Op::Matmul, &[col.into(), row.into()])?
        } else {
            let gtr = o.apply(Op::Transpose { dim0: -2, dim1: -1 }, &[g.into()])?;
            o.apply(Op::Matmul, &[gtr.into(), x.into()])?
        };
        let gw = o.sum_to(gw, &wt)?;
        let mut out = vec![Some(gx), Some(gw)];
        if let Some(b) = operand(c, 2) {
            let bt = o.ty(b);
            out.push(Some(o.sum_to(g, &bt)?));
        }
        Ok(out)
    }

    /// The constant count of elements over `dims` of `t` (an error for a symbolic one).
    fn count(c: &GradCall<'_>, t: &TensorType, dims: &[usize]) -> Result<usize, GradError> {
        dims.iter()
            .try_fold(1usize, |n, &d| match t.shape.dims()[d] {
                Dim::Const(k) => Ok(n * k),
                Dim::Sym(_) => Err(build_err(
                    c,
                    "a count over a symbolic dim (not known while the gradient is built)",
                )),
            })
    }

    /// `2 g (x - mean) / (n - correction)`
    pub fn var(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Var {
            ref dims,
            correction,
            keepdim,
        } = *c.op
        else {
            unreachable!("var's rule")
        };
        let x = x_of(c);
        let t = o.ty(x);
        let dims = reduced(&t, dims);
        let n = count(c, &t, &dims)?;
        let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let s = o.reduce_sum(x, d, true)?;
        let m = o.div(s, n as f64)?;
        let xc = o.sub(x, m)?;
        let g = o.cast(c.grad, t.dtype)?;
        let ge = unreduce(o, g, &t, &dims, keepdim)?;
        let k = 2.0 / (n as f64 - correction as f64).max(0.0);
        let gx = o.mul(ge, xc)?;
        Ok(vec![Some(o.mul(gx, k)?)])
    }

    /// Layer norm's and RMS norm's gradients over the last `ndim` dims: with `x̂ = (x - μ)·r`
    /// (RMS: `x̂ = x·r`), `r = 1/√(v + eps)` and `ĝ = g·w`, `dx = r (ĝ - mean(ĝ) - x̂
    /// mean(ĝ x̂))` (RMS: no `mean(ĝ)` term), `dw = Σ g x̂`, `db = Σ g`.
    fn norm(o: &mut Ops<'_>, c: &GradCall<'_>, ndim: usize, eps: f64, centred: bool) -> Out {
        let x = x_of(c);
        let t = o.ty(x);
        let r = t.shape.rank();
        let dims: Vec<usize> = (r.saturating_sub(ndim)..r).collect();
        let n = count(c, &t, &dims)? as f64;
        let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let xc = if centred {
            let s = o.reduce_sum(x, d.clone(), true)?;
            let m = o.div(s, n)?;
            o.sub(x, m)?
        } else {
            x
        };
        let sq = o.mul(xc, xc)?;
        let ss = o.reduce_sum(sq, d.clone(), true)?;
        let v = o.div(ss, n)?;
        let ve = o.add(v, eps)?;
        let rs = o.unary(UnaryOp::Rsqrt, ve)?;
        let xh = o.mul(xc, rs)?;
        let g = o.cast(c.grad, t.dtype)?;
        let gh = match operand(c, 1) {
            Some(w) => o.mul(g, w)?,
            None => g,
        };
        let ghx = o.mul(gh, xh)?;
        let s2 = o.reduce_sum(ghx, d.clone(), true)?;
        let m2 = o.div(s2, n)?;
        let xm2 = o.mul(xh, m2)?;
        let mut inner = o.sub(gh, xm2)?;
        if centred {
            let s1 = o.reduce_sum(gh, d.clone(), true)?;
            let m1 = o.div(s1, n)?;
            inner = o.sub(inner, m1)?;
        }
        let gx = o.mul(rs, inner)?;
        let mut out = vec![Some(gx)];
        if let Some(w) = operand(c, 1) {
            let wt = o.ty(w);
            let gxh = o.mul(g, xh)?;
            out.push(Some(o.sum_to(gxh, &wt)?));
        }
        if let Some(b) = operand(c, 2) {
            let bt = o.ty(b);
            out.push(Some(o.sum_to(g, &bt)?));
        }
        Ok(out)
    }

    /// `layer_norm`'s gradients (see `norm`)
    pub fn layer_norm(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::LayerNorm { ndim, eps } = *c.op else {
            unreachable!("layer_norm's rule")
        };
        norm(o, c, ndim, eps.get(), true)
    }

    /// `rms_norm`'s gradients (see `norm`)
    pub fn rms_norm(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::RmsNorm { ndim, eps } = *c.op else {
            unreachable!("rms_norm's rule")
        };
        norm(o, c, ndim, eps.get(), false)
    }

    /// `g` times a 0/1 mask of `x`, cast to the gradient's dtype.
    fn masked(o: &mut Ops<'_>, c: &GradCall<'_>, mask: GVal) -> Out {
        let x = x_of(c);
        let t = o.ty(x);
        let z = o.select(mask, c.grad, 0.0)?;
        Ok(vec![Some(o.sum_to(z, &t)?)])
    }

    /// `clamp(x, lo, hi)`: `g` to `x` where `lo ≤ x ≤ hi`, to `lo` where `x < lo`, to `hi`
    /// where `x > hi` (torch)
    pub fn clamp(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let (x, lo, hi) = (c.args[0], c.args[1], c.args[2]);
        let ge = o.apply(Op::Binary(BinaryOp::Ge), &[x, lo])?;
        let le = o.apply(Op::Binary(BinaryOp::Le), &[x, hi])?;
        let inside = o.binary(BinaryOp::LogicalAnd, ge, le)?;
        let mut out = masked(o, c, inside)?;
        for (i, below) in [(1, true), (2, false)] {
            let Some(b) = operand(c, i) else {
                out.push(None);
                continue;
            };
            // torch's clamp_backward_min_max: the lower bound gets `g` where `x < lo` and
            // `lo < hi`; the upper bound where `x > hi` or `hi < lo` (it wins then)
            let m = if below {
                let past = o.apply(Op::Binary(BinaryOp::Lt), &[x, lo])?;
                let ordered = o.apply(Op::Binary(BinaryOp::Lt), &[lo, hi])?;
                o.binary(BinaryOp::LogicalAnd, past, ordered)?
            } else {
                let past = o.apply(Op::Binary(BinaryOp::Gt), &[x, hi])?;
                let wins = o.apply(Op::Binary(BinaryOp::Lt), &[hi, lo])?;
                o.binary(BinaryOp::LogicalOr, past, wins)?
            };
            let z = o.select(m, c.grad, 0.0)?;
            let bt = o.ty(b);
            out.push(Some(o.sum_to(z, &bt)?));
        }
        Ok(out)
    }

    /// `g` where `min_val < x < max_val` (torch's hardtanh backward)
    pub fn hardtanh(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Hardtanh { min_val, max_val } = *c.op else {
            unreachable!("hardtanh's rule")
        };
        let x = x_of(c);
        let a = o.binary(BinaryOp::Gt, x, min_val.get())?;
        let b = o.binary(BinaryOp::Lt, x, max_val.get())?;
        let m = o.binary(BinaryOp::LogicalAnd, a, b)?;
        masked(o, c, m)
    }

    /// `g` where `x > 0`, else `g·negative_slope`
    pub fn leaky_relu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::LeakyRelu { negative_slope } = *c.op else {
            unreachable!("leaky_relu's rule")
        };
        let x = x_of(c);
        let pos = o.binary(BinaryOp::Gt, x, 0.0)?;
        let d = o.select(pos, 1.0, negative_slope.get())?;
        Ok(vec![o.through(c, 0, d)?])
    }

    /// `g` where `x > 0`, else `g (y + alpha)`
    pub fn elu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Elu { alpha } = *c.op else {
            unreachable!("elu's rule")
        };
        let x = x_of(c);
        let pos = o.binary(BinaryOp::Gt, x, 0.0)?;
        let ya = o.add(c.out, alpha.get())?;
        let d = o.select(pos, 1.0, ya)?;
        Ok(vec![o.through(c, 0, d)?])
    }

    /// `g` where `βx > threshold`, else `g sigmoid(βx)`
    pub fn softplus(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Softplus { beta, threshold } = *c.op else {
            unreachable!("softplus's rule")
        };
        let x = x_of(c);
        let bx = o.mul(x, beta.get())?;
        let s = o.unary(UnaryOp::Sigmoid, bx)?;
        let big = o.binary(BinaryOp::Gt, bx, threshold.get())?;
        let d = o.select(big, 1.0, s)?;
        Ok(vec![o.through(c, 0, d)?])
    }

    /// `g` where `x` is finite, else 0 (torch)
    pub fn nan_to_num(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let x = x_of(c);
        let nan = o.unary(UnaryOp::Isnan, x)?;
        let inf = o.unary(UnaryOp::Isinf, x)?;
        let bad = o.binary(BinaryOp::LogicalOr, nan, inf)?;
        let z = o.select(bad, 0.0, c.grad)?;
        let t = o.ty(x);
        Ok(vec![Some(o.sum_to(z, &t)?)])
    }

    /// The same `triu`/`tril` of the gradient.
    pub fn same_op(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        Ok(vec![Some(o.apply(c.op.clone(), &[c.grad.into()])?)])
    }

    /// Zeros of `dtype` over `shape`.
    fn zeros(o: &mut Ops<'_>, shape: Shape, dtype: DType) -> Result<GVal, GradError> {
        o.apply(
            Op::Full {
                shape,
                value: Scalar::Float(0.0),
                dtype,
            },
            &[],
        )
    }

    /// A slice's gradient: zeros before and after the sliced range around `g` (step 1).
    pub fn slice(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Slice {
            dim,
            start,
            end,
            step,
        } = *c.op
        else {
            unreachable!("slice's rule")
        };
        if step != 1 {
            return Err(build_err(
                c,
                "a slice with a step (its gradient needs a scatter)",
            ));
        }
        let x = x_of(c);
        let t = o.ty(x);
        let d = normalize_dim(dim, t.shape.rank()).expect("a verified slice's dim");
        let Dim::Const(size) = t.shape.dims()[d] else {
            return Err(build_err(c, "a slice of a symbolic dim"));
        };
        let end = end.min(size);
        let g = o.cast(c.grad, t.dtype)?;
        let mut parts: Vec<GArg> = Vec::new();
        for len in [start, size.saturating_sub(end)] {
            parts.push(if len == 0 {
                GArg::Scalar(Scalar::Float(0.0))
            } else {
                let mut shape = t.shape.clone();
                shape.0[d] = Dim::Const(len);
                zeros(o, shape, t.dtype)?.into()
            });
        }
        let args: Vec<GArg> = [parts[0], g.into(), parts[1]]
            .into_iter()
            .filter(|a| matches!(a, GArg::Val(_)))
            .collect();
        if args.len() == 1 {
            return Ok(vec![Some(g)]);
        }
        Ok(vec![Some(o.apply(Op::Cat { dim: d as i64 }, &args)?)])
    }

    /// `cat`'s gradients: the gradient's slice for each operand.
    pub fn cat(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
        let Op::Cat { dim } = *c.op else {
            unreachable!("cat's rule")
        };
        let mut out = Vec::new();
        let mut at = 0usize;
        for a in c.args {
            let GArg::Val(v) = *a else {
                out.push(None);
                continue;
            };
            let t = o.ty(v);
            let d = normalize_dim(dim, t.shape.rank()).expect("a verified cat's dim");
            let Dim::Const(len) = t.shape.dims()[d] else {
                return Err(build_err(c, "a cat along a symbolic dim"));
            };
            let part = o.apply(
                Op::Slice {
                    dim: d as i64,
                    start: at,
                    end: at + len,
                    step: 1,
                },
                &[c.grad.into()],
            )?;
            out.push(differentiable(t.dtype).then_some(part));
            at += len;
        }
        Ok(out)
    }
}
