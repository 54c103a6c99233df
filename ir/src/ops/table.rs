//! THE op table: one row per op. Everything the compiler knows about an op that is not code
//! of a backend lives in its row: its torch name and aliases, its attributes with PyTorch's
//! defaults (in the `Op` declaration at the end), its kind, operand count and dtype rule,
//! whether it is a composite (`decompose` can lower it), whether it is smooth (the chain
//! fitter may follow it with a polynomial), its cost class, its value-range rule, the
//! domain tests draw its operands from, its f64 reference, and how gradients flow through it
//! (a rule of `derivative.rs`, or non-differentiable).
//!
//! Adding a pointwise op: a row here (and a variant of its family), then the decisions the
//! compiler asks for as compile errors: the eager kernel (`runtime/src/kernels/pointwise.rs`),
//! the CPU routine (`codegen/src/cpu/math.rs`) and the CUDA expression
//! (`codegen/src/cuda/source.rs`), or `composite: true` and a decomposition in
//! `passes/src/decompose.rs`. Tests, the interpreter, `Tensor` methods and the text format
//! read the table.

use super::define::{define_family, define_ops};
use super::derivative::{
    binary as db, composite as dc, conv as dk, index as dx, inplace as dp, structural as ds,
    unary as du, Derivative as D,
};
use super::info::{Arity, CostClass::*, DTypeRule, Domain::*, OpInfo, OpKind::*};
use super::info::{RangeRule as Range, Reference as Ref};
use super::range::rules as r;
use super::reference as f;
use crate::{Constant, DType, Scalar, Shape, F64};

const ONE: Arity = Arity::exactly(1);
const TWO: Arity = Arity::exactly(2);
const THREE: Arity = Arity::exactly(3);
const NONE: Arity = Arity::exactly(0);

define_family! {
    /// Pointwise ops on one operand, without attributes.
    UnaryOp {
        /// `-x`
        Neg => OpInfo { name: "neg", aliases: &["negative"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: true, cost: Trivial, range: Range::Unary(r::neg), domain: &[Real], reference: Ref::Unary(|x| -x), commutative: false, derivative: D::Rule(du::neg) },
        /// `|x|`
        Abs => OpInfo { name: "abs", aliases: &["absolute"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::abs), domain: &[Real], reference: Ref::Unary(f64::abs), commutative: false, derivative: D::Rule(du::abs) },
        /// `e^x`
        Exp => OpInfo { name: "exp", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::exp), domain: &[Real], reference: Ref::Unary(f64::exp), commutative: false, derivative: D::Rule(du::exp) },
        /// natural log
        Log => OpInfo { name: "log", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Positive], reference: Ref::Unary(f64::ln), commutative: false, derivative: D::Rule(du::log) },
        /// square root
        Sqrt => OpInfo { name: "sqrt", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Cheap, range: Range::Unary(r::any1), domain: &[Positive], reference: Ref::Unary(f64::sqrt), commutative: false, derivative: D::Rule(du::sqrt) },
        /// `1/sqrt(x)`
        Rsqrt => OpInfo { name: "rsqrt", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Moderate, range: Range::Unary(r::any1), domain: &[Positive], reference: Ref::Unary(|x| 1.0 / x.sqrt()), commutative: false, derivative: D::Rule(du::rsqrt) },
        /// `1/x`
        Recip => OpInfo { name: "reciprocal", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Cheap, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(|x| 1.0 / x), commutative: false, derivative: D::Rule(du::recip) },
        /// sine
        Sin => OpInfo { name: "sin", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::sin_cos), domain: &[Real], reference: Ref::Unary(f64::sin), commutative: false, derivative: D::Rule(du::sin) },
        /// cosine
        Cos => OpInfo { name: "cos", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::sin_cos), domain: &[Real], reference: Ref::Unary(f64::cos), commutative: false, derivative: D::Rule(du::cos) },
        /// hyperbolic tangent
        Tanh => OpInfo { name: "tanh", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::tanh), domain: &[Real], reference: Ref::Unary(f64::tanh), commutative: false, derivative: D::Rule(du::tanh) },
        /// the error function
        Erf => OpInfo { name: "erf", aliases: &["special_erf"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::erf), domain: &[Real], reference: Ref::Unary(libm::erf), commutative: false, derivative: D::Rule(du::erf) },
        /// `1/(1+e^-x)`
        Sigmoid => OpInfo { name: "sigmoid", aliases: &["special_expit"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::sigmoid), domain: &[Real], reference: Ref::Unary(f::sigmoid), commutative: false, derivative: D::Rule(du::sigmoid) },
        /// `max(x, 0)`
        Relu => OpInfo { name: "relu", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::relu), domain: &[Real], reference: Ref::Unary(f::relu), commutative: false, derivative: D::Rule(du::relu) },
        /// `x·Φ(x)` with the exact (erf) normal CDF
        Gelu => OpInfo { name: "gelu", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: true, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::gelu), commutative: false, derivative: D::Rule(du::gelu) },
        /// gelu with the tanh approximation (`approximate = "tanh"`)
        GeluTanh [approximate = "tanh"] => OpInfo { name: "gelu", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: true, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::gelu_tanh), commutative: false, derivative: D::Rule(du::gelu_tanh) },
        /// `x·sigmoid(x)`
        Silu => OpInfo { name: "silu", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: true, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::silu), commutative: false, derivative: D::Rule(du::silu) },
        /// the largest integer not above `x`
        Floor => OpInfo { name: "floor", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::rounding), domain: &[Real], reference: Ref::Unary(f64::floor), commutative: false, derivative: D::Rule(du::zero) },
        /// the smallest integer not below `x`
        Ceil => OpInfo { name: "ceil", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::rounding), domain: &[Real], reference: Ref::Unary(f64::ceil), commutative: false, derivative: D::Rule(du::zero) },
        /// the nearest integer, ties to even
        Round => OpInfo { name: "round", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::rounding), domain: &[Real], reference: Ref::Unary(f64::round_ties_even), commutative: false, derivative: D::Rule(du::zero) },
        /// the integer part (rounds toward zero)
        Trunc => OpInfo { name: "trunc", aliases: &["fix"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::rounding), domain: &[Real], reference: Ref::Unary(f64::trunc), commutative: false, derivative: D::Rule(du::zero) },
        /// -1, 0 or 1 (0 for NaN, as in PyTorch)
        Sign => OpInfo { name: "sign", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Trivial, range: Range::Unary(r::sign), domain: &[Real], reference: Ref::Unary(f::sign), commutative: false, derivative: D::Rule(du::zero) },
        /// `log(1 + x)`, accurate for small `x`
        Log1p => OpInfo { name: "log1p", aliases: &["special_log1p"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::log1p), domain: &[AboveMinusOne], reference: Ref::Unary(f64::ln_1p), commutative: false, derivative: D::Rule(du::log1p) },
        /// `e^x - 1`, accurate for small `x`
        Expm1 => OpInfo { name: "expm1", aliases: &["special_expm1"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::expm1), domain: &[Real], reference: Ref::Unary(f64::exp_m1), commutative: false, derivative: D::Rule(du::expm1) },
        /// base-2 logarithm
        Log2 => OpInfo { name: "log2", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Positive], reference: Ref::Unary(f64::log2), commutative: false, derivative: D::Rule(du::log2) },
        /// `2^x`
        Exp2 => OpInfo { name: "exp2", aliases: &["special_exp2"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::exp2), domain: &[Real], reference: Ref::Unary(f64::exp2), commutative: false, derivative: D::Rule(du::exp2) },
        /// tangent
        Tan => OpInfo { name: "tan", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f64::tan), commutative: false, derivative: D::Rule(du::tan) },
        /// arctangent
        Atan => OpInfo { name: "atan", aliases: &["arctan"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(r::atan), domain: &[Real], reference: Ref::Unary(f64::atan), commutative: false, derivative: D::Rule(du::atan) },
        /// hyperbolic sine
        Sinh => OpInfo { name: "sinh", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Transcendental, range: Range::Unary(|x| x.monotone(f64::sinh)), domain: &[Real], reference: Ref::Unary(f64::sinh), commutative: false, derivative: D::Rule(du::sinh) },
        /// `x` is NaN (bool)
        Isnan => OpInfo { name: "isnan", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real], reference: Ref::Unary(|x| x.is_nan() as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `x` is `±inf` (bool)
        Isinf => OpInfo { name: "isinf", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real], reference: Ref::Unary(|x| x.is_infinite() as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `x == 0` (bool)
        LogicalNot => OpInfo { name: "logical_not", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real], reference: Ref::Unary(|x| !f::truth(x) as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `~x` on integers, `not x` on bools
        BitwiseNot => OpInfo { name: "bitwise_not", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Integral, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Integer], reference: Ref::Unary(|x| !f::int(x) as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `clamp(x, 0, 6)`
        Relu6 => OpInfo { name: "relu6", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Numeric, composite: true, smooth: false, cost: Trivial, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::relu6), commutative: false, derivative: D::Rule(du::relu6) },
        /// `x·relu6(x + 3)/6`
        Hardswish => OpInfo { name: "hardswish", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: true, smooth: false, cost: Cheap, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::hardswish), commutative: false, derivative: D::Rule(du::hardswish) },
        /// `x·tanh(softplus(x))`
        Mish => OpInfo { name: "mish", aliases: &[], kind: Pointwise, arity: ONE, dtype: DTypeRule::Float, composite: true, smooth: true, cost: Transcendental, range: Range::Unary(r::any1), domain: &[Real], reference: Ref::Unary(f::mish), commutative: false, derivative: D::Rule(du::mish) },
    }
}

define_family! {
    /// Pointwise ops on two broadcasting operands (tensor or scalar).
    BinaryOp {
        /// `a + b`
        Add => OpInfo { name: "add", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: true, cost: Trivial, range: Range::Binary(r::add), domain: &[Real, Real], reference: Ref::Binary(|a, b| a + b), commutative: true, derivative: D::Rule(db::add) },
        /// `a - b`
        Sub => OpInfo { name: "sub", aliases: &["subtract"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: true, cost: Trivial, range: Range::Binary(r::sub), domain: &[Real, Real], reference: Ref::Binary(|a, b| a - b), commutative: false, derivative: D::Rule(db::sub) },
        /// `a * b`
        Mul => OpInfo { name: "mul", aliases: &["multiply"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: true, cost: Trivial, range: Range::Binary(r::mul), domain: &[Real, Real], reference: Ref::Binary(|a, b| a * b), commutative: true, derivative: D::Rule(db::mul) },
        /// true division `a / b` (integers give the default float dtype)
        Div => OpInfo { name: "div", aliases: &["divide", "true_divide"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Float, composite: false, smooth: true, cost: Cheap, range: Range::Binary(r::any2), domain: &[Real, Real], reference: Ref::Binary(|a, b| a / b), commutative: false, derivative: D::Rule(db::div) },
        /// `a ^ b`
        Pow => OpInfo { name: "pow", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: true, cost: Libm, range: Range::Binary(r::any2), domain: &[Positive, Small], reference: Ref::Binary(f64::powf), commutative: false, derivative: D::Rule(db::pow) },
        /// elementwise max (NaN propagates)
        Maximum => OpInfo { name: "maximum", aliases: &["clamp_min"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Any, composite: false, smooth: false, cost: Trivial, range: Range::Binary(r::maximum), domain: &[Real, Real], reference: Ref::Binary(f::maximum), commutative: false, derivative: D::Rule(db::maximum) },
        /// elementwise min (NaN propagates)
        Minimum => OpInfo { name: "minimum", aliases: &["clamp_max"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Any, composite: false, smooth: false, cost: Trivial, range: Range::Binary(r::minimum), domain: &[Real, Real], reference: Ref::Binary(f::minimum), commutative: false, derivative: D::Rule(db::minimum) },
        /// `a == b` (bool)
        Eq => OpInfo { name: "eq", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a == b) as u8 as f64), commutative: true, derivative: D::NonDifferentiable },
        /// `a != b` (bool)
        Ne => OpInfo { name: "ne", aliases: &["not_equal"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a != b) as u8 as f64), commutative: true, derivative: D::NonDifferentiable },
        /// `a < b` (bool)
        Lt => OpInfo { name: "lt", aliases: &["less"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a < b) as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `a <= b` (bool)
        Le => OpInfo { name: "le", aliases: &["less_equal"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a <= b) as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `a > b` (bool)
        Gt => OpInfo { name: "gt", aliases: &["greater"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a > b) as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// `a >= b` (bool)
        Ge => OpInfo { name: "ge", aliases: &["greater_equal"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (a >= b) as u8 as f64), commutative: false, derivative: D::NonDifferentiable },
        /// the remainder of floored division, with the divisor's sign (Python's `%`)
        Remainder => OpInfo { name: "remainder", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Libm, range: Range::Binary(r::modulo), domain: &[Real, NonZero], reference: Ref::Binary(f::remainder), commutative: false, derivative: D::Rule(db::remainder) },
        /// the remainder of truncated division, with the dividend's sign (C's `fmod`)
        Fmod => OpInfo { name: "fmod", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Numeric, composite: false, smooth: false, cost: Libm, range: Range::Binary(r::modulo), domain: &[Real, NonZero], reference: Ref::Binary(f::fmod), commutative: false, derivative: D::Rule(db::fmod) },
        /// the angle of the point `(b, a)`: `atan2(a, b)`
        Atan2 => OpInfo { name: "atan2", aliases: &["arctan2"], kind: Pointwise, arity: TWO, dtype: DTypeRule::Float, composite: false, smooth: false, cost: Libm, range: Range::Binary(r::atan2), domain: &[Real, Real], reference: Ref::Binary(f64::atan2), commutative: false, derivative: D::Rule(db::atan2) },
        /// both non-zero (bool)
        LogicalAnd => OpInfo { name: "logical_and", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (f::truth(a) && f::truth(b)) as u8 as f64), commutative: true, derivative: D::NonDifferentiable },
        /// either non-zero (bool)
        LogicalOr => OpInfo { name: "logical_or", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (f::truth(a) || f::truth(b)) as u8 as f64), commutative: true, derivative: D::NonDifferentiable },
        /// exactly one non-zero (bool)
        LogicalXor => OpInfo { name: "logical_xor", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Bool, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Real, Real], reference: Ref::Binary(|a, b| (f::truth(a) != f::truth(b)) as u8 as f64), commutative: true, derivative: D::NonDifferentiable },
        /// `a & b` on integers and bools
        BitwiseAnd => OpInfo { name: "bitwise_and", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Integral, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Integer, Integer], reference: Ref::Binary(|a, b| (f::int(a) & f::int(b)) as f64), commutative: true, derivative: D::NonDifferentiable },
        /// `a | b` on integers and bools
        BitwiseOr => OpInfo { name: "bitwise_or", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Integral, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Integer, Integer], reference: Ref::Binary(|a, b| (f::int(a) | f::int(b)) as f64), commutative: true, derivative: D::NonDifferentiable },
        /// `a ^ b` on integers and bools
        BitwiseXor => OpInfo { name: "bitwise_xor", aliases: &[], kind: Pointwise, arity: TWO, dtype: DTypeRule::Integral, composite: false, smooth: false, cost: Trivial, range: Range::NotFloat, domain: &[Integer, Integer], reference: Ref::Binary(|a, b| (f::int(a) ^ f::int(b)) as f64), commutative: true, derivative: D::NonDifferentiable },
    }
}

define_family! {
    /// Reductions over some dims (`Op::Reduce` names the member).
    ReduceOp {
        /// sum (integers and bools accumulate to i64)
        Sum => OpInfo { name: "sum", aliases: &[], kind: Reduction, arity: ONE, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(ds::reduce) },
        /// arithmetic mean (floating point only)
        Mean => OpInfo { name: "mean", aliases: &[], kind: Reduction, arity: ONE, dtype: DTypeRule::Own, composite: true, smooth: false, cost: Data, range: Range::None, domain: &[Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(ds::reduce) },
        /// maximum (NaN propagates); torch's `amax`
        Max => OpInfo { name: "amax", aliases: &["max"], kind: Reduction, arity: ONE, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(ds::reduce) },
        /// minimum (NaN propagates); torch's `amin`
        Min => OpInfo { name: "amin", aliases: &["min"], kind: Reduction, arity: ONE, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(ds::reduce) },
    }
}

define_family! {
    /// In-place updates. In the IR they are functional: the node's value is the new value of
    /// its first operand (the destination), which a runtime writes back into that tensor.
    InplaceOp {
        /// `dst.copy_(src)`: src broadcast to dst's shape and cast to its dtype.
        Copy => OpInfo { name: "copy_", aliases: &[], kind: Inplace, arity: TWO, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real, Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(dp::copy) },
        /// `dst.fill_(value)`: value is a scalar or a 0-d tensor.
        Fill => OpInfo { name: "fill_", aliases: &[], kind: Inplace, arity: TWO, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real, Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(dp::fill) },
        /// `dst.add_(other)`
        Add => OpInfo { name: "add_", aliases: &[], kind: Inplace, arity: TWO, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real, Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(dp::add) },
        /// `dst.mul_(other)`
        Mul => OpInfo { name: "mul_", aliases: &[], kind: Inplace, arity: TWO, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Data, range: Range::None, domain: &[Real, Real], reference: Ref::Interpreter, commutative: false, derivative: D::Rule(dp::mul) },
    }
}

/// A row for an op the interpreter's own kernel defines.
const fn own(
    name: &'static str,
    kind: super::info::OpKind,
    arity: Arity,
    composite: bool,
    derivative: D,
) -> OpInfo {
    OpInfo {
        name,
        aliases: &[],
        kind,
        arity,
        dtype: DTypeRule::Own,
        composite,
        smooth: false,
        cost: Data,
        range: Range::None,
        domain: &[Real],
        reference: Ref::Interpreter,
        commutative: false,
        derivative,
    }
}

/// An attributed pointwise composite of one operand (its reference reads the attributes).
const fn activation(name: &'static str, dtype: DTypeRule, derivative: D) -> OpInfo {
    OpInfo {
        name,
        aliases: &[],
        kind: Pointwise,
        arity: ONE,
        dtype,
        composite: true,
        smooth: false,
        cost: Transcendental,
        range: Range::None,
        domain: &[Real],
        reference: Ref::UnaryAttrs(f::unary_with_attrs),
        commutative: false,
        derivative,
    }
}

define_ops! {
    reader(r);
    families {
        /// Pointwise op on one operand.
        Unary(UnaryOp),
        /// Broadcasting pointwise op on two operands (tensor or scalar).
        Binary(BinaryOp),
        /// An in-place update of the first operand (functional in the IR).
        Inplace(InplaceOp),
    }
    selected {
        /// Reduction over `dims` (empty: all dims).
        Reduce {
            /// which reduction (its name is the op's name)
            op: ReduceOp,
            /// reduced dims (empty means all)
            dims: Vec<i64> = vec![],
            /// keep reduced dims as size 1
            keepdim: bool = false,
            /// the dtype the operand is converted to and reduced in, and the result's
            /// (torch's `dtype=` of `sum` and `mean`; absent: the operand's, integers
            /// summing to i64): `sum {dtype = f64}` of f32 values accumulates in f64
            dtype: Option<DType> = None,
        },
    }
    ops {
        /// A graph input (never printed as an instruction; its name lives in the graph).
        Input => own("input", Input, NONE, false, D::NonDifferentiable);
        /// A tensor of `shape` filled with `value` (its dtype by default the value's, as
        /// `torch.full` infers it).
        Full {
            /// result shape
            shape: Shape,
            /// fill value
            value: Scalar,
            /// result dtype
            dtype: DType = value.natural_dtype(),
        } => own("full", Creation, NONE, false, D::NonDifferentiable);
        /// `start, start+step, ...` up to but excluding `end` (i64 unless a bound or the step
        /// is written as a float, as `torch.arange` infers it).
        Arange {
            /// first value
            start: F64 = F64::new(0.0),
            /// exclusive bound
            end: F64,
            /// increment (non-zero)
            step: F64 = F64::new(1.0),
            /// result dtype
            dtype: DType = if ["start", "end", "step"].iter().any(|a| r.is_float(a)) {
                DType::DEFAULT_FLOAT
            } else {
                DType::I64
            },
        } => own("arange", Creation, NONE, false, D::NonDifferentiable);
        /// Uniform samples in [0, 1) from a counter-based generator seeded by `seed`.
        Rand {
            /// result shape
            shape: Shape,
            /// result dtype (floating point)
            dtype: DType = DType::DEFAULT_FLOAT,
            /// generator seed
            seed: u64,
        } => own("rand", Creation, NONE, false, D::NonDifferentiable);
        /// Standard normal samples from a counter-based generator seeded by `seed`.
        Randn {
            /// result shape
            shape: Shape,
            /// result dtype (floating point)
            dtype: DType = DType::DEFAULT_FLOAT,
            /// generator seed
            seed: u64,
        } => own("randn", Creation, NONE, false, D::NonDifferentiable);
        /// A literal tensor (row-major values in the constant pool).
        FromVec {
            /// the values, row-major
            values: Constant,
            /// result shape (constant)
            shape: Shape,
            /// result dtype
            dtype: DType = DType::DEFAULT_FLOAT,
        } => own("from_vec", Creation, NONE, false, D::NonDifferentiable);
        /// `where(cond, a, b)`: broadcasting select.
        Where => OpInfo { name: "where", aliases: &[], kind: Pointwise, arity: THREE, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Trivial, range: Range::None, domain: &[Real, Real, Real], reference: Ref::Ternary(|c, a, b| if f::truth(c) { a } else { b }), commutative: false, derivative: D::Rule(ds::select) };
        /// `clamp(x, min, max) = minimum(maximum(x, min), max)`; NaN propagates.
        Clamp => OpInfo { name: "clamp", aliases: &["clip"], kind: Pointwise, arity: THREE, dtype: DTypeRule::Any, composite: true, smooth: false, cost: Trivial, range: Range::None, domain: &[Real, Real, Real], reference: Ref::Ternary(f::clamp), commutative: false, derivative: D::Rule(dc::clamp) };
        /// `clamp(x, min_val, max_val)` with literal bounds.
        Hardtanh {
            /// lower bound
            min_val: F64 = F64::new(-1.0),
            /// upper bound
            max_val: F64 = F64::new(1.0),
        } => activation("hardtanh", DTypeRule::Numeric, D::Rule(dc::hardtanh));
        /// `x` where positive, else `x·negative_slope`.
        LeakyRelu {
            /// the slope below 0
            negative_slope: F64 = F64::new(0.01),
        } => activation("leaky_relu", DTypeRule::Float, D::Rule(dc::leaky_relu));
        /// `x` where positive, else `alpha·(e^x - 1)`.
        Elu {
            /// the scale below 0
            alpha: F64 = F64::new(1.0),
        } => activation("elu", DTypeRule::Float, D::Rule(dc::elu));
        /// `log(1 + e^(βx))/β`, or `x` where `βx > threshold`.
        Softplus {
            /// β
            beta: F64 = F64::new(1.0),
            /// above it the result is `x`
            threshold: F64 = F64::new(20.0),
        } => activation("softplus", DTypeRule::Float, D::Rule(dc::softplus));
        /// NaN, `+inf` and `-inf` replaced by finite values (by default 0 and the dtype's
        /// largest and lowest finite values).
        NanToNum {
            /// what NaN becomes
            nan: F64 = F64::new(0.0),
            /// what `+inf` becomes
            posinf: F64 = F64::new(r.dtype_of("posinf", 0)?.max_finite()),
            /// what `-inf` becomes
            neginf: F64 = F64::new(-r.dtype_of("neginf", 0)?.max_finite()),
        } => activation("nan_to_num", DTypeRule::Numeric, D::Rule(dc::nan_to_num));
        /// Index of the maximum along `dim` (first one on ties), as i64.
        Argmax {
            /// reduced dim
            dim: i64,
            /// keep the reduced dim as size 1
            keepdim: bool = false,
        } => own("argmax", Reduction, ONE, false, D::NonDifferentiable);
        /// Variance over `dims` with Bessel's `correction` (1 by default, as PyTorch).
        Var {
            /// reduced dims (empty means all)
            dims: Vec<i64> = vec![],
            /// subtracted from the count in the denominator
            correction: i64 = 1,
            /// keep reduced dims as size 1
            keepdim: bool = false,
        } => own("var", Reduction, ONE, true, D::Rule(dc::var));
        /// softmax along `dim`.
        Softmax {
            /// the normalised dim
            dim: i64,
        } => own("softmax", Normalization, ONE, true, D::Rule(dc::softmax));
        /// log(softmax) along `dim`.
        LogSoftmax {
            /// the normalised dim
            dim: i64,
        } => own("log_softmax", Normalization, ONE, true, D::Rule(dc::log_softmax));
        /// Layer norm over the last `ndim` dims (biased variance); operands x, weight?, bias?.
        LayerNorm {
            /// number of trailing dims normalised (by default the weight's rank)
            ndim: usize = r.rank_of("ndim", 1)?,
            /// added to the variance
            eps: F64 = F64::new(1e-5),
        } => own("layer_norm", Normalization, Arity::between(1, 3), true, D::Rule(dc::layer_norm));
        /// RMS norm over the last `ndim` dims; operands x, weight?.
        RmsNorm {
            /// number of trailing dims normalised (by default the weight's rank)
            ndim: usize = r.rank_of("ndim", 1)?,
            /// added to the mean square (by default the dtype's machine epsilon, as torch)
            eps: F64 = F64::new(r.dtype_of("eps", 0)?.epsilon()),
        } => own("rms_norm", Normalization, Arity::between(1, 2), true, D::Rule(dc::rms_norm));
        /// `x @ w^T + b` with `w: [out, in]`; operands x, w, bias?.
        Linear => own("linear", Matmul, Arity::between(2, 3), true, D::Rule(dc::linear));
        /// `torch.matmul`: batched and broadcasting, 1-d operands promoted as in PyTorch.
        Matmul => own("matmul", Matmul, TWO, false, D::Rule(ds::matmul_rule));
        /// Same elements, new shape (a view when the layout allows).
        Reshape {
            /// result shape
            shape: Shape,
        } => own("reshape", View, ONE, false, D::Rule(ds::reshape));
        /// Reorders dims: result dim i is input dim `dims[i]`.
        Permute {
            /// a permutation of 0..rank
            dims: Vec<usize>,
        } => own("permute", View, ONE, false, D::Rule(ds::permute));
        /// Swaps two dims.
        Transpose {
            /// first dim
            dim0: i64,
            /// second dim
            dim1: i64,
        } => own("transpose", View, ONE, false, D::Rule(ds::transpose));
        /// Broadcasts size-1 dims (and new leading dims) to `shape` without copying.
        Expand {
            /// result shape
            shape: Shape,
        } => own("expand", View, ONE, false, D::Rule(ds::expand));
        /// `x[start:end:step]` along `dim` (bounds already clamped); `narrow {dim, start,
        /// length}` parses to it.
        Slice {
            /// sliced dim
            dim: i64 = 0,
            /// first index
            start: usize = 0,
            /// exclusive end index (by default the dim's size; `narrow`'s `start + length`)
            end: usize = match r.take_as::<usize>("length")? {
                Some(length) => start + length,
                None => r.size_of("end", 0, dim)?,
            },
            /// stride (≥ 1)
            step: usize = 1,
        } => OpInfo { name: "slice", aliases: &["narrow"], ..own("slice", View, ONE, false, D::Rule(dc::slice)) };
        /// Concatenation of all operands along `dim`.
        Cat {
            /// joined dim
            dim: i64 = 0,
        } => OpInfo { aliases: &["concat", "concatenate"], ..own("cat", Copy, Arity::ANY, false, D::Rule(dc::cat)) };
        /// `x.index_select(dim, indices)`: dim `dim` replaced by the indices' dims (1-d
        /// indices: torch's `index_select`; n-d: the embedding lookup `x[indices]`).
        IndexSelect {
            /// indexed dim
            dim: i64,
        } => own("index_select", Gather, TWO, false, D::Rule(dx::index_select));
        /// `x.index_add(dim, indices, source)`: `x` with each slice of `source` along `dim`
        /// added at its index (repeated indices accumulate); `source` is `x`'s shape with dim
        /// `dim` replaced by the indices' dims, as `index_select`'s result (1-d indices:
        /// torch's `index_add`; n-d: the scatter-add of an embedding's gradient).
        IndexAdd {
            /// indexed dim
            dim: i64,
        } => own("index_add", Gather, THREE, false, D::Rule(dx::index_add));
        /// torch's `embedding(weight, indices, padding_idx)`: the rows of `weight` at
        /// `indices` (an `index_select` along dim 0), whose gradient leaves row `padding_idx`
        /// (negative: counted from the end) at zero.
        Embedding {
            /// the row that gets no gradient (none by default)
            padding_idx: Option<i64> = None,
        } => own("embedding", Gather, TWO, true, D::Rule(dx::embedding));
        /// torch's `aten.convolution` without the bias: `x [N, C, *S]` with `w [O, C/G, *K]`
        /// (transposed: `w [C, O/G, *K]`), any spatial rank; operands x, weight. The
        /// geometry (which input each output reads) is `conv::ConvGeometry`'s.
        Convolution {
            /// step between output positions, per spatial dim
            stride: Vec<usize>,
            /// zeros around each spatial dim (transposed: cut from the output)
            padding: Vec<usize> = vec![0; stride.len()],
            /// spacing of the kernel's taps
            dilation: Vec<usize> = vec![1; stride.len()],
            /// the adjoint form (`conv_transpose`)
            transposed: bool = false,
            /// extra output size of a transposed convolution
            output_padding: Vec<usize> = vec![0; stride.len()],
            /// independent channel groups
            groups: usize = 1,
        } => own("convolution", Convolution, TWO, false, D::Rule(dk::convolution));
        /// Converts to `dtype` (float to int truncates toward zero).
        Cast {
            /// result dtype
            dtype: DType,
        } => OpInfo { name: "cast", aliases: &["to"], kind: Pointwise, arity: ONE, dtype: DTypeRule::Own, composite: false, smooth: false, cost: Trivial, range: Range::None, domain: &[Real], reference: Ref::Unary(|x| x), commutative: false, derivative: D::Rule(ds::cast) };
        /// A row-major copy of the operand.
        Contiguous => own("contiguous", Copy, ONE, false, D::Rule(ds::identity));
        /// Keeps elements on and above diagonal `diagonal` of the last two dims.
        Triu {
            /// diagonal offset
            diagonal: i64 = 0,
        } => own("triu", Copy, ONE, false, D::Rule(dc::same_op));
        /// Keeps elements on and below diagonal `diagonal` of the last two dims.
        Tril {
            /// diagonal offset
            diagonal: i64 = 0,
        } => own("tril", Copy, ONE, false, D::Rule(dc::same_op));
    }
}
