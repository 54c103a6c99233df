//! The three kinds of CPU kernel a plan calls: a generated loop nest, a GEMM with a
//! generated epilogue over its output rows, and a kernel group run op by op on the eager
//! kernels (ops and dtypes the generators do not handle).

use super::nest_exec::NestKernel;
use crate::error::CodegenError;
use crate::loops::{lower_kernel, Unsupported};
use crate::matmul_group::{matmul_shape, split_matmul_group};
use kiln_ir::{Arg, DType, Dim, Graph, NodeId, Op};
use kiln_runtime::{execute, index_add_owned, matmul_into, CpuTensor, EagerArg};

/// Symbol bindings of one call.
pub(crate) type Bindings = Vec<(String, usize)>;

/// Looks a symbol up in `bound`.
pub(crate) fn lookup(bound: &Bindings, s: &str) -> Option<usize> {
    bound.iter().find(|(b, _)| b == s).map(|(_, n)| *n)
}

/// The concrete shape of a type's dims.
pub(crate) fn concrete(dims: &[Dim], bound: &Bindings) -> Option<Vec<usize>> {
    dims.iter()
        .map(|d| match d {
            Dim::Const(n) => Some(*n),
            Dim::Sym(s) => lookup(bound, s),
        })
        .collect()
}

/// Checks a plan's inputs (dtype and rank of each, `(dtype, shape)` in the graph's input
/// order) against its graph and binds the symbolic dims to their sizes.
pub(crate) fn bind_inputs(
    plan: &str,
    graph: &Graph,
    ids: &[NodeId],
    inputs: &[(DType, &[usize])],
) -> Result<Bindings, CodegenError> {
    let mut bound: Bindings = Vec::new();
    let bad = |reason: String| CodegenError::Inputs {
        plan: plan.to_string(),
        reason,
    };
    for (id, (dtype, shape)) in ids.iter().zip(inputs) {
        let ty = &graph.node(*id).ty;
        let name = graph.input_name(*id).unwrap_or("?");
        if ty.dtype != *dtype || ty.shape.rank() != shape.len() {
            return Err(bad(format!("input {name} is {ty}, got {dtype}{shape:?}")));
        }
        for (d, &n) in ty.shape.dims().iter().zip(shape.iter()) {
            match d {
                Dim::Sym(s) => match bound.iter().find(|(b, _)| b == &**s) {
                    Some((_, m)) if *m != n => {
                        return Err(bad(format!("symbol {s} is both {m} and {n}")))
                    }
                    Some(_) => {}
                    None => bound.push((s.to_string(), n)),
                },
                Dim::Const(c) if *c != n => {
                    return Err(bad(format!(
                        "input {name} has shape {shape:?}, compiled for {ty}"
                    )))
                }
                Dim::Const(_) => {}
            }
        }
    }
    Ok(bound)
}

/// A kernel group on the eager kernels: its body graph, op by op.
pub struct EagerKernel {
    /// the body (inputs are the group's inputs, outputs its outputs)
    pub body: Graph,
    /// why it is not generated
    pub reason: String,
}

impl EagerKernel {
    /// Runs the body on `inputs`; returns the outputs.
    pub(crate) fn run(
        &self,
        inputs: &[&CpuTensor],
        bound: &Bindings,
    ) -> Result<Vec<CpuTensor>, CodegenError> {
        run_graph(&self.body, inputs, bound)
    }
}

/// Runs a graph on the eager kernels.
pub(crate) fn run_graph(
    g: &Graph,
    inputs: &[&CpuTensor],
    bound: &Bindings,
) -> Result<Vec<CpuTensor>, CodegenError> {
    let rt = |source| CodegenError::Runtime {
        kernel: g.name().to_string(),
        source,
    };
    // node ids are dense: one slot per node
    let mut vals: Vec<Option<CpuTensor>> = vec![None; g.len()];
    let missing = |id: NodeId| CodegenError::Plan {
        plan: g.name().to_string(),
        reason: format!(
            "internal: value %{} used before it was computed",
            id.index()
        ),
    };
    for ((_, id), t) in g.inputs().iter().zip(inputs) {
        vals[id.index()] = Some((*t).clone());
    }
    for (id, n) in g.nodes() {
        if n.op == Op::Input {
            continue;
        }
        let args: Vec<EagerArg<'_>> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => vals[v.index()]
                    .as_ref()
                    .map(EagerArg::Tensor)
                    .ok_or_else(|| missing(*v)),
                Arg::Scalar(s) => Ok(EagerArg::Scalar(*s)),
            })
            .collect::<Result<_, _>>()?;
        let op =
            n.op.bind_symbols(&|s: &str| lookup(bound, s))
                .map_err(|s| CodegenError::Plan {
                    plan: g.name().to_string(),
                    reason: format!("symbolic dim `{s}` is not bound by any input"),
                })?;
        let out = match (op.as_ref(), n.args.first()) {
            // into a fill only this op reads, instead of a copy of it
            (Op::IndexAdd { dim }, Some(Arg::Value(x)))
                if matches!(g.node(*x).op, Op::Full { .. })
                    && g.users(*x).len() == 1
                    && !g.outputs().contains(x) =>
            {
                let (idx, src) = match (&args[1], &args[2]) {
                    (EagerArg::Tensor(i), EagerArg::Tensor(s)) => ((*i).clone(), (*s).clone()),
                    _ => return Err(missing(id)),
                };
                drop(args);
                let fill = vals[x.index()].take().ok_or_else(|| missing(*x))?;
                index_add_owned(fill, *dim, &idx, &src).map_err(rt)?
            }
            _ => {
                let out = execute(&op, &args).map_err(rt)?;
                drop(args);
                out
            }
        };
        vals[id.index()] = Some(out);
    }
    g.outputs()
        .iter()
        .map(|o| vals[o.index()].clone().ok_or_else(|| missing(*o)))
        .collect()
}

/// A matmul group: GEMM into the output, then the generated epilogue over each block of
/// output rows while it is in cache.
pub struct MatmulKernel {
    /// the group's body
    pub body: Graph,
    /// positions (in the group's inputs) of the matmul's operands
    a: usize,
    b: usize,
    /// the epilogue (the matmul result is its input `acc`), if the group has one
    epilogue: Option<Epilogue>,
    /// true when the matmul result itself is an output of the group (output 0 then)
    mm_is_output: bool,
}

struct Epilogue {
    nest: NestKernel,
    /// for each nest input: `None` for the accumulator, else the group input position
    inputs: Vec<Option<usize>>,
    /// the epilogue writes outputs shaped like the product, row for row
    by_rows: bool,
}

impl MatmulKernel {
    /// The tiers of the epilogue's specialisations (none without an epilogue).
    pub fn tiers(&self) -> Vec<super::c_tier::KernelTier> {
        self.epilogue
            .as_ref()
            .map(|e| e.nest.tiers())
            .unwrap_or_default()
    }

    /// The generated form of a group whose first op is an f32 matmul, if it has one.
    pub fn new(body: &Graph, opts: &crate::CodegenOptions) -> Result<MatmulKernel, Unsupported> {
        let split = split_matmul_group(body)?;
        let epilogue = match split.epilogue {
            None => None,
            Some(e) => Some(Epilogue {
                nest: {
                    let nest = lower_kernel(&e.graph)?;
                    super::emit::f64_supported(&nest).map_err(|reason| Unsupported {
                        kernel: e.graph.name().to_string(),
                        reason,
                    })?;
                    NestKernel::new(nest, opts)
                },
                inputs: e.inputs,
                by_rows: e.by_rows,
            }),
        };
        Ok(MatmulKernel {
            body: body.clone(),
            a: split.a,
            b: split.b,
            epilogue,
            mm_is_output: split.mm_is_output,
        })
    }

    /// The epilogue's loop nest, if any.
    pub fn epilogue_nest(&self) -> Option<&crate::loops::LoopNest> {
        self.epilogue.as_ref().map(|e| &e.nest.nest)
    }

    /// Whether output `output` (in the group's output order) can be written into the memory
    /// of input `input`: the input is read by the epilogue only (not a GEMM operand) at the
    /// index the output is stored at, so each element is read before it is overwritten. The
    /// product itself, written by the GEMM before the epilogue runs, never can.
    pub(crate) fn updates_in_place(&self, input: usize, output: usize) -> bool {
        let Some(ep) = &self.epilogue else {
            return false;
        };
        if input == self.a || input == self.b || (self.mm_is_output && output == 0) {
            return false;
        }
        let k = output - usize::from(self.mm_is_output);
        let Some(j) = ep.inputs.iter().position(|i| *i == Some(input)) else {
            return false;
        };
        let bufs = &ep.nest.nest.buffers;
        match (bufs.get(j), bufs.get(ep.inputs.len() + k)) {
            (Some(i), Some(o)) => i.index == o.index,
            _ => false,
        }
    }

    /// Runs on the group's inputs, writing `outputs` (allocated by the caller, contiguous,
    /// in the group's output order). `scratch` makes a temporary for the product when it is
    /// not an output itself. An output marked in `in_input_memory` lives in an input's
    /// memory (see [`MatmulKernel::updates_in_place`]): the product is never computed into
    /// it.
    pub(crate) fn run(
        &self,
        inputs: &[&CpuTensor],
        outputs: &[CpuTensor],
        in_input_memory: &[bool],
        scratch: &dyn Fn(&[usize]) -> Result<CpuTensor, CodegenError>,
    ) -> Result<Vec<CpuTensor>, CodegenError> {
        let rt = |source| CodegenError::Runtime {
            kernel: self.body.name().to_string(),
            source,
        };
        let (a, b) = (inputs[self.a], inputs[self.b]);
        let Some(ep) = &self.epilogue else {
            matmul_into(a, b, &outputs[0], None).map_err(rt)?;
            return Ok(outputs.to_vec());
        };
        let skip = usize::from(self.mm_is_output);
        let ep_outputs = &outputs[skip..];
        // the product: an output, or computed in place in a same-shaped output of the
        // epilogue (row by row, each row read before the epilogue stores it) that does not
        // live in an input's memory
        let mm_shape = matmul_shape(a.shape(), b.shape());
        let in_place = ep_outputs.iter().enumerate().find(|(k, o)| {
            ep.by_rows
                && o.shape() == mm_shape.as_slice()
                && o.dtype() == DType::F32
                && !in_input_memory.get(skip + k).copied().unwrap_or(false)
        });
        let acc = if self.mm_is_output {
            outputs[0].clone()
        } else if let Some((_, o)) = in_place {
            o.clone()
        } else {
            scratch(&mm_shape)?
        };
        let mut tensors: Vec<&CpuTensor> = ep
            .inputs
            .iter()
            .map(|i| match i {
                None => &acc,
                Some(p) => inputs[*p],
            })
            .collect();
        tensors.extend(ep_outputs.iter());
        let call = ep.nest.prepare(&tensors, ep.by_rows)?;
        match call {
            // by rows only when the call's rows are the GEMM's output rows: both operands
            // matrices (no 1-d promotion), the inner loop one output row
            Some(call)
                if ep.by_rows
                    && a.rank() >= 2
                    && b.rank() >= 2
                    && call.inner() == b.shape()[b.rank() - 1]
                    && call.rows() * call.inner() == acc.numel() =>
            {
                let hook = |r0: usize, nr: usize| call.call(r0, r0 + nr, 0, call.inner());
                matmul_into(a, b, &acc, Some(&hook)).map_err(rt)?;
            }
            Some(call) => {
                matmul_into(a, b, &acc, None).map_err(rt)?;
                call.run(false);
            }
            None => {
                // an empty loop: the eager kernels decide what that means
                return run_graph(&self.body, inputs, &Vec::new());
            }
        }
        Ok(outputs.to_vec())
    }
}
