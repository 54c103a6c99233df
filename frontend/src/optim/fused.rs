//! Fused updates (torch's `fused=True`): a parameter's whole SGD or AdamW update is one pass
//! over its elements, and all parameters run in one parallel loop (horizontal fusion, the
//! multi-tensor-apply idea), instead of a dozen eager ops, each a kernel and an allocation,
//! per parameter. The parameter and its optimiser state are updated in place (their
//! versions bumped, as in-place ops would); each element is computed in the parameter's
//! dtype in the order of the unfused update (as torch's fused kernels do), so fused and unfused agree to
//! rounding.

use crate::error::{invalid, Result};
use crate::{DType, Element, Tensor};
use kiln_runtime::CpuTensor;
use rayon::prelude::*;

/// A fused update's kind and hyperparameters; its state buffers are, in order of
/// [`Slot::state`], the momentum buffer (SGD with momentum), or the two moments and, with
/// amsgrad, the maximum of the second (AdamW; amsgrad is that third buffer's presence).
#[derive(Clone, Copy, Debug)]
pub(super) enum Update {
    /// torch's SGD
    Sgd(SgdStep),
    /// torch's AdamW
    AdamW(AdamWStep),
}

/// One SGD step's hyperparameters.
#[derive(Clone, Copy, Debug)]
pub(super) struct SgdStep {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// the momentum buffer starts as the gradient (its first step)
    pub first: bool,
}

/// One AdamW step's hyperparameters, with the bias corrections of the parameter's step.
#[derive(Clone, Copy, Debug)]
pub(super) struct AdamWStep {
    pub lr: f64,
    pub b1: f64,
    pub b2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// `sqrt(1 - β2^t)`
    pub c2: f64,
    /// `lr / (1 - β1^t)`
    pub step_size: f64,
}

/// The arithmetic of a fused step, in the parameter's dtype (as torch's fused kernels
/// compute f32 parameters in f32), so the loops vectorise.
trait Real:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + PartialOrd
{
    fn c(x: f64) -> Self;
    fn sqrt(self) -> Self;
}

impl Real for f32 {
    fn c(x: f64) -> f32 {
        x as f32
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
}

impl Real for f64 {
    fn c(x: f64) -> f64 {
        x
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
}

/// SGD over one parameter's elements, torch's order: weight decay into the gradient, the
/// momentum buffer, nesterov, the step.
fn sgd<T: Real>(ps: &mut [T], gs: &[T], buf: Option<&mut [T]>, u: SgdStep) {
    let (lr, m, d, wd) = (
        T::c(-u.lr),
        T::c(u.momentum),
        T::c(1.0 - u.dampening),
        T::c(u.weight_decay),
    );
    let (decay, first, nesterov) = (u.weight_decay != 0.0, u.first, u.nesterov);
    match buf {
        None => {
            for (p, &g) in ps.iter_mut().zip(gs) {
                let g = if decay { g + *p * wd } else { g };
                *p = *p + g * lr;
            }
        }
        Some(buf) => {
            for ((p, &g), b) in ps.iter_mut().zip(gs).zip(buf.iter_mut()) {
                let g = if decay { g + *p * wd } else { g };
                let nb = if first { g } else { *b * m + g * d };
                *b = nb;
                let g = if nesterov { g + nb * m } else { nb };
                *p = *p + g * lr;
            }
        }
    }
}

/// AdamW over one parameter's elements, torch's order: decoupled decay, the first moment
/// (as a lerp), the second, the amsgrad maximum, the bias-corrected step.
fn adamw<T: Real>(
    ps: &mut [T],
    gs: &[T],
    m: &mut [T],
    v: &mut [T],
    vmax: Option<&mut [T]>,
    u: AdamWStep,
) {
    let decay = T::c(1.0 - u.lr * u.weight_decay);
    let (w1, b2t, w2) = (T::c(1.0 - u.b1), T::c(u.b2), T::c(1.0 - u.b2));
    let (c2, eps, step) = (T::c(u.c2), T::c(u.eps), T::c(-u.step_size));
    let has_decay = u.weight_decay != 0.0;
    let one = |p: &mut T, g: T, m: &mut T, v: &mut T, vmax: Option<&mut T>| {
        if has_decay {
            *p = *p * decay;
        }
        *m = *m + (g - *m) * w1;
        *v = *v * b2t + g * g * w2;
        let vv = match vmax {
            Some(x) => {
                if *v > *x {
                    *x = *v;
                }
                *x
            }
            None => *v,
        };
        *p = *p + *m / (vv.sqrt() / c2 + eps) * step;
    };
    match vmax {
        None => {
            for (((p, &g), m), v) in ps.iter_mut().zip(gs).zip(m.iter_mut()).zip(v.iter_mut()) {
                one(p, g, m, v, None);
            }
        }
        Some(x) => {
            for ((((p, &g), m), v), x) in ps
                .iter_mut()
                .zip(gs)
                .zip(m.iter_mut())
                .zip(v.iter_mut())
                .zip(x.iter_mut())
            {
                one(p, g, m, v, Some(x));
            }
        }
    }
}

/// One parameter's part of a fused step.
pub(super) struct Slot<'a> {
    /// the parameter (updated in place)
    pub param: &'a Tensor,
    /// its gradient
    pub grad: Tensor,
    /// its state buffers, of its shape and dtype (updated in place)
    pub state: Vec<&'a Tensor>,
    /// what each element does
    pub update: Update,
}

/// True when `fused` can update `p` in place: a contiguous f32 or f64 tensor on the CPU.
pub(super) fn supported(p: &Tensor) -> bool {
    matches!(p.dtype(), DType::F32 | DType::F64)
        && !p.is_cuda()
        && p.as_cpu().is_ok_and(|c| c.is_contiguous())
}

/// Below this many elements in all, a step runs on the calling thread (waking the pool
/// costs more than the work).
const PARALLEL_ELEMENTS: usize = 1 << 16;

/// Runs every slot's update, the parameters in parallel when there is enough work.
pub(super) fn run(slots: Vec<Slot<'_>>) -> Result<()> {
    let one = |s: &Slot<'_>| match (s.param.dtype(), s.update) {
        (DType::F32, u) => apply::<f32>(s, u),
        (DType::F64, u) => apply::<f64>(s, u),
        (d, _) => Err(invalid(
            "fused optimizer step",
            s.param.shape(),
            format!("parameters must be f32 or f64, got {d}"),
        )),
    };
    let total: usize = slots.iter().map(|s| s.param.numel()).sum();
    if total < PARALLEL_ELEMENTS {
        slots.iter().try_for_each(one)
    } else {
        slots.par_iter().try_for_each(one)
    }
}

fn apply<T: Real>(s: &Slot<'_>, update: Update) -> Result<()> {
    let p = s.param.as_cpu()?;
    let g = s.grad.contiguous()?;
    let g = g.as_cpu()?;
    let n = p.numel();
    let state: Vec<&CpuTensor> = s.state.iter().map(|b| b.as_cpu()).collect::<Result<_>>()?;
    for t in std::iter::once(g).chain(state.iter().copied()) {
        if t.numel() != n || !t.is_contiguous() {
            return Err(invalid(
                "fused optimizer step",
                s.param.shape(),
                format!(
                    "gradient and state must be contiguous and of the parameter's shape, got {:?}",
                    t.shape()
                ),
            ));
        }
    }
    let gr = g.storage().read::<T>()?;
    let gs = &gr[g.offset()..][..n];
    let mut pw = p.storage().write::<T>()?;
    let ps = &mut pw[p.offset()..][..n];
    let mut guards = state
        .iter()
        .map(|b| b.storage().write::<T>())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let bufs: Vec<&mut [T]> = guards
        .iter_mut()
        .zip(&state)
        .map(|(w, b)| &mut w[b.offset()..][..n])
        .collect();
    let mut bufs = bufs.into_iter();
    match update {
        Update::Sgd(u) => sgd(ps, gs, bufs.next(), u),
        Update::AdamW(u) => {
            let (Some(m), Some(v)) = (bufs.next(), bufs.next()) else {
                return Err(invalid(
                    "fused AdamW step",
                    s.param.shape(),
                    "the moments are missing",
                ));
            };
            adamw(ps, gs, m, v, bufs.next(), u)
        }
    }
    Ok(())
}
