//! The clamping activations keep an `x` equal to a bound, so a -0 input stays -0, as torch
//! 2.15 computes them (`relu(-0)`, `relu6(-0)`, `hardtanh(-0, 0, 1)`, `clamp(-0, min=0)`
//! are -0). `maximum`/`minimum` give their second operand on ties (`maximum(0, -0)` is
//! -0), as torch's vectorised loop does; its scalar loop (tensors under 16 elements, and
//! tails) gives the first, so torch itself does not settle it. Eager, the interpreter, the
//! cpu backend (fused and unfused) and the cuda backend (on the emulated device) agree to
//! the bit, NaN as NaN.

use kiln::fuzz::Executor;
use kiln::graph_exec::replay;
use kiln::ir::text::parse_module;
use kiln::{compile_with, Tensor};

const G: &str = "graph @g(%x: f32[8], %y: f32[8]) -> (f32[8], f32[8], f32[8], f32[8], f32[8], f32[8], f32[8], f32[8]) {
  %0 = relu %x : f32[8]
  %1 = relu6 %x : f32[8]
  %2 = hardtanh %x {min_val = 0.0, max_val = 1.0} : f32[8]
  %3 = clamp %x, 0.0, 6.0 : f32[8]
  %4 = clamp %x, -1.0, 0.0 : f32[8]
  %5 = maximum %x, %y : f32[8]
  %6 = minimum %x, %y : f32[8]
  %7 = div 1.0, %0 : f32[8]
  return %0, %1, %2, %3, %4, %5, %6, %7
}
";

/// The bits of each element as f32, every NaN as one value (its payload is not compared).
fn bits(t: &Tensor) -> Vec<u32> {
    f(&t.to_vec_f64()
        .unwrap()
        .iter()
        .map(|v| *v as f32)
        .collect::<Vec<_>>())
}

fn f(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

/// Asserts that eager, cpu fused and unfused, the interpreter and the cuda backend (on the
/// emulated device unless `KILN_CUDA_DEVICE` names one) give `g` on `xs` the bits of
/// `want`, output by output.
fn assert_bits_everywhere(g: &kiln::Graph, xs: &[Tensor], want: &[Vec<u32>]) {
    if std::env::var_os("KILN_CUDA_DEVICE").is_none() {
        std::env::set_var("KILN_CUDA_DEVICE", "emulated");
    }
    let eager = replay(g, xs).unwrap();
    assert_eq!(eager.len(), want.len());
    for (i, (e, w)) in eager.iter().zip(want).enumerate() {
        assert_eq!(&bits(e), w, "eager output {i}");
    }
    for executor in [
        Executor::Cpu,
        Executor::CpuUnfused,
        Executor::Interp,
        Executor::Cuda,
    ] {
        let (what, opts) = (executor.name(), executor.options());
        let graph = g.clone();
        let c = compile_with(move |xs: &[Tensor]| replay(&graph, xs), opts);
        for (i, (o, w)) in c.call(xs).unwrap().iter().zip(want).enumerate() {
            assert_eq!(&bits(o), w, "output {i}: {what}");
        }
    }
}

#[test]
fn clamps_keep_a_bound_equal_x_and_ties_give_the_second_operand() {
    let g = parse_module(G).unwrap().remove(0);
    let nan = f32::NAN;
    let x = vec![-0.0f32, 0.0, -0.0, 0.0, -2.0, 7.0, nan, 1.0];
    let y = vec![0.0f32, -0.0, -0.0, 0.0, 5.0, 3.0, 1.0, nan];
    let xs = vec![
        Tensor::from_vec(x, &[8]).unwrap(),
        Tensor::from_vec(y, &[8]).unwrap(),
    ];
    // torch 2.15 on the same values (maximum and minimum: its vectorised loop's)
    let want = [
        f(&[-0.0, 0.0, -0.0, 0.0, 0.0, 7.0, nan, 1.0]),
        f(&[-0.0, 0.0, -0.0, 0.0, 0.0, 6.0, nan, 1.0]),
        f(&[-0.0, 0.0, -0.0, 0.0, 0.0, 1.0, nan, 1.0]),
        f(&[-0.0, 0.0, -0.0, 0.0, 0.0, 6.0, nan, 1.0]),
        f(&[-0.0, 0.0, -0.0, 0.0, -1.0, 0.0, nan, 0.0]),
        f(&[0.0, -0.0, -0.0, 0.0, 5.0, 7.0, nan, nan]),
        f(&[0.0, -0.0, -0.0, 0.0, -2.0, 3.0, nan, nan]),
        f(&[
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::INFINITY,
            1.0 / 7.0,
            nan,
            1.0,
        ]),
    ];
    assert_bits_everywhere(&g, &xs, &want);
}

#[test]
fn a_product_with_k_1_of_transposed_operands_is_summed_from_plus_zero() {
    // both operands are transposed views: non-contiguous, k = 1
    let g = parse_module(
        "graph @m(%a: f32[1,3], %b: f32[2,1]) -> f32[3,2] {
  %0 = transpose %a {dim0 = 0, dim1 = 1} : f32[3,1]
  %1 = transpose %b {dim0 = 0, dim1 = 1} : f32[1,2]
  %2 = matmul %0, %1 : f32[3,2]
  return %2
}
",
    )
    .unwrap()
    .remove(0);
    let xs = vec![
        Tensor::from_vec(vec![1.0f32, -1.0, 0.0], &[1, 3]).unwrap(),
        Tensor::from_vec(vec![-0.0f32, 2.0], &[2, 1]).unwrap(),
    ];
    // torch 2.15's bmm (and kiln's k > 1 sums) start from +0; its f32 `mm` writes -0 · 1
    // as it is: kiln follows bmm
    let want = f(&[0.0, 2.0, 0.0, -2.0, 0.0, 0.0]);
    assert_bits_everywhere(&g, &xs, &[want]);
}

#[test]
fn a_sum_or_mean_of_one_minus_zero_is_plus_zero() {
    // torch 2.15 sums from +0: mean and sum of a lone -0 are +0, and 1/that is +inf; the
    // f32 mean of a 0-d tensor accumulates in f64 (kiln fuzz --grad, graph 18069536)
    let g = parse_module(
        "graph @s(%w: f32[], %v: f32[1,2]) -> (f32[], f32[], f32[2], f32[2]) {
  %0 = mean %w {dims = [], keepdim = true} : f32[]
  %1 = sum %w {dims = []} : f32[]
  %2 = mean %v {dims = [0]} : f32[2]
  %3 = sum %v {dims = [0]} : f32[2]
  %4 = div 1.0, %0 : f32[]
  %5 = div 1.0, %1 : f32[]
  %6 = div 1.0, %2 : f32[2]
  %7 = div 1.0, %3 : f32[2]
  return %4, %5, %6, %7
}
",
    )
    .unwrap()
    .remove(0);
    let xs = vec![
        Tensor::from_vec(vec![-0.0f32], &[]).unwrap(),
        Tensor::from_vec(vec![-0.0f32, -0.0], &[1, 2]).unwrap(),
    ];
    let inf = f32::INFINITY;
    let want = [f(&[inf]), f(&[inf]), f(&[inf, inf]), f(&[inf, inf])];
    assert_bits_everywhere(&g, &xs, &want);
}
