//! Exact integer semantics of the pointwise ops that keep integers integral: what PyTorch's
//! (and eager's) integer kernels compute, wrapping in two's complement. The f64 reference
//! ([`UnaryOp::eval_f64`]) cannot: past 2^53 an i64 is not exact in f64, and wrapping
//! (`-i64::MIN`, `i64::MAX * i64::MAX`) is not rounding. The interpreter and constant folding
//! use these for integer results.

use super::{BinaryOp, UnaryOp};
use crate::DType;

/// Narrows an i64 result to `dtype` as a wrapping i32 would (i64 unchanged).
fn narrow(v: i64, dtype: DType) -> i64 {
    if dtype == DType::I32 {
        i64::from(v as i32)
    } else {
        v
    }
}

/// `op x` for an integer `x` of integer dtype `dtype` (or `~` of a bool, 0 or 1), or `None`
/// when the op's result is not an integer of that dtype (it computes in floating point, or
/// gives a bool).
pub fn eval_int_unary(op: UnaryOp, x: i64, dtype: DType) -> Option<i64> {
    use UnaryOp::*;
    if dtype == DType::Bool && op == BitwiseNot {
        // `~` on bools is logical not (`!1` would be -2, which is true)
        return Some(i64::from(x == 0));
    }
    if !dtype.is_int() {
        return None;
    }
    let v = match op {
        Neg => x.wrapping_neg(),
        Abs => x.wrapping_abs(),
        Relu => x.max(0),
        Relu6 => x.clamp(0, 6),
        Floor | Ceil | Round | Trunc => x,
        Sign => x.signum(),
        BitwiseNot => !x,
        _ => return None,
    };
    Some(narrow(v, dtype))
}

/// `a op b` for integers of integer dtype `dtype` (both already values of it), or `None`
/// when the result is not an integer of that dtype. Integer `remainder` and `fmod` by zero
/// are `None` too (an error in PyTorch). A negative power gives what PyTorch's kernel
/// does: 1 and -1 to it as in the reals, every other base 0.
pub fn eval_int_binary(op: BinaryOp, a: i64, b: i64, dtype: DType) -> Option<i64> {
    use BinaryOp::*;
    if !dtype.is_int() {
        return None;
    }
    let v = match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Maximum => a.max(b),
        Minimum => a.min(b),
        BitwiseAnd => a & b,
        BitwiseOr => a | b,
        BitwiseXor => a ^ b,
        Fmod if b != 0 => a.wrapping_rem(b),
        Remainder if b != 0 => {
            let m = a.wrapping_rem(b);
            if m != 0 && ((m < 0) != (b < 0)) {
                m.wrapping_add(b)
            } else {
                m
            }
        }
        Pow => int_pow(a, b),
        _ => return None,
    };
    Some(narrow(v, dtype))
}

/// `base ^ e` with wrapping multiplication (exact mod 2^64, so mod 2^32 too when narrowed
/// to i32); a negative `e` gives PyTorch's integer result: 1 and -1 to it as in the reals,
/// every other base 0.
pub fn int_pow(base: i64, e: i64) -> i64 {
    if e < 0 {
        return match base {
            1 => 1,
            -1 if e % 2 == 0 => 1,
            -1 => -1,
            _ => 0,
        };
    }
    let (mut base, mut e, mut acc) = (base, e as u64, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_as_twos_complement() {
        let i = DType::I64;
        assert_eq!(eval_int_unary(UnaryOp::Neg, i64::MIN, i), Some(i64::MIN));
        assert_eq!(eval_int_unary(UnaryOp::Abs, i64::MIN, i), Some(i64::MIN));
        assert_eq!(
            eval_int_binary(BinaryOp::Mul, i64::MAX, i64::MAX, i),
            Some(1)
        );
        assert_eq!(eval_int_binary(BinaryOp::Pow, 2, 100, i), Some(0));
        assert_eq!(eval_int_binary(BinaryOp::Pow, 3, 3, i), Some(27));
        assert_eq!(eval_int_binary(BinaryOp::Pow, 0, -3, i), Some(0));
        assert_eq!(eval_int_binary(BinaryOp::Pow, -1, -3, i), Some(-1));
        assert_eq!(eval_int_binary(BinaryOp::Pow, -1, -2, i), Some(1));
        assert_eq!(
            eval_int_binary(BinaryOp::Add, i64::from(i32::MAX), 1, DType::I32),
            Some(i64::from(i32::MIN))
        );
        assert_eq!(eval_int_binary(BinaryOp::Remainder, -7, 3, i), Some(2));
        assert_eq!(eval_int_binary(BinaryOp::Fmod, -7, 3, i), Some(-1));
        assert_eq!(eval_int_binary(BinaryOp::Fmod, i64::MIN, -1, i), Some(0));
        assert_eq!(eval_int_binary(BinaryOp::Fmod, 1, 0, i), None);
        // float results are not this module's
        assert_eq!(eval_int_binary(BinaryOp::Div, 6, 3, i), None);
        assert_eq!(eval_int_unary(UnaryOp::Neg, 1, DType::F32), None);
        assert_eq!(eval_int_unary(UnaryOp::BitwiseNot, 1, DType::Bool), Some(0));
        assert_eq!(eval_int_unary(UnaryOp::BitwiseNot, 0, DType::Bool), Some(1));
    }
}
