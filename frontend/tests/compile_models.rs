//! The model zoo compiled: every workload at small sizes, compiled (cpu, the default, and
//! the eager backend) vs eager (bit for bit on the eager backend, within 1e-4 on cpu) vs the
//! interpreter backend, and batch sizes changing between calls.

use kiln::models::{build, Model, NAMES};
use kiln::{compile, compile_with, Backend, CompileOptions, Tensor};

fn small(name: &str) -> Vec<usize> {
    match name {
        "pointwise" | "tiny" => vec![1027],
        "layernorm" | "softmax" => vec![7, 33],
        "reduce" => vec![9, 13],
        "mlp" => vec![3, 16],
        "block" => vec![2, 5, 16],
        "minilm" => vec![2, 7],
        other => panic!("no small shape for {other}"),
    }
}

fn data(ts: &[Tensor]) -> Vec<Vec<f64>> {
    ts.iter().map(|t| t.to_vec_f64().unwrap()).collect()
}

#[test]
fn every_model_compiled_equals_eager_and_the_interpreter() {
    for &name in NAMES {
        let model: Box<dyn Model> = build(name, Some(&small(name))).unwrap();
        let f = |xs: &[Tensor]| model.forward(xs);
        let cf = compile(f);
        let ce = compile_with(f, CompileOptions::default().backend(Backend::Eager));
        let ci = compile_with(f, CompileOptions::default().backend(Backend::Interp));
        for seed in 0..3 {
            let inputs = model.example_inputs(seed).unwrap();
            let eager = data(&f(&inputs).unwrap());
            assert_eq!(
                data(&ce.call(&inputs).unwrap()),
                eager,
                "{name} seed {seed}"
            );
            let cpu = data(&cf.call(&inputs).unwrap());
            for (a, b) in cpu.iter().flatten().zip(eager.iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs() + 1e-5,
                    "{name} seed {seed}: cpu {a} vs eager {b}"
                );
            }
            let interp = data(&ci.call(&inputs).unwrap());
            for (a, b) in interp.iter().flatten().zip(eager.iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs() + 1e-5,
                    "{name}: interp {a} vs eager {b}"
                );
            }
        }
        let s = cf.stats();
        assert_eq!(
            (s.compiles, s.cache_hits, s.graph_breaks),
            (1, 2, 0),
            "{name}"
        );
    }
}

#[test]
fn mlp_and_block_take_new_batch_sizes_with_one_recompile() {
    for (name, shapes) in [
        (
            "mlp",
            vec![vec![3, 16], vec![5, 16], vec![2, 16], vec![11, 16]],
        ),
        (
            "block",
            vec![
                vec![2, 5, 16],
                vec![3, 5, 16],
                vec![4, 5, 16],
                vec![7, 5, 16],
            ],
        ),
    ] {
        let model = build(name, Some(&shapes[0])).unwrap();
        let f = |xs: &[Tensor]| model.forward(xs);
        let cf = compile(f);
        for (i, shape) in shapes.iter().enumerate() {
            let x = vec![Tensor::randn(shape, kiln::DType::F32, i as u64).unwrap()];
            let (c, e) = (data(&cf.call(&x).unwrap()), data(&f(&x).unwrap()));
            assert_eq!(c.len(), e.len());
            for (a, b) in c.iter().flatten().zip(e.iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs() + 1e-5,
                    "{name} {shape:?}: cpu {a} vs eager {b}"
                );
            }
        }
        let s = cf.stats();
        assert_eq!(
            (s.compiles, s.recompiles),
            (2, 1),
            "{name}: {:?}",
            cf.guards()
        );
        assert_eq!(
            cf.guards()[1].symbols().len(),
            1,
            "{name}: {}",
            cf.guards()[1]
        );
    }
}
