//! Loop nest to C: the source of a kernel for the C tier.
//!
//! The function has the signature of every generated kernel ([`super::super::jit::KernelFn`])
//! and walks the same rows and phases as the Cranelift code (`cpu/emit.rs`), at the host's
//! full vector width: each value of the inner loop is a GCC/Clang vector of [`Lanes`] f32
//! lanes (`kf`; bools as `ki` masks, f64 values as `kd`), the loop body is emitted `U` times
//! per iteration so that each reduction has `U` independent accumulators, and the last
//! partial vector of a row runs the same body on lanes loaded one by one, its reductions
//! masked to the lanes that exist. Row values are C scalars, computed by the same vector
//! routines on a broadcast operand. The transcendental functions are kiln's own
//! polynomials (`kiln_math.h`, a port of `cpu/math.rs` with the same error bounds); no
//! compiler flag changes NaN or infinity semantics.
//!
//! Sums accumulate in f64, as the Cranelift tier and eager do; max and min propagate NaN.

use super::streams::streamed_buffers;
use crate::cpu::chain_fits::{chain_fits, ChainFits};
use crate::cpu::emit::{InnerAccess, Spec, SQUARES_EXACT_BELOW};
use crate::cpu::jit::host_fma;
use crate::cpu::math::{exp_variant, fit, negated, tanh_needs_clamp, ExpVariant};
use crate::cuda::source::double_lit;
use crate::loops::{value_ranges, Expr, LoopNest, Phase, ScalarType, ValueId, ValueRange};
use kiln_ir::{BinaryOp, DType, DTypeRule, ReduceOp, UnaryOp};
use std::fmt::Write;

/// The vector width the C tier compiles for: f32 lanes per vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lanes(pub usize);

impl Lanes {
    /// The host's widest f32 vector: 16 lanes with AVX-512, 8 with AVX2, else 4.
    pub fn host() -> Lanes {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Lanes(16);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Lanes(8);
            }
        }
        Lanes(4)
    }
}

/// How far ahead of its loads a reducing loop prefetches, in bytes (see
/// [`Writer::prefetches_ahead`]).
const PREFETCH_AHEAD: usize = 4096;

/// The name of the kernel function in every generated source.
pub const SYMBOL: &str = "kiln_kernel";

/// kiln's vector math routines in C (the port of `cpu/math.rs`).
const MATH_H: &str = include_str!("kiln_math.h");

/// The C source of `nest` specialised for `spec`, at `lanes` f32 lanes per vector, or why
/// the C tier does not take it (the kernel then stays on its Cranelift code). The source
/// does not name the kernel, so kernels that compute the same thing (a model's layers)
/// have the same source, and one object serves them all.
pub fn c_source(nest: &LoopNest, spec: &Spec, lanes: Lanes) -> Result<String, String> {
    if spec.access.len() != nest.buffers.len() {
        return Err("the specialisation does not match the buffers".into());
    }
    for b in &nest.buffers {
        if !matches!(b.dtype, DType::F32 | DType::Bool) {
            return Err(format!("buffer {} is {}", b.name, b.dtype));
        }
    }
    let mut w = Writer {
        nest,
        spec,
        out: String::new(),
        reduce_copies: 4,
        ranges: Vec::new(),
        chains: ChainFits::default(),
        lanes: lanes.0,
        prefetch: Vec::new(),
        ahead: Vec::new(),
        squares_in_f32: Vec::new(),
        streamed: Vec::new(),
        indent: 0,
    };
    w.ranges = value_ranges(&nest.body);
    w.chains = chain_fits(nest, &w.ranges, host_fma(), spec.opts.chain_fits);
    w.preamble(lanes);
    w.function()?;
    Ok(w.out)
}

struct Writer<'a> {
    nest: &'a LoopNest,
    spec: &'a Spec,
    out: String,
    /// body copies per vector iteration in loops that reduce
    reduce_copies: usize,
    /// each value's range, as the Cranelift emitter sees it (`loops::value_ranges`)
    ranges: Vec<ValueRange>,
    /// the unary chains computed as one fitted polynomial, as the Cranelift emitter
    /// computes them (`cpu::chain_fits`)
    chains: ChainFits,
    /// f32 lanes per vector
    lanes: usize,
    /// the prefetches of the next row the body copies of the inner phase being written
    /// issue (see [`Writer::prefetches`])
    prefetch: Vec<(usize, bool)>,
    /// the inputs the inner phase being written prefetches [`PREFETCH_AHEAD`] bytes ahead
    /// (see [`Writer::prefetches_ahead`])
    ahead: Vec<usize>,
    /// the reductions of the inner loop being written whose squares are summed in f32
    /// before widening (see [`Writer::squares_in_f32`])
    squares_in_f32: Vec<ValueId>,
    /// the outputs written with streaming stores in calls that store enough
    /// ([`streamed_buffers`]; empty when the options never stream)
    streamed: Vec<usize>,
    /// levels added to every line's indent (a block under a condition)
    indent: usize,
}

/// How a body copy reads and writes: whole vectors, or the first `n` lanes of one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    Partial,
}

/// `kiln_math.h`'s exp for arguments in `range`: the routine the Cranelift emitter takes
/// (`cpu::math::exp_variant`), so the special cases the range excludes are left out.
fn exp_in(range: ValueRange) -> &'static str {
    match exp_variant(range) {
        ExpVariant::Core => "kiln_exp_core",
        ExpVariant::Scaled => "kiln_exp_scaled",
        ExpVariant::ScaledFlush => "kiln_exp_scaled_flush",
        ExpVariant::Full => "kiln_exp",
    }
}

/// The C of a range-dependent unary op of `a`, whose value lies in `range`, or `None` for
/// ops whose routine does not depend on it: `cpu/math`'s choices (`unary_in`), a polynomial
/// fitted to the op on the range (`math/fitted.rs`, the same coefficients and roundings),
/// else the general routine's variant for the range (`unary_general_in`).
fn unary_in(op: UnaryOp, a: &str, range: ValueRange) -> Option<String> {
    if let Some(f) = fit(op, range, host_fma()) {
        return Some(f.c_expr(a));
    }
    Some(match op {
        UnaryOp::Exp => format!("{}({a})", exp_in(range)),
        UnaryOp::Tanh if !tanh_needs_clamp(range) => format!("kiln_tanh_noclamp({a})"),
        // act.rs's over_one_plus_exp: 1/(1 + e^-x) and x/(1 + e^-x)
        UnaryOp::Sigmoid => format!(
            "(kf_splat(1.0f) / ({}(kiln_neg({a})) + kf_splat(1.0f)))",
            exp_in(negated(range))
        ),
        UnaryOp::Silu => format!(
            "({a} / ({}(kiln_neg({a})) + kf_splat(1.0f)))",
            exp_in(negated(range))
        ),
        _ => return None,
    })
}

/// A C literal of type float for `c`.
fn f32_lit(c: f64) -> String {
    let x = c as f32;
    if x.is_nan() {
        "NAN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
    } else {
        format!("{x:?}f")
    }
}

/// The C routine of a unary op on f32 vectors (`kiln_math.h`).
fn unary_fn(op: UnaryOp) -> Option<&'static str> {
    Some(match op {
        UnaryOp::Abs => "kiln_abs",
        UnaryOp::Exp => "kiln_exp",
        UnaryOp::Log => "kiln_log",
        UnaryOp::Sqrt => "kiln_sqrt",
        UnaryOp::Rsqrt => "kiln_rsqrt",
        UnaryOp::Recip => "kiln_recip",
        UnaryOp::Sin => "kiln_sin",
        UnaryOp::Cos => "kiln_cos",
        UnaryOp::Tanh => "kiln_tanh",
        UnaryOp::Erf => "kiln_erf",
        UnaryOp::Sigmoid => "kiln_sigmoid",
        UnaryOp::Relu => "kiln_relu",
        UnaryOp::Gelu => "kiln_gelu_erf",
        UnaryOp::GeluTanh => "kiln_gelu_tanh",
        UnaryOp::Silu => "kiln_silu",
        UnaryOp::Floor => "kiln_floor",
        UnaryOp::Ceil => "kiln_ceil",
        UnaryOp::Round => "kiln_round",
        UnaryOp::Trunc => "kiln_trunc",
        UnaryOp::Sign => "kiln_sign",
        UnaryOp::Log1p => "kiln_log1p",
        UnaryOp::Expm1 => "kiln_expm1",
        UnaryOp::Log2 => "kiln_log2",
        UnaryOp::Exp2 => "kiln_exp2",
        UnaryOp::Tan => "kiln_tan",
        UnaryOp::Atan => "kiln_atan",
        UnaryOp::Sinh => "kiln_sinh",
        UnaryOp::Neg
        | UnaryOp::Isnan
        | UnaryOp::Isinf
        | UnaryOp::LogicalNot
        | UnaryOp::BitwiseNot
        | UnaryOp::Relu6
        | UnaryOp::Hardswish
        | UnaryOp::Mish => return None,
    })
}

/// The C operator of a comparison.
fn comparison(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        _ => return None,
    })
}

/// The C expression adding `xs` pairwise: `(x0 + x1) + (x2 + x3)`.
fn pairwise_sum(mut xs: Vec<String>) -> String {
    while xs.len() > 1 {
        xs = xs
            .chunks(2)
            .map(|p| {
                if p.len() == 2 {
                    format!("({} + {})", p[0], p[1])
                } else {
                    p[0].clone()
                }
            })
            .collect();
    }
    xs.pop().unwrap_or_default()
}

fn is_sum(op: ReduceOp) -> bool {
    matches!(op, ReduceOp::Sum | ReduceOp::Mean)
}

impl Writer<'_> {
    fn line(&mut self, indent: usize, s: &str) {
        for _ in 0..indent + self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn ty(&self, v: ValueId) -> ScalarType {
        self.nest.body[v].ty
    }

    fn is_row(&self, v: ValueId) -> bool {
        self.nest.body[v].row
    }

    fn is_bool_buf(&self, buf: usize) -> bool {
        self.nest.buffers[buf].dtype == DType::Bool
    }

    fn preamble(&mut self, lanes: Lanes) {
        let w = lanes.0;
        let _ = writeln!(
            self.out,
            "/* kiln C tier: a loop nest of {} dims ({} outer after collapsing), {} f32 lanes */",
            self.nest.dims.len(),
            self.spec.outer,
            w
        );
        let _ = writeln!(self.out, "#define KILN_W {w}");
        self.out.push_str(MATH_H);
        self.out.push_str(HELPERS);
        let iota: Vec<String> = (0..w).map(|l| l.to_string()).collect();
        let _ = writeln!(
            self.out,
            "static const ki kiln_iota = {{{}}};\n",
            iota.join(", ")
        );
    }

    fn function(&mut self) -> Result<(), String> {
        let k = self.spec.outer;
        let nb = self.nest.buffers.len();
        let _ = writeln!(
            self.out,
            "void {SYMBOL}(uint8_t *const *ptrs, const int64_t *strides, const int64_t *sizes, \
             int64_t r0, int64_t r1, int64_t i0, int64_t i1) {{"
        );
        for b in 0..nb {
            self.line(1, &format!("uint8_t *const p{b} = ptrs[{b}];"));
            for j in 0..=k {
                self.line(
                    1,
                    &format!("const int64_t s{b}_{j} = strides[{}];", b * (k + 1) + j),
                );
            }
        }
        for j in 0..=k {
            self.line(1, &format!("const int64_t n{j} = sizes[{j}];"));
        }
        self.line(1, &format!("const float inner_len = (float)n{k};"));
        self.line(1, &format!("const double inner_len64 = (double)n{k};"));
        self.stream_flags();
        self.line(1, "for (int64_t r = r0; r < r1; r++) {");
        // the row's multi-index over the outer sizes, innermost fastest
        if k > 0 {
            self.line(2, "int64_t rem = r;");
            for j in (1..k).rev() {
                self.line(2, &format!("const int64_t x{j} = rem % n{j}; rem /= n{j};"));
            }
            self.line(2, "const int64_t x0 = rem;");
        }
        for b in 0..nb {
            let mut e = format!("p{b}");
            for j in 0..k {
                let _ = write!(e, " + x{j} * s{b}_{j}");
            }
            self.line(2, &format!("uint8_t *const b{b} = {e};"));
        }
        let phases = self.nest.phases.clone();
        for (index, phase) in phases.iter().enumerate() {
            self.prefetch = self.prefetches(index);
            self.ahead = self.prefetches_ahead(index);
            match phase {
                Phase::Row(vs) => {
                    for &v in vs {
                        self.row_value(v)?;
                    }
                }
                Phase::RowStores(ss) => {
                    for &s in ss {
                        let st = self.nest.stores[s];
                        let b = st.buffer;
                        match self.ty(st.value) {
                            ScalarType::F32 => {
                                self.line(2, &format!("*(float *)b{b} = r{};", st.value))
                            }
                            ScalarType::Bool => {
                                self.line(2, &format!("*b{b} = (uint8_t)(r{} != 0);", st.value))
                            }
                            ScalarType::F64 => return Err("an f64 value is stored".into()),
                        }
                    }
                }
                Phase::Inner {
                    point,
                    reduces,
                    stores,
                } => self.inner(point, reduces, stores)?,
            }
        }
        self.line(1, "}");
        if !self.streamed.is_empty() {
            self.line(1, "if (kiln_stream) kiln_stream_fence();");
        }
        self.line(0, "}");
        Ok(())
    }

    /// Picks the outputs written with streaming stores ([`super::streams`]) and declares,
    /// per call, whether the call streams (`kiln_stream`: it stores at least the options'
    /// `stream_min_bytes`) and, per streamed output, whether its stores do (`nt{b}`: the call
    /// streams and every whole-vector store address is a multiple of the vector's size,
    /// which a streaming store requires).
    fn stream_flags(&mut self) {
        let Some(min) = self.spec.opts.stream_min_bytes else {
            return;
        };
        self.streamed = streamed_buffers(self.nest, self.spec);
        if self.streamed.is_empty() {
            return;
        }
        let k = self.spec.outer;
        let points: Vec<String> = (0..=k).map(|j| format!("n{j}")).collect();
        self.line(
            1,
            &format!(
                "const int kiln_stream = KILN_STREAMS && {} * {} >= {min}LL;",
                points.join(" * "),
                4 * self.streamed.len()
            ),
        );
        for b in self.streamed.clone() {
            let mut bits = format!("(uint64_t)(uintptr_t)(p{b} + i0 * 4)");
            for j in 0..k {
                let _ = write!(bits, " | (uint64_t)s{b}_{j}");
            }
            self.line(
                1,
                &format!("const int nt{b} = kiln_stream && (({bits}) & (4 * KILN_W - 1)) == 0;"),
            );
        }
    }

    /// The software prefetches of the next row that the inner phase at `phases[index]`
    /// issues, as (buffer, for writing): in a kernel that walks each row in two or more
    /// inner loops (layernorm, softmax), the next row of every input the first loop loads
    /// contiguously is prefetched by the second loop when there are three or more (the
    /// first when there are two); when that loop also stores a contiguous f32 output (as
    /// softmax's second loop stores `exp(x - max)`), it prefetches that output's next row for
    /// writing too. Each row is a run of pages the hardware prefetcher starts over on, and
    /// the later loops work on a row already in L1 while the memory system would idle:
    /// layernorm's 8192×1024 kernel (rows of one 4 KiB page) took 2.0 ms against 2.45
    /// without them (medians, 2 threads, gcc -O3; softmax's 2.7 against 3.0). The second
    /// loop reads its row from L1, where the first loop's demand loads were still arriving
    /// and the prefetches waited for the same fill buffers: layernorm went from 72-75% of
    /// its working-set triad to 78-84% with them there, softmax from 45-49% to 49-57% (the
    /// same harness, in turns). A storing loop that does not prefetch the inputs gets no
    /// write prefetch: layernorm's last loop (a load, four flops and a store a vector) is
    /// itself bound on the memory traffic, and a `prefetchw` of the next row there competed
    /// with its own stores. Its kernel took 1.73-1.86 ms without it against 2.06-2.20 with
    /// it (best of 60 calls, 2 threads, four runs of one harness in turns with a 64 MiB
    /// triad at 1.76-1.83 ms), where softmax's, whose storing loop is its exp-heavy
    /// prefetching loop, took 2.14-2.38 ms with its write prefetch against 2.30-2.49
    /// without. A prefetch never faults, so the row after a thread's (or the tensor's) last
    /// is harmless.
    fn prefetches(&self, index: usize) -> Vec<(usize, bool)> {
        let inner: Vec<usize> = (0..self.nest.phases.len())
            .filter(|&j| matches!(self.nest.phases[j], Phase::Inner { .. }))
            .collect();
        if self.spec.outer == 0 || inner.len() < 2 {
            return Vec::new();
        }
        let Phase::Inner { stores, .. } = &self.nest.phases[index] else {
            return Vec::new();
        };
        let contiguous_f32 =
            |b: usize| self.spec.access[b] == InnerAccess::Contiguous && !self.is_bool_buf(b);
        let mut out = Vec::new();
        let prefetching = if inner.len() >= 3 { inner[1] } else { inner[0] };
        if prefetching != index {
            return Vec::new();
        }
        let Phase::Inner { point, .. } = &self.nest.phases[inner[0]] else {
            unreachable!("an inner phase");
        };
        for &v in point {
            if let Expr::Load(b) = self.nest.body[v].expr {
                if contiguous_f32(b) && !out.contains(&(b, false)) {
                    out.push((b, false));
                }
            }
        }
        // an output this loop is the first to store into: its next row, for writing
        let stored_by = |j: usize, b: usize| match &self.nest.phases[j] {
            Phase::Inner { stores, .. } => stores.iter().any(|&s| self.nest.stores[s].buffer == b),
            _ => false,
        };
        for &s in stores {
            let st = self.nest.stores[s];
            let earlier = inner
                .iter()
                .take_while(|&&j| j < index)
                .any(|&j| stored_by(j, st.buffer));
            if contiguous_f32(st.buffer)
                && self.ty(st.value) == ScalarType::F32
                && !earlier
                && !out.contains(&(st.buffer, true))
            {
                out.push((st.buffer, true));
            }
        }
        out
    }

    /// The inputs the inner phase at `phases[index]` prefetches [`PREFETCH_AHEAD`] bytes
    /// ahead of its loads: in a kernel whose one inner loop reduces (a sum, a mean, a max
    /// over each row, read once), every input it loads contiguously. The hardware
    /// prefetcher follows such a stream but starts over at each 4 KiB page; the software
    /// prefetch keeps the next page's lines on their way. `sum(x * x, 1)` of a 4096×4096
    /// f32 (2 threads, a C harness, five variants in turns, median of 300 calls, two runs
    /// each): on 4 KiB pages 1.29 and 1.34 ms against 1.38 and 1.46 without, on huge pages
    /// 1.17 and 1.21 against 1.23 and 1.28; 1 KiB ahead gained nothing, 8 KiB as much as
    /// 4 KiB.
    fn prefetches_ahead(&self, index: usize) -> Vec<usize> {
        let inner = self
            .nest
            .phases
            .iter()
            .filter(|p| matches!(p, Phase::Inner { .. }))
            .count();
        let Phase::Inner { point, reduces, .. } = &self.nest.phases[index] else {
            return Vec::new();
        };
        if inner != 1 || reduces.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for &v in point {
            if let Expr::Load(b) = self.nest.body[v].expr {
                if self.spec.access[b] == InnerAccess::Contiguous
                    && !self.is_bool_buf(b)
                    && !out.contains(&b)
                {
                    out.push(b);
                }
            }
        }
        out
    }

    /// The C type of a row value.
    fn scalar_type(&self, v: ValueId) -> &'static str {
        match self.ty(v) {
            ScalarType::F32 => "float",
            ScalarType::Bool => "int",
            ScalarType::F64 => "double",
        }
    }

    /// A row value, as a C scalar `r{v}` (bools 0/1). Reductions are defined after their
    /// loop.
    fn row_value(&mut self, v: ValueId) -> Result<(), String> {
        let e = self.nest.body[v].expr.clone();
        let ty = self.scalar_type(v);
        if let Some(rhs) = self.scalar_form(v, &e) {
            self.line(2, &format!("const {ty} r{v} = {rhs};"));
            return Ok(());
        }
        let rhs = match e {
            Expr::Reduce(..) => return Ok(()),
            Expr::Load(buf) if self.is_bool_buf(buf) => format!("(*b{buf} != 0)"),
            Expr::Load(buf) => format!("*(const float *)b{buf}"),
            Expr::Const(c) => match self.ty(v) {
                ScalarType::F64 => double_lit(c),
                ScalarType::F32 => f32_lit(c),
                ScalarType::Bool => (if c != 0.0 { "1" } else { "0" }).to_string(),
            },
            Expr::InnerLen => match self.ty(v) {
                ScalarType::F64 => "inner_len64".into(),
                _ => "inner_len".into(),
            },
            Expr::Widen(x) => format!("(double){}", self.row_ref(x)),
            Expr::Narrow(x) => format!("(float){}", self.row_ref(x)),
            other => {
                // the vector routine on broadcast operands, lane 0
                let x = self.vexpr(v, &other, &|x| self.splat_row(x))?;
                match self.ty(v) {
                    ScalarType::Bool => format!("(({x})[0] != 0)"),
                    ScalarType::F64 => format!("kd_first({x})"),
                    ScalarType::F32 => format!("({x})[0]"),
                }
            }
        };
        self.line(2, &format!("const {ty} r{v} = {rhs};"));
        Ok(())
    }

    /// The plain C scalar expression of a row value whose operation IEEE arithmetic gives
    /// the same bits as the vector routine (float `+ - * /` and negation, double square
    /// roots and reciprocals), or None. The vector routine on broadcast operands did the
    /// same work in every lane: GCC kept each double division as a full-width `vdivpd`.
    fn scalar_form(&self, v: ValueId, e: &Expr) -> Option<String> {
        let ty = self.ty(v);
        if ty == ScalarType::Bool {
            return None;
        }
        let same = |x: ValueId| self.ty(x) == ty;
        let f64_ = ty == ScalarType::F64;
        Some(match *e {
            Expr::Binary(op, x, y) if same(x) && same(y) => {
                let sym = match op {
                    BinaryOp::Add => "+",
                    BinaryOp::Sub => "-",
                    BinaryOp::Mul => "*",
                    BinaryOp::Div => "/",
                    _ => return None,
                };
                format!("({} {sym} {})", self.row_ref(x), self.row_ref(y))
            }
            Expr::Unary(UnaryOp::Neg, x) if same(x) => format!("(-{})", self.row_ref(x)),
            Expr::Unary(UnaryOp::Sqrt, x) if f64_ && same(x) => {
                format!("sqrt({})", self.row_ref(x))
            }
            Expr::Unary(UnaryOp::Rsqrt, x) if f64_ && same(x) => {
                format!("(1.0 / sqrt({}))", self.row_ref(x))
            }
            Expr::Unary(UnaryOp::Recip, x) if f64_ && same(x) => {
                format!("(1.0 / {})", self.row_ref(x))
            }
            _ => return None,
        })
    }

    /// A row value as a C scalar: its variable, or a literal.
    fn row_ref(&self, x: ValueId) -> String {
        match self.nest.body[x].expr {
            Expr::Const(c) => match self.ty(x) {
                ScalarType::F64 => double_lit(c),
                ScalarType::F32 => f32_lit(c),
                ScalarType::Bool => (if c != 0.0 { "1" } else { "0" }).to_string(),
            },
            _ => format!("r{x}"),
        }
    }

    /// A row value broadcast to a vector (bools to masks).
    fn splat_row(&self, x: ValueId) -> String {
        if let Expr::Const(c) = self.nest.body[x].expr {
            return match self.ty(x) {
                ScalarType::F32 => format!("kf_splat({})", f32_lit(c)),
                ScalarType::F64 => format!("kd_splat({})", double_lit(c)),
                ScalarType::Bool => format!("ki_splat({})", if c != 0.0 { -1 } else { 0 }),
            };
        }
        match self.ty(x) {
            ScalarType::F32 => format!("kf_splat(r{x})"),
            ScalarType::F64 => format!("kd_splat(r{x})"),
            ScalarType::Bool => format!("ki_splat(-r{x})"),
        }
    }

    /// The vector expression of a computed value, from its operands' vector expressions.
    fn vexpr(
        &self,
        v: ValueId,
        e: &Expr,
        operand: &dyn Fn(ValueId) -> String,
    ) -> Result<String, String> {
        let ty = |x: ValueId| self.ty(x);
        let bool_ = |x: ValueId| ty(x) == ScalarType::Bool;
        let f64_ = |x: ValueId| ty(x) == ScalarType::F64;
        Ok(match *e {
            Expr::Unary(op, x) if f64_(x) || f64_(v) => {
                if !(f64_(x) && f64_(v)) {
                    return Err(format!("v{v}: {} between f32 and f64", op.name()));
                }
                let a = operand(x);
                match op {
                    UnaryOp::Neg => format!("kd_neg({a})"),
                    UnaryOp::Abs => format!("kd_abs({a})"),
                    UnaryOp::Sqrt => format!("kd_sqrt({a})"),
                    UnaryOp::Rsqrt => format!("kd_div(kd_splat(1.0), kd_sqrt({a}))"),
                    UnaryOp::Recip => format!("kd_div(kd_splat(1.0), {a})"),
                    _ => return Err(format!("v{v}: {} of an f64 value", op.name())),
                }
            }
            Expr::Unary(op, x) if op.info().dtype == DTypeRule::Bool || bool_(x) => {
                let a = operand(x);
                match op {
                    UnaryOp::LogicalNot | UnaryOp::BitwiseNot if bool_(x) => format!("(~{a})"),
                    UnaryOp::Isnan | UnaryOp::Isinf if bool_(x) => "ki_splat(0)".into(),
                    UnaryOp::Isnan => format!("kf_isnan({a})"),
                    UnaryOp::Isinf => format!("kf_isinf({a})"),
                    UnaryOp::LogicalNot => format!("({a} == kf_splat(0.0f))"),
                    _ => return Err(format!("v{v}: {} of a bool", op.name())),
                }
            }
            Expr::Unary(UnaryOp::Neg, x) => format!("(-{})", operand(x)),
            Expr::Unary(UnaryOp::Exp, t) if self.half_square_of(t).is_some() => {
                let x = self.half_square_of(t).expect("checked");
                format!("kiln_exp_neg_half_sq({})", operand(x))
            }
            Expr::Unary(op, x) if unary_in(op, "", self.ranges[x]).is_some() => {
                unary_in(op, &operand(x), self.ranges[x]).expect("checked")
            }
            Expr::Unary(op, x) => match unary_fn(op) {
                Some(f) => format!("{f}({})", operand(x)),
                None => return Err(format!("v{v}: {} has no C routine", op.name())),
            },
            Expr::Binary(op, x, y) => {
                let (a, b) = (operand(x), operand(y));
                if f64_(x) || f64_(y) {
                    if !(f64_(x) && f64_(y)) {
                        return Err(format!("v{v}: {} between f32 and f64", op.name()));
                    }
                    if comparison(op).is_some() {
                        return Ok(format!("kd_{}({a}, {b})", op.name()));
                    }
                    return Ok(match op {
                        BinaryOp::Add => format!("kd_add({a}, {b})"),
                        BinaryOp::Sub => format!("kd_sub({a}, {b})"),
                        BinaryOp::Mul => format!("kd_mul({a}, {b})"),
                        BinaryOp::Div => format!("kd_div({a}, {b})"),
                        BinaryOp::Maximum => format!("kd_maximum({a}, {b})"),
                        BinaryOp::Minimum => format!("kd_minimum({a}, {b})"),
                        _ => return Err(format!("v{v}: {} of f64 values", op.name())),
                    });
                }
                let logical = matches!(
                    op,
                    BinaryOp::LogicalAnd
                        | BinaryOp::LogicalOr
                        | BinaryOp::LogicalXor
                        | BinaryOp::BitwiseAnd
                        | BinaryOp::BitwiseOr
                        | BinaryOp::BitwiseXor
                );
                if logical {
                    let truth = |s: String, is_bool: bool| {
                        if is_bool {
                            s
                        } else {
                            format!("({s} != kf_splat(0.0f))")
                        }
                    };
                    let (a, b) = (truth(a, bool_(x)), truth(b, bool_(y)));
                    let c = match op {
                        BinaryOp::LogicalAnd | BinaryOp::BitwiseAnd => "&",
                        BinaryOp::LogicalOr | BinaryOp::BitwiseOr => "|",
                        _ => "^",
                    };
                    return Ok(format!("({a} {c} {b})"));
                }
                if let Some(c) = comparison(op) {
                    return match (bool_(x), bool_(y)) {
                        (false, false) => Ok(format!("({a} {c} {b})")),
                        (true, true) if matches!(op, BinaryOp::Eq | BinaryOp::Ne) => {
                            Ok(format!("({a} {c} {b})"))
                        }
                        _ => Err(format!("v{v}: {} of bools", op.name())),
                    };
                }
                if bool_(x) || bool_(y) {
                    return Err(format!("v{v}: {} of a bool", op.name()));
                }
                match op {
                    BinaryOp::Add => format!("({a} + {b})"),
                    BinaryOp::Sub => format!("({a} - {b})"),
                    BinaryOp::Mul => format!("({a} * {b})"),
                    BinaryOp::Div => format!("({a} / {b})"),
                    BinaryOp::Pow => format!("kiln_pow({a}, {b})"),
                    BinaryOp::Maximum => format!("kiln_maximum({a}, {b})"),
                    BinaryOp::Minimum => format!("kiln_minimum({a}, {b})"),
                    BinaryOp::Fmod => format!("kiln_fmod({a}, {b})"),
                    BinaryOp::Remainder => format!("kiln_remainder({a}, {b})"),
                    BinaryOp::Atan2 => format!("kiln_atan2({a}, {b})"),
                    _ => return Err(format!("v{v}: {} has no C form", op.name())),
                }
            }
            Expr::Where(c, x, y) => {
                if !bool_(c) || ty(x) != ScalarType::F32 || ty(y) != ScalarType::F32 {
                    return Err(format!("v{v}: a select other than f32 on a bool"));
                }
                format!(
                    "kiln_select({}, {}, {})",
                    operand(c),
                    operand(x),
                    operand(y)
                )
            }
            Expr::BoolToF32(c) => format!("kf_from_mask({})", operand(c)),
            Expr::Widen(x) => format!("kd_widen({})", operand(x)),
            Expr::Narrow(x) => format!("kd_narrow({})", operand(x)),
            Expr::Round(..) => return Err("half-precision values".into()),
            Expr::Load(_) | Expr::Const(_) | Expr::InnerLen | Expr::Reduce(..) => {
                unreachable!("not computed")
            }
        })
    }

    /// `x` when `t` is `x·x·(-0.5)` ([`crate::loops::half_square_of`]).
    fn half_square_of(&self, t: ValueId) -> Option<ValueId> {
        crate::loops::half_square_of(&self.nest.body, t)
    }

    /// The inner loop of phase `pi`: accumulators, the unrolled vector loop, the one-vector
    /// loop, the partial last vector, then each reduction's total as a row value.
    ///
    /// Where a sum of squares is summed in f32 first ([`Writer::square_of_widened`]), a
    /// row whose total is under [`SQUARES_EXACT_BELOW`] or `+inf` (a square under f32's
    /// smallest normal or past its largest may have decided it) runs the loop again with
    /// every square in f64, as the Cranelift tier does.
    fn inner(
        &mut self,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
    ) -> Result<(), String> {
        // the totals are row values of the rest of the row
        for &r in reduces {
            let t = self.scalar_type(r);
            self.line(2, &format!("{t} r{r};"));
        }
        self.squares_in_f32 = reduces
            .iter()
            .copied()
            .filter(|&r| self.square_of_widened(r).is_some())
            .collect();
        self.inner_block(point, reduces, stores)?;
        let fast = std::mem::take(&mut self.squares_in_f32);
        if !fast.is_empty() {
            let below = double_lit(SQUARES_EXACT_BELOW);
            let redo: Vec<String> = fast
                .iter()
                .map(|r| format!("(double)r{r} < {below} || (double)r{r} == (double)INFINITY"))
                .collect();
            self.line(2, &format!("if ({}) {{", redo.join(" || ")));
            self.indent += 1;
            self.inner_block(point, reduces, stores)?;
            self.indent -= 1;
            self.line(2, "}");
        }
        Ok(())
    }

    /// `d` where reduction `r` sums `widen(d) * widen(d)` over the inner loop for an f32
    /// point value `d` (a variance's squared deviations). Every term is at least 0, so
    /// squaring in f32 and adding the body copies' squares pairwise in f32 before one
    /// widening, as f32 sums are added (and as the Cranelift tier sums these), is within
    /// 3·2^-24 relative of the f64 sum while no square is under f32's smallest normal or
    /// past its largest: layernorm's variance loop took two conversions, two f64 multiplies
    /// and two f64 adds per vector, and bound the kernel on its two vector ports.
    fn square_of_widened(&self, r: ValueId) -> Option<ValueId> {
        let Expr::Reduce(op, x) = self.nest.body[r].expr else {
            return None;
        };
        // (a widened point value is a point value: only x and d need checking)
        let d = crate::loops::square_of_widened(&self.nest.body, x)?;
        (is_sum(op) && !self.is_row(x) && !self.is_row(d)).then_some(d)
    }

    /// One inner loop's block (see [`Writer::inner`]).
    fn inner_block(
        &mut self,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
    ) -> Result<(), String> {
        let u = if reduces.is_empty() {
            2
        } else {
            self.reduce_copies
        };
        self.line(2, "{");
        for &r in reduces {
            let Expr::Reduce(op, x) = self.nest.body[r].expr else {
                return Err(format!("v{r} is not a reduction"));
            };
            for c in 0..u {
                let init = if is_sum(op) {
                    "kd_splat(0.0)".to_string()
                } else if self.ty(x) == ScalarType::F32 {
                    match op {
                        ReduceOp::Max => "kf_splat(-INFINITY)".into(),
                        _ => "kf_splat(INFINITY)".into(),
                    }
                } else {
                    return Err(format!("v{r}: a max or min of f64 values"));
                };
                let t = if is_sum(op) { "kd" } else { "kf" };
                self.line(3, &format!("{t} a{r}_{c} = {init};"));
            }
        }
        self.line(3, "int64_t i = i0;");
        self.line(
            3,
            &format!("for (; i + {u} * KILN_W <= i1; i += {u} * KILN_W) {{"),
        );
        let copies: Vec<usize> = (0..u).collect();
        self.body(point, reduces, stores, &copies, Part::Whole)?;
        self.line(3, "}");
        if u > 1 {
            self.line(3, "for (; i + KILN_W <= i1; i += KILN_W) {");
            self.body(point, reduces, stores, &[0], Part::Whole)?;
            self.line(3, "}");
        }
        self.line(3, "if (i < i1) {");
        self.line(4, "const int64_t n = i1 - i;");
        self.line(4, "const ki valid = kiln_iota < ki_splat((int32_t)n);");
        self.body(point, reduces, stores, &[0], Part::Partial)?;
        self.line(3, "}");
        // the totals: the copies in order, then the lanes as a tree (`kd_hsum`)
        for &r in reduces {
            let Expr::Reduce(op, _) = self.nest.body[r].expr else {
                unreachable!("checked above");
            };
            if is_sum(op) {
                let mut acc = format!("a{r}_0");
                for c in 1..u {
                    acc = format!("kd_add({acc}, a{r}_{c})");
                }
                self.line(3, &format!("const double s{r} = kd_hsum({acc});"));
                let cast = if self.ty(r) == ScalarType::F64 {
                    ""
                } else {
                    "(float)"
                };
                self.line(3, &format!("r{r} = {cast}s{r};"));
            } else {
                let f = if op == ReduceOp::Max {
                    "kiln_maximum"
                } else {
                    "kiln_minimum"
                };
                let mut acc = format!("a{r}_0");
                for c in 1..u {
                    acc = format!("{f}({acc}, a{r}_{c})");
                }
                self.line(3, &format!("const kf t{r} = {acc};"));
                self.line(3, &format!("kf m{r} = kf_splat(t{r}[0]);"));
                self.line(
                    3,
                    &format!(
                        "for (int l = 1; l < KILN_W; l++) m{r} = {f}(m{r}, kf_splat(t{r}[l]));"
                    ),
                );
                self.line(3, &format!("r{r} = m{r}[0];"));
            }
        }
        self.line(2, "}");
        Ok(())
    }

    /// One iteration of an inner loop's body for each copy in `copies` (vectors at
    /// `i + c·KILN_W`), or the partial last vector.
    fn body(
        &mut self,
        point: &[ValueId],
        reduces: &[ValueId],
        stores: &[usize],
        copies: &[usize],
        part: Part,
    ) -> Result<(), String> {
        let ind = 4;
        if part == Part::Whole && copies.len() > 1 && !self.prefetch.is_empty() {
            // one prefetch per 64-byte line of the copies' vectors, into the next row (there
            // is an outer dim: `prefetches` asks for one)
            let outer = self.spec.outer - 1;
            for (b, write) in self.prefetch.clone() {
                for &c in copies {
                    if (c * self.lanes * 4).is_multiple_of(64) {
                        self.line(
                            ind,
                            &format!(
                                "__builtin_prefetch(b{b} + s{b}_{outer} + (i + {c} * KILN_W) * 4, {}, 3);",
                                u8::from(write)
                            ),
                        );
                    }
                }
            }
        }
        if part == Part::Whole && copies.len() > 1 {
            for b in self.ahead.clone() {
                for &c in copies {
                    if (c * self.lanes * 4).is_multiple_of(64) {
                        self.line(
                            ind,
                            &format!(
                                "__builtin_prefetch(b{b} + (i + {c} * KILN_W) * 4 + {PREFETCH_AHEAD}, 0, 3);"
                            ),
                        );
                    }
                }
            }
        }
        // statements interleaved across copies, as the Cranelift emitter does
        for &v in point {
            // a fitted chain's members are never computed (its output is)
            if self.chains.absorbed.contains(&v) {
                continue;
            }
            for &c in copies {
                let at = format!("(i + {c} * KILN_W)");
                let st = &self.nest.body[v];
                let (ty, expr) = (st.ty, st.expr.clone());
                let vt = match ty {
                    ScalarType::F32 => "kf",
                    ScalarType::Bool => "ki",
                    ScalarType::F64 => "kd",
                };
                let rhs = match expr {
                    Expr::Load(buf) => self.load(buf, &at, part)?,
                    Expr::Const(k) => match ty {
                        ScalarType::F32 => format!("kf_splat({})", f32_lit(k)),
                        ScalarType::F64 => format!("kd_splat({})", double_lit(k)),
                        ScalarType::Bool => {
                            format!("ki_splat({})", if k != 0.0 { -1 } else { 0 })
                        }
                    },
                    Expr::InnerLen => match ty {
                        ScalarType::F64 => "kd_splat(inner_len64)".into(),
                        _ => "kf_splat(inner_len)".into(),
                    },
                    Expr::Reduce(..) => return Err("a reduction as a point value".into()),
                    _ if self.chains.fits.contains_key(&v) => {
                        let chain = &self.chains.fits[&v];
                        let x = chain.input;
                        let input = if self.is_row(x) {
                            self.splat_row(x)
                        } else {
                            format!("v{x}_{c}")
                        };
                        chain.fit.c_expr(&input)
                    }
                    other => {
                        let operand = |x: ValueId| {
                            if self.is_row(x) {
                                self.splat_row(x)
                            } else {
                                format!("v{x}_{c}")
                            }
                        };
                        self.vexpr(v, &other, &operand)?
                    }
                };
                self.line(ind, &format!("const {vt} v{v}_{c} = {rhs};"));
            }
        }
        for &r in reduces {
            let Expr::Reduce(op, x) = self.nest.body[r].expr else {
                unreachable!("checked by the caller");
            };
            let square = match self.square_of_widened(r) {
                Some(d) if part == Part::Whole && self.squares_in_f32.contains(&r) => Some(d),
                _ => None,
            };
            if let Some(d) = square {
                // the squares in f32, then as an f32 sum (`square_of_widened`)
                let xs: Vec<String> = copies
                    .iter()
                    .map(|&c| format!("(v{d}_{c} * v{d}_{c})"))
                    .collect();
                let sum = pairwise_sum(xs);
                self.line(ind, &format!("a{r}_0 = kd_add(a{r}_0, kd_widen({sum}));"));
                continue;
            }
            if is_sum(op) && self.ty(x) == ScalarType::F32 && part == Part::Whole {
                // the copies summed pairwise in f32, then widened once into the f64
                // accumulator, as the Cranelift tier does (a row of equal values still sums
                // exactly)
                let xs: Vec<String> = copies
                    .iter()
                    .map(|&c| {
                        if self.is_row(x) {
                            self.splat_row(x)
                        } else {
                            format!("v{x}_{c}")
                        }
                    })
                    .collect();
                let sum = pairwise_sum(xs);
                self.line(ind, &format!("a{r}_0 = kd_add(a{r}_0, kd_widen({sum}));"));
                continue;
            }
            for &c in copies {
                let val = if self.is_row(x) {
                    self.splat_row(x)
                } else {
                    format!("v{x}_{c}")
                };
                let line = match (is_sum(op), self.ty(x), part) {
                    (true, ScalarType::F32, Part::Whole) => {
                        format!("a{r}_{c} = kd_add(a{r}_{c}, kd_widen({val}));")
                    }
                    (true, ScalarType::F32, Part::Partial) => format!(
                        "a{r}_{c} = kd_add(a{r}_{c}, kd_widen(kiln_select(valid, {val}, \
                         kf_splat(0.0f))));"
                    ),
                    (true, ScalarType::F64, Part::Whole) => {
                        format!("a{r}_{c} = kd_add(a{r}_{c}, {val});")
                    }
                    (true, ScalarType::F64, Part::Partial) => format!(
                        "a{r}_{c} = kd_add(a{r}_{c}, kd_select(valid, {val}, kd_splat(0.0)));"
                    ),
                    (false, ScalarType::F32, p) => {
                        let f = if op == ReduceOp::Max {
                            "kiln_maximum"
                        } else {
                            "kiln_minimum"
                        };
                        let id = if op == ReduceOp::Max {
                            "-INFINITY"
                        } else {
                            "INFINITY"
                        };
                        let x = if p == Part::Whole {
                            val
                        } else {
                            format!("kiln_select(valid, {val}, kf_splat({id}))")
                        };
                        format!("a{r}_{c} = {f}(a{r}_{c}, {x});")
                    }
                    _ => return Err(format!("v{r}: a reduction of this type")),
                };
                self.line(ind, &line);
            }
        }
        for &s in stores {
            let st = self.nest.stores[s];
            for &c in copies {
                let at = format!("(i + {c} * KILN_W)");
                let val = if self.is_row(st.value) {
                    self.splat_row(st.value)
                } else {
                    format!("v{}_{c}", st.value)
                };
                let line = self.store(st.buffer, st.value, &at, &val, part)?;
                self.line(ind, &line);
            }
        }
        Ok(())
    }

    /// The vector load of input `buf` at inner index `at`.
    fn load(&self, buf: usize, at: &str, part: Part) -> Result<String, String> {
        let is = format!("s{buf}_{}", self.spec.outer);
        let bool_ = self.is_bool_buf(buf);
        Ok(match (self.spec.access[buf], bool_, part) {
            (InnerAccess::Broadcast, false, _) => format!("kf_splat(*(const float *)b{buf})"),
            (InnerAccess::Broadcast, true, _) => format!("ki_splat(-(int32_t)(*b{buf} != 0))"),
            (InnerAccess::Contiguous, false, Part::Whole) => {
                format!("kf_load(b{buf} + {at} * 4)")
            }
            (_, false, Part::Whole) => format!("kf_gather(b{buf} + {at} * {is}, {is})"),
            (_, false, Part::Partial) => {
                format!("kf_gather_n(b{buf} + {at} * {is}, {is}, n)")
            }
            (_, true, Part::Whole) => format!("kb_gather(b{buf} + {at} * {is}, {is})"),
            (_, true, Part::Partial) => format!("kb_gather_n(b{buf} + {at} * {is}, {is}, n)"),
        })
    }

    /// The store of `val` (a vector) into output `buf` at inner index `at`.
    fn store(
        &self,
        buf: usize,
        v: ValueId,
        at: &str,
        val: &str,
        part: Part,
    ) -> Result<String, String> {
        let is = format!("s{buf}_{}", self.spec.outer);
        let n = if part == Part::Whole { "KILN_W" } else { "n" };
        Ok(match (self.ty(v), self.spec.access[buf], part) {
            (ScalarType::F32, InnerAccess::Contiguous, Part::Whole)
                if self.streamed.contains(&buf) =>
            {
                format!("kf_store_to(b{buf} + {at} * 4, {val}, nt{buf});")
            }
            (ScalarType::F32, InnerAccess::Contiguous, Part::Whole) => {
                format!("kf_store(b{buf} + {at} * 4, {val});")
            }
            (ScalarType::F32, _, _) => {
                format!("kf_scatter_n(b{buf} + {at} * {is}, {is}, {val}, {n});")
            }
            (ScalarType::Bool, _, _) => {
                format!("kb_scatter_n(b{buf} + {at} * {is}, {is}, {val}, {n});")
            }
            (ScalarType::F64, _, _) => return Err("an f64 value is stored".into()),
        })
    }
}

/// Loads, stores, broadcasts and f64 helpers shared by every kernel (after `kiln_math.h`,
/// which defines `kf`, `ki` and `kiln_select`).
const HELPERS: &str = r#"
/* f64 values as two native-width halves: a 16-double GCC vector would live on the stack */
typedef double kh __attribute__((vector_size(4 * KILN_W)));
typedef int64_t khl __attribute__((vector_size(4 * KILN_W)));
typedef float kfh __attribute__((vector_size(2 * KILN_W)));
typedef int32_t kih __attribute__((vector_size(2 * KILN_W)));
typedef struct { kh lo, hi; } kd;

/* broadcasts (x - +0 is x for every x, -0 included: one vbroadcast) */
static inline kf kf_splat(float x) { return x - (kf){0}; }
static inline ki ki_splat(int32_t x) { return x - (ki){0}; }
static inline kd kd_splat(double x) { kd r = { x - (kh){0}, x - (kh){0} }; return r; }
static inline kf kf_load(const uint8_t *p) { kf r; memcpy(&r, p, sizeof r); return r; }
static inline void kf_store(uint8_t *p, kf x) { memcpy(p, &x, sizeof x); }
/* streaming (non-temporal) stores of whole vectors at aligned addresses, and the fence that
 * makes them visible before the kernel returns (streams.rs); KILN_STREAMS is 0, and the
 * kernels store as usual, where the target has no such store */
#if KILN__HAS_BUILTIN(__builtin_nontemporal_store) && (defined(__x86_64__) || defined(__i386__))
#define KILN_STREAMS 1
static inline void kf_stream(uint8_t *p, kf x) { __builtin_nontemporal_store(x, (kf *)p); }
#elif defined(__GNUC__) && KILN_W == 16 && defined(__AVX512F__)
#define KILN_STREAMS 1
static inline void kf_stream(uint8_t *p, kf x) { __builtin_ia32_movntps512((float *)p, x); }
#elif defined(__GNUC__) && KILN_W == 8 && defined(__AVX__)
#define KILN_STREAMS 1
static inline void kf_stream(uint8_t *p, kf x) { __builtin_ia32_movntps256((float *)p, x); }
#elif defined(__GNUC__) && KILN_W == 4 && defined(__SSE__)
#define KILN_STREAMS 1
static inline void kf_stream(uint8_t *p, kf x) { __builtin_ia32_movntps((float *)p, x); }
#else
#define KILN_STREAMS 0
static inline void kf_stream(uint8_t *p, kf x) { kf_store(p, x); }
#endif
static inline void kf_store_to(uint8_t *p, kf x, int stream) {
    if (stream) kf_stream(p, x); else kf_store(p, x);
}
static inline void kiln_stream_fence(void) {
#if KILN_STREAMS
    __builtin_ia32_sfence();
#endif
}
static inline kf kf_gather(const uint8_t *p, int64_t s) {
    kf r; for (int l = 0; l < KILN_W; l++) r[l] = *(const float *)(p + l * s); return r;
}
static inline kf kf_gather_n(const uint8_t *p, int64_t s, int64_t n) {
    kf r = kf_splat(0.0f); for (int l = 0; l < n; l++) r[l] = *(const float *)(p + l * s); return r;
}
static inline ki kb_gather(const uint8_t *p, int64_t s) {
    ki r; for (int l = 0; l < KILN_W; l++) r[l] = -(int32_t)(p[l * s] != 0); return r;
}
static inline ki kb_gather_n(const uint8_t *p, int64_t s, int64_t n) {
    ki r = ki_splat(0); for (int l = 0; l < n; l++) r[l] = -(int32_t)(p[l * s] != 0); return r;
}
static inline void kf_scatter_n(uint8_t *p, int64_t s, kf x, int64_t n) {
    for (int l = 0; l < n; l++) *(float *)(p + l * s) = x[l];
}
static inline void kb_scatter_n(uint8_t *p, int64_t s, ki x, int64_t n) {
    for (int l = 0; l < n; l++) p[l * s] = (uint8_t)(x[l] & 1);
}
static inline kf kf_from_mask(ki m) { return (kf)(m & ki_splat(0x3f800000)); }
static inline ki kf_isnan(kf x) { return x != x; }
static inline ki kf_isinf(kf x) { return kiln_abs(x) == kf_splat(INFINITY); }

/* f32 <-> f64 by halves. GCC lowers __builtin_convertvector between 8 floats and 8 doubles
 * through 256-bit pieces, so on GCC with AVX-512 or AVX these are the target's own conversion
 * builtins (what immintrin.h's _mm512_cvtps_pd and friends call: one vcvtps2pd / vcvtpd2ps
 * a half; the header itself is not included, as parsing it took ~0.1-0.2 s of every compile);
 * Clang lowers __builtin_convertvector to the same instructions. */
#if defined(__AVX512F__) && KILN_W == 16 && defined(__GNUC__) && !defined(__clang__)
#define KD_WIDEN_HALF(h) __builtin_ia32_cvtps2pd512_mask((h), (kh){0}, (unsigned char)-1, 4)
#define KD_NARROW_HALF(d) __builtin_ia32_cvtpd2ps512_mask((d), (kfh){0}, (unsigned char)-1, 4)
#elif defined(__AVX__) && KILN_W == 8 && defined(__GNUC__) && !defined(__clang__)
#define KD_WIDEN_HALF(h) __builtin_ia32_cvtps2pd256(h)
#define KD_NARROW_HALF(d) __builtin_ia32_cvtpd2ps256(d)
#else
#define KD_WIDEN_HALF(h) __builtin_convertvector((h), kh)
#define KD_NARROW_HALF(d) __builtin_convertvector((d), kfh)
#endif
/* the halves by a shuffle (one vextract): through memory, GCC stored the whole vector to the
 * stack and loaded each half back, and the loaded upper half missed store forwarding */
static inline kd kd_widen(kf x) {
#if KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 16
    kfh a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
    kfh b = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
#elif KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 8
    kfh a = __builtin_shufflevector(x, x, 0, 1, 2, 3), b = __builtin_shufflevector(x, x, 4, 5, 6, 7);
#elif KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 4
    kfh a = __builtin_shufflevector(x, x, 0, 1), b = __builtin_shufflevector(x, x, 2, 3);
#else
    kfh a, b; memcpy(&a, &x, sizeof a); memcpy(&b, (const char *)&x + sizeof a, sizeof b);
#endif
    kd r = { KD_WIDEN_HALF(a), KD_WIDEN_HALF(b) }; return r;
}
static inline kf kd_narrow(kd x) {
    kfh a = KD_NARROW_HALF(x.lo), b = KD_NARROW_HALF(x.hi);
#if KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 16
    return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#elif KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 8
    return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7);
#elif KILN__HAS_BUILTIN(__builtin_shufflevector) && KILN_W == 4
    return __builtin_shufflevector(a, b, 0, 1, 2, 3);
#else
    /* (through memory: GCC before 12 has no __builtin_shufflevector) */
    kf r; memcpy(&r, &a, sizeof a); memcpy((char *)&r + sizeof a, &b, sizeof b); return r;
#endif
}
static inline ki kd_mask(khl lo, khl hi) {
    kih a = __builtin_convertvector(lo, kih), b = __builtin_convertvector(hi, kih);
    ki r; memcpy(&r, &a, sizeof a); memcpy((char *)&r + sizeof a, &b, sizeof b); return r;
}
static inline kd kd_select(ki m, kd a, kd b) {
    kih p, q; memcpy(&p, &m, sizeof p); memcpy(&q, (const char *)&m + sizeof p, sizeof q);
    khl wl = __builtin_convertvector(p, khl), wh = __builtin_convertvector(q, khl);
    kd r = { (kh)(((khl)a.lo & wl) | ((khl)b.lo & ~wl)), (kh)(((khl)a.hi & wh) | ((khl)b.hi & ~wh)) };
    return r;
}
static inline kd kd_add(kd a, kd b) { kd r = { a.lo + b.lo, a.hi + b.hi }; return r; }
static inline kd kd_sub(kd a, kd b) { kd r = { a.lo - b.lo, a.hi - b.hi }; return r; }
static inline kd kd_mul(kd a, kd b) { kd r = { a.lo * b.lo, a.hi * b.hi }; return r; }
static inline kd kd_div(kd a, kd b) { kd r = { a.lo / b.lo, a.hi / b.hi }; return r; }
static inline kd kd_neg(kd a) { kd r = { -a.lo, -a.hi }; return r; }
static inline kd kd_abs(kd x) {
    kd r; for (int l = 0; l < KILN_W / 2; l++) { r.lo[l] = fabs(x.lo[l]); r.hi[l] = fabs(x.hi[l]); } return r;
}
static inline kd kd_sqrt(kd x) {
    kd r; for (int l = 0; l < KILN_W / 2; l++) { r.lo[l] = sqrt(x.lo[l]); r.hi[l] = sqrt(x.hi[l]); } return r;
}
static inline double kd_max1(double a, double b) { return (a != a || b != b) ? (double)NAN : (b < a ? a : b); }
static inline double kd_min1(double a, double b) { return (a != a || b != b) ? (double)NAN : (a < b ? a : b); }
static inline kd kd_maximum(kd a, kd b) {
    kd r; for (int l = 0; l < KILN_W / 2; l++) { r.lo[l] = kd_max1(a.lo[l], b.lo[l]); r.hi[l] = kd_max1(a.hi[l], b.hi[l]); } return r;
}
static inline kd kd_minimum(kd a, kd b) {
    kd r; for (int l = 0; l < KILN_W / 2; l++) { r.lo[l] = kd_min1(a.lo[l], b.lo[l]); r.hi[l] = kd_min1(a.hi[l], b.hi[l]); } return r;
}
#define KD_CMP(name, op) static inline ki name(kd a, kd b) { return kd_mask((khl)(a.lo op b.lo), (khl)(a.hi op b.hi)); }
KD_CMP(kd_eq, ==) KD_CMP(kd_ne, !=) KD_CMP(kd_lt, <) KD_CMP(kd_le, <=) KD_CMP(kd_gt, >) KD_CMP(kd_ge, >=)
static inline double kd_first(kd x) { return x.lo[0]; }
/* the lanes summed as a tree (the halves, then halves of what is left): log2(KILN_W) dependent
 * adds where summing in order chained KILN_W of them */
static inline double kd_hsum(kd x) {
    kh h = x.lo + x.hi;
    double t[KILN_W / 2];
    memcpy(t, &h, sizeof t);
    for (int w = KILN_W / 4; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    return t[0];
}
"#;
