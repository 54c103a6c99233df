//! Eager dispatch: `execute` types an op's operands with `kiln_ir::infer` (so bad input is a
//! typed error, never a panic) and runs the matching kernel; `execute_inplace` does the same
//! for `copy_`, `fill_`, `add_`, `mul_`.

use crate::error::RuntimeError;
use crate::kernels::{conv, create, inplace, layout, matmul, norm, pointwise, reduce};
use crate::tensor::CpuTensor;
use kiln_ir::shape::normalize_dim;
use kiln_ir::{infer, result_type, ArgType, DType, InplaceOp, Op, Scalar};
use smallvec::SmallVec;

/// One operand of an eager op: a tensor or a scalar literal.
#[derive(Clone, Copy, Debug)]
pub enum EagerArg<'a> {
    /// A tensor operand.
    Tensor(&'a CpuTensor),
    /// A scalar literal (takes part in type promotion like a Python number in PyTorch).
    Scalar(Scalar),
}

impl<'a> From<&'a CpuTensor> for EagerArg<'a> {
    fn from(t: &'a CpuTensor) -> Self {
        EagerArg::Tensor(t)
    }
}

impl From<Scalar> for EagerArg<'_> {
    fn from(s: Scalar) -> Self {
        EagerArg::Scalar(s)
    }
}

fn arg_type(a: &EagerArg<'_>) -> ArgType {
    match a {
        EagerArg::Tensor(t) => ArgType::Tensor(t.tensor_type()),
        EagerArg::Scalar(s) => ArgType::Scalar(*s),
    }
}

fn shapes_of(args: &[EagerArg<'_>]) -> Vec<Vec<usize>> {
    args.iter()
        .map(|a| match a {
            EagerArg::Tensor(t) => t.shape().to_vec(),
            EagerArg::Scalar(_) => vec![],
        })
        .collect()
}

fn unsupported(op: &Op, args: &[EagerArg<'_>], reason: &str) -> RuntimeError {
    let shapes = shapes_of(args);
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    RuntimeError::unsupported(op.name(), &refs, reason)
}

/// `index_add(x, idx, src)` along `dim` computed in `x`'s own storage: for a caller that
/// owns `x` (a buffer it made and shares with no other tensor, such as a fresh `full`) and
/// would drop it afterwards, the result of [`execute`] without copying `x` first (a
/// gradient of an embedding: 47 MB of zeros, a few rows added). Checked as [`execute`]
/// checks; `x` not contiguous, or sharing storage with an operand, takes [`execute`]'s
/// copy.
pub fn index_add_owned(
    x: CpuTensor,
    dim: i64,
    idx: &CpuTensor,
    src: &CpuTensor,
) -> Result<CpuTensor, RuntimeError> {
    let op = Op::IndexAdd { dim };
    let args = [
        EagerArg::Tensor(&x),
        EagerArg::Tensor(idx),
        EagerArg::Tensor(src),
    ];
    let types: SmallVec<[ArgType; 3]> = args.iter().map(arg_type).collect();
    let out = infer(&op, &types)?;
    if !x.is_contiguous()
        || x.shares_storage(idx)
        || x.shares_storage(src)
        || out != x.tensor_type()
    {
        return execute(&op, &args);
    }
    let d = normalize_dim(dim, x.rank())
        .ok_or_else(|| unsupported(&op, &args, &format!("dim {dim} is out of range")))?;
    layout::index_add_in_place(&x, d, idx, src)?;
    Ok(x)
}

/// Runs one op eagerly and returns its result. Calls [`kiln_ir::infer`] on the operand types
/// first, so every bad input is a typed error naming the op and shapes. View ops (reshape when
/// the strides allow, permute, transpose, expand, slice) return views sharing storage; every
/// other op returns a fresh contiguous tensor. An in-place op (`Op::Inplace`) runs on a copy
/// of its destination (functional form) and returns the copy.
pub fn execute(op: &Op, args: &[EagerArg<'_>]) -> Result<CpuTensor, RuntimeError> {
    let types: SmallVec<[ArgType; 3]> = args.iter().map(arg_type).collect();
    let out = infer(op, &types)?;
    let shape: SmallVec<[usize; 6]> = out
        .shape
        .as_consts()
        .ok_or_else(|| unsupported(op, args, "eager execution needs constant shapes"))?;
    let fits = crate::tensor::checked_numel(&shape)
        .and_then(|n| n.checked_mul(out.dtype.size_bytes()))
        .is_some_and(|b| b <= isize::MAX as usize);
    if !fits {
        return Err(unsupported(
            op,
            args,
            &format!("the result {} has too many elements", out),
        ));
    }
    let tensor = |i: usize| -> Result<&CpuTensor, RuntimeError> {
        match args.get(i) {
            Some(EagerArg::Tensor(t)) => Ok(*t),
            _ => Err(unsupported(
                op,
                args,
                &format!("operand {i} must be a tensor"),
            )),
        }
    };
    let opt_tensor = |i: usize| -> Result<Option<&CpuTensor>, RuntimeError> {
        if i < args.len() {
            tensor(i).map(Some)
        } else {
            Ok(None)
        }
    };
    let dim = |d: i64, rank: usize| -> Result<usize, RuntimeError> {
        normalize_dim(d, rank)
            .ok_or_else(|| unsupported(op, args, &format!("dim {d} is out of range")))
    };
    Ok(match op {
        Op::Input => return Err(unsupported(op, args, "an input is not an executable op")),
        Op::Full { value, dtype, .. } => create::full(&shape, *value, *dtype),
        Op::Arange {
            start, step, dtype, ..
        } => create::arange(start.get(), step.get(), shape[0], *dtype),
        Op::Rand { dtype, seed, .. } => create::rand(&shape, *dtype, *seed),
        Op::Randn { dtype, seed, .. } => create::randn(&shape, *dtype, *seed),
        Op::FromVec { values, dtype, .. } => create::from_vec(values.values(), &shape, *dtype),
        Op::Unary(u) => pointwise::unary(*u, tensor(0)?, out.dtype)?,
        Op::Binary(b) => pointwise::binary(
            *b,
            &args[0],
            &args[1],
            out.dtype,
            &shape,
            result_type(&types),
        )?,
        Op::Where => pointwise::where_(tensor(0)?, &args[1], &args[2], out.dtype, &shape),
        Op::Clamp => pointwise::clamp(args, out.dtype, &shape),
        Op::Hardtanh { .. }
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Softplus { .. }
        | Op::NanToNum { .. } => pointwise::unary_attrs(op, tensor(0)?, out.dtype),
        Op::Reduce {
            op: r, dims, dtype, ..
        } => {
            let x = tensor(0)?;
            let red = reduce::reduced_dims(dims, x.rank());
            if *dtype == Some(DType::F64) {
                if let Some(y) = reduce::sum_to_f64(*r, x, &red, &shape) {
                    return Ok(y);
                }
            }
            // torch's `dtype=`: the operand converted first
            let x = match dtype {
                Some(d) => &x.to_dtype(*d),
                None => x,
            };
            reduce::reduce(*r, x, &reduce::reduced_dims(dims, x.rank()), &shape)
        }
        Op::Argmax { dim: d, .. } => {
            let x = tensor(0)?;
            let d = if x.rank() == 0 {
                None
            } else {
                Some(dim(*d, x.rank())?)
            };
            reduce::argmax(x, d, &shape)
        }
        Op::Var {
            dims, correction, ..
        } => {
            let x = tensor(0)?;
            reduce::var(
                x,
                &reduce::reduced_dims(dims, x.rank()),
                *correction,
                &shape,
            )
        }
        Op::Softmax { dim: d } | Op::LogSoftmax { dim: d } => {
            let x = tensor(0)?;
            let d = dim(*d, x.rank().max(1))?;
            norm::softmax(x, d, matches!(op, Op::LogSoftmax { .. }))
        }
        Op::LayerNorm { ndim, eps } => norm::norm(
            tensor(0)?,
            *ndim,
            eps.get(),
            opt_tensor(1)?,
            opt_tensor(2)?,
            false,
        ),
        Op::RmsNorm { ndim, eps } => {
            norm::norm(tensor(0)?, *ndim, eps.get(), opt_tensor(1)?, None, true)
        }
        Op::Linear => matmul::linear(tensor(0)?, tensor(1)?, opt_tensor(2)?, &shape),
        Op::Matmul => matmul::matmul(tensor(0)?, tensor(1)?, &shape)?,
        Op::Reshape { .. } => layout::reshape(tensor(0)?, &shape),
        Op::Permute { dims } => layout::permute(tensor(0)?, dims),
        Op::Transpose { dim0, dim1 } => {
            let x = tensor(0)?;
            layout::transpose(x, dim(*dim0, x.rank())?, dim(*dim1, x.rank())?)
        }
        Op::Expand { .. } => layout::expand(tensor(0)?, &shape),
        Op::Slice {
            dim: d,
            start,
            end,
            step,
        } => {
            let x = tensor(0)?;
            layout::slice(x, dim(*d, x.rank())?, *start, *end, *step)
        }
        Op::Cat { dim: d } => {
            let parts = (0..args.len()).map(tensor).collect::<Result<Vec<_>, _>>()?;
            layout::cat(&parts, dim(*d, parts[0].rank())?, &shape, out.dtype)
        }
        Op::IndexSelect { dim: d } => {
            let x = tensor(0)?;
            layout::index_select(x, dim(*d, x.rank())?, tensor(1)?, &shape)?
        }
        Op::IndexAdd { dim: d } => {
            let x = tensor(0)?;
            layout::index_add(x, dim(*d, x.rank())?, tensor(1)?, tensor(2)?)?
        }
        Op::Embedding { .. } => layout::index_select(tensor(0)?, 0, tensor(1)?, &shape)?,
        Op::Convolution { .. } => {
            let g = kiln_ir::conv::ConvGeometry::of(op).expect("a convolution");
            conv::convolution(tensor(0)?, tensor(1)?, &g, &shape)?
        }
        Op::Cast { dtype } => pointwise::cast(tensor(0)?, *dtype),
        Op::Contiguous => layout::contiguous(tensor(0)?),
        Op::Triu { diagonal } => layout::tri(tensor(0)?, *diagonal, true),
        Op::Tril { diagonal } => layout::tri(tensor(0)?, *diagonal, false),
        Op::Inplace(i) => {
            let copy = layout::contiguous(tensor(0)?);
            inplace::run(*i, &copy, &args[1], &types)?;
            copy
        }
    })
}

/// Runs an in-place op (`copy_`, `fill_`, `add_`, `mul_`) on `dst`'s storage through its
/// strides, and bumps the storage's version counter. Checked by
/// `infer(Op::Inplace(op), ...)` first. A source sharing storage with `dst` is read from a
/// copy; a destination whose elements overlap (expanded, stride 0) is an error, as in torch.
///
/// The write waits for every read guard on `dst`'s storage: do not call it while holding a
/// guard from [`crate::Storage::read`] on the same storage.
pub fn execute_inplace(
    op: InplaceOp,
    dst: &CpuTensor,
    arg: EagerArg<'_>,
) -> Result<(), RuntimeError> {
    let types = [ArgType::Tensor(dst.tensor_type()), arg_type(&arg)];
    infer(&Op::Inplace(op), &types)?;
    inplace::run(op, dst, &arg, &types)
}
