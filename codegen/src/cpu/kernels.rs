//! The three kinds of CPU kernel a plan calls: a generated loop nest, a GEMM with a
//! generated epilogue over its output rows, and a kernel group run op by op on the eager
//! kernels (ops and dtypes the generators do not handle).

use super::nest_exec::NestKernel;
use crate::error::CodegenError;
use crate::loops::{lower_kernel, Unsupported};
use kiln_ir::{Arg, DType, Dim, Graph, NodeId, Op};
use kiln_runtime::{execute, matmul_into, CpuTensor, EagerArg};
use std::collections::HashMap;

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
    let mut vals: HashMap<NodeId, CpuTensor> = HashMap::new();
    for ((_, id), t) in g.inputs().iter().zip(inputs) {
        vals.insert(*id, (*t).clone());
    }
    for (id, n) in g.nodes() {
        if n.op == Op::Input {
            continue;
        }
        let args: Vec<EagerArg<'_>> = n
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => EagerArg::Tensor(&vals[v]),
                Arg::Scalar(s) => EagerArg::Scalar(*s),
            })
            .collect();
        let op =
            n.op.bind_symbols(&|s: &str| lookup(bound, s))
                .map_err(|s| CodegenError::Plan {
                    plan: g.name().to_string(),
                    reason: format!("symbolic dim `{s}` is not bound by any input"),
                })?;
        let out = execute(&op, &args).map_err(rt)?;
        drop(args);
        vals.insert(id, out);
    }
    Ok(g.outputs().iter().map(|o| vals[o].clone()).collect())
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
    /// The generated form of a group whose first op is an f32 matmul, if it has one.
    pub fn new(body: &Graph) -> Result<MatmulKernel, Unsupported> {
        let unsupported = |reason: &str| Unsupported {
            kernel: body.name().to_string(),
            reason: reason.to_string(),
        };
        let mms: Vec<NodeId> = body
            .nodes()
            .filter(|(_, n)| n.op == Op::Matmul)
            .map(|(id, _)| id)
            .collect();
        let [mm] = mms[..] else {
            return Err(unsupported("not exactly one matmul"));
        };
        let node = body.node(mm);
        let operand_pos = |a: &Arg| match a {
            Arg::Value(v) => body.inputs().iter().position(|(_, id)| id == v),
            Arg::Scalar(_) => None,
        };
        let (Some(a), Some(b)) = (operand_pos(&node.args[0]), operand_pos(&node.args[1])) else {
            return Err(unsupported("matmul operands are not group inputs"));
        };
        let f32s = |id: NodeId| body.node(id).ty.dtype == DType::F32;
        if !f32s(mm) || body.inputs().iter().any(|(_, id)| !f32s(*id)) {
            return Err(unsupported("not f32"));
        }
        let mm_is_output = body.outputs().contains(&mm);
        let others: Vec<NodeId> = body
            .outputs()
            .iter()
            .copied()
            .filter(|o| *o != mm)
            .collect();
        if mm_is_output && body.outputs()[0] != mm {
            return Err(unsupported("the product is an output but not the first"));
        }
        let epilogue = if others.is_empty() {
            None
        } else {
            // the epilogue graph: the product becomes the input `acc`
            let mut g = Graph::new(format!("{}_epilogue", body.name()));
            let bad = |e: kiln_ir::GraphError| unsupported(&e.to_string());
            let mut map: HashMap<NodeId, NodeId> = HashMap::new();
            let mut inputs: Vec<Option<usize>> = Vec::new();
            for (id, n) in body.nodes() {
                if id == mm {
                    map.insert(id, g.add_input("acc", n.ty.clone()).map_err(bad)?);
                    inputs.push(None);
                    continue;
                }
                if n.op == Op::Input {
                    let used = body.users(id).iter().any(|u| *u != mm);
                    if used {
                        let name = body.input_name(id).unwrap_or("in").to_string();
                        map.insert(id, g.add_input(name, n.ty.clone()).map_err(bad)?);
                        inputs.push(body.inputs().iter().position(|(_, i)| *i == id));
                    }
                    continue;
                }
                let args: Vec<Arg> = n
                    .args
                    .iter()
                    .map(|a| match a {
                        Arg::Value(v) => Arg::Value(map[v]),
                        s => *s,
                    })
                    .collect();
                map.insert(id, g.add_op(n.op.clone(), &args, None).map_err(bad)?);
            }
            g.set_outputs(others.iter().map(|o| map[o]).collect())
                .map_err(bad)?;
            let nest = lower_kernel(&g)?;
            let shape = &node.ty.shape;
            let by_rows = others.iter().all(|o| body.node(*o).ty.shape == *shape);
            Some(Epilogue {
                nest: NestKernel::new(nest),
                inputs,
                by_rows,
            })
        };
        Ok(MatmulKernel {
            body: body.clone(),
            a,
            b,
            epilogue,
            mm_is_output,
        })
    }

    /// The epilogue's loop nest, if any.
    pub fn epilogue_nest(&self) -> Option<&crate::loops::LoopNest> {
        self.epilogue.as_ref().map(|e| &e.nest.nest)
    }

    /// Runs on the group's inputs, writing `outputs` (allocated by the caller, contiguous,
    /// in the group's output order). `scratch` makes a temporary for the product when it is
    /// not an output itself.
    pub(crate) fn run(
        &self,
        inputs: &[&CpuTensor],
        outputs: &[CpuTensor],
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
        let ep_outputs = if self.mm_is_output {
            &outputs[1..]
        } else {
            outputs
        };
        // the product: an output, or computed in place in the (same-shaped) first output
        let mm_shape = infer_mm_shape(a.shape(), b.shape());
        let acc = if self.mm_is_output {
            outputs[0].clone()
        } else if ep.by_rows
            && ep_outputs[0].shape() == mm_shape.as_slice()
            && ep_outputs[0].dtype() == DType::F32
        {
            ep_outputs[0].clone()
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

/// torch.matmul's result shape for operands of rank ≥ 1 (already checked by the tracer).
fn infer_mm_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (ba, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let r = ba.len().max(bb.len());
    let mut shape = vec![1usize; r];
    for bt in [ba, bb] {
        for (i, &n) in bt.iter().enumerate() {
            let o = r - bt.len() + i;
            if n != 1 {
                shape[o] = n;
            }
        }
    }
    if a.len() > 1 {
        shape.push(a2[a2.len() - 2]);
    }
    if b.len() > 1 {
        shape.push(b2[b2.len() - 1]);
    }
    shape
}
