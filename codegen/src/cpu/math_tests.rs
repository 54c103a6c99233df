//! Accuracy tests for the math emitters: every op is JIT-compiled into
//! `fn(x, y, out, n)` with an `F32X4` loop and a scalar tail, run over sweeps, seeded
//! random inputs and special values in both forms (the whole array, and again in chunks of
//! 3 so that every element also goes through the scalar tail), with and without FMA, and
//! compared with the f64 reference (`UnaryOp::eval_f64` / `BinaryOp::eval_f64`). Each test
//! prints the measured maximum error (`--nocapture`); with `KILN_MATH_ASM` set, every
//! compiled kernel's machine code is printed too.

use super::{libm_symbols, Math};
use crate::loops::ValueRange;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, UserFuncName, Value};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use kiln_ir::{BinaryOp, UnaryOp};

/// `out[i] = op(x[i], y[i])` for `i < n`.
type KernelFn = unsafe extern "C" fn(*const f32, *const f32, *mut f32, usize);

/// What a test kernel computes per element.
#[derive(Clone, Copy, Debug)]
enum TestOp {
    /// `op(x)`
    Unary(UnaryOp),
    /// `op(x, y)`
    Binary(BinaryOp),
    /// `x*y + 0.25` through `Math::mul_add` and `Math::constant`.
    MulAdd,
    /// The hot workload `gelu_tanh(x*1.5 + 0.5) * sigmoid(x)`.
    Hot,
    /// `op(x)` by its general routine for `x` known to lie in the range
    /// (`Math::unary_general_in`)
    Bounded(UnaryOp, ValueRange),
    /// `op(x)` for `x` known to lie in the range, fitted where it can be (`Math::unary_in`)
    Fitted(UnaryOp, ValueRange),
    /// `e^(-x²/2)` (`Math::exp_neg_half_sq`, the kernels' form of `exp(x·x·(-0.5))`)
    HalfSquareExp,
    /// gelu(x) emitted after `e^(-x²/2)` of the same x, so it reuses that value (as a
    /// kernel computing gelu and its derivative does); stores the gelu
    GeluAfterDensity,
}

/// A compiled kernel and the module that owns its code.
struct Kernel {
    _module: JITModule,
    f: KernelFn,
}

/// The host ISA as the backend builds it (opt_level speed, native features).
fn host_isa() -> OwnedTargetIsa {
    let mut fb = settings::builder();
    fb.set("opt_level", "speed").unwrap();
    fb.set("is_pic", "false").unwrap();
    let ib = cranelift_native::builder_with_options(true).unwrap();
    ib.finish(settings::Flags::new(fb)).unwrap()
}

/// The FMA settings to test: always without, and with when the host has FMA.
fn fma_modes() -> Vec<bool> {
    let has_fma = host_isa()
        .isa_flags()
        .iter()
        .any(|v| v.name == "has_fma" && v.as_bool() == Some(true));
    if has_fma {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// Emits one element of `op` at byte offset `off` for the type `ty` (F32 or F32X4).
fn element(
    b: &mut FunctionBuilder,
    math: &Math,
    op: TestOp,
    p: &[Value],
    off: Value,
    ty: types::Type,
) {
    let flags = MemFlagsData::new().with_notrap();
    let xa = b.ins().iadd(p[0], off);
    let ya = b.ins().iadd(p[1], off);
    let oa = b.ins().iadd(p[2], off);
    let x = b.ins().load(ty, flags, xa, 0);
    let y = b.ins().load(ty, flags, ya, 0);
    let r = match op {
        TestOp::Unary(u) => math.unary_in(b, u, x, ValueRange::ANY),
        TestOp::Bounded(u, r) => math.unary_general_in(b, u, x, r),
        TestOp::Fitted(u, r) => math.unary_in(b, u, x, r),
        TestOp::Binary(o) => math.binary(b, o, x, y),
        TestOp::HalfSquareExp => math.exp_neg_half_sq(b, x),
        TestOp::GeluAfterDensity => {
            let _density = math.exp_neg_half_sq(b, x);
            math.unary_in(b, UnaryOp::Gelu, x, ValueRange::ANY)
        }
        TestOp::MulAdd => {
            let c = math.constant(b, ty, 0.25);
            math.mul_add(b, x, y, c)
        }
        TestOp::Hot => {
            let k = math.constant(b, ty, 1.5);
            let h = math.constant(b, ty, 0.5);
            let t = math.mul_add(b, x, k, h);
            let g = math.unary_in(b, UnaryOp::GeluTanh, t, ValueRange::ANY);
            let s = math.unary_in(b, UnaryOp::Sigmoid, x, ValueRange::ANY);
            math.binary(b, BinaryOp::Mul, g, s)
        }
    };
    b.ins().store(flags, r, oa, 0);
}

/// Emits `for (; i < end; i += step) element(ty)` with `i` in variable `iv`.
fn emit_loop(
    b: &mut FunctionBuilder,
    math: &Math,
    op: TestOp,
    p: &[Value],
    iv: cranelift_frontend::Variable,
    end: Value,
    ty: types::Type,
) {
    let hdr = b.create_block();
    let body = b.create_block();
    let next = b.create_block();
    b.ins().jump(hdr, &[]);
    b.switch_to_block(hdr);
    let i = b.use_var(iv);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, i, end);
    b.ins().brif(c, body, &[], next, &[]);
    b.switch_to_block(body);
    let i = b.use_var(iv);
    let off = b.ins().ishl_imm_u(i, 2);
    element(b, math, op, p, off, ty);
    let i = b.ins().iadd_imm_s(i, i64::from(ty.lane_count()));
    b.def_var(iv, i);
    b.ins().jump(hdr, &[]);
    b.switch_to_block(next);
}

/// JIT-compiles `op` into a kernel: an F32X4 loop over `n & !3` elements, then a scalar tail.
fn compile(op: TestOp, fma: bool) -> Kernel {
    let mut jb = JITBuilder::with_isa(host_isa(), default_libcall_names());
    for (name, ptr) in libm_symbols() {
        jb.symbol(name, ptr);
    }
    let mut module = JITModule::new(jb);
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    for _ in 0..4 {
        sig.params.push(AbiParam::new(ptr));
    }
    let id = module
        .declare_function("kernel", Linkage::Local, &sig)
        .unwrap();
    let mut ctx = module.make_context();
    ctx.set_disasm(std::env::var("KILN_MATH_ASM").is_ok());
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let math = Math::new(&mut module, &mut ctx.func, fma).unwrap();
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let iv = b.declare_var(ptr);
        let zero = b.ins().iconst(ptr, 0);
        b.def_var(iv, zero);
        let nvec = b.ins().band_imm_s(p[3], !3);
        emit_loop(&mut b, &math, op, &p, iv, nvec, types::F32X4);
        emit_loop(&mut b, &math, op, &p, iv, p[3], types::F32);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    module
        .define_function(id, &mut ctx)
        .unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
    if let Some(cc) = ctx.compiled_code() {
        if let Some(v) = &cc.vcode {
            eprintln!("{op:?} fma={fma}:\n{v}");
        }
    }
    module.clear_context(&mut ctx);
    module.finalize_definitions().unwrap();
    let code = module.get_finalized_function(id);
    // SAFETY: the function was built with the signature of `KernelFn`.
    let f = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
    Kernel { _module: module, f }
}

impl Kernel {
    /// Runs over whole slices (vector loop, then at most 3 scalar elements).
    fn run(&self, x: &[f32], y: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), y.len());
        let mut out = vec![0.0f32; x.len()];
        // SAFETY: all three buffers hold x.len() elements.
        unsafe { (self.f)(x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), x.len()) };
        out
    }

    /// Runs in chunks of 3, so every element goes through the scalar tail.
    fn run_scalar(&self, x: &[f32], y: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0f32; x.len()];
        for ((xc, yc), oc) in x.chunks(3).zip(y.chunks(3)).zip(out.chunks_mut(3)) {
            // SAFETY: the chunks have equal lengths.
            unsafe { (self.f)(xc.as_ptr(), yc.as_ptr(), oc.as_mut_ptr(), xc.len()) };
        }
        out
    }
}

/// SplitMix64, for seeded random inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f32 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (lo + (hi - lo) * u) as f32
    }

    /// Any bit pattern (NaNs, infinities and denormals included).
    fn bits(&mut self) -> f32 {
        f32::from_bits(self.next() as u32)
    }
}

/// `n` evenly spaced points in [lo, hi].
fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (lo + (hi - lo) * i as f64 / (n - 1) as f64) as f32)
        .collect()
}

/// `n` log-uniform points in [lo, hi] (both > 0).
fn log_sweep(lo: f64, hi: f64, n: usize) -> Vec<f32> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..n)
        .map(|i| (a + (b - a) * i as f64 / (n - 1) as f64).exp() as f32)
        .collect()
}

/// Every f32 within `k` ulps of `x`.
fn around(x: f32, k: i32) -> Vec<f32> {
    (-k..=k)
        .map(|d| f32::from_bits((x.to_bits() as i64 + d as i64) as u32))
        .collect()
}

/// Values every op is run on.
fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fc0_1234), // NaN with a payload
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        1e-40,
        -1e-40,
        1e-30,
        -1e-30,
        1e-10,
        -1e-10,
        1e-5,
        -1e-5,
        0.5,
        -0.5,
        1.0,
        -1.0,
        2.0,
        -2.0,
        10.0,
        -10.0,
        100.0,
        -100.0,
        1e10,
        -1e10,
        1e30,
        -1e30,
    ];
    v.extend([
        3.0f32,
        1.5,
        0.75,
        0.625,
        0.625f32.next_down(),
        0.75f32.next_down(),
    ]);
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

/// The f64 reference of `op` at (x, y).
fn reference(op: TestOp, x: f32, y: f32) -> f64 {
    let (x, y) = (f64::from(x), f64::from(y));
    match op {
        TestOp::Unary(u) | TestOp::Bounded(u, _) | TestOp::Fitted(u, _) => u.eval_f64(x),
        TestOp::Binary(b) => b.eval_f64(x, y),
        TestOp::MulAdd => x * y + 0.25,
        TestOp::Hot => unreachable!("the hot workload is only timed"),
        TestOp::HalfSquareExp => (-x * x / 2.0).exp(),
        TestOp::GeluAfterDensity => gelu_erfc(x),
    }
}

/// Error bounds: a result passes when its relative error is ≤ `rel` or its absolute
/// error ≤ `abs`; results whose reference is under the smallest normal may be anything of
/// magnitude ≤ the smallest normal with the right sign (flushed or approximate denormals).
#[derive(Clone, Copy)]
struct Tol {
    rel: f64,
    abs: f64,
    /// The relative error and ulps are reported over |reference| ≥ floor, the absolute
    /// error below it.
    floor: f64,
}

/// The default: relative 2e-6 (~16 ulp) over outputs ≥ 1e-30.
const REL: Tol = Tol {
    rel: 2e-6,
    abs: 0.0,
    floor: 1e-30,
};

/// Exact results (NaN matching NaN, either zero matching a zero).
const EXACT: Tol = Tol {
    rel: 0.0,
    abs: 0.0,
    floor: 1e-30,
};

/// Measured errors of one op.
#[derive(Default, Debug)]
struct Stats {
    max_ulp: f64,
    max_rel: f64,
    max_abs_below_floor: f64,
    worst_x: f32,
    count: usize,
    /// The maximum ulps of each FMA mode tested, as (fma, ulps).
    by_fma: Vec<(bool, f64)>,
}

impl Stats {
    /// Takes in the stats of one FMA mode.
    fn merge(&mut self, fma: bool, m: Stats) {
        if m.max_ulp > self.max_ulp {
            self.max_ulp = m.max_ulp;
            self.worst_x = m.worst_x;
        }
        self.max_rel = self.max_rel.max(m.max_rel);
        self.max_abs_below_floor = self.max_abs_below_floor.max(m.max_abs_below_floor);
        self.count += m.count;
        self.by_fma.push((fma, m.max_ulp));
    }
}

/// The distance from `out` to `r` in units of the f32 ulp at `r`.
pub(crate) fn ulps(out: f32, r: f64) -> f64 {
    let a = (r as f32).abs();
    let ulp = if a < f32::MIN_POSITIVE {
        f64::from(f32::from_bits(1))
    } else if a == f32::MAX {
        f64::from(a) - f64::from(a.next_down())
    } else {
        f64::from(a.next_up()) - f64::from(a)
    };
    (f64::from(out) - r).abs() / ulp
}

/// Checks one result; `Err` says why it fails.
fn check_one(out: f32, r: f64, tol: Tol, st: &mut Stats, x: f32) -> Result<(), String> {
    if r.is_nan() || out.is_nan() {
        return if r.is_nan() && out.is_nan() {
            Ok(())
        } else {
            Err(format!("got {out:e}, want {r:e}"))
        };
    }
    let r32 = r as f32;
    if r32.is_infinite() || out.is_infinite() {
        return if out == r32 {
            Ok(())
        } else {
            Err(format!("got {out:e}, want {r:e}"))
        };
    }
    let abs = (f64::from(out) - r).abs();
    let rel = if r == 0.0 { abs } else { abs / r.abs() };
    if r.abs() >= tol.floor {
        let u = ulps(out, r);
        if u > st.max_ulp {
            st.max_ulp = u;
            st.worst_x = x;
        }
        st.max_rel = st.max_rel.max(rel);
    } else {
        st.max_abs_below_floor = st.max_abs_below_floor.max(abs);
    }
    let min_normal = f64::from(f32::MIN_POSITIVE);
    let tiny_ok = r.abs() < min_normal
        && f64::from(out.abs()) <= min_normal
        && (out == 0.0 || (out > 0.0) == (r > 0.0));
    let exact_ok = out == r32;
    if rel <= tol.rel || abs <= tol.abs || tiny_ok || exact_ok {
        Ok(())
    } else {
        Err(format!(
            "got {out:e}, want {r:e} (rel {rel:.3e}, abs {abs:.3e})"
        ))
    }
}

/// Runs `op` on (xs, ys) in both forms and both FMA modes, checks every result against
/// the reference and that the scalar and vector forms agree; returns the worst stats.
fn check(op: TestOp, xs: &[f32], ys: &[f32], tol: Tol) -> Stats {
    check_against(op, xs, ys, tol, |x, y| reference(op, x, y))
}

/// [`check`] with another reference function.
fn check_against(
    op: TestOp,
    xs: &[f32],
    ys: &[f32],
    tol: Tol,
    reference: impl Fn(f32, f32) -> f64,
) -> Stats {
    // An odd length, so the vector loop ends in a scalar tail.
    let n = if xs.len().is_multiple_of(4) {
        xs.len() - 1
    } else {
        xs.len()
    };
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let mut st = Stats::default();
    for fma in fma_modes() {
        let k = compile(op, fma);
        let vec_out = k.run(xs, ys);
        let sca_out = k.run_scalar(xs, ys);
        let mut fails = Vec::new();
        let mut mode = Stats::default();
        for i in 0..n {
            let (v, s) = (vec_out[i], sca_out[i]);
            assert!(
                v.to_bits() == s.to_bits() || (v.is_nan() && s.is_nan()),
                "{op:?} fma={fma} x={:e} y={:e}: vector {v:e} != scalar {s:e}",
                xs[i],
                ys[i]
            );
            let r = reference(xs[i], ys[i]);
            if let Err(why) = check_one(v, r, tol, &mut mode, xs[i]) {
                fails.push(format!("x={:e} y={:e}: {why}", xs[i], ys[i]));
            }
        }
        mode.count = n;
        st.merge(fma, mode);
        assert!(
            fails.is_empty(),
            "{op:?} fma={fma}: {} failures, first: {:?}",
            fails.len(),
            &fails[..fails.len().min(8)]
        );
    }
    st
}

/// Checks a unary op on `xs` (with `ys` unused) and prints the stats.
fn check_unary(op: UnaryOp, xs: Vec<f32>, tol: Tol) -> Stats {
    check_unary_against(op, xs, tol, |x| op.eval_f64(x))
}

/// [`check_unary`] with another reference function.
fn check_unary_against(
    op: UnaryOp,
    xs: Vec<f32>,
    tol: Tol,
    reference: impl Fn(f64) -> f64,
) -> Stats {
    let ys = vec![0.0; xs.len()];
    let st = check_against(TestOp::Unary(op), &xs, &ys, tol, |x, _| {
        reference(f64::from(x))
    });
    let name = format!("{op:?}");
    let modes: Vec<String> = st
        .by_fma
        .iter()
        .map(|(fma, u)| format!("fma {}: {u:.2}", if *fma { "on" } else { "off" }))
        .collect();
    eprintln!(
        "{name:<10} max {:.2} ulp ({}), max rel {:.3e} over |ref| >= {:e} (worst x = {:e}); \
         max abs below: {:.3e}; {} values",
        st.max_ulp,
        modes.join(", "),
        st.max_rel,
        tol.floor,
        st.worst_x,
        st.max_abs_below_floor,
        st.count
    );
    st
}

/// Sweep + random + special inputs for a unary op on [lo, hi].
fn inputs(seed: u64, lo: f64, hi: f64, extra: &[f32]) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v = sweep(lo, hi, 200_001);
    v.extend((0..100_000).map(|_| rng.uniform(lo, hi)));
    v.extend((0..20_000).map(|_| rng.bits()));
    v.extend(specials());
    v.extend_from_slice(extra);
    v
}

/// Tiny values of both signs, where odd functions must stay relatively accurate.
fn tiny() -> Vec<f32> {
    let mut v = log_sweep(1e-38, 1e-2, 20_001);
    v.extend(log_sweep(1e-45, 1e-38, 101));
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

#[test]
fn exp_is_accurate_over_its_range() {
    let mut extra = around(88.72283, 8);
    extra.extend(around(-87.33655, 8));
    extra.extend(around(-103.9, 4));
    extra.extend(tiny());
    let st = check_unary(UnaryOp::Exp, inputs(1, -104.0, 89.0, &extra), REL);
    assert!(st.max_ulp <= 2.0, "exp: {st:?}");
}

/// The general routines' variants for a known argument range (`Math::unary_general_in`) give the general routine's
/// results on inputs in their range, bit for bit (NaN for NaN), vector and scalar, with and
/// without FMA: each leaves out only special-case handling its range cannot reach. The one
/// allowed difference is `exp` below the smallest normal result, where the scaled variant
/// rounds the denormal correctly: ≤ 1 ulp of the smallest normal there.
#[test]
fn bounded_variants_match_the_general_routines_on_their_ranges() {
    let range = |lo: f64, hi: f64, nan: bool| ValueRange::new(lo, hi, nan);
    let cases = [
        // exp_core alone
        (UnaryOp::Exp, range(-87.3, 88.7, false)),
        (UnaryOp::Exp, range(-1.0, 1.0, false)),
        // exp_scaled, NaN-safe, no underflow check
        (UnaryOp::Exp, range(-87.3, 88.0, true)),
        (UnaryOp::Exp, range(-1.0, 1.0, true)),
        // exp_scaled with the underflow check (softmax's x - max)
        (UnaryOp::Exp, range(f64::NEG_INFINITY, 0.0, true)),
        (UnaryOp::Sigmoid, range(-1.0, 1.0, true)),
        (UnaryOp::Sigmoid, range(-80.0, 85.0, false)),
        (UnaryOp::Silu, range(-2.0, 3.0, true)),
        (UnaryOp::Tanh, range(-10.0, 10.0, true)),
        (UnaryOp::Tanh, range(0.4, 1.9, false)),
    ];
    let mut rng = Rng(17);
    for (op, r) in cases {
        let (lo, hi) = (r.lo.max(-200.0), r.hi.min(200.0));
        let mut xs = sweep(lo, hi, 100_001);
        xs.extend((0..50_000).map(|_| rng.uniform(lo, hi)));
        xs.extend([lo as f32, hi as f32, 0.0, -0.0]);
        if r.lo == f64::NEG_INFINITY {
            xs.push(f32::NEG_INFINITY);
        }
        if r.nan {
            // NaNs with payloads too: `exp_core` would turn some into numbers
            xs.extend([
                f32::NAN,
                -f32::NAN,
                f32::from_bits(0x7fc0_01ff),
                f32::from_bits(0xffc0_0101),
            ]);
        }
        let xs: Vec<f32> = xs
            .into_iter()
            .filter(|&x| x.is_nan() || (r.lo <= f64::from(x) && f64::from(x) <= r.hi))
            .collect();
        let ys = vec![0.0f32; xs.len()];
        for fma in fma_modes() {
            let general = compile(TestOp::Unary(op), fma);
            let bounded = compile(TestOp::Bounded(op, r), fma);
            for (g, b) in [
                (general.run(&xs, &ys), bounded.run(&xs, &ys)),
                (general.run_scalar(&xs, &ys), bounded.run_scalar(&xs, &ys)),
            ] {
                for ((&x, &g), &b) in xs.iter().zip(&g).zip(&b) {
                    let same = g.to_bits() == b.to_bits() || (g.is_nan() && b.is_nan());
                    let denormal = g.abs() < f32::MIN_POSITIVE
                        && (g - b).abs() <= f32::MIN_POSITIVE * f32::EPSILON;
                    assert!(
                        same || denormal,
                        "{op:?} on {r:?} (fma {fma}) at {x:e} ({:#x}): general {g:e}, bounded {b:e}",
                        x.to_bits()
                    );
                }
            }
        }
    }
}

/// Transcendentals on short intervals (`Math::unary_in` with a fitted polynomial, see
/// `math/fitted.rs`) are within the fits' tolerance (1.5 ulp of 1, relative) of the f64
/// reference over dense sweeps and random values of their interval, NaN gives NaN, and the
/// vector and scalar forms agree bit for bit, with and without FMA.
#[test]
fn fitted_variants_are_accurate_on_their_ranges() {
    let cases = [
        (UnaryOp::Sigmoid, -1.0001, 1.0001),
        (UnaryOp::Tanh, 0.796, 1.444),
        (UnaryOp::Tanh, -0.3, 0.9),
        (UnaryOp::Erf, -0.7, 0.2),
        (UnaryOp::Exp, -0.25, 0.5),
    ];
    let tol = Tol {
        rel: 1.5 / 8_388_608.0,
        abs: 0.0,
        floor: 0.0,
    };
    let mut rng = Rng(23);
    for (op, lo, hi) in cases {
        let r = ValueRange::new(lo, hi, true);
        let mut xs = sweep(lo, hi, 200_001);
        xs.extend((0..50_000).map(|_| rng.uniform(lo, hi)));
        xs.extend([lo as f32, hi as f32, f32::NAN]);
        if lo < 0.0 && hi > 0.0 {
            xs.extend([0.0, -0.0, 1e-20, -1e-38]);
        }
        let xs: Vec<f32> = xs
            .into_iter()
            .filter(|&x| x.is_nan() || (lo <= f64::from(x) && f64::from(x) <= hi))
            .collect();
        let ys = vec![0.0f32; xs.len()];
        let st = check(TestOp::Fitted(op, r), &xs, &ys, tol);
        eprintln!(
            "fitted {op:?} on [{lo}, {hi}]: max {:.2} ulp, max rel {:.3e} (worst x = {:e})",
            st.max_ulp, st.max_rel, st.worst_x
        );
    }
}

#[test]
fn log_is_accurate_from_denormals_to_max() {
    let mut extra = log_sweep(1e-45, 3.4e38, 300_001);
    extra.extend(around(1.0, 1000));
    extra.extend(log_sweep(0.5, 2.0, 100_001));
    let mut rng = Rng(2);
    extra.extend((0..100_000).map(|_| rng.bits().abs()));
    let st = check_unary(UnaryOp::Log, inputs(2, 0.0, 100.0, &extra), REL);
    assert!(st.max_ulp <= 2.0, "log: {st:?}");
}

/// What log1p, expm1, log2, exp2, tan and atan are held to on their tests' inputs (ulps,
/// relative, over |result| ≥ 1e-30): a little over the maximum measured, FMA on or off
/// (1.40, 1.50, 1.77, 1.13, 2.24 and 3.04 on |x| ≤ 1e5, 1.33).
const LOG1P_ULP: f64 = 1.5;
const EXPM1_ULP: f64 = 1.6;
const LOG2_ULP: f64 = 1.9;
const EXP2_ULP: f64 = 1.25;
const TAN_ULP: f64 = 2.4;
const TAN_WIDE_ULP: f64 = 3.2;
const ATAN_ULP: f64 = 1.45;

/// log1p from just above -1 to f32::MAX, tiny arguments relatively (they are exact inputs
/// to the polynomial, not `log(1 + x)`).
#[test]
fn log1p_is_accurate_from_minus_one_to_max() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 200_001));
    extra.extend(log_sweep(1e-45, 3.4e38, 200_001));
    extra.extend(sweep(-0.5, 0.5, 100_001));
    extra.extend(around(-1.0, 1000));
    extra.extend(around(16_777_216.0, 100));
    let mut rng = Rng(21);
    extra.extend((0..100_000).map(|_| rng.bits().abs()));
    let st = check_unary(UnaryOp::Log1p, inputs(20, -1.0, 100.0, &extra), REL);
    assert!(st.max_ulp <= LOG1P_ULP, "log1p: {st:?}");
}

/// expm1 from where it is -1 to where it overflows, tiny arguments relatively (not
/// `exp(x) - 1`).
#[test]
fn expm1_is_accurate_over_its_range() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 200_001));
    extra.extend(around(88.72283, 8));
    extra.extend(around(-17.4, 100));
    let st = check_unary(UnaryOp::Expm1, inputs(22, -25.0, 89.0, &extra), REL);
    assert!(st.max_ulp <= EXPM1_ULP, "expm1: {st:?}");
}

/// `2^k` for k in [-149, 127] (denormals too), built from its bits.
fn pow2(k: i32) -> f32 {
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (k + 149))
    }
}

#[test]
fn log2_is_accurate_from_denormals_to_max() {
    let mut extra = log_sweep(1e-45, 3.4e38, 300_001);
    extra.extend(around(1.0, 1000));
    extra.extend(around(2.0, 1000));
    extra.extend(log_sweep(0.5, 2.0, 100_001));
    let mut rng = Rng(23);
    extra.extend((0..100_000).map(|_| rng.bits().abs()));
    let st = check_unary(UnaryOp::Log2, inputs(24, 0.0, 100.0, &extra), REL);
    assert!(st.max_ulp <= LOG2_ULP, "log2: {st:?}");
    // powers of two, denormals included, give their exponent exactly
    let xs: Vec<f32> = (-149..128).map(pow2).collect();
    check_unary(UnaryOp::Log2, xs, EXACT);
}

#[test]
fn exp2_is_accurate_over_its_range() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 100_001));
    extra.extend(around(128.0, 8));
    extra.extend(around(-126.0, 8));
    extra.extend(around(-149.0, 8));
    let st = check_unary(UnaryOp::Exp2, inputs(25, -152.0, 129.0, &extra), REL);
    assert!(st.max_ulp <= EXP2_ULP, "exp2: {st:?}");
    // integers give their power of two exactly, denormals included (bit for bit: the
    // checks above let any result under the smallest normal pass)
    let ks: Vec<i32> = (-160..140).collect();
    let xs: Vec<f32> = ks.iter().map(|&k| k as f32).collect();
    for fma in fma_modes() {
        let kern = compile(TestOp::Unary(UnaryOp::Exp2), fma);
        for out in [kern.run(&xs, &xs), kern.run_scalar(&xs, &xs)] {
            for (&k, &o) in ks.iter().zip(&out) {
                let want = match k {
                    ..=-150 => 0.0,
                    128.. => f32::INFINITY,
                    _ => pow2(k),
                };
                assert_eq!(o.to_bits(), want.to_bits(), "exp2({k}) (fma {fma})");
            }
        }
    }
}

/// Sin/cos on |x| ≤ 100: relative where the result is not near a root, else absolute 1e-6
/// (ulps reported over |result| ≥ 1e-3).
const TRIG: Tol = Tol {
    rel: 2e-6,
    abs: 1e-6,
    floor: 1e-3,
};

/// Sin/cos up to |x| = 1e5: as [`TRIG`], ulps reported over |result| ≥ 0.1 (closer to a
/// root, the absolute error of the reduction, ~2e-9 at 1e5, dominates).
const TRIG_WIDE: Tol = Tol {
    rel: 2e-6,
    abs: 1e-6,
    floor: 0.1,
};

/// Inputs for sin and cos on |x| ≤ `hi`: a sweep, random values, the f32 values next to
/// multiples of π/2 (the roots and extrema), tiny values and specials.
fn trig_inputs(seed: u64, hi: f64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v = sweep(-hi, hi, 200_001);
    v.extend((0..100_000).map(|_| rng.uniform(-hi, hi)));
    let kmax = (hi / std::f64::consts::FRAC_PI_2) as i64;
    let step = (kmax / 2000).max(1);
    for k in (-kmax..=kmax).step_by(step as usize) {
        v.extend(around((k as f64 * std::f64::consts::FRAC_PI_2) as f32, 2));
    }
    v.extend(tiny());
    v.extend(specials().into_iter().filter(|x| f64::from(x.abs()) <= hi));
    v.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    v
}

#[test]
fn sin_and_cos_are_accurate_to_1e5() {
    for op in [UnaryOp::Sin, UnaryOp::Cos] {
        let st = check_unary(op, trig_inputs(3, 100.0), TRIG);
        assert!(st.max_ulp <= 2.5, "{op:?}: {st:?}");
        let st = check_unary(op, trig_inputs(4, 1e5), TRIG_WIDE);
        assert!(st.max_ulp <= 2.5, "{op:?} wide: {st:?}");
        assert!(st.max_abs_below_floor <= 2e-8, "{op:?} wide: {st:?}");
    }
}

/// Inputs for tan on |x| ≤ `hi`: for every multiple of π/2 up to `hi` the f32 values next
/// to it (tan's roots and poles, where its reduction must be exact), then [`trig_inputs`]
/// (which end in the infinities, which take the libm path).
fn tan_inputs(seed: u64, hi: f64) -> Vec<f32> {
    let kmax = (hi / std::f64::consts::FRAC_PI_2) as i64;
    let mut v: Vec<f32> = (-kmax..=kmax)
        .flat_map(|k| around((k as f64 * std::f64::consts::FRAC_PI_2) as f32, 1))
        .filter(|x| f64::from(x.abs()) <= hi)
        .collect();
    v.extend(trig_inputs(seed, hi));
    v
}

/// tan relatively everywhere up to 1e5, next to every root and pole included (its
/// reduction is exact up to its final roundings), and libm's value past 1e5.
#[test]
fn tan_is_accurate_to_1e5_and_past_it() {
    let st = check_unary(UnaryOp::Tan, tan_inputs(26, 100.0), REL);
    assert!(st.max_ulp <= TAN_ULP, "tan: {st:?}");
    let st = check_unary(UnaryOp::Tan, tan_inputs(27, 1e5), REL);
    assert!(st.max_ulp <= TAN_WIDE_ULP, "tan wide: {st:?}");
    // past 1e5 (or infinite) the libm path, correctly rounded from f64
    let mut rng = Rng(28);
    let xs: Vec<f32> = (0..200_000)
        .map(|_| rng.bits())
        .filter(|x| x.is_nan() || x.abs() > 1e5)
        .collect();
    let st = check_unary(UnaryOp::Tan, xs, REL);
    assert!(st.max_ulp <= 0.5, "tan past 1e5: {st:?}");
}

#[test]
fn atan_is_accurate_everywhere() {
    let mut extra = tiny();
    extra.extend(sweep(-2.0, 2.0, 200_001));
    extra.extend(log_sweep(1e-45, 3.4e38, 200_001));
    extra.extend(around(1.0, 1000));
    let st = check_unary(UnaryOp::Atan, inputs(29, -100.0, 100.0, &extra), REL);
    assert!(st.max_ulp <= ATAN_ULP, "atan: {st:?}");
}

#[test]
fn sin_and_cos_stay_bounded_past_their_range() {
    let mut rng = Rng(4);
    let xs: Vec<f32> = (0..40_003).map(|_| rng.bits()).collect();
    let ys = vec![0.0; xs.len()];
    for op in [UnaryOp::Sin, UnaryOp::Cos] {
        for fma in fma_modes() {
            let k = compile(TestOp::Unary(op), fma);
            for (x, r) in xs.iter().zip(k.run(&xs, &ys)) {
                assert!(
                    r.abs() <= 1.0 || (r.is_nan() && !x.is_finite()),
                    "{op:?}({x:e}) = {r:e}"
                );
            }
        }
    }
}

#[test]
fn tanh_erf_sigmoid_are_accurate() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 100_001));
    for op in [UnaryOp::Tanh, UnaryOp::Erf, UnaryOp::Sigmoid] {
        let st = check_unary(op, inputs(5, -20.0, 20.0, &extra), REL);
        assert!(st.max_ulp <= 4.0, "{op:?}: {st:?}");
    }
    let st = check_unary(UnaryOp::Sigmoid, inputs(6, -110.0, 110.0, &[]), REL);
    assert!(st.max_ulp <= 4.0, "sigmoid wide: {st:?}");
}

/// gelu-tanh and silu: relative where the output is not in the left tail that tends to 0,
/// absolute 1e-7 there (ulps reported over |result| ≥ 1e-3).
const ACT: Tol = Tol {
    rel: 2e-6,
    abs: 1e-7,
    floor: 1e-3,
};

#[test]
fn gelu_tanh_and_silu_are_accurate() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 100_001));
    for (op, ulps) in [(UnaryOp::GeluTanh, 16.0), (UnaryOp::Silu, 4.0)] {
        let st = check_unary(op, inputs(7, -20.0, 20.0, &extra), ACT);
        assert!(st.max_ulp <= ulps, "{op:?}: {st:?}");
        let st = check_unary(op, inputs(8, -120.0, 120.0, &[]), ACT);
        assert!(st.max_ulp <= ulps, "{op:?} wide: {st:?}");
    }
}

/// `x·Φ(x)` with Φ from erfc, accurate in the left tail (the reference's `1 + erf(x/√2)`
/// cancels there even in f64).
fn gelu_erfc(x: f64) -> f64 {
    x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

#[test]
fn gelu_is_relatively_accurate_including_its_left_tail() {
    let mut extra = tiny();
    extra.extend(sweep(-1.0, 1.0, 100_001));
    extra.extend(sweep(-14.0, -1.0, 100_001));
    let st = check_unary_against(
        UnaryOp::Gelu,
        inputs(9, -20.0, 20.0, &extra),
        REL,
        gelu_erfc,
    );
    assert!(st.max_ulp <= 6.0, "gelu: {st:?}");
    let st = check_unary_against(
        UnaryOp::Gelu,
        inputs(10, -120.0, 120.0, &[]),
        REL,
        gelu_erfc,
    );
    assert!(st.max_ulp <= 6.0, "gelu wide: {st:?}");
    // And against the plain reference, with the absolute bound of the other activations.
    check_unary(UnaryOp::Gelu, inputs(11, -20.0, 20.0, &[]), ACT);
}

/// `e^(-x²/2)` from `x²` split exactly: a few ulp everywhere, where `exp` of the rounded
/// `x·x·(-0.5)` is off by up to `x²/2` half-ulps of its argument (~90 ulp near |x| = 13);
/// 0 from |x| ≈ 13.2 on (flushed below the smallest normal, as `exp` does), 0 at ±inf.
#[test]
fn half_square_exp_is_accurate_where_the_rounded_square_is_not() {
    let mut xs = inputs(12, -20.0, 20.0, &sweep(12.0, 13.2, 100_001));
    xs.extend(inputs(13, -1e4, 1e4, &[]));
    let ys = vec![0.0; xs.len()];
    let st = check(TestOp::HalfSquareExp, &xs, &ys, REL);
    eprintln!("e^(-x²/2): {st:?}");
    assert!(st.max_ulp <= 2.0, "e^(-x²/2): {st:?}");
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let k = compile(TestOp::HalfSquareExp, false);
    let out = k.run_scalar(&[inf, -inf, nan, 0.0, -0.0, 14.0], &[0.0; 6]);
    assert_eq!(&out[..2], &[0.0, 0.0], "e^(-inf) is 0");
    assert!(out[2].is_nan(), "NaN stays NaN");
    assert_eq!(&out[3..], &[1.0, 1.0, 0.0]);
}

/// Runs `f` with the x86 flags that flush denormal results to zero and read denormal
/// operands as zero (MXCSR's FTZ and DAZ) set, on this thread only.
#[cfg(target_arch = "x86_64")]
fn with_denormals_flushed<T>(f: impl FnOnce() -> T) -> T {
    let mut old: u32 = 0;
    // SAFETY: stmxcsr/ldmxcsr read and write this thread's SSE control register; the old
    // value is restored before returning.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut old) };
    let flushed = old | 0x8040;
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &flushed) };
    let r = f();
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &old) };
    r
}

/// gelu and erf never make or read a denormal (each costs a microcode assist of ~150
/// cycles on x86: gelu of a Linear's N(0, 20²) outputs ran at half speed): the same bits
/// with denormals flushed as without, around the tails where the products underflow
/// (gelu's |x| in [12.9, 13.2], erf's in [9, 10]), and no denormal result (for |x| ≥ 1e-30:
/// gelu and erf of a tiny x are rightly denormal).
#[cfg(target_arch = "x86_64")]
#[test]
fn gelu_and_erf_never_make_a_denormal() {
    let mut xs = sweep(-13.3, -12.8, 50_001);
    xs.extend(sweep(12.8, 13.3, 50_001));
    xs.extend(sweep(-10.0, -8.9, 20_001));
    xs.extend(sweep(8.9, 10.0, 20_001));
    xs.extend(inputs(15, -20.0, 20.0, &[]));
    // gelu(x) ≈ x/2 and erf(x) ≈ 1.13x for tiny x are rightly denormal (and a denormal x is
    // read as 0 with the flags set): not what this checks
    xs.retain(|x| x.abs() >= 1e-30);
    let ys = vec![0.0; xs.len()];
    for op in [UnaryOp::Gelu, UnaryOp::Erf] {
        for fma in fma_modes() {
            let k = compile(TestOp::Unary(op), fma);
            let plain = k.run(&xs, &ys);
            let flushed = with_denormals_flushed(|| k.run(&xs, &ys));
            for (i, (p, f)) in plain.iter().zip(&flushed).enumerate() {
                assert!(
                    p.to_bits() == f.to_bits() && !p.is_subnormal(),
                    "{op:?} fma={fma} x={:e}: {p:e}, {f:e} with denormals flushed",
                    xs[i]
                );
            }
        }
    }
}

/// gelu reusing an `e^(-x²/2)` already computed in the block gives gelu's own bits.
#[test]
fn gelu_sharing_the_normal_density_is_unchanged() {
    let xs = inputs(14, -20.0, 20.0, &specials());
    let ys = vec![0.0; xs.len()];
    for fma in fma_modes() {
        let alone = compile(TestOp::Unary(UnaryOp::Gelu), fma).run(&xs, &ys);
        let shared = compile(TestOp::GeluAfterDensity, fma).run(&xs, &ys);
        for (i, (a, s)) in alone.iter().zip(&shared).enumerate() {
            assert!(
                a.to_bits() == s.to_bits() || (a.is_nan() && s.is_nan()),
                "fma={fma} x={:e}: {a:e} alone, {s:e} shared",
                xs[i]
            );
        }
    }
    let st = check(TestOp::GeluAfterDensity, &xs, &ys, REL);
    assert!(st.max_ulp <= 6.0, "gelu after the density: {st:?}");
}

#[test]
fn algebraic_ops_are_correctly_rounded_or_close() {
    let mut rng = Rng(9);
    let mut xs: Vec<f32> = (0..200_000).map(|_| rng.bits()).collect();
    xs.extend(log_sweep(1e-45, 3.4e38, 100_001));
    xs.extend(specials());
    for op in [UnaryOp::Sqrt, UnaryOp::Recip] {
        check_unary(op, xs.clone(), EXACT);
    }
    let st = check_unary(UnaryOp::Rsqrt, xs.clone(), REL);
    assert!(st.max_ulp <= 1.5, "rsqrt: {st:?}");
    for op in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu] {
        check_unary(op, xs.clone(), EXACT);
    }
}

#[test]
fn relu_keeps_nan_and_zeroes_negatives() {
    let xs = [
        f32::NAN,
        -f32::NAN,
        -1.0,
        -0.0,
        0.0,
        2.5,
        f32::NEG_INFINITY,
        f32::INFINITY,
        -1e-45,
    ];
    for fma in fma_modes() {
        let k = compile(TestOp::Unary(UnaryOp::Relu), fma);
        for out in [k.run(&xs, &xs), k.run_scalar(&xs, &xs)] {
            assert!(out[0].is_nan() && out[1].is_nan(), "{out:?}");
            assert_eq!(&out[2..], &[0.0, 0.0, 0.0, 2.5, 0.0, f32::INFINITY, 0.0]);
        }
    }
}

/// The cross product of `vals` with itself, as (xs, ys).
fn pairs(vals: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for &a in vals {
        for &b in vals {
            xs.push(a);
            ys.push(b);
        }
    }
    (xs, ys)
}

#[test]
fn arithmetic_maximum_minimum_propagate_nan() {
    let (mut xs, mut ys) = pairs(&specials());
    let mut rng = Rng(10);
    for _ in 0..100_000 {
        xs.push(rng.uniform(-1e3, 1e3));
        ys.push(rng.uniform(-1e3, 1e3));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ] {
        check(TestOp::Binary(op), &xs, &ys, EXACT);
    }
    for fma in fma_modes() {
        let k = compile(TestOp::Binary(BinaryOp::Maximum), fma);
        let nan = f32::NAN;
        let out = k.run(&[nan, 1.0, nan, 2.0, 3.0], &[1.0, nan, nan, -0.0, 4.0]);
        assert!(out[..3].iter().all(|v| v.is_nan()), "{out:?}");
        assert_eq!(&out[3..], &[2.0, 4.0]);
        let k = compile(TestOp::Binary(BinaryOp::Minimum), fma);
        let out = k.run_scalar(&[nan, 1.0, nan, 2.0, 3.0], &[1.0, nan, nan, -0.0, 4.0]);
        assert!(out[..3].iter().all(|v| v.is_nan()), "{out:?}");
        assert_eq!(&out[3..], &[-0.0, 3.0]);
    }
}

#[test]
fn pow_matches_powf_including_edge_cases() {
    let vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        -8.0,
        1.0 / 3.0,
        2.5,
        1e-40,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let (mut xs, mut ys) = pairs(&vals);
    let mut rng = Rng(11);
    for _ in 0..50_000 {
        xs.push(rng.uniform(0.0, 10.0));
        ys.push(rng.uniform(-30.0, 30.0));
        xs.push(-(rng.uniform(0.0, 4.0).round()));
        ys.push(rng.uniform(-10.0, 10.0).round());
    }
    let st = check(TestOp::Binary(BinaryOp::Pow), &xs, &ys, REL);
    eprintln!(
        "pow        max {:.2} ulp, max rel {:.3e}",
        st.max_ulp, st.max_rel
    );
    assert!(st.max_ulp <= 1.0, "pow: {st:?}");
    for fma in fma_modes() {
        let k = compile(TestOp::Binary(BinaryOp::Pow), fma);
        let xs = [0.0, -8.0, -2.0, 1.0, f32::NAN, 0.0, -1.0];
        let ys = [0.0, 1.0 / 3.0, 3.0, f32::NAN, 0.0, -1.0, f32::INFINITY];
        for out in [k.run(&xs, &ys), k.run_scalar(&xs, &ys)] {
            assert_eq!(out[0], 1.0);
            assert!(out[1].is_nan());
            assert_eq!(out[2], -8.0);
            assert_eq!(out[3], 1.0);
            assert_eq!(out[4], 1.0);
            assert_eq!(out[5], f32::INFINITY);
            assert_eq!(out[6], 1.0);
        }
    }
}

#[test]
fn mul_add_and_constant() {
    let mut rng = Rng(12);
    let xs: Vec<f32> = (0..10_001).map(|_| rng.uniform(0.0, 100.0)).collect();
    let ys: Vec<f32> = (0..10_001).map(|_| rng.uniform(0.0, 100.0)).collect();
    let st = check(TestOp::MulAdd, &xs, &ys, REL);
    assert!(st.max_ulp <= 1.0, "mul_add: {st:?}");
}

#[test]
#[should_panic(expected = "bool result")]
fn comparisons_are_not_float_ops() {
    compile(TestOp::Binary(BinaryOp::Lt), false);
}

/// Times the hot workload `gelu_tanh(x*1.5 + 0.5) * sigmoid(x)` over 16M elements
/// (`cargo test -p kiln-codegen --release hot_workload -- --ignored --nocapture`).
#[test]
#[ignore = "timing, not a check"]
fn hot_workload_throughput() {
    let n = 16 << 20;
    let mut rng = Rng(13);
    let xs: Vec<f32> = (0..n).map(|_| rng.uniform(-6.0, 6.0)).collect();
    let ys = vec![0.0; n];
    for fma in fma_modes() {
        let k = compile(TestOp::Hot, fma);
        let mut out = vec![0.0f32; n];
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            // SAFETY: all buffers hold n elements.
            unsafe { (k.f)(xs.as_ptr(), ys.as_ptr(), out.as_mut_ptr(), n) };
            best = best.min(t.elapsed().as_secs_f64());
        }
        eprintln!(
            "hot workload fma={fma}: {:.2} ms for {n} elements ({:.2} ns/element, {:.1} GB/s)",
            best * 1e3,
            best * 1e9 / n as f64,
            (8 * n) as f64 / best / 1e9
        );
    }
}

#[test]
fn special_values_are_exact() {
    let inf = f32::INFINITY;
    let nan = f32::NAN;
    let cases: &[(UnaryOp, f32, f32)] = &[
        (UnaryOp::Exp, inf, inf),
        (UnaryOp::Exp, -inf, 0.0),
        (UnaryOp::Exp, nan, nan),
        (UnaryOp::Exp, 88.73, inf),
        (UnaryOp::Exp, -104.0, 0.0),
        (UnaryOp::Exp, 0.0, 1.0),
        (UnaryOp::Log, 0.0, -inf),
        (UnaryOp::Log, -0.0, -inf),
        (UnaryOp::Log, -1.0, nan),
        (UnaryOp::Log, -inf, nan),
        (UnaryOp::Log, inf, inf),
        (UnaryOp::Log, nan, nan),
        (UnaryOp::Log, 1.0, 0.0),
        (UnaryOp::Tanh, inf, 1.0),
        (UnaryOp::Tanh, -inf, -1.0),
        (UnaryOp::Tanh, nan, nan),
        (UnaryOp::Tanh, 20.0, 1.0),
        (UnaryOp::Erf, inf, 1.0),
        (UnaryOp::Erf, -inf, -1.0),
        (UnaryOp::Erf, nan, nan),
        (UnaryOp::Sigmoid, inf, 1.0),
        (UnaryOp::Sigmoid, -inf, 0.0),
        (UnaryOp::Sigmoid, nan, nan),
        (UnaryOp::Sin, inf, nan),
        (UnaryOp::Sin, -inf, nan),
        (UnaryOp::Sin, nan, nan),
        (UnaryOp::Sin, 0.0, 0.0),
        (UnaryOp::Sin, -0.0, -0.0),
        (UnaryOp::Cos, inf, nan),
        (UnaryOp::Cos, nan, nan),
        (UnaryOp::Cos, 0.0, 1.0),
        (UnaryOp::Gelu, inf, inf),
        (UnaryOp::Gelu, -inf, nan),
        (UnaryOp::Gelu, nan, nan),
        (UnaryOp::GeluTanh, inf, inf),
        (UnaryOp::GeluTanh, nan, nan),
        (UnaryOp::Silu, inf, inf),
        (UnaryOp::Silu, nan, nan),
        (UnaryOp::Relu, nan, nan),
        (UnaryOp::Sqrt, -1.0, nan),
        (UnaryOp::Rsqrt, 0.0, inf),
        (UnaryOp::Recip, -0.0, -inf),
        (UnaryOp::Log1p, -1.0, -inf),
        (UnaryOp::Log1p, -1.5, nan),
        (UnaryOp::Log1p, -inf, nan),
        (UnaryOp::Log1p, inf, inf),
        (UnaryOp::Log1p, nan, nan),
        (UnaryOp::Log1p, 0.0, 0.0),
        (UnaryOp::Log1p, -0.0, -0.0),
        (UnaryOp::Log1p, f32::MAX, 88.72284),
        (UnaryOp::Expm1, inf, inf),
        (UnaryOp::Expm1, -inf, -1.0),
        (UnaryOp::Expm1, nan, nan),
        (UnaryOp::Expm1, 88.73, inf),
        (UnaryOp::Expm1, f32::MAX, inf),
        (UnaryOp::Expm1, -17.5, -1.0),
        (UnaryOp::Expm1, -1e30, -1.0),
        (UnaryOp::Expm1, 0.0, 0.0),
        (UnaryOp::Expm1, -0.0, -0.0),
        (UnaryOp::Log2, 0.0, -inf),
        (UnaryOp::Log2, -0.0, -inf),
        (UnaryOp::Log2, -1.0, nan),
        (UnaryOp::Log2, -inf, nan),
        (UnaryOp::Log2, inf, inf),
        (UnaryOp::Log2, nan, nan),
        (UnaryOp::Log2, 1.0, 0.0),
        (UnaryOp::Log2, f32::from_bits(1), -149.0),
        (UnaryOp::Log2, 1024.0, 10.0),
        (UnaryOp::Exp2, inf, inf),
        (UnaryOp::Exp2, -inf, 0.0),
        (UnaryOp::Exp2, nan, nan),
        (UnaryOp::Exp2, 128.0, inf),
        (UnaryOp::Exp2, 1e30, inf),
        (UnaryOp::Exp2, -149.0, f32::from_bits(1)),
        (UnaryOp::Exp2, -151.0, 0.0),
        (UnaryOp::Exp2, 0.0, 1.0),
        (UnaryOp::Exp2, -0.0, 1.0),
        (UnaryOp::Exp2, 127.0, 1.701_411_8e38),
        (UnaryOp::Tan, 0.0, 0.0),
        (UnaryOp::Tan, -0.0, -0.0),
        (UnaryOp::Tan, inf, nan),
        (UnaryOp::Tan, -inf, nan),
        (UnaryOp::Tan, nan, nan),
        (UnaryOp::Atan, inf, std::f32::consts::FRAC_PI_2),
        (UnaryOp::Atan, -inf, -std::f32::consts::FRAC_PI_2),
        (UnaryOp::Atan, nan, nan),
        (UnaryOp::Atan, 0.0, 0.0),
        (UnaryOp::Atan, -0.0, -0.0),
        (UnaryOp::Atan, f32::MAX, std::f32::consts::FRAC_PI_2),
    ];
    for fma in fma_modes() {
        for &(op, x, want) in cases {
            let k = compile(TestOp::Unary(op), fma);
            let xs = [x; 5];
            for got in k.run(&xs, &xs).into_iter().chain(k.run_scalar(&xs, &xs)) {
                // zeros with their sign
                let same = got == want && (want != 0.0 || got.to_bits() == want.to_bits());
                assert!(
                    same || (got.is_nan() && want.is_nan()),
                    "{op:?}({x:e}) = {got:e}, want {want:e} (fma={fma})"
                );
            }
        }
    }
}

/// Every f32 (every `KILN_MATH_STRIDE`-th bit pattern, 1 by default) through the routines
/// named in `KILN_MATH_OPS` (comma-separated `Debug` names, e.g. `Tan,Atan`; all the
/// unary transcendentals by default), vector and scalar forms, with and without FMA,
/// against the f64 reference: prints the maximum error of each
/// (`cargo test -p kiln-codegen --release every_f32 -- --ignored --nocapture`).
#[test]
#[ignore = "minutes per op: a measurement, not a check"]
fn every_f32() {
    let stride: u64 = std::env::var("KILN_MATH_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let ops = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Log2,
        UnaryOp::Exp2,
        UnaryOp::Tan,
        UnaryOp::Atan,
    ];
    let wanted = std::env::var("KILN_MATH_OPS").ok();
    for op in ops {
        if let Some(w) = &wanted {
            if !w.split(',').any(|n| n == format!("{op:?}")) {
                continue;
            }
        }
        for fma in fma_modes() {
            let k = compile(TestOp::Unary(op), fma);
            let mut st = Stats::default();
            let mut fails = 0usize;
            let chunk: u64 = 1 << 20;
            let mut start = 0u64;
            while start < 1 << 32 {
                let xs: Vec<f32> = (0..chunk)
                    .map(|i| start + i * stride)
                    .take_while(|&b| b < 1 << 32)
                    .map(|b| f32::from_bits(b as u32))
                    .collect();
                let ys = vec![0.0; xs.len()];
                for out in [k.run(&xs, &ys), k.run_scalar(&xs, &ys)] {
                    for (&x, &o) in xs.iter().zip(&out) {
                        let r = op.eval_f64(f64::from(x));
                        if check_one(o, r, REL, &mut st, x).is_err() {
                            if fails < 8 {
                                eprintln!(
                                    "{op:?} fma={fma}: x={x:e} ({:#x}) got {o:e}, want {r:e}",
                                    x.to_bits()
                                );
                            }
                            fails += 1;
                        }
                    }
                }
                start += chunk * stride;
            }
            eprintln!(
                "{op:?} fma={fma}, 1 f32 in {stride}: max {:.2} ulp (worst x = {:e}), \
                 max rel {:.3e}; {fails} failures",
                st.max_ulp, st.worst_x, st.max_rel
            );
        }
    }
}

/// Every float unary op the cpu backend renders, from the op table (a new row is tested
/// without an edit here): the F32X4 and scalar forms give the same bits (any NaN for a
/// NaN), and both are within 16 ulp of the f64 reference rounded to f32 (relative where
/// |y| ≥ 1e-3, else 1e-9 absolute; NaN where the reference is NaN, infinities exactly) on
/// dense sweeps of each op's domain, seeded random values and the special values. The
/// tighter per-routine bounds of the tests above still hold; this is the floor every new
/// routine meets.
#[test]
fn every_rendered_float_unary_op_of_the_table() {
    use kiln_ir::{DTypeRule, Domain, Op};
    let mut rng = Rng(21);
    for u in UnaryOp::ALL {
        let info = u.info();
        let float = matches!(info.dtype, DTypeRule::Float | DTypeRule::Numeric);
        if !float || !crate::cpu::renders(&Op::Unary(u)) {
            continue;
        }
        let (lo, hi) = match info.domain[0] {
            Domain::Positive => (1e-6, 1e4),
            Domain::AboveMinusOne => (-0.999, 1e4),
            Domain::Small => (-3.0, 3.0),
            Domain::Real | Domain::NonZero | Domain::Integer => (-90.0, 90.0),
        };
        let mut xs = sweep(lo, hi, 20_001);
        xs.extend(sweep(-4.0, 4.0, 8_001));
        xs.extend((0..4000).map(|_| rng.uniform(lo, hi)));
        // sin, cos, tan past 1e4 are the tests above's; the infinities (libm's path) share
        // vectors with small values here, whose lanes must keep the polynomial's bits
        xs.extend(
            specials()
                .into_iter()
                .filter(|v| v.abs() <= 1e4 || !v.is_finite()),
        );
        let ys = vec![0.0f32; xs.len()];
        for fma in fma_modes() {
            let k = compile(TestOp::Unary(u), fma);
            let (v, s) = (k.run(&xs, &ys), k.run_scalar(&xs, &ys));
            for (i, &x) in xs.iter().enumerate() {
                // the same bits, or NaN both (a NaN's payload is not part of the result)
                assert!(
                    v[i].to_bits() == s[i].to_bits() || (v[i].is_nan() && s[i].is_nan()),
                    "{u:?}({x:e}) fma={fma}: vector {} vs scalar {}",
                    v[i],
                    s[i]
                );
                let want = u.eval_f64(f64::from(x)) as f32;
                let got = v[i];
                let ok = if want.is_nan() {
                    got.is_nan()
                } else if want.is_infinite() {
                    got == want
                } else if want.abs() >= 1e-3 {
                    let ulp = (f64::from(want).abs() * f64::EPSILON * 2f64.powi(29)).max(1e-45);
                    (f64::from(got) - f64::from(want)).abs() <= 16.0 * ulp
                } else {
                    (f64::from(got) - f64::from(want)).abs() <= 1e-9
                };
                assert!(ok, "{u:?}({x:e}) fma={fma}: got {got:e}, want {want:e}");
            }
        }
    }
}
