//! Property tests of the text format: random well-formed graphs survive print → parse →
//! print unchanged and structurally equal, and no input text makes the parser panic.

#[path = "common/graph_gen.rs"]
mod graph_gen;

use graph_gen::{arb_graph, same_graph};
use kiln_ir::text::{parse_graph, parse_module, print_graph, print_module};
use kiln_ir::verify;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use std::collections::BTreeSet;

fn corpus() -> Vec<String> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("tests/corpus exists")
        .map(|e| e.expect("readable entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("readable corpus file"))
        .collect()
}

/// Parses `text`; when it parses, printing must be a fixed point of parse∘print.
fn check_no_panic_and_stable(text: &str) -> Result<(), TestCaseError> {
    if let Ok(graphs) = parse_module(text) {
        let printed = print_module(&graphs);
        let again = parse_module(&printed)
            .map_err(|e| TestCaseError::fail(format!("{e}\nreprinting:\n{printed}")))?;
        prop_assert_eq!(print_module(&again), printed);
    }
    Ok(())
}

const TOKENS: [&str; 40] = [
    "graph",
    "@g",
    "(",
    ")",
    "%x",
    "%0",
    "%1",
    ":",
    "f32[4]",
    "f32[B,3]",
    "i64[]",
    "->",
    "{",
    "}",
    "\n",
    "\n",
    "return",
    "add",
    "sum",
    "full",
    "softmax",
    "=",
    ",",
    "1.5",
    "-inf",
    "nan",
    "2",
    "-1",
    "\"tanh\"",
    "{dim = -1}",
    "{dims = [0], keepdim = true}",
    "# loc",
    "B",
    "[",
    "]",
    "true",
    "$",
    "\"",
    "99999999999999999999",
    "1e",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn print_parse_print_is_identity(g in arb_graph()) {
        verify(&g).map_err(|e| TestCaseError::fail(format!("generator made a bad graph: {e}")))?;
        let text = print_graph(&g);
        let back = parse_graph(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(print_graph(&back), text.clone());
        same_graph(&g, &back).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    }

    #[test]
    fn modules_round_trip(gs in prop::collection::vec(arb_graph(), 1..4)) {
        let text = print_module(&gs);
        let back = parse_module(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back.len(), gs.len());
        prop_assert_eq!(print_module(&back), text);
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        check_no_panic_and_stable(&s)?;
    }

    #[test]
    fn token_soup_never_panics(toks in prop::collection::vec((0..TOKENS.len(), 0..3usize), 0..60)) {
        let text: String = toks
            .iter()
            .map(|(t, sep)| format!("{}{}", TOKENS[*t], [" ", "", "  "][*sep]))
            .collect();
        check_no_panic_and_stable(&text)?;
    }

    #[test]
    fn mutated_corpus_never_panics(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..5u8, 0..TOKENS.len(), 1..40usize), 1..5),
    ) {
        let files = corpus();
        let mut text: Vec<char> = file.get(&files).chars().collect();
        for (at, kind, tok, len) in edits {
            let i = if text.is_empty() { 0 } else { at.index(text.len()) };
            let end = (i + len).min(text.len());
            match kind {
                0 => { text.drain(i..end); }
                1 => { text.splice(i..i, TOKENS[tok].chars()); }
                2 => { if i < text.len() { text[i] = TOKENS[tok].chars().next().unwrap_or(' '); } }
                3 => {
                    let copy: Vec<char> = text[i..end].to_vec();
                    text.splice(i..i, copy);
                }
                _ => { text.splice(i..end, TOKENS[tok].chars()); }
            }
        }
        let text: String = text.into_iter().collect();
        check_no_panic_and_stable(&text)?;
    }
}

/// The generator is not degenerate: over a few hundred graphs it uses most ops and
/// builds graphs of several nodes.
#[test]
fn generator_covers_the_op_set() {
    let mut runner = TestRunner::deterministic();
    let strategy = arb_graph();
    let mut ops = BTreeSet::new();
    let mut nodes = 0;
    let n = 300;
    for _ in 0..n {
        let g = strategy
            .new_tree(&mut runner)
            .expect("strategy works")
            .current();
        nodes += g.len();
        ops.extend(g.nodes().map(|(_, node)| node.op.name()));
    }
    assert!(ops.len() >= 50, "only {} ops generated: {ops:?}", ops.len());
    assert!(
        nodes / n >= 6,
        "only {} nodes per graph on average",
        nodes / n
    );
}
