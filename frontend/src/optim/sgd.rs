//! Stochastic gradient descent, as `torch.optim.SGD` computes it.

use super::{check_params, find, fused, Optimizer};
use crate::autograd::no_grad;
use crate::error::Result;
use crate::{DType, Tensor};
use parking_lot::Mutex;
use std::sync::Arc;

/// `torch.optim.SGD`: with `g` the gradient (plus `weight_decay·p`), the momentum buffer
/// `b = g` on the first step and `momentum·b + (1 - dampening)·g` after, `g = g +
/// momentum·b` with nesterov (else `g = b`), then `p -= lr·g`.
pub struct Sgd {
    params: Vec<Tensor>,
    /// the hyperparameters, shared with the guards of compiled steps that baked them in
    hyper: Arc<Mutex<SgdOptions>>,
    /// one fused pass per parameter, all parameters in one parallel loop (torch's
    /// `fused=True`; see [`Sgd::fused`])
    pub fused: bool,
    buffers: Vec<Option<Tensor>>,
    /// per parameter, once a compiled step has run: whether its buffer holds a momentum
    /// (a 0-d bool the graph reads and sets)
    started: Vec<Option<Tensor>>,
}

/// SGD's hyperparameters. Inside a compiled training step they are constants of the graph,
/// guarded: changing one ([`Sgd::set_options`], [`Sgd::set_lr`]) recompiles the step on its
/// next call; a cached graph never runs with old values.
#[derive(Clone, Debug, PartialEq)]
pub struct SgdOptions {
    /// learning rate
    pub lr: f64,
    /// momentum factor (0: none)
    pub momentum: f64,
    /// dampening of the momentum
    pub dampening: f64,
    /// L2 penalty added to the gradient
    pub weight_decay: f64,
    /// Nesterov momentum
    pub nesterov: bool,
}

impl SgdOptions {
    /// Torch's checks of SGD's hyperparameters (its messages): a finite learning rate,
    /// momentum and weight decay at least 0, and Nesterov only with momentum and no
    /// dampening.
    pub fn check(&self) -> Result<()> {
        let ok = |x: f64| x >= 0.0 && x.is_finite();
        let bad = if !ok(self.lr) {
            format!("Invalid learning rate: {}", self.lr)
        } else if !ok(self.momentum) {
            format!("Invalid momentum value: {}", self.momentum)
        } else if !ok(self.weight_decay) {
            format!("Invalid weight_decay value: {}", self.weight_decay)
        } else if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            "Nesterov momentum requires a momentum and zero dampening".to_string()
        } else {
            return Ok(());
        };
        Err(crate::Error::Autograd(format!("SGD: {bad}")))
    }
}

impl Sgd {
    /// Plain SGD over `params` (leaves that require grad) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<Sgd> {
        check_params("SGD", &params, lr)?;
        let n = params.len();
        Ok(Sgd {
            params,
            hyper: Arc::new(Mutex::new(SgdOptions {
                lr,
                momentum: 0.0,
                dampening: 0.0,
                weight_decay: 0.0,
                nesterov: false,
            })),
            fused: false,
            buffers: vec![None; n],
            started: vec![None; n],
        })
    }

    /// Sets the momentum, dampening and nesterov flag.
    pub fn momentum(self, momentum: f64, dampening: f64, nesterov: bool) -> Sgd {
        {
            let mut h = self.hyper.lock();
            h.momentum = momentum;
            h.dampening = dampening;
            h.nesterov = nesterov;
        }
        self
    }

    /// Sets the weight decay.
    pub fn weight_decay(self, weight_decay: f64) -> Sgd {
        self.hyper.lock().weight_decay = weight_decay;
        self
    }

    /// The hyperparameters.
    pub fn hyperparameters(&self) -> SgdOptions {
        self.hyper.lock().clone()
    }

    /// Replaces the hyperparameters (a compiled step that baked in the old ones recompiles).
    pub fn set_options(&self, options: SgdOptions) {
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
    fn current(&self) -> SgdOptions {
        let h = self.hyper.lock().clone();
        super::guard_hyperparameters("SGD", &self.hyper, &h);
        h
    }

    /// Runs each step as one fused pass over every parameter's elements, all parameters in
    /// parallel (torch's `fused=True`), instead of several eager ops per parameter. The
    /// momentum buffers are then updated in place. Parameters that are not contiguous
    /// f32/f64 CPU tensors take the unfused path.
    pub fn fused(mut self, fused: bool) -> Sgd {
        self.fused = fused;
        self
    }

    /// The fused step (see [`Sgd::fused`]).
    fn fused_step(&mut self) -> Result<()> {
        let h = self.current();
        let (lr, m, damp, wd, nesterov) =
            (h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov);
        let mut work = Vec::new();
        for (p, buf) in self.params.iter().zip(&mut self.buffers) {
            let Some(g) = p.grad() else {
                continue;
            };
            // a new buffer starts as the gradient itself (torch's `clone(d_p)`)
            let first = m != 0.0 && buf.is_none();
            if m != 0.0 {
                *buf = Some(match buf.take() {
                    Some(b) => b.contiguous()?,
                    None => Tensor::zeros(p.shape(), p.dtype())?,
                });
            }
            work.push((p, g, buf.as_ref(), first));
        }
        let slots = work
            .into_iter()
            .map(|(p, g, buf, first)| fused::Slot {
                param: p,
                grad: g,
                state: buf.into_iter().collect(),
                update: fused::Update::Sgd(fused::SgdStep {
                    lr,
                    momentum: m,
                    dampening: damp,
                    weight_decay: wd,
                    nesterov,
                    first,
                }),
            })
            .collect();
        fused::run(slots)
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        self.hyperparameters().check()?;
        let _off = no_grad();
        let traced = crate::compile::lazy::is_tracing();
        if !traced && self.fused && self.params.iter().all(fused::supported) {
            return self.fused_step();
        }
        let h = self.current();
        for ((p, buf), started) in self
            .params
            .iter()
            .zip(&mut self.buffers)
            .zip(&mut self.started)
        {
            let Some(mut g) = p.grad() else {
                continue;
            };
            if h.weight_decay != 0.0 {
                g = g.add(&p.mul(h.weight_decay)?)?;
            }
            if h.momentum != 0.0 {
                if traced {
                    // Inside a compiled step the buffer and a "has started" flag are data
                    // the graph updates in place, so that one graph serves the first step
                    // (the buffer starts as the gradient) and every later one.
                    if buf.is_none() || started.is_none() {
                        let fresh = buf.is_none();
                        let (b, f) = crate::compile::lazy::untraced(|| -> Result<_> {
                            let b = match buf.take() {
                                Some(b) => b,
                                None => Tensor::zeros(p.shape(), p.dtype())?,
                            };
                            Ok((b, Tensor::full(&[], !fresh, DType::Bool)?))
                        })?;
                        *buf = Some(b);
                        *started = Some(f);
                    }
                    let (b, f) = (buf.as_ref().expect("set"), started.as_ref().expect("set"));
                    let later = b.mul(h.momentum)?.add(&g.mul(1.0 - h.dampening)?)?;
                    b.copy_(&f.where_(&later, &g.mul(1.0)?)?)?;
                    f.fill_(true)?;
                    g = if h.nesterov {
                        g.add(&b.mul(h.momentum)?)?
                    } else {
                        b.mul(1.0)?
                    };
                } else {
                    let b = match buf.take() {
                        None => g.mul(1.0)?,
                        Some(b) => {
                            // updated in place (a compiled step may read it next)
                            b.copy_(&b.mul(h.momentum)?.add(&g.mul(1.0 - h.dampening)?)?)?;
                            b
                        }
                    };
                    if let Some(f) = started {
                        f.fill_(true)?;
                    }
                    g = if h.nesterov {
                        g.add(&b.mul(h.momentum)?)?
                    } else {
                        b.clone()
                    };
                    *buf = Some(b);
                }
            }
            p.add_(&g.mul(-h.lr)?)?;
        }
        Ok(())
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Tensor::zero_grad);
    }

    fn state(&self) -> Vec<(String, Tensor)> {
        self.buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                b.as_ref()
                    .map(|b| (format!("state.{i}.momentum_buffer"), b.clone()))
            })
            .collect()
    }

    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            self.buffers[i] = find(state, &format!("state.{i}.momentum_buffer"), p)?
                .map(|b| {
                    // the optimiser's own copy: it is updated in place
                    let c = Tensor::zeros(b.shape(), b.dtype())?;
                    c.copy_(&b)?;
                    Ok::<_, crate::error::Error>(c)
                })
                .transpose()?;
            self.started[i] = None;
        }
        Ok(())
    }
}
