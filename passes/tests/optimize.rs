//! The optimiser on the corpus: every stage snapshotted, results preserved (interpreter
//! before vs after, on random inputs), the workloads' kernel counts and bytes checked
//! against written-down expectations, and the cases where the cost model beats greedy
//! left-to-right fusion.

#[path = "../../ir/tests/common/graph_gen.rs"]
mod graph_gen;

use kiln_ir::interp::{eval, random_inputs, Value};
use kiln_ir::text::parse_module;
use kiln_ir::{DType, Graph, Op};
use kiln_passes::greedy::{greedy_fuse, greedy_fuse_any_operand};
use kiln_passes::optimize::{optimize, OptimizeOptions};
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::{schedule, Schedule};
use kiln_passes::Fused;
use proptest::prelude::*;
use std::path::PathBuf;

fn corpus() -> Vec<(String, Graph)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            parse_module(&text)
                .unwrap()
                .into_iter()
                .map(move |g| (format!("{stem}__{}", g.name()), g))
        })
        .collect()
}

fn graph(name: &str) -> Graph {
    corpus()
        .into_iter()
        .find(|(n, _)| n.ends_with(&format!("__{name}")))
        .unwrap_or_else(|| panic!("no corpus graph @{name}"))
        .1
}

fn bind(symbol: &str) -> usize {
    2 + symbol.bytes().map(usize::from).sum::<usize>() % 4
}

fn inputs(g: &Graph, seed: u64) -> Vec<Value> {
    random_inputs(g, seed, &bind).unwrap()
}

fn small(g: &Graph) -> bool {
    g.nodes().all(|(_, n)| {
        n.ty.shape
            .dims()
            .iter()
            .map(|d| d.as_const().unwrap_or(8))
            .product::<usize>()
            <= 1 << 16
    })
}

/// Floats within 1e-4 of the tensor's largest magnitude (+1e-5 absolute): decompositions
/// round every intermediate to f32 where a composite op rounds once, and the differences
/// add up through matmuls and reductions, so the bound is normwise rather than per element.
/// Integers and bools exactly.
fn close(want: &Value, got: &Value) -> Result<(), String> {
    if want.shape != got.shape || want.dtype != got.dtype {
        return Err(format!(
            "{:?} {:?} vs {:?} {:?}",
            want.dtype, want.shape, got.dtype, got.shape
        ));
    }
    let scale = want
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let rel = match want.dtype {
        DType::F16 | DType::BF16 => 1e-2,
        _ => 1e-4,
    };
    for (i, (a, b)) in want.data.iter().zip(&got.data).enumerate() {
        let ok = if want.dtype.is_float() {
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * scale + 1e-5
        } else {
            a == b
        };
        if !ok {
            return Err(format!("element {i}: {a} before vs {b} after"));
        }
    }
    Ok(())
}

fn pipeline(g: &Graph) -> Fused {
    run_passes(g, &["decompose", "fuse"], &PassOptions::default(), true)
        .unwrap_or_else(|e| panic!("@{}: {e}", g.name()))
}

#[test]
fn every_pass_preserves_results_on_the_corpus() {
    let mut checked = 0;
    for (name, g) in corpus() {
        if !small(&g) {
            continue;
        }
        for seed in [1u64, 2] {
            let x = inputs(&g, seed);
            let want = eval(&g, &x).unwrap_or_else(|e| panic!("{name}: {e}"));
            for passes in [
                &["decompose"][..],
                &["simplify"],
                &["fuse"],
                &["decompose", "fuse"],
            ] {
                let o = run_passes(&g, passes, &PassOptions::default(), true)
                    .unwrap_or_else(|e| panic!("{name} {passes:?}: {e}"));
                let got =
                    eval(&o.graph, &x).unwrap_or_else(|e| panic!("{name} {passes:?}: {e}\n{o}"));
                for (w, r) in want.iter().zip(&got) {
                    close(w, r).unwrap_or_else(|m| panic!("{name} {passes:?}: {m}\n{o}"));
                }
            }
        }
        checked += 1;
    }
    assert!(
        checked >= 25,
        "only {checked} corpus graphs are small enough to interpret"
    );
}

#[test]
fn every_stage_of_every_corpus_graph() {
    for (name, g) in corpus() {
        let decomposed = run_passes(&g, &["decompose"], &PassOptions::default(), true).unwrap();
        let simplified = run_passes(
            &decomposed.graph,
            &["simplify"],
            &PassOptions::default(),
            true,
        )
        .unwrap();
        let optimized = pipeline(&g);
        let scheduled = schedule(&optimized).unwrap();
        let text = format!(
            "== decomposed ==\n{decomposed}\n== simplified ==\n{simplified}\n== optimized ==\n{optimized}\n== scheduled ==\n{scheduled}"
        );
        insta::assert_snapshot!(name, text);
    }
}

fn summary(s: &Schedule) -> String {
    let kinds: Vec<String> = s
        .kernels
        .iter()
        .map(|k| format!("k{} {} over {}", k.id, k.kind.name(), k.space))
        .collect();
    format!(
        "{} kernel(s), {} bytes moved: {}",
        s.kernels.len(),
        s.bytes_moved(64),
        kinds.join("; ")
    )
}

/// Expected kernels and bytes for each workload at its benchmark shape (inputs read once,
/// outputs written once; f32):
/// - softmax [8192,1024]: one row kernel reading and writing each element once: 2 × 32 MiB.
/// - layernorm [8192,1024]: one row kernel: x in, y out (32 MiB each) + weight and bias.
/// - reduce sum(x*x, dim 1) [4096,4096]: one reduction kernel: 64 MiB in, 16 KiB out.
/// - pointwise gelu(x*1.5+0.5)*sigmoid(x) [16M]: one kernel: 64 MiB in, 64 MiB out.
/// - tiny (20 ops on [1024]): one kernel: 4 KiB in, 4 KiB out.
/// - mlp: two matmul kernels, bias and relu in the first one's epilogue, bias in the second.
#[test]
fn workload_kernels_and_bytes_meet_expectations() {
    let mib = 1 << 20;
    let cases: [(&str, usize, u64); 6] = [
        ("softmax", 1, 2 * 32 * mib),
        ("layernorm", 1, 2 * 32 * mib + 2 * 4096),
        ("reduce", 1, 64 * mib + 16 * 1024),
        ("pointwise", 1, 2 * 64 * mib),
        ("tiny", 1, 2 * 4096),
        (
            "mlp",
            2,
            4 * (256 * 1024 + 1024 * 4096 + 4096 + 256 * 4096)
                + 4 * (256 * 4096 + 4096 * 1024 + 1024 + 256 * 1024),
        ),
    ];
    for (name, kernels, bytes) in cases {
        let s = schedule(&pipeline(&graph(name))).unwrap();
        assert_eq!(s.kernels.len(), kernels, "{name}: {}", summary(&s));
        assert_eq!(s.bytes_moved(64), bytes, "{name}: {}", summary(&s));
    }
    // the block: attention and MLP with their epilogues; never more than one kernel per
    // original non-view op, and fewer bytes than the unfused program
    let block = graph("block");
    let unfused =
        schedule(&run_passes(&block, &["decompose"], &PassOptions::default(), true).unwrap())
            .unwrap();
    let fused = schedule(&pipeline(&block)).unwrap();
    assert!(
        fused.kernels.len() * 3 < unfused.kernels.len(),
        "{}",
        summary(&fused)
    );
    assert!(
        fused.bytes_moved(64) * 2 < unfused.bytes_moved(64),
        "{}",
        summary(&fused)
    );
}

/// The any-operand greedy walk: an op that cannot join its first operand's kernel joins
/// another operand's. Attention scores written by a matmul epilogue, then softmax: the whole
/// softmax joins the epilogue in both walks (a row kernel over the product's rows); a
/// residual add of the attention weights and their product with `w` joins that product's
/// epilogue only in the any-operand walk (its first operand's kernel, the scores', is the one
/// the product reads, so joining it would make a cycle).
#[test]
fn greedy_any_operand_joins_a_later_operands_kernel() {
    let text = r#"
graph @scores(%q: f32[2,4,16,8], %k: f32[2,4,8,16], %m: f32[2,1,1,16], %w: f32[16,16]) -> (f32[2,4,16,16], f32[2,4,16,16]) {
  %0 = matmul %q, %k : f32[2,4,16,16]
  %1 = mul %0, 0.35 : f32[2,4,16,16]
  %2 = add %1, %m : f32[2,4,16,16]
  %3 = softmax %2 {dim = -1} : f32[2,4,16,16]
  %4 = matmul %3, %w : f32[2,4,16,16]
  %5 = add %3, %4 : f32[2,4,16,16]
  return %3, %5
}
"#;
    let g = &parse_module(text).unwrap()[0];
    let d = run_passes(g, &["decompose"], &PassOptions::default(), true).unwrap();
    let first = schedule(&greedy_fuse(&d.graph)).unwrap();
    let any = schedule(&greedy_fuse_any_operand(&d.graph)).unwrap();
    let kinds = |s: &Schedule| s.kernels.iter().map(|k| k.kind.name()).collect::<Vec<_>>();
    assert_eq!(
        kinds(&first),
        vec!["matmul", "matmul", "pointwise"],
        "{}",
        summary(&first)
    );
    assert_eq!(kinds(&any), vec!["matmul", "matmul"], "{}", summary(&any));
    assert!(
        first.kernels.len() > any.kernels.len() && first.cost(64) > any.cost(64),
        "first operand: {}\nany operand: {}",
        summary(&first),
        summary(&any)
    );
}

/// Corpus graph `name`, decomposed, scheduled as the first-operand greedy walk fuses it and
/// as the e-graph's extraction does.
fn greedy_and_egraph(name: &str) -> (Schedule, Schedule) {
    let d = run_passes(&graph(name), &["decompose"], &PassOptions::default(), true).unwrap();
    let greedy = schedule(&greedy_fuse(&d.graph)).unwrap();
    let o = optimize(&d.graph, &OptimizeOptions::default()).unwrap();
    (greedy, schedule(&o.extracted).unwrap())
}

/// Cases where the e-graph's cost-based choice beats greedy left-to-right fusion, with why.
#[test]
fn cost_based_fusion_beats_greedy() {
    let cases: [(&str, &str); 2] = [
        (
            "norms",
            "layer_norm, rms_norm and softmax decomposed over [B,T,64]: greedy breaks each \
             norm where an op's first operand comes from another kernel (the centred x feeds \
             both the variance and the output) and writes full-row intermediates: 9 kernels \
             once each kernel is merged into its one consumer. The e-graph fuses the row \
             statistics with the ops that use them: 6 kernels and under half the bytes \
             (the statistics over the last two dims are reductions of their own in both, \
             as the loop nests reduce one dim).",
        ),
        (
            "transpose_twice",
            "transpose(transpose(x)) + x: the e-graph cancels the two transposes (an exact \
             identity), so the add reads x once for both operands; greedy has no rewrites \
             and reads x twice, once through the double transpose (2 kernels either way, \
             5 MiB vs 4 MiB moved).",
        ),
    ];
    for (name, why) in cases {
        let (greedy, best) = greedy_and_egraph(name);
        assert!(
            best.cost(64) < greedy.cost(64),
            "{name}: e-graph {} vs greedy {}",
            summary(&best),
            summary(&greedy)
        );
        insta::assert_snapshot!(
            format!("beats_greedy__{name}"),
            format!(
                "why: {why}\n\ngreedy:  {}\ne-graph: {}\n\n{best}",
                summary(&greedy),
                summary(&best)
            )
        );
    }
}

/// Greedy fusion merges a pointwise kernel into the one kernel that reads its results, when
/// no other kernel lies between them. AdamW on an embedding, whose gradient an eager
/// `index_add` makes: the walk starts a kernel at every op whose first operand is that
/// gradient or an input (the first moment, the second moment, the denominator, the
/// decayed parameter), each writing its result for the next; merged, the whole update is
/// one pass over the table (the f64 bias corrections stay in their scalar kernel). On the
/// rotary embedding the merge reaches the e-graph's program (each half's products fused
/// into the sums that read them), and on `where_relu_clamp` (nested wheres and clamps over
/// one x) it beats it: one kernel where the extraction keeps three. Both beat the walk
/// before the merge.
#[test]
fn greedy_merges_kernels_into_their_one_consumer() {
    let g = graph("embedding_adamw");
    let d = run_passes(&g, &["decompose"], &PassOptions::default(), true).unwrap();
    for greedy in [greedy_fuse(&d.graph), greedy_fuse_any_operand(&d.graph)] {
        let s = schedule(&greedy).unwrap();
        let mut kernels: Vec<(String, &str, usize)> = s
            .kernels
            .iter()
            .map(|k| (k.space.to_string(), k.kind.name(), k.outputs.len()))
            .collect();
        kernels.sort();
        // the fill and the index_add into it (one kernel); the f64 step and bias
        // corrections; the update, writing the parameter and both moments
        assert_eq!(
            kernels,
            vec![
                ("f32[50,8]".to_string(), "copy", 1),
                ("f32[50,8]".to_string(), "pointwise", 3),
                ("f64[]".to_string(), "pointwise", 3),
            ],
            "{}",
            summary(&s)
        );
        let x = inputs(&d.graph, 5);
        let want = eval(&g, &x).unwrap();
        let got = eval(&greedy.graph, &x).unwrap();
        for (w, r) in want.iter().zip(&got) {
            close(w, r).unwrap();
        }
    }
    for name in ["rope", "where_relu_clamp"] {
        let (greedy, best) = greedy_and_egraph(name);
        assert!(
            greedy.cost(64) <= best.cost(64),
            "{name}: greedy {} vs e-graph {}",
            summary(&greedy),
            summary(&best)
        );
    }
}

/// A reduction folding several dims (a bias's gradient, `[B,T,N]` summed over B and T) has
/// no loop nest, so it runs eagerly: fused with the product before it and the optimiser
/// ops after it, it took them eager too. It stays a kernel of its own in every candidate,
/// while the same reduction over `[1,T,N]` (one dim folds) still fuses.
#[test]
fn reductions_over_several_dims_stay_out_of_fused_groups() {
    let text = r#"
graph @bias_grad(%a: f32[B,T,16], %b: f32[B,T,16], %p: f32[16]) -> f32[16] {
  %0 = mul %a, %b : f32[B,T,16]
  %1 = sum %0 {dims = [0, 1], keepdim = false} : f32[16]
  %2 = mul %1, 0.1 : f32[16]
  %3 = sub %p, %2 : f32[16]
  return %3
}

graph @one_fold(%a: f32[1,T,16], %b: f32[1,T,16], %p: f32[16]) -> f32[16] {
  %0 = mul %a, %b : f32[1,T,16]
  %1 = sum %0 {dims = [0, 1], keepdim = false} : f32[16]
  %2 = mul %1, 0.1 : f32[16]
  %3 = sub %p, %2 : f32[16]
  return %3
}
"#;
    let graphs = parse_module(text).unwrap();
    let kinds = |s: &Schedule| {
        let mut k: Vec<(String, usize)> = s
            .kernels
            .iter()
            .map(|k| (k.kind.name().to_string(), k.nodes.len()))
            .collect();
        k.sort();
        k
    };
    let d = run_passes(&graphs[0], &["decompose"], &PassOptions::default(), true).unwrap();
    let o = optimize(&d.graph, &OptimizeOptions::default()).unwrap();
    let candidates = [
        ("greedy", greedy_fuse(&d.graph)),
        ("any operand", greedy_fuse_any_operand(&d.graph)),
        ("e-graph", o.extracted),
        ("pipeline", pipeline(&graphs[0])),
    ];
    for (name, f) in candidates {
        let s = schedule(&f).unwrap();
        assert_eq!(
            kinds(&s),
            vec![
                ("copy".to_string(), 1),
                ("pointwise".to_string(), 1),
                ("pointwise".to_string(), 2)
            ],
            "{name}: {}",
            summary(&s)
        );
        let x = inputs(&graphs[0], 9);
        let want = eval(&graphs[0], &x).unwrap();
        let got = eval(&f.graph, &x).unwrap();
        close(&want[0], &got[0]).unwrap();
    }
    let one = schedule(&pipeline(&graphs[1])).unwrap();
    assert_eq!(
        kinds(&one),
        vec![("reduction".to_string(), 4)],
        "{}",
        summary(&one)
    );
}

/// Greedy fusion moves a pointwise kernel that reads only graph inputs into the one kernel
/// that reads its results: on these graphs the walk split x's branches (3 kernels for
/// `pointwise`, the polynomial and the tanh branch for `gelu_tanh_by_hand`) and now reaches
/// the e-graph's single kernel, reading x once.
#[test]
fn greedy_absorbs_kernels_that_read_only_inputs() {
    for name in ["pointwise", "gelu_tanh_by_hand"] {
        let (greedy, best) = greedy_and_egraph(name);
        assert_eq!(greedy.kernels.len(), 1, "{name}: {}", summary(&greedy));
        assert!(
            greedy.cost(64) <= best.cost(64),
            "{name}: greedy {} vs e-graph {}",
            summary(&greedy),
            summary(&best)
        );
    }
}

#[test]
fn saturation_reports_the_limit_that_stopped_it() {
    let g = pipeline(&graph("softmax"));
    let d = run_passes(
        &graph("block"),
        &["decompose"],
        &PassOptions::default(),
        true,
    )
    .unwrap();
    let opts = OptimizeOptions {
        iter_limit: 2,
        ..OptimizeOptions::default()
    };
    let report = optimize(&d.graph, &opts).unwrap().report;
    assert!(
        report
            .stop_reasons
            .iter()
            .any(|r| r.contains("iteration limit (2)")),
        "{:?}",
        report.stop_reasons
    );
    let opts = OptimizeOptions {
        node_limit: 50,
        ..OptimizeOptions::default()
    };
    let report = optimize(&d.graph, &opts).unwrap().report;
    assert!(
        report.stop_reasons.iter().any(|r| r.contains("node limit")),
        "{:?}",
        report.stop_reasons
    );
    assert!(g.to_string().contains("k0 row"));
}

fn bind_inputs_of(g: &Graph, seed: u64) -> Vec<Value> {
    inputs(g, seed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_pipeline_preserves_results_on_random_graphs(g in graph_gen::arb_graph_with(graph_gen::GenConfig { symbolic: true, max_steps: 12 })) {
        let x = bind_inputs_of(&g, 3);
        let Ok(want) = eval(&g, &x) else { return Ok(()) };
        let o = run_passes(&g, &["decompose", "fuse"], &PassOptions::default(), true)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{g}")))?;
        let got = eval(&o.graph, &x).map_err(|e| TestCaseError::fail(format!("{e}\n{g}\n{o}")))?;
        for (w, r) in want.iter().zip(&got) {
            close(w, r).map_err(|m| TestCaseError::fail(format!("{m}\n{g}\n{o}")))?;
        }
    }
}

/// A fill that only an `index_add` reads, as its base (an embedding's gradient), is in the
/// `index_add`'s kernel, fused and unfused, so the eager kernels add into it in place; a
/// fill that is also an output, or that two index_adds read, keeps a kernel of its own.
#[test]
fn a_fill_only_an_index_add_reads_joins_its_kernel() {
    let text = r#"
graph @embedding_grad(%idx: i64[4], %src: f32[4,3], %src2: f32[4,3]) -> (f32[10,3], f32[10,3], f32[10,3], f32[10,3], f32[10,3]) {
  %0 = full {shape = [10, 3], value = 0.0, dtype = f32} : f32[10,3]
  %1 = index_add %0, %idx, %src {dim = 0} : f32[10,3]
  %2 = full {shape = [10, 3], value = 3.0, dtype = f32} : f32[10,3]
  %3 = index_add %2, %idx, %src {dim = 0} : f32[10,3]
  %4 = full {shape = [10, 3], value = 1.0, dtype = f32} : f32[10,3]
  %5 = index_add %4, %idx, %src {dim = 0} : f32[10,3]
  %6 = index_add %4, %idx, %src2 {dim = 0} : f32[10,3]
  return %1, %3, %2, %5, %6
}
"#;
    let g = &parse_module(text).unwrap()[0];
    let d = run_passes(g, &["decompose"], &PassOptions::default(), true).unwrap();
    for fused in [Fused::unfused(d.graph.clone()), pipeline(g)] {
        let s = schedule(&fused).unwrap();
        let kernel_of = |id| s.kernels.iter().position(|k| k.nodes.contains(&id));
        // (the kernel of the fill of `value`, the kernel of the index_add into it)
        let kernels = |value: f64| {
            let (fill, _) = s
                .graph
                .nodes()
                .find(|(_, n)| matches!(&n.op, Op::Full { value: v, .. } if v.to_f64() == value))
                .unwrap_or_else(|| panic!("no fill of {value}: {}", summary(&s)));
            let add = s
                .graph
                .users(fill)
                .into_iter()
                .find(|u| matches!(s.graph.node(*u).op, Op::IndexAdd { .. }));
            (kernel_of(fill), add.and_then(kernel_of))
        };
        let (fill, add) = kernels(0.0);
        assert!(fill.is_some() && fill == add, "{}", summary(&s));
        for value in [3.0, 1.0] {
            let (fill, add) = kernels(value);
            assert!(
                fill.is_some() && add.is_some() && fill != add,
                "{value}: {}",
                summary(&s)
            );
        }
    }
}
