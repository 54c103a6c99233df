//! The rules of reductions, layouts, casts, `where` and `matmul`.

use super::*;
use crate::shape::normalize_dim;
use crate::{Dim, Shape};

/// The reduced dims of `x`'s shape (`dims` empty: all), normalised.
pub(super) fn reduced(x: &TensorType, dims: &[i64]) -> Vec<usize> {
    let r = x.shape.rank();
    if dims.is_empty() {
        return (0..r).collect();
    }
    let mut v: Vec<usize> = dims.iter().filter_map(|&d| normalize_dim(d, r)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `g` (a reduction's result gradient) broadcast back to `x`'s shape: size-1 dims put
/// back where the reduction dropped them, then expanded.
pub(super) fn unreduce(
    o: &mut Ops<'_>,
    g: GVal,
    x: &TensorType,
    dims: &[usize],
    keepdim: bool,
) -> Result<GVal, GradError> {
    let mut g = g;
    if !keepdim {
        let kept: Shape = x
            .shape
            .dims()
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if dims.contains(&i) {
                    Dim::Const(1)
                } else {
                    d.clone()
                }
            })
            .collect();
        g = o.apply(Op::Reshape { shape: kept }, &[g.into()])?;
    }
    o.apply(
        Op::Expand {
            shape: x.shape.clone(),
        },
        &[g.into()],
    )
}

fn operand(c: &GradCall<'_>, i: usize) -> GVal {
    match c.args[i] {
        GArg::Val(v) => v,
        GArg::Scalar(_) => unreachable!("the op's type rule makes operand {i} a tensor"),
    }
}

/// `sum`: the gradient broadcast back; `mean`: also divided by the count; `max`/`min`:
/// shared evenly among the elements equal to the result (torch's `amax`/`amin`).
pub fn reduce(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Reduce {
        op,
        ref dims,
        keepdim,
        ..
    } = *c.op
    else {
        unreachable!("a reduction's rule")
    };
    let x = operand(c, 0);
    let xt = o.ty(x);
    if !differentiable(xt.dtype) {
        return Ok(vec![None]);
    }
    let dims = reduced(&xt, dims);
    let g = o.cast(c.grad, xt.dtype)?;
    let ge = unreduce(o, g, &xt, &dims, keepdim)?;
    let gx = match op {
        ReduceOp::Sum => ge,
        ReduceOp::Mean => {
            let mut n = 1usize;
            let mut symbolic = false;
            for &d in &dims {
                match xt.shape.dims()[d] {
                    Dim::Const(k) => n *= k,
                    Dim::Sym(_) => symbolic = true,
                }
            }
            if symbolic {
                // the count is only known when the graph runs: count the elements there
                let ones = o.apply(
                    Op::Full {
                        shape: xt.shape.clone(),
                        value: Scalar::Float(1.0),
                        dtype: xt.dtype,
                    },
                    &[],
                )?;
                let count = o.reduce_sum(ones, dims.iter().map(|&d| d as i64).collect(), true)?;
                o.div(ge, count)?
            } else {
                o.div(ge, n as f64)?
            }
        }
        ReduceOp::Max | ReduceOp::Min => {
            let y = o.cast(c.out, xt.dtype)?;
            let ye = unreduce(o, y, &xt, &dims, keepdim)?;
            let hit = o.binary(BinaryOp::Eq, x, ye)?;
            let hit = o.cast(hit, xt.dtype)?;
            let count = o.reduce_sum(hit, dims.iter().map(|&d| d as i64).collect(), true)?;
            let share = o.div(hit, count)?;
            o.mul(ge, share)?
        }
    };
    Ok(vec![Some(gx)])
}

/// The gradient cast back to the operand's dtype (none for a non-float operand).
pub fn cast(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let x = operand(c, 0);
    let dt = o.ty(x).dtype;
    if !differentiable(dt) {
        return Ok(vec![None]);
    }
    Ok(vec![Some(o.cast(c.grad, dt)?)])
}

/// The gradient reshaped to the operand's shape.
pub fn reshape(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let x = operand(c, 0);
    let shape = o.ty(x).shape;
    Ok(vec![Some(
        o.apply(Op::Reshape { shape }, &[c.grad.into()])?,
    )])
}

/// The same transpose of the gradient.
pub fn transpose(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    Ok(vec![Some(o.apply(c.op.clone(), &[c.grad.into()])?)])
}

/// The gradient permuted back (the inverse permutation).
pub fn permute(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Permute { ref dims } = *c.op else {
        unreachable!("permute's rule")
    };
    let mut inverse = vec![0; dims.len()];
    for (i, &d) in dims.iter().enumerate() {
        inverse[d] = i;
    }
    Ok(vec![Some(
        o.apply(Op::Permute { dims: inverse }, &[c.grad.into()])?,
    )])
}

/// The gradient summed over the expanded dims.
pub fn expand(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let x = operand(c, 0);
    let t = o.ty(x);
    Ok(vec![Some(o.sum_to(c.grad, &t)?)])
}

/// The gradient itself.
pub fn identity(_: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    Ok(vec![Some(c.grad)])
}

/// `where(c, a, b)`: `g` where `c` to `a`, elsewhere to `b`; none to the condition.
pub fn select(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let cond = operand(c, 0);
    let mut out = vec![None];
    for (i, then) in [(1, true), (2, false)] {
        let GArg::Val(v) = c.args[i] else {
            out.push(None);
            continue;
        };
        let g = if then {
            o.select(cond, c.grad, 0.0)?
        } else {
            o.select(cond, 0.0, c.grad)?
        };
        let t = o.ty(v);
        out.push(Some(o.sum_to(g, &t)?));
    }
    Ok(out)
}

/// `x` with its last two dims swapped.
fn t(o: &mut Ops<'_>, x: GVal) -> Result<GVal, GradError> {
    o.apply(Op::Transpose { dim0: -2, dim1: -1 }, &[x.into()])
}

/// `x` reshaped to `dims`.
fn reshaped(o: &mut Ops<'_>, x: GVal, dims: Vec<Dim>) -> Result<GVal, GradError> {
    o.apply(
        Op::Reshape {
            shape: dims.into_iter().collect(),
        },
        &[x.into()],
    )
}

fn matmul(o: &mut Ops<'_>, x: GVal, y: GVal) -> Result<GVal, GradError> {
    o.apply(Op::Matmul, &[x.into(), y.into()])
}

/// torch.matmul's gradients: `g @ bᵀ` and `aᵀ @ g`, with 1-d operands as a row (`a`)
/// or a column (`b`), and batch broadcasting undone by summing.
pub fn matmul_rule(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let (a, b) = (operand(c, 0), operand(c, 1));
    let (at, bt) = (o.ty(a), o.ty(b));
    let g = c.grad;
    let gd = o.ty(g).shape.dims().to_vec();
    let (ra, rb) = (at.shape.rank(), bt.shape.rank());
    let (da, db) = match (ra, rb) {
        (1, 1) => (o.mul(g, b)?, o.mul(g, a)?),
        (1, _) => {
            // a as [1, k]: g gains the row dim it lost
            let mut g2 = gd.clone();
            g2.insert(g2.len() - 1, Dim::Const(1));
            let g2 = reshaped(o, g, g2)?;
            let bt_ = t(o, b)?;
            let da = matmul(o, g2, bt_)?; // [..., 1, k]
            let k = at.shape.dims()[0].clone();
            let a2 = reshaped(o, a, vec![k, Dim::Const(1)])?;
            let db = matmul(o, a2, g2)?; // [..., k, n]
            let row = TensorType::new(
                at.dtype,
                [Dim::Const(1), at.shape.dims()[0].clone()]
                    .into_iter()
                    .collect(),
            );
            let da = o.sum_to(da, &row)?;
            (reshaped(o, da, at.shape.dims().to_vec())?, db)
        }
        (_, 1) => {
            // b as [k, 1]: g gains the column dim it lost
            let mut g2 = gd.clone();
            g2.push(Dim::Const(1));
            let g2 = reshaped(o, g, g2)?;
            let k = bt.shape.dims()[0].clone();
            let b2 = reshaped(o, b, vec![Dim::Const(1), k])?;
            let da = matmul(o, g2, b2)?; // [..., m, k]
            let at_ = t(o, a)?;
            let db = matmul(o, at_, g2)?; // [..., k, 1]
            let col = TensorType::new(
                bt.dtype,
                [bt.shape.dims()[0].clone(), Dim::Const(1)]
                    .into_iter()
                    .collect(),
            );
            let db = o.sum_to(db, &col)?;
            (da, reshaped(o, db, bt.shape.dims().to_vec())?)
        }
        _ => {
            let bt_ = t(o, b)?;
            let da = matmul(o, g, bt_)?;
            // a matrix applied to a batch (`x @ W`): `Σ_batch aᵢᵀ gᵢ` is one product over
            // all rows, `a` as [N, k] and `g` as [N, n], not a batched product summed
            // afterwards (which writes the batch of partial products and reads them again)
            let flat = if rb == 2 && ra > 2 {
                rows_flattened(o, a, g)?
            } else {
                None
            };
            let db = match flat {
                Some((a2, g2)) => {
                    let a2t = t(o, a2)?;
                    matmul(o, a2t, g2)?
                }
                _ => {
                    let at_ = t(o, a)?;
                    matmul(o, at_, g)?
                }
            };
            (da, db)
        }
    };
    Ok(vec![Some(o.sum_to(da, &at)?), Some(o.sum_to(db, &bt)?)])
}

/// `x` and `g` (rank ≥ 3, the same dims but the last) as matrices of their rows,
/// `[d0·d1·…, last]`, when every dim of `x` before the last is a constant (a symbolic
/// product has no `Dim`); `None` otherwise, and then nothing is added.
pub(crate) fn rows_flattened(
    o: &mut Ops<'_>,
    x: GVal,
    g: GVal,
) -> Result<Option<(GVal, GVal)>, GradError> {
    let dims = o.ty(x).shape.dims().to_vec();
    let lead = &dims[..dims.len().saturating_sub(1)];
    let rows = lead
        .iter()
        .try_fold(1usize, |n, d| d.as_const().and_then(|c| n.checked_mul(c)));
    let (Some(rows), true) = (rows, lead.len() >= 2) else {
        return Ok(None);
    };
    let mut flat = |v: GVal| -> Result<GVal, GradError> {
        let last = o.ty(v).shape.dims().last().cloned().expect("rank ≥ 3");
        reshaped(o, v, vec![Dim::Const(rows), last])
    };
    Ok(Some((flat(x)?, flat(g)?)))
}
