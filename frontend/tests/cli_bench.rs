//! `kiln bench` end to end: a quick run on two workloads writes JSON of the documented
//! shape with every result verified (the times themselves are not checked), so does a
//! quick run of the three training workloads, and bad arguments fail with messages that
//! name the valid choices.

mod common;

use common::kiln;
use serde_json::Value;

/// A positive, finite number.
fn positive(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

#[test]
fn quick_bench_writes_verified_json() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-cli-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("bench.json");
    let (ok, out, err) = kiln(&[
        "bench",
        "--quick",
        "--workload",
        "softmax",
        "--workload",
        "mlp",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("softmax") && out.contains("mlp"), "{out}");
    assert!(out.contains("machine:") && out.contains("limits:"), "{out}");

    let text = std::fs::read_to_string(&json).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    for key in ["kiln_version", "machine", "limits", "results"] {
        assert!(doc.get(key).is_some(), "missing {key}: {text}");
    }
    assert!(!doc["kiln_version"].as_str().unwrap().is_empty());

    let machine = &doc["machine"];
    assert!(!machine["cpu"].as_str().unwrap().is_empty());
    assert!(machine["cores"].as_u64().unwrap() >= 1);
    assert!(machine["isa"].is_array());

    positive(&doc["limits"]["dram_bandwidth_gbs"], "dram_bandwidth_gbs");
    positive(&doc["limits"]["gemm_gflops"], "gemm_gflops");

    let results = doc["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["softmax", "mlp"]);
    let keys = [
        "workload",
        "backend",
        "eager_ms",
        "compiled_ms",
        "speedup",
        "gbs",
        "gflops",
        "fraction_of_limit",
        "compile_ms",
        "limit",
        "verified",
    ];
    for r in results {
        let w = r["workload"].as_str().unwrap();
        for key in keys {
            assert!(r.get(key).is_some(), "{w}: missing {key}");
        }
        assert_eq!(r["backend"], "cpu", "the default backend is cpu");
        assert_eq!(r["verified"], true, "{w}: {r}");
        for key in keys {
            if key != "workload" && key != "backend" && key != "verified" && !r[key].is_null() {
                positive(&r[key], &format!("{w}.{key}"));
            }
        }
        for key in [
            "eager_ms",
            "compiled_ms",
            "speedup",
            "fraction_of_limit",
            "compile_ms",
            "limit",
        ] {
            assert!(!r[key].is_null(), "{w}.{key} is null");
        }
    }
    let (softmax, mlp) = (&results[0], &results[1]);
    assert!(softmax["gflops"].is_null());
    positive(&softmax["gbs"], "softmax.gbs");
    assert!(mlp["gbs"].is_null());
    positive(&mlp["gflops"], "mlp.gflops");
    for r in results {
        assert_eq!(r["kind"], "forward");
        positive(&r["eager_peak_bytes"], "eager_peak_bytes");
        positive(&r["compiled_peak_bytes"], "compiled_peak_bytes");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The training workloads at their quick shapes: a row each, verified (the compiled step's
/// losses follow the eager ones), with step times, GFLOP/s against the GEMM peak from 3x
/// the forward's flops, compile times and the peak memory of both sides.
#[test]
fn quick_training_bench_writes_verified_rows() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-cli-bench-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("train.json");
    let (ok, out, err) = kiln(&[
        "bench",
        "--quick",
        "--workload",
        "train_mlp,train_block,train_minilm",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("train_*: one step"), "{out}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let gemm = positive(&doc["limits"]["gemm_gflops"], "gemm_gflops");
    let results = doc["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["train_mlp", "train_block", "train_minilm"]);
    for r in results {
        let w = r["workload"].as_str().unwrap();
        assert_eq!(r["verified"], true, "{w}: {r}");
        assert_eq!(r["kind"], "train", "{w}");
        assert!(r["error"].is_null(), "{w}: {r}");
        assert!(r["gbs"].is_null(), "{w}");
        for key in [
            "eager_ms",
            "compiled_ms",
            "speedup",
            "gflops",
            "flops",
            "fraction_of_limit",
            "compile_ms",
            "first_step_ms",
            "eager_peak_bytes",
            "compiled_peak_bytes",
        ] {
            positive(&r[key], &format!("{w}.{key}"));
        }
        assert_eq!(r["limit"].as_f64(), Some(gemm), "{w}");
        assert_eq!(r["limit_unit"], "GFLOP/s", "{w}");
        let gflops = r["flops"].as_f64().unwrap() / r["compiled_ms"].as_f64().unwrap() / 1e6;
        assert!(
            (r["gflops"].as_f64().unwrap() / gflops - 1.0).abs() < 1e-9,
            "{w}"
        );
        assert!(
            r["first_step_ms"].as_f64() >= r["compile_ms"].as_f64(),
            "{w}"
        );
        let losses = |key: &str| -> Vec<f64> {
            r[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let (e, c) = (losses("eager_losses"), losses("compiled_losses"));
        assert_eq!((e.len(), c.len()), (3, 3), "{w}");
        for (a, b) in e.iter().zip(&c) {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "{w}: eager {e:?} compiled {c:?}"
            );
        }
        assert!(r["rel_error"].as_f64().unwrap() <= 1e-4, "{w}");
    }
    assert!(results[2]["throughput"]["unit"] == "sentences");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_backends_name_the_available_ones() {
    let (ok, _, err) = kiln(&["bench", "--quick", "--backend", "cuda"]);
    assert!(!ok);
    assert!(err.contains("cuda"), "{err}");
    assert!(
        err.contains("cpu") && err.contains("eager") && err.contains("interp"),
        "{err}"
    );
}

#[test]
fn unknown_workloads_list_the_names() {
    let (ok, _, err) = kiln(&["bench", "--quick", "--workload", "resnet"]);
    assert!(!ok);
    assert!(err.contains("resnet"), "{err}");
    for name in [
        "pointwise",
        "layernorm",
        "softmax",
        "reduce",
        "mlp",
        "block",
        "tiny",
        "minilm",
        "train_mlp",
        "train_block",
        "train_minilm",
    ] {
        assert!(err.contains(name), "{err}");
    }
}

/// `--profile` lists each workload's compiled kernels under the report: a row per kernel
/// with its kind, calls and ops, and the time by kind.
#[test]
fn profile_lists_the_compiled_kernels_of_each_workload() {
    let (ok, out, err) = kiln(&[
        "bench",
        "--quick",
        "--profile",
        "--workload",
        "mlp,train_mlp",
    ]);
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    for w in ["mlp", "train_mlp"] {
        let head = format!("## {w}: compiled kernels");
        let at = out
            .find(&head)
            .unwrap_or_else(|| panic!("no {head}:\n{out}"));
        let table = &out[at..];
        let table = &table[..table[3..].find("## ").map_or(table.len(), |e| e + 3)];
        assert!(table.contains("matmul kernels:"), "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.contains(" matmul ") && l.contains("matmul")),
            "{w}: no GEMM kernel row:\n{table}"
        );
    }
}
