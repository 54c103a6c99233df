//! Runs decompose + the e-graph on .kir files and prints sizes, limits, times and costs
//! (set SHOW=1 to print the optimised graphs, ITERS / NODES / MS to change the limits).
use kiln_ir::text::parse_module;
use kiln_passes::decompose::decompose;
use kiln_passes::optimize::{optimize, OptimizeOptions};
fn main() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    let mut opts = OptimizeOptions::default();
    if let Some(i) = env("ITERS") {
        opts.iter_limit = i;
    }
    if let Some(n) = env("NODES") {
        opts.node_limit = n;
    }
    if let Some(ms) = env("MS") {
        opts.time_limit = std::time::Duration::from_millis(ms as u64);
    }
    for f in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&f).unwrap();
        for g in parse_module(&text).unwrap() {
            let t = std::time::Instant::now();
            let d = decompose(&g).unwrap();
            let optimized = optimize(&d, &opts).unwrap();
            let (o, r) = (optimized.extracted, optimized.report);
            println!(
                "{f} @{}: {} -> {} nodes, {:?}, {:.1} ms, cost {:.3e} -> {:.3e}, enodes {}",
                g.name(),
                d.len(),
                o.graph.len(),
                r.stop_reasons,
                t.elapsed().as_secs_f64() * 1e3,
                r.cost_before,
                r.cost_after,
                r.enodes
            );
            if std::env::var("SHOW").is_ok() {
                print!("{o}");
            }
        }
    }
}
