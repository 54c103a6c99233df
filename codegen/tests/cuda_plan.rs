//! Whole CUDA plans (kernel launches with view strides, GEMMs with epilogues, symbolic
//! sizes) against the reference interpreter, on every device this machine has: the
//! emulated one always (kernels through the g++ emulation harness, GEMMs on the CPU), a
//! real GPU where there is one (`gpu_test!` makes both tests; the GPU one prints why it is
//! skipped, and fails instead when `KILN_REQUIRE_GPU` is set).
//!
//! Sizes are small and odd (the emulation runs one OS thread per CUDA thread). Tolerance:
//! |got - want| ≤ 1e-5·|want| + 1e-6 for pointwise plans, 1e-4·|want| + 1e-5 where sums or
//! GEMMs are involved; NaN where the interpreter has NaN.

use kiln_codegen::cuda::device_tensor::DeviceTensor;
use kiln_codegen::cuda::driver_gpu::gpu_for_tests;
use kiln_codegen::cuda::emulated_gpu::EmulatedGpu;
use kiln_codegen::cuda::gpu::GpuDevice;
use kiln_codegen::cuda::plan::{gemm_operand, CudaPlan, CudaStepKind};
use kiln_ir::interp::{eval, random_inputs};
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use kiln_runtime::CpuTensor;

/// Tolerance of plans without sums.
const POINTWISE: (f64, f64) = (1e-5, 1e-6);
/// Tolerance of plans with sums or GEMMs.
const SUMS: (f64, f64) = (1e-4, 1e-5);

/// Makes `$name::emulated` (always runs) and `$name::cuda` (runs on a GPU, else prints why
/// not) from a function of the device.
macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn emulated() {
                let gpu = EmulatedGpu::new();
                ($body)(&gpu as &dyn GpuDevice);
                assert_eq!(gpu.live_blocks(), 0, "device memory leaked");
            }
            #[test]
            fn cuda() {
                match gpu_for_tests() {
                    Ok(Some(gpu)) => ($body)(&gpu as &dyn GpuDevice),
                    Ok(None) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    };
}

/// The plan of graph `name` in `text`, fused (`decompose`, `fuse`) or op by op.
fn plan(text: &str, name: &str, fuse: bool) -> (kiln_ir::Graph, CudaPlan) {
    let graphs = parse_module(text).expect("valid IR");
    let g = graphs
        .into_iter()
        .find(|g| g.name() == name)
        .expect("the graph is in the text");
    let passes: &[&str] = if fuse {
        &["decompose", "fuse"]
    } else {
        &["decompose"]
    };
    let opt = run_passes(
        &g,
        passes,
        &PassOptions::rendering(kiln_codegen::cuda::renders),
        false,
    )
    .expect("passes run");
    let s = schedule(&opt).expect("schedules");
    let p = CudaPlan::new(&s).unwrap_or_else(|e| panic!("{e}"));
    (g, p)
}

/// Runs graph `name` on `gpu`, fused and unfused, with symbolic dims `sym`, and compares
/// every output with the interpreter's; returns the number of kernel groups of the fused
/// plan.
fn check(gpu: &dyn GpuDevice, text: &str, name: &str, sym: usize, tol: (f64, f64)) -> usize {
    let mut groups = 0;
    for fuse in [true, false] {
        let (g, p) = plan(text, name, fuse);
        if fuse {
            groups = p.steps().count();
        }
        let (ins, vals) = host_inputs(&g, 3, sym);
        let want = eval(&g, &vals).expect("the interpreter runs");
        let refs: Vec<&CpuTensor> = ins.iter().collect();
        let got = p
            .run_host(gpu, &refs)
            .unwrap_or_else(|e| panic!("@{name} (fused: {fuse}) on {}: {e}", gpu.name()));
        assert_eq!(got.len(), want.len());
        for (i, (w, t)) in want.iter().zip(&got).enumerate() {
            assert_eq!(t.shape(), &w.shape[..], "@{name} output {i} shape");
            assert_eq!(t.dtype(), w.dtype, "@{name} output {i} dtype");
            for (j, (&x, &y)) in w.data.iter().zip(&t.to_f64_vec()).enumerate() {
                let ok = if x.is_nan() {
                    y.is_nan()
                } else if x.is_infinite() {
                    x == y
                } else {
                    (x - y).abs() <= tol.0 * x.abs() + tol.1
                };
                assert!(
                    ok,
                    "@{name} (fused: {fuse}) output {i} element {j}: got {y}, want {x} on {}",
                    gpu.name()
                );
            }
        }
    }
    groups
}

const POINTWISE_PROGRAM: &str = r#"
graph @bias_gelu(%x: f32[7,33], %b: f32[33]) -> f32[7,33] {
  %0 = mul %x, %b : f32[7,33]
  %1 = add %0, 1.0 : f32[7,33]
  %2 = gelu %1 : f32[7,33]
  %3 = sigmoid %x : f32[7,33]
  %4 = mul %2, %3 : f32[7,33]
  return %4
}
"#;

gpu_test!(pointwise_with_broadcast, |gpu: &dyn GpuDevice| {
    let groups = check(gpu, POINTWISE_PROGRAM, "bias_gelu", 1, POINTWISE);
    assert_eq!(groups, 1, "one fused kernel");
});

const ROWS_PROGRAM: &str = r#"
graph @rows(%x: f32[5,77], %g: f32[77], %b: f32[77]) -> (f32[5,77], f32[5,77], f32[5]) {
  %0 = softmax %x {dim = -1} : f32[5,77]
  %1 = layer_norm %x, %g, %b {ndim = 1, eps = 1e-5} : f32[5,77]
  %2 = mul %x, %x : f32[5,77]
  %3 = sum %2 {dims = [1], keepdim = false} : f32[5]
  return %0, %1, %3
}
"#;

gpu_test!(row_kernels, |gpu: &dyn GpuDevice| {
    check(gpu, ROWS_PROGRAM, "rows", 1, SUMS);
});

// Reductions over nothing (N = 0, and an empty slice): each row is still written, with the
// sum of nothing (0) and the mean of nothing (NaN), not left as the memory held (a real GPU
// returned the previous allocation's values: kiln fuzz, tests/regressions/fuzz_cuda_1829)
const EMPTY_REDUCTIONS_PROGRAM: &str = r#"
graph @empty(%x: f32[5,N], %y: f32[3]) -> (f32[5], f32[5], f32[], f32[]) {
  %0 = sum %x {dims = [1], keepdim = false} : f32[5]
  %1 = mean %x {dims = [1], keepdim = false} : f32[5]
  %2 = sum %x {dims = [], keepdim = false} : f32[]
  %3 = slice %y {dim = 0, start = 1, end = 1, step = 2} : f32[0]
  %4 = sum %3 {dims = [], keepdim = false} : f32[]
  return %0, %1, %2, %4
}
"#;

gpu_test!(
    reductions_over_nothing_write_their_identity,
    |gpu: &dyn GpuDevice| {
        check(gpu, EMPTY_REDUCTIONS_PROGRAM, "empty", 0, SUMS);
    }
);

const VIEWS_PROGRAM: &str = r#"
graph @views(%x: f32[6,9], %y: f32[3,6,3]) -> (f32[9,6], f32[3,6], f32[6,9]) {
  %0 = transpose %x {dim0 = 0, dim1 = 1} : f32[9,6]
  %1 = exp %0 : f32[9,6]
  %2 = slice %x {dim = 1, start = 1, end = 8, step = 3} : f32[6,3]
  %3 = permute %2 {dims = [1, 0]} : f32[3,6]
  %4 = tanh %3 : f32[3,6]
  %5 = reshape %y {shape = [6, 9]} : f32[6,9]
  %6 = add %5, %x : f32[6,9]
  return %1, %4, %6
}
"#;

gpu_test!(views_as_strides, |gpu: &dyn GpuDevice| {
    check(gpu, VIEWS_PROGRAM, "views", 1, POINTWISE);
});

const MATMUL_PROGRAM: &str = r#"
graph @linear_gelu(%x: f32[6,10], %w: f32[10,12], %b: f32[12]) -> f32[6,12] {
  %0 = matmul %x, %w : f32[6,12]
  %1 = add %0, %b : f32[6,12]
  %2 = gelu %1 : f32[6,12]
  return %2
}
graph @batched(%a: f32[3,4,6], %w: f32[6,5], %v: f32[6]) -> (f32[3,4,5], f32[5]) {
  %0 = matmul %a, %w : f32[3,4,5]
  %1 = matmul %v, %w : f32[5]
  return %0, %1
}
graph @attention(%q: f32[2,5,8], %k: f32[2,5,8], %v: f32[2,5,8]) -> f32[2,5,8] {
  %0 = transpose %k {dim0 = 1, dim1 = 2} : f32[2,8,5]
  %1 = matmul %q, %0 : f32[2,5,5]
  %2 = mul %1, 0.35 : f32[2,5,5]
  %3 = softmax %2 {dim = -1} : f32[2,5,5]
  %4 = matmul %3, %v : f32[2,5,8]
  return %4
}
graph @strided_operand(%x: f32[4,12], %w: f32[3,6,5]) -> f32[3,4,5] {
  %0 = slice %x {dim = 1, start = 0, end = 12, step = 2} : f32[4,6]
  %1 = matmul %0, %w : f32[3,4,5]
  return %1
}
"#;

gpu_test!(matmul_with_epilogue, |gpu: &dyn GpuDevice| {
    let groups = check(gpu, MATMUL_PROGRAM, "linear_gelu", 1, SUMS);
    assert_eq!(groups, 1, "the bias and gelu join the GEMM's group");
});

gpu_test!(matmul_batched_and_broadcast, |gpu: &dyn GpuDevice| {
    check(gpu, MATMUL_PROGRAM, "batched", 1, SUMS);
});

gpu_test!(
    matmul_operand_copied_when_cublas_cannot_read_it,
    |gpu: &dyn GpuDevice| {
        check(gpu, MATMUL_PROGRAM, "strided_operand", 1, SUMS);
    }
);

gpu_test!(attention_with_transposed_operand, |gpu: &dyn GpuDevice| {
    check(gpu, MATMUL_PROGRAM, "attention", 1, SUMS);
});

const SYMBOLIC_PROGRAM: &str = r#"
graph @sym(%x: f32[B,19], %w: f32[19,7]) -> f32[B,7] {
  %0 = matmul %x, %w : f32[B,7]
  %1 = softmax %0 {dim = -1} : f32[B,7]
  return %1
}
"#;

gpu_test!(symbolic_sizes, |gpu: &dyn GpuDevice| {
    for b in [1, 3, 50] {
        check(gpu, SYMBOLIC_PROGRAM, "sym", b, SUMS);
    }
});

gpu_test!(one_plan_many_calls, |gpu: &dyn GpuDevice| {
    // the same plan, called again with other inputs, gives the other results
    let (_, p) = plan(SYMBOLIC_PROGRAM, "sym", true);
    let w = CpuTensor::from_f64(&vec![0.0; 19 * 7], &[19, 7], kiln_ir::DType::F32).unwrap();
    for (b, v) in [(2usize, 1.0f64), (4, -2.0)] {
        let x = CpuTensor::from_f64(&vec![v; b * 19], &[b, 19], kiln_ir::DType::F32).unwrap();
        let out = p.run_host(gpu, &[&x, &w]).unwrap();
        // all-zero logits: softmax is uniform
        for y in out[0].to_f64_vec() {
            assert!((y - 1.0 / 7.0).abs() < 1e-6, "{y}");
        }
        assert_eq!(out[0].shape(), &[b, 7]);
    }
});

const GATHER_PROGRAM: &str = r#"
graph @lookup(%t: f32[10,4], %i: i64[3], %u: f32[6,10,5], %j: i32[4]) -> (f32[3,4], f32[6,4,5]) {
  %0 = index_select %t, %i {dim = 0} : f32[3,4]
  %1 = index_select %u, %j {dim = -2} : f32[6,4,5]
  return %0, %1
}
graph @lookup_2d(%ids: i64[2,3], %t: f32[10,4]) -> (f32[2,3,4], f32[3,2,4]) {
  %0 = index_select %t, %ids {dim = 0} : f32[2,3,4]
  %1 = transpose %ids {dim0 = 0, dim1 = 1} : i64[3,2]
  %2 = index_select %t, %1 {dim = 0} : f32[3,2,4]
  return %0, %2
}
"#;

gpu_test!(gathers, |gpu: &dyn GpuDevice| {
    check(gpu, GATHER_PROGRAM, "lookup", 1, POINTWISE);
});

gpu_test!(
    gathers_by_2d_indices_in_any_input_order,
    |gpu: &dyn GpuDevice| {
        check(gpu, GATHER_PROGRAM, "lookup_2d", 1, POINTWISE);
    }
);

gpu_test!(
    a_gather_index_out_of_range_is_an_error_naming_it,
    |gpu: &dyn GpuDevice| {
        let (_, p) = plan(GATHER_PROGRAM, "lookup", true);
        let t = CpuTensor::from_f64(&[1.0; 40], &[10, 4], kiln_ir::DType::F32).unwrap();
        let i = CpuTensor::from_slice(&[1i64, 10, 2], &[3]).unwrap();
        let u = CpuTensor::from_f64(&[1.0; 300], &[6, 10, 5], kiln_ir::DType::F32).unwrap();
        let j = CpuTensor::from_slice(&[0i32, 1, 2, 3], &[4]).unwrap();
        let e = p.run_host(gpu, &[&t, &i, &u, &j]).unwrap_err().to_string();
        assert!(
            e.contains("index 10 is out of range for dim 0 of size 10"),
            "{e}"
        );
    }
);

const HOST_PROGRAM: &str = r#"
graph @joined(%a: f32[3,4], %b: f32[2,4]) -> f32[5,4] {
  %0 = exp %a : f32[3,4]
  %1 = cat %0, %b {dim = 0} : f32[5,4]
  %2 = tanh %1 : f32[5,4]
  return %2
}
"#;

gpu_test!(
    a_group_without_cuda_code_runs_on_the_host,
    |gpu: &dyn GpuDevice| {
        let (_, p) = plan(HOST_PROGRAM, "joined", true);
        let host: Vec<&str> = p
            .steps()
            .filter(|(_, k)| matches!(k, CudaStepKind::Host { .. }))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(host.len(), 1, "the cat group runs on the host");
        check(gpu, HOST_PROGRAM, "joined", 1, POINTWISE);
        // a host round trip cannot be recorded as a graph
        let types = vec![
            (kiln_ir::DType::F32, vec![3, 4]),
            (kiln_ir::DType::F32, vec![2, 4]),
        ];
        let e = p.capture(gpu, &types).unwrap_err().to_string();
        assert!(e.contains("runs on the host"), "{e}");
    }
);

#[test]
fn wrong_inputs_are_typed_errors() {
    let gpu = EmulatedGpu::new();
    let (_, p) = plan(POINTWISE_PROGRAM, "bias_gelu", true);
    let x = CpuTensor::from_f64(&[0.0; 7 * 33], &[7, 33], kiln_ir::DType::F32).unwrap();
    let wrong = CpuTensor::from_f64(&[0.0; 32], &[32], kiln_ir::DType::F32).unwrap();
    let e = p.run_host(&gpu, &[&x]).unwrap_err();
    assert!(e.to_string().contains("takes 2 inputs, got 1"), "{e}");
    let e = p.run_host(&gpu, &[&x, &wrong]).unwrap_err();
    assert!(e.to_string().contains("compiled for"), "{e}");
    // nothing was launched, nothing leaked
    assert_eq!(gpu.counters(), Default::default());
    assert_eq!(gpu.live_blocks(), 0);
}

#[test]
fn gemm_operands_read_strided_layouts_or_ask_for_a_copy() {
    let gpu = EmulatedGpu::new();
    let x = DeviceTensor::empty(&gpu, kiln_ir::DType::F32, &[2, 3, 4]).unwrap();
    // row-major batch
    let op = gemm_operand(&x).unwrap();
    assert_eq!((op.ld, op.batch_stride, op.transposed), (4, 12, false));
    // its transpose: read column-major
    let t = x.transpose(1, 2).unwrap();
    let op = gemm_operand(&t).unwrap();
    assert_eq!((op.ld, op.batch_stride, op.transposed), (4, 12, true));
    // a broadcast batch: stride 0
    let m = DeviceTensor::empty(&gpu, kiln_ir::DType::F32, &[3, 4]).unwrap();
    let op = gemm_operand(&m.expand(&[5, 3, 4]).unwrap()).unwrap();
    assert_eq!((op.ld, op.batch_stride), (4, 0));
    // every other column: neither rows nor columns contiguous
    assert!(gemm_operand(&x.slice(2, 0, 4, 2).unwrap()).is_none());
    // batch dims that do not fold into one stride (a permuted batch)
    let y = DeviceTensor::empty(&gpu, kiln_ir::DType::F32, &[2, 3, 4, 5]).unwrap();
    assert!(gemm_operand(&y.permute(&[1, 0, 2, 3]).unwrap()).is_none());
    assert!(gemm_operand(&y).is_some());
    // a vector is not a matrix operand
    let v = DeviceTensor::empty(&gpu, kiln_ir::DType::F32, &[4]).unwrap();
    assert!(gemm_operand(&v).is_none());
}

#[test]
fn bad_views_of_device_tensors_are_typed_errors() {
    let gpu = EmulatedGpu::new();
    let x = DeviceTensor::empty(&gpu, kiln_ir::DType::F32, &[2, 3]).unwrap();
    let e = x.permute(&[0, 0]).unwrap_err().to_string();
    assert!(e.contains("permute") && e.contains("[2, 3]"), "{e}");
    assert!(x.permute(&[1]).is_err());
    assert!(x
        .transpose(0, 2)
        .unwrap_err()
        .to_string()
        .contains("transpose"));
    assert!(x
        .expand(&[4, 3])
        .unwrap_err()
        .to_string()
        .contains("expand"));
    assert!(x.expand(&[3]).is_err());
    assert!(x
        .slice(1, 2, 4, 1)
        .unwrap_err()
        .to_string()
        .contains("slice"));
    assert!(x.slice(0, 0, 2, 0).is_err());
    assert!(x.slice(2, 0, 1, 1).is_err());
    // good ones still work
    assert_eq!(x.expand(&[5, 2, 3]).unwrap().shape(), &[5, 2, 3]);
    assert_eq!(x.slice(1, 0, 3, 2).unwrap().shape(), &[2, 2]);
}

/// Host tensors of the interpreter's random inputs for `g` (seed `seed`, symbols `sym`).
fn host_inputs(
    g: &kiln_ir::Graph,
    seed: u64,
    sym: usize,
) -> (Vec<CpuTensor>, Vec<kiln_ir::interp::Value>) {
    let vals = random_inputs(g, seed, &|_| sym).expect("inputs");
    let ins = vals
        .iter()
        .map(|v| CpuTensor::from_f64(&v.data, &v.shape, v.dtype).expect("tensor"))
        .collect();
    (ins, vals)
}

/// The dtype and constant shape of each input of `g` (what a recording is made for).
fn input_types(g: &kiln_ir::Graph) -> Vec<(kiln_ir::DType, Vec<usize>)> {
    g.inputs()
        .iter()
        .map(|(_, id)| {
            let ty = &g.node(*id).ty;
            let dims = ty.shape.dims().iter().map(|d| d.as_const().unwrap());
            (ty.dtype, dims.collect())
        })
        .collect()
}

gpu_test!(
    a_recorded_graph_replays_with_new_inputs,
    |gpu: &dyn GpuDevice| {
        let (g, p) = plan(MATMUL_PROGRAM, "attention", true);
        let types = input_types(&g);
        let before = gpu.counters();
        let captured = p.capture(gpu, &types).unwrap_or_else(|e| panic!("{e}"));
        // recording runs nothing
        assert_eq!(gpu.counters(), before);
        // QKᵀ, the scaled softmax, ·V
        assert_eq!(captured.recorded(), 3, "{captured:?}");
        for seed in [11, 12] {
            let (ins, vals) = host_inputs(&g, seed, 1);
            let want = eval(&g, &vals).unwrap();
            let refs: Vec<&CpuTensor> = ins.iter().collect();
            let c0 = gpu.counters();
            let got = captured
                .run_host(gpu, &refs)
                .unwrap_or_else(|e| panic!("{e}"));
            let c1 = gpu.counters();
            assert_eq!(
                (c1.launches - c0.launches + c1.gemms - c0.gemms) as usize,
                3
            );
            for (x, y) in want[0].data.iter().zip(got[0].to_f64_vec()) {
                assert!((x - y).abs() <= 1e-4 * x.abs() + 1e-5, "got {y}, want {x}");
            }
        }
        // other shapes are an error, not a wrong answer
        let x = CpuTensor::from_f64(&[0.0; 80], &[1, 10, 8], kiln_ir::DType::F32).unwrap();
        let e = captured
            .run_host(gpu, &[&x, &x, &x])
            .unwrap_err()
            .to_string();
        assert!(e.contains("the recorded graph takes"), "{e}");
    }
);

gpu_test!(
    a_capture_keeps_other_threads_work_out_of_its_graph,
    |gpu: &dyn GpuDevice| {
        // one thread records the attention plan while another runs a pointwise plan on the
        // same device over and over: the other thread's work waits for the recording, is
        // not recorded, and neither breaks the other
        let (ga, pa) = plan(MATMUL_PROGRAM, "attention", true);
        let (gp, pp) = plan(POINTWISE_PROGRAM, "bias_gelu", true);
        let types = input_types(&ga);
        let (ins, vals) = host_inputs(&gp, 5, 3);
        let want = eval(&gp, &vals).unwrap();
        let refs: Vec<&CpuTensor> = ins.iter().collect();
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                for _ in 0..3 {
                    let got = pp.run_host(gpu, &refs).unwrap_or_else(|e| panic!("{e}"));
                    for (o, w) in got.iter().zip(&want) {
                        for (y, x) in o.to_f64_vec().into_iter().zip(&w.data) {
                            assert!((x - y).abs() <= 1e-5 * x.abs() + 1e-6, "{y} vs {x}");
                        }
                    }
                }
            });
            // recording is quick (nothing runs): many recordings overlap the other thread's
            // calls; the last one is replayed
            let mut captured = None;
            while captured.is_none() || !other.is_finished() {
                let c = pa.capture(gpu, &types).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(c.recorded(), 3, "{c:?}");
                captured = Some(c);
            }
            let captured = captured.expect("recorded at least once");
            let (ins, vals) = host_inputs(&ga, 7, 1);
            let want = eval(&ga, &vals).unwrap();
            let refs: Vec<&CpuTensor> = ins.iter().collect();
            let got = captured
                .run_host(gpu, &refs)
                .unwrap_or_else(|e| panic!("{e}"));
            for (x, y) in want[0].data.iter().zip(got[0].to_f64_vec()) {
                assert!((x - y).abs() <= 1e-4 * x.abs() + 1e-5, "got {y}, want {x}");
            }
            other.join().unwrap();
        });
    }
);

gpu_test!(
    a_recorded_gather_checks_its_indices_on_every_replay,
    |gpu: &dyn GpuDevice| {
        let (_, p) = plan(GATHER_PROGRAM, "lookup", true);
        let types = vec![
            (kiln_ir::DType::F32, vec![10, 4]),
            (kiln_ir::DType::I64, vec![3]),
            (kiln_ir::DType::F32, vec![6, 10, 5]),
            (kiln_ir::DType::I32, vec![4]),
        ];
        let captured = p.capture(gpu, &types).unwrap_or_else(|e| panic!("{e}"));
        let t = CpuTensor::from_f64(
            &(0..40).map(f64::from).collect::<Vec<_>>(),
            &[10, 4],
            kiln_ir::DType::F32,
        )
        .unwrap();
        let u = CpuTensor::from_f64(&[1.0; 300], &[6, 10, 5], kiln_ir::DType::F32).unwrap();
        let j = CpuTensor::from_slice(&[0i32, 1, 2, 3], &[4]).unwrap();
        let good = CpuTensor::from_slice(&[9i64, 0, 2], &[3]).unwrap();
        let out = captured.run_host(gpu, &[&t, &good, &u, &j]).unwrap();
        assert_eq!(out[0].to_f64_vec()[..4], [36.0, 37.0, 38.0, 39.0]);
        let bad = CpuTensor::from_slice(&[1i64, -1, 2], &[3]).unwrap();
        let e = captured
            .run_host(gpu, &[&t, &bad, &u, &j])
            .unwrap_err()
            .to_string();
        assert!(e.contains("index -1 is out of range"), "{e}");
        // and the next good replay is fine again (the cell is zeroed by the graph)
        captured.run_host(gpu, &[&t, &good, &u, &j]).unwrap();
    }
);

gpu_test!(
    a_plan_needing_a_host_copy_is_not_recorded,
    |gpu: &dyn GpuDevice| {
        let (_, p) = plan(MATMUL_PROGRAM, "strided_operand", true);
        let types = vec![
            (kiln_ir::DType::F32, vec![4, 12]),
            (kiln_ir::DType::F32, vec![3, 6, 5]),
        ];
        let e = p.capture(gpu, &types).unwrap_err().to_string();
        assert!(e.contains("cannot be recorded"), "{e}");
        // the device is usable afterwards: not left recording
        check(gpu, MATMUL_PROGRAM, "strided_operand", 1, SUMS);
    }
);
