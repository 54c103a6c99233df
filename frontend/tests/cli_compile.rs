//! The CLI's view of `kiln::compile`: `kiln dump --model NAME --stage traced` and
//! `KILN_LOGS`.

mod common;

use common::{kiln_with_logs as kiln, tmp};

#[test]
fn dump_model_prints_the_traced_graph_in_the_text_format() {
    for (name, shape) in [
        ("pointwise", "1027"),
        ("layernorm", "7x33"),
        ("softmax", "5x17"),
        ("reduce", "9x13"),
        ("mlp", "3x16"),
        ("block", "2x5x16"),
        ("tiny", "33"),
    ] {
        let (ok, out, err) = kiln(
            &[
                "dump", "--model", name, "--stage", "traced", "--shape", shape,
            ],
            None,
        );
        assert!(ok, "{name}: {err}");
        assert!(out.starts_with(&format!("graph @{name}(")), "{out}");
        // what is printed parses back and prints the same
        let graphs = kiln::ir::text::parse_module(&out).unwrap();
        assert_eq!(kiln::ir::text::print_module(&graphs), out);
        assert!(out.contains("# frontend/src/models/"), "{out}");
    }
}

#[test]
fn dump_model_dynamic_shows_symbols() {
    let (ok, out, err) = kiln(
        &["dump", "--model", "mlp", "--shape", "3x16", "--dynamic"],
        None,
    );
    assert!(ok, "{err}");
    assert!(out.contains("%arg0: f32[s0,16]"), "{out}");
    // the default shape of the workload
    let (ok, out, _) = kiln(&["dump", "--model", "tiny"], None);
    assert!(ok);
    assert!(out.contains("%arg0: f32[1024]"), "{out}");
    assert_eq!(out.matches(" = ").count(), 20, "tiny is 20 ops: {out}");
}

#[test]
fn dump_model_errors_are_clear() {
    let (ok, _, err) = kiln(&["dump", "--model", "resnet"], None);
    assert!(!ok);
    assert!(err.contains("resnet") && err.contains("mlp"), "{err}");
    let (ok, _, err) = kiln(&["dump", "--model", "mlp", "--shape", "3xq"], None);
    assert!(!ok);
    assert!(err.contains("`q` is not a size"), "{err}");
}

#[test]
fn kiln_logs_prints_graphs_guards_recompiles_and_breaks() {
    let (ok, _, err) = kiln(&["demo"], Some("graphs,guards,recompiles,breaks"));
    assert!(ok, "{err}");
    for target in [
        "kiln::graphs",
        "kiln::guards",
        "kiln::recompiles",
        "kiln::breaks",
    ] {
        assert!(err.contains(target), "no {target} in:\n{err}");
    }
    assert!(err.contains("size of dim 0 changed"), "{err}");
    let (ok, _, err) = kiln(&["demo"], None);
    assert!(ok);
    assert!(!err.contains("kiln::graphs"), "{err}");
}

const SOFTMAX: &str = "graph @softmax(%x: f32[B,33]) -> f32[B,33] {
  %0 = softmax %x {dim = -1}               : f32[B,33]
  return %0
}
";

#[test]
fn dump_stages_of_a_file_and_of_a_model() {
    let f = tmp("softmax.kir", SOFTMAX);
    let file = f.to_str().unwrap();
    let (ok, out, err) = kiln(&["dump", file, "--stage", "decomposed"], None);
    assert!(ok, "{err}");
    assert!(
        out.contains("= exp ") && !out.contains("softmax %x"),
        "{out}"
    );
    let (ok, out, err) = kiln(&["dump", file, "--stage", "optimized"], None);
    assert!(ok, "{err}");
    assert!(out.contains("# k0 row"), "{out}");
    kiln::ir::text::parse_module(&out).unwrap();
    let (ok, out, err) = kiln(&["dump", file, "--stage", "scheduled"], None);
    assert!(ok, "{err}");
    assert!(out.contains("# kernel k0: row over f32[B,33]"), "{out}");
    assert!(out.contains("# memory: 1 kernel(s)"), "{out}");
    for stage in ["decomposed", "optimized", "scheduled"] {
        let (ok, out, err) = kiln(
            &[
                "dump", "--model", "block", "--shape", "2x5x16", "--stage", stage,
            ],
            None,
        );
        assert!(ok, "{stage}: {err}");
        assert!(!out.is_empty());
    }
}

#[test]
fn opt_runs_named_passes_and_logs_them() {
    let f = tmp("softmax_opt.kir", SOFTMAX);
    let file = f.to_str().unwrap();
    let (ok, out, err) = kiln(&["opt", file, "--passes", "decompose,fuse"], Some("passes"));
    assert!(ok, "{err}");
    assert!(out.contains("# k0 row"), "{out}");
    assert!(
        err.contains("kiln::passes") && err.contains("decompose:") && err.contains("fuse:"),
        "{err}"
    );
    assert!(err.contains("e-graph fuse: saturated"), "{err}");
    let (ok, _, err) = kiln(&["opt", file, "--passes", "decompose,frobnicate"], None);
    assert!(!ok);
    assert!(
        err.contains("unknown pass `frobnicate`") && err.contains("simplify"),
        "{err}"
    );
}

#[test]
fn dump_stages_loops_and_clif_show_the_generated_kernels() {
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "softmax", "--stage", "loops", "--shape", "5x17",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("# kernel k0_row: generated loop nest"),
        "{out}"
    );
    assert!(out.contains("max v0 over inner"), "{out}");
    assert!(out.contains("store %out0[d0, d1]"), "{out}");
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "mlp", "--stage", "loops", "--shape", "3x16",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("gemm, then the epilogue over each block of output rows"),
        "{out}"
    );
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "tiny", "--stage", "clif", "--shape", "33",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert!(out.contains("function u0:"), "{out}");
    assert!(out.contains("f32x4"), "{out}");
}

#[test]
fn dump_stage_cuda_shows_cuda_c_and_names_the_kernels_without_it() {
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "softmax", "--stage", "cuda", "--shape", "5x17",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("// kernel k0_row: 256 threads per block, one block per row"),
        "{out}"
    );
    assert!(out.contains("extern \"C\" __global__ void"), "{out}");
    assert!(out.contains("kiln_block_max("), "{out}");
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "mlp", "--stage", "cuda", "--shape", "3x16",
        ],
        None,
    );
    assert!(ok, "{err}");
    assert!(out.contains("no CUDA C ("), "{out}");
    // PTX needs NVRTC: its PTX where it is installed (CI), else an error that says how
    let (ok, out, err) = kiln(
        &[
            "dump", "--model", "softmax", "--stage", "ptx", "--shape", "5x17",
        ],
        None,
    );
    if ok {
        assert!(out.contains(".entry kiln_k0_row"), "{out}");
    } else {
        assert!(
            std::env::var_os("KILN_REQUIRE_NVRTC").is_none(),
            "NVRTC is required: {err}"
        );
        assert!(err.contains("pip install nvidia-cuda-nvrtc-cu12"), "{err}");
    }
}

#[test]
fn kiln_logs_code_reports_each_compiled_kernel() {
    let (ok, _, err) = kiln(&["demo"], Some("code"));
    assert!(ok, "{err}");
    assert!(err.contains("kiln::code"), "{err}");
    assert!(err.contains("compiled k0_"), "{err}");
}
