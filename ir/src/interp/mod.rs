//! The reference interpreter: the oracle every other execution path is compared against.
//!
//! Values are row-major `f64` vectors that are *logically* of their [`DType`]: every
//! element has already been rounded with [`DType::round_f64`], so a value holds exactly
//! what a tensor of that dtype could store.
//!
//! Every op follows PyTorch's semantics. Its result type is always [`crate::infer()`] of the
//! op over the concrete operand types (never re-derived here). The op is computed in `f64`
//! on the operand values — binary ops first convert (round) each operand to the promoted
//! dtype ([`crate::result_type`]) — and each result element is then rounded to the result
//! dtype. Composite ops (softmax, layer norm, linear, var, ...) and reductions accumulate
//! in `f64` and round once at the end, so the oracle is at least as precise as eager.
//!
//! Entry points: [`eval`] runs a whole [`Graph`]; [`eval_op`] runs one op on operands.

mod conv;
mod index;
mod inputs;
mod layout;
mod pointwise;
mod reduce;

pub use inputs::random_inputs;

use crate::graph::Arg;
use crate::infer::infer;
use crate::{verify, ArgType, DType, Dim, Graph, Op, Scalar, Shape, TensorType, VerifyError};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// A tensor value in the interpreter: row-major `f64` data, logically of `dtype`
/// (every element is already rounded to what `dtype` can hold).
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// the element type the data is rounded to
    pub dtype: DType,
    /// the concrete shape, outermost dim first
    pub shape: Vec<usize>,
    /// the elements in row-major order (`shape.iter().product()` of them)
    pub data: Vec<f64>,
}

impl Value {
    /// A value of `dtype` and `shape` holding `data` (row-major), each element rounded with
    /// [`DType::round_f64`]. Fails if `data` does not have exactly one element per position.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> Result<Value, InterpError> {
        let numel = index::numel(&shape);
        if data.len() != numel {
            return Err(InterpError::BadValue {
                shape,
                len: data.len(),
                numel,
            });
        }
        let data = data.into_iter().map(|v| dtype.round_f64(v)).collect();
        Ok(Value { dtype, shape, data })
    }

    /// A 0-d value holding `v` rounded to `dtype`.
    pub fn scalar(dtype: DType, v: f64) -> Value {
        Value {
            dtype,
            shape: Vec::new(),
            data: vec![dtype.round_f64(v)],
        }
    }

    /// The number of elements (1 for a 0-d value).
    pub fn numel(&self) -> usize {
        index::numel(&self.shape)
    }

    /// The value's type, with constant dims.
    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype, Shape::of(&self.shape))
    }

    fn check(&self) -> Result<(), InterpError> {
        if self.data.len() != self.numel() {
            return Err(InterpError::BadValue {
                shape: self.shape.clone(),
                len: self.data.len(),
                numel: self.numel(),
            });
        }
        Ok(())
    }
}

/// One operand of [`eval_op`]: an owned tensor value or a scalar literal (as a graph's
/// [`Arg::Scalar`], which takes part in type promotion like a Python number).
#[derive(Clone, Debug, PartialEq)]
pub enum InterpArg {
    /// a tensor operand
    Tensor(Value),
    /// a scalar literal operand
    Scalar(Scalar),
}

impl From<Value> for InterpArg {
    fn from(v: Value) -> InterpArg {
        InterpArg::Tensor(v)
    }
}

impl From<Scalar> for InterpArg {
    fn from(s: Scalar) -> InterpArg {
        InterpArg::Scalar(s)
    }
}

/// Why the interpreter could not evaluate a graph or an op.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// The number of input values differs from the graph's signature.
    #[error("graph @{graph} takes {expected} inputs, got {got}")]
    InputCount {
        /// the graph's name
        graph: String,
        /// inputs in the signature
        expected: usize,
        /// values given
        got: usize,
    },
    /// An input value's dtype, rank or a constant dim differs from the signature.
    #[error("input %{name}: the graph expects {expected}, got {got}")]
    InputType {
        /// the input's name
        name: String,
        /// the declared type (`f32[B,4]`)
        expected: String,
        /// the given value's type (`f32[3,5]`)
        got: String,
    },
    /// A symbolic dim is bound to two different sizes by the inputs.
    #[error(
        "symbol `{symbol}` is bound to {first} by %{first_input} and to {second} by %{second_input}"
    )]
    SymbolMismatch {
        /// the symbol
        symbol: String,
        /// the size bound first
        first: usize,
        /// the input that bound it first
        first_input: String,
        /// the conflicting size
        second: usize,
        /// the input that conflicts
        second_input: String,
    },
    /// An op failed on its operands (bad types, an index out of range, ...).
    #[error(
        "{}: {reason} (operands: {})",
        op_head(.node, .op),
        .operands.join(", ")
    )]
    Op {
        /// the node's index in the graph (`None` for [`eval_op`])
        node: Option<usize>,
        /// the op's name
        op: &'static str,
        /// the operand types, as text (`f32[2,3]`, `scalar 1.5`)
        operands: Vec<String>,
        /// what went wrong
        reason: String,
    },
    /// The graph fails [`crate::verify()`].
    #[error("graph fails verification: {0}")]
    Verify(#[from] VerifyError),
    /// A value's data length does not match its shape.
    #[error("a value of shape {shape:?} needs {numel} elements, got {len}")]
    BadValue {
        /// the value's shape
        shape: Vec<usize>,
        /// the data length
        len: usize,
        /// the element count the shape needs
        numel: usize,
    },
}

/// `node %3 (slice)` inside a graph, `slice` for [`eval_op`].
fn op_head(node: &Option<usize>, op: &str) -> String {
    match node {
        Some(n) => format!("node %{n} ({op})"),
        None => op.to_string(),
    }
}

/// A borrowed operand, used internally so that graph evaluation never copies values.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand<'a> {
    Tensor(&'a Value),
    Scalar(Scalar),
}

impl Operand<'_> {
    fn arg_type(&self) -> ArgType {
        match self {
            Operand::Tensor(v) => ArgType::Tensor(v.tensor_type()),
            Operand::Scalar(s) => ArgType::Scalar(*s),
        }
    }
}

/// The concrete result type of an op, as [`infer()`] gives it.
#[derive(Clone, Debug)]
pub(crate) struct Out {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Out {
    /// The result value, rounding every element to the result dtype.
    pub fn finish(&self, mut data: Vec<f64>) -> Value {
        debug_assert_eq!(data.len(), index::numel(&self.shape));
        for v in &mut data {
            *v = self.dtype.round_f64(*v);
        }
        Value {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data,
        }
    }

    pub fn numel(&self) -> usize {
        index::numel(&self.shape)
    }
}

/// An op failure inside the interpreter: just the reason; callers add op and operands.
pub(crate) type Fail = String;

/// Evaluates `g` on `inputs` (in signature order) and returns its outputs in return order.
///
/// The graph is verified first. Symbolic dims are bound from the input shapes (a symbol
/// bound to two sizes is an error); constant dims and dtypes must match exactly. Shape
/// attributes (`full`, `rand`, `randn`, `reshape`, `expand`) are resolved with the bindings.
pub fn eval(g: &Graph, inputs: &[Value]) -> Result<Vec<Value>, InterpError> {
    verify(g)?;
    if inputs.len() != g.inputs().len() {
        return Err(InterpError::InputCount {
            graph: g.name().to_string(),
            expected: g.inputs().len(),
            got: inputs.len(),
        });
    }
    let binds = bind_inputs(g, inputs)?;
    let lookup = |s: &str| binds.get(s).map(|b| b.0);

    let slots_len = g.nodes().map(|(id, _)| id.index() + 1).max().unwrap_or(0);
    let mut uses = vec![0usize; slots_len];
    for (_, node) in g.nodes() {
        for a in &node.args {
            if let Arg::Value(v) = a {
                uses[v.index()] += 1;
            }
        }
    }
    for o in g.outputs() {
        // Outputs are never freed.
        uses[o.index()] = usize::MAX;
    }
    let input_pos: HashMap<usize, usize> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (id.index(), i))
        .collect();

    let mut slots: Vec<Option<Cow<'_, Value>>> = vec![None; slots_len];
    for (id, node) in g.nodes() {
        if node.op == Op::Input {
            slots[id.index()] = Some(Cow::Borrowed(&inputs[input_pos[&id.index()]]));
            continue;
        }
        let value = {
            let args: Vec<Operand<'_>> = node
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => Operand::Tensor(
                        slots[v.index()]
                            .as_deref()
                            .expect("verified graphs define operands before use"),
                    ),
                    Arg::Scalar(s) => Operand::Scalar(*s),
                })
                .collect();
            let fail = |reason: Fail| InterpError::Op {
                node: Some(id.index()),
                op: node.op.name(),
                operands: args.iter().map(|a| a.arg_type().to_string()).collect(),
                reason,
            };
            let value = run(&node.op, &args, &lookup).map_err(fail)?;
            let declared = resolve_shape(&node.ty.shape, &lookup).map_err(fail)?;
            if value.dtype != node.ty.dtype || value.shape != declared.as_slice() {
                return Err(fail(format!(
                    "computed {}, but the graph declares {} ({}{:?} with the bindings)",
                    value.tensor_type(),
                    node.ty,
                    node.ty.dtype,
                    declared
                )));
            }
            value
        };
        for a in &node.args {
            if let Arg::Value(v) = a {
                let u = &mut uses[v.index()];
                if *u != usize::MAX {
                    *u -= 1;
                    if *u == 0 {
                        slots[v.index()] = None;
                    }
                }
            }
        }
        slots[id.index()] = Some(Cow::Owned(value));
    }
    Ok(g.outputs()
        .iter()
        .map(|o| {
            slots[o.index()]
                .as_deref()
                .expect("outputs are kept")
                .clone()
        })
        .collect())
}

/// Checks the input values against the signature and binds every symbolic dim to
/// `(size, name of the input that bound it first)`.
fn bind_inputs(
    g: &Graph,
    inputs: &[Value],
) -> Result<HashMap<Arc<str>, (usize, String)>, InterpError> {
    let mut binds: HashMap<Arc<str>, (usize, String)> = HashMap::new();
    for ((name, id), v) in g.inputs().iter().zip(inputs) {
        v.check()?;
        let ty = &g.node(*id).ty;
        let mismatch = || InterpError::InputType {
            name: name.clone(),
            expected: ty.to_string(),
            got: v.tensor_type().to_string(),
        };
        if ty.dtype != v.dtype || ty.shape.rank() != v.shape.len() {
            return Err(mismatch());
        }
        for (d, &n) in ty.shape.dims().iter().zip(&v.shape) {
            if let Dim::Const(c) = d {
                if *c != n {
                    return Err(mismatch());
                }
            }
        }
        for (d, &n) in ty.shape.dims().iter().zip(&v.shape) {
            if let Dim::Sym(s) = d {
                match binds.get(s) {
                    Some((first, first_input)) if *first != n => {
                        return Err(InterpError::SymbolMismatch {
                            symbol: s.to_string(),
                            first: *first,
                            first_input: first_input.clone(),
                            second: n,
                            second_input: name.clone(),
                        })
                    }
                    Some(_) => {}
                    None => {
                        binds.insert(s.clone(), (n, name.clone()));
                    }
                }
            }
        }
    }
    Ok(binds)
}

/// Evaluates one op on operand values (tensors or scalars), as a graph node would be.
/// Shape attributes must be constant here (there are no inputs to bind symbols from).
pub fn eval_op(op: &Op, args: &[InterpArg]) -> Result<Value, InterpError> {
    let operands: Vec<Operand<'_>> = args
        .iter()
        .map(|a| match a {
            InterpArg::Tensor(v) => Operand::Tensor(v),
            InterpArg::Scalar(s) => Operand::Scalar(*s),
        })
        .collect();
    for a in &operands {
        if let Operand::Tensor(v) = a {
            v.check()?;
        }
    }
    run(op, &operands, &|_| None).map_err(|reason| InterpError::Op {
        node: None,
        op: op.name(),
        operands: operands.iter().map(|a| a.arg_type().to_string()).collect(),
        reason,
    })
}

/// Resolves `op`'s shape attributes, infers its concrete result type and computes it.
fn run(
    op: &Op,
    args: &[Operand<'_>],
    lookup: &dyn Fn(&str) -> Option<usize>,
) -> Result<Value, Fail> {
    let op = resolve_op(op, lookup)?;
    let types: Vec<ArgType> = args.iter().map(Operand::arg_type).collect();
    let ty = infer(&op, &types).map_err(|e| e.reason)?;
    let out = Out {
        dtype: ty.dtype,
        shape: resolve_shape(&ty.shape, lookup)?,
    };
    compute(&op, args, &out)
}

/// The concrete sizes of `shape`, with symbols looked up.
fn resolve_shape(
    shape: &Shape,
    lookup: &dyn Fn(&str) -> Option<usize>,
) -> Result<Vec<usize>, Fail> {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Const(n) => Ok(*n),
            Dim::Sym(s) => lookup(s).ok_or_else(|| format!("symbolic dim `{s}` is not bound")),
        })
        .collect()
}

/// `op` with every symbolic dim of its shape attribute replaced by its bound size.
fn resolve_op<'a>(op: &'a Op, lookup: &dyn Fn(&str) -> Option<usize>) -> Result<Cow<'a, Op>, Fail> {
    op.bind_symbols(lookup)
        .map_err(|s| format!("symbolic dim `{s}` is not bound"))
}

/// The tensor operand `i` (inference has already checked that it is one).
pub(crate) fn tensor<'a>(args: &[Operand<'a>], i: usize) -> Result<&'a Value, Fail> {
    match args.get(i) {
        Some(Operand::Tensor(v)) => Ok(v),
        _ => Err(format!("operand {i} must be a tensor")),
    }
}

/// Computes `op` on `args`; `out` is the inferred concrete result type.
fn compute(op: &Op, args: &[Operand<'_>], out: &Out) -> Result<Value, Fail> {
    match op {
        Op::Input => Err("an input is not computed; pass it to `eval`".into()),
        Op::Full { value, .. } => Ok(pointwise::full(*value, out)),
        Op::Arange { start, step, .. } => Ok(pointwise::arange(start.get(), step.get(), out)),
        Op::Rand { seed, .. } => Ok(pointwise::random(*seed, false, out)),
        Op::Randn { seed, .. } => Ok(pointwise::random(*seed, true, out)),
        Op::FromVec { values, .. } => Ok(out.finish(values.values().to_vec())),
        Op::Unary(u) => Ok(pointwise::unary(*u, tensor(args, 0)?, out)),
        Op::Binary(b) => pointwise::binary(*b, args[0], args[1], out),
        Op::Where => Ok(pointwise::select(args, out)),
        Op::Clamp => Ok(pointwise::ternary(op, args, out)),
        Op::Hardtanh { .. }
        | Op::LeakyRelu { .. }
        | Op::Elu { .. }
        | Op::Softplus { .. }
        | Op::NanToNum { .. } => Ok(pointwise::unary_attrs(op, tensor(args, 0)?, out)),
        Op::Cast { dtype } => {
            let x = tensor(args, 0)?;
            let mut data = x.data.clone();
            if x.dtype.is_int() && *dtype == DType::I32 {
                // integer narrowing wraps (a C cast, as torch's), where floats saturate
                data.iter_mut().for_each(|v| *v = *v as i64 as i32 as f64);
            }
            Ok(out.finish(data))
        }
        Op::Contiguous => Ok(tensor(args, 0)?.clone()),
        Op::Inplace(i) => pointwise::inplace(*i, args, out),
        Op::Reduce {
            op: r, dims, dtype, ..
        } => {
            let x = tensor(args, 0)?;
            match dtype {
                // torch's `dtype=`: the operand converted first
                Some(d) => {
                    let conv = Value {
                        dtype: *d,
                        shape: x.shape.clone(),
                        data: x.data.iter().map(|v| d.round_f64(*v)).collect(),
                    };
                    Ok(reduce::reduce(*r, &conv, dims, out))
                }
                None => Ok(reduce::reduce(*r, x, dims, out)),
            }
        }
        Op::Argmax { dim, .. } => Ok(reduce::argmax(tensor(args, 0)?, *dim, out)),
        Op::Var {
            dims, correction, ..
        } => Ok(reduce::var(tensor(args, 0)?, dims, *correction, out)),
        Op::Softmax { dim } => Ok(reduce::softmax(tensor(args, 0)?, *dim, false, out)),
        Op::LogSoftmax { dim } => Ok(reduce::softmax(tensor(args, 0)?, *dim, true, out)),
        Op::LayerNorm { ndim, eps } => reduce::layer_norm(args, *ndim, eps.get(), out),
        Op::RmsNorm { ndim, eps } => reduce::rms_norm(args, *ndim, eps.get(), out),
        Op::Linear => layout::linear(args, out),
        Op::Matmul => Ok(layout::matmul(tensor(args, 0)?, tensor(args, 1)?, out)),
        Op::Reshape { .. } => Ok(out.finish(tensor(args, 0)?.data.clone())),
        Op::Permute { dims } => Ok(layout::permute(tensor(args, 0)?, dims, out)),
        Op::Transpose { dim0, dim1 } => Ok(layout::transpose(tensor(args, 0)?, *dim0, *dim1, out)),
        Op::Expand { .. } => Ok(layout::expand(tensor(args, 0)?, out)),
        Op::Slice {
            dim, start, step, ..
        } => Ok(layout::slice(tensor(args, 0)?, *dim, *start, *step, out)),
        Op::Cat { dim } => layout::cat(args, *dim, out),
        Op::IndexSelect { dim } => {
            layout::index_select(tensor(args, 0)?, tensor(args, 1)?, *dim, out)
        }
        Op::IndexAdd { dim } => layout::index_add(
            tensor(args, 0)?,
            tensor(args, 1)?,
            tensor(args, 2)?,
            *dim,
            out,
        ),
        Op::Convolution { .. } => {
            let g = crate::conv::ConvGeometry::of(op).expect("a convolution");
            Ok(conv::convolution(
                tensor(args, 0)?,
                tensor(args, 1)?,
                &g,
                out,
            ))
        }
        Op::Embedding { .. } => layout::index_select(tensor(args, 0)?, tensor(args, 1)?, 0, out),
        Op::Triu { diagonal } => Ok(layout::triangle(tensor(args, 0)?, *diagonal, true, out)),
        Op::Tril { diagonal } => Ok(layout::triangle(tensor(args, 0)?, *diagonal, false, out)),
    }
}
