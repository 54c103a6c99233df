//! What `kiln run --inputs FILE` does with an arbitrary file: the safetensors reader
//! (`kiln::io::load_bytes`) gives tensors or a typed error, never a panic; accepted tensors
//! are bound to a fixed graph's inputs by name (as `kiln run` binds them) and run eagerly
//! and through the interpreter, again to values or a typed error.
#![no_main]

use kiln::graph_exec::run_graph;
use kiln_ir::text::parse_module;
use libfuzzer_sys::fuzz_target;

const GRAPH: &str = r#"
graph @f(%x: f32[N,C], %w: f32[C]) -> (f32[N,C], f32[N]) {
  %0 = mul %x, %w : f32[N,C]
  %1 = sum %0 {dims = [1], keepdim = false} : f32[N]
  return %0, %1
}
"#;

/// Files holding more elements than this are read but not run.
const MAX_ELEMENTS: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Ok(tensors) = kiln::io::load_bytes(data, "fuzz input") else {
        return;
    };
    if tensors.iter().map(|(_, t)| t.numel()).sum::<usize>() > MAX_ELEMENTS {
        return;
    }
    for (_, t) in &tensors {
        let _ = t.to_vec_f64();
        let _ = t.sum(&[], false);
    }
    let g = &parse_module(GRAPH).expect("the fixed graph parses")[0];
    let by_name: Vec<kiln::Tensor> = ["x", "w"]
        .iter()
        .filter_map(|n| {
            tensors
                .iter()
                .find(|(name, _)| name == n)
                .map(|(_, t)| t.clone())
        })
        .collect();
    let _ = run_graph(g, &by_name);
    let positional: Vec<kiln::Tensor> = tensors.iter().map(|(_, t)| t.clone()).collect();
    let _ = run_graph(g, &positional);
});
