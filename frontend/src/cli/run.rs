//! `kiln run FILE.kir`: run a graph on the interpreter or the eager runtime, print each
//! output's type, first values and checksums, and optionally save them.

use super::inputs::make_inputs;
use super::{read_module, Backend, CliError};
use kiln::ir::interp::{eval, Value};
use kiln::Tensor;
use std::path::PathBuf;

/// The options of `kiln run`.
pub struct RunArgs {
    pub file: PathBuf,
    pub graph: Option<String>,
    pub seed: u64,
    pub inputs: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub backend: Backend,
    pub dims: Vec<(String, usize)>,
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

/// Runs the command.
pub fn run(a: &RunArgs) -> Result<(), CliError> {
    let graphs = read_module(&a.file)?;
    let g = match &a.graph {
        Some(name) => graphs
            .iter()
            .find(|g| g.name() == name)
            .ok_or_else(|| format!("{}: no graph named @{name}", a.file.display()))?,
        None => graphs
            .first()
            .ok_or_else(|| format!("{}: the file holds no graph", a.file.display()))?,
    };
    let inputs = make_inputs(g, a.seed, a.inputs.as_deref(), &a.dims)?;
    let outputs: Vec<Tensor> = match a.backend {
        Backend::Interp => {
            let values = inputs.iter().map(to_value).collect::<Result<Vec<_>, _>>()?;
            eval(g, &values)?
                .iter()
                .map(from_value)
                .collect::<Result<_, _>>()?
        }
        Backend::Eager => kiln::graph_exec::run_graph(g, &inputs)?,
    };
    let named: Vec<(String, Tensor)> = outputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("out{i}"), t))
        .collect();
    println!(
        "graph @{} ({:?} backend, seed {})",
        g.name(),
        a.backend,
        a.seed
    );
    for (n, t) in &named {
        println!("{}", summary(n, t));
    }
    if let Some(path) = &a.output {
        kiln::io::save(path, &named)?;
        println!("wrote {} outputs to {}", named.len(), path.display());
    }
    Ok(())
}
