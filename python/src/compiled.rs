//! `compile(kir, backend)`: a graph of kiln's textual IR, parsed, verified and wrapped in a
//! compiled function that PyTorch calls with its tensors.

use crate::{dlpack, inputs, to_py};
use kiln::graph_exec::{replay, run_graph};
use kiln::ir::{parse_graph, print_graph, verify as verify_graph, Graph};
use kiln::{Backend, CompileOptions, CompiledFn, Tensor, TierPolicy};
use kiln_runtime::CpuTensor;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;

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
    /// per output: how the caller wants it laid out (see [`OutputLayout`])
    layouts: Vec<OutputLayout>,
}

/// How one output must come back: what eager PyTorch's version of it looks like.
#[derive(Clone, Debug, Default)]
struct OutputLayout {
    /// eager's strides, a dense layout of the output's shape (row-major over some order of
    /// its dims): an output kiln returns with other strides (a permuted weight gradient, an
    /// attention output eager lays out [b, s, h, d]) is copied into them by kiln's runtime,
    /// in blocks and on its threads (ResNet-18's 512×256×3×3 weight gradient: 0.8 ms
    /// against torch's `copy_` 6.5 ms)
    strides: Option<Vec<isize>>,
    /// eager's output is fresh memory: one kiln returns as a view of an input's memory or
    /// overlapping an earlier output (kiln's IR is functional: `clone` is the identity) is
    /// copied, since the caller may write it in place
    fresh: bool,
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
/// `KILN_TIER`). `output_strides` maps an output's number to the strides it must come back
/// with (an output kiln lays out otherwise is copied into them, when they are a dense
/// layout of its shape; other strides leave it as kiln lays it out); the outputs numbered in
/// `fresh_outputs` never come back as memory of an input or overlapping an earlier output
/// (such an output is copied).
#[pyfunction]
#[pyo3(signature = (kir, backend = "cpu", tier = "auto", output_strides = HashMap::new(),
                    fresh_outputs = Vec::new()))]
pub(crate) fn compile(
    kir: &str,
    backend: &str,
    tier: &str,
    output_strides: HashMap<usize, Vec<isize>>,
    fresh_outputs: Vec<usize>,
) -> PyResult<Compiled> {
    let graph = parse(kir)?;
    let outputs = graph.outputs().len();
    let mut layouts = vec![OutputLayout::default(); outputs];
    let numbered = |what: &str, i: usize| {
        to_py(format!(
            "{what}: output {i} of a graph of {outputs} outputs"
        ))
    };
    for (i, strides) in output_strides {
        let rank = graph
            .outputs()
            .get(i)
            .map(|&v| graph.node(v).ty.shape.rank())
            .ok_or_else(|| numbered("output_strides", i))?;
        if strides.len() != rank {
            return Err(to_py(format!(
                "output_strides: {} strides for output {i} of rank {rank}",
                strides.len()
            )));
        }
        layouts[i].strides = Some(strides);
    }
    for i in fresh_outputs {
        layouts
            .get_mut(i)
            .ok_or_else(|| numbered("fresh_outputs", i))?
            .fresh = true;
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
        layouts,
    })
}

#[pymethods]
impl Compiled {
    /// Runs the graph on `inputs`, a list of one `(storage address, dtype, sizes, strides,
    /// storage offset, storage elements, tensor, pin)` tuple per graph input, and returns a
    /// DLPack capsule per output. The list is emptied: kiln then holds the only references
    /// it made, and lets go of each unpinned input once its last reader has run, so that a
    /// tensor the caller no longer holds is freed while the call goes on. The interpreter
    /// lock is released while kiln runs.
    fn __call__(&self, py: Python<'_>, inputs: &Bound<'_, PyList>) -> PyResult<Vec<Py<PyAny>>> {
        let specs: Vec<inputs::InputSpec> = inputs.extract()?;
        inputs.del_slice(0, inputs.len())?;
        let input_memory = specs
            .iter()
            .map(inputs::memory)
            .collect::<PyResult<Vec<_>>>()?;
        let tensors = specs
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
                // an input the call let go of may have been freed and its memory reused
                // for an output: only the others' memory can be an output's
                let kept: Vec<_> = input_memory
                    .into_iter()
                    .zip(&tensors)
                    .filter(|(_, t)| t.as_cpu().is_ok_and(|c| !c.storage().is_released()))
                    .map(|(m, _)| m)
                    .collect();
                as_eager_lays_out(outs, &self.layouts, &kept)
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

/// The bytes `[first, end)` a tensor's elements span (nothing for an empty tensor).
fn byte_span(t: &CpuTensor) -> std::ops::Range<usize> {
    if t.numel() == 0 {
        return 0..0;
    }
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&n, &s) in t.shape().iter().zip(t.strides()) {
        let reach = (n as isize - 1) * s;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    let item = t.dtype().size_bytes() as isize;
    let base = t.data_ptr() as isize;
    (base + lo * item) as usize..(base + (hi + 1) * item) as usize
}

/// `outs` laid out as `layouts` asks: each output with eager's strides where kiln's differ
/// (in a dim of more than one element), and a fresh output that starts in an input's
/// memory or overlaps an earlier output copied (keeping its layout where that is dense).
fn as_eager_lays_out(
    outs: Vec<Tensor>,
    layouts: &[OutputLayout],
    input_memory: &[std::ops::Range<usize>],
) -> kiln::Result<Vec<Tensor>> {
    let mut kept: Vec<std::ops::Range<usize>> = Vec::with_capacity(outs.len());
    let mut laid = Vec::with_capacity(outs.len());
    for (i, t) in outs.into_iter().enumerate() {
        let (want, fresh) = layouts
            .get(i)
            .map_or((None, false), |l| (l.strides.as_deref(), l.fresh));
        let cpu = t.as_cpu()?;
        let differs = |want: &[isize]| {
            cpu.shape()
                .iter()
                .zip(cpu.strides().iter().zip(want))
                .any(|(&n, (&got, &w))| n > 1 && got != w)
        };
        let copied = match want {
            Some(want) if differs(want) => cpu.copy_with_strides(want),
            _ => None,
        };
        let t = match copied {
            Some(c) => Tensor::from_cpu(c),
            None if fresh && cpu.numel() > 0 => {
                let span = byte_span(cpu);
                let start = cpu.data_ptr() as usize;
                let aliased = input_memory.iter().any(|m| m.contains(&start))
                    || kept
                        .iter()
                        .any(|k| k.start < span.end && span.start < k.end);
                match aliased {
                    true => Tensor::from_cpu(cpu.clone_preserving_layout()),
                    false => t,
                }
            }
            None => t,
        };
        kept.push(byte_span(t.as_cpu()?));
        laid.push(t);
    }
    Ok(laid)
}
