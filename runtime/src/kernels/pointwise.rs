//! Pointwise kernels: unary, binary, where, cast. Inputs are converted to the compute dtype
//! first; each (op, dtype) pair is a monomorphised closure run by `iter::map*` (contiguous and
//! broadcast inner loops, parallel chunks); f16/bf16 compute in f32.

use crate::element::{with_dtype, CFloat, Element, FloatKern, IntKern, Kern};
use crate::error::RuntimeError;
use crate::iter::{map1, map2, map3, GRAIN_CHEAP, GRAIN_COSTLY};
use crate::tensor::CpuTensor;
use crate::EagerArg;
use kiln_ir::{BinaryOp, DType, Scalar, UnaryOp};

/// An operand converted to `dtype`: tensors by a cast (if needed), scalars as 0-d tensors.
pub(crate) fn operand(arg: &EagerArg<'_>, dtype: DType) -> CpuTensor {
    match arg {
        EagerArg::Tensor(t) => t.to_dtype(dtype),
        EagerArg::Scalar(s) => CpuTensor::scalar(*s, dtype),
    }
}

/// A binary operand in the compute dtype: a tensor, or a scalar folded into the kernel.
enum Opnd {
    Tensor(CpuTensor),
    Scalar(Scalar),
}

impl Opnd {
    fn new(arg: &EagerArg<'_>, dtype: DType) -> Opnd {
        match arg {
            EagerArg::Tensor(t) => Opnd::Tensor(t.to_dtype(dtype)),
            EagerArg::Scalar(s) => Opnd::Scalar(*s),
        }
    }
}

/// `f(a, b)` over the broadcast shape; a scalar operand becomes a constant of the kernel.
fn apply2<A: Kern, O: Element>(
    a: &Opnd,
    b: &Opnd,
    shape: &[usize],
    grain: usize,
    f: impl Fn(A, A) -> O + Sync + Send,
) -> CpuTensor {
    match (a, b) {
        (Opnd::Tensor(x), Opnd::Tensor(y)) => map2::<A, A, O>(x, y, shape, grain, f),
        (Opnd::Tensor(x), Opnd::Scalar(s)) => {
            let s = A::from_scalar(*s);
            map1::<A, O>(x, grain, move |v| f(v, s))
        }
        (Opnd::Scalar(s), Opnd::Tensor(y)) => {
            let s = A::from_scalar(*s);
            map1::<A, O>(y, grain, move |v| f(s, v))
        }
        (Opnd::Scalar(_), Opnd::Scalar(_)) => {
            let (x, y) = (
                CpuTensor::scalar(scalar_of(a), A::DTYPE),
                CpuTensor::scalar(scalar_of(b), A::DTYPE),
            );
            map2::<A, A, O>(&x, &y, shape, grain, f)
        }
    }
}

fn scalar_of(o: &Opnd) -> Scalar {
    match o {
        Opnd::Scalar(s) => *s,
        Opnd::Tensor(_) => unreachable!("only called on scalars"),
    }
}

/// `op(x)` with result dtype `out`.
pub(crate) fn unary(op: UnaryOp, x: &CpuTensor, out: DType) -> Result<CpuTensor, RuntimeError> {
    let x = x.to_dtype(out);
    Ok(match out {
        DType::F32 => float_unary::<f32>(op, &x),
        DType::F64 => float_unary::<f64>(op, &x),
        DType::F16 => float_unary::<half::f16>(op, &x),
        DType::BF16 => float_unary::<half::bf16>(op, &x),
        DType::I32 => int_unary::<i32>(op, &x),
        DType::I64 => int_unary::<i64>(op, &x),
        DType::Bool => {
            return Err(RuntimeError::unsupported(
                op.name(),
                &[x.shape()],
                "not defined for bool tensors",
            ))
        }
    })
}

/// Gelu (erf form) computed in f64: avoids the cancellation in `1 + erf(x)` for x ≪ 0.
fn gelu_f64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// Gelu (tanh form) in f64, as `x / (1 + e^(-2u))` (equal to `0.5·x·(1 + tanh(u))`,
/// without its cancellation and with a cheaper `exp`).
fn gelu_tanh_f64(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let u = c * (x + 0.044715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

fn float_unary<T: FloatKern>(op: UnaryOp, x: &CpuTensor) -> CpuTensor {
    use UnaryOp::*;
    let one = <T::C as CFloat>::ONE;
    let zero = <T::C as CFloat>::ZERO;
    macro_rules! go {
        ($grain:expr, |$v:ident| $e:expr) => {
            map1::<T, T>(x, $grain, |a: T| {
                let $v = a.up();
                T::down($e)
            })
        };
    }
    match op {
        Neg => go!(GRAIN_CHEAP, |v| -v),
        Abs => go!(GRAIN_CHEAP, |v| v.abs()),
        Exp => go!(GRAIN_COSTLY, |v| v.exp()),
        Log => go!(GRAIN_COSTLY, |v| v.ln()),
        Sqrt => go!(GRAIN_CHEAP, |v| v.sqrt()),
        Rsqrt => go!(GRAIN_CHEAP, |v| one / v.sqrt()),
        Recip => go!(GRAIN_CHEAP, |v| one / v),
        Sin => go!(GRAIN_COSTLY, |v| v.sin()),
        Cos => go!(GRAIN_COSTLY, |v| v.cos()),
        Tanh => go!(GRAIN_COSTLY, |v| v.tanh()),
        Erf => go!(GRAIN_COSTLY, |v| v.erf()),
        Sigmoid => go!(GRAIN_COSTLY, |v| one / (one + (-v).exp())),
        Relu => go!(GRAIN_CHEAP, |v| if v > zero || v.is_nan() {
            v
        } else {
            zero
        }),
        Gelu => go!(GRAIN_COSTLY, |v| <T::C as CFloat>::of(gelu_f64(v.f64()))),
        GeluTanh => go!(GRAIN_COSTLY, |v| <T::C as CFloat>::of(gelu_tanh_f64(
            v.f64()
        ))),
        Silu => go!(GRAIN_COSTLY, |v| v / (one + (-v).exp())),
    }
}

fn int_unary<T: IntKern>(op: UnaryOp, x: &CpuTensor) -> CpuTensor {
    match op {
        UnaryOp::Neg => map1::<T, T>(x, GRAIN_CHEAP, |a: T| a.wneg()),
        UnaryOp::Abs => map1::<T, T>(x, GRAIN_CHEAP, |a: T| a.wabs()),
        UnaryOp::Relu => map1::<T, T>(x, GRAIN_CHEAP, |a: T| a.max(T::ZERO)),
        // Every other unary op has a float result, so its input was cast to float already.
        _ => unreachable!("{} on an integer tensor reaches float_unary", op.name()),
    }
}

/// `op(a, b)` with broadcasting; `out` is the inferred result type.
pub(crate) fn binary(
    op: BinaryOp,
    a: &EagerArg<'_>,
    b: &EagerArg<'_>,
    out_dtype: DType,
    shape: &[usize],
    compute: DType,
) -> CpuTensor {
    let ct = if op.is_comparison() {
        compute
    } else {
        out_dtype
    };
    let (a, b) = (Opnd::new(a, ct), Opnd::new(b, ct));
    match ct {
        DType::F32 => float_binary::<f32>(op, &a, &b, shape),
        DType::F64 => float_binary::<f64>(op, &a, &b, shape),
        DType::F16 => float_binary::<half::f16>(op, &a, &b, shape),
        DType::BF16 => float_binary::<half::bf16>(op, &a, &b, shape),
        DType::I32 => int_binary::<i32>(op, &a, &b, shape),
        DType::I64 => int_binary::<i64>(op, &a, &b, shape),
        DType::Bool => bool_binary(op, &a, &b, shape),
    }
}

macro_rules! comparisons {
    ($op:expr, $a:expr, $b:expr, $shape:expr, $T:ty, |$x:ident, $y:ident| ($cx:expr, $cy:expr)) => {
        match $op {
            BinaryOp::Eq => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx == $cy),
            BinaryOp::Ne => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx != $cy),
            BinaryOp::Lt => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx < $cy),
            BinaryOp::Le => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx <= $cy),
            BinaryOp::Gt => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx > $cy),
            BinaryOp::Ge => apply2::<$T, bool>($a, $b, $shape, GRAIN_CHEAP, |$x, $y| $cx >= $cy),
            _ => unreachable!("not a comparison"),
        }
    };
}

fn float_binary<T: FloatKern>(op: BinaryOp, a: &Opnd, b: &Opnd, shape: &[usize]) -> CpuTensor {
    use BinaryOp::*;
    macro_rules! go {
        ($grain:expr, |$x:ident, $y:ident| $e:expr) => {
            apply2::<T, T>(a, b, shape, $grain, |p: T, q: T| {
                let ($x, $y) = (p.up(), q.up());
                T::down($e)
            })
        };
    }
    let nan = <T::C as CFloat>::of(f64::NAN);
    match op {
        Add => go!(GRAIN_CHEAP, |x, y| x + y),
        Sub => go!(GRAIN_CHEAP, |x, y| x - y),
        Mul => go!(GRAIN_CHEAP, |x, y| x * y),
        Div => go!(GRAIN_CHEAP, |x, y| x / y),
        Pow => go!(GRAIN_COSTLY, |x, y| x.powf(y)),
        Maximum => go!(GRAIN_CHEAP, |x, y| if x.is_nan() || y.is_nan() {
            nan
        } else if x > y {
            x
        } else {
            y
        }),
        Minimum => go!(GRAIN_CHEAP, |x, y| if x.is_nan() || y.is_nan() {
            nan
        } else if x < y {
            x
        } else {
            y
        }),
        _ => comparisons!(op, a, b, shape, T, |x, y| (x.up(), y.up())),
    }
}

fn int_binary<T: IntKern>(op: BinaryOp, a: &Opnd, b: &Opnd, shape: &[usize]) -> CpuTensor {
    use BinaryOp::*;
    macro_rules! go {
        (|$x:ident, $y:ident| $e:expr) => {
            apply2::<T, T>(a, b, shape, GRAIN_CHEAP, |$x: T, $y: T| $e)
        };
    }
    match op {
        Add => go!(|x, y| x.wadd(y)),
        Sub => go!(|x, y| x.wsub(y)),
        Mul => go!(|x, y| x.wmul(y)),
        Pow => go!(|x, y| x.wpow(y)),
        Maximum => go!(|x, y| x.max(y)),
        Minimum => go!(|x, y| x.min(y)),
        Div => unreachable!("integer division has a float result"),
        _ => comparisons!(op, a, b, shape, T, |x, y| (x, y)),
    }
}

fn bool_binary(op: BinaryOp, a: &Opnd, b: &Opnd, shape: &[usize]) -> CpuTensor {
    match op {
        BinaryOp::Maximum => apply2::<bool, bool>(a, b, shape, GRAIN_CHEAP, |x, y| x | y),
        BinaryOp::Minimum => apply2::<bool, bool>(a, b, shape, GRAIN_CHEAP, |x, y| x & y),
        op if op.is_comparison() => comparisons!(op, a, b, shape, bool, |x, y| (x as u8, y as u8)),
        _ => unreachable!("arithmetic on bools is rejected by infer"),
    }
}

/// `where(cond, a, b)` with broadcasting, in dtype `out`.
pub(crate) fn where_(
    cond: &CpuTensor,
    a: &EagerArg<'_>,
    b: &EagerArg<'_>,
    out: DType,
    shape: &[usize],
) -> CpuTensor {
    let (a, b) = (operand(a, out), operand(b, out));
    with_dtype!(out, T => map3::<bool, T, T, T>(cond, &a, &b, shape, |c, x, y| if c { x } else { y }))
}

/// Converts to `dtype` (always a fresh copy).
pub(crate) fn cast(x: &CpuTensor, dtype: DType) -> CpuTensor {
    x.copy_as(dtype)
}
