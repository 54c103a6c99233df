//! `kiln train` end to end through the binary: AdamW past 95% training accuracy on the UCI
//! digits, the JSON report, `--fused` and `--compile` following the eager loss curve,
//! `--save` then `--init` giving back the same loss, SGD with momentum lowering the loss, a
//! CSV with `#` lines and a header, and clear errors for bad `--layers`.

mod common;

use common::{kiln, tmp};
use std::path::PathBuf;

fn digits() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/digits.csv")
        .display()
        .to_string()
}

fn read_json(path: &PathBuf) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn losses(doc: &serde_json::Value) -> Vec<f64> {
    doc["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// Three well-separated classes of 4 features (a blob around each of three centres, with
/// deterministic offsets), as CSV with a comment, a header and a comment between rows.
fn blobs(rows_per_class: usize) -> String {
    let centres = [
        [3.0, 0.0, 1.0, -2.0],
        [-2.0, 3.0, 0.0, 1.0],
        [0.0, -3.0, -2.0, 2.0],
    ];
    let mut text = String::from("# three blobs\na,b,c,d,label\n# made by the test\n");
    for i in 0..rows_per_class {
        for (label, c) in centres.iter().enumerate() {
            let row: Vec<String> = c
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    let offset = (((i * 7 + j * 3 + label * 5) % 11) as f64 - 5.0) * 0.15;
                    format!("{}", v + offset)
                })
                .collect();
            text += &format!("{},{label}\n", row.join(","));
        }
    }
    text
}

#[test]
fn adamw_trains_the_digits_past_95_percent_and_reports_json() {
    let json = tmp("digits.json", "");
    let data = digits();
    let (ok, out, err) = kiln(&[
        "train",
        "--data",
        &data,
        "--layers",
        "64,128,10",
        "--optimizer",
        "adamw",
        "--lr",
        "1e-3",
        "--steps",
        "300",
        "--batch",
        "64",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("1797 rows, 64 features, 10 classes"), "{out}");
    assert!(
        out.contains("train accuracy") && out.contains("steps/s"),
        "{out}"
    );
    // not a terminal: plain progress lines on stderr, the first step and every 50
    assert!(
        err.contains("step 1/300: loss") && err.contains("step 300/300"),
        "{err}"
    );
    let doc = read_json(&json);
    let l = losses(&doc);
    assert_eq!(l.len(), 300);
    assert!(l.iter().all(|v| v.is_finite()), "{l:?}");
    let acc = doc["train_accuracy"].as_f64().unwrap();
    assert!(acc >= 0.95, "train accuracy {acc}");
    assert_eq!(doc["rows"], 1797);
    assert!(doc["steps_per_second"].as_f64().unwrap() > 0.0);
    assert!(doc["final_loss"].as_f64().unwrap() < l[0] / 4.0, "{doc}");
    let o = &doc["options"];
    assert_eq!(o["layers"], serde_json::json!([64, 128, 10]));
    assert_eq!(o["optimizer"], "adamw");
    assert_eq!(o["lr"], 1e-3);
    assert_eq!(o["weight_decay"], 0.01);
    assert_eq!(
        (o["batch"].as_u64(), o["steps"].as_u64()),
        (Some(64), Some(300))
    );
    assert_eq!(o["shuffle"], serde_json::Value::Null);
}

/// `--fused` (one pass per parameter, all parameters in one loop) trains the same: the loss
/// curve follows the unfused one to rounding, and the accuracy passes 95%.
#[test]
fn fused_adamw_follows_the_unfused_loss_curve() {
    let data = digits();
    let mut curves = Vec::new();
    for fused in [false, true] {
        let json = tmp(&format!("fused_{fused}.json"), "");
        let mut args = vec![
            "train",
            "--data",
            &data,
            "--steps",
            "100",
            "--json",
            json.to_str().unwrap(),
        ];
        if fused {
            args.push("--fused");
        }
        let (ok, _, err) = kiln(&args);
        assert!(ok, "{err}");
        let doc = read_json(&json);
        assert_eq!(doc["options"]["fused"], fused);
        assert!(doc["train_accuracy"].as_f64().unwrap() >= 0.95, "{doc}");
        curves.push(losses(&doc));
    }
    for (k, (a, b)) in curves[0].iter().zip(&curves[1]).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs(),
            "step {k}: unfused {a} vs fused {b}"
        );
    }
}

/// `--compile` (forward and loss through `kiln::compile`, backward through the compiled
/// backward graph, the optimiser eager) trains as eager autograd does: over 100 steps each
/// loss is within 1e-4 (relative) of the eager one, with and without `--fused`, without a
/// recompile.
#[test]
fn compiled_training_follows_the_eager_loss_curve() {
    let data = digits();
    let run = |extra: &[&str]| {
        let json = tmp(&format!("compile{}.json", extra.join("")), "");
        let mut args = vec![
            "train",
            "--data",
            &data,
            "--steps",
            "100",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend(extra);
        let (ok, out, err) = kiln(&args);
        assert!(ok, "kiln train {extra:?}: {err}");
        (out, read_json(&json))
    };
    // the eager reference first: this half holds whether or not compiled training works
    let (_, eager) = run(&[]);
    assert_eq!(eager["options"]["compile"], false);
    assert_eq!(eager["compile"], serde_json::Value::Null);
    let eager_curve = losses(&eager);
    assert_eq!(eager_curve.len(), 100);

    for extra in [&["--compile"][..], &["--compile", "--fused"][..]] {
        let (out, doc) = run(extra);
        assert!(out.contains(", compiled"), "{out}");
        assert_eq!(doc["options"]["compile"], true);
        assert_eq!(doc["options"]["fused"], extra.len() == 2);
        let c = &doc["compile"];
        // every batch has the same shape: compiled on the first step, never again
        assert_eq!(c["recompiles"], 0, "{c}");
        assert!(c["graphs"].as_u64().unwrap() >= 1, "{c}");
        assert!(c["first_step_seconds"].as_f64().unwrap() > 0.0, "{c}");
        let curve = losses(&doc);
        assert_eq!(curve.len(), 100);
        for (k, (e, c)) in eager_curve.iter().zip(&curve).enumerate() {
            assert!(
                (e - c).abs() <= 1e-4 * e.abs(),
                "{extra:?} step {k}: eager {e} vs compiled {c}"
            );
        }
        assert!(doc["train_accuracy"].as_f64().unwrap() >= 0.95, "{doc}");
    }
}

#[test]
fn save_then_init_gives_back_the_same_loss() {
    // full batches (all 30 rows), so the step-0 loss of a run started from the saved
    // weights is the loss over the data the first run reports for them
    let csv = tmp("blobs_save.csv", &blobs(10));
    let (a_json, b_json) = (tmp("a.json", ""), tmp("b.json", ""));
    let weights = csv.with_file_name("trained.safetensors");
    let common = ["--layers", "4,8,3", "--batch", "30", "--lr", "0.01"];
    let mut args = vec![
        "train",
        csv.to_str().unwrap(),
        "--steps",
        "5",
        "--seed",
        "3",
    ];
    args.extend(common);
    args.extend(["--save", weights.to_str().unwrap()]);
    args.extend(["--json", a_json.to_str().unwrap()]);
    let (ok, _, err) = kiln(&args);
    assert!(ok, "{err}");
    let names: Vec<String> = kiln::io::load(&weights)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for n in ["0.weight", "0.bias", "2.weight", "2.bias"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    let mut args = vec!["train", csv.to_str().unwrap(), "--steps", "2"];
    args.extend(common);
    args.extend(["--init", weights.to_str().unwrap()]);
    args.extend(["--json", b_json.to_str().unwrap()]);
    let (ok, out, err) = kiln(&args);
    assert!(ok, "{err}");
    assert!(out.contains("from "), "{out}");
    let (a, b) = (read_json(&a_json), read_json(&b_json));
    assert_eq!(
        losses(&b)[0],
        a["final_loss"].as_f64().unwrap(),
        "step 0 from the saved weights"
    );
    assert_ne!(
        losses(&b)[0],
        losses(&a)[0],
        "the saved weights are the trained ones"
    );

    // a file whose names do not fit the layers is refused, naming the keys
    let mut args = vec!["train", csv.to_str().unwrap(), "--layers", "4,6,5,3"];
    args.extend(["--init", weights.to_str().unwrap()]);
    let (ok, _, err) = kiln(&args);
    assert!(!ok);
    assert!(
        err.contains("missing key(s): [\"4.weight\", \"4.bias\"]"),
        "{err}"
    );
    assert!(err.contains("size mismatch for 0.weight"), "{err}");
}

#[test]
fn sgd_with_momentum_lowers_the_loss() {
    let csv = tmp("blobs_sgd.csv", &blobs(20));
    let json = tmp("sgd.json", "");
    let (ok, out, err) = kiln(&[
        "train",
        csv.to_str().unwrap(),
        "--layers",
        "4,16,3",
        "--optimizer",
        "sgd",
        "--lr",
        "0.05",
        "--momentum",
        "0.9",
        "--batch",
        "12",
        "--steps",
        "40",
        "--shuffle",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("60 rows, 4 features, 3 classes"), "{out}");
    let doc = read_json(&json);
    let l = losses(&doc);
    let first: f64 = l[..5].iter().sum::<f64>() / 5.0;
    let last: f64 = l[l.len() - 5..].iter().sum::<f64>() / 5.0;
    assert!(last < first / 4.0, "{first} -> {last}: {l:?}");
    assert!(doc["train_accuracy"].as_f64().unwrap() >= 0.95, "{doc}");
    assert_eq!(doc["options"]["momentum"], 0.9);
    assert_eq!(doc["options"]["shuffle"], 1);
}

#[test]
fn a_csv_with_comments_and_a_header_parses_and_bad_rows_name_their_line() {
    let csv = tmp(
        "small.csv",
        "# c1\nx,y,label\n# c2\n1,2,0\n\n-1,0.5,1\n3,3,1\n",
    );
    let (ok, out, err) = kiln(&["train", csv.to_str().unwrap(), "--steps", "3"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("3 rows, 2 features, 2 classes") && out.contains("MLP 2,128,2"),
        "{out}"
    );
    let bad = tmp("bad.csv", "x,y,label\n1,2,0\n1,zz,1\n");
    let (ok, _, err) = kiln(&["train", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.csv:3") && err.contains("`zz`"), "{err}");
}

#[test]
fn bad_layers_are_clear_errors() {
    let csv = tmp("layers.csv", &blobs(2));
    let path = csv.to_str().unwrap();
    for (layers, says) in [
        ("5,8,3", "the first size must be the number of features, 4"),
        ("4", "give at least two sizes"),
        ("4,0,3", "none 0"),
        ("4,8,2", "must cover the labels, which go up to 2"),
    ] {
        let (ok, _, err) = kiln(&["train", path, "--layers", layers]);
        assert!(!ok, "--layers {layers}");
        assert!(err.contains(says), "--layers {layers}: {err}");
    }
    let (ok, _, err) = kiln(&["train", path, "--layers", "4,x"]);
    assert!(!ok && err.contains("--layers"), "{err}");
    let (ok, _, err) = kiln(&["train", path, "--momentum", "0.9"]);
    assert!(!ok && err.contains("--optimizer sgd"), "{err}");
}
