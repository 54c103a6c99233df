//! Runs an IR graph eagerly, node by node, on [`Tensor`]s: the `eager` backend of
//! `kiln run` and the simplest executor every compiled backend is compared with.
//!
//! In-place nodes are functional in the IR: the runtime applies them to a copy of their
//! destination, so running a graph never changes the caller's tensors.

use crate::error::{Error, Result};
use crate::{Operand, Tensor};
use kiln_ir::{Arg, Dim, Graph, Op};
use std::collections::HashMap;

/// Checks `inputs` against the graph's signature (dtypes, ranks, constant dims, and
/// consistent sizes for each symbol) and returns the symbol bindings.
pub fn bind_inputs(g: &Graph, inputs: &[Tensor]) -> Result<HashMap<String, usize>> {
    let mismatch = |input: &str, expected: String, got: String| Error::InputMismatch {
        graph: g.name().into(),
        input: input.into(),
        expected,
        got,
    };
    if inputs.len() != g.inputs().len() {
        return Err(mismatch(
            "*",
            format!("{} inputs", g.inputs().len()),
            format!("{} inputs", inputs.len()),
        ));
    }
    let mut bound: HashMap<String, usize> = HashMap::new();
    for ((name, id), t) in g.inputs().iter().zip(inputs) {
        let ty = &g.node(*id).ty;
        // formatted only for an error: it took 5% of a small graph's eager run
        let got = || t.tensor_type().to_string();
        if ty.dtype != t.dtype() || ty.shape.rank() != t.rank() {
            return Err(mismatch(name, ty.to_string(), got()));
        }
        for (d, &n) in ty.shape.dims().iter().zip(t.shape()) {
            match d {
                Dim::Const(c) if *c != n => return Err(mismatch(name, ty.to_string(), got())),
                Dim::Sym(s) => {
                    if let Some(prev) = bound.insert(s.to_string(), n) {
                        if prev != n {
                            return Err(mismatch(
                                name,
                                ty.to_string(),
                                format!("{}, but {s} is already {prev}", got()),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(bound)
}

/// Runs `g` on `inputs` (in signature order) and returns its outputs in return order.
pub fn run_graph(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    run_nodes(g, inputs, false)
}

/// Like [`run_graph`], but each node goes through kiln's op dispatch like user code: inside
/// a function compiled by [`crate::compile`] the nodes are traced. Tests use it to compile
/// random graphs as if they were user programs.
pub fn replay(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    run_nodes(g, inputs, true)
}

/// Like [`replay`], calling `before` with each node's id (not the inputs') before it runs: the
/// fuzzer sets the rounding noise of the node's dtype there.
pub(crate) fn replay_with(
    g: &Graph,
    inputs: &[Tensor],
    before: &mut dyn FnMut(kiln_ir::NodeId),
) -> Result<Vec<Tensor>> {
    run_nodes_with(g, inputs, true, before)
}

fn run_nodes(g: &Graph, inputs: &[Tensor], traceable: bool) -> Result<Vec<Tensor>> {
    run_nodes_with(g, inputs, traceable, &mut |_| {})
}

fn run_nodes_with(
    g: &Graph,
    inputs: &[Tensor],
    traceable: bool,
    before: &mut dyn FnMut(kiln_ir::NodeId),
) -> Result<Vec<Tensor>> {
    let bound = bind_inputs(g, inputs)?;
    let lookup = |s: &str| bound.get(s).copied();
    let mut values: HashMap<kiln_ir::NodeId, Tensor> = HashMap::new();
    for ((_, id), t) in g.inputs().iter().zip(inputs) {
        values.insert(*id, t.clone());
    }
    for (id, node) in g.nodes() {
        if node.op == Op::Input {
            continue;
        }
        let args: Vec<Operand<'_>> = node
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => Operand::Tensor(&values[v]),
                Arg::Scalar(s) => Operand::Scalar(*s),
            })
            .collect();
        let op = node.op.bind_symbols(&lookup).map_err(|s| {
            crate::error::invalid(
                node.op.name(),
                &[],
                format!("symbolic dim `{s}` is not bound by any input"),
            )
        })?;
        before(id);
        let out = if traceable {
            Tensor::apply(&op, &args)?
        } else {
            Tensor::apply_eager(&op, &args)?
        };
        values.insert(id, out);
    }
    Ok(g.outputs().iter().map(|o| values[o].clone()).collect())
}
