//! `joint`: the forward graph and its vector-Jacobian product in one graph (AOTAutograd's
//! joint graph). The forward nodes are kept as they are (same ids); after them come one
//! *tangent* input per differentiable output (`tangent0`, ...: the gradient flowing into
//! that output), then the backward nodes, built from the op table's derivative rules (the
//! same rules eager autograd runs) by walking the forward nodes in reverse order.
//!
//! Outputs: the forward outputs, then the gradient of every input that asked for one and
//! that some differentiable output depends on. [`crate::partition`] splits the result into
//! a forward and a backward graph. [`backprop`] is shared with the `grad` pass.

use crate::PassError;
use kiln_ir::ops::{gradients, GArg, GVal, GradBuilder, GradCall, GradError};
use kiln_ir::{Arg, BinaryOp, DType, Graph, NodeId, Op, TensorType};
use std::collections::{HashMap, HashSet};

/// The pass name used in errors.
const PASS: &str = "joint";

fn err(pass: &'static str, reason: impl Into<String>) -> PassError {
    PassError::Unsupported {
        pass,
        reason: reason.into(),
    }
}

/// True for dtypes gradients flow through (floating point).
pub fn differentiable(dtype: DType) -> bool {
    kiln_ir::ops::derivative::differentiable(dtype)
}

/// A joint forward + backward graph and where its parts are.
#[derive(Clone, Debug)]
pub struct Joint {
    /// inputs: the forward's inputs, then the tangents; outputs: the forward's outputs,
    /// then the gradients listed in `grads`
    pub graph: Graph,
    /// the number of forward nodes (ids below it are the forward graph's, unchanged)
    pub forward_len: usize,
    /// the number of forward inputs (the tangents follow them)
    pub primals: usize,
    /// the number of forward outputs
    pub outputs: usize,
    /// per forward output, its tangent input's index among the tangents (`None`: not
    /// differentiable, so no gradient flows into it)
    pub tangents: Vec<Option<usize>>,
    /// per gradient output, in order, the forward input it is the gradient of
    pub grads: Vec<usize>,
}

/// Builds backward nodes into a graph.
struct Builder<'a> {
    g: &'a mut Graph,
    /// every node id of `g`, by index (ids are dense and in insertion order)
    ids: &'a mut Vec<NodeId>,
    loc: Option<String>,
}

impl GradBuilder for Builder<'_> {
    fn apply(&mut self, op: Op, args: &[GArg]) -> Result<GVal, GradError> {
        let args: Vec<Arg> = args
            .iter()
            .map(|a| match *a {
                GArg::Val(v) => Arg::Value(self.ids[v.0]),
                GArg::Scalar(s) => Arg::Scalar(s),
            })
            .collect();
        let name = op.name().to_string();
        let id = self
            .g
            .add_op(op, &args, self.loc.clone())
            .map_err(|e| GradError::Build {
                op: name,
                reason: e.to_string(),
            })?;
        self.ids.push(id);
        Ok(GVal(id.index()))
    }

    fn ty(&self, v: GVal) -> TensorType {
        self.g.node(self.ids[v.0]).ty.clone()
    }
}

/// Appends to `out` (a copy of `fwd` with nodes added after it) the backward of `fwd`'s
/// nodes, seeded with `grads` (value → its gradient), and returns every value's gradient.
/// Only nodes some seed reaches get a gradient; gradients from several users are summed;
/// backward nodes carry the location of the forward node they differentiate. Nodes that
/// do not lead to an input in `needed` are skipped, and so are the nodes in `stop` (values
/// no gradient flows through: detached, or computed with grad mode off).
pub(crate) fn backprop(
    pass: &'static str,
    fwd: &Graph,
    out: &mut Graph,
    mut grads: HashMap<NodeId, NodeId>,
    needed: &[bool],
    stop: &HashSet<NodeId>,
) -> Result<HashMap<NodeId, NodeId>, PassError> {
    let n = fwd.len();
    let mut ids: Vec<NodeId> = out.nodes().map(|(id, _)| id).collect();
    let forward: Vec<NodeId> = ids[..n].to_vec();
    // which forward values lead to an input that wants a gradient: only floating values
    // carry one (an integer or bool result is a constant to autograd, as in eager, even
    // when it was computed from a float: `cast(x, i32)`, `x > 0`, `copy_` into a bool)
    let mut leads = vec![false; n];
    for (i, (_, id)) in fwd.inputs().iter().enumerate() {
        leads[id.index()] = needed.get(i).copied().unwrap_or(true);
    }
    for &id in &forward {
        let node = fwd.node(id);
        if node.op != Op::Input
            && !stop.contains(&id)
            && differentiable(node.ty.dtype)
            && node
                .args
                .iter()
                .any(|a| matches!(a, Arg::Value(v) if leads[v.index()]))
        {
            leads[id.index()] = true;
        }
    }
    for &id in forward.iter().rev() {
        let Some(&gn) = grads.get(&id) else {
            continue;
        };
        let node = fwd.node(id).clone();
        if node.op == Op::Input || !leads[id.index()] {
            continue;
        }
        let args: Vec<GArg> = node
            .args
            .iter()
            .map(|a| match *a {
                Arg::Value(v) => GArg::Val(GVal(v.index())),
                Arg::Scalar(s) => GArg::Scalar(s),
            })
            .collect();
        let mut b = Builder {
            g: out,
            ids: &mut ids,
            loc: node.loc.clone(),
        };
        let call = GradCall {
            op: &node.op,
            args: &args,
            out: GVal(id.index()),
            grad: GVal(gn.index()),
        };
        let operand_grads = gradients(&mut b, &call).map_err(|e| err(pass, e.to_string()))?;
        for (a, dg) in node.args.iter().zip(operand_grads) {
            let (Arg::Value(v), Some(dg)) = (*a, dg) else {
                continue;
            };
            if !leads[v.index()] {
                continue;
            }
            let dg = ids[dg.0];
            let sum = match grads.get(&v) {
                Some(&prev) => {
                    let s = out
                        .add_op(
                            Op::Binary(BinaryOp::Add),
                            &[Arg::Value(prev), Arg::Value(dg)],
                            node.loc.clone(),
                        )
                        .map_err(|e| err(pass, e.to_string()))?;
                    ids.push(s);
                    s
                }
                None => dg,
            };
            grads.insert(v, sum);
        }
    }
    Ok(grads)
}

/// A traced `backward()`: appends to `g` the backward of its nodes from `seeds` (value →
/// its gradient, nodes of `g`) and returns the gradient of each input whose `needed` entry
/// is true and that some seed reaches (input index → gradient node). Nodes in `stop` carry
/// no gradient. The nodes before the call are left as they are.
pub fn backward_into(
    g: &mut Graph,
    seeds: HashMap<NodeId, NodeId>,
    needed: &[bool],
    stop: &HashSet<NodeId>,
) -> Result<HashMap<usize, NodeId>, PassError> {
    let fwd = g.clone();
    let needed: Vec<bool> = fwd
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, (_, id))| {
            needed.get(i).copied().unwrap_or(false) && differentiable(fwd.node(*id).ty.dtype)
        })
        .collect();
    let grads = backprop("backward", &fwd, g, seeds, &needed, stop)?;
    Ok(fwd
        .inputs()
        .iter()
        .enumerate()
        .filter(|(i, _)| needed[*i])
        .filter_map(|(i, (_, id))| grads.get(id).map(|&gi| (i, gi)))
        .collect())
}

/// The joint graph of `g`: its vector-Jacobian product with respect to the inputs whose
/// `wants_grad` entry is true (floating inputs only; a shorter slice means the rest do not).
pub fn joint(g: &Graph, wants_grad: &[bool]) -> Result<Joint, PassError> {
    let mut out = g.clone();
    let primals = g.inputs().len();
    let mut needed = vec![false; primals];
    for (i, (_, id)) in g.inputs().iter().enumerate() {
        needed[i] =
            wants_grad.get(i).copied().unwrap_or(false) && differentiable(g.node(*id).ty.dtype);
    }
    let mut seeds: HashMap<NodeId, NodeId> = HashMap::new();
    let mut tangents = Vec::with_capacity(g.outputs().len());
    let mut count = 0;
    for &o in g.outputs() {
        let ty = g.node(o).ty.clone();
        if !differentiable(ty.dtype) {
            tangents.push(None);
            continue;
        }
        let t = out
            .add_input(format!("tangent{count}"), ty)
            .map_err(|e| err(PASS, e.to_string()))?;
        tangents.push(Some(count));
        count += 1;
        let seed = match seeds.get(&o) {
            // the same value returned twice: its gradient is the sum of both tangents
            Some(&prev) => out
                .add_op(
                    Op::Binary(BinaryOp::Add),
                    &[Arg::Value(prev), Arg::Value(t)],
                    None,
                )
                .map_err(|e| err(PASS, e.to_string()))?,
            None => t,
        };
        seeds.insert(o, seed);
    }
    let grads = backprop(PASS, g, &mut out, seeds, &needed, &HashSet::new())?;
    let mut outputs = g.outputs().to_vec();
    let mut grad_of = Vec::new();
    for (i, (_, id)) in g.inputs().iter().enumerate() {
        if !needed[i] {
            continue;
        }
        if let Some(&gi) = grads.get(id) {
            outputs.push(gi);
            grad_of.push(i);
        }
    }
    out.set_outputs(outputs)
        .map_err(|e| err(PASS, e.to_string()))?;
    kiln_ir::verify(&out).map_err(|e| err(PASS, e.to_string()))?;
    Ok(Joint {
        graph: out,
        forward_len: g.len(),
        primals,
        outputs: g.outputs().len(),
        tangents,
        grads: grad_of,
    })
}
