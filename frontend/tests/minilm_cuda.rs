//! The CUDA backend on the BERT encoder: every kernel of all-MiniLM-L6-v2 (random weights,
//! batch 8, sequence 128) compiles with NVRTC (`compute_90`) and assembles with
//! `ptxas -arch=sm_90`, with the register and spill counts printed (`--nocapture`); and
//! every kernel of a small encoder (2 layers, width 32, with mean pooling and L2
//! normalisation) run on the CPU by the emulation harness matches the interpreter
//! ([`kiln_codegen::cuda::emulate_check::check_kernel`]).
//!
//! Without NVRTC the first test prints why and passes, unless `KILN_REQUIRE_NVRTC` is set
//! (CI sets it after `eval "$(bash scripts/fetch-cuda-tools.sh)"`), which makes its absence
//! a failure. The emulation needs `g++` (as `kiln-codegen`'s `cuda_emulation` tests do).

mod cuda_common;

use cuda_common::small_bert_config;
use kiln::nn::pooling::{l2_normalize, mean_pool};
use kiln::nn::{BertModel, MiniLm};
use kiln::{compile_with, CompileOptions, Graph, Tensor};
use kiln_codegen::cuda::emulate_check::{check_kernel, EMU_THREADS};
use kiln_codegen::cuda::nvrtc::{compile_and_assemble, nvrtc_for_tests, SassStats};
use kiln_codegen::cuda::{cuda_kernel, gather_kernel};
use kiln_codegen::loops::lower_kernel;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::{schedule, Kernel};
use std::time::Instant;

/// `[input_ids, attention_mask, position_ids]` of a batch of `b` unpadded sequences of `s`
/// tokens with ids below `vocab`.
fn encoder_inputs(b: usize, s: usize, vocab: usize) -> [Tensor; 3] {
    let ids: Vec<i64> = (0..b * s)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % vocab as u64) as i64)
        .collect();
    let mask = vec![1f32; b * s];
    let pos: Vec<i64> = (0..b).flat_map(|_| 0..s as i64).collect();
    [
        Tensor::from_vec(ids, &[b, s]).expect("ids"),
        Tensor::from_vec(mask, &[b, s]).expect("mask"),
        Tensor::from_vec(pos, &[b, s]).expect("positions"),
    ]
}

/// The kernels of the captured graphs after decompose + fuse: (graph name, kernel).
fn kernels(graphs: &[Graph]) -> Vec<(String, Kernel)> {
    let mut out = Vec::new();
    for g in graphs {
        let opt = run_passes(
            g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            false,
        )
        .unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        let s = schedule(&opt).unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        out.extend(s.kernels.into_iter().map(|k| (g.name().to_string(), k)));
    }
    out
}

#[test]
fn every_minilm_kernel_compiles_with_nvrtc_and_ptxas() {
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let start = Instant::now();
    let m = MiniLm::random(0).expect("the model builds");
    let args = encoder_inputs(8, 128, 30522);
    let graphs = compile_with(
        |a: &[Tensor; 3]| m.forward(&a[0], &a[1], &a[2]),
        CompileOptions::default().name("minilm"),
    )
    .capture(&args)
    .expect("the model traces");
    let all = kernels(&graphs);
    let (mut nests, mut gathers) = (0, 0);
    let mut elsewhere = Vec::new();
    let mut worst = SassStats::default();
    let mut spilling = 0;
    let mut failures = Vec::new();
    for (graph, k) in &all {
        let what = format!("@{graph} {} ({})", k.body.name(), k.kind.name());
        let source = match lower_kernel(&k.body) {
            Ok(nest) => {
                nests += 1;
                cuda_kernel(&nest).map_err(|e| e.to_string())
            }
            Err(e) => match gather_kernel(&k.body) {
                Ok(g) => {
                    gathers += 1;
                    Ok(g)
                }
                Err(_) => {
                    elsewhere.push(format!("{what}: {e}"));
                    eprintln!("{what}: no CUDA C, runs elsewhere ({e})");
                    continue;
                }
            },
        };
        let compiled = source.and_then(|c| {
            compile_and_assemble(&c, "compute_90", "sm_90").map_err(|e| e.to_string())
        });
        match compiled {
            Ok(st) => {
                eprintln!("{what}: {st}");
                worst = worst.worst(&st);
                spilling += usize::from(st.spills());
            }
            Err(e) => {
                let nest = lower_kernel(&k.body).map_or_else(|e| e.to_string(), |n| n.to_string());
                eprintln!("{what}: FAILED: {e}\n{nest}");
                failures.push(what);
            }
        }
    }
    eprintln!(
        "MiniLM (batch 8, seq 128): {} kernels in {} graph(s): {nests} loop nests and \
         {gathers} gathers in CUDA C, {} matmuls (cuBLAS); NVRTC + ptxas: at most {} \
         registers, {spilling} spill (worst {} B stores, {} B loads); {:.1} s",
        all.len(),
        graphs.len(),
        elsewhere.len(),
        worst.registers,
        worst.spill_stores,
        worst.spill_loads,
        start.elapsed().as_secs_f64()
    );
    assert!(!all.is_empty(), "no kernels");
    assert!(nests > 0, "no kernel has a loop nest");
    // the two embedding lookups (words, positions) are gathers; everything else without
    // CUDA C is a matmul, which cuBLAS computes
    assert_eq!(gathers, 2, "gather kernels");
    let not_matmul: Vec<&String> = elsewhere
        .iter()
        .filter(|w| !w.contains("(matmul)"))
        .collect();
    assert!(
        not_matmul.is_empty(),
        "kernels with no CUDA C: {not_matmul:?}"
    );
    assert!(
        failures.is_empty(),
        "{} kernel(s) failed to compile: {failures:?}",
        failures.len()
    );
}

#[test]
fn minilm_encoder_kernels_match_the_interpreter_under_emulation() {
    let start = Instant::now();
    let cfg = small_bert_config();
    let m = BertModel::random(cfg, 1).expect("the model builds");
    let args = encoder_inputs(2, 5, 64);
    let graphs = compile_with(
        |a: &[Tensor; 3]| {
            let h = m.forward(&a[0], &a[1], &a[2])?;
            l2_normalize(&mean_pool(&h, &a[1])?)
        },
        CompileOptions::default().name("small_bert"),
    )
    .capture(&args)
    .expect("the model traces");
    let all = kernels(&graphs);
    let mut ran = 0;
    let mut failures = Vec::new();
    for (graph, k) in &all {
        let what = format!("@{graph} {} ({})", k.body.name(), k.kind.name());
        match check_kernel(&k.body, 5, &what, EMU_THREADS) {
            Ok(true) => ran += 1,
            Ok(false) => match lower_kernel(&k.body) {
                Err(e) => eprintln!("{what}: skipped: no loop nest ({e})"),
                Ok(_) => eprintln!("{what}: skipped: too large, or its dims are unbound"),
            },
            Err(e) => {
                let nest = lower_kernel(&k.body).map_or_else(|e| e.to_string(), |n| n.to_string());
                eprintln!("{e}\nloop nest:\n{nest}");
                failures.push(what);
            }
        }
    }
    eprintln!(
        "small BERT encoder + pooling (batch 2, seq 5): emulated {ran} of {} kernels; {:.1} s",
        all.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} kernel(s) differ from the interpreter: {failures:?}",
        failures.len()
    );
    assert!(ran >= 5, "only {ran} kernels emulated");
}
