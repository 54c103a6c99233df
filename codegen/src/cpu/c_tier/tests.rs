//! The C tier against the Cranelift tier, kernel by kernel: every kernel of a set of graphs
//! (row kernels of softmax, layer norm and a variance in f64, sums, max and min, column
//! sums (after two full-size ops: a lone one runs on the runtime, not a nest), bool masks
//! and selects, transcendental chains, exp, tanh and sigmoid on bounded ranges, and
//! polynomials fitted to ops and chains on their ranges, each taking the routine the
//! Cranelift emitter takes) is taken by the C tier and agrees with its Cranelift code at
//! several specialisations; the checker rejects a wrong kernel; the cache serves a second
//! build and rebuilds damaged entries; kernels of one source share one build; a kernel whose
//! object is cached starts on it; `kiln_math.h` meets the error table of `cpu/math.rs`; and
//! the generated kernel function is snapshot-tested.

use super::cache::Cache;
use super::compiler::{build_kernel, load_cached, Compiler};
use super::source::{c_source, Lanes};
use super::validate::check_against;
use crate::cpu::dump::default_spec;
use crate::cpu::emit::{InnerAccess, Spec};
use crate::cpu::jit::compile;
use crate::cpu::plan::{kernel_for, CpuKernel};
use crate::loops::LoopNest;
use crate::CodegenOptions;
use kiln_ir::text::parse_module;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;

const GRAPHS: &str = r#"
graph @softmax(%x: f32[R,C]) -> f32[R,C] {
  %0 = softmax %x {dim = -1} : f32[R,C]
  return %0
}
graph @layernorm(%x: f32[R,C], %w: f32[C], %b: f32[C]) -> f32[R,C] {
  %0 = layer_norm %x, %w, %b {ndim = 1, eps = 1e-5} : f32[R,C]
  return %0
}
graph @variance(%x: f32[R,C]) -> f32[R,1] {
  %0 = var %x {dims = [1], correction = 1, keepdim = true} : f32[R,1]
  return %0
}
graph @extremes(%x: f32[R,C]) -> (f32[R], f32[R], f32[R]) {
  %0 = amax %x {dims = [1], keepdim = false} : f32[R]
  %1 = amin %x {dims = [1], keepdim = false} : f32[R]
  %2 = mean %x {dims = [1], keepdim = false} : f32[R]
  return %0, %1, %2
}
graph @column_sum(%x: f32[C,R], %m: f32[R]) -> (f32[R], f32[R]) {
  %a = mul %x, %x : f32[C,R]
  %b = add %a, %x : f32[C,R]
  %0 = sum %b {dims = [0], keepdim = false} : f32[R]
  %1 = sub %0, %m : f32[R]
  %2 = mul %0, %0 : f32[R]
  return %1, %2
}
graph @masks(%x: f32[R,C], %y: f32[R,C]) -> (f32[R,C], bool[R,C], f32[R,C]) {
  %0 = gt %x, %y : bool[R,C]
  %1 = isnan %x : bool[R,C]
  %2 = logical_or %0, %1 : bool[R,C]
  %3 = where %2, %x, %y : f32[R,C]
  %4 = cast %0 {dtype = f32} : f32[R,C]
  %5 = maximum %x, %y : f32[R,C]
  %6 = add %4, %5 : f32[R,C]
  return %3, %2, %6
}
graph @chains(%x: f32[R,C], %y: f32[C]) -> (f32[R,C], f32[R,C], f32[R,C]) {
  %0 = gelu %x {approximate = "tanh"} : f32[R,C]
  %1 = sigmoid %0 : f32[R,C]
  %2 = mul %1, %y : f32[R,C]
  %3 = exp %x : f32[R,C]
  %4 = log1p %3 : f32[R,C]
  %5 = erf %x : f32[R,C]
  %6 = sin %x : f32[R,C]
  %7 = atan2 %5, %6 : f32[R,C]
  %8 = pow %3, %y : f32[R,C]
  %9 = remainder %x, %y : f32[R,C]
  %10 = add %8, %9 : f32[R,C]
  return %2, %4, %7
}
"#;

/// exp, tanh and sigmoid of clamped (bounded) values.
const BOUNDED: &str = r#"
graph @fitted(%x: f32[R,C]) -> (f32[R,C], f32[R,C]) {
  %0 = tanh %x : f32[R,C]
  %1 = sigmoid %0 : f32[R,C]
  %2 = add %1, 0.3 : f32[R,C]
  %3 = mul %2, 1.4 : f32[R,C]
  %4 = tanh %3 : f32[R,C]
  %5 = sigmoid %4 : f32[R,C]
  %6 = tanh %x : f32[R,C]
  %7 = sigmoid %6 : f32[R,C]
  %8 = mul %7, %x : f32[R,C]
  return %5, %8
}
graph @bounded(%x: f32[R,C]) -> (f32[R,C], f32[R,C], f32[R,C]) {
  %0 = clamp %x, -5.0, 5.0 : f32[R,C]
  %1 = tanh %0 : f32[R,C]
  %2 = sigmoid %0 : f32[R,C]
  %3 = exp %0 : f32[R,C]
  %4 = add %1, %2 : f32[R,C]
  %5 = clamp %x, -200.0, 0.0 : f32[R,C]
  %6 = exp %5 : f32[R,C]
  %7 = sigmoid %5 : f32[R,C]
  %8 = sub %6, %7 : f32[R,C]
  %9 = clamp %x, -50.0, 80.0 : f32[R,C]
  %10 = exp %9 : f32[R,C]
  return %4, %8, %10
}
"#;

/// Every loop-nest kernel of the graphs above (fused as the cpu backend fuses them).
fn nests() -> Vec<LoopNest> {
    let mut out = nests_of(GRAPHS);
    out.extend(nests_of(BOUNDED));
    out
}

/// The loop-nest kernels of the graphs of `text`.
fn nests_of(text: &str) -> Vec<LoopNest> {
    let mut out = Vec::new();
    for g in parse_module(text).expect("valid IR") {
        let opt = run_passes(
            &g,
            &["decompose", "fuse"],
            &PassOptions::rendering(crate::cpu::renders),
            false,
        )
        .expect("passes");
        let s = schedule(&opt).expect("schedules");
        for k in &s.kernels {
            if let CpuKernel::Nest(n) = kernel_for(&k.body, k.kind, &CodegenOptions::default()) {
                out.push(n.nest.clone());
            }
        }
    }
    out
}

/// `spec` with every buffer read along the inner loop with a stride instead.
fn strided(nest: &LoopNest, spec: &Spec) -> Spec {
    let mut s = spec.clone();
    for (a, b) in s.access.iter_mut().zip(&nest.buffers) {
        if *a == InnerAccess::Contiguous && b.role == crate::loops::Role::Input {
            *a = InnerAccess::Strided;
        }
    }
    s
}

fn compiler() -> &'static Compiler {
    Compiler::find().expect("the tests need a C compiler (cc, gcc or clang)")
}

#[test]
fn every_kernel_is_taken_and_agrees_with_its_cranelift_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::open(dir.path());
    let opts = CodegenOptions::default();
    let nests = nests();
    assert!(nests.len() >= 7, "{} kernels", nests.len());
    let mut checked = 0;
    for nest in &nests {
        let base = default_spec(nest, &opts);
        let mut specs = vec![base.clone(), strided(nest, &base)];
        if base.outer > 0 {
            // the rows as one collapsed dim less (a flat pointwise kernel's form)
            let mut flat = base.clone();
            flat.outer = 0;
            specs.push(flat);
        }
        // every call streaming its outputs where their stores are aligned (the check's
        // buffers start at multiples of 64, and its rows of one vector keep them so)
        let streamed: Vec<Spec> = specs
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.opts.stream_min_bytes = Some(0);
                s
            })
            .collect();
        specs.extend(streamed);
        for spec in &specs {
            let source = c_source(nest, spec, Lanes::host())
                .unwrap_or_else(|e| panic!("{}: not taken: {e}", nest.name));
            let built = build_kernel(compiler(), cache.as_ref(), &nest.name, &source)
                .unwrap_or_else(|e| panic!("{}: {e}", nest.name));
            let cranelift = compile(nest, spec).expect("cranelift");
            check_against(nest, spec, cranelift, built.f)
                .unwrap_or_else(|e| panic!("{} at {spec:?}: {e}\n{nest}", nest.name));
            checked += 1;
        }
    }
    assert!(checked >= 28, "{checked} specialisations checked");
}

#[test]
fn the_check_rejects_a_kernel_that_computes_something_else() {
    let g = |op: &str| {
        format!(
            "graph @k(%x: f32[R,C]) -> f32[R,C] {{\n  %0 = {op} %x : f32[R,C]\n  return %0\n}}\n"
        )
    };
    let nest_of = |text: &str| {
        let g = &parse_module(text).expect("valid IR")[0];
        let opt = run_passes(
            g,
            &["decompose", "fuse"],
            &PassOptions::rendering(crate::cpu::renders),
            false,
        )
        .expect("passes");
        let s = schedule(&opt).expect("schedules");
        match kernel_for(
            &s.kernels[0].body,
            s.kernels[0].kind,
            &CodegenOptions::default(),
        ) {
            CpuKernel::Nest(n) => n.nest.clone(),
            _ => panic!("not a nest"),
        }
    };
    let (exp, tanh) = (nest_of(&g("exp")), nest_of(&g("tanh")));
    let spec = default_spec(&exp, &CodegenOptions::default());
    let source = c_source(&tanh, &spec, Lanes::host()).expect("taken");
    let wrong = build_kernel(compiler(), None, "tanh", &source).expect("builds");
    let cranelift = compile(&exp, &spec).expect("cranelift");
    let err = check_against(&exp, &spec, cranelift, wrong.f).expect_err("a mismatch");
    assert!(err.contains("Cranelift") && err.contains("C "), "{err}");
    // and the right one passes
    let right = build_kernel(
        compiler(),
        None,
        "exp",
        &c_source(&exp, &spec, Lanes::host()).expect("taken"),
    )
    .expect("builds");
    check_against(&exp, &spec, cranelift, right.f).expect("agrees");
}

#[test]
fn the_cache_serves_a_second_build_and_rebuilds_a_damaged_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::open(dir.path()).expect("cache");
    let nest = nests().into_iter().next().expect("a kernel");
    let spec = default_spec(&nest, &CodegenOptions::default());
    let source = c_source(&nest, &spec, Lanes::host()).expect("taken");
    let cranelift = compile(&nest, &spec).expect("cranelift");
    let first = build_kernel(compiler(), Some(&cache), &nest.name, &source).expect("builds");
    assert!(!first.cached);
    let second = build_kernel(compiler(), Some(&cache), &nest.name, &source).expect("builds");
    assert!(second.cached, "the second build comes from the cache");
    check_against(&nest, &spec, cranelift, second.f).expect("the cached kernel agrees");
    let obj = cache.object_path(&compiler().key(&source));
    let bytes = std::fs::read(&obj).expect("object");
    // truncated, then one byte flipped in the middle: each is rebuilt, never loaded
    for damaged in [bytes[..bytes.len() / 2].to_vec(), {
        let mut b = bytes.clone();
        let i = b.len() / 2;
        b[i] ^= 0x5a;
        b
    }] {
        std::fs::write(&obj, &damaged).expect("damage");
        let again = build_kernel(compiler(), Some(&cache), &nest.name, &source).expect("builds");
        assert!(!again.cached, "a damaged entry is compiled again");
        check_against(&nest, &spec, cranelift, again.f).expect("the rebuilt kernel agrees");
        // the entry was rewritten: the next build takes it from the cache
        let next = build_kernel(compiler(), Some(&cache), &nest.name, &source).expect("builds");
        assert!(next.cached, "the rewritten entry is served");
    }
}

/// The nest of a layer `tanh(x * scale)`: a distinct source per `scale`.
fn layer_nest(scale: &str) -> LoopNest {
    nests_of(&format!(
        "graph @layer(%x: f32[R,C]) -> f32[R,C] {{
  %0 = mul %x, {scale} : f32[R,C]
  %1 = tanh %0 : f32[R,C]
  return %1
}}
"
    ))
    .remove(0)
}

#[test]
fn kernels_of_the_same_source_share_one_build() {
    // a model's layers: the same nest under other names (constants no other test uses, so
    // no other test's build of it is in this process's table)
    let (nest, other) = (layer_nest("0.8173"), layer_nest("0.8174"));
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = CodegenOptions {
        tier: crate::TierPolicy::CUpFront,
        cache_dir: Some(dir.path().to_path_buf()),
        ..CodegenOptions::default()
    };
    let layer = |n: &LoopNest, name: &str| {
        let mut n = n.clone();
        n.name = name.to_string();
        let mut spec = default_spec(&n, &opts);
        spec.opts = opts.clone();
        let cranelift = compile(&n, &spec).expect("cranelift");
        super::TieredFn::new(cranelift, &n, &spec).report()
    };
    let first = layer(&nest, "k1_layer0");
    let second = layer(&nest, "k9_layer1");
    let third = layer(&other, "k17_layer2");
    for t in [&first, &second, &third] {
        assert_eq!(t.tier, super::Tier::C, "{t}");
        assert!(t.c_since.is_some(), "a kernel on C says since when: {t}");
    }
    assert!(first.note.contains("compiled by"), "{first}");
    assert!(
        second
            .note
            .contains("the object built for k1_layer0 (the same source)"),
        "{second}"
    );
    // another constant is another source: built for itself
    assert!(third.note.contains("compiled by"), "{third}");
}

#[test]
fn a_kernel_whose_object_is_cached_starts_on_it() {
    // constants no other test uses: nothing in this process's table has their sources
    let (nest, other) = (layer_nest("0.8175"), layer_nest("0.8176"));
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = CodegenOptions {
        tier: crate::TierPolicy::Auto,
        // never hot in this test: only the first call's look into the cache can move them
        c_tier_after: std::time::Duration::from_secs(3600),
        cache_dir: Some(dir.path().to_path_buf()),
        ..CodegenOptions::default()
    };
    let spec_of = |n: &LoopNest| {
        let mut spec = default_spec(n, &opts);
        spec.opts = opts.clone();
        spec
    };
    let (spec, other_spec) = (spec_of(&nest), spec_of(&other));
    // an earlier process compiled `nest`: its object is in the cache, not in this process's
    // table of builds
    let cache = Cache::open(dir.path()).expect("cache");
    let source = c_source(&nest, &spec, Lanes::host()).expect("taken");
    build_kernel(compiler(), Some(&cache), &nest.name, &source).expect("builds");
    let other_source = c_source(&other, &other_spec, Lanes::host()).expect("taken");
    assert!(load_cached(compiler(), &cache, &nest.name, &source)
        .expect("loads")
        .is_some());
    assert!(load_cached(compiler(), &cache, &other.name, &other_source)
        .expect("no error")
        .is_none());
    let cached = super::TieredFn::new(compile(&nest, &spec).expect("cranelift"), &nest, &spec);
    let fresh = super::TieredFn::new(
        compile(&other, &other_spec).expect("cranelift"),
        &other,
        &other_spec,
    );
    assert!(super::wait_for_c_tier(std::time::Duration::from_secs(120)));
    let (cached, fresh) = (cached.report(), fresh.report());
    assert_eq!(cached.tier, super::Tier::C, "{cached}");
    assert!(
        cached
            .note
            .starts_with("C tier at its first call: object from the cache"),
        "{cached}"
    );
    assert!(cached.c_since.is_some(), "{cached}");
    // not in the cache: it counts toward the threshold, as without a cache
    assert_eq!(fresh.tier, super::Tier::Counting, "{fresh}");
}

#[test]
fn math_header_meets_the_error_table() {
    let c = compiler();
    let dir = tempfile::tempdir().expect("tempdir");
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cpu/c_tier");
    let widths = if Lanes::host().0 == 4 {
        vec![4]
    } else {
        vec![Lanes::host().0, 4]
    };
    for w in widths {
        let exe = dir.path().join(format!("math_test_{w}"));
        let out = std::process::Command::new(&c.program)
            .args([
                "-O2",
                "-march=native",
                "-fno-math-errno",
                "-fno-trapping-math",
            ])
            .arg(format!("-DKILN_W={w}"))
            .arg("-I")
            .arg(&here)
            .arg(here.join("kiln_math_test.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-lm")
            .output()
            .expect("runs the compiler");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe).output().expect("runs");
        assert!(
            run.status.success(),
            "KILN_W={w}:\n{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

#[test]
fn kernel_source_snapshot() {
    let nest = nests()
        .into_iter()
        .find(|n| n.name.contains("row"))
        .expect("softmax's row kernel");
    let spec = default_spec(&nest, &CodegenOptions::default());
    let source = c_source(&nest, &spec, Lanes(16)).expect("taken");
    let kernel = &source[source.find("void kiln_kernel").expect("the function")..];
    insta::assert_snapshot!(format!("{nest}\n{kernel}"));
}

/// The C source of the one row kernel of graph `name` in [`GRAPHS`].
fn row_kernel_source(name: &str) -> String {
    row_kernel_source_with(name, &CodegenOptions::default())
}

/// [`row_kernel_source`] with `opts`.
fn row_kernel_source_with(name: &str, opts: &CodegenOptions) -> String {
    let start = GRAPHS.find(&format!("graph @{name}(")).expect("the graph");
    let text = &GRAPHS[start..];
    let text = &text[..text.find("\n}\n").expect("its end") + 3];
    let nests = nests_of(text);
    let [nest] = nests.as_slice() else {
        panic!("{name}: one kernel, got {}", nests.len());
    };
    let mut spec = default_spec(nest, opts);
    spec.opts = opts.clone();
    c_source(nest, &spec, Lanes(16)).expect("taken")
}

#[test]
fn write_prefetches_ride_with_the_read_prefetches() {
    let read = ", 0, 3);";
    let write = ", 1, 3);";
    // softmax: its second loop (exp(x - max), stored) prefetches the next row of x and of y
    let softmax = row_kernel_source("softmax");
    let loops: Vec<&str> = softmax.split("for (; i + ").collect();
    let prefetching: Vec<&&str> = loops
        .iter()
        .filter(|l| l.contains("__builtin_prefetch"))
        .collect();
    assert_eq!(prefetching.len(), 1, "one prefetching loop in\n{softmax}");
    assert!(
        prefetching[0].contains(read) && prefetching[0].contains(write),
        "{softmax}"
    );
    // layernorm: the second loop (the variance) prefetches x's next row; the last loop, which
    // only loads, scales and stores, issues no prefetch of y's
    let layernorm = row_kernel_source("layernorm");
    assert!(layernorm.contains(read), "{layernorm}");
    assert!(!layernorm.contains(write), "{layernorm}");
}

#[test]
fn one_loop_reductions_prefetch_a_page_ahead() {
    let ahead = "* 4 + 4096, 0, 3);";
    // the sum of squares of each row, in one loop: x is prefetched a page ahead, once per
    // 64-byte line of the unrolled body
    let text = "graph @sum_of_squares(%x: f32[R,C]) -> f32[R] {
  %0 = mul %x, %x : f32[R,C]
  %1 = sum %0 {dims = [1], keepdim = false} : f32[R]
  return %1
}
";
    let [nest] = nests_of(text).try_into().expect("one kernel");
    let spec = default_spec(&nest, &CodegenOptions::default());
    let source = c_source(&nest, &spec, Lanes(16)).expect("taken");
    assert_eq!(source.matches(ahead).count(), 4, "{source}");
    // row kernels of several loops prefetch the next row instead
    for name in ["softmax", "layernorm"] {
        let source = row_kernel_source(name);
        assert!(!source.contains(ahead), "{source}");
    }
}

#[test]
fn outputs_written_once_and_never_read_back_are_streamed() {
    let from = |min: Option<u64>| CodegenOptions {
        stream_min_bytes: min,
        ..CodegenOptions::default()
    };
    let kernel =
        |source: String| source[source.find("void kiln_kernel").expect("it")..].to_string();
    // layernorm stores its output once, in its last loop: streamed in calls that store
    // 1 MiB or more, where the addresses are aligned; the stores are fenced at the end
    let layernorm = kernel(row_kernel_source_with("layernorm", &from(Some(1 << 20))));
    for line in [
        "const int kiln_stream = KILN_STREAMS && n0 * n1 * 4 >= 1048576LL;",
        "const int nt3 = kiln_stream && (((uint64_t)(uintptr_t)(p3 + i0 * 4) | (uint64_t)s3_0) \
         & (4 * KILN_W - 1)) == 0;",
        "kf_store_to(b3 + (i + 0 * KILN_W) * 4, v19_0, nt3);",
        "if (kiln_stream) kiln_stream_fence();",
    ] {
        assert!(layernorm.contains(line), "no {line} in\n{layernorm}");
    }
    assert!(!layernorm.contains("kf_store("), "{layernorm}");
    // softmax stores exp(x - max) and scales it in place in the next loop: never streamed
    let softmax = kernel(row_kernel_source_with("softmax", &from(Some(0))));
    assert!(!softmax.contains("stream"), "{softmax}");
    // options that never stream: no streaming code
    let plain = kernel(row_kernel_source_with("layernorm", &from(None)));
    assert!(!plain.contains("stream"), "{plain}");
}

#[test]
fn bounded_arguments_take_the_ranges_routines() {
    let opts = CodegenOptions::default();
    let sources: Vec<String> = nests_of(BOUNDED)
        .iter()
        .map(|n| c_source(n, &default_spec(n, &opts), Lanes::host()).expect("taken"))
        .collect();
    let all = sources.join("\n");
    // tanh of [-5, 5]: no clamp; exp and sigmoid of [-5, 5] (NaN passes the clamp): scaled;
    // exp of [-200, 0]: scaled and flushed; sigmoid of [-200, 0] takes e^[0, 200]: the full exp
    // sigmoid(tanh x) (an argument in [-1, 1]) is a fitted odd polynomial ("x_"), the chain
    // after tanh one polynomial of its input ("t_" is the shifted form's argument)
    for routine in [
        "kiln_tanh_noclamp(",
        "kiln_exp_scaled(",
        "kiln_exp_scaled_flush(",
        "kiln_exp(kiln_neg(",
        "({ const kf t_ = kiln__fma(",
        "({ const kf x_ = ",
    ] {
        assert!(all.contains(routine), "no {routine} in\n{all}");
    }
}
