//! Automatic dynamic shapes: turning a graph traced at concrete sizes into one over
//! symbolic dims, and checking that a trace at other sizes is that graph instantiated.
//!
//! Generalisation names each dynamic dim of the arguments by a symbol (`s0`, `s1`, ...;
//! dims of equal size share one, as torch's duck sizing does; sizes 0 and 1 stay
//! constant), replaces those sizes in shape attributes (`reshape`, `expand`, `full`, ...)
//! by the symbol, and re-infers every type. A size in an attribute that only happens to
//! equal a symbol's size would be generalised wrongly, so a cache entry with symbols is
//! used for new sizes only after a trace at those sizes is checked to be the entry's
//! graph instantiated ([`same_as_instantiated`]); a mismatch compiles a new entry.

use kiln_ir::{Dim, Graph, Op, Shape, TensorType};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// `graph` (traced at concrete sizes, its first `n_args` inputs the function's arguments)
/// with as many of the `(argument, dim)` pairs of `dynamic` made symbolic as type-check:
/// all of them if possible, else greedily one by one (a dim that must equal a weight's
/// size, such as the inner dim of a matmul, stays constant: it is specialised). `None`
/// when no dim can be made symbolic.
///
/// `previous` is a trace of the same function at other sizes, when there is one: a size in
/// a shape attribute that is the same in both traces is a constant, never a symbol.
pub(crate) fn generalize(
    graph: &Graph,
    n_args: usize,
    dynamic: &BTreeSet<(usize, usize)>,
    previous: Option<&Graph>,
) -> Option<Graph> {
    let previous = previous.filter(|p| {
        p.len() == graph.len()
            && p.nodes()
                .zip(graph.nodes())
                .all(|((_, a), (_, b))| a.op.name() == b.op.name() && a.args.len() == b.args.len())
    });
    if let Some(g) = generalize_exactly(graph, n_args, dynamic, previous) {
        return Some(g);
    }
    let mut kept = BTreeSet::new();
    let mut best = None;
    for &d in dynamic {
        kept.insert(d);
        match generalize_exactly(graph, n_args, &kept, previous) {
            Some(g) => best = Some(g),
            None => {
                kept.remove(&d);
            }
        }
    }
    best
}

/// `graph` with exactly the dims of `dynamic` made symbolic, if that type-checks.
fn generalize_exactly(
    graph: &Graph,
    n_args: usize,
    dynamic: &BTreeSet<(usize, usize)>,
    previous: Option<&Graph>,
) -> Option<Graph> {
    let mut sym_of_size: HashMap<usize, Arc<str>> = HashMap::new();
    let mut input_types: Vec<TensorType> = Vec::new();
    for (i, (_, id)) in graph.inputs().iter().enumerate() {
        let ty = &graph.node(*id).ty;
        if i >= n_args {
            input_types.push(ty.clone());
            continue;
        }
        let dims: Shape = ty
            .shape
            .dims()
            .iter()
            .enumerate()
            .map(|(d, dim)| match dim.as_const() {
                Some(n) if n >= 2 && dynamic.contains(&(i, d)) => {
                    let next = sym_of_size.len();
                    Dim::Sym(
                        sym_of_size
                            .entry(n)
                            .or_insert_with(|| Arc::from(format!("s{next}")))
                            .clone(),
                    )
                }
                _ => dim.clone(),
            })
            .collect();
        input_types.push(TensorType::new(ty.dtype, dims));
    }
    if sym_of_size.is_empty() {
        return None;
    }
    let mut out = Graph::new(graph.name());
    let mut map = HashMap::new();
    let mut inputs = input_types.into_iter();
    for (id, node) in graph.nodes() {
        let new = if node.op == Op::Input {
            let name = graph.input_name(id)?;
            out.add_input(name, inputs.next()?).ok()?
        } else {
            let args: Vec<kiln_ir::Arg> = node
                .args
                .iter()
                .map(|a| match a {
                    kiln_ir::Arg::Value(v) => kiln_ir::Arg::Value(map[v]),
                    s => *s,
                })
                .collect();
            // the first substitution of symbols into the shape attribute that type-checks
            let before = previous
                .and_then(|p| p.try_node(id))
                .and_then(|n| n.op.shape_attr());
            symbolizations(&node.op, &sym_of_size, before)
                .into_iter()
                .find_map(|op| out.add_op(op, &args, node.loc.clone()).ok())?
        };
        map.insert(id, new);
    }
    out.set_outputs(graph.outputs().iter().map(|o| map[o]).collect())
        .ok()?;
    kiln_ir::verify(&out).ok()?;
    Some(out)
}

/// The ways to write `op` with symbols in its shape attribute, most substitutions first:
/// each size equal to a symbol's size may be that symbol or a constant that happens to be
/// equal (a head count of 2 when the batch is 2), so every subset of those positions is a
/// candidate; the caller takes the first that type-checks, and retracing at other sizes
/// catches a wrong guess.
fn symbolizations(
    op: &Op,
    sym_of_size: &HashMap<usize, Arc<str>>,
    before: Option<&Shape>,
) -> Vec<Op> {
    let Some(shape) = op.shape_attr() else {
        return vec![op.clone()];
    };
    let unchanged =
        |i: usize, d: &Dim| before.is_some_and(|b| b.rank() == shape.rank() && b.dims()[i] == *d);
    let positions: Vec<usize> = shape
        .dims()
        .iter()
        .enumerate()
        .filter(|(i, d)| {
            d.as_const().is_some_and(|n| sym_of_size.contains_key(&n)) && !unchanged(*i, d)
        })
        .map(|(i, _)| i)
        .take(8)
        .collect();
    let mut masks: Vec<u32> = (0..1u32 << positions.len()).collect();
    masks.sort_by_key(|m| {
        (
            std::cmp::Reverse(m.count_ones()),
            std::cmp::Reverse(m.reverse_bits()),
        )
    });
    masks
        .into_iter()
        .map(|mask| {
            let dims: Shape = shape
                .dims()
                .iter()
                .enumerate()
                .map(|(i, d)| match positions.iter().position(|&p| p == i) {
                    Some(bit) if mask & (1 << bit) != 0 => {
                        Dim::Sym(sym_of_size[&d.as_const().expect("constant")].clone())
                    }
                    _ => d.clone(),
                })
                .collect();
            let mut op = op.clone();
            if let Op::Full { shape, .. }
            | Op::Rand { shape, .. }
            | Op::Randn { shape, .. }
            | Op::Reshape { shape }
            | Op::Expand { shape } = &mut op
            {
                *shape = dims;
            }
            op
        })
        .collect()
}

fn bind_type(ty: &TensorType, lookup: &dyn Fn(&str) -> Option<usize>) -> Option<TensorType> {
    let shape = ty
        .shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Sym(s) => lookup(s).map(Dim::Const),
            c => Some(c.clone()),
        })
        .collect::<Option<Shape>>()?;
    Some(TensorType::new(ty.dtype, shape))
}

/// True when `concrete` (a trace at the sizes in `bindings`) is `symbolic` with its
/// symbols replaced by those sizes: same inputs, ops, operands, types and outputs.
pub(crate) fn same_as_instantiated(
    symbolic: &Graph,
    bindings: &[(Arc<str>, usize)],
    concrete: &Graph,
) -> bool {
    let lookup = |s: &str| bindings.iter().find(|(b, _)| &**b == s).map(|(_, n)| *n);
    if symbolic.len() != concrete.len()
        || symbolic.inputs().len() != concrete.inputs().len()
        || symbolic.outputs() != concrete.outputs()
    {
        return false;
    }
    let names_match = symbolic
        .inputs()
        .iter()
        .zip(concrete.inputs())
        .all(|(a, b)| a == b);
    names_match
        && symbolic
            .nodes()
            .zip(concrete.nodes())
            .all(|((ia, a), (ib, b))| {
                // compared through Debug so that NaN literals equal themselves
                ia == ib
                    && format!("{:?}", a.args) == format!("{:?}", b.args)
                    && a.op
                        .bind_symbols(&lookup)
                        .is_ok_and(|op| format!("{:?}", *op) == format!("{:?}", b.op))
                    && bind_type(&a.ty, &lookup).is_some_and(|t| t == b.ty)
            })
}
