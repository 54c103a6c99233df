//! Neural-network building blocks as plain Rust over [`Tensor`](crate::Tensor): each module
//! holds its weights as tensors and its `forward` uses only public tensor ops, so the same
//! code runs eagerly or inside [`compile`](crate::compile) (weights captured by the closure
//! become graph inputs by reference).
//!
//! - [`Linear`], [`LayerNorm`], [`Embedding`]: `torch.nn`'s, with PyTorch's weight layouts;
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

pub mod bert;
mod layers;
mod minilm;
pub mod pooling;
mod tokenizer;
mod weights;

pub use bert::{BertConfig, BertModel};
pub use layers::{Embedding, LayerNorm, Linear};
pub use minilm::{MiniLm, MINILM_ENV};
pub use tokenizer::{Batch, Tokenizer};
pub use weights::Weights;
