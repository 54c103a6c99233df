//! `kiln bench --ddp`, run under `mpirun -np N` (or alone, as a world of size 1): the
//! all-reduce bandwidth of DDP's 25 MiB buckets against this machine's memory-copy
//! bandwidth, and the training workloads `train_mlp` and `train_block` data-parallel (each
//! rank its share of the global batch) against one rank on its share alone, eager and with
//! the forward and loss compiled (split at bucket boundaries by `ddp.compile`, and whole).
//! Rank 0 prints and writes the JSON; the other ranks take part silently.
//!
//! The all-reduce row counts the bytes each rank must move at least in a ring all-reduce,
//! 2(N−1)/N of the buffer (NCCL's "bus bandwidth"), over the median time of a whole
//! collective as DDP sees it (submitted, reduced, returned).

use super::train::{Trainee, Workload};
use super::BenchError;
use kiln::distributed::{CommBuffer, DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp};
use kiln::nn::Module;
use kiln::optim::{Optimizer, Sgd};
use kiln::{compile_with, CompileOptions, Tensor};
use std::path::Path;
use std::time::Instant;

/// The figures of one `kiln bench --ddp` run.
#[derive(Debug, serde::Serialize)]
pub struct DistributedReport {
    /// the ranks
    pub world_size: usize,
    /// the process group's backend
    pub backend: &'static str,
    /// bytes of each all-reduce (one DDP bucket)
    pub bucket_bytes: usize,
    /// median seconds of one all-reduce of a bucket as DDP makes it
    /// ([`CommBuffer::zeros`]: huge pages where the kernel gives them)
    pub all_reduce_seconds: f64,
    /// median seconds of the same all-reduce of a buffer on ordinary 4 KiB pages
    pub all_reduce_small_pages_seconds: f64,
    /// 2(N−1)/N · bytes over the median time, GB/s
    pub bus_gbs: f64,
    /// a single-thread copy of the same bytes on each rank, all ranks at once, GB/s
    /// (median): the faster of
    /// `memcpy_small_pages_gbs` and `memcpy_huge_pages_gbs`, so the reference is the stricter
    pub memcpy_gbs: f64,
    /// the copy between buffers on 4 KiB pages, GB/s
    pub memcpy_small_pages_gbs: f64,
    /// the copy between buffers advised to huge pages, GB/s
    pub memcpy_huge_pages_gbs: f64,
    /// bus_gbs / memcpy_gbs
    pub fraction_of_memcpy: f64,
    /// the data-parallel training steps: `train_mlp` and `train_block`
    pub steps: Vec<StepRow>,
}

/// One training workload data-parallel against one rank on its share of the batch.
#[derive(Debug, serde::Serialize)]
pub struct StepRow {
    /// the workload (`kiln bench`'s training workloads)
    pub workload: &'static str,
    /// the global batch (sequences or rows)
    pub global_batch: usize,
    /// median seconds of a data-parallel step (each rank its share, DDP's all-reduces)
    pub ddp_step_seconds: f64,
    /// median seconds of rank 0's step on its share alone, without DDP
    pub one_rank_step_seconds: f64,
    /// ddp_step_seconds / one_rank_step_seconds
    pub ratio: f64,
    /// the same with the forward and loss compiled (`ddp.compile`: the graph cut at bucket
    /// boundaries, each bucket's all-reduce overlapping the earlier segments' compiled
    /// backwards) and the optimiser step eager: median seconds of a data-parallel step
    pub compiled_ddp_step_seconds: f64,
    /// the compiled data-parallel step with the graph whole (one backward node: every
    /// all-reduce waits for the whole backward)
    pub compiled_ddp_unsplit_step_seconds: f64,
    /// rank 0's compiled step on its share alone, without DDP
    pub compiled_one_rank_step_seconds: f64,
    /// compiled_ddp_step_seconds / compiled_one_rank_step_seconds
    pub compiled_ratio: f64,
    /// forward/backward graph pairs of the split compiled step (one per bucket run)
    pub compiled_graphs: usize,
}

/// A training workload's parameters as a module, so DDP can wrap them (its loss function
/// holds the model).
struct Params(Vec<Tensor>);

impl Module for Params {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.0
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("p{i}"), t.clone()))
            .collect()
    }

    fn forward(&self, _x: &Tensor) -> kiln::Result<Tensor> {
        Err(kiln::Error::Autograd(
            "the training workload's loss function runs the model".into(),
        ))
    }
}

fn dist(e: kiln::Error) -> BenchError {
    BenchError::Limit {
        what: "data-parallel figures",
        source: e,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the distributed rows; rank 0 prints them (and writes `json`).
pub fn bench_ddp(quick: bool, json: Option<&Path>) -> Result<(), BenchError> {
    let g = ProcessGroup::from_env().map_err(dist)?;
    let (world, lead) = (g.world_size(), g.rank() == 0);
    let bytes = if quick { 1 << 20 } else { 25 << 20 };
    let runs = if quick { 5 } else { 20 };
    let n = bytes / 4;

    // memory copy: the same bytes, one thread, destination already touched; on ordinary
    // pages and on huge pages, the faster being the reference. The 4 KiB buffers are made
    // first and live to the end, so none of them reuses memory a huge-page one had.
    let small = |v: f32| {
        let b = vec![v; n];
        #[cfg(target_os = "linux")]
        // SAFETY: the advice covers `b`'s own pages and changes no contents
        unsafe {
            libc::madvise(
                b.as_ptr() as *mut libc::c_void,
                bytes,
                libc::MADV_NOHUGEPAGE,
            );
        }
        b
    };
    let (small_src, mut small_dst, small_ar) = (small(1.0), small(0.0), small(1.0));
    let huge = |v: f32| -> Result<Vec<f32>, BenchError> {
        match CommBuffer::zeros(kiln::DType::F32, n, "bench").map_err(dist)? {
            CommBuffer::F32(mut b) => {
                b.fill(v);
                Ok(b)
            }
            _ => unreachable!("an f32 buffer"),
        }
    };
    let (huge_src, mut huge_dst, huge_ar) = (huge(1.0)?, huge(0.0)?, huge(1.0)?);
    let copy_gbs = |src: &[f32], dst: &mut [f32]| {
        let copies: Vec<f64> = (0..runs + 2)
            .map(|_| {
                let t = Instant::now();
                dst.copy_from_slice(std::hint::black_box(src));
                std::hint::black_box(&dst);
                t.elapsed().as_secs_f64()
            })
            .skip(2)
            .collect();
        bytes as f64 / median(copies) / 1e9
    };
    // every rank copies at once, as every rank takes part in an all-reduce: one rank
    // copying while another still starts up would have the memory to itself
    g.barrier().map_err(dist)?;
    let memcpy_small_pages_gbs = copy_gbs(&small_src, &mut small_dst);
    g.barrier().map_err(dist)?;
    let memcpy_huge_pages_gbs = copy_gbs(&huge_src, &mut huge_dst);
    let memcpy_gbs = memcpy_small_pages_gbs.max(memcpy_huge_pages_gbs);

    // all-reduce (sum) of one bucket, the buffer handed back each time, the ranks starting
    // together (a barrier before each, untimed): a buffer as DDP makes one, and one on
    // ordinary pages
    let time_all_reduce = |mut buf: CommBuffer| -> Result<f64, BenchError> {
        let mut times = Vec::new();
        for i in 0..runs + 2 {
            g.barrier().map_err(dist)?;
            let t = Instant::now();
            buf = g
                .all_reduce_buffer(buf, ReduceOp::Sum)
                .wait()
                .map_err(dist)?;
            if i >= 2 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        Ok(median(times))
    };
    let ar = time_all_reduce(CommBuffer::F32(huge_ar))?;
    let ar_small = time_all_reduce(CommBuffer::F32(small_ar))?;
    let bus_gbs = 2.0 * (world as f64 - 1.0) / world as f64 * bytes as f64 / ar / 1e9;

    // data-parallel training steps against one rank on its share alone
    let mut steps = Vec::new();
    for name in ["train_mlp", "train_block"] {
        let mut w = Workload::new(name, quick).expect("a training workload");
        let global = match &mut w {
            Workload::Mlp { batch, .. } | Workload::Block { batch, .. } => {
                let g = *batch;
                if g % world != 0 {
                    continue;
                }
                *batch = g / world;
                g
            }
            Workload::MiniLm { .. } => continue,
        };
        let inputs = w.inputs().map_err(dist)?;
        // median seconds of an SGD step (zero_grad, `loss` of the inputs, backward, step)
        // over `t`'s parameters, after 3 untimed steps
        let time_with =
            |t: &Trainee, loss: &dyn Fn(&[Tensor]) -> kiln::Result<Tensor>| -> kiln::Result<f64> {
                let mut opt = Sgd::new(t.params.clone(), 1e-3)?;
                let mut v = Vec::new();
                for i in 0..runs + 3 {
                    let start = Instant::now();
                    opt.zero_grad();
                    loss(&inputs)?.backward()?;
                    opt.step()?;
                    if i >= 3 {
                        v.push(start.elapsed().as_secs_f64());
                    }
                }
                Ok(median(v))
            };
        let time_steps = |t: &Trainee| time_with(t, &*t.loss);
        let ddp_of = |t: &Trainee| {
            DistributedDataParallel::new(Params(t.params.clone()), g.clone(), DdpOptions::default())
                .map_err(dist)
        };
        let t = w.build().map_err(dist)?;
        let ddp = ddp_of(&t)?;
        let ddp_step = time_steps(&t).map_err(dist)?;
        drop(ddp);
        g.barrier().map_err(dist)?;
        // one rank alone (the others wait at the barrier)
        let one = if lead {
            time_steps(&w.build().map_err(dist)?).map_err(dist)?
        } else {
            0.0
        };
        g.barrier().map_err(dist)?;
        // compiled forward and loss, eager backward (DDP's hooks) and optimiser step
        let time_compiled = |t: &Trainee,
                             ddp: Option<&DistributedDataParallel<Params>>,
                             split: bool|
         -> kiln::Result<(f64, usize)> {
            let loss = t.loss.clone();
            let f = move |xs: &[Tensor]| -> kiln::Result<Vec<Tensor>> { Ok(vec![loss(xs)?]) };
            let opts = CompileOptions::default().name(w.name());
            let c = match ddp {
                Some(d) if split => d.compile(f, opts),
                _ => compile_with(f, opts),
            };
            let step = time_with(t, &|xs: &[Tensor]| Ok(c.call(xs)?.remove(0)))?;
            Ok((step, c.training_graphs().len()))
        };
        let compiled_ddp = |split: bool| -> Result<(f64, usize), BenchError> {
            let t = w.build().map_err(dist)?;
            let ddp = ddp_of(&t)?;
            let r = time_compiled(&t, Some(&ddp), split).map_err(dist)?;
            drop(ddp);
            g.barrier().map_err(dist)?;
            Ok(r)
        };
        let (c_ddp, c_graphs) = compiled_ddp(true)?;
        let (c_unsplit, _) = compiled_ddp(false)?;
        let c_one = if lead {
            time_compiled(&w.build().map_err(dist)?, None, false)
                .map_err(dist)?
                .0
        } else {
            0.0
        };
        g.barrier().map_err(dist)?;
        steps.push(StepRow {
            workload: w.name(),
            global_batch: global,
            ddp_step_seconds: ddp_step,
            one_rank_step_seconds: one,
            ratio: ddp_step / one,
            compiled_ddp_step_seconds: c_ddp,
            compiled_ddp_unsplit_step_seconds: c_unsplit,
            compiled_one_rank_step_seconds: c_one,
            compiled_ratio: c_ddp / c_one,
            compiled_graphs: c_graphs,
        });
    }
    if !lead {
        return Ok(());
    }
    let r = DistributedReport {
        world_size: world,
        backend: g.backend_name(),
        bucket_bytes: bytes,
        all_reduce_seconds: ar,
        all_reduce_small_pages_seconds: ar_small,
        bus_gbs,
        memcpy_gbs,
        memcpy_small_pages_gbs,
        memcpy_huge_pages_gbs,
        fraction_of_memcpy: bus_gbs / memcpy_gbs,
        steps,
    };
    print!("{}", render(&r));
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "distributed": r })).map_err(
            |e| BenchError::Json {
                path: path.display().to_string(),
                reason: e.to_string(),
            },
        )?;
        std::fs::write(path, text + "\n").map_err(|e| BenchError::Json {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// The report's text.
pub fn render(r: &DistributedReport) -> String {
    let mut s = format!(
        "distributed: {} ranks ({})\n\
         all_reduce  {:.1} MiB f32 bucket: median {:.2} ms; {:.2} GB/s per rank (2(N-1)/N of the \
         bytes over the time) = {:.0}% of a memory copy ({:.2} GB/s, one thread on each rank at once, the faster of \
         {:.2} on 4 KiB and {:.2} on huge pages); on 4 KiB pages the all_reduce takes {:.2} ms\n",
        r.world_size,
        r.backend,
        r.bucket_bytes as f64 / (1 << 20) as f64,
        r.all_reduce_seconds * 1e3,
        r.bus_gbs,
        r.fraction_of_memcpy * 100.0,
        r.memcpy_gbs,
        r.memcpy_small_pages_gbs,
        r.memcpy_huge_pages_gbs,
        r.all_reduce_small_pages_seconds * 1e3,
    );
    for st in &r.steps {
        s += &format!(
            "{:<11} global batch {}: {} ranks {:.2} ms a step, one rank on {} {:.2} ms: {:.2}x\n",
            st.workload,
            st.global_batch,
            r.world_size,
            st.ddp_step_seconds * 1e3,
            st.global_batch / r.world_size,
            st.one_rank_step_seconds * 1e3,
            st.ratio
        );
        s += &format!(
            "{:<11} compiled: {} ranks {:.2} ms a step split in {} graphs ({:.2} ms as one \
             graph), one rank {:.2} ms: {:.2}x\n",
            "",
            r.world_size,
            st.compiled_ddp_step_seconds * 1e3,
            st.compiled_graphs,
            st.compiled_ddp_unsplit_step_seconds * 1e3,
            st.compiled_one_rank_step_seconds * 1e3,
            st.compiled_ratio
        );
    }
    s
}
