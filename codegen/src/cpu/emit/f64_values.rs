//! The f64 values of the loop form: statistics kept in f64 (a `sum {dtype = f64}`, its
//! division and `rsqrt`, the squares of widened f32 values) as scalar row values, and f64
//! point values only where a sum folds them. What the emitter supports is
//! [`f64_supported`]; the rest of the nest is f32 or bool.

use super::*;

/// A sum of squares of f32 values computed as f32 squares (`widen(c) * widen(c)` summed)
/// under this, 2^-64, is computed again in f64, as is one that is `+inf`. At or above it,
/// the squares under f32's smallest normal (2^-126), each off by at most 2^-150, move the
/// total by under 2^-40 of itself for rows under 2^36 values. Both tiers use it.
pub(crate) const SQUARES_EXACT_BELOW: f64 = 1.0 / 18_446_744_073_709_551_616.0;

/// The F32X4 of the bytes `mask` picks from `x` (0–15) and `y` (16–31).
fn shuffle_lanes(
    b: &mut FunctionBuilder,
    x: Value,
    y: Value,
    mask: impl Iterator<Item = u8>,
) -> Value {
    let little = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
    let x = b.ins().bitcast(types::I8X16, little, x);
    let y = b.ins().bitcast(types::I8X16, little, y);
    let mask: Vec<u8> = mask.collect();
    let imm = b
        .func
        .dfg
        .immediates
        .push(cranelift_codegen::ir::ConstantData::from(mask));
    let joined = b.ins().shuffle(x, y, imm);
    b.ins().bitcast(f32x4(), little, joined)
}

/// The four lanes of an F32X4 as two F64X2 (low and high halves).
pub(super) fn widen(b: &mut FunctionBuilder, x: Value) -> (Value, Value) {
    let lo = b.ins().fvpromote_low(x);
    let high = shuffle_lanes(b, x, x, (8..16).chain(8..16));
    let hi = b.ins().fvpromote_low(high);
    (lo, hi)
}

impl Emitter<'_> {
    /// An f64 row value (scalar): statistics and the arithmetic on them.
    pub(super) fn row_value64(&self, b: &mut FunctionBuilder, v: ValueId) -> Value {
        let f = |b: &mut FunctionBuilder, x: ValueId| self.f64_row_operand(b, x);
        match self.nest.body[v].expr {
            Expr::Reduce(..) => self.row64[&v],
            Expr::Widen(x) => b.ins().fpromote(types::F64, self.row[&x]),
            Expr::Binary(op, x, y) => {
                let (x, y) = (f(b, x), f(b, y));
                f64_binary(b, op, x, y)
            }
            Expr::Unary(op, x) => {
                let x = f(b, x);
                f64_unary(b, op, x)
            }
            _ => f(b, v),
        }
    }

    /// An operand of f64 row arithmetic: a literal, the inner length, or a computed value.
    pub(super) fn f64_row_operand(&self, b: &mut FunctionBuilder, x: ValueId) -> Value {
        match self.nest.body[x].expr {
            Expr::Const(c) => b.ins().f64const(c),
            Expr::InnerLen => b.ins().fcvt_from_sint(types::F64, self.inner_len_i),
            _ => self.row64[&x],
        }
    }

    /// An f64 point value (only ever folded by a sum: see [`f64_supported`]) at width `w`:
    /// a scalar, or the low and high F64X2 halves of the four lanes.
    pub(super) fn f64_point(
        &self,
        b: &mut FunctionBuilder,
        v: ValueId,
        w: Width,
        vals: &HashMap<ValueId, Value>,
        splats: &HashMap<ValueId, Value>,
    ) -> (Value, Option<Value>) {
        match self.nest.body[v].expr {
            Expr::Widen(x) => {
                let x = self.lookup(x, w, vals, splats);
                match w {
                    Width::Scalar => (b.ins().fpromote(types::F64, x), None),
                    Width::Vector => {
                        let (lo, hi) = widen(b, x);
                        (lo, Some(hi))
                    }
                }
            }
            Expr::Const(c) => {
                let k = b.ins().f64const(c);
                match w {
                    Width::Scalar => (k, None),
                    Width::Vector => {
                        let s = b.ins().splat(types::F64X2, k);
                        (s, Some(s))
                    }
                }
            }
            Expr::Binary(op, x, y) => {
                let (xl, xh) = self.f64_point(b, x, w, vals, splats);
                let (yl, yh) = self.f64_point(b, y, w, vals, splats);
                let lo = f64_binary(b, op, xl, yl);
                let hi = xh.zip(yh).map(|(p, q)| f64_binary(b, op, p, q));
                (lo, hi)
            }
            Expr::Unary(op, x) => {
                let (xl, xh) = self.f64_point(b, x, w, vals, splats);
                let lo = f64_unary(b, op, xl);
                let hi = xh.map(|h| f64_unary(b, op, h));
                (lo, hi)
            }
            ref other => unreachable!("{other:?} is not an f64 point value of the loop form"),
        }
    }

    /// `narrow(x)` of an f64 point value `x` at width `w`: the f32 scalar, or the four lanes
    /// of its two F64X2 halves demoted and joined. (A statistic over dims of extent 1 is a
    /// point value: a layer norm over a last dim of size 1.)
    pub(super) fn narrow_point(
        &self,
        b: &mut FunctionBuilder,
        x: ValueId,
        w: Width,
        vals: &HashMap<ValueId, Value>,
        splats: &HashMap<ValueId, Value>,
    ) -> Value {
        let (lo, hi) = self.f64_point(b, x, w, vals, splats);
        let Some(hi) = hi else {
            return b.ins().fdemote(types::F32, lo);
        };
        // each demotion fills lanes 0-1 (and zeroes 2-3): lanes 0-1 of the low half, then
        // lanes 0-1 of the high half
        let l = b.ins().fvdemote(lo);
        let h = b.ins().fvdemote(hi);
        shuffle_lanes(b, l, h, (0..8).chain(16..24))
    }

    /// The f32 value `c` when `v` is `widen(c) * widen(c)` ([`crate::loops::square_of_widened`]).
    pub(super) fn square_of_widened(&self, v: ValueId) -> Option<ValueId> {
        crate::loops::square_of_widened(&self.nest.body, v)
    }

    /// A sum of f64 squares of an f32 value whose f32 squares may have decided it: the row
    /// again, each value squared in f64 (a scalar loop, taken only then), where the total
    /// is `+inf` (a square overflowed) or under [`SQUARES_EXACT_BELOW`] (squares under
    /// f32's smallest normal lost their precision, or were 0: rows of values under about
    /// 1e-19 came out with half their variance). Returns the total to use.
    #[allow(
        clippy::too_many_arguments,
        reason = "the loop's context, passed through"
    )]
    pub(super) fn squares_in_f64(
        &self,
        b: &mut FunctionBuilder,
        total: Value,
        c: ValueId,
        point: &[ValueId],
        splats: &HashMap<ValueId, Value>,
        (i0, i1): (Value, Value),
    ) -> Value {
        let inf = b.ins().f64const(f64::INFINITY);
        let tiny = b.ins().f64const(SQUARES_EXACT_BELOW);
        let overflowed = b.ins().fcmp(FloatCC::Equal, total, inf);
        let underflowed = b.ins().fcmp(FloatCC::LessThan, total, tiny);
        let over = b.ins().bor(overflowed, underflowed);
        let (hdr, body, join) = (b.create_block(), b.create_block(), b.create_block());
        let out = b.append_block_param(join, types::F64);
        let j = b.declare_var(types::I64);
        let acc = b.declare_var(types::F64);
        let pre = b.create_block();
        b.ins().brif(over, pre, &[], join, &[total.into()]);
        b.switch_to_block(pre);
        b.def_var(j, i0);
        let zero = b.ins().f64const(0.0);
        b.def_var(acc, zero);
        b.ins().jump(hdr, &[]);
        b.switch_to_block(hdr);
        let jv = b.use_var(j);
        let more = b.ins().icmp(IntCC::SignedLessThan, jv, i1);
        let a = b.use_var(acc);
        b.ins().brif(more, body, &[], join, &[a.into()]);
        b.switch_to_block(body);
        let jv = b.use_var(j);
        let vals = self
            .point_values(b, point, &[(jv, 0)], Width::Scalar, splats)
            .pop()
            .expect("one copy");
        let cv = self.lookup(c, Width::Scalar, &vals, splats);
        let w = b.ins().fpromote(types::F64, cv);
        let a = b.use_var(acc);
        let n = if self.math.has_fma() {
            b.ins().fma(w, w, a)
        } else {
            let p = b.ins().fmul(w, w);
            b.ins().fadd(p, a)
        };
        b.def_var(acc, n);
        let next = b.ins().iadd_imm_s(jv, 1);
        b.def_var(j, next);
        b.ins().jump(hdr, &[]);
        b.switch_to_block(join);
        out
    }

    /// `acc + v` for an f64 point value `v` folded by a sum, with a product fused into the
    /// accumulation where the host has FMA (`acc + a·b` rounded once).
    pub(super) fn fold_f64(
        &self,
        b: &mut FunctionBuilder,
        v: ValueId,
        accs: (Value, Option<Value>),
        w: Width,
        vals: &HashMap<ValueId, Value>,
        splats: &HashMap<ValueId, Value>,
    ) -> (Value, Option<Value>) {
        if let (Expr::Binary(BinaryOp::Mul, x, y), true) =
            (&self.nest.body[v].expr, self.math.has_fma())
        {
            let (xl, xh) = self.f64_point(b, *x, w, vals, splats);
            // a square widens its operand once
            let (yl, yh) = if x == y {
                (xl, xh)
            } else {
                self.f64_point(b, *y, w, vals, splats)
            };
            let lo = b.ins().fma(xl, yl, accs.0);
            let hi = match (xh, yh, accs.1) {
                (Some(p), Some(q), Some(a)) => Some(b.ins().fma(p, q, a)),
                _ => None,
            };
            return (lo, hi);
        }
        let (l, h) = self.f64_point(b, v, w, vals, splats);
        let lo = b.ins().fadd(accs.0, l);
        let hi = match (h, accs.1) {
            (Some(p), Some(a)) => Some(b.ins().fadd(a, p)),
            _ => None,
        };
        (lo, hi)
    }
}

/// The f64 binary ops of the loop form (scalars or F64X2 vectors).
fn f64_binary(b: &mut FunctionBuilder, op: BinaryOp, x: Value, y: Value) -> Value {
    match op {
        BinaryOp::Add => b.ins().fadd(x, y),
        BinaryOp::Sub => b.ins().fsub(x, y),
        BinaryOp::Mul => b.ins().fmul(x, y),
        BinaryOp::Div => b.ins().fdiv(x, y),
        // NaN-propagating, as the f32 forms
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let nan = b.ins().fcmp(FloatCC::Unordered, x, y);
            let m = if op == BinaryOp::Maximum {
                b.ins().fmax(x, y)
            } else {
                b.ins().fmin(x, y)
            };
            let q = b.ins().fadd(x, y);
            b.ins().select(nan, q, m)
        }
        other => unreachable!(
            "{} has no f64 form in the loop form (f64_supported)",
            other.name()
        ),
    }
}

/// The f64 unary ops of the loop form (scalars or F64X2 vectors).
fn f64_unary(b: &mut FunctionBuilder, op: UnaryOp, x: Value) -> Value {
    let one = |b: &mut FunctionBuilder| {
        let one = b.ins().f64const(1.0);
        if b.func.dfg.value_type(x) == types::F64X2 {
            b.ins().splat(types::F64X2, one)
        } else {
            one
        }
    };
    match op {
        UnaryOp::Neg => b.ins().fneg(x),
        UnaryOp::Abs => b.ins().fabs(x),
        UnaryOp::Sqrt => b.ins().sqrt(x),
        UnaryOp::Rsqrt => {
            let s = b.ins().sqrt(x);
            let one = one(b);
            b.ins().fdiv(one, s)
        }
        UnaryOp::Recip => {
            let one = one(b);
            b.ins().fdiv(one, x)
        }
        other => unreachable!(
            "{} has no f64 form in the loop form (f64_supported)",
            other.name()
        ),
    }
}

/// The unary ops an f64 point value may apply (those of [`f64_unary`]).
fn f64_point_unary(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip
    )
}

/// Whether the cpu emitter handles the nest's f64 values: f64 row values (any of the loop
/// form's f64 ops, as scalars), and f64 point values only as widened f32 values and their
/// `+ - × ÷` (of literals or other f64 point values), used only by f64 point values and
/// sums (they are computed where the sum folds them). Anything else runs on the eager
/// kernels.
pub(crate) fn f64_supported(nest: &LoopNest) -> Result<(), String> {
    let body = &nest.body;
    let f64_point = |v: ValueId| body[v].ty == ScalarType::F64 && !body[v].row;
    for (v, s) in body.iter().enumerate() {
        for x in crate::loops::operands(&s.expr) {
            if !f64_point(x) {
                continue;
            }
            let ok = match s.expr {
                Expr::Reduce(ReduceOp::Sum, _) => true,
                Expr::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div, ..) => {
                    f64_point(v)
                }
                Expr::Unary(op, _) => f64_point_unary(op) && f64_point(v),
                Expr::Narrow(_) => !s.row,
                _ => false,
            };
            if !ok {
                return Err(format!("the f64 value v{x} is used by v{v} ({:?})", s.expr));
            }
        }
        if f64_point(v) {
            let ok = match s.expr {
                Expr::Widen(x) => body[x].ty == ScalarType::F32,
                Expr::Const(_) => true,
                Expr::Binary(
                    BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div,
                    x,
                    y,
                ) => [x, y]
                    .iter()
                    .all(|&o| f64_point(o) || matches!(body[o].expr, Expr::Const(_))),
                Expr::Unary(op, x) => f64_point_unary(op) && f64_point(x),
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "the f64 point value v{v} ({:?}) has no vector form",
                    s.expr
                ));
            }
        }
        if s.row && s.ty == ScalarType::F32 {
            if let Expr::Narrow(x) = s.expr {
                if !body[x].row {
                    return Err(format!("v{v} narrows a point value"));
                }
            }
        }
        if let (false, Expr::Narrow(x)) = (s.row, &s.expr) {
            if !f64_point(*x) {
                return Err(format!("v{v} narrows a point value"));
            }
        }
    }
    for st in &nest.stores {
        if body[st.value].ty == ScalarType::F64 {
            return Err("an f64 value is stored".into());
        }
    }
    Ok(())
}
