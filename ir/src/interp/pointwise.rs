//! Pointwise ops (unary, binary, where), in-place updates and creation ops.

use super::index::{broadcast_strides, for_each_offsets};
use super::{tensor, Fail, Operand, Out, Value};
use crate::ops::{eval_int_binary, eval_int_unary, Reference};
use crate::{result_type, rng, BinaryOp, DType, DTypeRule, InplaceOp, Op, Scalar, UnaryOp};
use std::borrow::Cow;

/// An operand read with broadcasting into the output shape: its data (a scalar becomes a
/// one-element vector) and its strides over the output dims.
struct Bcast<'a> {
    data: Cow<'a, [f64]>,
    strides: Vec<usize>,
}

fn bcast<'a>(a: Operand<'a>, out: &[usize]) -> Bcast<'a> {
    match a {
        Operand::Tensor(v) => Bcast {
            data: Cow::Borrowed(&v.data),
            strides: broadcast_strides(&v.shape, out),
        },
        Operand::Scalar(s) => Bcast {
            data: Cow::Owned(vec![s.to_f64()]),
            strides: vec![0; out.len()],
        },
    }
}

/// `op(x)`: the operand is converted to the result dtype (int to float for exp, ...),
/// computed in f64 and rounded; ops with a bool result (`isnan`) read it as it is.
pub(crate) fn unary(op: UnaryOp, x: &Value, out: &Out) -> Value {
    let d = out.dtype;
    let keep_input = op.info().dtype == DTypeRule::Bool;
    out.finish(
        x.data
            .iter()
            .map(|&v| {
                let v = if keep_input { v } else { d.round_f64(v) };
                let y = if op == UnaryOp::BitwiseNot && d == DType::Bool {
                    // `~` on bools is logical not
                    (v == 0.0) as u8 as f64
                } else if let Some(r) = eval_int_unary(op, v as i64, d) {
                    // integers wrap exactly (`-i64::MIN` is itself)
                    r as f64
                } else {
                    op.eval_f64(v)
                };
                d.wrap_f64(y)
            })
            .collect(),
    )
}

/// An attributed pointwise op (`leaky_relu`, ...) through its table reference.
pub(crate) fn unary_attrs(op: &Op, x: &Value, out: &Out) -> Value {
    let d = out.dtype;
    let f = match op.info().reference {
        Reference::UnaryAttrs(f) => f,
        _ => return out.finish(vec![f64::NAN; out.numel()]),
    };
    out.finish(
        x.data
            .iter()
            .map(|&v| d.wrap_f64(f(op, d.round_f64(v))))
            .collect(),
    )
}

/// A three-operand pointwise op (`clamp`) through its table reference, operands rounded
/// to the result dtype and broadcast.
pub(crate) fn ternary(op: &Op, args: &[Operand<'_>], out: &Out) -> Value {
    let Reference::Ternary(f) = op.info().reference else {
        return out.finish(vec![f64::NAN; out.numel()]);
    };
    let d = out.dtype;
    let (a, b, c) = (
        bcast(args[0], &out.shape),
        bcast(args[1], &out.shape),
        bcast(args[2], &out.shape),
    );
    let mut data = Vec::with_capacity(out.numel());
    for_each_offsets(
        &out.shape,
        [&a.strides, &b.strides, &c.strides],
        |[i, j, k]| {
            let y = f(
                d.round_f64(a.data[i]),
                d.round_f64(b.data[j]),
                d.round_f64(c.data[k]),
            );
            data.push(d.wrap_f64(y));
        },
    );
    out.finish(data)
}

/// `a op b` with broadcasting; both operands are rounded to the promoted dtype first
/// (comparisons compare in it too). Integer `remainder` and `fmod` by zero are errors, as
/// in PyTorch.
pub(crate) fn binary(
    op: BinaryOp,
    a: Operand<'_>,
    b: Operand<'_>,
    out: &Out,
) -> Result<Value, super::Fail> {
    let common = result_type(&[a.arg_type(), b.arg_type()]);
    let (x, y) = (bcast(a, &out.shape), bcast(b, &out.shape));
    let int_division = matches!(op, BinaryOp::Remainder | BinaryOp::Fmod) && !common.is_float();
    if int_division && y.data.iter().any(|&v| common.round_f64(v) == 0.0) {
        return Err(format!("{}: integer division by zero", op.name()));
    }
    let mut data = Vec::with_capacity(out.numel());
    for_each_offsets(&out.shape, [&x.strides, &y.strides], |[i, j]| {
        let (a, b) = (common.round_f64(x.data[i]), common.round_f64(y.data[j]));
        // integer arithmetic wraps exactly (f64 products past 2^53 are not exact)
        let v = match eval_int_binary(op, a as i64, b as i64, out.dtype) {
            Some(r) if common == out.dtype => r as f64,
            _ => op.eval_f64(a, b),
        };
        data.push(out.dtype.wrap_f64(v));
    });
    Ok(out.finish(data))
}

/// `where(cond, a, b)` with broadcasting over all three operands.
pub(crate) fn select(args: &[Operand<'_>], out: &Out) -> Value {
    let common = out.dtype;
    let (c, a, b) = (
        bcast(args[0], &out.shape),
        bcast(args[1], &out.shape),
        bcast(args[2], &out.shape),
    );
    let mut data = Vec::with_capacity(out.numel());
    for_each_offsets(
        &out.shape,
        [&c.strides, &a.strides, &b.strides],
        |[i, j, k]| {
            let v = if c.data[i] != 0.0 {
                a.data[j]
            } else {
                b.data[k]
            };
            data.push(common.round_f64(v));
        },
    );
    out.finish(data)
}

/// The in-place ops, functionally: the new value of operand 0.
pub(crate) fn inplace(op: InplaceOp, args: &[Operand<'_>], out: &Out) -> Result<Value, Fail> {
    let dst = tensor(args, 0)?;
    match op {
        InplaceOp::Copy => {
            let src = bcast(Operand::Tensor(tensor(args, 1)?), &out.shape);
            let mut data = Vec::with_capacity(out.numel());
            for_each_offsets(&out.shape, [&src.strides], |[i]| data.push(src.data[i]));
            Ok(out.finish(data))
        }
        InplaceOp::Fill => {
            let v = match args[1] {
                Operand::Scalar(s) => s.to_f64(),
                Operand::Tensor(t) => t.data[0],
            };
            Ok(out.finish(vec![v; out.numel()]))
        }
        InplaceOp::Add | InplaceOp::Mul => {
            let b = if op == InplaceOp::Add {
                BinaryOp::Add
            } else {
                BinaryOp::Mul
            };
            // Computed in the promoted type, then rounded to the destination's dtype.
            let common = result_type(&[args[0].arg_type(), args[1].arg_type()]);
            let promoted = Out {
                dtype: common,
                shape: out.shape.clone(),
            };
            let r = binary(b, Operand::Tensor(dst), args[1], &promoted)?;
            Ok(out.finish(r.data))
        }
    }
}

/// `full(shape, value)`: the value rounded to the dtype.
pub(crate) fn full(value: Scalar, out: &Out) -> Value {
    out.finish(vec![value.to_f64(); out.numel()])
}

/// `arange`: element i is `start + i*step`, rounded to the dtype.
pub(crate) fn arange(start: f64, step: f64, out: &Out) -> Value {
    out.finish((0..out.numel()).map(|i| start + i as f64 * step).collect())
}

/// `rand` / `randn`: element i (row-major) is the counter-based sample `(seed, i)`.
pub(crate) fn random(seed: u64, normal: bool, out: &Out) -> Value {
    let f = if normal { rng::normal } else { rng::uniform };
    out.finish((0..out.numel() as u64).map(|i| f(seed, i)).collect())
}
