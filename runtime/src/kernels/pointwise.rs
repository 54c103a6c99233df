//! Pointwise kernels: unary, binary, where, cast. Inputs are converted to the compute dtype
//! first; each (op, dtype) pair is a monomorphised closure run by `iter::map*` (contiguous and
//! broadcast inner loops, parallel chunks); f16/bf16 compute in f32.

use crate::element::{with_dtype, CFloat, Element, FloatKern, IntKern, Kern};
use crate::error::RuntimeError;
use crate::iter::{map1, map2, map3, GRAIN_CHEAP, GRAIN_COSTLY};
use crate::tensor::CpuTensor;
use crate::EagerArg;
use kiln_ir::{BinaryOp, CostClass, DType, DTypeRule, Op, Reference, Scalar, UnaryOp};
use num_traits::Float as _;

/// The parallel grain of an op: elements per chunk, from its cost class in the op table
/// (cheap ops need larger chunks to pay for a thread).
fn grain(cost: CostClass) -> usize {
    match cost {
        CostClass::Trivial | CostClass::Cheap | CostClass::Moderate | CostClass::Data => {
            GRAIN_CHEAP
        }
        CostClass::Transcendental | CostClass::Libm => GRAIN_COSTLY,
    }
}

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

/// `op(x)` with result dtype `out`. Ops with a bool result (`isnan`, `logical_not`) read
/// the operand in its own dtype; the others convert it to `out` first.
pub(crate) fn unary(op: UnaryOp, x: &CpuTensor, out: DType) -> Result<CpuTensor, RuntimeError> {
    if op.info().dtype == DTypeRule::Bool {
        return Ok(bool_unary(op, x));
    }
    let x = x.to_dtype(out);
    Ok(match out {
        DType::F32 => float_unary::<f32>(op, &x),
        DType::F64 => float_unary::<f64>(op, &x),
        DType::F16 => float_unary::<half::f16>(op, &x),
        DType::BF16 => float_unary::<half::bf16>(op, &x),
        DType::I32 => int_unary::<i32>(op, &x),
        DType::I64 => int_unary::<i64>(op, &x),
        DType::Bool if op == UnaryOp::BitwiseNot => map1::<bool, bool>(&x, GRAIN_CHEAP, |a| !a),
        DType::Bool => {
            return Err(RuntimeError::unsupported(
                op.name(),
                &[x.shape()],
                "not defined for bool tensors",
            ))
        }
    })
}

/// The unary ops with a bool result, on an operand of any dtype.
fn bool_unary(op: UnaryOp, x: &CpuTensor) -> CpuTensor {
    macro_rules! test {
        (|$v:ident: $T:ty| $e:expr) => {
            map1::<$T, bool>(x, GRAIN_CHEAP, |$v: $T| $e)
        };
    }
    macro_rules! by_dtype {
        ($float:ident, $any:expr) => {
            match x.dtype() {
                DType::F32 => test!(|v: f32| v.$float()),
                DType::F64 => test!(|v: f64| v.$float()),
                DType::F16 => test!(|v: half::f16| v.$float()),
                DType::BF16 => test!(|v: half::bf16| v.$float()),
                _ => $any,
            }
        };
    }
    let falses = || super::create::full(x.shape(), Scalar::Bool(false), DType::Bool);
    match op {
        UnaryOp::Isnan => by_dtype!(is_nan, falses()),
        UnaryOp::Isinf => by_dtype!(is_infinite, falses()),
        UnaryOp::LogicalNot => map1::<bool, bool>(&x.to_dtype(DType::Bool), GRAIN_CHEAP, |a| !a),
        other => unreachable!("{} has no bool result", other.name()),
    }
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
    let g = grain(op.info().cost);
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
    // the ops computed by their f64 reference, rounded once
    let reference = |grain| {
        map1::<T, T>(x, grain, |a: T| {
            T::down(<T::C as CFloat>::of(op.eval_f64(a.up().f64())))
        })
    };
    match op {
        Neg => go!(g, |v| -v),
        Abs => go!(g, |v| v.abs()),
        Exp => go!(g, |v| v.exp()),
        Log => go!(g, |v| v.ln()),
        Sqrt => go!(g, |v| v.sqrt()),
        Rsqrt => go!(g, |v| one / v.sqrt()),
        Recip => go!(g, |v| one / v),
        Sin => go!(g, |v| v.sin()),
        Cos => go!(g, |v| v.cos()),
        Tanh => go!(g, |v| v.fast_tanh()),
        Erf => go!(g, |v| v.erf()),
        Sigmoid => go!(g, |v| one / (one + (-v).exp())),
        Relu => go!(g, |v| if v < zero { zero } else { v }),
        Gelu => go!(g, |v| <T::C as CFloat>::of(gelu_f64(v.f64()))),
        GeluTanh => go!(g, |v| <T::C as CFloat>::of(gelu_tanh_f64(v.f64()))),
        Silu => go!(g, |v| v / (one + (-v).exp())),
        Floor => go!(g, |v| v.floor()),
        Ceil => go!(g, |v| v.ceil()),
        Round => go!(g, |v| v.round_even()),
        Trunc => go!(g, |v| v.trunc()),
        Sign => go!(g, |v| if v > zero {
            one
        } else if v < zero {
            -one
        } else {
            zero
        }),
        Log1p => go!(g, |v| v.ln_1p()),
        Expm1 => go!(g, |v| v.exp_m1()),
        Log2 => go!(g, |v| v.log2()),
        Exp2 => go!(g, |v| v.exp2()),
        Tan => go!(g, |v| v.tan()),
        Atan => go!(g, |v| v.atan()),
        Sinh => go!(g, |v| v.sinh()),
        Relu6 | Hardswish | Mish => reference(g),
        // a bool result or integer operands only: `unary` dispatches them elsewhere
        Isnan | Isinf | LogicalNot | BitwiseNot => {
            unreachable!("{} is not a float op", op.name())
        }
    }
}

fn int_unary<T: IntKern>(op: UnaryOp, x: &CpuTensor) -> CpuTensor {
    use UnaryOp::*;
    let g = grain(op.info().cost);
    let six = T::from_i64(6);
    match op {
        Neg => map1::<T, T>(x, g, |a: T| a.wneg()),
        Abs => map1::<T, T>(x, g, |a: T| a.wabs()),
        Relu => map1::<T, T>(x, g, |a: T| a.max(T::ZERO)),
        Relu6 => map1::<T, T>(x, g, |a: T| a.max(T::ZERO).min(six)),
        // integers are their own floor, ceil, round and integer part
        Floor | Ceil | Round | Trunc => x.copy_as(x.dtype()),
        Sign => map1::<T, T>(x, g, |a: T| a.signum_()),
        BitwiseNot => map1::<T, T>(x, g, |a: T| a.bnot()),
        // Every other unary op has a float or bool result, so it never gets here.
        Exp | Log | Sqrt | Rsqrt | Recip | Sin | Cos | Tanh | Erf | Sigmoid | Gelu | GeluTanh
        | Silu | Log1p | Expm1 | Log2 | Exp2 | Tan | Atan | Sinh | Hardswish | Mish | Isnan
        | Isinf | LogicalNot => {
            unreachable!("{} on an integer tensor reaches float_unary", op.name())
        }
    }
}

/// An attributed pointwise op (`leaky_relu`, `elu`, `softplus`, `hardtanh`, `nan_to_num`)
/// through its f64 reference in the table, rounded once to `out`.
pub(crate) fn unary_attrs(op: &Op, x: &CpuTensor, out: DType) -> CpuTensor {
    let Reference::UnaryAttrs(f) = op.info().reference else {
        unreachable!("{} has an attributed reference", op.name())
    };
    let x = x.to_dtype(out);
    with_dtype!(out, T => map1::<T, T>(&x, GRAIN_COSTLY, |a: T| T::from_f64(f(op, a.to_f64()))))
}

/// `clamp(x, lo, hi) = minimum(hi, maximum(lo, x))` in `out`, broadcasting: the bounds
/// come first, so an `x` equal to one is kept (`maximum` gives its second operand on ties).
pub(crate) fn clamp(args: &[EagerArg<'_>], out: DType, shape: &[usize]) -> CpuTensor {
    let lower = binary_in(BinaryOp::Maximum, &args[1], &args[0], out, shape);
    binary_in(
        BinaryOp::Minimum,
        &args[2],
        &EagerArg::Tensor(&lower),
        out,
        shape,
    )
}

/// `op(a, b)` with broadcasting; `out` is the inferred result type, `compute` the promoted
/// dtype of the operands. Integer `remainder` and `fmod` by zero are errors, as in torch.
pub(crate) fn binary(
    op: BinaryOp,
    a: &EagerArg<'_>,
    b: &EagerArg<'_>,
    out_dtype: DType,
    shape: &[usize],
    compute: DType,
) -> Result<CpuTensor, RuntimeError> {
    let bool_result = op.info().dtype == DTypeRule::Bool;
    if matches!(op, BinaryOp::Remainder | BinaryOp::Fmod) && !compute.is_float() {
        let zero = match b {
            EagerArg::Tensor(t) => t.to_dtype(DType::I64).to_f64_vec().contains(&0.0),
            EagerArg::Scalar(s) => s.to_f64() == 0.0,
        };
        if zero {
            let shapes = tensor_shapes(&[a, b]);
            return Err(RuntimeError::unsupported(
                op.name(),
                &shapes,
                "integer division by zero",
            ));
        }
    }
    if bool_result && !op.is_comparison() {
        // logical ops: each operand's truth value in the promoted dtype (torch converts
        // first: a subnormal f32 beside an f16 tensor is 0, so false)
        let (ca, cb) = (converted(a, compute), converted(b, compute));
        let (a, b) = (in_dtype(a, &ca, compute), in_dtype(b, &cb, compute));
        let (a, b) = (Opnd::new(&a, DType::Bool), Opnd::new(&b, DType::Bool));
        return Ok(bool_binary(op, &a, &b, shape));
    }
    let ct = if bool_result { compute } else { out_dtype };
    Ok(binary_in(op, a, b, ct, shape))
}

/// The shapes of the tensor operands among `args` (for errors).
fn tensor_shapes<'t>(args: &[&'t EagerArg<'_>]) -> Vec<&'t [usize]> {
    args.iter()
        .filter_map(|x| match x {
            EagerArg::Tensor(t) => Some(t.shape()),
            EagerArg::Scalar(_) => None,
        })
        .collect()
}

/// A tensor operand of another dtype than `dtype`, converted to it (`None` otherwise).
fn converted(x: &EagerArg<'_>, dtype: DType) -> Option<CpuTensor> {
    match x {
        EagerArg::Tensor(t) if t.dtype() != dtype => Some(t.to_dtype(dtype)),
        _ => None,
    }
}

/// `x` in `dtype`: its conversion `c` (see [`converted`]) or a float literal rounded to it.
fn in_dtype<'a>(x: &EagerArg<'a>, c: &'a Option<CpuTensor>, dtype: DType) -> EagerArg<'a> {
    match (c, x) {
        (Some(t), _) => EagerArg::Tensor(t),
        (None, EagerArg::Scalar(Scalar::Float(v))) if dtype.is_float() => {
            EagerArg::Scalar(Scalar::Float(dtype.round_f64(*v)))
        }
        (None, x) => *x,
    }
}

/// `op(a, b)` computed in `ct` (the result dtype, or the compared dtype).
fn binary_in(
    op: BinaryOp,
    a: &EagerArg<'_>,
    b: &EagerArg<'_>,
    ct: DType,
    shape: &[usize],
) -> CpuTensor {
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
    let g = grain(op.info().cost);
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
        Add => go!(g, |x, y| x + y),
        Sub => go!(g, |x, y| x - y),
        Mul => go!(g, |x, y| x * y),
        Div => go!(g, |x, y| x / y),
        Pow => go!(g, |x, y| x.powf(y)),
        Maximum => go!(g, |x, y| if x.is_nan() || y.is_nan() {
            nan
        } else if x > y {
            x
        } else {
            y
        }),
        Minimum => go!(g, |x, y| if x.is_nan() || y.is_nan() {
            nan
        } else if x < y {
            x
        } else {
            y
        }),
        Fmod => go!(g, |x, y| x.fmod(y)),
        Remainder => go!(g, |x, y| {
            let m = x.fmod(y);
            let zero = <T::C as CFloat>::ZERO;
            if m != zero && ((y < zero) != (m < zero)) {
                m + y
            } else {
                m
            }
        }),
        Atan2 => go!(g, |x, y| x.atan2(y)),
        Eq | Ne | Lt | Le | Gt | Ge => comparisons!(op, a, b, shape, T, |x, y| (x.up(), y.up())),
        LogicalAnd | LogicalOr | LogicalXor | BitwiseAnd | BitwiseOr | BitwiseXor => {
            unreachable!("{} has no float kernel (checked by infer)", op.name())
        }
    }
}

fn int_binary<T: IntKern>(op: BinaryOp, a: &Opnd, b: &Opnd, shape: &[usize]) -> CpuTensor {
    use BinaryOp::*;
    macro_rules! go {
        (|$x:ident, $y:ident| $e:expr) => {
            apply2::<T, T>(a, b, shape, grain(op.info().cost), |$x: T, $y: T| $e)
        };
    }
    match op {
        Add => go!(|x, y| x.wadd(y)),
        Sub => go!(|x, y| x.wsub(y)),
        Mul => go!(|x, y| x.wmul(y)),
        Pow => go!(|x, y| x.wpow(y)),
        Maximum => go!(|x, y| x.max(y)),
        Minimum => go!(|x, y| x.min(y)),
        Remainder => go!(|x, y| x.wremainder(y)),
        Fmod => go!(|x, y| x.wfmod(y)),
        BitwiseAnd => go!(|x, y| x.band(y)),
        BitwiseOr => go!(|x, y| x.bor(y)),
        BitwiseXor => go!(|x, y| x.bxor(y)),
        Eq | Ne | Lt | Le | Gt | Ge => comparisons!(op, a, b, shape, T, |x, y| (x, y)),
        Div | Atan2 => unreachable!("integer {} has a float result", op.name()),
        LogicalAnd | LogicalOr | LogicalXor => unreachable!("logical ops read bools"),
    }
}

fn bool_binary(op: BinaryOp, a: &Opnd, b: &Opnd, shape: &[usize]) -> CpuTensor {
    use BinaryOp::*;
    let go = |f: fn(bool, bool) -> bool| apply2::<bool, bool>(a, b, shape, GRAIN_CHEAP, f);
    match op {
        Maximum | LogicalOr | BitwiseOr => go(|x, y| x | y),
        Minimum | LogicalAnd | BitwiseAnd => go(|x, y| x & y),
        LogicalXor | BitwiseXor => go(|x, y| x ^ y),
        Eq | Ne | Lt | Le | Gt | Ge => {
            comparisons!(op, a, b, shape, bool, |x, y| (x as u8, y as u8))
        }
        Add | Sub | Mul | Div | Pow | Remainder | Fmod | Atan2 => {
            unreachable!("arithmetic on bools is rejected by infer")
        }
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
