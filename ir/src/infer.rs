//! Type inference: the dtype and shape of every op's result, with PyTorch's rules
//! (broadcasting, type promotion, dim normalisation). The verifier, the eager runtime and
//! the tracer all call [`infer`], so an op means the same thing everywhere.

use crate::shape::{broadcast, broadcasts_to, normalize_dim};
use crate::{ArgType, BinaryOp, DType, Dim, InplaceOp, Op, ReduceOp, Scalar, Shape, TensorType};
use smallvec::SmallVec;
use std::fmt;

/// An op applied to operands it does not accept. Names the op, the operand types and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct TypeError {
    /// the op's name
    pub op: &'static str,
    /// the operand types, as text (`f32[2,3]`, `scalar 1.5`)
    pub operands: Vec<String>,
    /// what is wrong
    pub reason: String,
}

impl fmt::Display for TypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.reason)?;
        if !self.operands.is_empty() {
            write!(f, " (operands: {})", self.operands.join(", "))?;
        }
        Ok(())
    }
}

struct Ctx<'a> {
    op: &'a Op,
    args: &'a [ArgType],
}

impl Ctx<'_> {
    fn err(&self, reason: impl Into<String>) -> TypeError {
        TypeError {
            op: self.op.name(),
            operands: self.args.iter().map(|a| a.to_string()).collect(),
            reason: reason.into(),
        }
    }

    fn arity(&self, min: usize, max: usize) -> Result<(), TypeError> {
        let n = self.args.len();
        if n < min || n > max {
            let want = if min == max {
                format!("{min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.err(format!("expects {want} operands, got {n}")));
        }
        Ok(())
    }

    fn tensor(&self, i: usize) -> Result<&TensorType, TypeError> {
        self.args[i]
            .tensor()
            .ok_or_else(|| self.err(format!("operand {i} must be a tensor, not a scalar")))
    }

    fn dim(&self, dim: i64, rank: usize) -> Result<usize, TypeError> {
        normalize_dim(dim, rank).ok_or_else(|| {
            self.err(format!(
                "dim {dim} is out of range for a tensor of rank {rank}"
            ))
        })
    }

    fn float_input(&self, t: &TensorType) -> Result<(), TypeError> {
        if t.dtype.is_float() {
            Ok(())
        } else {
            Err(self.err(format!("needs a floating-point tensor, got {}", t.dtype)))
        }
    }
}

/// The result dtype of combining operands as PyTorch's `result_type` does: tensors with
/// dims decide first, then 0-d tensors, then scalars, each only raising the category.
pub fn result_type(args: &[ArgType]) -> DType {
    let fold = |filter: &dyn Fn(&ArgType) -> Option<DType>| -> Option<DType> {
        args.iter().filter_map(filter).reduce(DType::promote)
    };
    let dimmed = fold(&|a| a.tensor().filter(|t| t.shape.rank() > 0).map(|t| t.dtype));
    let zero_d = fold(&|a| a.tensor().filter(|t| t.shape.rank() == 0).map(|t| t.dtype));
    let scalar = fold(&|a| match a {
        ArgType::Scalar(s) => Some(s.natural_dtype()),
        _ => None,
    });
    let mut out = dimmed;
    if let Some(z) = zero_d {
        // A 0-d tensor of a higher category decides, at its own width.
        out = match out {
            Some(cur) if z.category() <= cur.category() => Some(cur),
            _ => Some(z),
        };
    }
    if let Some(s) = scalar {
        // A scalar of a higher category gives that category's default dtype (f32, i64).
        out = match out {
            Some(cur) if s.category() <= cur.category() => Some(cur),
            _ => Some(s),
        };
    }
    out.unwrap_or(DType::DEFAULT_FLOAT)
}

/// The broadcast shape of all tensor operands.
fn broadcast_all(c: &Ctx<'_>) -> Result<Shape, TypeError> {
    let mut shape = Shape::scalar();
    for a in c.args {
        if let Some(t) = a.tensor() {
            shape = broadcast(&shape, &t.shape).ok_or_else(|| {
                c.err(format!("shapes {} and {} do not broadcast", shape, t.shape))
            })?;
        }
    }
    Ok(shape)
}

/// The reduced dims (sorted, unique), for `dims` (empty means all).
fn reduced_dims(c: &Ctx<'_>, dims: &[i64], rank: usize) -> Result<Vec<usize>, TypeError> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = c.dim(d, rank.max(1))?;
        if out.contains(&d) {
            return Err(c.err(format!("dim {d} appears twice in dims")));
        }
        out.push(d);
    }
    out.sort_unstable();
    Ok(out)
}

fn reduce_shape(shape: &Shape, dims: &[usize], keepdim: bool) -> Shape {
    shape
        .dims()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            if !dims.contains(&i) {
                Some(d.clone())
            } else if keepdim {
                Some(Dim::Const(1))
            } else {
                None
            }
        })
        .collect()
}

/// The dtype and shape of `op` applied to `args`, or why it cannot be applied.
pub fn infer(op: &Op, args: &[ArgType]) -> Result<TensorType, TypeError> {
    let c = Ctx { op, args };
    let tt = TensorType::new;
    match op {
        Op::Input => Err(c.err("an input has no operands to infer from")),
        Op::Full {
            shape,
            dtype,
            value,
        } => {
            c.arity(0, 0)?;
            literal_fits(&c, *value, *dtype)?;
            Ok(tt(*dtype, shape.clone()))
        }
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => {
            c.arity(0, 0)?;
            let n = arange_len(start.get(), end.get(), step.get()).ok_or_else(|| {
                c.err(format!(
                    "arange({start}, {end}, {step}) has no finite, non-negative length"
                ))
            })?;
            Ok(tt(*dtype, Shape::of(&[n])))
        }
        Op::Rand { shape, dtype, .. } | Op::Randn { shape, dtype, .. } => {
            c.arity(0, 0)?;
            if !dtype.is_float() {
                return Err(c.err(format!(
                    "random samples need a floating-point dtype, got {dtype}"
                )));
            }
            Ok(tt(*dtype, shape.clone()))
        }
        Op::FromVec {
            values,
            shape,
            dtype,
        } => {
            c.arity(0, 0)?;
            // as `torch.tensor` refuses them
            if let Some(&v) = values.values().iter().find(|&&v| !dtype.holds_element(v)) {
                return Err(c.err(format!(
                    "value {} cannot be converted to type {dtype} without overflow",
                    crate::format_float(v)
                )));
            }
            match shape.numel() {
                Some(n) if n == values.len() => Ok(tt(*dtype, shape.clone())),
                Some(n) => Err(c.err(format!(
                    "{} values do not fill shape {shape} ({n} elements)",
                    values.len()
                ))),
                None => Err(c.err(format!("shape {shape} of a literal must be constant"))),
            }
        }
        Op::Unary(u) => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let dtype = u.info().dtype.result(t.dtype).map_err(|r| c.err(r))?;
            Ok(tt(dtype, t.shape.clone()))
        }
        Op::Binary(b) => {
            c.arity(2, 2)?;
            if args.iter().all(|a| a.tensor().is_none()) {
                return Err(c.err("needs at least one tensor operand"));
            }
            let shape = broadcast_all(&c)?;
            let common = result_type(args);
            let rule = b.info().dtype;
            let dtype = match rule.result(common) {
                Ok(d) => d,
                Err(_) if common == DType::Bool => {
                    return Err(c.err("arithmetic on bool operands is not supported; cast first"))
                }
                Err(r) => return Err(c.err(r)),
            };
            if *b == BinaryOp::Pow && dtype.is_int() {
                if let ArgType::Scalar(Scalar::Int(e)) = args[1] {
                    if e < 0 {
                        return Err(c.err("Integers to negative integer powers are not allowed."));
                    }
                }
            }
            Ok(tt(dtype, shape))
        }
        Op::Clamp => {
            c.arity(3, 3)?;
            c.tensor(0)?;
            let shape = broadcast_all(&c)?;
            let dtype = op
                .info()
                .dtype
                .result(result_type(args))
                .map_err(|r| c.err(r))?;
            Ok(tt(dtype, shape))
        }
        Op::Hardtanh { .. }
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Softplus { .. }
        | Op::NanToNum { .. } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let dtype = op.info().dtype.result(t.dtype).map_err(|r| c.err(r))?;
            Ok(tt(dtype, t.shape.clone()))
        }
        Op::Where => {
            c.arity(3, 3)?;
            if c.tensor(0)?.dtype != DType::Bool {
                return Err(c.err("the condition must be a bool tensor"));
            }
            let shape = broadcast_all(&c)?;
            Ok(tt(result_type(&args[1..]), shape))
        }
        Op::Reduce {
            op: r,
            dims,
            keepdim,
            dtype: cast_to,
        } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let dims = reduced_dims(&c, dims, t.shape.rank())?;
            // torch's `dtype=`: the operand is converted to it first
            let t = &match cast_to {
                None => t.clone(),
                Some(_) if matches!(r, ReduceOp::Max | ReduceOp::Min) => {
                    return Err(c.err("takes no dtype (only sum and mean do)"))
                }
                Some(d) => TensorType::new(*d, t.shape.clone()),
            };
            let dtype = match r {
                ReduceOp::Sum if !t.dtype.is_float() && cast_to.is_none() => DType::I64,
                ReduceOp::Mean => {
                    c.float_input(t)?;
                    t.dtype
                }
                _ => t.dtype,
            };
            if matches!(r, ReduceOp::Max | ReduceOp::Min) {
                nonempty_reduction(&c, t, &dims)?;
            }
            Ok(tt(dtype, reduce_shape(&t.shape, &dims, *keepdim)))
        }
        Op::Argmax { dim, keepdim } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            if t.dtype == DType::Bool {
                return Err(c.err("is not defined for bool tensors"));
            }
            let d = c.dim(*dim, t.shape.rank().max(1))?;
            let dims = if t.shape.rank() == 0 { vec![] } else { vec![d] };
            nonempty_reduction(&c, t, &dims)?;
            Ok(tt(DType::I64, reduce_shape(&t.shape, &dims, *keepdim)))
        }
        Op::Var {
            dims,
            keepdim,
            correction,
        } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            c.float_input(t)?;
            if *correction < 0 {
                return Err(c.err(format!("correction must be non-negative, got {correction}")));
            }
            let dims = reduced_dims(&c, dims, t.shape.rank())?;
            Ok(tt(t.dtype, reduce_shape(&t.shape, &dims, *keepdim)))
        }
        Op::Softmax { dim } | Op::LogSoftmax { dim } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            c.float_input(t)?;
            c.dim(*dim, t.shape.rank().max(1))?;
            Ok(t.clone())
        }
        Op::LayerNorm { ndim, .. } | Op::RmsNorm { ndim, .. } => {
            let max = if matches!(op, Op::LayerNorm { .. }) {
                3
            } else {
                2
            };
            c.arity(1, max)?;
            let x = c.tensor(0)?;
            c.float_input(x)?;
            let r = x.shape.rank();
            if *ndim == 0 || *ndim > r {
                return Err(c.err(format!(
                    "cannot normalise the last {ndim} dims of a rank-{r} tensor"
                )));
            }
            let normalized: Shape = x.shape.dims()[r - ndim..].iter().cloned().collect();
            for i in 1..args.len() {
                let p = c.tensor(i)?;
                if p.shape != normalized || p.dtype != x.dtype {
                    return Err(c.err(format!(
                        "{} must have type {}{normalized}, got {p}",
                        if i == 1 { "weight" } else { "bias" },
                        x.dtype
                    )));
                }
            }
            Ok(x.clone())
        }
        Op::Linear => {
            c.arity(2, 3)?;
            let (x, w) = (c.tensor(0)?, c.tensor(1)?);
            c.float_input(x)?;
            if w.dtype != x.dtype || x.shape.rank() == 0 || w.shape.rank() != 2 {
                return Err(c.err("needs x: [..., in] and weight: [out, in] of the same dtype"));
            }
            let inner = &x.shape.dims()[x.shape.rank() - 1];
            if *inner != w.shape.dims()[1] {
                return Err(c.err(format!(
                    "x has {inner} input features but weight has {}",
                    w.shape.dims()[1]
                )));
            }
            let out_f = w.shape.dims()[0].clone();
            if args.len() == 3 {
                let b = c.tensor(2)?;
                if b.dtype != x.dtype || b.shape != Shape([out_f.clone()].into_iter().collect()) {
                    return Err(c.err(format!("bias must have type {}[{out_f}], got {b}", x.dtype)));
                }
            }
            let mut shape = x.shape.clone();
            *shape.0.last_mut().expect("rank checked") = out_f;
            Ok(tt(x.dtype, shape))
        }
        Op::Matmul => {
            c.arity(2, 2)?;
            let (a, b) = (c.tensor(0)?, c.tensor(1)?);
            if a.dtype != b.dtype {
                return Err(c.err(format!(
                    "operands must have the same dtype, got {} and {}",
                    a.dtype, b.dtype
                )));
            }
            if a.dtype == DType::Bool {
                return Err(c.err("is not defined for bool tensors"));
            }
            matmul_shape(&a.shape, &b.shape)
                .map(|s| tt(a.dtype, s))
                .map_err(|r| c.err(r))
        }
        Op::Reshape { shape } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            if !t.shape.same_numel(shape) {
                return Err(c.err(format!(
                    "cannot reshape {} into {shape}: element counts differ",
                    t.shape
                )));
            }
            Ok(tt(t.dtype, shape.clone()))
        }
        Op::Permute { dims } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let r = t.shape.rank();
            let mut seen = vec![false; r];
            if dims.len() != r
                || dims
                    .iter()
                    .any(|&d| d >= r || std::mem::replace(&mut seen[d], true))
            {
                return Err(c.err(format!("{dims:?} is not a permutation of the {r} dims")));
            }
            Ok(tt(
                t.dtype,
                dims.iter().map(|&d| t.shape.dims()[d].clone()).collect(),
            ))
        }
        Op::Transpose { dim0, dim1 } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let r = t.shape.rank();
            let (a, b) = (c.dim(*dim0, r)?, c.dim(*dim1, r)?);
            let mut shape = t.shape.clone();
            shape.0.swap(a, b);
            Ok(tt(t.dtype, shape))
        }
        Op::Expand { shape } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            if !broadcasts_to(&t.shape, shape) {
                return Err(c.err(format!("cannot expand {} to {shape}", t.shape)));
            }
            Ok(tt(t.dtype, shape.clone()))
        }
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            let d = c.dim(*dim, t.shape.rank())?;
            if *step == 0 {
                return Err(c.err("slice step must be at least 1"));
            }
            if start > end {
                return Err(c.err(format!("slice start {start} is after end {end}")));
            }
            if let Dim::Const(n) = t.shape.dims()[d] {
                if *end > n {
                    return Err(c.err(format!("slice end {end} is past the size {n} of dim {d}")));
                }
            }
            let mut shape = t.shape.clone();
            shape.0[d] = Dim::Const((end - start).div_ceil(*step));
            Ok(tt(t.dtype, shape))
        }
        Op::Cat { dim } => {
            if args.is_empty() {
                return Err(c.err("needs at least one tensor"));
            }
            let first = c.tensor(0)?;
            let r = first.shape.rank();
            let d = c.dim(*dim, r)?;
            let mut total = 0usize;
            let mut dtype = first.dtype;
            for i in 0..args.len() {
                let t = c.tensor(i)?;
                dtype = dtype.promote(t.dtype);
                if t.shape.rank() != r {
                    return Err(c.err("all tensors must have the same rank"));
                }
                for (j, (x, y)) in t.shape.dims().iter().zip(first.shape.dims()).enumerate() {
                    if j != d && x != y {
                        return Err(c.err(format!("sizes of dim {j} differ: {x} and {y}")));
                    }
                }
                total += t.shape.dims()[d].as_const().ok_or_else(|| {
                    c.err(format!(
                        "cannot concatenate along symbolic dim {}",
                        t.shape.dims()[d]
                    ))
                })?;
            }
            let mut shape = first.shape.clone();
            shape.0[d] = Dim::Const(total);
            Ok(tt(dtype, shape))
        }
        Op::IndexSelect { dim } => {
            c.arity(2, 2)?;
            let (x, idx) = (c.tensor(0)?, c.tensor(1)?);
            let d = c.dim(*dim, x.shape.rank())?;
            Ok(tt(x.dtype, gathered(&c, x, d, idx)?))
        }
        Op::IndexAdd { dim } => {
            c.arity(3, 3)?;
            let (x, idx, src) = (c.tensor(0)?, c.tensor(1)?, c.tensor(2)?);
            let d = c.dim(*dim, x.shape.rank())?;
            let want = gathered(&c, x, d, idx)?;
            if src.dtype != x.dtype {
                return Err(c.err(format!(
                    "the source must have the dtype of the tensor added to ({}), got {}",
                    x.dtype, src.dtype
                )));
            }
            if src.shape != want {
                return Err(c.err(format!(
                    "the source must have shape {want} (dim {d} replaced by the indices' dims), got {}",
                    src.shape
                )));
            }
            Ok(x.clone())
        }
        Op::Embedding { padding_idx } => {
            c.arity(2, 2)?;
            let (w, idx) = (c.tensor(0)?, c.tensor(1)?);
            if w.shape.rank() != 2 {
                return Err(c.err(format!(
                    "the weight must be 2-d [num_embeddings, embedding_dim], got {w}"
                )));
            }
            if let (Some(p), Dim::Const(rows)) = (padding_idx, &w.shape.dims()[0]) {
                let rows = *rows as i64;
                if !(-rows..rows).contains(p) {
                    return Err(c.err(format!(
                        "padding_idx {p} must be within the {rows} rows of the weight"
                    )));
                }
            }
            Ok(tt(w.dtype, gathered(&c, w, 0, idx)?))
        }
        Op::Convolution { .. } => {
            c.arity(2, 2)?;
            let geometry = crate::conv::ConvGeometry::of(op).expect("a convolution");
            convolution(&c, &geometry, c.tensor(0)?, c.tensor(1)?)
        }
        Op::Cast { dtype } => {
            c.arity(1, 1)?;
            Ok(tt(*dtype, c.tensor(0)?.shape.clone()))
        }
        Op::Contiguous => {
            c.arity(1, 1)?;
            Ok(c.tensor(0)?.clone())
        }
        Op::Triu { .. } | Op::Tril { .. } => {
            c.arity(1, 1)?;
            let t = c.tensor(0)?;
            if t.shape.rank() < 2 {
                return Err(c.err(format!(
                    "needs a tensor of rank at least 2, got rank {}",
                    t.shape.rank()
                )));
            }
            Ok(t.clone())
        }
        Op::Inplace(i) => infer_inplace(&c, *i),
    }
}

fn nonempty_reduction(c: &Ctx<'_>, t: &TensorType, dims: &[usize]) -> Result<(), TypeError> {
    for &d in dims {
        if t.shape.dims().get(d) == Some(&Dim::Const(0)) {
            return Err(c.err(format!(
                "cannot reduce over dim {d} of size 0: the result has no identity"
            )));
        }
    }
    Ok(())
}

/// Refuses a fill value the dtype cannot hold ([`DType::holds_literal`]), with PyTorch's
/// message.
fn literal_fits(c: &Ctx<'_>, v: Scalar, dtype: DType) -> Result<(), TypeError> {
    if dtype.holds_literal(v) {
        Ok(())
    } else {
        Err(c.err(format!(
            "value {v} cannot be converted to type {dtype} without overflow"
        )))
    }
}

fn infer_inplace(c: &Ctx<'_>, op: InplaceOp) -> Result<TensorType, TypeError> {
    c.arity(2, 2)?;
    let dst = c.tensor(0)?.clone();
    match op {
        InplaceOp::Copy => {
            let src = c.tensor(1)?;
            if !broadcasts_to(&src.shape, &dst.shape) {
                return Err(c.err(format!(
                    "source of shape {} does not broadcast to {}",
                    src.shape, dst.shape
                )));
            }
        }
        InplaceOp::Fill => {
            if let ArgType::Scalar(v) = &c.args[1] {
                literal_fits(c, *v, dst.dtype)?;
            }
            if let ArgType::Tensor(v) = &c.args[1] {
                if v.shape.rank() != 0 {
                    return Err(c.err(format!(
                        "fill value must be a scalar or a 0-d tensor, got {v}"
                    )));
                }
            }
        }
        InplaceOp::Add | InplaceOp::Mul => {
            if let ArgType::Tensor(o) = &c.args[1] {
                if !broadcasts_to(&o.shape, &dst.shape) {
                    return Err(c.err(format!(
                        "operand of shape {} does not broadcast to {}",
                        o.shape, dst.shape
                    )));
                }
            }
            let common = result_type(c.args);
            if common.category() > dst.dtype.category() || (common == DType::Bool) {
                return Err(c.err(format!(
                    "result type {common} can't be cast to the destination dtype {}",
                    dst.dtype
                )));
            }
        }
    }
    Ok(dst)
}

/// The number of elements of `arange(start, end, step)`, if finite.
pub fn arange_len(start: f64, end: f64, step: f64) -> Option<usize> {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return None;
    }
    let n = ((end - start) / step).ceil();
    if n < 0.0 {
        None
    } else {
        Some(n as usize)
    }
}

/// The shape of `torch.matmul(a, b)`, or why they do not multiply.
pub fn matmul_shape(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra == 0 || rb == 0 {
        return Err("both operands must have at least one dim".into());
    }
    let k_a = &a.dims()[ra - 1];
    let k_b = if rb == 1 {
        &b.dims()[0]
    } else {
        &b.dims()[rb - 2]
    };
    if k_a != k_b {
        return Err(format!("inner dims differ: {a} @ {b} ({k_a} vs {k_b})"));
    }
    let batch_a: Shape = if ra > 2 {
        a.dims()[..ra - 2].iter().cloned().collect()
    } else {
        Shape::scalar()
    };
    let batch_b: Shape = if rb > 2 {
        b.dims()[..rb - 2].iter().cloned().collect()
    } else {
        Shape::scalar()
    };
    let batch = broadcast(&batch_a, &batch_b)
        .ok_or_else(|| format!("batch dims {batch_a} and {batch_b} do not broadcast"))?;
    let mut out: SmallVec<[Dim; 6]> = batch.0;
    if ra >= 2 {
        out.push(a.dims()[ra - 2].clone());
    }
    if rb >= 2 {
        out.push(b.dims()[rb - 1].clone());
    }
    Ok(Shape(out))
}

/// The operand types of scalars and tensors, for error messages and inference.
pub fn scalar_arg(s: Scalar) -> ArgType {
    ArgType::Scalar(s)
}

/// The shape of `x` gathered along `d` at `idx` (an integer tensor of rank >= 1): dim `d`
/// replaced by the indices' dims (1-d: torch's `index_select`; n-d: the embedding lookup
/// `x[idx]` along `d`).
/// The type of a convolution of `x [N, C, *S]` with `w` (see [`crate::conv`]): floating
/// operands of one dtype, constant channel and spatial sizes (the batch may be symbolic).
fn convolution(
    c: &Ctx<'_>,
    g: &crate::conv::ConvGeometry<'_>,
    x: &TensorType,
    w: &TensorType,
) -> Result<TensorType, TypeError> {
    if !x.dtype.is_float() || x.dtype != w.dtype {
        return Err(c.err(format!(
            "the input and weight must share one floating dtype, got {} and {}",
            x.dtype, w.dtype
        )));
    }
    let rank = x.shape.rank();
    if rank < 3 || w.shape.rank() != rank {
        return Err(c.err(format!(
            "the input must be [N, C, *spatial] (rank ≥ 3) and the weight of the same rank, \
             got {x} and {w}"
        )));
    }
    g.check(rank - 2).map_err(|e| c.err(e))?;
    let constant = |t: &TensorType, i: usize| {
        t.shape.dims()[i]
            .as_const()
            .ok_or_else(|| c.err(format!("dim {i} of {t} must be constant")))
    };
    let (channels, w0, w1) = (constant(x, 1)?, constant(w, 0)?, constant(w, 1)?);
    let groups = g.groups;
    // forward: w [O, C/G, *K]; transposed: w [C, O/G, *K]
    let (per_group_in, out_channels) = if g.transposed {
        (w0 / groups, w1 * groups)
    } else {
        (w1, w0)
    };
    let bad_groups = channels % groups != 0
        || out_channels % groups != 0
        || (g.transposed && (w0 != channels || w0 % groups != 0))
        || (!g.transposed && w1 * groups != channels);
    if bad_groups || out_channels == 0 {
        return Err(c.err(format!(
            "{} channels with {groups} groups do not fit the weight {w} (per group {per_group_in} \
             inputs)",
            channels
        )));
    }
    let mut dims = vec![x.shape.dims()[0].clone(), Dim::Const(out_channels)];
    for i in 0..rank - 2 {
        let (size, k) = (constant(x, i + 2)?, constant(w, i + 2)?);
        let out = g.output_size(i, size, k).filter(|_| k > 0).ok_or_else(|| {
            c.err(format!(
                "kernel {k} does not fit spatial dim {i} of size {size} (stride {}, padding {}, \
                 dilation {})",
                g.stride[i], g.padding[i], g.dilation[i]
            ))
        })?;
        dims.push(Dim::Const(out));
    }
    Ok(TensorType::new(x.dtype, dims.into_iter().collect()))
}

fn gathered(c: &Ctx<'_>, x: &TensorType, d: usize, idx: &TensorType) -> Result<Shape, TypeError> {
    if !idx.dtype.is_int() || idx.shape.rank() == 0 {
        return Err(c.err(format!(
            "indices must be an integer tensor of rank >= 1, got {idx}"
        )));
    }
    let dims = x.shape.dims();
    Ok(dims[..d]
        .iter()
        .chain(idx.shape.dims())
        .chain(&dims[d + 1..])
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BinaryOp;

    fn t(d: DType, s: &[usize]) -> ArgType {
        ArgType::Tensor(TensorType::new(d, Shape::of(s)))
    }

    #[test]
    fn promotion_with_scalars() {
        use DType::*;
        assert_eq!(
            result_type(&[t(I32, &[3]), ArgType::Scalar(Scalar::Float(1.5))]),
            F32
        );
        assert_eq!(
            result_type(&[t(F16, &[3]), ArgType::Scalar(Scalar::Float(1.5))]),
            F16
        );
        assert_eq!(result_type(&[t(F32, &[3]), t(F64, &[])]), F32);
        assert_eq!(result_type(&[t(I32, &[3]), t(F64, &[])]), F64);
        assert_eq!(result_type(&[t(I32, &[3]), t(I64, &[2, 3])]), I64);
    }

    #[test]
    fn binary_broadcasts() {
        let r = infer(
            &Op::Binary(BinaryOp::Add),
            &[t(DType::F32, &[4, 1]), t(DType::F32, &[3])],
        )
        .unwrap();
        assert_eq!(r.to_string(), "f32[4,3]");
        let e = infer(
            &Op::Binary(BinaryOp::Add),
            &[t(DType::F32, &[4]), t(DType::F32, &[3])],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "add: shapes [4] and [3] do not broadcast (operands: f32[4], f32[3])"
        );
    }

    #[test]
    fn matmul_shapes() {
        let s = |d: &[usize]| Shape::of(d);
        assert_eq!(matmul_shape(&s(&[2, 3]), &s(&[3, 4])).unwrap(), s(&[2, 4]));
        assert_eq!(matmul_shape(&s(&[3]), &s(&[3])).unwrap(), s(&[]));
        assert_eq!(
            matmul_shape(&s(&[5, 1, 2, 3]), &s(&[4, 3, 7])).unwrap(),
            s(&[5, 4, 2, 7])
        );
        assert_eq!(matmul_shape(&s(&[2, 3]), &s(&[3])).unwrap(), s(&[2]));
        assert!(matmul_shape(&s(&[2, 3]), &s(&[4, 3])).is_err());
    }
}
