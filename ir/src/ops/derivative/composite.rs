//! The rules of the composite ops (softmaxes, norms, `linear`, `var`), the attributed
//! activations, `clamp`, and the copies (`slice`, `cat`, `triu`, `tril`), written with
//! primitives.

use super::structural::{reduced, unreduce};
use super::*;
use crate::shape::normalize_dim;
use crate::{Dim, Shape};

pub(super) fn operand(c: &GradCall<'_>, i: usize) -> Option<GVal> {
    match c.args.get(i) {
        Some(GArg::Val(v)) => Some(*v),
        _ => None,
    }
}

fn x_of(c: &GradCall<'_>) -> GVal {
    operand(c, 0).expect("the op's type rule makes operand 0 a tensor")
}

pub(super) fn build_err(c: &GradCall<'_>, reason: &str) -> GradError {
    GradError::Build {
        op: c.op.name().to_string(),
        reason: reason.to_string(),
    }
}

/// `y (g - Σ g y)` over `dim`
pub fn softmax(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (Op::Softmax { dim } | Op::LogSoftmax { dim }) = *c.op else {
        unreachable!("softmax's rule")
    };
    let gy = o.mul(c.grad, c.out)?;
    let s = o.reduce_sum(gy, vec![dim], true)?;
    let d = o.sub(c.grad, s)?;
    let gx = o.mul(c.out, d)?;
    let t = o.ty(x_of(c));
    Ok(vec![Some(o.cast(gx, t.dtype)?)])
}

/// `g - e^y Σ g` over `dim`
pub fn log_softmax(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::LogSoftmax { dim } = *c.op else {
        unreachable!("log_softmax's rule")
    };
    let p = o.unary(UnaryOp::Exp, c.out)?;
    let s = o.reduce_sum(c.grad, vec![dim], true)?;
    let ps = o.mul(p, s)?;
    let gx = o.sub(c.grad, ps)?;
    let t = o.ty(x_of(c));
    Ok(vec![Some(o.cast(gx, t.dtype)?)])
}

/// `x @ wᵀ + b`: `g @ w`, `Σ gᵀ @ x` over the batch dims, `Σ g` over all but the last
pub fn linear(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (x, w) = (x_of(c), operand(c, 1).expect("linear's weight is a tensor"));
    let (xt, wt) = (o.ty(x), o.ty(w));
    let g = c.grad;
    let gx = o.apply(Op::Matmul, &[g.into(), w.into()])?;
    let gx = o.sum_to(gx, &xt)?;
    let gw = if xt.shape.rank() == 1 {
        let gd = o.ty(g).shape.dims().to_vec();
        let col = o.apply(
            Op::Reshape {
                shape: [gd[0].clone(), Dim::Const(1)].into_iter().collect(),
            },
            &[g.into()],
        )?;
        let row = o.apply(
            Op::Reshape {
                shape: [Dim::Const(1), xt.shape.dims()[0].clone()]
                    .into_iter()
                    .collect(),
            },
            &[x.into()],
        )?;
        o.apply(Op::Matmul, &[col.into(), row.into()])?
    } else {
        // over a batch of rows, one product of all rows (`g` as [N, out], `x` as
        // [N, in]) rather than a batched product summed afterwards
        let (x2, g2) = super::structural::rows_flattened(o, x, g)?.unwrap_or((x, g));
        let gtr = o.apply(Op::Transpose { dim0: -2, dim1: -1 }, &[g2.into()])?;
        o.apply(Op::Matmul, &[gtr.into(), x2.into()])?
    };
    let gw = o.sum_to(gw, &wt)?;
    let mut out = vec![Some(gx), Some(gw)];
    if let Some(b) = operand(c, 2) {
        let bt = o.ty(b);
        out.push(Some(o.sum_to(g, &bt)?));
    }
    Ok(out)
}

/// The constant count of elements over `dims` of `t` (an error for a symbolic one).
fn count(c: &GradCall<'_>, t: &TensorType, dims: &[usize]) -> Result<usize, GradError> {
    dims.iter()
        .try_fold(1usize, |n, &d| match t.shape.dims()[d] {
            Dim::Const(k) => Ok(n * k),
            Dim::Sym(_) => Err(build_err(
                c,
                "a count over a symbolic dim (not known while the gradient is built)",
            )),
        })
}

/// `2 g (x - mean) / (n - correction)`
pub fn var(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Var {
        ref dims,
        correction,
        keepdim,
    } = *c.op
    else {
        unreachable!("var's rule")
    };
    let x = x_of(c);
    let t = o.ty(x);
    let dims = reduced(&t, dims);
    let n = count(c, &t, &dims)?;
    let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let s = o.reduce_sum(x, d, true)?;
    let m = o.div(s, n as f64)?;
    let xc = o.sub(x, m)?;
    let g = o.cast(c.grad, t.dtype)?;
    let ge = unreduce(o, g, &t, &dims, keepdim)?;
    let k = 2.0 / (n as f64 - correction as f64).max(0.0);
    let gx = o.mul(ge, xc)?;
    Ok(vec![Some(o.mul(gx, k)?)])
}

/// Layer norm's and RMS norm's gradients over the last `ndim` dims: with `x̂ = (x - μ)·r`
/// (RMS: `x̂ = x·r`), `r = 1/√(v + eps)` and `ĝ = g·w`, `dx = r (ĝ - mean(ĝ) - x̂
/// mean(ĝ x̂))` (RMS: no `mean(ĝ)` term), `dw = Σ g x̂`, `db = Σ g`.
fn norm(o: &mut Ops<'_>, c: &GradCall<'_>, ndim: usize, eps: f64, centred: bool) -> Out {
    let x = x_of(c);
    let t = o.ty(x);
    let r = t.shape.rank();
    let dims: Vec<usize> = (r.saturating_sub(ndim)..r).collect();
    let n = count(c, &t, &dims)? as f64;
    let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let xc = if centred {
        let s = o.reduce_sum(x, d.clone(), true)?;
        let m = o.div(s, n)?;
        o.sub(x, m)?
    } else {
        x
    };
    let sq = o.mul(xc, xc)?;
    let ss = o.reduce_sum(sq, d.clone(), true)?;
    let v = o.div(ss, n)?;
    let ve = o.add(v, eps)?;
    let rs = o.unary(UnaryOp::Rsqrt, ve)?;
    let xh = o.mul(xc, rs)?;
    let g = o.cast(c.grad, t.dtype)?;
    let gh = match operand(c, 1) {
        Some(w) => o.mul(g, w)?,
        None => g,
    };
    let ghx = o.mul(gh, xh)?;
    let s2 = o.reduce_sum(ghx, d.clone(), true)?;
    let m2 = o.div(s2, n)?;
    let xm2 = o.mul(xh, m2)?;
    let mut inner = o.sub(gh, xm2)?;
    if centred {
        let s1 = o.reduce_sum(gh, d.clone(), true)?;
        let m1 = o.div(s1, n)?;
        inner = o.sub(inner, m1)?;
    }
    let gx = o.mul(rs, inner)?;
    let mut out = vec![Some(gx)];
    if let Some(w) = operand(c, 1) {
        let wt = o.ty(w);
        let gxh = o.mul(g, xh)?;
        out.push(Some(o.sum_to(gxh, &wt)?));
    }
    if let Some(b) = operand(c, 2) {
        let bt = o.ty(b);
        out.push(Some(o.sum_to(g, &bt)?));
    }
    Ok(out)
}

/// `layer_norm`'s gradients (see `norm`)
pub fn layer_norm(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::LayerNorm { ndim, eps } = *c.op else {
        unreachable!("layer_norm's rule")
    };
    norm(o, c, ndim, eps.get(), true)
}

/// `rms_norm`'s gradients (see `norm`)
pub fn rms_norm(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::RmsNorm { ndim, eps } = *c.op else {
        unreachable!("rms_norm's rule")
    };
    norm(o, c, ndim, eps.get(), false)
}

/// `g` times a 0/1 mask of `x`, cast to the gradient's dtype.
fn masked(o: &mut Ops<'_>, c: &GradCall<'_>, mask: GVal) -> Out {
    let x = x_of(c);
    let t = o.ty(x);
    let z = o.select(mask, c.grad, 0.0)?;
    Ok(vec![Some(o.sum_to(z, &t)?)])
}

/// `clamp(x, lo, hi)`: `g` to `x` where `lo ≤ x ≤ hi`, to `lo` where `x < lo`, to `hi`
/// where `x > hi` (torch)
pub fn clamp(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (x, lo, hi) = (c.args[0], c.args[1], c.args[2]);
    let ge = o.apply(Op::Binary(BinaryOp::Ge), &[x, lo])?;
    let le = o.apply(Op::Binary(BinaryOp::Le), &[x, hi])?;
    let inside = o.binary(BinaryOp::LogicalAnd, ge, le)?;
    let mut out = masked(o, c, inside)?;
    for (i, below) in [(1, true), (2, false)] {
        let Some(b) = operand(c, i) else {
            out.push(None);
            continue;
        };
        // torch's clamp_backward_min_max: the lower bound gets `g` where `x < lo` and
        // `lo < hi`; the upper bound where `x > hi` or `hi < lo` (it wins then)
        let m = if below {
            let past = o.apply(Op::Binary(BinaryOp::Lt), &[x, lo])?;
            let ordered = o.apply(Op::Binary(BinaryOp::Lt), &[lo, hi])?;
            o.binary(BinaryOp::LogicalAnd, past, ordered)?
        } else {
            let past = o.apply(Op::Binary(BinaryOp::Gt), &[x, hi])?;
            let wins = o.apply(Op::Binary(BinaryOp::Lt), &[hi, lo])?;
            o.binary(BinaryOp::LogicalOr, past, wins)?
        };
        let z = o.select(m, c.grad, 0.0)?;
        let bt = o.ty(b);
        out.push(Some(o.sum_to(z, &bt)?));
    }
    Ok(out)
}

/// `g` where `min_val < x < max_val` (torch's hardtanh backward)
pub fn hardtanh(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Hardtanh { min_val, max_val } = *c.op else {
        unreachable!("hardtanh's rule")
    };
    let x = x_of(c);
    let a = o.binary(BinaryOp::Gt, x, min_val.get())?;
    let b = o.binary(BinaryOp::Lt, x, max_val.get())?;
    let m = o.binary(BinaryOp::LogicalAnd, a, b)?;
    masked(o, c, m)
}

/// `g` where `x > 0`, else `g·negative_slope`
pub fn leaky_relu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::LeakyRelu { negative_slope } = *c.op else {
        unreachable!("leaky_relu's rule")
    };
    let x = x_of(c);
    let pos = o.binary(BinaryOp::Gt, x, 0.0)?;
    let d = o.select(pos, 1.0, negative_slope.get())?;
    Ok(vec![o.through(c, 0, d)?])
}

/// `g` where `x > 0`, else `g (y + alpha)`
pub fn elu(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Elu { alpha } = *c.op else {
        unreachable!("elu's rule")
    };
    let x = x_of(c);
    let pos = o.binary(BinaryOp::Gt, x, 0.0)?;
    let ya = o.add(c.out, alpha.get())?;
    let d = o.select(pos, 1.0, ya)?;
    Ok(vec![o.through(c, 0, d)?])
}

/// `g` where `βx > threshold`, else `g sigmoid(βx)`
pub fn softplus(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Softplus { beta, threshold } = *c.op else {
        unreachable!("softplus's rule")
    };
    let x = x_of(c);
    let bx = o.mul(x, beta.get())?;
    let s = o.unary(UnaryOp::Sigmoid, bx)?;
    let big = o.binary(BinaryOp::Gt, bx, threshold.get())?;
    let d = o.select(big, 1.0, s)?;
    Ok(vec![o.through(c, 0, d)?])
}

/// `g` where `x` is finite, else 0 (torch)
pub fn nan_to_num(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let x = x_of(c);
    let nan = o.unary(UnaryOp::Isnan, x)?;
    let inf = o.unary(UnaryOp::Isinf, x)?;
    let bad = o.binary(BinaryOp::LogicalOr, nan, inf)?;
    let z = o.select(bad, 0.0, c.grad)?;
    let t = o.ty(x);
    Ok(vec![Some(o.sum_to(z, &t)?)])
}

/// The same `triu`/`tril` of the gradient.
pub fn same_op(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    Ok(vec![Some(o.apply(c.op.clone(), &[c.grad.into()])?)])
}

/// Zeros of `dtype` over `shape`.
pub(super) fn zeros(o: &mut Ops<'_>, shape: Shape, dtype: DType) -> Result<GVal, GradError> {
    o.apply(
        Op::Full {
            shape,
            value: Scalar::Float(0.0),
            dtype,
        },
        &[],
    )
}

/// A slice's gradient: zeros before and after the sliced range around `g` (step 1), or
/// `g` scattered to the positions taken (a step).
pub fn slice(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Slice {
        dim,
        start,
        end,
        step,
    } = *c.op
    else {
        unreachable!("slice's rule")
    };
    let x = x_of(c);
    let t = o.ty(x);
    let d = normalize_dim(dim, t.shape.rank()).expect("a verified slice's dim");
    let Dim::Const(size) = t.shape.dims()[d] else {
        return Err(build_err(c, "a slice of a symbolic dim"));
    };
    let end = end.min(size);
    if step != 1 {
        // a strided slice scatters its gradient to the positions it took
        let at = super::index::positions(o, start, end.max(start), step)?;
        return Ok(vec![Some(super::index::scatter(o, &t, d, at, c.grad)?)]);
    }
    let g = o.cast(c.grad, t.dtype)?;
    let mut parts: Vec<GArg> = Vec::new();
    for len in [start, size.saturating_sub(end)] {
        parts.push(if len == 0 {
            GArg::Scalar(Scalar::Float(0.0))
        } else {
            let mut shape = t.shape.clone();
            shape.0[d] = Dim::Const(len);
            zeros(o, shape, t.dtype)?.into()
        });
    }
    let args: Vec<GArg> = [parts[0], g.into(), parts[1]]
        .into_iter()
        .filter(|a| matches!(a, GArg::Val(_)))
        .collect();
    if args.len() == 1 {
        return Ok(vec![Some(g)]);
    }
    Ok(vec![Some(o.apply(Op::Cat { dim: d as i64 }, &args)?)])
}

/// `cat`'s gradients: the gradient's slice for each operand.
pub fn cat(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Cat { dim } = *c.op else {
        unreachable!("cat's rule")
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    for a in c.args {
        let GArg::Val(v) = *a else {
            out.push(None);
            continue;
        };
        let t = o.ty(v);
        let d = normalize_dim(dim, t.shape.rank()).expect("a verified cat's dim");
        let Dim::Const(len) = t.shape.dims()[d] else {
            return Err(build_err(c, "a cat along a symbolic dim"));
        };
        let part = o.apply(
            Op::Slice {
                dim: d as i64,
                start: at,
                end: at + len,
                step: 1,
            },
            &[c.grad.into()],
        )?;
        out.push(differentiable(t.dtype).then_some(part));
        at += len;
    }
    Ok(out)
}
