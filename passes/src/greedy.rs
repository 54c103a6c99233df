//! Greedy left-to-right fusion: the baseline the e-graph's cost-based fusion is compared
//! with. Each op, in graph order, joins the kernel of its first operand's producer when the
//! loop nests allow it (the same legality table as [`crate::egraph::fusion`]), else starts
//! a kernel. It never looks ahead and never duplicates work, so it cannot trade a
//! recomputation for a saved write, and it fuses into whichever producer comes first.
//! Afterwards each pointwise kernel merges into the one kernel that reads its results
//! (`merge_into_consumers`), which mends the splits the walk makes where an op's first
//! operand comes from an eager kernel or an input. A join or merge that would make kernels
//! depend on each other in a cycle is refused (reachability over the kernel graph).
//!
//! [`greedy_fuse_any_operand`] is the same walk trying every operand's kernel in turn (the
//! first that can take the op): softmax's `x - max(x)` after a matmul epilogue wrote `x`
//! cannot join the matmul (it needs the max, computed after it) but joins the max's row
//! reduction, so max, exp, sum and the division become one row kernel, where the
//! first-operand walk leaves the max alone in a reduction kernel. The pipeline's `fuse`
//! pass keeps the cheapest of the e-graph's extraction and both walks.

use crate::egraph::fusion::MAX_GROUP_INPUTS;
use crate::egraph::fusion::{merged_kind, node_kind};
use crate::egraph::lang::GroupBody;
use crate::fused::{Fused, GroupKind, KernelTag};
use kiln_ir::{Arg, Graph, NodeId, Op, TensorType};
use std::collections::{HashMap, HashSet};

struct Group {
    body: GroupBody,
    /// the position of its first op in the graph
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

/// The kernels each value is read from: its own kernel, or for a value made without one
/// (a view, a constant, an input), the kernels of what it is made from.
struct Sources {
    of: HashMap<NodeId, Vec<usize>>,
}

impl Sources {
    fn new() -> Sources {
        Sources { of: HashMap::new() }
    }

    /// Records `id`'s sources: `[gid]` when it is in a kernel, else those of its operands.
    fn record(&mut self, id: NodeId, n: &kiln_ir::Node, gid: Option<usize>) {
        let src = match gid {
            Some(g) => vec![g],
            None => {
                let mut s: Vec<usize> = Vec::new();
                for a in &n.args {
                    if let Arg::Value(v) = a {
                        for g in self.get(*v) {
                            if !s.contains(g) {
                                s.push(*g);
                            }
                        }
                    }
                }
                s
            }
        };
        self.of.insert(id, src);
    }

    fn get(&self, v: NodeId) -> &[usize] {
        self.of.get(&v).map_or(&[], |s| s.as_slice())
    }
}

/// The most kernels one reachability question of the walk visits: past it the answer is
/// "maybe", and the join is refused. Exact for graphs of fewer kernels (every training graph
/// of the bench); it keeps a big graph from walking the whole kernel graph per join.
const REACH_BUDGET: usize = 4096;

/// Whether kernel `to` may be reachable from kernel `from` along `deps` (each kernel's set
/// of kernels it reads), `from` itself included: true when it is, or when finding out would
/// visit more than [`REACH_BUDGET`] kernels (refusing a join is always safe).
fn reaches(deps: &[HashSet<usize>], from: usize, to: usize) -> bool {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack = vec![from];
    while let Some(k) = stack.pop() {
        if k == to {
            return true;
        }
        if seen.insert(k) {
            if seen.len() > REACH_BUDGET {
                return true;
            }
            stack.extend(deps[k].iter().copied());
        }
    }
    false
}

/// The values the members of a kernel read from outside it.
fn outside_reads(
    g: &Graph,
    members: &[NodeId],
    group_of: &HashMap<NodeId, usize>,
    gid: usize,
) -> HashSet<NodeId> {
    members
        .iter()
        .flat_map(|m| g.node(*m).args.iter())
        .filter_map(|x| match x {
            Arg::Value(v) if group_of.get(v) != Some(&gid) => Some(*v),
            _ => None,
        })
        .collect()
}

/// Merges each pointwise kernel into the one kernel that reads its results (directly, not
/// through views; results that are graph outputs are still written), when the loop nests
/// allow it, the merged kernel reads at most [`MAX_GROUP_INPUTS`] values and no other
/// kernel lies between the two (which would make a cycle); repeated until nothing merges.
/// The walk starts a kernel at every op whose first operand comes from an eager kernel or
/// an input, so an optimiser update whose gradient an eager op made (an embedding's
/// `index_add`) was split into one kernel per state tensor, each reading the gradient and
/// writing its result for the next: four passes over the parameter instead of one. It
/// also folds `p * (1 - lr·wd)`, started at an input, into the update that uses it.
fn merge_into_consumers(g: &Graph, group_of: &mut HashMap<NodeId, usize>, groups: &mut [Group]) {
    let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); groups.len()];
    let mut ids: Vec<(&NodeId, &usize)> = group_of.iter().collect();
    ids.sort();
    for (id, &gid) in ids {
        members[gid].push(*id);
    }
    let mut sources = Sources::new();
    let mut deps: Vec<HashSet<usize>> = vec![HashSet::new(); groups.len()];
    // per kernel: the kernels that read its results directly, and whether one reads them
    // through a view
    let mut direct_readers: Vec<HashSet<usize>> = vec![HashSet::new(); groups.len()];
    let mut viewed: Vec<bool> = vec![false; groups.len()];
    for (id, n) in g.nodes() {
        let gid = group_of.get(&id).copied();
        sources.record(id, n, gid);
        for a in &n.args {
            let Arg::Value(v) = a else { continue };
            let direct = group_of.get(v).copied();
            let Some(me) = gid else { continue };
            for &s in sources.get(*v) {
                if me != s {
                    deps[me].insert(s);
                }
                if direct == Some(s) {
                    if me != s {
                        direct_readers[s].insert(me);
                    }
                } else {
                    viewed[s] = true;
                }
            }
        }
    }
    // per kernel: the kernels that read it (the reverse of `deps`), and the values it reads
    // from outside itself; both kept up to date through the merges, so a merge costs what
    // the two kernels touch, not the whole graph (a fan of 10,000 ops took 52 s)
    let mut dependents: Vec<HashSet<usize>> = vec![HashSet::new(); groups.len()];
    for (k, d) in deps.iter().enumerate() {
        for &c in d {
            dependents[c].insert(k);
        }
    }
    let mut reads: Vec<HashSet<NodeId>> = (0..groups.len())
        .map(|k| outside_reads(g, &members[k], group_of, k))
        .collect();
    let mut changed = true;
    while changed {
        changed = false;
        for a in 0..groups.len() {
            if groups[a].body.kind != GroupKind::Pointwise || members[a].is_empty() || viewed[a] {
                continue;
            }
            let readers: Vec<usize> = direct_readers[a].iter().copied().collect();
            let [b] = readers[..] else { continue };
            if groups[b].body.kind == GroupKind::Copy {
                continue;
            }
            // another path from a to b (a → c → … → b) would make the merged kernel a cycle;
            // it starts at a kernel c ≠ b that reads a, which `dependents` knows at once
            if dependents[a].iter().any(|&c| c != b) {
                continue;
            }
            let Some((kind, space)) = merged_kind(&groups[a].body, &groups[b].body) else {
                continue;
            };
            // merging takes out of b's reads at most a's members: too many stay too many
            if reads[b].len() > MAX_GROUP_INPUTS + members[a].len() {
                continue;
            }
            let inside = |v: &NodeId| matches!(group_of.get(v), Some(&k) if k == a || k == b);
            let merged_reads: HashSet<NodeId> = reads[a]
                .iter()
                .chain(&reads[b])
                .filter(|v| !inside(v))
                .copied()
                .collect();
            if merged_reads.len() > MAX_GROUP_INPUTS {
                continue;
            }
            reads[b] = merged_reads;
            reads[a].clear();
            let moved = std::mem::take(&mut members[a]);
            for m in &moved {
                group_of.insert(*m, b);
            }
            members[b].extend(moved);
            groups[b].body.kind = kind;
            groups[b].body.space = space;
            // b now reads what a read, and whoever read a reads b
            let from_a = std::mem::take(&mut deps[a]);
            deps[b].remove(&a);
            dependents[a].remove(&b);
            for &c in &from_a {
                // what a read directly, b now reads directly
                if direct_readers[c].remove(&a) {
                    direct_readers[c].insert(b);
                }
                dependents[c].remove(&a);
                if c != b {
                    deps[b].insert(c);
                    dependents[c].insert(b);
                }
            }
            for k in std::mem::take(&mut dependents[a]) {
                deps[k].remove(&a);
                deps[k].insert(b);
                dependents[b].insert(k);
            }
            for r in std::mem::take(&mut direct_readers[a]) {
                if r != b {
                    direct_readers[b].insert(r);
                }
            }
            direct_readers[b].remove(&b);
            viewed[b] |= viewed[a];
            changed = true;
        }
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
    let mut sources = Sources::new();
    // each kernel's set of kernels it reads (directly or through views)
    let mut deps: Vec<HashSet<usize>> = Vec::new();
    let position: HashMap<NodeId, usize> =
        g.nodes().enumerate().map(|(i, (id, _))| (id, i)).collect();
    for (pos, (id, n)) in g.nodes().enumerate() {
        if n.op == Op::Input || n.op.is_view() || n.op.is_creation() {
            sources.record(id, n, None);
            continue;
        }
        let kind = node_kind(g, &n.op, &n.args);
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
            // joining must not make the kernel read a value computed from its own results (a
            // view of them, or another kernel's value that depends on them), and the walk
            // joins only operands computed before the kernel starts: letting a matmul's
            // epilogue take `g + wd·p` splits the optimiser update that would have read it
            // (`wd·p` alone, then the rest) where [`merge_into_consumers`] can mend it
            let acyclic = n.args.iter().all(|a| match a {
                Arg::Value(v) if group_of.get(v) == Some(&gid) => true,
                Arg::Value(v) => {
                    (!group_of.contains_key(v) || position[v] < groups[gid].first)
                        && sources
                            .get(*v)
                            .iter()
                            .all(|&other| !reaches(&deps, other, gid))
                }
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
                deps.push(HashSet::new());
                groups.len() - 1
            }
        };
        for a in &n.args {
            if let Arg::Value(v) = a {
                deps[gid].extend(sources.get(*v).iter().filter(|&&s| s != gid));
            }
        }
        group_of.insert(id, gid);
        sources.record(id, n, Some(gid));
    }
    merge_into_consumers(g, &mut group_of, &mut groups);
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
