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
    compile_tour()
}

/// `kiln::compile` on the zoo's mlp: capture, cache hits, a recompile that makes the batch
/// dim symbolic, and a function with a graph break.
fn compile_tour() -> Result<(), CliError> {
    println!("\n== kiln::compile: the zoo's mlp at batch 4, 8, 16, 4 ==");
    let model = kiln::models::build("mlp", Some(&[4, 32]))?;
    let f = |xs: &[Tensor]| model.forward(xs);
    let compiled = kiln::compile_with(f, kiln::CompileOptions::default().name("mlp"));
    for batch in [4usize, 8, 16, 4] {
        let x = vec![Tensor::randn(&[batch, 32], DType::F32, batch as u64)?];
        let (c, e) = (compiled.call(&x)?, f(&x)?);
        let same = c[0].to_vec_f64()? == e[0].to_vec_f64()?;
        println!("batch {batch:>2}: compiled == eager: {same}");
    }
    let s = compiled.stats();
    println!(
        "calls {}, compiles {}, recompiles {}, cache hits {}",
        s.calls, s.compiles, s.recompiles, s.cache_hits
    );
    for (i, g) in compiled.guards().iter().enumerate() {
        println!("entry {i} guards: {g}");
    }
    print!("{}", compiled.graphs().last().ok_or("no graph")?);

    println!("\n== kiln::explain: a function that reads a value in the middle ==");
    let with_item = |x: &Tensor| -> kiln::Result<Tensor> {
        let h = x.exp()?;
        let m = h.mean(&[], false)?.item()?;
        (&h / m)?.tanh()
    };
    let report = kiln::explain(with_item, &Tensor::randn(&[3, 4], DType::F32, 1)?)?;
    print!("{report}");
    passes_tour()
}

/// The optimiser on the zoo's softmax: decomposed into primitives, then fused back by the
/// e-graph into one row kernel.
fn passes_tour() -> Result<(), CliError> {
    use kiln_passes::pipeline::{run_passes, PassOptions};
    println!("\n== the passes: softmax decomposed, then fused into kernels by the e-graph ==");
    let model = kiln::models::build("softmax", Some(&[64, 1000]))?;
    let compiled = kiln::compile(|xs: &[Tensor]| model.forward(xs));
    let traced = compiled.capture(&model.example_inputs(0)?)?;
    let opts = PassOptions::rendering(kiln_codegen::cpu::renders);
    let decomposed = run_passes(&traced[0], &["decompose"], &opts, true)?;
    print!("{decomposed}");
    let fused = run_passes(&decomposed.graph, &["fuse"], &opts, true)?;
    let schedule = kiln_passes::schedule::schedule(&fused)?;
    print!("{schedule}");
    println!("\n== the cpu backend: the kernel as a loop nest, then Cranelift machine code ==");
    print!(
        "{}",
        kiln_codegen::cpu::dump::describe(
            &schedule,
            kiln_codegen::cpu::dump::NestText::Loops,
            &kiln_codegen::CodegenOptions::from_env()
        )
        .map_err(|e| e.to_string())?
    );
    let inputs = model.example_inputs(1)?;
    let eager = model.forward(&inputs)?;
    let out = compiled.call(&inputs)?;
    let (a, b) = (out[0].to_vec_f64()?, eager[0].to_vec_f64()?);
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1e-30))
        .fold(0.0f64, f64::max);
    let time = |f: &dyn Fn() -> kiln::Result<Vec<Tensor>>| -> kiln::Result<f64> {
        let start = std::time::Instant::now();
        for _ in 0..20 {
            f()?;
        }
        Ok(start.elapsed().as_secs_f64() / 20.0 * 1e3)
    };
    let t_eager = time(&|| model.forward(&inputs))?;
    let t_compiled = time(&|| compiled.call(&inputs))?;
    println!(
        "softmax [64,1000]: compiled vs eager max relative difference {worst:.1e}; \
         eager {t_eager:.3} ms, compiled {t_compiled:.3} ms per call (one run on this machine)"
    );
    Ok(())
}
