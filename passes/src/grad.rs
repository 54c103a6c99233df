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

use crate::joint::backprop;
use crate::PassError;
use kiln_ir::{DType, Graph, Op, Scalar};
use std::collections::HashMap;

/// The pass name used in errors.
const PASS: &str = "grad";

fn err(reason: impl Into<String>) -> PassError {
    PassError::Unsupported {
        pass: PASS,
        reason: reason.into(),
    }
}

fn floating(dtype: DType) -> bool {
    crate::joint::differentiable(dtype)
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
    let needed = vec![true; g.inputs().len()];
    let grads = backprop(
        PASS,
        g,
        &mut out,
        HashMap::from([(out0, seed)]),
        &needed,
        &Default::default(),
    )?;
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
