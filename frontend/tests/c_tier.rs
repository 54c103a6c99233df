//! The C tier end to end: `kiln run` with every kernel built by the C compiler agrees with
//! the Cranelift tier; a second process takes its kernels from the on-disk cache, and a
//! damaged cache entry is compiled again; without a C compiler the run still succeeds, on
//! Cranelift code, after one line saying so; `kiln dump --stage c` prints the source; and a
//! compiled function under the automatic policy switches its kernels to C code while it
//! runs, every call agreeing with eager.

mod common;

use common::tmp;
use kiln::{compile_with, Backend, CompileOptions, Tensor, Tier, TierPolicy};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const GRAPH: &str =
    "graph @g(%x: f32[37,301], %w: f32[301]) -> (f32[37,301], f32[37], f32[37,301]) {
  %0 = softmax %x {dim = 1} : f32[37,301]
  %1 = mul %x, %x : f32[37,301]
  %2 = sum %1 {dims = [1], keepdim = false} : f32[37]
  %3 = gelu %x {approximate = \"tanh\"} : f32[37,301]
  %4 = mul %3, %w : f32[37,301]
  return %0, %2, %4
}
";

/// Runs `kiln args` with `envs`; returns success, stdout and stderr.
fn kiln_env(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args)
        .env_remove("KILN_LOGS")
        .env_remove("KILN_TIER");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run kiln");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `kiln run FILE --seed 7 --backend cpu --output OUT` plus `extra` arguments, with `envs`;
/// returns success and stderr.
fn run_cpu(f: &Path, out: &Path, extra: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let mut args = vec![
        "run",
        f.to_str().unwrap(),
        "--seed",
        "7",
        "--backend",
        "cpu",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (ok, _, err) = kiln_env(&args, envs);
    (ok, err)
}

/// The outputs `kiln run` saved, by name.
fn outputs(p: &Path) -> Vec<Vec<f64>> {
    let mut named = kiln::io::load(p).expect("outputs");
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
        .iter()
        .map(|(_, t)| t.to_vec_f64().expect("values"))
        .collect()
}

fn assert_close(a: &[Vec<f64>], b: &[Vec<f64>], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            assert!(
                (p - q).abs() <= 2e-5 * p.abs().max(q.abs()) + 1e-6,
                "{what}: {p} vs {q}"
            );
        }
    }
}

#[test]
fn run_on_the_c_tier_agrees_and_a_second_process_uses_the_cache() {
    let f = tmp("c_tier.kir", GRAPH);
    let cache = f.with_file_name("c-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let cache_s = cache.to_str().unwrap();
    let run = |out: &str, tier: &str| {
        let o = f.with_file_name(out);
        let (ok, err) = run_cpu(
            &f,
            &o,
            &[],
            &[
                ("KILN_TIER", tier),
                ("KILN_CACHE_DIR", cache_s),
                ("KILN_LOGS", "tiers"),
            ],
        );
        assert!(ok, "{err}");
        (outputs(&o), err)
    };
    let (cranelift, log) = run("cl.safetensors", "cranelift");
    assert!(!log.contains("C tier"), "{log}");
    let (c, log) = run("c1.safetensors", "c");
    assert_close(&c, &cranelift, "C tier vs Cranelift");
    let built = log.matches("C tier after").count();
    assert!(built >= 3, "every kernel on the C tier:\n{log}");
    assert!(log.contains("compiled by"), "{log}");
    // a second process: every object from the cache
    let (c2, log) = run("c2.safetensors", "c");
    assert_close(&c2, &cranelift, "cached C tier vs Cranelift");
    assert_eq!(log.matches("object from the cache").count(), built, "{log}");
    // damage every object: each is compiled again, never loaded
    for e in std::fs::read_dir(cache.join("c")).expect("cache dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "so") {
            let b = std::fs::read(&p).expect("object");
            std::fs::write(&p, &b[..b.len() / 3]).expect("truncate");
        }
    }
    let (c3, log) = run("c3.safetensors", "c");
    assert_close(&c3, &cranelift, "rebuilt C tier vs Cranelift");
    assert!(!log.contains("object from the cache"), "{log}");
    assert_eq!(log.matches("compiled by").count(), built, "{log}");
}

#[test]
fn without_a_c_compiler_kernels_stay_on_cranelift_after_one_line() {
    let f = tmp("no_cc.kir", GRAPH);
    let cache = f.with_file_name("no-cc-cache");
    let o = f.with_file_name("no_cc.safetensors");
    let (ok, err) = run_cpu(
        &f,
        &o,
        &["--time", "3"],
        &[
            ("KILN_TIER", "c"),
            ("CC", "/nonexistent/cc"),
            ("KILN_CACHE_DIR", cache.to_str().unwrap()),
        ],
    );
    assert!(ok, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("C compiler")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("stay on Cranelift"), "{err}");
    let o2 = f.with_file_name("no_cc_cl.safetensors");
    let (ok, err) = run_cpu(&f, &o2, &[], &[("KILN_TIER", "cranelift")]);
    assert!(ok, "{err}");
    assert_eq!(outputs(&o), outputs(&o2), "the same Cranelift code");
}

#[test]
fn dump_c_prints_each_kernels_source() {
    let f = tmp("dump_c.kir", GRAPH);
    let (ok, out, err) = kiln_env(&["dump", f.to_str().unwrap(), "--stage", "c"], &[]);
    assert!(ok, "{err}");
    assert!(out.matches("void kiln_kernel(").count() >= 3, "{out}");
    assert!(out.contains("#define KILN_W"), "{out}");
    assert!(out.contains("kiln_exp"), "{out}");
}

#[test]
fn the_automatic_policy_switches_to_c_code_while_calls_agree_with_eager() {
    let f = |x: &[Tensor]| -> kiln::Result<Vec<Tensor>> {
        let s = x[0].softmax(-1)?;
        let t = x[0].mul(&x[1])?.tanh()?;
        Ok(vec![s, t.sum(&[-1], false)?])
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = CompileOptions::default()
        .backend(Backend::Cpu)
        .tier(TierPolicy::Auto)
        .c_tier_after(Duration::ZERO);
    opts.codegen.cache_dir = Some(dir.path().to_path_buf());
    let cf = compile_with(f, opts);
    let start = Instant::now();
    let mut calls = 0;
    let mut switched_at = None;
    // until every kernel runs C code (or a minute passes), then ten calls more
    while start.elapsed() < Duration::from_secs(60) {
        let seed = 100 + calls as u64;
        let xs = vec![
            Tensor::randn(&[29, 211], kiln::DType::F32, seed).expect("x"),
            Tensor::randn(&[211], kiln::DType::F32, seed + 1).expect("w"),
        ];
        let got = cf.call(&xs).expect("compiled");
        let want = f(&xs).expect("eager");
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            // normwise: the row sums cancel (tanh of both signs), so one element's relative
            // error says little
            let (g, w) = (g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
            let diff: f64 = g.iter().zip(&w).map(|(p, q)| (p - q) * (p - q)).sum();
            let norm: f64 = w.iter().map(|q| q * q).sum();
            let rel = (diff / norm).sqrt();
            assert!(
                rel <= 1e-5,
                "call {calls}, output {o}: relative L2 error {rel:e}"
            );
        }
        calls += 1;
        let all_c = {
            let t = kiln::tiers();
            !t.is_empty() && t.iter().all(|k| k.tier == Tier::C)
        };
        match switched_at {
            None if all_c => switched_at = Some(calls),
            Some(at) if calls >= at + 10 => break,
            _ => {}
        }
    }
    assert!(
        switched_at.is_some(),
        "no switch to the C tier in {calls} calls: {:?}",
        kiln::tiers()
    );
    // explain names each kernel's tier and how its C code was made
    let report = cf.explain_last();
    assert!(!report.tiers.is_empty(), "{report}");
    for t in &report.tiers {
        assert_eq!(t.tier, Tier::C, "{report}");
        assert!(t.note.starts_with("C tier after"), "{t}");
        // the moment it reached full speed: after the first call, before the switch was seen
        let at = t.c_since.expect("a kernel on C knows when it got there");
        assert!(at >= start && at <= Instant::now(), "{t}");
    }
    assert!(report.to_string().contains("tier: "), "{report}");
}

#[test]
fn explain_says_which_tier_each_kernel_runs_and_why() {
    let f = |x: &Tensor| x.softmax(-1);
    let x = Tensor::randn(&[7, 33], kiln::DType::F32, 3).expect("x");
    // the Cranelift-only policy: every kernel on Cranelift, for that reason
    let only = compile_with(
        f,
        CompileOptions::default()
            .backend(Backend::Cpu)
            .tier(TierPolicy::CraneliftOnly),
    );
    only.call(&x).expect("compiled");
    let report = only.explain_last();
    assert!(!report.tiers.is_empty(), "{report}");
    for t in &report.tiers {
        assert_eq!(t.tier, Tier::Cranelift, "{report}");
        assert_eq!(t.note, "the tier policy is Cranelift only", "{report}");
    }
    // the automatic policy with a threshold far away: counting, and how far it has come
    // (an empty cache: with the kernel's object in it, it would start on C code)
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = CompileOptions::default()
        .backend(Backend::Cpu)
        .tier(TierPolicy::Auto)
        .c_tier_after(Duration::from_secs(3600));
    opts.codegen.cache_dir = Some(dir.path().to_path_buf());
    let auto = compile_with(f, opts);
    auto.call(&x).expect("compiled");
    auto.call(&x).expect("compiled");
    let report = auto.explain_last();
    assert!(!report.tiers.is_empty(), "{report}");
    for t in &report.tiers {
        assert_eq!(t.tier, Tier::Counting, "{report}");
        assert!(
            t.note.starts_with("2 calls, ")
                && t.note
                    .ends_with("of the 3600000.0 ms that send it to the C tier"),
            "{t}"
        );
    }
    let text = report.to_string();
    assert!(
        text.contains("tier: ") && text.contains("Cranelift (counting towards the C tier)"),
        "{text}"
    );
}

#[test]
fn the_c_tier_rounds_a_product_before_adding_it_as_eager_does() {
    // a·a = 1 + 2^-11 + 2^-24 exactly, which rounds to 1 + 2^-11 in f32 (a tie, to even):
    // a·a + c is 0 with two roundings (eager, Cranelift) and 2^-24 fused into one
    let a = 1.0f32 + 2f32.powi(-12);
    let c = -(1.0f32 + 2f32.powi(-11));
    let n = 37;
    let xs = vec![
        Tensor::from_vec(vec![a; n], &[n]).expect("a"),
        Tensor::from_vec(vec![a; n], &[n]).expect("b"),
        Tensor::from_vec(vec![c; n], &[n]).expect("c"),
    ];
    let f = |x: &[Tensor]| -> kiln::Result<Vec<Tensor>> { Ok(vec![x[0].mul(&x[1])?.add(&x[2])?]) };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = CompileOptions::default()
        .backend(Backend::Cpu)
        .tier(TierPolicy::CUpFront);
    opts.codegen.cache_dir = Some(dir.path().to_path_buf());
    let cf = compile_with(f, opts);
    let got = cf.call(&xs).expect("compiled")[0].to_vec::<f32>().unwrap();
    let want = f(&xs).expect("eager")[0].to_vec::<f32>().unwrap();
    assert!(want.iter().all(|&w| w == 0.0), "{want:?}");
    let report = cf.explain_last();
    if report.tiers.iter().all(|t| t.tier == Tier::C) {
        assert_eq!(got, want, "{report}");
    } else {
        eprintln!("skipped: no kernel on the C tier here ({report})");
    }
}
