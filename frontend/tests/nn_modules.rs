//! `kiln::nn::Module`: torch's default initialisation (leaves that require grad, in torch's
//! intervals), torch's parameter names (`weight`, `bias`, `nn.Sequential`'s `0.weight`,
//! `2.bias`, nested `1.0.weight`), gradients reaching every parameter, and parameters saved
//! and loaded by those names (a round trip, a file laid out as PyTorch's safetensors writes
//! it, and the errors of a strict load, which leave the module untouched).

use kiln::nn::{
    load_parameters, save_parameters, Embedding, Gelu, LayerNorm, Linear, Module, Relu, Sequential,
    Sigmoid, Tanh,
};
use kiln::optim::{Optimizer, Sgd};
use kiln::{DType, Tensor};
use std::path::PathBuf;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

fn names(m: &dyn Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-nn-modules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn linear_init_draws_torchs_interval_as_leaves_that_require_grad() {
    let l = Linear::init(16, 8, true, 3).unwrap();
    assert_eq!(names(&l), ["weight", "bias"]);
    let (w, b) = (&l.weight, l.bias.as_ref().unwrap());
    assert_eq!((w.shape(), b.shape()), (&[8, 16][..], &[8][..]));
    for p in [w, b] {
        assert!(p.requires_grad() && p.is_leaf() && p.dtype() == DType::F32);
        let v = vals(p);
        assert!(
            v.iter().all(|x| x.abs() <= 0.25),
            "U(-1/sqrt(16), 1/sqrt(16))"
        );
        let spread =
            v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread > 0.25, "values spread over the interval: {spread}");
    }
    assert_ne!(
        vals(w)[..8],
        vals(b)[..],
        "weight and bias use different streams"
    );
    let again = Linear::init(16, 8, true, 3).unwrap();
    assert_eq!(
        vals(&again.weight),
        vals(w),
        "the same seed gives the same weights"
    );
    let other = Linear::init(16, 8, true, 4).unwrap();
    assert_ne!(vals(&other.weight), vals(w));
    let no_bias = Linear::init(16, 8, false, 3).unwrap();
    assert_eq!(names(&no_bias), ["weight"]);
    assert_eq!(Linear::init(0, 2, true, 0).unwrap().weight.shape(), &[2, 0]);
}

#[test]
fn layer_norm_and_embedding_init_as_torch() {
    let ln = LayerNorm::init(6, 1e-5).unwrap();
    assert_eq!(names(&ln), ["weight", "bias"]);
    assert_eq!(vals(&ln.weight), vec![1.0; 6]);
    assert_eq!(vals(&ln.bias), vec![0.0; 6]);
    assert!(ln.weight.requires_grad() && ln.bias.requires_grad());
    let x = Tensor::randn(&[2, 6], DType::F32, 1).unwrap();
    assert_eq!(
        vals(&Module::forward(&ln, &x).unwrap()),
        vals(&ln.forward(&x).unwrap())
    );

    let e = Embedding::init(500, 40, 2).unwrap();
    assert_eq!(names(&e), ["weight"]);
    assert!(e.weight.requires_grad());
    let v = vals(&e.weight);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    assert!(
        mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
        "N(0, 1): {mean} {var}"
    );
    let rows = Tensor::from_vec(vec![3i64, 499], &[2]).unwrap();
    let got = vals(&Module::forward(&e, &rows).unwrap());
    assert_eq!(got[..40], v[3 * 40..4 * 40]);
    assert_eq!(got[40..], v[499 * 40..]);
}

#[test]
fn sequential_names_parameters_by_layer_index_as_torch() {
    let mlp = Sequential::mlp(&[5, 7, 3, 2], 1).unwrap();
    assert_eq!(mlp.len(), 5, "Linear ReLU Linear ReLU Linear");
    assert_eq!(
        names(&mlp),
        ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    );
    assert_eq!(mlp.num_parameters(), 5 * 7 + 7 + 7 * 3 + 3 + 3 * 2 + 2);
    assert!(mlp.get(1).unwrap().named_parameters().is_empty());
    let shapes: Vec<Vec<usize>> = mlp
        .parameters()
        .iter()
        .map(|p| p.shape().to_vec())
        .collect();
    assert_eq!(
        shapes,
        [
            vec![7, 5],
            vec![7],
            vec![3, 7],
            vec![3],
            vec![2, 3],
            vec![2]
        ]
    );

    let nested = Sequential::new()
        .push(LayerNorm::init(4, 1e-5).unwrap())
        .push(
            Sequential::new()
                .push(Linear::init(4, 3, true, 0).unwrap())
                .push(Tanh),
        )
        .push(Gelu { tanh: true })
        .push(Linear::init(3, 2, false, 1).unwrap())
        .push(Sigmoid);
    assert_eq!(
        names(&nested),
        ["0.weight", "0.bias", "1.0.weight", "1.0.bias", "3.weight"]
    );
    assert!(Sequential::new().is_empty());

    let e = Sequential::mlp(&[5], 0).unwrap_err().to_string();
    assert!(e.contains("at least two layer sizes"), "{e}");
    assert!(Sequential::mlp(&[5, 0, 2], 0).is_err());
}

#[test]
fn sequential_forward_is_the_layers_in_order_and_gradients_reach_every_parameter() {
    let l1 = Linear::init(4, 6, true, 5).unwrap();
    let l2 = Linear::init(6, 3, true, 6).unwrap();
    let model = Sequential::new()
        .push(l1.clone())
        .push(Relu)
        .push(l2.clone());
    let x = Tensor::randn(&[5, 4], DType::F32, 9).unwrap();
    let want = l2
        .forward(&l1.forward(&x).unwrap().relu().unwrap())
        .unwrap();
    assert_eq!(vals(&model.forward(&x).unwrap()), vals(&want));
    assert_eq!(
        vals(&Sequential::new().forward(&x).unwrap()),
        vals(&x),
        "an empty Sequential returns its input"
    );

    let loss = model.forward(&x).unwrap().sum(&[], false).unwrap();
    loss.backward().unwrap();
    for (n, p) in model.named_parameters() {
        let g = p.grad().unwrap_or_else(|| panic!("{n} has no gradient"));
        assert_eq!(g.shape(), p.shape(), "{n}");
    }
    // the bias of the last layer gets d(sum)/d(b) = rows
    assert_eq!(
        vals(&l2.bias.as_ref().unwrap().grad().unwrap()),
        vec![5.0; 3]
    );
    model.zero_grad();
    assert!(model.parameters().iter().all(|p| p.grad().is_none()));
}

#[test]
fn parameters_round_trip_through_safetensors_and_an_optimizer_sees_the_load() {
    let a = Sequential::mlp(&[4, 5, 3], 1).unwrap();
    let path = tmp("round_trip.safetensors");
    save_parameters(&a, &path).unwrap();
    let file = kiln::io::load(&path).unwrap();
    let mut file_names: Vec<&str> = file.iter().map(|(n, _)| n.as_str()).collect();
    file_names.sort_unstable();
    assert_eq!(file_names, ["0.bias", "0.weight", "2.bias", "2.weight"]);
    assert!(file.iter().all(|(_, t)| t.dtype() == DType::F32));

    let b = Sequential::mlp(&[4, 5, 3], 2).unwrap();
    let mut sgd = Sgd::new(b.parameters(), 0.5).unwrap();
    assert_ne!(vals(&a.parameters()[0]), vals(&b.parameters()[0]));
    load_parameters(&b, &path).unwrap();
    for ((n, p), (_, q)) in a.named_parameters().iter().zip(b.named_parameters()) {
        assert_eq!(vals(p), vals(&q), "{n}");
        assert!(q.requires_grad() && q.is_leaf(), "{n} is still a parameter");
    }
    let x = Tensor::randn(&[3, 4], DType::F32, 0).unwrap();
    assert_eq!(vals(&a.forward(&x).unwrap()), vals(&b.forward(&x).unwrap()));
    // the optimiser built before the load updates the loaded values
    b.forward(&x)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    sgd.step().unwrap();
    let bias = b.named_parameters()[3].1.clone();
    let loaded = vals(&a.named_parameters()[3].1);
    let stepped: Vec<f64> = loaded.iter().map(|v| v - 0.5 * 3.0).collect();
    let got = vals(&bias);
    for (g, w) in got.iter().zip(&stepped) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {stepped:?}");
    }
}

/// A safetensors file as `safetensors.torch.save_file(model.state_dict(), path)` writes it
/// for `nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))`: a little-endian u64
/// header length, a JSON header with `__metadata__ {"format": "pt"}` and the keys sorted,
/// padded with spaces to a multiple of 8, then the f32 data in that order.
fn torch_style_file(path: &PathBuf, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    let mut sorted: Vec<&(&str, Vec<usize>, Vec<f32>)> = tensors.iter().collect();
    sorted.sort_by_key(|(n, _, _)| *n);
    let mut header = String::from(r#"{"__metadata__":{"format":"pt"}"#);
    let mut data = Vec::new();
    for (name, shape, values) in &sorted {
        let start = data.len();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        header += &format!(
            r#","{name}":{{"dtype":"F32","shape":[{}],"data_offsets":[{start},{}]}}"#,
            dims.join(","),
            data.len()
        );
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_file_with_torchs_sequential_names_loads() {
    let path = tmp("torch_style.safetensors");
    let w0 = vec![0.5f32, -1.0, 0.25, 1.5, 0.0, -0.5];
    let b0 = vec![0.1f32, -0.2];
    let w2 = vec![2.0f32, -3.0];
    let b2 = vec![0.75f32];
    torch_style_file(
        &path,
        &[
            ("0.weight", vec![2, 3], w0.clone()),
            ("0.bias", vec![2], b0.clone()),
            ("2.weight", vec![1, 2], w2.clone()),
            ("2.bias", vec![1], b2.clone()),
        ],
    );
    let model = Sequential::mlp(&[3, 2, 1], 7).unwrap();
    load_parameters(&model, &path).unwrap();
    let p = model.parameters();
    assert_eq!(p[0].to_vec::<f32>().unwrap(), w0);
    assert_eq!(p[1].to_vec::<f32>().unwrap(), b0);
    assert_eq!(p[2].to_vec::<f32>().unwrap(), w2);
    assert_eq!(p[3].to_vec::<f32>().unwrap(), b2);
    // x = [1, 2, -1]: h = relu([0.5 - 2 - 0.25 + 0.1, 1.5 + 0 + 0.5 - 0.2]) = [0, 1.8];
    // y = 2·0 - 3·1.8 + 0.75 = -4.65
    let x = Tensor::from_vec(vec![1.0f32, 2.0, -1.0], &[1, 3]).unwrap();
    let y = model.forward(&x).unwrap().item().unwrap();
    assert!((y + 4.65).abs() < 1e-6, "{y}");
}

#[test]
fn a_strict_load_names_missing_unexpected_and_misshaped_keys_and_changes_nothing() {
    let path = tmp("bad.safetensors");
    torch_style_file(
        &path,
        &[
            ("0.weight", vec![3, 2], vec![0.0; 6]),
            ("0.bias", vec![2], vec![9.0; 2]),
            ("1.weight", vec![1, 2], vec![0.0; 2]),
        ],
    );
    let model = Sequential::mlp(&[3, 2, 1], 7).unwrap();
    let before: Vec<Vec<f64>> = model.parameters().iter().map(vals).collect();
    let e = load_parameters(&model, &path).unwrap_err().to_string();
    assert!(e.contains("bad.safetensors"), "{e}");
    assert!(
        e.contains(r#"missing key(s): ["2.weight", "2.bias"]"#),
        "{e}"
    );
    assert!(e.contains(r#"unexpected key(s): ["1.weight"]"#), "{e}");
    assert!(
        e.contains("size mismatch for 0.weight") && e.contains("[3, 2]") && e.contains("[2, 3]"),
        "{e}"
    );
    let after: Vec<Vec<f64>> = model.parameters().iter().map(vals).collect();
    assert_eq!(
        before, after,
        "0.bias fits, but nothing is copied on an error"
    );
    let e = load_parameters(&model, &tmp("no_such_file.safetensors")).unwrap_err();
    assert!(e.to_string().contains("no_such_file"), "{e}");
}
