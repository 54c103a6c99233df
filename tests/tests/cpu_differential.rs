//! The `cpu` backend (generated code) vs eager vs the interpreter backend, on every op and
//! on fused patterns: pointwise ops (tensor-tensor, tensor-scalar, broadcasting), `where`,
//! casts, reductions, argmax, var, softmax, log_softmax, layer_norm, rms_norm, matmul and its
//! epilogues, layout ops, hand-written chains and the model zoo, over sizes that are and are
//! not multiples of the vector width, non-contiguous inputs (transposed views, step-2
//! slices, expanded broadcasts, offset windows) and symbolic dims.
//!
//! Every case runs three times: with fusion on (`fused::*`) and with every op its own kernel
//! (`unfused::*`), both on Cranelift code, and with fusion on and every kernel built by the
//! C compiler (`c_tier::*`, the C tier up front, every aligned output store streaming;
//! Cranelift where it does not take a kernel). Each test compiles its function once per input shape (cpu and
//! interpreter backends) and calls it on several layouts of inputs; the compiled result is
//! compared with eager, and both with the interpreter, within a tolerance that depends on the
//! kind of computation (see [`Tol`]). A test collects every mismatch before failing, so that
//! its message lists all the failing cases. `random_programs` replays random IR programs
//! (the IR property tests' generator) as user code, as `compile_random_graphs.rs` does.
//!
//! A known failure gets a directed test marked `#[ignore = "..."]` with its reason (run
//! them with `--ignored`); none is known now, and the random programs skip no graph.

#[path = "../../ir/tests/common/graph_gen.rs"]
mod graph_gen;

use graph_gen::{arb_graph_with, GenConfig};
use kiln::graph_exec::replay;
use kiln::ir::{Arg, BinaryOp, DTypeRule, Domain, NodeId, Op, OpInfo, UnaryOp};
use kiln::{
    compile_with, Backend, CompileOptions, DType, Dynamic, Graph, Result, Tensor, TierPolicy,
};
use kiln_tests::{binary_suite, unary_suite};
use proptest::test_runner::TestCaseError;
use std::collections::HashSet;
use std::fmt::Write;

// ---------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------

/// The sizes of the varying dim of 1-d cases: 1, odd sizes, a non-multiple of the vector
/// width and a large power of two.
const SIZES: [usize; 5] = [1, 3, 50, 783, 4096];

/// 2-d shapes: rows × columns that are small, odd, a single long row and a squarish one.
const SHAPES_2D: [[usize; 2]; 4] = [[3, 50], [7, 783], [1, 4096], [33, 17]];

/// The sizes a symbolic dim takes in the dynamic-shape cases.
const SYMBOLIC_SIZES: [usize; 3] = [3, 50, 783];

/// How an input is laid out in memory (the logical values are what the ops see).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// row-major
    Contiguous,
    /// the last two dims are a transposed view of a row-major tensor
    Transposed,
    /// `x.slice(-1, 0, 2n, 2)` of a tensor twice as wide
    StridedLast,
    /// `x.slice(0, 0, 2n, 2)` of a tensor twice as tall
    StridedFirst,
    /// a size-1 first dim expanded (stride 0 on the outer dim)
    ExpandedFirst,
    /// a size-1 last dim expanded (stride 0 on the inner dim)
    ExpandedLast,
    /// a window (non-zero storage offset) of a larger tensor
    Offset,
}

use Layout::*;

/// The layouts worth testing for a tensor of rank `rank`.
fn layouts(rank: usize) -> &'static [Layout] {
    match rank {
        0 => &[Contiguous],
        1 => &[Contiguous, StridedLast, ExpandedFirst, Offset],
        _ => &[
            Contiguous,
            Transposed,
            StridedLast,
            StridedFirst,
            ExpandedFirst,
            ExpandedLast,
        ],
    }
}

/// Which values to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dist {
    /// standard normal
    Normal,
    /// `|normal| + 0.1`: for log, sqrt, rsqrt and pow bases
    Positive,
    /// multiples of 0.5 in [-2, 2]: many ties, for comparisons, max/min and argmax
    Quantized,
    /// normal times a factor (saturation, large logits)
    Scaled(f64),
    /// integers in [-5, 5) of an integer dtype
    Int(DType),
    /// uniform in (-0.9, 2.1): log1p's domain
    AboveMinusOne,
}

impl Dist {
    /// The distribution of operand `i` of an op, from its domain in the op table.
    fn of(info: &OpInfo, i: usize) -> Dist {
        match info.domain.get(i).copied().unwrap_or(Domain::Real) {
            Domain::Real | Domain::NonZero => Dist::Normal,
            Domain::Positive => Dist::Positive,
            Domain::AboveMinusOne => Dist::AboveMinusOne,
            Domain::Small => Dist::Scaled(2.0),
            Domain::Integer => Dist::Int(DType::I32),
        }
    }
}

/// A contiguous tensor of `shape` drawn from `dist` with `seed`.
fn draw(shape: &[usize], dist: Dist, seed: u64) -> Tensor {
    let normal = || Tensor::randn(shape, DType::F32, seed).unwrap();
    let uniform = || Tensor::rand(shape, DType::F32, seed).unwrap();
    match dist {
        Dist::Normal => normal(),
        Dist::Positive => normal().abs().unwrap().add(0.1).unwrap(),
        Dist::Scaled(k) => normal().mul(k).unwrap(),
        Dist::AboveMinusOne => uniform().mul(3.0).unwrap().sub(0.9).unwrap(),
        Dist::Quantized => uniform()
            .mul(9.0)
            .unwrap()
            .cast(DType::I32)
            .unwrap()
            .cast(DType::F32)
            .unwrap()
            .mul(0.5)
            .unwrap()
            .sub(2.0)
            .unwrap(),
        Dist::Int(dtype) => uniform()
            .mul(10.0)
            .unwrap()
            .cast(dtype)
            .unwrap()
            .sub(5i64)
            .unwrap(),
    }
}

/// An input of `shape` in `layout`. Layouts that do not apply to the rank give a
/// contiguous tensor.
fn input(shape: &[usize], dist: Dist, layout: Layout, seed: u64) -> Tensor {
    let r = shape.len();
    let mut s = shape.to_vec();
    let t = match layout {
        Transposed if r >= 2 => {
            s.swap(r - 1, r - 2);
            draw(&s, dist, seed).transpose(-1, -2).unwrap()
        }
        StridedLast if r >= 1 => {
            s[r - 1] *= 2;
            draw(&s, dist, seed)
                .slice(-1, 0, s[r - 1] as i64, 2)
                .unwrap()
        }
        StridedFirst if r >= 1 => {
            s[0] *= 2;
            draw(&s, dist, seed).slice(0, 0, s[0] as i64, 2).unwrap()
        }
        ExpandedFirst if r >= 1 => {
            s[0] = 1;
            draw(&s, dist, seed).expand(&dims_i64(shape)).unwrap()
        }
        ExpandedLast if r >= 1 => {
            s[r - 1] = 1;
            draw(&s, dist, seed).expand(&dims_i64(shape)).unwrap()
        }
        Offset if r >= 1 => {
            s[0] += 3;
            draw(&s, dist, seed).narrow(0, 2, shape[0]).unwrap()
        }
        _ => draw(shape, dist, seed),
    };
    assert_eq!(t.shape(), shape);
    t
}

fn dims_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

fn normal(shape: &[usize], seed: u64) -> Tensor {
    draw(shape, Dist::Normal, seed)
}

fn describe_inputs(xs: &[Tensor]) -> String {
    xs.iter()
        .map(|t| format!("{}{:?} strides {:?}", t.dtype(), t.shape(), t.strides()))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------

/// The tolerance of a case: `|got - want| <= atol + rtol * |want|` for f32 results, NaN
/// only against NaN and infinities exactly. Integer and bool results compare exactly; other
/// float dtypes use the per-dtype tolerance of the eager-vs-interpreter tests.
#[derive(Clone, Copy, Debug)]
enum Tol {
    /// pointwise f32 math: 1e-5 relative + 1e-6 absolute
    Pointwise,
    /// reductions, norms, softmax: 1e-4 relative + 1e-5 absolute
    Reduce,
    /// a contraction over `k` terms (matmul, and whatever follows it): 1e-4 relative + 1e-5
    /// absolute, the absolute part scaled by sqrt(k)
    Matmul(usize),
}

impl Tol {
    fn bounds(self, dtype: DType) -> (f64, f64) {
        match dtype {
            DType::F32 => match self {
                Tol::Pointwise => (1e-6, 1e-5),
                Tol::Reduce => (1e-5, 1e-4),
                Tol::Matmul(k) => (1e-5 * (k.max(1) as f64).sqrt(), 1e-4),
            },
            DType::F64 => match self {
                Tol::Pointwise => (1e-12, 1e-12),
                _ => (1e-10, 1e-10),
            },
            DType::F16 => (1e-3, 2e-3),
            DType::BF16 => (1e-2, 1.6e-2),
            _ => (0.0, 0.0),
        }
    }
}

fn within(got: f64, want: f64, (atol, rtol): (f64, f64)) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else if want.is_infinite() {
        got == want
    } else {
        (got - want).abs() <= atol + rtol * want.abs()
    }
}

/// Compares two results; `Err` says how they differ (the first few elements).
fn compare(got: &Tensor, want: &Tensor, tol: Tol) -> std::result::Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "type {}{:?} vs {}{:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let bounds = tol.bounds(want.dtype());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let bad: Vec<usize> = (0..w.len())
        .filter(|&i| !within(g[i], w[i], bounds))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "{} of {} elements differ (atol {:e}, rtol {:e}):",
        bad.len(),
        w.len(),
        bounds.0,
        bounds.1
    );
    for &i in bad.iter().take(4) {
        let _ = write!(
            msg,
            " [{i}{:?}] {} vs {};",
            unravel(i, want.shape()),
            g[i],
            w[i]
        );
    }
    Err(msg)
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
    }
    idx
}

/// Accumulates the mismatches of one test, then fails with all of them.
struct Report {
    test: String,
    fusion: bool,
    failures: Vec<String>,
    checks: usize,
}

impl Report {
    fn new(test: &str, fusion: bool) -> Report {
        Report {
            test: test.to_string(),
            fusion,
            failures: Vec::new(),
            checks: 0,
        }
    }

    fn fail(&mut self, msg: String) {
        self.failures.push(msg);
    }

    fn finish(self) {
        assert!(self.checks > 0, "{}: nothing was checked", self.test);
        if !self.failures.is_empty() {
            panic!(
                "{} (fusion {}, tier {}): {} mismatches in {} checks:\n  {}",
                self.test,
                if self.fusion { "on" } else { "off" },
                TIER.with(|t| t.get()).name(),
                self.failures.len(),
                self.checks,
                self.failures.join("\n  ")
            );
        }
    }
}

thread_local! {
    /// The tier the current test's cpu functions run (each test has its own thread).
    static TIER: std::cell::Cell<TierPolicy> = const { std::cell::Cell::new(TierPolicy::CraneliftOnly) };
}

/// Runs `f` with the cpu functions it compiles on `tier`.
fn with_tier(tier: TierPolicy, f: impl FnOnce()) {
    TIER.with(|t| t.set(tier));
    f();
}

fn cpu_options(fusion: bool) -> CompileOptions {
    let tier = TIER.with(|t| t.get());
    let options = CompileOptions::default()
        .backend(Backend::Cpu)
        .fusion(fusion)
        .fullgraph(true)
        .tier(tier);
    if tier == TierPolicy::CUpFront {
        // every aligned output store streaming, so that these small cases run that path
        options.stream_stores_from(Some(0))
    } else {
        options
    }
}

fn interp_options() -> CompileOptions {
    CompileOptions::default()
        .backend(Backend::Interp)
        .fullgraph(true)
}

/// Runs `f` on each input list eagerly, compiled for the cpu backend (compiled once, with
/// `options`) and on the interpreter backend, and compares compiled vs eager, compiled vs
/// the interpreter and eager vs the interpreter. Returns the cpu function's stats.
fn check_all<F>(
    report: &mut Report,
    case: &str,
    f: F,
    tol: Tol,
    options: CompileOptions,
    inputs: &[(String, Vec<Tensor>)],
) -> kiln::CompileStats
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync,
{
    let cpu = compile_with(&f, options);
    let interp = compile_with(&f, interp_options().dynamic(Dynamic::Never));
    for (what, xs) in inputs {
        report.checks += 1;
        let ctx = format!("{case} [{what}] on ({})", describe_inputs(xs));
        let eager = f(xs).unwrap_or_else(|e| panic!("{ctx}: eager failed: {e}"));
        let compiled = match cpu.call(xs) {
            Ok(c) => c,
            Err(e) => {
                report.fail(format!("{ctx}: compiled (cpu) failed: {e}"));
                continue;
            }
        };
        let oracle = interp
            .call(xs)
            .unwrap_or_else(|e| panic!("{ctx}: interpreter backend failed: {e}"));
        assert_eq!(compiled.len(), eager.len(), "{ctx}");
        for (o, ((c, e), i)) in compiled.iter().zip(&eager).zip(&oracle).enumerate() {
            if let Err(m) = compare(c, e, tol) {
                report.fail(format!("{ctx}: output {o}: compiled vs eager: {m}"));
            }
            if let Err(m) = compare(c, i, tol) {
                report.fail(format!("{ctx}: output {o}: compiled vs interpreter: {m}"));
            }
            if let Err(m) = compare(e, i, tol) {
                report.fail(format!("{ctx}: output {o}: eager vs interpreter: {m}"));
            }
        }
    }
    let s = cpu.stats();
    if s.graph_breaks != 0 || s.eager_fallback.is_some() {
        report.fail(format!("{case}: unexpected stats {s:?}"));
    }
    s
}

/// [`check_all`] with the default cpu options (static shapes: the function is compiled once
/// for the shape of the inputs, whatever their layouts).
fn check<F>(report: &mut Report, case: &str, f: F, tol: Tol, inputs: &[(String, Vec<Tensor>)])
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync,
{
    let s = check_all(
        report,
        case,
        f,
        tol,
        cpu_options(report.fusion).dynamic(Dynamic::Never),
        inputs,
    );
    if s.compiles != 1 {
        report.fail(format!("{case}: compiled {} times: {s:?}", s.compiles));
    }
}

/// One input list per layout of a single input of `shape`.
fn single_input_layouts(shape: &[usize], dist: Dist, seed: u64) -> Vec<(String, Vec<Tensor>)> {
    layouts(shape.len())
        .iter()
        .map(|&l| (format!("{l:?}"), vec![input(shape, dist, l, seed)]))
        .collect()
}

/// Every 1-d size and 2-d shape.
fn all_shapes() -> Vec<Vec<usize>> {
    SIZES
        .iter()
        .map(|&n| vec![n])
        .chain(SHAPES_2D.iter().map(|s| s.to_vec()))
        .collect()
}

/// Generates `fused::NAME`, `unfused::NAME` and `c_tier::NAME` tests calling `NAME(true)`,
/// `NAME(false)` and `NAME(true)` on the C tier. Attributes before a name apply to all;
/// `fused: #[...]`, `unfused: #[...]` or `c_tier: #[...]` after it to one of them (a failure
/// known in one mode only).
macro_rules! fused_and_unfused {
    ($($(#[$attr:meta])* $name:ident $(fused: #[$f:meta])? $(unfused: #[$u:meta])? $(c_tier: #[$c:meta])?),* $(,)?) => {
        /// Every case with fusion on.
        mod fused {
            $( $(#[$attr])* $(#[$f])? #[test] fn $name() { super::$name(true) } )*
        }
        /// Every case with every op its own kernel.
        mod unfused {
            $( $(#[$attr])* $(#[$u])? #[test] fn $name() { super::$name(false) } )*
        }
        /// Every case with fusion on, each kernel built by the C compiler (the C tier).
        mod c_tier {
            $( $(#[$attr])* $(#[$c])? #[test] fn $name() {
                super::with_tier(kiln::TierPolicy::CUpFront, || super::$name(true))
            } )*
        }
    };
}

// ---------------------------------------------------------------------------------------
// Pointwise: unary
// ---------------------------------------------------------------------------------------

/// The name of a unary op in case names (gelu's two forms apart).
fn unary_name(u: UnaryOp) -> String {
    match u.variant_attr() {
        Some((_, v)) => format!("{}_{v}", u.name()),
        None => u.name().to_string(),
    }
}

/// One unary op of the table on every shape and layout, drawn from its domain.
fn unary(u: UnaryOp, r: &mut Report) {
    let dist = Dist::of(u.info(), 0);
    let name = unary_name(u);
    let op = move |x: &[Tensor]| Ok(vec![x[0].unary(u)?]);
    for (i, shape) in all_shapes().iter().enumerate() {
        let xs = single_input_layouts(shape, dist, 100 + i as u64);
        check(r, &format!("{name} {shape:?}"), op, Tol::Pointwise, &xs);
    }
    // wider inputs: saturation of exp/tanh/sigmoid/erf, large arguments of sin/cos
    if dist == Dist::Normal {
        let xs = single_input_layouts(&[7, 783], Dist::Scaled(12.0), 150);
        check(r, &format!("{name} [7, 783] × 12"), op, Tol::Pointwise, &xs);
    }
}

/// Every unary op of the table that `keep` selects (a new row is tested without a list).
fn unary_ops(test: &str, fusion: bool, keep: fn(UnaryOp) -> bool) {
    let mut r = Report::new(test, fusion);
    for u in UnaryOp::ALL.into_iter().filter(|u| keep(*u)) {
        unary(u, &mut r);
    }
    r.finish();
}

/// Primitive unary ops of about one instruction (`neg`, `floor`, `sqrt`, `rsqrt`, ...).
fn unary_simple_ops(fusion: bool) {
    unary_ops("unary_simple_ops", fusion, |u| {
        unary_suite(u) == Some("unary_simple_ops")
    });
}

/// Primitive transcendentals and library calls (`exp`, `tanh`, `log1p`, `atan`, ...).
fn unary_transcendental_ops(fusion: bool) {
    unary_ops("unary_transcendental_ops", fusion, |u| {
        unary_suite(u) == Some("unary_transcendental_ops")
    });
}

/// Unary ops with a bool result or bool/integer operands (`isnan`, `logical_not`,
/// `bitwise_not`).
fn unary_bool_ops(fusion: bool) {
    unary_ops("unary_bool_ops", fusion, |u| {
        unary_suite(u) == Some("unary_bool_ops")
    });
}

/// Composite unary ops (`gelu`, `silu`, `relu6`, `hardswish`, `mish`): rendered natively or
/// decomposed, whichever the backend declares.
fn unary_composite_ops(fusion: bool) {
    unary_ops("unary_composite_ops", fusion, |u| {
        unary_suite(u) == Some("unary_composite_ops")
    });
}

/// gelu and erf where their tails underflow (gelu's |x| in [12.8, 13.3], where the tail is
/// flushed so that nothing is a denormal; erf's in [8.9, 10]): on a Linear's N(0, 20²)
/// outputs at odd sizes in every layout, and on sweeps across the tails, contiguous and
/// transposed.
fn gelu_and_erf_tails(fusion: bool) {
    let mut r = Report::new("gelu_and_erf_tails", fusion);
    let f = |x: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![x[0].gelu()?, x[0].neg()?.gelu()?, x[0].erf()?])
    };
    for (i, shape) in [vec![1], vec![37], vec![5, 129]].iter().enumerate() {
        check(
            &mut r,
            &format!("gelu and erf of N(0, 20²) {shape:?}"),
            f,
            Tol::Pointwise,
            &single_input_layouts(shape, Dist::Scaled(20.0), 1700 + i as u64),
        );
    }
    let sweep = |lo: f64, hi: f64, step: f64| Tensor::arange(lo, hi, step, DType::F32).unwrap();
    let tails = Tensor::cat(&[&sweep(12.8, 13.3, 0.0005), &sweep(8.9, 10.0, 0.001)], 0)
        .and_then(|t| t.reshape(&[100, 21]))
        .and_then(|t| t.t())
        .unwrap();
    let xs = vec![
        ("contiguous".to_string(), vec![tails.contiguous().unwrap()]),
        ("transposed".to_string(), vec![tails]),
    ];
    check(
        &mut r,
        "gelu and erf across their tails",
        f,
        Tol::Pointwise,
        &xs,
    );
    r.finish();
}

/// Bool results consumed inside f32 kernels: `where` on `isnan`/`isinf`, logical ops of
/// comparisons, casts of bools.
fn bool_results_in_kernels(fusion: bool) {
    let mut r = Report::new("bool_results_in_kernels", fusion);
    let f = |x: &[Tensor]| {
        let nan = x[0].log()?; // NaN below 0
        let masked = nan.isnan()?.where_(0.0, &nan)?;
        let big = x[0].exp()?.mul(1e38)?.isinf()?.logical_not()?;
        let both = x[0].gt(0.5)?.logical_and(&x[1].lt(0.0)?)?;
        let either = x[0].logical_or(&x[1].gt(1.0)?)?.logical_xor(&big)?;
        let bits = both.bitwise_or(&either)?.bitwise_xor(&big)?.bitwise_not()?;
        Ok(vec![
            masked,
            big.cast(DType::F32)?.add(&x[0])?,
            both.where_(&x[0], &x[1])?,
            either.cast(DType::F32)?,
            bits,
        ])
    };
    for (i, shape) in all_shapes().iter().enumerate() {
        let seed = 180 + 2 * i as u64;
        let xs: Vec<_> = [(Contiguous, Contiguous), (Transposed, StridedLast)]
            .iter()
            .map(|&(la, lb)| {
                (
                    format!("{la:?}, {lb:?}"),
                    vec![
                        input(shape, Dist::Quantized, la, seed),
                        input(shape, Dist::Quantized, lb, seed + 1),
                    ],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("bool results {shape:?}"),
            f,
            Tol::Pointwise,
            &xs,
        );
    }
    r.finish();
}

/// The attributed activations and `clamp` (composites: decomposed for the backends), at
/// torch's defaults and at other attribute values, with tensor and scalar bounds.
fn activations_and_clamp(fusion: bool) {
    let mut r = Report::new("activations_and_clamp", fusion);
    let f = |x: &[Tensor]| {
        Ok(vec![
            x[0].hardtanh(-1.0, 1.0)?,
            x[0].hardtanh(-0.25, 2.5)?,
            x[0].leaky_relu(0.01)?,
            x[0].leaky_relu(0.2)?,
            x[0].elu(1.0)?,
            x[0].elu(0.5)?,
            x[0].softplus(1.0, 20.0)?,
            x[0].mul(15.0)?.softplus(2.0, 10.0)?,
            x[0].clamp(Some(-0.5), Some(0.75))?,
            x[0].clamp(Some(&x[1]), Some(1.0))?,
            x[0].clamp(None::<f64>, Some(&x[1]))?,
            x[0].clamp(Some(0.1), None::<f64>)?,
            x[0].log()?.div(&x[1])?.nan_to_num(0.0, None, None)?,
            x[0].log()?
                .div(&x[1])?
                .nan_to_num(1.5, Some(100.0), Some(-7.0))?,
        ])
    };
    for (i, shape) in all_shapes().iter().enumerate() {
        let seed = 190 + 2 * i as u64;
        let xs: Vec<_> = [(Contiguous, Contiguous), (Transposed, ExpandedFirst)]
            .iter()
            .map(|&(la, lb)| {
                (
                    format!("{la:?}, {lb:?}"),
                    vec![
                        input(shape, Dist::Scaled(3.0), la, seed),
                        input(shape, Dist::Quantized, lb, seed + 1),
                    ],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("activations {shape:?}"),
            f,
            Tol::Pointwise,
            &xs,
        );
    }
    r.finish();
}

/// The ops with a restricted domain (log, sqrt, rsqrt, log1p, log2, ...) and reciprocal on
/// negative inputs and on zeros of both signs: NaN and ±inf in the same places everywhere.
fn unary_domain_edges(fusion: bool) {
    let mut r = Report::new("unary_domain_edges", fusion);
    let edges = Tensor::from_f64(
        &[0.0, -0.0, 1.0, -1.0, 0.25, -0.25, 1e-30, -1e-30, 4.0],
        &[9],
        DType::F32,
    )
    .unwrap();
    // the ops with a restricted domain, and the pole of reciprocal
    let edgy = UnaryOp::ALL.into_iter().filter(|u| {
        matches!(u.info().domain[0], Domain::Positive | Domain::AboveMinusOne)
            || *u == UnaryOp::Recip
    });
    for u in edgy {
        let name = unary_name(u);
        let f = move |x: &[Tensor]| Ok(vec![x[0].unary(u)?]);
        check(
            &mut r,
            &format!("{name} of normal (signed) inputs"),
            f,
            Tol::Pointwise,
            &single_input_layouts(&[33, 17], Dist::Normal, 160),
        );
        check(
            &mut r,
            &format!("{name} of zeros and signs"),
            f,
            Tol::Pointwise,
            &[("edges".into(), vec![edges.clone()])],
        );
    }
    r.finish();
}

/// Checks the single-input pointwise program `f` (at `Tol::Pointwise`) on every size and
/// 2-d shape in every layout (values `Dist::Scaled(3.0)` from `seed`), then on NaN, ±inf,
/// ±0, ±1e-30 and ±40; the cases are named `name` plus the shape or "of special values".
fn check_bounded_pointwise<F>(r: &mut Report, name: &str, f: F, seed: u64)
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + Copy,
{
    for shape in all_shapes() {
        check(
            r,
            &format!("{name} {shape:?}"),
            f,
            Tol::Pointwise,
            &single_input_layouts(&shape, Dist::Scaled(3.0), seed),
        );
    }
    let specials = Tensor::from_f64(
        &[
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            40.0,
            -40.0,
        ],
        &[9],
        DType::F32,
    )
    .unwrap();
    check(
        r,
        &format!("{name} of special values"),
        f,
        Tol::Pointwise,
        &[("specials".into(), vec![specials])],
    );
}

/// Transcendentals whose argument the range analysis bounds to a short interval (a
/// `tanh` or `sigmoid` output, scaled and shifted): the cpu backend computes them as
/// polynomials fitted at compile time (`cpu/math/fitted.rs`) when fused; every size and
/// shape, every layout, and NaN, ±inf and ±0 inputs.
fn bounded_transcendentals(fusion: bool) {
    let mut r = Report::new("bounded_transcendentals", fusion);
    let f = |x: &[Tensor]| {
        let t = x[0].tanh()?;
        let s = x[0].sigmoid()?;
        Ok(vec![
            t.sigmoid()?,
            s.add(0.3)?.mul(1.4)?.tanh()?,
            t.mul(0.8)?.tanh()?,
            t.mul(0.7)?.erf()?,
            s.mul(0.5)?.sub(0.25)?.exp()?,
        ])
    };
    check_bounded_pointwise(&mut r, "bounded chains", f, 170);
    r.finish();
}

/// Unary chains (`loops/chains.rs`): runs of smooth ops on one value, each used once, whose
/// input the range analysis bounds; the cpu backend computes such a run as one polynomial
/// of its input fitted at compile time (`cpu/chain_fits.rs`) when fused. tiny's whole
/// chain, a softplus of a sigmoid, a chain with a division and a square root, a chain into
/// a row sum, and a chain whose middle value is also an output (which must end the run);
/// every size and shape, every layout, and NaN, ±inf and ±0 inputs.
fn fitted_chains(fusion: bool) {
    let mut r = Report::new("fitted_chains", fusion);
    let f = |x: &[Tensor]| {
        // tiny: (+ a, · m, tanh, sigmoid) five times
        let mut t = x[0].clone();
        for (a, m) in [
            (0.25, 1.5),
            (0.3, 1.4),
            (0.35, 1.3),
            (0.4, 1.2),
            (0.45, 1.1),
        ] {
            t = t.add(a)?.mul(m)?.tanh()?.sigmoid()?;
        }
        let s = x[0].sigmoid()?;
        let softplus = s.mul(2.0)?.exp()?.add(1.0)?.log()?;
        let divided = s.add(0.5)?.recip()?.mul(3.0)?.sqrt()?.tanh()?;
        let middle = x[0].tanh()?.mul(0.9)?.sigmoid()?;
        let after = middle.mul(1.7)?.sub(0.2)?.erf()?.exp()?;
        let rows = x[0].tanh()?.mul(0.5)?.sigmoid()?.exp()?.sum(&[-1], true)?;
        Ok(vec![t, softplus, divided, middle, after, rows])
    };
    check_bounded_pointwise(&mut r, "fitted chains", f, 190);
    r.finish();
}

/// Special values: zeros of both signs, infinities, NaN, tiny and huge magnitudes, the
/// edges of exp's range. Every unary op must agree with eager on all of them.
fn unary_special_values(fusion: bool) {
    let specials = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-30,
        -1e-30,
        1e-7,
        -1e-7,
        0.5,
        -0.5,
        1.0,
        -1.0,
        3.0,
        -3.0,
        10.0,
        -10.0,
        20.0,
        -20.0,
        80.0,
        -80.0,
        88.5,
        -88.5,
        89.0,
        -89.0,
        100.0,
        -104.0,
        -110.0,
        1e4,
        -1e4,
        3.4e38,
        -3.4e38,
        f64::from(f32::MIN_POSITIVE),
        -f64::from(f32::MIN_POSITIVE),
        std::f64::consts::PI,
        std::f64::consts::FRAC_PI_2,
        -std::f64::consts::FRAC_PI_2,
    ];
    let x = Tensor::from_f64(&specials, &[specials.len()], DType::F32).unwrap();
    // sin and cos of huge arguments are covered by `trig_large_arguments`
    let moderate: Vec<f64> = specials
        .iter()
        .copied()
        .filter(|v| !v.is_finite() || v.abs() <= 1e4)
        .collect();
    let x_moderate = Tensor::from_f64(&moderate, &[moderate.len()], DType::F32).unwrap();
    let mut r = Report::new("unary_special_values", fusion);
    let floats = UnaryOp::ALL
        .into_iter()
        .filter(|u| u.info().dtype.result(DType::F32).is_ok());
    for u in floats {
        let name = unary_name(u);
        let x = if matches!(u, UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Tan) {
            x_moderate.clone()
        } else {
            x.clone()
        };
        check(
            &mut r,
            &format!("{name} of special values"),
            move |x: &[Tensor]| Ok(vec![x[0].unary(u)?]),
            Tol::Pointwise,
            &[("specials".into(), vec![x])],
        );
    }
    r.finish();
}

/// sin, cos and tan of large arguments (1e4 to 3.4e38, both signs): eager reduces the argument
/// exactly; the generated code must agree.
fn trig_large_arguments(fusion: bool) {
    let vals: Vec<f64> = (0..70)
        .map(|i| 1e4 * 10f64.powf(i as f64 * 34.5 / 69.0))
        .flat_map(|v| [v, -v * 1.37])
        .filter(|v| v.abs() <= 3.4e38)
        .collect();
    let x = Tensor::from_f64(&vals, &[vals.len()], DType::F32).unwrap();
    let mut r = Report::new("trig_large_arguments", fusion);
    for u in [UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Tan] {
        check(
            &mut r,
            &format!("{} of large arguments", u.name()),
            move |x: &[Tensor]| Ok(vec![x[0].unary(u)?]),
            Tol::Pointwise,
            &[("large".into(), vec![x.clone()])],
        );
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Pointwise: binary
// ---------------------------------------------------------------------------------------

/// The distributions of (lhs, rhs) for an op: its domains in the table, with ties
/// (quantized values) for comparisons, logical ops and maximum/minimum.
fn binary_dists(b: BinaryOp) -> (Dist, Dist) {
    let i = b.info();
    if matches!(i.dtype, DTypeRule::Bool | DTypeRule::Any) && i.domain[0] == Domain::Real {
        (Dist::Quantized, Dist::Quantized)
    } else {
        (Dist::of(i, 0), Dist::of(i, 1))
    }
}

/// A divisor operand never 0 where the op's domain asks for that (integer remainders).
fn divisor(b: BinaryOp, t: Tensor) -> Tensor {
    if b.info().domain[1] == Domain::NonZero && !t.dtype().is_float() {
        t.abs().unwrap().add(1i64).unwrap()
    } else {
        t
    }
}

/// The broadcasting pairs of operand shapes.
const BROADCASTS: [(&[usize], &[usize]); 8] = [
    (&[33, 17], &[17]),
    (&[33, 17], &[33, 1]),
    (&[33, 1], &[1, 17]),
    (&[7, 783], &[783]),
    (&[1, 4096], &[4096]),
    (&[3, 50], &[]),
    (&[2, 3, 50], &[3, 1]),
    (&[50], &[4, 1, 1]),
];

/// One binary op: tensor-tensor of equal shapes in several layout pairs, broadcasting
/// operands, tensor-scalar (and scalar-tensor where Rust's operators allow it).
fn binary(b: BinaryOp, r: &mut Report) {
    let name = b.name();
    let (da, db) = binary_dists(b);
    let tt = move |x: &[Tensor]| Ok(vec![x[0].binary(b, &divisor(b, x[1].clone()))?]);
    for (i, shape) in all_shapes().iter().enumerate() {
        let seed = 200 + 2 * i as u64;
        let pairs: &[(Layout, Layout)] = if shape.len() == 1 {
            &[
                (Contiguous, Contiguous),
                (StridedLast, Offset),
                (ExpandedFirst, Contiguous),
            ]
        } else {
            &[
                (Contiguous, Contiguous),
                (Transposed, Contiguous),
                (Contiguous, StridedLast),
                (StridedFirst, ExpandedFirst),
                (ExpandedLast, Transposed),
            ]
        };
        let xs: Vec<_> = pairs
            .iter()
            .map(|&(la, lb)| {
                (
                    format!("{la:?}, {lb:?}"),
                    vec![input(shape, da, la, seed), input(shape, db, lb, seed + 1)],
                )
            })
            .collect();
        check(r, &format!("{name} {shape:?}"), tt, Tol::Pointwise, &xs);
    }
    for (i, (sa, sb)) in BROADCASTS.iter().enumerate() {
        let seed = 300 + 2 * i as u64;
        let xs = vec![
            (
                "contiguous".to_string(),
                vec![
                    input(sa, da, Contiguous, seed),
                    input(sb, db, Contiguous, seed + 1),
                ],
            ),
            (
                "transposed, strided".to_string(),
                vec![
                    input(sa, da, Transposed, seed),
                    input(sb, db, StridedLast, seed + 1),
                ],
            ),
        ];
        check(
            r,
            &format!("{name} {sa:?} with {sb:?}"),
            tt,
            Tol::Pointwise,
            &xs,
        );
        // the same with the operands swapped
        let swapped: Vec<_> = xs
            .iter()
            .map(|(w, v)| (w.clone(), vec![v[1].clone(), v[0].clone()]))
            .collect();
        let (da2, _) = binary_dists(b);
        if da2 == db {
            check(
                r,
                &format!("{name} {sb:?} with {sa:?}"),
                tt,
                Tol::Pointwise,
                &swapped,
            );
        }
    }
    let scalars: &[f64] = match (b, binary_dists(b).0) {
        (BinaryOp::Pow, _) => &[2.0, 3.0, 0.5, -1.5, 0.0],
        // integer-only ops take integer scalars below
        (_, Dist::Int(_)) => &[],
        (_, Dist::Quantized) => &[0.0, 0.5, -1.5],
        _ => &[0.75, -2.5],
    };
    if scalars.is_empty() {
        for (i, s) in [3i64, -2].into_iter().enumerate() {
            let xs = single_input_layouts(&[33, 17], da, 420 + i as u64);
            check(
                r,
                &format!("{name} [33, 17] with scalar {s}"),
                move |x: &[Tensor]| Ok(vec![x[0].binary(b, s)?]),
                Tol::Pointwise,
                &xs,
            );
        }
    }
    for (i, &s) in scalars.iter().enumerate() {
        for shape in [vec![783], vec![33, 17]] {
            let xs = single_input_layouts(&shape, da, 400 + i as u64);
            check(
                r,
                &format!("{name} {shape:?} with scalar {s}"),
                move |x: &[Tensor]| Ok(vec![x[0].binary(b, s)?]),
                Tol::Pointwise,
                &xs,
            );
            // an integer scalar promotes to the tensor's float dtype
            check(
                r,
                &format!("{name} {shape:?} with scalar 2i64"),
                move |x: &[Tensor]| Ok(vec![x[0].binary(b, 2i64)?]),
                Tol::Pointwise,
                &xs[..1],
            );
        }
    }
    // scalar on the left (Rust's operators)
    if matches!(
        b,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    ) {
        let xs = single_input_layouts(&[33, 17], Dist::Normal, 450);
        check(
            r,
            &format!("scalar {name} [33, 17]"),
            move |x: &[Tensor]| {
                Ok(vec![match b {
                    BinaryOp::Add => (1.5 + &x[0])?,
                    BinaryOp::Sub => (1.5 - &x[0])?,
                    BinaryOp::Mul => (1.5 * &x[0])?,
                    _ => (1.5 / &x[0])?,
                }])
            },
            Tol::Pointwise,
            &xs,
        );
    }
    // a bool result (comparison, logical op) consumed inside an f32 kernel (where, a
    // cast to f32)
    if b.info().dtype == DTypeRule::Bool {
        for (i, shape) in [vec![783], vec![33, 17], vec![7, 783]].iter().enumerate() {
            let seed = 470 + 2 * i as u64;
            let xs: Vec<_> = [
                (Contiguous, Contiguous),
                (Transposed, StridedLast),
                (ExpandedLast, StridedFirst),
            ]
            .iter()
            .map(|&(la, lb)| {
                (
                    format!("{la:?}, {lb:?}"),
                    vec![input(shape, da, la, seed), input(shape, db, lb, seed + 1)],
                )
            })
            .collect();
            check(
                r,
                &format!("{name} {shape:?} consumed by where and a cast"),
                move |x: &[Tensor]| {
                    let c = x[0].binary(b, &x[1])?;
                    let s = x[0].binary(b, 0.5)?;
                    Ok(vec![
                        c.where_(&x[0], &x[1].mul(3.0)?)?,
                        c.cast(DType::F32)?.add(&x[0])?,
                        s.where_(1.0, &x[1])?,
                    ])
                },
                Tol::Pointwise,
                &xs,
            );
        }
    }
    // pow with an integer exponent of a negative base is defined
    if b == BinaryOp::Pow {
        let xs = single_input_layouts(&[33, 17], Dist::Normal, 460);
        for s in [2.0, 3.0] {
            check(
                r,
                &format!("pow of negative bases with scalar {s}"),
                move |x: &[Tensor]| Ok(vec![x[0].pow(s)?]),
                Tol::Pointwise,
                &xs,
            );
        }
    }
}

/// Every binary op of the table that `keep` selects (a new row is tested without a list).
fn binary_ops(test: &str, fusion: bool, keep: fn(BinaryOp) -> bool) {
    let mut r = Report::new(test, fusion);
    for b in BinaryOp::ALL.into_iter().filter(|b| keep(*b)) {
        binary(b, &mut r);
    }
    r.finish();
}

/// `+ - * /` and the other ops of about one instruction with a numeric result.
fn binary_simple_ops(fusion: bool) {
    binary_ops("binary_simple_ops", fusion, |b| {
        binary_suite(b) == Some("binary_simple_ops")
    });
}

/// `pow`, `remainder`, `fmod`, `atan2`: library calls per lane.
fn binary_library_ops(fusion: bool) {
    binary_ops("binary_library_ops", fusion, |b| {
        binary_suite(b) == Some("binary_library_ops")
    });
}

/// Comparisons, logical and bitwise ops (bool results, or integer operands).
fn binary_bool_ops(fusion: bool) {
    binary_ops("binary_bool_ops", fusion, |b| {
        binary_suite(b) == Some("binary_bool_ops")
    });
}

/// NaN operands: maximum/minimum propagate them, comparisons are false (ne true).
fn binary_nan_operands(fusion: bool) {
    let a = Tensor::from_f64(
        &[
            f64::NAN,
            1.0,
            f64::NAN,
            -2.0,
            f64::INFINITY,
            0.0,
            -0.0,
            3.0,
            f64::NEG_INFINITY,
        ],
        &[9],
        DType::F32,
    )
    .unwrap();
    let b = Tensor::from_f64(
        &[
            1.0,
            f64::NAN,
            f64::NAN,
            -2.0,
            f64::INFINITY,
            -0.0,
            0.0,
            f64::NEG_INFINITY,
            5.0,
        ],
        &[9],
        DType::F32,
    )
    .unwrap();
    let mut r = Report::new("binary_nan_operands", fusion);
    let floats = BinaryOp::ALL
        .into_iter()
        .filter(|b| b.info().dtype.result(DType::F32).is_ok());
    for op in floats {
        check(
            &mut r,
            &format!("{} with NaN and infinite operands", op.name()),
            move |x: &[Tensor]| Ok(vec![x[0].binary(op, &x[1])?]),
            Tol::Pointwise,
            &[("specials".into(), vec![a.clone(), b.clone()])],
        );
    }
    r.finish();
}

/// Integer and mixed-dtype operands (promotion; integer division gives f32).
fn binary_integer_and_mixed_dtypes(fusion: bool) {
    let mut r = Report::new("binary_integer_and_mixed_dtypes", fusion);
    for dtype in [DType::I32, DType::I64] {
        let xs = vec![
            (
                "contiguous".to_string(),
                vec![
                    input(&[33, 17], Dist::Int(dtype), Contiguous, 500),
                    input(&[33, 17], Dist::Int(dtype), Contiguous, 501),
                ],
            ),
            (
                "transposed".to_string(),
                vec![
                    input(&[33, 17], Dist::Int(dtype), Transposed, 502),
                    input(&[33, 17], Dist::Int(dtype), StridedLast, 503),
                ],
            ),
        ];
        // every op the table defines on integers (true division apart, below)
        let ints = BinaryOp::ALL
            .into_iter()
            .filter(|b| *b != BinaryOp::Div && b.info().dtype.result(dtype).is_ok());
        for b in ints {
            check(
                &mut r,
                &format!("{} of {dtype}", b.name()),
                move |x: &[Tensor]| Ok(vec![x[0].binary(b, &divisor(b, x[1].clone()))?]),
                Tol::Pointwise,
                &xs,
            );
        }
        // division of integers is true division (nonzero divisors)
        check(
            &mut r,
            &format!("div of {dtype}"),
            |x: &[Tensor]| Ok(vec![x[0].div(&x[1].abs()?.add(1i64)?)?]),
            Tol::Pointwise,
            &xs,
        );
    }
    // int with float, f32 with f64, bool with f32
    let xs = vec![(
        "mixed".to_string(),
        vec![
            input(&[33, 17], Dist::Int(DType::I32), Contiguous, 510),
            input(&[33, 17], Dist::Normal, Transposed, 511),
            normal(&[17], 512).cast(DType::F64).unwrap(),
        ],
    )];
    check(
        &mut r,
        "mixed dtypes",
        |x: &[Tensor]| {
            let a = x[0].add(&x[1])?;
            let b = x[1].mul(&x[2])?;
            let c = x[1].gt(0.0)?.add(&x[1])?;
            let d = x[0].mul(0.5)?;
            Ok(vec![a, b, c, d])
        },
        Tol::Pointwise,
        &xs,
    );
    r.finish();
}

// ---------------------------------------------------------------------------------------
// where, casts
// ---------------------------------------------------------------------------------------

fn where_select(fusion: bool) {
    let mut r = Report::new("where", fusion);
    for (i, shape) in SHAPES_2D.iter().enumerate() {
        let seed = 600 + 3 * i as u64;
        let xs: Vec<_> = [
            (Contiguous, Contiguous, Contiguous),
            (Transposed, StridedLast, ExpandedFirst),
            (StridedFirst, ExpandedLast, Transposed),
        ]
        .iter()
        .map(|&(lc, la, lb)| {
            (
                format!("{lc:?}, {la:?}, {lb:?}"),
                vec![
                    input(shape, Dist::Normal, lc, seed),
                    input(shape, Dist::Normal, la, seed + 1),
                    input(shape, Dist::Normal, lb, seed + 2),
                ],
            )
        })
        .collect();
        check(
            &mut r,
            &format!("where(c > 0, a, b) {shape:?}"),
            |x: &[Tensor]| Ok(vec![x[0].gt(0.0)?.where_(&x[1], &x[2])?]),
            Tol::Pointwise,
            &xs,
        );
        check(
            &mut r,
            &format!("where with scalars {shape:?}"),
            |x: &[Tensor]| {
                let c = x[0].lt(&x[1])?;
                Ok(vec![
                    c.where_(&x[2], 0.5)?,
                    c.where_(-1.0, &x[2])?,
                    c.where_(2.0, -3.0)?,
                ])
            },
            Tol::Pointwise,
            &xs,
        );
    }
    // a broadcast condition, and where as leaky relu in a chain
    let xs = vec![(
        "broadcast".to_string(),
        vec![
            normal(&[33, 1], 620),
            normal(&[33, 17], 621),
            normal(&[17], 622),
        ],
    )];
    check(
        &mut r,
        "where with broadcast condition and branches",
        |x: &[Tensor]| {
            let c = x[0].ge(0.0)?;
            let leaky = x[1].gt(0.0)?.where_(&x[1], &x[1].mul(0.1)?)?;
            Ok(vec![c.where_(&x[1], &x[2])?, leaky.exp()?])
        },
        Tol::Pointwise,
        &xs,
    );
    r.finish();
}

fn casts(fusion: bool) {
    let mut r = Report::new("casts", fusion);
    let targets = [
        DType::I32,
        DType::I64,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::Bool,
    ];
    for shape in [vec![783], vec![33, 17]] {
        // fractional values of both signs: float to int truncates toward zero
        let xs = single_input_layouts(&shape, Dist::Scaled(3.0), 700);
        for dtype in targets {
            check(
                &mut r,
                &format!("cast f32{shape:?} to {dtype}"),
                move |x: &[Tensor]| Ok(vec![x[0].cast(dtype)?]),
                Tol::Pointwise,
                &xs,
            );
            check(
                &mut r,
                &format!("cast f32{shape:?} to {dtype} and back, in a chain"),
                move |x: &[Tensor]| {
                    Ok(vec![x[0]
                        .mul(1.5)?
                        .cast(dtype)?
                        .cast(DType::F32)?
                        .add(&x[0])?])
                },
                Tol::Pointwise,
                &xs,
            );
        }
        for from in [DType::I32, DType::I64, DType::Bool, DType::F16, DType::F64] {
            let xs: Vec<_> = single_input_layouts(&shape, Dist::Scaled(3.0), 710)
                .into_iter()
                .map(|(w, v)| (w, vec![v[0].cast(from).unwrap()]))
                .collect();
            check(
                &mut r,
                &format!("cast {from}{shape:?} to f32"),
                |x: &[Tensor]| {
                    Ok(vec![
                        x[0].cast(DType::F32)?,
                        x[0].cast(DType::F32)?.mul(0.5)?,
                    ])
                },
                Tol::Pointwise,
                &xs,
            );
        }
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------

type Reduction = fn(&Tensor, &[i64], bool) -> Result<Tensor>;

const REDUCTIONS: [(&str, Reduction); 4] = [
    ("sum", Tensor::sum),
    ("mean", Tensor::mean),
    ("max", Tensor::max),
    ("min", Tensor::min),
];

/// The (dims, keepdim) variants of a reduction over a tensor of rank `rank`.
fn reduce_dims(rank: usize) -> Vec<(Vec<i64>, bool)> {
    let mut v = vec![(vec![], false), (vec![], true)];
    for keep in [false, true] {
        v.push((vec![-1], keep));
        if rank >= 2 {
            v.push((vec![0], keep));
        }
        if rank >= 3 {
            v.push((vec![1], keep));
            v.push((vec![0, 2], keep));
        }
    }
    v
}

fn reduction(name: &str, fusion: bool) {
    let (_, op) = REDUCTIONS.iter().find(|(n, _)| *n == name).unwrap();
    let op = *op;
    let mut r = Report::new(name, fusion);
    let mut shapes = all_shapes();
    shapes.push(vec![4, 5, 6]);
    shapes.push(vec![2, 3, 50]);
    let dist = if matches!(name, "max" | "min") {
        Dist::Quantized
    } else {
        Dist::Normal
    };
    for (i, shape) in shapes.iter().enumerate() {
        let xs = single_input_layouts(shape, dist, 800 + i as u64);
        for (dims, keep) in reduce_dims(shape.len()) {
            let d = dims.clone();
            check(
                &mut r,
                &format!("{name}{shape:?} over {dims:?} keepdim {keep}"),
                move |x: &[Tensor]| Ok(vec![op(&x[0], &d, keep)?]),
                Tol::Reduce,
                &xs,
            );
        }
    }
    // a normal-valued input for max/min too (no ties)
    if matches!(name, "max" | "min") {
        let xs = single_input_layouts(&[7, 783], Dist::Normal, 850);
        check(
            &mut r,
            &format!("{name}[7, 783] of normals over [-1]"),
            move |x: &[Tensor]| Ok(vec![op(&x[0], &[-1], false)?, op(&x[0], &[0], true)?]),
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

fn reduce_sum(fusion: bool) {
    reduction("sum", fusion)
}

fn reduce_mean(fusion: bool) {
    reduction("mean", fusion)
}

fn reduce_max(fusion: bool) {
    reduction("max", fusion)
}

fn reduce_min(fusion: bool) {
    reduction("min", fusion)
}

/// NaN in a row: max and min propagate it; sums and means give NaN.
fn reduce_nan_propagation(fusion: bool) {
    let mut vals: Vec<f64> = normal(&[7, 50], 860).to_vec_f64().unwrap();
    vals[3] = f64::NAN; // row 0
    vals[2 * 50 + 49] = f64::NAN; // row 2, last column
    vals[5 * 50 + 17] = f64::INFINITY; // row 5
    vals[6 * 50 + 20] = f64::NEG_INFINITY; // row 6
    let x = Tensor::from_f64(&vals, &[7, 50], DType::F32).unwrap();
    let xs = vec![
        ("contiguous".to_string(), vec![x.clone()]),
        (
            "transposed".to_string(),
            vec![x.t().unwrap().contiguous().unwrap().t().unwrap()],
        ),
    ];
    let mut r = Report::new("reduce_nan_propagation", fusion);
    for (name, op) in REDUCTIONS {
        check(
            &mut r,
            &format!("{name} with NaN and inf"),
            move |x: &[Tensor]| {
                Ok(vec![
                    op(&x[0], &[-1], false)?,
                    op(&x[0], &[0], false)?,
                    op(&x[0], &[], false)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
    }
    check(
        &mut r,
        "argmax with NaN and inf",
        |x: &[Tensor]| Ok(vec![x[0].argmax(-1, false)?, x[0].argmax(0, true)?]),
        Tol::Reduce,
        &xs,
    );
    r.finish();
}

/// Sums of integers and bools (to i64).
fn reduce_integer_sums(fusion: bool) {
    let mut r = Report::new("reduce_integer_sums", fusion);
    let xs = vec![(
        "int".to_string(),
        vec![
            input(&[33, 17], Dist::Int(DType::I32), Transposed, 870),
            normal(&[7, 783], 871),
        ],
    )];
    check(
        &mut r,
        "sum of i32 and of bools",
        |x: &[Tensor]| {
            Ok(vec![
                x[0].sum(&[-1], false)?,
                x[0].sum(&[], false)?,
                x[1].gt(0.0)?.sum(&[-1], true)?,
                x[1].gt(0.0)?.sum(&[0], false)?,
            ])
        },
        Tol::Reduce,
        &xs,
    );
    r.finish();
}

fn argmax(fusion: bool) {
    let mut r = Report::new("argmax", fusion);
    let mut shapes = all_shapes();
    shapes.push(vec![2, 3, 50]);
    for (i, shape) in shapes.iter().enumerate() {
        for dist in [Dist::Normal, Dist::Quantized] {
            let xs = single_input_layouts(shape, dist, 900 + i as u64);
            for dim in [-1i64, 0, 1] {
                if dim as usize >= shape.len() && dim >= 0 {
                    continue;
                }
                for keep in [false, true] {
                    check(
                        &mut r,
                        &format!("argmax{shape:?} ({dist:?}) over {dim} keepdim {keep}"),
                        move |x: &[Tensor]| Ok(vec![x[0].argmax(dim, keep)?]),
                        Tol::Reduce,
                        &xs,
                    );
                }
            }
        }
    }
    r.finish();
}

fn var(fusion: bool) {
    let mut r = Report::new("var", fusion);
    let mut shapes = all_shapes();
    shapes.retain(|s| s.iter().product::<usize>() > 1);
    shapes.push(vec![2, 3, 50]);
    for (i, shape) in shapes.iter().enumerate() {
        // an offset: the variance must not be computed as E[x²] - E[x]²
        let xs: Vec<_> = single_input_layouts(shape, Dist::Normal, 950 + i as u64)
            .into_iter()
            .map(|(w, v)| (w, vec![v[0].clone(), v[0].add(10.0).unwrap()]))
            .collect();
        let mut variants: Vec<(Vec<i64>, i64, bool)> = vec![
            (vec![-1], 1, false),
            (vec![-1], 0, true),
            (vec![], 1, false),
        ];
        if shape.len() >= 2 {
            variants.push((vec![0], 1, true));
            variants.push((vec![0], 0, false));
        }
        if shape.len() >= 3 {
            variants.push((vec![0, 2], 1, false));
        }
        for (dims, correction, keep) in variants {
            // a single element with correction 1 divides by zero: skip that degenerate case
            let n: usize = if dims.is_empty() {
                shape.iter().product()
            } else {
                dims.iter()
                    .map(|&d| shape[(d + shape.len() as i64) as usize % shape.len()])
                    .product()
            };
            if n as i64 <= correction {
                continue;
            }
            let d = dims.clone();
            check(
                &mut r,
                &format!("var{shape:?} over {dims:?} correction {correction} keepdim {keep}"),
                move |x: &[Tensor]| {
                    Ok(vec![
                        x[0].var(&d, correction, keep)?,
                        x[1].var(&d, correction, keep)?,
                    ])
                },
                Tol::Reduce,
                &xs,
            );
        }
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Row ops: softmax, log_softmax, layer_norm, rms_norm
// ---------------------------------------------------------------------------------------

fn softmaxes(name: &str, fusion: bool) {
    let log = name == "log_softmax";
    let mut r = Report::new(name, fusion);
    let mut shapes = all_shapes();
    shapes.push(vec![2, 3, 50]);
    for (i, shape) in shapes.iter().enumerate() {
        for dist in [Dist::Normal, Dist::Scaled(30.0)] {
            let xs = single_input_layouts(shape, dist, 1000 + i as u64);
            let dims: &[i64] = match shape.len() {
                1 => &[-1],
                2 => &[-1, 0],
                _ => &[-1, 1],
            };
            for &dim in dims {
                check(
                    &mut r,
                    &format!("{name}{shape:?} ({dist:?}) over {dim}"),
                    move |x: &[Tensor]| {
                        Ok(vec![if log {
                            x[0].log_softmax(dim)?
                        } else {
                            x[0].softmax(dim)?
                        }])
                    },
                    Tol::Reduce,
                    &xs,
                );
            }
        }
    }
    // a masked row (-inf entries, as causal attention does)
    let scores = normal(&[9, 9], 1050);
    let mask = Tensor::full(&[9, 9], f64::NEG_INFINITY, DType::F32)
        .unwrap()
        .triu(1)
        .unwrap();
    check(
        &mut r,
        &format!("{name} of a causally masked [9, 9]"),
        move |x: &[Tensor]| {
            let s = x[0].add(&x[1])?;
            Ok(vec![if log {
                s.log_softmax(-1)?
            } else {
                s.softmax(-1)?
            }])
        },
        Tol::Reduce,
        &[("masked".into(), vec![scores, mask])],
    );
    r.finish();
}

fn softmax(fusion: bool) {
    softmaxes("softmax", fusion)
}

fn log_softmax(fusion: bool) {
    softmaxes("log_softmax", fusion)
}

fn layer_norm(fusion: bool) {
    let mut r = Report::new("layer_norm", fusion);
    let mut shapes = all_shapes();
    shapes.push(vec![2, 3, 50]);
    for (i, shape) in shapes.iter().enumerate() {
        let seed = 1100 + 3 * i as u64;
        let n = *shape.last().unwrap();
        let w = normal(&[n], seed + 1).mul(0.5).unwrap().add(1.0).unwrap();
        let b = normal(&[n], seed + 2).mul(0.5).unwrap();
        // rows of equal values (an expanded last dim) are `layer_norm_constant_rows`
        let xs: Vec<_> = single_input_layouts(shape, Dist::Normal, seed)
            .into_iter()
            .filter(|(_, v)| !constant_rows(&v[0]))
            .map(|(what, v)| (what, vec![v[0].add(3.0).unwrap(), w.clone(), b.clone()]))
            .collect();
        let norm = [n];
        check(
            &mut r,
            &format!("layer_norm{shape:?} over [{n}] with weight and bias"),
            move |x: &[Tensor]| {
                Ok(vec![x[0].layer_norm(
                    &norm,
                    Some(&x[1]),
                    Some(&x[2]),
                    1e-5,
                )?])
            },
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("layer_norm{shape:?} over [{n}] without affine"),
            move |x: &[Tensor]| Ok(vec![x[0].layer_norm(&norm, None, None, 1e-5)?]),
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("layer_norm{shape:?} over [{n}] with weight only / bias only"),
            move |x: &[Tensor]| {
                Ok(vec![
                    x[0].layer_norm(&norm, Some(&x[1]), None, 1e-5)?,
                    x[0].layer_norm(&norm, None, Some(&x[2]), 1e-6)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
    }
    // over the last two dims
    let x = input(&[2, 3, 50], Dist::Normal, Transposed, 1150);
    let w = normal(&[3, 50], 1151);
    let b = normal(&[3, 50], 1152);
    check(
        &mut r,
        "layer_norm[2, 3, 50] over [3, 50]",
        |x: &[Tensor]| {
            Ok(vec![
                x[0].layer_norm(&[3, 50], Some(&x[1]), Some(&x[2]), 1e-5)?,
                x[0].layer_norm(&[3, 50], None, None, 1e-5)?,
            ])
        },
        Tol::Reduce,
        &[("transposed".into(), vec![x, w, b])],
    );
    r.finish();
}

/// True when every row (last dim) of `x` holds one value repeated: a last dim of stride 0,
/// or of size > 1 in a 1-d tensor of stride 0.
fn constant_rows(x: &Tensor) -> bool {
    let r = x.rank();
    r >= 1 && x.shape()[r - 1] > 1 && x.strides()[r - 1] == 0
}

/// layer_norm of rows whose values are all equal (zero variance): the exact result is the
/// bias (0 without affine), and eager and the interpreter give it exactly. The problem is
/// ill-conditioned (an error δ in the mean becomes δ/sqrt(eps) in the output), so this
/// checks how accurately the generated code computes a row's mean.
fn layer_norm_constant_rows(fusion: bool) {
    let mut r = Report::new("layer_norm_constant_rows", fusion);
    for (i, shape) in all_shapes().iter().enumerate() {
        let n = *shape.last().unwrap();
        if n == 1 {
            continue;
        }
        let seed = 1170 + 3 * i as u64;
        let layout = if shape.len() == 1 {
            ExpandedFirst
        } else {
            ExpandedLast
        };
        let x = input(shape, Dist::Normal, layout, seed);
        assert!(constant_rows(&x));
        let w = normal(&[n], seed + 1).mul(0.5).unwrap().add(1.0).unwrap();
        let b = normal(&[n], seed + 2).mul(0.5).unwrap();
        let xs = vec![
            (format!("{layout:?}"), vec![x.clone(), w.clone(), b.clone()]),
            (
                format!("{layout:?} + 3"),
                vec![x.add(3.0).unwrap(), w.clone(), b.clone()],
            ),
        ];
        let norm = [n];
        check(
            &mut r,
            &format!("layer_norm{shape:?} of constant rows"),
            move |x: &[Tensor]| {
                Ok(vec![
                    x[0].layer_norm(&norm, Some(&x[1]), Some(&x[2]), 1e-5)?,
                    x[0].layer_norm(&norm, None, None, 1e-5)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("layernorm by hand{shape:?} of constant rows"),
            |x: &[Tensor]| {
                let mean = x[0].mean(&[-1], true)?;
                let c = x[0].sub(&mean)?;
                let v = c.mul(&c)?.mean(&[-1], true)?;
                Ok(vec![c
                    .mul(&v.add(1e-5)?.rsqrt()?)?
                    .mul(&x[1])?
                    .add(&x[2])?])
            },
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

/// layer_norm, rms_norm and var of values whose squares overflow f32 (|x| ≳ 1.8e19): eager
/// and the interpreter give the finite, exact-scale results (layer_norm ±1, rms_norm
/// x/rms(x), var ~1e40 → inf only where the result itself overflows).
fn norms_of_large_values(fusion: bool) {
    let mut r = Report::new("norms_of_large_values", fusion);
    for (scale, n) in [(1e18, 50), (1e20, 50), (1e25, 50), (1e20, 150)] {
        let x = normal(&[7, n], 1180).mul(scale).unwrap();
        let xs = vec![
            ("contiguous".to_string(), vec![x.clone()]),
            ("plus offset".to_string(), vec![x.add(scale * 3.0).unwrap()]),
        ];
        check(
            &mut r,
            &format!("layer_norm of values × {scale:e}"),
            move |x: &[Tensor]| Ok(vec![x[0].layer_norm(&[n], None, None, 1e-5)?]),
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("rms_norm of values × {scale:e}"),
            move |x: &[Tensor]| Ok(vec![x[0].rms_norm(&[n], None, 1e-5)?]),
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("var of values × {scale:e}"),
            |x: &[Tensor]| Ok(vec![x[0].var(&[-1], 1, false)?]),
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

/// layer_norm and rms_norm without eps of values whose squares are under f32's smallest
/// normal (|x| ≲ 1.1e-19), where the results are still ±1-scale: eager and the interpreter
/// square in f64. Rows of tiny values beside rows of ordinary ones, in every layout, at a
/// length that takes the unrolled loop, the one-vector loop and the partial last vector.
fn norms_of_small_values(fusion: bool) {
    let mut r = Report::new("norms_of_small_values", fusion);
    for scale in [1e-21f64, 1e-30] {
        let rows = |seed| {
            let tiny = normal(&[3, 83], seed).mul(scale).unwrap();
            let ordinary = normal(&[2, 83], seed + 1);
            Tensor::cat(&[&tiny, &ordinary], 0).unwrap()
        };
        let xs = vec![
            ("contiguous".to_string(), vec![rows(1190)]),
            (
                "transposed".to_string(),
                vec![rows(1192).t().unwrap().contiguous().unwrap().t().unwrap()],
            ),
            (
                "plus offset".to_string(),
                vec![rows(1194).add(scale * 3.0).unwrap()],
            ),
        ];
        check(
            &mut r,
            &format!("layer_norm without eps of values × {scale:e}"),
            |x: &[Tensor]| Ok(vec![x[0].layer_norm(&[83], None, None, 0.0)?]),
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("rms_norm without eps of values × {scale:e}"),
            |x: &[Tensor]| Ok(vec![x[0].rms_norm(&[83], None, 0.0)?]),
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

fn rms_norm(fusion: bool) {
    let mut r = Report::new("rms_norm", fusion);
    let mut shapes = all_shapes();
    shapes.push(vec![2, 3, 50]);
    for (i, shape) in shapes.iter().enumerate() {
        let seed = 1200 + 2 * i as u64;
        let n = *shape.last().unwrap();
        let w = normal(&[n], seed + 1).mul(0.5).unwrap().add(1.0).unwrap();
        let xs: Vec<_> = single_input_layouts(shape, Dist::Normal, seed)
            .into_iter()
            .map(|(what, v)| (what, vec![v[0].clone(), w.clone()]))
            .collect();
        let norm = [n];
        check(
            &mut r,
            &format!("rms_norm{shape:?} over [{n}]"),
            move |x: &[Tensor]| {
                Ok(vec![
                    x[0].rms_norm(&norm, Some(&x[1]), 1e-6)?,
                    x[0].rms_norm(&norm, None, 1e-5)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Matmul, linear, epilogues
// ---------------------------------------------------------------------------------------

/// (lhs shape, rhs shape, contraction length)
const MATMULS: [(&[usize], &[usize]); 12] = [
    (&[3, 50], &[50, 17]),
    (&[7, 783], &[783, 5]),
    (&[1, 4096], &[4096, 1]),
    (&[33, 17], &[17, 33]),
    (&[2, 3, 50], &[2, 50, 7]),
    (&[2, 3, 50], &[50, 7]),
    (&[3, 50], &[2, 50, 7]),
    (&[2, 1, 3, 8], &[1, 4, 8, 5]),
    (&[50], &[50, 7]),
    (&[3, 50], &[50]),
    (&[50], &[50]),
    (&[4, 1, 9], &[4, 9, 1]),
];

fn contraction(a: &[usize]) -> usize {
    *a.last().unwrap()
}

fn matmul(fusion: bool) {
    let mut r = Report::new("matmul", fusion);
    for (i, (sa, sb)) in MATMULS.iter().enumerate() {
        let seed = 1300 + 2 * i as u64;
        let xs: Vec<_> = [
            (Contiguous, Contiguous),
            (Transposed, Contiguous),
            (Contiguous, Transposed),
            (StridedLast, StridedFirst),
            (ExpandedFirst, Transposed),
        ]
        .iter()
        .map(|&(la, lb)| {
            (
                format!("{la:?}, {lb:?}"),
                vec![
                    input(sa, Dist::Normal, la, seed),
                    input(sb, Dist::Normal, lb, seed + 1),
                ],
            )
        })
        .collect();
        check(
            &mut r,
            &format!("matmul {sa:?} @ {sb:?}"),
            |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?]),
            Tol::Matmul(contraction(sa)),
            &xs,
        );
    }
    r.finish();
}

fn linear(fusion: bool) {
    let mut r = Report::new("linear", fusion);
    for (i, (sx, out)) in [
        (vec![7usize, 50], 17usize),
        (vec![2, 3, 50], 9),
        (vec![33, 17], 1),
        (vec![50], 7),
        (vec![1, 783], 5),
    ]
    .iter()
    .enumerate()
    {
        let seed = 1400 + 3 * i as u64;
        let k = *sx.last().unwrap();
        let xs: Vec<_> = [(Contiguous, Contiguous), (Transposed, Transposed)]
            .iter()
            .map(|&(lx, lw)| {
                (
                    format!("{lx:?}, {lw:?}"),
                    vec![
                        input(sx, Dist::Normal, lx, seed),
                        input(&[*out, k], Dist::Normal, lw, seed + 1),
                        normal(&[*out], seed + 2),
                    ],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("linear {sx:?} to {out}"),
            |x: &[Tensor]| {
                Ok(vec![
                    x[0].linear(&x[1], Some(&x[2]))?,
                    x[0].linear(&x[1], None)?,
                ])
            },
            Tol::Matmul(k),
            &xs,
        );
    }
    r.finish();
}

/// The inputs of a matmul-epilogue case `[m, k] @ [k, n]`, contiguous and with the left
/// operand transposed and the residual strided: the operands, a bias `[n]`, a residual
/// `[m, n]` and a last operand of shape `last`.
fn epilogue_inputs(
    (m, k, n): (usize, usize, usize),
    last: &[usize],
    seed: u64,
) -> Vec<(String, Vec<Tensor>)> {
    [(Contiguous, Contiguous), (Transposed, StridedLast)]
        .iter()
        .map(|&(la, lr)| {
            (
                format!("{la:?}, residual {lr:?}"),
                vec![
                    input(&[m, k], Dist::Normal, la, seed),
                    normal(&[k, n], seed + 1),
                    normal(&[n], seed + 2),
                    input(&[m, n], Dist::Normal, lr, seed + 3),
                    normal(last, seed + 4),
                ],
            )
        })
        .collect()
}

/// Matmul followed by pointwise epilogues: bias, activations, a residual, a scale.
fn matmul_epilogues(fusion: bool) {
    let mut r = Report::new("matmul_epilogues", fusion);
    type Epilogue = fn(&Tensor, &[Tensor]) -> Result<Tensor>;
    let epilogues: [(&str, Epilogue); 8] = [
        ("bias", |y, x| y.add(&x[2])),
        ("bias relu", |y, x| y.add(&x[2])?.relu()),
        ("bias gelu", |y, x| y.add(&x[2])?.gelu()),
        ("bias gelu_tanh", |y, x| y.add(&x[2])?.gelu_tanh()),
        ("bias silu", |y, x| y.add(&x[2])?.silu()),
        ("bias relu + residual", |y, x| {
            y.add(&x[2])?.relu()?.add(&x[3])
        }),
        ("scale + residual", |y, x| y.mul(0.125)?.add(&x[3])),
        ("bias, tanh, row bias", |y, x| {
            y.add(&x[2])?.tanh()?.mul(&x[4])
        }),
    ];
    for (i, (m, k, n)) in [
        (7usize, 50usize, 17usize),
        (33, 17, 33),
        (3, 783, 9),
        (1, 64, 4096),
    ]
    .iter()
    .enumerate()
    {
        let xs = epilogue_inputs((*m, *k, *n), &[*m, 1], 1500 + 5 * i as u64);
        for (name, epi) in epilogues {
            check(
                &mut r,
                &format!("[{m}, {k}] @ [{k}, {n}] then {name}"),
                move |x: &[Tensor]| Ok(vec![epi(&x[0].matmul(&x[1])?, x)?]),
                Tol::Matmul(*k),
                &xs,
            );
        }
    }
    // two matmuls with an epilogue in between (an MLP), and an output that is also read
    let xs = vec![(
        "mlp".to_string(),
        vec![
            normal(&[5, 32], 1550),
            normal(&[32, 64], 1551).mul(0.2).unwrap(),
            normal(&[64], 1552),
            normal(&[64, 32], 1553).mul(0.2).unwrap(),
            normal(&[32], 1554),
        ],
    )];
    check(
        &mut r,
        "mlp with residual and an intermediate output",
        |x: &[Tensor]| {
            let h = x[0].matmul(&x[1])?.add(&x[2])?.relu()?;
            let y = h.matmul(&x[3])?.add(&x[4])?.add(&x[0])?;
            Ok(vec![y, h])
        },
        Tol::Matmul(64),
        &xs,
    );
    // row kernels over the product's rows, which run as the matmul's epilogue: softmax,
    // log_softmax, a residual then layer_norm, and attention's masked softmax of batched
    // scores followed by the second product (odd sizes, a row of one, transposed operands)
    type RowEpilogue = fn(&Tensor, &[Tensor]) -> Result<Tensor>;
    let rows: [(&str, RowEpilogue); 3] = [
        ("softmax", |y, _| y.softmax(-1)),
        ("scale, log_softmax", |y, _| y.mul(0.35)?.log_softmax(-1)),
        ("bias + residual, layer_norm", |y, x| {
            let n = y.shape()[y.rank() - 1];
            y.add(&x[2])?
                .add(&x[3])?
                .layer_norm(&[n], Some(&x[4]), Some(&x[2]), 1e-5)
        }),
    ];
    for (i, (m, k, n)) in [(7usize, 50usize, 17usize), (33, 17, 129), (5, 9, 1)]
        .iter()
        .enumerate()
    {
        let xs = epilogue_inputs((*m, *k, *n), &[*n], 1600 + 5 * i as u64);
        for (name, epi) in rows {
            check(
                &mut r,
                &format!("[{m}, {k}] @ [{k}, {n}] then {name}"),
                move |x: &[Tensor]| Ok(vec![epi(&x[0].matmul(&x[1])?, x)?]),
                Tol::Matmul(*k),
                &xs,
            );
        }
    }
    for (i, (b, t, d)) in [(2usize, 13usize, 8usize), (3, 1, 5)].iter().enumerate() {
        let seed = 1650 + 5 * i as u64;
        let xs: Vec<_> = [Contiguous, Transposed]
            .iter()
            .map(|&lk| {
                (
                    format!("keys {lk:?}"),
                    vec![
                        normal(&[*b, *t, *d], seed),
                        input(&[*b, *t, *d], Dist::Normal, lk, seed + 1),
                        normal(&[*b, *t, *d], seed + 2),
                        normal(&[*b, 1, *t], seed + 3),
                    ],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("attention [{b}, {t}, {d}]: masked softmax of the scores, then @ v"),
            |x: &[Tensor]| {
                let scores = x[0]
                    .matmul(&x[1].transpose(-2, -1)?)?
                    .mul(0.3)?
                    .add(&x[3])?;
                let p = scores.softmax(-1)?;
                Ok(vec![p.matmul(&x[2])?, p])
            },
            Tol::Matmul(*t),
            &xs,
        );
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Layout ops
// ---------------------------------------------------------------------------------------

fn layout_ops(fusion: bool) {
    let mut r = Report::new("layout_ops", fusion);
    type LayoutCase = (
        &'static str,
        Vec<usize>,
        fn(&[Tensor]) -> Result<Vec<Tensor>>,
    );
    let cases: Vec<LayoutCase> = vec![
        ("reshape", vec![6, 20], |x| {
            Ok(vec![
                x[0].reshape(&[3, 40])?,
                x[0].reshape(&[2, -1, 5])?.exp()?,
                x[0].reshape(&[120])?.mul(2.0)?,
            ])
        }),
        ("permute", vec![3, 4, 5], |x| {
            Ok(vec![
                x[0].permute(&[2, 0, 1])?.contiguous()?,
                x[0].permute(&[1, 2, 0])?.add(1.0)?,
                x[0].permute(&[2, 1, 0])?.sum(&[-1], false)?,
            ])
        }),
        ("transpose", vec![33, 17], |x| {
            Ok(vec![
                x[0].transpose(0, 1)?.contiguous()?,
                x[0].t()?.mul(&x[0].t()?)?,
                x[0].t()?.softmax(-1)?,
                x[0].t()?.reshape(&[-1])?,
            ])
        }),
        // transposed views of intermediates that do not meet their source in one
        // elementwise op (those are `views_of_intermediates`)
        ("exp(exp(x)ᵀ) + exp(x)", vec![4, 4], |x| {
            let y = x[0].exp()?;
            Ok(vec![y.t()?.exp()?.add(&y)?])
        }),
        ("y + (yᵀ)ᵀ", vec![4, 4], |x| {
            let y = x[0].exp()?;
            Ok(vec![y.add(&y.t()?.t()?)?])
        }),
        ("(yᵀ + 1)ᵀ + y", vec![4, 4], |x| {
            let y = x[0].exp()?;
            Ok(vec![y.t()?.add(1.0)?.t()?.add(&y)?])
        }),
        ("z + permute(z)", vec![4, 4], |x| {
            let z = x[0].exp()?.reshape(&[2, 2, 4])?;
            Ok(vec![z.add(&z.permute(&[1, 0, 2])?)?])
        }),
        ("row sums of yᵀ + row sums of y", vec![4, 4], |x| {
            let y = x[0].exp()?;
            Ok(vec![y
                .t()?
                .sum(&[-1], false)?
                .add(&y.sum(&[-1], false)?)?])
        }),
        ("y @ yᵀ", vec![4, 4], |x| {
            let y = x[0].exp()?;
            Ok(vec![y.matmul(&y.t()?)?])
        }),
        ("expand", vec![1, 783], |x| {
            Ok(vec![
                x[0].expand(&[5, 783])?.contiguous()?,
                x[0].expand(&[3, 783])?.add(1.0)?.sum(&[0], false)?,
            ])
        }),
        ("expand inner", vec![7, 1], |x| {
            Ok(vec![x[0].expand(&[7, 50])?.mul(&x[0])?.exp()?])
        }),
        ("slice", vec![7, 783], |x| {
            Ok(vec![
                x[0].slice(1, 0, 783, 2)?.contiguous()?,
                x[0].slice(0, 1, 7, 3)?.mul(2.0)?,
                x[0].slice(1, 5, 100, 1)?.sigmoid()?,
                x[0].narrow(1, 777, 6)?.sum(&[-1], false)?,
                x[0].slice(1, -10, 783, 4)?.neg()?,
            ])
        }),
        ("cat", vec![4, 50], |x| {
            let y = x[0].mul(2.0)?;
            let z = x[0].slice(1, 0, 17, 1)?.exp()?;
            Ok(vec![
                Tensor::cat(&[&x[0], &y], 0)?,
                Tensor::cat(&[&x[0], &z, &y], 1)?.add(1.0)?,
                Tensor::cat(&[&x[0].t()?, &y.t()?], 0)?,
                Tensor::cat(&[&x[0], &x[0].gt(0.0)?.cast(DType::I64)?], 0)?,
            ])
        }),
        ("index_select", vec![9, 50], |x| {
            let rows = Tensor::from_vec(vec![0i64, 8, 3, 3, 5, 1], &[6])?;
            let cols = Tensor::from_vec(vec![49i32, 0, 25, 7], &[4])?;
            Ok(vec![
                x[0].index_select(0, &rows)?,
                x[0].index_select(1, &cols)?.mul(3.0)?,
                x[0].exp()?.index_select(0, &rows)?.sum(&[-1], false)?,
            ])
        }),
        ("index_add and embedding", vec![9, 50], |x| {
            let rows = Tensor::from_vec(vec![0i64, 8, 3, 3, 5, 1], &[6])?;
            let ids = Tensor::from_vec(vec![2i64, 0, 8, 2, 1, 0], &[2, 3])?;
            let src = x[0].index_select(0, &rows)?.mul(0.5)?;
            Ok(vec![
                x[0].index_add(0, &rows, &src)?,
                x[0].exp()?.index_add(0, &rows, &src.tanh()?)?.add(1.0)?,
                x[0].embedding(&ids, Some(0))?,
                x[0].embedding(&ids, None)?.sum(&[-1], false)?,
            ])
        }),
        ("contiguous", vec![33, 17], |x| {
            Ok(vec![
                x[0].t()?.contiguous()?,
                x[0].slice(0, 0, 33, 2)?.contiguous()?,
                x[0].contiguous()?.relu()?,
            ])
        }),
        ("triu and tril", vec![5, 7], |x| {
            Ok(vec![
                x[0].triu(0)?,
                x[0].triu(1)?,
                x[0].triu(-2)?,
                x[0].tril(0)?,
                x[0].tril(3)?,
                x[0].tril(-1)?.add(1.0)?,
                x[0].t()?.triu(0)?.exp()?,
            ])
        }),
        ("batched triu", vec![2, 4, 4], |x| {
            Ok(vec![x[0].triu(1)?, x[0].tril(0)?.mul(&x[0])?])
        }),
        // a product summed over two leading dims (a bias's gradient: its own eager kernel,
        // the ops around it compiled) and an update of a parameter-sized value
        (
            "sum over two dims between pointwise ops",
            vec![3, 5, 7],
            |x| {
                let p = x[0].slice(0, 0, 1, 1)?.reshape(&[5, 7])?;
                let g = x[0].mul(&x[0].tanh()?)?.sum(&[0, 1], false)?;
                Ok(vec![
                    g.mul(0.1)?.sub(&p.sum(&[0], false)?)?,
                    x[0].exp()?.sum(&[0, 2], true)?.add(1.0)?,
                ])
            },
        ),
        // AdamW's moments and step on an index_add gradient: one kernel after the add
        (
            "optimiser update of an index_add gradient",
            vec![9, 50],
            |x| {
                let rows = Tensor::from_vec(vec![0i64, 8, 3, 3, 5, 1], &[6])?;
                let src = x[0].index_select(0, &rows)?.mul(0.5)?;
                let grad = x[0].mul(0.0)?.index_add(0, &rows, &src)?;
                let m = x[0].tanh()?;
                let v = x[0].mul(&x[0])?;
                let m2 = m.add(&grad.sub(&m)?.mul(0.1)?)?;
                let v2 = v.mul(0.999)?.add(&grad.mul(&grad)?.mul(0.001)?)?;
                let step = m2.div(&v2.sqrt()?.add(1e-8)?)?;
                let p2 = x[0].mul(0.99999)?.sub(&step.mul(0.001)?)?;
                Ok(vec![p2, m2, v2])
            },
        ),
    ];
    for (i, (name, shape, f)) in cases.into_iter().enumerate() {
        let xs = single_input_layouts(&shape, Dist::Normal, 1600 + i as u64);
        check(&mut r, name, f, Tol::Reduce, &xs);
    }
    r.finish();
}

/// A computed value combined with a view of itself that indexes it differently (`y + yᵀ`,
/// `y - y[:, :1]`, an outer sum of a row statistic): fused into one kernel, the view would
/// read what the same kernel writes.
fn views_of_intermediates(fusion: bool) {
    let mut r = Report::new("views_of_intermediates", fusion);
    type Case = (&'static str, fn(&[Tensor]) -> Result<Vec<Tensor>>);
    let cases: [Case; 11] = [
        ("exp(x) + exp(x)ᵀ", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.add(&y.t()?)?])
        }),
        ("exp(x)ᵀ + exp(x)", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.t()?.add(&y)?])
        }),
        ("contiguous(exp(x)ᵀ) + exp(x)", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.t()?.contiguous()?.add(&y)?])
        }),
        ("exp(exp(x)ᵀ) + 2 exp(x)", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.t()?.exp()?.add(&y.mul(2.0)?)?])
        }),
        ("s + sᵀ for s = sum(x, -1, keepdim)", |x| {
            let s = x[0].sum(&[-1], true)?;
            Ok(vec![s.add(&s.t()?)?])
        }),
        ("|xi|² + |xj|² and x xᵀ (pairwise distances)", |x| {
            let sq = x[0].mul(&x[0])?.sum(&[-1], true)?;
            let g = x[0].matmul(&x[0].t()?)?;
            Ok(vec![sq.add(&sq.t()?)?, g.mul(2.0)?])
        }),
        ("y - y[:, :1]", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.sub(&y.slice(1, 0, 1, 1)?)?])
        }),
        ("y - y[:1]", |x| {
            let y = x[0].exp()?;
            Ok(vec![y.sub(&y.slice(0, 0, 1, 1)?)?])
        }),
        ("y - y[-1:] (narrow)", |x| {
            let n = x[0].shape()[0];
            let y = x[0].exp()?;
            Ok(vec![y.sub(&y.narrow(0, n - 1, 1)?)?])
        }),
        ("y - y[:, 2:3] expanded", |x| {
            let y = x[0].exp()?;
            let shape: Vec<i64> = y.shape().iter().map(|&d| d as i64).collect();
            Ok(vec![y.sub(&y.slice(1, 2, 3, 1)?.expand(&shape)?)?])
        }),
        (
            "several transposed uses of one value, several outputs",
            |x| {
                let y = x[0].exp()?;
                let z = y.reshape(&[-1])?;
                Ok(vec![
                    y.t()?.exp()?.add(&y)?,
                    y.add(&y.t()?.t()?)?,
                    y.matmul(&y.t()?)?,
                    z.mul(2.0)?,
                ])
            },
        ),
    ];
    for (name, f) in cases {
        for shape in [[4usize, 4], [33, 33], [50, 50]] {
            let xs = single_input_layouts(&shape, Dist::Normal, 1690);
            check(
                &mut r,
                &format!("{name} {shape:?}"),
                f,
                Tol::Matmul(shape[1]),
                &xs,
            );
        }
    }
    r.finish();
}

/// A value compared exactly with a copy of itself (`y == index_select(y, arange)`): in
/// eager mode every element is equal. A kernel whose bool output makes it run on the eager
/// kernels must not recompute `y` differently from the generated kernel other consumers
/// read it from.
fn recomputed_values_agree(fusion: bool) {
    let mut r = Report::new("recomputed_values_agree", fusion);
    let float_valued = UnaryOp::ALL
        .into_iter()
        .filter(|u| matches!(u.info().dtype, DTypeRule::Float | DTypeRule::Numeric));
    for u in float_valued {
        let name = unary_name(u);
        let xs = vec![("contiguous".to_string(), vec![normal(&[4096], 1697)])];
        check(
            &mut r,
            &format!("{name}(x) == index_select({name}(x), arange)"),
            move |x: &[Tensor]| {
                let n = x[0].shape()[0];
                let idx = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?;
                let y = x[0].unary(u)?;
                let z = y.index_select(0, &idx)?;
                Ok(vec![y.eq(&z)?, y.sub(&z)?])
            },
            Tol::Pointwise,
            &xs,
        );
    }
    r.finish();
}

/// Integer arithmetic on constants made inside the function wraps on overflow, as eager
/// (and PyTorch) do: constant folding must not saturate.
fn integer_overflow_in_constants(fusion: bool) {
    let mut r = Report::new("integer_overflow_in_constants", fusion);
    type Case = (&'static str, fn(&[Tensor]) -> Result<Vec<Tensor>>);
    let cases: [Case; 4] = [
        ("full(2^30, i32) * full(2^30, i32)", |_| {
            let c = Tensor::full(&[4], 1i64 << 30, DType::I32)?;
            Ok(vec![c.mul(&c)?])
        }),
        ("full(2^30, i32) * 4", |_| {
            let c = Tensor::full(&[4], 1i64 << 30, DType::I32)?;
            Ok(vec![c.mul(4i64)?])
        }),
        ("full(i32::MAX, i32) + 1", |_| {
            let c = Tensor::full(&[4], i64::from(i32::MAX), DType::I32)?;
            Ok(vec![c.add(1i64)?])
        }),
        ("full(2^30, i32) * 4 + int(x)", |x| {
            let c = Tensor::full(&[4], 1i64 << 30, DType::I32)?;
            Ok(vec![c.mul(4i64)?.add(&x[0].cast(DType::I32)?)?])
        }),
    ];
    for (name, f) in cases {
        let xs = vec![("x".to_string(), vec![draw(&[4], Dist::Scaled(3.0), 1698)])];
        check(&mut r, name, f, Tol::Pointwise, &xs);
    }
    r.finish();
}

/// Values nothing uses (a matmul, a linear, a pointwise op, a reduction, a matmul with an
/// epilogue) next to the returned one.
fn dead_values(fusion: bool) {
    let mut r = Report::new("dead_values", fusion);
    type Case = (&'static str, fn(&[Tensor]) -> Result<Vec<Tensor>>);
    let cases: [Case; 6] = [
        ("unused matmul", |x| {
            let _ = x[0].matmul(&x[0])?;
            Ok(vec![x[0].neg()?])
        }),
        ("unused linear", |x| {
            let _ = x[0].linear(&x[0], None)?;
            Ok(vec![x[0].sum(&[], false)?.neg()?])
        }),
        ("unused exp", |x| {
            let _ = x[0].exp()?;
            Ok(vec![x[0].neg()?])
        }),
        ("unused sum", |x| {
            let _ = x[0].sum(&[-1], false)?;
            Ok(vec![x[0].neg()?])
        }),
        ("unused matmul with an epilogue", |x| {
            let _ = x[0].matmul(&x[0])?.relu()?;
            Ok(vec![x[0].neg()?])
        }),
        (
            "log_softmax of an empty linear (the passes drop the product)",
            |x| {
                let e = x[0].slice(0, 0, 0, 1)?;
                Ok(vec![e.linear(&e, None)?.log_softmax(-2)?, x[0].neg()?])
            },
        ),
    ];
    for (name, f) in cases {
        let xs = single_input_layouts(&[7, 7], Dist::Normal, 1695);
        check(&mut r, name, f, Tol::Matmul(7), &xs);
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Fused chains and models
// ---------------------------------------------------------------------------------------

fn pointwise_chains(fusion: bool) {
    let mut r = Report::new("pointwise_chains", fusion);
    for (i, shape) in all_shapes().iter().enumerate() {
        let seed = 1700 + 2 * i as u64;
        let n = *shape.last().unwrap();
        let xs: Vec<_> = single_input_layouts(shape, Dist::Normal, seed)
            .into_iter()
            .map(|(w, v)| (w, vec![v[0].clone(), normal(&[n], seed + 1)]))
            .collect();
        check(
            &mut r,
            &format!("gelu_tanh(x*1.5+0.5)*sigmoid(x) {shape:?}"),
            |x: &[Tensor]| {
                Ok(vec![x[0]
                    .mul(1.5)?
                    .add(0.5)?
                    .gelu_tanh()?
                    .mul(&x[0].sigmoid()?)?])
            },
            Tol::Pointwise,
            &xs,
        );
        check(
            &mut r,
            &format!("a long chain with a broadcast operand and two outputs {shape:?}"),
            |x: &[Tensor]| {
                let a = x[0].mul(&x[1])?.add(0.25)?.tanh()?;
                let b = a.sub(&x[1])?.abs()?.add(0.1)?.sqrt()?.log()?;
                let c = b.maximum(&a)?.silu()?.mul(0.5)?;
                let d = x[0].gt(&x[1])?.where_(&c, &a.exp()?)?;
                Ok(vec![d, a])
            },
            Tol::Pointwise,
            &xs,
        );
    }
    r.finish();
}

/// Inputs a kernel would read along their last dim with scattered accesses (a transpose
/// whose last dim's stride is past 16 elements, of at least 4096 elements): the cpu backend
/// copies them row-major first (`NestKernel::densified_inputs`). Transposed 2-d and 3-d
/// inputs into softmax, layer norm, a row sum, a pointwise chain and a two-input op with a
/// contiguous partner, a reduction over the first dim (read along it: no copy), a slice with
/// a wide step, and an expanded (broadcast) operand that must not be copied.
fn scattered_inputs(fusion: bool) {
    let mut r = Report::new("scattered_inputs", fusion);
    let transposed = |shape: &[usize], seed: u64| {
        let mut s = shape.to_vec();
        let n = s.len();
        s.swap(n - 1, n - 2);
        normal(&s, seed).transpose(-1, -2).unwrap()
    };
    for (i, shape) in [vec![64, 100], vec![3, 40, 70], vec![4096, 17]]
        .into_iter()
        .enumerate()
    {
        let seed = 1900 + 10 * i as u64;
        let x = transposed(&shape, seed);
        assert!(x.strides().last().unwrap().unsigned_abs() > 16 && x.numel() >= 4096);
        let n = *shape.last().unwrap();
        let dense = normal(&shape, seed + 1);
        let w = normal(&[n], seed + 2);
        let wide_step = normal(&[shape[0], n * 20], seed + 3)
            .slice(-1, 0, (n * 20) as i64, 20)
            .unwrap();
        let broadcast = normal(&[n], seed + 4).expand(&dims_i64(&shape)).unwrap();
        let inputs = vec![x, dense, w, broadcast];
        let inputs2 = if shape.len() == 2 {
            vec![wide_step, normal(&shape, seed + 5)]
        } else {
            vec![transposed(&shape, seed + 6), normal(&shape, seed + 5)]
        };
        check(
            &mut r,
            &format!("row kernels of a transposed {shape:?}"),
            |x: &[Tensor]| {
                Ok(vec![
                    x[0].softmax(-1)?,
                    x[0].layer_norm(&[x[0].shape()[x[0].rank() - 1]], Some(&x[2]), None, 1e-5)?,
                    x[0].sum(&[-1], false)?,
                    x[0].sum(&[0], false)?,
                ])
            },
            Tol::Reduce,
            &[("transposed".into(), inputs.clone())],
        );
        check(
            &mut r,
            &format!("pointwise on a transposed {shape:?}"),
            |x: &[Tensor]| {
                Ok(vec![
                    x[0].mul(1.5)?.add(0.5)?.tanh()?,
                    x[0].add(&x[1])?.sigmoid()?.mul(&x[3])?,
                    x[3].mul(2.0)?.add(&x[0])?,
                ])
            },
            Tol::Pointwise,
            &[("transposed".into(), inputs)],
        );
        check(
            &mut r,
            &format!("a wide-step slice or a second transposed input {shape:?}"),
            |x: &[Tensor]| Ok(vec![x[0].mul(&x[1])?.exp()?, x[0].softmax(-1)?]),
            Tol::Reduce,
            &[("scattered".into(), inputs2)],
        );
    }
    r.finish();
}

fn reduction_chains(fusion: bool) {
    let mut r = Report::new("reduction_chains", fusion);
    for (i, shape) in SHAPES_2D.iter().enumerate() {
        let seed = 1800 + 3 * i as u64;
        let n = shape[1];
        let xs: Vec<_> = single_input_layouts(shape, Dist::Normal, seed)
            .into_iter()
            .map(|(w, v)| {
                let wt = normal(&[n], seed + 1).mul(0.5).unwrap().add(1.0).unwrap();
                (
                    w,
                    vec![
                        v[0].clone(),
                        wt,
                        normal(&[n], seed + 2),
                        normal(shape, seed + 3),
                    ],
                )
            })
            .collect();
        // softmax's and layer norm's backward: the row's reduction reads one tensor, the
        // epilogue others (one row loop, not the sum recomputed per element)
        check(
            &mut r,
            &format!("a row reduced in one tensor, the epilogue over another {shape:?}"),
            |x: &[Tensor]| {
                let s = x[0].sum(&[-1], true)?;
                let softmax_like = x[3].sub(&s)?.mul(&x[1])?.mul(0.125)?;
                let m = x[0].mul(&x[1])?.mean(&[-1], true)?;
                let layer_norm_like = x[3].sub(&m)?.mul(&x[2])?.add(&x[3])?;
                Ok(vec![softmax_like, layer_norm_like])
            },
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("softmax by hand {shape:?}"),
            |x: &[Tensor]| {
                let m = x[0].max(&[-1], true)?;
                let e = x[0].sub(&m)?.exp()?;
                Ok(vec![e.div(&e.sum(&[-1], true)?)?])
            },
            Tol::Reduce,
            &xs,
        );
        // rows of equal values are `layer_norm_constant_rows`
        let varied: Vec<_> = xs
            .iter()
            .filter(|(_, v)| !constant_rows(&v[0]))
            .cloned()
            .collect();
        check(
            &mut r,
            &format!("layernorm by hand {shape:?}"),
            |x: &[Tensor]| {
                let mean = x[0].mean(&[-1], true)?;
                let c = x[0].sub(&mean)?;
                let v = c.mul(&c)?.mean(&[-1], true)?;
                Ok(vec![c
                    .mul(&v.add(1e-5)?.rsqrt()?)?
                    .mul(&x[1])?
                    .add(&x[2])?])
            },
            Tol::Reduce,
            &varied,
        );
        check(
            &mut r,
            &format!("reductions with prologues and epilogues {shape:?}"),
            |x: &[Tensor]| {
                Ok(vec![
                    x[0].mul(&x[0])?.sum(&[-1], false)?.sqrt()?,
                    x[0].exp()?.mean(&[0], true)?.log()?,
                    x[0].abs()?.max(&[-1], true)?.add(&x[0])?,
                    x[0].sub(&x[0].mean(&[0], true)?)?.min(&[0], false)?,
                    x[0].sigmoid()?.sum(&[], false)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
        // a bias gradient: the masked product is returned too, so fusion computes it in
        // a pointwise kernel of its own and the column sum reads it (with its epilogue)
        check(
            &mut r,
            &format!("a column sum of a value also returned {shape:?}"),
            |x: &[Tensor]| {
                let p = x[0].mul(&x[3].gt(0.0)?.cast(DType::F32)?)?;
                let g = p.sum(&[0], false)?;
                Ok(vec![
                    p.exp()?,
                    p.clone(),
                    x[2].sub(&g.mul(0.1)?)?,
                    g.mul(&g)?.mul(0.001)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
        // column reductions with one full-size op before them and ops on their result after
        // (a position embedding's gradient: a sum over the batch, masked by a `where`), which
        // run op by op on the runtime's column reduction
        check(
            &mut r,
            &format!("column reductions with a prologue and an epilogue {shape:?}"),
            |x: &[Tensor]| {
                let keep = x[1].gt(1.0)?;
                Ok(vec![
                    keep.where_(0.0, &x[0].sum(&[0], false)?)?.mul(0.5)?,
                    x[0].mul(&x[3])?.sum(&[0], true)?.add(&x[2])?,
                    x[0].abs()?.max(&[0], false)?.sqrt()?,
                    x[0].mul(-1.5)?.min(&[0], true)?.exp()?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("a row value shared by several consumers {shape:?}"),
            |x: &[Tensor]| {
                let s = x[0].sum(&[-1], true)?;
                let a = x[0].div(&s.abs()?.add(1.0)?)?;
                let b = a.log_softmax(-1)?;
                Ok(vec![a, b, s])
            },
            Tol::Reduce,
            &xs,
        );
    }
    r.finish();
}

fn models(fusion: bool) {
    let mut r = Report::new("models", fusion);
    let zoo: [(&str, &[usize], Tol); 9] = [
        ("pointwise", &[1027], Tol::Pointwise),
        ("tiny", &[1027], Tol::Pointwise),
        ("layernorm", &[7, 33], Tol::Reduce),
        ("softmax", &[7, 33], Tol::Reduce),
        ("reduce", &[9, 13], Tol::Reduce),
        ("mlp", &[3, 16], Tol::Matmul(64)),
        ("block", &[2, 5, 16], Tol::Matmul(64)),
        ("block", &[1, 7, 32], Tol::Matmul(128)),
        ("block", &[2, 9, 64], Tol::Matmul(256)),
    ];
    for (name, shape, tol) in zoo {
        let model = kiln::models::build(name, Some(shape)).unwrap();
        let mut xs: Vec<_> = (0..2)
            .map(|seed| (format!("seed {seed}"), model.example_inputs(seed).unwrap()))
            .collect();
        // a transposed view of the input
        let x = &xs[0].1[0];
        if x.rank() >= 2 {
            let t = x.transpose(-1, -2).unwrap().contiguous().unwrap();
            xs.push(("transposed view".into(), vec![t.transpose(-1, -2).unwrap()]));
        }
        check(
            &mut r,
            &format!("model {name} {shape:?}"),
            |x: &[Tensor]| model.forward(x),
            tol,
            &xs,
        );
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Large tensors: the generated kernels split rows (or, for a few long rows, the inner
// range) across threads from 128K units of estimated work on (`element_cost`: the chains,
// softmaxes and norms here pass it at every shape, a plain sum at the larger ones)
// ---------------------------------------------------------------------------------------

fn large_tensors(fusion: bool) {
    let mut r = Report::new("large_tensors", fusion);
    for (i, shape) in [
        vec![1usize, 40000],
        vec![3, 20011],
        vec![97, 783],
        vec![65537],
    ]
    .iter()
    .enumerate()
    {
        let seed = 2000 + 3 * i as u64;
        let n = *shape.last().unwrap();
        let xs: Vec<_> = [Contiguous, Transposed, StridedLast, ExpandedFirst]
            .iter()
            .map(|&l| {
                (
                    format!("{l:?}"),
                    vec![input(shape, Dist::Normal, l, seed), normal(&[n], seed + 1)],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("pointwise chain {shape:?}"),
            |x: &[Tensor]| {
                let a = x[0].mul(&x[1])?.add(0.5)?.gelu_tanh()?;
                Ok(vec![a.mul(&x[0].sigmoid()?)?.sub(&x[1].exp()?)?])
            },
            Tol::Pointwise,
            &xs,
        );
        let last = shape.len() as i64 - 1;
        check(
            &mut r,
            &format!("reductions {shape:?}"),
            move |x: &[Tensor]| {
                Ok(vec![
                    x[0].sum(&[-1], false)?,
                    x[0].mul(&x[0])?.mean(&[-1], true)?,
                    x[0].max(&[-1], false)?,
                    x[0].min(&[0], false)?,
                    x[0].sum(&[0], true)?.add(&x[1])?,
                    x[0].argmax(last, false)?,
                ])
            },
            Tol::Reduce,
            &xs,
        );
        check(
            &mut r,
            &format!("softmax, log_softmax, layer_norm {shape:?}"),
            move |x: &[Tensor]| {
                Ok(vec![
                    x[0].softmax(-1)?,
                    x[0].log_softmax(0)?,
                    x[0].layer_norm(&[n], Some(&x[1]), None, 1e-5)?,
                    x[0].rms_norm(&[n], None, 1e-6)?,
                ])
            },
            Tol::Reduce,
            &xs[..3],
        );
    }
    // matmuls with epilogues over many output rows (the epilogue runs per block of rows)
    for (i, (sa, sb)) in [
        (vec![300usize, 64], vec![64usize, 130]),
        // rows enough for each thread to take a share (a gemm, then its rows' epilogue)
        (vec![1031, 64], vec![64, 130]),
        (vec![4, 75, 32], vec![32, 130]),
        (vec![1, 64], vec![64, 40000]),
    ]
    .iter()
    .enumerate()
    {
        let seed = 2100 + 4 * i as u64;
        let n = *sb.last().unwrap();
        let mut out = sa.clone();
        *out.last_mut().unwrap() = n;
        let xs: Vec<_> = [(Contiguous, Contiguous), (Transposed, StridedLast)]
            .iter()
            .map(|&(la, lr)| {
                (
                    format!("{la:?}, residual {lr:?}"),
                    vec![
                        input(sa, Dist::Normal, la, seed),
                        normal(sb, seed + 1),
                        normal(&[n], seed + 2),
                        input(&out, Dist::Normal, lr, seed + 3),
                    ],
                )
            })
            .collect();
        check(
            &mut r,
            &format!("{sa:?} @ {sb:?} + bias, relu / gelu + residual"),
            |x: &[Tensor]| {
                let y = x[0].matmul(&x[1])?.add(&x[2])?;
                Ok(vec![y.relu()?, y.gelu()?.add(&x[3])?])
            },
            Tol::Matmul(*sa.last().unwrap()),
            &xs,
        );
        check(
            &mut r,
            &format!("{sa:?} @ {sb:?} + bias, relu"),
            |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?.add(&x[2])?.relu()?]),
            Tol::Matmul(*sa.last().unwrap()),
            &xs,
        );
    }
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Symbolic dims
// ---------------------------------------------------------------------------------------

/// Compiles `f` once with symbolic dims (`options`) and calls it with inputs made by
/// `make(n)` for each size in `sizes`; every result is checked, and the function may
/// recompile at most once.
fn check_symbolic<F, M>(
    report: &mut Report,
    case: &str,
    f: F,
    tol: Tol,
    options: CompileOptions,
    sizes: &[usize],
    make: M,
) where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync,
    M: Fn(usize) -> Vec<Tensor>,
{
    let inputs: Vec<_> = sizes
        .iter()
        .map(|&n| (format!("size {n}"), make(n)))
        .collect();
    let s = check_all(report, case, f, tol, options, &inputs);
    if s.recompiles > 1 {
        report.fail(format!("{case}: {} recompiles: {s:?}", s.recompiles));
    }
}

fn symbolic_dims(fusion: bool) {
    let mut r = Report::new("symbolic_dims", fusion);
    let always = || cpu_options(fusion).dynamic(Dynamic::Always);
    let sizes = &SYMBOLIC_SIZES;
    check_symbolic(
        &mut r,
        "exp of [n]",
        |x: &[Tensor]| Ok(vec![x[0].exp()?]),
        Tol::Pointwise,
        always(),
        sizes,
        |n| vec![normal(&[n], n as u64)],
    );
    check_symbolic(
        &mut r,
        "exp and sum of [n] at sizes past the parallel threshold",
        |x: &[Tensor]| Ok(vec![x[0].exp()?.mul(&x[0])?, x[0].sum(&[-1], false)?]),
        Tol::Reduce,
        always(),
        &[40000, 65537, 3],
        |n| vec![input(&[n], Dist::Normal, StridedLast, n as u64)],
    );
    check_symbolic(
        &mut r,
        "pointwise chain of [n, 17] with a [17] operand, transposed input",
        |x: &[Tensor]| Ok(vec![x[0].mul(&x[1])?.add(0.5)?.gelu()?.sub(&x[1])?]),
        Tol::Pointwise,
        always(),
        sizes,
        |n| {
            vec![
                input(&[n, 17], Dist::Normal, Transposed, n as u64),
                normal(&[17], 1),
            ]
        },
    );
    check_symbolic(
        &mut r,
        "sum and mean over a symbolic last dim of [5, n]",
        |x: &[Tensor]| {
            Ok(vec![
                x[0].sum(&[-1], false)?,
                x[0].mean(&[-1], true)?,
                x[0].max(&[-1], false)?,
                x[0].argmax(-1, false)?,
            ])
        },
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![input(&[5, n], Dist::Normal, StridedLast, n as u64)],
    );
    check_symbolic(
        &mut r,
        "sum and mean over a symbolic first dim of [n, 17]",
        |x: &[Tensor]| Ok(vec![x[0].sum(&[0], false)?, x[0].mean(&[0], true)?]),
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![normal(&[n, 17], n as u64)],
    );
    check_symbolic(
        &mut r,
        "var over a symbolic dim",
        |x: &[Tensor]| Ok(vec![x[0].var(&[-1], 1, false)?, x[0].var(&[], 0, false)?]),
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![normal(&[4, n], n as u64).add(5.0).unwrap()],
    );
    check_symbolic(
        &mut r,
        "softmax and log_softmax of [n, 33] and [5, n]",
        |x: &[Tensor]| {
            Ok(vec![
                x[0].softmax(-1)?,
                x[1].softmax(-1)?,
                x[1].log_softmax(-1)?,
                x[0].softmax(0)?,
            ])
        },
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![normal(&[n, 33], n as u64), normal(&[5, n], n as u64 + 1)],
    );
    let (w, b) = (normal(&[33], 2).add(1.0).unwrap(), normal(&[33], 3));
    check_symbolic(
        &mut r,
        "layer_norm and rms_norm of [n, 33] with captured weights",
        |x: &[Tensor]| {
            Ok(vec![
                x[0].layer_norm(&[33], Some(&w), Some(&b), 1e-5)?,
                x[0].rms_norm(&[33], Some(&w), 1e-5)?,
            ])
        },
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![normal(&[n, 33], n as u64)],
    );
    check_symbolic(
        &mut r,
        "layer_norm over a symbolic normalized dim of [4, n]",
        |x: &[Tensor]| {
            let n = x[0].shape()[1];
            Ok(vec![x[0].layer_norm(&[n], None, None, 1e-5)?])
        },
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![normal(&[4, n], n as u64)],
    );
    let wm = normal(&[50, 17], 4);
    let bm = normal(&[17], 5);
    check_symbolic(
        &mut r,
        "[n, 50] @ [50, 17] + bias, relu",
        |x: &[Tensor]| Ok(vec![x[0].matmul(&wm)?.add(&bm)?.relu()?]),
        Tol::Matmul(50),
        cpu_options(fusion).mark_dynamic(0, 0),
        sizes,
        |n| vec![normal(&[n, 50], n as u64)],
    );
    check_symbolic(
        &mut r,
        "batched [n, 4, 8] @ [n, 8, 5]",
        |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?]),
        Tol::Matmul(8),
        always(),
        sizes,
        |n| {
            vec![
                normal(&[n, 4, 8], n as u64),
                normal(&[n, 8, 5], n as u64 + 1),
            ]
        },
    );
    check_symbolic(
        &mut r,
        "softmax by hand over a symbolic row",
        |x: &[Tensor]| {
            let e = x[0].sub(&x[0].max(&[-1], true)?)?.exp()?;
            Ok(vec![e.div(&e.sum(&[-1], true)?)?])
        },
        Tol::Reduce,
        always(),
        sizes,
        |n| vec![input(&[4, n], Dist::Normal, Transposed, n as u64)],
    );
    let block = kiln::models::build("block", Some(&[2, 5, 16])).unwrap();
    check_symbolic(
        &mut r,
        "block [2, seq, 16] with a symbolic seq",
        |x: &[Tensor]| block.forward(x),
        Tol::Matmul(64),
        cpu_options(fusion).mark_dynamic(0, 1),
        &[3, 50, 117],
        |n| vec![normal(&[2, n, 16], n as u64)],
    );
    r.finish();
}

// ---------------------------------------------------------------------------------------
// Random programs (the IR property tests' generator, replayed as user code)
// ---------------------------------------------------------------------------------------

/// Inputs for a random graph with `B` and `T` bound to `sizes`; `transposed` makes rank-2
/// inputs transposed views.
fn random_inputs_for(g: &Graph, sizes: (usize, usize), seed: u64, transposed: bool) -> Vec<Tensor> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(k, (_, id))| {
            let ty = &g.node(*id).ty;
            let shape = kiln_tests::bind_generated_symbols(&ty.shape, sizes);
            let layout = if transposed { Transposed } else { Contiguous };
            let seed = seed + k as u64;
            match ty.dtype {
                // integers are often indices: keep them valid for any table of size >= 2
                DType::I32 | DType::I64 => input(&shape, Dist::Positive, layout, seed)
                    .mul(0.6)
                    .unwrap()
                    .cast(ty.dtype)
                    .unwrap(),
                DType::Bool => input(&shape, Dist::Normal, layout, seed).gt(0.0).unwrap(),
                DType::F32 => input(&shape, Dist::Normal, layout, seed),
                d => input(&shape, Dist::Normal, layout, seed).cast(d).unwrap(),
            }
        })
        .collect()
}

/// Random programs (fixed seed) compiled for the cpu backend vs eager, at three sizes of
/// their symbols and with transposed inputs, normwise: each float element within 1e-4 of
/// the output's largest finite magnitude (+1e-5; see [`normwise`] for f16/bf16), NaN and
/// infinities in the same places; integers and bools exactly. No program is skipped: the
/// unfused means and norms that once needed skipping (constant rows, squares past f32's
/// range) decompose in f64 now (checked once at 4096 cases).
fn random_programs(fusion: bool) {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 1024,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let result = runner.run(
        &arb_graph_with(GenConfig {
            symbolic: true,
            max_steps: 12,
        }),
        |g| {
            let f = |xs: &[Tensor]| replay(&g, xs);
            let cf = compile_with(f, cpu_options(fusion));
            for (i, sizes) in [(2usize, 3usize), (3, 5), (4, 6)].into_iter().enumerate() {
                for transposed in [false, true] {
                    let xs = random_inputs_for(&g, sizes, 7 * i as u64, transposed);
                    match (cf.call(&xs), f(&xs)) {
                        (Ok(c), Ok(e)) => {
                            for (o, (c, e)) in c.iter().zip(&e).enumerate() {
                                normwise(c, e).map_err(|m| {
                                    TestCaseError::fail(format!(
                                        "output {o} at sizes {sizes:?} transposed {transposed}: {m}\n{g}"
                                    ))
                                })?;
                            }
                        }
                        (Err(_), Err(_)) => {}
                        // an out-of-range index in a value nothing uses: eager fails, the
                        // compiled graph drops the dead op (as torch.compile does)
                        (Ok(_), Err(e))
                            if e.to_string().contains("is out of range")
                                && dead(&g, |op| matches!(op, Op::IndexSelect { .. })) => {}
                        (c, e) => {
                            return Err(TestCaseError::fail(format!(
                                "compiled {:?} vs eager {:?}\n{g}",
                                c.map(|_| ()),
                                e.map(|_| ())
                            )))
                        }
                    }
                }
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("fusion {fusion}: {e}");
    }
}

/// True when `g` has a node whose op satisfies `pred` and whose value no output depends on.
fn dead(g: &Graph, pred: impl Fn(&Op) -> bool) -> bool {
    let mut live: HashSet<NodeId> = g.outputs().iter().copied().collect();
    let ids: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
    for id in ids.iter().rev() {
        if live.contains(id) {
            for a in &g.node(*id).args {
                if let Arg::Value(v) = a {
                    live.insert(*v);
                }
            }
        }
    }
    ids.iter()
        .any(|id| !live.contains(id) && pred(&g.node(*id).op))
}

fn normwise(c: &Tensor, e: &Tensor) -> std::result::Result<(), String> {
    if c.dtype() != e.dtype() || c.shape() != e.shape() {
        return Err(format!("{} vs {}", c.tensor_type(), e.tensor_type()));
    }
    let (cv, ev) = (c.to_vec_f64().unwrap(), e.to_vec_f64().unwrap());
    let exact = !e.dtype().is_float();
    let scale = ev
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    // An f64 output may come from f32 arithmetic (a cast at the end): f32's bounds. In
    // f16 and bf16 the decomposed composites (linear = matmul + add, ...) round each
    // intermediate to the dtype where eager's composite kernel rounds once, and a random
    // program chains several: 8 roundings' worth of the output's scale.
    let (atol, rtol) = match e.dtype() {
        DType::F16 => (1e-3, 8.0 * 2f64.powi(-10)),
        DType::BF16 => (1e-2, 8.0 * 2f64.powi(-7)),
        DType::F64 => Tol::Reduce.bounds(DType::F32),
        d => Tol::Reduce.bounds(d),
    };
    for (j, (p, q)) in cv.iter().zip(&ev).enumerate() {
        let ok = if exact || !q.is_finite() {
            p == q || (p.is_nan() && q.is_nan())
        } else {
            (p - q).abs() <= atol + rtol * scale
        };
        if !ok {
            return Err(format!("element {j}: compiled {p} vs eager {q}"));
        }
    }
    Ok(())
}

fused_and_unfused! {
    unary_simple_ops,
    unary_transcendental_ops,
    unary_bool_ops,
    unary_composite_ops,
    bool_results_in_kernels,
    gelu_and_erf_tails,
    activations_and_clamp,
    unary_domain_edges,
    bounded_transcendentals,
    fitted_chains,
    scattered_inputs,
    unary_special_values,
    trig_large_arguments,
    binary_simple_ops,
    binary_library_ops,
    binary_bool_ops,
    binary_nan_operands,
    binary_integer_and_mixed_dtypes,
    where_select,
    casts,
    reduce_sum,
    reduce_mean,
    reduce_max,
    reduce_min,
    reduce_nan_propagation,
    reduce_integer_sums,
    argmax,
    var,
    softmax,
    log_softmax,
    layer_norm,

    layer_norm_constant_rows,
    rms_norm,
    norms_of_large_values,
    norms_of_small_values,
    matmul,
    linear,
    matmul_epilogues,
    layout_ops,
    views_of_intermediates,
    recomputed_values_agree,
    integer_overflow_in_constants,
    dead_values,
    pointwise_chains,
    reduction_chains,
    models,
    large_tensors,
    symbolic_dims,
    random_programs,
}

/// One compiled function called on alternating layouts of its inputs (contiguous,
/// transposed views, another shape, contiguous again): every generated kernel reuses the
/// layout of its last call only while shapes and strides repeat, so each call must match
/// eager whatever came before it.
#[test]
fn alternating_layouts_reuse_no_stale_kernel_layout() {
    let f = |x: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
        let p = x[0].mul(2.0)?.add(&x[1])?.tanh()?;
        Ok(vec![p.sum(&[-1], false)?, p])
    };
    let cf = compile_with(f, cpu_options(true));
    let make = |rows: usize, cols: usize, transposed: bool, seed: u64| -> Vec<Tensor> {
        (0..2)
            .map(|i| {
                let s = seed + i;
                if transposed {
                    normal(&[cols, rows], s).transpose(0, 1).unwrap()
                } else {
                    normal(&[rows, cols], s)
                }
            })
            .collect()
    };
    let calls = [
        (5, 7, false),
        (5, 7, true),
        (5, 7, false),
        (67, 33, false),
        (67, 33, true),
        (5, 7, true),
        (5, 7, true),
    ];
    for (i, &(rows, cols, transposed)) in calls.iter().enumerate() {
        let xs = make(rows, cols, transposed, 40 + 2 * i as u64);
        let got = cf.call(&xs).unwrap();
        let want = f(&xs).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape(), w.shape(), "call {i}");
            normwise(g, w).unwrap_or_else(|m| {
                panic!("call {i} ({rows}x{cols}, transposed {transposed}): {m}")
            });
        }
    }
}
