//! Scalar literals: operands such as the `0.125` in `mul %h, 0.125`, fill values, attributes.

use crate::DType;
use std::fmt;

/// A scalar literal. Its category (bool, int, float) takes part in type promotion the way
/// a Python number does in PyTorch: it never widens a tensor of its own category.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A boolean literal.
    Bool(bool),
    /// An integer literal.
    Int(i64),
    /// A floating-point literal.
    Float(f64),
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
