//! The `kiln` binary end to end: dump, run on both backends, safetensors in and out,
//! and errors with line:column and a non-zero exit.

mod common;

use common::{kiln, tmp};

const MLP: &str = "graph @mlp(%x: f32[B,3], %w: f32[3,2]) -> f32[B,2] {
  %0 = matmul %x, %w                       : f32[B,2]
  %1 = relu %0                             : f32[B,2]
  return %1
}
";

#[test]
fn dump_prints_the_canonical_form() {
    let f = tmp("mlp.kir", MLP);
    let (ok, out, err) = kiln(&["dump", f.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(out, MLP);
}

#[test]
fn run_interp_and_eager_agree_and_save_outputs() {
    let f = tmp("mlp2.kir", MLP);
    let o1 = f.with_file_name("o1.safetensors");
    let o2 = f.with_file_name("o2.safetensors");
    let (ok, out, err) = kiln(&[
        "run",
        f.to_str().unwrap(),
        "--dim",
        "B=5",
        "--seed",
        "3",
        "--output",
        o1.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("out0: f32[5,2]"), "{out}");
    let (ok, _, err) = kiln(&[
        "run",
        f.to_str().unwrap(),
        "--dim",
        "B=5",
        "--seed",
        "3",
        "--backend",
        "eager",
        "--output",
        o2.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let a = kiln::io::load(&o1).unwrap();
    let b = kiln::io::load(&o2).unwrap();
    assert_eq!(a[0].0, "out0");
    let (x, y) = (a[0].1.to_vec_f64().unwrap(), b[0].1.to_vec_f64().unwrap());
    assert!(
        x.iter()
            .zip(&y)
            .all(|(p, q)| (p - q).abs() <= 1e-5 * (1.0 + q.abs())),
        "{x:?} vs {y:?}"
    );
}

#[test]
fn run_reads_named_inputs_from_safetensors() {
    let f = tmp("mlp3.kir", MLP);
    let inputs = f.with_file_name("in.safetensors");
    let x = kiln::Tensor::from_vec(vec![1.0f32, -1.0, 2.0, 0.5, 0.5, 0.5], &[2, 3]).unwrap();
    let w = kiln::Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]).unwrap();
    kiln::io::save(&inputs, &[("x".into(), x), ("w".into(), w)]).unwrap();
    let out = f.with_file_name("out.safetensors");
    let (ok, stdout, err) = kiln(&[
        "run",
        f.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("out0: f32[2,2]"), "{stdout}");
    let r = kiln::io::load(&out).unwrap();
    assert_eq!(r[0].1.to_vec::<f32>().unwrap(), vec![3.0, 1.0, 1.0, 1.0]);
}

#[test]
fn parse_errors_give_line_and_column_and_fail() {
    let f = tmp(
        "bad.kir",
        "graph @g(%x: f32[2]) -> f32[2] {\n  %0 = mull %x, %x : f32[2]\n  return %0\n}\n",
    );
    let (ok, _, err) = kiln(&["dump", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.kir:2:"), "{err}");
    assert!(err.contains("mull"), "{err}");
}

#[test]
fn missing_symbol_size_is_a_clear_error() {
    let f = tmp("mlp4.kir", MLP);
    let (ok, _, err) = kiln(&["run", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("--dim B=N"), "{err}");
}

#[test]
fn demo_runs() {
    let (ok, out, err) = kiln(&["demo"]);
    assert!(ok, "{err}");
    assert!(out.contains("max |eager - interpreter|"), "{out}");
}
