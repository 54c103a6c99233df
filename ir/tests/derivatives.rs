//! The table's derivative rules against finite differences of each row's f64 reference:
//! every pointwise row with a rule, on f64 values from its test domain (away from kinks),
//! with both operands of a binary op as tensors of one shape and with the second one
//! broadcast (its gradient is then the sum over the broadcast dim). The rules run through
//! a builder that evaluates each op they apply with the interpreter. A new row is covered
//! without an edit here.

use kiln_ir::interp::{eval, Value};
use kiln_ir::ops::{gradients, Derivative, GArg, GVal, GradBuilder, GradCall, GradError};
use kiln_ir::{Arg, BinaryOp, DType, DTypeRule, Domain, Graph, Op, Shape, TensorType, UnaryOp};

/// Evaluates every op a rule applies with the interpreter.
#[derive(Default)]
struct Eval {
    vals: Vec<Value>,
}

impl Eval {
    fn value(&mut self, dtype: DType, data: Vec<f64>) -> GVal {
        let n = data.len();
        self.vals.push(Value::new(dtype, vec![n], data).unwrap());
        GVal(self.vals.len() - 1)
    }
}

impl GradBuilder for Eval {
    fn apply(&mut self, op: Op, args: &[GArg]) -> Result<GVal, GradError> {
        let fail = |reason: String| GradError::Build {
            op: op.name().to_string(),
            reason,
        };
        let mut g = Graph::new("step");
        let (mut inputs, mut operands) = (Vec::new(), Vec::new());
        for (i, a) in args.iter().enumerate() {
            match *a {
                GArg::Val(v) => {
                    let ty = self.ty(v);
                    let id = g.add_input(format!("x{i}"), ty).unwrap();
                    operands.push(Arg::Value(id));
                    inputs.push(self.vals[v.0].clone());
                }
                GArg::Scalar(s) => operands.push(Arg::Scalar(s)),
            }
        }
        let y = g
            .add_op(op.clone(), &operands, None)
            .map_err(|e| fail(e.to_string()))?;
        g.set_outputs(vec![y]).unwrap();
        let mut out = eval(&g, &inputs).map_err(|e| fail(e.to_string()))?;
        self.vals.push(out.remove(0));
        Ok(GVal(self.vals.len() - 1))
    }

    fn ty(&self, v: GVal) -> TensorType {
        let val = &self.vals[v.0];
        TensorType::new(val.dtype, Shape::of(&val.shape))
    }
}

/// Points of a domain away from the kinks of the table's ops (0, integers, ±3, 6).
fn points(d: Domain) -> Vec<f64> {
    match d {
        Domain::Real | Domain::Integer => vec![-2.3, -0.7, 0.4, 1.3, 2.9],
        Domain::Positive => vec![0.3, 0.9, 1.7, 2.6, 4.1],
        Domain::AboveMinusOne => vec![-0.6, -0.2, 0.5, 1.4, 3.3],
        Domain::Small => vec![-1.7, -0.45, 0.35, 1.1, 2.2],
        Domain::NonZero => vec![-1.9, -0.6, 0.7, 1.6, 2.45],
    }
}

/// The central difference of `f` at `x`.
fn slope(f: impl Fn(f64) -> f64, x: f64) -> f64 {
    let h = 1e-6 * x.abs().max(1.0);
    (f(x + h) - f(x - h)) / (2.0 * h)
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{what}: rule {got} vs finite difference {want}"
    );
}

/// The rule's gradients of `op` at `args` for an output gradient of ones.
fn rule_grads(e: &mut Eval, op: &Op, args: &[GArg]) -> Vec<Option<GVal>> {
    let out = e.apply(op.clone(), args).unwrap();
    let n = e.vals[out.0].data.len();
    let grad = e.value(DType::F64, vec![1.0; n]);
    let call = GradCall {
        op,
        args,
        out,
        grad,
    };
    gradients(e, &call).unwrap_or_else(|err| panic!("{op}: {err}"))
}

#[test]
fn unary_rules_match_finite_differences() {
    let mut checked = 0;
    for u in UnaryOp::ALL {
        let info = u.info();
        if !matches!(info.derivative, Derivative::Rule(_)) {
            continue;
        }
        let xs = points(info.domain[0]);
        let mut e = Eval::default();
        let x = e.value(DType::F64, xs.clone());
        let op = Op::Unary(u);
        let g = rule_grads(&mut e, &op, &[GArg::Val(x)]);
        let gx = &e.vals[g[0].expect("a gradient for the tensor operand").0];
        assert_eq!(gx.shape, vec![xs.len()], "{op}");
        for (i, &xi) in xs.iter().enumerate() {
            close(
                gx.data[i],
                slope(|v| u.eval_f64(v), xi),
                &format!("{op} at {xi}"),
            );
        }
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} unary rules");
}

/// gelu's rule takes Φ(x) as y / x: ½ at ±0 (not 0/0), 1 and 0 far out in the tails (no
/// 0/0 where Φ underflows), NaN at ±inf and NaN, as torch's `Φ(x) + x φ(x)` gives.
#[test]
fn gelu_rule_at_zero_and_in_the_tails() {
    let xs = vec![
        0.0,
        -0.0,
        40.0,
        -40.0,
        1e-300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut e = Eval::default();
    let x = e.value(DType::F64, xs.clone());
    let g = rule_grads(&mut e, &Op::Unary(UnaryOp::Gelu), &[GArg::Val(x)]);
    let gx = &e.vals[g[0].expect("a gradient").0].data;
    assert_eq!(&gx[..5], &[0.5, 0.5, 1.0, 0.0, 0.5], "{gx:?}");
    assert!(gx[5..].iter().all(|v| v.is_nan()), "{gx:?}");
}

#[test]
fn binary_rules_match_finite_differences_and_undo_broadcasting() {
    let mut checked = 0;
    for b in BinaryOp::ALL {
        let info = b.info();
        if !matches!(info.derivative, Derivative::Rule(_)) {
            continue;
        }
        let d1 = *info.domain.get(1).unwrap_or(&info.domain[0]);
        let xs = points(info.domain[0]);
        // the second operand's points in another order, so that no pair ties
        let mut ys = points(d1);
        ys.rotate_left(2);
        let op = Op::Binary(b);
        let f = |x: f64, y: f64| b.eval_f64(x, y);
        // both operands [5]
        let mut e = Eval::default();
        let (x, y) = (
            e.value(DType::F64, xs.clone()),
            e.value(DType::F64, ys.clone()),
        );
        let g = rule_grads(&mut e, &op, &[GArg::Val(x), GArg::Val(y)]);
        let (gx, gy) = (&e.vals[g[0].unwrap().0], &e.vals[g[1].unwrap().0]);
        for i in 0..xs.len() {
            let (xi, yi) = (xs[i], ys[i]);
            close(
                gx.data[i],
                slope(|v| f(v, yi), xi),
                &format!("d{op}/da at ({xi}, {yi})"),
            );
            close(
                gy.data[i],
                slope(|v| f(xi, v), yi),
                &format!("d{op}/db at ({xi}, {yi})"),
            );
        }
        // the second operand [1], broadcast: its gradient sums over the five
        // off the grid of points, so that it ties with none and divides none evenly
        let y0 = ys[1] * 1.01 + 0.013;
        let mut e = Eval::default();
        let (x, y) = (
            e.value(DType::F64, xs.clone()),
            e.value(DType::F64, vec![y0]),
        );
        let g = rule_grads(&mut e, &op, &[GArg::Val(x), GArg::Val(y)]);
        let gy = &e.vals[g[1].unwrap().0];
        assert_eq!(
            gy.shape,
            vec![1],
            "{op}: the broadcast operand's gradient keeps its shape"
        );
        let want: f64 = xs.iter().map(|&xi| slope(|v| f(xi, v), y0)).sum();
        close(gy.data[0], want, &format!("d{op}/db broadcast at {y0}"));
        // a literal operand gets no gradient
        let mut e = Eval::default();
        let x = e.value(DType::F64, xs.clone());
        let g = rule_grads(
            &mut e,
            &op,
            &[GArg::Val(x), GArg::Scalar(kiln_ir::Scalar::Float(y0))],
        );
        assert!(g[1].is_none(), "{op}: a literal has no gradient");
        let gx = &e.vals[g[0].unwrap().0];
        for (i, &xi) in xs.iter().enumerate() {
            close(
                gx.data[i],
                slope(|v| f(v, y0), xi),
                &format!("d{op}/da, b literal, at {xi}"),
            );
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} binary rules");
}

/// In the pointwise families, an op is differentiable exactly when its result is floating
/// point: a new row says which by its rule, never by a missing one.
#[test]
fn every_pointwise_family_row_declares_its_derivative() {
    let check = |name: &str, dtype: DTypeRule, d: Derivative| {
        let floating = !matches!(dtype, DTypeRule::Bool | DTypeRule::Integral);
        match d {
            Derivative::Rule(_) => assert!(floating, "{name}: a rule for a non-float result"),
            Derivative::NonDifferentiable => {
                assert!(
                    !floating,
                    "{name}: a float result declared non-differentiable"
                )
            }
        }
    };
    for u in UnaryOp::ALL {
        check(u.name(), u.info().dtype, u.info().derivative);
    }
    for b in BinaryOp::ALL {
        check(b.name(), b.info().dtype, b.info().derivative);
    }
}

/// Distinct pseudo-random values in (-2, 2) (no ties), from `seed`.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            4.0 * u - 2.0 + i as f64 * 1e-9
        })
        .collect()
}

/// `inputs` as operands of the builder.
fn load(e: &mut Eval, inputs: &[Value]) -> Vec<GArg> {
    inputs
        .iter()
        .map(|v| {
            e.vals.push(v.clone());
            GArg::Val(GVal(e.vals.len() - 1))
        })
        .collect()
}

/// `sum(op(inputs) * w)` evaluated by the interpreter.
fn loss(op: &Op, inputs: &[Value], w: &[f64]) -> f64 {
    let mut e = Eval::default();
    let args = load(&mut e, inputs);
    let y = e.apply(op.clone(), &args).unwrap();
    e.vals[y.0].data.iter().zip(w).map(|(a, b)| a * b).sum()
}

/// The rule's gradients of `sum(op(inputs) * w)` against central differences, element by
/// element of every float input; `w` is a fixed pseudo-random weighting (the output
/// gradient).
fn check_op(text: &str, inputs: Vec<Value>) {
    let op = kiln_ir::text::parse_op(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let mut e = Eval::default();
    let args = load(&mut e, &inputs);
    let out = e.apply(op.clone(), &args).unwrap();
    let (n, shape) = (e.vals[out.0].data.len(), e.vals[out.0].shape.clone());
    let w = values(n, 99);
    e.vals
        .push(Value::new(DType::F64, shape, w.clone()).unwrap());
    let grad = GVal(e.vals.len() - 1);
    let call = GradCall {
        op: &op,
        args: &args,
        out,
        grad,
    };
    let grads = gradients(&mut e, &call).unwrap_or_else(|err| panic!("{text}: {err}"));
    for (i, input) in inputs.iter().enumerate() {
        if input.dtype != DType::F64 {
            assert!(
                grads[i].is_none(),
                "{text}: operand {i} is not differentiable"
            );
            continue;
        }
        let g = &e.vals[grads[i]
            .unwrap_or_else(|| panic!("{text}: no gradient for {i}"))
            .0];
        assert_eq!(g.shape, input.shape, "{text}: operand {i}'s gradient shape");
        for j in 0..input.data.len() {
            let at = |d: f64| {
                let mut ins = inputs.clone();
                ins[i].data[j] += d;
                loss(&op, &ins, &w)
            };
            let h = 1e-6;
            let fd = (at(h) - at(-h)) / (2.0 * h);
            close(g.data[j], fd, &format!("{text}: operand {i} element {j}"));
        }
    }
}

fn f64s(shape: &[usize], seed: u64) -> Value {
    let n = shape.iter().product();
    Value::new(DType::F64, shape.to_vec(), values(n, seed)).unwrap()
}

#[test]
fn reduction_layout_where_and_matmul_rules_match_finite_differences() {
    for (text, inputs) in structural_cases() {
        check_op(text, inputs);
    } // where: the condition gets no gradient, a broadcast branch sums
    let cond = Value::new(
        DType::Bool,
        vec![3, 4],
        (0..12).map(|i| f64::from(i % 3 == 0)).collect(),
    )
    .unwrap();
    check_op(
        "where",
        vec![cond.clone(), f64s(&[3, 4], 1), f64s(&[4], 16)],
    );
    check_op("where", vec![cond, f64s(&[1, 4], 17), f64s(&[3, 4], 1)]);
}

/// Reductions, layouts and matmul in their forms.
fn structural_cases() -> Vec<(&'static str, Vec<Value>)> {
    let x34 = || f64s(&[3, 4], 1);
    let x234 = || f64s(&[2, 3, 4], 2);
    vec![
        ("sum {dims = [1]}", vec![x34()]),
        ("sum {dims = [1], keepdim = true}", vec![x34()]),
        ("sum", vec![x234()]),
        ("sum {dims = [0, 2]}", vec![x234()]),
        ("mean {dims = [-1]}", vec![x34()]),
        ("mean", vec![x234()]),
        ("amax {dims = [1]}", vec![x34()]),
        ("amin {dims = [0], keepdim = true}", vec![x34()]),
        ("amax", vec![x234()]),
        ("reshape {shape = [2, 6]}", vec![x34()]),
        ("transpose {dim0 = 0, dim1 = 1}", vec![x34()]),
        ("permute {dims = [2, 0, 1]}", vec![x234()]),
        ("expand {shape = [3, 4]}", vec![f64s(&[1, 4], 3)]),
        ("expand {shape = [2, 3, 4]}", vec![f64s(&[4], 4)]),
        ("contiguous", vec![x34()]),
        ("cast {dtype = f64}", vec![x34()]),
        ("matmul", vec![x34(), f64s(&[4, 5], 5)]),
        ("matmul", vec![x234(), f64s(&[4, 5], 6)]),
        ("matmul", vec![f64s(&[4], 7), f64s(&[4, 5], 8)]),
        ("matmul", vec![f64s(&[4], 7), f64s(&[2, 4, 5], 9)]),
        ("matmul", vec![x34(), f64s(&[4], 10)]),
        ("matmul", vec![x234(), f64s(&[4], 11)]),
        ("matmul", vec![f64s(&[4], 12), f64s(&[4], 13)]),
        (
            "matmul",
            vec![f64s(&[2, 1, 3, 4], 14), f64s(&[5, 4, 2], 15)],
        ),
    ]
}

/// Ties of `amax`/`amin` share the gradient evenly, as torch's `amax` does.
#[test]
fn reduction_ties_share_the_gradient() {
    let op = kiln_ir::text::parse_op("amax {dims = [1]}").unwrap();
    let mut e = Eval::default();
    e.vals
        .push(Value::new(DType::F64, vec![2, 3], vec![1.0, 3.0, 3.0, 5.0, 5.0, 5.0]).unwrap());
    let x = GArg::Val(GVal(0));
    let out = e.apply(op.clone(), &[x]).unwrap();
    let grad = e.value(DType::F64, vec![1.0, 6.0]);
    let call = GradCall {
        op: &op,
        args: &[x],
        out,
        grad,
    };
    let g = gradients(&mut e, &call).unwrap()[0].unwrap();
    assert_eq!(e.vals[g.0].data, vec![0.0, 0.5, 0.5, 2.0, 2.0, 2.0]);
}

/// A cast's gradient is cast back.
#[test]
fn casts_cast_back() {
    let mut e = Eval::default();
    e.vals
        .push(Value::new(DType::F32, vec![2], vec![1.5, -2.0]).unwrap());
    let x = GArg::Val(GVal(0));
    let op = kiln_ir::text::parse_op("cast {dtype = f64}").unwrap();
    let out = e.apply(op.clone(), &[x]).unwrap();
    let grad = e.value(DType::F64, vec![0.25, 4.0]);
    let g = gradients(
        &mut e,
        &GradCall {
            op: &op,
            args: &[x],
            out,
            grad,
        },
    )
    .unwrap()[0]
        .unwrap();
    assert_eq!(e.vals[g.0].dtype, DType::F32);
    assert_eq!(e.vals[g.0].data, vec![0.25, 4.0]);
}

#[test]
fn composite_activation_and_copy_rules_match_finite_differences() {
    for (text, inputs) in composite_cases() {
        check_op(text, inputs);
    }
}

/// Indices as an i64 value.
fn ids(shape: &[usize], data: &[i64]) -> Value {
    Value::new(
        DType::I64,
        shape.to_vec(),
        data.iter().map(|&i| i as f64).collect(),
    )
    .unwrap()
}

/// Composites, attributed activations and copies.
fn composite_cases() -> Vec<(&'static str, Vec<Value>)> {
    let x34 = || f64s(&[3, 4], 21);
    vec![
        ("softmax {dim = 1}", vec![x34()]),
        ("softmax {dim = 0}", vec![x34()]),
        ("log_softmax {dim = -1}", vec![x34()]),
        ("linear", vec![x34(), f64s(&[5, 4], 22), f64s(&[5], 23)]),
        ("linear", vec![f64s(&[2, 3, 4], 24), f64s(&[5, 4], 25)]),
        (
            "linear",
            vec![f64s(&[4], 26), f64s(&[5, 4], 27), f64s(&[5], 28)],
        ),
        ("var {dims = [1], correction = 1}", vec![x34()]),
        (
            "var {dims = [], correction = 0, keepdim = true}",
            vec![x34()],
        ),
        (
            "layer_norm {ndim = 1, eps = 1e-5}",
            vec![x34(), f64s(&[4], 29), f64s(&[4], 30)],
        ),
        ("layer_norm {ndim = 2, eps = 1e-5}", vec![x34()]),
        (
            "rms_norm {ndim = 1, eps = 1e-6}",
            vec![x34(), f64s(&[4], 31)],
        ),
        ("rms_norm {ndim = 1, eps = 1e-6}", vec![x34()]),
        ("hardtanh {min_val = -1.0, max_val = 1.0}", vec![x34()]),
        ("leaky_relu {negative_slope = 0.1}", vec![x34()]),
        ("elu {alpha = 1.5}", vec![x34()]),
        ("softplus {beta = 2.0, threshold = 3.0}", vec![x34()]),
        (
            "nan_to_num {nan = 0.0, posinf = 100.0, neginf = -100.0}",
            vec![x34()],
        ),
        ("clamp", vec![x34(), f64s(&[4], 32), f64s(&[1, 4], 33)]),
        ("slice {dim = 1, start = 1, end = 3}", vec![x34()]),
        ("slice {dim = 0, start = 0, end = 2}", vec![x34()]),
        ("slice {dim = 1, start = 0, end = 4}", vec![x34()]),
        ("cat {dim = 1}", vec![x34(), f64s(&[3, 2], 34)]),
        (
            "cat {dim = 0}",
            vec![x34(), f64s(&[1, 4], 35), f64s(&[2, 4], 36)],
        ),
        ("triu {diagonal = 0}", vec![x34()]),
        ("tril {diagonal = -1}", vec![x34()]),
    ]
}

/// Gathers scatter their gradient back with `index_add` (repeated indices accumulate, a
/// padding row gets none), `index_add` gathers its source's, strided slices scatter, and
/// the in-place family read functionally.
#[test]
fn indexing_and_in_place_rules_match_finite_differences() {
    for (text, inputs) in indexing_cases() {
        check_op(text, inputs);
    }
}

/// A padding row's gradient is exactly zero however often it is looked up, as torch's
/// `embedding_dense_backward`.
#[test]
fn an_embedding_padding_row_gets_no_gradient() {
    let op = kiln_ir::text::parse_op("embedding {padding_idx = 1}").unwrap();
    let mut e = Eval::default();
    e.vals.push(f64s(&[3, 2], 5));
    e.vals.push(ids(&[4], &[1, 2, 1, 0]));
    let args = [GArg::Val(GVal(0)), GArg::Val(GVal(1))];
    let out = e.apply(op.clone(), &args).unwrap();
    e.vals
        .push(Value::new(DType::F64, vec![4, 2], vec![1.0; 8]).unwrap());
    let grad = GVal(e.vals.len() - 1);
    let call = GradCall {
        op: &op,
        args: &args,
        out,
        grad,
    };
    let g = gradients(&mut e, &call).unwrap();
    assert!(g[1].is_none(), "indices get no gradient");
    assert_eq!(
        e.vals[g[0].unwrap().0].data,
        vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    );
}

/// Gathers, scatters, strided slices and the in-place family.
fn indexing_cases() -> Vec<(&'static str, Vec<Value>)> {
    let x53 = || f64s(&[5, 3], 41);
    vec![
        (
            "index_select {dim = 0}",
            vec![x53(), ids(&[4], &[4, 0, 4, 2])],
        ),
        ("index_select {dim = 1}", vec![x53(), ids(&[2], &[2, 2])]),
        (
            "index_select {dim = 0}",
            vec![x53(), ids(&[2, 3], &[1, 1, 0, 4, 3, 1])],
        ),
        (
            "index_select {dim = 0}",
            vec![f64s(&[1], 42), ids(&[1], &[0])],
        ),
        (
            "index_add {dim = 0}",
            vec![x53(), ids(&[4], &[4, 0, 4, 2]), f64s(&[4, 3], 43)],
        ),
        (
            "index_add {dim = 1}",
            vec![x53(), ids(&[1], &[1]), f64s(&[5, 1], 44)],
        ),
        ("embedding", vec![x53(), ids(&[2, 2], &[3, 0, 3, 1])]),
        ("slice {dim = 0, start = 1, end = 5, step = 2}", vec![x53()]),
        ("slice {dim = 1, start = 0, end = 3, step = 3}", vec![x53()]),
        ("copy_", vec![x53(), f64s(&[3], 45)]),
        (
            "fill_",
            vec![x53(), Value::new(DType::F64, vec![], vec![0.7]).unwrap()],
        ),
        ("add_", vec![x53(), f64s(&[1, 3], 46)]),
        ("mul_", vec![x53(), f64s(&[5, 3], 47)]),
        ("mul_", vec![x53(), f64s(&[5, 1], 48)]),
    ]
}

/// Convolutions: 1-, 2- and 3-d, stride, padding, dilation, groups, depthwise, transposed
/// (with output padding), a batch of one.
fn convolution_cases() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "convolution {stride = [2], padding = [1]}",
            vec![f64s(&[2, 4, 7], 61), f64s(&[3, 4, 3], 62)],
        ),
        (
            "convolution {stride = [1], padding = [1], groups = 2}",
            vec![f64s(&[2, 4, 5], 63), f64s(&[6, 2, 3], 64)],
        ),
        (
            "convolution {stride = [2, 1], padding = [1, 0], dilation = [1, 2]}",
            vec![f64s(&[1, 2, 5, 6], 65), f64s(&[3, 2, 3, 2], 66)],
        ),
        (
            "convolution {stride = [1, 1], padding = [1, 1], groups = 3}",
            vec![f64s(&[2, 3, 4, 4], 67), f64s(&[3, 1, 3, 3], 68)],
        ),
        (
            "convolution {stride = [1, 1, 2]}",
            vec![f64s(&[1, 2, 3, 3, 4], 69), f64s(&[2, 2, 2, 2, 2], 70)],
        ),
        (
            "convolution {stride = [2], padding = [1], transposed = true, output_padding = [1], groups = 2}",
            vec![f64s(&[2, 4, 3], 71), f64s(&[4, 3, 3], 72)],
        ),
        (
            "convolution {stride = [2], dilation = [2], transposed = true, groups = 2}",
            vec![f64s(&[1, 2, 3], 73), f64s(&[2, 1, 2], 74)],
        ),
        (
            "convolution {stride = [1, 2], padding = [0, 1], transposed = true}",
            vec![f64s(&[1, 3, 2, 3], 75), f64s(&[3, 2, 2, 3], 76)],
        ),
    ]
}

#[test]
fn convolution_rules_match_finite_differences() {
    for (text, inputs) in convolution_cases() {
        check_op(text, inputs);
    }
}

/// Every row of the table with a rule is checked against finite differences: the unary and
/// binary families by the loops above, every other row by at least one case of the lists
/// (so a new op's rule cannot go unchecked; a row without a rule must be declared
/// non-differentiable, the table has no third choice).
#[test]
fn every_rule_has_a_finite_difference_case() {
    let cases: Vec<(&str, Vec<Value>)> = structural_cases()
        .into_iter()
        .chain(composite_cases())
        .chain(indexing_cases())
        .chain(convolution_cases())
        .chain([("where", vec![])])
        .collect();
    let checked: std::collections::HashSet<String> = cases
        .iter()
        .map(|(t, _)| kiln_ir::text::parse_op(t).unwrap().name().to_string())
        .collect();
    let families: std::collections::HashSet<&str> = UnaryOp::ALL
        .iter()
        .map(|u| u.name())
        .chain(BinaryOp::ALL.iter().map(|b| b.name()))
        .collect();
    let unchecked: Vec<&str> = kiln_ir::ops::rows()
        .into_iter()
        .filter(|r| matches!(r.derivative, Derivative::Rule(_)))
        .map(|r| r.name)
        .filter(|n| !families.contains(n) && !checked.contains(*n))
        .collect();
    assert!(unchecked.is_empty(), "rules without a case: {unchecked:?}");
}
