//! Every minimised divergence `kiln fuzz` found (`tests/regressions/*.kir`) runs again: the
//! executor that diverged must now agree with eager, on the recorded case as a first call
//! and after a call at other sizes (the cuda backend's on the emulated device, unless
//! `KILN_CUDA_DEVICE` names a GPU).

use kiln::fuzz::regression::read_dir;
use std::path::Path;

#[test]
fn every_fuzz_regression_agrees_with_eager() {
    // the cuda backend's cases run on the emulated device unless a GPU is named
    if std::env::var_os("KILN_CUDA_DEVICE").is_none() {
        std::env::set_var("KILN_CUDA_DEVICE", "emulated");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let cases = read_dir(&dir).unwrap();
    assert!(cases.len() >= 5, "{} regression files", cases.len());
    let failures: Vec<String> = cases.iter().filter_map(|r| r.check().err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_regression_file_round_trips() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-regress-{}", std::process::id()));
    let g = kiln::ir::text::parse_module(
        "graph @g(%x: f32[B, 3]) -> f32[B, 3] {\n  %0 = exp %x : f32[B, 3]\n  return %0\n}\n",
    )
    .unwrap()
    .remove(0);
    let case = kiln::fuzz::inputs::InputSpec {
        sizes: (3, 5),
        seed: 9,
        transposed: true,
        special: true,
    };
    let d = kiln::fuzz::Divergence {
        executor: kiln::fuzz::Executor::CpuUnfused,
        grad: true,
        case,
        detail: "element 0: 1 vs 2".into(),
    };
    let path = kiln::fuzz::regression::write(&dir, "t", &g, &d, "a test").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("-- fuzz --replay "), "{text}");
    // a gradient case has no `kiln run` line (that shows forward outputs only)
    assert!(!text.contains("-- run "), "{text}");
    let r = kiln::fuzz::regression::read(&path).unwrap();
    assert_eq!((r.executor, r.grad, r.case), (d.executor, true, case));
    assert_eq!(r.graph.to_string(), g.to_string());
    assert!(dir.join("t.safetensors").exists());
    // the graph is fine: the check agrees
    r.check().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
