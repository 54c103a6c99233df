//! Snapshots of the loop nests the CPU backend generates for the workload graphs of the
//! optimiser's corpus (`passes/tests/corpus`): each graph runs through `decompose` and
//! `fuse`, is scheduled, and every kernel's body is lowered with
//! [`kiln_codegen::loops::lower_kernel`]. Matmul workloads are snapshotted through
//! [`kiln_codegen::cpu::dump::describe`], which shows how each kernel runs (gemm, its
//! epilogue nest, or the eager kernels) and so covers the epilogues. Every corpus graph must
//! also give Cranelift IR (`describe(_, true)`) without an error.

use kiln_codegen::cpu::dump::{describe, NestText};
use kiln_codegen::loops::lower_kernel;
use kiln_ir::text::parse_module;
use kiln_ir::Graph;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::{schedule, Schedule};
use std::fmt::Write;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../passes/tests/corpus")
}

/// The graphs of one corpus file, in file order.
fn corpus_file(stem: &str) -> Vec<Graph> {
    let path = corpus_dir().join(format!("{stem}.kir"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_module(&text).unwrap_or_else(|e| panic!("{stem}.kir: {e}"))
}

/// Every corpus file's stem, sorted.
fn corpus_stems() -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("passes/tests/corpus exists")
        .map(|e| e.expect("readable corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

fn scheduled(g: &Graph) -> Schedule {
    let optimized = run_passes(
        g,
        &["decompose", "fuse"],
        &PassOptions::rendering(kiln_codegen::cpu::renders),
        true,
    )
    .unwrap_or_else(|e| panic!("@{}: passes failed: {e}", g.name()));
    schedule(&optimized).unwrap_or_else(|e| panic!("@{}: schedule failed: {e}", g.name()))
}

/// The loop nest of every kernel of every graph of `stem`, each after a header line naming
/// the graph, the kernel and its kind.
fn loop_nests(stem: &str) -> String {
    let mut out = String::new();
    for g in corpus_file(stem) {
        let s = scheduled(&g);
        for k in &s.kernels {
            let _ = writeln!(
                out,
                "# @{} kernel {} ({}, over {})",
                g.name(),
                k.id,
                k.kind.name(),
                k.space
            );
            match lower_kernel(&k.body) {
                Ok(nest) => {
                    let _ = writeln!(out, "{nest}");
                }
                Err(e) => {
                    let _ = writeln!(out, "unsupported: {e}\n");
                }
            }
        }
    }
    out
}

/// `describe` (loop nests, gemm kernels and their epilogues) of every graph of `stem`.
fn described(stem: &str) -> String {
    let mut out = String::new();
    for g in corpus_file(stem) {
        let s = scheduled(&g);
        let text = describe(&s, NestText::Loops, &Default::default())
            .unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        let _ = writeln!(out, "## @{}\n{text}", g.name());
    }
    out
}

#[test]
fn layernorm_workload_loops() {
    insta::assert_snapshot!(loop_nests("layernorm_workload"));
}

#[test]
fn softmax_workload_loops() {
    insta::assert_snapshot!(loop_nests("softmax_workload"));
}

#[test]
fn reduce_workload_loops() {
    insta::assert_snapshot!(loop_nests("reduce_workload"));
}

#[test]
fn pointwise_workload_loops() {
    insta::assert_snapshot!(loop_nests("pointwise_workload"));
}

#[test]
fn tiny_workload_loops() {
    insta::assert_snapshot!(loop_nests("tiny_workload"));
}

#[test]
fn row_backward_loops() {
    insta::assert_snapshot!(loop_nests("row_backward"));
}

/// A row kernel whose reduced tensor is not read by its epilogue (softmax's and layer
/// norm's backward) loops over the row once: the nest has as many dims as the values, and
/// the reduced dim is the outputs' last dim. Before, the reduced dim was a loop of its own
/// inside the row's, recomputing the row's sum for every element (quadratic).
#[test]
fn row_reduction_read_by_no_epilogue_is_one_row_loop() {
    for g in corpus_file("row_backward") {
        let s = scheduled(&g);
        assert_eq!(s.kernels.len(), 1, "@{}: one kernel", g.name());
        let k = &s.kernels[0];
        assert_eq!(k.kind.name(), "row", "@{}", g.name());
        let nest = lower_kernel(&k.body).unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        let rank = g.node(g.outputs()[0]).ty.shape.rank();
        assert_eq!(nest.dims.len(), rank, "@{}: {nest}", g.name());
        let out = nest.buffers.last().expect("an output buffer");
        assert_eq!(
            out.index.last(),
            Some(&Some(rank - 1)),
            "@{}: {nest}",
            g.name()
        );
    }
}

#[test]
fn mlp_workload_kernels() {
    insta::assert_snapshot!(described("mlp_workload"));
}

#[test]
fn every_corpus_graph_gives_cranelift_ir() {
    let mut checked = 0;
    for stem in corpus_stems() {
        for g in corpus_file(&stem) {
            let s = scheduled(&g);
            let clif = describe(&s, NestText::Clif, &Default::default())
                .unwrap_or_else(|e| panic!("{stem}.kir @{}: describe(clif) failed: {e}", g.name()));
            assert!(
                !clif.trim().is_empty(),
                "{stem}.kir @{}: empty Cranelift IR description",
                g.name()
            );
            let nests = describe(&s, NestText::Loops, &Default::default())
                .unwrap_or_else(|e| panic!("{stem}.kir @{}: describe failed: {e}", g.name()));
            assert!(!nests.trim().is_empty(), "{stem}.kir @{}", g.name());
            checked += 1;
        }
    }
    assert!(checked >= 28, "only {checked} corpus graphs");
}

/// `--stage clif` names each unary chain computed as one fitted polynomial: tiny's 17 steps
/// after its first `tanh` (whose output lies in [-1, 1]).
#[test]
fn clif_names_fitted_chains() {
    let g = &corpus_file("tiny_workload")[0];
    let clif = describe(&scheduled(g), NestText::Clif, &Default::default()).expect("describes");
    let line = clif
        .lines()
        .find(|l| l.starts_with("; v30 = P(v5): 17 steps as one polynomial of degree "))
        .unwrap_or_else(|| panic!("no fitted chain line in:\n{clif}"));
    assert!(line.ends_with("on [-1.000000, 1.000000]"), "{line}");
}
