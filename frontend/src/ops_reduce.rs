//! Reductions and row-wise composites: sum, mean, max, min, argmax, var, softmax,
//! log_softmax, layer_norm, rms_norm, linear, matmul.

use crate::error::{invalid, Result};
use crate::{Operand, Tensor};
use kiln_ir::{Op, ReduceOp};

impl Tensor {
    #[track_caller]
    fn reduce(&self, op: ReduceOp, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.apply1(Op::Reduce {
            op,
            dims: dims.to_vec(),
            keepdim,
            dtype: None,
        })
    }

    /// Sum over `dims` (empty: all dims). Integers and bools sum to i64.
    #[track_caller]
    pub fn sum(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, dims, keepdim)
    }

    /// Mean over `dims` (empty: all dims); floating point only.
    #[track_caller]
    pub fn mean(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, dims, keepdim)
    }

    /// Maximum over `dims` (empty: all dims); NaN propagates.
    #[track_caller]
    pub fn max(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, dims, keepdim)
    }

    /// Minimum over `dims` (empty: all dims); NaN propagates.
    #[track_caller]
    pub fn min(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, dims, keepdim)
    }

    /// Index (i64) of the first maximum along `dim`.
    #[track_caller]
    pub fn argmax(&self, dim: i64, keepdim: bool) -> Result<Tensor> {
        self.apply1(Op::Argmax { dim, keepdim })
    }

    /// Variance over `dims` dividing by `N - correction` (PyTorch's default correction is 1).
    #[track_caller]
    pub fn var(&self, dims: &[i64], correction: i64, keepdim: bool) -> Result<Tensor> {
        self.apply1(Op::Var {
            dims: dims.to_vec(),
            correction,
            keepdim,
        })
    }

    /// Softmax along `dim`.
    #[track_caller]
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        self.apply1(Op::Softmax { dim })
    }

    /// Log-softmax along `dim`.
    #[track_caller]
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        self.apply1(Op::LogSoftmax { dim })
    }

    fn normalized_ndim(&self, op: &'static str, normalized_shape: &[usize]) -> Result<usize> {
        let n = normalized_shape.len();
        let r = self.rank();
        if n == 0 || n > r || self.shape()[r - n..] != *normalized_shape {
            return Err(invalid(
                op,
                self.shape(),
                format!("normalized_shape {normalized_shape:?} must match the trailing dims"),
            ));
        }
        Ok(n)
    }

    /// Layer norm over the trailing `normalized_shape` dims (biased variance), with optional
    /// elementwise weight and bias of that shape.
    #[track_caller]
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let ndim = self.normalized_ndim("layer_norm", normalized_shape)?;
        let mut args = vec![Operand::Tensor(self)];
        match (weight, bias) {
            (Some(w), b) => {
                args.push(Operand::Tensor(w));
                args.extend(b.map(Operand::Tensor));
            }
            (None, Some(b)) => {
                // The op takes (x, weight, bias): a missing weight is a weight of ones.
                let ones = Tensor::ones(normalized_shape, self.dtype())?;
                return self.layer_norm(normalized_shape, Some(&ones), Some(b), eps);
            }
            (None, None) => {}
        }
        Tensor::apply(
            &Op::LayerNorm {
                ndim,
                eps: eps.into(),
            },
            &args,
        )
    }

    /// RMS norm over the trailing `normalized_shape` dims, with an optional weight.
    #[track_caller]
    pub fn rms_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let ndim = self.normalized_ndim("rms_norm", normalized_shape)?;
        let mut args = vec![Operand::Tensor(self)];
        args.extend(weight.map(Operand::Tensor));
        Tensor::apply(
            &Op::RmsNorm {
                ndim,
                eps: eps.into(),
            },
            &args,
        )
    }

    /// `self @ weightᵀ + bias` with `weight: [out, in]` (as `torch.nn.functional.linear`).
    #[track_caller]
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let mut args = vec![Operand::Tensor(self), Operand::Tensor(weight)];
        args.extend(bias.map(Operand::Tensor));
        Tensor::apply(&Op::Linear, &args)
    }

    /// torch's `convolution` (`conv1d`/`conv2d`/`conv3d` and `conv_transpose*d` by `op`'s
    /// `transposed`): `self [N, C, *S]` with `weight` (`[O, C/groups, *K]`, transposed
    /// `[C, O/groups, *K]`), plus `bias [O]` when given. `op` must be an
    /// [`Op::Convolution`], which holds the stride, padding, dilation, groups and output
    /// padding.
    #[track_caller]
    pub fn conv(&self, weight: &Tensor, bias: Option<&Tensor>, op: &Op) -> Result<Tensor> {
        if !matches!(op, Op::Convolution { .. }) {
            return Err(crate::error::invalid(
                "conv",
                self.shape(),
                format!("takes a convolution op, got `{op}`"),
            ));
        }
        let y = Tensor::apply(op, &[Operand::Tensor(self), Operand::Tensor(weight)])?;
        let Some(b) = bias else { return Ok(y) };
        let mut shape = vec![b.numel() as i64];
        shape.extend(std::iter::repeat_n(1, self.rank().saturating_sub(2)));
        y.add(&b.reshape(&shape)?)
    }

    /// Matrix product with `torch.matmul`'s rules (1-d operands, broadcast batch dims).
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Tensor::apply(
            &Op::Matmul,
            &[Operand::Tensor(self), Operand::Tensor(other)],
        )
    }
}
