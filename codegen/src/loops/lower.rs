//! Lowering a kernel group's body graph to a [`LoopNest`].
//!
//! Every dim of every value is a variable; pointwise ops unify their operands' dims with
//! their result's (right-aligned, as broadcasting does, except where an operand's dim is a
//! broadcast 1), and reductions unify the dim they fold with one shared *reduced* variable.
//! The resulting classes are the loop dims. A kernel whose classes do not form a loop nest
//! (two dims of one value in the same class, several reduced dims, an op or dtype the
//! generators do not handle) is [`Unsupported`], and the backend runs it with the eager
//! kernels instead.

use super::phases::{plan_phases, reuse_expensive};
use super::row_divisors::reciprocal_row_divisors;
use super::{Buffer, Expr, LoopNest, Role, ScalarType, Stmt, Store, ValueId};
use kiln_ir::infer::result_type;
use kiln_ir::{
    Arg, ArgType, BinaryOp, DType, DTypeRule, Dim, Graph, NodeId, Op, ReduceOp, UnaryOp,
};
use std::collections::{HashMap, HashSet};

/// Why a kernel is not lowered to a loop nest (it then runs on the eager kernels).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kernel}: {reason}")]
pub struct Unsupported {
    /// the kernel's name
    pub kernel: String,
    /// what is not supported
    pub reason: String,
}

/// Union-find over dim variables.
struct Classes {
    parent: Vec<usize>,
}

impl Classes {
    fn find(&mut self, mut v: usize) -> usize {
        while self.parent[v] != v {
            self.parent[v] = self.parent[self.parent[v]];
            v = self.parent[v];
        }
        v
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// Lowers the body of a kernel group (a graph whose inputs are the values it reads and
/// whose outputs are the values it writes) to a loop nest over f32 and bool values (the
/// CPU backend's form).
pub fn lower_kernel(body: &Graph) -> Result<LoopNest, Unsupported> {
    Lowering::new(body).run()
}

/// [`lower_kernel`], also taking f16 and bf16 values (the CUDA backend's form): they are
/// computed in f32 inside the nest, read from half-precision buffers with an exact widening
/// and written back rounded to nearest even. As in eager mode, each op's half result is
/// rounded to its type before another op uses it ([`Expr::Round`]), and a literal operand of
/// a half op is the literal rounded to that type: Inductor keeps such chains in f32, which
/// differs from eager wherever a value overflows the half type's range (f16 ends at 65504).
pub fn lower_kernel_half(body: &Graph) -> Result<LoopNest, Unsupported> {
    let mut l = Lowering::new(body);
    l.half = true;
    l.run()
}

/// `dt` when it is a half type (f16 or bf16).
fn half_type(dt: DType) -> Option<DType> {
    matches!(dt, DType::F16 | DType::BF16).then_some(dt)
}

/// f32, or (with half-precision buffers allowed) f16 and bf16: values computed as f32.
fn is_float(dt: DType, half: bool) -> bool {
    dt == DType::F32 || (half && matches!(dt, DType::F16 | DType::BF16))
}

struct Lowering<'g> {
    g: &'g Graph,
    /// the first variable of each node's dims
    first_var: Vec<usize>,
    /// the shared variable of reduced dims
    reduced_var: usize,
    classes: Classes,
    /// reductions whose reduced dims all have size 1 (the identity)
    identity: Vec<NodeId>,
    /// f16 and bf16 values are allowed (computed in f32)
    half: bool,
}

impl<'g> Lowering<'g> {
    fn new(g: &'g Graph) -> Lowering<'g> {
        let mut first_var = Vec::with_capacity(g.len());
        let mut n = 0;
        for (_, node) in g.nodes() {
            first_var.push(n);
            n += node.ty.shape.rank();
        }
        Lowering {
            g,
            first_var,
            reduced_var: n,
            classes: Classes {
                parent: (0..=n).collect(),
            },
            identity: Vec::new(),
            half: false,
        }
    }

    fn fail<T>(&self, reason: impl Into<String>) -> Result<T, Unsupported> {
        Err(Unsupported {
            kernel: self.g.name().to_string(),
            reason: reason.into(),
        })
    }

    fn var(&self, id: NodeId, dim: usize) -> usize {
        self.first_var[id.index()] + dim
    }

    fn dims(&self, id: NodeId) -> &[Dim] {
        self.g.node(id).ty.shape.dims()
    }

    fn run(mut self) -> Result<LoopNest, Unsupported> {
        self.check_types()?;
        self.unify()?;
        self.merge_row_dims();
        let (dims, loop_of_class) = self.loop_dims()?;
        let loop_of = |this: &mut Self, id: NodeId, d: usize| {
            let c = this.classes.find(this.var(id, d));
            loop_of_class.get(&c).copied()
        };
        // each value's loop dims must be distinct
        let ids: Vec<NodeId> = self.g.nodes().map(|(id, _)| id).collect();
        let mut value_loops: HashMap<NodeId, Vec<Option<usize>>> = HashMap::new();
        for &id in &ids {
            let idx: Vec<Option<usize>> = (0..self.dims(id).len())
                .map(|d| loop_of(&mut self, id, d))
                .collect();
            let mut seen: Vec<usize> = idx.iter().flatten().copied().collect();
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return self.fail(format!(
                    "value {} would index one loop dim twice",
                    self.name(id)
                ));
            }
            value_loops.insert(id, idx);
        }
        let reduces = self
            .g
            .nodes()
            .any(|(id, n)| matches!(n.op, Op::Reduce { .. }) && !self.identity.contains(&id));
        let inner = dims.len().checked_sub(1);
        let varies = |id: &NodeId| inner.is_some_and(|i| value_loops[id].contains(&Some(i)));
        let mut buffers: Vec<Buffer> = Vec::new();
        let mut body: Vec<Stmt> = Vec::new();
        let mut value_of: HashMap<NodeId, ValueId> = HashMap::new();
        let push = |body: &mut Vec<Stmt>, expr: Expr, ty: ScalarType, row: bool| {
            body.push(Stmt { expr, ty, row });
            body.len() - 1
        };
        // values some op of the kernel reads (the others are only stored)
        let used: HashSet<NodeId> = self
            .g
            .nodes()
            .flat_map(|(_, n)| n.args.iter())
            .filter_map(|a| match a {
                Arg::Value(v) => Some(*v),
                Arg::Scalar(_) => None,
            })
            .collect();
        for (id, node) in self.g.nodes() {
            let row = !varies(&id);
            let ty = match node.ty.dtype {
                DType::Bool => ScalarType::Bool,
                DType::F64 => ScalarType::F64,
                _ => ScalarType::F32,
            };
            // literals take the compute type of the op (f64 arithmetic on statistics), and
            // the value eager converts them to (a half op's literal rounded to its type)
            let lit_ty = if ty == ScalarType::F64 {
                ScalarType::F64
            } else {
                ScalarType::F32
            };
            let half = half_type(node.ty.dtype);
            let literal = |v: f64| half.map_or(v, |h| h.round_f64(v));
            let operand = |body: &mut Vec<Stmt>, a: &Arg| -> ValueId {
                match a {
                    Arg::Value(v) => value_of[v],
                    Arg::Scalar(s) => push(body, Expr::Const(literal(s.to_f64())), lit_ty, true),
                }
            };
            let expr = match &node.op {
                Op::Input => {
                    buffers.push(Buffer {
                        name: self.name(id),
                        role: Role::Input,
                        dtype: node.ty.dtype,
                        shape: node.ty.shape.clone(),
                        index: value_loops[&id].clone(),
                    });
                    Expr::Load(buffers.len() - 1)
                }
                Op::Full { value, .. } => Expr::Const(literal(value.to_f64())),
                Op::Unary(u) => Expr::Unary(*u, operand(&mut body, &node.args[0])),
                Op::Binary(b) => {
                    let x = operand(&mut body, &node.args[0]);
                    let y = operand(&mut body, &node.args[1]);
                    Expr::Binary(*b, x, y)
                }
                Op::Where => {
                    let c = operand(&mut body, &node.args[0]);
                    let x = operand(&mut body, &node.args[1]);
                    let y = operand(&mut body, &node.args[2]);
                    Expr::Where(c, x, y)
                }
                Op::Cast { .. } => {
                    let x = operand(&mut body, &node.args[0]);
                    if body[x].ty == ScalarType::Bool {
                        Expr::BoolToF32(x)
                    } else if ty == ScalarType::F64 && body[x].ty == ScalarType::F32 {
                        Expr::Widen(x)
                    } else if ty == ScalarType::F32 && body[x].ty == ScalarType::F64 {
                        Expr::Narrow(x)
                    } else if let Some(h) = half.filter(|_| used.contains(&id)) {
                        Expr::Round(h, x)
                    } else {
                        // f32 to f32, or to a half type only stored (its store rounds);
                        // other casts are rejected by check_types
                        value_of.insert(id, x);
                        continue;
                    }
                }
                Op::Reduce { op, .. } => {
                    let x = operand(&mut body, &node.args[0]);
                    if self.identity.contains(&id) {
                        // a sum (and a mean) of one element is 0 + x, as eager and torch
                        // accumulate it: -0 becomes +0 (a max or min is x itself)
                        // (an f32 sum accumulating in f64 widens x first)
                        let adds = matches!(op, ReduceOp::Sum | ReduceOp::Mean);
                        let x_row = body[x].row;
                        let widens = ty == ScalarType::F64 && body[x].ty == ScalarType::F32;
                        if adds && (body[x].ty == ty || widens) && ty != ScalarType::Bool {
                            let x = if widens {
                                push(&mut body, Expr::Widen(x), ty, x_row)
                            } else {
                                x
                            };
                            let zero = push(&mut body, Expr::Const(0.0), ty, true);
                            let sum = Expr::Binary(BinaryOp::Add, x, zero);
                            let v = push(&mut body, sum, ty, x_row);
                            value_of.insert(id, v);
                        } else {
                            value_of.insert(id, x);
                        }
                        continue;
                    }
                    match op {
                        // the total, then the division, in the mean's type
                        ReduceOp::Mean => {
                            let s = push(&mut body, Expr::Reduce(ReduceOp::Sum, x), ty, true);
                            let n = match dims.last() {
                                Some(Dim::Const(n)) => {
                                    push(&mut body, Expr::Const(*n as f64), ty, true)
                                }
                                _ => push(&mut body, Expr::InnerLen, ty, true),
                            };
                            Expr::Binary(BinaryOp::Div, s, n)
                        }
                        op => Expr::Reduce(*op, x),
                    }
                }
                other => return self.fail(format!("`{}` has no loop form", other.name())),
            };
            let mut v = push(&mut body, expr, ty, row);
            // a half result read by another op is first rounded to its type (loads and
            // literals already hold such values; a store rounds by itself)
            if let Some(h) = half.filter(|_| used.contains(&id)) {
                if !matches!(
                    body[v].expr,
                    Expr::Load(_) | Expr::Const(_) | Expr::Round(..)
                ) {
                    v = push(&mut body, Expr::Round(h, v), ty, row);
                }
            }
            value_of.insert(id, v);
        }
        let mut stores = Vec::new();
        for &o in self.g.outputs() {
            let node = self.g.node(o);
            if node.op == Op::Input {
                return self.fail("an output is an input of the kernel");
            }
            buffers.push(Buffer {
                name: format!("%out{}", stores.len()),
                role: Role::Output,
                dtype: node.ty.dtype,
                shape: node.ty.shape.clone(),
                index: value_loops[&o].clone(),
            });
            stores.push(Store {
                buffer: buffers.len() - 1,
                value: value_of[&o],
            });
        }
        reciprocal_row_divisors(&mut body, &mut stores);
        let phases = plan_phases(&body, &stores);
        let mut nest = LoopNest {
            name: self.g.name().to_string(),
            dims,
            reduces,
            buffers,
            body,
            stores,
            phases,
        };
        reuse_expensive(&mut nest);
        Ok(nest)
    }

    fn name(&self, id: NodeId) -> String {
        match self.g.input_name(id) {
            Some(n) => format!("%{n}"),
            None => format!("%{}", id.index()),
        }
    }

    /// True when every operand of `args` converts exactly to their promoted dtype (torch's
    /// `result_type`) as the loop form computes them: bools, the same dtype, f16/bf16 into
    /// f32, literals whose f32 constant is their value in that dtype.
    fn promotion_is_exact(&self, args: &[Arg]) -> bool {
        let types: Vec<ArgType> = args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => ArgType::Tensor(self.g.node(*v).ty.clone()),
                Arg::Scalar(s) => ArgType::Scalar(*s),
            })
            .collect();
        let compute = result_type(&types);
        args.iter().all(|a| match a {
            Arg::Value(v) => {
                let t = self.g.node(*v).ty.dtype;
                t == compute
                    || t == DType::Bool
                    || compute == DType::F32 && matches!(t, DType::F16 | DType::BF16)
            }
            // a literal becomes an f32 constant: the same as its value in `compute` unless
            // a half type rounds it otherwise
            Arg::Scalar(s) => {
                let v = s.to_f64();
                let (r, f) = (compute.round_f64(v), DType::F32.round_f64(v));
                !compute.is_float() || r == f || r.is_nan() && f.is_nan()
            }
        })
    }

    /// Values must be f32 (or, with `half`, f16/bf16 computed as f32), or bool: comparison
    /// results, masks read from memory (as `where` conditions or cast to f32) and bool
    /// outputs.
    fn check_types(&self) -> Result<(), Unsupported> {
        for (id, n) in self.g.nodes() {
            let dt = n.ty.dtype;
            let float = |t: DType| is_float(t, self.half);
            // the table's dtype rule says which ops give bools (comparisons, `isnan`,
            // logical ops) and which take only bools here (bitwise ops: the loop form has
            // no integer values)
            let rule = match &n.op {
                Op::Unary(u) => Some(u.info().dtype),
                Op::Binary(b) => Some(b.info().dtype),
                _ => None,
            };
            let comparison = matches!(&n.op, Op::Binary(b) if b.is_comparison());
            // f64 values: statistics (`sum {dtype = f64}`, `mean`), the arithmetic on them
            // and casts to and from f32; never in buffers
            let f64_ops = matches!(
                &n.op,
                Op::Unary(
                    UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip
                ) | Op::Binary(
                    BinaryOp::Add
                        | BinaryOp::Sub
                        | BinaryOp::Mul
                        | BinaryOp::Div
                        | BinaryOp::Maximum
                        | BinaryOp::Minimum
                ) | Op::Full { .. }
                    | Op::Reduce {
                        op: ReduceOp::Sum | ReduceOp::Mean,
                        ..
                    }
                    | Op::Cast { .. }
            );
            let ok = match &n.op {
                _ if dt == DType::F64 => f64_ops,
                Op::Input => float(dt) || dt == DType::Bool,
                Op::Full { .. } | Op::Reduce { .. } => float(dt),
                Op::Unary(_) | Op::Binary(_) => match rule {
                    Some(DTypeRule::Bool | DTypeRule::Integral) => dt == DType::Bool,
                    _ => float(dt),
                },
                Op::Where => float(dt),
                // a cast to a half type is the rounding its store does, or (read inside the
                // nest) a rounding step of its own
                Op::Cast { dtype } => {
                    *dtype == DType::F32 || (self.half && half_type(*dtype).is_some())
                }
                _ => true,
            };
            let operands_ok = n.args.iter().enumerate().all(|(i, a)| match a {
                Arg::Value(v) => {
                    let t = self.g.node(*v).ty.dtype;
                    match (&n.op, i) {
                        (Op::Where, 0) => t == DType::Bool,
                        // f32 <-> f64 and bool -> f32 (not bool -> f64: the f64 values
                        // widen f32 ones)
                        (Op::Cast { .. }, _) if dt == DType::F64 => float(t),
                        (Op::Cast { .. }, _) => {
                            float(t) || t == DType::Bool || (t == DType::F64 && dt != DType::Bool)
                        }
                        // a sum or mean converting f32 values to f64
                        (Op::Reduce { .. }, _) if dt == DType::F64 => float(t) || t == DType::F64,
                        _ if dt == DType::F64 => t == DType::F64,
                        _ if rule == Some(DTypeRule::Integral) => t == DType::Bool,
                        _ if rule == Some(DTypeRule::Bool) && !comparison => {
                            float(t) || t == DType::Bool
                        }
                        _ => float(t),
                    }
                }
                Arg::Scalar(_) => true,
            });
            // comparisons and logical ops convert their operands to the promoted dtype
            // first (a subnormal f32 beside an f16 tensor compares as 0); the loop form
            // compares f32 values, which is the same only when that conversion is exact
            let converts =
                comparison || matches!(&n.op, Op::Binary(_)) && rule == Some(DTypeRule::Bool);
            if converts && !self.promotion_is_exact(&n.args) {
                return self.fail(format!(
                    "{} ({}) converts an operand to a narrower type first",
                    self.name(id),
                    n.op.name()
                ));
            }
            if !ok || !operands_ok {
                return self.fail(format!(
                    "{} ({} : {}) has a dtype the loop form does not handle",
                    self.name(id),
                    n.op.name(),
                    n.ty
                ));
            }
            if self.g.outputs().contains(&id) && !is_float(dt, self.half) && dt != DType::Bool {
                return self.fail(format!(
                    "output {} is of dtype {dt}, which the loop form does not store",
                    self.name(id)
                ));
            }
        }
        Ok(())
    }

    fn unify(&mut self) -> Result<(), Unsupported> {
        let ids: Vec<NodeId> = self.g.nodes().map(|(id, _)| id).collect();
        for id in ids {
            let node = self.g.node(id);
            match &node.op {
                Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } => {
                    let operands: Vec<NodeId> = node
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            Arg::Value(v) => Some(*v),
                            Arg::Scalar(_) => None,
                        })
                        .collect();
                    for v in operands {
                        self.unify_broadcast(v, id)?;
                    }
                }
                Op::Reduce { dims, keepdim, .. } => {
                    let Arg::Value(x) = node.args[0] else {
                        return self.fail("a reduction of a literal");
                    };
                    let rank = self.dims(x).len();
                    let mut reduced: Vec<usize> = if dims.is_empty() {
                        (0..rank).collect()
                    } else {
                        dims.iter()
                            .filter_map(|&d| kiln_ir::shape::normalize_dim(d, rank))
                            .collect()
                    };
                    reduced.sort_unstable();
                    reduced.dedup();
                    // size-1 reduced dims fold nothing
                    let folding: Vec<usize> = reduced
                        .iter()
                        .copied()
                        .filter(|&d| !self.dims(x)[d].is_one())
                        .collect();
                    if folding.len() > 1 {
                        return self.fail("a reduction over several dims");
                    }
                    if folding.is_empty() {
                        self.identity.push(id);
                    }
                    for &d in &folding {
                        let v = self.var(x, d);
                        self.classes.union(v, self.reduced_var);
                    }
                    let mut out_dim = 0;
                    for d in 0..rank {
                        if reduced.contains(&d) {
                            if *keepdim {
                                out_dim += 1;
                            }
                            continue;
                        }
                        let (a, b) = (self.var(x, d), self.var(id, out_dim));
                        self.classes.union(a, b);
                        out_dim += 1;
                    }
                }
                Op::Input | Op::Full { .. } => {}
                other => return self.fail(format!("`{}` has no loop form", other.name())),
            }
        }
        Ok(())
    }

    /// Makes a row kernel's reduced dim the loop dim of its outputs' last dim. Unification
    /// joins the reduced dim with the last dim of every value that feeds the reduction, and
    /// the outputs' last dim with every value of the epilogue, but nothing joins the two when
    /// no value is both reduced and read by the epilogue (softmax's backward
    /// `y * (g - sum(g * y))` reads `g` on both sides; layer norm's backward reduces one
    /// tensor and scales another). Left apart they are two loop dims of the same size, and
    /// the reduction is recomputed for every element of the row: quadratic work. A reduction
    /// over the last dim, with keepdim, whose input indexes its other dims with the same
    /// loops as an output of the same rank and the same last size, is one row: its reduced
    /// dim and that output's last dim are one loop.
    fn merge_row_dims(&mut self) {
        let Some(&out) = self.g.outputs().first() else {
            return;
        };
        let out_dims = self.dims(out).to_vec();
        let rank = out_dims.len();
        let ids: Vec<NodeId> = self.g.nodes().map(|(id, _)| id).collect();
        for id in ids {
            let node = self.g.node(id);
            let Op::Reduce { dims, keepdim, .. } = &node.op else {
                continue;
            };
            if !*keepdim || self.identity.contains(&id) {
                continue;
            }
            let Arg::Value(x) = node.args[0] else {
                continue;
            };
            let x_dims = self.dims(x).to_vec();
            let folds_last = match dims.as_slice() {
                [d] => {
                    kiln_ir::shape::normalize_dim(*d, x_dims.len()) == Some(rank.wrapping_sub(1))
                }
                _ => false,
            };
            if !folds_last || x_dims.len() != rank || x_dims[rank - 1] != out_dims[rank - 1] {
                continue;
            }
            let same_rows = (0..rank - 1).all(|d| {
                (x_dims[d].is_one() && out_dims[d].is_one())
                    || self.classes.find(self.var(x, d)) == self.classes.find(self.var(out, d))
            });
            if same_rows {
                let last = self.var(out, rank - 1);
                self.classes.union(last, self.reduced_var);
            }
        }
    }

    /// Unifies operand `v`'s dims with result `r`'s, right-aligned, except broadcast 1s.
    fn unify_broadcast(&mut self, v: NodeId, r: NodeId) -> Result<(), Unsupported> {
        let (dv, dr) = (self.dims(v).to_vec(), self.dims(r).to_vec());
        if dv.len() > dr.len() {
            return self.fail("an operand of higher rank than its result");
        }
        let shift = dr.len() - dv.len();
        for (j, d) in dv.iter().enumerate() {
            let rd = &dr[j + shift];
            if d == rd {
                let (a, b) = (self.var(v, j), self.var(r, j + shift));
                self.classes.union(a, b);
            } else if !d.is_one() {
                return self.fail(format!("operand dim {d} does not broadcast to {rd}"));
            }
        }
        Ok(())
    }

    /// The loop dims: one per class of size other than 1, in the order of the outputs'
    /// dims, then the other values'; the reduced class last.
    #[allow(clippy::type_complexity)]
    fn loop_dims(&mut self) -> Result<(Vec<Dim>, HashMap<usize, usize>), Unsupported> {
        let mut order: Vec<NodeId> = self.g.outputs().to_vec();
        let mut rest: Vec<NodeId> = self.g.nodes().map(|(id, _)| id).collect();
        rest.sort_by_key(|id| std::cmp::Reverse(self.dims(*id).len()));
        order.extend(rest);
        let reduced = self.classes.find(self.reduced_var);
        let mut classes: Vec<(usize, Dim)> = Vec::new();
        let mut reduced_dim: Option<Dim> = None;
        for id in order {
            for (d, size) in self.dims(id).to_vec().iter().enumerate() {
                let c = self.classes.find(self.var(id, d));
                if size.is_one() && c != reduced {
                    continue;
                }
                if c == reduced {
                    reduced_dim = Some(size.clone());
                    continue;
                }
                if !classes.iter().any(|(k, _)| *k == c) {
                    classes.push((c, size.clone()));
                }
            }
        }
        let mut map: HashMap<usize, usize> = HashMap::new();
        let mut dims = Vec::new();
        for (c, size) in classes {
            map.insert(c, dims.len());
            dims.push(size);
        }
        if let Some(size) = reduced_dim {
            map.insert(reduced, dims.len());
            dims.push(size);
        }
        Ok((dims, map))
    }
}
