//! Stochastic gradient descent, as `torch.optim.SGD` computes it.

use super::{check_params, find, Optimizer};
use crate::autograd::no_grad;
use crate::error::Result;
use crate::Tensor;

/// `torch.optim.SGD`: with `g` the gradient (plus `weight_decay·p`), the momentum buffer
/// `b = g` on the first step and `momentum·b + (1 - dampening)·g` after, `g = g +
/// momentum·b` with nesterov (else `g = b`), then `p -= lr·g`.
pub struct Sgd {
    params: Vec<Tensor>,
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
    buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// Plain SGD over `params` (leaves that require grad) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<Sgd> {
        check_params("SGD", &params)?;
        let n = params.len();
        Ok(Sgd {
            params,
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            buffers: vec![None; n],
        })
    }

    /// Sets the momentum, dampening and nesterov flag.
    pub fn momentum(mut self, momentum: f64, dampening: f64, nesterov: bool) -> Sgd {
        self.momentum = momentum;
        self.dampening = dampening;
        self.nesterov = nesterov;
        self
    }

    /// Sets the weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> Sgd {
        self.weight_decay = weight_decay;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        let _off = no_grad();
        for (p, buf) in self.params.iter().zip(&mut self.buffers) {
            let Some(mut g) = p.grad() else {
                continue;
            };
            if self.weight_decay != 0.0 {
                g = g.add(&p.mul(self.weight_decay)?)?;
            }
            if self.momentum != 0.0 {
                let b = match buf.take() {
                    None => g.mul(1.0)?,
                    Some(b) => b.mul(self.momentum)?.add(&g.mul(1.0 - self.dampening)?)?,
                };
                g = if self.nesterov {
                    g.add(&b.mul(self.momentum)?)?
                } else {
                    b.clone()
                };
                *buf = Some(b);
            }
            p.add_(&g.mul(-self.lr)?)?;
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
            self.buffers[i] = find(state, &format!("state.{i}.momentum_buffer"), p)?;
        }
        Ok(())
    }
}
