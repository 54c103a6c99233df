//! The rules of the indexing ops: `index_select`, `embedding` and strided slices scatter
//! their gradient back with `index_add` (repeated indices accumulate), and `index_add`
//! gathers its source's gradient with `index_select`.

use super::composite::{build_err, operand, zeros};
use super::*;
use crate::shape::normalize_dim;
use crate::{Dim, Shape, F64};

/// `zeros(x).index_add(dim, idx, g)`: the gradient of a gather along `dim` of a value of
/// type `x`.
pub(super) fn scatter(
    o: &mut Ops<'_>,
    x: &TensorType,
    dim: usize,
    idx: GVal,
    g: GVal,
) -> Result<GVal, GradError> {
    let g = o.cast(g, x.dtype)?;
    let z = zeros(o, x.shape.clone(), x.dtype)?;
    o.apply(
        Op::IndexAdd { dim: dim as i64 },
        &[z.into(), idx.into(), g.into()],
    )
}

/// The indices `start, start + step, …` below `end`, as i64: a strided slice's positions.
pub(super) fn positions(
    o: &mut Ops<'_>,
    start: usize,
    end: usize,
    step: usize,
) -> Result<GVal, GradError> {
    o.apply(
        Op::Arange {
            start: F64::new(start as f64),
            end: F64::new(end as f64),
            step: F64::new(step as f64),
            dtype: DType::I64,
        },
        &[],
    )
}

/// `index_select`: the gradient scattered back to the selected rows (torch's
/// `index_select_backward`: `zeros.index_add_(dim, index, grad)`); the indices get none.
pub fn index_select(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::IndexSelect { dim } = *c.op else {
        unreachable!("index_select's rule")
    };
    let (Some(x), Some(idx)) = (operand(c, 0), operand(c, 1)) else {
        return Err(build_err(c, "operands must be tensors"));
    };
    let t = o.ty(x);
    if !differentiable(t.dtype) {
        return Ok(vec![None, None]);
    }
    let d = normalize_dim(dim, t.shape.rank()).expect("a verified index_select's dim");
    Ok(vec![Some(scatter(o, &t, d, idx, c.grad)?), None])
}

/// `index_add`: `x`'s gradient is the gradient itself; the source's is the gradient
/// gathered at the indices (`grad.index_select(dim, index)`); the indices get none.
pub fn index_add(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::IndexAdd { dim } = *c.op else {
        unreachable!("index_add's rule")
    };
    let (Some(x), Some(idx), Some(src)) = (operand(c, 0), operand(c, 1), operand(c, 2)) else {
        return Err(build_err(c, "operands must be tensors"));
    };
    let (tx, ts) = (o.ty(x), o.ty(src));
    let gx = if differentiable(tx.dtype) {
        Some(o.cast(c.grad, tx.dtype)?)
    } else {
        None
    };
    let gs = if differentiable(ts.dtype) {
        let d = normalize_dim(dim, tx.shape.rank()).expect("a verified index_add's dim");
        let picked = o.apply(
            Op::IndexSelect { dim: d as i64 },
            &[c.grad.into(), idx.into()],
        )?;
        Some(o.cast(picked, ts.dtype)?)
    } else {
        None
    };
    Ok(vec![gx, None, gs])
}

/// `embedding`: the gradient scattered back to the weight's rows (torch's
/// `embedding_dense_backward`), with nothing flowing to row `padding_idx`; the indices get
/// none.
pub fn embedding(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let Op::Embedding { padding_idx } = *c.op else {
        unreachable!("embedding's rule")
    };
    let (Some(w), Some(idx)) = (operand(c, 0), operand(c, 1)) else {
        return Err(build_err(c, "operands must be tensors"));
    };
    let t = o.ty(w);
    if !differentiable(t.dtype) {
        return Ok(vec![None, None]);
    }
    let mut g = c.grad;
    if let Some(p) = padding_idx {
        let p = if p < 0 {
            let Dim::Const(rows) = t.shape.dims()[0] else {
                return Err(build_err(
                    c,
                    "a negative padding_idx of a table with a symbolic number of rows",
                ));
            };
            p + rows as i64
        } else {
            p
        };
        // rows of the gradient looked up at the padding index become zero
        let keep = o.binary(BinaryOp::Ne, idx, GArg::Scalar(Scalar::Int(p)))?;
        let mut dims = o.ty(idx).shape.dims().to_vec();
        dims.push(Dim::Const(1));
        let keep = o.apply(
            Op::Reshape {
                shape: Shape(dims.into()),
            },
            &[keep.into()],
        )?;
        g = o.select(keep, g, 0.0)?;
    }
    Ok(vec![Some(scatter(o, &t, 0, idx, g)?), None])
}
