//! Command-line parsing and dispatch for the `kiln` binary.

mod demo;
mod dump;
mod inputs;
mod run;

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
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse, verify and print a .kir file with every type inferred.
    Dump {
        /// the IR file
        file: PathBuf,
    },
    /// Run a graph of a .kir file on random or given inputs and print (or save) its outputs.
    Run {
        /// the IR file
        file: PathBuf,
        /// which graph of the file (default: the first)
        #[arg(long)]
        graph: Option<String>,
        /// seed of the random inputs
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// a safetensors file whose tensors are matched to inputs by name
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// write the outputs as out0, out1, ... to this safetensors file
        #[arg(long)]
        output: Option<PathBuf>,
        /// the executor
        #[arg(long, value_enum, default_value_t = Backend::Interp)]
        backend: Backend,
        /// size of a symbolic dim for random inputs, e.g. `--dim B=4` (repeatable)
        #[arg(long = "dim", value_parser = parse_dim)]
        dims: Vec<(String, usize)>,
    },
    /// Show kiln working: eager tensors, a graph in the text format, interpreter vs eager.
    Demo,
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
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
        Command::Dump { file } => dump::dump(&file),
        Command::Run {
            file,
            graph,
            seed,
            inputs,
            output,
            backend,
            dims,
        } => run::run(&run::RunArgs {
            file,
            graph,
            seed,
            inputs,
            output,
            backend,
            dims,
        }),
        Command::Demo => demo::demo(),
    }
}

/// Reads and parses a .kir file; parse errors are prefixed with the file name.
pub fn read_module(file: &std::path::Path) -> Result<Vec<kiln::Graph>, CliError> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    kiln::ir::text::parse_module(&text).map_err(|e| format!("{}:{e}", file.display()).into())
}
