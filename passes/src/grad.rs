//! `grad`: a graph whose first output is a scalar becomes the joint graph that also returns
//! d(out0)/d(input) for every floating input, built from the op table's derivative rules
//! (`kiln_ir::ops::derivative`), the same rules eager autograd runs.
//!
//! The forward nodes are kept as they are (same ids, so the forward values are reused by
//! the backward nodes); the backward walks the nodes in reverse order, seeding out0's
//! gradient with ones, applying each node's rule to its accumulated gradient and summing
//! the contributions an operand gets from several users. Outputs: the original ones, then
//! one gradient per floating input in input order (zeros for an input out0 does not depend
//! on, as `torch.autograd.grad(..., materialize_grads=True)`). Backward nodes carry the
//! location of the forward node they differentiate.

use crate::PassError;
use kiln_ir::ops::{gradients, GArg, GVal, GradBuilder, GradCall, GradError};
use kiln_ir::{Arg, BinaryOp, DType, Graph, NodeId, Op, Scalar, TensorType};
use std::collections::HashMap;

/// The pass name used in errors.
const PASS: &str = "grad";

fn err(reason: impl Into<String>) -> PassError {
    PassError::Unsupported {
        pass: PASS,
        reason: reason.into(),
    }
}

/// Builds backward nodes into the joint graph.
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

fn floating(dtype: DType) -> bool {
    kiln_ir::ops::derivative::differentiable(dtype)
}

/// The joint forward + backward graph of `g` (see the module docs).
pub fn grad(g: &Graph) -> Result<Graph, PassError> {
    let Some(&out0) = g.outputs().first() else {
        return Err(err(format!("@{} has no output to differentiate", g.name())));
    };
    let t0 = g.node(out0).ty.clone();
    let scalar = t0.shape.dims().iter().all(|d| d.is_one());
    if !scalar || !floating(t0.dtype) {
        return Err(err(format!(
            "@{}: the first output must be a floating scalar to differentiate, not {}",
            g.name(),
            t0
        )));
    }
    let mut out = g.clone();
    let n = g.nodes().count();
    let seed = out
        .add_op(
            Op::Full {
                shape: t0.shape.clone(),
                value: Scalar::Float(1.0),
                dtype: t0.dtype,
            },
            &[],
            None,
        )
        .map_err(|e| err(e.to_string()))?;
    let mut ids: Vec<NodeId> = out.nodes().map(|(id, _)| id).collect();
    let forward: Vec<NodeId> = ids[..n].to_vec();
    let mut grads: HashMap<NodeId, NodeId> = HashMap::from([(out0, seed)]);
    for &id in forward.iter().rev() {
        let Some(&gn) = grads.get(&id) else {
            continue;
        };
        let node = g.node(id).clone();
        if node.op == Op::Input {
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
            g: &mut out,
            ids: &mut ids,
            loc: node.loc.clone(),
        };
        let call = GradCall {
            op: &node.op,
            args: &args,
            out: GVal(id.index()),
            grad: GVal(gn.index()),
        };
        let operand_grads = gradients(&mut b, &call).map_err(|e| err(e.to_string()))?;
        for (a, dg) in node.args.iter().zip(operand_grads) {
            let (Arg::Value(v), Some(dg)) = (*a, dg) else {
                continue;
            };
            let dg = ids[dg.0];
            let sum = match grads.get(&v) {
                Some(&prev) => {
                    let s = out
                        .add_op(
                            Op::Binary(BinaryOp::Add),
                            &[Arg::Value(prev), Arg::Value(dg)],
                            node.loc.clone(),
                        )
                        .map_err(|e| err(e.to_string()))?;
                    ids.push(s);
                    s
                }
                None => dg,
            };
            grads.insert(v, sum);
        }
    }
    let mut outputs = g.outputs().to_vec();
    for (name, id) in g.inputs() {
        let t = g.node(*id).ty.clone();
        if !floating(t.dtype) {
            continue;
        }
        let gi = match grads.get(id) {
            Some(&gi) => gi,
            None => out
                .add_op(
                    Op::Full {
                        shape: t.shape.clone(),
                        value: Scalar::Float(0.0),
                        dtype: t.dtype,
                    },
                    &[],
                    None,
                )
                .map_err(|e| err(format!("zeros for {name}: {e}")))?,
        };
        outputs.push(gi);
    }
    out.set_outputs(outputs).map_err(|e| err(e.to_string()))?;
    kiln_ir::verify(&out).map_err(|e| err(e.to_string()))?;
    Ok(out)
}
