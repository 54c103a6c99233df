//! Layout methods (views where possible): reshape, permute, transpose, expand, narrow,
//! slice, unsqueeze, squeeze, flatten, and the copying ones: cat, index_select,
//! contiguous, triu, tril.

use crate::error::{invalid, Result};
use crate::{Operand, Tensor};
use kiln_ir::shape::normalize_dim;
use kiln_ir::{Op, Shape};

impl Tensor {
    fn dim_index(&self, op: &'static str, dim: i64, rank: usize) -> Result<usize> {
        normalize_dim(dim, rank).ok_or_else(|| {
            invalid(
                op,
                self.shape(),
                format!("dim {dim} is out of range for rank {rank}"),
            )
        })
    }

    /// Same elements in a new shape; one size may be `-1` (inferred). A view when the
    /// layout allows, else a copy.
    #[track_caller]
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let numel = self.numel();
        let mut infer_at = None;
        let mut known = 1usize;
        for (i, &d) in shape.iter().enumerate() {
            match d {
                -1 if infer_at.is_none() => infer_at = Some(i),
                -1 => return Err(invalid("reshape", self.shape(), "only one size may be -1")),
                d if d < 0 => {
                    return Err(invalid(
                        "reshape",
                        self.shape(),
                        format!("invalid size {d} in {shape:?}"),
                    ))
                }
                d => known = known.saturating_mul(d as usize),
            }
        }
        let mut dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        if let Some(i) = infer_at {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(invalid(
                    "reshape",
                    self.shape(),
                    format!("cannot infer -1 in {shape:?} for {numel} elements"),
                ));
            }
            dims[i] = numel / known;
        }
        self.apply1(Op::Reshape {
            shape: Shape::of(&dims),
        })
    }

    /// Reorders dims (negative indices count from the end); a view.
    #[track_caller]
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        let r = self.rank();
        let dims = dims
            .iter()
            .map(|&d| self.dim_index("permute", d, r))
            .collect::<Result<Vec<_>>>()?;
        self.apply1(Op::Permute { dims })
    }

    /// Swaps two dims; a view.
    #[track_caller]
    pub fn transpose(&self, dim0: i64, dim1: i64) -> Result<Tensor> {
        self.apply1(Op::Transpose { dim0, dim1 })
    }

    /// Transpose of a 2-d tensor (a 0-d or 1-d tensor is returned as is, as in PyTorch).
    #[track_caller]
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(invalid(
                "t",
                self.shape(),
                format!("expects a tensor of rank ≤ 2, got rank {r}"),
            )),
        }
    }

    /// Broadcasts size-1 dims to `shape` (`-1` keeps a size); a view with stride 0.
    #[track_caller]
    pub fn expand(&self, shape: &[i64]) -> Result<Tensor> {
        let offset = shape.len().checked_sub(self.rank()).ok_or_else(|| {
            invalid(
                "expand",
                self.shape(),
                format!("target {shape:?} has fewer dims than the tensor"),
            )
        })?;
        let mut dims = Vec::with_capacity(shape.len());
        for (i, &d) in shape.iter().enumerate() {
            dims.push(match d {
                -1 if i >= offset => self.shape()[i - offset],
                d if d < 0 => {
                    return Err(invalid(
                        "expand",
                        self.shape(),
                        format!("invalid size {d} in {shape:?}"),
                    ))
                }
                d => d as usize,
            });
        }
        self.apply1(Op::Expand {
            shape: Shape::of(&dims),
        })
    }

    /// `length` elements of `dim` starting at `start`; a view.
    #[track_caller]
    pub fn narrow(&self, dim: i64, start: usize, length: usize) -> Result<Tensor> {
        let d = self.dim_index("narrow", dim, self.rank())?;
        let end = start
            .checked_add(length)
            .filter(|&e| e <= self.shape()[d])
            .ok_or_else(|| {
                invalid(
                    "narrow",
                    self.shape(),
                    format!("start {start} + length {length} exceeds dim {d}"),
                )
            })?;
        self.apply1(Op::Slice {
            dim,
            start,
            end,
            step: 1,
        })
    }

    /// `x[start:end:step]` along `dim` with Python's rules: negative indices count from the
    /// end and out-of-range bounds are clamped. `step` must be ≥ 1. A view.
    #[track_caller]
    pub fn slice(&self, dim: i64, start: i64, end: i64, step: usize) -> Result<Tensor> {
        let d = self.dim_index("slice", dim, self.rank())?;
        let n = self.shape()[d] as i64;
        let clamp = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) } as usize;
        let (s, e) = (clamp(start), clamp(end));
        self.apply1(Op::Slice {
            dim,
            start: s,
            end: e.max(s),
            step,
        })
    }

    /// Inserts a dim of size 1 at `dim`; a view.
    #[track_caller]
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        let d = self.dim_index("unsqueeze", dim, self.rank() + 1)?;
        let mut shape: Vec<i64> = self.shape().iter().map(|&s| s as i64).collect();
        shape.insert(d, 1);
        self.reshape(&shape)
    }

    /// Removes `dim` if it has size 1 (otherwise returns the tensor unchanged, as PyTorch).
    #[track_caller]
    pub fn squeeze(&self, dim: i64) -> Result<Tensor> {
        let d = self.dim_index("squeeze", dim, self.rank())?;
        if self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        let shape: Vec<i64> = self
            .shape()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != d)
            .map(|(_, &s)| s as i64)
            .collect();
        self.reshape(&shape)
    }

    /// A 1-d view (or copy) of all elements.
    #[track_caller]
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape(&[-1])
    }

    /// Concatenates tensors along `dim` (dtypes are promoted).
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let args: Vec<Operand<'_>> = tensors.iter().map(|t| Operand::Tensor(t)).collect();
        Tensor::apply(&Op::Cat { dim }, &args)
    }

    /// Rows (along `dim`) picked by an integer `indices` tensor; dim `dim` of the result is
    /// replaced by the indices' dims (1-d: `torch.index_select`; `[B, S]` ids into a
    /// `[vocab, D]` table along dim 0: the embedding lookup, `[B, S, D]`).
    #[track_caller]
    pub fn index_select(&self, dim: i64, indices: &Tensor) -> Result<Tensor> {
        Tensor::apply(
            &Op::IndexSelect { dim },
            &[Operand::Tensor(self), Operand::Tensor(indices)],
        )
    }

    /// `self` with each slice of `source` along `dim` added at its index
    /// (`torch.index_add`; repeated indices accumulate). `source` has `self`'s shape with dim
    /// `dim` replaced by the indices' dims, as [`Tensor::index_select`]'s result; an index out
    /// of range is an error.
    #[track_caller]
    pub fn index_add(&self, dim: i64, indices: &Tensor, source: &Tensor) -> Result<Tensor> {
        Tensor::apply(
            &Op::IndexAdd { dim },
            &[
                Operand::Tensor(self),
                Operand::Tensor(indices),
                Operand::Tensor(source),
            ],
        )
    }

    /// The rows of this `[num, dim]` table at `indices` (any shape; the result is
    /// `indices.shape + [dim]`): `torch.nn.functional.embedding(indices, self, padding_idx)`.
    /// Row `padding_idx` (negative: counted from the end) gets no gradient.
    #[track_caller]
    pub fn embedding(&self, indices: &Tensor, padding_idx: Option<i64>) -> Result<Tensor> {
        Tensor::apply(
            &Op::Embedding { padding_idx },
            &[Operand::Tensor(self), Operand::Tensor(indices)],
        )
        .map_err(|e| e.within("embedding"))
    }

    /// A row-major copy (or the tensor itself when already contiguous, as PyTorch).
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.apply1(Op::Contiguous)
    }

    /// Upper triangle of the last two dims from `diagonal` up; the rest is zero.
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        self.apply1(Op::Triu { diagonal })
    }

    /// Lower triangle of the last two dims from `diagonal` down; the rest is zero.
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        self.apply1(Op::Tril { diagonal })
    }
}
