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
        /// `1/x` (torch's spelling of [`Tensor::recip`])
        reciprocal => Recip,
        /// the largest integer not above `x` (integers are kept)
        floor => Floor,
        /// the smallest integer not below `x`
        ceil => Ceil,
        /// the nearest integer, ties to even
        round => Round,
        /// the integer part (rounds toward zero)
        trunc => Trunc,
        /// -1, 0 or 1 (0 for NaN, as torch)
        sign => Sign,
        /// `log(1 + x)`, accurate for small `x`
        log1p => Log1p,
        /// `e^x - 1`, accurate for small `x`
        expm1 => Expm1,
        /// base-2 logarithm
        log2 => Log2,
        /// `2^x`
        exp2 => Exp2,
        /// tangent
        tan => Tan,
        /// arctangent
        atan => Atan,
        /// hyperbolic sine
        sinh => Sinh,
        /// NaN test (bool)
        isnan => Isnan,
        /// `±inf` test (bool)
        isinf => Isinf,
        /// `x == 0` (bool)
        logical_not => LogicalNot,
        /// `~x` on integers, `not x` on bools
        bitwise_not => BitwiseNot,
        /// `clamp(x, 0, 6)`
        relu6 => Relu6,
        /// `x * relu6(x + 3) / 6`
        hardswish => Hardswish,
        /// `x * tanh(softplus(x))`
        mish => Mish,
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
        /// the remainder of floored division, with `other`'s sign (Python's `%`)
        remainder => Remainder,
        /// the remainder of truncated division, with `self`'s sign (C's `fmod`)
        fmod => Fmod,
        /// `atan2(self, other)`: the angle of the point `(other, self)`
        atan2 => Atan2,
        /// both non-zero (bool)
        logical_and => LogicalAnd,
        /// either non-zero (bool)
        logical_or => LogicalOr,
        /// exactly one non-zero (bool)
        logical_xor => LogicalXor,
        /// `self & other` on integers and bools
        bitwise_and => BitwiseAnd,
        /// `self | other` on integers and bools
        bitwise_or => BitwiseOr,
        /// `self ^ other` on integers and bools
        bitwise_xor => BitwiseXor,
    }

    /// Any unary op of the table (`x.unary(UnaryOp::Floor)`): every row of the table is
    /// reachable without a method of its own.
    #[track_caller]
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.apply1(Op::Unary(op))
    }

    /// Any binary op of the table, broadcasting.
    #[track_caller]
    pub fn binary<'a>(&self, op: BinaryOp, other: impl Into<Operand<'a>>) -> Result<Tensor> {
        Tensor::apply(&Op::Binary(op), &[Operand::Tensor(self), other.into()])
    }

    /// `clamp(self, min, max)`: each bound a tensor or scalar, or absent (torch's
    /// `clamp(min=None, max=None)`; at least one must be given). NaN propagates.
    #[track_caller]
    pub fn clamp<'a, 'b>(
        &self,
        min: Option<impl Into<Operand<'a>>>,
        max: Option<impl Into<Operand<'b>>>,
    ) -> Result<Tensor> {
        match (min, max) {
            (Some(lo), Some(hi)) => {
                Tensor::apply(&Op::Clamp, &[Operand::Tensor(self), lo.into(), hi.into()])
            }
            (Some(lo), None) => self
                .binary(BinaryOp::Maximum, lo)
                .map_err(|e| e.within("clamp")),
            (None, Some(hi)) => self
                .binary(BinaryOp::Minimum, hi)
                .map_err(|e| e.within("clamp")),
            (None, None) => Err(crate::Error::Invalid {
                op: "clamp",
                shape: self.shape().to_vec(),
                reason: "at least one of min and max must be given".into(),
            }),
        }
    }

    /// `clamp(self, min_val, max_val)` with scalar bounds (torch's `hardtanh`, defaults
    /// -1 and 1).
    #[track_caller]
    pub fn hardtanh(&self, min_val: f64, max_val: f64) -> Result<Tensor> {
        if min_val > max_val {
            return Err(crate::error::invalid(
                "hardtanh",
                self.shape(),
                format!("min_val ({min_val}) cannot be greater than max_val ({max_val})"),
            ));
        }
        self.apply1(Op::Hardtanh {
            min_val: min_val.into(),
            max_val: max_val.into(),
        })
    }

    /// `self` where positive, else `self * negative_slope` (torch's default slope 0.01).
    #[track_caller]
    pub fn leaky_relu(&self, negative_slope: f64) -> Result<Tensor> {
        self.apply1(Op::LeakyRelu {
            negative_slope: negative_slope.into(),
        })
    }

    /// `self` where positive, else `alpha * (e^self - 1)` (torch's default alpha 1).
    #[track_caller]
    pub fn elu(&self, alpha: f64) -> Result<Tensor> {
        self.apply1(Op::Elu {
            alpha: alpha.into(),
        })
    }

    /// `log(1 + e^(beta·x)) / beta`, or `x` where `beta·x > threshold` (torch's defaults:
    /// 1 and 20).
    #[track_caller]
    pub fn softplus(&self, beta: f64, threshold: f64) -> Result<Tensor> {
        self.apply1(Op::Softplus {
            beta: beta.into(),
            threshold: threshold.into(),
        })
    }

    /// NaN, `+inf` and `-inf` replaced (absent replacements of the infinities: the dtype's
    /// largest and lowest finite values, as torch).
    #[track_caller]
    pub fn nan_to_num(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Tensor> {
        let max = self.dtype().max_finite();
        self.apply1(Op::NanToNum {
            nan: nan.into(),
            posinf: posinf.unwrap_or(max).into(),
            neginf: neginf.unwrap_or(-max).into(),
        })
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
