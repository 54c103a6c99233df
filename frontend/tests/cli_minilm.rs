//! The CLI on all-MiniLM-L6-v2: `kiln dump --model minilm` at every stage, and `kiln embed`
//! (which needs the published files: without `KILN_MINILM` it must fail with an error that
//! says how to get them; with them, its JSON matches the reference's token ids).

mod common;

use common::{kiln, tmp};

#[test]
fn dump_minilm_works_at_every_stage() {
    for stage in [
        "traced",
        "decomposed",
        "optimized",
        "scheduled",
        "loops",
        "clif",
        "cuda",
    ] {
        let (ok, out, err) = kiln(&[
            "dump", "--model", "minilm", "--shape", "2x5", "--stage", stage,
        ]);
        assert!(ok, "{stage}: {err}");
        assert!(!out.is_empty(), "{stage}");
        if stage == "traced" {
            assert!(out.starts_with("graph @minilm("), "{out}");
            // the lookups are torch's `embedding` op (decomposed to `index_select` later)
            assert!(out.contains("= embedding %p3, %arg0"), "{out}");
            // nodes carry the encoder's own source lines
            assert!(out.contains("# frontend/src/nn/bert.rs:"), "{out}");
        }
    }
}

#[test]
fn embed_prints_similarities_and_writes_the_reference_shape() {
    let json = tmp("embed.json", "");
    let (ok, out, err) = kiln(&[
        "embed",
        "--compile",
        "--json",
        json.to_str().unwrap(),
        "The quick brown fox jumps over the lazy dog.",
        "How do I bake bread at home?",
    ]);
    if std::env::var_os("KILN_MINILM").is_none() {
        assert!(!ok);
        assert!(err.contains("fetch-minilm.sh"), "{err}");
        eprintln!("skipped the rest: KILN_MINILM is not set");
        return;
    }
    assert!(ok, "{err}");
    assert!(out.contains("cosine similarity"), "{out}");
    assert!(out.contains("(12 tokens)"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0]["embedding"].as_array().unwrap().len(), 384);
    let ids: Vec<i64> = serde_json::from_value(cases[0]["input_ids"].clone()).unwrap();
    assert_eq!(
        ids,
        vec![101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102]
    );
}

#[test]
fn embed_without_sentences_is_an_error() {
    let (ok, _, err) = kiln(&["embed"]);
    assert!(!ok);
    assert!(err.contains("required"), "{err}");
}
