//! `kiln demo`: a short tour that exercises the pieces that exist today.

use super::CliError;
use kiln::ir::interp::{eval, Value};
use kiln::{DType, Tensor};

const MLP: &str =
    "graph @mlp(%x: f32[B,8], %w1: f32[8,16], %b1: f32[16], %w2: f32[16,4]) -> f32[B,4] {
  %0 = matmul %x, %w1                      : f32[B,16]
  %1 = add %0, %b1                         : f32[B,16]
  %2 = gelu %1                             : f32[B,16]
  %3 = matmul %2, %w2                      : f32[B,4]
  %4 = softmax %3 {dim = -1}               : f32[B,4]
  return %4
}
";

/// Runs the demo.
pub fn demo() -> Result<(), CliError> {
    println!("== eager tensors ==");
    let x = Tensor::randn(&[2, 3], DType::F32, 0)?;
    println!("x = {x}");
    let y = (&x.relu()? * 2.0)?.add(1.0)?;
    println!("relu(x) * 2 + 1 = {y}");
    println!("x.sum(dim=1) = {}", x.sum(&[1], false)?);
    println!("x @ x^T = {}", x.matmul(&x.t()?)?);

    println!("\n== a graph in kiln's text format (symbolic batch dim B) ==");
    let g = kiln::ir::text::parse_graph(MLP)?;
    print!("{g}");

    println!("\n== the same graph: reference interpreter vs eager runtime, B = 3 ==");
    let shapes: [&[usize]; 4] = [&[3, 8], &[8, 16], &[16], &[16, 4]];
    let inputs = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Tensor::randn(s, DType::F32, 10 + i as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let eager = kiln::graph_exec::run_graph(&g, &inputs)?;
    let values = inputs
        .iter()
        .map(|t| Ok(Value::new(t.dtype(), t.shape().to_vec(), t.to_vec_f64()?)?))
        .collect::<Result<Vec<_>, CliError>>()?;
    let oracle = eval(&g, &values)?;
    println!("eager  = {}", eager[0]);
    let max_err = eager[0]
        .to_vec_f64()?
        .iter()
        .zip(&oracle[0].data)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("max |eager - interpreter| = {max_err:.3e}");
    Ok(())
}
