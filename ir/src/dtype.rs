//! Element types of tensors and the type-promotion rules shared by every stage.

use crate::Scalar;
use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Boolean (stored as one byte, 0 or 1).
    Bool,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// IEEE half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
}

/// The promotion category of a dtype: bool < integer < floating point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// `bool`.
    Bool,
    /// `i32`, `i64`.
    Int,
    /// `f16`, `bf16`, `f32`, `f64`.
    Float,
}

impl DType {
    /// Every dtype, in a stable order (useful for tests and tables).
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// The dtype that floating-point results of integer inputs get (as `torch.get_default_dtype()`).
    pub const DEFAULT_FLOAT: DType = DType::F32;

    /// The name used in the textual IR (`f32`, `bf16`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The promotion category.
    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::I32 | DType::I64 => Category::Int,
            _ => Category::Float,
        }
    }

    /// True for f16, bf16, f32 and f64.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// True for i32 and i64.
    pub fn is_int(self) -> bool {
        self.category() == Category::Int
    }

    /// The smallest dtype both `self` and `other` convert to without changing category
    /// downwards, as `torch.promote_types` (f16 with bf16 gives f32).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self.category(), other.category()) {
            (a, b) if a > b => self,
            (a, b) if a < b => other,
            (Category::Float, _) => match (self, other) {
                (F16, BF16) | (BF16, F16) => F32,
                _ => {
                    if self.size_bytes() >= other.size_bytes() {
                        self
                    } else {
                        other
                    }
                }
            },
            _ => {
                if self.size_bytes() >= other.size_bytes() {
                    self
                } else {
                    other
                }
            }
        }
    }

    /// The largest finite value of the dtype (`torch.finfo(d).max`, `torch.iinfo(d).max`, 1
    /// for bool).
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F64 => f64::MAX,
            DType::F32 => f32::MAX as f64,
            DType::F16 => half::f16::MAX.to_f64(),
            DType::BF16 => half::bf16::MAX.to_f64(),
            DType::I32 => i32::MAX as f64,
            DType::I64 => i64::MAX as f64,
            DType::Bool => 1.0,
        }
    }

    /// The machine epsilon of a float dtype (`torch.finfo(d).eps`); the default float's for
    /// integer and bool dtypes.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F64 => f64::EPSILON,
            DType::F16 => half::f16::EPSILON.to_f64(),
            DType::BF16 => half::bf16::EPSILON.to_f64(),
            DType::F32 | DType::I32 | DType::I64 | DType::Bool => f32::EPSILON as f64,
        }
    }

    /// The result of integer arithmetic computed exactly in f64, as a value of this dtype:
    /// `i32` results wrap around (two's complement, as PyTorch's and eager's integer ops
    /// do, where [`DType::round_f64`], the cast rule, saturates); `i64` results beyond
    /// f64's exact range cannot wrap exactly and saturate; other dtypes round as
    /// [`DType::round_f64`].
    pub fn wrap_f64(self, v: f64) -> f64 {
        match self {
            DType::I32 if v.is_finite() => f64::from(v.trunc() as i64 as i32),
            _ => self.round_f64(v),
        }
    }

    /// Whether a literal of this value can fill a tensor of this dtype, as PyTorch's
    /// `full`, `fill_` and `tensor(...)` decide ("value cannot be converted to type int64_t
    /// without overflow"): integer dtypes take only finite values in their range, `f32`
    /// takes infinities and NaN but no finite value beyond its largest, and bool, f16, bf16
    /// and f64 take anything (f16 and bf16 round a too-large value to infinity).
    pub fn holds_literal(self, v: Scalar) -> bool {
        match (self, v) {
            (DType::I32, Scalar::Int(i)) => i32::try_from(i).is_ok(),
            (DType::I32, Scalar::Float(f)) => {
                f.is_finite() && f >= f64::from(i32::MIN) && f <= f64::from(i32::MAX)
            }
            // 2^63 is i64::MAX rounded up, and out of range
            (DType::I64, Scalar::Float(f)) => {
                f.is_finite() && (-(2f64.powi(63))..2f64.powi(63)).contains(&f)
            }
            (DType::F32, Scalar::Float(f)) => !f.is_finite() || f.abs() <= f64::from(f32::MAX),
            _ => true,
        }
    }

    /// Whether an element given as f64 (`torch.tensor([...], dtype=...)`, `from_vec`) can
    /// become an element of this dtype: not for NaN, an infinity or a value past the range
    /// of an integer dtype. An i64 element reaches f64 rounded (i64::MAX is 2^63), so 2^63
    /// itself is taken.
    pub fn holds_element(self, v: f64) -> bool {
        let limit = match self {
            DType::I32 => 2f64.powi(31),
            DType::I64 => 2f64.powi(63),
            _ => return true,
        };
        v.is_finite() && v.abs() <= limit
    }

    /// Rounds an f64 to the nearest value representable in this dtype, with the
    /// conversion rules of a cast (float to int truncates toward zero and saturates,
    /// NaN to int gives 0, anything non-zero to bool gives 1).
    pub fn round_f64(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::F16 => half::f16::from_f64(v).to_f64(),
            DType::BF16 => half::bf16::from_f64(v).to_f64(),
            DType::I32 => v as i32 as f64,
            DType::I64 => v as i64 as f64,
            DType::Bool => {
                if v != 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_torch() {
        use DType::*;
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(I32.promote(F16), F16);
        assert_eq!(I32.promote(I64), I64);
        assert_eq!(Bool.promote(I32), I32);
        assert_eq!(F64.promote(F32), F64);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
    }

    #[test]
    fn rounding_casts() {
        assert_eq!(DType::I32.round_f64(-2.7), -2.0);
        assert_eq!(DType::Bool.round_f64(-0.5), 1.0);
        assert_eq!(DType::F32.round_f64(0.1), 0.1f32 as f64);
        // casts saturate
        assert_eq!(DType::I32.round_f64(2f64.powi(32)), f64::from(i32::MAX));
    }

    #[test]
    fn integer_arithmetic_wraps() {
        let i32_max = f64::from(i32::MAX);
        assert_eq!(DType::I32.wrap_f64(i32_max + 1.0), f64::from(i32::MIN));
        assert_eq!(DType::I32.wrap_f64(2f64.powi(60)), 0.0);
        assert_eq!(DType::I32.wrap_f64(-7.0), -7.0);
        assert_eq!(DType::I32.wrap_f64(f64::NAN), 0.0);
        assert_eq!(DType::F32.wrap_f64(0.1), 0.1f32 as f64);
    }
}
