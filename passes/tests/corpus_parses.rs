//! The optimiser's input corpus (`passes/tests/corpus/*.kir`) is well formed: every file
//! parses, every graph verifies, the text is canonical once its whole-line `#` comments
//! (each file's description) are dropped, graph names are unique across the corpus, and the
//! interpreter runs every graph on random inputs with the symbolic dims bound, giving
//! outputs of the declared types and finite values.

use kiln_ir::interp::{eval, random_inputs, Value};
use kiln_ir::text::{parse_module, print_module};
use kiln_ir::{verify, Dim, Graph};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

fn corpus() -> Vec<(String, String)> {
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
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, text)
        })
        .collect()
}

fn graphs() -> Vec<(String, Graph)> {
    corpus()
        .into_iter()
        .flat_map(|(file, text)| {
            let gs = parse_module(&text).unwrap_or_else(|e| panic!("{file}:{e}"));
            gs.into_iter().map(move |g| (file.clone(), g))
        })
        .collect()
}

/// The text without whole-line comments, leading blank lines and repeated blank lines:
/// what the printer gives back.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    let mut blank = true;
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let is_blank = line.trim().is_empty();
        if is_blank && blank {
            continue;
        }
        blank = is_blank;
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The size a symbol is bound to: distinct small sizes, so that a mix-up shows.
fn bind(symbol: &str) -> usize {
    2 + symbol.bytes().map(usize::from).sum::<usize>() % 4
}

/// Random inputs for `g`: normal floats, integers in {0, 1} (valid indices for any table of
/// size >= 2, and 0/1 masks), booleans with probability 1/2.
fn inputs(g: &Graph, seed: u64) -> Vec<Value> {
    random_inputs(g, seed, &bind).expect("input value")
}

#[test]
fn corpus_is_large_enough() {
    let files = corpus().len();
    let graphs = graphs().len();
    assert!(files >= 25, "only {files} corpus files");
    assert!(graphs >= 28, "only {graphs} corpus graphs");
}

#[test]
fn every_file_is_canonical_and_verifies() {
    for (file, text) in corpus() {
        let gs = parse_module(&text).unwrap_or_else(|e| panic!("{file}:{e}"));
        assert!(!gs.is_empty(), "{file} holds no graph");
        assert!(gs.len() <= 3, "{file} holds {} graphs", gs.len());
        for g in &gs {
            verify(g).unwrap_or_else(|e| panic!("{file}: @{}: {e}", g.name()));
        }
        let printed = print_module(&gs);
        assert_eq!(printed, normalise(&text), "{file} is not canonical");
        let again = parse_module(&printed).unwrap_or_else(|e| panic!("{file} reprinted:{e}"));
        assert_eq!(print_module(&again), printed, "{file}");
    }
}

#[test]
fn every_file_says_what_it_is_for() {
    for (file, text) in corpus() {
        assert!(text.starts_with("# "), "{file} has no description comment");
    }
}

#[test]
fn graph_names_are_unique() {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (file, g) in graphs() {
        if let Some(other) = seen.insert(g.name().to_string(), file.clone()) {
            panic!("@{} is in both {other} and {file}", g.name());
        }
    }
}

/// Runs `g` in the interpreter and checks the outputs' dtypes and shapes, and that every
/// output element is finite (masks use -inf, but no graph may produce NaN or inf on normal
/// inputs: differential tests of the optimiser compare these values).
fn run(file: &str, g: &Graph) -> Result<(), String> {
    let name = format!("{file}:@{}", g.name());
    let out = eval(g, &inputs(g, 29)).map_err(|e| format!("{name}: {e}"))?;
    if out.len() != g.outputs().len() {
        return Err(format!("{name}: {} outputs", out.len()));
    }
    for (i, (v, id)) in out.iter().zip(g.outputs()).enumerate() {
        let ty = &g.node(*id).ty;
        let want: Vec<usize> = ty
            .shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Const(n) => *n,
                Dim::Sym(s) => bind(s),
            })
            .collect();
        if (v.dtype, &v.shape) != (ty.dtype, &want) {
            return Err(format!(
                "{name} output {i}: {} {:?}, want {} {want:?}",
                v.dtype, v.shape, ty.dtype
            ));
        }
        if let Some(x) = v.data.iter().find(|x| !x.is_finite()) {
            return Err(format!("{name} output {i} holds {x}"));
        }
    }
    Ok(())
}

#[test]
fn interpreter_runs_every_graph() {
    // The workload graphs are large (16M elements, 2 GFLOP matmuls): spread them on threads.
    let all = graphs();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some((file, g)) = all.get(k) else { break };
                        failed.extend(run(file, g).err());
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
