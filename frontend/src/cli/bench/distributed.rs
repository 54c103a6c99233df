//! `kiln bench --ddp`, run under `mpirun -np N` (or alone, as a world of size 1): the
//! all-reduce bandwidth of DDP's 25 MiB buckets against this machine's memory-copy
//! bandwidth, and a data-parallel training step against one rank on its share of the batch.
//! Rank 0 prints and writes the JSON; the other ranks take part silently.
//!
//! The all-reduce row counts the bytes each rank must move at least in a ring all-reduce,
//! 2(N−1)/N of the buffer (NCCL's "bus bandwidth"), over the median time of a whole
//! collective as DDP sees it (submitted, reduced, returned).

use super::BenchError;
use kiln::distributed::{CommBuffer, DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp};
use kiln::nn::functional::{cross_entropy, CrossEntropyOptions};
use kiln::nn::{Module, Sequential};
use kiln::optim::{Optimizer, Sgd};
use kiln::{DType, Tensor};
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
    /// median seconds of one all-reduce
    pub all_reduce_seconds: f64,
    /// 2(N−1)/N · bytes over the median time, GB/s
    pub bus_gbs: f64,
    /// a single-thread copy of the same bytes, GB/s (median)
    pub memcpy_gbs: f64,
    /// bus_gbs / memcpy_gbs
    pub fraction_of_memcpy: f64,
    /// the data-parallel step's model (layer sizes) and global batch
    pub step_model: Vec<usize>,
    /// the global batch of the data-parallel step
    pub global_batch: usize,
    /// median seconds of a data-parallel step (each rank its shard)
    pub ddp_step_seconds: f64,
    /// median seconds of one rank's step on its shard alone, without DDP (rank 0)
    pub one_rank_step_seconds: f64,
    /// ddp_step_seconds / one_rank_step_seconds
    pub step_ratio: f64,
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

    // memory copy: the same bytes, one thread, destination already touched
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let copies: Vec<f64> = (0..runs + 2)
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            t.elapsed().as_secs_f64()
        })
        .skip(2)
        .collect();
    let memcpy_gbs = bytes as f64 / median(copies) / 1e9;

    // all-reduce of one bucket, the buffer handed back each time
    g.barrier().map_err(dist)?;
    let mut buf = CommBuffer::F32(vec![1.0; n]);
    let mut times = Vec::new();
    for i in 0..runs + 2 {
        let t = Instant::now();
        buf = g
            .all_reduce_buffer(buf, ReduceOp::Avg)
            .wait()
            .map_err(dist)?;
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let ar = median(times);
    let bus_gbs = 2.0 * (world as f64 - 1.0) / world as f64 * bytes as f64 / ar / 1e9;

    // a data-parallel training step against one rank on its shard alone
    let layers = if quick {
        vec![64, 128, 10]
    } else {
        vec![256, 1024, 1024, 10]
    };
    let global = if quick { 64 } else { 512 };
    let shard = global / world;
    let x = Tensor::randn(&[shard, layers[0]], DType::F32, 1 + g.rank() as u64).map_err(dist)?;
    let y = Tensor::from_vec(
        (0..shard).map(|i| (i % 10) as i64).collect::<Vec<_>>(),
        &[shard],
    )
    .map_err(dist)?;
    let ce = CrossEntropyOptions::default();
    let time_steps =
        |m: &dyn Fn(&Tensor) -> kiln::Result<Tensor>, opt: &mut Sgd| -> kiln::Result<f64> {
            let mut v = Vec::new();
            for i in 0..runs + 3 {
                let t = Instant::now();
                opt.zero_grad();
                cross_entropy(&m(&x)?, &y, &ce)?.backward()?;
                opt.step()?;
                if i >= 3 {
                    v.push(t.elapsed().as_secs_f64());
                }
            }
            Ok(median(v))
        };
    let ddp = DistributedDataParallel::new(
        Sequential::mlp(&layers, 3).map_err(dist)?,
        g.clone(),
        DdpOptions::default(),
    )
    .map_err(dist)?;
    let mut opt = Sgd::new(ddp.module().parameters(), 1e-3).map_err(dist)?;
    let ddp_step = time_steps(&|x| ddp.forward(x), &mut opt).map_err(dist)?;
    g.barrier().map_err(dist)?;
    // one rank alone (the others wait at the barrier)
    let one = if lead {
        let m = Sequential::mlp(&layers, 3).map_err(dist)?;
        let mut opt = Sgd::new(m.parameters(), 1e-3).map_err(dist)?;
        time_steps(&|x| m.forward(x), &mut opt).map_err(dist)?
    } else {
        0.0
    };
    g.barrier().map_err(dist)?;
    if !lead {
        return Ok(());
    }
    let r = DistributedReport {
        world_size: world,
        backend: g.backend_name(),
        bucket_bytes: bytes,
        all_reduce_seconds: ar,
        bus_gbs,
        memcpy_gbs,
        fraction_of_memcpy: bus_gbs / memcpy_gbs,
        step_model: layers,
        global_batch: global,
        ddp_step_seconds: ddp_step,
        one_rank_step_seconds: one,
        step_ratio: ddp_step / one,
    };
    println!("{}", render(&r));
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
    let join = |v: &[usize]| {
        v.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("-")
    };
    format!(
        "distributed: {} ranks ({})\n\
         all_reduce  {:.1} MiB f32 bucket: median {:.2} ms; {:.2} GB/s per rank (2(N-1)/N of the \
         bytes over the time) = {:.0}% of a memory copy ({:.2} GB/s, one thread)\n\
         train step  MLP {} (SGD), global batch {}: {} ranks {:.2} ms, one rank on {} rows \
         {:.2} ms: {:.2}x",
        r.world_size,
        r.backend,
        r.bucket_bytes as f64 / (1 << 20) as f64,
        r.all_reduce_seconds * 1e3,
        r.bus_gbs,
        r.fraction_of_memcpy * 100.0,
        r.memcpy_gbs,
        join(&r.step_model),
        r.global_batch,
        r.world_size,
        r.ddp_step_seconds * 1e3,
        r.global_batch / r.world_size,
        r.one_rank_step_seconds * 1e3,
        r.step_ratio
    )
}
