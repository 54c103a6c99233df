//! all-MiniLM-L6-v2 end to end, from its published files, against the reference embeddings
//! that sentence-transformers (PyTorch) computed (`../shared/data/minilm/reference.json`):
//! token ids, eager and compiled embeddings, padding with a symbolic sequence dim.
//!
//! The model's files come from `eval "$(bash scripts/fetch-minilm.sh)"` (sets
//! `KILN_MINILM`). Without them these tests print why and pass, unless
//! `KILN_REQUIRE_MINILM` is set (CI sets it), which makes their absence a failure.

use kiln::nn::MiniLm;
use kiln::{compile, Backend, CompileOptions, Tensor};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::OnceLock;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    input_ids: Vec<i64>,
    embedding: Vec<f64>,
}

fn reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/minilm/reference.json")
}

/// The model and the reference, or `None` (with the reason printed) where they are absent
/// and not required.
fn setup() -> Option<&'static (MiniLm, Reference)> {
    static SETUP: OnceLock<Option<(MiniLm, Reference)>> = OnceLock::new();
    SETUP
        .get_or_init(|| {
            let required = std::env::var_os("KILN_REQUIRE_MINILM").is_some();
            let model = match MiniLm::from_env() {
                Ok(m) => m,
                Err(e) if !required => {
                    eprintln!("skipped: {e}");
                    return None;
                }
                Err(e) => panic!("KILN_REQUIRE_MINILM is set: {e}"),
            };
            let path = reference_path();
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if !required => {
                    eprintln!("skipped: {}: {e}", path.display());
                    return None;
                }
                Err(e) => panic!("KILN_REQUIRE_MINILM is set: {}: {e}", path.display()),
            };
            let reference: Reference = serde_json::from_str(&text).expect("reference.json parses");
            assert!(!reference.cases.is_empty());
            Some((model, reference))
        })
        .as_ref()
}

fn texts(r: &Reference) -> Vec<&str> {
    r.cases.iter().map(|c| c.text.as_str()).collect()
}

fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    let d = t.shape()[1];
    t.to_vec_f64()
        .expect("readable")
        .chunks(d)
        .map(<[f64]>::to_vec)
        .collect()
}

/// (cosine similarity, max abs difference) of two vectors.
fn compare(a: &[f64], b: &[f64]) -> (f64, f64) {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    let max = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    (dot / (na * nb), max)
}

/// The largest absolute difference between two `[B, D]` tensors.
fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    rows(a)
        .iter()
        .zip(rows(b))
        .map(|(x, y)| compare(x, &y).1)
        .fold(0.0, f64::max)
}

fn assert_matches_reference(what: &str, got: &Tensor, r: &Reference) {
    assert_eq!(got.shape(), &[r.cases.len(), 384]);
    let mut worst = (1.0f64, 0.0f64);
    for (row, case) in rows(got).iter().zip(&r.cases) {
        let (cos, max) = compare(row, &case.embedding);
        assert!(
            cos >= 0.9999 && max <= 1e-4,
            "{what}: {:?}: cosine {cos}, max abs difference {max}",
            case.text
        );
        worst = (worst.0.min(cos), worst.1.max(max));
    }
    eprintln!(
        "{what}: worst cosine {:.9} (1 - cos = {:.2e}), worst max abs difference {:.3e}",
        worst.0,
        1.0 - worst.0,
        worst.1
    );
}

#[test]
fn token_ids_equal_the_reference() {
    let Some((m, r)) = setup() else { return };
    let batch = m.tokenize(&texts(r)).expect("tokenizes");
    for (ids, case) in batch.ids.iter().zip(&r.cases) {
        assert_eq!(ids, &case.input_ids, "token ids of {:?}", case.text);
    }
    // the batch is padded to its longest sentence, the mask marks the real tokens
    let longest = r
        .cases
        .iter()
        .map(|c| c.input_ids.len())
        .max()
        .expect("cases");
    assert_eq!(batch.input_ids.shape(), &[r.cases.len(), longest]);
    let mask = batch.attention_mask.to_vec::<f32>().expect("mask");
    let kept = mask.iter().sum::<f32>() as i64;
    let total: usize = r.cases.iter().map(|c| c.input_ids.len()).sum();
    assert_eq!(kept as usize, total);
}

#[test]
fn long_input_is_truncated_at_256_tokens() {
    let Some((m, _)) = setup() else { return };
    let long = "word ".repeat(400);
    let b = m.tokenize(&[long.as_str(), "short"]).expect("tokenizes");
    assert_eq!(b.input_ids.shape(), &[2, 256]);
    assert_eq!(b.ids[0].len(), 256);
    assert_eq!(b.ids[0][0], 101);
    assert_eq!(b.ids[0][255], 102);
    assert_eq!(b.ids[1].len(), 3);
}

#[test]
fn eager_embeddings_match_the_reference() {
    let Some((m, r)) = setup() else { return };
    let (_, e) = m.embed(&texts(r)).expect("embeds");
    assert_matches_reference("eager", &e, r);
}

#[test]
fn each_sentence_alone_matches_its_batched_embedding() {
    // padding must not change a sentence's embedding
    let Some((m, r)) = setup() else { return };
    for case in r.cases.iter().take(3) {
        let (_, e) = m.embed(&[case.text.as_str()]).expect("embeds");
        let (cos, max) = compare(&rows(&e)[0], &case.embedding);
        assert!(cos >= 0.9999 && max <= 1e-4, "{:?}: {cos} {max}", case.text);
    }
}

#[test]
fn compiled_embeddings_match_the_reference_and_eager() {
    let Some((m, r)) = setup() else { return };
    let batch = m.tokenize(&texts(r)).expect("tokenizes");
    let args = [
        batch.input_ids.clone(),
        batch.attention_mask.clone(),
        batch.position_ids.clone(),
    ];
    let eager = m.forward(&args[0], &args[1], &args[2]).expect("eager");
    for fusion in [true, false] {
        let f = m.compile(
            CompileOptions::default()
                .backend(Backend::Cpu)
                .fusion(fusion),
        );
        let c = f.call(&args).expect("compiled");
        assert_matches_reference(&format!("compiled (cpu, fusion {fusion})"), &c, r);
        let worst = max_abs_diff(&c, &eager);
        assert!(
            worst <= 1e-5,
            "compiled vs eager: max abs difference {worst}"
        );
        eprintln!("compiled (fusion {fusion}) vs eager: max abs difference {worst:.3e}");
    }
}

#[test]
fn padded_batches_of_other_lengths_reuse_one_compiled_entry() {
    let Some((m, r)) = setup() else { return };
    let f = m.compile(CompileOptions::default().backend(Backend::Cpu));
    let all = texts(r);
    // batches of 3 sentences padded to different lengths
    let groups: [&[&str]; 3] = [&all[0..3], &all[3..6], &[all[6], all[7], all[2]]];
    let mut lengths = Vec::new();
    for g in groups {
        let b = m.tokenize(g).expect("tokenizes");
        lengths.push(b.input_ids.shape()[1]);
        let args = [
            b.input_ids.clone(),
            b.attention_mask.clone(),
            b.position_ids.clone(),
        ];
        let c = f.call(&args).expect("compiled");
        let e = m.forward(&args[0], &args[1], &args[2]).expect("eager");
        let worst = max_abs_diff(&c, &e);
        assert!(
            worst <= 1e-5,
            "lengths {lengths:?}: compiled vs eager {worst}"
        );
    }
    let mut distinct = lengths.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "the batches have different lengths: {lengths:?}"
    );
    let stats = f.stats();
    assert_eq!(stats.compiles, 1, "one entry for every length: {stats:?}");
    assert_eq!(stats.recompiles, 0, "{stats:?}");
}

#[test]
fn automatic_dynamic_shapes_recompile_once_for_a_new_length() {
    // without marking the sequence dim: the second length recompiles with a symbol (as
    // torch.compile's automatic dynamic shapes do), the third reuses that entry
    let Some((m, r)) = setup() else { return };
    let f = compile(|a: &[Tensor; 3]| m.forward(&a[0], &a[1], &a[2]));
    let all = texts(r);
    for g in [&all[0..2], &all[2..4], &all[4..6]] {
        let b = m.tokenize(g).expect("tokenizes");
        let args = [b.input_ids, b.attention_mask, b.position_ids];
        f.call(&args).expect("compiled");
    }
    let s = f.stats();
    assert_eq!((s.compiles, s.recompiles, s.entries), (2, 1, 2), "{s:?}");
}
