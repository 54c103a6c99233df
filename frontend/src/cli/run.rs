//! `kiln run FILE.kir`: run a graph on the interpreter, the eager runtime or compiled (the
//! cpu or cuda backend of `kiln::compile`, fused or not), print each output's type, first
//! values and checksums, and optionally save them: a miscompile found anywhere (`kiln fuzz`
//! writes such files) reproduces from the file.
//! `kiln grad FILE.kir`: the same for the graph's joint forward and backward graph (the
//! `grad` pass), its gradients named `grad_<input>`.

use super::inputs::make_inputs;
use super::{read_module, Backend, CliError};
use kiln::graph_exec::replay;
use kiln::ir::interp::{eval, Value};
use kiln::Tensor;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The options of `kiln run` and `kiln grad`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// the IR file
    pub file: PathBuf,
    /// which graph of the file (default: the first)
    #[arg(long)]
    pub graph: Option<String>,
    /// seed of the random inputs
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// a safetensors file whose tensors are matched to inputs by name
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// write the outputs as out0, out1, ... (and, for `kiln grad`, the gradients as
    /// grad_<input>) to this safetensors file
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// the executor
    #[arg(long, value_enum, default_value_t = Backend::Interp)]
    pub backend: Backend,
    /// with `--backend cpu`: every op its own kernel (no fusion)
    #[arg(long)]
    pub unfused: bool,
    /// size of a symbolic dim for random inputs, e.g. `--dim B=4` (repeatable)
    #[arg(long = "dim", value_parser = super::parse_dim)]
    pub dims: Vec<(String, usize)>,
    /// after the first call, time this many more calls of the same executor (the compiled
    /// function is reused, so no compile is timed) and print the median and fastest call;
    /// with `KILN_PROFILE=1`, the kernel table at exit covers those calls only
    #[arg(long, value_name = "CALLS")]
    pub time: Option<usize>,
}

fn to_value(t: &Tensor) -> Result<Value, CliError> {
    Ok(Value::new(t.dtype(), t.shape().to_vec(), t.to_vec_f64()?)?)
}

fn from_value(v: &Value) -> Result<Tensor, CliError> {
    Ok(Tensor::from_f64(&v.data, &v.shape, v.dtype)?)
}

/// One line describing an output: type, first values, checksums.
pub fn summary(name: &str, t: &Tensor) -> String {
    let data = match t.to_vec_f64() {
        Ok(d) => d,
        Err(e) => return format!("{name}: {e}"),
    };
    let first: Vec<String> = data
        .iter()
        .take(6)
        .map(|v| {
            if t.dtype().is_float() {
                format!("{v:.6}")
            } else {
                format!("{v}")
            }
        })
        .collect();
    let more = if data.len() > 6 { ", ..." } else { "" };
    let sum: f64 = data.iter().sum();
    let abs: f64 = data.iter().map(|v| v.abs()).sum();
    format!(
        "{name}: {} [{}{more}] sum={sum:.6e} abs_sum={abs:.6e}",
        t.tensor_type(),
        first.join(", ")
    )
}

/// The graph the options name (default: the file's first).
fn pick_graph(a: &RunArgs) -> Result<kiln::Graph, CliError> {
    let graphs = read_module(&a.file)?;
    let g = match &a.graph {
        Some(name) => graphs
            .into_iter()
            .find(|g| g.name() == name)
            .ok_or_else(|| format!("{}: no graph named @{name}", a.file.display()))?,
        None => graphs
            .into_iter()
            .next()
            .ok_or_else(|| format!("{}: the file holds no graph", a.file.display()))?,
    };
    Ok(g)
}

/// Runs `g` on `inputs` (in graph input order) with `backend`: the compiled backends
/// through `kiln::compile` of the graph replayed as user code, as `kiln fuzz` runs it.
/// With `time`, that many more calls follow the first, timed one by one.
fn execute(
    g: &kiln::Graph,
    inputs: &[Tensor],
    backend: Backend,
    unfused: bool,
    time: Option<usize>,
) -> Result<(Vec<Tensor>, Vec<Duration>), CliError> {
    let mut call: Box<dyn FnMut() -> Result<Vec<Tensor>, CliError>> = match backend {
        Backend::Interp => {
            let values = inputs.iter().map(to_value).collect::<Result<Vec<_>, _>>()?;
            Box::new(move || {
                eval(g, &values)?
                    .iter()
                    .map(from_value)
                    .collect::<Result<_, _>>()
            })
        }
        Backend::Eager => Box::new(|| Ok(kiln::graph_exec::run_graph(g, inputs)?)),
        Backend::Cpu | Backend::Cuda => {
            let backend = if backend == Backend::Cpu {
                kiln::Backend::Cpu
            } else {
                kiln::Backend::Cuda
            };
            let opts = kiln::CompileOptions::default()
                .name(g.name())
                .backend(backend)
                .fusion(!unfused);
            let graph = g.clone();
            let f = kiln::compile_with(move |xs: &[Tensor]| replay(&graph, xs), opts);
            Box::new(move || Ok(f.call(inputs)?))
        }
    };
    let outputs = call()?;
    // the kernel table covers the timed calls only
    kiln::profile::reset();
    let mut times = Vec::new();
    for _ in 0..time.unwrap_or(0) {
        let start = Instant::now();
        let again = call()?;
        times.push(start.elapsed());
        drop(again);
    }
    Ok((outputs, times))
}

/// The median and fastest of `times`, as a line.
fn timing_line(times: &[Duration]) -> String {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    format!(
        "time: {} calls after the first, median {:.1} µs, fastest {:.1} µs",
        sorted.len(),
        us(sorted[sorted.len() / 2]),
        us(sorted[0])
    )
}

/// Runs the command.
pub fn run(a: &RunArgs) -> Result<(), CliError> {
    let g = pick_graph(a)?;
    let inputs = make_inputs(&g, a.seed, a.inputs.as_deref(), &a.dims)?;
    let (outputs, times) = execute(&g, &inputs, a.backend, a.unfused, a.time)?;
    let named: Vec<(String, Tensor)> = outputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("out{i}"), t))
        .collect();
    report(&g, a, &named, &times)
}

/// `kiln grad`: runs the joint graph, naming the forward outputs `out0`, ... and the
/// gradients `grad_<input>` (floating inputs, in input order).
pub fn grad(a: &RunArgs) -> Result<(), CliError> {
    let g = pick_graph(a)?;
    let joint = kiln_passes::grad::grad(&g)?;
    let inputs = make_inputs(&g, a.seed, a.inputs.as_deref(), &a.dims)?;
    let (outputs, times) = execute(&joint, &inputs, a.backend, a.unfused, a.time)?;
    let names: Vec<String> = (0..g.outputs().len())
        .map(|i| format!("out{i}"))
        .chain(
            g.inputs()
                .iter()
                .filter(|(_, id)| kiln::ir::ops::derivative::differentiable(g.node(*id).ty.dtype))
                .map(|(n, _)| format!("grad_{n}")),
        )
        .collect();
    let named: Vec<(String, Tensor)> = names.into_iter().zip(outputs).collect();
    report(&g, a, &named, &times)
}

/// Prints each named output and saves them when asked.
fn report(
    g: &kiln::Graph,
    a: &RunArgs,
    named: &[(String, Tensor)],
    times: &[Duration],
) -> Result<(), CliError> {
    println!(
        "graph @{} ({:?} backend, seed {})",
        g.name(),
        a.backend,
        a.seed
    );
    for (n, t) in named {
        println!("{}", summary(n, t));
    }
    if !times.is_empty() {
        println!("{}", timing_line(times));
    }
    if let Some(path) = &a.output {
        kiln::io::save(path, named)?;
        println!("wrote {} outputs to {}", named.len(), path.display());
    }
    Ok(())
}
