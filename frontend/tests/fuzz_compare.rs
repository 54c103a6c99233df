//! The fuzzer's comparisons: disagreements are measured against the graph widened to f64,
//! and a wrong answer is still one.

use kiln::fuzz::compare::no_farther_from_truth;
use kiln::fuzz::widened;
use kiln::ir::DType;
use kiln::Tensor;

fn graph(text: &str) -> kiln::Graph {
    kiln::ir::text::parse_graph(text).unwrap()
}

#[test]
fn a_graph_widens_to_f64_types_casts_and_attributes() {
    let g = graph(
        "graph @g(%x: bf16[2, 3], %y: f16[3]) -> f16[2, 3] {
  %0 = cast %x {dtype = f16} : f16[2, 3]
  %1 = add %0, %y : f16[2, 3]
  %2 = full {shape = [3], value = 1.5, dtype = bf16} : bf16[3]
  %3 = mul %1, %2 : f32[2, 3]
  %4 = cast %3 {dtype = f16} : f16[2, 3]
  return %4
}",
    );
    let w = widened(&g).unwrap();
    let text = w.to_string();
    assert!(!text.contains("f16") && !text.contains("f32"), "{text}");
    for (_, n) in w.nodes() {
        assert_eq!(n.ty.dtype, DType::F64, "{text}");
    }
    // a graph without float values has nothing to widen; integers stay as they are
    let f = graph("graph @f(%x: i32[2]) -> i32[2] {\n  %0 = neg %x : i32[2]\n  return %0\n}");
    assert!(widened(&f).is_none());
    let h = graph(
        "graph @h(%x: i32[2]) -> f32[2] {\n  %0 = cast %x {dtype = f32} : f32[2]\n  return %0\n}",
    );
    let wh = widened(&h).unwrap();
    let dtypes: Vec<DType> = wh.nodes().map(|(_, n)| n.ty.dtype).collect();
    assert_eq!(dtypes, [DType::I32, DType::F64], "{wh}");
    // an op that promotes a bool to the default float computes on the bool cast to f64
    let m = graph(
        "graph @m(%x: f32[3]) -> f32[3] {\n  %0 = gt %x, 0.0 : bool[3]\n  %1 = mish %0 : f32[3]\n  %2 = add %1, %x : f32[3]\n  return %2\n}",
    );
    let wm = widened(&m).unwrap();
    let text = wm.to_string();
    assert!(
        text.contains("cast %0 {dtype = f64}") && !text.contains("f32"),
        "{text}"
    );
}

#[test]
fn an_answer_no_farther_from_the_truth_than_eager_agrees_and_a_wrong_one_does_not() {
    // a layer norm's bf16 gradient over three elements (tests/regressions/fuzz_cuda_184):
    // eager and the cuda backend land on either side of the truth
    let t = |v: &[f64], dtype| Tensor::from_f64(v, &[3], dtype).unwrap();
    let truth = t(&[0.12065, -1.28074, 1.16009], DType::F64);
    let eager = t(&[0.129883, -1.234375, 1.15625], DType::BF16);
    let cuda = t(&[0.114746, -1.328125, 1.1875], DType::BF16);
    let bounds = (1e-2, 8.0 * 2f64.powi(-7));
    no_farther_from_truth(&cuda, &eager, &truth, bounds).unwrap();
    // an element off by a third of the scale is a divergence still
    let wrong = t(&[0.5, -1.28125, 1.15625], DType::BF16);
    let e = no_farther_from_truth(&wrong, &eager, &truth, bounds).unwrap_err();
    assert!(e.contains("from the f64 truth"), "{e}");
    // non-finite values must match eager's exactly
    let nan = t(&[f64::NAN, -1.28125, 1.15625], DType::BF16);
    assert!(no_farther_from_truth(&nan, &eager, &truth, bounds).is_err());
}

#[test]
fn the_truth_of_a_computed_float_is_ill_conditioned() {
    // `logical_and(y, y)` is `y != 0`: a y that rounds to exactly 0 in f32 (a layer norm's
    // element equal to its row's mean) flips it (kiln fuzz --grad, graph 21008601)
    let g = graph(
        "graph @g(%x: f32[2, 3]) -> (bool[2, 3], bool[2, 3], bool[2, 3]) {
  %0 = layer_norm %x {ndim = 1, eps = 0.1} : f32[2, 3]
  %1 = logical_and %0, %0 : bool[2, 3]
  %2 = logical_or %x, %x : bool[2, 3]
  %3 = isinf %0 : bool[2, 3]
  return %1, %2, %3
}",
    );
    // the truth of an input is exact
    assert_eq!(kiln::fuzz::ill_conditioned(&g), [true, false, true]);
}
