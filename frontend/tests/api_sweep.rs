//! The panic-free public API sweep (issue 23): public entry points (tensor creation, ops,
//! views, in-place ops, autograd, compile, nn layers and losses, optimisers, io) called with
//! bad input: shape, dtype and rank mismatches, out-of-range dims and indices, empty and
//! zero-size tensors, sizes whose products overflow, NaN and inf where they are refused,
//! wrong file contents. Each call must return a typed `kiln::Error` (never panic) whose
//! message names the op, and must leave every tensor it was given as it was (shape, strides,
//! dtype, version and bits). The CLI's subcommands get the same treatment in cli.rs.

use kiln::nn::functional::{cross_entropy, mse_loss, nll_loss, CrossEntropyOptions, Reduction};
use kiln::nn::{Embedding, LayerNorm, Linear};
use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{compile, DType, Error, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a tensor looks like from outside: its type, layout, version and bits.
fn snapshot(t: &Tensor) -> (Vec<usize>, Vec<isize>, DType, u64, Vec<u64>) {
    let bits = t
        .to_vec_f64()
        .map(|v| v.iter().map(|x| x.to_bits()).collect())
        .unwrap_or_default();
    (
        t.shape().to_vec(),
        t.strides().to_vec(),
        t.dtype(),
        t.version(),
        bits,
    )
}

#[derive(Default)]
struct Sweep {
    calls: usize,
    failures: Vec<String>,
    messages: Vec<String>,
}

impl Sweep {
    /// Calls `f`, which must fail with an error naming `op` and leave `inputs` unchanged.
    fn case<T>(&mut self, op: &str, inputs: &[&Tensor], f: impl FnOnce() -> Result<T, Error>) {
        self.calls += 1;
        let before: Vec<_> = inputs.iter().map(|t| snapshot(t)).collect();
        let label = format!("#{} {op}", self.calls);
        match catch_unwind(AssertUnwindSafe(f)) {
            Err(_) => self.failures.push(format!("{label}: panicked")),
            Ok(Ok(_)) => self.failures.push(format!("{label}: accepted bad input")),
            Ok(Err(e)) => {
                let msg = e.to_string();
                if !msg.to_lowercase().contains(&op.to_lowercase()) {
                    self.failures
                        .push(format!("{label}: the error does not name the op: {msg}"));
                }
                self.messages.push(format!("{label}: {msg}"));
            }
        }
        for (i, (t, b)) in inputs.iter().zip(&before).enumerate() {
            if snapshot(t) != *b {
                self.failures
                    .push(format!("{label}: input {i} was modified by a failed call"));
            }
        }
    }
}

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape, DType::F32, 7).unwrap()
}

fn ids(values: Vec<i64>) -> Tensor {
    let n = values.len();
    Tensor::from_vec(values, &[n]).unwrap()
}

#[test]
fn bad_input_to_every_entry_point_is_a_typed_error_and_changes_nothing() {
    // panics are failures here: keep their messages off the output
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut s = Sweep::default();
    let a = randn(&[2, 3]);
    let b = randn(&[4, 5]);
    let v = randn(&[3]);
    let i64s = ids(vec![0, 1, 2]);
    let empty = randn(&[0, 3]);
    let strided = randn(&[3, 2]).t().unwrap();
    let huge = usize::MAX / 2;

    // creation
    s.case("from_vec", &[], || {
        Tensor::from_vec(vec![1f32, 2.0, 3.0], &[2, 2])
    });
    s.case("from_vec", &[], || Tensor::from_vec(vec![1f32], &[huge, 4]));
    s.case("from_f64", &[], || {
        Tensor::from_f64(&[1.0, 2.0], &[3], DType::F32)
    });
    s.case("full", &[], || Tensor::full(&[huge, huge], 1.0, DType::F32));
    // literals the dtype cannot hold (torch: "value cannot be converted ... without overflow")
    s.case("full", &[], || {
        Tensor::full(&[2], f64::INFINITY, DType::I64)
    });
    s.case("full", &[], || Tensor::full(&[2], 1e20, DType::I32));
    s.case("full", &[], || Tensor::full(&[2], 1e300, DType::F32));
    s.case("from_f64", &[], || {
        Tensor::from_f64(&[1.0, f64::NAN], &[2], DType::I64)
    });
    s.case("zeros", &[], || {
        Tensor::zeros(&[1 << 40, 1 << 40], DType::F32)
    });
    s.case("arange", &[], || Tensor::arange(0.0, 10.0, 0.0, DType::F32));
    s.case("arange", &[], || {
        Tensor::arange(0.0, f64::NAN, 1.0, DType::F32)
    });
    s.case("arange", &[], || {
        Tensor::arange(0.0, f64::INFINITY, 1.0, DType::F32)
    });
    s.case("arange", &[], || Tensor::arange(10.0, 0.0, 1.0, DType::F32));
    s.case("rand", &[], || Tensor::rand(&[2], DType::I64, 0));
    s.case("randn", &[], || Tensor::randn(&[huge, 3], DType::F32, 0));
    s.case("cat", &[], || Tensor::cat(&[], 0));
    s.case("cat", &[&a, &b], || Tensor::cat(&[&a, &b], 0));
    s.case("cat", &[&a], || Tensor::cat(&[&a, &a], 5));

    // reading values
    s.case("item", &[&a], || a.item());
    s.case("to_vec", &[&a], || a.to_vec::<i64>());

    // pointwise, broadcasting and dtypes
    s.case("add", &[&a, &b], || a.add(&b));
    s.case("mul", &[&a, &b], || &a * &b);
    s.case("sub", &[&a, &b], || &a - &b);
    s.case("div", &[&a, &b], || &a / &b);
    s.case("where", &[&a, &b], || a.where_(&b, 0.0));
    s.case("clamp", &[&a, &b], || a.clamp(Some(&b), None::<f64>));
    s.case("hardtanh", &[&a], || a.hardtanh(1.0, -1.0));

    // views
    s.case("reshape", &[&a], || a.reshape(&[4, 2]));
    s.case("reshape", &[&a], || a.reshape(&[-1, -1]));
    s.case("reshape", &[&a], || a.reshape(&[-2, 3]));
    s.case("reshape", &[&a], || a.reshape(&[i64::MAX, i64::MAX]));
    s.case("permute", &[&a], || a.permute(&[0, 0]));
    s.case("permute", &[&a], || a.permute(&[0]));
    s.case("transpose", &[&a], || a.transpose(0, 2));
    s.case("transpose", &[&a], || a.transpose(i64::MIN, 0));
    s.case("t", &[], || randn(&[2, 3, 4]).t());
    s.case("expand", &[&a], || a.expand(&[4, 3]));
    s.case("expand", &[&a], || a.expand(&[3]));
    s.case("narrow", &[&a], || a.narrow(1, 2, 5));
    s.case("narrow", &[&a], || a.narrow(1, usize::MAX, 2));
    s.case("narrow", &[&a], || a.narrow(3, 0, 1));
    s.case("slice", &[&a], || a.slice(1, 0, 3, 0));
    s.case("slice", &[&a], || a.slice(4, 0, 1, 1));
    s.case("unsqueeze", &[&a], || a.unsqueeze(4));
    s.case("squeeze", &[&a], || a.squeeze(-3));
    s.case("triu", &[&v], || v.triu(0));
    s.case("tril", &[&v], || v.tril(0));

    // gathers and scatters
    s.case("index_select", &[&a, &i64s], || {
        a.index_select(1, &ids(vec![0, 3]))
    });
    s.case("index_select", &[&a], || a.index_select(1, &ids(vec![-1])));
    s.case("index_select", &[&a, &v], || a.index_select(0, &v));
    s.case("index_select", &[&a, &i64s], || a.index_select(2, &i64s));
    s.case("index_add", &[&a, &i64s, &b], || a.index_add(0, &i64s, &b));
    s.case("index_add", &[&a], || {
        a.index_add(0, &ids(vec![9, 0]), &randn(&[2, 3]))
    });
    s.case("embedding", &[&a], || a.embedding(&ids(vec![0, 2]), None));
    s.case("embedding", &[&a], || {
        a.embedding(&ids(vec![0, 1]), Some(5))
    });
    s.case("embedding", &[&a, &v], || a.embedding(&v, None));

    // reductions and normalisations
    s.case("sum", &[&a], || a.sum(&[2], false));
    s.case("sum", &[&a], || a.sum(&[1, 1], false));
    s.case("mean", &[&i64s], || i64s.mean(&[], false));
    s.case("max", &[&empty], || empty.max(&[0], false));
    s.case("min", &[&empty], || empty.min(&[], false));
    s.case("argmax", &[&a], || a.argmax(2, false));
    s.case("argmax", &[&empty], || empty.argmax(0, false));
    s.case("var", &[&a], || a.var(&[5], 1, false));
    s.case("softmax", &[&a], || a.softmax(-3));
    s.case("log_softmax", &[&a], || a.log_softmax(2));
    s.case("layer_norm", &[&a], || a.layer_norm(&[4], None, None, 1e-5));
    s.case("layer_norm", &[&a, &v], || {
        a.layer_norm(&[3], Some(&randn(&[4])), Some(&v), 1e-5)
    });
    s.case("rms_norm", &[&a], || a.rms_norm(&[2, 2, 3], None, 1e-6));

    // products
    s.case("matmul", &[&a, &b], || a.matmul(&b));
    s.case("matmul", &[&a, &strided], || {
        a.matmul(&strided.cast(DType::F64)?)
    });
    s.case("matmul", &[], || {
        Tensor::scalar(1.0).matmul(&Tensor::scalar(2.0))
    });
    s.case("linear", &[&a, &b], || a.linear(&b, None));
    s.case("linear", &[&a, &b], || a.linear(&randn(&[4, 3]), Some(&b)));

    // in-place ops: a failure leaves the destination alone
    let dst = randn(&[2, 3]);
    s.case("add_", &[&dst, &b], || dst.add_(&b));
    s.case("mul_", &[&dst, &b], || dst.mul_(&b));
    s.case("copy_", &[&dst, &b], || dst.copy_(&b));
    s.case("fill_", &[&dst, &v], || dst.fill_(&v));
    let int_dst = Tensor::zeros(&[3], DType::I64).unwrap();
    s.case("fill_", &[&int_dst], || int_dst.fill_(f64::INFINITY));
    s.case("pow", &[&int_dst], || int_dst.pow(-2i64));
    let view = dst.expand(&[4, 2, 3]).unwrap();
    s.case("add_", &[&view, &dst], || view.add_(1.0));

    // autograd
    let leaf = randn(&[2, 3]).requires_grad_(true).unwrap();
    s.case("backward", &[&leaf], || leaf.mul(2.0)?.backward());
    s.case("backward", &[&a], || a.sum(&[], false)?.backward());
    let y = leaf.mul(2.0).unwrap();
    s.case("backward", &[&leaf], || {
        y.backward_with(Some(&randn(&[3, 2])), false)
    });
    s.case("requires_grad", &[], || i64s.clone().requires_grad_(true));
    s.case("retain_grad", &[&a], || a.retain_grad());
    s.case("register_hook", &[&a], || a.register_hook(|_| Ok(None)));
    let inplace_leaf = randn(&[2]).requires_grad_(true).unwrap();
    s.case("add_", &[&inplace_leaf], || inplace_leaf.add_(1.0));

    // compile: a function that fails inside, and bad arguments
    let f = compile(|x: &Tensor| x.matmul(&randn(&[4, 4])));
    s.case("matmul", &[&a], || f.call(&a));
    s.case("matmul", &[&empty], || f.call(&empty));

    // nn layers and losses
    s.case("Linear", &[&v], || Linear::new(v.clone(), None));
    s.case("Linear", &[&a, &b], || {
        Linear::new(a.clone(), Some(b.clone()))
    });
    let lin = Linear::new(randn(&[4, 3]), Some(randn(&[4]))).unwrap();
    s.case("linear", &[&b], || lin.forward(&b));
    s.case("LayerNorm", &[&v, &a], || {
        LayerNorm::new(v.clone(), a.clone(), 1e-5)
    });
    s.case("Embedding", &[&v], || Embedding::new(v.clone()));
    let emb = Embedding::new(randn(&[5, 2])).unwrap();
    s.case("embedding", &[], || emb.forward(&ids(vec![7])));
    s.case("Embedding", &[], || {
        Embedding::new(randn(&[5, 2]))?.with_padding_idx(9)
    });
    s.case("mse_loss", &[&a, &b], || mse_loss(&a, &b, Reduction::Mean));
    s.case("cross_entropy", &[&a], || {
        cross_entropy(&a, &ids(vec![0, 7]), &CrossEntropyOptions::default())
    });
    s.case("cross_entropy", &[&a, &v], || {
        cross_entropy(&a, &v, &CrossEntropyOptions::default())
    });
    s.case("cross_entropy", &[&a], || {
        cross_entropy(
            &a,
            &ids(vec![0, 1]),
            &CrossEntropyOptions::default().label_smoothing(f64::NAN),
        )
    });
    s.case("nll_loss", &[&a], || {
        nll_loss(&a, &ids(vec![0, -5]), -100, Reduction::Sum)
    });
    s.case("nll_loss", &[&v], || {
        nll_loss(&v, &ids(vec![0, 1]), -100, Reduction::Sum)
    });

    // optimisers
    s.case("AdamW", &[&a], || AdamW::new(vec![a.clone()], 1e-3));
    s.case("AdamW", &[], || AdamW::new(vec![], 1e-3));
    s.case("AdamW", &[], || {
        AdamW::new(vec![randn(&[2]).requires_grad_(true)?], f64::NAN)
    });
    s.case("Sgd", &[], || {
        Sgd::new(vec![randn(&[2]).requires_grad_(true)?], -1.0)
    });

    // optimisers' hyperparameters are checked at each step: a refused step changes nothing
    let p = randn(&[3]).requires_grad_(true).unwrap();
    p.mul(2.0)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    let g = p.grad().unwrap();
    for (betas, eps, wd) in [
        ((1.0, 0.999), 1e-8, 0.0),
        ((0.9, -0.1), 1e-8, 0.0),
        ((0.9, 0.999), -1.0, 0.0),
        ((0.9, 0.999), 1e-8, f64::NAN),
    ] {
        let mut opt = AdamW::new(vec![p.clone()], 1e-3)
            .unwrap()
            .options(betas, eps, wd, false);
        s.case("AdamW", &[&p, &g], || opt.step());
    }
    let mut opt = AdamW::new(vec![p.clone()], 1e-3).unwrap();
    opt.set_lr(f64::NAN);
    s.case("AdamW", &[&p, &g], || opt.step());
    for (momentum, dampening, nesterov, wd) in [
        (-0.5, 0.0, false, 0.0),
        (0.0, 0.0, true, 0.0),
        (0.9, 0.1, true, 0.0),
        (0.9, 0.0, false, -1.0),
    ] {
        let mut opt = Sgd::new(vec![p.clone()], 0.1)
            .unwrap()
            .momentum(momentum, dampening, nesterov)
            .weight_decay(wd);
        s.case("SGD", &[&p, &g], || opt.step());
    }

    // io
    s.case("safetensors", &[], || {
        kiln::io::load_bytes(b"\x08\0\0\0\0\0\0\0{}", "bad")
    });
    s.case("safetensors", &[], || {
        kiln::io::load_bytes(&[0xff; 16], "garbage")
    });
    s.case("from_le_bytes", &[], || {
        kiln::io::from_le_bytes(&[0; 7], &[2], DType::F32)
    });
    s.case("no-such-file", &[], || {
        kiln::io::load(std::path::Path::new(
            "/nonexistent/no-such-file.safetensors",
        ))
    });

    std::panic::set_hook(default_hook);
    let report = s.messages.join("\n");
    assert!(
        s.failures.is_empty(),
        "{} of {} calls misbehaved:\n{}\n\nall messages:\n{report}",
        s.failures.len(),
        s.calls,
        s.failures.join("\n")
    );
    eprintln!(
        "{} entry-point calls with bad input: each a typed error\n{report}",
        s.calls
    );
}
