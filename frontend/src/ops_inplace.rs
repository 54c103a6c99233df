//! In-place methods. Each writes through the tensor's strides into its storage (so every
//! view of it sees the change) and bumps the storage's version counter; under autograd the
//! update is recorded and rebases the tensor's history (`autograd/inplace.rs`).

use crate::error::Result;
use crate::{Operand, Tensor};
use kiln_ir::InplaceOp;
use kiln_runtime::{execute_inplace, EagerArg};

impl Tensor {
    /// Inside a traced function an in-place op is a functional update of the graph, written
    /// back into this tensor's storage when the graph has run; where that cannot be done (a
    /// view, or a tensor another view aliases) it is a graph break: the graph so far runs and
    /// the mutation is applied to real data, as eager code would.
    #[track_caller]
    fn inplace(&self, op: InplaceOp, arg: Operand<'_>) -> Result<()> {
        self.inplace_unnamed(op, arg)
            .map_err(|e| e.within(op.name()))
    }

    /// [`Tensor::inplace`], its errors not yet named after the op.
    #[track_caller]
    fn inplace_unnamed(&self, op: InplaceOp, arg: Operand<'_>) -> Result<()> {
        let on_cuda = self.is_cuda() || matches!(arg, Operand::Tensor(t) if t.is_cuda());
        if on_cuda {
            return Err(crate::error::invalid(
                op.name(),
                self.shape(),
                "in-place ops on CUDA tensors are not supported yet (use the out-of-place op)",
            ));
        }
        if let Some(tracer) = crate::compile::lazy::current() {
            if crate::autograd::is_grad_enabled() && self.requires_grad() && self.is_leaf() {
                return Err(crate::error::Error::Autograd(
                    "a leaf Variable that requires grad is being used in an in-place operation."
                        .into(),
                ));
            }
            // a functional update of the graph, written back when it has run; what cannot
            // be made functional breaks the graph and runs eagerly below
            if tracer.record_inplace(op, self, arg, std::panic::Location::caller())? {
                return Ok(());
            }
        }
        crate::autograd::record_inplace(op, self, arg, || {
            let dst = self.read(op.name())?;
            let arg = match arg {
                Operand::Tensor(t) => EagerArg::Tensor(t.real()?),
                Operand::Scalar(s) => EagerArg::Scalar(s),
            };
            Ok(execute_inplace(op, dst, arg)?)
        })
    }

    /// Copies `src` (broadcast to this shape, cast to this dtype) into this tensor.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        self.inplace(InplaceOp::Copy, Operand::Tensor(src))
    }

    /// Sets every element to `value` (a scalar or a 0-d tensor).
    #[track_caller]
    pub fn fill_<'a>(&self, value: impl Into<Operand<'a>>) -> Result<()> {
        self.inplace(InplaceOp::Fill, value.into())
    }

    /// `self += other` (broadcast to this shape; the result must fit this dtype).
    #[track_caller]
    pub fn add_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.inplace(InplaceOp::Add, other.into())
    }

    /// `self *= other` (broadcast to this shape; the result must fit this dtype).
    #[track_caller]
    pub fn mul_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<()> {
        self.inplace(InplaceOp::Mul, other.into())
    }
}
