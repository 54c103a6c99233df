//! Shared harness of kiln's cross-crate tests: build a one-op graph, run it eagerly (the
//! runtime's kernels, through `kiln::graph_exec`) and through the reference interpreter,
//! and compare with a tolerance that depends on the dtype.
//!
//! Inputs come in several layouts so that every kernel is exercised on non-contiguous data:
//! see [`Layout`].

#![warn(missing_docs)]

use kiln::ir::interp::{eval, Value};
use kiln::ir::{Arg, Graph, Op, Scalar, TensorType};
use kiln::{DType, Tensor};

/// How an input tensor is laid out in memory (its logical values are what counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// row-major, no gaps
    Contiguous,
    /// the last two dims are a transposed view of a row-major tensor
    Transposed,
    /// every other element of the last dim of a twice-as-wide tensor (a step-2 slice)
    Strided,
    /// the first dim is a size-1 tensor expanded (stride 0); values repeat
    Expanded,
    /// a narrowed window (offset into the storage) of a larger tensor
    Offset,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 5] = [
        Layout::Contiguous,
        Layout::Transposed,
        Layout::Strided,
        Layout::Expanded,
        Layout::Offset,
    ];
}

/// Which values to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// standard normal (integers: uniform in [-5, 5))
    Normal,
    /// in [0.1, 3.1): for log, sqrt, rsqrt, pow bases
    Positive,
    /// normal times a scale, e.g. wide ranges for exp/tanh saturation
    Scaled(f64),
    /// in (-0.9, 2.1): for log1p
    AboveMinusOne,
    /// normal, but never 0 for integers (a divisor)
    NonZero,
}

impl Dist {
    /// The distribution an op's operand `i` is drawn from: its domain in the op table
    /// (the real line widened to ±6σ for transcendentals, which saturate out there).
    pub fn of(info: &kiln::ir::OpInfo, i: usize) -> Dist {
        use kiln::ir::{CostClass, Domain};
        match info.domain.get(i).copied().unwrap_or(Domain::Real) {
            Domain::Real if info.cost == CostClass::Transcendental => Dist::Scaled(6.0),
            Domain::Real | Domain::Integer => Dist::Normal,
            Domain::Positive => Dist::Positive,
            Domain::AboveMinusOne => Dist::AboveMinusOne,
            Domain::Small => Dist::Scaled(2.0),
            Domain::NonZero => Dist::NonZero,
        }
    }
}

/// True when the op's dtype rule accepts operands promoted to `dtype` (bitwise ops take
/// no floats, arithmetic takes no bools).
pub fn accepts(info: &kiln::ir::OpInfo, dtype: DType) -> bool {
    info.dtype == kiln::ir::DTypeRule::Own || info.dtype.result(dtype).is_ok()
}

/// A random tensor of `shape` and `dtype` in the given layout, drawn with `seed`.
pub fn make(shape: &[usize], dtype: DType, seed: u64, dist: Dist, layout: Layout) -> Tensor {
    let draw = |s: &[usize]| -> Tensor {
        let n: usize = s.iter().product();
        let u = Tensor::rand(&[n.max(1)], DType::F64, seed)
            .unwrap()
            .to_vec_f64()
            .unwrap();
        let g = Tensor::randn(&[n.max(1)], DType::F64, seed)
            .unwrap()
            .to_vec_f64()
            .unwrap();
        let vals: Vec<f64> = (0..n)
            .map(|i| match dtype {
                DType::Bool => (u[i] < 0.5) as u8 as f64,
                DType::I32 | DType::I64 => match dist {
                    Dist::Positive => (u[i] * 5.0).floor() + 1.0,
                    Dist::NonZero => {
                        let v = (u[i] * 10.0).floor() - 5.0;
                        if v >= 0.0 {
                            v + 1.0
                        } else {
                            v
                        }
                    }
                    _ => (u[i] * 10.0).floor() - 5.0,
                },
                _ => match dist {
                    Dist::Normal | Dist::NonZero => g[i],
                    Dist::Positive => 0.1 + 3.0 * u[i],
                    Dist::Scaled(k) => g[i] * k,
                    Dist::AboveMinusOne => -0.9 + 3.0 * u[i],
                },
            })
            .collect();
        Tensor::from_f64(&vals, s, dtype).unwrap()
    };
    let r = shape.len();
    match layout {
        Layout::Transposed if r >= 2 => {
            let mut s = shape.to_vec();
            s.swap(r - 1, r - 2);
            draw(&s).transpose(-1, -2).unwrap()
        }
        Layout::Strided if r >= 1 => {
            let mut s = shape.to_vec();
            s[r - 1] *= 2;
            draw(&s).slice(-1, 0, s[r - 1] as i64, 2).unwrap()
        }
        Layout::Expanded if r >= 1 => {
            let mut s = shape.to_vec();
            s[0] = 1;
            let target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            draw(&s).expand(&target).unwrap()
        }
        Layout::Offset if r >= 1 => {
            let mut s = shape.to_vec();
            s[0] += 3;
            draw(&s).narrow(0, 2, shape[0]).unwrap()
        }
        _ => draw(shape),
    }
}

/// An operand of an op under test.
#[derive(Clone)]
pub enum TestArg {
    /// a tensor operand (any layout)
    T(Tensor),
    /// a scalar literal
    S(Scalar),
}

/// The tolerance of comparisons, per dtype: `|a - b| <= atol + rtol * |b|`.
pub fn tolerance(dtype: DType, reduction: bool) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 if reduction => (1e-5, 1e-4),
        DType::F32 => (1e-6, 1e-5),
        // Eager computes in f32 and rounds once; the oracle rounds the f64 result: they
        // may differ by one unit in the last place.
        DType::F16 => (1e-3, 2e-3),
        DType::BF16 => (1e-2, 1.6e-2),
        _ => (0.0, 0.0),
    }
}

/// Compares two value lists; NaNs must match NaNs and infinities must match exactly.
pub fn compare(
    what: &str,
    got: &[f64],
    want: &[f64],
    (atol, rtol): (f64, f64),
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            return Err(format!(
                "{what}: element {i}: got {g}, expected {w} (atol {atol}, rtol {rtol})"
            ));
        }
    }
    Ok(())
}

/// Runs `op` on `args` eagerly and through the interpreter, and compares dtype, shape and
/// values. Returns the eager result for further checks.
pub fn check_op(op: &Op, args: &[TestArg]) -> Result<Tensor, String> {
    let mut g = Graph::new("case");
    let mut node_args = Vec::new();
    let mut tensors = Vec::new();
    for (i, a) in args.iter().enumerate() {
        match a {
            TestArg::T(t) => {
                let id = g
                    .add_input(
                        format!("a{i}"),
                        TensorType::new(t.dtype(), kiln::Shape::of(t.shape())),
                    )
                    .map_err(|e| e.to_string())?;
                node_args.push(Arg::Value(id));
                tensors.push(t.clone());
            }
            TestArg::S(s) => node_args.push(Arg::Scalar(*s)),
        }
    }
    let out = g
        .add_op(op.clone(), &node_args, None)
        .map_err(|e| format!("{op}: {e}"))?;
    g.set_outputs(vec![out]).map_err(|e| e.to_string())?;
    let desc = format!(
        "{op} on ({})",
        args.iter()
            .map(|a| match a {
                TestArg::T(t) => format!("{}{:?} strides {:?}", t.dtype(), t.shape(), t.strides()),
                TestArg::S(s) => format!("scalar {s}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let eager = kiln::graph_exec::run_graph(&g, &tensors)
        .map_err(|e| format!("{desc}: eager failed: {e}"))?;
    let values: Vec<Value> = tensors
        .iter()
        .map(|t| Value::new(t.dtype(), t.shape().to_vec(), t.to_vec_f64().unwrap()).unwrap())
        .collect();
    let oracle = eval(&g, &values).map_err(|e| format!("{desc}: interpreter failed: {e}"))?;
    let (e, o) = (&eager[0], &oracle[0]);
    if e.dtype() != o.dtype || e.shape() != o.shape.as_slice() {
        return Err(format!(
            "{desc}: eager gives {}{:?}, interpreter {}{:?}",
            e.dtype(),
            e.shape(),
            o.dtype,
            o.shape
        ));
    }
    let reduction = op.is_reduction()
        || op.is_composite()
        || matches!(op, Op::Matmul | Op::Linear | Op::Convolution { .. });
    compare(
        &desc,
        &e.to_vec_f64().unwrap(),
        &o.data,
        tolerance(e.dtype(), reduction),
    )?;
    Ok(e.clone())
}

/// Like [`check_op`] but panics with the message: for use inside `#[test]`s.
pub fn assert_op(op: &Op, args: &[TestArg]) -> Tensor {
    match check_op(op, args) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// The concrete shape of `shape` with the random-program generator's symbols bound: `B` to
/// `sizes.0`, every other symbol to `sizes.1`.
pub fn bind_generated_symbols(shape: &kiln::ir::Shape, sizes: (usize, usize)) -> Vec<usize> {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            kiln::ir::Dim::Const(n) => *n,
            kiln::ir::Dim::Sym(s) if &**s == "B" => sizes.0,
            kiln::ir::Dim::Sym(_) => sizes.1,
        })
        .collect()
}

/// The suite of `tests/cpu_differential.rs` that runs a unary op of the table, by its row:
/// every op falls in exactly one (`tests/op_table.rs` checks it for every row).
pub fn unary_suite(u: kiln::ir::UnaryOp) -> Option<&'static str> {
    use kiln::ir::{CostClass, DTypeRule};
    let i = u.info();
    match (i.composite, i.dtype) {
        (true, _) => Some("unary_composite_ops"),
        (false, DTypeRule::Bool | DTypeRule::Integral) => Some("unary_bool_ops"),
        (false, DTypeRule::Numeric | DTypeRule::Float) if i.cost <= CostClass::Moderate => {
            Some("unary_simple_ops")
        }
        (false, DTypeRule::Numeric | DTypeRule::Float) => Some("unary_transcendental_ops"),
        (false, DTypeRule::Any | DTypeRule::Own) => None,
    }
}

/// The suite of `tests/cpu_differential.rs` that runs a binary op of the table, by its row.
pub fn binary_suite(b: kiln::ir::BinaryOp) -> Option<&'static str> {
    use kiln::ir::{CostClass, DTypeRule};
    let i = b.info();
    match i.dtype {
        DTypeRule::Bool | DTypeRule::Integral => Some("binary_bool_ops"),
        DTypeRule::Numeric | DTypeRule::Float | DTypeRule::Any if i.cost <= CostClass::Moderate => {
            Some("binary_simple_ops")
        }
        DTypeRule::Numeric | DTypeRule::Float | DTypeRule::Any => Some("binary_library_ops"),
        DTypeRule::Own => None,
    }
}

/// Every graph of the text-format corpus (`ir/tests/corpus/*.kir`), named `file:@graph`, in
/// file order.
pub fn corpus() -> Vec<(String, Graph)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ir/tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus directory")
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a corpus file");
        for g in kiln::ir::text::parse_module(&text).expect("the corpus parses") {
            let name = format!("{}:@{}", f.file_name().unwrap().to_string_lossy(), g.name());
            out.push((name, g));
        }
    }
    out
}

/// The size a corpus test binds symbol `s` to: distinct small sizes per symbol, so that a
/// mix-up of two symbols shows.
pub fn symbol_size(s: &str) -> usize {
    2 + s.bytes().map(usize::from).sum::<usize>() % 4
}

/// Random inputs for `g` (symbolic dims bound by [`symbol_size`]): integers valid as indices
/// into any table of size ≥ 2, random masks, normal floats.
pub fn corpus_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    g.inputs()
        .iter()
        .enumerate()
        .map(|(k, (_, id))| {
            let ty = &g.node(*id).ty;
            let shape: Vec<usize> = ty
                .shape
                .dims()
                .iter()
                .map(|d| match d {
                    kiln::Dim::Const(n) => *n,
                    kiln::Dim::Sym(s) => symbol_size(s),
                })
                .collect();
            let s = seed + k as u64;
            match ty.dtype {
                DType::I32 | DType::I64 => (&Tensor::rand(&shape, DType::F64, s).unwrap() * 2.0)
                    .unwrap()
                    .cast(ty.dtype)
                    .unwrap(),
                DType::Bool => Tensor::rand(&shape, DType::F32, s)
                    .unwrap()
                    .lt(0.5)
                    .unwrap(),
                d => Tensor::randn(&shape, d, s).unwrap(),
            }
        })
        .collect()
}

/// A tensor's values as the interpreter's.
pub fn value(t: &Tensor) -> Value {
    Value::new(t.dtype(), t.shape().to_vec(), t.to_vec_f64().unwrap()).unwrap()
}
