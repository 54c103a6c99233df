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
fn run_times_more_calls_with_the_kernel_table_of_those_calls() {
    let f = tmp("mlp_time.kir", MLP);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "run",
            f.to_str().unwrap(),
            "--dim",
            "B=7",
            "--backend",
            "cpu",
        ])
        .args(["--time", "25"])
        .env("KILN_PROFILE", "1")
        .env_remove("KILN_LOGS")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("out0: f32[7,2]"), "{stdout}");
    assert!(
        stdout.contains("time: 25 calls after the first, median "),
        "{stdout}"
    );
    // the table at exit counts the timed calls, not the first (compiling) one
    let matmul = stderr
        .lines()
        .find(|l| l.contains("matmul") && !l.starts_with("matmul kernels"))
        .unwrap_or_else(|| panic!("no kernel row: {stderr}"));
    let calls: Vec<&str> = matmul.split_whitespace().collect();
    assert_eq!(calls[3], "25", "{matmul}");
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

const LOSS: &str = "graph @loss(%x: f32[4,3], %w: f32[2,3], %b: f32[2], %ids: i64[4]) -> f32[] {
  %0 = linear %x, %w, %b                   : f32[4,2]
  %1 = tanh %0                             : f32[4,2]
  %2 = cast %ids {dtype = f32}             : f32[4]
  %3 = sum %1 {dims = [1]}                 : f32[4]
  %4 = mul %3, %2                          : f32[4]
  %5 = mean %4                             : f32[]
  return %5
}
";

/// `kiln grad` writes `out0` and `grad_<input>` for the floating inputs; the interpreter,
/// the eager runtime and generated CPU code agree; with known inputs the gradients are the
/// closed form's (`d/db = mean over rows of ids·(1 - tanh²)`).
#[test]
fn grad_writes_named_gradients_that_agree_across_backends() {
    let f = tmp("loss.kir", LOSS);
    let inputs = f.with_file_name("loss_in.safetensors");
    let x = kiln::Tensor::from_vec(
        vec![
            0.5f32, -1.0, 0.25, 1.5, 0.0, -0.5, 2.0, 1.0, -1.0, -0.25, 0.75, 0.125,
        ],
        &[4, 3],
    )
    .unwrap();
    let w = kiln::Tensor::from_vec(vec![0.1f32, -0.2, 0.3, 0.4, 0.5, -0.6], &[2, 3]).unwrap();
    let b = kiln::Tensor::from_vec(vec![0.05f32, -0.05], &[2]).unwrap();
    let ids = kiln::Tensor::from_vec(vec![1i64, 2, 0, 3], &[4]).unwrap();
    let named = [
        ("x", x.clone()),
        ("w", w.clone()),
        ("b", b.clone()),
        ("ids", ids),
    ];
    let named: Vec<(String, kiln::Tensor)> =
        named.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    kiln::io::save(&inputs, &named).unwrap();
    let mut results = Vec::new();
    for backend in ["interp", "eager", "cpu"] {
        let out = f.with_file_name(format!("grads_{backend}.safetensors"));
        let (ok, stdout, err) = kiln(&[
            "grad",
            f.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
            "--backend",
            backend,
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{backend}: {err}");
        assert!(stdout.contains("grad_w: f32[2,3]"), "{stdout}");
        let mut r = kiln::io::load(&out).unwrap();
        r.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["grad_b", "grad_w", "grad_x", "out0"], "{backend}");
        results.push(r);
    }
    // the closed form of d/db from the same inputs
    let (xv, wv, bv) = (
        x.to_vec::<f32>().unwrap(),
        w.to_vec::<f32>().unwrap(),
        b.to_vec::<f32>().unwrap(),
    );
    let idv = [1.0f64, 2.0, 0.0, 3.0];
    let mut db = [0.0f64; 2];
    for r in 0..4 {
        for o in 0..2 {
            let z: f64 = (0..3)
                .map(|k| f64::from(xv[r * 3 + k]) * f64::from(wv[o * 3 + k]))
                .sum::<f64>()
                + f64::from(bv[o]);
            db[o] += idv[r] * (1.0 - z.tanh().powi(2)) / 4.0;
        }
    }
    for r in &results {
        let got = r[0].1.to_vec_f64().unwrap();
        for o in 0..2 {
            assert!((got[o] - db[o]).abs() <= 1e-6, "grad_b {got:?} vs {db:?}");
        }
        for (k, (_, t)) in r.iter().enumerate() {
            let (a, c) = (
                t.to_vec_f64().unwrap(),
                results[0][k].1.to_vec_f64().unwrap(),
            );
            for (p, q) in a.iter().zip(&c) {
                assert!(
                    (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                    "{}: {a:?} vs {c:?}",
                    results[0][k].0
                );
            }
        }
    }
}

/// `--stage grad` and `--passes grad` print the joint graph; a non-scalar first output is
/// an error that says so.
#[test]
fn dump_and_opt_print_the_joint_graph() {
    let f = tmp("loss2.kir", LOSS);
    let (ok, out, err) = kiln(&["dump", f.to_str().unwrap(), "--stage", "grad"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("-> (f32[], f32[4,3], f32[2,3], f32[2])"),
        "{out}"
    );
    let (ok, out2, err) = kiln(&["opt", f.to_str().unwrap(), "--passes", "grad"]);
    assert!(ok, "{err}");
    assert_eq!(out, out2);
    let g = tmp("notscalar.kir", MLP);
    let (ok, _, err) = kiln(&["grad", g.to_str().unwrap(), "--dim", "B=2"]);
    assert!(!ok);
    assert!(err.contains("must be a floating scalar"), "{err}");
}

#[test]
fn dump_partition_lists_saved_tensors_against_eager_and_both_graphs() {
    let f = tmp("mlp_partition.kir", MLP);
    let (ok, out, err) = kiln(&["dump", f.to_str().unwrap(), "--stage", "partition"]);
    assert!(ok, "{err}");
    // relu's backward needs where its input was positive: the min cut saves that bool
    // mask (a quarter of the f32 result's bytes), with the two inputs the matmul's
    // gradients read
    assert!(
        out.contains("# partition of @mlp: saved 3 tensors"),
        "{out}"
    );
    assert!(out.contains("eager autograd saves"), "{out}");
    assert!(out.contains("gt : bool[B,2]"), "{out}");
    assert!(
        out.contains("graph @mlp(%x: f32[B,3], %w: f32[3,2]) -> (f32[B,2], bool[B,2])"),
        "{out}"
    );
    assert!(out.contains("graph @mlp_backward("), "{out}");
}
