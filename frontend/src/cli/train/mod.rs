//! `kiln train`: an MLP classifier (`Linear`, ReLU between, as `torch.nn.Sequential`)
//! trained eagerly with autograd on a CSV of features and integer labels, with the mean
//! cross-entropy loss and SGD or AdamW; weights in and out as safetensors with torch's
//! names (`0.weight`, `0.bias`, `2.weight`, ...), figures as JSON.
//!
//! `--compile` runs the whole training step through [`kiln::compile`] (the batch is the
//! argument; the weights, their gradients and the optimiser's state are captured): zero
//! grad, forward, loss, `backward()` and the optimiser's step trace to one graph, whose
//! updates of the weights and the optimiser state are written back after each call.
//!
//! `--ddp` trains data-parallel over the ranks `mpirun -np N` started (`kiln::distributed`,
//! MPI; without a launcher, the world of size 1): `--batch` stays the global batch, each rank
//! takes its contiguous shard of every global batch, gradients are averaged by
//! `DistributedDataParallel`, and rank 0 alone prints, saves and writes the JSON, whose loss
//! per step is the global batch's (the mean of the ranks' shard losses). With `--compile` the
//! forward is compiled as one graph per bucket group (`compile_split`); loss, backward and
//! the update stay eager so that DDP's gradient hooks run.
//!
//! Steps per second are measured over the training loop alone (batches made, forward,
//! backward, optimiser step, the loss read back), not over reading the data, building the
//! model, the final evaluation or saving.

mod data;
mod progress;

use super::CliError;
use clap::{Args, ValueEnum};
use data::{BatchOrder, Dataset};
use kiln::autograd::no_grad;
use kiln::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup, ReduceOp};
use kiln::nn::functional::{cross_entropy, CrossEntropyOptions};
use kiln::nn::{load_parameters, save_parameters, Module, Sequential};
use kiln::optim::{AdamW, Optimizer, Sgd};
use kiln::{compile_with, CompileOptions, Tensor};
use progress::Progress;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// The options of `kiln train`.
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// the CSV (same as --data): feature columns then an integer label; `#` lines and one
    /// header row are skipped [default: ../shared/data/digits.csv beside the repository]
    #[arg(value_name = "FILE", conflicts_with = "data")]
    pub file: Option<PathBuf>,
    /// the CSV to train on
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// sizes of the Linear layers, ReLU between: inputs (the feature count), hidden...,
    /// classes [default: FEATURES,128,CLASSES]
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub layers: Vec<usize>,
    /// the optimiser
    #[arg(long, value_enum, default_value_t = OptimizerKind::Adamw)]
    pub optimizer: OptimizerKind,
    /// learning rate [default: 1e-3 for adamw, 1e-2 for sgd]
    #[arg(long)]
    pub lr: Option<f64>,
    /// SGD momentum [default: 0]
    #[arg(long)]
    pub momentum: Option<f64>,
    /// weight decay [default: 0.01 for adamw (decoupled, torch's default), 0 for sgd]
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// rows per batch
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// optimiser steps
    #[arg(long, default_value_t = 300)]
    pub steps: usize,
    /// draw batches from a seeded permutation of the rows, a new one each epoch (default:
    /// file order, wrapping around)
    #[arg(long, value_name = "SEED")]
    pub shuffle: Option<u64>,
    /// seed of the random initialisation (torch's Linear default: U(±1/sqrt(in)))
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// initial weights: a safetensors file with torch's Sequential names (0.weight, 0.bias,
    /// 2.weight, ...) instead of the random initialisation
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// write the final weights to this safetensors file (same names)
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// write the losses, the final accuracy, steps/s and the options to this JSON file
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// fused optimiser steps: one pass over each parameter's elements, all parameters in
    /// parallel (torch's `fused=True`), instead of a dozen eager ops per parameter
    #[arg(long)]
    pub fused: bool,
    /// compile the whole training step (forward, loss, backward, optimiser update) with
    /// `kiln::compile` (the cpu backend) into one graph
    #[arg(long)]
    pub compile: bool,
    /// data-parallel over the ranks of `mpirun -np N` (each rank its shard of every global
    /// batch; a kiln built with `--features mpi`); rank 0 reports
    #[arg(long)]
    pub ddp: bool,
    /// steps between progress lines when stderr is not a terminal (0: none)
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub log_every: usize,
}

/// The optimisers `kiln train` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// torch.optim.SGD (momentum with --momentum)
    Sgd,
    /// torch.optim.AdamW (betas 0.9, 0.999; eps 1e-8)
    Adamw,
}

/// The default data file: `shared/data/digits.csv` beside the repository.
fn default_data() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/digits.csv");
    std::fs::canonicalize(&p).unwrap_or(p)
}

/// The options after defaults, as the JSON report records them.
#[derive(Debug, serde::Serialize)]
struct Resolved {
    data: String,
    layers: Vec<usize>,
    optimizer: OptimizerKind,
    lr: f64,
    momentum: f64,
    weight_decay: f64,
    batch: usize,
    steps: usize,
    shuffle: Option<u64>,
    fused: bool,
    compile: bool,
    /// with --ddp: the number of ranks
    world_size: Option<usize>,
    seed: u64,
    init: Option<String>,
    save: Option<String>,
}

fn resolve(args: &TrainArgs, data: &Dataset, path: &Path) -> Result<Resolved, CliError> {
    let (features, classes) = (data.num_features, data.classes());
    let layers = if args.layers.is_empty() {
        vec![features, 128, classes]
    } else {
        args.layers.clone()
    };
    if layers.len() < 2 || layers.contains(&0) {
        return Err(format!(
            "--layers {}: give at least two sizes, none 0 (inputs, hidden..., classes), e.g. \
             --layers {features},128,{classes}",
            join(&layers)
        )
        .into());
    }
    if layers[0] != features {
        return Err(format!(
            "--layers {}: the first size must be the number of features, {features} in {}",
            join(&layers),
            path.display()
        )
        .into());
    }
    let outputs = layers[layers.len() - 1];
    if outputs < classes {
        return Err(format!(
            "--layers {}: the last size ({outputs}) must cover the labels, which go up to {} \
             in {} (need at least {classes})",
            join(&layers),
            classes - 1,
            path.display()
        )
        .into());
    }
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    // fail before the run, not after it
    for (flag, out) in [("--save", &args.save), ("--json", &args.json)] {
        let Some(out) = out else { continue };
        if out
            .parent()
            .is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir())
        {
            return Err(format!("{flag} {}: its folder does not exist", out.display()).into());
        }
    }
    let sgd = args.optimizer == OptimizerKind::Sgd;
    if !sgd && args.momentum.is_some() {
        return Err("--momentum is an option of --optimizer sgd (AdamW has betas)".into());
    }
    Ok(Resolved {
        data: path.display().to_string(),
        layers,
        optimizer: args.optimizer,
        lr: args.lr.unwrap_or(if sgd { 1e-2 } else { 1e-3 }),
        momentum: args.momentum.unwrap_or(0.0),
        weight_decay: args.weight_decay.unwrap_or(if sgd { 0.0 } else { 0.01 }),
        batch: args.batch,
        steps: args.steps,
        shuffle: args.shuffle,
        fused: args.fused,
        compile: args.compile,
        world_size: None,
        seed: args.seed,
        init: args.init.as_ref().map(|p| p.display().to_string()),
        save: args.save.as_ref().map(|p| p.display().to_string()),
    })
}

fn join(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn optimizer(o: &Resolved, params: Vec<Tensor>) -> kiln::Result<Box<dyn Optimizer + Send>> {
    Ok(match o.optimizer {
        OptimizerKind::Sgd => Box::new(
            Sgd::new(params, o.lr)?
                .momentum(o.momentum, 0.0, false)
                .weight_decay(o.weight_decay)
                .fused(o.fused),
        ),
        OptimizerKind::Adamw => {
            let a = AdamW::new(params, o.lr)?.fused(o.fused);
            let mut h = a.hyperparameters();
            h.weight_decay = o.weight_decay;
            a.set_options(h);
            Box::new(a)
        }
    })
}

/// The mean cross-entropy loss and the accuracy of `model` on every row.
fn evaluate(model: &Sequential, data: &Dataset) -> kiln::Result<(f64, usize)> {
    let _off = no_grad();
    let (x, y) = data.all()?;
    let logits = model.forward(&x)?;
    let loss = cross_entropy(&logits, &y, &CrossEntropyOptions::default())?.item()?;
    let predicted = logits.argmax(1, false)?.to_vec::<i64>()?;
    let correct = predicted
        .iter()
        .zip(&data.labels)
        .filter(|(p, l)| p == l)
        .count();
    Ok((loss, correct))
}

/// Runs the command.
pub fn train(args: &TrainArgs) -> Result<(), CliError> {
    let path = args
        .file
        .clone()
        .or_else(|| args.data.clone())
        .unwrap_or_else(default_data);
    let data = Dataset::read(&path)?;
    let mut o = resolve(args, &data, &path)?;
    let model = Sequential::mlp(&o.layers, o.seed)?;
    if let Some(init) = &args.init {
        load_parameters(&model, init)?;
    }
    let group = if args.ddp {
        let g = ProcessGroup::from_env()?;
        if o.batch % g.world_size() != 0 {
            return Err(format!(
                "--batch {}: the global batch must divide among the {} ranks",
                o.batch,
                g.world_size()
            )
            .into());
        }
        o.world_size = Some(g.world_size());
        Some(g)
    } else {
        None
    };
    let (rank, world) = group
        .as_ref()
        .map_or((0, 1), |g| (g.rank(), g.world_size()));
    let lead = rank == 0;
    let (plain, ddp) = match &group {
        Some(g) => (
            None,
            Some(DistributedDataParallel::new(
                model,
                g.clone(),
                DdpOptions::default(),
            )?),
        ),
        None => (Some(model), None),
    };
    let model: &Sequential = match (&plain, &ddp) {
        (Some(m), _) => m,
        (None, Some(d)) => d.module(),
        (None, None) => unreachable!("a model, plain or wrapped"),
    };
    let opt = Mutex::new(optimizer(&o, model.parameters())?);
    let ce = CrossEntropyOptions::default();
    // one training step on a batch `[x, y]`: gradients cleared, forward, loss, backward,
    // the optimiser's update; eager, or compiled whole (traced and compiled on the first
    // step, one graph with the update written back; every batch has the same shape, so
    // later steps reuse it)
    let train_step = |xy: &[Tensor]| -> kiln::Result<Tensor> {
        let mut opt = opt.lock().unwrap_or_else(|e| e.into_inner());
        opt.zero_grad();
        let loss = cross_entropy(&model.forward(&xy[0])?, &xy[1], &ce)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    };
    let compiled = (o.compile && ddp.is_none())
        .then(|| compile_with(train_step, CompileOptions::default().name("train")));
    // data-parallel: the forward compiled as one graph per bucket group (so all-reduces
    // overlap the compiled backward), loss, backward (DDP's hooks) and step eager
    let split = match (&ddp, o.compile) {
        (Some(d), true) => Some(d.compile_split(CompileOptions::default().name("train"))),
        _ => None,
    };
    let ddp_step = |xy: &[Tensor]| -> kiln::Result<Tensor> {
        let mut opt = opt.lock().unwrap_or_else(|e| e.into_inner());
        opt.zero_grad();
        let logits = match &split {
            Some(f) => f.forward(&xy[0])?,
            None => model.forward(&xy[0])?,
        };
        let loss = cross_entropy(&logits, &xy[1], &ce)?;
        loss.backward()?;
        opt.step()?;
        Ok(loss)
    };
    if !lead {
        return train_ranks_loop(&o, &data, &group, rank, world, &ddp_step);
    }
    println!(
        "training an MLP {} ({} parameters, {}) on {}: {} rows, {} features, {} classes; {} \
         lr {}, batch {}, {} steps{}",
        join(&o.layers),
        model.num_parameters(),
        match &args.init {
            Some(p) => format!("from {}", p.display()),
            None => format!("seed {}", o.seed),
        },
        path.display(),
        data.len(),
        data.num_features,
        data.classes(),
        match o.optimizer {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adamw => "adamw",
        },
        o.lr,
        o.batch,
        o.steps,
        if o.compile { ", compiled" } else { "" }
    );
    if let Some(d) = &ddp {
        println!(
            "data-parallel over {world} ranks ({}), {} rows per rank per step; buckets:\n{}",
            d.group().backend_name(),
            o.batch / world,
            d.bucket_table().trim_end()
        );
    }

    let mut order = BatchOrder::new(data.len(), o.shuffle);
    let progress = Progress::new(o.steps, args.log_every);
    let mut losses = Vec::with_capacity(o.steps);
    let start = Instant::now();
    let mut first_step_seconds = None;
    for step in 0..o.steps {
        let l = match &group {
            Some(g) => rank_step(g, &data, &mut order, step, &o, rank, world, &ddp_step)?,
            None => {
                let (x, y) = data.gather(&order.batch(step, o.batch))?;
                let xy = [x, y];
                let loss = match &compiled {
                    Some(f) => f.call(&xy)?,
                    None => train_step(&xy)?,
                };
                loss.item()?
            }
        };
        if step == 0 {
            first_step_seconds = Some(start.elapsed().as_secs_f64());
        }
        losses.push(l);
        progress.step(step, l);
    }
    let seconds = start.elapsed().as_secs_f64();
    progress.finish();
    let steps_per_second = if o.steps > 0 {
        o.steps as f64 / seconds
    } else {
        0.0
    };

    let (data_loss, correct) = evaluate(model, &data)?;
    let accuracy = correct as f64 / data.len() as f64;
    if let Some(save) = &args.save {
        save_parameters(model, save)?;
    }
    let last = losses.last().map_or("-".to_string(), |l| format!("{l:.4}"));
    println!(
        "final loss {last} (last batch), {data_loss:.4} over the data; train accuracy {:.2}% \
         ({correct}/{}); {steps_per_second:.1} steps/s",
        accuracy * 100.0,
        data.len()
    );
    if let Some(json) = &args.json {
        let doc = serde_json::json!({
            "loss": losses,
            "final_loss": data_loss,
            "train_accuracy": accuracy,
            "correct": correct,
            "rows": data.len(),
            "features": data.num_features,
            "classes": data.classes(),
            "parameters": model.num_parameters(),
            "steps_per_second": steps_per_second,
            "train_seconds": seconds,
            "options": o,
            // with --ddp: the ranks and the bucket table; null without it
            "ddp": ddp.as_ref().map(|d| serde_json::json!({
                "world_size": world,
                "backend": d.group().backend_name(),
                "buckets": d.buckets().iter().map(|b| serde_json::json!({
                    "index": b.index, "bytes": b.bytes, "parameters": b.names,
                })).collect::<Vec<_>>(),
            })),
            // with --ddp --compile: the forward's graphs, one per bucket group
            "split_graphs": split.as_ref().map(|f| f.num_graphs()),
            // with --compile: graphs compiled, graph breaks, and the first step (trace +
            // compile + one step, included in steps_per_second); null without it
            "compile": compiled.as_ref().map(|f| {
                let s = f.stats();
                serde_json::json!({
                    "graphs": s.compiles,
                    "graph_breaks": s.graph_breaks,
                    "recompiles": s.recompiles,
                    "first_step_seconds": first_step_seconds,
                })
            }),
        });
        std::fs::write(json, serde_json::to_string_pretty(&doc)?)
            .map_err(|e| format!("{}: {e}", json.display()))?;
    }
    Ok(())
}

/// One data-parallel step on this rank's contiguous shard of the global batch `step`;
/// returns the global batch's loss (the mean over the ranks).
#[allow(clippy::too_many_arguments)]
fn rank_step(
    g: &ProcessGroup,
    data: &Dataset,
    order: &mut BatchOrder,
    step: usize,
    o: &Resolved,
    rank: usize,
    world: usize,
    ddp_step: &dyn Fn(&[Tensor]) -> kiln::Result<Tensor>,
) -> kiln::Result<f64> {
    let rows = order.batch(step, o.batch);
    let shard = o.batch / world;
    let (x, y) = data.gather(&rows[rank * shard..(rank + 1) * shard])?;
    let loss = ddp_step(&[x, y])?.detach();
    let mean = Tensor::from_vec(vec![loss.item()?], &[1])?;
    g.all_reduce(&mean, ReduceOp::Avg)?.wait()?;
    mean.item()
}

/// The training loop of a rank other than 0: the same steps, nothing reported.
fn train_ranks_loop(
    o: &Resolved,
    data: &Dataset,
    group: &Option<ProcessGroup>,
    rank: usize,
    world: usize,
    ddp_step: &dyn Fn(&[Tensor]) -> kiln::Result<Tensor>,
) -> Result<(), CliError> {
    let g = group
        .as_ref()
        .expect("only data-parallel runs have other ranks");
    let mut order = BatchOrder::new(data.len(), o.shuffle);
    for step in 0..o.steps {
        rank_step(g, data, &mut order, step, o, rank, world, ddp_step)?;
    }
    Ok(())
}
