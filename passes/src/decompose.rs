//! Decomposition: composite ops become primitive ops, so that the optimiser (the e-graph,
//! fusion, scheduling) sees their parts and codegen only needs primitives.
//!
//! [`decompose`] rebuilds a graph node by node, replacing every composite node (those for
//! which [`Op::is_composite`] holds: the op table's `composite` column) by the primitive
//! nodes its [`Decomposition`] emits; every other node, the inputs (with their names), the
//! outputs and the graph's name are kept, in their order. Emitted nodes carry the composite
//! node's source location. A backend that renders a composite itself says so
//! ([`DecomposeOptions::renders`]: the cpu backend computes `gelu` and `silu` with routines
//! of its own), and [`decompose_with`] keeps those whole.
//!
//! # The table
//!
//! [`decomposition`] maps an op to its decomposition (an exhaustive match over the op set).
//! `x` is the first operand, `dims` the reduced dims, `n` the number of reduced elements
//! (the product of the reduced sizes), literals are float scalars:
//!
//! | op | primitives |
//! | --- | --- |
//! | `softmax {dim}` | `m = max(x, [dim], keepdim)`, `e = exp(x - m)`, `e / sum(e, [dim], keepdim)` |
//! | `log_softmax {dim}` | `z = x - max(x, [dim], keepdim)`, `z - log(sum(exp(z), [dim], keepdim))` |
//! | `layer_norm {ndim, eps}` x, w?, b? | over the last `ndim` dims: `c = x - mean(x)`, `c * rsqrt(mean(c * c) + eps)`, then `* w`, `+ b` |
//! | `rms_norm {ndim, eps}` x, w? | over the last `ndim` dims: `x * rsqrt(mean(x * x) + eps)`, then `* w` |
//! | `gelu` | `x * 0.5 * (erf(x * 0.7071067811865476) + 1)` |
//! | `gelu {approximate = "tanh"}` | `x * 0.5 * (tanh((x + x*x*x * 0.044715) * 0.7978845608028654) + 1)` |
//! | `silu` | `x * sigmoid(x)` |
//! | `linear` x, w, b? | `matmul(x, transpose(w, -2, -1))`, then `+ b` |
//! | `var {dims, correction, keepdim}` | `c = x - mean(x, dims, keepdim = true)`, `sum(c * c, dims, keepdim) / max(n - correction, 0)` |
//! | `mean {dims, keepdim}` | `sum(x, dims, keepdim) / n` |
//! | `clamp` x, lo, hi | `minimum(maximum(x, lo), hi)` (x cast to the result dtype first) |
//! | `hardtanh {min_val, max_val}`, `relu6` | the same with literal bounds (0 and 6 for relu6) |
//! | `hardswish` | `x * (clamp(x + 3, 0, 6) / 6)` (the gate first, so the product cannot overflow) |
//! | `leaky_relu {negative_slope}` | `where(x > 0, x, x * negative_slope)` |
//! | `elu {alpha}` | `where(x > 0, x, expm1(x) * alpha)` |
//! | `softplus {beta, threshold}` | `where(x*beta > threshold, x, log1p(exp(x*beta)) / beta)` |
//! | `mish` | `x * tanh(softplus(x))` (beta 1, threshold 20) |
//! | `nan_to_num {nan, posinf, neginf}` | nested `where`s on `isnan(x)`, `x == inf`, `x == -inf` (integers: `x`) |
//! | `embedding {padding_idx}` w, idx | `index_select(w, 0, idx)` (the padding index only changes the gradient) |
//!
//! Divisions by `n` are `div` by a literal (exact for rows of equal values, as PyTorch's
//! own decomposition of `mean`). The inner means of `var`, `layer_norm` and `rms_norm`
//! are themselves decomposed (`sum / n`) and keep the reduced dims (`keepdim = true`) so
//! that they broadcast against `x`. Everything follows PyTorch's semantics, as the
//! reference interpreter does: biased variance in `layer_norm`, `var` dividing by
//! `max(n - correction, 0)` (so `0/0` is NaN and `x/0` is inf), NaN propagating through
//! `max`.
//!
//! # Compute dtype
//!
//! Like PyTorch's decompositions ("opmath"), the parts are computed in a wider dtype
//! where the op's dtype is narrow: `f16` and `bf16` operands are cast to `f32` first and
//! the result is cast back, so rounding every intermediate does not cost accuracy (each
//! composite is rounded once in the interpreter). `gelu` and `silu` of an integer or bool
//! tensor compute in the default float dtype (`f32`), which is their result dtype. `f32`
//! and `f64` compute in themselves. `linear` is never widened: `matmul` accumulates
//! precisely already, and widening would copy the operands.
//!
//! # Statistics dtype
//!
//! The statistics of `f32` values (the sums and means of `mean`, `var`, `layer_norm` and
//! `rms_norm`, the squares they sum, `var`'s quotient and the norms' `rsqrt`) are kept in
//! `f64`, as eager computes them, and the precision is written in the graph rather than
//! left to each backend: the sum is a `sum {dtype = f64}` (torch's `dtype=` argument), the
//! square is `cast(c, f64) * cast(c, f64)` (exact, and finite for every finite `f32`), and
//! the statistic is cast back to the compute dtype where it meets the values again. So a
//! row of equal values has an exact mean and a zero variance on every backend, and large
//! values do not overflow their squares. The loop nests keep such `f64` values in
//! registers; `Fused::keep_f64_in_kernels` moves the casts so that no kernel stores one.
//!
//! [`DecomposeOptions::f64_reductions`] widens the `f32` composites `mean` and `var` to
//! `f64` too (not the norms: eager, like torch, computes their normalised values in the
//! compute type op by op, as their decomposition does): their `f32` operands are cast up, the
//! composite decomposes as an `f64` one, and the result is cast back. Programs run one
//! kernel per op (fusion off) want it: there every intermediate is stored in its dtype, so
//! in `f32` a row sum is rounded before the division by `n` (the mean of a constant row can
//! be an ulp off, and its variance not exactly 0) and squares overflow once `|x|` passes
//! ~1.8e19, where eager (which computes these in `f64`) stays finite. With the statistics
//! dtype above most of this already holds; the option also computes the centred values
//! (`x - mean`) in `f64`, which is what eager's one-op kernels do.
//!
//! # Symbolic dims
//!
//! When a reduced dim is symbolic (`Dim::Sym`, such as `B`), `n` is not a constant, so no
//! literal can divide by it:
//!
//! * `mean` stays a primitive `mean` node (its decomposition re-emits it unchanged); it is
//!   the only composite op that can remain after [`decompose`];
//! * `var`, `layer_norm` and `rms_norm` use a primitive `mean` where the table has
//!   `sum / n` (for `var` with `correction = 0`: `mean(c * c, dims, keepdim)`);
//! * `var` with a non-zero `correction` counts `n` at run time: a `full` tensor over the
//!   symbolic reduced dims holding the product of the constant ones, summed to a 0-d
//!   tensor (in the compute dtype: exact below 2^24 elements a row in f32), then
//!   `sum(c * c) / maximum(n - correction, 0)`.
//!
//! Reductions over symbolic dims that are not reduced (`f32[B,7]` normalised over the 7)
//! decompose with constants as usual.
//!
//! # Types never change
//!
//! A decomposition's result must have exactly the composite's type. [`decompose`] builds
//! each decomposition in a scratch graph first and keeps the original node when the
//! decomposition fails or gives another type (it logs why with `tracing`); no such case
//! is known (a softmax over a dim of size 0, where `max` has no identity, decomposes to
//! the empty result, a `full` of the composite's type).

use crate::PassError;
use kiln_ir::{
    verify, Arg, BinaryOp, DType, Dim, Graph, Node, NodeId, Op, ReduceOp, Scalar, Shape,
    TensorType, UnaryOp,
};
use std::collections::HashMap;

/// The pass name used in errors.
const PASS: &str = "decompose";

/// One decomposition: emits primitive nodes into `out` for a composite node whose operands
/// are already mapped to `args` (values of `out`, or scalar literals), and returns the
/// node whose value equals the composite's result (of exactly the composite's type).
/// `loc` is the original node's source location, copied onto every emitted node.
///
/// On an error, nodes emitted before it stay in `out` (unused); [`decompose`] runs
/// decompositions in a scratch graph first, so its result never holds such nodes.
pub type Decomposition = fn(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError>;

/// The decomposition of `op`, if it is a composite op (see the table in the module docs).
/// The match is exhaustive: a new op must say here whether it decomposes.
pub fn decomposition(op: &Op) -> Option<Decomposition> {
    Some(match op {
        Op::Softmax { .. } => softmax,
        Op::LogSoftmax { .. } => log_softmax,
        Op::LayerNorm { .. } => layer_norm,
        Op::RmsNorm { .. } => rms_norm,
        Op::Unary(u) => return unary_decomposition(*u),
        Op::Linear => linear,
        Op::Var { .. } => var,
        Op::Reduce { op: r, .. } => match r {
            ReduceOp::Mean => mean,
            ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min => return None,
        },
        Op::Clamp => clamp,
        Op::Hardtanh { .. } => hardtanh,
        Op::LeakyRelu { .. } => leaky_relu,
        Op::Elu { .. } => elu,
        Op::Softplus { .. } => softplus,
        Op::NanToNum { .. } => nan_to_num,
        Op::Embedding { .. } => embedding,
        Op::Input
        | Op::Full { .. }
        | Op::Arange { .. }
        | Op::Rand { .. }
        | Op::Randn { .. }
        | Op::FromVec { .. }
        | Op::Binary(_)
        | Op::Inplace(_)
        | Op::Where
        | Op::Argmax { .. }
        | Op::Matmul
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Slice { .. }
        | Op::Cat { .. }
        | Op::IndexSelect { .. }
        | Op::IndexAdd { .. }
        | Op::Convolution { .. }
        | Op::Cast { .. }
        | Op::Contiguous
        | Op::Triu { .. }
        | Op::Tril { .. } => return None,
    })
}

/// The decomposition of a composite unary op (the table's `composite` column says which
/// are; a primitive has none).
fn unary_decomposition(u: UnaryOp) -> Option<Decomposition> {
    use UnaryOp::*;
    if !u.info().composite {
        return None;
    }
    Some(match u {
        Gelu => gelu,
        GeluTanh => gelu_tanh,
        Silu => silu,
        Relu6 => relu6,
        Hardswish => hardswish,
        Mish => mish,
        // a row marked composite without a decomposition here: the test of the table
        // (`tests/op_table.rs`) fails, and the op runs undecomposed meanwhile
        _ => return None,
    })
}

/// Which ops a backend computes itself: a composite op it renders is kept whole, the others
/// are lowered (tinygrad's late rewrites). Each backend declares its own (`kiln_codegen::
/// cpu::renders`, `kiln_codegen::cuda::renders`), an exhaustive `match` over the op set.
pub type Renders = fn(&Op) -> bool;

/// Renders no composite op: `decompose` lowers every one (the backend-neutral default).
pub fn renders_primitives(op: &Op) -> bool {
    !op.is_composite()
}

/// How [`decompose_with`] decomposes.
#[derive(Clone, Copy, Debug)]
pub struct DecomposeOptions {
    /// compute `f32` `mean` and `var` in `f64` (see the module docs: for programs run one
    /// kernel per op)
    pub f64_reductions: bool,
    /// the composite ops the target backend renders natively (kept whole)
    pub renders: Renders,
}

impl Default for DecomposeOptions {
    fn default() -> Self {
        DecomposeOptions {
            f64_reductions: false,
            renders: renders_primitives,
        }
    }
}

/// Rebuilds `g` with every composite node replaced by its decomposition: inputs (names and
/// order), the other nodes (in order, with their locations), the outputs and the graph's
/// name are kept. The result verifies; it fails only when `g` itself does not verify.
pub fn decompose(g: &Graph) -> Result<Graph, PassError> {
    decompose_with(g, &DecomposeOptions::default())
}

/// [`decompose`] with options.
pub fn decompose_with(g: &Graph, opts: &DecomposeOptions) -> Result<Graph, PassError> {
    let graph_err = |source| PassError::Graph { pass: PASS, source };
    verify(g).map_err(|e| unsupported(format!("the input graph does not verify: {e}")))?;
    let mut out = Graph::new(g.name());
    let mut map: HashMap<NodeId, NodeId> = HashMap::with_capacity(g.len());
    for (id, node) in g.nodes() {
        if node.op == Op::Input {
            let name = g.input_name(id).ok_or_else(|| PassError::Unsupported {
                pass: PASS,
                reason: format!("input node {id} is not listed in the signature"),
            })?;
            map.insert(id, out.add_input(name, node.ty.clone()).map_err(graph_err)?);
            continue;
        }
        let args = node
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => map
                    .get(v)
                    .map(|m| Arg::Value(*m))
                    .ok_or_else(|| graph_err(kiln_ir::GraphError::UnknownNode(*v))),
                s => Ok(*s),
            })
            .collect::<Result<Vec<Arg>, PassError>>()?;
        // not the norms: eager computes their normalised values op by op in the compute
        // type, as their decomposition does (and torch)
        let reduces = matches!(
            node.op,
            Op::Var { .. }
                | Op::Reduce {
                    op: ReduceOp::Mean,
                    ..
                }
        );
        let f32_operand =
            matches!(args.first(), Some(Arg::Value(v)) if out.node(*v).ty.dtype == DType::F32);
        let chosen = if (opts.renders)(&node.op) {
            None
        } else if opts.f64_reductions && reduces && f32_operand {
            Some(in_f64 as Decomposition)
        } else {
            decomposition(&node.op)
        };
        let decomposed = match chosen {
            Some(d) => match emit_checked(d, &mut out, node, &args) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::debug!(node = %id, op = %node.op, "kept undecomposed: {e}");
                    None
                }
            },
            None => None,
        };
        let new = match decomposed {
            Some(r) => r,
            None => out
                .add_op(node.op.clone(), &args, node.loc.clone())
                .map_err(graph_err)?,
        };
        map.insert(id, new);
    }
    let outputs = g.outputs().iter().map(|o| map[o]).collect();
    out.set_outputs(outputs).map_err(graph_err)?;
    verify(&out).map_err(|e| PassError::Verify {
        pass: PASS,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// Runs `d` in a scratch graph whose inputs have the operands' types, checks the result
/// type, and only then replays the emitted nodes into `out`.
fn emit_checked(
    d: Decomposition,
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
) -> Result<NodeId, PassError> {
    let graph_err = |source| PassError::Graph { pass: PASS, source };
    let mut scratch = Graph::new("scratch");
    let mut back: HashMap<NodeId, NodeId> = HashMap::new();
    let mut scratch_args = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        scratch_args.push(match a {
            Arg::Value(v) => {
                let ty = out.node(*v).ty.clone();
                let s = scratch.add_input(format!("a{i}"), ty).map_err(graph_err)?;
                back.insert(s, *v);
                Arg::Value(s)
            }
            s => *s,
        });
    }
    let result = d(&mut scratch, node, &scratch_args, &node.loc)?;
    if scratch.node(result).ty != node.ty {
        return Err(unsupported(format!(
            "the decomposition of {} gives {}, not {}",
            node.op,
            scratch.node(result).ty,
            node.ty
        )));
    }
    for (id, n) in scratch.nodes() {
        if n.op == Op::Input {
            continue;
        }
        let mapped: Vec<Arg> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => Arg::Value(back[v]),
                s => *s,
            })
            .collect();
        let new = out
            .add_op(n.op.clone(), &mapped, n.loc.clone())
            .map_err(graph_err)?;
        back.insert(id, new);
    }
    Ok(back[&result])
}

fn unsupported(reason: String) -> PassError {
    PassError::Unsupported { pass: PASS, reason }
}

fn lit(v: f64) -> Arg {
    Arg::Scalar(Scalar::Float(v))
}

/// The dtype the statistics (sums, means, variances) of values of dtype `d` are kept in:
/// f64 for f32 values (as eager computes them: a row of equal values has an exact mean and
/// a zero variance, and squares of large values do not overflow), else `d` itself.
fn stat_dtype(d: DType) -> DType {
    if d == DType::F32 {
        DType::F64
    } else {
        d
    }
}

/// The dtype a composite of dtype `d` computes in (see "Compute dtype" in the module docs).
fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d if d.is_float() => d,
        _ => DType::DEFAULT_FLOAT,
    }
}

/// The reduced dims of a `dims` attribute on a tensor of rank `rank`, as the interpreter
/// reads it: empty means all; on a 0-d tensor nothing is reduced.
pub(crate) fn reduced_dims(dims: &[i64], rank: usize) -> Vec<usize> {
    if dims.is_empty() {
        return (0..rank).collect();
    }
    let mut out: Vec<usize> = dims
        .iter()
        .filter_map(|&d| kiln_ir::shape::normalize_dim(d, rank.max(1)))
        .filter(|&d| d < rank)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The number of elements reduced over `dims`: `Ok(n)` when every reduced dim is
/// constant, otherwise `Err((product of the constant ones, the symbolic dims))`.
fn count(shape: &Shape, dims: &[i64]) -> Result<usize, (usize, Shape)> {
    let mut n = 1usize;
    let mut syms = Shape::scalar();
    for d in reduced_dims(dims, shape.rank()) {
        match &shape.dims()[d] {
            Dim::Const(k) => n = n.saturating_mul(*k),
            s @ Dim::Sym(_) => syms.0.push(s.clone()),
        }
    }
    if syms.rank() == 0 {
        Ok(n)
    } else {
        Err((n, syms))
    }
}

/// Emits nodes into a graph with one source location.
struct Emit<'a> {
    g: &'a mut Graph,
    loc: &'a Option<String>,
}

impl Emit<'_> {
    fn op(&mut self, op: Op, args: &[Arg]) -> Result<Arg, PassError> {
        self.g
            .add_op(op, args, self.loc.clone())
            .map(Arg::Value)
            .map_err(|source| PassError::Graph { pass: PASS, source })
    }

    fn ty(&self, a: Arg) -> Result<&TensorType, PassError> {
        match a {
            Arg::Value(v) => Ok(&self.g.node(v).ty),
            Arg::Scalar(s) => Err(unsupported(format!(
                "expected a tensor operand, got the scalar {s}"
            ))),
        }
    }

    fn unary(&mut self, u: UnaryOp, x: Arg) -> Result<Arg, PassError> {
        self.op(Op::Unary(u), &[x])
    }

    fn binary(&mut self, b: BinaryOp, x: Arg, y: Arg) -> Result<Arg, PassError> {
        self.op(Op::Binary(b), &[x, y])
    }

    fn add(&mut self, x: Arg, y: Arg) -> Result<Arg, PassError> {
        self.binary(BinaryOp::Add, x, y)
    }

    fn sub(&mut self, x: Arg, y: Arg) -> Result<Arg, PassError> {
        self.binary(BinaryOp::Sub, x, y)
    }

    fn mul(&mut self, x: Arg, y: Arg) -> Result<Arg, PassError> {
        self.binary(BinaryOp::Mul, x, y)
    }

    fn div(&mut self, x: Arg, y: Arg) -> Result<Arg, PassError> {
        self.binary(BinaryOp::Div, x, y)
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        x: Arg,
        dims: &[i64],
        keepdim: bool,
    ) -> Result<Arg, PassError> {
        self.reduce_in(op, x, dims, keepdim, None)
    }

    /// A reduction of `x` converted to `dtype` (torch's `dtype=`; `None`: x's own).
    fn reduce_in(
        &mut self,
        op: ReduceOp,
        x: Arg,
        dims: &[i64],
        keepdim: bool,
        dtype: Option<DType>,
    ) -> Result<Arg, PassError> {
        self.op(
            Op::Reduce {
                op,
                dims: dims.to_vec(),
                keepdim,
                dtype,
            },
            &[x],
        )
    }

    /// The mean of `x` over `dims` accumulated and divided in `acc`: a sum with
    /// `dtype = acc` divided by n in `acc` (a `mean {dtype = acc}` when n is symbolic).
    fn mean_in(
        &mut self,
        x: Arg,
        dims: &[i64],
        keepdim: bool,
        acc: DType,
    ) -> Result<Arg, PassError> {
        let t = self.ty(x)?.clone();
        let cast = (t.dtype != acc).then_some(acc);
        match count(&t.shape, dims) {
            Ok(n) => {
                let s = self.reduce_in(ReduceOp::Sum, x, dims, keepdim, cast)?;
                self.div(s, lit(n as f64))
            }
            Err(_) => self.reduce_in(ReduceOp::Mean, x, dims, keepdim, cast),
        }
    }

    /// `x * x` computed in `acc` (an f32 value squared in f64 is exact, and finite for
    /// every finite f32).
    fn square_in(&mut self, x: Arg, acc: DType) -> Result<Arg, PassError> {
        let w = self.cast(x, acc)?;
        self.mul(w, w)
    }

    /// `x` cast to `dtype` (no node when it already has it).
    fn cast(&mut self, x: Arg, dtype: DType) -> Result<Arg, PassError> {
        if self.ty(x)?.dtype == dtype {
            Ok(x)
        } else {
            self.op(Op::Cast { dtype }, &[x])
        }
    }

    /// `x` in the compute dtype of `dtype`.
    fn widen(&mut self, x: Arg, dtype: DType) -> Result<Arg, PassError> {
        self.cast(x, compute_dtype(dtype))
    }

    /// The result: `y` cast to the composite's dtype, which must give its type.
    fn finish(&mut self, y: Arg, node: &Node) -> Result<NodeId, PassError> {
        let y = self.cast(y, node.ty.dtype)?;
        let ty = self.ty(y)?;
        if *ty != node.ty {
            return Err(unsupported(format!(
                "the decomposition of {} gives {ty}, not {}",
                node.op, node.ty
            )));
        }
        match y {
            Arg::Value(v) => Ok(v),
            Arg::Scalar(_) => unreachable!("`ty` checked that it is a tensor"),
        }
    }
}

/// The first operand (every composite has one, a tensor).
fn first(node: &Node, args: &[Arg]) -> Result<Arg, PassError> {
    args.first()
        .copied()
        .ok_or_else(|| unsupported(format!("{} has no operands", node.op)))
}

fn softmax(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    normalise(out, node, args, loc, false)
}

fn log_softmax(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    normalise(out, node, args, loc, true)
}

/// softmax (`log = false`) and log_softmax along the op's dim.
fn normalise(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
    log: bool,
) -> Result<NodeId, PassError> {
    let (Op::Softmax { dim } | Op::LogSoftmax { dim }) = node.op else {
        return Err(unsupported(format!("{} is not a softmax", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let t = e.ty(x)?.clone();
    let empty = t.shape.rank() > 0
        && kiln_ir::shape::normalize_dim(dim, t.shape.rank())
            .is_some_and(|d| t.shape.dims()[d] == Dim::Const(0));
    if empty {
        // `max` over no elements has no identity; the result has no elements either.
        let z = e.op(
            Op::Full {
                shape: node.ty.shape.clone(),
                value: Scalar::Float(0.0),
                dtype: node.ty.dtype,
            },
            &[],
        )?;
        return e.finish(z, node);
    }
    let x = e.widen(x, t.dtype)?;
    let m = e.reduce(ReduceOp::Max, x, &[dim], true)?;
    let z = e.sub(x, m)?;
    let ez = e.unary(UnaryOp::Exp, z)?;
    let s = e.reduce(ReduceOp::Sum, ez, &[dim], true)?;
    let y = if log {
        let l = e.unary(UnaryOp::Log, s)?;
        e.sub(z, l)?
    } else {
        e.div(ez, s)?
    };
    e.finish(y, node)
}

/// The trailing `ndim` dims, written negatively (`[-2, -1]`).
fn trailing(ndim: usize) -> Vec<i64> {
    (-(ndim as i64)..0).collect()
}

/// `node`'s own decomposition done in `f64` ([`DecomposeOptions::f64_reductions`]): its
/// `f32` operands cast up, the composite decomposed as an `f64` one, the result cast back.
fn in_f64(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let d = decomposition(&node.op)
        .ok_or_else(|| unsupported(format!("{} has no decomposition", node.op)))?;
    let mut e = Emit { g: out, loc };
    let mut wide = Vec::with_capacity(args.len());
    for &a in args {
        wide.push(match a {
            Arg::Value(_) if e.ty(a)?.dtype == DType::F32 => e.cast(a, DType::F64)?,
            other => other,
        });
    }
    let mut node64 = node.clone();
    node64.ty.dtype = DType::F64;
    let y = d(e.g, &node64, &wide, loc)?;
    e.finish(Arg::Value(y), node)
}

fn layer_norm(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::LayerNorm { ndim, eps } = node.op else {
        return Err(unsupported(format!("{} is not a layer_norm", node.op)));
    };
    let eps = eps.get();
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let dims = trailing(ndim);
    let x = e.widen(x, dtype)?;
    let (dt, acc) = (compute_dtype(dtype), stat_dtype(compute_dtype(dtype)));
    let m = e.mean_in(x, &dims, true, acc)?;
    let m = e.cast(m, dt)?;
    let c = e.sub(x, m)?;
    let sq = e.square_in(c, acc)?;
    let v = e.mean_in(sq, &dims, true, acc)?;
    let ve = e.add(v, lit(eps))?;
    let r = e.unary(UnaryOp::Rsqrt, ve)?;
    let r = e.cast(r, dt)?;
    let mut y = e.mul(c, r)?;
    if let Some(&w) = args.get(1) {
        let w = e.widen(w, dtype)?;
        y = e.mul(y, w)?;
    }
    // torch adds its default bias, +0, when none is given (an x equal to its row's mean,
    // -0 included, normalises to +0)
    let b = match args.get(2) {
        Some(&b) => e.widen(b, dtype)?,
        None => lit(0.0),
    };
    y = e.add(y, b)?;
    e.finish(y, node)
}

fn rms_norm(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::RmsNorm { ndim, eps } = node.op else {
        return Err(unsupported(format!("{} is not an rms_norm", node.op)));
    };
    let eps = eps.get();
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let dims = trailing(ndim);
    let x = e.widen(x, dtype)?;
    let (dt, acc) = (compute_dtype(dtype), stat_dtype(compute_dtype(dtype)));
    let sq = e.square_in(x, acc)?;
    let ms = e.mean_in(sq, &dims, true, acc)?;
    let me = e.add(ms, lit(eps))?;
    let r = e.unary(UnaryOp::Rsqrt, me)?;
    let r = e.cast(r, dt)?;
    let mut y = e.mul(x, r)?;
    if let Some(&w) = args.get(1) {
        let w = e.widen(w, dtype)?;
        y = e.mul(y, w)?;
    }
    e.finish(y, node)
}

fn gelu(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let a = e.mul(x, lit(std::f64::consts::FRAC_1_SQRT_2))?;
    let erf = e.unary(UnaryOp::Erf, a)?;
    let p = e.add(erf, lit(1.0))?;
    let h = e.mul(x, lit(0.5))?;
    let y = e.mul(h, p)?;
    e.finish(y, node)
}

/// `sqrt(2/pi)`, the scale inside gelu's tanh approximation.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

fn gelu_tanh(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let x2 = e.mul(x, x)?;
    let x3 = e.mul(x2, x)?;
    let c = e.mul(x3, lit(0.044715))?;
    let inner = e.add(x, c)?;
    let a = e.mul(inner, lit(SQRT_2_OVER_PI))?;
    let t = e.unary(UnaryOp::Tanh, a)?;
    let p = e.add(t, lit(1.0))?;
    let h = e.mul(x, lit(0.5))?;
    let y = e.mul(h, p)?;
    e.finish(y, node)
}

fn silu(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let s = e.unary(UnaryOp::Sigmoid, x)?;
    let y = e.mul(x, s)?;
    e.finish(y, node)
}

fn linear(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let (x, w) = match args {
        [x, w, ..] => (*x, *w),
        _ => return Err(unsupported("linear needs x and w".into())),
    };
    let wt = e.op(Op::Transpose { dim0: -2, dim1: -1 }, &[w])?;
    let mut y = e.op(Op::Matmul, &[x, wt])?;
    if let Some(&b) = args.get(2) {
        y = e.add(y, b)?;
    }
    e.finish(y, node)
}

/// `embedding(weight, indices)`: `weight.index_select(0, indices)` (its padding index only
/// matters to the gradient).
fn embedding(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let [w, idx] = args else {
        return Err(unsupported("embedding needs a weight and indices".into()));
    };
    let y = e.op(Op::IndexSelect { dim: 0 }, &[*w, *idx])?;
    e.finish(y, node)
}

fn var(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::Var {
        ref dims,
        correction,
        keepdim,
    } = node.op
    else {
        return Err(unsupported(format!("{} is not a var", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let t = e.ty(x)?.clone();
    let x = e.widen(x, t.dtype)?;
    let (dt, acc) = (compute_dtype(t.dtype), stat_dtype(compute_dtype(t.dtype)));
    let m = e.mean_in(x, dims, true, acc)?;
    let m = e.cast(m, dt)?;
    let c = e.sub(x, m)?;
    let sq = e.square_in(c, acc)?;
    let y = match count(&t.shape, dims) {
        Ok(n) => {
            let s = e.reduce(ReduceOp::Sum, sq, dims, keepdim)?;
            let den = (n as f64 - correction as f64).max(0.0);
            e.div(s, lit(den))?
        }
        Err(_) if correction == 0 => e.reduce(ReduceOp::Mean, sq, dims, keepdim)?,
        Err((consts, syms)) => {
            // n is only known at run time: count it over the symbolic dims.
            // The count is kept in the compute dtype (exact while a row has fewer than
            // 2^24 elements in f32) so that no kernel stores an f64 buffer, and widened
            // where it divides.
            let s = e.reduce(ReduceOp::Sum, sq, dims, keepdim)?;
            let ones = e.op(
                Op::Full {
                    shape: syms,
                    value: Scalar::Float(consts as f64),
                    dtype: dt,
                },
                &[],
            )?;
            let n = e.reduce(ReduceOp::Sum, ones, &[], false)?;
            let d = e.sub(n, lit(correction as f64))?;
            let d = e.binary(BinaryOp::Maximum, d, lit(0.0))?;
            let d = e.cast(d, acc)?;
            e.div(s, d)?
        }
    };
    e.finish(y, node)
}

fn mean(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::Reduce {
        op: ReduceOp::Mean,
        ref dims,
        keepdim,
        dtype,
    } = node.op
    else {
        return Err(unsupported(format!("{} is not a mean", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let t = e.ty(x)?.clone();
    // torch's `dtype=` names the dtype the mean computes from
    let comp = compute_dtype(dtype.unwrap_or(t.dtype));
    let acc = stat_dtype(comp);
    let y = match count(&t.shape, dims) {
        // accumulated and divided in the statistics dtype, rounded once
        Ok(_) => {
            let x = e.cast(x, comp)?;
            e.mean_in(x, dims, keepdim, acc)?
        }
        // a symbolic count: a primitive `mean` with the statistics dtype
        Err(_) => e.reduce_in(
            ReduceOp::Mean,
            x,
            dims,
            keepdim,
            (acc != t.dtype).then_some(acc),
        )?,
    };
    e.finish(y, node)
}

/// A literal of `v` that keeps a tensor of `dtype` in its dtype: an int for integer
/// tensors (when `v` is integral), a float otherwise.
fn lit_for(dtype: DType, v: f64) -> Result<Arg, PassError> {
    if dtype.is_float() {
        Ok(lit(v))
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Ok(Arg::Scalar(Scalar::Int(v as i64)))
    } else {
        Err(unsupported(format!(
            "the bound {v} is not an integer, for a {dtype} tensor"
        )))
    }
}

/// `minimum(maximum(x, lo), hi)` in `x`'s dtype.
/// `minimum(hi, maximum(lo, x))`: the bounds first, so that an `x` equal to one is kept
/// (`maximum` and `minimum` give their second operand on ties, as in PyTorch).
fn clamp_between(e: &mut Emit<'_>, x: Arg, lo: Arg, hi: Arg) -> Result<Arg, PassError> {
    let m = e.binary(BinaryOp::Maximum, lo, x)?;
    e.binary(BinaryOp::Minimum, hi, m)
}

fn clamp(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let [x, lo, hi] = args else {
        return Err(unsupported("clamp needs x, min and max".into()));
    };
    // promote x first, so that both steps compute in the result dtype
    let x = e.cast(*x, node.ty.dtype)?;
    let y = clamp_between(&mut e, x, *lo, *hi)?;
    e.finish(y, node)
}

fn hardtanh(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::Hardtanh { min_val, max_val } = node.op else {
        return Err(unsupported(format!("{} is not a hardtanh", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let (lo, hi) = (
        lit_for(dtype, min_val.get())?,
        lit_for(dtype, max_val.get())?,
    );
    let y = clamp_between(&mut e, x, lo, hi)?;
    e.finish(y, node)
}

fn relu6(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let y = clamp_between(&mut e, x, lit_for(dtype, 0.0)?, lit_for(dtype, 6.0)?)?;
    e.finish(y, node)
}

fn hardswish(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let s = e.add(x, lit(3.0))?;
    let c = clamp_between(&mut e, s, lit(0.0), lit(6.0))?;
    // the gate `c / 6` is in [0, 1], so the product never overflows where the result
    // is finite
    let gate = e.div(c, lit(6.0))?;
    let y = e.mul(x, gate)?;
    e.finish(y, node)
}

/// `where(x·β > threshold, x, log1p(exp(x·β)) / β)` on a widened `x`.
fn softplus_of(e: &mut Emit<'_>, x: Arg, beta: f64, threshold: f64) -> Result<Arg, PassError> {
    let bx = if beta == 1.0 { x } else { e.mul(x, lit(beta))? };
    let big = e.binary(BinaryOp::Gt, bx, lit(threshold))?;
    let ex = e.unary(UnaryOp::Exp, bx)?;
    let l = e.unary(UnaryOp::Log1p, ex)?;
    let soft = if beta == 1.0 { l } else { e.div(l, lit(beta))? };
    e.op(Op::Where, &[big, x, soft])
}

fn softplus(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::Softplus { beta, threshold } = node.op else {
        return Err(unsupported(format!("{} is not a softplus", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let y = softplus_of(&mut e, x, beta.get(), threshold.get())?;
    e.finish(y, node)
}

fn mish(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let s = softplus_of(&mut e, x, 1.0, 20.0)?;
    let t = e.unary(UnaryOp::Tanh, s)?;
    let y = e.mul(x, t)?;
    e.finish(y, node)
}

fn leaky_relu(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::LeakyRelu { negative_slope } = node.op else {
        return Err(unsupported(format!("{} is not a leaky_relu", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let pos = e.binary(BinaryOp::Gt, x, lit(0.0))?;
    let neg = e.mul(x, lit(negative_slope.get()))?;
    let y = e.op(Op::Where, &[pos, x, neg])?;
    e.finish(y, node)
}

fn elu(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::Elu { alpha } = node.op else {
        return Err(unsupported(format!("{} is not an elu", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    let dtype = e.ty(x)?.dtype;
    let x = e.widen(x, dtype)?;
    let pos = e.binary(BinaryOp::Gt, x, lit(0.0))?;
    let m = e.unary(UnaryOp::Expm1, x)?;
    let neg = e.mul(m, lit(alpha.get()))?;
    let y = e.op(Op::Where, &[pos, x, neg])?;
    e.finish(y, node)
}

fn nan_to_num(
    out: &mut Graph,
    node: &Node,
    args: &[Arg],
    loc: &Option<String>,
) -> Result<NodeId, PassError> {
    let Op::NanToNum {
        nan,
        posinf,
        neginf,
    } = node.op
    else {
        return Err(unsupported(format!("{} is not a nan_to_num", node.op)));
    };
    let mut e = Emit { g: out, loc };
    let x = first(node, args)?;
    if !e.ty(x)?.dtype.is_float() {
        // integers have no NaN and no infinity
        return e.finish(x, node);
    }
    let is_nan = e.unary(UnaryOp::Isnan, x)?;
    let is_pos = e.binary(BinaryOp::Eq, x, lit(f64::INFINITY))?;
    let is_neg = e.binary(BinaryOp::Eq, x, lit(f64::NEG_INFINITY))?;
    let y = e.op(Op::Where, &[is_neg, lit(neginf.get()), x])?;
    let y = e.op(Op::Where, &[is_pos, lit(posinf.get()), y])?;
    let y = e.op(Op::Where, &[is_nan, lit(nan.get()), y])?;
    e.finish(y, node)
}
