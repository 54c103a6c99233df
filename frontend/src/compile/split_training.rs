//! Compiled training split at gradient-bucket boundaries (the idea of torch's
//! DDPOptimizer), for any traced function.
//!
//! A compiled function records one autograd node, so every parameter's gradient is ready
//! only when its whole compiled backward ends, and data-parallel training could start no
//! all-reduce while that backward runs. With [`CompileOptions::split_gradients`] the traced
//! graph is cut into a chain of segments, a new segment starting at the first node that
//! uses a parameter of another bucket than the one before it; each segment is
//! differentiated, partitioned and compiled on its own and records its own node. The
//! backward then runs segment by segment from the last, and a bucket's parameters are
//! complete (their post-accumulate hooks fire) as soon as the segments using them are done.

use super::backend::Executable;
use super::training::Training;
use super::CompileOptions;
use crate::error::{Error, Result};
use crate::Tensor;
use kiln_ir::{Arg, Graph, NodeId, Op};
use kiln_passes::partition::PartitionReport;
use kiln_runtime::CpuTensor;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Which gradient bucket each parameter belongs to, for [`CompileOptions::split_gradients`]
/// (made by `DistributedDataParallel::gradient_split`, or from any function of the
/// parameter tensor).
#[derive(Clone)]
pub struct GradientSplit {
    bucket_of: Arc<BucketOf>,
}

/// A parameter's bucket, or `None`.
type BucketOf = dyn Fn(&Tensor) -> Option<usize> + Send + Sync;

impl GradientSplit {
    /// A split that asks `bucket_of` for each parameter the trace lifted (`None`: the tensor
    /// is in no bucket and never starts a segment).
    pub fn new(bucket_of: impl Fn(&Tensor) -> Option<usize> + Send + Sync + 'static) -> Self {
        GradientSplit {
            bucket_of: Arc::new(bucket_of),
        }
    }

    /// The bucket of `t`, if it has one.
    pub fn bucket_of(&self, t: &Tensor) -> Option<usize> {
        (self.bucket_of)(t)
    }
}

impl fmt::Debug for GradientSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GradientSplit")
    }
}

/// The segment of each node of `graph` (`None` for its inputs): nodes go in order, and a
/// new segment starts at a node that reads an input of another bucket than the latest
/// bucket read (`input_buckets`, one per graph input). Every operand of a node is an
/// input or a node of the same or an earlier segment.
pub(crate) fn assign_segments(
    graph: &Graph,
    input_buckets: &[Option<usize>],
) -> Vec<Option<usize>> {
    let mut bucket_of_node: Vec<Option<usize>> = vec![None; graph.len()];
    for ((_, id), b) in graph.inputs().iter().zip(input_buckets) {
        bucket_of_node[id.index()] = *b;
    }
    let mut out = vec![None; graph.len()];
    let (mut segment, mut current) = (0usize, None::<usize>);
    for (id, node) in graph.nodes() {
        if matches!(node.op, Op::Input) {
            continue;
        }
        let reads = node
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Value(v) if matches!(graph.node(*v).op, Op::Input) => {
                    bucket_of_node[v.index()]
                }
                _ => None,
            })
            .max();
        if let Some(b) = reads {
            if current.is_some_and(|c| c != b) {
                segment += 1;
            }
            current = Some(b);
        }
        out[id.index()] = Some(segment);
    }
    out
}

/// One segment: its graph's inputs and outputs as nodes of the whole graph, and how it runs.
struct Segment {
    inputs: Vec<NodeId>,
    outputs: Vec<NodeId>,
    run: SegmentRun,
}

enum SegmentRun {
    /// differentiated: runs its forward and records its own autograd node
    Train(Arc<Training>),
    /// no gradient flows through it
    Plain(Arc<dyn Executable>),
}

/// A graph compiled for training as a chain of segments (see the module docs).
pub(crate) struct SplitTraining {
    segments: Vec<Segment>,
    inputs: Vec<NodeId>,
    outputs: Vec<NodeId>,
    len: usize,
}

impl SplitTraining {
    /// Cuts `graph` by `segment_of` ([`assign_segments`]) and builds each segment for the
    /// inputs whose `wants_grad` is true.
    pub(crate) fn build(
        graph: &Graph,
        segment_of: &[Option<usize>],
        wants_grad: &[bool],
        hints: HashMap<Arc<str>, usize>,
        opts: &CompileOptions,
    ) -> Result<SplitTraining> {
        let count = segment_of.iter().flatten().max().map_or(0, |m| m + 1);
        // which values a gradient can flow from: inputs that want one, and what uses them
        let mut leads = vec![false; graph.len()];
        for (i, (_, id)) in graph.inputs().iter().enumerate() {
            leads[id.index()] = wants_grad.get(i).copied().unwrap_or(false);
        }
        // the segment each value is last needed in (a graph output: past the last one)
        let mut needed_until: Vec<usize> = vec![0; graph.len()];
        for (id, node) in graph.nodes() {
            let Some(s) = segment_of[id.index()] else {
                continue;
            };
            for a in &node.args {
                if let Arg::Value(v) = a {
                    leads[id.index()] |= leads[v.index()];
                    needed_until[v.index()] = needed_until[v.index()].max(s);
                }
            }
        }
        for o in graph.outputs() {
            needed_until[o.index()] = count;
        }
        let mut segments = Vec::with_capacity(count);
        for k in 0..count {
            let mut sub = Graph::new(format!("{}_seg{k}", graph.name()));
            let mut map: HashMap<NodeId, NodeId> = HashMap::new();
            let mut inputs = Vec::new();
            let mut outputs = Vec::new();
            for (id, node) in graph.nodes() {
                if segment_of[id.index()] != Some(k) {
                    continue;
                }
                let mut args = Vec::with_capacity(node.args.len());
                for a in &node.args {
                    args.push(match a {
                        Arg::Value(v) => Arg::Value(match map.get(v) {
                            Some(m) => *m,
                            None => {
                                let name = graph
                                    .input_name(*v)
                                    .map_or_else(|| format!("h{}", v.index()), str::to_string);
                                let m = sub
                                    .add_input(name, graph.node(*v).ty.clone())
                                    .map_err(|e| split_error(opts, e))?;
                                map.insert(*v, m);
                                inputs.push(*v);
                                m
                            }
                        }),
                        s => *s,
                    });
                }
                let m = sub
                    .add_op(node.op.clone(), &args, node.loc.clone())
                    .map_err(|e| split_error(opts, e))?;
                map.insert(id, m);
                if needed_until[id.index()] > k {
                    outputs.push(id);
                }
            }
            sub.set_outputs(outputs.iter().map(|o| map[o]).collect())
                .map_err(|e| split_error(opts, e))?;
            let wants: Vec<bool> = inputs
                .iter()
                .map(|v| leads[v.index()] && graph.node(*v).ty.dtype.is_float())
                .collect();
            let run = if wants.iter().any(|&w| w) {
                Training::build(&sub, &wants, hints.clone(), opts)?.map(Arc::new)
            } else {
                None
            };
            let run = match run {
                Some(t) => SegmentRun::Train(t),
                None => SegmentRun::Plain(Arc::from(opts.backend.compile(&sub, opts)?)),
            };
            segments.push(Segment {
                inputs,
                outputs,
                run,
            });
        }
        Ok(SplitTraining {
            segments,
            inputs: graph.inputs().iter().map(|(_, id)| *id).collect(),
            outputs: graph.outputs().to_vec(),
            len: graph.len(),
        })
    }

    /// Runs the segments in order on `inputs` (the whole graph's) and returns the whole
    /// graph's outputs; each differentiated segment records its own autograd node.
    pub(crate) fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut env: Vec<Option<Tensor>> = vec![None; self.len];
        for (id, t) in self.inputs.iter().zip(inputs) {
            env[id.index()] = Some(t.clone());
        }
        let value = |env: &[Option<Tensor>], id: &NodeId| {
            env[id.index()].clone().ok_or_else(|| Error::Compile {
                function: "compiled".into(),
                reason: format!("internal: split training read {id} before it was computed"),
            })
        };
        for s in &self.segments {
            let args: Vec<Tensor> = s
                .inputs
                .iter()
                .map(|id| value(&env, id))
                .collect::<Result<_>>()?;
            let outs = match &s.run {
                SegmentRun::Train(t) => t.run(&args)?,
                SegmentRun::Plain(exe) => {
                    let reals: Vec<&CpuTensor> =
                        args.iter().map(|t| t.real()).collect::<Result<_>>()?;
                    exe.run(&reals)?.into_iter().map(Tensor::from_cpu).collect()
                }
            };
            for (id, t) in s.outputs.iter().zip(outs) {
                env[id.index()] = Some(t);
            }
        }
        self.outputs.iter().map(|id| value(&env, id)).collect()
    }

    fn trainings(&self) -> impl Iterator<Item = &Arc<Training>> {
        self.segments.iter().filter_map(|s| match &s.run {
            SegmentRun::Train(t) => Some(t),
            SegmentRun::Plain(_) => None,
        })
    }
}

fn split_error(opts: &CompileOptions, e: impl fmt::Display) -> Error {
    Error::Compile {
        function: opts.name.clone(),
        reason: format!("splitting at gradient buckets: {e}"),
    }
}

/// How a graph compiled for gradients runs: whole (one autograd node) or split at bucket
/// boundaries.
pub(crate) enum Trainer {
    /// one forward and one backward
    Whole(Arc<Training>),
    /// a chain of segments (see the module docs)
    Split(SplitTraining),
}

impl Trainer {
    /// Runs the forward on the graph's inputs, recording autograd nodes.
    pub(crate) fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        match self {
            Trainer::Whole(t) => t.run(inputs),
            Trainer::Split(s) => s.run(inputs),
        }
    }

    /// Each forward and backward graph pair, in forward order.
    pub(crate) fn graph_pairs(&self) -> Vec<(Graph, Graph)> {
        self.each()
            .map(|t| (t.forward.clone(), t.backward.clone()))
            .collect()
    }

    /// Each pair's partition report.
    pub(crate) fn reports(&self) -> Vec<PartitionReport> {
        self.each().map(|t| t.report.clone()).collect()
    }

    /// The tiers of every generated kernel.
    pub(crate) fn kernel_tiers(&self) -> Vec<kiln_codegen::cpu::c_tier::KernelTier> {
        let mut out: Vec<_> = self.each().flat_map(|t| t.kernel_tiers()).collect();
        if let Trainer::Split(s) = self {
            for seg in &s.segments {
                if let SegmentRun::Plain(e) = &seg.run {
                    out.extend(e.kernel_tiers());
                }
            }
        }
        out
    }

    fn each(&self) -> Box<dyn Iterator<Item = &Arc<Training>> + '_> {
        match self {
            Trainer::Whole(t) => Box::new(std::iter::once(t)),
            Trainer::Split(s) => Box::new(s.trainings()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::assign_segments;
    use kiln_ir::parse_graph;

    #[test]
    fn a_segment_starts_where_the_bucket_read_changes() {
        // x, then w2 (bucket 1), w1 (bucket 1), w0 (bucket 0): the layers using w2 and w1
        // share a segment, the one using w0 starts the next; the exp after it stays there
        let g = parse_graph(
            "graph @g(%x: f32[2,2], %w2: f32[2,2], %w1: f32[2,2], %w0: f32[2,2]) -> f32[2,2] {\n  \
             %a = matmul %x, %w2 : f32[2,2]\n  \
             %r = relu %a : f32[2,2]\n  \
             %b = matmul %r, %w1 : f32[2,2]\n  \
             %c = matmul %b, %w0 : f32[2,2]\n  \
             %d = exp %c : f32[2,2]\n  \
             %e = add %d, %x : f32[2,2]\n  \
             return %e\n}\n",
        )
        .unwrap();
        let s = assign_segments(&g, &[None, Some(1), Some(1), Some(0)]);
        assert_eq!(
            s,
            [
                None,
                None,
                None,
                None,
                Some(0),
                Some(0),
                Some(0),
                Some(1),
                Some(1),
                Some(1)
            ]
        );
        // no buckets: one segment
        let s = assign_segments(&g, &[None; 4]);
        assert!(s.iter().flatten().all(|&k| k == 0));
    }
}
