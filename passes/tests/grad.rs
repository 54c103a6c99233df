//! The `grad` pass: the joint graph's gradient outputs equal central differences of the
//! forward graph's first output (interpreter, f64), on graphs with broadcasting, shared
//! values, reductions, softmax and norms; inputs out0 does not use get zeros, integer
//! inputs no output; a non-scalar out0 and a rule that cannot be built are errors naming them; gathers
//! scatter their gradients back.

use kiln_ir::interp::{eval, random_inputs, Value};
use kiln_ir::text::{parse_graph, print_graph};
use kiln_passes::grad::grad;

/// Checks every gradient output of `grad(text)` against central differences of out0.
fn check(text: &str) {
    let g = parse_graph(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let joint = grad(&g).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let inputs = random_inputs(&g, 7, &|_| 3).unwrap();
    let outs = eval(&joint, &inputs).unwrap();
    let n_fwd = g.outputs().len();
    let floats: Vec<usize> = g
        .inputs()
        .iter()
        .enumerate()
        .filter(|(_, (_, id))| g.node(*id).ty.dtype.is_float())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        outs.len(),
        n_fwd + floats.len(),
        "one gradient per floating input"
    );
    let out0 = |ins: &[Value]| eval(&g, ins).unwrap()[0].data[0];
    for (k, &i) in floats.iter().enumerate() {
        let gi = &outs[n_fwd + k];
        assert_eq!(
            gi.shape,
            inputs[i].shape,
            "{}: gradient shape",
            g.inputs()[i].0
        );
        for j in 0..inputs[i].data.len() {
            let at = |d: f64| {
                let mut ins = inputs.clone();
                ins[i].data[j] += d;
                out0(&ins)
            };
            let h = 1e-6;
            let fd = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (gi.data[j] - fd).abs() <= 1e-6 * fd.abs().max(1.0),
                "{} element {j}: grad {} vs finite difference {fd}\n{}",
                g.inputs()[i].0,
                gi.data[j],
                print_graph(&joint)
            );
        }
    }
}

#[test]
fn an_mlp_loss_differentiates_like_finite_differences() {
    check(
        r#"
graph @mlp(%x: f64[4,5], %w1: f64[6,5], %b1: f64[6], %w2: f64[3,6], %t: f64[4,3]) -> f64[] {
  %0 = linear %x, %w1, %b1                 : f64[4,6]
  %1 = gelu %0 {approximate = "tanh"}      : f64[4,6]
  %2 = linear %1, %w2                      : f64[4,3]
  %3 = log_softmax %2 {dim = -1}           : f64[4,3]
  %4 = mul %3, %t                          : f64[4,3]
  %5 = mean %4                             : f64[]
  return %5
}
"#,
    );
}

#[test]
fn shared_values_broadcasts_and_norms_accumulate() {
    check(
        r#"
graph @shared(%x: f64[3,4], %g: f64[4], %c: f64[4], %b: f64[1,4]) -> (f64[], f64[3,4]) {
  %0 = layer_norm %x, %g, %c {ndim = 1, eps = 1e-5} : f64[3,4]
  %1 = mul %0, %x                          : f64[3,4]
  %2 = add %1, %b                          : f64[3,4]
  %3 = softmax %2 {dim = 0}                : f64[3,4]
  %4 = matmul %3, %g                       : f64[3]
  %5 = sum %4                              : f64[]
  %6 = tanh %5                             : f64[]
  return %6, %2
}
"#,
    );
}

#[test]
fn unused_inputs_get_zeros_and_integer_inputs_no_gradient() {
    let text = r#"
graph @partial(%x: f64[3], %unused: f64[2], %i: i64[3]) -> f64[] {
  %0 = cast %i {dtype = f64}               : f64[3]
  %1 = mul %x, %0                          : f64[3]
  %2 = sum %1                              : f64[]
  return %2
}
"#;
    check(text);
    let g = parse_graph(text).unwrap();
    let joint = grad(&g).unwrap();
    let outs = eval(&joint, &random_inputs(&g, 1, &|_| 3).unwrap()).unwrap();
    assert_eq!(outs.len(), 3, "out0, grad_x, grad_unused");
    assert_eq!(outs[2].data, vec![0.0, 0.0]);
}

#[test]
fn a_non_scalar_output_and_a_rule_that_cannot_build_are_errors() {
    let g =
        parse_graph("graph @v(%x: f64[3]) -> f64[3] {\n  %0 = exp %x : f64[3]\n  return %0\n}\n")
            .unwrap();
    let e = grad(&g).unwrap_err().to_string();
    assert!(
        e.contains("must be a floating scalar") && e.contains("f64[3]"),
        "{e}"
    );
    // a slice's gradient pads with zeros of the sliced dim's size: unknown when symbolic
    let g = parse_graph(
        r#"
graph @s(%x: f64[N]) -> f64[] {
  %0 = slice %x {dim = 0, start = 1, end = 2} : f64[1]
  %1 = sum %0                              : f64[]
  return %1
}
"#,
    )
    .unwrap();
    let e = grad(&g).unwrap_err().to_string();
    assert!(e.contains("slice") && e.contains("symbolic dim"), "{e}");
}

/// Rows looked up several times accumulate their gradients (`index_add`), a padding row
/// gets none, and strided slices scatter theirs back.
#[test]
fn gathers_scatter_their_gradients_back() {
    let text = r#"
graph @emb(%w: f64[5,2], %ids: i64[4], %t: f64[5,2]) -> f64[] {
  %0 = index_select %w, %ids {dim = 0}     : f64[4,2]
  %1 = embedding %t, %ids {padding_idx = 3} : f64[4,2]
  %2 = mul %0, %1                          : f64[4,2]
  %3 = slice %w {dim = 0, start = 0, end = 5, step = 2} : f64[3,2]
  %4 = sum %2                              : f64[]
  %5 = sum %3                              : f64[]
  %6 = add %4, %5                          : f64[]
  return %6
}
"#;
    let g = parse_graph(text).unwrap();
    let joint = grad(&g).unwrap();
    let w = Value::new(
        kiln_ir::DType::F64,
        vec![5, 2],
        (0..10).map(f64::from).collect(),
    )
    .unwrap();
    let ids = Value::new(kiln_ir::DType::I64, vec![4], vec![3.0, 0.0, 3.0, 4.0]).unwrap();
    let t = Value::new(kiln_ir::DType::F64, vec![5, 2], vec![1.0; 10]).unwrap();
    let outs = eval(&joint, &[w, ids, t]).unwrap();
    // d/dw: t's rows (ones) at 3, 0, 3, 4, plus 1 at the even rows of the slice
    assert_eq!(
        outs[1].data,
        vec![2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    );
    // d/dt: w's rows at 0 and 4 (row 3 is the padding row)
    assert_eq!(
        outs[2].data,
        vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8.0, 9.0]
    );
}

#[test]
fn snapshot_grad_of_a_small_graph() {
    let g = parse_graph(
        r#"
graph @small(%x: f32[2,3], %w: f32[3]) -> f32[] {
  %0 = mul %x, %w                          : f32[2,3]
  %1 = relu %0                             : f32[2,3]
  %2 = sum %1                              : f32[]
  return %2
}
"#,
    )
    .unwrap();
    insta::assert_snapshot!(print_graph(&grad(&g).unwrap()));
}
