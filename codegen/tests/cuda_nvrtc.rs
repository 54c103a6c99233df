//! Every CUDA kernel generated for the op programs and the optimiser's corpus compiles with
//! NVRTC (`compute_90`, precise math) and assembles with `ptxas -arch=sm_90`; the register
//! and spill counts are printed (`--nocapture`). Without NVRTC the test prints why and
//! passes, unless `KILN_REQUIRE_NVRTC` is set (CI sets it after installing the PyPI wheels
//! with `scripts/fetch-cuda-tools.sh`).

mod common;

use kiln_codegen::cuda::cuda_kernel;
use kiln_codegen::cuda::nvrtc::{
    compile_and_assemble, compile_ptx_cached_in, nvrtc_for_tests, SassStats,
};
use kiln_codegen::loops::lower_kernel;
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;

/// Every kernel with a nest in `text`: (label, CUDA kernel).
fn kernels(file: &str, text: &str) -> Vec<(String, kiln_codegen::cuda::CudaKernel)> {
    graph_kernels(
        file,
        &parse_module(text).unwrap_or_else(|e| panic!("{file}: {e}")),
    )
}

/// Every kernel with a nest in `graphs`: (label, CUDA kernel).
fn graph_kernels(
    file: &str,
    graphs: &[kiln_ir::Graph],
) -> Vec<(String, kiln_codegen::cuda::CudaKernel)> {
    let mut out = Vec::new();
    for g in graphs {
        let opt = run_passes(
            g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            false,
        )
        .unwrap_or_else(|e| panic!("{file} @{}: {e}", g.name()));
        let s = schedule(&opt).unwrap_or_else(|e| panic!("{file} @{}: {e}", g.name()));
        for k in &s.kernels {
            if let Ok(nest) = lower_kernel(&k.body) {
                let what = format!("{file} @{} {}", g.name(), k.body.name());
                let c = cuda_kernel(&nest).unwrap_or_else(|e| panic!("{what}: {e}"));
                out.push((what, c));
            }
        }
    }
    out
}

#[test]
fn every_generated_kernel_compiles_with_nvrtc_and_ptxas() {
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let mut all = kernels("programs", common::PROGRAMS);
    all.extend(kernels("table", &common::table_programs()));
    for (name, text) in common::corpus() {
        all.extend(kernels(&name, &text));
    }
    let mut worst = SassStats::default();
    let mut spilling = 0;
    for (what, k) in &all {
        let st = compile_and_assemble(k, "compute_90", "sm_90")
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        eprintln!("{what}: {st}");
        worst = worst.worst(&st);
        spilling += usize::from(st.spills());
    }
    eprintln!(
        "NVRTC + ptxas compiled {} kernels: at most {} registers, {spilling} spill (worst {} B stores, {} B loads)",
        all.len(),
        worst.registers,
        worst.spill_stores,
        worst.spill_loads
    );
    assert!(all.len() >= 100, "only {} kernels", all.len());
}

#[test]
fn the_ptx_cache_reuses_entries_and_recompiles_corrupt_ones() {
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let (_, k) = kernels("programs", common::PROGRAMS)
        .into_iter()
        .next()
        .expect("a kernel");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-ptx-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (fresh, hit) = compile_ptx_cached_in(&k, "compute_90", &dir).expect("compiles");
    assert!(!hit);
    let (again, hit) = compile_ptx_cached_in(&k, "compute_90", &dir).expect("cached");
    assert!(hit);
    assert_eq!(fresh, again);
    // corrupt every entry: it must be recompiled, not trusted (every truncation and bit
    // flip is tested without NVRTC in codegen/src/cuda/ptx_cache.rs)
    for e in std::fs::read_dir(&dir).expect("the cache exists") {
        let p = e.expect("entry").path();
        std::fs::write(&p, "// kiln ptx cache v1\n.version 8.0 garbage").expect("writable");
    }
    let (rebuilt, hit) = compile_ptx_cached_in(&k, "compute_90", &dir).expect("recompiles");
    assert!(!hit);
    assert_eq!(rebuilt, fresh);
    // a truncated entry that still names the kernel's entry point is not trusted either
    for e in std::fs::read_dir(&dir).expect("the cache exists") {
        let p = e.expect("entry").path();
        let whole = std::fs::read(&p).expect("readable");
        std::fs::write(&p, &whole[..whole.len() * 9 / 10]).expect("writable");
    }
    let (rebuilt, hit) = compile_ptx_cached_in(&k, "compute_90", &dir).expect("recompiles");
    assert!(!hit);
    assert_eq!(rebuilt, fresh);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Compiled training's graphs for the corpus: each graph differentiated with respect to
/// every floating input and partitioned; the forward and backward graphs of each.
fn training_graphs() -> Vec<(String, Vec<kiln_ir::Graph>)> {
    use kiln_passes::joint::joint;
    use kiln_passes::partition::{partition, PartitionOptions};
    let mut out = Vec::new();
    for (name, text) in common::corpus() {
        for g in parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
            let wants = vec![true; g.inputs().len()];
            let Ok(j) = joint(&g, &wants) else { continue };
            if j.grads.is_empty() {
                continue;
            }
            let p = partition(&j, &PartitionOptions::default())
                .unwrap_or_else(|e| panic!("{name} @{}: {e}", g.name()));
            out.push((name.clone(), vec![p.forward, p.backward]));
        }
    }
    out
}

#[test]
fn every_training_kernel_compiles_with_nvrtc_and_ptxas() {
    let graphs = training_graphs();
    assert!(
        graphs.len() >= 30,
        "only {} differentiable corpus graphs",
        graphs.len()
    );
    let mut all = Vec::new();
    for (name, gs) in &graphs {
        all.extend(graph_kernels(name, gs));
    }
    assert!(all.len() >= 100, "only {} kernels", all.len());
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    for (what, k) in &all {
        compile_and_assemble(k, "compute_90", "sm_90").unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    eprintln!(
        "NVRTC + ptxas compiled the {} kernels of {} forward/backward pairs",
        all.len(),
        graphs.len()
    );
}

/// A whole training step with AdamW as `kiln::compile` traces it (forward, cross-entropy,
/// backward, the update of each parameter and its moments, the shared f64 step count):
/// every kernel of it, the optimiser's included, compiles with NVRTC and ptxas. (It is a
/// fixture, not a corpus graph: the corpus runs graphs on random inputs, and a random
/// second moment is negative.)
#[test]
fn the_kernels_of_a_compiled_adamw_training_step_compile_with_nvrtc_and_ptxas() {
    let file = "fixtures/train_step_adamw.kir";
    let text = std::fs::read_to_string(format!("{}/tests/{file}", env!("CARGO_MANIFEST_DIR")))
        .expect("the fixture is committed");
    let all = kernels(file, &text);
    assert!(
        all.iter().any(|(_, k)| k.source.contains("sqrt")),
        "the AdamW update's kernels are among them"
    );
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    for (what, k) in &all {
        compile_and_assemble(k, "compute_90", "sm_90").unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    eprintln!(
        "NVRTC + ptxas compiled the {} kernels of the AdamW step",
        all.len()
    );
}

#[test]
fn products_are_not_contracted_into_fused_multiply_adds() {
    // eager rounds x·y before subtracting; a contracted fma(x, y, -z) keeps the product's
    // rounding error, which a log_softmax's exp turned into inf on an H100
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let text = "graph @mulsub(%x: f32[64], %y: f32[64], %z: f32[64]) -> f32[64] {\n  %0 = mul %x, %y : f32[64]\n  %1 = sub %0, %z : f32[64]\n  return %1\n}\n";
    let all = kernels("mulsub", text);
    assert_eq!(all.len(), 1, "one fused kernel");
    let ptx = kiln_codegen::cuda::nvrtc::compile_ptx(&all[0].1, "compute_90")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ptx.contains("mul.rn.f32"), "{ptx}");
    assert!(!ptx.contains("fma.rn.f32"), "a contracted product:\n{ptx}");
}
