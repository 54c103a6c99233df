//! The closing-note table of the passes: for each workload graph of the corpus, ops before
//! and after, kernels, bytes moved fused vs unfused (each op its own kernel), intermediate
//! memory planned vs one buffer per value, and the pipeline's time (median of 7).
//!
//! `cargo run --release -p kiln-passes --example pipeline_report`
use kiln_ir::text::parse_module;
use kiln_ir::Op;
use kiln_passes::memory::MemoryPlan;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::schedule;
use std::time::Instant;

fn ops(g: &kiln_ir::Graph) -> usize {
    g.nodes().filter(|(_, n)| n.op != Op::Input).count()
}

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/");
    println!("| workload | ops traced | ops decomposed | ops optimized | kernels (unfused) | bytes moved fused / unfused | intermediates planned / one buffer per value / unfused one per value | pipeline ms |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for w in [
        "pointwise",
        "layernorm",
        "softmax",
        "reduce",
        "mlp",
        "block",
        "tiny",
    ] {
        let text = std::fs::read_to_string(format!("{dir}{w}_workload.kir")).unwrap();
        let g = parse_module(&text).unwrap().remove(0);
        let opts = PassOptions::default();
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..7 {
            let t = Instant::now();
            let o = run_passes(&g, &["decompose", "fuse"], &opts, false).unwrap();
            let s = schedule(&o).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some((o, s));
        }
        times.sort_by(f64::total_cmp);
        let (o, s) = last.unwrap();
        let d = run_passes(&g, &["decompose"], &opts, false).unwrap();
        let unfused = schedule(&d).unwrap();
        let bind = |_: &str| Some(64u64);
        let mb = |b: u64| b as f64 / 1e6;
        println!(
            "| {w} | {} | {} | {} | {} ({}) | {:.1} / {:.1} MB ({:.2}x) | {:.1} / {:.1} / {:.1} MB | {:.1} |",
            ops(&g),
            ops(&d.graph),
            ops(&o.graph),
            s.kernels.len(),
            unfused.kernels.len(),
            mb(s.bytes_moved(64)),
            mb(unfused.bytes_moved(64)),
            unfused.bytes_moved(64) as f64 / s.bytes_moved(64) as f64,
            mb(s.memory.planned_bytes(&bind).unwrap_or(0)),
            mb(MemoryPlan::naive_bytes(&s.requests, &bind).unwrap_or(0)),
            mb(MemoryPlan::naive_bytes(&unfused.requests, &bind).unwrap_or(0)),
            times[times.len() / 2]
        );
    }
}
