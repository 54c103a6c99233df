//! The columns of the op table: what a row says about its op. Every field of [`OpInfo`] is
//! required in every row (there is no `..Default`), so a new op states each fact.

use super::range::ValueRange;
use crate::DType;

/// What an op is, as passes and backends group ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// a graph input
    Input,
    /// makes a tensor from attributes alone (`full`, `arange`, `rand`, literals)
    Creation,
    /// elementwise over its (broadcast) operands
    Pointwise,
    /// combines elements over some dims (`sum`, `argmax`, `var`, ...)
    Reduction,
    /// a row-wise normalisation (`softmax`, `layer_norm`, ...): reductions and pointwise work
    /// over the same rows
    Normalization,
    /// a matrix product
    Matmul,
    /// a convolution (a kernel of its own, as im2col and GEMM or direct loops)
    Convolution,
    /// a view: its eager result may share storage with its operand
    View,
    /// an indexed read (`index_select`)
    Gather,
    /// moves data without arithmetic (`cat`, `contiguous`, `triu`, ...)
    Copy,
    /// an in-place update of its first operand (functional in the IR)
    Inplace,
}

/// How many operands an op takes (tensors or scalar literals).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arity {
    /// fewest operands
    pub min: usize,
    /// most operands (`usize::MAX`: any number)
    pub max: usize,
}

impl Arity {
    /// Exactly `n` operands.
    pub const fn exactly(n: usize) -> Arity {
        Arity { min: n, max: n }
    }

    /// `min` to `max` operands.
    pub const fn between(min: usize, max: usize) -> Arity {
        Arity { min, max }
    }

    /// At least one operand, any number.
    pub const ANY: Arity = Arity {
        min: 1,
        max: usize::MAX,
    };
}

/// The result dtype of a pointwise op, from the promoted dtype of its operands (PyTorch's
/// `result_type`). Other ops have their own rule in `infer.rs` ([`DTypeRule::Own`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DTypeRule {
    /// computes in floating point: integer and bool operands give the default float dtype
    Float,
    /// keeps the promoted dtype; bool operands are an error (`neg`, `add`, `floor`, ...)
    Numeric,
    /// keeps the promoted dtype, bool included (`maximum`, `minimum`, `clamp`)
    Any,
    /// a bool result, any operand dtype (comparisons, `isnan`, `logical_and`, ...)
    Bool,
    /// integer or bool operands only, the promoted dtype kept (`bitwise_and`, ...)
    Integral,
    /// the op's own rule in `infer.rs`
    Own,
}

impl DTypeRule {
    /// The result dtype for operands promoted to `common`, or why the operands are wrong.
    pub fn result(self, common: DType) -> Result<DType, &'static str> {
        match self {
            DTypeRule::Float if common.is_float() => Ok(common),
            DTypeRule::Float => Ok(DType::DEFAULT_FLOAT),
            DTypeRule::Numeric if common == DType::Bool => Err("is not defined for bool tensors"),
            DTypeRule::Numeric | DTypeRule::Any => Ok(common),
            DTypeRule::Bool => Ok(DType::Bool),
            DTypeRule::Integral if common.is_float() => {
                Err("is only defined for integer and bool tensors")
            }
            DTypeRule::Integral => Ok(common),
            DTypeRule::Own => Err("has its own typing rule"),
        }
    }

    /// True when integer operands keep their dtype (`neg`, `abs`, `relu`, `floor`, ...).
    pub fn keeps_int(self) -> bool {
        matches!(
            self,
            DTypeRule::Numeric | DTypeRule::Any | DTypeRule::Integral
        )
    }
}

/// What one element of a pointwise op costs in generated code, by class; the CPU backend's
/// `stmt_cost`, the runtime's parallel grain, the chain fitter and the loop planner read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CostClass {
    /// about one simple instruction (`neg`, `add`, `max`, a comparison, `floor`)
    Trivial,
    /// one instruction of long latency (`sqrt`, `div`, `reciprocal`)
    Cheap,
    /// a few instructions (`rsqrt`)
    Moderate,
    /// a polynomial routine of ~20 vector instructions (`exp`, `tanh`, `erf`, ...)
    Transcendental,
    /// a library call per lane (`pow`, `fmod`, `atan2`)
    Libm,
    /// not a per-element op: the cost model counts bytes and flops instead
    Data,
}

impl CostClass {
    /// Rough vector instructions per element in generated CPU code.
    pub fn instructions(self) -> usize {
        match self {
            CostClass::Trivial | CostClass::Cheap | CostClass::Data => 1,
            CostClass::Moderate => 2,
            CostClass::Transcendental => 24,
            CostClass::Libm => 48,
        }
    }

    /// True for ops worth storing once rather than recomputing (transcendentals, calls).
    pub fn is_expensive(self) -> bool {
        matches!(self, CostClass::Transcendental | CostClass::Libm)
    }
}

/// The value-range rule of a pointwise op ([`super::range`]).
#[derive(Clone, Copy, Debug)]
pub enum RangeRule {
    /// a rule over the argument's range
    Unary(fn(ValueRange) -> ValueRange),
    /// a rule over both arguments' ranges
    Binary(fn(ValueRange, ValueRange) -> ValueRange),
    /// the result is a bool or an integer: not a float range
    NotFloat,
    /// not a pointwise op, or one computed only after decomposition: nothing is known
    None,
}

/// The values tests draw an operand from (the op's domain, where it is smaller than all
/// floats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// any float (normal samples, special values included)
    Real,
    /// positive floats (`log`, `sqrt`, a `pow` base)
    Positive,
    /// above -1 (`log1p`)
    AboveMinusOne,
    /// small magnitudes, |x| ≤ 3 (exponents of `pow`)
    Small,
    /// a divisor: any float, a non-zero integer (integer division by zero is an error)
    NonZero,
    /// integers (bitwise ops); floats are a type error
    Integer,
}

/// The f64 reference semantics of an op, which the interpreter evaluates and tests compare
/// the backends with. Integer semantics (wrapping, truncation) are applied afterwards by
/// rounding to the result dtype.
#[derive(Clone, Copy, Debug)]
pub enum Reference {
    /// `f(x)`
    Unary(fn(f64) -> f64),
    /// `f(a, b)`
    Binary(fn(f64, f64) -> f64),
    /// `f(x)` with the op's attributes (`leaky_relu`'s slope, ...)
    UnaryAttrs(fn(&crate::Op, f64) -> f64),
    /// `f(x, a, b)` (`clamp`)
    Ternary(fn(f64, f64, f64) -> f64),
    /// not elementwise: the interpreter's kernel for the op (in `interp/`) is the reference
    Interpreter,
}

/// One row of the op table.
#[derive(Clone, Copy, Debug)]
pub struct OpInfo {
    /// the name in the textual IR, as torch spells the op
    pub name: &'static str,
    /// other spellings the parser accepts (torch's aliases: `clip` for `clamp`)
    pub aliases: &'static [&'static str],
    /// what kind of op it is
    pub kind: OpKind,
    /// how many operands it takes
    pub arity: Arity,
    /// its result dtype
    pub dtype: DTypeRule,
    /// true for composite ops: `decompose` can lower them to primitives (a backend that
    /// renders one natively keeps it)
    pub composite: bool,
    /// analytic wherever finite, so a polynomial can follow it on an interval that avoids
    /// its poles (`exp`, `tanh`; not `abs`, `relu`, `floor`)
    pub smooth: bool,
    /// what an element costs in generated code
    pub cost: CostClass,
    /// its value-range rule
    pub range: RangeRule,
    /// the values tests draw each operand from
    pub domain: &'static [Domain],
    /// its f64 reference
    pub reference: Reference,
    /// true when swapping its two operands gives the same result, signs of zero included
    /// (`add`, `mul`; not `maximum`, whose ties give its second operand)
    pub commutative: bool,
    /// how gradients flow through it (`derivative.rs`)
    pub derivative: super::derivative::Derivative,
}
