//! Compiled functions that take part in autograd (kiln's AOTAutograd).
//!
//! When a compiled function is called with grad mode on and some argument or captured
//! tensor requires grad, its traced graph is differentiated into a joint graph
//! ([`kiln_passes::joint`]) and split by a minimum cut into a forward and a backward graph
//! ([`kiln_passes::partition`]); both are compiled by the function's backend. A call runs
//! the forward, which returns the function's outputs and the values saved for the backward,
//! and records one autograd node (`CompiledFunctionBackward`) whose backward runs the
//! compiled backward graph when the user calls `backward()`: gradients reach the inputs'
//! leaves and nodes exactly as eager autograd's would.

use super::backend::Executable;
use super::CompileOptions;
use crate::autograd::{attach, CompiledBackward, Edge, Node, NodeKind};
use crate::error::{Error, Result};
use crate::Tensor;
use kiln_ir::{Arg, Graph};
use kiln_passes::joint::joint;
use kiln_passes::partition::{partition, PartitionOptions, PartitionReport, SavedFrom};
use kiln_runtime::CpuTensor;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The forward and backward of one compiled graph.
pub(crate) struct Training {
    /// the forward graph: the function's outputs, then the extra saved values
    pub(crate) forward: Graph,
    /// the backward graph: saved values and tangents in, gradients out
    pub(crate) backward: Graph,
    fwd: Arc<dyn Executable>,
    bwd: Arc<dyn Executable>,
    /// what the partition saved and recomputed
    pub(crate) report: PartitionReport,
    /// the number of the function's outputs
    outputs: usize,
    /// per output, whether a gradient flows from it (it depends on an input that requires
    /// grad and is floating)
    out_requires: Vec<bool>,
    /// per output, its tangent among the backward's inputs
    tangents: Vec<Option<usize>>,
    /// per backward output, the input (argument or parameter) it is the gradient of
    grads: Vec<usize>,
}

fn compile_error(opts: &CompileOptions, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Compile {
        function: opts.name.clone(),
        reason: format!("{what}: {e}"),
    }
}

impl Training {
    /// The tiers of the forward's and the backward's generated kernels, in that order.
    pub(crate) fn kernel_tiers(&self) -> Vec<kiln_codegen::cpu::c_tier::KernelTier> {
        let mut t = self.fwd.kernel_tiers();
        t.extend(self.bwd.kernel_tiers());
        t
    }

    /// Differentiates, partitions and compiles `graph` for inputs whose `wants_grad` is
    /// true. `None` when no gradient can flow (no floating output depends on such an
    /// input): the plain graph serves.
    pub(crate) fn build(
        graph: &Graph,
        wants_grad: &[bool],
        hints: HashMap<Arc<str>, usize>,
        opts: &CompileOptions,
    ) -> Result<Option<Training>> {
        let j = joint(graph, wants_grad).map_err(|e| compile_error(opts, "differentiating", e))?;
        if j.grads.is_empty() {
            return Ok(None);
        }
        let popts = PartitionOptions {
            hints,
            memory_budget: opts.memory_budget,
        };
        let p = partition(&j, &popts).map_err(|e| compile_error(opts, "partitioning", e))?;
        super::logs::log_partition(&opts.name, &p.report);
        super::logs::log_graph(&p.forward);
        super::logs::log_graph(&p.backward);
        let fwd: Arc<dyn Executable> = Arc::from(opts.backend.compile(&p.forward, opts)?);
        let bwd: Arc<dyn Executable> = Arc::from(opts.backend.compile(&p.backward, opts)?);
        // which outputs depend on an input that wants a gradient
        let mut leads = vec![false; graph.len()];
        for (i, (_, id)) in graph.inputs().iter().enumerate() {
            leads[id.index()] = wants_grad.get(i).copied().unwrap_or(false);
        }
        for (id, node) in graph.nodes() {
            if node
                .args
                .iter()
                .any(|a| matches!(a, Arg::Value(v) if leads[v.index()]))
            {
                leads[id.index()] = true;
            }
        }
        let out_requires = graph
            .outputs()
            .iter()
            .zip(&j.tangents)
            .map(|(o, t)| t.is_some() && leads[o.index()])
            .collect();
        Ok(Some(Training {
            forward: p.forward,
            backward: p.backward,
            fwd,
            bwd,
            report: p.report,
            outputs: j.outputs,
            out_requires,
            tangents: j.tangents,
            grads: j.grads,
        }))
    }

    /// Runs the forward on `inputs` (the arguments, then the parameters) and returns the
    /// function's outputs, those a gradient flows from recorded on one autograd node.
    pub(crate) fn run(self: &Arc<Training>, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let reals: Vec<&CpuTensor> = inputs.iter().map(|t| t.real()).collect::<Result<_>>()?;
        let mut outs = self.fwd.run(&reals)?;
        let extras = outs.split_off(self.outputs);
        let saved = self
            .report
            .saved
            .iter()
            .map(|s| match s.from {
                SavedFrom::Input(i) => SavedInput {
                    data: reals[i].clone(),
                    version: Some((inputs[i].detach(), inputs[i].version())),
                },
                SavedFrom::Output(o) => SavedInput {
                    data: outs[o].clone(),
                    version: None,
                },
                SavedFrom::Extra(k) => SavedInput {
                    data: extras[k].clone(),
                    version: None,
                },
            })
            .collect();
        let edges: Vec<Option<Edge>> = self.grads.iter().map(|&i| inputs[i].edge()).collect();
        let shapes = outs.iter().map(|o| o.shape().to_vec()).collect();
        let node = Arc::new(Node {
            kind: NodeKind::Compiled(Box::new(CompiledCall {
                training: self.clone(),
                saved: Mutex::new(Some(saved)),
                shapes,
            })),
            name: "CompiledFunctionBackward".into(),
            edges,
            out_meta: Mutex::new((0..self.outputs).map(|_| Weak::new()).collect()),
        });
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(j, o)| {
                let t = Tensor::from_cpu(o);
                if self.out_requires[j] {
                    attach(t, &node, j)
                } else {
                    t
                }
            })
            .collect())
    }
}

/// A value saved for the backward; a forward input keeps its tensor and version, so that
/// modifying it in place before `backward()` is PyTorch's error, not a wrong gradient.
struct SavedInput {
    data: CpuTensor,
    version: Option<(Tensor, u64)>,
}

/// One call's node: the compiled backward and what that call's forward saved.
struct CompiledCall {
    training: Arc<Training>,
    saved: Mutex<Option<Vec<SavedInput>>>,
    /// the outputs' shapes (zeros stand for the gradient of an output backward never
    /// reached)
    shapes: Vec<Vec<usize>>,
}

impl CompiledBackward for CompiledCall {
    fn backward(&self, grads: Vec<Option<Tensor>>, retain: bool) -> Result<Vec<Option<Tensor>>> {
        let tr = &self.training;
        let saved_guard = self.saved.lock();
        let saved = saved_guard
            .as_ref()
            .ok_or_else(|| Error::Autograd(crate::autograd::FREED.into()))?;
        for s in saved {
            if let Some((t, v)) = &s.version {
                if t.version() != *v {
                    return Err(Error::Autograd(format!(
                        "one of the variables needed for gradient computation has been \
                         modified by an inplace operation: [{} {:?}] is at version {}; \
                         expected version {v} instead",
                        t.dtype(),
                        t.shape(),
                        t.version()
                    )));
                }
            }
        }
        // the tangents, in the backward's input order
        let n_tangents = tr.tangents.iter().flatten().count();
        let mut tangents: Vec<Option<CpuTensor>> = vec![None; n_tangents];
        for (j, t) in tr.tangents.iter().enumerate() {
            let Some(t) = *t else { continue };
            let dtype = tr.forward.node(tr.forward.outputs()[j]).ty.dtype;
            let g = match grads.get(j).cloned().flatten() {
                Some(g) => g.real()?.clone(),
                None => Tensor::zeros(&self.shapes[j], dtype)?.real()?.clone(),
            };
            tangents[t] = Some(g);
        }
        let mut inputs: Vec<&CpuTensor> = saved.iter().map(|s| &s.data).collect();
        for t in &tangents {
            inputs.push(t.as_ref().expect("every tangent is filled"));
        }
        let out = tr.bwd.run(&inputs)?;
        drop(saved_guard);
        if !retain {
            self.free();
        }
        Ok(out.into_iter().map(|g| Some(Tensor::from_cpu(g))).collect())
    }

    fn free(&self) {
        *self.saved.lock() = None;
    }
}
