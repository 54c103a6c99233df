//! Times a CpuPlan on the graphs of an IR file (fresh random inputs, symbols at 64):
//! `cargo run --release -p kiln-codegen --example plan_speed -- FILE [reps]` (the
//! `KILN_*` code generation overrides apply: `CodegenOptions::from_env`).

use kiln_codegen::cpu::CpuPlan;
use kiln_runtime::CpuTensor;
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: plan_speed FILE [reps]");
    let reps: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let text = std::fs::read_to_string(&path).expect("readable file");
    for g in kiln_ir::parse_module(&text).expect("valid IR") {
        if g.inputs()
            .iter()
            .any(|(_, id)| !g.node(*id).ty.shape.is_static())
        {
            continue;
        }
        let opt = kiln_passes::pipeline::run_passes(
            &g,
            &["decompose", "fuse"],
            &Default::default(),
            false,
        )
        .expect("passes run");
        let s = kiln_passes::schedule::schedule(&opt).expect("schedules");
        let plan =
            CpuPlan::with_options(&s, &kiln_codegen::CodegenOptions::from_env()).expect("plan");
        let vals = kiln_ir::interp::random_inputs(&g, 0, &|_| 64).expect("inputs");
        let ins: Vec<CpuTensor> = vals
            .iter()
            .map(|v| CpuTensor::from_f64(&v.data, &v.shape, v.dtype).expect("tensor"))
            .collect();
        let refs: Vec<&CpuTensor> = ins.iter().collect();
        let t0 = Instant::now();
        plan.run(&refs).expect("runs");
        let first = t0.elapsed();
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            plan.run(&refs).expect("runs");
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        println!(
            "{}: first {:.2} ms, median {:.2} µs, min {:.2} µs",
            g.name(),
            first.as_secs_f64() * 1e3,
            times[reps / 2] * 1e6,
            times[0] * 1e6
        );
    }
}
