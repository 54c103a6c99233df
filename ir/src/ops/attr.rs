//! Attributes as the text format writes them, and their codec: each attribute type of the
//! op table ([`AttrCodec`]) converts to and from an [`AttrValue`]; [`Reader`] hands a
//! parsed op's attributes to the table's generated parser, remembering which were used, and
//! answers the defaults that depend on the operands (`layer_norm`'s `ndim` from its
//! weight).

use super::constant::Constant;
use crate::{ArgType, DType, Dim, Scalar, Shape, F64};
use std::fmt;

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
        expected: String,
    },
    /// An absent attribute whose default comes from an operand the op was not given.
    #[error("op `{op}` needs attribute `{attr}` ({why})")]
    NoDefault {
        /// op name
        op: String,
        /// attribute name
        attr: &'static str,
        /// why the default cannot be taken
        why: String,
    },
}

/// An attribute type of the op table: how a field prints and parses.
pub trait AttrCodec: Sized {
    /// The printed value (`None`: not printed, as an absent optional attribute).
    fn to_attr(&self) -> Option<AttrValue>;
    /// The field from a written value, or what it must be.
    fn from_attr(v: AttrValue) -> Result<Self, &'static str>;
}

impl AttrCodec for i64 {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::Int(*self))
    }
    fn from_attr(v: AttrValue) -> Result<i64, &'static str> {
        match v {
            AttrValue::Int(i) => Ok(i),
            _ => Err("an int"),
        }
    }
}

impl AttrCodec for usize {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::Int(*self as i64))
    }
    fn from_attr(v: AttrValue) -> Result<usize, &'static str> {
        match v {
            AttrValue::Int(i) if i >= 0 => Ok(i as usize),
            _ => Err("a non-negative int"),
        }
    }
}

/// Seeds print as the i64 of their bits.
impl AttrCodec for u64 {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::Int(*self as i64))
    }
    fn from_attr(v: AttrValue) -> Result<u64, &'static str> {
        match v {
            AttrValue::Int(i) => Ok(i as u64),
            _ => Err("an int"),
        }
    }
}

impl AttrCodec for bool {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::Bool(*self))
    }
    fn from_attr(v: AttrValue) -> Result<bool, &'static str> {
        match v {
            AttrValue::Bool(b) => Ok(b),
            _ => Err("true or false"),
        }
    }
}

impl AttrCodec for F64 {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::Float(self.get()))
    }
    fn from_attr(v: AttrValue) -> Result<F64, &'static str> {
        match v {
            AttrValue::Float(x) => Ok(F64::new(x)),
            AttrValue::Int(i) => Ok(F64::new(i as f64)),
            _ => Err("a number"),
        }
    }
}

impl AttrCodec for DType {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::DType(*self))
    }
    fn from_attr(v: AttrValue) -> Result<DType, &'static str> {
        match v {
            AttrValue::DType(d) => Ok(d),
            _ => Err("a dtype"),
        }
    }
}

impl AttrCodec for Scalar {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(match *self {
            Scalar::Bool(b) => AttrValue::Bool(b),
            Scalar::Int(i) => AttrValue::Int(i),
            Scalar::Float(v) => AttrValue::Float(v),
        })
    }
    fn from_attr(v: AttrValue) -> Result<Scalar, &'static str> {
        match v {
            AttrValue::Int(i) => Ok(Scalar::Int(i)),
            AttrValue::Float(v) => Ok(Scalar::Float(v)),
            AttrValue::Bool(b) => Ok(Scalar::Bool(b)),
            _ => Err("a number or bool"),
        }
    }
}

/// Dim lists (`dims = [0, -1]`).
impl AttrCodec for Vec<i64> {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::List(
            self.iter().map(|&d| AttrValue::Int(d)).collect(),
        ))
    }
    fn from_attr(v: AttrValue) -> Result<Vec<i64>, &'static str> {
        const WANT: &str = "a list of ints";
        match v {
            AttrValue::List(l) => l
                .into_iter()
                .map(|x| match x {
                    AttrValue::Int(i) => Ok(i),
                    _ => Err(WANT),
                })
                .collect(),
            _ => Err(WANT),
        }
    }
}

/// Permutations (`dims = [1, 0, 2]`).
impl AttrCodec for Vec<usize> {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::List(
            self.iter().map(|&d| AttrValue::Int(d as i64)).collect(),
        ))
    }
    fn from_attr(v: AttrValue) -> Result<Vec<usize>, &'static str> {
        const WANT: &str = "a list of non-negative ints";
        match v {
            AttrValue::List(l) => l
                .into_iter()
                .map(|x| match x {
                    AttrValue::Int(i) if i >= 0 => Ok(i as usize),
                    _ => Err(WANT),
                })
                .collect(),
            _ => Err(WANT),
        }
    }
}

impl AttrCodec for Shape {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::List(
            self.dims()
                .iter()
                .map(|d| match d {
                    Dim::Const(n) => AttrValue::Int(*n as i64),
                    Dim::Sym(x) => AttrValue::Sym(x.to_string()),
                })
                .collect(),
        ))
    }
    fn from_attr(v: AttrValue) -> Result<Shape, &'static str> {
        const WANT: &str = "a list of sizes or symbols";
        match v {
            AttrValue::List(l) => l
                .into_iter()
                .map(|x| match x {
                    AttrValue::Int(i) if i >= 0 => Ok(Dim::Const(i as usize)),
                    AttrValue::Sym(s) => Ok(Dim::sym(&s)),
                    _ => Err(WANT),
                })
                .collect(),
            _ => Err(WANT),
        }
    }
}

impl AttrCodec for Constant {
    fn to_attr(&self) -> Option<AttrValue> {
        Some(AttrValue::List(
            self.values().iter().map(|&v| AttrValue::Float(v)).collect(),
        ))
    }
    fn from_attr(v: AttrValue) -> Result<Constant, &'static str> {
        const WANT: &str = "a list of numbers";
        match v {
            AttrValue::List(l) => l
                .into_iter()
                .map(|x| match x {
                    AttrValue::Float(v) => Ok(v),
                    AttrValue::Int(i) => Ok(i as f64),
                    _ => Err(WANT),
                })
                .collect::<Result<Vec<f64>, _>>()
                .map(Constant::new),
            _ => Err(WANT),
        }
    }
}

/// An attribute that may be absent (printed only when present).
impl<T: AttrCodec> AttrCodec for Option<T> {
    fn to_attr(&self) -> Option<AttrValue> {
        self.as_ref().and_then(T::to_attr)
    }
    fn from_attr(v: AttrValue) -> Result<Option<T>, &'static str> {
        T::from_attr(v).map(Some)
    }
}

/// The written attributes of one op being parsed, and its operands' types (empty when the
/// op is built without operands): what the table's parser and its defaults read.
pub struct Reader<'a> {
    op: &'a str,
    attrs: &'a [(String, AttrValue)],
    used: Vec<bool>,
    operands: &'a [ArgType],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        op: &'a str,
        attrs: &'a [(String, AttrValue)],
        operands: &'a [ArgType],
    ) -> Reader<'a> {
        Reader {
            op,
            attrs,
            used: vec![false; attrs.len()],
            operands,
        }
    }

    /// The op's name as written.
    pub fn op(&self) -> &'a str {
        self.op
    }

    /// The written value of `attr`, marking it used.
    pub fn take(&mut self, attr: &str) -> Option<AttrValue> {
        let i = self.attrs.iter().position(|(k, _)| k == attr)?;
        self.used[i] = true;
        Some(self.attrs[i].1.clone())
    }

    /// The written value of `attr` as a `T`, if written.
    pub fn take_as<T: AttrCodec>(&mut self, attr: &'static str) -> Result<Option<T>, OpParseError> {
        match self.take(attr) {
            Some(v) => T::from_attr(v).map(Some).map_err(|e| self.bad(attr, e)),
            None => Ok(None),
        }
    }

    /// True when `attr` is written as a float (`arange {start = 0.5}`).
    pub fn is_float(&self, attr: &str) -> bool {
        self.attrs
            .iter()
            .any(|(k, v)| k == attr && matches!(v, AttrValue::Float(_)))
    }

    /// The first attribute not read by the parser, if any.
    pub(crate) fn unused(&self) -> Option<&'a str> {
        let i = self.used.iter().position(|u| !u)?;
        Some(&self.attrs[i].0)
    }

    /// `attr` written with a value of the wrong kind.
    pub fn bad(&self, attr: &'static str, expected: impl Into<String>) -> OpParseError {
        OpParseError::BadAttr {
            op: self.op.into(),
            attr,
            expected: expected.into(),
        }
    }

    /// `attr` is required and absent.
    pub fn missing(&self, attr: &'static str) -> OpParseError {
        OpParseError::MissingAttr {
            op: self.op.into(),
            attr,
        }
    }

    fn no_default(&self, attr: &'static str, why: String) -> OpParseError {
        OpParseError::NoDefault {
            op: self.op.into(),
            attr,
            why,
        }
    }

    fn tensor(&self, attr: &'static str, i: usize) -> Result<&'a crate::TensorType, OpParseError> {
        match self.operands.get(i) {
            Some(ArgType::Tensor(t)) => Ok(t),
            _ => Err(self.no_default(
                attr,
                format!("its default comes from tensor operand {i}, which it does not have"),
            )),
        }
    }

    /// The rank of tensor operand `i` (for `attr`'s default).
    pub fn rank_of(&self, attr: &'static str, i: usize) -> Result<usize, OpParseError> {
        Ok(self.tensor(attr, i)?.shape.rank())
    }

    /// The dtype of tensor operand `i` (for `attr`'s default).
    pub fn dtype_of(&self, attr: &'static str, i: usize) -> Result<DType, OpParseError> {
        Ok(self.tensor(attr, i)?.dtype)
    }

    /// The constant size of dim `dim` of tensor operand `i` (for `attr`'s default).
    pub fn size_of(&self, attr: &'static str, i: usize, dim: i64) -> Result<usize, OpParseError> {
        let t = self.tensor(attr, i)?;
        let d = crate::shape::normalize_dim(dim, t.shape.rank()).ok_or_else(|| {
            self.no_default(attr, format!("dim {dim} is out of range for {}", t.shape))
        })?;
        t.shape.dims()[d].as_const().ok_or_else(|| {
            self.no_default(
                attr,
                format!("dim {d} of {} is symbolic: give it explicitly", t.shape),
            )
        })
    }
}

/// The value of one field of a parsed op: the written attribute, else its default, else
/// a missing-attribute error.
macro_rules! attr_value {
    ($r:ident, $attr:ident : $ty:ty) => {
        match $r.take(stringify!($attr)) {
            Some(v) => <$ty as $crate::ops::AttrCodec>::from_attr(v)
                .map_err(|e| $r.bad(stringify!($attr), e))?,
            None => return Err($r.missing(stringify!($attr))),
        }
    };
    ($r:ident, $attr:ident : $ty:ty = $default:expr) => {
        match $r.take(stringify!($attr)) {
            Some(v) => <$ty as $crate::ops::AttrCodec>::from_attr(v)
                .map_err(|e| $r.bad(stringify!($attr), e))?,
            None => $default,
        }
    };
}
pub(crate) use attr_value;
