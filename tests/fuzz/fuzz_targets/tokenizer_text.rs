//! The tokenizer input path (`kiln embed "…"`, `MiniLm::embed`): arbitrary bytes, read as
//! text the way a command line or a file gives it (lossy UTF-8), split into up to eight
//! sentences at newlines, through `kiln::nn::Tokenizer` with a small BERT `tokenizer.json`
//! (MiniLM's normaliser, pre-tokeniser, WordPiece and `[CLS] … [SEP]` template over a
//! 2,799-token subset of its vocabulary: tests/fuzz/tokenizer/). No panic, and the batch is
//! what the model expects: `[B, S]` ids, mask and positions with `S ≤ max_len`, each row
//! `[CLS] … [SEP]` then padding, the mask 1 then 0 and agreeing with the unpadded ids.
#![no_main]

use kiln::nn::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const MAX_LEN: usize = 24;
const JSON: &str = include_str!("../tokenizer/tokenizer.json");

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("kiln-fuzz-tokenizer-{}.json", std::process::id()));
        std::fs::write(&path, JSON).expect("write the tokenizer");
        let t = Tokenizer::from_file(&path, MAX_LEN).expect("the committed tokenizer loads");
        let _ = std::fs::remove_file(&path);
        t
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sentences: Vec<&str> = text.split('\n').take(8).collect();
    let t = tokenizer();
    let batch = match t.encode(&sentences) {
        Ok(b) => b,
        Err(e) => panic!("encoding {sentences:?} failed: {e}"),
    };
    let b = sentences.len();
    let shape = batch.input_ids.shape().to_vec();
    assert_eq!(shape.len(), 2);
    assert_eq!(shape[0], b);
    let s = shape[1];
    assert!((2..=MAX_LEN).contains(&s), "{s} tokens");
    assert_eq!(batch.attention_mask.shape(), &shape[..]);
    assert_eq!(batch.position_ids.shape(), &shape[..]);
    let ids = batch.input_ids.to_vec_f64().unwrap();
    let mask = batch.attention_mask.to_vec_f64().unwrap();
    let pos = batch.position_ids.to_vec_f64().unwrap();
    let (cls, sep) = (2.0, 3.0);
    for r in 0..b {
        let row = &ids[r * s..(r + 1) * s];
        let m = &mask[r * s..(r + 1) * s];
        let len = m.iter().take_while(|&&x| x == 1.0).count();
        assert!(m[len..].iter().all(|&x| x == 0.0), "mask {m:?}");
        assert!(len >= 2, "row {r}: {row:?}");
        assert_eq!((row[0], row[len - 1]), (cls, sep), "row {r}: {row:?}");
        assert!(row[len..].iter().all(|&x| x == 0.0), "padding {row:?}");
        assert!(row.iter().all(|&x| (0.0..2799.0).contains(&x)), "{row:?}");
        let kept: Vec<f64> = batch.ids[r].iter().map(|&i| i as f64).collect();
        assert_eq!(&kept[..], &row[..len]);
        assert!(pos[r * s..(r + 1) * s].iter().enumerate().all(|(i, &p)| p == i as f64));
    }
});
