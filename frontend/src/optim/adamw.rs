//! Adam with decoupled weight decay, as `torch.optim.AdamW` computes it.

use super::{check_params, find, fused, Optimizer};
use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::{DType, Operand, Tensor};

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
    /// one fused pass per parameter, all parameters in one parallel loop (torch's
    /// `fused=True`; see [`AdamW::fused`])
    pub fused: bool,
    state: Vec<Option<Moments>>,
}

impl Moments {
    /// Zero moments for `p` at step 0.
    fn new(p: &Tensor, amsgrad: bool) -> Result<Moments> {
        let zeros = || Tensor::zeros(p.shape(), p.dtype());
        Ok(Moments {
            step: Tensor::full(&[], 0.0, DType::F64)?,
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
        check_params("AdamW", &params)?;
        let n = params.len();
        Ok(AdamW {
            params,
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
            amsgrad: false,
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
        let (b1, b2) = self.betas;
        let (lr, wd, eps, ams) = (self.lr, self.weight_decay, self.eps, self.amsgrad);
        let mut work = Vec::new();
        for (p, st) in self.params.iter().zip(&mut self.state) {
            let Some(g) = p.grad() else {
                continue;
            };
            let zeros = || Tensor::zeros(p.shape(), p.dtype());
            let s = match st.take() {
                Some(s) => s,
                None => Moments::new(p, ams)?,
            };
            let max_exp_avg_sq = match (ams, s.max_exp_avg_sq) {
                (true, None) => Some(zeros()?),
                (_, m) => m.map(|m| m.contiguous()).transpose()?,
            };
            let t = s.step.item()? + 1.0;
            s.step.fill_(t)?;
            let s = Moments {
                step: s.step,
                exp_avg: s.exp_avg.contiguous()?,
                exp_avg_sq: s.exp_avg_sq.contiguous()?,
                max_exp_avg_sq,
            };
            *st = Some(s);
            work.push((p, g, st.as_ref().expect("just set")));
        }
        let slots = work
            .into_iter()
            .map(|(p, g, s)| {
                let t = s.step.item()?;
                let c1 = 1.0 - b1.powf(t);
                let c2 = (1.0 - b2.powf(t)).sqrt();
                let step_size = lr / c1;
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
    pub fn options(
        mut self,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
    ) -> AdamW {
        self.betas = betas;
        self.eps = eps;
        self.weight_decay = weight_decay;
        self.amsgrad = amsgrad;
        self
    }
}

impl Optimizer for AdamW {
    fn step(&mut self) -> Result<()> {
        let _off = no_grad();
        let traced = crate::compile::lazy::is_tracing();
        if !traced && self.fused && self.params.iter().all(fused::supported) {
            return self.fused_step();
        }
        let (b1, b2) = self.betas;
        for (p, st) in self.params.iter().zip(&mut self.state) {
            let Some(g) = p.grad() else {
                continue;
            };
            if st.is_none() {
                // made as data even inside a compiled step: the graph then updates it
                *st = Some(crate::compile::lazy::untraced(|| {
                    Moments::new(p, self.amsgrad)
                })?);
            }
            let s = st.as_ref().expect("just set");
            // the bias corrections, from the step count (in the graph when traced, so that
            // a compiled step counts on every call)
            let (ss, cs) = if traced {
                s.step.add_(1.0)?;
                let one = || Tensor::full(&[], 1.0, DType::F64);
                let pow = |b: f64| Tensor::full(&[], b, DType::F64)?.pow(&s.step);
                let c1 = one()?.sub(&pow(b1)?)?;
                let ss = Tensor::full(&[], -self.lr, DType::F64)?.div(&c1)?;
                (Some(ss), Some(one()?.sub(&pow(b2)?)?.sqrt()?))
            } else {
                (None, None)
            };
            let (step_size, c2_sqrt): (Operand<'_>, Operand<'_>) = match (&ss, &cs) {
                (Some(ss), Some(cs)) => (ss.into(), cs.into()),
                _ => {
                    let t = s.step.item()? + 1.0;
                    s.step.fill_(t)?;
                    let c1 = 1.0 - b1.powf(t);
                    let c2 = 1.0 - b2.powf(t);
                    ((-(self.lr / c1)).into(), c2.sqrt().into())
                }
            };
            if self.weight_decay != 0.0 {
                p.mul_(1.0 - self.lr * self.weight_decay)?;
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
            let denom = v.sqrt()?.div(c2_sqrt)?.add(self.eps)?;
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
            if self.amsgrad && max_exp_avg_sq.is_none() {
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
