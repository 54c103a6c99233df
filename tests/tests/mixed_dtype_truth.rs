//! Comparisons and logical ops convert their operands to the promoted dtype before testing
//! them, as torch does: a tiny 0-d f64 value beside an f16 tensor becomes 0 (so false),
//! and a literal compares as its value in that dtype. Eager, compiled (fused and unfused:
//! the loop form compares f32 values, so such ops run eagerly there) and the interpreter
//! agree, with values checked against torch's.

use kiln::fuzz::Executor;
use kiln::graph_exec::replay;
use kiln::ir::text::parse_module;
use kiln::{compile_with, DType, Tensor};

const G: &str = "graph @g(%x: f32[4], %h: f16[2,4], %s: f64[]) -> (bool[2,4], bool[2,4], bool[2,4], bool[2,4], bool[2,4], bool[2,4]) {
  %0 = logical_or %x, %h : bool[2,4]
  %1 = logical_and %s, %h : bool[2,4]
  %2 = lt %x, %h : bool[2,4]
  %3 = eq %h, 70000.0 : bool[2,4]
  %4 = ne %h, 1e-10 : bool[2,4]
  %5 = le %s, %h : bool[2,4]
  return %0, %1, %2, %3, %4, %5
}
";

fn bools(t: &Tensor) -> Vec<bool> {
    t.to_vec_f64().unwrap().iter().map(|v| *v != 0.0).collect()
}

#[test]
fn truth_and_order_in_the_promoted_dtype_match_torch_everywhere() {
    let g = parse_module(G).unwrap().remove(0);
    let x = Tensor::from_vec(vec![1e-8f32, 0.0, 2.0, 1.0001], &[4]).unwrap();
    let h = Tensor::from_f64(
        &[0.0, 0.0, 0.0, 1.0, 1.0, f64::INFINITY, 0.0, 0.0],
        &[2, 4],
        DType::F16,
    )
    .unwrap();
    let s = Tensor::from_f64(&[1e-30], &[], DType::F64).unwrap();
    let xs = vec![x, h, s];
    let eager = replay(&g, &xs).unwrap();
    // torch 2.15 on the same values: f32 and f16 tensors compute in f32; the 0-d f64 `s`
    // and the literals convert to f16 (1e-30 and 1e-10 flush to 0, 70000 is inf)
    let want: [[u8; 8]; 6] = [
        [1, 0, 1, 1, 1, 1, 1, 1],
        [0; 8],
        [0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 1, 1, 0, 0],
        [1; 8],
    ];
    for (i, (e, w)) in eager.iter().zip(want).enumerate() {
        let w: Vec<bool> = w.iter().map(|v| *v == 1).collect();
        assert_eq!(bools(e), w, "eager output {i}");
    }
    for executor in [Executor::Cpu, Executor::CpuUnfused, Executor::Interp] {
        let (what, opts) = (executor.name(), executor.options());
        let graph = g.clone();
        let f = compile_with(move |xs: &[Tensor]| replay(&graph, xs), opts);
        let got = f.call(&xs).unwrap();
        for (i, (c, e)) in got.iter().zip(&eager).enumerate() {
            assert_eq!(bools(c), bools(e), "output {i}: {what}");
        }
    }
}
