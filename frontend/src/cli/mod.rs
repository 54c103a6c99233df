//! Command-line parsing and dispatch for the `kiln` binary.

mod bench;
mod demo;
mod dump;
mod embed;
mod fuzz;
mod inputs;
mod run;
mod train;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// kiln: a graph-capturing JIT compiler for tensor programs.
#[derive(Parser, Debug)]
#[command(name = "kiln", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where `kiln run` executes a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// the reference interpreter (f64, the oracle)
    Interp,
    /// the eager runtime, one kernel per node
    Eager,
    /// `kiln::compile` with the cpu backend: decomposed, fused (unless `--unfused`),
    /// Cranelift machine code
    Cpu,
    /// `kiln::compile` with the cuda backend: CUDA C per kernel group on the device
    /// `KILN_CUDA_DEVICE` names (`emulated`: the CPU, through g++)
    Cuda,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a graph: a .kir file parsed, verified and printed with every type inferred,
    /// or a model of the zoo traced by `kiln::compile` (`--model NAME --stage traced`).
    Dump {
        /// the IR file (or use --model)
        #[arg(required_unless_present = "model")]
        file: Option<PathBuf>,
        /// a model of the zoo: pointwise, layernorm, softmax, reduce, mlp, block, tiny, minilm
        #[arg(long, conflicts_with = "file")]
        model: Option<String>,
        /// the pipeline stage to print
        #[arg(long, value_enum, default_value_t = Stage::Traced)]
        stage: Stage,
        /// the model's input shape, e.g. `--shape 8x1024` (default: the workload's)
        #[arg(long, value_parser = parse_shape)]
        shape: Option<ShapeArg>,
        /// trace every input dim as a symbol (`dynamic: always`)
        #[arg(long)]
        dynamic: bool,
    },
    /// Run a graph of a .kir file on random or given inputs and print (or save) its outputs.
    Run(run::RunArgs),
    /// Differentiate a graph whose first output is a scalar: run its joint forward and
    /// backward graph (the `grad` pass) and print (or save) `out0`, ... and `grad_<input>` for
    /// every floating input, named so that gradients compare with PyTorch's by name.
    Grad(run::RunArgs),
    /// Show kiln working: eager tensors, a graph in the text format, interpreter vs eager.
    Demo,
    /// Differential fuzzing: random graphs from the op table, compiled (cpu fused and
    /// unfused, interp, optionally cuda) against eager on odd and unit sizes, transposed
    /// inputs and special values; each divergence is minimised into tests/regressions/.
    /// Exits non-zero on a divergence.
    Fuzz(fuzz::FuzzArgs),
    /// Run optimiser passes on a .kir file and print the result (like mlir-opt).
    Opt {
        /// the IR file
        file: PathBuf,
        /// comma-separated passes: grad, decompose, simplify, fuse
        #[arg(long, value_delimiter = ',', required = true)]
        passes: Vec<String>,
    },
    /// Time the workloads eager and compiled against this machine's measured limits
    /// (triad bandwidth, GEMM peak); `--json FILE` keeps every figure.
    Bench(bench::BenchArgs),
    /// Train an MLP classifier eagerly (autograd, cross-entropy, SGD or AdamW) on a CSV of
    /// features and an integer label (default: the UCI digits in ../shared/data/digits.csv):
    /// loss per step, train accuracy, steps/s; weights in and out as safetensors with torch's
    /// nn.Sequential names.
    Train(train::TrainArgs),
    /// Sentence embeddings with all-MiniLM-L6-v2 from its published files (set `KILN_MINILM`
    /// with `eval "$(bash scripts/fetch-minilm.sh)"`): first values and cosine similarities.
    Embed {
        /// the sentences
        #[arg(required = true)]
        texts: Vec<String>,
        /// run the model compiled (cpu backend) instead of eagerly
        #[arg(long)]
        compile: bool,
        /// write the full embeddings and token ids to this JSON file
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

/// A stage of the pipeline that `kiln dump` can print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    /// the graph as captured (for a .kir file: as parsed and type-checked)
    Traced,
    /// composite ops decomposed into primitives
    Decomposed,
    /// after the e-graph: simplified and fused, each node tagged with its kernel
    Optimized,
    /// kernel groups with iteration spaces, reads, writes and the memory plan
    Scheduled,
    /// the joint forward and backward graph of the `grad` pass (first output a scalar)
    Grad,
    /// compiled training's split: what the forward saves (each tensor with its size, total
    /// bytes against eager autograd's), what the backward recomputes, and both graphs
    Partition,
    /// the cpu backend's loop nest of each kernel group
    Loops,
    /// the Cranelift IR of each generated kernel
    Clif,
    /// the C tier's source of each generated kernel (full-width vectors, `cc -O3`)
    C,
    /// the CUDA C of each kernel group with a loop nest
    Cuda,
    /// the PTX NVRTC makes of that CUDA C (needs NVRTC: see scripts/fetch-cuda-tools.sh)
    Ptx,
}

impl Stage {
    /// The stage's name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Traced => "traced",
            Stage::Decomposed => "decomposed",
            Stage::Optimized => "optimized",
            Stage::Scheduled => "scheduled",
            Stage::Grad => "grad",
            Stage::Partition => "partition",
            Stage::Loops => "loops",
            Stage::Clif => "clif",
            Stage::C => "c",
            Stage::Cuda => "cuda",
            Stage::Ptx => "ptx",
        }
    }
}

/// A shape given on the command line (`8x1024`).
#[derive(Clone, Debug)]
pub struct ShapeArg(pub Vec<usize>);

fn parse_shape(s: &str) -> Result<ShapeArg, String> {
    s.split(['x', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{d}` is not a size in `{s}` (expected e.g. 8x1024)"))
        })
        .collect::<Result<Vec<usize>, String>>()
        .map(ShapeArg)
}

pub(crate) fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, size) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=SIZE, got `{s}`"))?;
    let size = size
        .parse()
        .map_err(|_| format!("`{size}` is not a size"))?;
    Ok((name.to_string(), size))
}

/// A failure of a command, printed as `error: ...`.
pub type CliError = Box<dyn std::error::Error>;

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Dump {
            file,
            model,
            stage,
            shape,
            dynamic,
        } => match (file, model) {
            (Some(file), _) => dump::dump(&file, stage),
            (None, Some(model)) => {
                dump::dump_model(&model, stage, shape.as_ref().map(|s| &s.0[..]), dynamic)
            }
            (None, None) => Err("give a .kir file or --model NAME".into()),
        },
        Command::Run(args) => run::run(&args),
        Command::Grad(args) => run::grad(&args),
        Command::Demo => demo::demo(),
        Command::Fuzz(args) => fuzz::fuzz(&args),
        Command::Opt { file, passes } => dump::opt(&file, &passes),
        Command::Bench(args) => Ok(bench::bench(&args)?),
        Command::Train(args) => train::train(&args),
        Command::Embed {
            texts,
            compile,
            json,
        } => embed::embed(&texts, compile, json.as_deref()),
    }
}

/// Reads and parses a .kir file; parse errors are prefixed with the file name.
pub fn read_module(file: &std::path::Path) -> Result<Vec<kiln::Graph>, CliError> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    kiln::ir::text::parse_module(&text).map_err(|e| format!("{}:{e}", file.display()).into())
}

/// Serialises this binary's tests that allocate tensors. The allocator's counters are
/// process-wide, and the bench tests read their peaks: a tensor another test holds or frees
/// meanwhile moves the baseline (a concurrent test once freed enough between the baseline and
/// the call to make a compiled peak read 0). Every test here that allocates tensors holds it.
#[cfg(test)]
pub(crate) fn tensor_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // a failed test poisons the lock; the others still run, one at a time
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
