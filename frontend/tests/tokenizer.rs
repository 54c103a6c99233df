//! `kiln::nn::Tokenizer` without the MiniLM download: a small BERT `tokenizer.json` (MiniLM's
//! normaliser, pre-tokeniser, WordPiece and template over 2,799 of its tokens; the fuzz
//! target `tokenizer_text` reads the same file) on the fuzz seeds and on hard cases. Each
//! batch is what the model expects: `[B, S]` with `S ≤ max_len`, `[CLS] … [SEP]` then
//! padding, a mask of ones then zeros, positions `0..S`.

use kiln::nn::Tokenizer;
use std::path::PathBuf;

const MAX_LEN: usize = 24;
const CLS: f64 = 2.0;
const SEP: f64 = 3.0;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz/tokenizer")
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(&dir().join("tokenizer.json"), MAX_LEN).unwrap()
}

/// Encodes `texts` and checks the batch's invariants; returns each row's unpadded ids.
fn encode_checked(t: &Tokenizer, texts: &[&str]) -> Vec<Vec<i64>> {
    let batch = t.encode(texts).unwrap();
    let shape = batch.input_ids.shape().to_vec();
    assert_eq!(shape[0], texts.len());
    let s = shape[1];
    assert!((2..=MAX_LEN).contains(&s), "{texts:?}: {s}");
    assert_eq!(batch.attention_mask.shape(), &shape[..]);
    assert_eq!(batch.position_ids.shape(), &shape[..]);
    let ids = batch.input_ids.to_vec_f64().unwrap();
    let mask = batch.attention_mask.to_vec_f64().unwrap();
    let pos = batch.position_ids.to_vec_f64().unwrap();
    for r in 0..texts.len() {
        let (row, m) = (&ids[r * s..(r + 1) * s], &mask[r * s..(r + 1) * s]);
        let len = m.iter().take_while(|&&x| x == 1.0).count();
        assert!(m[len..].iter().all(|&x| x == 0.0), "{m:?}");
        assert_eq!(
            (row[0], row[len - 1]),
            (CLS, SEP),
            "{:?}: {row:?}",
            texts[r]
        );
        assert!(row[len..].iter().all(|&x| x == 0.0), "{row:?}");
        let kept: Vec<f64> = batch.ids[r].iter().map(|&i| i as f64).collect();
        assert_eq!(&kept[..], &row[..len]);
        let want: Vec<f64> = (0..s).map(|i| i as f64).collect();
        assert_eq!(&pos[r * s..(r + 1) * s], &want[..]);
    }
    batch.ids
}

#[test]
fn every_fuzz_seed_encodes_alone_and_in_one_batch() {
    let t = tokenizer();
    let mut texts = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir().join("seeds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in &files {
        texts.push(String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned());
    }
    assert!(texts.len() >= 10);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = encode_checked(&t, &refs);
    for (text, ids) in refs.iter().zip(&together) {
        assert_eq!(&encode_checked(&t, &[text])[0], ids, "{text:?}");
    }
}

#[test]
fn hard_text_gives_well_formed_batches() {
    let t = tokenizer();
    let long = "word ".repeat(500);
    let cases = [
        "",
        " \t\r ",
        "\u{0}\u{7}\u{1b}[31m",
        "\u{fffd}\u{fffd}",
        "ǅ İ ß ﬁ",
        "🦀👩‍💻",
        "[CLS] [SEP] [PAD]",
        long.as_str(),
    ];
    for c in cases {
        encode_checked(&t, &[c]);
    }
    let ids = encode_checked(&t, &cases);
    // the empty sentence is [CLS] [SEP]; the long one is cut to MAX_LEN, [SEP] kept
    assert_eq!(ids[0], [2, 3]);
    assert_eq!(ids[cases.len() - 1].len(), MAX_LEN);
}

#[test]
fn no_sentences_and_a_missing_file_are_errors() {
    let t = tokenizer();
    let e = t.encode(&[]).unwrap_err().to_string();
    assert!(e.contains("Tokenizer::encode"), "{e}");
    let e = Tokenizer::from_file(&dir().join("no-such.json"), 8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such.json"), "{e}");
}
