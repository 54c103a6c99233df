//! Random well-formed graphs for property tests: proptest strategies over the recipes of
//! `kiln_ir::gen`, and a structural graph comparison.
//!
//! A graph is built from a [`Recipe`] of raw random choices: a few inputs with small
//! constant or symbolic shapes, then a sequence of candidate ops whose operands are
//! earlier values or scalar literals. Each candidate is offered to [`Graph::add_op`] and
//! skipped when the op rejects its operands, so every generated graph verifies. Shrinking
//! works on the recipe (fewer inputs, fewer candidates). Include this file with
//! `#[path = "common/graph_gen.rs"] mod graph_gen;`.

#![allow(dead_code)]

pub use kiln_ir::gen::{build, Recipe};
use kiln_ir::{Arg, AttrValue, Graph, NodeId, Op, Scalar};
use proptest::prelude::*;

/// What kind of graphs to generate.
#[derive(Clone, Copy, Debug)]
pub struct GenConfig {
    /// Allow the symbolic dims `B` and `T` in input shapes (and so in every shape).
    pub symbolic: bool,
    /// The most candidate ops per graph.
    pub max_steps: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            symbolic: true,
            max_steps: 16,
        }
    }
}

/// Random well-formed graphs with the default configuration.
pub fn arb_graph() -> impl Strategy<Value = Graph> {
    arb_graph_with(GenConfig::default())
}

/// Random well-formed graphs.
pub fn arb_graph_with(cfg: GenConfig) -> impl Strategy<Value = Graph> {
    arb_recipe(cfg).prop_map(|r| build(&r))
}

/// Random recipes (build them with [`build`]).
pub fn arb_recipe(cfg: GenConfig) -> impl Strategy<Value = Recipe> {
    (
        prop::collection::vec(any::<(u8, u8, [u8; 3])>(), 1..=4),
        prop::collection::vec(any::<[u32; 8]>(), 1..=cfg.max_steps.max(1)),
        prop::collection::vec(any::<u32>(), 0..=2),
    )
        .prop_map(move |(inputs, steps, outputs)| Recipe {
            inputs,
            steps,
            outputs,
            symbolic: cfg.symbolic,
            every_op: false,
        })
}

/// Checks that two graphs have the same structure: name, inputs (names and types), and
/// node for node the same ops (NaN attributes compare equal), operands, types and
/// locations, and the same outputs. Node ids may differ.
pub fn same_graph(a: &Graph, b: &Graph) -> Result<(), String> {
    if a.name() != b.name() {
        return Err(format!("names differ: {} vs {}", a.name(), b.name()));
    }
    let order = |g: &Graph| -> Vec<NodeId> {
        let mut v: Vec<NodeId> = g.inputs().iter().map(|(_, n)| *n).collect();
        v.extend(
            g.nodes()
                .filter(|(_, n)| n.op != Op::Input)
                .map(|(id, _)| id),
        );
        v
    };
    let (oa, ob) = (order(a), order(b));
    if oa.len() != ob.len() {
        return Err(format!("{} nodes vs {}", oa.len(), ob.len()));
    }
    let map: std::collections::HashMap<NodeId, NodeId> =
        oa.iter().copied().zip(ob.iter().copied()).collect();
    for ((na, ia), (nb, ib)) in a.inputs().iter().zip(b.inputs()) {
        if na != nb || a.node(*ia).ty != b.node(*ib).ty {
            return Err(format!("inputs differ: {na} vs {nb}"));
        }
    }
    for (ia, ib) in oa.iter().zip(&ob) {
        let (x, y) = (a.node(*ia), b.node(*ib));
        let args_x: Vec<Arg> = x
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => Arg::Value(map[v]),
                s => *s,
            })
            .collect();
        let (ka, kb) = (x.op.attrs(), y.op.attrs());
        let same_op = x.op.name() == y.op.name()
            && ka.len() == kb.len()
            && ka
                .iter()
                .zip(&kb)
                .all(|((p, u), (q, w))| p == q && attr_eq(u, w));
        let same_args = args_x.len() == y.args.len() && args_x.iter().zip(&y.args).all(|(p, q)| {
            p == q || matches!((p, q), (Arg::Scalar(Scalar::Float(u)), Arg::Scalar(Scalar::Float(w))) if u.is_nan() && w.is_nan())
        });
        if !same_op || !same_args || x.ty != y.ty || x.loc != y.loc {
            return Err(format!("nodes differ: {x:?} vs {y:?}"));
        }
    }
    let outs: Vec<NodeId> = a.outputs().iter().map(|o| map[o]).collect();
    if outs != b.outputs() {
        return Err("outputs differ".into());
    }
    Ok(())
}

/// An attribute value with NaN equal to itself, for comparing ops by their attributes.
pub fn attr_eq(a: &AttrValue, b: &AttrValue) -> bool {
    match (a, b) {
        (AttrValue::Float(x), AttrValue::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (AttrValue::List(x), AttrValue::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| attr_eq(p, q))
        }
        _ => a == b,
    }
}
