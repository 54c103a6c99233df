//! The whole pipeline with the verifier after every pass (`run_passes(.., verify = true)`)
//! on every graph of both corpora (`ir/tests/corpus`: every op of the table;
//! `passes/tests/corpus`: the optimiser's programs), for a backend that renders no
//! composite and for one that renders them all, each pass alone and in pipeline order;
//! then each result schedules (kernel bodies are built type-checked; a body whose symbolic
//! sizes only a `full` names does not verify alone, by the verifier's rule on symbols).

use kiln_ir::text::parse_module;
use kiln_ir::{verify, Graph, Op};
use kiln_passes::pipeline::{run_passes, PassOptions, PASSES};
use kiln_passes::schedule::schedule;
use std::path::PathBuf;

fn corpora() -> Vec<(String, Graph)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in [root.join("tests/corpus"), root.join("../ir/tests/corpus")] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "kir"))
            .collect();
        files.sort();
        for p in files {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            for g in parse_module(&text).unwrap() {
                out.push((format!("{stem} @{}", g.name()), g));
            }
        }
    }
    out
}

fn renders_everything(_: &Op) -> bool {
    true
}

#[test]
fn every_pass_verifies_on_both_corpora() {
    let graphs = corpora();
    assert!(graphs.len() > 80, "{} graphs", graphs.len());
    let every: Vec<&str> = PASSES.iter().map(|p| p.name).collect();
    let mut differentiated = 0;
    for (name, g) in &graphs {
        // `grad` takes graphs whose first output is a floating scalar, of ops with rules
        let differentiable = kiln_passes::grad::grad(g).is_ok();
        differentiated += usize::from(differentiable);
        let all: Vec<&str> = every
            .iter()
            .copied()
            .filter(|p| *p != "grad" || differentiable)
            .collect();
        for opts in [
            PassOptions::default(),
            PassOptions::rendering(renders_everything),
        ] {
            for passes in std::iter::once(all.clone()).chain(all.iter().map(|p| vec![*p])) {
                let f = run_passes(g, &passes, &opts, true)
                    .unwrap_or_else(|e| panic!("{name} {passes:?}: {e}"));
                verify(&f.graph).unwrap_or_else(|e| panic!("{name} {passes:?}: {e}"));
                schedule(&f).unwrap_or_else(|e| panic!("{name} {passes:?}: {e}"));
            }
        }
    }
    assert!(
        differentiated >= 3,
        "grad ran on {differentiated} corpus graphs"
    );
}
