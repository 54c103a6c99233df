//! For each graph of the given .kir files: kernels and bytes of greedy left-to-right fusion
//! vs the e-graph's cost-based fusion.
use kiln_ir::text::parse_module;
use kiln_passes::decompose::decompose;
use kiln_passes::greedy::greedy_fuse;
use kiln_passes::optimize::{optimize, OptimizeOptions};
use kiln_passes::schedule::schedule;
fn main() {
    for f in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&f).unwrap();
        for g in parse_module(&text).unwrap() {
            let d = decompose(&g).unwrap();
            let gr = schedule(&greedy_fuse(&d)).unwrap();
            let eg =
                schedule(&optimize(&d, &OptimizeOptions::default()).unwrap().extracted).unwrap();
            println!(
                "@{}: greedy {} kernels {} B | e-graph {} kernels {} B{}",
                g.name(),
                gr.kernels.len(),
                gr.bytes_moved(64),
                eg.kernels.len(),
                eg.bytes_moved(64),
                if eg.cost(64) < gr.cost(64) {
                    "  <- better"
                } else if eg.cost(64) > gr.cost(64) {
                    "  WORSE"
                } else {
                    ""
                }
            );
        }
    }
}
