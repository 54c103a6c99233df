//! Scalar literals: operands such as the `0.125` in `mul %h, 0.125`, fill values, attributes.

use crate::DType;
use std::fmt;
use std::hash::{Hash, Hasher};

/// An f64 stored as its bits, so that it is `Eq` and `Hash` (Cranelift's `Ieee64`): two
/// values are equal when their bits are, so `NaN == NaN` and `0.0 != -0.0`. Ops keep their
/// float attributes (`eps`, `negative_slope`, ...) in it, which makes [`crate::Op`]
/// hashable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct F64(u64);

impl F64 {
    /// The value `v`.
    pub const fn new(v: f64) -> F64 {
        F64(v.to_bits())
    }

    /// The value.
    pub const fn get(self) -> f64 {
        f64::from_bits(self.0)
    }

    /// The bits.
    pub const fn bits(self) -> u64 {
        self.0
    }
}

impl From<f64> for F64 {
    fn from(v: f64) -> F64 {
        F64::new(v)
    }
}

impl From<F64> for f64 {
    fn from(v: F64) -> f64 {
        v.get()
    }
}

impl fmt::Debug for F64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

impl fmt::Display for F64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_float(self.get()))
    }
}

/// A scalar literal. Its category (bool, int, float) takes part in type promotion the way
/// a Python number does in PyTorch: it never widens a tensor of its own category.
///
/// Literals are compared and hashed by their bits (a float literal `NaN` equals itself,
/// `0.0` and `-0.0` differ): they are IR data, not numbers being compared.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// A boolean literal.
    Bool(bool),
    /// An integer literal.
    Int(i64),
    /// A floating-point literal.
    Float(f64),
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Eq for Scalar {}

impl Hash for Scalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Scalar::Bool(b) => (0u8, *b as u64).hash(state),
            Scalar::Int(i) => (1u8, *i as u64).hash(state),
            Scalar::Float(f) => (2u8, f.to_bits()).hash(state),
        }
    }
}

impl Scalar {
    /// The value as f64 (true is 1).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The dtype a tensor holding only this scalar would get (bool, i64, or f32).
    pub fn natural_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::DEFAULT_FLOAT,
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Scalar {
        Scalar::Float(v)
    }
}
impl From<f32> for Scalar {
    fn from(v: f32) -> Scalar {
        Scalar::Float(v as f64)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Scalar {
        Scalar::Int(v)
    }
}
impl From<i32> for Scalar {
    fn from(v: i32) -> Scalar {
        Scalar::Int(v as i64)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Scalar {
        Scalar::Bool(v)
    }
}

/// Formats an f64 so that it reads back as the same value and as a float (`1.0`, `1e-5`,
/// `inf`, `-inf`, `nan`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{v:?}")
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(v) => f.write_str(&format_float(*v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_floats() {
        assert_eq!(Scalar::Float(1.0).to_string(), "1.0");
        assert_eq!(Scalar::Float(1e-5).to_string(), "1e-5");
        assert_eq!(Scalar::Float(f64::NEG_INFINITY).to_string(), "-inf");
        assert_eq!("1e-5".parse::<f64>().unwrap(), 1e-5);
    }
}
