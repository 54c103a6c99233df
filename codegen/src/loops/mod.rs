//! Loop nests: the backend-neutral form a kernel group is lowered to before code generation.
//!
//! A [`LoopNest`] iterates over loop dims (outer first); the last dim is the *inner* loop,
//! and in a reducing nest it is the dim every reduction folds over. Each buffer (a kernel
//! input or output) says which loop dim indexes each of its dims, so its element offset at a
//! point is a dot product of the loop indices with its strides (0 where it is broadcast);
//! strides come from the tensors at run time, so strided and broadcast inputs need no copy.
//! The body is a scalar SSA program evaluated at every point; values that do not depend on
//! the inner index (*row* values: reductions, per-row loads) are computed once per row.
//! [`Phase`]s order the work of one row: row values, inner loops that fold reductions
//! (recomputing the point values they need rather than storing them), and the loop that
//! stores the outputs. The CPU backend turns a nest into Cranelift IR; the CUDA backend
//! lowers the same form.

mod chains;
mod display;
mod lower;
mod phases;
mod ranges;
mod row_divisors;

pub use chains::{eval_chain, unary_chains, Chain, ChainStep};
pub use lower::{lower_kernel, lower_kernel_half, Unsupported};
pub(crate) use phases::operands;
pub use ranges::{value_ranges, ValueRange};

use kiln_ir::{BinaryOp, DType, Dim, ReduceOp, Shape, UnaryOp};

/// A value of the body: an index into [`LoopNest::body`].
pub type ValueId = usize;

/// Whether a buffer is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// read by the nest
    Input,
    /// written by the nest
    Output,
}

/// A tensor the nest reads or writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    /// the value's name in the kernel (`%arg0`, `%v13`)
    pub name: String,
    /// read or written
    pub role: Role,
    /// element type
    pub dtype: DType,
    /// the value's shape
    pub shape: Shape,
    /// for each dim of the buffer, the loop dim indexing it (`None`: a size-1 dim)
    pub index: Vec<Option<usize>>,
}

/// The scalar type of a body value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// a 32-bit float
    F32,
    /// a comparison result (a mask in vector code)
    Bool,
    /// a 64-bit float: statistics the IR asks to keep in f64 (`sum {dtype = f64}`, the
    /// arithmetic on them, exact products of promoted f32 values feeding a sum)
    F64,
}

/// One body instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// the element of input buffer `.0` at the current point
    Load(usize),
    /// a literal
    Const(f64),
    /// the inner loop's length, as a float (a mean's divisor over a symbolic dim)
    InnerLen,
    /// a pointwise op on one value
    Unary(UnaryOp, ValueId),
    /// a pointwise op on two values
    Binary(BinaryOp, ValueId, ValueId),
    /// `cond ? a : b`
    Where(ValueId, ValueId, ValueId),
    /// a bool as 0.0 / 1.0
    BoolToF32(ValueId),
    /// an f32 value as f64 (exact)
    Widen(ValueId),
    /// an f64 value rounded to f32
    Narrow(ValueId),
    /// an f32 value rounded to a half type (`.0` is f16 or bf16) and widened back: what a
    /// store to a half buffer and a load from it give, so that a half value used inside
    /// the nest is the one eager computes (its op's result rounded to the half type)
    Round(DType, ValueId),
    /// the fold of a point value over the inner loop (sum, max or min); a row value
    Reduce(ReduceOp, ValueId),
}

/// A body instruction with its type and level.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// what it computes
    pub expr: Expr,
    /// its scalar type
    pub ty: ScalarType,
    /// true when the value is constant along the inner loop (computed once per row)
    pub row: bool,
}

#[cfg(test)]
impl Stmt {
    /// An f32 statement (a point value, or a row value when `row`), for tests.
    pub(crate) fn f32(expr: Expr, row: bool) -> Stmt {
        Stmt {
            expr,
            ty: ScalarType::F32,
            row,
        }
    }
}

/// A write of a body value to an output buffer at the current point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    /// the output buffer
    pub buffer: usize,
    /// the stored value
    pub value: ValueId,
}

/// One step of the work done per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// row values computed once, in order
    Row(Vec<ValueId>),
    /// an inner loop: computes the point values in order at each index, folds the
    /// reductions, and performs the stores (indices into [`LoopNest::stores`])
    Inner {
        /// point values computed at each index
        point: Vec<ValueId>,
        /// reductions folded by this loop (their results are row values after it)
        reduces: Vec<ValueId>,
        /// stores of point values
        stores: Vec<usize>,
    },
    /// stores of row values, once per row
    RowStores(Vec<usize>),
}

/// A kernel group lowered to loops.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopNest {
    /// the kernel's name (`k3_row`)
    pub name: String,
    /// loop dims, outer first (sizes constant or symbolic)
    pub dims: Vec<Dim>,
    /// true when the inner (last) loop dim is folded by reductions
    pub reduces: bool,
    /// inputs, then outputs
    pub buffers: Vec<Buffer>,
    /// the body, in dependency order
    pub body: Vec<Stmt>,
    /// the writes of outputs
    pub stores: Vec<Store>,
    /// the work of one row, in order
    pub phases: Vec<Phase>,
}

impl LoopNest {
    /// The number of buffers the nest reads.
    pub fn input_count(&self) -> usize {
        self.buffers
            .iter()
            .filter(|b| b.role == Role::Input)
            .count()
    }

    /// The loop dim of the inner loop, if the nest has loops.
    pub fn inner(&self) -> Option<usize> {
        self.dims.len().checked_sub(1)
    }
}

/// The f32 value `c` when body value `v` is `widen(c) * widen(c)`: the f64 square of an f32
/// value (the sum of squares of a norm or a variance, as decompose writes it), which both
/// CPU tiers compute as an f32 square.
pub(crate) fn square_of_widened(body: &[Stmt], v: ValueId) -> Option<ValueId> {
    let Expr::Binary(BinaryOp::Mul, x, y) = body[v].expr else {
        return None;
    };
    match body[x].expr {
        Expr::Widen(c) if x == y && body[c].ty == ScalarType::F32 => Some(c),
        _ => None,
    }
}

/// `x` when body value `t` is `x·x·(-0.5)` (either operand order) in f32: the argument of
/// `exp` that the code generators compute as `e^(-x²/2)` directly.
pub(crate) fn half_square_of(body: &[Stmt], t: ValueId) -> Option<ValueId> {
    let f32_mul = |v: ValueId| match body[v].expr {
        Expr::Binary(BinaryOp::Mul, a, c) if body[v].ty == ScalarType::F32 => Some((a, c)),
        _ => None,
    };
    let (p, q) = f32_mul(t)?;
    let is_minus_half = |v: ValueId| matches!(body[v].expr, Expr::Const(c) if c == -0.5);
    let sq = if is_minus_half(q) {
        p
    } else if is_minus_half(p) {
        q
    } else {
        return None;
    };
    match f32_mul(sq)? {
        (x, y) if x == y && body[x].ty == ScalarType::F32 => Some(x),
        _ => None,
    }
}
