//! Helpers shared by the tests of CUDA tensors and the cuda backend.
#![allow(dead_code)] // each test file uses some of them

use kiln::nn::BertConfig;
use kiln::{DType, Tensor};

/// Chooses the emulated device for this test process unless `KILN_CUDA_DEVICE` is set
/// (`scripts/gpu-check.sh` sets it to 0 on a GPU); once, before any device is used (the
/// device is chosen once per process, and tests run on several threads).
pub fn emulated_unless_set() {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        if std::env::var_os("KILN_CUDA_DEVICE").is_none() {
            std::env::set_var("KILN_CUDA_DEVICE", "emulated");
        }
    });
}

/// Standard normal f32 values of `shape`, seeded.
pub fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed).unwrap()
}

/// `got` equals the host tensor `want` within the tolerance of sums and GEMMs (1e-4
/// relative, 1e-5 absolute); NaN matches NaN.
pub fn assert_close(got: &Tensor, want: &Tensor) {
    assert!(!want.is_cuda());
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.dtype(), want.dtype());
    let (a, b) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-4 * y.abs() + 1e-5,
            "element {i}: got {x}, want {y}"
        );
    }
}

/// A small BERT encoder's configuration (2 layers, width 32, 4 heads, vocabulary 64): small
/// enough to emulate every kernel.
pub fn small_bert_config() -> BertConfig {
    BertConfig {
        vocab_size: 64,
        hidden_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 64,
        max_position_embeddings: 16,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".to_string(),
    }
}
