//! The order kernels run in: a topological order that frees memory early
//! ([`topological`]), and that order with producers moved late, next to their first reader,
//! where that holds no more memory at any step in between ([`sink_producers`]). The
//! scheduler keeps whichever of the two gets the smaller memory plan: moving a producer
//! never raises the live bytes at any step, but the planner's buffers are a heuristic (the
//! corpus's transformer block: 20.00 MiB planned before the move, 20.25 after, 18.25 live at
//! most both ways).
//!
//! ViT at base size through the torch backend (8 images, 12 layers): its backward's arena
//! was 274.62 MiB for 218.89 live at most; 212.42 for 203.18 with producers moved, 159.20
//! for 135.75 with the third rule of [`topological`], 73.88 for 51.52 with both. BERT's
//! stays at 208.84 MiB: most of it the tied embedding's two 89 MiB gradients, one made
//! first and added to the other last.

use crate::memory::SizeExpr;
use crate::schedule::Kernel;
use crate::PassError;
use kiln_ir::{Arg, Graph, NodeId};
use std::collections::HashMap;

/// The value `v` is a view of (through any chain of views), or `v` itself.
fn view_root(g: &Graph, mut v: NodeId) -> NodeId {
    loop {
        let n = g.node(v);
        match (n.op.is_view(), n.args.first()) {
            (true, Some(Arg::Value(b))) => v = *b,
            _ => return v,
        }
    }
}

/// Orders kernels so that each runs after the kernels whose outputs it reads (directly or
/// through views). Among ready kernels: first one whose results only the caller reads (a
/// weight's gradient), then one that is the last reader of another kernel's results (so
/// that their memory is free once it ran), then one that reads results another kernel has
/// begun to read, the earliest made first (so that they are freed soon), then the one
/// whose first node comes first. Fused groups can interleave in the graph's node order, so
/// first-node order alone is not enough.
///
/// The third rule finishes what a layer's backward started. Fusion can copy a cheap node
/// into each of its readers: ViT's three projections' input gradients are summed in the
/// layer norm's backward and again in each of its two weight gradients. With first-node
/// order after the layer norm, those two weight gradients waited until the end of the
/// backward, holding all three sums' operands of every layer (4.6 MiB each at base size).
///
/// First-node order alone follows the optimised graph, which is emitted depth first from
/// the outputs. A backward graph's first output is the embedding's gradient, whose cone
/// holds every layer's input gradient, so each layer's weight gradient (the other reader of
/// the layer's output gradient) came only after all of them, and every layer's output
/// gradient stayed alive meanwhile. BERT at base size (768 wide, 12 layers, batch 8,
/// sequence 128) through the torch backend: at most 668 MiB of the backward's intermediates
/// live at once in an arena of 854 MiB; 185 MiB in 212 MiB with this order (two 94 MiB
/// halves of the tied embedding's gradient). Its forward's arena went from 82 to 15 MiB.
pub(crate) fn topological(g: &Graph, kernels: Vec<Kernel>) -> Result<Vec<Kernel>, PassError> {
    let mut producer: HashMap<NodeId, usize> = HashMap::new();
    for (i, k) in kernels.iter().enumerate() {
        for o in &k.outputs {
            producer.insert(*o, i);
        }
    }
    let root = |v: NodeId| view_root(g, v);
    // per kernel: the kernels whose outputs (or views of them) it reads
    let deps: Vec<Vec<usize>> = kernels
        .iter()
        .map(|k| {
            let mut d: Vec<usize> = k
                .inputs
                .iter()
                .filter_map(|v| producer.get(&root(*v)).copied())
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    // per kernel: how many kernels not yet ordered read its outputs (each counted once)
    let mut readers = vec![0usize; kernels.len()];
    for d in &deps {
        for &j in d {
            readers[j] += 1;
        }
    }
    let total = readers.clone();
    let mut done = vec![false; kernels.len()];
    let mut made_at = vec![0usize; kernels.len()];
    let mut order = Vec::with_capacity(kernels.len());
    while order.len() < kernels.len() {
        // a kernel that reads (a view of) its own output is a cycle of one
        let ready = |i: &usize| !done[*i] && deps[*i].iter().all(|&j| done[j] && j != *i);
        let sink = |i: &usize| readers[*i] == 0;
        let frees = |i: &usize| deps[*i].iter().any(|&j| readers[j] == 1);
        // the earliest step that made a value kernel `i` reads and another kernel has read
        let started = |i: &usize| {
            deps[*i]
                .iter()
                .filter(|&&j| readers[j] < total[j])
                .map(|&j| made_at[j])
                .min()
        };
        let next = (0..kernels.len())
            .filter(ready)
            .find(sink)
            .or_else(|| (0..kernels.len()).filter(ready).find(frees))
            .or_else(|| {
                (0..kernels.len())
                    .filter(ready)
                    .filter_map(|i| started(&i).map(|at| (at, i)))
                    .min()
                    .map(|(_, i)| i)
            })
            .or_else(|| (0..kernels.len()).find(ready));
        let Some(i) = next else {
            return Err(PassError::Unsupported {
                pass: "schedule",
                reason: "kernel groups depend on each other in a cycle".to_string(),
            });
        };
        done[i] = true;
        made_at[i] = order.len();
        for &j in &deps[i] {
            readers[j] -= 1;
        }
        order.push(i);
    }
    let mut slots: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|i| slots[i].take().expect("each kernel once"))
        .collect())
}

/// Bytes of `v`'s type with every symbol at 64 (the hint the memory plan's report uses).
fn bytes_hint(g: &Graph, v: NodeId) -> u64 {
    SizeExpr::of_type(&g.node(v).ty)
        .eval(&|_| Some(64))
        .unwrap_or(0)
}

/// Moves each kernel that has a reader to just before its first reader when that holds no
/// more memory at any step in between: when the bytes it writes are at least the bytes of
/// the inputs whose life the move would stretch (those no kernel at or after its first
/// reader reads, and that are not graph outputs). Equal bytes move too, so that a chain of
/// kernels (a matmul, then the exponential of its result) moves as a whole, its last
/// kernel first.
///
/// [`topological`] runs a kernel as soon as it frees something, however little, and runs
/// kernels that read only the graph's inputs early, in the graph's order. A backward graph
/// recomputes each layer's attention probabilities from saved inputs; all twelve of ViT
/// at base size (8 images, 12 heads, 197 patches: 14 MiB each) ran at the start and lived
/// until their layer's gradient, 230 MiB live at most.
///
/// Kernels are taken from the last to the first, so each one's readers have already moved
/// as late as they will go, and a move only ever goes later: the order stays topological.
pub(crate) fn sink_producers(g: &Graph, mut kernels: Vec<Kernel>) -> Vec<Kernel> {
    let outputs: Vec<NodeId> = g.outputs().iter().map(|o| view_root(g, *o)).collect();
    let reads = |k: &Kernel| -> Vec<NodeId> {
        let mut r: Vec<NodeId> = k.inputs.iter().map(|v| view_root(g, *v)).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let mut roots: Vec<Vec<NodeId>> = kernels.iter().map(reads).collect();
    for at in (0..kernels.len()).rev() {
        let writes = &kernels[at].outputs;
        let Some(first_reader) =
            (at + 1..kernels.len()).find(|&q| roots[q].iter().any(|v| writes.contains(v)))
        else {
            continue;
        };
        if first_reader == at + 1 {
            continue;
        }
        let written: u64 = writes.iter().map(|v| bytes_hint(g, *v)).sum();
        let stretched: u64 = roots[at]
            .iter()
            .filter(|v| !outputs.contains(v))
            .filter(|v| !(first_reader..kernels.len()).any(|q| roots[q].contains(v)))
            .map(|v| bytes_hint(g, *v))
            .sum();
        if written > 0 && written >= stretched {
            let k = kernels.remove(at);
            kernels.insert(first_reader - 1, k);
            let r = roots.remove(at);
            roots.insert(first_reader - 1, r);
        }
    }
    kernels
}
