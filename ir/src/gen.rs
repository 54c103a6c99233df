//! Random well-formed graphs, for the property tests and `kiln fuzz`.
//!
//! A graph is built from a [`Recipe`] of raw random choices: a few inputs with small
//! constant or symbolic (`B`, `T`) shapes, then a sequence of candidate ops whose operands
//! are earlier values or scalar literals (NaN and ±inf among them). Each candidate is offered
//! to [`Graph::add_op`] and skipped when the op rejects its operands, so every built graph
//! verifies, and so does the graph of any recipe with steps, inputs or outputs left out:
//! shrinking (proptest's, or the fuzzer's minifier) works on the recipe.

use crate::Arg;
use crate::{
    BinaryOp, DType, Dim, Graph, InplaceOp, NodeId, Op, ReduceOp, Scalar, Shape, TensorType,
    UnaryOp,
};

/// The raw choices one graph is built from (see [`build`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// per input: dtype choice, rank, and one choice per dim
    pub inputs: Vec<(u8, u8, [u8; 3])>,
    /// per candidate op: the choices it consumes
    pub steps: Vec<[u32; 8]>,
    /// choices of extra outputs (the last node is always returned first)
    pub outputs: Vec<u32>,
    /// whether input dims may be symbolic
    pub symbolic: bool,
    /// draw from every unary and binary op of the table (otherwise the first 16 unary and
    /// 13 binary ops, the property tests' historical vocabulary)
    pub every_op: bool,
}

/// splitmix64: the next value of the deterministic generator whose state is `state`.
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Recipe {
    /// A recipe drawn from `seed` (splitmix64): 1 to 4 inputs, 1 to `max_steps` candidate
    /// steps and up to 2 extra outputs.
    pub fn random(seed: u64, max_steps: usize, symbolic: bool, every_op: bool) -> Recipe {
        let mut state = seed;
        let mut next = move || splitmix(&mut state);
        let inputs = (0..1 + next() % 4)
            .map(|_| {
                let v = next();
                (
                    v as u8,
                    (v >> 8) as u8,
                    [(v >> 16) as u8, (v >> 24) as u8, (v >> 32) as u8],
                )
            })
            .collect();
        let steps = (0..1 + next() as usize % max_steps.max(1))
            .map(|_| std::array::from_fn(|_| next() as u32))
            .collect();
        let outputs = (0..next() % 3).map(|_| next() as u32).collect();
        Recipe {
            inputs,
            steps,
            outputs,
            symbolic,
            every_op,
        }
    }
}

const INPUT_NAMES: [&str; 4] = ["x", "w", "3", "h.1"];
const DTYPES: [DType; 9] = [
    DType::F32,
    DType::F32,
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::Bool,
];

/// Builds the graph a recipe describes (never fails: rejected candidates are skipped, and a
/// recipe without inputs builds as one with a single f32 scalar input).
pub fn build(r: &Recipe) -> Graph {
    let mut g = Graph::new("gen");
    // a graph needs an input to start from: no inputs build as one f32 scalar
    let inputs = if r.inputs.is_empty() {
        &[(0, 0, [0; 3])][..]
    } else {
        &r.inputs[..]
    };
    for (i, (dt, rank, dims)) in inputs.iter().enumerate() {
        let shape: Shape = dims[..(*rank % 4) as usize]
            .iter()
            .map(|d| match d % 6 {
                4 if r.symbolic => Dim::sym("B"),
                5 if r.symbolic => Dim::sym("T"),
                k => Dim::Const(1 + (k % 4) as usize),
            })
            .collect();
        let ty = TensorType::new(DTYPES[*dt as usize % DTYPES.len()], shape);
        let name = INPUT_NAMES
            .get(i)
            .map_or_else(|| format!("in{i}"), |n| n.to_string());
        g.add_input(&name, ty).expect("input names are distinct");
    }
    let syms: Vec<Dim> = ["B", "T"]
        .into_iter()
        .map(Dim::sym)
        .filter(|s| {
            g.inputs()
                .iter()
                .any(|(_, n)| g.node(*n).ty.shape.dims().contains(s))
        })
        .collect();
    for (line, step) in r.steps.iter().enumerate() {
        let mut c = Choices { c: *step, i: 0 };
        let nodes: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
        let mut cx = Cx {
            g: &g,
            nodes: &nodes,
            syms: &syms,
            c: &mut c,
            every_op: r.every_op,
        };
        if let Some((op, args)) = cx.candidate() {
            let loc = (step[7] % 4 == 0).then(|| format!("gen.rs:{}:{}", line + 1, step[7] % 80));
            // Rejected candidates are simply skipped.
            let _ = g.add_op(op, &args, loc);
        }
    }
    let nodes: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
    let mut outs = vec![*nodes.last().expect("at least one input")];
    outs.extend(r.outputs.iter().map(|o| nodes[*o as usize % nodes.len()]));
    g.set_outputs(outs).expect("outputs are nodes");
    g
}

/// A cursor over one step's choices (it wraps around, mixing in the position).
struct Choices {
    c: [u32; 8],
    i: usize,
}

impl Choices {
    fn next(&mut self, n: usize) -> usize {
        let v = self.c[self.i % 8].rotate_left(7 * (self.i / 8) as u32);
        self.i += 1;
        if n == 0 {
            0
        } else {
            v as usize % n
        }
    }

    fn flag(&mut self) -> bool {
        self.next(2) == 1
    }
}

struct Cx<'a> {
    g: &'a Graph,
    nodes: &'a [NodeId],
    syms: &'a [Dim],
    c: &'a mut Choices,
    every_op: bool,
}

const SCALARS: [Scalar; 10] = [
    Scalar::Int(2),
    Scalar::Int(-3),
    Scalar::Float(0.5),
    Scalar::Float(-1e-5),
    Scalar::Float(f64::INFINITY),
    Scalar::Float(f64::NEG_INFINITY),
    Scalar::Float(f64::NAN),
    Scalar::Bool(true),
    Scalar::Float(1e20),
    Scalar::Int(0),
];

impl Cx<'_> {
    /// How many of `UnaryOp::ALL` the candidates draw from.
    fn unary_ops(&self) -> usize {
        if self.every_op {
            UnaryOp::ALL.len()
        } else {
            16
        }
    }

    /// How many of `BinaryOp::ALL` the candidates draw from.
    fn binary_ops(&self) -> usize {
        if self.every_op {
            BinaryOp::ALL.len()
        } else {
            13
        }
    }

    fn ty(&self, n: NodeId) -> &TensorType {
        &self.g.node(n).ty
    }

    fn node(&mut self) -> NodeId {
        self.nodes[self.c.next(self.nodes.len())]
    }

    /// A node whose type satisfies `f`, if any.
    fn node_where(&mut self, f: impl Fn(&TensorType) -> bool) -> Option<NodeId> {
        let ok: Vec<NodeId> = self
            .nodes
            .iter()
            .copied()
            .filter(|n| f(self.ty(*n)))
            .collect();
        (!ok.is_empty()).then(|| ok[self.c.next(ok.len())])
    }

    fn scalar(&mut self) -> Scalar {
        SCALARS[self.c.next(SCALARS.len())]
    }

    fn value_or_scalar(&mut self) -> Arg {
        if self.c.next(3) == 0 {
            Arg::Scalar(self.scalar())
        } else {
            Arg::Value(self.node())
        }
    }

    fn dtype(&mut self) -> DType {
        DTYPES[self.c.next(DTYPES.len())]
    }

    /// A dim index in `-rank..rank` (0 or -1 for rank 0).
    fn dim(&mut self, rank: usize) -> i64 {
        let r = rank.max(1) as i64;
        self.c.next(2 * r as usize) as i64 - r
    }

    /// A subset of `0..rank` (possibly empty, meaning all), some written negatively.
    fn dims(&mut self, rank: usize) -> Vec<i64> {
        let bits = self.c.next(1 << rank.min(6));
        (0..rank)
            .filter(|d| bits & (1 << d) != 0)
            .map(|d| {
                if self.c.flag() {
                    d as i64 - rank as i64
                } else {
                    d as i64
                }
            })
            .collect()
    }

    /// A small shape of constants and bound symbols.
    fn shape(&mut self) -> Shape {
        let rank = self.c.next(4);
        (0..rank)
            .map(|_| match self.c.next(6) {
                5 if !self.syms.is_empty() => self.syms[self.c.next(self.syms.len())].clone(),
                k => Dim::Const(k % 4 + 1),
            })
            .collect()
    }

    fn candidate(&mut self) -> Option<(Op, Vec<Arg>)> {
        let x = self.node();
        let t = self.ty(x).clone();
        let r = t.shape.rank();
        let v = Arg::Value;
        Some(match self.c.next(24) {
            0 => (
                Op::Unary(UnaryOp::ALL[self.c.next(self.unary_ops())]),
                vec![v(x)],
            ),
            1 | 2 => {
                let y = self.node();
                (
                    Op::Binary(BinaryOp::ALL[self.c.next(self.binary_ops())]),
                    vec![v(x), v(y)],
                )
            }
            3 => {
                let s = Arg::Scalar(self.scalar());
                let args = if self.c.flag() {
                    vec![v(x), s]
                } else {
                    vec![s, v(x)]
                };
                (
                    Op::Binary(BinaryOp::ALL[self.c.next(self.binary_ops())]),
                    args,
                )
            }
            4 => {
                let cond = self.node_where(|t| t.dtype == DType::Bool)?;
                let (a, b) = (self.value_or_scalar(), self.value_or_scalar());
                (Op::Where, vec![v(cond), a, b])
            }
            5 => {
                let op = ReduceOp::ALL[self.c.next(4)];
                let (dims, keepdim) = (self.dims(r), self.c.flag());
                (
                    Op::Reduce {
                        op,
                        dims,
                        keepdim,
                        dtype: None,
                    },
                    vec![v(x)],
                )
            }
            6 => {
                let (dim, keepdim) = (self.dim(r), self.c.flag());
                (Op::Argmax { dim, keepdim }, vec![v(x)])
            }
            7 => {
                let (dims, correction, keepdim) =
                    (self.dims(r), self.c.next(3) as i64, self.c.flag());
                (
                    Op::Var {
                        dims,
                        correction,
                        keepdim,
                    },
                    vec![v(x)],
                )
            }
            8 => {
                let dim = self.dim(r);
                let op = if self.c.flag() {
                    Op::Softmax { dim }
                } else {
                    Op::LogSoftmax { dim }
                };
                (op, vec![v(x)])
            }
            9 => self.norm(x, &t)?,
            10 => self.linear(x, &t)?,
            11 => (Op::Matmul, vec![v(x), v(self.node())]),
            12 => (
                Op::Reshape {
                    shape: self.reshaped(&t.shape),
                },
                vec![v(x)],
            ),
            13 => {
                let mut dims: Vec<usize> = (0..r).collect();
                for i in (1..r).rev() {
                    dims.swap(i, self.c.next(i + 1));
                }
                (Op::Permute { dims }, vec![v(x)])
            }
            14 => {
                let (dim0, dim1) = (self.dim(r), self.dim(r));
                (Op::Transpose { dim0, dim1 }, vec![v(x)])
            }
            15 => {
                let mut shape: Shape = t
                    .shape
                    .dims()
                    .iter()
                    .map(|d| {
                        if d.is_one() && self.c.flag() {
                            Dim::Const(3)
                        } else {
                            d.clone()
                        }
                    })
                    .collect();
                if self.c.flag() {
                    shape.0.insert(0, Dim::Const(2));
                }
                (Op::Expand { shape }, vec![v(x)])
            }
            16 => self.slice(x, &t)?,
            17 => {
                let mut args = vec![v(x)];
                for _ in 0..self.c.next(3) {
                    let same_rank = |u: &TensorType| u.shape.rank() == r;
                    args.push(v(self.node_where(same_rank)?));
                }
                (Op::Cat { dim: self.dim(r) }, args)
            }
            18 => {
                let idx = self.node_where(|u| u.dtype.is_int() && u.shape.rank() == 1)?;
                (Op::IndexSelect { dim: self.dim(r) }, vec![v(x), v(idx)])
            }
            19 => (
                Op::Cast {
                    dtype: self.dtype(),
                },
                vec![v(x)],
            ),
            20 => (Op::Contiguous, vec![v(x)]),
            21 => {
                let diagonal = self.c.next(5) as i64 - 2;
                let op = if self.c.flag() {
                    Op::Triu { diagonal }
                } else {
                    Op::Tril { diagonal }
                };
                (op, vec![v(x)])
            }
            22 => {
                let op = InplaceOp::ALL[self.c.next(4)];
                (Op::Inplace(op), vec![v(x), self.value_or_scalar()])
            }
            _ => (self.creation(), vec![]),
        })
    }

    fn norm(&mut self, x: NodeId, t: &TensorType) -> Option<(Op, Vec<Arg>)> {
        let r = t.shape.rank();
        let ndim = 1 + self.c.next(r.clamp(1, 2));
        let eps = [1e-5, 1e-6, 0.1][self.c.next(3)];
        let tail: Shape = t.shape.dims()[r.saturating_sub(ndim)..]
            .iter()
            .cloned()
            .collect();
        let param = TensorType::new(t.dtype, tail);
        let mut args = vec![Arg::Value(x)];
        let layer = self.c.flag();
        for _ in 0..self.c.next(if layer { 3 } else { 2 }) {
            args.push(Arg::Value(self.node_where(|u| *u == param)?));
        }
        let op = if layer {
            Op::LayerNorm {
                ndim,
                eps: eps.into(),
            }
        } else {
            Op::RmsNorm {
                ndim,
                eps: eps.into(),
            }
        };
        Some((op, args))
    }

    fn linear(&mut self, x: NodeId, t: &TensorType) -> Option<(Op, Vec<Arg>)> {
        let inner = t.shape.dims().last()?.clone();
        let w = self.node_where(|u| {
            u.dtype == t.dtype && u.shape.rank() == 2 && u.shape.dims()[1] == inner
        })?;
        let mut args = vec![Arg::Value(x), Arg::Value(w)];
        if self.c.flag() {
            let bias = TensorType::new(
                t.dtype,
                [self.ty(w).shape.dims()[0].clone()].into_iter().collect(),
            );
            args.push(Arg::Value(self.node_where(|u| *u == bias)?));
        }
        Some((Op::Linear, args))
    }

    fn slice(&mut self, x: NodeId, t: &TensorType) -> Option<(Op, Vec<Arg>)> {
        let dim = self.dim(t.shape.rank());
        let d = t.shape.normalize_dim(dim)?;
        let n = t.shape.dims()[d].as_const().unwrap_or(1);
        let start = self.c.next(n + 1);
        let end = start + self.c.next(n - start + 1);
        let step = 1 + self.c.next(3);
        Some((
            Op::Slice {
                dim,
                start,
                end,
                step,
            },
            vec![Arg::Value(x)],
        ))
    }

    /// A shape with the same element count: flattened, with a unit dim, or reversed.
    fn reshaped(&mut self, s: &Shape) -> Shape {
        match (self.c.next(4), s.numel()) {
            (0, Some(n)) => Shape::of(&[n]),
            (1, _) => std::iter::once(Dim::Const(1))
                .chain(s.dims().iter().cloned())
                .collect(),
            (2, _) => s.dims().iter().rev().cloned().collect(),
            _ => s
                .dims()
                .iter()
                .cloned()
                .chain(std::iter::once(Dim::Const(1)))
                .collect(),
        }
    }

    fn creation(&mut self) -> Op {
        let dtype = self.dtype();
        match self.c.next(5) {
            0 => Op::Full {
                shape: self.shape(),
                value: self.scalar(),
                dtype,
            },
            1 => {
                let start = self.c.next(5) as f64 - 2.0;
                let step = [1.0, 0.5, -1.0, 2.0][self.c.next(4)];
                let end = start + step * self.c.next(6) as f64;
                Op::Arange {
                    start: start.into(),
                    end: end.into(),
                    step: step.into(),
                    dtype,
                }
            }
            2 => Op::Rand {
                shape: self.shape(),
                dtype,
                seed: self.c.next(1000) as u64,
            },
            3 => Op::Randn {
                shape: self.shape(),
                dtype,
                seed: self.c.next(1000) as u64,
            },
            _ => {
                let shape = Shape::of(&[1 + self.c.next(3), 1 + self.c.next(3)]);
                let n = shape.numel().unwrap_or(0);
                let values = crate::Constant::new((0..n).map(|_| self.scalar().to_f64()).collect());
                Op::FromVec {
                    values,
                    shape,
                    dtype,
                }
            }
        }
    }
}
