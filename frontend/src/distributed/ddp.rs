//! [`DistributedDataParallel`]: PyTorch's DDP (Li et al., VLDB 2020) over a
//! [`ProcessGroup`]. At construction every rank checks that the parameters agree (names,
//! shapes, dtypes) and takes rank 0's values. During `backward()`, each parameter's
//! post-accumulate hook marks it ready; once a bucket's parameters are all ready (and the
//! buckets before it have started), the bucket's gradients are copied into one flat buffer
//! and its all-reduce starts on the communication thread while the backward goes on. A
//! callback queued on the backward pass launches what is left, waits, and writes the
//! averaged gradients back into `.grad`, so `backward()` returns with them in place.

use super::bucket::{assign_buckets, BucketInfo};
use super::buffer::CommBuffer;
use super::dist_err;
use super::group::{ProcessGroup, ReduceOp, Work};
use crate::autograd::{no_grad, queue_callback};
use crate::error::Result;
use crate::nn::Module;
use crate::{DType, Tensor};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// DDP's settings (`torch.nn.parallel.DistributedDataParallel`'s arguments).
#[derive(Clone, Debug)]
pub struct DdpOptions {
    /// the cap of every bucket but the first, in MiB (torch's `bucket_cap_mb`, 25)
    pub bucket_cap_mb: f64,
    /// the first bucket's limit in MiB (1), small so communication starts early
    pub first_bucket_mb: f64,
    /// allow parameters that get no gradient in a backward (torch's
    /// `find_unused_parameters`): their gradients count as zero in the average, and a
    /// parameter no rank used keeps `.grad` as it was. Without it such a parameter is an
    /// error naming it.
    pub find_unused_parameters: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_mb: 25.0,
            first_bucket_mb: 1.0,
            find_unused_parameters: false,
        }
    }
}

/// A model replicated over the ranks of a [`ProcessGroup`], whose gradients are averaged
/// over the ranks during `backward()` (`DistributedDataParallel`). Each rank feeds its
/// shard of the batch; after `loss.backward()` every rank holds the same averaged
/// gradients, so the same optimiser step keeps the replicas equal.
///
/// ```
/// use kiln::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup};
/// use kiln::nn::{Module, Sequential};
/// use kiln::{DType, Tensor};
/// let ddp = DistributedDataParallel::new(
///     Sequential::mlp(&[4, 8, 2], 0)?,
///     ProcessGroup::local(),
///     DdpOptions::default(),
/// )?;
/// let x = Tensor::randn(&[3, 4], DType::F32, 1)?;
/// ddp.forward(&x)?.sum(&[0, 1], false)?.backward()?;
/// assert!(ddp.module().parameters().iter().all(|p| p.grad().is_some()));
/// assert_eq!(ddp.buckets().len(), 1);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct DistributedDataParallel<M: Module> {
    module: M,
    reducer: Arc<Reducer>,
}

/// The gradient synchronisation shared by the parameters' hooks.
struct Reducer {
    group: ProcessGroup,
    params: Vec<Tensor>,
    names: Vec<String>,
    buckets: Vec<BucketInfo>,
    /// per parameter: its bucket and its first element in the bucket's buffer
    place: Vec<(usize, usize)>,
    /// per bucket: elements
    lens: Vec<usize>,
    find_unused: bool,
    sync: AtomicBool,
    state: Mutex<Iteration>,
    /// per bucket: its flat buffer between iterations (torch keeps its buckets too), so a
    /// step neither allocates nor faults in fresh pages; taken while its all-reduce runs
    buffers: Mutex<Vec<Option<CommBuffer>>>,
}

/// One backward's progress.
struct Iteration {
    ready: Vec<bool>,
    /// per bucket: parameters not ready yet
    pending: Vec<usize>,
    /// per bucket: its all-reduce, once started
    works: Vec<Option<Work<CommBuffer>>>,
    /// the next bucket to start (buckets start in order on every rank)
    next: usize,
    callback_queued: bool,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module`: checks that every rank's parameters have the same names, shapes and
    /// dtypes (an error names the first that differs), broadcasts rank 0's parameters,
    /// assigns the buckets and registers the gradient hooks. Parameters must be f32 or
    /// f64 leaves; those that do not require grad are left out.
    pub fn new(module: M, group: ProcessGroup, opts: DdpOptions) -> Result<Self> {
        const OP: &str = "DistributedDataParallel::new";
        let named: Vec<(String, Tensor)> = module
            .named_parameters()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        for (n, t) in &named {
            if !matches!(t.dtype(), DType::F32 | DType::F64) || !t.is_leaf() {
                return Err(dist_err(
                    OP,
                    format!(
                        "parameter `{n}` ({:?} {}) must be an f32 or f64 leaf",
                        t.shape(),
                        t.dtype()
                    ),
                ));
            }
        }
        check_same_parameters(&group, &named)?;
        broadcast_parameters(&group, &named)?;
        let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
        let params: Vec<Tensor> = named.into_iter().map(|(_, t)| t).collect();
        let mib = |m: f64| (m * (1 << 20) as f64) as usize;
        let buckets = assign_buckets(
            &names,
            &params
                .iter()
                .map(|p| p.numel() * p.dtype().size_bytes())
                .collect::<Vec<_>>(),
            &params.iter().map(|p| p.dtype()).collect::<Vec<_>>(),
            mib(opts.first_bucket_mb),
            mib(opts.bucket_cap_mb),
        );
        let mut place = vec![(0, 0); params.len()];
        let mut lens = Vec::new();
        for b in &buckets {
            let mut off = 0;
            for &p in &b.params {
                place[p] = (b.index, off);
                off += params[p].numel();
            }
            lens.push(off);
        }
        let reducer = Arc::new(Reducer {
            group,
            state: Mutex::new(Iteration::new(&params, &buckets)),
            params,
            names,
            place,
            lens,
            find_unused: opts.find_unused_parameters,
            sync: AtomicBool::new(true),
            buffers: Mutex::new(buckets.iter().map(|_| None).collect()),
            buckets,
        });
        for (i, p) in reducer.params.iter().enumerate() {
            let w: Weak<Reducer> = Arc::downgrade(&reducer);
            p.register_post_accumulate_grad_hook(move |_| match w.upgrade() {
                Some(r) => r.mark_ready(i),
                None => Ok(()),
            })?;
        }
        Ok(DistributedDataParallel { module, reducer })
    }

    /// The wrapped module (`ddp.module`).
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.reducer.group
    }

    /// The buckets, in the order they are reduced.
    pub fn buckets(&self) -> &[BucketInfo] {
        &self.reducer.buckets
    }

    /// Each bucketed parameter with its bucket's index.
    pub(crate) fn bucket_of_params(&self) -> Vec<(Tensor, usize)> {
        let r = &self.reducer;
        r.params
            .iter()
            .cloned()
            .zip(r.place.iter().map(|&(b, _)| b))
            .collect()
    }

    /// The bucket table as text: index, bytes, dtype and parameter names per bucket.
    pub fn bucket_table(&self) -> String {
        bucket_table(&self.reducer.buckets)
    }

    /// Turns gradient synchronisation off until the guard drops (`ddp.no_sync()`):
    /// backward passes meanwhile accumulate local gradients, and the first backward after
    /// it averages the accumulated ones.
    pub fn no_sync(&self) -> NoSyncGuard {
        let prev = self.reducer.sync.swap(false, Ordering::SeqCst);
        NoSyncGuard {
            reducer: self.reducer.clone(),
            prev,
        }
    }
}

impl<M: Module> Module for DistributedDataParallel<M> {
    /// The module's parameters, named `module.<name>` as torch's DDP names them.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.module
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (format!("module.{n}"), t))
            .collect()
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.module.forward(x)
    }
}

/// Restores gradient synchronisation when dropped (see
/// [`DistributedDataParallel::no_sync`]).
pub struct NoSyncGuard {
    reducer: Arc<Reducer>,
    prev: bool,
}

impl Drop for NoSyncGuard {
    fn drop(&mut self) {
        self.reducer.sync.store(self.prev, Ordering::SeqCst);
    }
}

/// The bucket table as text.
pub(crate) fn bucket_table(buckets: &[BucketInfo]) -> String {
    let mut s = String::from("bucket  bytes  dtype  parameters\n");
    for b in buckets {
        s += &format!(
            "{:>6}  {:>5}  {:>5}  {}\n",
            b.index,
            b.bytes,
            b.dtype,
            b.names.join(", ")
        );
    }
    s
}

impl Iteration {
    fn new(params: &[Tensor], buckets: &[BucketInfo]) -> Iteration {
        Iteration {
            ready: vec![false; params.len()],
            pending: buckets.iter().map(|b| b.params.len()).collect(),
            works: buckets.iter().map(|_| None).collect(),
            next: 0,
            callback_queued: false,
        }
    }
}

/// Resets the reducer's iteration when dropped (after the final callback ran, or unrun).
struct ResetOnDrop(Arc<Reducer>);

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        *self.0.state.lock() = Iteration::new(&self.0.params, &self.0.buckets);
    }
}

impl Reducer {
    /// Parameter `p`'s gradient of this backward is accumulated.
    fn mark_ready(self: Arc<Self>, p: usize) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut st = self.state.lock();
        if !st.callback_queued {
            st.callback_queued = true;
            // a backward that fails drops its callbacks unrun: the guard then resets the
            // iteration, so the next backward starts clean
            let guard = ResetOnDrop(self.clone());
            queue_callback(move || guard.0.finish())?;
        }
        if st.ready[p] {
            return Err(dist_err(
                "DistributedDataParallel",
                format!(
                    "parameter `{}` was marked ready twice in one backward (a second \
                     backward through the same graph before the first one's reduction)",
                    self.names[p]
                ),
            ));
        }
        st.ready[p] = true;
        let (b, _) = self.place[p];
        st.pending[b] -= 1;
        self.launch_ready(&mut st)
    }

    /// Starts, in order, every bucket whose parameters are all ready.
    fn launch_ready(&self, st: &mut Iteration) -> Result<()> {
        while st.next < self.buckets.len() && st.pending[st.next] == 0 {
            let b = st.next;
            st.works[b] = Some(self.launch(b)?);
            st.next += 1;
        }
        Ok(())
    }

    /// Copies bucket `b`'s gradients (zeros for a parameter without one) into its flat
    /// buffer (kept from the last iteration, or made on the first) and starts its
    /// all-reduce.
    fn launch(&self, b: usize) -> Result<Work<CommBuffer>> {
        let bucket = &self.buckets[b];
        let kept = self.buffers.lock()[b].take();
        let mut buf = match kept {
            Some(buf) => buf,
            None => CommBuffer::zeros(bucket.dtype, self.lens[b], "DistributedDataParallel")?,
        };
        for &p in &bucket.params {
            let at = self.place[p].1;
            let param = &self.params[p];
            match param.grad() {
                Some(g) if g.shape() != param.shape() => {
                    return Err(dist_err(
                        "DistributedDataParallel",
                        format!(
                            "parameter `{}` ({:?}) has a gradient of shape {:?}",
                            self.names[p],
                            param.shape(),
                            g.shape()
                        ),
                    ))
                }
                Some(g) => buf.write(at, &g)?,
                None => buf.zero(at, param.numel()),
            }
        }
        Ok(self.group.all_reduce_buffer(buf, ReduceOp::Sum))
    }

    /// The end of the backward: unused parameters, the remaining buckets, then the averaged
    /// gradients written back.
    fn finish(&self) -> Result<()> {
        let mut st = self.state.lock();
        let result = self.finish_locked(&mut st);
        *st = Iteration::new(&self.params, &self.buckets);
        result
    }

    fn finish_locked(&self, st: &mut Iteration) -> Result<()> {
        let unused: Vec<usize> = (0..self.params.len()).filter(|&p| !st.ready[p]).collect();
        if !unused.is_empty() && !self.find_unused {
            let names: Vec<&str> = unused.iter().map(|&p| self.names[p].as_str()).collect();
            return Err(dist_err(
                "DistributedDataParallel",
                format!(
                    "parameters that did not receive a gradient in this backward: {}; the \
                     model must use every parameter in its loss, or construct with \
                     find_unused_parameters: true",
                    names.join(", ")
                ),
            ));
        }
        let used: Vec<i64> = st.ready.iter().map(|&r| i64::from(r)).collect();
        for &p in &unused {
            st.ready[p] = true;
            st.pending[self.place[p].0] -= 1;
        }
        self.launch_ready(st)?;
        // with unused parameters allowed, which ones any rank used (torch's local_used_map)
        let used_any = if self.find_unused {
            let w = self
                .group
                .all_reduce_buffer(CommBuffer::I64(used), ReduceOp::Max);
            match w.wait()? {
                CommBuffer::I64(v) => v,
                _ => unreachable!("an i64 all-reduce returns i64"),
            }
        } else {
            vec![1; self.params.len()]
        };
        let world = self.group.world_size();
        let _g = no_grad();
        for (b, w) in st.works.iter_mut().enumerate() {
            let buf = w
                .take()
                .ok_or_else(|| dist_err("DistributedDataParallel", "a bucket never started"))?
                .wait()?;
            // the sum over ranks, divided by their number as it is copied out
            for &p in &self.buckets[b].params {
                if used_any[p] != 0 {
                    let t = &self.params[p];
                    t.set_grad(Some(buf.tensor_divided(
                        self.place[p].1,
                        t.shape(),
                        world,
                    )?));
                }
            }
            self.buffers.lock()[b] = Some(buf);
        }
        Ok(())
    }
}

/// A 64-bit FNV-1a hash of a parameter's name, shape and dtype.
fn signature(name: &str, t: &Tensor) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!("{name}:{:?}:{}", t.shape(), t.dtype());
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// Every rank must have the same parameters: counts first, then each parameter's
/// signature; an error names the first parameter that differs and the ranks.
fn check_same_parameters(group: &ProcessGroup, named: &[(String, Tensor)]) -> Result<()> {
    const OP: &str = "DistributedDataParallel::new";
    if group.world_size() == 1 {
        return Ok(());
    }
    let n = named.len();
    let counts = match group
        .submit_buffer(
            "all_gather",
            super::group::Collective::AllGather(CommBuffer::I64(vec![n as i64])),
        )
        .wait()?
    {
        CommBuffer::I64(v) => v,
        _ => unreachable!("an i64 all-gather returns i64"),
    };
    if counts.iter().any(|&c| c != n as i64) {
        let per: Vec<String> = counts
            .iter()
            .enumerate()
            .map(|(r, c)| format!("rank {r}: {c}"))
            .collect();
        return Err(dist_err(
            OP,
            format!(
                "the ranks' models have different numbers of parameters ({})",
                per.join(", ")
            ),
        ));
    }
    let sigs: Vec<i64> = named.iter().map(|(nm, t)| signature(nm, t)).collect();
    let all = match group
        .submit_buffer(
            "all_gather",
            super::group::Collective::AllGather(CommBuffer::I64(sigs.clone())),
        )
        .wait()?
    {
        CommBuffer::I64(v) => v,
        _ => unreachable!("an i64 all-gather returns i64"),
    };
    for (p, (name, t)) in named.iter().enumerate() {
        let differ: Vec<String> = (0..group.world_size())
            .filter(|r| all[r * n + p] != sigs[p])
            .map(|r| r.to_string())
            .collect();
        if !differ.is_empty() {
            return Err(dist_err(
                OP,
                format!(
                    "parameter `{name}` ({:?} {} on rank {}) differs in name, shape or dtype \
                     on rank {}",
                    t.shape(),
                    t.dtype(),
                    group.rank(),
                    differ.join(", rank ")
                ),
            ));
        }
    }
    Ok(())
}

/// Rank 0's parameter values to every rank, one broadcast per dtype.
fn broadcast_parameters(group: &ProcessGroup, named: &[(String, Tensor)]) -> Result<()> {
    if group.world_size() == 1 {
        return Ok(());
    }
    let _g = no_grad();
    for dt in [DType::F32, DType::F64] {
        let ps: Vec<&Tensor> = named
            .iter()
            .map(|(_, t)| t)
            .filter(|t| t.dtype() == dt)
            .collect();
        if ps.is_empty() {
            continue;
        }
        let total = ps.iter().map(|t| t.numel()).sum();
        let mut buf = CommBuffer::zeros(dt, total, "broadcast")?;
        let mut off = 0;
        for t in &ps {
            buf.write(off, t)?;
            off += t.numel();
        }
        let buf = group
            .submit_buffer("broadcast", super::group::Collective::Broadcast(buf, 0))
            .wait()?;
        let mut off = 0;
        for t in &ps {
            t.copy_(&buf.tensor(off, t.shape())?)?;
            off += t.numel();
        }
    }
    Ok(())
}
