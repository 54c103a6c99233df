//! `kiln fuzz` and `kiln run --backend cpu --unfused` end to end.

mod common;

use common::{kiln, tmp};

#[test]
fn fuzz_runs_graphs_and_reports_no_divergence() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-fuzz-{}", std::process::id()));
    let (ok, out, err) = kiln(&[
        "fuzz",
        "--seconds",
        "60",
        "--graphs",
        "40",
        "--grad",
        "--regressions",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("kiln fuzz: 40 graphs"), "{out}");
    assert!(out.contains(", 0 divergences"), "{out}");
    assert!(
        !dir.exists(),
        "no regression file is written when nothing diverges"
    );
}

#[test]
fn run_compiles_fused_and_unfused_with_the_same_result() {
    let f = tmp(
        "fz.kir",
        "graph @g(%x: f32[B,3]) -> f32[B] {\n  %0 = exp %x : f32[B,3]\n  %1 = sum %0 {dims = [1], keepdim = false} : f32[B]\n  return %1\n}\n",
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["run", f.to_str().unwrap(), "--dim", "B=4"];
        args.extend_from_slice(extra);
        let (ok, out, err) = kiln(&args);
        assert!(ok, "{err}");
        out.lines().nth(1).unwrap().to_string()
    };
    let eager = run(&["--backend", "eager"]);
    assert_eq!(run(&["--backend", "cpu"]), eager);
    assert_eq!(run(&["--backend", "cpu", "--unfused"]), eager);
}

#[test]
fn replay_checks_regression_files_again_and_reads_their_reproduce_line() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/regressions");
    let file = dir.join("fuzz_cpu_1003029.kir");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("# reproduce: cargo run --release -- fuzz --replay "),
        "{text}"
    );
    let (ok, out, err) = kiln(&["fuzz", "--replay", file.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("agrees: "), "{out}");
    assert!(out.contains("1 files, 0 diverge"), "{out}");
    // a file that is not a regression is an error naming it
    let bad = tmp("not_a_regression.kir", "graph @g() -> f32[] {\n}\n");
    let (ok, _, err) = kiln(&["fuzz", "--replay", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("not_a_regression.kir"), "{err}");
}
