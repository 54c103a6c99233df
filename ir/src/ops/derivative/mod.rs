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
}

impl std::fmt::Debug for Derivative {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Derivative::Rule(_) => "Rule",
            Derivative::NonDifferentiable => "NonDifferentiable",
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
        self.b
            .apply(op, args)
            .map_err(|GradError::Build { reason, .. }| GradError::Build {
                op: self.op.name().to_string(),
                reason,
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

pub(crate) mod unary;

pub(crate) mod binary;

pub(crate) mod structural;

pub(crate) mod composite;
pub(crate) mod conv;
pub(crate) mod index;
pub(crate) mod inplace;
