//! DDP in one process, on the world of size 1 (no launcher): training through
//! `DistributedDataParallel` equals training without it bit for bit (eager and compiled,
//! SGD with momentum and AdamW, `no_sync` accumulation); the bucket table; unused
//! parameters; collectives of the world of size 1. The multi-process runs are in
//! `ddp_mpi.rs`.

mod ddp_common;
use ddp_common::{cases, sum_backward, train, two_heads};
use kiln::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp};
use kiln::nn::{Module, Sequential};
use kiln::{DType, Tensor};

/// `Sequential::mlp(sizes, seed)` under DDP on the world of size 1.
fn local_ddp(sizes: &[usize], seed: u64, opts: DdpOptions) -> DistributedDataParallel<Sequential> {
    DistributedDataParallel::new(
        Sequential::mlp(sizes, seed).unwrap(),
        ProcessGroup::local(),
        opts,
    )
    .unwrap()
}

/// An 8-16-16-4 MLP under DDP on the world of size 1 with a 1 KiB bucket cap: three
/// buckets, [4.*], [2.*] and [0.*].
fn three_buckets(seed: u64) -> DistributedDataParallel<Sequential> {
    let opts = DdpOptions {
        first_bucket_mb: 0.0002,
        bucket_cap_mb: 0.001,
        ..DdpOptions::default()
    };
    let ddp = local_ddp(&[8, 16, 16, 4], seed, opts);
    assert_eq!(ddp.buckets().len(), 3, "{}", ddp.bucket_table());
    ddp
}

/// `loss`'s value and, after its backward from zeroed gradients, `m`'s parameters'
/// gradients.
fn loss_and_grads(m: &Sequential, loss: Tensor) -> (f64, Vec<Vec<f64>>) {
    m.zero_grad();
    let l = loss.item().unwrap();
    loss.backward().unwrap();
    let g = m
        .parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
        .collect();
    (l, g)
}

#[test]
fn world_of_one_trains_exactly_as_without_ddp() {
    for case in cases() {
        let ddp = train(Some(ProcessGroup::local()), case, 5).unwrap();
        let plain = train(None, case, 5).unwrap();
        assert_eq!(ddp, plain, "{case:?}");
        assert_ne!(plain[0], plain[4], "{case:?}: the parameters move");
    }
}

/// A model of several sizes: the first bucket closes past 1 MiB, the rest stay under the
/// cap, in reverse parameter order.
#[test]
fn bucket_table_in_reverse_parameter_order() {
    // 0.weight 512x256 (512 KiB), 0.bias, 2.weight 1024x512 (2 MiB), 2.bias, 4.weight 8x1024
    let ddp = local_ddp(&[256, 512, 1024, 8], 1, DdpOptions::default());
    let names: Vec<Vec<String>> = ddp.buckets().iter().map(|b| b.names.clone()).collect();
    assert_eq!(
        names,
        vec![
            vec!["4.bias", "4.weight", "2.bias", "2.weight"],
            vec!["0.bias", "0.weight"],
        ]
    );
    let bytes: Vec<usize> = ddp.buckets().iter().map(|b| b.bytes).collect();
    assert_eq!(
        bytes,
        [
            4 * (8 + 8 * 1024 + 1024 + 1024 * 512),
            4 * (512 + 512 * 256)
        ]
    );
    let table = ddp.bucket_table();
    assert!(
        table.starts_with("bucket  bytes  dtype  parameters\n"),
        "{table}"
    );
    assert!(
        table.contains("4.bias, 4.weight, 2.bias, 2.weight"),
        "{table}"
    );
    // a 1048-byte cap: 4.bias (32 bytes) shares the first bucket with 4.weight, then one
    // bucket per parameter
    let opts = DdpOptions {
        bucket_cap_mb: 0.001,
        first_bucket_mb: 0.001,
        ..DdpOptions::default()
    };
    let ddp = local_ddp(&[256, 512, 1024, 8], 1, opts);
    assert_eq!(ddp.buckets().len(), 5);
    assert_eq!(
        ddp.named_parameters()[0].0,
        "module.0.weight",
        "torch's DDP prefixes module."
    );
}

#[test]
fn unused_parameters_are_an_error_unless_allowed() {
    let x = Tensor::randn(&[4, 3], DType::F32, 3).unwrap();
    // only head `a`: `b` is unused
    let ddp = DistributedDataParallel::new(
        two_heads(3, 2, false),
        ProcessGroup::local(),
        DdpOptions::default(),
    )
    .unwrap();
    let e = sum_backward(&ddp, &x).unwrap_err().to_string();
    assert!(e.contains("b.weight, b.bias"), "{e}");
    assert!(e.contains("find_unused_parameters"), "{e}");
    // allowed: the used head gets its gradient, the unused one keeps None
    let opts = DdpOptions {
        find_unused_parameters: true,
        ..DdpOptions::default()
    };
    let ddp =
        DistributedDataParallel::new(two_heads(3, 2, false), ProcessGroup::local(), opts).unwrap();
    for _ in 0..2 {
        ddp.module().zero_grad();
        sum_backward(&ddp, &x).unwrap();
        let m = ddp.module();
        assert!(m.a.weight.grad().is_some() && m.a.bias.as_ref().unwrap().grad().is_some());
        assert!(m.b.weight.grad().is_none());
    }
}

#[test]
fn no_sync_accumulates_and_the_next_backward_reduces() {
    let ddp = local_ddp(&[3, 4, 2], 5, DdpOptions::default());
    let x = Tensor::randn(&[5, 3], DType::F32, 9).unwrap();
    let loss = || ddp.forward(&x).unwrap().sum(&[0, 1], false).unwrap();
    {
        let _g = ddp.no_sync();
        loss().backward().unwrap();
    }
    loss().backward().unwrap();
    let twice = ddp.module().parameters()[0]
        .grad()
        .unwrap()
        .to_vec_f64()
        .unwrap();
    ddp.module().zero_grad();
    loss().backward().unwrap();
    let once = ddp.module().parameters()[0]
        .grad()
        .unwrap()
        .to_vec_f64()
        .unwrap();
    for (t, o) in twice.iter().zip(&once) {
        assert!(
            (t - 2.0 * o).abs() <= 1e-6 * o.abs().max(1.0),
            "{t} vs 2·{o}"
        );
    }
}

#[test]
fn collectives_of_the_world_of_one() {
    let g = ProcessGroup::local();
    assert_eq!(
        (g.rank(), g.world_size(), g.backend_name()),
        (0, 1, "local")
    );
    let t = Tensor::from_vec(vec![1.0f32, -2.0, 3.5], &[3]).unwrap();
    g.all_reduce(&t, ReduceOp::Avg).unwrap().wait().unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, -2.0, 3.5]);
    g.broadcast(&t, 0).unwrap().wait().unwrap();
    let e = g.broadcast(&t, 1).err().unwrap().to_string();
    assert!(e.contains("rank 1 is outside a world of 1"), "{e}");
    let all = g.all_gather(&t).unwrap().wait().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].to_vec::<f32>().unwrap(), [1.0, -2.0, 3.5]);
    g.barrier().unwrap();
    let e = g
        .all_reduce(&Tensor::from_vec(vec![true], &[1]).unwrap(), ReduceOp::Sum)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("bool tensors are not supported"), "{e}");
}

/// `kiln train --ddp` without a launcher trains on the world of size 1: the same losses as
/// without `--ddp`, bit for bit, and the JSON records the bucket table.
#[test]
fn kiln_train_ddp_without_a_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let run = |ddp: bool| -> serde_json::Value {
        let out = dir.path().join(format!("{ddp}.json"));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args([
            "train",
            "--steps",
            "4",
            "--batch",
            "16",
            "--log-every",
            "0",
            "--json",
        ])
        .arg(&out)
        .env_remove("OMPI_COMM_WORLD_SIZE");
        if ddp {
            cmd.arg("--ddp");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
    };
    let (d, s) = (run(true), run(false));
    assert_eq!(d["loss"], s["loss"]);
    assert_eq!(d["ddp"]["world_size"], 1);
    assert_eq!(d["ddp"]["buckets"][0]["parameters"][0], "2.bias");
    assert!(s["ddp"].is_null());
}

/// Compiled DDP: the forward split at bucket boundaries gives the same loss and gradients
/// as the whole forward compiled as one graph (and as eager), and explains its graphs.
#[test]
fn split_compiled_graphs_give_the_gradients_of_the_whole_graph() {
    use kiln::nn::functional::{mse_loss, Reduction};
    use kiln::{compile, CompileOptions};
    let ddp = local_ddp(&[8, 16, 4], 3, ddp_common::small_buckets());
    assert_eq!(ddp.buckets().len(), 2);
    let x = Tensor::randn(&[6, 8], DType::F32, 4).unwrap();
    let y = Tensor::randn(&[6, 4], DType::F32, 5).unwrap();
    let grads = |loss: Tensor| -> (f64, Vec<Vec<f64>>) {
        ddp.module().zero_grad();
        let l = loss.item().unwrap();
        loss.backward().unwrap();
        let g = ddp
            .module()
            .parameters()
            .iter()
            .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
            .collect();
        (l, g)
    };
    let whole = compile(|xs: &[Tensor]| {
        Ok(vec![mse_loss(
            &ddp.forward(&xs[0])?,
            &xs[1],
            Reduction::Mean,
        )?])
    });
    let split = ddp.compile_split(CompileOptions::default().name("mlp"));
    let eager = grads(mse_loss(&ddp.forward(&x).unwrap(), &y, Reduction::Mean).unwrap());
    for _ in 0..2 {
        let w = grads(whole.call(&[x.clone(), y.clone()]).unwrap().remove(0));
        let s = grads(mse_loss(&split.forward(&x).unwrap(), &y, Reduction::Mean).unwrap());
        assert_eq!(s, w, "split vs whole compiled");
        for (a, b) in s.1.iter().flatten().zip(eager.1.iter().flatten()) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
                "{a} vs eager {b}"
            );
        }
    }
    assert_eq!(split.num_graphs(), 2);
    assert_eq!(split.segments(), vec![0..2, 2..3]);
    let text = split.explain();
    assert!(text.contains("2 graphs (each compiled"), "{text}");
    // two calls, one cache entry each (no recompile), its forward and backward compiled
    assert!(
        text.contains(
            "graph 0: layers 0..2, buckets [1]; 2 calls, 1 cache entries, 2 graphs compiled"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "graph 1: layers 2..3, buckets [0]; 2 calls, 1 cache entries, 2 graphs compiled"
        ),
        "{text}"
    );
}

/// A backward that fails after some buckets started leaves DDP ready for the next one.
#[test]
fn a_failed_backward_does_not_poison_the_next() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ddp = local_ddp(&[3, 4, 2], 5, ddp_common::small_buckets());
    let fail = Arc::new(AtomicBool::new(true));
    let f = fail.clone();
    // the first layer's weight is the last gradient to complete: the other bucket has
    // started by the time its hook fails
    ddp.module().parameters()[0]
        .register_hook(move |_| {
            if f.load(Ordering::SeqCst) {
                Err(kiln::Error::Autograd("injected failure".into()))
            } else {
                Ok(None)
            }
        })
        .unwrap();
    let x = Tensor::randn(&[5, 3], DType::F32, 9).unwrap();
    let loss = || ddp.forward(&x).unwrap().sum(&[0, 1], false).unwrap();
    let e = loss().backward().unwrap_err().to_string();
    assert!(e.contains("injected failure"), "{e}");
    fail.store(false, Ordering::SeqCst);
    ddp.module().zero_grad();
    loss().backward().unwrap();
    assert!(ddp.module().parameters().iter().all(|p| p.grad().is_some()));
}

/// Compiled DDP for any function (torch's DDPOptimizer): `ddp.compile` cuts the traced
/// graph where the parameters used change bucket, so a model that is not a `Sequential`
/// (here a residual block) trains as one forward and backward per bucket run. Gradients
/// equal the unsplit compiled graph's and eager's, and the last layer's bucket is complete
/// while the first layer's gradient is still to be computed: its all-reduce could overlap.
#[test]
fn any_compiled_function_splits_at_bucket_boundaries() {
    use kiln::nn::functional::{mse_loss, Reduction};
    use kiln::{compile, CompileOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let ddp = three_buckets(11);
    let m = ddp.module();
    let residual = |x: &Tensor| -> kiln::Result<Tensor> {
        let h = m.get(1).unwrap().forward(&m.get(0).unwrap().forward(x)?)?;
        let r = m.get(3).unwrap().forward(&m.get(2).unwrap().forward(&h)?)?;
        m.get(4).unwrap().forward(&r.add(&h)?)
    };
    let loss_of = |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
        Ok(vec![mse_loss(&residual(&xs[0])?, &xs[1], Reduction::Mean)?])
    };
    let x = Tensor::randn(&[5, 8], DType::F32, 12).unwrap();
    let y = Tensor::randn(&[5, 4], DType::F32, 13).unwrap();
    let params = m.parameters();
    // when the last layer's weight is complete: how many first-layer grads exist already
    let first_done_early = Arc::new(AtomicUsize::new(usize::MAX));
    let (w0, w4) = (params[0].clone(), params[4].clone());
    let seen = first_done_early.clone();
    w4.register_post_accumulate_grad_hook(move |_| {
        seen.store(usize::from(w0.grad().is_some()), Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    let grads = |loss: Tensor| -> (f64, Vec<Vec<f64>>, usize) {
        first_done_early.store(usize::MAX, Ordering::SeqCst);
        let (l, g) = loss_and_grads(m, loss);
        (l, g, first_done_early.load(Ordering::SeqCst))
    };
    let eager = grads(loss_of(&[x.clone(), y.clone()]).unwrap().remove(0));
    let whole = compile(loss_of);
    let split = ddp.compile(loss_of, CompileOptions::default().name("residual"));
    let close = |a: &[Vec<f64>], b: &[Vec<f64>], what: &str| {
        for (p, q) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!(
                (p - q).abs() <= 1e-5 * q.abs().max(1e-3),
                "{what}: {p} vs {q}"
            );
        }
    };
    for _ in 0..2 {
        let w = grads(whole.call(&[x.clone(), y.clone()]).unwrap().remove(0));
        let s = grads(split.call(&[x.clone(), y.clone()]).unwrap().remove(0));
        assert!(
            (s.0 - w.0).abs() <= 1e-6 * w.0.abs(),
            "loss {} vs {}",
            s.0,
            w.0
        );
        close(&s.1, &w.1, "split vs whole compiled");
        close(&s.1, &eager.1, "split vs eager");
        // one backward node: the first layer's gradient comes with the last one's
        assert_eq!(w.2, 1, "whole graph");
        // split: the last bucket's weight is complete before the first layer's backward
        assert_eq!(s.2, 0, "split graph");
    }
    assert_eq!(whole.training_graphs().len(), 1);
    assert_eq!(split.training_graphs().len(), 3);
    assert_eq!(split.explain_last().partitions.len(), 3);
    let text = ddp.explain_compiled(&split);
    assert!(text.starts_with(&ddp.bucket_table()), "{text}");
    assert!(
        text.contains("3 graphs (each a compiled forward and backward)"),
        "{text}"
    );
    assert!(text.contains("graph 2: @residual_seg2 ("), "{text}");
    let st = split.stats();
    assert_eq!(
        (st.entries, st.compiles),
        (1, 6),
        "one entry: three forwards and backwards"
    );
}

/// The graph split takes what a whole compiled graph takes: a transposed (non-contiguous)
/// input, a sliced target, a batch of one and an odd batch; its loss and gradients equal
/// eager's on each, and a new input shape recompiles every segment.
#[test]
fn the_split_takes_non_contiguous_inputs_and_odd_batches() {
    use kiln::nn::functional::{mse_loss, Reduction};
    use kiln::CompileOptions;
    let ddp = three_buckets(21);
    let m = ddp.module();
    let loss_of = |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
        Ok(vec![mse_loss(&m.forward(&xs[0])?, &xs[1], Reduction::Sum)?])
    };
    let split = ddp.compile(loss_of, CompileOptions::default().name("odd"));
    for (i, batch) in [5usize, 1, 7].into_iter().enumerate() {
        let seed = 40 + i as u64;
        // x: the transpose of a [8, batch] tensor; y: every other column of a [batch, 8]
        let x = Tensor::randn(&[8, batch], DType::F32, seed)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let y = Tensor::randn(&[batch, 8], DType::F32, seed + 100)
            .unwrap()
            .slice(1, 0, 8, 2)
            .unwrap();
        if batch > 1 {
            assert!(!x.is_contiguous() && !y.is_contiguous());
        }
        let want = loss_and_grads(m, loss_of(&[x.clone(), y.clone()]).unwrap().remove(0));
        let got = loss_and_grads(m, split.call(&[x.clone(), y.clone()]).unwrap().remove(0));
        assert!(
            (got.0 - want.0).abs() <= 1e-5 * want.0.abs(),
            "batch {batch}: loss {} vs eager {}",
            got.0,
            want.0
        );
        for (n, (p, q)) in got
            .1
            .iter()
            .flatten()
            .zip(want.1.iter().flatten())
            .enumerate()
        {
            assert!(
                (p - q).abs() <= 1e-5 * q.abs().max(1e-3),
                "batch {batch}: gradient element {n}: {p} vs eager {q}"
            );
        }
    }
    let st = split.stats();
    assert_eq!(st.entries, 3, "one entry per batch size");
    assert_eq!(
        split.training_graphs().len(),
        9,
        "3 segments for each entry"
    );
}
