//! `kiln::compile` with `backend: cuda`, on the device `KILN_CUDA_DEVICE` names: here the
//! emulated one unless the variable is set (every generated kernel run on the CPU through
//! the g++ emulation harness, GEMMs on the CPU), so the whole path (capture, passes, CUDA C,
//! launches with view strides, GEMM epilogues, gathers, graphs, guards and recompiles) is
//! checked against eager without a GPU; `scripts/gpu-check.sh` runs the same tests with
//! `KILN_CUDA_DEVICE=0` on a GPU. Each test sets the variable before the first compile (the
//! device is chosen once per process; every test of this file asks for the same one).

mod cuda_common;

use cuda_common::{assert_close, emulated_unless_set, randn, small_bert_config};
use kiln::{compile_with, Backend, CompileOptions, Mode, Result, Tensor};

/// Kernel launches and GEMMs the process's device has run.
fn device_work() -> (u64, u64) {
    let c = kiln_codegen::cuda::select::default_gpu()
        .expect("the test device")
        .counters();
    (c.launches, c.gemms)
}

fn cuda() -> CompileOptions {
    CompileOptions::default().backend(Backend::Cuda)
}

#[test]
fn a_small_block_matches_eager_and_recompiles_for_new_shapes() {
    emulated_unless_set();
    let w = randn(&[24, 16], 1);
    let b = randn(&[16], 2);
    let g = randn(&[16], 3);
    let f = |x: &Tensor| -> Result<Tensor> {
        let h = (&x.matmul(&w)? + &b)?.gelu()?;
        let a = h.transpose(0, 1)?.softmax(-1)?.transpose(0, 1)?;
        (&a * &h)?.layer_norm(&[16], Some(&g), None, 1e-5)
    };
    let cf = compile_with(f, cuda().name("block"));
    for (rows, seed) in [(5usize, 4u64), (5, 5), (9, 6)] {
        let x = randn(&[rows, 24], seed);
        let before = device_work();
        assert_close(&cf.call(&x).unwrap(), &f(&x).unwrap());
        let after = device_work();
        // tests run in parallel on the one device: at least this call's work
        assert!(
            after.0 >= before.0 + 2 && after.1 > before.1,
            "ran on the device"
        );
    }
    let s = cf.stats();
    assert!(
        s.compiles >= 2,
        "a new shape recompiles (or goes dynamic): {s:?}"
    );
    assert!(s.cache_hits >= 1, "{s:?}");
}

#[test]
fn an_embedding_lookup_runs_the_gather_kernel() {
    emulated_unless_set();
    let table = randn(&[20, 8], 7);
    let f = |ids: &Tensor| -> Result<Tensor> { table.index_select(0, ids)?.tanh() };
    let cf = compile_with(f, cuda().name("embed"));
    let ids = Tensor::from_vec(vec![3i64, 0, 19, 3], &[4]).unwrap();
    let before = device_work();
    assert_close(&cf.call(&ids).unwrap(), &f(&ids).unwrap());
    assert!(device_work().0 > before.0, "ran on the device");
    // an index out of range is an error (as eager's), not garbage
    let bad = Tensor::from_vec(vec![1i64, 20], &[2]).unwrap();
    let e = cf.call(&bad).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn reduce_overhead_replays_a_recorded_graph_with_each_calls_inputs() {
    emulated_unless_set();
    let w = randn(&[12, 10], 8);
    let f = |x: &Tensor| -> Result<Tensor> { x.matmul(&w)?.tanh()?.softmax(-1) };
    let cf = compile_with(f, cuda().mode(Mode::ReduceOverhead).name("ro"));
    for seed in [9u64, 10, 11] {
        let x = randn(&[3, 12], seed);
        assert_close(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 1);
}

#[test]
fn a_small_bert_encoder_runs_end_to_end_on_the_cuda_backend() {
    use kiln::nn::pooling::{l2_normalize, mean_pool};
    use kiln::nn::BertModel;
    emulated_unless_set();
    let cfg = small_bert_config();
    let m = BertModel::random(cfg, 1).expect("the model builds");
    let (b, s) = (2usize, 5usize);
    let ids: Vec<i64> = (0..b * s).map(|i| (i as i64 * 7 + 3) % 64).collect();
    let args = [
        Tensor::from_vec(ids, &[b, s]).unwrap(),
        Tensor::from_vec(vec![1f32; b * s], &[b, s]).unwrap(),
        Tensor::from_vec((0..b).flat_map(|_| 0..s as i64).collect(), &[b, s]).unwrap(),
    ];
    let f = |a: &[Tensor; 3]| -> Result<Tensor> {
        let h = m.forward(&a[0], &a[1], &a[2])?;
        l2_normalize(&mean_pool(&h, &a[1])?)
    };
    let cf = compile_with(f, cuda().name("small_bert"));
    let before = device_work();
    let got = cf.call(&args).unwrap();
    let after = device_work();
    assert_close(&got, &f(&args).unwrap());
    // every group ran on the device (no fallback to the cpu backend): its GEMMs among them
    assert!(after.1 >= before.1 + 12, "GEMMs: {before:?} -> {after:?}");
}

#[test]
fn every_workload_of_the_zoo_runs_on_the_cuda_backend() {
    emulated_unless_set();
    // small shapes: the emulated device runs one OS thread per CUDA thread
    let zoo: [(&str, &[usize]); 7] = [
        ("pointwise", &[3001]),
        ("layernorm", &[7, 96]),
        ("softmax", &[5, 130]),
        ("reduce", &[9, 77]),
        ("mlp", &[6, 32]),
        ("block", &[1, 8, 32]),
        ("tiny", &[50]),
    ];
    for (name, shape) in zoo {
        let m = kiln::models::build(name, Some(shape)).unwrap();
        let inputs = m.example_inputs(5).unwrap();
        let cf = compile_with(|xs: &[Tensor]| m.forward(xs), cuda().name(name));
        let before = device_work();
        let got = cf.call(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let after = device_work();
        assert!(after.0 > before.0, "{name} ran on the device");
        let want = m.forward(&inputs).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            assert_close(g, w);
        }
    }
}

#[test]
fn compiled_training_runs_forward_and_backward_on_the_device() {
    emulated_unless_set();
    let w = randn(&[12, 8], 31).requires_grad_(true).unwrap();
    let b = randn(&[8], 32).requires_grad_(true).unwrap();
    let f = |x: &Tensor| -> Result<Tensor> {
        let h = (&x.matmul(&w)? + &b)?.tanh()?;
        (&h * &h.softmax(-1)?)?.sum(&[], false)
    };
    let x = randn(&[5, 12], 33).requires_grad_(true).unwrap();
    f(&x).unwrap().backward().unwrap();
    let eager: Vec<Tensor> = [&x, &w, &b].iter().map(|t| t.grad().unwrap()).collect();
    for t in [&x, &w, &b] {
        t.zero_grad();
    }
    let cf = compile_with(f, cuda().name("train"));
    let before = device_work();
    let loss = cf.call(&x).unwrap();
    assert_eq!(
        loss.grad_fn_name().as_deref(),
        Some("CompiledFunctionBackward")
    );
    loss.backward().unwrap();
    let after = device_work();
    assert!(
        after.1 >= before.1 + 3,
        "forward and backward GEMMs ran on the device"
    );
    for (t, e) in [&x, &w, &b].iter().zip(&eager) {
        assert_close(&t.grad().unwrap(), e);
    }
    assert_eq!(cf.stats().compiles, 2);
}

#[test]
fn a_whole_training_step_with_adamw_runs_on_the_device() {
    // forward, loss, backward and the AdamW update as one graph on the cuda backend: its
    // kernels (the backward's and the optimiser's included) run on the device, and the
    // weights and optimiser state written back equal eager's
    emulated_unless_set();
    use kiln::nn::functional::{mse_loss, Reduction};
    use kiln::nn::{Linear, Module};
    use kiln::optim::{AdamW, Optimizer};
    use std::sync::Mutex;
    let run = |opts: Option<CompileOptions>| -> (Vec<f64>, Vec<Vec<f64>>) {
        let l1 = Linear::init(6, 5, true, 3).unwrap();
        let params = l1.parameters();
        let opt = Mutex::new(AdamW::new(params.clone(), 1e-2).unwrap());
        let step = |xs: &[Tensor]| -> Result<Tensor> {
            let mut opt = opt.lock().unwrap();
            opt.zero_grad();
            let loss = mse_loss(
                &Module::forward(&l1, &xs[0])?.tanh()?,
                &xs[1],
                Reduction::Mean,
            )?;
            loss.backward()?;
            opt.step()?;
            Ok(loss)
        };
        let x = randn(&[4, 6], 41);
        let y = randn(&[4, 5], 42);
        let mut losses = Vec::new();
        match opts {
            Some(o) => {
                let f = compile_with(step, o);
                let before = device_work();
                for _ in 0..3 {
                    losses.push(f.call(&[x.clone(), y.clone()]).unwrap().item().unwrap());
                }
                assert!(device_work().1 > before.1, "the step ran on the device");
                let s = f.stats();
                assert_eq!((s.traces, s.graph_breaks, s.cache_hits), (1, 0, 2), "{s:?}");
            }
            None => {
                for _ in 0..3 {
                    losses.push(step(&[x.clone(), y.clone()]).unwrap().item().unwrap());
                }
            }
        }
        let p = params
            .iter()
            .map(|t| t.as_cpu().unwrap().to_f64_vec())
            .collect();
        (losses, p)
    };
    let (el, ep) = run(None);
    let (cl, cp) = run(Some(cuda().name("train_step")));
    for (e, c) in el.iter().zip(&cl) {
        assert!((e - c).abs() <= 1e-5 * e.abs().max(1.0), "loss {e} vs {c}");
    }
    for (e, c) in ep.iter().flatten().zip(cp.iter().flatten()) {
        assert!((e - c).abs() <= 1e-5, "weight {e} vs {c}");
    }
}
