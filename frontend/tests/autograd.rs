//! Eager autograd with PyTorch's semantics: gradients against finite differences (f64),
//! accumulation, retain_graph and the freed-graph error, None vs zero, no_grad, detach,
//! retain_grad, hooks, autograd::grad, in-place ops and the version-counter error, and a
//! few SGD steps that lower a loss.

use kiln::autograd::{grad, no_grad};
use kiln::{DType, Result, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, seed).unwrap()
}

fn leaf(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, seed).requires_grad_(true).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// An MLP loss over f64 tensors: linear, tanh-gelu, linear, log_softmax, weighted mean.
fn mlp_loss(x: &Tensor, w1: &Tensor, b1: &Tensor, w2: &Tensor, t: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&w1.transpose(0, 1)?)?.add(b1)?;
    let h = h.gelu_tanh()?;
    let z = h.matmul(&w2.transpose(0, 1)?)?;
    let l = z.log_softmax(-1)?;
    l.mul(t)?.mean(&[], false)
}

/// The gradient of `f` at `params[i]` by central differences, element by element.
fn finite_difference(
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    params: &[Tensor],
    i: usize,
) -> Vec<f64> {
    let base = vals(&params[i]);
    let shape = params[i].shape().to_vec();
    (0..base.len())
        .map(|j| {
            let at = |d: f64| {
                let mut v = base.clone();
                v[j] += d;
                let mut ps: Vec<Tensor> = params.iter().map(|p| p.detach()).collect();
                ps[i] = Tensor::from_vec(v, &shape).unwrap();
                f(&ps).unwrap().item().unwrap()
            };
            let h = 1e-6;
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}[{k}]: {g} vs {w}"
        );
    }
}

#[test]
fn backward_matches_finite_differences_on_an_mlp() {
    let params = vec![
        leaf(&[4, 5], 1),
        leaf(&[6, 5], 2),
        leaf(&[6], 3),
        leaf(&[3, 6], 4),
        randn(&[4, 3], 5),
    ];
    let f = |p: &[Tensor]| mlp_loss(&p[0], &p[1], &p[2], &p[3], &p[4]);
    let loss = f(&params).unwrap();
    assert_eq!(loss.grad_fn_name().as_deref(), Some("MeanBackward"));
    loss.backward().unwrap();
    for i in 0..4 {
        let g = params[i]
            .grad()
            .expect("a leaf that requires grad gets .grad");
        assert_eq!(g.shape(), params[i].shape());
        assert_close(
            &vals(&g),
            &finite_difference(&f, &params, i),
            &format!("param {i}"),
        );
    }
    assert!(
        params[4].grad().is_none(),
        "a tensor that does not require grad gets none"
    );
}

#[test]
fn broadcasting_reductions_norms_and_views_match_finite_differences() {
    let params = vec![leaf(&[3, 4], 6), leaf(&[4], 7), leaf(&[1, 4], 8)];
    let f = |p: &[Tensor]| -> Result<Tensor> {
        let y = p[0].layer_norm(&[4], Some(&p[1]), None, 1e-5)?;
        let y = y.mul(&p[2])?.softmax(0)?;
        let y = y.transpose(0, 1)?.reshape(&[2, 6])?;
        let m = y.max(&[1], true)?;
        y.sub(&m)?.exp()?.sum(&[], false)
    };
    let loss = f(&params).unwrap();
    loss.backward().unwrap();
    for i in 0..3 {
        let g = params[i].grad().unwrap();
        assert_close(
            &vals(&g),
            &finite_difference(&f, &params, i),
            &format!("param {i}"),
        );
    }
}

#[test]
fn gradients_accumulate_and_a_freed_graph_says_to_retain_it() {
    let x = leaf(&[3], 9);
    let y = x.mul(&x).unwrap().sum(&[], false).unwrap();
    y.backward_with(None, true).unwrap();
    let once = vals(&x.grad().unwrap());
    y.backward().unwrap();
    let twice = vals(&x.grad().unwrap());
    for (a, b) in once.iter().zip(&twice) {
        assert!((2.0 * a - b).abs() < 1e-12, "accumulated: {a} then {b}");
    }
    let e = y.backward().unwrap_err().to_string();
    assert!(
        e.contains("backward through the graph a second time"),
        "{e}"
    );
    assert!(e.contains("retain_graph=True"), "{e}");
    // zero_grad makes it None again, not zeros
    x.zero_grad();
    assert!(x.grad().is_none());
}

#[test]
fn no_grad_detach_and_leaves() {
    let x = leaf(&[2], 10);
    let y = x.mul(2.0).unwrap();
    assert!(y.requires_grad() && !y.is_leaf() && x.is_leaf());
    {
        let _g = no_grad();
        let z = x.mul(2.0).unwrap();
        assert!(!z.requires_grad() && z.is_leaf());
    }
    assert!(
        x.mul(2.0).unwrap().requires_grad(),
        "the guard restored grad mode"
    );
    let d = y.detach();
    assert!(!d.requires_grad() && d.is_leaf());
    // no gradient flows through a detached value
    let loss = d.mul(&x).unwrap().sum(&[], false).unwrap();
    loss.backward().unwrap();
    assert_eq!(vals(&x.grad().unwrap()), vals(&d));
    let e = Tensor::from_vec(vec![1i64, 2], &[2])
        .unwrap()
        .requires_grad_(true);
    assert!(e.unwrap_err().to_string().contains("floating point"));
    let e = y.clone().requires_grad_(false).unwrap_err().to_string();
    assert!(e.contains("leaf variables"), "{e}");
}

#[test]
fn retain_grad_hooks_and_autograd_grad() {
    let x = leaf(&[3], 11);
    let h = x.exp().unwrap();
    h.retain_grad().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    x.register_hook(move |g| {
        s.lock().unwrap().push(g.to_vec_f64()?);
        Ok(Some(g.mul(10.0)?))
    })
    .unwrap();
    let y = h.sum(&[], false).unwrap();
    y.backward_with(None, true).unwrap();
    assert_eq!(
        vals(&h.grad().unwrap()),
        vec![1.0; 3],
        "retained non-leaf gradient"
    );
    let ex = vals(&h);
    let hooked = vals(&x.grad().unwrap());
    for (g, e) in hooked.iter().zip(&ex) {
        assert!(
            (g - 10.0 * e).abs() < 1e-9,
            "the hook's gradient was accumulated"
        );
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
    // autograd::grad returns gradients and leaves .grad alone; None for an unused input
    let other = leaf(&[2], 12);
    let before = vals(&x.grad().unwrap());
    let g = grad(
        std::slice::from_ref(&y),
        &[h.clone(), other.clone()],
        None,
        false,
    )
    .unwrap();
    assert_eq!(vals(g[0].as_ref().unwrap()), vec![1.0; 3]);
    assert!(g[1].is_none());
    assert_eq!(vals(&x.grad().unwrap()), before);
    assert!(other.grad().is_none());
}

#[test]
fn in_place_ops_and_the_version_counter() {
    let a = leaf(&[3, 4], 13);
    let e = a.mul_(2.0).unwrap_err().to_string();
    assert_eq!(
        e,
        "mul_: a leaf Variable that requires grad is being used in an in-place operation."
    );
    // an update under no_grad is fine (an optimizer step)
    {
        let _g = no_grad();
        a.add_(1.0).unwrap();
    }
    // sin saves its input: updating it in place is caught (exp, which saves its result,
    // would not need z and, as in torch, would not complain)
    let z = a.mul(2.0).unwrap();
    let y = z.sin().unwrap();
    let v = z.version();
    {
        let _g = no_grad();
        z.add_(1.0).unwrap();
    }
    let e = y
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "backward: one of the variables needed for gradient computation has been modified by an \
             inplace operation: [f64 [3, 4]], which is output 0 of MulBackward, is at version \
             {}; expected version {v} instead",
            v + 1
        )
    );
    let e = Tensor::zeros(&[2], DType::F32)
        .unwrap()
        .backward()
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not require grad"), "{e}");
    let e = leaf(&[2], 14)
        .mul(3.0)
        .unwrap()
        .backward()
        .unwrap_err()
        .to_string();
    assert!(e.contains("only for scalar outputs"), "{e}");
}

/// In-place ops on non-leaves rebase their history, as torch does: the update becomes the
/// tensor's `grad_fn` (seen by every clone), gradients flow through it to the old value and
/// to the source, and only a saved value a rule reads is version-checked.
#[test]
fn in_place_ops_on_non_leaves_rebase_the_history() {
    let (a, b) = (leaf(&[3, 4], 21), leaf(&[4], 22));
    // y = (a * 2 + b) * a, built in place; loss = sum(y * y)
    let y = a.mul(2.0).unwrap();
    let alias = y.clone();
    y.add_(&b).unwrap();
    assert_eq!(alias.grad_fn_name().as_deref(), Some("AddBackward"));
    y.mul_(&a).unwrap();
    assert_eq!(y.grad_fn_name().as_deref(), Some("MulBackward"));
    assert!(!y.is_leaf() && y.requires_grad());
    y.mul(&y)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    let f = |p: &[Tensor]| {
        let y = p[0].mul(2.0)?.add(&p[1])?.mul(&p[0])?;
        y.mul(&y)?.sum(&[], false)
    };
    let params = [a.detach(), b.detach()];
    assert_close(
        &vals(&a.grad().unwrap()),
        &finite_difference(&f, &params, 0),
        "a",
    );
    assert_close(
        &vals(&b.grad().unwrap()),
        &finite_difference(&f, &params, 1),
        "b",
    );
    // copy_ and fill_ overwrite: no gradient reaches the old value (a zero one does; had z
    // come from exp, which saves its result, that would be the version error, as in torch)
    let (c, d) = (leaf(&[2, 3], 23), leaf(&[3], 24));
    let z = c.mul(3.0).unwrap();
    z.copy_(&d).unwrap();
    z.sum(&[], false).unwrap().backward().unwrap();
    assert!(vals(&c.grad().unwrap()).iter().all(|&g| g == 0.0));
    assert_eq!(vals(&d.grad().unwrap()), vec![2.0; 3]);
    let z = c.mul(3.0).unwrap();
    z.fill_(1.5).unwrap();
    assert_eq!(z.grad_fn_name().as_deref(), Some("FillBackward"));
    // a destination without autograd history becomes part of it when the source requires grad
    let w = leaf(&[2], 25);
    let acc = Tensor::zeros(&[2], DType::F64)
        .unwrap()
        .requires_grad_(false)
        .unwrap();
    acc.add_(&w).unwrap();
    acc.mul(&acc)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_close(
        &vals(&w.grad().unwrap()),
        &vals(&w.mul(2.0).unwrap()),
        "acc += w",
    );
    // updating in place a value a later rule reads is the version error, naming its node
    let x = leaf(&[2], 26);
    let h = x.mul(2.0).unwrap();
    let s = h.sin().unwrap();
    h.add_(1.0).unwrap();
    let e = s
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("which is output 0 of AddBackward, is at version"),
        "{e}"
    );
    // a view of a tensor that requires grad cannot be updated in place yet
    let v = leaf(&[2, 3], 27).mul(1.0).unwrap().transpose(0, 1).unwrap();
    let e = v.add_(1.0).unwrap_err().to_string();
    assert!(e.contains("on a view (TransposeBackward)"), "{e}");
}

/// Ten SGD steps on a least-squares fit lower the loss, with the update under no_grad.
#[test]
fn sgd_steps_lower_a_loss() {
    let x = randn(&[16, 3], 15);
    let w_true = Tensor::from_vec(vec![1.5f64, -2.0, 0.5], &[3, 1]).unwrap();
    let y = x.matmul(&w_true).unwrap();
    let w = Tensor::zeros(&[3, 1], DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let loss_of = |w: &Tensor| -> Result<Tensor> {
        let d = x.matmul(w)?.sub(&y)?;
        d.mul(&d)?.mean(&[], false)
    };
    let first = loss_of(&w).unwrap().item().unwrap();
    for _ in 0..10 {
        w.zero_grad();
        loss_of(&w).unwrap().backward().unwrap();
        let g = w.grad().unwrap();
        let _off = no_grad();
        w.add_(&g.mul(-0.2).unwrap()).unwrap();
    }
    let last = loss_of(&w).unwrap().item().unwrap();
    assert!(last < 0.1 * first, "loss {first} -> {last}");
}

/// A leaf's gradient is accumulated, and its post-accumulate hooks run, as soon as every
/// node feeding it has run: `w1`'s hook sees its complete `.grad` while `w0`'s node (below
/// it in the chain) has not run yet, and each hook fires once per backward with the
/// accumulated value (two backward passes: twice the gradient).
#[test]
fn post_accumulate_hooks_fire_when_the_leaf_is_complete() {
    use std::sync::{Arc, Mutex};
    let x = randn(&[3, 4], 1);
    let w0 = leaf(&[4, 4], 2);
    let w1 = leaf(&[4, 2], 3);
    type Seen = Vec<(&'static str, Vec<f64>)>;
    let order: Arc<Mutex<Seen>> = Arc::default();
    for (name, w) in [("w0", &w0), ("w1", &w1)] {
        let o = order.clone();
        w.register_post_accumulate_grad_hook(move |g| {
            o.lock().unwrap().push((name, g.to_vec_f64()?));
            Ok(())
        })
        .unwrap();
    }
    // w1 is used twice (two contributions summed before the hook)
    let h = x.matmul(&w0).unwrap().tanh().unwrap();
    let y = (&h.matmul(&w1).unwrap() + &h.matmul(&w1).unwrap()).unwrap();
    let loss = y.sum(&[0, 1], false).unwrap();
    loss.backward_with(None, true).unwrap();
    {
        let seen = order.lock().unwrap();
        let names: Vec<_> = seen.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["w1", "w0"], "w1 is complete before w0's node runs");
        assert_eq!(seen[0].1, vals(&w1.grad().unwrap()));
        assert_eq!(seen[1].1, vals(&w0.grad().unwrap()));
    }
    let first = vals(&w1.grad().unwrap());
    loss.backward().unwrap();
    let seen = order.lock().unwrap();
    assert_eq!(seen.len(), 4);
    let twice: Vec<f64> = first.iter().map(|v| v * 2.0).collect();
    assert_eq!(seen[2].1, twice, "the hook sees the accumulated .grad");
    // autograd::grad accumulates nothing, so runs no post-accumulate hook
    drop(seen);
    let l2 = x.matmul(&w0).unwrap().sum(&[0, 1], false).unwrap();
    grad(&[l2], std::slice::from_ref(&w0), None, false).unwrap();
    assert_eq!(order.lock().unwrap().len(), 4);
}

#[test]
fn post_accumulate_hooks_only_on_leaves_that_require_grad() {
    let w = leaf(&[2], 1);
    let y = w.exp().unwrap();
    let e = y
        .register_post_accumulate_grad_hook(|_| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("non-leaf"), "{e}");
    let e = randn(&[2], 2)
        .register_post_accumulate_grad_hook(|_| Ok(()))
        .unwrap_err();
    assert!(
        e.to_string().contains("register_post_accumulate_grad_hook"),
        "{e}"
    );
}

/// Callbacks queued during a backward run after every gradient is accumulated, in order;
/// their error is the backward's; outside a backward, queueing is an error.
#[test]
fn queued_callbacks_run_after_the_backward() {
    use kiln::autograd::queue_callback;
    use std::sync::{Arc, Mutex};
    assert!(queue_callback(|| Ok(())).is_err());
    let w = leaf(&[3], 1);
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (l, w2) = (log.clone(), w.clone());
    w.register_hook(move |_| {
        let (l1, l2, w3) = (l.clone(), l.clone(), w2.clone());
        queue_callback(move || {
            // the gradient is in place when the callback runs
            l1.lock()
                .unwrap()
                .push(format!("first {}", w3.grad().is_some()));
            Ok(())
        })?;
        queue_callback(move || {
            l2.lock().unwrap().push("second".into());
            Ok(())
        })?;
        Ok(None)
    })
    .unwrap();
    w.exp()
        .unwrap()
        .sum(&[0], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(*log.lock().unwrap(), ["first true", "second"]);
    let v = leaf(&[2], 2);
    v.register_post_accumulate_grad_hook(|_| {
        queue_callback(|| Err(kiln::Error::Autograd("callback failed".into())))
    })
    .unwrap();
    let e = v.sum(&[0], false).unwrap().backward().unwrap_err();
    assert!(e.to_string().contains("callback failed"), "{e}");
}
