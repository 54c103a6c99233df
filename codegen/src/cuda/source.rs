//! Loop nest → CUDA C (the contract is in the [module doc](super)).
//!
//! A nest without reductions becomes a grid-stride loop over all its elements: each thread
//! recovers the multi-index of an element from its linear index and evaluates the body
//! there (row values included; they are cheap). Where the buffers allow (checked in the
//! kernel: inner size a multiple of 4, buffers aligned and contiguous or constant along it) threads take four elements per step with 16-byte
//! `float4` accesses. A nest with reductions runs one block per
//! row (grid-stride over rows): the row's values are computed by every thread, each inner
//! loop strides the threads over the inner dim, and each reduction is combined across the
//! block with warp shuffles and a shared buffer of one value per warp. Sums accumulate in
//! `double`, and a mean (`sum / n`) divides the double total before rounding, as eager and
//! the CPU backend do. Floats are printed as C hex literals, so constants are exact.
//!
//! The math is CUDA's own (`expf`, `tanhf`, `erff`, ... without fast-math), except where
//! kiln's semantics differ from the plain C function: `maximum`/`minimum` and max/min
//! reductions propagate NaN; `relu` keeps NaN; `rsqrt` is `1/sqrtf` (CUDA's `rsqrtf` is not
//! correctly rounded); sigmoid, silu and the tanh form of gelu are `x/(1 + e^-t)` forms.

use crate::c_literal::hex_float;
use crate::loops::{Expr, LoopNest, Phase, ScalarType, ValueId};
use kiln_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
use std::fmt::Write;

/// Threads per block of every generated kernel.
pub const BLOCK_THREADS: u32 = 256;

/// A generated kernel: its source and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// the kernel's C name (and `NAME_args`, its argument struct)
    pub name: String,
    /// the CUDA C source: argument struct, device helpers, kernel
    pub source: String,
    /// `blockDim.x` to launch with
    pub block_threads: u32,
    /// true: one block per row of the outer dims; false: threads over all elements
    pub per_row: bool,
    /// the number of loop dims in the argument struct (`ND`, at least 1)
    pub ndims: usize,
    /// the number of buffers (`NB`)
    pub nbuffers: usize,
}

/// Why a nest has no CUDA kernel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel {kernel}: no CUDA code for {reason}")]
pub struct CudaUnsupported {
    /// the nest's name
    pub kernel: String,
    /// what is missing
    pub reason: String,
}

/// The CUDA kernel of `nest`.
pub fn cuda_kernel(nest: &LoopNest) -> Result<CudaKernel, CudaUnsupported> {
    let fail = |reason: String| CudaUnsupported {
        kernel: nest.name.clone(),
        reason,
    };
    if nest.buffers.is_empty() {
        return Err(fail("a nest without buffers".to_string()));
    }
    for b in &nest.buffers {
        if !matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Bool) {
            return Err(fail(format!("buffer {} of dtype {}", b.name, b.dtype)));
        }
    }
    let name = c_ident(&format!("kiln_{}", nest.name));
    let nd = nest.dims.len().max(1);
    let mut g = Gen {
        nest,
        nd,
        out: String::new(),
    };
    g.prelude(&name);
    if nest.reduces {
        g.per_row_kernel(&name);
    } else {
        g.pointwise_kernel(&name);
    }
    Ok(CudaKernel {
        name,
        source: g.out,
        block_threads: BLOCK_THREADS,
        per_row: nest.reduces,
        ndims: nd,
        nbuffers: nest.buffers.len(),
    })
}

/// `s` with every character that is not a C identifier character replaced by `_`.
pub(crate) fn c_ident(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A float constant as a C expression of type `float` (hex literal, or the inf/NaN macros).
fn float_lit(c: f64) -> String {
    let f = c as f32;
    if f.is_nan() {
        "NAN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_string()
    } else {
        hex_float(f)
    }
}

/// One step of a pointwise body: a statement or a store.
#[derive(Clone, Copy)]
enum Item {
    Stmt(ValueId),
    Store(usize),
}

struct Gen<'a> {
    nest: &'a LoopNest,
    nd: usize,
    out: String,
}

impl Gen<'_> {
    fn line(&mut self, indent: usize, s: &str) {
        for _ in 0..indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// The argument struct and the device helpers.
    fn prelude(&mut self, name: &str) {
        let nb = self.nest.buffers.len();
        let nd = self.nd;
        let _ = writeln!(
            self.out,
            "// kiln: generated from loop nest @{}",
            self.nest.name
        );
        let _ = writeln!(
            self.out,
            "struct {name}_args {{\n    void* ptr[{nb}];\n    long long size[{nd}];\n    long long stride[{nb}][{nd}];\n}};"
        );
        self.out.push_str(HELPERS);
    }

    /// The element offset of buffer `b` at the loop indices `i0..` (names `i{d}`).
    fn offset(&self, b: usize) -> String {
        let used: Vec<usize> = self.nest.buffers[b]
            .index
            .iter()
            .flatten()
            .copied()
            .collect();
        if used.is_empty() {
            return "0".to_string();
        }
        used.iter()
            .map(|d| format!("i{d} * a.stride[{b}][{d}]"))
            .collect::<Vec<_>>()
            .join(" + ")
    }

    fn var_ty(&self, v: ValueId) -> &'static str {
        match self.nest.body[v].ty {
            ScalarType::F32 => "float",
            ScalarType::Bool => "bool",
            ScalarType::F64 => "double",
        }
    }

    /// The C expression of statement `v` (not a reduction).
    fn expr(&self, v: ValueId) -> String {
        self.expr_lane(v, None)
    }

    /// [`Gen::expr`] with operands of lane `lane` (`v7_2`) in the 16-byte path.
    fn expr_lane(&self, v: ValueId, lane: Option<usize>) -> String {
        let x = |i: &ValueId| match lane {
            Some(l) => format!("v{i}_{l}"),
            None => format!("v{i}"),
        };
        let f64v = self.nest.body[v].ty == ScalarType::F64;
        match &self.nest.body[v].expr {
            Expr::Load(b) => {
                let off = self.offset(*b);
                match self.nest.buffers[*b].dtype {
                    DType::Bool => format!("(((const unsigned char*)a.ptr[{b}])[{off}] != 0)"),
                    DType::F16 => format!("kiln_h2f(((const unsigned short*)a.ptr[{b}])[{off}])"),
                    DType::BF16 => {
                        format!("kiln_bf2f(((const unsigned short*)a.ptr[{b}])[{off}])")
                    }
                    _ => format!("((const float*)a.ptr[{b}])[{off}]"),
                }
            }
            Expr::Const(c) if f64v => double_lit(*c),
            Expr::Const(c) => float_lit(*c),
            Expr::InnerLen if f64v => format!("(double)a.size[{}]", self.nd - 1),
            Expr::InnerLen => format!("(float)a.size[{}]", self.nd - 1),
            Expr::Unary(u, a) if f64v => unary_f64(*u, &x(a)),
            Expr::Unary(u, a) => unary(*u, &x(a)),
            Expr::Binary(op, p, q) if f64v => binary_f64(*op, &x(p), &x(q)),
            Expr::Binary(op, p, q) => binary(*op, &x(p), &x(q)),
            Expr::Widen(a) => format!("((double){})", x(a)),
            Expr::Narrow(a) => format!("((float){})", x(a)),
            Expr::Round(DType::BF16, a) => format!("kiln_bf2f(kiln_f2bf({}))", x(a)),
            Expr::Round(_, a) => format!("kiln_h2f(kiln_f2h({}))", x(a)),
            Expr::Where(c, p, q) => format!("({} ? {} : {})", x(c), x(p), x(q)),
            Expr::BoolToF32(c) => format!("({} ? 1.0f : 0.0f)", x(c)),
            Expr::Reduce(..) => unreachable!("reductions are combined across the block"),
        }
    }

    fn stmt(&mut self, indent: usize, v: ValueId) {
        let s = format!("{} v{v} = {};", self.var_ty(v), self.expr(v));
        self.line(indent, &s);
    }

    fn store(&mut self, indent: usize, s: usize) {
        let st = self.nest.stores[s];
        let off = self.offset(st.buffer);
        let line = match self.nest.buffers[st.buffer].dtype {
            DType::Bool => format!(
                "((unsigned char*)a.ptr[{}])[{off}] = v{} ? 1 : 0;",
                st.buffer, st.value
            ),
            DType::F16 => format!(
                "((unsigned short*)a.ptr[{}])[{off}] = kiln_f2h(v{});",
                st.buffer, st.value
            ),
            DType::BF16 => format!(
                "((unsigned short*)a.ptr[{}])[{off}] = kiln_f2bf(v{});",
                st.buffer, st.value
            ),
            _ => format!("((float*)a.ptr[{}])[{off}] = v{};", st.buffer, st.value),
        };
        self.line(indent, &line);
    }

    /// Declarations of the multi-index `i{first}..i{last}` of `lin` over the loop sizes.
    fn unflatten(&mut self, indent: usize, lin: &str, dims: std::ops::Range<usize>) {
        self.line(indent, &format!("long long rem = {lin};"));
        for d in dims.clone().rev() {
            if d == dims.start {
                self.line(indent, &format!("long long i{d} = rem;"));
            } else {
                self.line(
                    indent,
                    &format!("long long i{d} = rem % a.size[{d}]; rem /= a.size[{d}];"),
                );
            }
        }
        self.line(indent, "(void)rem;");
    }

    /// The kernel's signature line (opens its body).
    fn kernel_header(&mut self, name: &str) {
        let line = format!(
            "extern \"C\" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}({name}_args a) {{"
        );
        self.line(0, &line);
    }

    fn pointwise_kernel(&mut self, name: &str) {
        let nd = self.nd;
        self.kernel_header(name);
        let total = (0..nd)
            .map(|d| format!("a.size[{d}]"))
            .collect::<Vec<_>>()
            .join(" * ");
        self.line(1, &format!("const long long total = {total};"));
        let vec4 = self.nest.buffers.iter().all(|b| b.dtype == DType::F32);
        if vec4 {
            self.vec4_loop();
        }
        self.line(
            1,
            "for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {",
        );
        self.unflatten(2, "e", 0..nd);
        let order = self.statement_order();
        for item in &order {
            match *item {
                Item::Stmt(v) => self.stmt(2, v),
                Item::Store(s) => self.store(2, s),
            }
        }
        self.line(1, "}");
        self.line(0, "}");
    }

    /// The pointwise body in evaluation order.
    fn statement_order(&self) -> Vec<Item> {
        let mut order = Vec::new();
        for p in &self.nest.phases {
            match p {
                Phase::Row(vs) => order.extend(vs.iter().map(|&v| Item::Stmt(v))),
                Phase::Inner { point, stores, .. } => {
                    order.extend(point.iter().map(|&v| Item::Stmt(v)));
                    order.extend(stores.iter().map(|&s| Item::Store(s)));
                }
                Phase::RowStores(ss) => order.extend(ss.iter().map(|&s| Item::Store(s))),
            }
        }
        order
    }

    /// The 16-byte path of a pointwise kernel over f32 buffers: when the inner size is a
    /// multiple of 4 and every buffer is either contiguous along the inner dim (16-byte
    /// aligned, outer strides multiples of 4) or constant along it, each thread takes four
    /// consecutive elements per step: `float4` loads and stores (a broadcast buffer is one
    /// load for the four), the body once per lane. The kernel then returns; otherwise the
    /// element loop below runs.
    fn vec4_loop(&mut self) {
        let nd = self.nd;
        let inner = nd - 1;
        self.line(1, &format!("bool vec4 = a.size[{inner}] % 4 == 0;"));
        for b in 0..self.nest.buffers.len() {
            let outer: String = (0..inner)
                .map(|d| format!(" && a.stride[{b}][{d}] % 4 == 0"))
                .collect();
            self.line(
                1,
                &format!(
                    "vec4 = vec4 && (a.stride[{b}][{inner}] == 0 || (a.stride[{b}][{inner}] == 1 && ((unsigned long long)a.ptr[{b}] & 15) == 0{outer}));"
                ),
            );
        }
        self.line(1, "if (vec4) {");
        self.line(
            2,
            "for (long long e4 = (long long)blockIdx.x * blockDim.x + threadIdx.x; e4 < total / 4; e4 += (long long)gridDim.x * blockDim.x) {",
        );
        self.unflatten(3, "e4 * 4", 0..nd);
        let order = self.statement_order();
        for item in &order {
            match *item {
                Item::Stmt(v) => {
                    if let Expr::Load(b) = self.nest.body[v].expr {
                        let off = self.offset(b);
                        self.line(3, &format!("float v{v}_0, v{v}_1, v{v}_2, v{v}_3;"));
                        self.line(3, &format!("if (a.stride[{b}][{inner}] == 1) {{"));
                        self.line(
                            4,
                            &format!("const float4 t = *(const float4*)((const float*)a.ptr[{b}] + ({off}));"),
                        );
                        self.line(
                            4,
                            &format!("v{v}_0 = t.x; v{v}_1 = t.y; v{v}_2 = t.z; v{v}_3 = t.w;"),
                        );
                        self.line(3, "} else {");
                        self.line(
                            4,
                            &format!("v{v}_0 = v{v}_1 = v{v}_2 = v{v}_3 = ((const float*)a.ptr[{b}])[{off}];"),
                        );
                        self.line(3, "}");
                    } else {
                        for l in 0..4 {
                            let e = self.expr_lane(v, Some(l));
                            let line = format!("{} v{v}_{l} = {e};", self.var_ty(v));
                            self.line(3, &line);
                        }
                    }
                }
                Item::Store(s) => {
                    let st = self.nest.stores[s];
                    let (b, v) = (st.buffer, st.value);
                    let off = self.offset(b);
                    self.line(3, &format!("if (a.stride[{b}][{inner}] == 1) {{"));
                    self.line(
                        4,
                        &format!("*(float4*)((float*)a.ptr[{b}] + ({off})) = make_float4(v{v}_0, v{v}_1, v{v}_2, v{v}_3);"),
                    );
                    self.line(3, "} else {");
                    self.line(4, &format!("((float*)a.ptr[{b}])[{off}] = v{v}_3;"));
                    self.line(3, "}");
                }
            }
        }
        self.line(2, "}");
        self.line(2, "return;");
        self.line(1, "}");
    }

    fn per_row_kernel(&mut self, name: &str) {
        let nd = self.nd;
        let inner = nd - 1;
        self.kernel_header(name);
        self.line(1, "__shared__ double kiln_red[32];");
        let rows = if inner == 0 {
            "1".to_string()
        } else {
            (0..inner)
                .map(|d| format!("a.size[{d}]"))
                .collect::<Vec<_>>()
                .join(" * ")
        };
        self.line(1, &format!("const long long rows = {rows};"));
        self.line(1, &format!("const long long inner = a.size[{inner}];"));
        self.line(
            1,
            "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",
        );
        if inner > 0 {
            self.unflatten(2, "row", 0..inner);
        }
        // row values read the inner dim at index 0 (their buffers do not vary along it)
        self.line(2, &format!("long long i{inner} = 0;"));
        let phases = self.nest.phases.clone();
        for p in &phases {
            match p {
                Phase::Row(vs) => {
                    for &v in vs {
                        self.stmt(2, v);
                    }
                }
                Phase::RowStores(ss) => {
                    self.line(2, "if (threadIdx.x == 0) {");
                    ss.iter().for_each(|&s| self.store(3, s));
                    self.line(2, "}");
                }
                Phase::Inner {
                    point,
                    reduces,
                    stores,
                } => {
                    for &r in reduces {
                        let (op, _) = reduce_of(&self.nest.body[r].expr);
                        let init = match op {
                            ReduceOp::Sum | ReduceOp::Mean => "double acc{r} = 0.0;",
                            ReduceOp::Max => "float acc{r} = -INFINITY;",
                            ReduceOp::Min => "float acc{r} = INFINITY;",
                        };
                        self.line(2, &init.replace("{r}", &r.to_string()));
                    }
                    self.line(
                        2,
                        "for (long long j = threadIdx.x; j < inner; j += blockDim.x) {",
                    );
                    self.line(3, &format!("long long i{inner} = j;"));
                    point.iter().for_each(|&v| self.stmt(3, v));
                    for &r in reduces {
                        let (op, x) = reduce_of(&self.nest.body[r].expr);
                        let upd = match op {
                            ReduceOp::Sum | ReduceOp::Mean => format!("acc{r} += (double)v{x};"),
                            ReduceOp::Max => format!("acc{r} = kiln_max(acc{r}, v{x});"),
                            ReduceOp::Min => format!("acc{r} = kiln_min(acc{r}, v{x});"),
                        };
                        self.line(3, &upd);
                    }
                    stores.iter().for_each(|&s| self.store(3, s));
                    self.line(2, "}");
                    for &r in reduces {
                        let (op, _) = reduce_of(&self.nest.body[r].expr);
                        match op {
                            ReduceOp::Sum | ReduceOp::Mean => {
                                self.line(
                                    2,
                                    &format!("acc{r} = kiln_block_sum(acc{r}, kiln_red);"),
                                );
                                // an f64 statistic stays double; an f32 sum rounds once
                                let ty = self.var_ty(r);
                                self.line(2, &format!("{ty} v{r} = ({ty})acc{r};"));
                            }
                            ReduceOp::Max => self.line(
                                2,
                                &format!("float v{r} = kiln_block_max(acc{r}, kiln_red);"),
                            ),
                            ReduceOp::Min => self.line(
                                2,
                                &format!("float v{r} = kiln_block_min(acc{r}, kiln_red);"),
                            ),
                        }
                    }
                }
            }
        }
        // the next row reuses kiln_red and the outputs
        self.line(2, "__syncthreads();");
        self.line(1, "}");
        self.line(0, "}");
    }
}

fn reduce_of(e: &Expr) -> (ReduceOp, ValueId) {
    match e {
        Expr::Reduce(op, x) => (*op, *x),
        _ => unreachable!("not a reduction"),
    }
}

fn unary(op: UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Neg => format!("(-{x})"),
        UnaryOp::Abs => format!("fabsf({x})"),
        UnaryOp::Exp => format!("expf({x})"),
        UnaryOp::Log => format!("logf({x})"),
        UnaryOp::Sqrt => format!("sqrtf({x})"),
        UnaryOp::Rsqrt => format!("(1.0f / sqrtf({x}))"),
        UnaryOp::Recip => format!("(1.0f / {x})"),
        UnaryOp::Sin => format!("sinf({x})"),
        UnaryOp::Cos => format!("cosf({x})"),
        UnaryOp::Tanh => format!("tanhf({x})"),
        UnaryOp::Erf => format!("erff({x})"),
        UnaryOp::Sigmoid => format!("(1.0f / (1.0f + expf(-{x})))"),
        UnaryOp::Relu => format!("({x} < 0.0f ? 0.0f : {x})"),
        UnaryOp::Gelu => format!("kiln_gelu({x})"),
        UnaryOp::GeluTanh => format!("kiln_gelu_tanh({x})"),
        UnaryOp::Silu => format!("({x} / (1.0f + expf(-{x})))"),
        UnaryOp::Floor => format!("floorf({x})"),
        UnaryOp::Ceil => format!("ceilf({x})"),
        UnaryOp::Round => format!("rintf({x})"),
        UnaryOp::Trunc => format!("truncf({x})"),
        UnaryOp::Sign => format!("({x} > 0.0f ? 1.0f : ({x} < 0.0f ? -1.0f : 0.0f))"),
        UnaryOp::Log1p => format!("log1pf({x})"),
        UnaryOp::Expm1 => format!("expm1f({x})"),
        UnaryOp::Log2 => format!("log2f({x})"),
        UnaryOp::Exp2 => format!("exp2f({x})"),
        UnaryOp::Tan => format!("tanf({x})"),
        UnaryOp::Atan => format!("atanf({x})"),
        UnaryOp::Sinh => format!("sinhf({x})"),
        // a bool operand is never NaN nor infinite; `!` is the truth test of either type
        UnaryOp::Isnan => format!("kiln_isnan({x})"),
        UnaryOp::Isinf => format!("kiln_isinf({x})"),
        UnaryOp::LogicalNot | UnaryOp::BitwiseNot => format!("(!{x})"),
        UnaryOp::Relu6 => format!("kiln_min(6.0f, kiln_max(0.0f, {x}))"),
        // the gate `relu6(x + 3) / 6` is in [0, 1]: multiplied last, the product overflows
        // only where the result does (as the decomposition and eager compute it)
        UnaryOp::Hardswish => {
            format!("({x} * (kiln_min(6.0f, kiln_max(0.0f, {x} + 3.0f)) / 6.0f))")
        }
        UnaryOp::Mish => format!("({x} * tanhf({x} > 20.0f ? {x} : log1pf(expf({x}))))"),
    }
}

/// The f64 unary ops of the loop form (statistics).
fn unary_f64(op: UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Neg => format!("(-{x})"),
        UnaryOp::Abs => format!("fabs({x})"),
        UnaryOp::Sqrt => format!("sqrt({x})"),
        UnaryOp::Rsqrt => format!("(1.0 / sqrt({x}))"),
        UnaryOp::Recip => format!("(1.0 / {x})"),
        // the lowering keeps no other unary op in f64 (`loops::lower`'s f64 ops); were one
        // to reach here, its f32 routine runs on the double value
        UnaryOp::Exp
        | UnaryOp::Log
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
        | UnaryOp::Isnan
        | UnaryOp::Isinf
        | UnaryOp::LogicalNot
        | UnaryOp::BitwiseNot
        | UnaryOp::Relu6
        | UnaryOp::Hardswish
        | UnaryOp::Mish => format!("/* no f64 form */ {}", unary(op, x)),
    }
}

/// The f64 binary ops of the loop form (statistics).
fn binary_f64(op: BinaryOp, x: &str, y: &str) -> String {
    match op {
        BinaryOp::Maximum => format!("kiln_max_d({x}, {y})"),
        BinaryOp::Minimum => format!("kiln_min_d({x}, {y})"),
        other => binary(other, x, y),
    }
}

/// An f64 literal: the shortest decimal that reads back as the same double.
pub(crate) fn double_lit(c: f64) -> String {
    if c.is_nan() {
        "((double)NAN)".to_string()
    } else if c.is_infinite() {
        if c > 0.0 {
            "((double)INFINITY)"
        } else {
            "(-(double)INFINITY)"
        }
        .to_string()
    } else {
        format!("{c:?}")
    }
}

fn binary(op: BinaryOp, x: &str, y: &str) -> String {
    match op {
        BinaryOp::Add => format!("({x} + {y})"),
        BinaryOp::Sub => format!("({x} - {y})"),
        BinaryOp::Mul => format!("({x} * {y})"),
        BinaryOp::Div => format!("({x} / {y})"),
        BinaryOp::Pow => format!("powf({x}, {y})"),
        BinaryOp::Maximum => format!("kiln_max({x}, {y})"),
        BinaryOp::Minimum => format!("kiln_min({x}, {y})"),
        BinaryOp::Eq => format!("({x} == {y})"),
        BinaryOp::Ne => format!("({x} != {y})"),
        BinaryOp::Lt => format!("({x} < {y})"),
        BinaryOp::Le => format!("({x} <= {y})"),
        BinaryOp::Gt => format!("({x} > {y})"),
        BinaryOp::Ge => format!("({x} >= {y})"),
        BinaryOp::Remainder => format!("kiln_remainder({x}, {y})"),
        BinaryOp::Fmod => format!("fmodf({x}, {y})"),
        BinaryOp::Atan2 => format!("atan2f({x}, {y})"),
        BinaryOp::LogicalAnd => format!("(({x} != 0) && ({y} != 0))"),
        BinaryOp::LogicalOr => format!("(({x} != 0) || ({y} != 0))"),
        BinaryOp::LogicalXor => format!("(({x} != 0) != ({y} != 0))"),
        // on bools (the loop form has no integer values)
        BinaryOp::BitwiseAnd => format!("({x} && {y})"),
        BinaryOp::BitwiseOr => format!("({x} || {y})"),
        BinaryOp::BitwiseXor => format!("({x} != {y})"),
    }
}

/// Device helpers every kernel may use: NaN-propagating max/min, the gelu forms, and
/// block-wide reductions (warp shuffles, then one value per warp through `red`; every
/// thread of the block must call them, and all get the result).
const HELPERS: &str = r#"
// f16 and bf16 buffers: exact widening, rounding to nearest even (portable bit code, so the
// emulation runs exactly what the GPU runs)
__device__ __forceinline__ float kiln_h2f(unsigned short h) {
    unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
    unsigned int e = ((unsigned int)h >> 10) & 0x1fu, m = (unsigned int)h & 0x3ffu;
    unsigned int x;
    if (e == 0x1fu) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else {
        unsigned int k = 0;
        while (!(m & 0x400u)) { m <<= 1; k++; }
        x = sign | ((113u - k) << 23) | ((m & 0x3ffu) << 13);
    }
    return __int_as_float((int)x);
}
__device__ __forceinline__ unsigned short kiln_f2h(float f) {
    unsigned int x = (unsigned int)__float_as_int(f);
    unsigned int sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
    if (ax <= 0x33000000u) return (unsigned short)sign;
    int e = (int)(ax >> 23) - 127;
    unsigned int m = (ax & 0x7fffffu) | 0x800000u;
    if (e < -14) {
        unsigned int shift = (unsigned int)(-e - 1);
        unsigned int r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (unsigned short)(sign | r);
    }
    unsigned int r = ((unsigned int)(e + 15) << 10) | ((m >> 13) & 0x3ffu), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (unsigned short)(sign | r);
}
__device__ __forceinline__ float kiln_bf2f(unsigned short b) {
    return __int_as_float((int)((unsigned int)b << 16));
}
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {
    unsigned int x = (unsigned int)__float_as_int(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
__device__ __forceinline__ float kiln_max(float x, float y) {
    return (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y);
}
__device__ __forceinline__ float kiln_min(float x, float y) {
    return (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y);
}
__device__ __forceinline__ double kiln_max_d(double x, double y) {
    return (isnan(x) || isnan(y)) ? x + y : (x > y ? x : y);
}
__device__ __forceinline__ double kiln_min_d(double x, double y) {
    return (isnan(x) || isnan(y)) ? x + y : (x < y ? x : y);
}
__device__ __forceinline__ bool kiln_isnan(float x) { return isnan(x); }
__device__ __forceinline__ bool kiln_isnan(bool x) { return false; }
__device__ __forceinline__ bool kiln_isinf(float x) { return isinf(x); }
__device__ __forceinline__ bool kiln_isinf(bool x) { return false; }
__device__ __forceinline__ float kiln_remainder(float x, float y) {
    // fmod, then + y where the remainder's sign differs from y's (Python's `%`, as torch)
    float m = fmodf(x, y);
    return (m != 0.0f && ((y < 0.0f) != (m < 0.0f))) ? m + y : m;
}
__device__ __forceinline__ float kiln_gelu(float x) {
    return x * normcdff(x);
}
__device__ __forceinline__ float kiln_gelu_tanh(float x) {
    // 0.5·x·(1 + tanh u) = x / (1 + e^(-2u)), u = sqrt(2/π)·(x + 0.044715·x³)
    float u2 = x * (0x1.988454p+0f + 0x1.2444f2p-4f * x * x);
    return x / (1.0f + expf(-u2));
}
__device__ __forceinline__ double kiln_block_sum(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? red[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    return red[0];
}
__device__ __forceinline__ float kiln_block_max(float v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v = kiln_max(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = (double)v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? (float)red[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = kiln_max(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) red[0] = (double)v;
    }
    __syncthreads();
    return (float)red[0];
}
__device__ __forceinline__ float kiln_block_min(float v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v = kiln_min(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = (double)v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? (float)red[lane] : INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = kiln_min(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) red[0] = (double)v;
    }
    __syncthreads();
    return (float)red[0];
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_and_identifiers() {
        assert_eq!(float_lit(f64::NEG_INFINITY), "(-INFINITY)");
        assert_eq!(c_ident("k0 row.x"), "k0_row_x");
    }
}
