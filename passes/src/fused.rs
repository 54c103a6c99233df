//! A fused program: the optimised graph and, as data, the kernel each node belongs to.
//!
//! The fusion passes (`optimize::optimize`, the greedy walks) decide which nodes form one
//! kernel; [`Fused`] carries that decision to the scheduler and the code generators. The
//! textual form prints each node's kernel before its source location in the location
//! comment (`# k3 row | model.rs:12:5`: "kernel 3, a row kernel"), so `kiln opt` output
//! reads as kiln IR, and [`Fused::from_tagged`] reads such text back; the pipeline itself
//! never goes through the text.

use kiln_ir::{Arg, DType, Graph, NodeId, Op, OpKind};
use std::fmt;

/// The kind of loop nest a kernel group becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// elementwise over the output's shape
    Pointwise,
    /// a reduction, with a pointwise prologue on its input and epilogue on its output
    Reduction,
    /// one pass per row: reductions over the last dim and pointwise ops over the row
    /// (softmax, layer norm)
    Row,
    /// a matrix product with a pointwise epilogue on its output tile
    Matmul,
    /// an op left on its own that moves data (a layout copy, `cat`, `index_select`, ...)
    Copy,
}

impl GroupKind {
    /// The kind's name in the textual forms.
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Pointwise => "pointwise",
            GroupKind::Reduction => "reduction",
            GroupKind::Row => "row",
            GroupKind::Matmul => "matmul",
            GroupKind::Copy => "copy",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<GroupKind> {
        Some(match s {
            "pointwise" => GroupKind::Pointwise,
            "reduction" => GroupKind::Reduction,
            "row" => GroupKind::Row,
            "matmul" => GroupKind::Matmul,
            "copy" => GroupKind::Copy,
            _ => return None,
        })
    }

    /// The kind of kernel an op on its own starts, from its kind in the op table (`None`:
    /// no loop nest of its own: inputs, views, creation, copies, gathers, convolutions,
    /// in-place ops).
    pub fn of(op: &Op) -> Option<GroupKind> {
        match op.kind() {
            OpKind::Pointwise => Some(GroupKind::Pointwise),
            OpKind::Reduction => Some(GroupKind::Reduction),
            OpKind::Normalization => Some(GroupKind::Row),
            OpKind::Matmul => Some(GroupKind::Matmul),
            OpKind::Input
            | OpKind::Creation
            | OpKind::View
            | OpKind::Gather
            | OpKind::Copy
            | OpKind::Convolution
            | OpKind::Inplace => None,
        }
    }
}

/// A node's kernel: its number and the loop nest it becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelTag {
    /// the kernel's number (kernels of one program are numbered from 0)
    pub id: usize,
    /// the loop nest it becomes
    pub kind: GroupKind,
}

/// A graph with the fusion decision: the kernel of each node (`None` for inputs, views and
/// constants, which cost no kernel, and for every node of a program never fused).
#[derive(Clone, Debug)]
pub struct Fused {
    /// the program
    pub graph: Graph,
    /// per node index, its kernel
    kernels: Vec<Option<KernelTag>>,
}

impl Fused {
    /// `g` with no kernel chosen (the scheduler gives every op a kernel of its own).
    pub fn plain(g: Graph) -> Fused {
        Fused {
            kernels: Vec::new(),
            graph: g,
        }
    }

    /// `g` with the given node kernels.
    pub fn new(g: Graph, kernels: impl IntoIterator<Item = (NodeId, KernelTag)>) -> Fused {
        let mut f = Fused::plain(g);
        for (id, t) in kernels {
            f.set(id, t);
        }
        f
    }

    /// `g` with every op that needs a kernel its own (numbered in graph order).
    pub fn unfused(g: Graph) -> Fused {
        let mut tags = Vec::new();
        for (id, n) in g.nodes() {
            if n.op == Op::Input || n.op.is_view() || n.op.is_creation() {
                continue;
            }
            let kind = crate::egraph::fusion::node_kind(&g, &n.op, &n.args);
            tags.push((
                id,
                KernelTag {
                    id: tags.len(),
                    kind,
                },
            ));
        }
        Fused::new(g, tags)
    }

    /// The kernel of node `id`, if one was chosen.
    pub fn kernel(&self, id: NodeId) -> Option<KernelTag> {
        self.kernels.get(id.index()).copied().flatten()
    }

    /// Puts node `id` in kernel `t`.
    pub fn set(&mut self, id: NodeId, t: KernelTag) {
        let i = id.index();
        if self.kernels.len() <= i {
            self.kernels.resize(i + 1, None);
        }
        self.kernels[i] = Some(t);
    }

    /// True when no node has a kernel (a program never fused).
    pub fn is_plain(&self) -> bool {
        self.kernels.iter().all(Option::is_none)
    }

    /// Moves the casts to and from f64 so that no f64 value crosses a kernel boundary where
    /// a cast can avoid it. The decompositions keep f32 statistics (sums, means, variances)
    /// in f64, and the code generators hold f64 values in registers only: a kernel that
    /// stored one would run eagerly. Fusion places casts by cost alone, so this fixes them
    /// up: a widening cast whose users are all in one other kernel moves into that kernel
    /// (which then reads the f32 value and widens it), and a narrowing cast of an f64 value
    /// computed in another kernel moves into the producer's kernel (which then stores the
    /// f32 result). Both are pointwise ops over the shape their kernels already read or
    /// write, so every kernel's loop nest stays as it was. An f64 value read by several
    /// kernels, or returned, stays where it is.
    pub fn keep_f64_in_kernels(mut self) -> Fused {
        let g = &self.graph;
        let ids: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
        let mut moves: Vec<(NodeId, KernelTag)> = Vec::new();
        for &id in &ids {
            let n = g.node(id);
            let Op::Cast { dtype } = n.op else { continue };
            let Some(mine) = self.kernel(id) else {
                continue;
            };
            let Some(Arg::Value(src)) = n.args.first() else {
                continue;
            };
            let src_dtype = g.node(*src).ty.dtype;
            if dtype == DType::F64 && src_dtype != DType::F64 {
                // widening: follow the users when they share one other kernel
                if g.outputs().contains(&id) {
                    continue;
                }
                let users: Vec<Option<KernelTag>> =
                    g.users(id).into_iter().map(|u| self.kernel(u)).collect();
                if let Some(Some(t)) = users.first() {
                    if t.id != mine.id && users.iter().all(|u| *u == Some(*t)) {
                        moves.push((id, *t));
                    }
                }
            } else if src_dtype == DType::F64 && dtype != DType::F64 {
                // narrowing: join the f64 value's kernel
                if let Some(t) = self.kernel(*src) {
                    if t.id != mine.id {
                        moves.push((id, t));
                    }
                }
            }
        }
        for (id, t) in moves {
            self.set(id, t);
        }
        self
    }

    /// Moves the full-size values a *column reduction* kernel would store (values of its
    /// input's shape that other kernels read or the program returns) into a pointwise
    /// kernel of their own, which the reduction then reads. A reduction that keeps its
    /// input's last dim (a bias gradient: `[64,128]` summed over dim 0) folds along a
    /// strided dim, so it would store such values one strided element at a time: the
    /// `train_mlp` step's `mul, sum` kernel took 7.7 µs with the product as an output and
    /// 4.1 without it, the product alone 1.3. The moved values are the kernel's prologue
    /// (pointwise over its input's shape) with their producers inside it, so nothing reads
    /// back into the new kernel and no cycle appears.
    pub fn store_outside_column_reductions(mut self) -> Fused {
        let g = &self.graph;
        let mut next = self
            .kernels
            .iter()
            .flatten()
            .map(|t| t.id + 1)
            .max()
            .unwrap_or(0);
        let mut moves: Vec<(NodeId, KernelTag)> = Vec::new();
        let reductions: Vec<(NodeId, KernelTag)> = g
            .nodes()
            .filter_map(|(id, _)| self.kernel(id).map(|t| (id, t)))
            .filter(|(id, t)| t.kind == GroupKind::Reduction && is_column_reduction(g, *id))
            .collect();
        let mut seen = std::collections::HashSet::new();
        for (reduce, k) in reductions {
            if !seen.insert(k.id) {
                continue;
            }
            let Some(Arg::Value(x)) = g.node(reduce).args.first() else {
                continue;
            };
            let space = &g.node(*x).ty.shape;
            let members: Vec<NodeId> = g
                .nodes()
                .filter(|(id, _)| self.kernel(*id) == Some(k))
                .map(|(id, _)| id)
                .collect();
            let full = |id: NodeId| &g.node(id).ty.shape == space;
            let stored = |id: NodeId| {
                g.outputs().contains(&id) || g.users(id).iter().any(|u| self.kernel(*u) != Some(k))
            };
            // the stored full-size values and their full-size producers in the kernel
            let mut cone: Vec<NodeId> = Vec::new();
            let mut todo: Vec<NodeId> = members
                .iter()
                .copied()
                .filter(|&id| full(id) && stored(id))
                .collect();
            while let Some(id) = todo.pop() {
                if cone.contains(&id) {
                    continue;
                }
                cone.push(id);
                for a in &g.node(id).args {
                    if let Arg::Value(v) = a {
                        if members.contains(v) && full(*v) {
                            todo.push(*v);
                        }
                    }
                }
            }
            let pointwise = cone
                .iter()
                .all(|&id| GroupKind::of(&g.node(id).op) == Some(GroupKind::Pointwise));
            if cone.is_empty() || !pointwise {
                continue;
            }
            let tag = KernelTag {
                id: next,
                kind: GroupKind::Pointwise,
            };
            next += 1;
            moves.extend(cone.into_iter().map(|id| (id, tag)));
        }
        for (id, t) in moves {
            self.set(id, t);
        }
        self
    }

    /// The graph with each node's kernel written into its location comment (the textual
    /// form; see the module docs).
    pub fn tagged_graph(&self) -> Graph {
        let mut g = self.graph.clone();
        let ids: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
        for id in ids {
            if let Some(t) = self.kernel(id) {
                let n = g.node_mut(id);
                n.loc = Some(match n.loc.as_deref() {
                    Some(l) if !l.is_empty() => format!("k{} {} | {l}", t.id, t.kind.name()),
                    _ => format!("k{} {}", t.id, t.kind.name()),
                });
            }
        }
        g
    }

    /// Reads a program in the textual form back: each location comment's kernel tag
    /// becomes data, and the comment keeps the source location only.
    pub fn from_tagged(g: &Graph) -> Fused {
        let mut plain = g.clone();
        let mut tags = Vec::new();
        let ids: Vec<NodeId> = plain.nodes().map(|(id, _)| id).collect();
        for id in ids {
            let n = plain.node_mut(id);
            let Some(loc) = n.loc.clone() else { continue };
            let (head, rest) = match loc.split_once(" | ") {
                Some((h, r)) => (h, Some(r)),
                None => (loc.as_str(), None),
            };
            if let Some(t) = parse_tag(head) {
                tags.push((id, t));
                n.loc = rest.map(str::to_string);
            }
        }
        Fused::new(plain, tags)
    }
}

/// `k3 row` as a tag.
fn parse_tag(s: &str) -> Option<KernelTag> {
    let (k, kind) = s.split_once(' ')?;
    Some(KernelTag {
        id: k.strip_prefix('k')?.parse().ok()?,
        kind: GroupKind::parse(kind)?,
    })
}

impl fmt::Display for Fused {
    /// The textual form: the graph with each node's kernel in its location comment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kiln_ir::print_graph(&self.tagged_graph()))
    }
}

/// Whether node `id` is a reduction that keeps its input's last dim (of size above 1) while
/// folding another one: its loop nest folds along a strided dim.
fn is_column_reduction(g: &Graph, id: NodeId) -> bool {
    let n = g.node(id);
    let (Op::Reduce { dims, .. }, Some(Arg::Value(x))) = (&n.op, n.args.first()) else {
        return false;
    };
    let shape = g.node(*x).ty.shape.dims();
    let Some(last) = shape.last() else {
        return false;
    };
    !last.is_one()
        && !crate::decompose::reduced_dims(dims, shape.len()).contains(&(shape.len() - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_print_and_read_back() {
        let text = "graph @g(%x: f32[4]) -> f32[4] {
  %0 = exp %x                              : f32[4]        # k0 pointwise | m.rs:1:2
  %1 = neg %0                              : f32[4]        # k0 pointwise
  return %1
}
";
        let g = kiln_ir::parse_graph(text).unwrap();
        let f = Fused::from_tagged(&g);
        let ids: Vec<NodeId> = f.graph.nodes().map(|(id, _)| id).collect();
        assert_eq!(f.graph.node(ids[1]).loc.as_deref(), Some("m.rs:1:2"));
        assert_eq!(
            f.kernel(ids[2]),
            Some(KernelTag {
                id: 0,
                kind: GroupKind::Pointwise
            })
        );
        assert_eq!(f.to_string(), text);
    }

    #[test]
    fn f64_casts_move_to_the_kernel_that_keeps_the_f64_value() {
        // a widening cast placed with its producer, and a narrowing cast placed with its
        // user: both would make a kernel store an f64 value
        let text = "graph @g(%x: f32[4,3], %y: f32[]) -> f32[4,1] {
  %0 = sub %y, 1.0                         : f32[]         # k0 pointwise
  %1 = cast %0 {dtype = f64}               : f64[]         # k0 pointwise
  %2 = cast %x {dtype = f64}               : f64[4,3]      # k1 reduction
  %3 = sum %2 {dims = [1], keepdim = true} : f64[4,1]      # k1 reduction
  %4 = div %3, %1                          : f64[4,1]      # k1 reduction
  %5 = cast %4 {dtype = f32}               : f32[4,1]      # k2 pointwise
  %6 = exp %5                              : f32[4,1]      # k2 pointwise
  return %6
}
";
        let g = kiln_ir::parse_graph(text).unwrap();
        kiln_ir::verify(&g).unwrap();
        let f = Fused::from_tagged(&g).keep_f64_in_kernels();
        let ids: Vec<NodeId> = f.graph.nodes().map(|(id, _)| id).collect();
        let k = |i: usize| f.kernel(ids[i]).map(|t| t.id);
        // %0 stays in k0, %1 joins k1, %5 joins k1; the rest is unchanged
        assert_eq!(
            (k(2), k(3), k(4), k(5), k(6), k(7), k(8)),
            (
                Some(0),
                Some(1),
                Some(1),
                Some(1),
                Some(1),
                Some(1),
                Some(2)
            )
        );
        // a widening cast read by two kernels stays where it was
        let shared = "graph @g(%x: f32[4,3], %y: f32[]) -> f64[4,1] {
  %0 = sub %y, 1.0                         : f32[]         # k0 pointwise
  %1 = cast %0 {dtype = f64}               : f64[]         # k0 pointwise
  %2 = cast %x {dtype = f64}               : f64[4,3]      # k1 reduction
  %3 = sum %2 {dims = [1], keepdim = true} : f64[4,1]      # k1 reduction
  %4 = div %3, %1                          : f64[4,1]      # k1 reduction
  %5 = mul %4, %1                          : f64[4,1]      # k2 pointwise
  return %5
}
";
        let g = kiln_ir::parse_graph(shared).unwrap();
        kiln_ir::verify(&g).unwrap();
        let f = Fused::from_tagged(&g).keep_f64_in_kernels();
        assert_eq!(f.kernel(ids[3]).map(|t| t.id), Some(0));
    }

    #[test]
    fn a_column_reduction_stores_no_full_size_value_but_a_row_reduction_may() {
        // %1 (read by another kernel) and its producer %0 leave the column reduction k0 for
        // a pointwise kernel of their own; the row reduction k1 keeps its stored prologue
        let text =
            "graph @g(%x: f32[6,4], %y: f32[6,4]) -> (f32[4], f32[6,4], f32[6,1], f32[6,4]) {
  %0 = mul %x, %y                          : f32[6,4]      # k0 reduction
  %1 = exp %0                              : f32[6,4]      # k0 reduction
  %2 = sum %1 {dims = [0], keepdim = false} : f32[4]        # k0 reduction
  %3 = neg %1                              : f32[6,4]      # k2 pointwise
  %4 = add %x, %y                          : f32[6,4]      # k1 reduction
  %5 = sum %4 {dims = [1], keepdim = true} : f32[6,1]      # k1 reduction
  return %2, %3, %5, %4
}
";
        let g = kiln_ir::parse_graph(text).unwrap();
        kiln_ir::verify(&g).unwrap();
        let f = Fused::from_tagged(&g).store_outside_column_reductions();
        let ids: Vec<NodeId> = f.graph.nodes().map(|(id, _)| id).collect();
        let k = |i: usize| f.kernel(ids[i]).map(|t| (t.id, t.kind));
        let moved = Some((3, GroupKind::Pointwise));
        assert_eq!((k(2), k(3)), (moved, moved));
        assert_eq!(k(4), Some((0, GroupKind::Reduction)));
        assert_eq!(k(5), Some((2, GroupKind::Pointwise)));
        assert_eq!(
            (k(6), k(7)),
            (
                Some((1, GroupKind::Reduction)),
                Some((1, GroupKind::Reduction))
            )
        );
        // a column reduction whose full-size values are all its own stays whole
        let own = "graph @g(%x: f32[6,4]) -> f32[4] {
  %0 = exp %x                              : f32[6,4]      # k0 reduction
  %1 = sum %0 {dims = [0], keepdim = false} : f32[4]        # k0 reduction
  return %1
}
";
        let g = kiln_ir::parse_graph(own).unwrap();
        let f = Fused::from_tagged(&g).store_outside_column_reductions();
        let ids: Vec<NodeId> = f.graph.nodes().map(|(id, _)| id).collect();
        assert_eq!(f.kernel(ids[1]).map(|t| t.id), Some(0));
    }
}
