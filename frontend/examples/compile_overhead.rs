//! What a cache hit of `kiln::compile` costs per call, and how long tracing takes.
//!
//! `cargo run --release -p kiln --example compile_overhead`
//!
//! - hit overhead: a compiled identity function (a graph with no ops), so the time is the
//!   guard check, the argument flattening and the plan dispatch, nothing else;
//! - tiny and mlp: the guard check alone (`entry_for`: flatten the arguments, check every
//!   argument and parameter guard), and eager vs compiled (eager backend) medians timed in
//!   alternation in the same process; the difference is what compiling adds or saves per call;
//! - block: the time to trace the model (no compile, no run) and the first call.

use kiln::models::build;
use kiln::{compile, Tensor};
use std::time::Instant;

fn median_us(runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..runs.min(20) {
        f();
    }
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Medians of `a` and `b` timed in alternation, so that drift of the machine affects both.
fn paired_medians_us(runs: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    for _ in 0..runs.min(20) {
        a();
        b();
    }
    let time = |f: &mut dyn FnMut()| {
        let s = Instant::now();
        f();
        s.elapsed().as_secs_f64() * 1e6
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for i in 0..runs {
        if i % 2 == 0 {
            ta.push(time(&mut a));
            tb.push(time(&mut b));
        } else {
            tb.push(time(&mut b));
            ta.push(time(&mut a));
        }
    }
    ta.sort_by(f64::total_cmp);
    tb.sort_by(f64::total_cmp);
    (ta[runs / 2], tb[runs / 2])
}

fn main() -> kiln::Result<()> {
    let x = Tensor::randn(&[1024], kiln::DType::F32, 0)?;
    let id = compile(|x: &Tensor| Ok(x.clone()));
    id.call(&x)?;
    let hit = median_us(20000, || {
        id.call(&x).unwrap();
    });
    println!("cache hit overhead (identity, 0 ops): {hit:.2} µs per call");

    for (name, runs) in [("tiny", 5000usize), ("mlp", 50)] {
        let model = build(name, None)?;
        let inputs = model.example_inputs(0)?;
        let f = |xs: &[Tensor]| model.forward(xs);
        let cf = compile(f);
        let first = Instant::now();
        cf.call(&inputs)?;
        let compile_ms = first.elapsed().as_secs_f64() * 1e3;
        let (eager, compiled) = paired_medians_us(
            runs,
            || {
                f(&inputs).unwrap();
            },
            || {
                cf.call(&inputs).unwrap();
            },
        );
        let guards = median_us(20000, || {
            assert_eq!(cf.entry_for(&inputs), Some(0));
        });
        println!(
            "{name}: guard check {guards:.2} µs; eager {eager:.1} µs, compiled {compiled:.1} µs \
             (difference {:+.1} µs, compiled/eager {:.3}), first call {compile_ms:.2} ms",
            compiled - eager,
            compiled / eager
        );
    }

    let model = build("block", None)?;
    let inputs = model.example_inputs(0)?;
    let cf = compile(|xs: &[Tensor]| model.forward(xs));
    let trace = median_us(20, || {
        cf.capture(&inputs).unwrap();
    });
    let graphs = cf.capture(&inputs)?;
    let ops = graphs[0].len() - graphs[0].inputs().len();
    println!(
        "block: trace {:.3} ms for {ops} ops ({:.2} µs per op)",
        trace / 1e3,
        trace / ops as f64
    );
    Ok(())
}
