//! The CLI's view of `kiln::compile`: `kiln dump --model NAME --stage traced` and
//! `KILN_LOGS`.

use std::process::Command;

fn kiln(args: &[&str], logs: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args).env_remove("KILN_LOGS");
    if let Some(l) = logs {
        cmd.env("KILN_LOGS", l);
    }
    let out = cmd.output().expect("run kiln");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

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
