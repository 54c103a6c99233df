//! The cost model extraction minimises: bytes moved through memory plus kernel launches
//! (and, for matrix products, their arithmetic), in bytes.
//!
//! A kernel (a group, or an op left on its own) costs one launch, the bytes of each input
//! it reads (a broadcast view counts the bytes of what it views) and the bytes of its
//! output. Views (`reshape`, `transpose`, `permute`, `expand`, `slice`) and literals cost
//! nothing. A launch counts as [`LAUNCH_BYTES`]: about 3 µs of overhead at 20 GB/s.
//! Matrix products add `2·m·n·k / FLOPS_PER_BYTE`, so a product is never duplicated to
//! save a read.
//!
//! Costs add over the extracted *tree*, so a value read by two kernels is counted for
//! each: this charges recomputation correctly and overcharges a materialised value shared
//! by several consumers; both forms pay it alike, so the comparison stays fair.

use super::analysis::{bytes_of, ClassData, TensorAnalysis};
use super::lang::TNode;
use egg::{CostFunction, EGraph, Id, Language};
use kiln_ir::{Dim, Op};
use std::collections::HashMap;

/// Arithmetic of one elementwise op on one element, in bytes: small next to memory traffic,
/// it breaks ties in favour of the program with fewer ops (`neg(neg(x))` inside a kernel
/// costs more than `x`).
pub const OP_BYTES_PER_ELEMENT: f64 = 0.25;

/// A kernel launch, in bytes.
pub const LAUNCH_BYTES: f64 = 64.0 * 1024.0;

/// Flops per byte at which arithmetic costs as much as memory traffic (~150 GFLOP/s per
/// core against ~20 GB/s).
pub const FLOPS_PER_BYTE: f64 = 8.0;

/// Bytes-and-launches cost over an e-graph.
pub struct KernelCost<'a> {
    /// the e-graph whose classes are costed
    pub egraph: &'a EGraph<TNode, TensorAnalysis>,
    /// whether fused groups may be chosen (else they cost infinitely much)
    pub allow_groups: bool,
    /// every e-node's own cost, by its address in the e-graph (see
    /// [`KernelCost::for_extraction`]); empty for a cost function made by [`KernelCost::new`]
    own_by_address: HashMap<*const TNode, f64>,
}

fn read_bytes(egraph: &EGraph<TNode, TensorAnalysis>, id: Id) -> f64 {
    match &egraph[id].data {
        ClassData::Tensor { read_bytes, .. } => *read_bytes,
        ClassData::Scalar(_) => 0.0,
    }
}

fn dim(d: &Dim) -> f64 {
    match d {
        Dim::Const(c) => *c as f64,
        Dim::Sym(_) => super::analysis::SYMBOL_HINT,
    }
}

/// The arithmetic cost of the matrix products in `ops` whose first operand type is known.
fn matmul_flops(k: f64, out: &kiln_ir::TensorType) -> f64 {
    let n: f64 = out.shape.dims().iter().map(dim).product();
    2.0 * n * k / FLOPS_PER_BYTE
}

impl<'a> KernelCost<'a> {
    /// The cost function over `egraph`, computing each e-node's cost when asked.
    pub fn new(egraph: &'a EGraph<TNode, TensorAnalysis>, allow_groups: bool) -> Self {
        KernelCost {
            egraph,
            allow_groups,
            own_by_address: HashMap::new(),
        }
    }

    /// The cost function for an extraction over `egraph`, with every e-node's own cost
    /// computed once up front. egg's extractor costs every e-node again on each of its
    /// passes to a fixed point, and an e-node's own cost needs its class's type (a
    /// hash-cons lookup); here it is one look-up by address. The e-graph is borrowed for `'a`, so its e-nodes neither move nor change
    /// while this lives, and an e-node from elsewhere (not at one of these addresses) is
    /// costed as [`KernelCost::new`]'s would.
    pub fn for_extraction(egraph: &'a EGraph<TNode, TensorAnalysis>, allow_groups: bool) -> Self {
        let mut cf = KernelCost::new(egraph, allow_groups);
        let mut own = HashMap::with_capacity(egraph.total_number_of_nodes());
        for class in egraph.classes() {
            let ty = class.data.ty();
            for n in &class.nodes {
                own.insert(n as *const TNode, cf.own_typed(n, || ty.cloned()));
            }
        }
        cf.own_by_address = own;
        cf
    }

    /// The cost of `enode` alone (without its operands').
    pub fn own(&self, enode: &TNode) -> f64 {
        self.own_typed(enode, || self.out_type(enode))
    }

    /// The cost of `enode` alone, `out` giving the type of its class.
    fn own_typed(&self, enode: &TNode, out: impl Fn() -> Option<kiln_ir::TensorType>) -> f64 {
        let eg = self.egraph;
        match enode {
            TNode::Input(_) | TNode::Lit(_) => 0.0,
            TNode::Op(o, args) => {
                let op = o.expect_op();
                if op.is_view() {
                    return 0.0;
                }
                let reads: f64 = args.iter().map(|a| read_bytes(eg, *a)).sum();
                let mut c = LAUNCH_BYTES + reads;
                if let (Op::Matmul | Op::Linear, Some(a)) = (op, args.first()) {
                    if let Some(t) = eg[*a].data.ty() {
                        let k = t.shape.dims().last().map_or(1.0, dim);
                        if let Some(ot) = out() {
                            c += matmul_flops(k, &ot);
                        }
                    }
                }
                c + out().as_ref().map_or(0.0, |t| {
                    bytes_of(t) * (1.0 + OP_BYTES_PER_ELEMENT / t.dtype.size_bytes() as f64)
                })
            }
            TNode::Group(..) if !self.allow_groups => f64::INFINITY,
            TNode::Group(g, args) => {
                let body = &eg.analysis.interner.groups[g.0 as usize];
                let reads: f64 = args.iter().map(|a| read_bytes(eg, *a)).sum();
                let mut c = LAUNCH_BYTES + reads + bytes_of(&body.ty);
                for (_, n) in body.graph.nodes() {
                    if n.op != Op::Input {
                        c +=
                            bytes_of(&n.ty) * OP_BYTES_PER_ELEMENT / n.ty.dtype.size_bytes() as f64;
                    }
                    if matches!(n.op, Op::Matmul | Op::Linear) {
                        if let Some(kiln_ir::Arg::Value(v)) = n.args.first() {
                            let t = &body.graph.node(*v).ty;
                            let k = t.shape.dims().last().map_or(1.0, dim);
                            c += matmul_flops(k, &n.ty);
                        }
                    }
                }
                c
            }
        }
    }

    fn out_type(&self, enode: &TNode) -> Option<kiln_ir::TensorType> {
        let eg = self.egraph;
        let id = eg.lookup(enode.clone())?;
        eg[id].data.ty().cloned()
    }
}

impl CostFunction<TNode> for KernelCost<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TNode, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = match self.own_by_address.get(&(enode as *const TNode)) {
            Some(&c) => c,
            None => self.own(enode),
        };
        enode.fold(own, |sum, id| sum + costs(id))
    }
}
