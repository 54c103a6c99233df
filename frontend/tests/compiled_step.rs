//! Whole training steps as one compiled graph: forward, loss, `backward()` and
//! `optimizer.step()` traced together, in-place updates of parameters, gradients and
//! optimiser state written back into their storage, so that compiled steps follow eager
//! steps exactly (per-step loss within 1e-4 for 100 steps) and the next call, compiled or
//! eager, sees the state.

mod training_common;
use kiln::nn::functional::{cross_entropy, mse_loss, CrossEntropyOptions, Reduction};
use kiln::nn::{Linear, Module};
use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{compile, compile_with, CompileOptions, DType, Tensor};
use std::sync::Mutex;
use training_common::{option_sets, values};

type MakeOpt = dyn Fn(Vec<Tensor>) -> Box<dyn Optimizer + Send>;

/// What a run of `steps` steps leaves: the loss per step and the final parameters.
struct Run {
    losses: Vec<f64>,
    params: Vec<Vec<f64>>,
}

/// A batch of the regression task (step `i`).
fn batch(i: usize) -> [Tensor; 2] {
    let x = Tensor::randn(&[16, 8], DType::F32, 1000 + (i % 7) as u64).unwrap();
    let y = (x.narrow(1, 0, 4).unwrap().sin().unwrap() * 0.5).unwrap();
    [x, y]
}

/// The regression MLP (8-16-4, relu) with its optimiser.
struct Mlp {
    l1: Linear,
    l2: Linear,
    params: Vec<Tensor>,
    opt: Mutex<Box<dyn Optimizer + Send>>,
}

impl Mlp {
    fn new(make_opt: &MakeOpt) -> Mlp {
        let l1 = Linear::init(8, 16, true, 42).unwrap();
        let l2 = Linear::init(16, 4, true, 43).unwrap();
        let mut params = l1.parameters();
        params.extend(l2.parameters());
        let opt = Mutex::new(make_opt(params.clone()));
        Mlp {
            l1,
            l2,
            params,
            opt,
        }
    }

    /// One whole training step: zero_grad, forward, loss, backward, the optimiser's step.
    fn step(&self, xs: &[Tensor]) -> kiln::Result<Tensor> {
        let mut opt = self.opt.lock().unwrap();
        opt.zero_grad();
        let out = Module::forward(&self.l2, &Module::forward(&self.l1, &xs[0])?.relu()?)?;
        let loss = mse_loss(&out, &xs[1], Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    }
}

/// Trains an MLP for `steps` steps, the whole step (zero_grad, forward, loss, backward,
/// optimiser step) compiled under `opts`, or eager.
fn train(steps: usize, make_opt: &MakeOpt, opts: Option<CompileOptions>) -> Run {
    let mlp = Mlp::new(make_opt);
    let step = |xs: &[Tensor]| mlp.step(xs);
    let mut losses = Vec::new();
    match opts {
        Some(opts) => {
            let f = compile_with(step, opts);
            for i in 0..steps {
                losses.push(f.call(&batch(i)).unwrap().item().unwrap());
            }
            let s = f.stats();
            assert_eq!(s.traces, 1, "one trace: {s:?}");
            assert_eq!(s.graph_breaks, 0, "no break: {s:?}");
            assert_eq!(
                s.cache_hits,
                steps as u64 - 1,
                "every later step a hit: {s:?}"
            );
            assert_eq!(s.entries, 1, "{s:?}");
        }
        None => {
            for i in 0..steps {
                losses.push(step(&batch(i)).unwrap().item().unwrap());
            }
        }
    }
    let params = mlp.params.iter().map(values).collect();
    Run { losses, params }
}

fn assert_same_run(what: &str, eager: &Run, compiled: &Run) {
    for (i, (e, c)) in eager.losses.iter().zip(&compiled.losses).enumerate() {
        let rel = (e - c).abs() / e.abs().max(1e-12);
        assert!(
            rel <= 1e-4,
            "{what}: step {i}: eager {e} compiled {c} (relative {rel:e})"
        );
    }
    assert!(
        eager.losses.last() < eager.losses.first(),
        "{what}: the loss goes down"
    );
    for (k, (e, c)) in eager.params.iter().zip(&compiled.params).enumerate() {
        let worst = e
            .iter()
            .zip(c)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-4, "{what}: parameter {k} differs by {worst:e}");
    }
}

fn optimisers() -> Vec<(&'static str, Box<MakeOpt>)> {
    vec![
        (
            "sgd momentum",
            Box::new(|p| Box::new(Sgd::new(p, 0.05).unwrap().momentum(0.9, 0.0, false))),
        ),
        (
            "sgd nesterov, dampening, weight decay",
            Box::new(|p| {
                Box::new(
                    Sgd::new(p, 0.05)
                        .unwrap()
                        .momentum(0.9, 0.1, false)
                        .weight_decay(1e-3),
                )
            }),
        ),
        (
            "sgd nesterov",
            Box::new(|p| Box::new(Sgd::new(p, 0.05).unwrap().momentum(0.9, 0.0, true))),
        ),
        (
            "adamw",
            Box::new(|p| Box::new(AdamW::new(p, 1e-2).unwrap())),
        ),
        (
            "adamw amsgrad",
            Box::new(|p| {
                Box::new(
                    AdamW::new(p, 1e-2)
                        .unwrap()
                        .options((0.9, 0.99), 1e-8, 0.05, true),
                )
            }),
        ),
        (
            "adamw fused",
            Box::new(|p| Box::new(AdamW::new(p, 1e-2).unwrap().fused(true))),
        ),
    ]
}

#[test]
fn a_compiled_training_step_follows_the_eager_loss_curve_for_100_steps() {
    for (name, make) in optimisers() {
        let eager = train(100, make.as_ref(), None);
        let compiled = train(100, make.as_ref(), Some(CompileOptions::default()));
        assert_same_run(name, &eager, &compiled);
    }
}

#[test]
fn every_backend_compiles_the_whole_step_like_eager() {
    for (name, make) in optimisers()
        .into_iter()
        .filter(|(n, _)| !n.contains("fused"))
    {
        let eager = train(12, make.as_ref(), None);
        for (backend, opts) in option_sets() {
            let compiled = train(12, make.as_ref(), Some(opts));
            assert_same_run(&format!("{name} on {backend}"), &eager, &compiled);
        }
    }
}

#[test]
fn compiled_and_eager_steps_interleave_on_the_same_state() {
    // every third step eager: the optimiser state the graph writes back is what the eager
    // step reads, and the reverse
    let make =
        |p: Vec<Tensor>| -> Box<dyn Optimizer + Send> { Box::new(AdamW::new(p, 1e-2).unwrap()) };
    let eager = train(30, &make, None);
    let mlp = Mlp::new(&make);
    let params = mlp.params.clone();
    let step = |xs: &[Tensor]| mlp.step(xs);
    let f = compile(step);
    let mut losses = Vec::new();
    for i in 0..30 {
        let l = if i % 3 == 2 {
            step(&batch(i))
        } else {
            f.call(&batch(i))
        };
        losses.push(l.unwrap().item().unwrap());
    }
    let mixed = Run {
        losses,
        params: params.iter().map(values).collect(),
    };
    assert_same_run("interleaved", &eager, &mixed);
    // the gradients the last compiled step left are the leaves' `.grad`, real tensors
    assert!(params.iter().all(|p| p.grad().is_some()));
}

#[test]
fn a_compiled_optimizer_step_reads_the_gradients_of_each_call() {
    // backward runs eagerly; only `opt.step()` is compiled: each call's gradients are new
    // tensors, which the graph must fetch from the leaves, never the first call's
    let run = |compiled: bool| -> Vec<Vec<f64>> {
        let l1 = Linear::init(8, 4, true, 7).unwrap();
        let params = l1.parameters();
        let opt = Mutex::new(AdamW::new(params.clone(), 1e-2).unwrap());
        let f = compile(|_: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
            opt.lock().unwrap().step()?;
            Ok(vec![])
        });
        for i in 0..6 {
            opt.lock().unwrap().zero_grad();
            let [x, y] = batch(i);
            let out = Module::forward(&l1, &x).unwrap();
            mse_loss(&out, &y, Reduction::Mean)
                .unwrap()
                .backward()
                .unwrap();
            if compiled {
                f.call(&[]).unwrap();
            } else {
                opt.lock().unwrap().step().unwrap();
            }
        }
        if compiled {
            let s = f.stats();
            assert_eq!((s.traces, s.cache_hits, s.graph_breaks), (1, 5, 0), "{s:?}");
        }
        params.iter().map(values).collect()
    };
    let (eager, compiled) = (run(false), run(true));
    for (e, c) in eager.iter().zip(&compiled) {
        for (a, b) in e.iter().zip(c) {
            assert!((a - b).abs() <= 1e-6, "eager {a} compiled {b}");
        }
    }
}

#[test]
fn in_place_updates_inside_a_compiled_function_are_written_back() {
    let acc = Tensor::zeros(&[3], DType::F32).unwrap();
    let f = compile(|xs: &[Tensor]| -> kiln::Result<Tensor> {
        acc.add_(&xs[0])?;
        xs[1].mul_(2.0)?;
        let r = (&acc * &xs[1])?;
        acc.add_(1.0)?;
        Ok(r)
    });
    for i in 0..3 {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
        let y = Tensor::from_vec(vec![1.0f32, -1.0, 0.5], &[3]).unwrap();
        let (v_acc, v_y) = (acc.version(), y.version());
        let before = values(&acc);
        let r = f.call(&[x.clone(), y.clone()]).unwrap();
        let want_acc: Vec<f64> = before
            .iter()
            .zip([1.0, 2.0, 3.0])
            .map(|(a, x)| a + x)
            .collect();
        let want_y = [2.0, -2.0, 1.0];
        let want_r: Vec<f64> = want_acc.iter().zip(want_y).map(|(a, y)| a * y).collect();
        assert_eq!(
            values(&r),
            want_r,
            "call {i}: the result reads the updated values"
        );
        assert_eq!(values(&y), want_y, "call {i}: the argument is updated");
        let after: Vec<f64> = want_acc.iter().map(|a| a + 1.0).collect();
        assert_eq!(
            values(&acc),
            after,
            "call {i}: the captured tensor is updated"
        );
        assert!(
            acc.version() > v_acc && y.version() > v_y,
            "versions are bumped"
        );
    }
    let s = f.stats();
    assert_eq!((s.traces, s.graph_breaks, s.cache_hits), (1, 0, 2), "{s:?}");
}

#[test]
fn an_update_of_a_view_still_breaks_the_graph_and_stays_correct() {
    let base = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let f = compile(|xs: &[Tensor]| -> kiln::Result<Tensor> {
        let row = base.narrow(0, 1, 1)?;
        row.add_(&xs[0])?;
        base.sum(&[], false)
    });
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
    assert_eq!(
        f.call(std::slice::from_ref(&x)).unwrap().item().unwrap(),
        6.0
    );
    assert_eq!(f.call(&[x]).unwrap().item().unwrap(), 12.0);
    assert_eq!(values(&base), vec![0.0, 0.0, 0.0, 2.0, 4.0, 6.0]);
}

#[test]
fn a_classifier_step_with_cross_entropy_is_one_graph() {
    // cross_entropy checks its targets; for an argument that check runs on every call
    // before the graph, so it does not break the graph
    let l1 = Linear::init(8, 5, true, 3).unwrap();
    let opt = Mutex::new(Sgd::new(l1.parameters(), 0.1).unwrap());
    let f = compile(|xs: &[Tensor]| -> kiln::Result<Tensor> {
        let mut opt = opt.lock().unwrap();
        opt.zero_grad();
        let loss = cross_entropy(
            &Module::forward(&l1, &xs[0])?,
            &xs[1],
            &CrossEntropyOptions::default(),
        )?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    });
    let x = Tensor::randn(&[6, 8], DType::F32, 5).unwrap();
    let good = Tensor::from_vec(vec![0i64, 1, 2, 3, 4, 0], &[6]).unwrap();
    let first = f.call(&[x.clone(), good.clone()]).unwrap().item().unwrap();
    let second = f.call(&[x.clone(), good]).unwrap().item().unwrap();
    assert!(second < first, "it learns: {first} then {second}");
    let bad = Tensor::from_vec(vec![0i64, 1, 2, 3, 9, 0], &[6]).unwrap();
    let w = values(&l1.parameters()[0]);
    let e = f.call(&[x, bad]).unwrap_err().to_string();
    assert!(e.contains("target 9") && e.contains("out of bounds"), "{e}");
    assert_eq!(
        values(&l1.parameters()[0]),
        w,
        "a failing call changes no parameter"
    );
    let s = f.stats();
    assert_eq!((s.traces, s.graph_breaks), (1, 0), "{s:?}");
}

#[test]
fn changing_a_hyperparameter_recompiles_the_step_never_a_stale_graph() {
    // the learning rate is a constant of the compiled step; a scheduler changing it must
    // recompile (once per new value), and the run must follow eager's with the same schedule
    let run = |compiled: bool| -> (Vec<f64>, Option<kiln::CompileStats>) {
        let l1 = Linear::init(8, 4, true, 11).unwrap();
        let opt = Mutex::new(AdamW::new(l1.parameters(), 1e-2).unwrap());
        let step = |xs: &[Tensor]| -> kiln::Result<Tensor> {
            let mut opt = opt.lock().unwrap();
            opt.zero_grad();
            let loss = mse_loss(&Module::forward(&l1, &xs[0])?, &xs[1], Reduction::Mean)?;
            loss.backward()?;
            opt.step()?;
            Ok(loss)
        };
        let f = compile(step);
        let mut losses = Vec::new();
        for i in 0..9 {
            if i == 3 || i == 6 {
                let o = opt.lock().unwrap();
                o.set_lr(o.lr() * 0.5);
            }
            let [x, y] = batch(i);
            let (x, y) = (x, y.narrow(1, 0, 4).unwrap());
            let l = if compiled {
                f.call(&[x, y])
            } else {
                step(&[x, y])
            };
            losses.push(l.unwrap().item().unwrap());
        }
        (losses, compiled.then(|| f.stats()))
    };
    let (eager, _) = run(false);
    let (compiled, stats) = run(true);
    for (i, (e, c)) in eager.iter().zip(&compiled).enumerate() {
        assert!(
            (e - c).abs() <= 1e-6 * e.abs().max(1.0),
            "step {i}: {e} vs {c}"
        );
    }
    let s = stats.unwrap();
    assert_eq!((s.traces, s.entries, s.recompiles), (3, 3, 2), "{s:?}");
}

#[test]
fn toggling_requires_grad_or_no_grad_around_a_compiled_step_never_reuses_a_stale_graph() {
    let l1 = Linear::init(8, 4, true, 13).unwrap();
    let opt = Mutex::new(Sgd::new(l1.parameters(), 0.1).unwrap());
    let f = compile(|xs: &[Tensor]| -> kiln::Result<Tensor> {
        let mut opt = opt.lock().unwrap();
        opt.zero_grad();
        let loss = mse_loss(&Module::forward(&l1, &xs[0])?, &xs[1], Reduction::Mean)?;
        if loss.requires_grad() || kiln::autograd::is_grad_enabled() {
            loss.backward()?;
            opt.step()?;
        }
        Ok(loss)
    });
    let [x, y] = batch(0);
    let y = y.narrow(1, 0, 4).unwrap();
    let w0 = values(&l1.parameters()[0]);
    f.call(&[x.clone(), y.clone()]).unwrap();
    let w1 = values(&l1.parameters()[0]);
    assert_ne!(w0, w1, "a step updates the weights");
    {
        // under no_grad the function skips the update: a new entry, the weights untouched
        let _off = kiln::autograd::no_grad();
        f.call(&[x.clone(), y.clone()]).unwrap();
        assert_eq!(values(&l1.parameters()[0]), w1);
    }
    f.call(&[x, y]).unwrap();
    assert_ne!(
        values(&l1.parameters()[0]),
        w1,
        "the training entry runs again"
    );
    let s = f.stats();
    assert_eq!((s.traces, s.entries, s.cache_hits), (2, 2, 1), "{s:?}");
}

#[test]
fn explaining_a_training_step_runs_it_once_and_leaves_real_gradients() {
    let l1 = Linear::init(8, 4, true, 17).unwrap();
    let opt = Mutex::new(Sgd::new(l1.parameters(), 0.1).unwrap());
    let step = |xs: &[Tensor]| -> kiln::Result<Tensor> {
        let mut opt = opt.lock().unwrap();
        opt.zero_grad();
        let loss = mse_loss(&Module::forward(&l1, &xs[0])?, &xs[1], Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    };
    let [x, y] = batch(0);
    let y = y.narrow(1, 0, 4).unwrap();
    let w0 = values(&l1.parameters()[0]);
    let report = kiln::explain(step, &[x, y]).unwrap().to_string();
    assert!(report.contains("graph"), "{report}");
    assert_ne!(values(&l1.parameters()[0]), w0, "the step ran once");
    for p in l1.parameters() {
        let g = p.grad().expect("backward set it");
        assert!(g.as_cpu().is_ok(), "a real gradient, not a traced value");
    }
    // capture (what `kiln dump` uses) too: the graph comes back and the step has run
    let [x, y] = batch(1);
    let w1 = values(&l1.parameters()[0]);
    let graphs = compile(step)
        .capture(&[x, y.narrow(1, 0, 4).unwrap()])
        .unwrap();
    assert_eq!(graphs.len(), 1);
    assert_ne!(
        values(&l1.parameters()[0]),
        w1,
        "the captured step ran once"
    );
    for p in l1.parameters() {
        assert!(p.grad().unwrap().as_cpu().is_ok());
    }
}

#[test]
fn every_in_place_op_inside_a_compiled_function_equals_eager() {
    // each in-place op, made functional and written back, against eager on copies: random
    // values, odd and size-1 shapes, a broadcast and a dtype-converting source, a scalar,
    // and non-contiguous destinations and sources, on every backend
    type Update = fn(&Tensor, &Tensor) -> kiln::Result<()>;
    let ops: [(&str, Update); 6] = [
        ("add_", |d, s| d.add_(s)),
        ("mul_", |d, s| d.mul_(s)),
        ("copy_", |d, s| d.copy_(s)),
        ("fill_ 0-d", |d, s| d.fill_(&s.sum(&[], false)?)),
        ("add_ scalar", |d, _| d.add_(0.25)),
        ("fill_ scalar", |d, _| d.fill_(-1.5)),
    ];
    // (destination shape, transposed destination, source shape, source dtype, transposed source)
    type Case = (&'static [usize], bool, &'static [usize], DType, bool);
    let cases: [Case; 5] = [
        (&[3, 5], false, &[3, 5], DType::F32, false),
        (&[3, 5], false, &[5], DType::F64, false),
        (&[5, 3], true, &[5, 3], DType::F32, true),
        (&[1, 7], false, &[1], DType::F32, false),
        (&[1], false, &[1], DType::F64, false),
    ];
    let fresh = |shape: &[usize], transposed: bool, dtype: DType, seed: u64| -> Tensor {
        let t = Tensor::randn(shape, DType::F32, seed)
            .unwrap()
            .cast(dtype)
            .unwrap();
        if transposed {
            t.transpose(0, 1).unwrap()
        } else {
            t
        }
    };
    for (name, update) in ops {
        for (k, &(ds, dt, ss, sdt, st)) in cases.iter().enumerate() {
            for (backend, opts) in option_sets() {
                let what = format!("{name} case {k} on {backend}");
                let seed = 100 + k as u64;
                let (dst_e, dst_c) = (
                    fresh(ds, dt, DType::F32, seed),
                    fresh(ds, dt, DType::F32, seed),
                );
                let src = fresh(ss, st, sdt, seed + 50);
                let f = |xs: &[Tensor]| -> kiln::Result<Tensor> {
                    update(&dst_c, &xs[0])?;
                    dst_c.exp()
                };
                update(&dst_e, &src).unwrap();
                let want = dst_e.exp().unwrap();
                let got = compile_with(f, opts)
                    .call(std::slice::from_ref(&src))
                    .unwrap();
                let close = |a: &[f64], b: &[f64]| {
                    a.iter()
                        .zip(b)
                        .all(|(x, y)| (x - y).abs() <= 1e-6 * y.abs().max(1.0))
                };
                assert!(close(&values(&got), &values(&want)), "{what}: result");
                assert!(
                    close(&values(&dst_c), &values(&dst_e)),
                    "{what}: written back"
                );
            }
        }
    }
}
