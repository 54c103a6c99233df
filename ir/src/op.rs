//! The closed set of tensor operations, their textual names and their attributes.
//!
//! Properties ("elementwise", "reduction", "view", "in place") are methods on [`Op`], and
//! every op converts to and from a name plus a list of attributes ([`Op::attrs`],
//! [`Op::from_parts`]), which is all the text format needs to print and parse it.

use crate::{DType, Dim, Scalar, Shape};
use std::fmt;

/// Pointwise operations with one tensor operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// natural log
    Log,
    /// square root
    Sqrt,
    /// `1/sqrt(x)`
    Rsqrt,
    /// `1/x`
    Recip,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// hyperbolic tangent
    Tanh,
    /// the error function
    Erf,
    /// `1/(1+e^-x)`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `x·Φ(x)` with the exact (erf) normal CDF
    Gelu,
    /// gelu with the tanh approximation (`approximate = "tanh"`)
    GeluTanh,
    /// `x·sigmoid(x)`
    Silu,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 16] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
    ];

    /// The op's name in the IR (both gelu forms are `gelu`).
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Exp => "exp",
            Log => "log",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Recip => "recip",
            Sin => "sin",
            Cos => "cos",
            Tanh => "tanh",
            Erf => "erf",
            Sigmoid => "sigmoid",
            Relu => "relu",
            Gelu | GeluTanh => "gelu",
            Silu => "silu",
        }
    }

    /// True when the op keeps integer inputs integral (neg, abs, relu); the others
    /// compute in floating point and give the default float dtype for integer inputs.
    pub fn keeps_int(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }

    /// Evaluates the op on one f64 value (the reference semantics).
    pub fn eval_f64(self, x: f64) -> f64 {
        use UnaryOp::*;
        match self {
            Neg => -x,
            Abs => x.abs(),
            Exp => x.exp(),
            Log => x.ln(),
            Sqrt => x.sqrt(),
            Rsqrt => 1.0 / x.sqrt(),
            Recip => 1.0 / x,
            Sin => x.sin(),
            Cos => x.cos(),
            Tanh => x.tanh(),
            Erf => crate::math::erf(x),
            Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Relu => {
                if x > 0.0 || x.is_nan() {
                    x
                } else {
                    0.0
                }
            }
            Gelu => 0.5 * x * (1.0 + crate::math::erf(x / std::f64::consts::SQRT_2)),
            GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Silu => x / (1.0 + (-x).exp()),
        }
    }
}

/// Pointwise operations with two broadcasting operands (tensor or scalar).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// true division `a / b` (integers give the default float dtype)
    Div,
    /// `a ^ b`
    Pow,
    /// elementwise max (NaN propagates)
    Maximum,
    /// elementwise min (NaN propagates)
    Minimum,
    /// `a == b` (bool)
    Eq,
    /// `a != b` (bool)
    Ne,
    /// `a < b` (bool)
    Lt,
    /// `a <= b` (bool)
    Le,
    /// `a > b` (bool)
    Gt,
    /// `a >= b` (bool)
    Ge,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 13] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
    ];

    /// The op's name in the IR.
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Pow => "pow",
            Maximum => "maximum",
            Minimum => "minimum",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
        }
    }

    /// True for the comparisons, whose result is bool.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }

    /// True when `a op b == b op a`.
    pub fn is_commutative(self) -> bool {
        use BinaryOp::*;
        matches!(self, Add | Mul | Maximum | Minimum | Eq | Ne)
    }

    /// Evaluates the op on two f64 values (comparisons give 0 or 1). Integer semantics
    /// (wrapping, truncation) are applied afterwards by rounding to the result dtype.
    pub fn eval_f64(self, a: f64, b: f64) -> f64 {
        use BinaryOp::*;
        let t = |c: bool| c as u8 as f64;
        match self {
            Add => a + b,
            Sub => a - b,
            Mul => a * b,
            Div => a / b,
            Pow => a.powf(b),
            Maximum => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            }
            Minimum => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            }
            Eq => t(a == b),
            Ne => t(a != b),
            Lt => t(a < b),
            Le => t(a <= b),
            Gt => t(a > b),
            Ge => t(a >= b),
        }
    }
}

/// Reductions that combine the elements over some dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// sum (integers and bools accumulate to i64)
    Sum,
    /// arithmetic mean (floating point only)
    Mean,
    /// maximum (NaN propagates)
    Max,
    /// minimum (NaN propagates)
    Min,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

    /// The op's name in the IR.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// The in-place ops. In the IR they are functional: the node's value is the new value of
/// its first operand (the destination), which a runtime writes back into that tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InplaceOp {
    /// `dst.copy_(src)`: src broadcast to dst's shape and cast to its dtype.
    Copy,
    /// `dst.fill_(value)`: value is a scalar or a 0-d tensor.
    Fill,
    /// `dst.add_(other)`
    Add,
    /// `dst.mul_(other)`
    Mul,
}

impl InplaceOp {
    /// Every in-place op.
    pub const ALL: [InplaceOp; 4] = [
        InplaceOp::Copy,
        InplaceOp::Fill,
        InplaceOp::Add,
        InplaceOp::Mul,
    ];

    /// The op's name in the IR (with PyTorch's trailing underscore).
    pub fn name(self) -> &'static str {
        match self {
            InplaceOp::Copy => "copy_",
            InplaceOp::Fill => "fill_",
            InplaceOp::Add => "add_",
            InplaceOp::Mul => "mul_",
        }
    }
}

/// A tensor operation. Operands are not part of the op: a graph node holds the op and its
/// operands ([`crate::Arg`]). Dim attributes (`dim`, `dims`) may be negative, counting from
/// the end, as in PyTorch.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input (never printed as an instruction; its name lives in the graph).
    Input,
    /// A tensor of `shape` filled with `value`.
    Full {
        /// result shape
        shape: Shape,
        /// fill value
        value: Scalar,
        /// result dtype
        dtype: DType,
    },
    /// `start, start+step, ...` up to but excluding `end`.
    Arange {
        /// first value
        start: f64,
        /// exclusive bound
        end: f64,
        /// increment (non-zero)
        step: f64,
        /// result dtype
        dtype: DType,
    },
    /// Uniform samples in [0, 1) from a counter-based generator seeded by `seed`.
    Rand {
        /// result shape
        shape: Shape,
        /// result dtype (floating point)
        dtype: DType,
        /// generator seed
        seed: u64,
    },
    /// Standard normal samples from a counter-based generator seeded by `seed`.
    Randn {
        /// result shape
        shape: Shape,
        /// result dtype (floating point)
        dtype: DType,
        /// generator seed
        seed: u64,
    },
    /// A literal tensor (row-major values).
    FromVec {
        /// the values, row-major
        values: Vec<f64>,
        /// result shape (constant)
        shape: Shape,
        /// result dtype
        dtype: DType,
    },
    /// Pointwise op on one operand.
    Unary(UnaryOp),
    /// Broadcasting pointwise op on two operands (tensor or scalar).
    Binary(BinaryOp),
    /// `where(cond, a, b)`: broadcasting select.
    Where,
    /// Reduction over `dims` (empty: all dims).
    Reduce {
        /// which reduction
        op: ReduceOp,
        /// reduced dims (empty means all)
        dims: Vec<i64>,
        /// keep reduced dims as size 1
        keepdim: bool,
    },
    /// Index of the maximum along `dim` (first one on ties), as i64.
    Argmax {
        /// reduced dim
        dim: i64,
        /// keep the reduced dim as size 1
        keepdim: bool,
    },
    /// Variance over `dims` with Bessel's `correction` (1 by default, as PyTorch).
    Var {
        /// reduced dims (empty means all)
        dims: Vec<i64>,
        /// subtracted from the count in the denominator
        correction: i64,
        /// keep reduced dims as size 1
        keepdim: bool,
    },
    /// softmax along `dim`.
    Softmax {
        /// the normalised dim
        dim: i64,
    },
    /// log(softmax) along `dim`.
    LogSoftmax {
        /// the normalised dim
        dim: i64,
    },
    /// Layer norm over the last `ndim` dims (biased variance); operands x, weight?, bias?.
    LayerNorm {
        /// number of trailing dims normalised
        ndim: usize,
        /// added to the variance
        eps: f64,
    },
    /// RMS norm over the last `ndim` dims; operands x, weight?.
    RmsNorm {
        /// number of trailing dims normalised
        ndim: usize,
        /// added to the mean square
        eps: f64,
    },
    /// `x @ w^T + b` with `w: [out, in]`; operands x, w, bias?.
    Linear,
    /// `torch.matmul`: batched and broadcasting, 1-d operands promoted as in PyTorch.
    Matmul,
    /// Same elements, new shape (a view when the layout allows).
    Reshape {
        /// result shape
        shape: Shape,
    },
    /// Reorders dims: result dim i is input dim `dims[i]`.
    Permute {
        /// a permutation of 0..rank
        dims: Vec<usize>,
    },
    /// Swaps two dims.
    Transpose {
        /// first dim
        dim0: i64,
        /// second dim
        dim1: i64,
    },
    /// Broadcasts size-1 dims (and new leading dims) to `shape` without copying.
    Expand {
        /// result shape
        shape: Shape,
    },
    /// `x[start:end:step]` along `dim` (narrow is step 1); bounds already clamped.
    Slice {
        /// sliced dim
        dim: i64,
        /// first index
        start: usize,
        /// exclusive end index
        end: usize,
        /// stride (≥ 1)
        step: usize,
    },
    /// Concatenation of all operands along `dim`.
    Cat {
        /// joined dim
        dim: i64,
    },
    /// `x.index_select(dim, indices)`: dim `dim` replaced by the indices' dims (1-d indices:
    /// torch's `index_select`; n-d: the embedding lookup `x[indices]` along `dim`).
    IndexSelect {
        /// indexed dim
        dim: i64,
    },
    /// Converts to `dtype` (float to int truncates toward zero).
    Cast {
        /// result dtype
        dtype: DType,
    },
    /// A row-major copy of the operand.
    Contiguous,
    /// Keeps elements on and above diagonal `diagonal` of the last two dims, zeroes the rest.
    Triu {
        /// diagonal offset
        diagonal: i64,
    },
    /// Keeps elements on and below diagonal `diagonal` of the last two dims, zeroes the rest.
    Tril {
        /// diagonal offset
        diagonal: i64,
    },
    /// An in-place update of the first operand (functional in the IR).
    Inplace(InplaceOp),
}

/// An attribute value as written in the text format (`{dims = [0, 2], keepdim = true}`).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// `3`, `-1`
    Int(i64),
    /// `1e-5`, `0.5`, `inf`, `nan`
    Float(f64),
    /// `true`, `false`
    Bool(bool),
    /// `"tanh"`
    Str(String),
    /// a dtype name: `f32`
    DType(DType),
    /// a symbol inside a list: the `B` of `[B, 4]`
    Sym(String),
    /// `[1, 2]`, `[B, 4]`, `[0.5, 1.0]`
    List(Vec<AttrValue>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Float(v) => f.write_str(&crate::scalar::format_float(*v)),
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Sym(s) => f.write_str(s),
            AttrValue::List(items) => {
                f.write_str("[")?;
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Why a name plus attributes does not make an op.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpParseError {
    /// The name is not an op.
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    /// A required attribute is absent.
    #[error("op `{op}` needs attribute `{attr}`")]
    MissingAttr {
        /// op name
        op: String,
        /// attribute name
        attr: &'static str,
    },
    /// An attribute the op does not take.
    #[error("op `{op}` has no attribute `{attr}`")]
    UnknownAttr {
        /// op name
        op: String,
        /// attribute name
        attr: String,
    },
    /// An attribute of the wrong kind.
    #[error("op `{op}`: attribute `{attr}` must be {expected}")]
    BadAttr {
        /// op name
        op: String,
        /// attribute name
        attr: &'static str,
        /// what it must be
        expected: &'static str,
    },
}

fn dims_attr(d: &[i64]) -> AttrValue {
    AttrValue::List(d.iter().map(|&x| AttrValue::Int(x)).collect())
}

fn shape_attr(s: &Shape) -> AttrValue {
    AttrValue::List(
        s.dims()
            .iter()
            .map(|d| match d {
                Dim::Const(n) => AttrValue::Int(*n as i64),
                Dim::Sym(x) => AttrValue::Sym(x.to_string()),
            })
            .collect(),
    )
}

impl Op {
    /// The op's name in the textual IR.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Full { .. } => "full",
            Op::Arange { .. } => "arange",
            Op::Rand { .. } => "rand",
            Op::Randn { .. } => "randn",
            Op::FromVec { .. } => "from_vec",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Reduce { op, .. } => op.name(),
            Op::Argmax { .. } => "argmax",
            Op::Var { .. } => "var",
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Linear => "linear",
            Op::Matmul => "matmul",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Transpose { .. } => "transpose",
            Op::Expand { .. } => "expand",
            Op::Slice { .. } => "slice",
            Op::Cat { .. } => "cat",
            Op::IndexSelect { .. } => "index_select",
            Op::Cast { .. } => "cast",
            Op::Contiguous => "contiguous",
            Op::Triu { .. } => "triu",
            Op::Tril { .. } => "tril",
            Op::Inplace(i) => i.name(),
        }
    }

    /// The attributes in the order the text format prints them.
    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        use AttrValue as A;
        match self {
            Op::Full {
                shape,
                value,
                dtype,
            } => vec![
                ("shape", shape_attr(shape)),
                (
                    "value",
                    match *value {
                        Scalar::Bool(b) => A::Bool(b),
                        Scalar::Int(i) => A::Int(i),
                        Scalar::Float(v) => A::Float(v),
                    },
                ),
                ("dtype", A::DType(*dtype)),
            ],
            Op::Arange {
                start,
                end,
                step,
                dtype,
            } => vec![
                ("start", A::Float(*start)),
                ("end", A::Float(*end)),
                ("step", A::Float(*step)),
                ("dtype", A::DType(*dtype)),
            ],
            Op::Rand { shape, dtype, seed } | Op::Randn { shape, dtype, seed } => vec![
                ("shape", shape_attr(shape)),
                ("dtype", A::DType(*dtype)),
                ("seed", A::Int(*seed as i64)),
            ],
            Op::FromVec {
                values,
                shape,
                dtype,
            } => vec![
                (
                    "values",
                    A::List(values.iter().map(|&v| A::Float(v)).collect()),
                ),
                ("shape", shape_attr(shape)),
                ("dtype", A::DType(*dtype)),
            ],
            Op::Unary(UnaryOp::GeluTanh) => vec![("approximate", A::Str("tanh".into()))],
            Op::Reduce { dims, keepdim, .. } => {
                vec![("dims", dims_attr(dims)), ("keepdim", A::Bool(*keepdim))]
            }
            Op::Argmax { dim, keepdim } => {
                vec![("dim", A::Int(*dim)), ("keepdim", A::Bool(*keepdim))]
            }
            Op::Var {
                dims,
                correction,
                keepdim,
            } => vec![
                ("dims", dims_attr(dims)),
                ("correction", A::Int(*correction)),
                ("keepdim", A::Bool(*keepdim)),
            ],
            Op::Softmax { dim }
            | Op::LogSoftmax { dim }
            | Op::Cat { dim }
            | Op::IndexSelect { dim } => {
                vec![("dim", A::Int(*dim))]
            }
            Op::LayerNorm { ndim, eps } | Op::RmsNorm { ndim, eps } => {
                vec![("ndim", A::Int(*ndim as i64)), ("eps", A::Float(*eps))]
            }
            Op::Reshape { shape } | Op::Expand { shape } => vec![("shape", shape_attr(shape))],
            Op::Permute { dims } => vec![(
                "dims",
                A::List(dims.iter().map(|&d| A::Int(d as i64)).collect()),
            )],
            Op::Transpose { dim0, dim1 } => vec![("dim0", A::Int(*dim0)), ("dim1", A::Int(*dim1))],
            Op::Slice {
                dim,
                start,
                end,
                step,
            } => vec![
                ("dim", A::Int(*dim)),
                ("start", A::Int(*start as i64)),
                ("end", A::Int(*end as i64)),
                ("step", A::Int(*step as i64)),
            ],
            Op::Cast { dtype } => vec![("dtype", A::DType(*dtype))],
            Op::Triu { diagonal } | Op::Tril { diagonal } => vec![("diagonal", A::Int(*diagonal))],
            _ => vec![],
        }
    }

    /// Builds an op from its textual name and attributes (the inverse of
    /// [`Op::name`] + [`Op::attrs`]). Unknown or missing attributes are errors.
    pub fn from_parts(name: &str, attrs: &[(String, AttrValue)]) -> Result<Op, OpParseError> {
        let mut a = Attrs {
            op: name,
            attrs,
            used: vec![false; attrs.len()],
        };
        let op = Self::build(name, &mut a)?;
        if let Some(i) = a.used.iter().position(|u| !u) {
            return Err(OpParseError::UnknownAttr {
                op: name.into(),
                attr: attrs[i].0.clone(),
            });
        }
        Ok(op)
    }

    fn build(name: &str, a: &mut Attrs<'_>) -> Result<Op, OpParseError> {
        if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == name) {
            if *u == UnaryOp::Gelu || *u == UnaryOp::GeluTanh {
                return match a.opt_str("approximate")?.as_deref() {
                    None | Some("none") => Ok(Op::Unary(UnaryOp::Gelu)),
                    Some("tanh") => Ok(Op::Unary(UnaryOp::GeluTanh)),
                    Some(_) => Err(a.bad("approximate", "\"none\" or \"tanh\"")),
                };
            }
            return Ok(Op::Unary(*u));
        }
        if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == name) {
            return Ok(Op::Binary(*b));
        }
        if let Some(r) = ReduceOp::ALL.iter().find(|r| r.name() == name) {
            return Ok(Op::Reduce {
                op: *r,
                dims: a.ints("dims")?,
                keepdim: a.bool("keepdim")?,
            });
        }
        if let Some(i) = InplaceOp::ALL.iter().find(|i| i.name() == name) {
            return Ok(Op::Inplace(*i));
        }
        Ok(match name {
            "full" => Op::Full {
                shape: a.shape("shape")?,
                value: a.scalar("value")?,
                dtype: a.dtype("dtype")?,
            },
            "arange" => Op::Arange {
                start: a.float("start")?,
                end: a.float("end")?,
                step: a.float("step")?,
                dtype: a.dtype("dtype")?,
            },
            "rand" | "randn" => {
                let (shape, dtype, seed) =
                    (a.shape("shape")?, a.dtype("dtype")?, a.int("seed")? as u64); // bits of the printed i64
                if name == "rand" {
                    Op::Rand { shape, dtype, seed }
                } else {
                    Op::Randn { shape, dtype, seed }
                }
            }
            "from_vec" => Op::FromVec {
                values: a.floats("values")?,
                shape: a.shape("shape")?,
                dtype: a.dtype("dtype")?,
            },
            "where" => Op::Where,
            "argmax" => Op::Argmax {
                dim: a.int("dim")?,
                keepdim: a.bool("keepdim")?,
            },
            "var" => Op::Var {
                dims: a.ints("dims")?,
                correction: a.int("correction")?,
                keepdim: a.bool("keepdim")?,
            },
            "softmax" => Op::Softmax { dim: a.int("dim")? },
            "log_softmax" => Op::LogSoftmax { dim: a.int("dim")? },
            "layer_norm" => Op::LayerNorm {
                ndim: a.uint("ndim")?,
                eps: a.float("eps")?,
            },
            "rms_norm" => Op::RmsNorm {
                ndim: a.uint("ndim")?,
                eps: a.float("eps")?,
            },
            "linear" => Op::Linear,
            "matmul" => Op::Matmul,
            "reshape" => Op::Reshape {
                shape: a.shape("shape")?,
            },
            "permute" => {
                let dims = a.ints("dims")?;
                if dims.iter().any(|&d| d < 0) {
                    return Err(a.bad("dims", "a list of non-negative ints"));
                }
                Op::Permute {
                    dims: dims.into_iter().map(|d| d as usize).collect(),
                }
            }
            "transpose" => Op::Transpose {
                dim0: a.int("dim0")?,
                dim1: a.int("dim1")?,
            },
            "expand" => Op::Expand {
                shape: a.shape("shape")?,
            },
            "slice" => Op::Slice {
                dim: a.int("dim")?,
                start: a.uint("start")?,
                end: a.uint("end")?,
                step: a.uint("step")?,
            },
            "cat" => Op::Cat { dim: a.int("dim")? },
            "index_select" => Op::IndexSelect { dim: a.int("dim")? },
            "cast" => Op::Cast {
                dtype: a.dtype("dtype")?,
            },
            "contiguous" => Op::Contiguous,
            "triu" => Op::Triu {
                diagonal: a.int("diagonal")?,
            },
            "tril" => Op::Tril {
                diagonal: a.int("diagonal")?,
            },
            _ => return Err(OpParseError::UnknownOp(name.into())),
        })
    }

    /// The shape attribute of `full`, `rand`, `randn`, `reshape` and `expand`.
    pub fn shape_attr(&self) -> Option<&Shape> {
        match self {
            Op::Full { shape, .. }
            | Op::Rand { shape, .. }
            | Op::Randn { shape, .. }
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

    /// True for pointwise ops (unary, binary, where, cast).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. }
        )
    }

    /// True for ops that combine elements over dims.
    pub fn is_reduction(&self) -> bool {
        matches!(self, Op::Reduce { .. } | Op::Argmax { .. } | Op::Var { .. })
    }

    /// True for ops whose eager result may share storage with their operand.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. }
                | Op::Permute { .. }
                | Op::Transpose { .. }
                | Op::Expand { .. }
                | Op::Slice { .. }
        )
    }

    /// True for ops that take no tensor operands.
    pub fn is_creation(&self) -> bool {
        matches!(
            self,
            Op::Full { .. }
                | Op::Arange { .. }
                | Op::Rand { .. }
                | Op::Randn { .. }
                | Op::FromVec { .. }
        )
    }

    /// True for composite ops that later passes decompose into primitives.
    pub fn is_composite(&self) -> bool {
        matches!(
            self,
            Op::Softmax { .. }
                | Op::LogSoftmax { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::Linear
                | Op::Var { .. }
                | Op::Unary(UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Silu)
                | Op::Reduce {
                    op: ReduceOp::Mean,
                    ..
                }
        )
    }

    /// True for in-place updates (`copy_`, `fill_`, `add_`, `mul_`).
    pub fn is_inplace(&self) -> bool {
        matches!(self, Op::Inplace(_))
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

/// Attribute lookup for [`Op::from_parts`], remembering which attributes were used.
struct Attrs<'a> {
    op: &'a str,
    attrs: &'a [(String, AttrValue)],
    used: Vec<bool>,
}

impl Attrs<'_> {
    fn bad(&self, attr: &'static str, expected: &'static str) -> OpParseError {
        OpParseError::BadAttr {
            op: self.op.into(),
            attr,
            expected,
        }
    }

    fn get(&mut self, attr: &'static str) -> Option<AttrValue> {
        let i = self.attrs.iter().position(|(k, _)| k == attr)?;
        self.used[i] = true;
        Some(self.attrs[i].1.clone())
    }

    fn need(&mut self, attr: &'static str) -> Result<AttrValue, OpParseError> {
        self.get(attr).ok_or(OpParseError::MissingAttr {
            op: self.op.into(),
            attr,
        })
    }

    fn int(&mut self, attr: &'static str) -> Result<i64, OpParseError> {
        match self.need(attr)? {
            AttrValue::Int(i) => Ok(i),
            _ => Err(self.bad(attr, "an int")),
        }
    }

    fn uint(&mut self, attr: &'static str) -> Result<usize, OpParseError> {
        match self.need(attr)? {
            AttrValue::Int(i) if i >= 0 => Ok(i as usize),
            _ => Err(self.bad(attr, "a non-negative int")),
        }
    }

    fn float(&mut self, attr: &'static str) -> Result<f64, OpParseError> {
        match self.need(attr)? {
            AttrValue::Float(v) => Ok(v),
            AttrValue::Int(i) => Ok(i as f64),
            _ => Err(self.bad(attr, "a number")),
        }
    }

    fn bool(&mut self, attr: &'static str) -> Result<bool, OpParseError> {
        match self.need(attr)? {
            AttrValue::Bool(b) => Ok(b),
            _ => Err(self.bad(attr, "true or false")),
        }
    }

    fn opt_str(&mut self, attr: &'static str) -> Result<Option<String>, OpParseError> {
        match self.get(attr) {
            None => Ok(None),
            Some(AttrValue::Str(s)) => Ok(Some(s)),
            Some(_) => Err(self.bad(attr, "a string")),
        }
    }

    fn dtype(&mut self, attr: &'static str) -> Result<DType, OpParseError> {
        match self.need(attr)? {
            AttrValue::DType(d) => Ok(d),
            _ => Err(self.bad(attr, "a dtype")),
        }
    }

    fn scalar(&mut self, attr: &'static str) -> Result<Scalar, OpParseError> {
        match self.need(attr)? {
            AttrValue::Int(i) => Ok(Scalar::Int(i)),
            AttrValue::Float(v) => Ok(Scalar::Float(v)),
            AttrValue::Bool(b) => Ok(Scalar::Bool(b)),
            _ => Err(self.bad(attr, "a number or bool")),
        }
    }

    fn list(&mut self, attr: &'static str) -> Result<Vec<AttrValue>, OpParseError> {
        match self.need(attr)? {
            AttrValue::List(l) => Ok(l),
            _ => Err(self.bad(attr, "a list")),
        }
    }

    fn ints(&mut self, attr: &'static str) -> Result<Vec<i64>, OpParseError> {
        self.list(attr)?
            .into_iter()
            .map(|v| match v {
                AttrValue::Int(i) => Ok(i),
                _ => Err(self.bad(attr, "a list of ints")),
            })
            .collect()
    }

    fn floats(&mut self, attr: &'static str) -> Result<Vec<f64>, OpParseError> {
        self.list(attr)?
            .into_iter()
            .map(|v| match v {
                AttrValue::Float(x) => Ok(x),
                AttrValue::Int(i) => Ok(i as f64),
                _ => Err(self.bad(attr, "a list of numbers")),
            })
            .collect()
    }

    fn shape(&mut self, attr: &'static str) -> Result<Shape, OpParseError> {
        self.list(attr)?
            .into_iter()
            .map(|v| match v {
                AttrValue::Int(i) if i >= 0 => Ok(Dim::Const(i as usize)),
                AttrValue::Sym(s) => Ok(Dim::sym(&s)),
                _ => Err(self.bad(attr, "a list of sizes or symbols")),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_round_trips_through_name_and_attrs() {
        let ops = vec![
            Op::Unary(UnaryOp::GeluTanh),
            Op::Unary(UnaryOp::Gelu),
            Op::Reduce {
                op: ReduceOp::Max,
                dims: vec![-1, 0],
                keepdim: true,
            },
            Op::Full {
                shape: [Dim::sym("B"), Dim::Const(3)].into_iter().collect(),
                value: Scalar::Float(0.5),
                dtype: DType::F16,
            },
            Op::Slice {
                dim: 1,
                start: 2,
                end: 9,
                step: 3,
            },
            Op::Inplace(InplaceOp::Fill),
            Op::LayerNorm { ndim: 1, eps: 1e-5 },
        ];
        for op in ops {
            let attrs: Vec<(String, AttrValue)> = op
                .attrs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            assert_eq!(Op::from_parts(op.name(), &attrs).unwrap(), op);
        }
    }

    #[test]
    fn unknown_attrs_are_errors() {
        let e = Op::from_parts("relu", &[("dim".into(), AttrValue::Int(1))]).unwrap_err();
        assert_eq!(e.to_string(), "op `relu` has no attribute `dim`");
    }
}
