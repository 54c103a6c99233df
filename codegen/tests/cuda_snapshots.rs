//! Snapshots of the CUDA C the backend generates (`kiln dump --stage cuda`,
//! [`kiln_codegen::cuda::dump::describe`]): a row kernel (softmax of the workload corpus),
//! a pointwise kernel with the 16-byte path (the pointwise workload), half-precision buffers
//! (an f16 layer norm) and an embedding gather with a layer norm after it (the start of the
//! BERT encoder). A changed snapshot is reviewed line by line before it is accepted.

use kiln_codegen::cuda::dump::describe;
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use std::path::PathBuf;

/// The CUDA C of every kernel of every graph of `text`, after decompose + fuse.
fn cuda_of(text: &str) -> String {
    let mut out = String::new();
    for g in parse_module(text).expect("valid IR") {
        let opt = run_passes(
            &g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            true,
        )
        .unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        let s = schedule(&opt).unwrap_or_else(|e| panic!("@{}: {e}", g.name()));
        out.push_str(&format!("# @{}\n", g.name()));
        out.push_str(&describe(&s));
    }
    out
}

fn corpus(stem: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../passes/tests/corpus")
        .join(format!("{stem}.kir"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn softmax_workload_cuda() {
    insta::assert_snapshot!(cuda_of(&corpus("softmax_workload")));
}

#[test]
fn pointwise_workload_cuda() {
    insta::assert_snapshot!(cuda_of(&corpus("pointwise_workload")));
}

#[test]
fn f16_layer_norm_cuda() {
    insta::assert_snapshot!(cuda_of(
        "graph @ln16(%x: f16[s0,384], %w: f16[384], %b: f16[384]) -> f16[s0,384] {\n  %0 = layer_norm %x, %w, %b {ndim = 1, eps = 1e-12} : f16[s0,384]\n  return %0\n}\n"
    ));
}

#[test]
fn embedding_gather_then_layer_norm_cuda() {
    insta::assert_snapshot!(cuda_of(
        "graph @emb(%table: f32[30522,384], %ids: i64[s0,s1], %w: f32[384], %b: f32[384]) -> f32[s0,s1,384] {\n  %0 = index_select %table, %ids {dim = 0} : f32[s0,s1,384]\n  %1 = layer_norm %0, %w, %b {ndim = 1, eps = 1e-12} : f32[s0,s1,384]\n  return %1\n}\n"
    ));
}
