//! Compiled functions taking part in autograd: compiled forward + compiled backward equal
//! eager autograd (values and every gradient) on the zoo models and on hand-made programs,
//! on every backend, fused and unfused, with symbolic batch sizes and non-contiguous
//! inputs; guards on grad mode and `requires_grad` recompile exactly when they must.

mod training_common;
use kiln::autograd::no_grad;
use kiln::models::{self, Model};
use kiln::nn::functional::{mse_loss, Reduction};
use kiln::nn::{Linear, Module};
use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{compile, compile_with, CompileOptions, DType, Dynamic, Tensor};
use training_common::{option_sets, values};

/// Norm-wise closeness: `|a - b|∞ ≤ tol · max(1, |b|∞)`.
fn assert_close(what: &str, a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    let (a, b) = (values(a), values(b));
    let scale = b.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f64, f64::max);
    assert!(
        worst <= tol * scale,
        "{what}: max difference {worst:e} over scale {scale:e} (tolerance {tol:e})"
    );
}

/// A loss that weighs every output element differently, so a wrong gradient cannot hide
/// behind a normalised output's invariances.
fn weighted_loss(outs: &[Tensor], seed: u64) -> kiln::Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for (i, o) in outs.iter().enumerate() {
        let w = Tensor::randn(o.shape(), o.dtype(), seed + i as u64)?;
        let s = (o * &w)?.sum(&[], false)?;
        total = Some(match total {
            Some(t) => (t + s)?,
            None => s,
        });
    }
    Ok(total.expect("at least one output"))
}

/// Gradients of `leaves` after `loss.backward()`, then cleared.
fn take_grads(leaves: &[Tensor]) -> Vec<Option<Tensor>> {
    let g = leaves.iter().map(|l| l.grad()).collect();
    for l in leaves {
        l.zero_grad();
    }
    g
}

/// Runs `model` eagerly and compiled under `opts`, with gradients for its weights (and the
/// floating inputs when `input_grad`), and compares outputs and every gradient.
fn check_model(model: &dyn Model, inputs: &[Tensor], opts: &CompileOptions, what: &str, tol: f64) {
    let weights: Vec<Tensor> = model
        .weights()
        .into_iter()
        .map(|(_, w)| w.requires_grad_(true).expect("a floating weight"))
        .collect();
    let mut leaves = weights.clone();
    leaves.extend(inputs.iter().filter(|t| t.requires_grad()).cloned());
    // eager
    let eager_out = model.forward(inputs).expect("eager forward");
    weighted_loss(&eager_out, 99).unwrap().backward().unwrap();
    let eager_grads = take_grads(&leaves);
    for (i, g) in eager_grads.iter().take(weights.len()).enumerate() {
        assert!(g.is_some(), "{what}: weight {i} gets a gradient eagerly");
    }
    // compiled
    let f = compile_with(|xs: &[Tensor]| model.forward(xs), opts.clone());
    for round in 0..2 {
        let out = f.call(inputs).expect("compiled forward");
        for (o, e) in out.iter().zip(&eager_out) {
            assert_close(&format!("{what}: output"), o, e, tol);
            assert_eq!(
                o.requires_grad(),
                e.requires_grad(),
                "{what}: requires_grad"
            );
        }
        weighted_loss(&out, 99).unwrap().backward().unwrap();
        let grads = take_grads(&leaves);
        for (i, (g, e)) in grads.iter().zip(&eager_grads).enumerate() {
            match (g, e) {
                (Some(g), Some(e)) => assert_close(
                    &format!("{what}: grad of leaf {i} (call {round})"),
                    g,
                    e,
                    tol,
                ),
                (None, None) => {}
                _ => panic!(
                    "{what}: leaf {i}: compiled {:?} vs eager {:?}",
                    g.is_some(),
                    e.is_some()
                ),
            }
        }
    }
    assert_eq!(
        f.stats().compiles,
        2,
        "{what}: one forward and one backward compile"
    );
    for w in &weights {
        let _ = w.clone().requires_grad_(false);
    }
}

/// The small shapes each zoo model is built at.
fn zoo() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("pointwise", vec![37]),
        ("layernorm", vec![5, 33]),
        ("softmax", vec![3, 17]),
        ("reduce", vec![6, 9]),
        ("mlp", vec![5, 12]),
        ("block", vec![2, 5, 16]),
        ("tiny", vec![11]),
    ]
}

#[test]
fn zoo_models_compiled_forward_and_backward_equal_eager() {
    for (name, shape) in zoo() {
        let model = models::build(name, Some(&shape)).expect("a zoo model");
        let inputs: Vec<Tensor> = model
            .example_inputs(7)
            .unwrap()
            .into_iter()
            .map(|t| {
                if t.dtype().is_float() {
                    t.requires_grad_(true).unwrap()
                } else {
                    t
                }
            })
            .collect();
        for (label, opts) in option_sets() {
            let tol = if label == "interp" { 1e-4 } else { 2e-5 };
            check_model(
                model.as_ref(),
                &inputs,
                &opts,
                &format!("{name} on {label}"),
                tol,
            );
        }
    }
}

/// `tanh(x @ w + b)` summed with `exp(x)` terms: a small program with a matmul, broadcasts,
/// a reduction and pointwise chains, for the input-layout and dynamic-shape tests.
fn program(xs: &[Tensor], w: &Tensor, b: &Tensor) -> kiln::Result<Vec<Tensor>> {
    let h = ((xs[0].matmul(w)? + b)?.tanh()? * xs[0].sum(&[1], true)?.sigmoid()?)?;
    let y = (h.exp()? * 0.5)?.softmax(-1)?;
    Ok(vec![y, h.mean(&[0], false)?])
}

fn leaf(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Eager outputs and gradients of `program` for `x`, `w`, `b`.
fn eager_program(x: &Tensor, w: &Tensor, b: &Tensor) -> (Vec<Tensor>, Vec<Option<Tensor>>) {
    let out = program(std::slice::from_ref(x), w, b).unwrap();
    weighted_loss(&out, 5).unwrap().backward().unwrap();
    (out, take_grads(&[x.clone(), w.clone(), b.clone()]))
}

#[test]
fn non_contiguous_inputs_and_symbolic_batches_match_eager() {
    let w = leaf(&[6, 4], 1);
    let b = leaf(&[4], 2);
    for (label, opts) in option_sets() {
        let opts = opts.dynamic(Dynamic::Auto);
        let f = compile_with(|xs: &[Tensor]| program(xs, &w, &b), opts);
        for (i, batch) in [3usize, 5, 7, 1].into_iter().enumerate() {
            // a transposed (non-contiguous) leaf that requires grad
            let base = leaf(&[6, batch], 10 + i as u64);
            let x = base.t().unwrap();
            assert!(!x.is_contiguous() || batch == 1);
            let (eo, eg) = eager_program(&x, &w, &b);
            let eg_base = take_grads(std::slice::from_ref(&base));
            // a fresh view: the eager backward freed the first one's history
            let x = base.t().unwrap();
            let out = f.call(std::slice::from_ref(&x)).unwrap();
            weighted_loss(&out, 5).unwrap().backward().unwrap();
            let g = take_grads(&[x.clone(), w.clone(), b.clone()]);
            let g_base = take_grads(std::slice::from_ref(&base));
            let what = format!("{label}, batch {batch}");
            for (o, e) in out.iter().zip(&eo) {
                assert_close(&format!("{what}: output"), o, e, 2e-5);
            }
            for (k, (a, e)) in g.iter().zip(&eg).enumerate() {
                match (a, e) {
                    (Some(a), Some(e)) => assert_close(&format!("{what}: grad {k}"), a, e, 2e-5),
                    (None, None) => {}
                    _ => panic!("{what}: grad {k} present in one only"),
                }
            }
            assert_close(
                &format!("{what}: grad of the base"),
                g_base[0].as_ref().expect("the base is a leaf"),
                eg_base[0].as_ref().expect("the base is a leaf"),
                2e-5,
            );
        }
        // batch 3 specialised, batch 5 made the batch symbolic (reused by 7), batch 1 is
        // specialised (symbols stand for sizes >= 2): three entries of two graphs each
        let st = f.stats();
        assert_eq!((st.entries, st.compiles), (3, 6), "{label}: {st:?}");
    }
}

#[test]
fn guards_recompile_on_requires_grad_and_grad_mode_never_stale() {
    let w = Tensor::randn(&[4, 3], DType::F32, 3).unwrap();
    let wl = w.clone().requires_grad_(false).unwrap();
    let f = compile_with(
        |xs: &[Tensor]| Ok(vec![xs[0].matmul(&wl)?.tanh()?]),
        CompileOptions::default().dynamic(Dynamic::Never),
    );
    let x = Tensor::randn(&[2, 4], DType::F32, 4).unwrap();
    // 1: inference (nothing requires grad)
    let a = f.call(std::slice::from_ref(&x)).unwrap();
    assert!(!a[0].requires_grad());
    assert_eq!(f.stats().compiles, 1);
    // 2: the input requires grad: a training entry (forward + backward)
    let xg = x.clone().requires_grad_(true).unwrap();
    let b = f.call(std::slice::from_ref(&xg)).unwrap();
    assert!(b[0].requires_grad());
    assert_eq!(
        b[0].grad_fn_name().as_deref(),
        Some("CompiledFunctionBackward")
    );
    assert_eq!(f.stats().compiles, 3);
    b[0].sum(&[], false).unwrap().backward().unwrap();
    let expected = {
        let xe = Tensor::randn(&[2, 4], DType::F32, 4)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        xe.matmul(&w)
            .unwrap()
            .tanh()
            .unwrap()
            .sum(&[], false)
            .unwrap()
            .backward()
            .unwrap();
        xe.grad().unwrap()
    };
    assert_close("grad of x", &xg.grad().unwrap(), &expected, 1e-5);
    // 3: the same input under no_grad: grad mode is guarded, a new inference entry
    {
        let _off = no_grad();
        let c = f.call(std::slice::from_ref(&xg)).unwrap();
        assert!(!c[0].requires_grad(), "no history under no_grad");
        assert_eq!(f.stats().compiles, 4);
        assert_close("no_grad output", &c[0], &a[0], 0.0);
    }
    // 4: the captured weight starts requiring grad: its guard fails, a new training entry
    let _ = wl.clone().requires_grad_(true).unwrap();
    let d = f.call(std::slice::from_ref(&x)).unwrap();
    assert!(d[0].requires_grad());
    assert_eq!(f.stats().compiles, 6);
    d[0].sum(&[], false).unwrap().backward().unwrap();
    assert!(wl.grad().is_some(), "the captured weight got its gradient");
    assert!(x.grad().is_none());
    // every earlier signature hits its own entry again: no further compile
    let _ = wl.clone().requires_grad_(false).unwrap();
    f.call(std::slice::from_ref(&x)).unwrap();
    f.call(std::slice::from_ref(&xg)).unwrap();
    {
        let _off = no_grad();
        f.call(std::slice::from_ref(&xg)).unwrap();
    }
    let st = f.stats();
    assert_eq!(
        (st.compiles, st.entries, st.recompiles),
        (6, 4, 3),
        "{st:?}"
    );
}

#[test]
fn backward_twice_needs_retain_graph_and_saved_inputs_are_version_checked() {
    let x = leaf(&[3, 5], 8);
    let f = compile(|xs: &[Tensor]| Ok(vec![(xs[0].sin()? * &xs[0])?.sum(&[], false)?]));
    let y = f.call(std::slice::from_ref(&x)).unwrap();
    y[0].backward_with(None, true).unwrap();
    y[0].backward().unwrap();
    let err = y[0].backward().unwrap_err().to_string();
    assert!(
        err.contains("backward through the graph a second time"),
        "{err}"
    );
    // an input the backward reads, changed in place before backward: PyTorch's error
    let z = leaf(&[4], 9);
    let zc = z.detach();
    let f2 = compile(|xs: &[Tensor]| Ok(vec![(xs[0].clone() * &xs[1])?.sum(&[], false)?]));
    let out = f2.call(&[z.clone(), zc.clone()]).unwrap();
    zc.add_(1.0).unwrap();
    let err = out[0].backward().unwrap_err().to_string();
    assert!(err.contains("modified by an inplace operation"), "{err}");
}

#[test]
fn gradients_reach_eager_history_before_and_after_the_compiled_function() {
    // eager ops before and after the compiled call: gradients flow through all three
    let a = leaf(&[4, 3], 21);
    let pre = (a.exp().unwrap() * 2.0).unwrap();
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].tanh()?, (xs[0].clone() * 3.0)?]));
    let out = f.call(std::slice::from_ref(&pre)).unwrap();
    // only the first output is used: the second gets a zero gradient
    (out[0].clone() * &out[0])
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    let g = a.grad().unwrap();
    let b = leaf(&[4, 3], 21);
    let t = (b.exp().unwrap() * 2.0).unwrap().tanh().unwrap();
    (t.clone() * &t)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_close(
        "chain through a compiled function",
        &g,
        &b.grad().unwrap(),
        1e-5,
    );
}

/// Trains an MLP for `steps` with `make_opt`'s optimiser, eagerly or with the forward and
/// loss compiled, and returns the loss per step.
fn train(
    compiled: bool,
    steps: usize,
    make_opt: &dyn Fn(Vec<Tensor>) -> Box<dyn Optimizer>,
) -> Vec<f64> {
    let l1 = Linear::init(8, 16, true, 42).unwrap();
    let l2 = Linear::init(16, 4, true, 43).unwrap();
    let mut params = l1.parameters();
    params.extend(l2.parameters());
    let mut opt = make_opt(params);
    let step = |xs: &[Tensor]| -> kiln::Result<Tensor> {
        let out = Module::forward(&l2, &Module::forward(&l1, &xs[0])?.relu()?)?;
        mse_loss(&out, &xs[1], Reduction::Mean)
    };
    let f = compile(|xs: &[Tensor]| step(xs));
    let mut losses = Vec::new();
    for i in 0..steps {
        let x = Tensor::randn(&[16, 8], DType::F32, 1000 + (i % 7) as u64).unwrap();
        let y = (x.narrow(1, 0, 4).unwrap().sin().unwrap() * 0.5).unwrap();
        let loss = if compiled {
            f.call(&[x, y]).unwrap()
        } else {
            step(&[x, y]).unwrap()
        };
        opt.zero_grad();
        loss.backward().unwrap();
        opt.step().unwrap();
        losses.push(loss.item().unwrap());
    }
    if compiled {
        assert_eq!(
            f.stats().compiles,
            2,
            "one forward and one backward for every step"
        );
    }
    losses
}

fn assert_same_curve(what: &str, eager: &[f64], compiled: &[f64]) {
    for (i, (e, c)) in eager.iter().zip(compiled).enumerate() {
        let rel = (e - c).abs() / e.abs().max(1e-12);
        assert!(
            rel <= 1e-4,
            "{what}: step {i}: eager {e} compiled {c} (relative {rel:e})"
        );
    }
    assert!(eager.last() < eager.first(), "{what}: the loss goes down");
}

#[test]
fn compiled_training_follows_the_eager_loss_curve_for_100_steps() {
    let sgd = |p: Vec<Tensor>| -> Box<dyn Optimizer> {
        Box::new(Sgd::new(p, 0.05).unwrap().momentum(0.9, 0.0, false))
    };
    assert_same_curve(
        "sgd momentum",
        &train(false, 100, &sgd),
        &train(true, 100, &sgd),
    );
    let adamw = |p: Vec<Tensor>| -> Box<dyn Optimizer> { Box::new(AdamW::new(p, 1e-2).unwrap()) };
    assert_same_curve(
        "adamw",
        &train(false, 100, &adamw),
        &train(true, 100, &adamw),
    );
    let fused = |p: Vec<Tensor>| -> Box<dyn Optimizer> {
        Box::new(AdamW::new(p, 1e-2).unwrap().fused(true))
    };
    assert_same_curve(
        "adamw fused",
        &train(false, 100, &adamw),
        &train(true, 100, &fused),
    );
}

#[test]
fn a_random_op_is_not_drawn_twice_gradients_equal_eager() {
    // dropout by a seeded mask: the compiled backward replays the forward's draw
    let f = |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
        let mask = Tensor::rand(xs[0].shape(), DType::F32, 123)?
            .lt(&Tensor::scalar(0.7))?
            .cast(DType::F32)?;
        let y = ((&xs[0] * &mask)? * (1.0 / 0.7))?.exp()?;
        Ok(vec![y])
    };
    let x = leaf(&[9, 13], 30);
    let e = f(std::slice::from_ref(&x)).unwrap();
    weighted_loss(&e, 1).unwrap().backward().unwrap();
    let eg = take_grads(std::slice::from_ref(&x));
    for (label, opts) in option_sets() {
        let cf = compile_with(f, opts);
        let out = cf.call(std::slice::from_ref(&x)).unwrap();
        assert_close(&format!("{label}: output"), &out[0], &e[0], 2e-5);
        weighted_loss(&out, 1).unwrap().backward().unwrap();
        let g = take_grads(std::slice::from_ref(&x));
        assert_close(
            &format!("{label}: grad"),
            g[0].as_ref().unwrap(),
            eg[0].as_ref().unwrap(),
            2e-5,
        );
    }
}

#[test]
fn explain_reports_the_partition_of_a_training_entry() {
    let x = leaf(&[4, 8], 40);
    let w = leaf(&[8, 8], 41);
    let report = kiln::explain(
        |xs: &[Tensor]| Ok(vec![xs[0].matmul(&w)?.exp()?.sin()?.tanh()?]),
        std::slice::from_ref(&x),
    )
    .unwrap();
    assert_eq!(report.partitions.len(), 1);
    let p = &report.partitions[0];
    assert!(p.saved_bytes <= p.eager_saved_bytes, "{p}");
    let text = report.to_string();
    assert!(text.contains("partition 0: saved"), "{text}");
    assert!(text.contains("eager autograd saves"), "{text}");
}

/// A derivative that needs a size the symbols would hide (the count of a variance over the
/// batch, a slice of it): the automatic-dynamic recompile cannot build a training graph over
/// symbolic sizes, so each new batch compiles statically instead of failing (`kiln fuzz`
/// found the failure), and gradients still equal eager's.
#[test]
fn training_graphs_needing_hidden_sizes_compile_each_batch_statically() {
    let w = leaf(&[4], 3);
    let program = |xs: &[Tensor], w: &Tensor| -> kiln::Result<Tensor> {
        let v = (&xs[0] * w)?.var(&[0], 1, false)?;
        let s = xs[0].slice(0, 1, -1, 1)?.sum(&[], false)?;
        v.sum(&[], false)? + s
    };
    let f = compile_with(
        |xs: &[Tensor]| program(xs, &w),
        CompileOptions::default().dynamic(Dynamic::Auto),
    );
    for (i, batch) in [3usize, 5, 7].into_iter().enumerate() {
        let x = leaf(&[batch, 4], 20 + i as u64);
        program(std::slice::from_ref(&x), &w)
            .unwrap()
            .backward()
            .unwrap();
        let eg = take_grads(&[x.clone(), w.clone()]);
        f.call(std::slice::from_ref(&x))
            .unwrap()
            .backward()
            .unwrap();
        let g = take_grads(&[x.clone(), w.clone()]);
        for (k, (a, e)) in g.iter().zip(&eg).enumerate() {
            let (a, e) = (a.as_ref().unwrap(), e.as_ref().unwrap());
            assert_close(&format!("batch {batch}: grad {k}"), a, e, 2e-5);
        }
    }
    // one static entry (forward and backward graphs) per batch
    let st = f.stats();
    assert_eq!((st.entries, st.compiles), (3, 6), "{st:?}");
}
