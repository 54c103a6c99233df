//! `kiln::nn::functional`'s losses against the same quantities computed by hand in f64
//! (cross-entropy with ignore_index and label_smoothing in every reduction, unbatched and
//! K-dimensional inputs, class-probability targets, nll_loss, mse_loss), their gradients
//! against central finite differences, and the errors torch raises.

use kiln::nn::functional::{cross_entropy, mse_loss, nll_loss, CrossEntropyOptions, Reduction};
use kiln::{DType, Result, Tensor};

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn vals(x: &Tensor) -> Vec<f64> {
    x.to_vec_f64().unwrap()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

/// log_softmax of one row, in plain f64.
fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    row.iter().map(|x| x - lse).collect()
}

/// torch's cross-entropy per row (0 for ignored rows) and the number of rows not ignored,
/// by hand: `(1 - ε)·(-logp[t]) + ε/C·(-Σ logp)`.
fn reference(logits: &[f64], classes: usize, targets: &[i64], ignore: i64, eps: f64) -> Vec<f64> {
    logits
        .chunks(classes)
        .zip(targets)
        .map(|(row, &t)| {
            if t == ignore {
                return 0.0;
            }
            let lp = log_softmax(row);
            let nll = -lp[t as usize];
            let smooth = -lp.iter().sum::<f64>();
            (1.0 - eps) * nll + eps / classes as f64 * smooth
        })
        .collect()
}

const LOGITS: [f64; 12] = [
    1.0, 2.0, 3.0, -0.5, //
    0.3, -1.2, 2.2, 0.0, //
    -2.0, 0.5, 0.25, 1.5,
];

fn opts(ignore: i64, eps: f64, reduction: Reduction) -> CrossEntropyOptions {
    CrossEntropyOptions::default()
        .ignore_index(ignore)
        .label_smoothing(eps)
        .reduction(reduction)
}

#[test]
fn cross_entropy_matches_the_reference_in_every_reduction() {
    let x = t(&LOGITS, &[3, 4]);
    for (targets, ignore, eps) in [
        (vec![2, 0, 3], -100, 0.0),
        (vec![2, -100, 3], -100, 0.0),
        (vec![2, 0, 3], -100, 0.1),
        (vec![2, -100, 1], -100, 0.25),
        // an ignore_index inside [0, C): rows with target 1 are skipped
        (vec![1, 0, 1], 1, 0.3),
    ] {
        let per = reference(&LOGITS, 4, &targets, ignore, eps);
        let kept = targets.iter().filter(|&&t| t != ignore).count() as f64;
        let y = ids(&targets);
        let what = format!("targets {targets:?} ignore {ignore} eps {eps}");
        let none = cross_entropy(&x, &y, &opts(ignore, eps, Reduction::None)).unwrap();
        assert_eq!(none.shape(), &[3]);
        close(&vals(&none), &per, &format!("none, {what}"));
        let sum = cross_entropy(&x, &y, &opts(ignore, eps, Reduction::Sum)).unwrap();
        assert_eq!(sum.shape(), &[] as &[usize]);
        close(&vals(&sum), &[per.iter().sum()], &format!("sum, {what}"));
        let mean = cross_entropy(&x, &y, &opts(ignore, eps, Reduction::Mean)).unwrap();
        close(
            &vals(&mean),
            &[per.iter().sum::<f64>() / kept],
            &format!("mean over the {kept} rows not ignored, {what}"),
        );
    }
}

#[test]
fn defaults_are_torchs_and_uniform_logits_give_log_c_with_or_without_smoothing() {
    let d = CrossEntropyOptions::default();
    assert_eq!(
        (d.ignore_index, d.label_smoothing, d.reduction),
        (-100, 0.0, Reduction::Mean)
    );
    let x = Tensor::zeros(&[2, 5], DType::F64).unwrap();
    for eps in [0.0, 0.4, 1.0] {
        let l = cross_entropy(&x, &ids(&[4, 0]), &d.label_smoothing(eps)).unwrap();
        close(&vals(&l), &[5f64.ln()], &format!("eps {eps}"));
    }
}

#[test]
fn f32_logits_give_an_f32_loss_close_to_the_f64_one() {
    let x32 = t(&LOGITS, &[3, 4]).cast(DType::F32).unwrap();
    let y = ids(&[2, 0, 3]);
    let l = cross_entropy(&x32, &y, &opts(-100, 0.1, Reduction::Mean)).unwrap();
    assert_eq!(l.dtype(), DType::F32);
    let want = reference(&LOGITS, 4, &[2, 0, 3], -100, 0.1)
        .iter()
        .sum::<f64>()
        / 3.0;
    assert!((l.item().unwrap() - want).abs() < 1e-6);
}

#[test]
fn unbatched_and_k_dimensional_inputs_take_classes_along_their_class_dim() {
    // [C] with a 0-d target
    let row = &LOGITS[..4];
    let y0 = Tensor::from_vec(vec![1i64], &[]).unwrap();
    let l = cross_entropy(&t(row, &[4]), &y0, &opts(-100, 0.2, Reduction::None)).unwrap();
    assert_eq!(l.shape(), &[] as &[usize]);
    close(&vals(&l), &reference(row, 4, &[1], -100, 0.2), "unbatched");
    // [N=2, C=3, d=2]: element (n, j) takes its logits x[n, :, j]
    let x: Vec<f64> = (0..12).map(|i| ((i * 7 % 5) as f64 - 2.0) * 0.6).collect();
    let targets = [2i64, 0, -100, 1];
    let y = Tensor::from_vec(targets.to_vec(), &[2, 2]).unwrap();
    let mut rows = Vec::new();
    for n in 0..2 {
        for j in 0..2 {
            rows.extend((0..3).map(|c| x[n * 6 + c * 2 + j]));
        }
    }
    let per = reference(&rows, 3, &targets, -100, 0.15);
    let xt = t(&x, &[2, 3, 2]);
    let none = cross_entropy(&xt, &y, &opts(-100, 0.15, Reduction::None)).unwrap();
    assert_eq!(none.shape(), &[2, 2]);
    close(&vals(&none), &per, "k-dim none");
    let mean = cross_entropy(&xt, &y, &opts(-100, 0.15, Reduction::Mean)).unwrap();
    close(&vals(&mean), &[per.iter().sum::<f64>() / 3.0], "k-dim mean");
}

#[test]
fn class_probability_targets_mix_in_the_smoothing_and_average_over_rows() {
    let x = t(&LOGITS, &[3, 4]);
    let p = [
        0.1, 0.2, 0.3, 0.4, //
        1.0, 0.0, 0.0, 0.0, //
        0.25, 0.25, 0.25, 0.25,
    ];
    let eps = 0.2;
    let per: Vec<f64> = LOGITS
        .chunks(4)
        .zip(p.chunks(4))
        .map(|(row, pr)| {
            let lp = log_softmax(row);
            -lp.iter()
                .zip(pr)
                .map(|(l, q)| l * (q * (1.0 - eps) + eps / 4.0))
                .sum::<f64>()
        })
        .collect();
    let target = t(&p, &[3, 4]);
    let none = cross_entropy(&x, &target, &opts(-100, eps, Reduction::None)).unwrap();
    close(&vals(&none), &per, "probabilities, none");
    let mean = cross_entropy(&x, &target, &opts(-100, eps, Reduction::Mean)).unwrap();
    close(&vals(&mean), &[per.iter().sum::<f64>() / 3.0], "mean");
    let e = cross_entropy(&x, &target, &opts(0, eps, Reduction::Mean)).unwrap_err();
    assert!(
        e.to_string().contains("ignore_index (0) is not supported"),
        "{e}"
    );
}

#[test]
fn all_targets_ignored_gives_nan_for_the_mean_and_zero_for_the_sum() {
    let x = t(&LOGITS, &[3, 4]);
    let y = ids(&[-100, -100, -100]);
    let mean = cross_entropy(&x, &y, &CrossEntropyOptions::default()).unwrap();
    assert!(mean.item().unwrap().is_nan());
    let sum = cross_entropy(&x, &y, &opts(-100, 0.1, Reduction::Sum)).unwrap();
    assert_eq!(sum.item().unwrap(), 0.0);
}

#[test]
fn an_infinite_logit_of_another_class_leaves_the_loss_finite() {
    let x = t(&[0.5, f64::NEG_INFINITY, 1.5], &[1, 3]);
    let l = cross_entropy(&x, &ids(&[2]), &CrossEntropyOptions::default()).unwrap();
    let want = -log_softmax(&[0.5, f64::NEG_INFINITY, 1.5])[2];
    close(&vals(&l), &[want], "-inf in class 1");
}

#[test]
fn nll_loss_of_log_softmax_is_cross_entropy() {
    let x = t(&LOGITS, &[3, 4]);
    let y = ids(&[3, 1, -100]);
    for r in [Reduction::None, Reduction::Sum, Reduction::Mean] {
        let a = nll_loss(&x.log_softmax(1).unwrap(), &y, -100, r).unwrap();
        let b = cross_entropy(&x, &y, &opts(-100, 0.0, r)).unwrap();
        close(&vals(&a), &vals(&b), &format!("{r:?}"));
    }
}

#[test]
fn mse_loss_reduces_squared_differences_and_broadcasts() {
    let a = t(&[1.0, -2.0, 0.5, 4.0], &[2, 2]);
    let b = t(&[0.0, 1.0, 0.5, 2.0], &[2, 2]);
    let sq = [1.0, 9.0, 0.0, 4.0];
    close(
        &vals(&mse_loss(&a, &b, Reduction::None).unwrap()),
        &sq,
        "none",
    );
    close(
        &vals(&mse_loss(&a, &b, Reduction::Sum).unwrap()),
        &[14.0],
        "sum",
    );
    close(
        &vals(&mse_loss(&a, &b, Reduction::default()).unwrap()),
        &[3.5],
        "mean",
    );
    let row = t(&[1.0, 2.0], &[2]);
    close(
        &vals(&mse_loss(&a, &row, Reduction::Sum).unwrap()),
        &[0.0 + 16.0 + 0.25 + 4.0],
        "a [2] target broadcast over rows",
    );
    let e = mse_loss(&ids(&[1, 2]), &ids(&[1, 2]), Reduction::Mean).unwrap_err();
    assert!(e.to_string().contains("mse_loss"), "{e}");
}

#[test]
fn bad_targets_and_options_are_errors_naming_the_op() {
    let x = t(&LOGITS, &[3, 4]);
    let d = CrossEntropyOptions::default();
    let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(cross_entropy(&x, &ids(&[2, 4, 0]), &d));
    assert!(
        e.contains("cross_entropy") && e.contains("target 4") && e.contains("4 classes"),
        "{e}"
    );
    let e = msg(cross_entropy(&x, &ids(&[2, -1, 0]), &d));
    assert!(e.contains("target -1"), "{e}");
    let e = msg(cross_entropy(&x, &ids(&[2, 0]), &d));
    assert!(e.contains("[2]") && e.contains("[3]"), "{e}");
    let y32 = Tensor::from_vec(vec![1i32, 2, 0], &[3]).unwrap();
    let e = msg(cross_entropy(&x, &y32, &d));
    assert!(e.contains("must be i64"), "{e}");
    let e = msg(cross_entropy(&x, &ids(&[1, 2, 0]), &d.label_smoothing(1.5)));
    assert!(e.contains("label_smoothing"), "{e}");
    let e = msg(cross_entropy(&Tensor::scalar(1.0), &ids(&[0]), &d));
    assert!(e.contains("1 or more dimensions"), "{e}");
    let e = msg(cross_entropy(&ids(&[1, 2, 3]), &ids(&[0]), &d));
    assert!(e.contains("floating point"), "{e}");
    let e = msg(nll_loss(&x, &ids(&[0, 9, 1]), -100, Reduction::Sum));
    assert!(e.contains("nll_loss") && e.contains("target 9"), "{e}");
}

/// Central differences of `f` (a scalar) at `x`, element by element.
fn finite_difference(f: &dyn Fn(&Tensor) -> Result<Tensor>, x: &Tensor) -> Vec<f64> {
    let base = vals(x);
    (0..base.len())
        .map(|j| {
            let at = |d: f64| {
                let mut v = base.clone();
                v[j] += d;
                f(&t(&v, x.shape())).unwrap().item().unwrap()
            };
            let h = 1e-6;
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect()
}

/// The gradient of `f` at `x` by backward, against central differences (atol 1e-5, rtol
/// 1e-3).
fn check_gradient(f: &dyn Fn(&Tensor) -> Result<Tensor>, x: &Tensor, what: &str) {
    let leaf = x.detach().requires_grad_(true).unwrap();
    f(&leaf).unwrap().backward().unwrap();
    let got = vals(&leaf.grad().expect("a gradient"));
    let want = finite_difference(f, x);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-3 * w.abs(),
            "{what}[{k}]: backward {g} vs finite differences {w}"
        );
    }
}

#[test]
fn cross_entropy_gradients_match_finite_differences() {
    let x = Tensor::randn(&[5, 4], DType::F64, 3).unwrap();
    let y = ids(&[3, -100, 0, 1, 1]);
    for (ignore, eps, r) in [
        (-100, 0.0, Reduction::Mean),
        (-100, 0.1, Reduction::Mean),
        (1, 0.3, Reduction::Mean),
        (-100, 0.2, Reduction::Sum),
    ] {
        let o = opts(ignore, eps, r);
        let y = if ignore == 1 {
            ids(&[3, 2, 0, 1, 1])
        } else {
            y.clone()
        };
        check_gradient(
            &|x| cross_entropy(x, &y, &o),
            &x,
            &format!("ignore {ignore} eps {eps} {r:?}"),
        );
    }
    // Reduction::None, weighted so each element's gradient is exercised
    let w = t(&[0.5, 2.0, -1.0, 1.5, 0.25], &[5]);
    let o = opts(-100, 0.1, Reduction::None);
    check_gradient(
        &|x| cross_entropy(x, &y, &o)?.mul(&w)?.sum(&[], false),
        &x,
        "none, weighted",
    );
    // class probabilities
    let p = Tensor::rand(&[5, 4], DType::F64, 4)
        .unwrap()
        .softmax(1)
        .unwrap();
    let o = opts(-100, 0.15, Reduction::Mean);
    check_gradient(&|x| cross_entropy(x, &p, &o), &x, "probabilities");
}

#[test]
fn mse_gradients_match_finite_differences() {
    let x = Tensor::randn(&[3, 4], DType::F64, 5).unwrap();
    let y = Tensor::randn(&[3, 4], DType::F64, 6).unwrap();
    check_gradient(&|x| mse_loss(x, &y, Reduction::Mean), &x, "mean");
    check_gradient(&|x| mse_loss(x, &y, Reduction::Sum), &x, "sum");
    let w = Tensor::randn(&[3, 4], DType::F64, 7).unwrap();
    check_gradient(
        &|x| mse_loss(x, &y, Reduction::None)?.mul(&w)?.sum(&[], false),
        &x,
        "none, weighted",
    );
}
