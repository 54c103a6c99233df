//! Element types: the public [`Element`] trait (one Rust type per dtype) and the crate's
//! kernel traits (conversions with cast semantics, float math through f32/f64, wrapping
//! integer arithmetic), plus the macros that dispatch a dtype to a monomorphised kernel.

use half::{bf16, f16};
use kiln_ir::{DType, Scalar};
use std::fmt::Debug;

mod private {
    pub trait Sealed {}
}

/// A Rust type that is the element type of one [`DType`]: `f32`, `f64`, `half::f16`,
/// `half::bf16`, `i32`, `i64`, `bool`. Sealed: the runtime reinterprets storage bytes as
/// these types, so no other type may implement it.
pub trait Element: private::Sealed + Copy + Send + Sync + Debug + PartialEq + 'static {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// The value as f64 (bool gives 0 or 1).
    fn to_f64(self) -> f64;
    /// Converts from f64 with cast semantics (`DType::round_f64`): round to nearest for
    /// floats, truncation toward zero (saturating, NaN to 0) for ints, non-zero to true.
    fn from_f64(v: f64) -> Self;
}

/// The crate's kernel-facing view of an element type.
pub(crate) trait Kern: Element + PartialOrd + Default {
    /// Converts from i64 with cast semantics (wrapping for ints).
    fn from_i64(v: i64) -> Self;
    /// The value as i64 (ints and bools exactly; floats truncate).
    fn to_i64(self) -> i64;
    /// The smallest value (-inf for floats).
    fn lowest() -> Self;
    /// The largest value (+inf for floats).
    fn highest() -> Self;
    /// True for a NaN.
    fn is_nan_(self) -> bool {
        false
    }
    /// Converts a scalar literal with cast semantics; an integer literal outside the range of
    /// i32 saturates (as the interpreter's rounding does), so `x < i64::MAX` stays true.
    fn from_scalar(s: Scalar) -> Self {
        match s {
            Scalar::Float(f) => Self::from_f64(f),
            Scalar::Int(i) if Self::DTYPE == DType::I32 => {
                Self::from_i64(i.clamp(i32::MIN as i64, i32::MAX as i64))
            }
            Scalar::Int(i) => Self::from_i64(i),
            Scalar::Bool(b) => Self::from_i64(b as i64),
        }
    }
    /// The value as a scalar literal of its category.
    fn to_scalar(self) -> Scalar {
        match Self::DTYPE.category() {
            kiln_ir::Category::Float => Scalar::Float(self.to_f64()),
            kiln_ir::Category::Int => Scalar::Int(self.to_i64()),
            kiln_ir::Category::Bool => Scalar::Bool(self.to_i64() != 0),
        }
    }
    /// Converts to another element type with torch's cast semantics.
    #[inline(always)]
    fn cast<U: Kern>(self) -> U {
        if Self::DTYPE.is_float() {
            U::from_f64(self.to_f64())
        } else {
            U::from_i64(self.to_i64())
        }
    }
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl private::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
        impl Kern for $t {
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
        }
    };
}
int_element!(i32, I32);
int_element!(i64, I64);

impl private::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}
impl Kern for bool {
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
}

macro_rules! float_element {
    ($t:ty, $d:ident, $to:expr, $from:expr, $from_i:expr) => {
        impl private::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $to(self)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
        }
        impl Kern for $t {
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                $from_i(v)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
            #[inline(always)]
            fn is_nan_(self) -> bool {
                self.is_nan()
            }
        }
    };
}
float_element!(f32, F32, |x: f32| x as f64, |v: f64| v as f32, |v: i64| v
    as f32);
float_element!(f64, F64, |x: f64| x, |v: f64| v, |v: i64| v as f64);
float_element!(f16, F16, |x: f16| x.to_f64(), f16::from_f64, |v: i64| {
    f16::from_f64(v as f64)
});
float_element!(
    bf16,
    BF16,
    |x: bf16| x.to_f64(),
    bf16::from_f64,
    |v: i64| bf16::from_f64(v as f64)
);

/// The arithmetic type floats compute in: f32 (for f16, bf16, f32) or f64. The math
/// functions the standard library has come from `num_traits::Float` (so a kernel of a new
/// op calls them without an edit here); this trait adds what it lacks.
pub(crate) trait CFloat: num_traits::Float + Send + Sync + Debug + 'static {
    const ZERO: Self;
    const ONE: Self;
    const NEG_INF: Self;
    fn of(v: f64) -> Self;
    fn f64(self) -> f64;
    /// tanh to about 1 ulp (f32 through f64 `exp`, faster than `f32::tanh` on glibc)
    fn fast_tanh(self) -> Self;
    fn erf(self) -> Self;
    fn round_even(self) -> Self;
    /// C's `fmod`: the exact remainder of truncated division
    fn fmod(self, d: Self) -> Self;
}

/// tanh for f32 through f64 `exp` (accurate to about 1 ulp of f32; about twice as fast as
/// `f32::tanh` on glibc): tanh(x) = (e^2x - 1) / (e^2x + 1), with the Taylor series near 0.
#[inline]
fn tanh_f32(x: f32) -> f32 {
    let x = x as f64;
    if x.abs() < 1e-4 {
        // x·(…), not x - x³/3: -0 stays -0
        (x * (1.0 - x * x / 3.0)) as f32
    } else if x.abs() > 20.0 {
        1f64.copysign(x) as f32
    } else {
        let e = (2.0 * x).exp();
        ((e - 1.0) / (e + 1.0)) as f32
    }
}

macro_rules! cfloat {
    ($t:ty, $erf:path, $tanh:expr) => {
        impl CFloat for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INF: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn of(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn fast_tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn fmod(self, d: Self) -> Self {
                self % d
            }
        }
    };
}
cfloat!(f32, libm::erff, tanh_f32);
cfloat!(f64, libm::erf, f64::tanh);

/// A floating-point element type with its compute type.
pub(crate) trait FloatKern: Kern {
    /// The type arithmetic happens in.
    type C: CFloat;
    /// Widens to the compute type.
    fn up(self) -> Self::C;
    /// Rounds from the compute type.
    fn down(c: Self::C) -> Self;
}

impl FloatKern for f32 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self
    }
    #[inline(always)]
    fn down(c: f32) -> f32 {
        c
    }
}
impl FloatKern for f64 {
    type C = f64;
    #[inline(always)]
    fn up(self) -> f64 {
        self
    }
    #[inline(always)]
    fn down(c: f64) -> f64 {
        c
    }
}
impl FloatKern for f16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> f16 {
        f16::from_f32(c)
    }
}
impl FloatKern for bf16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
}

/// An integer element type with torch's wrapping arithmetic.
pub(crate) trait IntKern: Kern + Ord {
    const ZERO: Self;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    /// `self ^ e`, wrapping; negative exponents give the truncated real power.
    fn wpow(self, e: Self) -> Self;
    /// the remainder of truncated division (`d` non-zero), wrapping (`MIN % -1` is 0)
    fn wfmod(self, d: Self) -> Self;
    /// the remainder of floored division, with `d`'s sign (`d` non-zero)
    fn wremainder(self, d: Self) -> Self;
    fn band(self, o: Self) -> Self;
    fn bor(self, o: Self) -> Self;
    fn bxor(self, o: Self) -> Self;
    fn bnot(self) -> Self;
    fn signum_(self) -> Self;
}

macro_rules! int_kern {
    ($t:ty) => {
        impl IntKern for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn wneg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn wabs(self) -> Self {
                self.wrapping_abs()
            }
            #[inline(always)]
            fn wfmod(self, d: Self) -> Self {
                self.wrapping_rem(d)
            }
            #[inline(always)]
            fn wremainder(self, d: Self) -> Self {
                let m = self.wrapping_rem(d);
                if m != 0 && ((m < 0) != (d < 0)) {
                    m.wrapping_add(d)
                } else {
                    m
                }
            }
            #[inline(always)]
            fn band(self, o: Self) -> Self {
                self & o
            }
            #[inline(always)]
            fn bor(self, o: Self) -> Self {
                self | o
            }
            #[inline(always)]
            fn bxor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline(always)]
            fn bnot(self) -> Self {
                !self
            }
            #[inline(always)]
            fn signum_(self) -> Self {
                self.signum()
            }
            fn wpow(self, e: Self) -> Self {
                // one definition with constant folding and the interpreter; wrapping in
                // i64 then narrowing is the same as wrapping in i32
                kiln_ir::ops::int_pow(i64::from(self), i64::from(e)) as $t
            }
        }
    };
}
int_kern!(i32);
int_kern!(i64);

/// Runs `$body` with the type alias `$T` bound to the Rust type of `$dt` (any dtype).
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            kiln_ir::DType::F32 => {
                type $T = f32;
                $body
            }
            kiln_ir::DType::F64 => {
                type $T = f64;
                $body
            }
            kiln_ir::DType::F16 => {
                type $T = half::f16;
                $body
            }
            kiln_ir::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            kiln_ir::DType::I32 => {
                type $T = i32;
                $body
            }
            kiln_ir::DType::I64 => {
                type $T = i64;
                $body
            }
            kiln_ir::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

/// Runs `$body` with `$T` bound to a float dtype's type; `$other` for non-float dtypes.
macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dt {
            kiln_ir::DType::F32 => {
                type $T = f32;
                $body
            }
            kiln_ir::DType::F64 => {
                type $T = f64;
                $body
            }
            kiln_ir::DType::F16 => {
                type $T = half::f16;
                $body
            }
            kiln_ir::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

pub(crate) use {with_dtype, with_float};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_torch() {
        assert_eq!((-2.7f32).cast::<i32>(), -2);
        assert_eq!(f32::NAN.cast::<i32>(), 0);
        assert!(f32::NAN.cast::<bool>());
        assert_eq!((3_000_000_000i64).cast::<i32>(), 3_000_000_000i64 as i32);
        assert_eq!(true.cast::<f32>(), 1.0);
        assert_eq!(i32::from_scalar(Scalar::Float(-1.9)), -1);
        assert_eq!(f16::from_f64(0.1), f16::from_f64(0.1f64));
    }

    #[test]
    fn tanh_f32_is_accurate() {
        for i in -4000..4000 {
            let x = i as f32 * 0.0073 + 1e-7;
            let want = (x as f64).tanh();
            let got = tanh_f32(x) as f64;
            assert!(
                (got - want).abs() <= 1.2e-7 * want.abs().max(1e-30),
                "{x}: {got} vs {want}"
            );
        }
        assert_eq!(tanh_f32(100.0), 1.0);
        assert_eq!(tanh_f32(-100.0), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        assert!(tanh_f32(-0.0).is_sign_negative() && tanh_f32(0.0).is_sign_positive());
        assert_eq!(tanh_f32(f32::from_bits(1)), f32::from_bits(1));
    }

    #[test]
    fn int_pow() {
        assert_eq!(3i64.wpow(4), 81);
        assert_eq!(2i32.wpow(31), i32::MIN);
        assert_eq!(2i32.wpow(-1), 0);
        assert_eq!((-1i32).wpow(-3), -1);
    }
}
