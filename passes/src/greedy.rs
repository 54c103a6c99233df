//! Greedy left-to-right fusion: the baseline the e-graph's cost-based fusion is compared
//! with. Each op, in graph order, joins the kernel of its first operand's producer when the
//! loop nests allow it (the same legality table as [`crate::egraph::fusion`]), else starts
//! a kernel. It never looks ahead and never duplicates work, so it cannot trade a
//! recomputation for a saved write, and it fuses into whichever producer comes first.
//!
//! [`greedy_fuse_any_operand`] is the same walk trying every operand's kernel in turn (the
//! first that can take the op): softmax's `x - max(x)` after a matmul epilogue wrote `x`
//! cannot join the matmul (it needs the max, computed after it) but joins the max's row
//! reduction, so max, exp, sum and the division become one row kernel, where the
//! first-operand walk leaves the max alone in a reduction kernel. The pipeline's `fuse`
//! pass keeps the cheapest of the e-graph's extraction and both walks.

use crate::egraph::fusion::MAX_GROUP_INPUTS;
use crate::egraph::fusion::{kind_of, merged_kind};
use crate::egraph::lang::GroupBody;
use crate::fused::{Fused, GroupKind, KernelTag};
use kiln_ir::{Arg, Graph, NodeId, Op, TensorType};
use std::collections::{HashMap, HashSet};

struct Group {
    body: GroupBody,
    first: usize,
}

fn singleton(kind: GroupKind, ty: &TensorType, space: &TensorType) -> GroupBody {
    GroupBody {
        kind,
        graph: Graph::new("greedy"),
        ty: ty.clone(),
        space: space.clone(),
    }
}

/// Moves each pointwise kernel that reads only graph inputs (or values made from them
/// without a kernel: views, constants) and whose results are all read by one other kernel
/// into that kernel, when the loop nests allow it and the kernel then reads at most
/// [`MAX_GROUP_INPUTS`] values. The walk starts a kernel at the first op on an input
/// (`p * (1 - lr·wd)` in an optimiser step) and, when the op consuming it joins a later
/// kernel, leaves it alone: one more launch, its result written and read back, and the
/// consumer reading the copy instead of the input (which then cannot be updated in place).
fn absorb_input_producers(g: &Graph, group_of: &mut HashMap<NodeId, usize>, groups: &mut [Group]) {
    let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); groups.len()];
    let mut ids: Vec<(&NodeId, &usize)> = group_of.iter().collect();
    ids.sort();
    for (id, &gid) in ids {
        members[gid].push(*id);
    }
    // values computed by a kernel, directly or through views
    let mut from_kernel: HashSet<NodeId> = HashSet::new();
    let mut users: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for (id, n) in g.nodes() {
        let mut derived = group_of.contains_key(&id);
        for a in &n.args {
            if let Arg::Value(v) = a {
                users.entry(*v).or_default().push(id);
                derived |= from_kernel.contains(v);
            }
        }
        if derived {
            from_kernel.insert(id);
        }
    }
    let outputs: HashSet<NodeId> = g.outputs().iter().copied().collect();
    for a in 0..groups.len() {
        if groups[a].body.kind != GroupKind::Pointwise || members[a].is_empty() {
            continue;
        }
        let mine: HashSet<NodeId> = members[a].iter().copied().collect();
        let reads_inputs_only = members[a].iter().all(|m| {
            g.node(*m).args.iter().all(|x| match x {
                Arg::Value(v) => mine.contains(v) || !from_kernel.contains(v),
                Arg::Scalar(_) => true,
            })
        });
        if !reads_inputs_only || members[a].iter().any(|m| outputs.contains(m)) {
            continue;
        }
        let mut consumer: Option<usize> = None;
        let mut one_consumer = true;
        for m in &members[a] {
            for u in users.get(m).into_iter().flatten() {
                match group_of.get(u) {
                    Some(&gid) if gid == a => {}
                    Some(&gid) if consumer.is_none_or(|c| c == gid) => consumer = Some(gid),
                    _ => one_consumer = false,
                }
            }
        }
        let Some(b) = consumer.filter(|_| one_consumer) else {
            continue;
        };
        if groups[b].body.kind == GroupKind::Copy {
            continue;
        }
        let Some((kind, space)) = merged_kind(&groups[a].body, &groups[b].body) else {
            continue;
        };
        let merged: HashSet<NodeId> = members[a].iter().chain(&members[b]).copied().collect();
        let reads: HashSet<NodeId> = merged
            .iter()
            .flat_map(|m| g.node(*m).args.iter())
            .filter_map(|x| match x {
                Arg::Value(v) if !merged.contains(v) => Some(*v),
                _ => None,
            })
            .collect();
        if reads.len() > MAX_GROUP_INPUTS {
            continue;
        }
        let moved = std::mem::take(&mut members[a]);
        for m in &moved {
            group_of.insert(*m, b);
        }
        members[b].extend(moved);
        groups[b].body.kind = kind;
        groups[b].body.space = space;
    }
}

/// `g` with each op in a greedily chosen kernel: each op joins its first operand's kernel
/// or starts one.
pub fn greedy_fuse(g: &Graph) -> Fused {
    greedy_walk(g, false)
}

/// [`greedy_fuse`] where an op joins the first of its operands' kernels that can take it.
pub fn greedy_fuse_any_operand(g: &Graph) -> Fused {
    greedy_walk(g, true)
}

fn greedy_walk(g: &Graph, any_operand: bool) -> Fused {
    let mut group_of: HashMap<NodeId, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let nodes: Vec<(NodeId, kiln_ir::Node)> = g.nodes().map(|(i, n)| (i, n.clone())).collect();
    for (pos, (id, n)) in nodes.iter().enumerate() {
        if n.op == Op::Input || n.op.is_view() || n.op.is_creation() {
            continue;
        }
        let kind = kind_of(&n.op).unwrap_or(GroupKind::Copy);
        let space = match (kind, n.args.first()) {
            (GroupKind::Reduction | GroupKind::Row, Some(Arg::Value(v))) => g.node(*v).ty.clone(),
            _ => n.ty.clone(),
        };
        let me = singleton(kind, &n.ty, &space);
        let mut operand_groups: Vec<usize> = Vec::new();
        for a in &n.args {
            if let Arg::Value(v) = a {
                if let Some(&gid) = group_of.get(v) {
                    if !operand_groups.contains(&gid) {
                        operand_groups.push(gid);
                    }
                }
            }
        }
        if !any_operand {
            operand_groups.truncate(1);
        }
        let try_join = |gid: usize| {
            if kind == GroupKind::Copy || groups[gid].body.kind == GroupKind::Copy {
                return None;
            }
            let (k, space) = merged_kind(&groups[gid].body, &me)?;
            // joining must not need a value another kernel computes after this one starts
            let acyclic = n.args.iter().all(|a| match a {
                Arg::Value(v) => match group_of.get(v) {
                    Some(other) if *other != gid => {
                        nodes.iter().position(|(i, _)| i == v).unwrap_or(0) < groups[gid].first
                    }
                    _ => true,
                },
                Arg::Scalar(_) => true,
            });
            acyclic.then_some((gid, k, space))
        };
        let joined = operand_groups.into_iter().find_map(try_join);
        let gid = match joined {
            Some((gid, k, space)) => {
                let b = &mut groups[gid].body;
                b.kind = k;
                b.ty = n.ty.clone();
                b.space = space;
                gid
            }
            None => {
                groups.push(Group {
                    body: me,
                    first: pos,
                });
                groups.len() - 1
            }
        };
        group_of.insert(*id, gid);
    }
    absorb_input_producers(g, &mut group_of, &mut groups);
    let tags = group_of.into_iter().map(|(id, gid)| {
        (
            id,
            KernelTag {
                id: gid,
                kind: groups[gid].body.kind,
            },
        )
    });
    Fused::new(g.clone(), tags)
}
