//! Pointwise tensor methods: unary math, broadcasting binary ops, `where`, casts.

use crate::error::Result;
use crate::{Operand, Tensor};
use kiln_ir::{BinaryOp, DType, Op, UnaryOp};

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(&self) -> Result<Tensor> {
            self.apply1(Op::Unary(UnaryOp::$op))
        }
    )*};
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
            Tensor::apply(&Op::Binary(BinaryOp::$op), &[Operand::Tensor(self), other.into()])
        }
    )*};
}

impl Tensor {
    unary_methods! {
        /// `-x`
        neg => Neg,
        /// `|x|`
        abs => Abs,
        /// `e^x`
        exp => Exp,
        /// natural logarithm
        log => Log,
        /// square root
        sqrt => Sqrt,
        /// `1/sqrt(x)`
        rsqrt => Rsqrt,
        /// `1/x`
        recip => Recip,
        /// sine
        sin => Sin,
        /// cosine
        cos => Cos,
        /// hyperbolic tangent
        tanh => Tanh,
        /// error function
        erf => Erf,
        /// logistic sigmoid
        sigmoid => Sigmoid,
        /// `max(x, 0)`
        relu => Relu,
        /// GELU, exact (erf) form
        gelu => Gelu,
        /// GELU, tanh approximation (`approximate="tanh"`)
        gelu_tanh => GeluTanh,
        /// `x * sigmoid(x)`
        silu => Silu,
    }

    binary_methods! {
        /// `self + other`, broadcasting
        add => Add,
        /// `self - other`, broadcasting
        sub => Sub,
        /// `self * other`, broadcasting
        mul => Mul,
        /// true division, broadcasting (integers give f32)
        div => Div,
        /// `self ^ other`, broadcasting
        pow => Pow,
        /// elementwise maximum (NaN propagates)
        maximum => Maximum,
        /// elementwise minimum (NaN propagates)
        minimum => Minimum,
        /// `self == other` as bool
        eq => Eq,
        /// `self != other` as bool
        ne => Ne,
        /// `self < other` as bool
        lt => Lt,
        /// `self <= other` as bool
        le => Le,
        /// `self > other` as bool
        gt => Gt,
        /// `self >= other` as bool
        ge => Ge,
    }

    /// `where(self, a, b)`: `a` where `self` (a bool tensor) is true, else `b`.
    #[track_caller]
    pub fn where_<'a, 'b>(
        &self,
        a: impl Into<Operand<'a>>,
        b: impl Into<Operand<'b>>,
    ) -> Result<Tensor> {
        Tensor::apply(&Op::Where, &[Operand::Tensor(self), a.into(), b.into()])
    }

    /// Converts to `dtype` (float to int truncates toward zero).
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        self.apply1(Op::Cast { dtype })
    }
}
