//! The nn building blocks on their own: layers against hand computation, pooling, weight
//! loading errors, and a small BERT encoder with padding compiled (cpu, with and without
//! fusion) vs eager vs the interpreter.

use kiln::nn::pooling::{l2_normalize, mean_pool};
use kiln::nn::{BertConfig, BertModel, Embedding, LayerNorm, Linear, Weights};
use kiln::{compile_with, Backend, CompileOptions, DType, Error, Tensor};

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

fn close(a: &[f64], b: &[f64], rel: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rel * y.abs() + 1e-6,
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn linear_is_x_times_w_transposed_plus_bias() {
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, -1.0, 0.5, 0.0], &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![0.25f32, -0.5], &[2]).unwrap();
    let l = Linear::new(w, Some(b)).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, 1.0, 1.0, 2.0, 0.0, -1.0], &[2, 3]).unwrap();
    assert_eq!(vals(&l.forward(&x).unwrap()), vec![6.25, -1.0, -0.75, -2.5]);
    // a bias of the wrong size is rejected when the layer is made
    let e = Linear::new(
        Tensor::zeros(&[2, 3], DType::F32).unwrap(),
        Some(Tensor::zeros(&[3], DType::F32).unwrap()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("bias"), "{e}");
}

#[test]
fn layer_norm_and_embedding() {
    let ln = LayerNorm::new(
        Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap(),
        Tensor::from_vec(vec![0.0f32, 1.0], &[2]).unwrap(),
        0.0,
    )
    .unwrap();
    let y = ln
        .forward(&Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2]).unwrap())
        .unwrap();
    close(&vals(&y), &[-1.0, 3.0], 1e-6, "layer norm");
    let table = Tensor::from_vec((0..12).map(|i| i as f32).collect(), &[4, 3]).unwrap();
    let emb = Embedding::new(table).unwrap();
    let ids = Tensor::from_vec(vec![3i64, 0, 1, 3], &[2, 2]).unwrap();
    let e = emb.forward(&ids).unwrap();
    assert_eq!(e.shape(), &[2, 2, 3]);
    assert_eq!(
        vals(&e),
        vec![9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0]
    );
    // an id past the table is an error naming the op, not a panic
    let bad = Tensor::from_vec(vec![4i64], &[1, 1]).unwrap();
    let err = emb.forward(&bad).unwrap_err().to_string();
    assert!(
        err.contains("embedding") && err.contains("index 4"),
        "{err}"
    );
}

#[test]
fn mean_pooling_ignores_padding_and_normalising_gives_unit_rows() {
    // [B=2, S=3, D=2]; the second row's last token is padding
    let h = Tensor::from_vec(
        vec![
            1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 1.0, 3.0, 3.0, 100.0, -100.0,
        ],
        &[2, 3, 2],
    )
    .unwrap();
    let mask = Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 0], &[2, 3]).unwrap();
    let p = mean_pool(&h, &mask).unwrap();
    assert_eq!(vals(&p), vec![3.0, 4.0, 2.0, 2.0]);
    let n = l2_normalize(&p).unwrap();
    close(
        &vals(&n),
        &[0.6, 0.8, 0.5f64.sqrt(), 0.5f64.sqrt()],
        1e-6,
        "normalised",
    );
    // an all-zero vector stays zero (norm clamped to 1e-12)
    let z = l2_normalize(&Tensor::zeros(&[1, 3], DType::F32).unwrap()).unwrap();
    assert_eq!(vals(&z), vec![0.0; 3]);
}

fn small_config() -> BertConfig {
    BertConfig {
        vocab_size: 50,
        hidden_size: 24,
        num_hidden_layers: 2,
        num_attention_heads: 3,
        intermediate_size: 40,
        max_position_embeddings: 16,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
    }
}

#[test]
fn weights_name_the_missing_or_misshaped_tensor() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-nn-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("w.safetensors");
    kiln::io::save(
        &path,
        &[
            (
                "embeddings.word_embeddings.weight".into(),
                Tensor::zeros(&[50, 24], DType::F32).unwrap(),
            ),
            (
                "embeddings.position_embeddings.weight".into(),
                Tensor::zeros(&[8, 24], DType::F32).unwrap(),
            ),
        ],
    )
    .unwrap();
    let w = Weights::open(&path).unwrap();
    assert_eq!(w.names().len(), 2);
    assert_eq!(
        w.get("embeddings.word_embeddings.weight", &[50, 24])
            .unwrap()
            .shape(),
        &[50, 24]
    );
    let e = BertModel::from_source(small_config(), &mut |n: &str, s: &[usize]| w.get(n, s))
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("embeddings.position_embeddings.weight")
            && msg.contains("[8, 24]")
            && msg.contains("[16, 24]"),
        "{msg}"
    );
    let e = w
        .get("encoder.layer.0.attention.self.query.weight", &[24, 24])
        .unwrap_err();
    assert!(e
        .to_string()
        .contains("no tensor `encoder.layer.0.attention.self.query.weight`"));
    // a file that is not safetensors
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    assert!(matches!(
        Weights::open(&junk).unwrap_err(),
        Error::Io { .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_rejects_heads_that_do_not_divide_the_width_and_other_activations() {
    let mut c = small_config();
    c.num_attention_heads = 5;
    assert!(BertModel::random(c, 0).is_err());
    let mut c = small_config();
    c.hidden_act = "relu".into();
    let e = BertModel::random(c, 0).unwrap_err().to_string();
    assert!(e.contains("relu"), "{e}");
}

/// Ids, mask and positions for `lens` sentences padded to the longest (ids below 50).
fn padded_batch(lens: &[usize], seed: u64) -> [Tensor; 3] {
    let s = *lens.iter().max().unwrap();
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for (r, &n) in lens.iter().enumerate() {
        for j in 0..s {
            let real = j < n;
            let id = (seed as usize * 7 + r * 13 + j * 5) % 47 + 3;
            ids.push(if real { id as i64 } else { 0 });
            mask.push(if real { 1f32 } else { 0.0 });
        }
    }
    let pos: Vec<i64> = lens.iter().flat_map(|_| 0..s as i64).collect();
    let b = lens.len();
    [
        Tensor::from_vec(ids, &[b, s]).unwrap(),
        Tensor::from_vec(mask, &[b, s]).unwrap(),
        Tensor::from_vec(pos, &[b, s]).unwrap(),
    ]
}

#[test]
fn small_bert_with_padding_compiled_equals_eager_and_the_interpreter() {
    let m = BertModel::random(small_config(), 3).unwrap();
    let f = |a: &[Tensor; 3]| {
        let h = m.forward(&a[0], &a[1], &a[2])?;
        l2_normalize(&mean_pool(&h, &a[1])?)
    };
    let cpu = compile_with(f, CompileOptions::default().backend(Backend::Cpu));
    let unfused = compile_with(
        f,
        CompileOptions::default()
            .backend(Backend::Cpu)
            .fusion(false),
    );
    let interp = compile_with(f, CompileOptions::default().backend(Backend::Interp));
    for (seed, lens) in [
        (0u64, vec![5, 2, 1]),
        (1, vec![1]),
        (2, vec![7, 7]),
        (3, vec![3, 1]),
    ] {
        let args = padded_batch(&lens, seed);
        let eager = vals(&f(&args).unwrap());
        for (name, c) in [
            ("cpu", &cpu),
            ("cpu unfused", &unfused),
            ("interp", &interp),
        ] {
            close(
                &vals(&c.call(&args).unwrap()),
                &eager,
                1e-4,
                &format!("{name} lens {lens:?}"),
            );
        }
    }
    // an integer mask (as Hugging Face passes it) gives the same embeddings as the f32 one
    let args = padded_batch(&[5, 2, 1], 0);
    let int_mask = args[1].cast(DType::I64).unwrap();
    let with_int = f(&[args[0].clone(), int_mask.clone(), args[2].clone()]).unwrap();
    assert_eq!(vals(&with_int), vals(&f(&args).unwrap()));
    let compiled_int = cpu
        .call(&[args[0].clone(), int_mask, args[2].clone()])
        .unwrap();
    close(
        &vals(&compiled_int),
        &vals(&with_int),
        1e-4,
        "int mask compiled",
    );
    // a padded sentence embeds as it does alone: row 1 of the batch (2 real tokens)
    let batch = padded_batch(&[5, 2, 1], 0);
    let together = f(&batch).unwrap();
    let ids = batch[0].to_vec::<i64>().unwrap();
    let lone = f(&[
        Tensor::from_vec(vec![ids[5], ids[6]], &[1, 2]).unwrap(),
        Tensor::from_vec(vec![1f32, 1.0], &[1, 2]).unwrap(),
        Tensor::from_vec(vec![0i64, 1], &[1, 2]).unwrap(),
    ])
    .unwrap();
    close(
        &vals(&together.narrow(0, 1, 1).unwrap()),
        &vals(&lone),
        1e-5,
        "padding changes nothing",
    );
}
