//! Guards and recompiles, in the style of torch's test_recompiles / test_guards: every
//! compiled result is compared with eager.

use kiln::{compile, compile_with, Backend, CompileOptions, DType, Dim, Dynamic, Result, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed).unwrap()
}

/// Compiled must equal eager within f32 tolerance (the cpu backend's generated code may
/// round differently and sums in another order: 1e-4 relative, 1e-5 absolute); NaN
/// matches NaN. The generated code's own accuracy is tested op by op with tighter bounds in
/// tests/tests/cpu_differential.rs.
fn assert_same(compiled: &Tensor, eager: &Tensor) {
    assert_eq!(compiled.shape(), eager.shape());
    assert_eq!(compiled.dtype(), eager.dtype());
    let (a, b) = (compiled.to_vec_f64().unwrap(), eager.to_vec_f64().unwrap());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-4 * y.abs() + 1e-5,
            "element {i}: compiled {x} vs eager {y}"
        );
    }
}

fn model(w: &Tensor) -> impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + '_ {
    move |x: &Tensor| {
        let h = x.matmul(w)?;
        let h = (&h.tanh()? * 1.5)?;
        (&h + x.sum(&[1], true)?)?.sigmoid()
    }
}

#[test]
fn same_shapes_twice_compile_once() {
    let w = randn(&[16, 16], 1);
    let f = model(&w);
    let cf = compile(&f);
    let x = randn(&[4, 16], 2);
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    let x2 = randn(&[4, 16], 3);
    assert_same(&cf.call(&x2).unwrap(), &f(&x2).unwrap());
    let s = cf.stats();
    assert_eq!(
        (s.compiles, s.traces, s.cache_hits, s.entries),
        (1, 1, 1, 1)
    );
    assert_eq!(s.recompiles, 0);
}

#[test]
fn new_batch_size_recompiles_once_then_dim_is_symbolic() {
    let w = randn(&[16, 16], 1);
    let f = model(&w);
    let cf = compile(&f);
    for (i, b) in [4usize, 8, 5, 17, 5, 8, 4].into_iter().enumerate() {
        let x = randn(&[b, 16], 10 + i as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    let s = cf.stats();
    assert_eq!(s.compiles, 2, "{s:?}");
    assert_eq!(s.recompiles, 1);
    assert_eq!(s.entries, 2);
    // traces: 4 and 8 compile; 5 and 17 are new sizes for the symbolic entry and are
    // checked once each by a trace; the repeats are plain hits
    assert_eq!(s.traces, 4, "{s:?}");
    let guards = cf.guards();
    assert_eq!(guards[0].args[0].dims, vec![Dim::Const(4), Dim::Const(16)]);
    assert_eq!(guards[1].args[0].dims, vec![Dim::sym("s0"), Dim::Const(16)]);
    let text = cf.graphs()[1].to_string();
    assert!(text.contains("f32[s0,16]"), "{text}");
}

#[test]
fn dtype_change_recompiles_without_symbols() {
    let f = |x: &Tensor| &x.exp()? + 1.0;
    let cf = compile(f);
    let x = randn(&[3, 5], 1);
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    let x64 = x.cast(DType::F64).unwrap();
    assert_same(&cf.call(&x64).unwrap(), &f(&x64).unwrap());
    let s = cf.stats();
    assert_eq!((s.compiles, s.recompiles), (2, 1));
    assert!(cf.guards().iter().all(|g| g.symbols().is_empty()));
    assert_eq!(cf.guards()[1].args[0].dtype, DType::F64);
}

#[test]
fn cache_limit_falls_back_to_eager_with_one_warning() {
    let f = |x: &Tensor| x.relu()?.mul(2.0);
    let cf = compile_with(
        f,
        CompileOptions::default()
            .dynamic(Dynamic::Never)
            .cache_limit(2)
            .name("limited"),
    );
    for n in [3usize, 4, 5, 6, 7] {
        let x = randn(&[n], n as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    let s = cf.stats();
    assert_eq!(s.compiles, 2);
    assert_eq!(s.entries, 2);
    let why = s.eager_fallback.expect("fell back");
    assert!(why.contains("cache_limit (2)"), "{why}");
    assert!(why.contains("arg0: size of dim 0 changed"), "{why}");
    assert!(why.contains("f32[4]") && why.contains("f32[5]"), "{why}");
    // the fallback is for good: a shape that had an entry now runs eagerly too
    let traces = s.traces;
    let x = randn(&[3], 99);
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    assert_eq!(cf.stats().traces, traces);
    assert_eq!(cf.stats().cache_hits, 0);
}

#[test]
fn dynamic_never_compiles_each_size() {
    let f = |x: &Tensor| x.sin();
    let cf = compile_with(f, CompileOptions::default().dynamic(Dynamic::Never));
    for n in [3usize, 4, 5] {
        let x = randn(&[n, 2], n as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 3);
    assert!(cf.guards().iter().all(|g| g.symbols().is_empty()));
}

#[test]
fn mark_dynamic_makes_the_first_compile_symbolic() {
    let f = |x: &Tensor| x.softmax(-1);
    let cf = compile_with(f, CompileOptions::default().mark_dynamic(0, 0));
    for n in [6usize, 9, 2, 33] {
        let x = randn(&[n, 7], n as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 1);
    assert_eq!(
        cf.guards()[0].args[0].dims,
        vec![Dim::sym("s0"), Dim::Const(7)]
    );
    // the method form, before the first call
    let cf2 = compile(f);
    cf2.mark_dynamic(0, 1);
    for n in [3usize, 4] {
        let x = randn(&[2, n], n as u64);
        assert_same(&cf2.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf2.stats().compiles, 1);
}

#[test]
fn dynamic_always_and_size_one_specialises() {
    let f = |x: &Tensor| x + &x.mean(&[0], true)?;
    let cf = compile_with(f, CompileOptions::default().dynamic(Dynamic::Always));
    for n in [4usize, 9] {
        let x = randn(&[n, 3], n as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 1);
    // size 1 broadcasts differently: the symbol does not stand for it
    let x = randn(&[1, 3], 5);
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    assert_eq!(cf.stats().compiles, 2);
}

#[test]
fn symbolic_batch_through_reshape_and_transpose() {
    // attention-style head split: the batch and sequence sizes come from the input
    let f = |x: &Tensor| {
        let (b, s, d) = (
            x.shape()[0] as i64,
            x.shape()[1] as i64,
            x.shape()[2] as i64,
        );
        let h = x.reshape(&[b, s, 2, d / 2])?.transpose(1, 2)?;
        let scores = h.matmul(&h.transpose(2, 3)?)?.softmax(-1)?;
        scores.matmul(&h)?.transpose(1, 2)?.reshape(&[b, s, d])
    };
    let cf = compile(f);
    for (i, (b, s)) in [(2usize, 5usize), (3, 5), (7, 5), (4, 5)]
        .into_iter()
        .enumerate()
    {
        let x = randn(&[b, s, 8], i as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 2);
    // now the sequence length changes too: one more compile, then both are symbols
    for (i, (b, s)) in [(3usize, 6usize), (5, 9), (2, 3)].into_iter().enumerate() {
        let x = randn(&[b, s, 8], 50 + i as u64);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.stats().compiles, 3, "{:?}", cf.guards());
}

#[test]
fn a_literal_equal_to_a_symbol_is_not_generalised() {
    // ones(&[4]) is a literal 4 that happens to equal the batch size of the first call:
    // the symbolic entry must not turn it into the batch size
    let f = |x: &Tensor| Tensor::ones(&[4], DType::F32)?.mul(&x.sum(&[], false)?);
    let cf = compile_with(f, CompileOptions::default().mark_dynamic(0, 0));
    for n in [4usize, 8, 6] {
        let x = randn(&[n], n as u64);
        let out = cf.call(&x).unwrap();
        assert_eq!(out.shape(), &[4]);
        assert_same(&out, &f(&x).unwrap());
    }
}

#[test]
fn non_contiguous_inputs_hit_the_same_entry() {
    let f = |x: &Tensor| (x * 3.0)?.tanh();
    let cf = compile(f);
    let base = randn(&[6, 5], 1);
    let xt = base.t().unwrap();
    let xc = xt.contiguous().unwrap();
    assert_same(&cf.call(&xc).unwrap(), &f(&xc).unwrap());
    assert_same(&cf.call(&xt).unwrap(), &f(&xt).unwrap());
    assert_eq!(cf.stats().compiles, 1);
    assert_eq!(cf.guards()[0].args[0].contiguous, None);
}

#[test]
fn interp_backend_matches_eager() {
    let w = randn(&[16, 16], 1);
    let f = model(&w);
    let cf = compile_with(&f, CompileOptions::default().backend(Backend::Interp));
    for b in [1usize, 3, 3, 7] {
        let x = randn(&[b, 16], b as u64);
        let (c, e) = (cf.call(&x).unwrap(), f(&x).unwrap());
        let (c, e) = (c.to_vec_f64().unwrap(), e.to_vec_f64().unwrap());
        for (a, b) in c.iter().zip(&e) {
            assert!((a - b).abs() <= 1e-5 * b.abs() + 1e-6, "{a} vs {b}");
        }
    }
}

#[test]
fn multiple_arguments_and_outputs() {
    let f = |(a, b): &(Tensor, Tensor)| -> Result<(Tensor, Tensor)> {
        let s = (a + b)?;
        Ok((s.exp()?, (a * b)?.sum(&[0], false)?))
    };
    let cf = compile(f);
    let args = (randn(&[3, 4], 1), randn(&[4], 2));
    let (c0, c1) = cf.call(&args).unwrap();
    let (e0, e1) = f(&args).unwrap();
    assert_same(&c0, &e0);
    assert_same(&c1, &e1);
    let g = |xs: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![xs[0].neg()?, xs[1].clone()]) };
    let cg = compile(g);
    let xs = vec![randn(&[2], 1), randn(&[5], 2)];
    let out = cg.call(&xs).unwrap();
    assert_same(&out[0], &xs[0].neg().unwrap());
    // an argument returned as is stays the caller's tensor
    assert!(out[1].shares_storage(&xs[1]));
}

#[test]
fn op_errors_inside_a_trace_are_the_eager_errors_with_the_source_line() {
    let line = line!() + 1;
    let f = |(a, b): &(Tensor, Tensor)| a + b;
    let cf = compile(f);
    let args = (randn(&[3, 4], 1), randn(&[5], 2));
    let compiled = cf.call(&args).unwrap_err().to_string();
    let eager = f(&args).unwrap_err().to_string();
    // the eager error (naming the op and the shapes), then the user's line
    assert!(compiled.starts_with(&eager), "{compiled}");
    assert!(compiled.contains("f32[3,4], f32[5]"), "{compiled}");
    assert!(
        compiled.contains(&format!(
            "at frontend/tests/compile_guards.rs:{line}:41 (while tracing @compiled)"
        )),
        "{compiled}"
    );
    assert_eq!(cf.stats().entries, 0);
}

#[test]
fn compiled_fn_is_send_and_sync() {
    fn check<T: Send + Sync>(_: &T) {}
    let cf = compile(|x: &Tensor| x.relu());
    check(&cf);
}

/// Collects the messages of `kiln::rules` events (what `KILN_LOGS=rules` prints).
struct RulesLog(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for RulesLog {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "kiln::rules"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0.lock().unwrap().push(m.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Compiles and calls `f` on `x` with `opts`, returning the result and what the optimiser
/// logged about rules.
fn call_logging_rules(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync,
    x: &Tensor,
    opts: CompileOptions,
) -> (Result<Tensor>, String) {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = tracing::subscriber::with_default(RulesLog(lines.clone()), || {
        compile_with(f, opts).call(x)
    });
    let log = lines.lock().unwrap().join("\n");
    (out, log)
}

/// Value-changing rewrites run only when asked for: without `fast_math` a division by a
/// literal divides, bit for bit as eager does, and no fast-math rule fires; with it the
/// optimiser may multiply by the reciprocal (the rule fires; results within an ulp of
/// eager). An unknown rule name is an error that names it.
#[test]
fn fast_math_is_an_explicit_option() {
    let x = Tensor::randn(&[4096], DType::F32, 31).unwrap();
    let f = |x: &Tensor| x / 3.0;
    let eager = f(&x).unwrap().to_vec::<f32>().unwrap();
    let (exact, log) = call_logging_rules(f, &x, CompileOptions::default());
    assert!(!log.contains("div-literal"), "{log}");
    let xs = x.to_vec::<f32>().unwrap();
    for (i, (a, b)) in exact
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&eager)
        .enumerate()
    {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "x[{i}] = {:e}: compiled {a:e} vs eager {b:e}",
            xs[i]
        );
    }
    let (fast, log) = call_logging_rules(f, &x, CompileOptions::default().fast_math(true));
    assert!(
        log.contains("div-literal"),
        "fast_math reached the optimiser: {log}"
    );
    for (a, b) in fast.unwrap().to_vec::<f32>().unwrap().iter().zip(&eager) {
        let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
        assert!(ulps <= 1, "fast_math: {a} vs eager {b}");
    }
    let err = compile_with(f, CompileOptions::default().disable_rule("no-such-rule"))
        .call(&x)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-rule"), "{err}");
}
