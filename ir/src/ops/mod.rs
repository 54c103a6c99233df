//! The op set, declared once: the table (`table.rs`) has one row per op, and the enums
//! ([`Op`], [`UnaryOp`], [`BinaryOp`], [`ReduceOp`], [`InplaceOp`]), their `ALL` lists,
//! the text codec (name and attributes to an op and back, with PyTorch's defaults) and the
//! property queries below are generated from it or read it. Passes and backends ask an
//! op's row ([`Op::info`]) instead of keeping their own lists; each backend's code for the
//! ops is one exhaustive `match`, so a new op is a compile error wherever a decision is
//! needed.
//!
//! | file | holds |
//! | --- | --- |
//! | `table.rs` | the rows, and the `Op` declaration with attributes and defaults |
//! | `info.rs` | the columns: [`OpInfo`], [`OpKind`], [`DTypeRule`], [`CostClass`], ... |
//! | `range.rs` | [`ValueRange`] and the range rules the rows name |
//! | `reference.rs` | f64 references longer than an expression |
//! | `attr.rs` | attribute values, their codec, parse errors |
//! | `constant.rs` | the pool holding literal tensors' data |
//! | `define.rs` | the macros that generate code from the table |
//! | `derivative.rs` | derivative rules (the `derivative` column), written with ops |

mod attr;
mod constant;
pub(crate) mod define;
pub mod derivative;
mod info;
mod int_eval;
pub mod range;
pub mod reference;
mod table;

pub use attr::{AttrCodec, AttrValue, OpParseError, Reader};
pub use constant::Constant;
pub use derivative::{gradients, Derivative, GArg, GVal, GradBuilder, GradCall, GradError};
pub use info::{Arity, CostClass, DTypeRule, Domain, OpInfo, OpKind, RangeRule, Reference};
pub use int_eval::{eval_int_binary, eval_int_unary, int_pow};
pub use range::ValueRange;
pub use table::{rows, BinaryOp, InplaceOp, Op, ReduceOp, UnaryOp};

use crate::{ArgType, Dim, Shape};
use std::fmt;

impl UnaryOp {
    /// True when the op keeps integer inputs integral (`neg`, `abs`, `relu`, `floor`, ...);
    /// the others compute in floating point or give bools.
    pub fn keeps_int(self) -> bool {
        self.info().dtype.keeps_int()
    }

    /// Evaluates the op on one f64 value (the reference semantics).
    pub fn eval_f64(self, x: f64) -> f64 {
        match self.info().reference {
            Reference::Unary(f) => f(x),
            _ => f64::NAN,
        }
    }
}

impl BinaryOp {
    /// True for the comparisons (`eq`, `lt`, ...), whose result is bool and which compare
    /// in the promoted dtype.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        match self {
            Eq | Ne | Lt | Le | Gt | Ge => true,
            Add | Sub | Mul | Div | Pow | Maximum | Minimum | Remainder | Fmod | Atan2
            | LogicalAnd | LogicalOr | LogicalXor | BitwiseAnd | BitwiseOr | BitwiseXor => false,
        }
    }

    /// True when `a op b == b op a`.
    pub fn is_commutative(self) -> bool {
        self.info().commutative
    }

    /// Evaluates the op on two f64 values (bool results as 0 or 1). Integer semantics
    /// (wrapping, truncation) are applied afterwards by rounding to the result dtype.
    pub fn eval_f64(self, a: f64, b: f64) -> f64 {
        match self.info().reference {
            Reference::Binary(f) => f(a, b),
            _ => f64::NAN,
        }
    }
}

impl Op {
    /// The op's name in the textual IR (as torch spells it).
    pub fn name(&self) -> &'static str {
        self.info().name
    }

    /// What kind of op it is.
    pub fn kind(&self) -> OpKind {
        self.info().kind
    }

    /// Builds an op from its textual name and attributes (the inverse of [`Op::name`] +
    /// [`Op::attrs`]); absent attributes take PyTorch's defaults. Unknown or missing
    /// attributes are errors.
    pub fn from_parts(name: &str, attrs: &[(String, AttrValue)]) -> Result<Op, OpParseError> {
        Op::from_parts_with(name, attrs, &[])
    }

    /// [`Op::from_parts`] for an op applied to operands of the given types, which the
    /// defaults that depend on operands read (`layer_norm`'s `ndim` is its weight's rank,
    /// `slice`'s `end` the dim's size).
    pub fn from_parts_with(
        name: &str,
        attrs: &[(String, AttrValue)],
        operands: &[ArgType],
    ) -> Result<Op, OpParseError> {
        let mut r = Reader::new(name, attrs, operands);
        let op = Op::parse_parts(name, &mut r)?;
        if let Some(unused) = r.unused() {
            return Err(OpParseError::UnknownAttr {
                op: name.into(),
                attr: unused.to_string(),
            });
        }
        Ok(op)
    }

    /// The shape attribute of `full`, `rand`, `randn`, `from_vec`, `reshape` and `expand`.
    pub fn shape_attr(&self) -> Option<&Shape> {
        match self {
            Op::Full { shape, .. }
            | Op::Rand { shape, .. }
            | Op::Randn { shape, .. }
            | Op::FromVec { shape, .. }
            | Op::Reshape { shape }
            | Op::Expand { shape } => Some(shape),
            _ => None,
        }
    }

    /// This op with every symbolic dim of its shape attribute replaced by the size `lookup`
    /// gives it (borrowed when nothing changes). Fails with the name of an unbound symbol.
    pub fn bind_symbols(
        &self,
        lookup: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<std::borrow::Cow<'_, Op>, String> {
        use std::borrow::Cow;
        match self.shape_attr() {
            Some(shape) if !shape.is_static() => {
                let concrete = shape
                    .dims()
                    .iter()
                    .map(|d| match d {
                        Dim::Const(n) => Ok(Dim::Const(*n)),
                        Dim::Sym(s) => lookup(s).map(Dim::Const).ok_or_else(|| s.to_string()),
                    })
                    .collect::<Result<Shape, String>>()?;
                let mut op = self.clone();
                if let Op::Full { shape, .. }
                | Op::Rand { shape, .. }
                | Op::Randn { shape, .. }
                | Op::FromVec { shape, .. }
                | Op::Reshape { shape }
                | Op::Expand { shape } = &mut op
                {
                    *shape = concrete;
                }
                Ok(Cow::Owned(op))
            }
            _ => Ok(Cow::Borrowed(self)),
        }
    }

    /// True for pointwise ops (unary, binary, where, cast, clamp, the activations).
    pub fn is_elementwise(&self) -> bool {
        self.kind() == OpKind::Pointwise
    }

    /// True for ops that combine elements over dims.
    pub fn is_reduction(&self) -> bool {
        self.kind() == OpKind::Reduction
    }

    /// True for ops whose eager result may share storage with their operand.
    pub fn is_view(&self) -> bool {
        self.kind() == OpKind::View
    }

    /// True for ops that take no tensor operands.
    pub fn is_creation(&self) -> bool {
        self.kind() == OpKind::Creation
    }

    /// True for composite ops that `decompose` can lower to primitives.
    pub fn is_composite(&self) -> bool {
        self.info().composite
    }

    /// True for in-place updates (`copy_`, `fill_`, `add_`, `mul_`).
    pub fn is_inplace(&self) -> bool {
        self.kind() == OpKind::Inplace
    }

    /// True for ops whose result is random (`rand`, `randn`): two nodes of them are never
    /// the same value.
    pub fn is_random(&self) -> bool {
        matches!(self, Op::Rand { .. } | Op::Randn { .. })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let attrs = self.attrs();
        if !attrs.is_empty() {
            f.write_str(" {")?;
            for (i, (k, v)) in attrs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k} = {v}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
