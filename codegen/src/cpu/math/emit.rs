//! The small instruction vocabulary the math emitters are written in: one [`Em`] wraps the
//! builder, the float type being computed (`F32` or `F32X4`) and whether `fma` may be used,
//! so every emitter reads the same for scalars and vectors.
//!
//! Masks are what `fcmp`/`icmp` give: an `I8` 0/1 for scalars, an all-ones/all-zeros
//! `I32X4` for vectors. [`Em::sel`] turns a mask into a `select` (scalar) or a
//! `bitselect` on the mask bit-cast to `F32X4` (vector), the shape Cranelift's x86 backend
//! lowers to one `blendv` (or to `minps`/`maxps` for the min/max patterns of
//! [`Em::min_keep_nan`] and [`Em::max_keep_nan`]).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, ConstantData, Endianness, InstBuilder, MemFlagsData, Type, Value,
};
use cranelift_frontend::FunctionBuilder;

/// Emission context for one float type.
pub(super) struct Em<'a, 'f> {
    /// The function being built.
    pub(super) b: &'a mut FunctionBuilder<'f>,
    /// `F32` or `F32X4`.
    pub(super) ty: Type,
    /// Whether `mul_add` may emit a fused `fma`.
    pub(super) fma: bool,
    /// The constant pool's base address in this function (see [`pool_const`]).
    pub(super) pool: Option<Value>,
}

impl<'a, 'f> Em<'a, 'f> {
    /// A context for values of type `ty` (`F32` or `F32X4`).
    pub(super) fn new(
        b: &'a mut FunctionBuilder<'f>,
        ty: Type,
        fma: bool,
        pool: Option<Value>,
    ) -> Self {
        assert!(
            ty == types::F32 || ty == types::F32X4,
            "kiln's math emitters take F32 or F32X4 values, not {ty}"
        );
        Em { b, ty, fma, pool }
    }

    /// True for `F32X4`.
    fn is_vec(&self) -> bool {
        self.ty.is_vector()
    }

    /// The integer type with the same lanes: `I32` or `I32X4`.
    pub(super) fn ity(&self) -> Type {
        if self.is_vec() {
            types::I32X4
        } else {
            types::I32
        }
    }

    /// A float constant (for vectors a load from the process-wide pool, see [`pool_const`],
    /// that x86 folds into the instruction using it).
    pub(super) fn c(&mut self, v: f32) -> Value {
        if self.is_vec() {
            pool_const(self.b, self.pool, self.ty, v.to_bits())
        } else {
            self.b.ins().f32const(v)
        }
    }

    /// A float constant given by its bits.
    pub(super) fn cbits(&mut self, bits: u32) -> Value {
        self.c(f32::from_bits(bits))
    }

    /// An `i32` constant of the integer type [`Em::ity`].
    pub(super) fn ci(&mut self, v: i32) -> Value {
        if self.is_vec() {
            pool_const(self.b, self.pool, types::I32X4, v as u32)
        } else {
            self.b.ins().iconst(types::I32, i64::from(v))
        }
    }

    /// `a + b`
    pub(super) fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }

    /// `a - b`
    pub(super) fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }

    /// `a * b`
    pub(super) fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }

    /// `a / b`
    pub(super) fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }

    /// `x + k`
    pub(super) fn addc(&mut self, x: Value, k: f32) -> Value {
        let k = self.c(k);
        self.add(x, k)
    }

    /// `k - x`
    pub(super) fn csub(&mut self, k: f32, x: Value) -> Value {
        let k = self.c(k);
        self.sub(k, x)
    }

    /// `x * k`
    pub(super) fn mulc(&mut self, x: Value, k: f32) -> Value {
        let k = self.c(k);
        self.mul(x, k)
    }

    /// `k / x`
    pub(super) fn cdiv(&mut self, k: f32, x: Value) -> Value {
        let k = self.c(k);
        self.div(k, x)
    }

    /// `-x` (on vectors an `xor` with the sign bit from the pool: one instruction, where
    /// `fneg` builds its mask in three)
    pub(super) fn neg(&mut self, x: Value) -> Value {
        if self.is_vec() && self.pool.is_some() {
            let k = self.cbits(0x8000_0000);
            return self.b.ins().bxor(x, k);
        }
        self.b.ins().fneg(x)
    }

    /// `|x|` (on vectors an `and` with the pool's mask, as for [`Em::neg`])
    pub(super) fn abs(&mut self, x: Value) -> Value {
        if self.is_vec() && self.pool.is_some() {
            return self.band_bits(x, 0x7fff_ffff);
        }
        self.b.ins().fabs(x)
    }

    /// `a * m + c`, fused when `fma` is on.
    pub(super) fn mul_add(&mut self, a: Value, m: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, m, c)
        } else {
            let p = self.b.ins().fmul(a, m);
            self.b.ins().fadd(p, c)
        }
    }

    /// `a * k + c` with a constant `k`.
    pub(super) fn mul_add_c(&mut self, a: Value, k: f32, c: Value) -> Value {
        let k = self.c(k);
        self.mul_add(a, k, c)
    }

    /// `a * m + k` with a constant `k`.
    pub(super) fn mul_addc(&mut self, a: Value, m: Value, k: f32) -> Value {
        let k = self.c(k);
        self.mul_add(a, m, k)
    }

    /// Horner evaluation of `coefs[0]·x^(n-1) + … + coefs[n-1]` (highest degree first).
    pub(super) fn horner(&mut self, x: Value, coefs: &[f32]) -> Value {
        let (first, rest) = coefs.split_first().expect("a polynomial has coefficients");
        let mut p = self.c(*first);
        for &k in rest {
            p = self.mul_addc(p, x, k);
        }
        p
    }

    /// A float comparison mask.
    pub(super) fn cmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(cc, a, b)
    }

    /// A float comparison mask against a constant: `x cc k`.
    pub(super) fn cmpc(&mut self, cc: FloatCC, x: Value, k: f32) -> Value {
        let k = self.c(k);
        self.cmp(cc, x, k)
    }

    /// `m ? t : f` for a mask from [`Em::cmp`] or an integer mask (`0`/`-1` lanes).
    pub(super) fn sel(&mut self, m: Value, t: Value, f: Value) -> Value {
        if self.is_vec() {
            let mf = self.b.ins().bitcast(self.ty, MemFlagsData::new(), m);
            self.b.ins().bitselect(mf, t, f)
        } else {
            self.b.ins().select(m, t, f)
        }
    }

    /// `m ? 0 : x`
    pub(super) fn zero_if(&mut self, m: Value, x: Value) -> Value {
        if self.is_vec() {
            let mf = self.b.ins().bitcast(self.ty, MemFlagsData::new(), m);
            self.b.ins().band_not(x, mf)
        } else {
            let z = self.c(0.0);
            self.b.ins().select(m, z, x)
        }
    }

    /// `m ? NaN : x`
    pub(super) fn nan_if(&mut self, m: Value, x: Value) -> Value {
        if self.is_vec() {
            // All-ones lanes are a (negative, quiet) NaN.
            let mf = self.b.ins().bitcast(self.ty, MemFlagsData::new(), m);
            self.b.ins().bor(x, mf)
        } else {
            let nan = self.c(f32::NAN);
            self.b.ins().select(m, nan, x)
        }
    }

    /// `min(x, k)` that keeps a NaN `x` (`k < x ? k : x`, one `minps` on vectors).
    pub(super) fn min_keep_nan(&mut self, x: Value, k: f32) -> Value {
        let k = self.c(k);
        let m = self.cmp(FloatCC::LessThan, k, x);
        self.sel(m, k, x)
    }

    /// `max(x, k)` that keeps a NaN `x` (`x < k ? k : x`, one `maxps` on vectors).
    pub(super) fn max_keep_nan(&mut self, x: Value, k: f32) -> Value {
        let k = self.c(k);
        let m = self.cmp(FloatCC::LessThan, x, k);
        self.sel(m, k, x)
    }

    /// The bits of a float value as [`Em::ity`].
    pub(super) fn int_bits(&mut self, x: Value) -> Value {
        let it = self.ity();
        self.b.ins().bitcast(it, MemFlagsData::new(), x)
    }

    /// An integer value's bits as a float.
    pub(super) fn float_bits(&mut self, i: Value) -> Value {
        self.b.ins().bitcast(self.ty, MemFlagsData::new(), i)
    }

    /// `x & bits` on a float's bits.
    pub(super) fn band_bits(&mut self, x: Value, bits: u32) -> Value {
        let k = self.cbits(bits);
        self.b.ins().band(x, k)
    }

    /// `x | bits` on a float's bits.
    pub(super) fn bor_bits(&mut self, x: Value, bits: u32) -> Value {
        let k = self.cbits(bits);
        self.b.ins().bor(x, k)
    }

    /// The sign bit of `x` (`x & 0x8000_0000`) as a float.
    pub(super) fn sign_of(&mut self, x: Value) -> Value {
        self.band_bits(x, 0x8000_0000)
    }

    /// `x` in double precision (exactly): one `F64` for `F32`, two `F64X2` (lanes 0–1, then
    /// 2–3) for `F32X4`.
    pub(super) fn widen(&mut self, x: Value) -> Vec<Value> {
        if !self.is_vec() {
            return vec![self.b.ins().fpromote(types::F64, x)];
        }
        let lo = self.b.ins().fvpromote_low(x);
        // lanes 2, 3 moved to 0, 1 (one `pshufd`)
        let high = self.shuffle_lanes(x, x, [2, 3, 2, 3]);
        let hi = self.b.ins().fvpromote_low(high);
        vec![lo, hi]
    }

    /// The values of [`Em::widen`]'s form rounded to f32 and put back into one `F32`/`F32X4`.
    pub(super) fn narrow(&mut self, parts: &[Value]) -> Value {
        if !self.is_vec() {
            return self.b.ins().fdemote(types::F32, parts[0]);
        }
        let lo = self.b.ins().fvdemote(parts[0]);
        let hi = self.b.ins().fvdemote(parts[1]);
        self.shuffle_lanes(lo, hi, [0, 1, 4, 5])
    }

    /// An f64 constant of [`Em::widen`]'s type (`F64`, or an `F64X2` splat).
    pub(super) fn c64(&mut self, v: f64) -> Value {
        if !self.is_vec() {
            return self.b.ins().f64const(v);
        }
        let bytes: Vec<u8> = (0..2).flat_map(|_| v.to_bits().to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(types::F64X2, c)
    }

    /// The `F32X4` whose lane `i` is lane `lanes[i]` of `a` (0–3) or of `b` (4–7).
    fn shuffle_lanes(&mut self, a: Value, b: Value, lanes: [u8; 4]) -> Value {
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let ab = self.b.ins().bitcast(types::I8X16, little, a);
        let bb = self.b.ins().bitcast(types::I8X16, little, b);
        let mask: Vec<u8> = lanes
            .iter()
            .flat_map(|&l| (0..4).map(move |k| 4 * l + k))
            .collect();
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(mask));
        let r = self.b.ins().shuffle(ab, bb, mask);
        self.b.ins().bitcast(types::F32X4, little, r)
    }

    /// A mask of the lanes whose integer `i` has bit 0 set.
    pub(super) fn odd_mask(&mut self, i: Value) -> Value {
        let one = self.ci(1);
        let bit = self.b.ins().band(i, one);
        self.b.ins().icmp(IntCC::Equal, bit, one)
    }
}

/// A 4-lane constant of 32-bit lanes all equal to `bits`, as a pure load from the process-wide
/// [`const_pool`](crate::cpu::const_pool) at `pool` (the pool's base address, defined once
/// in the function), which x86 folds into the one instruction that uses it; without a base,
/// or with the pool full, a `vconst` from the function's own constant pool.
pub(crate) fn pool_const(
    b: &mut FunctionBuilder,
    pool: Option<Value>,
    ty: Type,
    bits: u32,
) -> Value {
    if let (Some(base), Some(off)) = (pool, crate::cpu::const_pool::offset_of(bits)) {
        let flags = MemFlagsData::new()
            .with_notrap()
            .with_readonly()
            .with_can_move()
            .with_aligned();
        return b.ins().load(ty, flags, base, off);
    }
    vconst_bits(b, ty, bits)
}

/// A 4-lane constant of 32-bit lanes all equal to `bits`, from the function's constant pool.
pub(crate) fn vconst_bits(b: &mut FunctionBuilder, ty: Type, bits: u32) -> Value {
    let bytes: Vec<u8> = (0..4).flat_map(|_| bits.to_le_bytes()).collect();
    let c = b
        .func
        .dfg
        .constants
        .insert(cranelift_codegen::ir::ConstantData::from(bytes));
    b.ins().vconst(ty, c)
}
