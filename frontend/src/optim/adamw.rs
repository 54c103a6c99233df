//! Adam with decoupled weight decay, as `torch.optim.AdamW` computes it.

use super::{check_params, find, fused, Optimizer};
use crate::autograd::no_grad;
use crate::compile::lazy::untraced;
use crate::error::{Error, Result};
use crate::{DType, Operand, Tensor};
use kiln_ir::{BinaryOp, Op};
use parking_lot::Mutex;
use std::sync::Arc;

/// One parameter's moments. All are tensors updated in place (the step count too, a 0-d
/// f64 tensor, as torch's `capturable` state), so that a compiled training step reads and
/// writes them through the graph, and the next call, compiled or eager, sees them.
#[derive(Clone)]
struct Moments {
    step: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Option<Tensor>,
}

/// `torch.optim.AdamW`, in its order: `p *= 1 - lr·wd`; `m = lerp(m, g, 1 - β1)`; `v = β2·v
/// + (1 - β2)·g²`; with `c1 = 1 - β1^t`, `c2 = 1 - β2^t`: `denom = √v / √c2 + eps` (amsgrad:
/// the running maximum of `v`), `p -= (lr / c1)·m / denom`.
pub struct AdamW {
    params: Vec<Tensor>,
    /// the hyperparameters, shared with the guards of compiled steps that baked them in
    hyper: Arc<Mutex<AdamWOptions>>,
    /// one fused pass per parameter, all parameters in one parallel loop (torch's
    /// `fused=True`; see [`AdamW::fused`])
    pub fused: bool,
    state: Vec<Option<Moments>>,
}

/// AdamW's hyperparameters. Inside a compiled training step they are constants of the
/// graph, guarded: changing one (with [`AdamW::set_options`] or [`AdamW::set_lr`])
/// recompiles the step on its next call, as torch.compile does when a `param_groups` value
/// changes; a cached graph never runs with old values.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamWOptions {
    /// learning rate
    pub lr: f64,
    /// (β1, β2)
    pub betas: (f64, f64),
    /// added to the denominator
    pub eps: f64,
    /// decoupled weight decay (torch's default 0.01)
    pub weight_decay: f64,
    /// keep the maximum of the second moments
    pub amsgrad: bool,
}

impl AdamWOptions {
    /// Torch's checks of AdamW's hyperparameters (its messages): a finite learning rate
    /// and epsilon at least 0, betas in `[0, 1)`, a weight decay at least 0.
    pub fn check(&self) -> Result<()> {
        let (b1, b2) = self.betas;
        let bad = if !(self.lr >= 0.0 && self.lr.is_finite()) {
            format!("Invalid learning rate: {}", self.lr)
        } else if !(self.eps >= 0.0 && self.eps.is_finite()) {
            format!("Invalid epsilon value: {}", self.eps)
        } else if !(0.0..1.0).contains(&b1) {
            format!("Invalid beta parameter at index 0: {b1}")
        } else if !(0.0..1.0).contains(&b2) {
            format!("Invalid beta parameter at index 1: {b2}")
        } else if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            format!("Invalid weight_decay value: {}", self.weight_decay)
        } else {
            return Ok(());
        };
        Err(Error::Autograd(format!("AdamW: {bad}")))
    }
}

/// The bias corrections of one step count: `-lr / (1 - β1^t)` and `√(1 - β2^t)`, as
/// numbers (eager) or as 0-d f64 values of the graph (inside a compiled step, so that the
/// count advances on every call).
#[derive(Clone)]
enum Corrections {
    Numbers(f64, f64),
    Traced(Box<(Tensor, Tensor)>),
}

impl Moments {
    /// Zero moments for `p`, counting steps in `step`.
    fn new(p: &Tensor, amsgrad: bool, step: Tensor) -> Result<Moments> {
        let zeros = || Tensor::zeros(p.shape(), p.dtype());
        Ok(Moments {
            step,
            exp_avg: zeros()?,
            exp_avg_sq: zeros()?,
            max_exp_avg_sq: amsgrad.then(zeros).transpose()?,
        })
    }
}

/// A copy of `t` the optimiser owns (its state is updated in place).
fn own(t: Tensor) -> Result<Tensor> {
    let c = Tensor::zeros(t.shape(), t.dtype())?;
    c.copy_(&t)?;
    Ok(c)
}

impl AdamW {
    /// AdamW over `params` with torch's defaults (betas (0.9, 0.999), eps 1e-8, weight
    /// decay 0.01, no amsgrad).
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<AdamW> {
        check_params("AdamW", &params, lr)?;
        let n = params.len();
        Ok(AdamW {
            params,
            hyper: Arc::new(Mutex::new(AdamWOptions {
                lr,
                betas: (0.9, 0.999),
                eps: 1e-8,
                weight_decay: 0.01,
                amsgrad: false,
            })),
            fused: false,
            state: vec![None; n],
        })
    }

    /// Runs each step as one fused pass over every parameter's elements, all parameters in
    /// parallel (torch's `fused=True`), instead of a dozen eager ops per parameter. The
    /// moments are then updated in place. Parameters that are not contiguous f32/f64 CPU
    /// tensors take the unfused path.
    pub fn fused(mut self, fused: bool) -> AdamW {
        self.fused = fused;
        self
    }

    /// The fused step (see [`AdamW::fused`]).
    fn fused_step(&mut self) -> Result<()> {
        let h = self.current();
        let (b1, b2) = h.betas;
        let (lr, wd, eps, ams) = (h.lr, h.weight_decay, h.eps, h.amsgrad);
        let corrections = self.advance(false, &h)?;
        let mut work = Vec::new();
        for ((p, st), corr) in self.params.iter().zip(&mut self.state).zip(&corrections) {
            let (Some(g), Some(Corrections::Numbers(neg_step_size, c2))) = (p.grad(), corr) else {
                continue;
            };
            let zeros = || Tensor::zeros(p.shape(), p.dtype());
            let s = st.take().expect("state made by advance");
            let max_exp_avg_sq = match (ams, s.max_exp_avg_sq) {
                (true, None) => Some(zeros()?),
                (_, m) => m.map(|m| m.contiguous()).transpose()?,
            };
            let s = Moments {
                step: s.step,
                exp_avg: s.exp_avg.contiguous()?,
                exp_avg_sq: s.exp_avg_sq.contiguous()?,
                max_exp_avg_sq,
            };
            *st = Some(s);
            work.push((p, g, st.as_ref().expect("just set"), -neg_step_size, *c2));
        }
        let slots = work
            .into_iter()
            .map(|(p, g, s, step_size, c2)| {
                let mut state = vec![&s.exp_avg, &s.exp_avg_sq];
                state.extend(s.max_exp_avg_sq.as_ref());
                Ok(fused::Slot {
                    param: p,
                    grad: g,
                    state,
                    update: fused::Update::AdamW(fused::AdamWStep {
                        lr,
                        b1,
                        b2,
                        eps,
                        weight_decay: wd,
                        c2,
                        step_size,
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        fused::run(slots)
    }

    /// Sets betas, eps, weight decay and amsgrad.
    pub fn options(self, betas: (f64, f64), eps: f64, weight_decay: f64, amsgrad: bool) -> AdamW {
        {
            let mut h = self.hyper.lock();
            h.betas = betas;
            h.eps = eps;
            h.weight_decay = weight_decay;
            h.amsgrad = amsgrad;
        }
        self
    }

    /// The hyperparameters.
    pub fn hyperparameters(&self) -> AdamWOptions {
        self.hyper.lock().clone()
    }

    /// Replaces the hyperparameters (a compiled step that baked in the old ones recompiles).
    pub fn set_options(&self, options: AdamWOptions) {
        *self.hyper.lock() = options;
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.hyper.lock().lr
    }

    /// Sets the learning rate (a scheduler's job; a compiled step recompiles).
    pub fn set_lr(&self, lr: f64) {
        self.hyper.lock().lr = lr;
    }

    /// The hyperparameters for one step; inside a trace, guarded for the compiled graph.
    fn current(&self) -> AdamWOptions {
        let h = self.hyper.lock().clone();
        super::guard_hyperparameters("AdamW", &self.hyper, &h);
        h
    }
}

impl AdamW {
    /// Advances the step count of every parameter that has a gradient and returns its bias
    /// corrections (`None` for one without a gradient, which is skipped). State is made on a
    /// parameter's first step (as data, even inside a compiled step: the graph then updates
    /// it). Parameters whose states were made together share one step count, advanced and
    /// corrected once per step (so a compiled step has one small scalar chain, not one per
    /// parameter); one skipped while others of its group step gets a count of its own.
    fn advance(&mut self, traced: bool, h: &AdamWOptions) -> Result<Vec<Option<Corrections>>> {
        let has_grad: Vec<bool> = self.params.iter().map(|p| p.grad().is_some()).collect();
        let ams = h.amsgrad;
        let mut fresh: Option<Tensor> = None;
        for ((p, st), &g) in self.params.iter().zip(&mut self.state).zip(&has_grad) {
            if g && st.is_none() {
                let step = match &fresh {
                    Some(t) => t.clone(),
                    None => {
                        let t = untraced(|| Tensor::full(&[], 0.0, DType::F64))?;
                        fresh = Some(t.clone());
                        t
                    }
                };
                *st = Some(untraced(|| Moments::new(p, ams, step))?);
            }
        }
        let key = |t: &Tensor| t.as_cpu().map(|c| Arc::as_ptr(c.storage()) as usize);
        let keys: Vec<Option<usize>> = self
            .state
            .iter()
            .map(|s| s.as_ref().map(|s| untraced(|| key(&s.step))).transpose())
            .collect::<Result<_>>()?;
        // a count shared with a parameter that steps now, by one that does not: split it
        for i in 0..self.params.len() {
            let (Some(k), false) = (keys[i], has_grad[i]) else {
                continue;
            };
            let shared = (0..self.params.len()).any(|j| has_grad[j] && keys[j] == Some(k));
            if shared {
                if let Some(s) = &mut self.state[i] {
                    s.step = untraced(|| own(s.step.clone()))?;
                }
            }
        }
        let (b1, b2) = h.betas;
        let mut done: Vec<(usize, Corrections)> = Vec::new();
        let mut out = Vec::with_capacity(self.params.len());
        for (i, st) in self.state.iter().enumerate() {
            let (Some(s), true, Some(k)) = (st, has_grad[i], keys[i]) else {
                out.push(None);
                continue;
            };
            if let Some((_, c)) = done.iter().find(|(d, _)| *d == k) {
                out.push(Some(c.clone()));
                continue;
            }
            let c = if traced {
                s.step.add_(1.0)?;
                // scalar operands, not constant tensors: one small f64 kernel
                let scalar_first = |op: BinaryOp, x: f64, t: &Tensor| {
                    Tensor::call(&Op::Binary(op), &[Operand::Scalar(x.into()), t.into()])
                };
                // 1 - β^t (as -β^t + 1, the same rounding)
                let one_minus_pow =
                    |b: f64| scalar_first(BinaryOp::Pow, b, &s.step)?.neg()?.add(1.0);
                Corrections::Traced(Box::new((
                    scalar_first(BinaryOp::Div, -h.lr, &one_minus_pow(b1)?)?,
                    one_minus_pow(b2)?.sqrt()?,
                )))
            } else {
                let t = s.step.item()? + 1.0;
                s.step.fill_(t)?;
                let (c1, c2) = (1.0 - b1.powf(t), 1.0 - b2.powf(t));
                Corrections::Numbers(-(h.lr / c1), c2.sqrt())
            };
            done.push((k, c.clone()));
            out.push(Some(c));
        }
        Ok(out)
    }
}

impl Optimizer for AdamW {
    fn step(&mut self) -> Result<()> {
        self.hyperparameters().check()?;
        let _off = no_grad();
        let traced = crate::compile::lazy::is_tracing();
        if !traced && self.fused && self.params.iter().all(fused::supported) {
            return self.fused_step();
        }
        let h = self.current();
        let (b1, b2) = h.betas;
        let corrections = self.advance(traced, &h)?;
        for ((p, st), corr) in self.params.iter().zip(&self.state).zip(corrections) {
            let (Some(g), Some(corr), Some(s)) = (p.grad(), corr, st) else {
                continue;
            };
            // traced corrections in the parameter's dtype, as eager mode converts a scalar
            // operand (so the update's pointwise chain has one dtype and fuses)
            let (ss, cs) = match &corr {
                Corrections::Traced(t) => (Some(t.0.cast(p.dtype())?), Some(t.1.cast(p.dtype())?)),
                Corrections::Numbers(..) => (None, None),
            };
            let (step_size, c2_sqrt): (Operand<'_>, Operand<'_>) = match (&corr, &ss, &cs) {
                (_, Some(ss), Some(cs)) => (ss.into(), cs.into()),
                (Corrections::Numbers(ss, cs), ..) => ((*ss).into(), (*cs).into()),
                _ => unreachable!("traced corrections are cast above"),
            };
            if h.weight_decay != 0.0 {
                p.mul_(1.0 - h.lr * h.weight_decay)?;
            }
            // lerp with weight 1 - β1 (< 0.5): m + w·(g - m), as torch computes it
            s.exp_avg.add_(&g.sub(&s.exp_avg)?.mul(1.0 - b1)?)?;
            s.exp_avg_sq.mul_(b2)?;
            s.exp_avg_sq.add_(&g.mul(&g)?.mul(1.0 - b2)?)?;
            let v = match &s.max_exp_avg_sq {
                Some(m) => {
                    m.copy_(&m.maximum(&s.exp_avg_sq)?)?;
                    m
                }
                None => &s.exp_avg_sq,
            };
            let denom = v.sqrt()?.div(c2_sqrt)?.add(h.eps)?;
            p.add_(&s.exp_avg.div(&denom)?.mul(step_size)?)?;
        }
        Ok(())
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Tensor::zero_grad);
    }

    fn state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, s) in self.state.iter().enumerate() {
            let Some(s) = s else { continue };
            out.push((format!("state.{i}.step"), s.step.clone()));
            out.push((format!("state.{i}.exp_avg"), s.exp_avg.clone()));
            out.push((format!("state.{i}.exp_avg_sq"), s.exp_avg_sq.clone()));
            if let Some(m) = &s.max_exp_avg_sq {
                out.push((format!("state.{i}.max_exp_avg_sq"), m.clone()));
            }
        }
        out
    }

    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            let name = |b: &str| format!("state.{i}.{b}");
            let Some((_, step)) = state.iter().find(|(n, _)| *n == name("step")) else {
                self.state[i] = None;
                continue;
            };
            let missing =
                |b: &str| Error::Autograd(format!("optimizer state: {} is missing", name(b)));
            let exp_avg = find(state, &name("exp_avg"), p)?.ok_or_else(|| missing("exp_avg"))?;
            let exp_avg_sq =
                find(state, &name("exp_avg_sq"), p)?.ok_or_else(|| missing("exp_avg_sq"))?;
            let max_exp_avg_sq = find(state, &name("max_exp_avg_sq"), p)?;
            if self.hyper.lock().amsgrad && max_exp_avg_sq.is_none() {
                return Err(missing("max_exp_avg_sq"));
            }
            self.state[i] = Some(Moments {
                step: Tensor::full(&[], step.item()?, DType::F64)?,
                exp_avg: own(exp_avg)?,
                exp_avg_sq: own(exp_avg_sq)?,
                max_exp_avg_sq: max_exp_avg_sq.map(own).transpose()?,
            });
        }
        Ok(())
    }
}
