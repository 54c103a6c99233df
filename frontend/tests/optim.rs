//! Optimiser steps against the same updates computed by hand in f64, in PyTorch's order
//! (weight decay, momentum, dampening, nesterov; AdamW's decoupled decay, bias correction
//! and amsgrad), parameters without a gradient left alone, and state saved and restored
//! mid-run giving the uninterrupted run's values.

use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{DType, Tensor};

fn param(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Sets `p`'s gradient to `g` through a backward of `sum(p * g)`.
fn set_grad(p: &Tensor, g: &[f64]) {
    p.zero_grad();
    let gt = Tensor::from_vec(g.to_vec(), &[g.len()]).unwrap();
    p.mul(&gt)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

fn close(a: &[f64], b: &[f64]) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{a:?} vs {b:?}");
    }
}

const GRADS: [[f64; 2]; 3] = [[0.5, -1.0], [0.25, 2.0], [-0.75, 0.1]];

#[test]
fn sgd_with_momentum_dampening_nesterov_and_weight_decay() {
    for nesterov in [false, true] {
        let (lr, mom, damp, wd) = (0.1, 0.9, if nesterov { 0.0 } else { 0.2 }, 0.01);
        let p = param(&[1.0, -2.0]);
        let mut opt = Sgd::new(vec![p.clone()], lr)
            .unwrap()
            .momentum(mom, damp, nesterov)
            .weight_decay(wd);
        let mut want = [1.0f64, -2.0];
        let mut buf: Option<[f64; 2]> = None;
        for g in GRADS {
            set_grad(&p, &g);
            opt.step().unwrap();
            let mut d = [0.0; 2];
            for k in 0..2 {
                d[k] = g[k] + wd * want[k];
            }
            let b = match buf {
                None => d,
                Some(b) => [
                    mom * b[0] + (1.0 - damp) * d[0],
                    mom * b[1] + (1.0 - damp) * d[1],
                ],
            };
            buf = Some(b);
            for k in 0..2 {
                let step = if nesterov { d[k] + mom * b[k] } else { b[k] };
                want[k] += -lr * step;
            }
            close(&vals(&p), &want);
        }
    }
}

#[test]
fn adamw_with_bias_correction_weight_decay_and_amsgrad() {
    for amsgrad in [false, true] {
        let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.999, 1e-8, 0.1);
        let p = param(&[1.0, -2.0]);
        let mut opt = AdamW::new(vec![p.clone()], lr)
            .unwrap()
            .options((b1, b2), eps, wd, amsgrad);
        let mut want = [1.0f64, -2.0];
        let (mut m, mut v, mut vmax) = ([0.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
        for (t, g) in GRADS.iter().enumerate() {
            set_grad(&p, g);
            opt.step().unwrap();
            let t = (t + 1) as i32;
            for k in 0..2 {
                want[k] *= 1.0 - lr * wd;
                m[k] += (g[k] - m[k]) * (1.0 - b1);
                v[k] = v[k] * b2 + g[k] * g[k] * (1.0 - b2);
                vmax[k] = vmax[k].max(v[k]);
                let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
                let vk = if amsgrad { vmax[k] } else { v[k] };
                let denom = vk.sqrt() / c2.sqrt() + eps;
                want[k] += -(lr / c1) * (m[k] / denom);
            }
            close(&vals(&p), &want);
        }
    }
}

#[test]
fn parameters_without_a_gradient_are_left_alone_and_state_restores() {
    let (p, q) = (param(&[1.0, 2.0]), param(&[3.0, 4.0]));
    let mut opt = AdamW::new(vec![p.clone(), q.clone()], 0.1).unwrap();
    set_grad(&p, &[1.0, 1.0]);
    opt.step().unwrap();
    assert_eq!(
        vals(&q),
        vec![3.0, 4.0],
        "no gradient, no update (not even the decay)"
    );
    // two runs from the same start: one uninterrupted, one restored from saved state
    let run = |restore: bool| -> Vec<f64> {
        let p = param(&[0.5, -0.5]);
        let mut opt = Sgd::new(vec![p.clone()], 0.1)
            .unwrap()
            .momentum(0.9, 0.0, false);
        for (i, g) in GRADS.iter().enumerate() {
            if restore && i == 2 {
                let state = opt.state();
                assert_eq!(state[0].0, "state.0.momentum_buffer");
                opt = Sgd::new(vec![p.clone()], 0.1)
                    .unwrap()
                    .momentum(0.9, 0.0, false);
                opt.load_state(&state).unwrap();
            }
            set_grad(&p, g);
            opt.step().unwrap();
        }
        vals(&p)
    };
    assert_eq!(run(false), run(true));
    let run_adam = |restore: bool| -> Vec<f64> {
        let p = param(&[0.5, -0.5]);
        let make = |p: &Tensor| {
            AdamW::new(vec![p.clone()], 0.1)
                .unwrap()
                .options((0.8, 0.9), 1e-8, 0.05, true)
        };
        let mut opt = make(&p);
        for (i, g) in GRADS.iter().enumerate() {
            if restore && i == 2 {
                let state = opt.state();
                opt = make(&p);
                opt.load_state(&state).unwrap();
            }
            set_grad(&p, g);
            opt.step().unwrap();
        }
        vals(&p)
    };
    assert_eq!(run_adam(false), run_adam(true));
    let e = Sgd::new(vec![Tensor::zeros(&[2], DType::F32).unwrap()], 0.1)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("leaf tensor that requires grad"),
        "{e}"
    );
}

/// Random leaves of several shapes (one 2-d, so its gradient from `x @ wᵀ` style use can be
/// non-contiguous), in `dtype`.
fn model(dtype: DType, seed: u64) -> Vec<Tensor> {
    [&[3usize, 5][..], &[5], &[1], &[7, 2]]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Tensor::randn(s, dtype, seed + i as u64)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        })
        .collect()
}

/// A loss over the model whose gradients differ step by step (one comes transposed).
fn loss_step(ps: &[Tensor], k: u64) {
    let dt = ps[0].dtype();
    let x = Tensor::randn(&[5, 3], dt, 100 + k).unwrap();
    let a = ps[0]
        .transpose(0, 1)
        .unwrap()
        .mul(&x)
        .unwrap()
        .tanh()
        .unwrap();
    let b = ps[1].mul(&ps[1]).unwrap().sin().unwrap();
    let c = ps[2].mul(k as f64 + 1.0).unwrap().exp().unwrap();
    let d = ps[3].mul(&ps[3]).unwrap().mul(0.5).unwrap();
    let l = a
        .sum(&[], false)
        .unwrap()
        .add(&b.sum(&[], false).unwrap())
        .unwrap()
        .add(&c.sum(&[], false).unwrap())
        .unwrap()
        .add(&d.sum(&[], false).unwrap())
        .unwrap();
    l.backward().unwrap();
}

/// Fused steps (one pass per parameter, in f64 per element) equal the unfused eager ops'
/// (rounded per op) to rounding: 20 steps of each optimiser in every option, f32 and f64;
/// the fused state matches and restores into an unfused optimiser.
#[test]
fn fused_steps_equal_unfused_steps() {
    type Make = fn(Vec<Tensor>, bool) -> Box<dyn Optimizer>;
    let makers: [(&str, Make); 5] = [
        ("sgd", |p, f| Box::new(Sgd::new(p, 0.05).unwrap().fused(f))),
        ("sgd momentum", |p, f| {
            Box::new(
                Sgd::new(p, 0.05)
                    .unwrap()
                    .momentum(0.9, 0.1, false)
                    .weight_decay(0.01)
                    .fused(f),
            )
        }),
        ("sgd nesterov", |p, f| {
            Box::new(Sgd::new(p, 0.05).unwrap().momentum(0.9, 0.0, true).fused(f))
        }),
        ("adamw", |p, f| {
            Box::new(AdamW::new(p, 1e-2).unwrap().fused(f))
        }),
        ("adamw amsgrad", |p, f| {
            Box::new(
                AdamW::new(p, 1e-2)
                    .unwrap()
                    .options((0.8, 0.99), 1e-6, 0.1, true)
                    .fused(f),
            )
        }),
    ];
    for dtype in [DType::F32, DType::F64] {
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        for (name, make) in makers {
            let (pa, pb) = (model(dtype, 3), model(dtype, 3));
            let (mut fused, mut plain) = (make(pa.clone(), true), make(pb.clone(), false));
            for k in 0..20 {
                for (ps, opt) in [(&pa, &mut fused), (&pb, &mut plain)] {
                    opt.zero_grad();
                    loss_step(ps, k);
                    opt.step().unwrap();
                }
            }
            for (i, (a, b)) in pa.iter().zip(&pb).enumerate() {
                let (a, b) = (vals(a), vals(b));
                for (x, y) in a.iter().zip(&b) {
                    assert!(
                        (x - y).abs() <= tol * y.abs().max(1.0),
                        "{name} {dtype} parameter {i}: fused {x} vs unfused {y}"
                    );
                }
            }
            let (sa, sb) = (fused.state(), plain.state());
            assert_eq!(
                sa.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                sb.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "{name}"
            );
            for ((n, a), (_, b)) in sa.iter().zip(&sb) {
                for (x, y) in vals(a).iter().zip(vals(b)) {
                    assert!(
                        (x - y).abs() <= tol * y.abs().max(1.0),
                        "{name} {dtype} {n}"
                    );
                }
            }
            // the fused state restores into an unfused optimiser
            make(pb.clone(), false).load_state(&sa).unwrap();
        }
    }
}

/// A fused step updates the parameters in place (the model's tensors, their versions
/// bumped as an in-place op bumps them) and skips parameters without a gradient.
#[test]
fn fused_steps_update_in_place_and_skip_parameters_without_gradients() {
    let ps = model(DType::F32, 9);
    let before: Vec<Vec<f64>> = ps.iter().map(vals).collect();
    let versions: Vec<u64> = ps.iter().map(|p| p.version()).collect();
    let mut opt = AdamW::new(ps.clone(), 0.1).unwrap().fused(true);
    // only the first parameter gets a gradient
    ps[0]
        .mul(2.0)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    opt.step().unwrap();
    assert_ne!(vals(&ps[0]), before[0]);
    assert!(ps[0].version() > versions[0]);
    for i in 1..ps.len() {
        assert_eq!(vals(&ps[i]), before[i], "parameter {i}");
        assert_eq!(ps[i].version(), versions[i]);
    }
}
