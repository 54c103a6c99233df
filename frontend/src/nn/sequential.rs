//! [`Sequential`]: modules applied one after another, with `torch.nn.Sequential`'s
//! parameter names (`"<index>.<name>"`, every layer taking an index, parameters or not).

use super::init::derive_seed;
use super::{Linear, Module, Relu};
use crate::error::invalid;
use crate::{Result, Tensor};

/// Modules applied in order (`torch.nn.Sequential`). Layer `i`'s parameters are named
/// `"{i}.{name}"`, so `Sequential` of `Linear, ReLU, Linear` has `0.weight`, `0.bias`,
/// `2.weight`, `2.bias`, as torch names them; an empty one returns its input.
///
/// Layers are `Send + Sync` (every layer of `nn` is), so a `Sequential` is too and its
/// `forward` can be captured by [`crate::compile`], whose functions are `Send + Sync`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module + Send + Sync>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("layers", &self.layers.len())
            .field(
                "parameters",
                &self
                    .named_parameters()
                    .iter()
                    .map(|(n, t)| format!("{n} {:?}", t.shape()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Sequential {
    /// An empty sequence.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// The sequence with `layer` appended (index `self.len()`).
    pub fn push(mut self, layer: impl Module + Send + Sync + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// The number of layers (activations included).
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True when there is no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.layers.get(i).map(|l| -> &dyn Module { &**l })
    }

    /// Layers `layers` applied to `x` in order (a slice of the forward; an empty range
    /// returns `x`). A range past the end is an error.
    pub fn forward_range(&self, layers: std::ops::Range<usize>, x: &Tensor) -> Result<Tensor> {
        let Some(slice) = self.layers.get(layers.clone()) else {
            return Err(invalid(
                "nn::Sequential::forward_range",
                &[self.layers.len()],
                format!(
                    "layers {layers:?} are not within the {} layers",
                    self.layers.len()
                ),
            ));
        };
        let mut h = x.clone();
        for l in slice {
            h = l.forward(&h)?;
        }
        Ok(h)
    }

    /// A multi-layer perceptron `Linear(sizes[0], sizes[1]), ReLU, Linear(sizes[1],
    /// sizes[2]), ..., Linear(.., sizes[n-1])` (no activation after the last), each
    /// `Linear` with a bias and torch's default initialisation ([`Linear::init`]), the
    /// `k`-th drawn from stream `k` of `seed`. Parameter names: `0.weight`, `0.bias`,
    /// `2.weight`, ... At least two sizes, none 0.
    pub fn mlp(sizes: &[usize], seed: u64) -> Result<Sequential> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(invalid(
                "nn::Sequential::mlp",
                sizes,
                "give at least two layer sizes (inputs, ..., outputs), none of them 0",
            ));
        }
        let mut model = Sequential::new();
        let last = sizes.len() - 2;
        for (k, pair) in sizes.windows(2).enumerate() {
            model = model.push(Linear::init(
                pair[0],
                pair[1],
                true,
                derive_seed(seed, k as u64),
            )?);
            if k < last {
                model = model.push(Relu);
            }
        }
        Ok(model)
    }
}

impl Module for Sequential {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                l.named_parameters()
                    .into_iter()
                    .map(move |(n, t)| (format!("{i}.{n}"), t))
            })
            .collect()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.forward(&h)?;
        }
        Ok(h)
    }
}
