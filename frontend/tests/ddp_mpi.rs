//! DDP across processes on MPI: each test launches itself under `mpirun -np 2` (the ranks
//! run the same test function with `KILN_DDP_WORKER` set) and checks what the ranks print.
//! Needs kiln's `mpi` feature and Open MPI's `mpirun`; without `mpirun` the tests print why
//! and pass (CI installs it: `.ci/run`).
#![cfg(feature = "mpi")]

mod ddp_common;
use ddp_common::{cases, max_rel_diff, sum_backward, train, two_heads, TwoHeads};
use kiln::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp};
use kiln::nn::{Module, Sequential};
use kiln::Tensor;
use std::process::Command;
use std::time::{Duration, Instant};

/// True inside a rank started by [`launch`].
fn worker() -> bool {
    std::env::var_os("KILN_DDP_WORKER").is_some()
}

/// True when `mpirun` runs here; otherwise says why the test does nothing.
fn has_mpirun() -> bool {
    let ok = Command::new("mpirun").arg("--version").output().is_ok();
    if !ok {
        println!("skipped: no mpirun on this machine (apt-get install openmpi-bin)");
    }
    ok
}

/// `program` as 2 MPI ranks (at most 120 s), allowed to run as root as CI does.
fn mpirun2(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("timeout");
    c.args(["120", "mpirun", "-np", "2", "--oversubscribe"])
        .arg(program)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// Stdout then stderr of a finished command.
fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs test `name` of this binary as 2 MPI ranks; returns (success, output, seconds), or
/// None (after saying why) when `mpirun` is missing.
fn launch(name: &str, env: &[(&str, &str)]) -> Option<(bool, String, f64)> {
    if !has_mpirun() {
        return None;
    }
    let start = Instant::now();
    let out = mpirun2(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("KILN_DDP_WORKER", "1")
        .env("RAYON_NUM_THREADS", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    Some((
        out.status.success(),
        text(&out),
        start.elapsed().as_secs_f64(),
    ))
}

/// 5 steps of N=2 ranks on their shards equal one process on the whole batch, for SGD
/// with momentum and AdamW, eager and compiled, with and without `no_sync` accumulation;
/// and both ranks hold the same parameters.
#[test]
fn two_ranks_train_as_one_process() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        for case in cases() {
            let ddp = train(Some(g.clone()), case, 5).unwrap();
            let single = train(None, case, 5).unwrap();
            let d = max_rel_diff(&ddp, &single);
            assert!(d <= 1e-5, "{case:?}: rank {} differs by {d:e}", g.rank());
            let last = Tensor::from_vec(ddp[4].clone(), &[ddp[4].len()]).unwrap();
            let all = g.all_gather(&last).unwrap().wait().unwrap();
            assert_eq!(
                all[0].to_vec_f64().unwrap(),
                all[1].to_vec_f64().unwrap(),
                "{case:?}: the replicas differ"
            );
            println!(
                "rank {}: {case:?} max relative difference {d:.1e}",
                g.rank()
            );
        }
        println!("rank {}: ddp equivalence ok", g.rank());
        return;
    }
    let Some((ok, out, _)) = launch("two_ranks_train_as_one_process", &[]) else {
        return;
    };
    assert!(ok, "{out}");
    for r in 0..2 {
        assert!(
            out.contains(&format!("rank {r}: ddp equivalence ok")),
            "{out}"
        );
    }
}

/// Collectives over MPI: sum, average, max, broadcast from rank 1, all-gather, barrier; and
/// all-reduces of buffers larger than one MPI call's piece.
#[test]
fn collectives_over_mpi() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        assert_eq!((g.world_size(), g.backend_name()), (2, "mpi"));
        let r = g.rank() as f32;
        let t = Tensor::from_vec(vec![r + 1.0, -r], &[2]).unwrap();
        g.all_reduce(&t, ReduceOp::Sum).unwrap().wait().unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [3.0, -1.0]);
        let t = Tensor::from_vec(vec![r + 1.0, 10.0 * r], &[2]).unwrap();
        g.all_reduce(&t, ReduceOp::Avg).unwrap().wait().unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.5, 5.0]);
        let t = Tensor::from_vec(vec![r as f64, -(r as f64)], &[2]).unwrap();
        g.all_reduce(&t, ReduceOp::Max).unwrap().wait().unwrap();
        assert_eq!(t.to_vec::<f64>().unwrap(), [1.0, 0.0]);
        let t = Tensor::from_vec(vec![g.rank() as i64 * 7; 3], &[3]).unwrap();
        g.broadcast(&t, 1).unwrap().wait().unwrap();
        assert_eq!(t.to_vec::<i64>().unwrap(), [7, 7, 7]);
        let t = Tensor::from_vec(vec![r; 2], &[1, 2]).unwrap();
        let all = g.all_gather(&t).unwrap().wait().unwrap();
        assert_eq!(all[1].shape(), [1, 2]);
        assert_eq!(all[1].to_vec::<f32>().unwrap(), [1.0, 1.0]);
        g.barrier().unwrap();
        // two collectives in flight at once complete in order
        let a = Tensor::from_vec(vec![1.0f32; 1 << 20], &[1 << 20]).unwrap();
        let b = Tensor::from_vec(vec![2.0f32; 5], &[5]).unwrap();
        let (wa, wb) = (
            g.all_reduce(&a, ReduceOp::Sum).unwrap(),
            g.all_reduce(&b, ReduceOp::Sum).unwrap(),
        );
        wb.wait().unwrap();
        wa.wait().unwrap();
        assert!(a.to_vec::<f32>().unwrap().iter().all(|&v| v == 2.0));
        assert_eq!(b.to_vec::<f32>().unwrap(), [4.0; 5]);
        // buffers of several all-reduce pieces (2 MiB each) and a partial last one: every
        // element is reduced, each exactly once
        let n = (2 << 20) / 4 * 2 + 3;
        let v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 + 0.25 * r).collect();
        let t = Tensor::from_vec(v, &[n]).unwrap();
        g.all_reduce(&t, ReduceOp::Sum).unwrap().wait().unwrap();
        let got = t.to_vec::<f32>().unwrap();
        assert!(
            (0..n).all(|i| got[i] == 2.0 * (i % 1000) as f32 + 0.25),
            "a pieced f32 sum"
        );
        let n = (2 << 20) / 8 + 5;
        let v: Vec<f64> = (0..n).map(|i| i as f64 * (1.0 + 2.0 * r as f64)).collect();
        let t = Tensor::from_vec(v, &[n]).unwrap();
        g.all_reduce(&t, ReduceOp::Avg).unwrap().wait().unwrap();
        let got = t.to_vec::<f64>().unwrap();
        assert!(
            (0..n).all(|i| got[i] == 2.0 * i as f64),
            "a pieced f64 average"
        );
        println!("rank {}: collectives ok", g.rank());
        return;
    }
    let Some((ok, out, _)) = launch("collectives_over_mpi", &[]) else {
        return;
    };
    assert!(ok, "{out}");
    assert!(out.contains("rank 0: collectives ok") && out.contains("rank 1: collectives ok"));
}

/// A rank that hangs: the other fails within the timeout with an error naming it, and the
/// job is stopped (no rank hangs forever).
#[test]
fn a_hung_rank_is_named_within_the_timeout() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        if g.rank() == 1 {
            std::thread::sleep(Duration::from_secs(60));
        }
        let t = Tensor::from_vec(vec![1.0f32; 4], &[4]).unwrap();
        let e = g.all_reduce(&t, ReduceOp::Sum).unwrap().wait().unwrap_err();
        println!("rank {}: fault: {e}", g.rank());
        // a broken group refuses further collectives at once
        let e2 = g.barrier().unwrap_err().to_string();
        println!("rank {}: then: {e2}", g.rank());
        return;
    }
    let Some((ok, out, secs)) = launch(
        "a_hung_rank_is_named_within_the_timeout",
        &[("KILN_DIST_TIMEOUT", "3")],
    ) else {
        return;
    };
    assert!(!ok, "the job must fail: {out}");
    assert!(
        out.contains("rank 0: fault: distributed all_reduce #1: timed out after 3.0 s: rank 1 did not reach it"),
        "{out}"
    );
    assert!(out.contains("broken by an earlier failure"), "{out}");
    assert!(secs < 40.0, "took {secs} s: {out}");
}

/// A rank that dies: the job stops within the timeout, and the output names the rank.
#[test]
fn a_dead_rank_stops_the_job() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        if g.rank() == 1 {
            std::process::exit(3);
        }
        let t = Tensor::from_vec(vec![1.0f32; 4], &[4]).unwrap();
        let e = g.all_reduce(&t, ReduceOp::Sum).unwrap().wait().unwrap_err();
        println!("rank {}: fault: {e}", g.rank());
        return;
    }
    let Some((ok, out, secs)) = launch("a_dead_rank_stops_the_job", &[("KILN_DIST_TIMEOUT", "3")])
    else {
        return;
    };
    assert!(!ok, "the job must fail: {out}");
    assert!(
        out.contains("rank 1 did not reach it") || out.contains(",1]"),
        "the output names rank 1: {out}"
    );
    assert!(secs < 40.0, "took {secs} s: {out}");
}

/// DDP keeps its bucket buffers between steps: a parameter that one rank used last step
/// and not this one counts as zero from that rank this step, not as last step's gradient.
/// Rank 0 uses head `b` every step and rank 1 only on step 0, on the same input, so `b`'s
/// averaged gradient is rank 0's own on step 0 and half of it afterwards.
#[test]
fn kept_buckets_count_a_parameter_unused_this_step_as_zero() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        let m = two_heads(5, 3, true);
        let opts = DdpOptions {
            find_unused_parameters: true,
            ..DdpOptions::default()
        };
        let ddp = DistributedDataParallel::new(m, g.clone(), opts).unwrap();
        let x = Tensor::randn(&[4, 5], kiln::DType::F32, 7).unwrap();
        let grads = |ddp: &DistributedDataParallel<TwoHeads>| -> Vec<Vec<f32>> {
            let m = ddp.module();
            m.zero_grad();
            sum_backward(ddp, &x).unwrap();
            [&m.a.weight, &m.b.weight]
                .iter()
                .map(|p| p.grad().unwrap().to_vec::<f32>().unwrap())
                .collect()
        };
        let first = grads(&ddp);
        for step in 1..4 {
            ddp.module().use_b.set(g.rank() == 0);
            let now = grads(&ddp);
            assert_eq!(now[0], first[0], "step {step}: head a, used by both ranks");
            let half: Vec<f32> = first[1].iter().map(|v| v / 2.0).collect();
            assert_eq!(now[1], half, "step {step}: head b, used by rank 0 only");
        }
        println!("rank {}: kept buckets ok", g.rank());
        return;
    }
    let Some((ok, out, _)) = launch(
        "kept_buckets_count_a_parameter_unused_this_step_as_zero",
        &[],
    ) else {
        return;
    };
    assert!(ok, "{out}");
    for r in 0..2 {
        assert!(out.contains(&format!("rank {r}: kept buckets ok")), "{out}");
    }
}

/// Ranks whose models differ fail at construction, naming the parameter.
#[test]
fn mismatched_parameters_are_detected_at_start() {
    if worker() {
        let g = ProcessGroup::mpi().unwrap();
        let hidden = if g.rank() == 0 { 16 } else { 17 };
        let m = Sequential::mlp(&[8, hidden, 4], 1).unwrap();
        let e = DistributedDataParallel::new(m, g.clone(), DdpOptions::default())
            .err()
            .expect("different shapes must fail");
        println!("rank {}: refused: {e}", g.rank());
        return;
    }
    let Some((ok, out, _)) = launch("mismatched_parameters_are_detected_at_start", &[]) else {
        return;
    };
    assert!(ok, "{out}");
    assert!(
        out.contains("rank 0: refused: distributed DistributedDataParallel::new: parameter `0.weight` ([16, 8] f32 on rank 0) differs in name, shape or dtype on rank 1"),
        "{out}"
    );
    assert!(out.contains("rank 1: refused:"), "{out}");
}

/// `kiln train --ddp` as 2 ranks (eager, and with the forward and loss compiled): the
/// global batch's loss per step, which rank 0 alone writes, follows a one-process run.
#[test]
fn kiln_train_ddp_follows_one_process() {
    if worker() {
        return;
    }
    if !has_mpirun() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let common = [
        "train",
        "--steps",
        "12",
        "--batch",
        "64",
        "--optimizer",
        "sgd",
        "--momentum",
        "0.9",
        "--log-every",
        "0",
    ];
    let losses = |p: &std::path::Path| -> Vec<f64> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v["loss"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let single = dir.path().join("single.json");
    let st = Command::new(kiln)
        .args(common)
        .arg("--json")
        .arg(&single)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    for compile in [false, true] {
        let multi = dir.path().join(format!("ddp-{compile}.json"));
        let mut cmd = mpirun2(kiln);
        cmd.args(common).args(["--ddp", "--json"]).arg(&multi);
        if compile {
            cmd.arg("--compile");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(
            text.matches("training an MLP").count(),
            1,
            "rank 0 alone reports: {text}"
        );
        assert!(
            text.contains("data-parallel over 2 ranks (mpi), 32 rows per rank"),
            "{text}"
        );
        let (a, b) = (losses(&multi), losses(&single));
        assert_eq!(a.len(), 12);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs(),
                "compile {compile}: {a:?} vs {b:?}"
            );
        }
    }
}

/// `kiln bench --ddp --quick` as 2 ranks: rank 0 alone reports the all-reduce and the
/// data-parallel step rows, and writes them as JSON.
#[test]
fn kiln_bench_ddp_reports_on_rank_zero() {
    if worker() {
        return;
    }
    if !has_mpirun() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ddp.json");
    let out = mpirun2(env!("CARGO_BIN_EXE_kiln"))
        .args(["bench", "--ddp", "--quick", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        text.matches("distributed: 2 ranks (mpi)").count(),
        1,
        "{text}"
    );
    assert!(text.contains("all_reduce  1.0 MiB f32 bucket"), "{text}");
    assert!(
        text.contains("train_mlp   global batch 16: 2 ranks"),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let d = &v["distributed"];
    assert_eq!(d["world_size"], 2);
    assert!(d["bus_gbs"].as_f64().unwrap() > 0.0);
    assert_eq!(d["steps"][0]["workload"], "train_mlp");
    assert!(d["steps"][0]["ratio"].as_f64().unwrap() > 0.0);
    assert!(d["steps"][0]["compiled_ratio"].as_f64().unwrap() > 0.0);
    // the quick MLP's parameters fit DDP's first bucket: its compiled step is one graph
    assert_eq!(d["steps"][0]["compiled_graphs"], 1);
}
