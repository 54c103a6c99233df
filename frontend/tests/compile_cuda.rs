//! `kiln::compile` with `backend: cuda`, on the device `KILN_CUDA_DEVICE` names: here the
//! emulated one unless the variable is set (every generated kernel run on the CPU through
//! the g++ emulation harness, GEMMs on the CPU), so the whole path (capture, passes, CUDA C,
//! launches with view strides, GEMM epilogues, gathers, graphs, guards and recompiles) is
//! checked against eager without a GPU; `scripts/gpu-check.sh` runs the same tests with
//! `KILN_CUDA_DEVICE=0` on a GPU. Each test sets the variable before the first compile (the
//! device is chosen once per process; every test of this file asks for the same one).

use kiln::{compile_with, Backend, CompileOptions, DType, Mode, Result, Tensor};

fn emulated() {
    // once, before any device is used (tests run on several threads)
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        if std::env::var_os("KILN_CUDA_DEVICE").is_none() {
            std::env::set_var("KILN_CUDA_DEVICE", "emulated");
        }
    });
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed).unwrap()
}

/// Kernel launches and GEMMs the process's device has run.
fn device_work() -> (u64, u64) {
    let c = kiln_codegen::cuda::select::default_gpu()
        .expect("the emulated device")
        .counters();
    (c.launches, c.gemms)
}

fn cuda() -> CompileOptions {
    CompileOptions::default().backend(Backend::Cuda)
}

/// Compiled equals eager within the tolerance of sums and GEMMs (1e-4 relative, 1e-5
/// absolute).
fn assert_same(compiled: &Tensor, eager: &Tensor) {
    assert_eq!(compiled.shape(), eager.shape());
    assert_eq!(compiled.dtype(), eager.dtype());
    let (a, b) = (compiled.to_vec_f64().unwrap(), eager.to_vec_f64().unwrap());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-4 * y.abs() + 1e-5,
            "element {i}: compiled {x} vs eager {y}"
        );
    }
}

#[test]
fn a_small_block_matches_eager_and_recompiles_for_new_shapes() {
    emulated();
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
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
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
    emulated();
    let table = randn(&[20, 8], 7);
    let f = |ids: &Tensor| -> Result<Tensor> { table.index_select(0, ids)?.tanh() };
    let cf = compile_with(f, cuda().name("embed"));
    let ids = Tensor::from_vec(vec![3i64, 0, 19, 3], &[4]).unwrap();
    let before = device_work();
    assert_same(&cf.call(&ids).unwrap(), &f(&ids).unwrap());
    assert!(device_work().0 > before.0, "ran on the device");
    // an index out of range is an error (as eager's), not garbage
    let bad = Tensor::from_vec(vec![1i64, 20], &[2]).unwrap();
    let e = cf.call(&bad).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn reduce_overhead_replays_a_recorded_graph_with_each_calls_inputs() {
    emulated();
    let w = randn(&[12, 10], 8);
    let f = |x: &Tensor| -> Result<Tensor> { x.matmul(&w)?.tanh()?.softmax(-1) };
    let cf = compile_with(f, cuda().mode(Mode::ReduceOverhead).name("ro"));
    for seed in [9u64, 10, 11] {
        let x = randn(&[3, 12], seed);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 1);
}
