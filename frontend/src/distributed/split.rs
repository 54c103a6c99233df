//! Compiled DDP: a wrapped `Sequential`'s forward compiled as one graph per group of
//! buckets (the idea of torch's DDPOptimizer). A single compiled graph has a single backward
//! node, so every gradient would be ready only when the whole compiled backward ends and
//! no all-reduce could overlap it. Cut at bucket boundaries, each segment's backward is its
//! own node: when the last segment's backward ends its parameters' bucket starts reducing
//! while the earlier segments' backwards run.

use super::bucket::BucketInfo;
use super::ddp::{bucket_table, DistributedDataParallel};
use crate::compile::{compile_with, CompileOptions, CompiledFn, GradientSplit};
use crate::compile::{TensorArgs, TensorOutputs};
use crate::error::Result;
use crate::nn::Module;
use crate::nn::Sequential;
use crate::Tensor;
use std::ops::Range;
use std::sync::Arc;

/// One compiled segment: a range of layers and the buckets its parameters belong to.
struct Segment<'m> {
    layers: Range<usize>,
    buckets: Vec<usize>,
    f: CompiledFn<'m, [Tensor], Vec<Tensor>>,
}

/// A DDP model's forward compiled in segments cut at bucket boundaries (see the module
/// docs); made by [`DistributedDataParallel::compile_split`].
pub struct SplitCompiled<'m> {
    segments: Vec<Segment<'m>>,
    buckets: Vec<BucketInfo>,
}

/// The layer ranges of a split: a new segment starts where a layer's parameters belong to
/// another bucket than the previous parameterised layer's; layers without parameters stay
/// with the segment before them (the first ones with the first segment).
pub(crate) fn split_layers(layer_buckets: &[Option<usize>]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut current: Option<usize> = None;
    let mut start = 0;
    for (i, b) in layer_buckets.iter().enumerate() {
        if let Some(b) = b {
            if current.is_some_and(|c| c != *b) {
                out.push(start..i);
                start = i;
            }
            current = Some(*b);
        }
    }
    if start < layer_buckets.len() || out.is_empty() {
        out.push(start..layer_buckets.len());
    }
    out
}

impl DistributedDataParallel<Sequential> {
    /// The forward compiled as one graph per bucket group, with `opts` (each segment's
    /// name is `opts`' name with `/segment{i}` appended). Training through it averages
    /// the same gradients as the whole compiled forward; the all-reduces overlap the
    /// compiled backward.
    pub fn compile_split(&self, opts: CompileOptions) -> SplitCompiled<'_> {
        let model = self.module();
        // each layer's bucket: the highest bucket index among its parameters (buckets fill
        // in reverse parameter order, so this is the bucket reduced last)
        let names = self.bucket_names();
        let layer_buckets: Vec<Option<usize>> = (0..model.len())
            .map(|i| {
                let layer = model.get(i).expect("a layer below len()");
                layer
                    .named_parameters()
                    .iter()
                    .filter_map(|(n, _)| names.get(&format!("{i}.{n}")).copied())
                    .max()
            })
            .collect();
        let segments = split_layers(&layer_buckets)
            .into_iter()
            .enumerate()
            .map(|(k, layers)| {
                let mut buckets: Vec<usize> = layer_buckets[layers.clone()]
                    .iter()
                    .flatten()
                    .copied()
                    .collect();
                buckets.sort_unstable();
                buckets.dedup();
                let range = layers.clone();
                let name = format!("{}/segment{k}", opts.name);
                let f = compile_with(
                    move |xs: &[Tensor]| Ok(vec![model.forward_range(range.clone(), &xs[0])?]),
                    opts.clone().name(name),
                );
                Segment { layers, buckets, f }
            })
            .collect();
        SplitCompiled {
            segments,
            buckets: self.buckets().to_vec(),
        }
    }

    /// Every bucketed parameter's bucket, by name.
    fn bucket_names(&self) -> std::collections::HashMap<String, usize> {
        self.buckets()
            .iter()
            .flat_map(|b| b.names.iter().map(move |n| (n.clone(), b.index)))
            .collect()
    }
}

impl<M: Module> DistributedDataParallel<M> {
    /// Each parameter's bucket, for [`CompileOptions::split_gradients`]: a function
    /// compiled with it (any function of the module, `Sequential` or not) trains as one
    /// graph per run of parameters in the same bucket, so each bucket's all-reduce starts
    /// while the earlier segments' compiled backwards run. A parameter is known by its
    /// autograd identity (the leaf the trace lifted), not by its values.
    pub fn gradient_split(&self) -> GradientSplit {
        let leaves: Vec<(Arc<crate::autograd::Meta>, usize)> = self
            .bucket_of_params()
            .into_iter()
            .filter_map(|(p, b)| p.grad_meta.clone().map(|m| (m, b)))
            .collect();
        GradientSplit::new(move |t: &Tensor| {
            let m = t.grad_meta.as_ref()?;
            leaves
                .iter()
                .find(|(l, _)| Arc::ptr_eq(l, m))
                .map(|(_, b)| *b)
        })
    }

    /// The bucket table and the graphs `f` (made by [`DistributedDataParallel::compile`])
    /// trains as: one forward and backward pair per run of parameters in the same bucket,
    /// with their node counts.
    pub fn explain_compiled<A: ?Sized + TensorArgs, O: TensorOutputs>(
        &self,
        f: &CompiledFn<'_, A, O>,
    ) -> String {
        let pairs = f.training_graphs();
        let mut s = bucket_table(self.buckets());
        s += &format!(
            "{} graphs (each a compiled forward and backward):\n",
            pairs.len()
        );
        for (k, (fwd, bwd)) in pairs.iter().enumerate() {
            s += &format!(
                "  graph {k}: @{} ({} nodes), @{} ({} nodes)\n",
                fwd.name(),
                fwd.len(),
                bwd.name(),
                bwd.len()
            );
        }
        s
    }

    /// `f` compiled with `opts` and split at this model's bucket boundaries
    /// ([`DistributedDataParallel::gradient_split`]).
    pub fn compile<'f, A: ?Sized + TensorArgs, O: TensorOutputs>(
        &self,
        f: impl Fn(&A) -> Result<O> + Send + Sync + 'f,
        opts: CompileOptions,
    ) -> CompiledFn<'f, A, O> {
        compile_with(f, opts.split_gradients(self.gradient_split()))
    }
}

impl SplitCompiled<'_> {
    /// The forward: the segments' compiled graphs in order.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for s in &self.segments {
            h = s.f.call(std::slice::from_ref(&h))?.remove(0);
        }
        Ok(h)
    }

    /// The number of graphs: one per segment.
    pub fn num_graphs(&self) -> usize {
        self.segments.len()
    }

    /// The layer range of each segment, in forward order.
    pub fn segments(&self) -> Vec<Range<usize>> {
        self.segments.iter().map(|s| s.layers.clone()).collect()
    }

    /// The bucket table and the segments: which layers and buckets each graph holds.
    pub fn explain(&self) -> String {
        let mut s = bucket_table(&self.buckets);
        s += &format!(
            "{} graphs (each compiled as a forward and, when training, a backward):\n",
            self.segments.len()
        );
        for (k, seg) in self.segments.iter().enumerate() {
            let buckets: Vec<String> = seg.buckets.iter().map(|b| b.to_string()).collect();
            let st = seg.f.stats();
            s += &format!(
                "  graph {k}: layers {}..{}, buckets [{}]; {} calls, {} cache entries, {} \
                 graphs compiled\n",
                seg.layers.start,
                seg.layers.end,
                buckets.join(", "),
                st.calls,
                st.entries,
                st.compiles
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::split_layers;

    #[test]
    fn cuts_where_the_bucket_changes_and_keeps_activations_with_their_layer() {
        // Linear(b1), ReLU, Linear(b1), ReLU, Linear(b0)
        let r = split_layers(&[Some(1), None, Some(1), None, Some(0)]);
        assert_eq!(r, vec![0..4, 4..5]);
        // a leading activation joins the first segment; one bucket: one segment
        assert_eq!(split_layers(&[None, Some(0), None]), vec![0..3]);
        assert_eq!(
            split_layers(&[Some(2), Some(1), Some(0)]),
            vec![0..1, 1..2, 2..3]
        );
        assert_eq!(split_layers(&[]), vec![0..0]);
    }
}
