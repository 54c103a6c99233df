//! The e-class analysis: every class knows its type (dtype and shape, symbolic dims
//! included), the bytes a kernel reading it must load, and its value when it is a constant
//! (a scalar literal, or a tensor filled with one value).
//!
//! Constant folding lives here: a class whose value is known to be one constant gets a
//! `full` node, so a chain of ops on constants collapses to one `full`.

use super::lang::{Interner, Lit, TNode};
use egg::{Analysis, DidMerge, EGraph, Id};
use kiln_ir::ops::{eval_int_binary, eval_int_unary};
use kiln_ir::{ArgType, DType, Dim, Op, ReduceOp, Scalar, TensorType};

/// What the analysis knows about an e-class.
#[derive(Clone, Debug, PartialEq)]
pub enum ClassData {
    /// a scalar literal operand
    Scalar(Scalar),
    /// a tensor value
    Tensor {
        /// its type
        ty: TensorType,
        /// bytes a kernel reading it loads from memory (less than its size for a broadcast
        /// view of a smaller tensor)
        read_bytes: f64,
        /// the one value every element has, when known
        konst: Option<Scalar>,
    },
}

impl ClassData {
    /// The tensor type, if this is a tensor.
    pub fn ty(&self) -> Option<&TensorType> {
        match self {
            ClassData::Tensor { ty, .. } => Some(ty),
            ClassData::Scalar(_) => None,
        }
    }

    /// As an operand type for `ir::infer`.
    pub fn arg_type(&self) -> ArgType {
        match self {
            ClassData::Scalar(s) => ArgType::Scalar(*s),
            ClassData::Tensor { ty, .. } => ArgType::Tensor(ty.clone()),
        }
    }
}

/// Sizes assumed for symbolic dims when counting bytes for the cost model.
pub const SYMBOL_HINT: f64 = 64.0;

/// Bytes of a tensor of type `ty` (symbolic dims at [`SYMBOL_HINT`]).
pub fn bytes_of(ty: &TensorType) -> f64 {
    let n: f64 = ty
        .shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Const(c) => *c as f64,
            Dim::Sym(_) => SYMBOL_HINT,
        })
        .product();
    n * ty.dtype.size_bytes() as f64
}

/// The analysis state: the interned groups, and the graph inputs' types.
#[derive(Default)]
pub struct TensorAnalysis {
    /// interned group bodies
    pub interner: Interner,
    /// the type of each graph input
    pub input_types: Vec<TensorType>,
    /// the source location of the classes loaded from the graph
    pub locs: Vec<(Id, String)>,
}

/// The data of `id`'s class.
pub fn data(egraph: &EGraph<TNode, TensorAnalysis>, id: Id) -> &ClassData {
    &egraph[id].data
}

/// An integer or bool constant as an integer (a float is `None`).
fn int_of(s: Scalar) -> Option<i64> {
    match s {
        Scalar::Int(i) => Some(i),
        Scalar::Bool(b) => Some(i64::from(b)),
        Scalar::Float(_) => None,
    }
}

fn fold(op: &Op, args: &[&ClassData], out: &TensorType) -> Option<Scalar> {
    let konst = |d: &ClassData| match d {
        ClassData::Scalar(s) => Some(*s),
        ClassData::Tensor { konst, .. } => *konst,
    };
    // integer arithmetic wraps (`wrap_f64`); casts and literals saturate (`round_f64`)
    let round_as = |v: f64, wrap: bool| -> Scalar {
        let v = if wrap {
            out.dtype.wrap_f64(v)
        } else {
            out.dtype.round_f64(v)
        };
        match out.dtype {
            DType::Bool => Scalar::Bool(v != 0.0),
            DType::I32 | DType::I64 => Scalar::Int(v as i64),
            _ => Scalar::Float(v),
        }
    };
    let round = |v: f64| round_as(v, false);
    match op {
        // an integer literal stays exact (through f64, i64::MAX - 1 would not)
        Op::Full {
            value: Scalar::Int(i),
            dtype: DType::I64,
            ..
        } => Some(Scalar::Int(*i)),
        Op::Full { value, .. } => Some(round(value.to_f64())),
        Op::Unary(u) => {
            let x = konst(args[0])?;
            if let Some(r) = int_of(x).and_then(|i| eval_int_unary(*u, i, out.dtype)) {
                return Some(if out.dtype == DType::Bool {
                    Scalar::Bool(r != 0)
                } else {
                    Scalar::Int(r)
                });
            }
            // an integer operand of a float op is converted first (`cos` of an i32 computes
            // in f32, where 2^31 - 1 is 2^31)
            let xv = if out.dtype.is_float() {
                out.dtype.round_f64(x.to_f64())
            } else {
                x.to_f64()
            };
            Some(round_as(u.eval_f64(xv), true))
        }
        Op::Binary(b) => {
            let (x, y) = (konst(args[0])?, konst(args[1])?);
            // integers fold in integer arithmetic: f64 is not exact past 2^53, and wraps
            // nothing
            if let (Some(i), Some(j)) = (int_of(x), int_of(y)) {
                if let Some(r) = eval_int_binary(*b, i, j, out.dtype) {
                    return Some(Scalar::Int(r));
                }
                if out.dtype.is_int() {
                    // an integer result without an exact rule (division by zero): unfolded
                    return None;
                }
            }
            // both operands in the promoted dtype, where the op computes (and compares)
            let common = kiln_ir::result_type(&[args[0].arg_type(), args[1].arg_type()]);
            let (xv, yv) = (common.round_f64(x.to_f64()), common.round_f64(y.to_f64()));
            Some(round_as(b.eval_f64(xv, yv), true))
        }
        Op::Cast { .. } => match (konst(args[0])?, out.dtype) {
            // an integer to an integer wraps, exactly as eager's cast does (not by way of
            // f64, where i64::MAX is 2^63 and wraps to 0 instead of -1)
            (Scalar::Int(i), DType::I32) => Some(Scalar::Int(i64::from(i as i32))),
            (Scalar::Int(i), DType::I64) => Some(Scalar::Int(i)),
            (c, _) => Some(round(c.to_f64())),
        },
        Op::Reshape { .. }
        | Op::Expand { .. }
        | Op::Transpose { .. }
        | Op::Permute { .. }
        | Op::Slice { .. }
        | Op::Contiguous => konst(args[0]),
        Op::Reduce {
            op: ReduceOp::Max | ReduceOp::Min | ReduceOp::Mean,
            ..
        } => {
            // over no elements the result is not the constant: a mean of none is NaN (and
            // symbolic sizes are never 0: sizes 0 and 1 are specialised)
            if let ClassData::Tensor { ty, .. } = args[0] {
                if ty.shape.dims().contains(&Dim::Const(0)) {
                    return None;
                }
            }
            let c = konst(args[0])?;
            (out.dtype.is_float()
                || !matches!(
                    op,
                    Op::Reduce {
                        op: ReduceOp::Mean,
                        ..
                    }
                ))
            .then(|| round(c.to_f64()))
        }
        _ => None,
    }
}

impl Analysis<TNode> for TensorAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut EGraph<TNode, Self>, enode: &TNode, _id: Id) -> ClassData {
        match enode {
            TNode::Input(n) => {
                let ty = egraph.analysis.input_types[*n as usize].clone();
                ClassData::Tensor {
                    read_bytes: bytes_of(&ty),
                    ty,
                    konst: None,
                }
            }
            TNode::Lit(l) => ClassData::Scalar(l.scalar()),
            TNode::Op(o, args) => {
                let op = o.expect_op().clone();
                let datas: Vec<&ClassData> = args.iter().map(|a| &egraph[*a].data).collect();
                let types: Vec<ArgType> = datas.iter().map(|d| d.arg_type()).collect();
                let ty = kiln_ir::infer(&op, &types)
                    .unwrap_or_else(|e| panic!("an ill-typed node entered the e-graph: {e}"));
                let konst = if matches!(op, Op::Rand { .. } | Op::Randn { .. }) {
                    None
                } else {
                    fold(&op, &datas, &ty)
                };
                let read_bytes = match (&op, datas.first()) {
                    (Op::Expand { .. }, Some(ClassData::Tensor { read_bytes, .. })) => {
                        read_bytes.min(bytes_of(&ty))
                    }
                    _ => bytes_of(&ty),
                };
                ClassData::Tensor {
                    ty,
                    read_bytes,
                    konst,
                }
            }
            TNode::Group(g, _) => {
                let ty = egraph.analysis.interner.groups[g.0 as usize].ty.clone();
                ClassData::Tensor {
                    read_bytes: bytes_of(&ty),
                    ty,
                    konst: None,
                }
            }
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        match (a, b) {
            (
                ClassData::Tensor {
                    read_bytes: ra,
                    konst: ka,
                    ..
                },
                ClassData::Tensor {
                    read_bytes: rb,
                    konst: kb,
                    ..
                },
            ) => {
                let mut changed_a = false;
                let mut changed_b = false;
                if rb < *ra {
                    *ra = rb;
                    changed_a = true;
                } else if *ra < rb {
                    changed_b = true;
                }
                match (&ka, kb) {
                    (None, Some(k)) => {
                        *ka = Some(k);
                        changed_a = true;
                    }
                    (Some(_), None) => changed_b = true,
                    _ => {}
                }
                DidMerge(changed_a, changed_b)
            }
            _ => DidMerge(false, false),
        }
    }

    fn modify(egraph: &mut EGraph<TNode, Self>, id: Id) {
        let ClassData::Tensor {
            ty,
            konst: Some(value),
            ..
        } = egraph[id].data.clone()
        else {
            return;
        };
        let full = Op::Full {
            shape: ty.shape.clone(),
            value,
            dtype: ty.dtype,
        };
        let node = TNode::op(&full, &[]);
        if !egraph[id].nodes.contains(&node) {
            let f = egraph.add(node);
            egraph.union(id, f);
        }
    }
}

/// Adds `op` applied to `args` if it type-checks; `None` (and nothing added) otherwise.
pub fn add_op(egraph: &mut EGraph<TNode, TensorAnalysis>, op: &Op, args: &[Id]) -> Option<Id> {
    let types: Vec<ArgType> = args.iter().map(|a| egraph[*a].data.arg_type()).collect();
    kiln_ir::infer(op, &types).ok()?;
    Some(egraph.add(TNode::op(op, args)))
}

/// Adds a scalar literal.
pub fn add_lit(egraph: &mut EGraph<TNode, TensorAnalysis>, s: Scalar) -> Id {
    egraph.add(TNode::Lit(Lit::of(s)))
}
