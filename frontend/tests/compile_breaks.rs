//! Graph breaks, fullgraph, explain, source locations, parameters by reference, threads.

use kiln::{compile, compile_with, explain, CompileOptions, DType, Error, Result, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed).unwrap()
}

/// Compiled must equal eager within f32 tolerance (the cpu backend's generated code may
/// round differently and sums in another order: 1e-4 relative, 1e-5 absolute); NaN
/// matches NaN. The generated code's own accuracy is tested op by op with tighter bounds in
/// tests/tests/cpu_differential.rs.
fn assert_same(compiled: &Tensor, eager: &Tensor) {
    assert_eq!(compiled.shape(), eager.shape());
    let (a, b) = (compiled.to_vec_f64().unwrap(), eager.to_vec_f64().unwrap());
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-4 * y.abs() + 1e-5,
            "element {i}: compiled {x} vs eager {y}"
        );
    }
}

/// The line of the `item()` call in `with_item` (checked against the reported location).
const ITEM_LINE: u32 = 31;

fn with_item(x: &Tensor) -> Result<Tensor> {
    let h = (x * 2.0)?.exp()?;
    let m = h.mean(&[], false)?;
    let scale = m.item()?;
    (&h / scale)?.tanh()
}

#[test]
fn one_item_in_the_middle_gives_two_graphs_and_one_break() {
    let x = randn(&[5, 3], 1);
    let report = explain(with_item, &x).unwrap();
    assert_eq!(report.graph_count(), 2, "{report}");
    assert_eq!(report.break_count(), 1);
    assert_eq!(report.ops_per_graph(), vec![3, 2], "{report}");
    let b = &report.breaks[0];
    assert_eq!(b.op, "item");
    assert!(b.reason.contains("reads a tensor's values"), "{}", b.reason);
    assert!(
        b.loc
            .ends_with(&format!("compile_breaks.rs:{ITEM_LINE}:19")),
        "{}",
        b.loc
    );
    let text = report.to_string();
    assert!(text.contains("2 graph(s), 1 graph break(s)"), "{text}");
    assert!(
        text.contains("cache entry 0 guards: arg0: f32[5,3]"),
        "{text}"
    );
    // compiled results equal eager on every call, and segments compile once
    let cf = compile(with_item);
    for seed in 0..3 {
        let x = randn(&[5, 3], seed);
        assert_same(&cf.call(&x).unwrap(), &with_item(&x).unwrap());
    }
    let s = cf.stats();
    // the first segment compiles once; the second holds the value read by `item()` as a
    // literal (as torch specialises on a Python float), so each new value compiles it
    assert_eq!(s.compiles, 1 + 3, "{s:?}");
    let x = randn(&[5, 3], 0);
    assert_same(&cf.call(&x).unwrap(), &with_item(&x).unwrap());
    assert_eq!(
        cf.stats().compiles,
        4,
        "the same value finds both segments compiled"
    );
    assert_eq!(s.graph_breaks, 3);
    assert_eq!(s.entries, 1);
}

#[test]
fn fullgraph_turns_the_break_into_an_error_naming_the_line() {
    let cf = compile_with(with_item, CompileOptions::default().fullgraph(true));
    let err = cf.call(&randn(&[5, 3], 1)).unwrap_err();
    match &err {
        Error::GraphBreak { op, loc, .. } => {
            assert_eq!(*op, "item");
            assert!(
                loc.contains(&format!("compile_breaks.rs:{ITEM_LINE}")),
                "{loc}"
            );
        }
        other => panic!("expected a graph-break error, got {other}"),
    }
    assert!(err.to_string().contains("fullgraph"), "{err}");
    assert_eq!(cf.stats().compiles, 0);
}

#[test]
fn data_dependent_branches_follow_the_data() {
    let f = |x: &Tensor| -> Result<Tensor> {
        let s = x.sum(&[], false)?;
        if s.item()? > 0.0 {
            x.exp()
        } else {
            x.neg()?.sin()
        }
    };
    let cf = compile(f);
    let pos = Tensor::from_vec(vec![1.0f32, 2.0, -0.5], &[3]).unwrap();
    let neg = Tensor::from_vec(vec![-1.0f32, 2.0, -3.5], &[3]).unwrap();
    for x in [&pos, &neg, &pos, &neg] {
        assert_same(&cf.call(x).unwrap(), &f(x).unwrap());
    }
    // sum, exp, neg+sin: three distinct segments, each compiled once
    assert_eq!(cf.stats().compiles, 3);
}

#[test]
fn in_place_update_of_a_captured_weight_is_seen() {
    let w = randn(&[4, 4], 1);
    let f = |x: &Tensor| x.matmul(&w)?.relu();
    let cf = compile(f);
    let x = randn(&[3, 4], 2);
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    w.add_(0.75).unwrap();
    w.mul_(-1.5).unwrap();
    let after = cf.call(&x).unwrap();
    assert_same(&after, &f(&x).unwrap());
    let s = cf.stats();
    assert_eq!((s.compiles, s.cache_hits), (1, 1));
    assert_eq!(cf.guards()[0].params.len(), 1, "the weight is a parameter");
    assert!(cf.graphs()[0].to_string().contains("%p1: f32[4,4]"));
}

/// A Linear weight big enough that the compiled matmul keeps its row-major copy between
/// calls (weight prepacking): every in-place update, an optimizer-like step included, is
/// still seen by the next call, and calls between updates reuse the copy.
#[test]
fn in_place_updates_of_a_prepacked_linear_weight_are_seen() {
    let w = randn(&[140, 128], 3);
    let b = randn(&[140], 4);
    let f = |x: &Tensor| x.linear(&w, Some(&b))?.relu();
    let cf = compile(f);
    let x = randn(&[300, 128], 5);
    for step in 0..4 {
        for _ in 0..3 {
            assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
        }
        if step % 2 == 0 {
            w.mul_(-1.25).unwrap();
        } else {
            let g = randn(&[140, 128], 10 + step);
            w.add_(&(&g * -0.1).unwrap()).unwrap();
        }
    }
    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    assert_eq!(cf.stats().compiles, 1);
}

#[test]
fn in_place_ops_inside_the_function_are_functional_or_run_eagerly_between_graphs() {
    // a view taken before an in-place update must see it, as in eager mode
    let f = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        let y = (x * 2.0)?;
        let z = y.t()?;
        y.add_(1.0)?;
        Ok(((&z * 3.0)?, y))
    };
    let cf = compile(f);
    let x = randn(&[3, 2], 4);
    for _ in 0..2 {
        let (c0, c1) = cf.call(&x).unwrap();
        let (e0, e1) = f(&x).unwrap();
        assert_same(&c0, &e0);
        assert_same(&c1, &e1);
    }
    // mutating an argument in place mutates the caller's tensor, once per call
    let g = |x: &Tensor| -> Result<Tensor> {
        x.mul_(2.0)?;
        x.exp()
    };
    let cg = compile(g);
    let a = randn(&[4], 5);
    let b = Tensor::from_vec(a.to_vec::<f32>().unwrap(), &[4]).unwrap();
    let ca = cg.call(&a).unwrap();
    let eb = g(&b).unwrap();
    assert_same(&ca, &eb);
    assert_same(&a, &b);
    // an update of an argument is functional inside the graph (written back after it):
    // no break, even under fullgraph
    let fg = compile_with(g, CompileOptions::default().fullgraph(true));
    let c = Tensor::from_vec(a.to_vec::<f32>().unwrap(), &[4]).unwrap();
    assert_same(&fg.call(&a).unwrap(), &g(&c).unwrap());
    assert_same(&a, &c);
    assert_eq!(fg.stats().graph_breaks, 0);
    // an update of a tensor a live view aliases still breaks: fullgraph says where
    let ff = compile_with(f, CompileOptions::default().fullgraph(true));
    let err = ff.call(&x).unwrap_err();
    assert!(matches!(err, Error::GraphBreak { op: "add_", .. }), "{err}");
}

#[test]
fn source_locations_appear_in_the_textual_ir() {
    let f = |x: &Tensor| x.sigmoid();
    let cf = compile(f);
    cf.call(&randn(&[2], 1)).unwrap();
    let text = cf.graphs()[0].to_string();
    assert!(text.contains("sigmoid %arg0"), "{text}");
    assert!(
        text.contains("# frontend/tests/compile_breaks.rs:"),
        "{text}"
    );
}

#[test]
fn concurrent_calls_from_four_threads_compile_once() {
    let w = randn(&[32, 32], 1);
    let f = |x: &Tensor| x.matmul(&w)?.gelu()?.softmax(-1);
    let cf = compile(f);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cf = &cf;
            let f = &f;
            s.spawn(move || {
                for i in 0..10 {
                    let x = randn(&[8, 32], 100 * t + i);
                    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
                }
            });
        }
    });
    let s = cf.stats();
    assert_eq!(s.compiles, 1, "{s:?}");
    assert_eq!(s.calls, 40);
    assert_eq!(s.cache_hits, 39);
}

#[test]
fn nested_compiled_functions_are_inlined() {
    let inner = compile(|x: &Tensor| x.exp());
    let outer = compile(|x: &Tensor| inner.call(x)?.mul(2.0));
    let x = randn(&[5], 1);
    assert_same(
        &outer.call(&x).unwrap(),
        &(&x.exp().unwrap() * 2.0).unwrap(),
    );
    assert_eq!(inner.stats().calls, 0);
    assert_eq!(outer.graphs()[0].len(), 3);
}

#[test]
fn tensors_made_inside_the_function_are_constants_not_parameters() {
    let f = |x: &Tensor| {
        let c = Tensor::from_vec(vec![1.0f32, -2.0, 0.5], &[3])?;
        x * &c
    };
    let cf = compile(f);
    for seed in 0..3 {
        let x = randn(&[2, 3], seed);
        assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
    }
    assert_eq!(cf.guards()[0].params.len(), 0);
    assert!(cf.graphs()[0].to_string().contains("from_vec"));
}

#[test]
fn printing_a_traced_tensor_is_a_break() {
    let f = |x: &Tensor| -> Result<Tensor> {
        let y = x.abs()?;
        let _shown = format!("{y}");
        y.sqrt()
    };
    let x = randn(&[3], 2);
    let report = explain(f, &x).unwrap();
    assert_eq!(report.break_count(), 1);
    assert_same(&compile(f).call(&x).unwrap(), &f(&x).unwrap());
}

#[test]
fn log_spec_parsing() {
    use kiln::compile::{parse_log_spec, LogCategory};
    assert_eq!(
        parse_log_spec("graphs, breaks,unknown"),
        vec![LogCategory::Graphs, LogCategory::Breaks]
    );
    assert_eq!(parse_log_spec("all").len(), 9);
    assert_eq!(parse_log_spec("tiers"), vec![LogCategory::Tiers]);
    assert_eq!(parse_log_spec("partition"), vec![LogCategory::Partition]);
    assert_eq!(parse_log_spec("rules"), vec![LogCategory::Rules]);
    assert_eq!(parse_log_spec("code"), vec![LogCategory::Code]);
}

#[test]
fn concurrent_calls_with_changing_batch_sizes_stay_correct() {
    let w = randn(&[16, 16], 2);
    let f = |x: &Tensor| x.matmul(&w)?.tanh()?.sum(&[1], false);
    let cf = compile(f);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (cf, f) = (&cf, &f);
            s.spawn(move || {
                for i in 0..12usize {
                    let x = randn(&[2 + (t + i) % 7, 16], (10 * t + i) as u64);
                    assert_same(&cf.call(&x).unwrap(), &f(&x).unwrap());
                }
            });
        }
    });
    let s = cf.stats();
    // at most: one static entry per size seen before the symbolic one, then the symbol
    assert!(s.compiles <= 4, "{s:?}");
    assert!(cf.guards().iter().any(|g| !g.symbols().is_empty()), "{s:?}");
}
