//! The CUDA C generated for kernel groups, run on the CPU by the emulation harness
//! ([`kiln_codegen::cuda::emulate`]: g++ and a shim header, one thread per CUDA thread) and
//! compared with the reference interpreter on the kernel's own body graph
//! ([`kiln_codegen::cuda::emulate_check::check_kernel`]), for every op and
//! fused pattern of the programs below and every graph of the optimiser's corpus
//! (`passes/tests/corpus`) whose kernels are small enough to emulate.
//!
//! Inputs are the interpreter's seeded random inputs; symbolic dims are 5 (and 37 for the
//! programs below). Tolerance: |got - want| ≤ 1e-5·|want| + 1e-6 for pointwise kernels,
//! 1e-4·|want| + 1e-5 for reducing kernels (sums are accumulated in a different order); bool
//! outputs exactly; NaN where the interpreter has NaN.

mod common;

use common::PROGRAMS;
use kiln_codegen::cuda::emulate_check::{check_kernel, EMU_THREADS};
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;

/// Every kernel of every graph in `text`, after decompose + fuse; returns how many ran.
fn check_module(text: &str, sym: usize, file: &str) -> Result<usize, String> {
    let graphs = parse_module(text).map_err(|e| format!("{file}: {e}"))?;
    let mut ran = 0;
    for g in &graphs {
        let opt = run_passes(
            g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            false,
        )
        .map_err(|e| format!("{file} @{}: {e}", g.name()))?;
        let s = schedule(&opt).map_err(|e| format!("{file} @{}: {e}", g.name()))?;
        for k in &s.kernels {
            let what = format!("{file} @{} kernel {}", g.name(), k.body.name());
            if check_kernel(&k.body, sym, &what, EMU_THREADS)? {
                ran += 1;
            }
        }
    }
    Ok(ran)
}

#[test]
fn ops_and_fused_patterns_match_the_interpreter() {
    let ran = check_module(PROGRAMS, 37, "programs").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("emulated {ran} kernels of the op programs");
    assert!(ran >= 12, "only {ran} kernels emulated");
}

/// Every pointwise row of the op table as a kernel of its own.
#[test]
fn every_pointwise_op_of_the_table_matches_the_interpreter() {
    let text = common::table_programs();
    let ran = check_module(&text, 37, "table").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("emulated {ran} kernels of the table's pointwise ops");
    assert!(ran >= 45, "only {ran} kernels emulated");
}

#[test]
fn full_blocks_of_256_threads() {
    let text = r#"
graph @softmax_rows(%x: f32[3,700]) -> f32[3,700] {
  %0 = softmax %x {dim = -1} : f32[3,700]
  return %0
}
graph @pointwise(%x: f32[600]) -> f32[600] {
  %0 = tanh %x : f32[600]
  return %0
}
"#;
    let graphs = parse_module(text).expect("valid IR");
    let mut ran = 0;
    for g in &graphs {
        let opt = run_passes(
            g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            false,
        )
        .expect("passes run");
        for k in &schedule(&opt).expect("schedules").kernels {
            let what = format!("@{} kernel {}", g.name(), k.body.name());
            if check_kernel(&k.body, 5, &what, kiln_codegen::cuda::BLOCK_THREADS)
                .unwrap_or_else(|e| panic!("{e}"))
            {
                ran += 1;
            }
        }
    }
    assert_eq!(ran, 2);
}

#[test]
fn corpus_kernels_match_the_interpreter() {
    let mut ran = 0;
    for (name, text) in common::corpus() {
        ran += check_module(&text, 5, &name).unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!("emulated {ran} corpus kernels");
    assert!(ran >= 20, "only {ran} corpus kernels emulated");
}
