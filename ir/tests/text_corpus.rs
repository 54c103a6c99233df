//! The hand-written corpus in `tests/corpus/*.kir` is in canonical form: parsing and
//! printing each file gives it back byte for byte, and every graph verifies.

use kiln_ir::text::{parse_graph, parse_module, print_graph, print_module};
use kiln_ir::{verify, Graph};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/corpus exists")
        .map(|e| e.expect("readable corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable corpus file");
            (p, text)
        })
        .collect()
}

fn parse(path: &Path, text: &str) -> Vec<Graph> {
    parse_module(text).unwrap_or_else(|e| panic!("{}:{e}", path.display()))
}

#[test]
fn corpus_is_large_enough() {
    assert!(corpus().len() >= 18, "only {} corpus files", corpus().len());
}

#[test]
fn print_of_parse_is_identity() {
    for (path, text) in corpus() {
        let printed = print_module(&parse(&path, &text));
        assert_eq!(printed, text, "{} is not canonical", path.display());
    }
}

#[test]
fn parsed_graphs_verify_and_reparse_one_by_one() {
    for (path, text) in corpus() {
        for g in parse(&path, &text) {
            verify(&g).unwrap_or_else(|e| panic!("{}: @{}: {e}", path.display(), g.name()));
            let one = print_graph(&g);
            assert_eq!(g.to_string(), one);
            let again = parse_graph(&one).unwrap_or_else(|e| panic!("{e}\n{one}"));
            assert_eq!(print_graph(&again), one);
        }
    }
}

#[test]
fn corpus_uses_every_op() {
    let mut used = BTreeSet::new();
    for (path, text) in corpus() {
        for g in parse(&path, &text) {
            used.extend(g.nodes().map(|(_, n)| n.op.name()));
        }
    }
    // every row of the op table but `input`, which is never an instruction
    let all: Vec<&str> = kiln_ir::ops::rows()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| *n != "input")
        .collect();
    let missing: Vec<&str> = all.into_iter().filter(|n| !used.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "ops missing from the corpus: {missing:?}"
    );
}

#[test]
fn blank_lines_and_comments_are_not_canonical_but_parse() {
    let text = "# a module\n\ngraph @g(%x: f32[2]) -> f32[2] {  # header\n\n  # body comment\n  %a = relu %x : f32[2]   #   here.rs:1:2  \n  return %a\n}\n# trailing\n";
    let g = parse_graph(text).expect("parses");
    assert_eq!(
        print_graph(&g),
        "graph @g(%x: f32[2]) -> f32[2] {\n  %0 = relu %x                             : f32[2]        # here.rs:1:2\n  return %0\n}\n"
    );
}
