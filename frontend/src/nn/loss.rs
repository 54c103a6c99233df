//! Losses as `torch.nn.functional` computes them: [`cross_entropy`] (class indices with
//! `ignore_index` and `label_smoothing`, or class probabilities), [`nll_loss`] and
//! [`mse_loss`]. Each is written with differentiable tensor ops (the class picked by a
//! one-hot mask made from the targets, which carry no gradient), so eager autograd and
//! tracing go through them like any other code.

use crate::error::{invalid, Result};
use crate::{DType, Tensor};

/// How a loss reduces its per-element values (torch's `reduction=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reduction {
    /// the per-element losses, unreduced (`'none'`)
    None,
    /// their mean (`'mean'`, the default; for class-index targets the sum over the
    /// elements not ignored divided by their count)
    #[default]
    Mean,
    /// their sum (`'sum'`)
    Sum,
}

/// The options of [`cross_entropy`], with torch's defaults (`ignore_index = -100`,
/// `label_smoothing = 0.0`, `reduction = Mean`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyOptions {
    /// a target value that is skipped: it contributes 0 and is not counted by `Mean`
    pub ignore_index: i64,
    /// `ε` in `[0, 1]`: the target distribution mixed with the uniform one by `ε`
    pub label_smoothing: f64,
    /// how the per-element losses are reduced
    pub reduction: Reduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            ignore_index: -100,
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

impl CrossEntropyOptions {
    /// Sets `ignore_index`.
    pub fn ignore_index(mut self, ignore_index: i64) -> Self {
        self.ignore_index = ignore_index;
        self
    }

    /// Sets `label_smoothing`.
    pub fn label_smoothing(mut self, label_smoothing: f64) -> Self {
        self.label_smoothing = label_smoothing;
        self
    }

    /// Sets `reduction`.
    pub fn reduction(mut self, reduction: Reduction) -> Self {
        self.reduction = reduction;
        self
    }
}

/// The class dim of an input of rank `rank` (torch: 0 for an unbatched `[C]`, else 1).
fn class_dim(rank: usize) -> usize {
    usize::from(rank != 1)
}

fn check_float(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(invalid(
            op,
            t.shape(),
            format!("{what} must be floating point, got {}", t.dtype()),
        ))
    }
}

/// Applies `reduction` to per-element losses; `count` divides the sum for `Mean`.
fn reduce(losses: Tensor, reduction: Reduction, count: &Tensor) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(losses),
        Reduction::Sum => losses.sum(&[], false),
        Reduction::Mean => losses.sum(&[], false)?.div(count),
    }
}

/// The class-index targets checked against `input` (`[C]`, `[N, C]` or `[N, C, d1, ...]`):
/// i64, of shape `[]`, `[N]` or `[N, d1, ...]`, each in `[0, C)` or `ignore_index`.
fn check_targets(op: &'static str, input: &Tensor, target: &Tensor, ignore: i64) -> Result<()> {
    if target.dtype() != DType::I64 {
        return Err(invalid(
            op,
            target.shape(),
            format!(
                "class-index targets must be i64 (torch's Long), got {}",
                target.dtype()
            ),
        ));
    }
    let s = input.shape();
    let want: Vec<usize> = match s.len() {
        1 => Vec::new(),
        _ => std::iter::once(s[0])
            .chain(s[2..].iter().copied())
            .collect(),
    };
    if target.shape() != want {
        return Err(invalid(
            op,
            input.shape(),
            format!(
                "the target's shape is {:?}; input {:?} needs {want:?} (class indices) or \
                 {:?} (class probabilities)",
                target.shape(),
                s,
                s
            ),
        ));
    }
    let classes = s[class_dim(s.len())] as i64;
    let shape = s.to_vec();
    // inside a compiled function, a check of an argument's values runs before the graph
    // on every call instead of breaking the graph
    crate::compile::check_values(target, op, move |t| {
        let values = t.to_vec::<i64>()?;
        match values
            .iter()
            .enumerate()
            .find(|(_, &t)| t != ignore && !(0..classes).contains(&t))
        {
            Some((i, t)) => Err(invalid(
                op,
                &shape,
                format!(
                    "target {t} (element {i} of the target) is out of bounds for {classes} \
                     classes"
                ),
            )),
            None => Ok(()),
        }
    })
}

/// `torch.nn.functional.nll_loss(log_probs, target, ignore_index=, reduction=)` without
/// class weights: `-log_probs[n, target[n], ...]` per element, 0 where the target is
/// `ignore_index`; `Mean` divides the sum by the number of elements not ignored (NaN when
/// there is none, as torch). `log_probs`: `[C]`, `[N, C]` or `[N, C, d1, ...]`; `target`:
/// i64 of shape `[]`, `[N]` or `[N, d1, ...]` with values in `[0, C)` or `ignore_index`
/// (anything else is an error naming the value, as torch's "Target 12 is out of bounds").
pub fn nll_loss(
    log_probs: &Tensor,
    target: &Tensor,
    ignore_index: i64,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = "nll_loss";
    check_index_input(op, log_probs)?;
    check_targets(op, log_probs, target, ignore_index)?;
    let parts = NllParts::new(log_probs, target, ignore_index)?;
    reduce(parts.nll, reduction, &parts.count)
}

fn check_index_input(op: &'static str, input: &Tensor) -> Result<()> {
    if input.rank() == 0 {
        return Err(invalid(
            op,
            input.shape(),
            "expected 1 or more dimensions (got 0)",
        ));
    }
    check_float(op, "the input", input)
}

/// The pieces of a class-index loss.
struct NllParts {
    /// per element `-log_probs[target]`, 0 where ignored (the target's shape)
    nll: Tensor,
    /// the elements not ignored (bool, the target's shape)
    valid: Tensor,
    /// how many elements are not ignored, in the input's dtype (0-d)
    count: Tensor,
}

impl NllParts {
    /// From checked `log_probs` and `target`.
    fn new(log_probs: &Tensor, target: &Tensor, ignore_index: i64) -> Result<NllParts> {
        let rank = log_probs.rank();
        let cd = class_dim(rank);
        let classes = log_probs.shape()[cd];
        // [C] laid along the class dim: [1, C, 1, ...]
        let mut class_shape = vec![1i64; rank];
        class_shape[cd] = classes as i64;
        let class_ids =
            Tensor::arange(0.0, classes as f64, 1.0, DType::I64)?.reshape(&class_shape)?;
        let valid = target.ne(ignore_index)?;
        let tgt = target.unsqueeze(cd as i64)?;
        let hit = tgt
            .eq(&class_ids)?
            .logical_and(&valid.unsqueeze(cd as i64)?)?;
        // `where`, not a product with the one-hot: a -inf log-probability of another
        // class must not turn the row into NaN (torch picks the one element)
        let picked = hit.where_(log_probs, 0.0)?.sum(&[cd as i64], false)?;
        let count = valid.sum(&[], false)?.cast(log_probs.dtype())?;
        Ok(NllParts {
            nll: picked.neg()?,
            valid,
            count,
        })
    }
}

/// `torch.nn.functional.cross_entropy(input, target, ignore_index=, reduction=,
/// label_smoothing=)` without class weights, computed as torch does:
///
/// - `input` holds logits: `[C]`, `[N, C]` or `[N, C, d1, ...]`, the classes along dim 1
///   (dim 0 for `[C]`); `log_softmax` is taken over them.
/// - Class-index `target` (i64, `[]`, `[N]` or `[N, d1, ...]`): the [`nll_loss`] of the
///   log-probabilities; with `label_smoothing = ε > 0`, `(1 - ε)·nll + (ε / C)·smooth`,
///   where `smooth` per element is `-Σ_c log_probs[c]`, 0 where ignored, and reduced like
///   `nll` (`Mean` divides both by the number of elements not ignored). A target outside
///   `[0, C)` that is not `ignore_index` is an error naming it.
/// - Class-probability `target` (floating, the input's shape): `-Σ_c target[c]·log_probs[c]`
///   per element, the target first mixed as `target·(1 - ε) + ε / C`; `Mean` divides by
///   the number of elements `N·d1·...` (NaN for an empty input). `ignore_index` must be
///   negative here (torch's rule; the default -100 is).
///
/// `label_smoothing` must lie in `[0, 1]` (torch ignores a negative one; kiln refuses it).
pub fn cross_entropy(
    input: &Tensor,
    target: &Tensor,
    options: &CrossEntropyOptions,
) -> Result<Tensor> {
    let op = "cross_entropy";
    check_index_input(op, input)?;
    let eps = options.label_smoothing;
    if !(0.0..=1.0).contains(&eps) {
        return Err(invalid(
            op,
            input.shape(),
            format!("label_smoothing must be between 0.0 and 1.0, got {eps}"),
        ));
    }
    let cd = class_dim(input.rank());
    let classes = input.shape()[cd];
    if target.shape() == input.shape() {
        return cross_entropy_probabilities(input, target, options);
    }
    check_targets(op, input, target, options.ignore_index)?;
    let log_probs = input.log_softmax(cd as i64)?;
    let parts = NllParts::new(&log_probs, target, options.ignore_index)?;
    let nll = reduce(parts.nll, options.reduction, &parts.count)?;
    if eps == 0.0 {
        return Ok(nll);
    }
    let smooth = log_probs.sum(&[cd as i64], false)?.neg()?;
    let smooth = parts.valid.where_(&smooth, 0.0)?;
    let smooth = reduce(smooth, options.reduction, &parts.count)?;
    nll.mul(1.0 - eps)?.add(&smooth.mul(eps / classes as f64)?)
}

/// The class-probability form of [`cross_entropy`].
fn cross_entropy_probabilities(
    input: &Tensor,
    target: &Tensor,
    options: &CrossEntropyOptions,
) -> Result<Tensor> {
    let op = "cross_entropy";
    check_float(op, "a class-probability target", target)?;
    if options.ignore_index >= 0 {
        return Err(invalid(
            op,
            input.shape(),
            format!(
                "ignore_index ({}) is not supported for class-probability targets",
                options.ignore_index
            ),
        ));
    }
    let cd = class_dim(input.rank());
    let classes = input.shape()[cd];
    let eps = options.label_smoothing;
    let log_probs = input.log_softmax(cd as i64)?;
    let target = if eps > 0.0 {
        target.mul(1.0 - eps)?.add(eps / classes as f64)?
    } else {
        target.clone()
    };
    let losses = log_probs.mul(&target)?.sum(&[cd as i64], false)?.neg()?;
    // N·d1·... elements (numel / C; an empty input divides 0 by 0: NaN, as torch)
    let elements = input.numel().checked_div(classes).unwrap_or(0);
    let count = Tensor::full(&[], elements as f64, losses.dtype())?;
    reduce(losses, options.reduction, &count)
}

/// `torch.nn.functional.mse_loss(input, target, reduction=)`: `(input - target)²` per
/// element (the two broadcast together, as torch does after its warning), reduced.
/// Floating inputs only.
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    check_float("mse_loss", "the input", input)?;
    check_float("mse_loss", "the target", target)?;
    let diff = input.sub(target).map_err(|e| e.within("mse_loss"))?;
    let sq = diff.mul(&diff)?;
    match reduction {
        Reduction::None => Ok(sq),
        Reduction::Sum => sq.sum(&[], false),
        Reduction::Mean => sq.mean(&[], false),
    }
}
