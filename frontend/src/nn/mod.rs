//! Neural-network building blocks as plain Rust over [`Tensor`](crate::Tensor): each module
//! holds its weights as tensors and its `forward` uses only public tensor ops, so the same
//! code runs eagerly or inside [`compile`](crate::compile) (weights captured by the closure
//! become graph inputs by reference).
//!
//! - [`Linear`], [`LayerNorm`], [`Embedding`]: `torch.nn`'s, with PyTorch's weight layouts,
//!   built from given weights (`new`) or with torch's default initialisation (`init`, the
//!   parameters leaves that require grad);
//! - [`Module`]: parameters by torch's names (`named_parameters`) and `forward`;
//!   [`Sequential`] and the activation layers ([`Relu`], [`Tanh`], [`Sigmoid`], [`Gelu`])
//!   name theirs as `torch.nn.Sequential` does (`0.weight`, `2.bias`);
//! - [`save_parameters`] / [`load_parameters`]: those names in safetensors files;
//! - [`functional`]: losses ([`functional::cross_entropy`], [`functional::nll_loss`],
//!   [`functional::mse_loss`]) as `torch.nn.functional` computes them;
//! - [`bert`]: a BERT encoder (post-LN layers, multi-head self-attention with a padding mask,
//!   erf-gelu MLP) as published by Hugging Face, with its safetensors names;
//! - [`pooling`]: mean pooling over an attention mask and L2 normalisation;
//! - [`Weights`]: a memory-mapped safetensors file, read by name with shape checks;
//! - [`Tokenizer`]: a Hugging Face `tokenizer.json` (WordPiece for BERT) in Rust;
//! - [`MiniLm`]: all-MiniLM-L6-v2 sentence embeddings from its published files.
//!
//! ```
//! use kiln::nn::{Linear, LayerNorm};
//! use kiln::{DType, Tensor};
//! let lin = Linear::new(Tensor::randn(&[4, 3], DType::F32, 0)?, Some(Tensor::zeros(&[4], DType::F32)?))?;
//! let ln = LayerNorm::new(Tensor::ones(&[4], DType::F32)?, Tensor::zeros(&[4], DType::F32)?, 1e-12)?;
//! let y = ln.forward(&lin.forward(&Tensor::randn(&[2, 3], DType::F32, 1)?)?)?;
//! assert_eq!(y.shape(), &[2, 4]);
//! # Ok::<(), kiln::Error>(())
//! ```

mod activation;
pub mod bert;
mod init;
mod layers;
mod loss;
mod minilm;
mod module;
pub mod pooling;
mod sequential;
mod state;
mod tokenizer;
mod weights;

/// Functions of `torch.nn.functional`: the losses.
pub mod functional {
    pub use super::loss::{cross_entropy, mse_loss, nll_loss, CrossEntropyOptions, Reduction};
}

pub use activation::{Gelu, Relu, Sigmoid, Tanh};
pub use bert::{BertConfig, BertModel};
pub use init::derive_seed;
pub use layers::{Embedding, LayerNorm, Linear};
pub use minilm::{MiniLm, MINILM_ENV};
pub use module::Module;
pub use sequential::Sequential;
pub use state::{load_parameters, save_parameters};
pub use tokenizer::{Batch, Tokenizer};
pub use weights::Weights;
