//! `compile(kir, backend)`: a graph of kiln's textual IR, parsed, verified and wrapped in a
//! compiled function that PyTorch calls with its tensors.

use crate::{dlpack, inputs, to_py};
use kiln::graph_exec::{replay, run_graph};
use kiln::ir::{parse_graph, print_graph, verify as verify_graph, Graph};
use kiln::{Backend, CompileOptions, CompiledFn, Tensor, TierPolicy};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// How a [`Compiled`] graph runs.
enum Runner {
    /// `kiln::compile` with the cpu backend (decomposed, fused, generated code)
    Cpu(Box<CompiledFn<'static, [Tensor], Vec<Tensor>>>),
    /// kiln's eager runtime, one kernel per node (for debugging the translation)
    Eager,
}

/// A graph compiled by kiln. Call it with a list of input descriptions (see
/// `kiln/backend.py`); it returns one DLPack capsule per output.
#[pyclass(frozen, module = "kiln._native")]
pub(crate) struct Compiled {
    graph: Graph,
    runner: Runner,
    /// per output: whether the caller wants it row-major (a view kiln returns is copied by
    /// kiln's runtime, in parallel and in blocks, rather than by the caller)
    contiguous: Vec<bool>,
}

/// Parses and verifies `kir`, the text of one graph.
fn parse(kir: &str) -> PyResult<Graph> {
    let g = parse_graph(kir).map_err(to_py)?;
    verify_graph(&g).map_err(to_py)?;
    Ok(g)
}

/// Parses and verifies one graph of kiln's IR and returns it printed with every type
/// inferred (a `KilnError` says what is wrong).
#[pyfunction]
pub(crate) fn verify(kir: &str) -> PyResult<String> {
    Ok(print_graph(&parse(kir)?))
}

/// Compiles one graph of kiln's IR for `backend` (`"cpu"`: generated code; `"eager"`:
/// kiln's eager kernels). Code is generated at the first call, for its input shapes.
/// `tier` is the cpu backend's tier policy (`"auto"`, `"cranelift"` or `"c"`, as
/// `KILN_TIER`). The outputs numbered in `contiguous_outputs` come back row-major: a view
/// kiln would return (a permuted weight gradient) is copied by kiln's runtime first.
#[pyfunction]
#[pyo3(signature = (kir, backend = "cpu", tier = "auto", contiguous_outputs = Vec::new()))]
pub(crate) fn compile(
    kir: &str,
    backend: &str,
    tier: &str,
    contiguous_outputs: Vec<usize>,
) -> PyResult<Compiled> {
    let graph = parse(kir)?;
    let outputs = graph.outputs().len();
    let mut contiguous = vec![false; outputs];
    for i in contiguous_outputs {
        *contiguous.get_mut(i).ok_or_else(|| {
            to_py(format!(
                "contiguous_outputs: output {i} of a graph of {outputs} outputs"
            ))
        })? = true;
    }
    let tier = TierPolicy::parse(tier).ok_or_else(|| {
        to_py(format!(
            "tier {tier:?}: one of \"auto\", \"cranelift\", \"c\""
        ))
    })?;
    let runner = match backend {
        "cpu" => {
            let replayed = graph.clone();
            let opts = CompileOptions::default()
                .name(graph.name())
                .backend(Backend::Cpu)
                .tier(tier)
                .fullgraph(true);
            Runner::Cpu(Box::new(kiln::compile_with(
                move |xs: &[Tensor]| replay(&replayed, xs),
                opts,
            )))
        }
        "eager" => Runner::Eager,
        other => {
            return Err(to_py(format!(
                "backend {other:?}: kiln's PyTorch backend runs \"cpu\" or \"eager\""
            )))
        }
    };
    Ok(Compiled {
        graph,
        runner,
        contiguous,
    })
}

#[pymethods]
impl Compiled {
    /// Runs the graph on `inputs` (one `(storage address, dtype, sizes, strides, storage
    /// offset, storage elements, tensor)` tuple per graph input) and returns a DLPack
    /// capsule per output. The interpreter lock is released while kiln runs.
    fn __call__(&self, py: Python<'_>, inputs: Vec<inputs::InputSpec>) -> PyResult<Vec<Py<PyAny>>> {
        let tensors = inputs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| inputs::borrow(i, spec))
            .collect::<PyResult<Vec<Tensor>>>()?;
        let outputs = py
            .detach(|| {
                let outs = match &self.runner {
                    Runner::Cpu(f) => f.call(&tensors),
                    Runner::Eager => run_graph(&self.graph, &tensors),
                }?;
                outs.into_iter()
                    .enumerate()
                    .map(|(i, t)| match self.contiguous.get(i) {
                        Some(true) => t.contiguous(),
                        _ => Ok(t),
                    })
                    .collect::<kiln::Result<Vec<Tensor>>>()
            })
            .map_err(to_py)?;
        drop(tensors);
        outputs
            .into_iter()
            .map(|t| dlpack::capsule(py, t))
            .collect()
    }

    /// The graph as kiln prints it.
    fn graph(&self) -> String {
        print_graph(&self.graph)
    }

    /// The number of inputs the graph takes.
    #[getter]
    fn input_count(&self) -> usize {
        self.graph.inputs().len()
    }

    /// `kiln::compile`'s counters (calls, cache hits, traces, compiles, graph breaks) for
    /// the cpu backend, or an empty dict for eager.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        if let Runner::Cpu(f) = &self.runner {
            let s = f.stats();
            d.set_item("calls", s.calls)?;
            d.set_item("cache_hits", s.cache_hits)?;
            d.set_item("traces", s.traces)?;
            d.set_item("compiles", s.compiles)?;
            d.set_item("entries", s.entries)?;
            d.set_item("recompiles", s.recompiles)?;
            d.set_item("graph_breaks", s.graph_breaks)?;
            d.set_item("eager_fallback", s.eager_fallback)?;
        }
        Ok(d)
    }
}
