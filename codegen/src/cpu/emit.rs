//! Loop nest to Cranelift IR.
//!
//! The generated function walks a range of rows (the outer dims, collapsed at run time and
//! linearised; the row's multi-index is recovered by division only when more than one outer
//! dim is left) and, in each row, runs the nest's phases: row values as scalars, and inner
//! loops as an F32X4 loop unrolled `U` times (with `U` vector accumulators per reduction)
//! followed by a scalar tail. Buffers are addressed by byte strides passed at run time; the
//! [`Spec`] fixes, per buffer, whether its inner stride is one element, zero, or anything,
//! so contiguous accesses become vector loads and stores.

use super::chain_fits::{chain_fits, ChainFits};
use super::const_pool;
use super::math::{pool_const, Math};
use crate::loops::{value_ranges, Expr, LoopNest, Phase, Role, ScalarType, ValueId, ValueRange};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use kiln_ir::{BinaryOp, DTypeRule, ReduceOp, UnaryOp};
use std::collections::HashMap;

mod f64_values;
use f64_values::widen;
pub(crate) use f64_values::{f64_supported, SQUARES_EXACT_BELOW};

/// How a buffer is addressed along the inner loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InnerAccess {
    /// stride of one element: vector loads and stores
    Contiguous,
    /// stride 0: one load per row
    Broadcast,
    /// any other stride: one scalar access per lane
    Strided,
}

/// What a compiled kernel is specialised for: the number of outer dims left after
/// collapsing, each buffer's access along the inner loop, and how many rows a row kernel
/// works on at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// outer dims (0: a single row)
    pub outer: usize,
    /// per buffer, in the nest's order
    pub access: Vec<InnerAccess>,
    /// rows a row kernel (a nest that reduces, with outer dims) steps together while that
    /// many are left, the rest one at a time; 1 for every other nest. See [`row_group`].
    pub row_group: usize,
    /// the code generation options it is compiled with
    pub opts: crate::CodegenOptions,
}

const LANES: i64 = 4;

fn f32x4() -> Type {
    types::F32X4
}

fn i32x4() -> Type {
    types::I32X4
}

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Unroll factor: how many vectors of the inner loop one iteration computes
/// (`CodegenOptions::unroll` overrides it, for measurements).
fn unroll(costs: &[usize], point: &[ValueId], reduces: &[ValueId], forced: Option<i64>) -> i64 {
    let weight: usize = point.iter().map(|&v| costs[v]).sum();
    if let Some(u) = forced {
        return u;
    }
    // The copies' statements interleave (see `point_values`), so more copies mean more
    // independent chains in flight: reductions (a dependency through each accumulator) and
    // long chains of transcendentals gain from 8; measured on the workloads (tiny's chain,
    // most of it fitted polynomials of weight ~100: 2.9 µs at 8 against 3.7 at 4).
    if !reduces.is_empty() || weight > 64 {
        8
    } else {
        4
    }
}

struct Emitter<'a> {
    nest: &'a LoopNest,
    spec: &'a Spec,
    math: Math,
    /// per buffer: the row's base address
    base: Vec<Value>,
    /// per buffer: its inner stride in bytes
    inner_stride: Vec<Value>,
    /// the inner length as f32
    inner_len: Value,
    /// the inner length as i64
    inner_len_i: Value,
    /// row values of the current row (scalars; bools as i8)
    row: HashMap<ValueId, Value>,
    /// the f64 totals of sums, so that a mean divides before rounding to f32
    row64: HashMap<ValueId, Value>,
    /// per (buffer, inner index value): the element pointer, shared by unrolled copies
    ptr_cache: std::cell::RefCell<HashMap<(usize, Value), Value>>,
    /// what each body value may take: transcendentals leave out the special cases their
    /// argument cannot reach
    ranges: Vec<ValueRange>,
    /// unary chains computed as one polynomial of their input (see `chain_fits.rs`)
    chains: ChainFits,
    /// each statement's estimated cost, the chain fits applied
    costs: Vec<usize>,
}

/// Builds the body of `func` (whose signature is the kernel signature) for `nest` at `spec`.
pub(crate) fn emit_nest(
    module: &mut JITModule,
    fctx: &mut FunctionBuilderContext,
    func: &mut Function,
    nest: &LoopNest,
    spec: &Spec,
    fma: bool,
) -> Result<(), String> {
    if spec.access.len() != nest.buffers.len() {
        return Err("the specialisation does not match the buffers".to_string());
    }
    let mut math = Math::new(module, func, fma).map_err(|e| e.to_string())?;
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let pool_addr = b.ins().iconst(types::I64, const_pool::base_address());
    let ro_pool = MemFlagsData::new().with_notrap().with_readonly();
    let pool_base = b.ins().load(types::I64, ro_pool, pool_addr, 0);
    math.set_pool(pool_base);
    let p = b.block_params(entry).to_vec();
    let (p_ptrs, p_strides, p_sizes) = (p[0], p[1], p[2]);
    let (r0, r1, i0, i1) = (p[3], p[4], p[5], p[6]);
    let k = spec.outer;
    let nb = nest.buffers.len();
    let ro = MemFlagsData::new().with_notrap().with_readonly();
    let ptrs: Vec<Value> = (0..nb)
        .map(|i| b.ins().load(types::I64, ro, p_ptrs, (8 * i) as i32))
        .collect();
    let load_stride = |b: &mut FunctionBuilder, buf: usize, j: usize| {
        b.ins()
            .load(types::I64, ro, p_strides, (8 * (buf * (k + 1) + j)) as i32)
    };
    let outer_strides: Vec<Vec<Value>> = (0..nb)
        .map(|buf| (0..k).map(|j| load_stride(&mut b, buf, j)).collect())
        .collect();
    let inner_stride: Vec<Value> = (0..nb).map(|buf| load_stride(&mut b, buf, k)).collect();
    let sizes: Vec<Value> = (0..=k)
        .map(|j| b.ins().load(types::I64, ro, p_sizes, (8 * j) as i32))
        .collect();
    let inner_len = b.ins().fcvt_from_sint(types::F32, sizes[k]);

    let mut e = Emitter {
        nest,
        spec,
        math,
        base: Vec::new(),
        inner_stride,
        inner_len,
        inner_len_i: sizes[k],
        row: HashMap::new(),
        row64: HashMap::new(),
        ptr_cache: Default::default(),
        ranges: Vec::new(),
        chains: ChainFits::default(),
        costs: Vec::new(),
    };
    e.ranges = value_ranges(&nest.body);
    e.chains = chain_fits(nest, &e.ranges, fma, spec.opts.chain_fits);
    e.costs = e.chains.costs(nest, &e.ranges);
    let r = b.declare_var(types::I64);
    b.def_var(r, r0);
    let bases =
        |b: &mut FunctionBuilder, rv: Value| row_bases(b, rv, &ptrs, &outer_strides, &sizes[..k]);
    // row groups of `g` rows while that many are left, then the rest one at a time
    let exit = b.create_block();
    let g = if nest.reduces && spec.outer > 0 {
        spec.row_group.clamp(1, 8) as i64
    } else {
        1
    };
    if g > 1 {
        let rest = b.create_block();
        row_loop(&mut b, &mut e, g, (r, r1), (i0, i1), &bases, rest);
        b.switch_to_block(rest);
    }
    row_loop(&mut b, &mut e, 1, (r, r1), (i0, i1), &bases, exit);
    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(module_config(module));
    Ok(())
}

/// Emits the loop that runs every phase for `g` rows at a time, from the row variable `r`
/// while `g` rows up to `r1` are left, then jumps to `next`. `bases` gives a row's buffer
/// addresses.
fn row_loop(
    b: &mut FunctionBuilder,
    e: &mut Emitter,
    g: i64,
    (r, r1): (Variable, Value),
    inner: (Value, Value),
    bases: &dyn Fn(&mut FunctionBuilder, Value) -> Vec<Value>,
    next: cranelift_codegen::ir::Block,
) {
    let (hdr, body) = (b.create_block(), b.create_block());
    b.ins().jump(hdr, &[]);
    b.switch_to_block(hdr);
    let rv = b.use_var(r);
    let last = b.ins().iadd_imm_s(rv, g);
    let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, last, r1);
    b.ins().brif(fits, body, &[], next, &[]);
    b.switch_to_block(body);
    let rv = b.use_var(r);
    let mut rows: Vec<RowState> = (0..g)
        .map(|j| {
            let rj = if j == 0 {
                rv
            } else {
                b.ins().iadd_imm_s(rv, j)
            };
            RowState {
                base: bases(b, rj),
                ..RowState::default()
            }
        })
        .collect();
    for phase in &e.nest.phases {
        match phase {
            Phase::Inner {
                point,
                reduces,
                stores,
            } => {
                // in a group each row keeps its own unroll: more chains in flight, measured
                // faster than dividing it among the rows (reduce 1.60 ms against 1.94)
                let u = unroll(&e.costs, point, reduces, e.spec.opts.unroll);
                e.inner_loop_rows(b, &mut rows, point, reduces, stores, inner, u);
            }
            _ => {
                for row in &mut rows {
                    e.with_row(row, |e| e.row_phase(b, phase));
                }
            }
        }
    }
    let next_row = b.ins().iadd_imm_s(rv, g);
    b.def_var(r, next_row);
    b.ins().jump(hdr, &[]);
}

/// The rows a row kernel of `nest` with `outer` outer dims and inner-loop accesses `access`
/// works on at once (1: one at a time; always 1 for a nest that does not reduce or has no
/// outer dims: a pointwise nest's dims merge into one long inner loop). Grouping gives a
/// core several memory streams at once. On the machine it was written for (2 cores, 16 KiB
/// rows read from L3) four rows were faster: reduce 2.44 → 1.60 ms, layernorm 2.96 → 2.55,
/// softmax 5.5 → 4.8. On the current one (AMD EPYC, AVX-512, 2 cores) one row at a time is
/// faster on every row workload (`kiln bench`, 2 cores, medians, same run): reduce
/// 0.85-1.17 ms against 1.50-1.51 (group 2: 1.15 against 0.75 in a tight loop), layernorm
/// 1.01-1.24 against 1.75-1.81, softmax 2.66-2.68 against 2.91-2.96, minilm 61.8-62.4
/// against 63.7-68.3, block unchanged. So the default is 1; `CodegenOptions::row_group`
/// overrides it (the grouped path is kept, and tested bit for bit against single rows).
///
/// A nest whose inner loop reads no buffer contiguously (a reduction over an outer dim,
/// each row a column of the matrix: `train_mlp`'s bias gradient with its optimiser update)
/// is different: its scalar loads go one column at a time down the rows, and four columns
/// together read each cache line once for all four. `CodegenOptions::strided_row_group`
/// (default 4): `train_mlp`'s `[64, 128]` column sum kernel 22 → 13 µs (group 8: 15).
pub fn row_group(
    nest: &LoopNest,
    outer: usize,
    access: &[InnerAccess],
    opts: &crate::CodegenOptions,
) -> usize {
    if !nest.reduces || outer == 0 {
        return 1;
    }
    let reads = &access[..nest.input_count().min(access.len())];
    let strided =
        reads.contains(&InnerAccess::Strided) && !reads.contains(&InnerAccess::Contiguous);
    let g = if strided {
        opts.strided_row_group
    } else {
        opts.row_group
    };
    g.clamp(1, 8)
}

fn module_config(module: &JITModule) -> cranelift_codegen::isa::TargetFrontendConfig {
    use cranelift_module::Module;
    module.target_config()
}

/// Each buffer's address at the start of row `rv`: the row's multi-index over the outer
/// sizes (innermost fastest) dotted with the buffer's outer strides.
fn row_bases(
    b: &mut FunctionBuilder,
    rv: Value,
    ptrs: &[Value],
    strides: &[Vec<Value>],
    sizes: &[Value],
) -> Vec<Value> {
    let k = sizes.len();
    let mut idx: Vec<Value> = vec![rv; k];
    if k > 1 {
        let mut rem = rv;
        for j in (1..k).rev() {
            let q = b.ins().udiv(rem, sizes[j]);
            let qs = b.ins().imul(q, sizes[j]);
            idx[j] = b.ins().isub(rem, qs);
            rem = q;
        }
        idx[0] = rem;
    }
    ptrs.iter()
        .zip(strides)
        .map(|(&p, st)| {
            let mut a = p;
            for j in 0..k {
                let o = b.ins().imul(idx[j], st[j]);
                a = b.ins().iadd(a, o);
            }
            a
        })
        .collect()
}

fn float_cc(op: BinaryOp) -> Option<FloatCC> {
    Some(match op {
        BinaryOp::Eq => FloatCC::Equal,
        BinaryOp::Ne => FloatCC::NotEqual,
        BinaryOp::Lt => FloatCC::LessThan,
        BinaryOp::Le => FloatCC::LessThanOrEqual,
        BinaryOp::Gt => FloatCC::GreaterThan,
        BinaryOp::Ge => FloatCC::GreaterThanOrEqual,
        BinaryOp::Add
        | BinaryOp::Sub
        | BinaryOp::Mul
        | BinaryOp::Div
        | BinaryOp::Pow
        | BinaryOp::Maximum
        | BinaryOp::Minimum
        | BinaryOp::Remainder
        | BinaryOp::Fmod
        | BinaryOp::Atan2
        | BinaryOp::LogicalAnd
        | BinaryOp::LogicalOr
        | BinaryOp::LogicalXor
        | BinaryOp::BitwiseAnd
        | BinaryOp::BitwiseOr
        | BinaryOp::BitwiseXor => return None,
    })
}

fn reduce_identity(op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Max => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
    }
}

fn reduce_binary(op: ReduceOp) -> BinaryOp {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
        ReduceOp::Max => BinaryOp::Maximum,
        ReduceOp::Min => BinaryOp::Minimum,
    }
}

fn is_sum(op: ReduceOp) -> bool {
    matches!(op, ReduceOp::Sum | ReduceOp::Mean)
}

/// `xs` combined by `f` as a balanced tree (pairs of neighbours, level by level).
fn pairwise(
    b: &mut FunctionBuilder,
    mut xs: Vec<Value>,
    f: impl Fn(&mut FunctionBuilder, Value, Value) -> Value,
) -> Value {
    while xs.len() > 1 {
        xs = xs
            .chunks(2)
            .map(|c| if c.len() == 2 { f(b, c[0], c[1]) } else { c[0] })
            .collect();
    }
    xs[0]
}

/// Whether values are scalars or F32X4 vectors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Width {
    Scalar,
    Vector,
}

impl Emitter<'_> {
    fn reduce_op(&self, v: ValueId) -> (ReduceOp, ValueId) {
        match self.nest.body[v].expr {
            Expr::Reduce(op, x) => (op, x),
            _ => unreachable!("not a reduction"),
        }
    }

    /// A row value (scalar), computed from other row values.
    fn row_value(&mut self, b: &mut FunctionBuilder, v: ValueId) -> Value {
        let e = self.nest.body[v].expr.clone();
        match e {
            Expr::Load(buf) if self.is_bool(buf) => {
                b.ins().load(types::I8, flags(), self.base[buf], 0)
            }
            Expr::Load(buf) => b.ins().load(types::F32, flags(), self.base[buf], 0),
            Expr::Const(c) => b.ins().f32const(c as f32),
            Expr::InnerLen => self.inner_len,
            Expr::Reduce(..) => self.row[&v],
            // an f64 statistic rounded once
            Expr::Narrow(x) => b.ins().fdemote(types::F32, self.row64[&x]),
            other => {
                let ops = |x: &ValueId| self.row[x];
                self.compute(b, &other, Width::Scalar, &ops)
            }
        }
    }

    /// `x` when `t` is `x·x·(-0.5)` ([`crate::loops::half_square_of`]).
    fn half_square_of(&self, t: ValueId) -> Option<ValueId> {
        crate::loops::half_square_of(&self.nest.body, t)
    }

    /// A pointwise instruction on already computed operands.
    fn compute(
        &self,
        b: &mut FunctionBuilder,
        e: &Expr,
        w: Width,
        operand: &dyn Fn(&ValueId) -> Value,
    ) -> Value {
        let is_bool = |v: &ValueId| self.nest.body[*v].ty == ScalarType::Bool;
        match e {
            Expr::Unary(u, x) if u.info().dtype == DTypeRule::Bool || is_bool(x) => {
                self.math.bool_unary(b, *u, operand(x), is_bool(x))
            }
            Expr::Unary(UnaryOp::Exp, t) => match self.half_square_of(*t) {
                Some(x) => self.math.exp_neg_half_sq(b, operand(&x)),
                None => self
                    .math
                    .unary_in(b, UnaryOp::Exp, operand(t), self.ranges[*t]),
            },
            Expr::Unary(u, x) => self.math.unary_in(b, *u, operand(x), self.ranges[*x]),
            Expr::Binary(op, x, y) => {
                let (xb, yb) = (is_bool(x), is_bool(y));
                let (x, y) = (operand(x), operand(y));
                match float_cc(*op) {
                    Some(cc) => b.ins().fcmp(cc, x, y),
                    None if xb || yb || op.info().dtype == DTypeRule::Bool => {
                        self.math.bool_binary(b, *op, (x, xb), (y, yb))
                    }
                    None => self.math.binary(b, *op, x, y),
                }
            }
            Expr::Where(c, x, y) => {
                let (c, x, y) = (operand(c), operand(x), operand(y));
                match w {
                    Width::Scalar => b.ins().select(c, x, y),
                    Width::Vector => {
                        let m = b.ins().bitcast(f32x4(), MemFlagsData::new(), c);
                        b.ins().bitselect(m, x, y)
                    }
                }
            }
            Expr::BoolToF32(c) => {
                let c = operand(c);
                match w {
                    Width::Scalar => {
                        let one = b.ins().f32const(1.0);
                        let zero = b.ins().f32const(0.0);
                        b.ins().select(c, one, zero)
                    }
                    Width::Vector => {
                        let one = b.ins().iconst(types::I32, 1.0f32.to_bits() as i64);
                        let one = b.ins().splat(i32x4(), one);
                        let bits = b.ins().band(c, one);
                        b.ins().bitcast(f32x4(), MemFlagsData::new(), bits)
                    }
                }
            }
            Expr::Load(_)
            | Expr::Const(_)
            | Expr::InnerLen
            | Expr::Reduce(..)
            | Expr::Widen(_)
            | Expr::Narrow(_) => {
                unreachable!("handled by the caller")
            }
            Expr::Round(..) => unreachable!("the cpu form has no half values (lower_kernel)"),
        }
    }

    /// A row value as a vector (splat; bools become lane masks; constants from the pool).
    fn splat(&self, b: &mut FunctionBuilder, v: ValueId) -> Value {
        if let Expr::Const(c) = self.nest.body[v].expr {
            return self.vconst(b, c);
        }
        let x = self.row[&v];
        match self.nest.body[v].ty {
            ScalarType::F32 => b.ins().splat(f32x4(), x),
            ScalarType::F64 => unreachable!("f64 row values are not splat (f64_supported)"),
            ScalarType::Bool => {
                let m = b.ins().bmask(types::I32, x);
                b.ins().splat(i32x4(), m)
            }
        }
    }

    /// A graph constant as an F32X4, loaded from the constant pool.
    fn vconst(&self, b: &mut FunctionBuilder, c: f64) -> Value {
        pool_const(b, self.math.pool(), f32x4(), (c as f32).to_bits())
    }

    /// The address of buffer `buf` at inner index `iv + k·LANES` (copy `k` of an unrolled
    /// body): a pointer and an immediate byte offset. For contiguous buffers the pointer at
    /// `iv` is computed once per loop iteration and the copies differ only in the offset,
    /// which x86 folds into the access.
    fn addr(&self, b: &mut FunctionBuilder, buf: usize, iv: Value, k: i64) -> (Value, i32) {
        match self.spec.access[buf] {
            InnerAccess::Contiguous => {
                let elem = if self.is_bool(buf) { 1 } else { 4 };
                let mut cache = self.ptr_cache.borrow_mut();
                let p = match cache.get(&(buf, iv)) {
                    Some(&p) => p,
                    None => {
                        let p = if elem == 1 {
                            b.ins().iadd(self.base[buf], iv)
                        } else {
                            let off = b.ins().ishl_imm_u(iv, 2);
                            b.ins().iadd(self.base[buf], off)
                        };
                        cache.insert((buf, iv), p);
                        p
                    }
                };
                (p, (k * LANES * elem) as i32)
            }
            InnerAccess::Broadcast => (self.base[buf], 0),
            InnerAccess::Strided => {
                let ik = if k == 0 {
                    iv
                } else {
                    b.ins().iadd_imm_s(iv, k * LANES)
                };
                let off = b.ins().imul(ik, self.inner_stride[buf]);
                (b.ins().iadd(self.base[buf], off), 0)
            }
        }
    }

    fn is_bool(&self, buf: usize) -> bool {
        self.nest.buffers[buf].dtype == kiln_ir::DType::Bool
    }

    /// The byte step between lanes of buffer `buf` along the inner loop.
    fn lane_step(&self, b: &mut FunctionBuilder, buf: usize) -> Value {
        match self.spec.access[buf] {
            InnerAccess::Contiguous => b.ins().iconst(types::I64, 1),
            InnerAccess::Broadcast => b.ins().iconst(types::I64, 0),
            InnerAccess::Strided => self.inner_stride[buf],
        }
    }

    /// A bool element (a byte, 0 or 1) as a scalar `i8`, or four as an `i32x4` mask.
    fn load_bool(&self, b: &mut FunctionBuilder, buf: usize, at: (Value, i64), w: Width) -> Value {
        let (a, off) = self.addr(b, buf, at.0, at.1);
        let a = if off == 0 {
            a
        } else {
            b.ins().iadd_imm_s(a, i64::from(off))
        };
        let x = b.ins().load(types::I8, flags(), a, 0);
        if w == Width::Scalar {
            return x;
        }
        let step = self.lane_step(b, buf);
        let m = b.ins().bmask(types::I32, x);
        let mut v = b.ins().scalar_to_vector(i32x4(), m);
        let mut p = a;
        for lane in 1..LANES as u8 {
            p = b.ins().iadd(p, step);
            let x = b.ins().load(types::I8, flags(), p, 0);
            let m = b.ins().bmask(types::I32, x);
            v = b.ins().insertlane(v, m, lane);
        }
        v
    }

    /// Stores a bool (scalar `i8` 0/1, or an `i32x4` mask) as bytes 0/1.
    fn store_bool(
        &self,
        b: &mut FunctionBuilder,
        buf: usize,
        at: (Value, i64),
        x: Value,
        w: Width,
    ) {
        let (a, off) = self.addr(b, buf, at.0, at.1);
        let a = if off == 0 {
            a
        } else {
            b.ins().iadd_imm_s(a, i64::from(off))
        };
        if w == Width::Scalar {
            b.ins().store(flags(), x, a, 0);
            return;
        }
        let step = self.lane_step(b, buf);
        let mut p = a;
        for lane in 0..LANES as u8 {
            if lane > 0 {
                p = b.ins().iadd(p, step);
            }
            let e = b.ins().extractlane(x, lane);
            let one = b.ins().band_imm_s(e, 1);
            let byte = b.ins().ireduce(types::I8, one);
            b.ins().store(flags(), byte, p, 0);
        }
    }

    fn load(&self, b: &mut FunctionBuilder, buf: usize, at: (Value, i64), w: Width) -> Value {
        if self.is_bool(buf) {
            return self.load_bool(b, buf, at, w);
        }
        let (a, off) = self.addr(b, buf, at.0, at.1);
        match (w, self.spec.access[buf]) {
            (Width::Scalar, _) => b.ins().load(types::F32, flags(), a, off),
            (Width::Vector, InnerAccess::Contiguous) => b.ins().load(f32x4(), flags(), a, off),
            (Width::Vector, InnerAccess::Broadcast) => {
                let x = b.ins().load(types::F32, flags(), a, off);
                b.ins().splat(f32x4(), x)
            }
            (Width::Vector, InnerAccess::Strided) => {
                let s = self.inner_stride[buf];
                let x = b.ins().load(types::F32, flags(), a, 0);
                let mut v = b.ins().scalar_to_vector(f32x4(), x);
                let mut p = a;
                for lane in 1..LANES as u8 {
                    p = b.ins().iadd(p, s);
                    let x = b.ins().load(types::F32, flags(), p, 0);
                    v = b.ins().insertlane(v, x, lane);
                }
                v
            }
        }
    }

    fn store(&self, b: &mut FunctionBuilder, buf: usize, at: (Value, i64), x: Value, w: Width) {
        if self.is_bool(buf) {
            return self.store_bool(b, buf, at, x, w);
        }
        let (a, off) = self.addr(b, buf, at.0, at.1);
        match (w, self.spec.access[buf]) {
            (Width::Scalar, _) => {
                b.ins().store(flags(), x, a, off);
            }
            (Width::Vector, InnerAccess::Contiguous) => {
                b.ins().store(flags(), x, a, off);
            }
            (Width::Vector, _) => {
                let s = self.inner_stride[buf];
                let mut p = a;
                for lane in 0..LANES as u8 {
                    if lane > 0 {
                        p = b.ins().iadd(p, s);
                    }
                    let e = b.ins().extractlane(x, lane);
                    b.ins().store(flags(), e, p, 0);
                }
            }
        }
    }

    /// The point values of one index (`iv`), at width `w`; row operands from `splats`
    /// (vector) or the row map (scalar).
    /// The point values at each index of `ivs` (the unrolled copies), at width `w`; row
    /// operands from `splats` (vector) or the row map (scalar). Statements are emitted for
    /// every copy before the next statement, so the copies' dependency chains interleave
    /// and the out-of-order core overlaps them (emitted copy after copy, a chain of
    /// transcendentals is longer than the reorder window and the copies run serially).
    fn point_values(
        &self,
        b: &mut FunctionBuilder,
        point: &[ValueId],
        ivs: &[(Value, i64)],
        w: Width,
        splats: &HashMap<ValueId, Value>,
    ) -> Vec<HashMap<ValueId, Value>> {
        let mut all: Vec<HashMap<ValueId, Value>> = vec![HashMap::new(); ivs.len()];
        for &v in point {
            // f64 point values are computed where a sum folds them (`fold_f64`)
            if self.chains.absorbed.contains(&v) || self.nest.body[v].ty == ScalarType::F64 {
                continue;
            }
            if let Some(c) = self.chains.fits.get(&v) {
                for vals in all.iter_mut() {
                    let x = self.lookup(c.input, w, vals, splats);
                    let y = self.math.fitted(b, &c.fit, x);
                    vals.insert(v, y);
                }
                continue;
            }
            let e = &self.nest.body[v].expr;
            for (&iv, vals) in ivs.iter().zip(all.iter_mut()) {
                let x = match e {
                    Expr::Load(buf) => self.load(b, *buf, iv, w),
                    Expr::Const(c) => match w {
                        Width::Scalar => b.ins().f32const(*c as f32),
                        Width::Vector => self.vconst(b, *c),
                    },
                    Expr::InnerLen => match w {
                        Width::Scalar => self.inner_len,
                        Width::Vector => b.ins().splat(f32x4(), self.inner_len),
                    },
                    Expr::Reduce(..) => unreachable!("reductions are row values"),
                    Expr::Narrow(x) => self.narrow_point(b, *x, w, vals, splats),
                    other => {
                        // constant operands are loaded at each use, so that x86 folds
                        // them into the instruction (a splat hoisted out of the loop would
                        // hold a register, or be spilled, across the whole body)
                        let mut consts: Vec<(ValueId, Value)> = Vec::new();
                        if w == Width::Vector {
                            for x in crate::loops::operands(other) {
                                if let Expr::Const(c) = self.nest.body[x].expr {
                                    consts.push((x, self.vconst(b, c)));
                                }
                            }
                        }
                        let operand = |x: &ValueId| {
                            if let Some(&(_, k)) = consts.iter().find(|(c, _)| c == x) {
                                return k;
                            }
                            if self.nest.body[*x].row {
                                match w {
                                    Width::Scalar => self.row[x],
                                    Width::Vector => splats[x],
                                }
                            } else {
                                vals[x]
                            }
                        };
                        self.compute(b, other, w, &operand)
                    }
                };
                vals.insert(v, x);
            }
        }
        all
    }

    /// The value `x` (point or row) at width `w`.
    fn lookup(
        &self,
        x: ValueId,
        w: Width,
        vals: &HashMap<ValueId, Value>,
        splats: &HashMap<ValueId, Value>,
    ) -> Value {
        if self.nest.body[x].row {
            match w {
                Width::Scalar => self.row[&x],
                Width::Vector => splats[&x],
            }
        } else {
            vals[&x]
        }
    }

    /// One inner loop: vector body unrolled, scalar tail, then the reductions' results.
    /// A phase of row values or row stores, for the current row.
    fn row_phase(&mut self, b: &mut FunctionBuilder, phase: &Phase) {
        match phase {
            Phase::Row(vs) => {
                for &v in vs {
                    if self.nest.body[v].ty == ScalarType::F64 {
                        let x = self.row_value64(b, v);
                        self.row64.insert(v, x);
                    } else {
                        let x = self.row_value(b, v);
                        self.row.insert(v, x);
                    }
                }
            }
            Phase::RowStores(ss) => {
                for &s in ss {
                    let st = self.nest.stores[s];
                    let x = self.row[&st.value];
                    b.ins().store(flags(), x, self.base[st.buffer], 0);
                }
            }
            Phase::Inner { .. } => unreachable!("inner phases have their own loop"),
        }
    }

    /// Swaps the emitter's per-row state with `s` (to emit another row's code).
    fn swap_row(&mut self, s: &mut RowState) {
        std::mem::swap(&mut self.base, &mut s.base);
        std::mem::swap(&mut self.row, &mut s.row);
        std::mem::swap(&mut self.row64, &mut s.row64);
        std::mem::swap(&mut self.ptr_cache, &mut s.ptr_cache);
    }

    /// Runs `f` with `s` swapped in as the current row.
    fn with_row<T>(&mut self, s: &mut RowState, f: impl FnOnce(&mut Self) -> T) -> T {
        self.swap_row(s);
        let t = f(self);
        self.swap_row(s);
        t
    }

    /// The inner loop of one phase for the rows of `rows` at once: one loop whose every
    /// iteration does `u` vectors of each row (a row group reads several rows' memory
    /// streams concurrently), then each row's scalar tail and its totals.
    #[allow(
        clippy::too_many_arguments,
        reason = "the phase's parts, passed through"
    )]
    fn inner_loop_rows(
        &mut self,
        b: &mut FunctionBuilder,
        rows: &mut [RowState],
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
        (i0, i1): (Value, Value),
        u: i64,
    ) {
        let locals: Vec<LoopLocals> = rows
            .iter_mut()
            .map(|r| self.with_row(r, |e| e.loop_locals(b, point, reduces, stores, u)))
            .collect();
        let i = b.declare_var(types::I64);
        b.def_var(i, i0);
        let span = b.ins().isub(i1, i0);
        let vec_span = b.ins().band_imm_s(span, !(LANES * u - 1));
        let vec_end = b.ins().iadd(i0, vec_span);
        let (vhdr, vbody, thdr, tbody, done) = (
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
        );
        b.ins().jump(vhdr, &[]);
        // vector loop
        b.switch_to_block(vhdr);
        let iv = b.use_var(i);
        let c = b.ins().icmp(IntCC::SignedLessThan, iv, vec_end);
        b.ins().brif(c, vbody, &[], thdr, &[]);
        b.switch_to_block(vbody);
        let iv = b.use_var(i);
        for (r, l) in rows.iter_mut().zip(&locals) {
            self.with_row(r, |e| e.vector_step(b, point, reduces, stores, iv, u, l));
        }
        let next = b.ins().iadd_imm_s(iv, LANES * u);
        b.def_var(i, next);
        b.ins().jump(vhdr, &[]);
        // scalar tail
        b.switch_to_block(thdr);
        let iv = b.use_var(i);
        let c = b.ins().icmp(IntCC::SignedLessThan, iv, i1);
        b.ins().brif(c, tbody, &[], done, &[]);
        b.switch_to_block(tbody);
        let iv = b.use_var(i);
        for (r, l) in rows.iter_mut().zip(&locals) {
            self.with_row(r, |e| e.scalar_step(b, point, reduces, stores, iv, l));
        }
        let next = b.ins().iadd_imm_s(iv, 1);
        b.def_var(i, next);
        b.ins().jump(thdr, &[]);
        // combine the accumulators: across the unrolled copies, across lanes, then the tail
        b.switch_to_block(done);
        for (r, l) in rows.iter_mut().zip(&locals) {
            self.with_row(r, |e| e.combine(b, point, reduces, (i0, i1), l));
        }
    }

    /// The current row's splats of the row values a loop reads, and its accumulators,
    /// emitted before the loop.
    fn loop_locals(
        &mut self,
        b: &mut FunctionBuilder,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
        u: i64,
    ) -> LoopLocals {
        let mut splats: HashMap<ValueId, Value> = HashMap::new();
        let mut needs: Vec<ValueId> = Vec::new();
        for &v in point {
            needs.extend(crate::loops::operands(&self.nest.body[v].expr));
        }
        for &r in reduces {
            needs.push(self.reduce_op(r).1);
        }
        for &s in stores {
            needs.push(self.nest.stores[s].value);
        }
        for x in needs {
            let st = &self.nest.body[x];
            if st.row && st.ty != ScalarType::F64 && !splats.contains_key(&x) {
                let s = self.splat(b, x);
                splats.insert(x, s);
            }
        }
        let mut vacc: Vec<Vec<Variable>> = Vec::new();
        let mut sacc: Vec<Variable> = Vec::new();
        for &r in reduces {
            // sums accumulate in f64 (two F64X2 halves per vector), as eager does, so a row
            // of equal values sums exactly and layer norm of a constant row is 0
            let (op, x) = self.reduce_op(r);
            let (sty, vty, copies, id) = if is_sum(op) {
                let z = b.ins().f64const(0.0);
                // f64 point values fold into a low and a high accumulator per copy (their
                // chains independent); f32 ones are summed across copies first
                let copies = if self.nest.body[x].ty == ScalarType::F64
                    && self.square_of_widened(x).is_none()
                {
                    2 * u as usize
                } else {
                    2
                };
                (types::F64, types::F64X2, copies, z)
            } else {
                let z = b.ins().f32const(reduce_identity(op));
                (types::F32, f32x4(), u as usize, z)
            };
            let idv = b.ins().splat(vty, id);
            let vs: Vec<Variable> = (0..copies)
                .map(|_| {
                    let v = b.declare_var(vty);
                    b.def_var(v, idv);
                    v
                })
                .collect();
            vacc.push(vs);
            let s = b.declare_var(sty);
            b.def_var(s, id);
            sacc.push(s);
        }
        LoopLocals { splats, vacc, sacc }
    }

    /// One vector iteration for the current row: `u` vectors from inner index `iv`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the phase's parts, passed through"
    )]
    fn vector_step(
        &mut self,
        b: &mut FunctionBuilder,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
        iv: Value,
        u: i64,
        l: &LoopLocals,
    ) {
        let splats = &l.splats;
        let iks: Vec<(Value, i64)> = (0..u).map(|k| (iv, k)).collect();
        let copies = self.point_values(b, point, &iks, Width::Vector, splats);
        for (ri, &r) in reduces.iter().enumerate() {
            let (op, x) = self.reduce_op(r);
            if let Some(c) = self.square_of_widened(x) {
                // f64 squares of f32 values, selected as f32 squares summed pairwise over
                // the copies in f32, then widened into the f64 accumulators (relative error
                // ≤ 2^-21 of the row's sum of squares; `squares_in_f64` redoes the row in
                // f64 where the f32 squares overflow)
                let sq: Vec<Value> = copies
                    .iter()
                    .map(|vals| {
                        let cv = self.lookup(c, Width::Vector, vals, splats);
                        b.ins().fmul(cv, cv)
                    })
                    .collect();
                let xv = pairwise(b, sq, |b, p, q| b.ins().fadd(p, q));
                let (lo, hi) = widen(b, xv);
                for (j, h) in [lo, hi].into_iter().enumerate() {
                    let var = l.vacc[ri][j];
                    let acc = b.use_var(var);
                    let n = b.ins().fadd(acc, h);
                    b.def_var(var, n);
                }
                continue;
            }
            if self.nest.body[x].ty == ScalarType::F64 {
                for (k, vals) in copies.iter().enumerate() {
                    let (lo, hi) = (l.vacc[ri][2 * k], l.vacc[ri][2 * k + 1]);
                    let accs = (b.use_var(lo), Some(b.use_var(hi)));
                    let (nl, nh) = self.fold_f64(b, x, accs, Width::Vector, vals, splats);
                    b.def_var(lo, nl);
                    b.def_var(hi, nh.expect("vector halves"));
                }
                continue;
            }
            let xs: Vec<Value> = copies
                .iter()
                .map(|vals| self.lookup(x, Width::Vector, vals, splats))
                .collect();
            if is_sum(op) {
                // the copies summed pairwise in f32 (a power-of-two tree: a row of equal
                // values still sums exactly), then widened once into the f64 accumulators
                let xv = pairwise(b, xs, |b, p, q| b.ins().fadd(p, q));
                let (lo, hi) = widen(b, xv);
                for (j, h) in [lo, hi].into_iter().enumerate() {
                    let var = l.vacc[ri][j];
                    let acc = b.use_var(var);
                    let n = b.ins().fadd(acc, h);
                    b.def_var(var, n);
                }
            } else {
                for (k, xv) in xs.into_iter().enumerate() {
                    let acc = b.use_var(l.vacc[ri][k]);
                    let n = self.math.binary(b, reduce_binary(op), acc, xv);
                    b.def_var(l.vacc[ri][k], n);
                }
            }
        }
        for (k, vals) in copies.iter().enumerate() {
            for &s in stores {
                let st = self.nest.stores[s];
                let x = self.lookup(st.value, Width::Vector, vals, splats);
                self.store(b, st.buffer, (iv, k as i64), x, Width::Vector);
            }
        }
    }

    /// One scalar (tail) iteration for the current row, at inner index `iv`.
    fn scalar_step(
        &mut self,
        b: &mut FunctionBuilder,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
        iv: Value,
        l: &LoopLocals,
    ) {
        let splats = &l.splats;
        let vals = self
            .point_values(b, point, &[(iv, 0)], Width::Scalar, splats)
            .pop()
            .expect("one copy");
        for (ri, &r) in reduces.iter().enumerate() {
            let (op, x) = self.reduce_op(r);
            if self.nest.body[x].ty == ScalarType::F64 {
                let acc = b.use_var(l.sacc[ri]);
                let (n, _) = self.fold_f64(b, x, (acc, None), Width::Scalar, &vals, splats);
                b.def_var(l.sacc[ri], n);
                continue;
            }
            let xv = self.lookup(x, Width::Scalar, &vals, splats);
            let acc = b.use_var(l.sacc[ri]);
            let n = if is_sum(op) {
                let w = b.ins().fpromote(types::F64, xv);
                b.ins().fadd(acc, w)
            } else {
                self.math.binary(b, reduce_binary(op), acc, xv)
            };
            b.def_var(l.sacc[ri], n);
        }
        for &s in stores {
            let st = self.nest.stores[s];
            let x = self.lookup(st.value, Width::Scalar, &vals, splats);
            self.store(b, st.buffer, (iv, 0), x, Width::Scalar);
        }
    }

    /// The current row's totals after the loop: the accumulators combined across the
    /// unrolled copies, across lanes, then with the tail's.
    fn combine(
        &mut self,
        b: &mut FunctionBuilder,
        point: &[ValueId],
        reduces: &[ValueId],
        inner: (Value, Value),
        l: &LoopLocals,
    ) {
        for (ri, &r) in reduces.iter().enumerate() {
            let (op, x) = self.reduce_op(r);
            if is_sum(op) {
                let mut v = b.use_var(l.vacc[ri][0]);
                for &acc in &l.vacc[ri][1..] {
                    let o = b.use_var(acc);
                    v = b.ins().fadd(v, o);
                }
                let l0 = b.ins().extractlane(v, 0);
                let l1 = b.ins().extractlane(v, 1);
                let s = b.ins().fadd(l0, l1);
                let t = b.use_var(l.sacc[ri]);
                let mut total = b.ins().fadd(s, t);
                if let Some(c) = self.square_of_widened(x) {
                    total = self.squares_in_f64(b, total, c, point, &l.splats, inner);
                }
                self.row64.insert(r, total);
                let total = b.ins().fdemote(types::F32, total);
                self.row.insert(r, total);
                continue;
            }
            let f = reduce_binary(op);
            let mut v = b.use_var(l.vacc[ri][0]);
            for &acc in &l.vacc[ri][1..] {
                let o = b.use_var(acc);
                v = self.math.binary(b, f, v, o);
            }
            let lanes: Vec<Value> = (0..LANES as u8)
                .map(|j| b.ins().extractlane(v, j))
                .collect();
            let a = self.math.binary(b, f, lanes[0], lanes[1]);
            let c = self.math.binary(b, f, lanes[2], lanes[3]);
            let s = self.math.binary(b, f, a, c);
            let t = b.use_var(l.sacc[ri]);
            let total = self.math.binary(b, f, s, t);
            self.row.insert(r, total);
        }
        let _ = Role::Input;
    }
}

/// The emitter's per-row state (see [`Emitter::swap_row`]).
#[derive(Default)]
struct RowState {
    base: Vec<Value>,
    row: HashMap<ValueId, Value>,
    row64: HashMap<ValueId, Value>,
    ptr_cache: std::cell::RefCell<HashMap<(usize, Value), Value>>,
}

/// One inner loop's per-row values: the splats of row values it reads and its
/// accumulators.
struct LoopLocals {
    splats: HashMap<ValueId, Value>,
    vacc: Vec<Vec<Variable>>,
    sacc: Vec<Variable>,
}
