//! Cranelift IR for kiln's pointwise float ops on `F32` scalars and `F32X4` vectors.
//!
//! Every emitter takes the type from its operand, so the same call builds a scalar tail
//! loop's body and a vector loop's body. The transcendental functions are branch-free
//! straight-line code (range reduction, a minimax polynomial in Horner form, integer tricks
//! on the bits, masks and selects for the special cases): no per-lane libm calls and no
//! control flow. Only `pow`, `fmod` and `atan2` call out (lane by lane for vectors), and
//! `sin`, `cos` and `tan` for arguments past 1e5: register [`libm_symbols`] with the
//! `JITBuilder` before building the module.
//!
//! Reference semantics: `UnaryOp::eval_f64` / `BinaryOp::eval_f64` (computed in f64 and
//! rounded to f32). The polynomials were fitted with a Remez exchange for the relative
//! error of the function; the "fit error" is that approximation error alone, the measured
//! error the whole f32 evaluation against the f64 reference in `math_tests.rs`
//! (`cargo test -p kiln-codegen cpu::math -- --nocapture` prints it): the worst of the
//! scalar and `F32X4` forms (which give identical bits), with and without FMA.
//!
//! | op | method | range reduction | polynomial (fit error) | max error, measured | where it holds |
//! |---|---|---|---|---|---|
//! | exp | `2^n·(1 + r(1 + r·P(r)))`, n added into the exponent bits | `n = round(x/ln2)` by the 1.5·2²³ shifter, `r = x - n·ln2` with a 2-part ln2 (first product exact), \|r\| ≤ ln2/2 | P deg 4, total deg 6 (3.1e-9) | 1.16 ulp (9.7e-8) | x ∈ [-87.34, 88.72]; above → +inf, below → 0 (outputs under 2⁻¹²⁶ flushed), exp(NaN) = NaN |
//! | log | `k·ln2 + f - f²/2 + f³·P(f)` | `x = m·2^k`, m ∈ [√½, √2), `f = m - 1` exact; denormals scaled by 2²³ first | P deg 7, total deg 10 (5.8e-9) | 0.81 ulp (8.0e-8) | all x > 0 incl. denormals; log 0 = -inf, log(x<0) = NaN, log inf = inf |
//! | sin, cos | `±sin r` or `±cos r` by the quadrant `j mod 4` | `j = round(2x/π)`, Cody–Waite `r = x - j·π/2` with a 3-part π/2 (8 + 8 + 24 bits), \|r\| ≤ π/4 | sin `r + r³S(r²)`, S deg 2 (3.8e-9); cos `1 - r²/2 + r⁴C(r²)`, C deg 2 (1.2e-10) | 1.57 ulp (1.3e-7) where \|y\| ≥ 0.1 (≥ 1e-3 for \|x\| ≤ 100); absolute ≤ 9.4e-9 near the roots | \|x\| ≤ 1e5 (products exact for \|j\| < 2¹⁶); the lanes past it (or infinite) take libm's f64 sine/cosine (`kiln_sinf`/`kiln_cosf`), as eager does, through a branch taken only when a lane is; NaN → NaN; ±0 → ±0 |
//! | log1p | `k·ln2 + ln(1 + f)` as log, `f = (m - 1) + c·2^-k` rounded once | `u = 1 + x` and its rounding error `c = x - (u - 1)` (exact); `u = m·2^k` as log's | log's P | 1.41 ulp (1.2e-7) | all x > -1 (tiny x: k = 0, f = x exactly); log1p(-1) = -inf, log1p(x<-1) = NaN, log1p(inf) = inf, -0 → -0 |
//! | expm1 | `2·(h·(e^r - 1) + (h - 1/2))`, `h = 2^(n-1)` (= `2^n(e^r - 1) + 2^n - 1`, no 2^128 needed) | exp's, on x clamped to [-20, 89] | `e^r - 1 = r + r²P(r)`, exp's P | 1.53 ulp (1.2e-7) | all x (tiny x: n = 0, `r + r²P`); past 88.72 → +inf, → -1 below -17.4, -0 → -0 |
//! | log2 | `k + L·(f - f²/2 + f³P(f))`, L = log2(e) in two parts, k added last | log's, denormals included | log's P | 0.98 ulp with FMA, 1.93 without (1.5e-7) | all x > 0; exact on powers of two (denormals too); specials as log |
//! | exp2 | `2^r·2^(n>>1)·2^(n-(n>>1))`, `2^r = e^(r·ln2)` (exp's polynomial) | `n = round(x)` by the shifter, `r = x - n` exact, \|r\| ≤ 1/2; x clamped to ±160 | exp's P | 1.15 ulp (9.5e-8) | all x; exact on integers; ≥ 128 → +inf; under 2⁻¹²⁶ correctly rounded denormals (no flush), 0 below 2⁻¹⁵⁰ |
//! | tan | `tan r` (j even) or `-1/tan r` (j odd), `tan r = r + r³T(r²)` | sin's quadrant j; `r = x - j·π/2` exact but for its roundings, as tan needs r relatively near its roots and poles (\|r\| ≥ 4.2e-9 for f32 x ≤ 1e5): with FMA 3 fused steps (π/2 as 3 × 24 bits, the first step exact, r rounded twice), without in f64 (π/2 as 33 + 33 + 53 bits, r rounded once) | T deg 6 on \|r\| ≤ 0.8 (3.3e-9) | 3.04 ulp with FMA, 2.43 without (1.9e-7), relative everywhere, poles and roots included | \|x\| ≤ 1e5; past it (or infinite) libm's f64 tangent (`kiln_tanf`) for those lanes, as sin/cos; ±0 → ±0 |
//! | sinh | `±(t + t/(t+1))/2`, `t = expm1(\|x\|)`, below 9; `±(e^(a/2)/2)·e^(a/2)` from 9 (e^-a under ¼ ulp) | expm1's and exp's | theirs | 2.79 ulp with FMA, 3.19 without (2.3e-7) | all x; finite to 89.4 (past exp's limit), ±inf → ±inf, ±0 → ±0, NaN → NaN |
//! | atan | `w + w³A(w²)`, past 1 `π/2 - atan w` (π/2 in two parts) | `w = min(\|x\|, 1)/max(\|x\|, 1)`, sign restored | A deg 8 on [0, 1] (3.4e-9) | 1.43 ulp (1.3e-7) | all x; atan ±inf = ±π/2, ±0 → ±0 |
//! | tanh | `sign(x)·(-t/(2 + t))`, `t = expm1(-2\|x\|)` (one path for all x, no select) | expm1 as exp's (`2^n·(r + r²P(r)) + (2^n - 1)`, exact scale), 2\|x\| clamped to 20 | exp's P | 2.49 ulp (1.6e-7) | all x; tanh ±inf = ±1 |
//! | erf | `x·(2/√π + x²·Q(x²))` for \|x\| < 0.75, else `±(1 - e^(-x²)·R(\|x\|))` | `x² = xh² + xl·(x + xh)` split exactly into exp (xh: 12 bits) | Q deg 4 in x² (1.4e-9); R deg 10 in `(a-3)/(a+3)` on a ∈ [0, 10] (1.4e-9) | 1.92 ulp (1.6e-7) | all x; erf ±inf = ±1; `e^(-x²)` taken as 0 past \|x\| = 9 (the same bits; no denormal product) |
//! | sigmoid | `1/(1 + e^-x)` | via exp | - | 2.28 ulp (1.5e-7) | all x; x < -88.7 gives 0 (true value < 3e-39) |
//! | silu | `x/(1 + e^-x)` | via exp | - | 1.89 ulp (1.4e-7) where \|y\| ≥ 1e-3; absolute ≤ 1.2e-10 below | all x |
//! | gelu (erf) | `x·Φ(x)`, `Φ(-\|x\|) = e^(-x²/2)·R(\|x\|/√2)/2`, `Φ(\|x\|) = 1 - Φ(-\|x\|)` | as erf (exact split of x²/2) | R as erf | 4.86 ulp (3.8e-7) for all \|y\| ≥ 1e-30, left tail included | all x; the tail taken as 0 past \|x\| = 12.9 (no denormals: \|y\| < 3e-37 changes) |
//! | `exp(x·x·(-0.5))` (the kernels' pattern; gelu's derivative) | `e^(-x²/2)` with `x²` split exactly as erf's, computed once per block with a gelu of the same x | as erf | exp's P | 1.11 ulp (9.4e-8) (`exp` of the rounded square: 62 ulp near \|x\| = 13) | all x; \|x\| clamped to 15 (0 from 13.2 on, flushed as exp), ±inf → 0, NaN → NaN |
//! | gelu (tanh) | `x/(1 + e^-2u)`, `u = √(2/π)(x + 0.044715x³)` (equals `x(1 + tanh u)/2`) | via exp | - | 12.6 ulp (9.8e-7) where \|y\| ≥ 1e-3 (the rounding of `2u`, ~1 ulp of backward error); absolute ≤ 9.1e-10 below | all x |
//! | sqrt, recip / rsqrt | `sqrt`, `1/x` / `1/sqrt(x)` | - | - | 0.5 ulp (correctly rounded) / 1.44 ulp | all x |
//! | pow | libm `powf` (the `libm` crate) per lane | - | - | 0.80 ulp | all x, y (C99 special cases, like `f32::powf`) |
//!
//! Errors are against the f64 reference over dense sweeps, seeded random values and special
//! values, relative over outputs with |y| ≥ 1e-30 unless said otherwise; for gelu-tanh and
//! silu, whose left tails tend to 0, the bound below |y| = 1e-3 is absolute (the tests allow
//! 1e-7), and for sin/cos near their roots absolute (the tests allow 1e-6). The gelu row is
//! against `x·erfc(-x/√2)/2`: the reference's `1 + erf(x/√2)` cancels in f64 for x ≲ -5.
//! The rows of log1p, expm1, log2, exp2, tan and atan are also the worst of one f32 bit
//! pattern in 31, every sign and exponent, through both forms (`every_f32`, an ignored
//! test; every f32 takes hours).
//!
//! Bounded arguments: where the loop nest's value ranges (`loops/ranges.rs`) put the
//! argument of `tanh`, `sigmoid`, `erf` or `exp` in a short finite interval, the op is one
//! polynomial fitted to that interval when the kernel is compiled (`math/fitted.rs`: the
//! lowest degree whose f32 evaluation is within 1.5 ulp of 1, relative, on a dense sweep;
//! `sigmoid` on [-1, 1] is `1/2 + x·Q(x²)` with Q of degree 4, 2.3 ulp at most measured
//! for every fitted case in `math_tests.rs`) instead of the general routine's reduction,
//! special cases and division. A whole unary chain (`loops/chains.rs`) on a bounded input
//! can be one such polynomial too (`chain_fits.rs`, `fitted::fit_chain`).
//!
//! Speed: the hot workload `gelu_tanh(x·1.5 + 0.5)·sigmoid(x)` is ~55 vector instructions
//! per 4 elements in a generated kernel (two exps, two `divps`; constants folded into their
//! instructions from the pool, see `const_pool.rs` and `cuts.rs`). `hot_workload_throughput`
//! (an ignored test) times the routines alone.
//!
//! `maximum`/`minimum` propagate NaN (`maxps`/`minps` plus an unordered-compare mask OR-ed
//! in), `relu` keeps NaN and is a single `maxps(0, x)` on vectors.

mod act;
pub(crate) use act::{negated, tanh_needs_clamp};
mod emit;
mod erf;
mod exp_log;
pub(crate) use exp_log::{exp_variant, ExpVariant};
mod fitted;
pub(crate) use fitted::fit;
mod trig;

#[cfg(test)]
#[path = "math_tests.rs"]
pub(crate) mod tests;

use crate::loops::ValueRange;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, Function, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITModule;
use cranelift_module::{Linkage, Module, ModuleError};
pub(crate) use emit::pool_const;
use emit::Em;
pub(crate) use fitted::{fit_chain, Fitted};
use kiln_ir::{BinaryOp, UnaryOp};
use std::cell::RefCell;
use std::collections::HashMap;

/// Library routines generated code calls lane by lane: each computes in f64 with the
/// `libm` crate and rounds once, as eager does. `pow`, `fmod` and `atan2` are calls;
/// `sin`, `cos` and `tan` only on their large-argument path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Libm {
    /// `x^y`
    Pow,
    /// C's `fmod(x, y)`
    Fmod,
    /// `atan2(y, x)`
    Atan2,
    /// sine (the large-argument path of `sin`)
    Sin,
    /// cosine (the large-argument path of `cos`)
    Cos,
    /// tangent (the large-argument path of `tan`)
    Tan,
}

impl Libm {
    /// Every routine, in the order of [`Math`]'s imports.
    const ALL: [Libm; 6] = [
        Libm::Pow,
        Libm::Fmod,
        Libm::Atan2,
        Libm::Sin,
        Libm::Cos,
        Libm::Tan,
    ];

    /// The symbol the JIT module imports it under, its arity and its address.
    fn symbol(self) -> (&'static str, usize, *const u8) {
        extern "C" fn pow(x: f32, y: f32) -> f32 {
            libm::powf(x, y)
        }
        extern "C" fn fmod(x: f32, y: f32) -> f32 {
            libm::fmodf(x, y)
        }
        extern "C" fn atan2(y: f32, x: f32) -> f32 {
            libm::atan2(f64::from(y), f64::from(x)) as f32
        }
        extern "C" fn sin(x: f32) -> f32 {
            libm::sin(f64::from(x)) as f32
        }
        extern "C" fn cos(x: f32) -> f32 {
            libm::cos(f64::from(x)) as f32
        }
        extern "C" fn tan(x: f32) -> f32 {
            libm::tan(f64::from(x)) as f32
        }
        match self {
            Libm::Pow => ("kiln_powf", 2, pow as *const u8),
            Libm::Fmod => ("kiln_fmodf", 2, fmod as *const u8),
            Libm::Atan2 => ("kiln_atan2f", 2, atan2 as *const u8),
            Libm::Sin => ("kiln_sinf", 1, sin as *const u8),
            Libm::Cos => ("kiln_cosf", 1, cos as *const u8),
            Libm::Tan => ("kiln_tanf", 1, tan as *const u8),
        }
    }
}

/// Beyond this |x| the polynomial sine, cosine and tangent lose accuracy (their Cody–Waite
/// reductions are exact up to about 1e5): such lanes take the libm path.
const TRIG_LIMIT: f32 = 1e5;

/// libm symbols the JIT module must know (registered with `JITBuilder::symbol` before the
/// module is built).
pub(crate) fn libm_symbols() -> Vec<(&'static str, *const u8)> {
    Libm::ALL
        .iter()
        .map(|l| {
            let (name, _, ptr) = l.symbol();
            (name, ptr)
        })
        .collect()
}

/// The length in vector instructions of `op` fitted to `range` (see `math/fitted.rs`), or
/// `None` when it is computed by its general routine. Judged with FMA (a cost estimate).
pub(crate) fn fitted_cost(op: UnaryOp, range: ValueRange) -> Option<usize> {
    fitted::fit(op, range, true).map(|f| f.coefs.len() + 2)
}

/// Emits kiln's float ops in a function being built.
pub(crate) struct Math {
    /// Whether the host has FMA: `mul_add` and the polynomials fuse when true.
    fma: bool,
    /// The [`Libm`] routines, imported into the function (in [`Libm::ALL`] order).
    calls: Vec<FuncRef>,
    /// The constant pool's base address in the function, once [`Math::set_pool`] is called.
    pool: Option<Value>,
    /// `e^(-x²/2)` by (block, x) as computed so far: gelu and its derivative's normal
    /// density in one kernel compute it once (Cranelift's value numbering does not run at
    /// the kernels' optimisation level). Reused only within the block that computed it.
    half_sq: RefCell<HashMap<(Block, Value), Value>>,
}

impl Math {
    /// Declares the libm imports it may call inside `func` (call once per function before
    /// emitting). `fma`: the host has FMA (from the ISA flags); when false, multiply-adds are
    /// `fmul` + `fadd`.
    #[allow(
        clippy::result_large_err,
        reason = "the module's own error type, passed through"
    )]
    pub(crate) fn new(
        module: &mut JITModule,
        func: &mut Function,
        fma: bool,
    ) -> Result<Math, ModuleError> {
        let mut calls = Vec::with_capacity(Libm::ALL.len());
        for l in Libm::ALL {
            let (name, arity, _) = l.symbol();
            let mut sig = module.make_signature();
            for _ in 0..arity {
                sig.params.push(AbiParam::new(types::F32));
            }
            sig.returns.push(AbiParam::new(types::F32));
            let id = module.declare_function(name, Linkage::Import, &sig)?;
            calls.push(module.declare_func_in_func(id, func));
        }
        Ok(Math {
            fma,
            calls,
            pool: None,
            half_sq: RefCell::default(),
        })
    }

    /// `l` applied lane by lane to `args` (all of `x`'s type).
    fn lanes(&self, e: &mut Em, l: Libm, args: &[Value]) -> Value {
        let f = self.calls[Libm::ALL
            .iter()
            .position(|k| *k == l)
            .expect("every routine")];
        if !e.ty.is_vector() {
            let call = e.b.ins().call(f, args);
            return e.b.inst_results(call)[0];
        }
        let mut out = args[0];
        for lane in 0..e.ty.lane_count() {
            let lane = u8::try_from(lane).expect("a 128-bit vector has few lanes");
            let scalars: Vec<Value> = args
                .iter()
                .map(|a| e.b.ins().extractlane(*a, lane))
                .collect();
            let call = e.b.ins().call(f, &scalars);
            let r = e.b.inst_results(call)[0];
            out = e.b.ins().insertlane(out, r, lane);
        }
        out
    }

    /// Vector constants become loads from the process-wide pool at `base` (a value
    /// defined in the function's entry block holding [`base_address`](super::const_pool::base_address)).
    pub(crate) fn set_pool(&mut self, base: Value) {
        self.pool = Some(base);
    }

    /// Whether multiply-adds fuse (the host has FMA).
    pub(crate) fn has_fma(&self) -> bool {
        self.fma
    }

    /// The pool base, if set.
    pub(crate) fn pool(&self) -> Option<Value> {
        self.pool
    }

    /// An emission context for `x`'s type.
    fn em<'a, 'f>(&self, b: &'a mut FunctionBuilder<'f>, x: Value) -> Em<'a, 'f> {
        let ty = b.func.dfg.value_type(x);
        Em::new(b, ty, self.fma, self.pool)
    }

    /// Every [`UnaryOp`] of kiln_ir on an `F32` or `F32X4` value `x` known to lie in `range`
    /// ([`ValueRange::ANY`] when nothing is known): a transcendental on a short finite
    /// interval is one polynomial fitted to it (`fitted.rs`), anything else
    /// [`Math::unary_general_in`].
    pub(crate) fn unary_in(
        &self,
        b: &mut FunctionBuilder,
        op: UnaryOp,
        x: Value,
        range: ValueRange,
    ) -> Value {
        if let Some(f) = fitted::fit(op, range, self.fma) {
            let mut e = self.em(b, x);
            return f.emit(&mut e, x);
        }
        self.unary_general_in(b, op, x, range)
    }

    /// `e^(-x²/2)` (the kernel emitter's form of `exp(x·x·(-0.5))`): `x²` is split exactly
    /// rather than rounded, and gelu computes the same instructions (see
    /// `erf::exp_neg_half_sq`).
    pub(crate) fn exp_neg_half_sq(&self, b: &mut FunctionBuilder, x: Value) -> Value {
        let mut e = self.em(b, x);
        self.half_sq_once(&mut e, x)
    }

    /// `erf::exp_neg_half_sq` of `x`, computed once per block.
    fn half_sq_once(&self, e: &mut Em, x: Value) -> Value {
        let key = (e.b.current_block().expect("emitting into a block"), x);
        if let Some(v) = self.half_sq.borrow().get(&key) {
            return *v;
        }
        let v = erf::exp_neg_half_sq(e, x);
        self.half_sq.borrow_mut().insert(key, v);
        v
    }

    /// A fitted polynomial (see `math/fitted.rs`) on `x`, an `F32` or `F32X4` value.
    pub(crate) fn fitted(&self, b: &mut FunctionBuilder, f: &Fitted, x: Value) -> Value {
        let mut e = self.em(b, x);
        f.emit(&mut e, x)
    }

    /// Every [`UnaryOp`] by its general routine, for `x` known to lie in `range`: `exp`,
    /// `tanh`, `sigmoid` and `silu` leave out the special-case handling the range excludes
    /// (the same results as with [`ValueRange::ANY`]).
    pub(crate) fn unary_general_in(
        &self,
        b: &mut FunctionBuilder,
        op: UnaryOp,
        x: Value,
        range: ValueRange,
    ) -> Value {
        let mut e = self.em(b, x);
        let e = &mut e;
        match op {
            UnaryOp::Neg => e.neg(x),
            UnaryOp::Abs => e.abs(x),
            UnaryOp::Exp => exp_log::exp_in(e, x, range),
            UnaryOp::Log => exp_log::log(e, x),
            UnaryOp::Sqrt => e.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = e.b.ins().sqrt(x);
                e.cdiv(1.0, s)
            }
            UnaryOp::Recip => e.cdiv(1.0, x),
            UnaryOp::Sin => {
                let fast = trig::sin_cos(e, x, false);
                self.libm_past_trig_limit(e, x, fast, Libm::Sin)
            }
            UnaryOp::Cos => {
                let fast = trig::sin_cos(e, x, true);
                self.libm_past_trig_limit(e, x, fast, Libm::Cos)
            }
            UnaryOp::Tanh => act::tanh(e, x, range),
            UnaryOp::Erf => erf::erf(e, x),
            UnaryOp::Sigmoid => act::sigmoid(e, x, range),
            // `x < 0 ? 0 : x`: NaN stays NaN; one `maxps(0, x)` on vectors.
            UnaryOp::Relu => e.max_keep_nan(x, 0.0),
            UnaryOp::Gelu => {
                let ex = self.half_sq_once(e, x);
                erf::gelu(e, x, ex)
            }
            UnaryOp::GeluTanh => act::gelu_tanh(e, x),
            UnaryOp::Silu => act::silu(e, x, range),
            UnaryOp::Floor => e.b.ins().floor(x),
            UnaryOp::Ceil => e.b.ins().ceil(x),
            UnaryOp::Round => e.b.ins().nearest(x),
            UnaryOp::Trunc => e.b.ins().trunc(x),
            UnaryOp::Sign => {
                // 1 above 0, -1 below, else (0, -0, NaN) 0: torch's sign
                let pos = e.cmpc(FloatCC::GreaterThan, x, 0.0);
                let neg = e.cmpc(FloatCC::LessThan, x, 0.0);
                let (one, minus_one, zero) = (e.c(1.0), e.c(-1.0), e.c(0.0));
                let t = e.sel(neg, minus_one, zero);
                e.sel(pos, one, t)
            }
            UnaryOp::Log1p => exp_log::log1p(e, x),
            UnaryOp::Expm1 => exp_log::expm1(e, x),
            UnaryOp::Log2 => exp_log::log2(e, x),
            UnaryOp::Exp2 => exp_log::exp2(e, x),
            UnaryOp::Tan => {
                let fast = trig::tan(e, x);
                self.libm_past_trig_limit(e, x, fast, Libm::Tan)
            }
            UnaryOp::Atan => trig::atan(e, x),
            UnaryOp::Sinh => {
                // a = |x|: below 9, (t + t/(t + 1))/2 with t = e^a - 1 (no cancellation
                // near 0); from 9, where e^-a is under a quarter ulp of e^a, (e^(a/2)/2)·e^(a/2),
                // finite up to sinh's own overflow (89.4, past exp's 88.7); x's sign last
                let a = e.abs(x);
                let t = exp_log::expm1(e, a);
                let t1 = e.addc(t, 1.0);
                let q = e.div(t, t1);
                let s = e.add(t, q);
                let small = e.mulc(s, 0.5);
                let h = e.mulc(a, 0.5);
                let u = exp_log::exp_in(e, h, ValueRange::ANY);
                let hu = e.mulc(u, 0.5);
                let big = e.mul(hu, u);
                let far = e.cmpc(FloatCC::GreaterThanOrEqual, a, 9.0);
                let m = e.sel(far, big, small);
                let sign = e.sign_of(x);
                let m = e.b.ins().bxor(m, sign);
                exp_log::keep_tiny(e, x, m)
            }
            // bool results: [`Math::bool_unary`]
            UnaryOp::Isnan | UnaryOp::Isinf | UnaryOp::LogicalNot | UnaryOp::BitwiseNot => {
                unreachable!("{} has a bool result", op.name())
            }
            // decomposed before lowering: the cpu backend does not render them
            UnaryOp::Relu6 | UnaryOp::Hardswish | UnaryOp::Mish => {
                unreachable!("{} is decomposed for the cpu backend", op.name())
            }
        }
    }

    /// The unary ops with a bool result, as masks; `x` is a float value, or a mask when
    /// `x_bool`.
    pub(crate) fn bool_unary(
        &self,
        b: &mut FunctionBuilder,
        op: UnaryOp,
        x: Value,
        x_bool: bool,
    ) -> Value {
        match op {
            UnaryOp::LogicalNot | UnaryOp::BitwiseNot if x_bool => not_mask(b, x),
            // a bool is never NaN nor infinite
            UnaryOp::Isnan | UnaryOp::Isinf if x_bool => {
                let f = not_mask(b, x);
                b.ins().band(x, f)
            }
            UnaryOp::Isnan => self.em(b, x).cmp(FloatCC::Unordered, x, x),
            UnaryOp::Isinf => {
                let mut e = self.em(b, x);
                let a = e.abs(x);
                e.cmpc(FloatCC::Equal, a, f32::INFINITY)
            }
            UnaryOp::LogicalNot => self.em(b, x).cmpc(FloatCC::Equal, x, 0.0),
            // `bitwise_not` of a float is a type error; the others have float results
            UnaryOp::BitwiseNot
            | UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Recip
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tanh
            | UnaryOp::Erf
            | UnaryOp::Sigmoid
            | UnaryOp::Relu
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Silu
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Trunc
            | UnaryOp::Sign
            | UnaryOp::Log1p
            | UnaryOp::Expm1
            | UnaryOp::Log2
            | UnaryOp::Exp2
            | UnaryOp::Tan
            | UnaryOp::Atan
            | UnaryOp::Sinh
            | UnaryOp::Relu6
            | UnaryOp::Hardswish
            | UnaryOp::Mish => {
                unreachable!("{} on a float value has no bool result", op.name())
            }
        }
    }

    /// The logical and bitwise binary ops, as masks; each operand is a float value (its
    /// truth: non-zero) or a mask.
    pub(crate) fn bool_binary(
        &self,
        b: &mut FunctionBuilder,
        op: BinaryOp,
        (x, x_bool): (Value, bool),
        (y, y_bool): (Value, bool),
    ) -> Value {
        let truth = |b: &mut FunctionBuilder, v: Value, is_bool: bool| {
            if is_bool {
                v
            } else {
                self.em(b, v).cmpc(FloatCC::NotEqual, v, 0.0)
            }
        };
        let (x, y) = (truth(b, x, x_bool), truth(b, y, y_bool));
        match op {
            BinaryOp::LogicalAnd | BinaryOp::BitwiseAnd => b.ins().band(x, y),
            BinaryOp::LogicalOr | BinaryOp::BitwiseOr => b.ins().bor(x, y),
            BinaryOp::LogicalXor | BinaryOp::BitwiseXor => b.ins().bxor(x, y),
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Pow
            | BinaryOp::Maximum
            | BinaryOp::Minimum
            | BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::Remainder
            | BinaryOp::Fmod
            | BinaryOp::Atan2 => unreachable!("{} is not a logical op", op.name()),
        }
    }

    /// The float binary ops: add, sub, mul, div, pow, maximum, minimum (NaN-propagating).
    /// `x` and `y` have the same type.
    ///
    /// # Panics
    /// On comparisons, which are not float-valued.
    pub(crate) fn binary(
        &self,
        b: &mut FunctionBuilder,
        op: BinaryOp,
        x: Value,
        y: Value,
    ) -> Value {
        debug_assert_eq!(b.func.dfg.value_type(x), b.func.dfg.value_type(y));
        let mut e = self.em(b, x);
        let e = &mut e;
        match op {
            BinaryOp::Add => e.add(x, y),
            BinaryOp::Sub => e.sub(x, y),
            BinaryOp::Mul => e.mul(x, y),
            BinaryOp::Div => e.div(x, y),
            BinaryOp::Pow => self.pow(e, x, y),
            BinaryOp::Maximum => {
                // `y < x ? x : y` (maxps x, y), then NaN where either is NaN.
                let m = e.cmp(FloatCC::LessThan, y, x);
                let mx = e.sel(m, x, y);
                let un = e.cmp(FloatCC::Unordered, x, y);
                e.nan_if(un, mx)
            }
            BinaryOp::Minimum => {
                // `x < y ? x : y` (minps x, y), then NaN where either is NaN.
                let m = e.cmp(FloatCC::LessThan, x, y);
                let mn = e.sel(m, x, y);
                let un = e.cmp(FloatCC::Unordered, x, y);
                e.nan_if(un, mn)
            }
            BinaryOp::Fmod => self.lanes(e, Libm::Fmod, &[x, y]),
            BinaryOp::Remainder => {
                // fmod, then `+ y` where the remainder is non-zero and its sign differs
                // from y's (Python's `%`, as torch computes it)
                let m = self.lanes(e, Libm::Fmod, &[x, y]);
                let nonzero = e.cmpc(FloatCC::NotEqual, m, 0.0);
                let y_neg = e.cmpc(FloatCC::LessThan, y, 0.0);
                let m_neg = e.cmpc(FloatCC::LessThan, m, 0.0);
                let differ = e.b.ins().bxor(y_neg, m_neg);
                let fix = e.b.ins().band(nonzero, differ);
                let shifted = e.add(m, y);
                e.sel(fix, shifted, m)
            }
            BinaryOp::Atan2 => self.lanes(e, Libm::Atan2, &[x, y]),
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::LogicalAnd
            | BinaryOp::LogicalOr
            | BinaryOp::LogicalXor
            | BinaryOp::BitwiseAnd
            | BinaryOp::BitwiseOr
            | BinaryOp::BitwiseXor => panic!("{} has a bool result, not a float op", op.name()),
        }
    }

    /// Sine, cosine or tangent: `fast` (the polynomial routine's value), and for the lanes
    /// whose |x| exceeds [`TRIG_LIMIT`] (or is infinite) libm's value `l`, through a branch
    /// taken only when a lane does.
    fn libm_past_trig_limit(&self, e: &mut Em, x: Value, fast: Value, l: Libm) -> Value {
        let ax = e.abs(x);
        let limit = e.c(TRIG_LIMIT);
        let big = e.b.ins().fcmp(FloatCC::GreaterThan, ax, limit);
        let any = if e.ty.is_vector() {
            e.b.ins().vany_true(big)
        } else {
            big
        };
        let slow = e.b.create_block();
        let join = e.b.create_block();
        let out = e.b.append_block_param(join, e.ty);
        e.b.ins().brif(any, slow, &[], join, &[fast.into()]);
        e.b.switch_to_block(slow);
        let exact = self.lanes(e, l, &[x]);
        // only the lanes past the limit take libm's value, so a lane's result never
        // depends on its neighbours (the vector and scalar forms agree bit for bit)
        let mixed = e.sel(big, exact, fast);
        e.b.ins().jump(join, &[mixed.into()]);
        e.b.switch_to_block(join);
        out
    }

    /// `x^y` through `kiln_powf`, one call per lane.
    fn pow(&self, e: &mut Em, x: Value, y: Value) -> Value {
        self.lanes(e, Libm::Pow, &[x, y])
    }

    /// `a*m + c`, fused when fma is on.
    #[allow(
        dead_code,
        reason = "interface for the kernel emitter; the tests use it"
    )]
    pub(crate) fn mul_add(&self, b: &mut FunctionBuilder, a: Value, m: Value, c: Value) -> Value {
        self.em(b, a).mul_add(a, m, c)
    }

    /// A float constant of the type `like` (`F32`, or a splat for `F32X4`).
    #[allow(
        dead_code,
        reason = "interface for the kernel emitter; the tests use it"
    )]
    pub(crate) fn constant(&self, b: &mut FunctionBuilder, like: Type, v: f32) -> Value {
        Em::new(b, like, self.fma, self.pool).c(v)
    }
}

/// The negation of a mask (an `I8` 0/1 scalar or an all-ones/all-zeros `I32X4`).
fn not_mask(b: &mut FunctionBuilder, m: Value) -> Value {
    if b.func.dfg.value_type(m).is_vector() {
        b.ins().bnot(m)
    } else {
        b.ins().bxor_imm_u(m, 1)
    }
}
