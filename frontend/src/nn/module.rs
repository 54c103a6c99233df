//! The [`Module`] trait (`torch.nn.Module`'s parameter naming and `forward`), and its
//! implementations for the layers of `layers.rs`.

use super::layers::{Embedding, LayerNorm, Linear};
use crate::{Result, Tensor};

/// A layer or a model: its parameters by torch's names, and a forward pass over one input.
///
/// Parameters are returned as clones of the module's tensors, which share storage,
/// `requires_grad` and `.grad` with them (so an optimiser built from
/// [`Module::parameters`] updates the module in place).
///
/// ```
/// use kiln::nn::functional::{cross_entropy, CrossEntropyOptions};
/// use kiln::nn::{load_parameters, save_parameters, Module, Sequential};
/// use kiln::optim::{AdamW, Optimizer};
/// use kiln::{DType, Tensor};
/// let model = Sequential::mlp(&[4, 16, 3], 0)?; // Linear(4, 16), ReLU, Linear(16, 3)
/// let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// let mut opt = AdamW::new(model.parameters(), 1e-2)?;
/// let x = Tensor::randn(&[8, 4], DType::F32, 1)?;
/// let y = Tensor::from_vec(vec![0i64, 1, 2, 0, 1, 2, 0, 1], &[8])?;
/// let loss = |m: &Sequential| cross_entropy(&m.forward(&x)?, &y, &CrossEntropyOptions::default());
/// let first = loss(&model)?.item()?;
/// for _ in 0..20 {
///     let l = loss(&model)?;
///     opt.zero_grad();
///     l.backward()?;
///     opt.step()?;
/// }
/// assert!(loss(&model)?.item()? < first);
/// let path = std::env::temp_dir().join(format!("kiln-doc-mlp-{}.safetensors", std::process::id()));
/// save_parameters(&model, &path)?;
/// let copy = Sequential::mlp(&[4, 16, 3], 1)?;
/// load_parameters(&copy, &path)?;
/// assert_eq!(copy.forward(&x)?.to_vec::<f32>()?, model.forward(&x)?.to_vec::<f32>()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait Module {
    /// Every parameter with torch's name, in `named_parameters()` order: a layer's
    /// `weight` then `bias`; a container's children in order, prefixed with the child's
    /// name (`"0.weight"`, `"fc1.bias"`).
    fn named_parameters(&self) -> Vec<(String, Tensor)>;

    /// The module applied to `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// The parameters, in [`Module::named_parameters`] order.
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// The number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }

    /// Sets every parameter's gradient to `None` (`module.zero_grad()`).
    fn zero_grad(&self) {
        self.named_parameters()
            .iter()
            .for_each(|(_, t)| t.zero_grad());
    }
}

impl Module for Linear {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut p = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            p.push(("bias".to_string(), b.clone()));
        }
        p
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Linear::forward(self, x)
    }
}

impl Module for LayerNorm {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("weight".to_string(), self.weight.clone()),
            ("bias".to_string(), self.bias.clone()),
        ]
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        LayerNorm::forward(self, x)
    }
}

impl Module for Embedding {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }

    /// The rows of `x`, an integer tensor of indices.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Embedding::forward(self, x)
    }
}
