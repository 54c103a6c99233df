//! The model zoo (`kiln::models`) at small shapes against independent f64 references
//! written as plain loops over the same input and weight values.

use kiln::models::{self, Block, Model, NAMES};
use kiln::{Error, Tensor};
use std::collections::HashMap;

const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= ATOL + RTOL * w.abs(),
            "{what}[{i}]: got {g}, want {w} (diff {})",
            (g - w).abs()
        );
    }
}

fn weights(m: &dyn Model) -> HashMap<&'static str, Vec<f64>> {
    m.weights()
        .into_iter()
        .map(|(n, w)| (n, w.to_vec_f64().unwrap()))
        .collect()
}

/// Builds `name` at `shape`, runs it on seed-7 inputs, checks the shapes, and returns
/// (model, inputs as f64, the single output as f64).
fn run(name: &str, shape: &[usize]) -> (Box<dyn Model>, Vec<f64>, Vec<f64>) {
    let m = models::build(name, Some(shape)).unwrap();
    assert_eq!(m.name(), name);
    assert_eq!(m.input_shapes(), vec![shape.to_vec()]);
    let inputs = m.example_inputs(7).unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].shape(), shape);
    let out = m.forward(&inputs).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>(),
        m.output_shapes()
    );
    (
        m,
        inputs[0].to_vec_f64().unwrap(),
        out[0].to_vec_f64().unwrap(),
    )
}

// ---- f64 references ----

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// erf to ~1e-14: Maclaurin series for |x| < 2.5, else the continued fraction of erfc.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        let (mut term, mut sum) = (a, a);
        for n in 1..100 {
            term *= -a * a / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut t = a;
        for n in (1..=80).rev() {
            t = a + (n as f64 / 2.0) / t;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
    };
    r.copysign(x)
}

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// `[m, k] @ [k, n] + bias[n]`
fn linear(a: &[f64], m: usize, k: usize, w: &[f64], n: usize, bias: &[f64]) -> Vec<f64> {
    assert_eq!((a.len(), w.len(), bias.len()), (m * k, k * n, n));
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = bias[j];
            for p in 0..k {
                acc += a[i * k + p] * w[p * n + j];
            }
            out[i * n + j] = acc;
        }
    }
    out
}

fn layer_norm(x: &[f64], cols: usize, w: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let inv = 1.0 / (var + eps).sqrt();
        out.extend(
            row.iter()
                .enumerate()
                .map(|(j, v)| (v - mean) * inv * w[j] + b[j]),
        );
    }
    out
}

fn softmax_rows(x: &[f64], cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - mx).exp()).collect();
        let s: f64 = e.iter().sum();
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// Pre-LN causal transformer block on `x: [b, s, d]` with `heads` heads.
fn block_ref(
    x: &[f64],
    b: usize,
    s: usize,
    d: usize,
    heads: usize,
    w: &HashMap<&str, Vec<f64>>,
) -> Vec<f64> {
    let hd = d / heads;
    let hidden = 4 * d;
    let mut out = Vec::with_capacity(b * s * d);
    for xb in x.chunks(s * d).take(b) {
        let h = layer_norm(xb, d, &w["ln1_w"], &w["ln1_b"], 1e-5);
        let q = linear(&h, s, d, &w["wq"], d, &w["bq"]);
        let k = linear(&h, s, d, &w["wk"], d, &w["bk"]);
        let v = linear(&h, s, d, &w["wv"], d, &w["bv"]);
        let mut att = vec![0.0; s * d];
        for hh in 0..heads {
            let c0 = hh * hd;
            for i in 0..s {
                // causal: i attends to j <= i
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..hd)
                            .map(|c| q[i * d + c0 + c] * k[j * d + c0 + c])
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let p = softmax_rows(&scores, scores.len());
                for c in 0..hd {
                    att[i * d + c0 + c] = (0..=i).map(|j| p[j] * v[j * d + c0 + c]).sum();
                }
            }
        }
        let o = linear(&att, s, d, &w["wo"], d, &w["bo"]);
        let x1: Vec<f64> = xb.iter().zip(&o).map(|(a, b)| a + b).collect();
        let h2 = layer_norm(&x1, d, &w["ln2_w"], &w["ln2_b"], 1e-5);
        let m: Vec<f64> = linear(&h2, s, d, &w["w1"], hidden, &w["b1"])
            .into_iter()
            .map(gelu_erf)
            .collect();
        let m = linear(&m, s, hidden, &w["w2"], d, &w["b2"]);
        out.extend(x1.iter().zip(&m).map(|(a, b)| a + b));
    }
    out
}

// ---- the models ----

#[test]
fn erf_reference_is_accurate() {
    // values from tables of erf
    for (x, want) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (2.5, 0.999_593_047_982_555),
        (3.0, 0.999_977_909_503_001_4),
        (-1.0, -0.842_700_792_949_714_9),
    ] {
        assert!((erf(x) - want).abs() < 1e-13, "erf({x}) = {}", erf(x));
    }
}

#[test]
fn pointwise_matches_reference() {
    let (_, x, y) = run("pointwise", &[1027]);
    let want: Vec<f64> = x
        .iter()
        .map(|&v| gelu_tanh(v * 1.5 + 0.5) * sigmoid(v))
        .collect();
    assert_close("pointwise", &y, &want);
}

#[test]
fn layernorm_matches_reference() {
    let (m, x, y) = run("layernorm", &[7, 33]);
    let w = weights(m.as_ref());
    assert_eq!(w["weight"].len(), 33);
    let want = layer_norm(&x, 33, &w["weight"], &w["bias"], 1e-5);
    assert_close("layernorm", &y, &want);
}

#[test]
fn softmax_matches_reference() {
    let (_, x, y) = run("softmax", &[5, 17]);
    assert_close("softmax", &y, &softmax_rows(&x, 17));
}

#[test]
fn reduce_matches_reference() {
    let (_, x, y) = run("reduce", &[9, 13]);
    let want: Vec<f64> = x
        .chunks(13)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    assert_close("reduce", &y, &want);
}

#[test]
fn mlp_matches_reference() {
    let (m, x, y) = run("mlp", &[3, 16]);
    let w = weights(m.as_ref());
    assert_eq!(w["w1"].len(), 16 * 64, "hidden is 4x");
    let h: Vec<f64> = linear(&x, 3, 16, &w["w1"], 64, &w["b1"])
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    let want = linear(&h, 3, 64, &w["w2"], 16, &w["b2"]);
    assert_close("mlp", &y, &want);
}

#[test]
fn block_matches_reference() {
    let (m, x, y) = run("block", &[2, 5, 16]);
    assert_eq!(Block::default_heads(16), Some(2));
    let w = weights(m.as_ref());
    assert_close("block", &y, &block_ref(&x, 2, 5, 16, 2, &w));
}

#[test]
fn block_with_eight_heads_matches_reference() {
    assert_eq!(Block::default_heads(64), Some(8));
    assert_eq!(Block::default_heads(40), Some(2));
    assert_eq!(Block::default_heads(7), None);
    let (m, x, y) = run("block", &[1, 6, 64]);
    let w = weights(m.as_ref());
    assert_close("block 8 heads", &y, &block_ref(&x, 1, 6, 64, 8, &w));
}

#[test]
fn block_forward_takes_batch_and_seq_from_the_input() {
    // built for [1, 3, 16] but run on [3, 7, 16]: b and s come from x.shape()
    let m = Block::new(1, 3, 16, 4).unwrap();
    assert_eq!(m.heads(), 4);
    let x = Tensor::randn(&[3, 7, 16], kiln::DType::F32, 11).unwrap();
    let y = m.forward(std::slice::from_ref(&x)).unwrap();
    assert_eq!(y[0].shape(), &[3, 7, 16]);
    let w = weights(&m);
    assert_close(
        "block [3,7,16]",
        &y[0].to_vec_f64().unwrap(),
        &block_ref(&x.to_vec_f64().unwrap(), 3, 7, 16, 4, &w),
    );
    assert!(Block::new(1, 3, 16, 3).is_err(), "3 heads do not divide 16");
}

#[test]
fn block_is_causal() {
    // changing the last position leaves the outputs of the earlier ones unchanged
    let m = models::build("block", Some(&[1, 4, 16])).unwrap();
    let x = m.example_inputs(3).unwrap();
    let mut v = x[0].to_vec::<f32>().unwrap();
    for e in &mut v[3 * 16..] {
        *e += 1.0;
    }
    let x2 = Tensor::from_vec(v, &[1, 4, 16]).unwrap();
    let y1 = m.forward(&x).unwrap()[0].to_vec_f64().unwrap();
    let y2 = m.forward(&[x2]).unwrap()[0].to_vec_f64().unwrap();
    assert_eq!(y1[..3 * 16], y2[..3 * 16]);
    assert_ne!(y1[3 * 16..], y2[3 * 16..]);
}

#[test]
fn tiny_matches_reference() {
    let (_, x, y) = run("tiny", &[1024]);
    let want: Vec<f64> = x
        .iter()
        .map(|&v0| {
            let mut v = v0;
            for i in 0..20 {
                let k = (i / 4) as f64;
                v = match i % 4 {
                    0 => v + (0.25 + 0.05 * k),
                    1 => v * (1.5 - 0.1 * k),
                    2 => v.tanh(),
                    _ => sigmoid(v),
                };
            }
            v
        })
        .collect();
    assert_close("tiny", &y, &want);
}

// ---- build, shapes, accounting ----

#[test]
fn build_knows_every_name_with_the_workloads_default_shapes() {
    /// (name, input shapes, output shape)
    type Defaults = (&'static str, Vec<Vec<usize>>, Vec<usize>);
    let defaults: [Defaults; 8] = [
        ("pointwise", vec![vec![16 << 20]], vec![16 << 20]),
        ("layernorm", vec![vec![8192, 1024]], vec![8192, 1024]),
        ("softmax", vec![vec![8192, 1024]], vec![8192, 1024]),
        ("reduce", vec![vec![4096, 4096]], vec![4096]),
        ("mlp", vec![vec![256, 1024]], vec![256, 1024]),
        ("block", vec![vec![4, 256, 512]], vec![4, 256, 512]),
        ("tiny", vec![vec![1024]], vec![1024]),
        // token ids, attention mask, positions
        ("minilm", vec![vec![8, 128]; 3], vec![8, 384]),
    ];
    assert_eq!(
        NAMES,
        defaults.iter().map(|(n, _, _)| *n).collect::<Vec<_>>()
    );
    for (name, inputs, output) in defaults {
        let m = models::build(name, None).unwrap();
        assert_eq!(m.name(), name);
        assert_eq!(m.input_shapes(), inputs, "{name}");
        assert_eq!(m.output_shapes(), vec![output], "{name}");
        assert_eq!(
            m.flops().is_some(),
            matches!(name, "mlp" | "block" | "minilm"),
            "{name}"
        );
        assert!(m.bytes() > 0.0);
    }
    let mlp = models::build("mlp", None).unwrap();
    let w = mlp.weights();
    let shapes: Vec<_> = w.iter().map(|(n, t)| (*n, t.shape().to_vec())).collect();
    assert_eq!(
        shapes,
        vec![
            ("w1", vec![1024, 4096]),
            ("b1", vec![4096]),
            ("w2", vec![4096, 1024]),
            ("b2", vec![1024]),
        ]
    );
    assert_eq!(mlp.flops(), Some(2.0 * 2.0 * 256.0 * 1024.0 * 4096.0));
    let elems = 256 * 1024 + 1024 * 4096 + 4096 + 4096 * 1024 + 1024 + 256 * 1024;
    assert_eq!(mlp.bytes(), (elems * 4) as f64);
    let reduce = models::build("reduce", None).unwrap();
    assert_eq!(reduce.bytes(), ((4096 * 4096 + 4096) * 4) as f64);
    let block = models::build("block", None).unwrap();
    let (b, s, d) = (4.0, 256.0, 512.0);
    assert_eq!(
        block.flops(),
        Some(24.0 * b * s * d * d + 4.0 * b * s * s * d)
    );
}

#[test]
fn weights_are_scaled_by_fan_in() {
    let m = models::build("mlp", Some(&[2, 256])).unwrap();
    let w = weights(m.as_ref());
    let std = |v: &[f64]| (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
    assert!(
        (std(&w["w1"]) - 1.0 / 16.0).abs() < 0.01,
        "{}",
        std(&w["w1"])
    );
    assert!(
        (std(&w["w2"]) - 1.0 / 32.0).abs() < 0.005,
        "{}",
        std(&w["w2"])
    );
    // fixed seeds: building twice gives the same weights
    let again = weights(models::build("mlp", Some(&[2, 256])).unwrap().as_ref());
    assert_eq!(w["w1"], again["w1"]);
}

#[test]
fn build_rejects_unknown_names_and_bad_shapes() {
    let is_invalid_listing_names = |e: Error| {
        let msg = e.to_string();
        assert!(matches!(e, Error::Invalid { .. }), "{msg}");
        for n in NAMES {
            assert!(msg.contains(n), "{msg} should list {n}");
        }
    };
    is_invalid_listing_names(models::build("resnet", None).err().unwrap());
    is_invalid_listing_names(models::build("mlp", Some(&[3])).err().unwrap());
    is_invalid_listing_names(models::build("pointwise", Some(&[2, 3])).err().unwrap());
    is_invalid_listing_names(models::build("softmax", Some(&[0, 3])).err().unwrap());
    is_invalid_listing_names(models::build("block", Some(&[1, 2, 7])).err().unwrap());
    is_invalid_listing_names(models::build("block", Some(&[1, 2])).err().unwrap());
}

#[test]
fn forward_rejects_a_wrong_number_of_inputs() {
    let m = models::build("softmax", Some(&[2, 3])).unwrap();
    assert!(m.forward(&[]).is_err());
    let x = m.example_inputs(0).unwrap();
    assert!(m.forward(&[x[0].clone(), x[0].clone()]).is_err());
}

#[test]
fn example_inputs_are_seeded() {
    let m = models::build("layernorm", Some(&[4, 8])).unwrap();
    let a = m.example_inputs(5).unwrap()[0].to_vec_f64().unwrap();
    let b = m.example_inputs(5).unwrap()[0].to_vec_f64().unwrap();
    let c = m.example_inputs(6).unwrap()[0].to_vec_f64().unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}
