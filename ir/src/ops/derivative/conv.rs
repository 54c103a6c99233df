//! The convolution's rule, written with convolutions (as torch's `convolution_backward`):
//! the input's gradient is the adjoint convolution of the result's gradient with the same
//! weight (a forward convolution's is transposed, a transposed one's is forward), and the
//! weight's gradient correlates the input with the result's gradient, itself a forward
//! convolution with the batch and channel dims swapped and stride and dilation exchanged.

use super::composite::{build_err, operand};
use super::*;
use crate::conv::ConvGeometry;
use crate::Dim;

/// The constant sizes of `t`'s dims from `from` on.
fn sizes(c: &GradCall<'_>, t: &TensorType, from: usize) -> Result<Vec<usize>, GradError> {
    t.shape.dims()[from..]
        .iter()
        .map(|d| {
            d.as_const()
                .ok_or_else(|| build_err(c, "a convolution with a symbolic channel or spatial dim"))
        })
        .collect()
}

fn conv(
    o: &mut Ops<'_>,
    x: GVal,
    w: GVal,
    g: &ConvGeometry<'_>,
    transposed: bool,
    output_padding: Vec<usize>,
) -> Result<GVal, GradError> {
    let op = Op::Convolution {
        stride: g.stride.to_vec(),
        padding: g.padding.to_vec(),
        dilation: g.dilation.to_vec(),
        transposed,
        output_padding,
        groups: g.groups,
    };
    o.apply(op, &[x.into(), w.into()])
}

fn reshaped(o: &mut Ops<'_>, x: GVal, dims: Vec<Dim>) -> Result<GVal, GradError> {
    let shape = dims.into_iter().collect();
    o.apply(Op::Reshape { shape }, &[x.into()])
}

fn permuted(o: &mut Ops<'_>, x: GVal, dims: Vec<usize>) -> Result<GVal, GradError> {
    o.apply(Op::Permute { dims }, &[x.into()])
}

/// The weight gradient `[R, C/G, *K]` of a forward convolution of `input [N, C, *S]` whose
/// result's gradient is `gout [N, R, *L]`: per group, `Σ_{n,l} gout[n, r, l] ·
/// input[n, c, l·s + k·d - p]`, computed as the forward convolution of `input` seen as
/// `[C/G, G·N, *S]` with `gout` seen as the weight `[G·R/G, N, *L]` (stride `d`, dilation
/// `s`), whose result `[C/G, R, *K']` (K' ≥ K) is cut to `K` and permuted.
fn weight_grad(
    o: &mut Ops<'_>,
    c: &GradCall<'_>,
    input: GVal,
    gout: GVal,
    kernel: &[usize],
    g: &ConvGeometry<'_>,
) -> Result<GVal, GradError> {
    let (it, gt) = (o.ty(input), o.ty(gout));
    let groups = g.groups;
    let (cin, r) = (sizes(c, &it, 1)?[0], sizes(c, &gt, 1)?[0]);
    let (space, out_space) = (sizes(c, &it, 2)?, sizes(c, &gt, 2)?);
    let n = it.shape.dims()[0].clone();
    let (cg, rg) = (cin / groups, r / groups);
    let batch_groups = match (&n, groups) {
        (_, 1) => n.clone(),
        (Dim::Const(k), _) => Dim::Const(k * groups),
        (Dim::Sym(_), _) => {
            return Err(build_err(
                c,
                "a grouped convolution's gradient with a symbolic batch",
            ))
        }
    };
    let rank = space.len();
    let spatial = |v: &[usize]| v.iter().map(|&s| Dim::Const(s)).collect::<Vec<_>>();
    let tail: Vec<usize> = (3..3 + rank).collect();
    // input [N, G, Cg, *S] -> [Cg, G, N, *S] -> [Cg, G·N, *S]
    let mut dims = vec![n.clone(), Dim::Const(groups), Dim::Const(cg)];
    dims.extend(spatial(&space));
    let xs = reshaped(o, input, dims)?;
    let xs = permuted(o, xs, [vec![2, 1, 0], tail.clone()].concat())?;
    let mut dims = vec![Dim::Const(cg), batch_groups];
    dims.extend(spatial(&space));
    let xs = reshaped(o, xs, dims)?;
    // gout [N, G, Rg, *L] -> [G, Rg, N, *L] -> [G·Rg, N, *L]
    let mut dims = vec![n.clone(), Dim::Const(groups), Dim::Const(rg)];
    dims.extend(spatial(&out_space));
    let gs = reshaped(o, gout, dims)?;
    let gs = permuted(o, gs, [vec![1, 2, 0], tail].concat())?;
    let mut dims = vec![Dim::Const(r), n];
    dims.extend(spatial(&out_space));
    let gs = reshaped(o, gs, dims)?;
    let swapped = ConvGeometry {
        stride: g.dilation,
        dilation: g.stride,
        ..g.clone()
    };
    let mut gw = conv(o, xs, gs, &swapped, false, vec![0; rank])?;
    let got = sizes(c, &o.ty(gw), 2)?;
    for (i, (&have, &want)) in got.iter().zip(kernel).enumerate() {
        if have != want {
            let cut = Op::Slice {
                dim: (i + 2) as i64,
                start: 0,
                end: want,
                step: 1,
            };
            gw = o.apply(cut, &[gw.into()])?;
        }
    }
    let order: Vec<usize> = [vec![1, 0], (2..2 + rank).collect()].concat();
    permuted(o, gw, order)
}

/// A convolution's operand gradients (see the module docs).
pub fn convolution(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    let g = ConvGeometry::of(c.op).expect("the convolution's rule");
    let x = operand(c, 0).expect("a convolution's input is a tensor");
    let w = operand(c, 1).expect("a convolution's weight is a tensor");
    let (xt, wt) = (o.ty(x), o.ty(w));
    let (space, kernel) = (sizes(c, &xt, 2)?, sizes(c, &wt, 2)?);
    let rank = space.len();
    let grad = o.cast(c.grad, xt.dtype)?;
    if g.transposed {
        // x's gradient: the forward convolution of the gradient, which has x's sizes
        let gx = conv(o, grad, w, &g, false, vec![0; rank])?;
        let gw = weight_grad(o, c, grad, x, &kernel, &g)?;
        return Ok(vec![Some(gx), Some(gw)]);
    }
    // x's gradient: the transposed convolution, padded at the end to x's sizes
    let out_space = sizes(c, &o.ty(grad), 2)?;
    let extra = (0..rank)
        .map(|i| {
            let made = (out_space[i] - 1) * g.stride[i] + g.dilation[i] * (kernel[i] - 1) + 1;
            (space[i] + 2 * g.padding[i]).saturating_sub(made)
        })
        .collect();
    let gx = conv(o, grad, w, &g, true, extra)?;
    let gw = weight_grad(o, c, x, grad, &kernel, &g)?;
    Ok(vec![Some(gx), Some(gw)])
}
