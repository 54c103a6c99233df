//! Programs shared by the CUDA tests (emulation and NVRTC).
#![allow(dead_code)] // each test file uses some of them

use std::path::PathBuf;

/// Ops and fused patterns, with odd sizes, size 1 and broadcasting.
pub const PROGRAMS: &str = r#"
graph @unary(%x: f32[3,37]) -> (f32[3,37], f32[3,37], f32[3,37], f32[3,37], f32[3,37], f32[3,37], f32[3,37], f32[3,37]) {
  %0 = neg %x : f32[3,37]
  %1 = abs %x : f32[3,37]
  %2 = exp %x : f32[3,37]
  %3 = tanh %x : f32[3,37]
  %4 = sigmoid %x : f32[3,37]
  %5 = relu %x : f32[3,37]
  %6 = sin %x : f32[3,37]
  %7 = cos %x : f32[3,37]
  return %0, %1, %2, %3, %4, %5, %6, %7
}
graph @unary_domain(%x: f32[37]) -> (f32[37], f32[37], f32[37], f32[37], f32[37]) {
  %a = abs %x : f32[37]
  %b = add %a, 0.5 : f32[37]
  %0 = log %b : f32[37]
  %1 = sqrt %b : f32[37]
  %2 = rsqrt %b : f32[37]
  %3 = reciprocal %b : f32[37]
  %4 = erf %x : f32[37]
  return %0, %1, %2, %3, %4
}
graph @activations(%x: f32[5,7]) -> (f32[5,7], f32[5,7], f32[5,7]) {
  %0 = gelu %x : f32[5,7]
  %1 = gelu %x {approximate = "tanh"} : f32[5,7]
  %2 = silu %x : f32[5,7]
  return %0, %1, %2
}
graph @binary(%x: f32[4,9], %y: f32[4,9]) -> (f32[4,9], f32[4,9], f32[4,9], f32[4,9], f32[4,9], f32[4,9]) {
  %0 = add %x, %y : f32[4,9]
  %1 = sub %x, %y : f32[4,9]
  %2 = mul %x, %y : f32[4,9]
  %3 = div %x, %y : f32[4,9]
  %4 = maximum %x, %y : f32[4,9]
  %5 = minimum %x, %y : f32[4,9]
  return %0, %1, %2, %3, %4, %5
}
graph @pow_cmp_where(%x: f32[33], %y: f32[33]) -> (f32[33], bool[33], bool[33], f32[33]) {
  %a = abs %x : f32[33]
  %0 = pow %a, %y : f32[33]
  %1 = lt %x, %y : bool[33]
  %2 = ge %x, 0.25 : bool[33]
  %3 = where %1, %x, %y : f32[33]
  return %0, %1, %2, %3
}
graph @broadcast(%x: f32[6,1,5], %y: f32[7,1], %s: f32[1]) -> f32[6,7,5] {
  %0 = add %x, %y : f32[6,7,5]
  %1 = mul %0, %s : f32[6,7,5]
  return %1
}
graph @reductions(%x: f32[7,300]) -> (f32[7], f32[7,1], f32[7], f32[7]) {
  %0 = sum %x {dims = [1], keepdim = false} : f32[7]
  %1 = mean %x {dims = [1], keepdim = true} : f32[7,1]
  %2 = amax %x {dims = [1], keepdim = false} : f32[7]
  %3 = amin %x {dims = [1], keepdim = false} : f32[7]
  return %0, %1, %2, %3
}
graph @row_of_one(%x: f32[4,1]) -> f32[4] {
  %0 = sum %x {dims = [1], keepdim = false} : f32[4]
  return %0
}
graph @softmax(%x: f32[5,257]) -> (f32[5,257], f32[5,257]) {
  %0 = softmax %x {dim = -1} : f32[5,257]
  %1 = log_softmax %x {dim = -1} : f32[5,257]
  return %0, %1
}
graph @norms(%x: f32[3,100], %w: f32[100], %b: f32[100]) -> (f32[3,100], f32[3,100]) {
  %0 = layer_norm %x, %w, %b {ndim = 1, eps = 1e-5} : f32[3,100]
  %1 = rms_norm %x, %w {ndim = 1, eps = 1e-6} : f32[3,100]
  return %0, %1
}
graph @symbolic(%x: f32[B,37]) -> f32[B,37] {
  %0 = softmax %x {dim = -1} : f32[B,37]
  %1 = mul %0, 2.0 : f32[B,37]
  return %1
}
graph @fused_chain(%x: f32[1000]) -> f32[1000] {
  %0 = mul %x, 1.5 : f32[1000]
  %1 = add %0, 0.5 : f32[1000]
  %2 = gelu %1 {approximate = "tanh"} : f32[1000]
  %3 = sigmoid %x : f32[1000]
  %4 = mul %2, %3 : f32[1000]
  return %4
}
graph @vec4_broadcast(%x: f32[6,8], %y: f32[8], %s: f32[6,1]) -> f32[6,8] {
  %0 = mul %x, %y : f32[6,8]
  %1 = add %0, %s : f32[6,8]
  %2 = tanh %1 : f32[6,8]
  return %2
}
graph @size_one(%x: f32[1]) -> f32[1] {
  %0 = exp %x : f32[1]
  return %0
}
"#;

/// The optimiser's corpus (`passes/tests/corpus`): (file name, text), sorted by name.
pub fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../passes/tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the corpus exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(f).expect("readable corpus file"),
            )
        })
        .collect()
}

/// One graph per pointwise row of the op table (a new row is tested without a list): the
/// op on `f32[5,37]` operands, or `bool[5,37]` ones for the ops that take only integers
/// and bools (the loop form has no integers). Printed as a module of textual IR.
pub fn table_programs() -> String {
    use kiln_ir::{BinaryOp, DType, DTypeRule, Graph, Op, Shape, TensorType, UnaryOp};
    let ty = |d: DType| TensorType::new(d, Shape::of(&[5, 37]));
    let operand_dtype = |rule: DTypeRule| {
        if rule == DTypeRule::Integral {
            DType::Bool
        } else {
            DType::F32
        }
    };
    let mut graphs = Vec::new();
    let ops = UnaryOp::ALL
        .into_iter()
        .map(|u| (Op::Unary(u), 1, u.info().dtype, format!("{u:?}")))
        .chain(
            BinaryOp::ALL
                .into_iter()
                .map(|b| (Op::Binary(b), 2, b.info().dtype, format!("{b:?}"))),
        );
    for (op, arity, rule, name) in ops {
        let mut g = Graph::new(format!("table_{}", name.to_lowercase()));
        let args: Vec<kiln_ir::Arg> = (0..arity)
            .map(|i| {
                g.add_input(format!("x{i}"), ty(operand_dtype(rule)))
                    .expect("fresh input")
                    .into()
            })
            .collect();
        let y = g
            .add_op(op, &args, None)
            .expect("the op types on its domain");
        g.set_outputs(vec![y]).expect("one output");
        graphs.push(g);
    }
    kiln_ir::print_module(&graphs)
}
