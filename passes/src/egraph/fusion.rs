//! Fusion in the e-graph: every fusible op gets an equal *kernel group* node, and groups
//! merge along producer→consumer edges when their loop nests are compatible. Extraction
//! then chooses, class by class, the cheapest form under the cost model ([`super::cost`]),
//! so fusing is decided by bytes and launches, not by the order rules fire.
//!
//! Which producer (P) merges into which consumer (G), by the kind of loop nest:
//!
//! | P → G | condition | result |
//! | --- | --- | --- |
//! | pointwise → pointwise | same shape (no recompute under broadcast) | pointwise |
//! | pointwise → reduction | P's shape is the reduction's input shape (prologue) | reduction |
//! | reduction → pointwise | G's shape is the reduction's output shape (epilogue) | reduction |
//! | row reduction → pointwise | G's shape is the row shape (softmax's `x - max`) | row |
//! | pointwise / row / row reduction → row, row → pointwise / row reduction | same row shape | row |
//! | matmul → pointwise | G's shape is the product's shape (bias, activation, residual) | matmul |
//! | matmul → row / row reduction | G iterates over the product's shape (softmax, layernorm); then pointwise over the reduced shape joins too | matmul |
//!
//! A *row reduction* reduces only the last dim with `keepdim`, so that a row kernel holds
//! the row while it reduces and rereads it from cache.

use super::analysis::ClassData;
use super::class_rule::{ClassRule, TEGraph};
use super::lang::{GroupBody, GroupId, GroupKind, MergeKey, TNode};
use super::sym::OpSym;
use egg::Id;
use kiln_ir::{Arg, Dim, Graph, NodeId, Op, TensorType};

/// The most inputs a fused group may read.
pub const MAX_GROUP_INPUTS: usize = 8;

/// The most groups one e-class gains per iteration (bounds the search; the largest merges
/// are tried first, so each iteration extends the biggest candidates).
pub const MAX_MERGES_PER_STEP: usize = 3;

/// Only the largest few groups of a class, as consumer or producer, are extended.
pub const CANDIDATE_GROUPS: usize = 4;

/// The most ops a fused group may hold.
pub const MAX_GROUP_OPS: usize = 48;

/// The kernel kind name of an op left on its own (`copy` for layout copies and the rest).
pub fn kind_name(op: &Op) -> &'static str {
    kind_of(op).map_or("copy", GroupKind::name)
}

/// The kind of kernel an op starts (from its kind in the op table: [`GroupKind::of`]).
pub(crate) fn kind_of(op: &Op) -> Option<GroupKind> {
    GroupKind::of(op)
}

/// Whether `op` is a reduction that folds more than one dim of `input` (size-1 dims fold
/// nothing; a symbolic dim counts). The loop nests have one reduced loop, so such a
/// reduction (a bias's gradient, `[B,T,N]` summed over `B` and `T`) runs as an eager kernel;
/// fused with the pointwise ops around it, it would take them eager too (each allocating
/// and writing a full-size tensor), so it is kept out of fused groups.
pub(crate) fn folds_several_dims(op: &Op, input: &TensorType) -> bool {
    let Op::Reduce { dims, .. } = op else {
        return false;
    };
    let shape = input.shape.dims();
    crate::decompose::reduced_dims(dims, shape.len())
        .iter()
        .filter(|&&d| !shape[d].is_one())
        .count()
        > 1
}

/// The kernel kind of op `op` of a graph node reading `args` in `g`: its [`kind_of`], or
/// [`GroupKind::Copy`] (a kernel of its own, run eagerly) for an op with none and for a
/// reduction that [folds several dims](folds_several_dims).
pub(crate) fn node_kind(g: &Graph, op: &Op, args: &[Arg]) -> GroupKind {
    let several = match args.first() {
        Some(Arg::Value(x)) => folds_several_dims(op, &g.node(*x).ty),
        _ => false,
    };
    match kind_of(op) {
        Some(k) if !several => k,
        _ => GroupKind::Copy,
    }
}

/// Copies `src`'s nodes into `dst` with `src`'s inputs bound to `inputs`; returns the node
/// of `src`'s (single) output. A node equal to one already in `dst` (same op, same
/// operands) is reused, so merged bodies compute a shared prefix once; with `reuse_dst`
/// false only nodes added by this call are reused (a kernel never borrows another's).
pub fn inline(dst: &mut Graph, src: &Graph, inputs: &[Arg]) -> Option<NodeId> {
    inline_with(dst, src, inputs, true)
}

/// [`inline`], choosing whether nodes already in `dst` may be reused.
pub fn inline_with(
    dst: &mut Graph,
    src: &Graph,
    inputs: &[Arg],
    reuse_dst: bool,
) -> Option<NodeId> {
    let mut map = std::collections::HashMap::new();
    let mut existing: std::collections::HashMap<(Op, Vec<Arg>), NodeId> = if reuse_dst {
        dst.nodes()
            .filter(|(_, n)| n.op != Op::Input)
            .map(|(id, n)| ((n.op.clone(), n.args.to_vec()), id))
            .collect()
    } else {
        std::collections::HashMap::new()
    };
    let mut next_input = 0;
    for (id, node) in src.nodes() {
        let new = if node.op == Op::Input {
            let a = inputs[next_input];
            next_input += 1;
            match a {
                Arg::Value(v) => v,
                Arg::Scalar(_) => return None,
            }
        } else {
            let args: Vec<Arg> = node
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => Arg::Value(map[v]),
                    s => *s,
                })
                .collect();
            let key = (node.op.clone(), args);
            match existing.get(&key) {
                Some(n) if !matches!(node.op, Op::Rand { .. } | Op::Randn { .. }) => *n,
                _ => {
                    let n = dst.add_op(node.op.clone(), &key.1, node.loc.clone()).ok()?;
                    existing.insert(key, n);
                    n
                }
            }
        };
        map.insert(id, new);
    }
    src.outputs().first().map(|o| map[o])
}

fn ty_of(egraph: &TEGraph, id: Id) -> Option<TensorType> {
    egraph[id].data.ty().cloned()
}

/// A singleton group for each fusible op of the class. Operands that are constants
/// (tensors filled with one value) become literals of the body when that keeps the type.
fn wrap(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    let Some(class_ty) = ty_of(egraph, id) else {
        return out;
    };
    let nodes: Vec<(OpSym, Vec<Id>)> = egraph[id]
        .nodes
        .iter()
        .filter_map(|n| match n {
            TNode::Op(o, a) => Some((o.clone(), a.iter().map(|x| egraph.find(*x)).collect())),
            _ => None,
        })
        .collect();
    for (oid, args) in nodes {
        // each (op, operands) is wrapped once: the group node stays in the class; a node
        // that reads its own class (`where(c, x, x)` in x's class) is an identity, not work
        let me = egraph.find(id);
        if args.contains(&me)
            || !egraph
                .analysis
                .interner
                .wraps
                .insert((oid.clone(), args.clone()))
        {
            continue;
        }
        let op = oid.expect_op().clone();
        let Some(kind) = kind_of(&op) else { continue };
        if let Some(ClassData::Tensor { ty, .. }) = args.first().map(|a| &egraph[*a].data) {
            if folds_several_dims(&op, ty) {
                continue;
            }
        }
        let mut body = Graph::new("group");
        let mut inputs: Vec<Id> = Vec::new();
        let mut gargs: Vec<Arg> = Vec::new();
        let mut ok = true;
        for a in &args {
            match &egraph[*a].data {
                ClassData::Scalar(s) => gargs.push(Arg::Scalar(*s)),
                ClassData::Tensor { ty, konst, .. } => {
                    if let (GroupKind::Pointwise, Some(c)) = (kind, konst) {
                        gargs.push(Arg::Scalar(*c));
                        continue;
                    }
                    let pos = match inputs.iter().position(|i| i == a) {
                        Some(p) => p,
                        None => {
                            inputs.push(*a);
                            inputs.len() - 1
                        }
                    };
                    let node = match body.inputs().get(pos) {
                        Some((_, n)) => *n,
                        None => match body.add_input(format!("in{pos}"), ty.clone()) {
                            Ok(n) => n,
                            Err(_) => {
                                ok = false;
                                break;
                            }
                        },
                    };
                    gargs.push(Arg::Value(node));
                }
            }
        }
        if !ok {
            continue;
        }
        let loc = class_loc(egraph, id);
        let Ok(n) = body.add_op(op.clone(), &gargs, loc) else {
            continue;
        };
        if body.node(n).ty != class_ty || inputs.is_empty() {
            // a literal changed the promotion, or nothing is read: keep the op as it is
            continue;
        }
        let _ = body.set_outputs(vec![n]);
        let space = match kind {
            GroupKind::Pointwise | GroupKind::Matmul | GroupKind::Copy => class_ty.clone(),
            GroupKind::Reduction | GroupKind::Row => match ty_of(egraph, args[0]) {
                Some(t) => t,
                None => continue,
            },
        };
        let g = egraph.analysis.interner.group(GroupBody {
            kind,
            graph: body,
            ty: class_ty.clone(),
            space,
        });
        out.push(egraph.add(TNode::Group(g, inputs.into_iter().collect())));
    }
    out
}

fn class_loc(egraph: &TEGraph, id: Id) -> Option<String> {
    let c = egraph.find(id);
    egraph
        .analysis
        .locs
        .iter()
        .find(|(k, _)| egraph.find(*k) == c)
        .map(|(_, l)| l.clone())
}

/// True for a reduction group over the last dim only, with `keepdim`.
fn is_row_reduction(b: &GroupBody) -> bool {
    let (o, s) = (b.ty.shape.dims(), b.space.shape.dims());
    b.kind == GroupKind::Reduction
        && o.len() == s.len()
        && !s.is_empty()
        && o[o.len() - 1] == Dim::Const(1)
        && s[s.len() - 1] != Dim::Const(1)
        && o[..o.len() - 1] == s[..s.len() - 1]
}

/// The kind and iteration space of P merged into G, when legal (see the module table).
pub(crate) fn merged_kind(p: &GroupBody, g: &GroupBody) -> Option<(GroupKind, TensorType)> {
    use GroupKind::*;
    let same = |a: &TensorType, b: &TensorType| a.shape == b.shape;
    match (p.kind, g.kind) {
        (Pointwise, Pointwise) if same(&p.ty, &g.ty) => Some((Pointwise, g.ty.clone())),
        (Pointwise, Reduction) if same(&p.ty, &g.space) => Some((Reduction, g.space.clone())),
        (Reduction, Pointwise) if same(&g.ty, &p.ty) => Some((Reduction, p.space.clone())),
        (Reduction, Pointwise) if is_row_reduction(p) && same(&g.ty, &p.space) => {
            Some((Row, p.space.clone()))
        }
        (Pointwise, Row) if same(&p.ty, &g.space) => Some((Row, g.space.clone())),
        (Row, Pointwise) if same(&g.ty, &p.space) || same(&g.ty, &p.ty) => {
            Some((Row, p.space.clone()))
        }
        (Row, Reduction) if is_row_reduction(g) && same(&g.space, &p.space) => {
            Some((Row, p.space.clone()))
        }
        (Reduction, Row) if is_row_reduction(p) && same(&p.space, &g.space) => {
            Some((Row, g.space.clone()))
        }
        (Row, Row) if same(&p.space, &g.space) => Some((Row, g.space.clone())),
        // a pointwise op over the product's shape (bias, activation, residual), or, once a
        // row reduction of the product is in the group, over the reduced shape (a mean's
        // division), as a row kernel takes them
        (Matmul, Pointwise)
            if (same(&g.ty, &p.space) || same(&g.ty, &p.ty))
                && !contains_pointwise_before_matmul(p) =>
        {
            Some((Matmul, p.space.clone()))
        }
        // a row kernel over the product's rows (attention's softmax of its scores, a
        // layernorm after a projection), whole or op by op, runs as the epilogue of each
        // block of rows the GEMM has just written, while they are in cache
        (Matmul, Row) if same(&g.space, &p.space) && !contains_pointwise_before_matmul(p) => {
            Some((Matmul, p.space.clone()))
        }
        (Matmul, Reduction)
            if is_row_reduction(g)
                && same(&g.space, &p.space)
                && !contains_pointwise_before_matmul(p) =>
        {
            Some((Matmul, p.space.clone()))
        }
        _ => None,
    }
}

/// A matmul group's body must start with the product (the library computes it).
fn contains_pointwise_before_matmul(p: &GroupBody) -> bool {
    p.graph
        .nodes()
        .find(|(_, n)| n.op != Op::Input)
        .is_some_and(|(_, n)| !matches!(n.op, Op::Matmul | Op::Linear))
}

/// P (a group over `pargs`) merged into G (over `gargs`) at G's operand `i`, when legal
/// and within the limits: the merged body and its operands.
fn merge_one(
    egraph: &TEGraph,
    (g, gargs): (&GroupBody, &[Id]),
    i: usize,
    (p, pargs): (&GroupBody, &[Id]),
) -> Option<(GroupBody, Vec<Id>)> {
    let (kind, space) = merged_kind(p, g)?;
    if p.graph.len() + g.graph.len() > MAX_GROUP_OPS {
        return None;
    }
    let mut inputs: Vec<Id> = Vec::new();
    for (k, a) in gargs.iter().enumerate() {
        if k != i && !inputs.contains(a) {
            inputs.push(*a);
        }
    }
    for a in pargs {
        if !inputs.contains(a) {
            inputs.push(*a);
        }
    }
    if inputs.len() > MAX_GROUP_INPUTS {
        return None;
    }
    let mut body = Graph::new("group");
    let mut nodes = Vec::new();
    for (k, a) in inputs.iter().enumerate() {
        nodes.push(body.add_input(format!("in{k}"), ty_of(egraph, *a)?).ok()?);
    }
    let at = |a: &Id| Arg::Value(nodes[inputs.iter().position(|x| x == a).expect("an input")]);
    let p_in: Vec<Arg> = pargs.iter().map(at).collect();
    let p_out = inline(&mut body, &p.graph, &p_in)?;
    let g_in: Vec<Arg> = gargs
        .iter()
        .enumerate()
        .map(|(k, a)| if k == i { Arg::Value(p_out) } else { at(a) })
        .collect();
    let g_out = inline(&mut body, &g.graph, &g_in)?;
    if body.node(g_out).ty != g.ty {
        return None;
    }
    body.set_outputs(vec![g_out]).ok()?;
    Some((
        GroupBody {
            kind,
            graph: body,
            ty: g.ty.clone(),
            space,
        },
        inputs,
    ))
}

fn merge_key(
    egraph: &TEGraph,
    gi: usize,
    gargs: &[Id],
    i: usize,
    pi: usize,
    pargs: &[Id],
) -> MergeKey {
    (
        gi as u32,
        pi as u32,
        i,
        gargs.iter().chain(pargs).map(|a| egraph.find(*a)).collect(),
    )
}

/// [`merge_one`] of two interned groups, remembered: (merged group, its operands).
fn merge_cached(
    egraph: &mut TEGraph,
    gi: usize,
    gargs: &[Id],
    i: usize,
    pi: usize,
    pargs: &[Id],
) -> Option<(usize, Vec<Id>)> {
    let key = merge_key(egraph, gi, gargs, i, pi, pargs);
    if let Some(r) = egraph.analysis.interner.merge_cache.get(&key) {
        return r.clone();
    }
    let merged = {
        let groups = &egraph.analysis.interner.groups;
        merge_one(egraph, (&groups[gi], gargs), i, (&groups[pi], pargs))
    };
    let r = merged.map(|(body, inputs)| (egraph.analysis.interner.group(body).0 as usize, inputs));
    egraph.analysis.interner.merge_cache.insert(key, r.clone());
    r
}

/// The group nodes of a class: (group index, operands).
fn groups_in(egraph: &TEGraph, id: Id) -> Vec<(usize, Vec<Id>)> {
    egraph[id]
        .nodes
        .iter()
        .filter_map(|n| match n {
            TNode::Group(g, a) => Some((g.0 as usize, a.to_vec())),
            _ => None,
        })
        .collect()
}

/// A merge to try: (consumer group, its operands, operand index, producer group, its operands).
type Candidate = (usize, Vec<Id>, usize, usize, Vec<Id>);

/// The [`CANDIDATE_GROUPS`] largest groups of a class (the ones worth extending).
fn largest_groups(egraph: &TEGraph, id: Id) -> Vec<(usize, Vec<Id>)> {
    let mut g = groups_in(egraph, id);
    g.sort_by_key(|(i, _)| std::cmp::Reverse(egraph.analysis.interner.groups[*i].graph.len()));
    g.truncate(CANDIDATE_GROUPS);
    g
}

/// Groups merged with the groups producing their operands: a few single merges per
/// iteration (the largest first), plus the merge of every legal producer at once into the
/// class's largest group, so that the biggest fusion is found in few iterations and the
/// cost model can compare it with the partial ones.
fn merge(egraph: &mut TEGraph, id: Id) -> Vec<Id> {
    let mut out = Vec::new();
    let root = egraph.find(id);
    let consumers = largest_groups(egraph, id);
    let mut candidates: Vec<Candidate> = Vec::new();
    for (gi, gargs) in &consumers {
        for (i, &arg) in gargs.iter().enumerate() {
            if egraph.find(arg) == root {
                continue;
            }
            let producer_class = egraph.find(arg);
            for (pi, pargs) in largest_groups(egraph, arg) {
                let cyclic = pargs
                    .iter()
                    .any(|x| egraph.find(*x) == root || egraph.find(*x) == producer_class);
                if !cyclic {
                    candidates.push((*gi, gargs.clone(), i, pi, pargs));
                }
            }
        }
    }
    let sizes: Vec<usize> = egraph
        .analysis
        .interner
        .groups
        .iter()
        .map(|g| g.graph.len())
        .collect();
    let size = |g: usize| sizes.get(g).copied().unwrap_or(usize::MAX);
    candidates.sort_by_key(|(gi, _, _, pi, _)| std::cmp::Reverse(size(*gi) + size(*pi)));
    let mut added = 0;
    for (gi, gargs, i, pi, pargs) in &candidates {
        if added >= MAX_MERGES_PER_STEP {
            break;
        }
        if egraph
            .analysis
            .interner
            .merge_cache
            .contains_key(&merge_key(egraph, *gi, gargs, *i, *pi, pargs))
        {
            continue;
        }
        if let Some((group, inputs)) = merge_cached(egraph, *gi, gargs, *i, *pi, pargs) {
            out.push(egraph.add(TNode::Group(
                GroupId(group as u32),
                inputs.into_iter().collect(),
            )));
            added += 1;
        }
    }
    // everything at once, into the largest group
    let largest = consumers.iter().max_by_key(|(g, _)| size(*g)).cloned();
    let fresh = largest.as_ref().is_some_and(|(gi, gargs)| {
        let key = (*gi as u32, gargs.iter().map(|a| egraph.find(*a)).collect());
        egraph.analysis.interner.merge_alls.insert(key)
    });
    if let (Some((gi, gargs)), true) = (largest.as_ref(), fresh) {
        let mut cur = (*gi, gargs.clone());
        let mut merged_any = false;
        'grow: loop {
            for i in 0..cur.1.len() {
                let arg = cur.1[i];
                if egraph.find(arg) == root {
                    continue;
                }
                let mut producers = groups_in(egraph, arg);
                producers.sort_by_key(|(p, _)| std::cmp::Reverse(size(*p)));
                let producer_class = egraph.find(arg);
                for (pi, pargs) in producers {
                    if pargs
                        .iter()
                        .any(|x| egraph.find(*x) == root || egraph.find(*x) == producer_class)
                    {
                        continue;
                    }
                    if let Some(next) = merge_cached(egraph, cur.0, &cur.1, i, pi, &pargs) {
                        cur = next;
                        merged_any = true;
                        continue 'grow;
                    }
                }
            }
            break;
        }
        if merged_any {
            let (group, inputs) = cur;
            out.push(egraph.add(TNode::Group(
                GroupId(group as u32),
                inputs.into_iter().collect(),
            )));
        }
    }
    out
}

/// The fusion rules: wrap ops as groups, merge groups.
pub fn fusion_rules() -> Vec<ClassRule> {
    vec![
        ClassRule {
            name: "group",
            apply: wrap,
        },
        ClassRule {
            name: "fuse",
            apply: merge,
        },
    ]
}
