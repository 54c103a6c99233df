//! `kiln fuzz`: the differential fuzzer's command line (see [`kiln::fuzz`]). Graph `i` of a
//! run is built from the recipe drawn from seed `S + i`, so `--seed S` and the graph
//! number reproduce any graph.

use super::CliError;
use kiln::fuzz::minify::minify;
use kiln::fuzz::{check_graph, regression, CheckOptions, Executor, Outcome};
use kiln::ir::gen::{build, Recipe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which compiled backends `kiln fuzz` compares with eager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FuzzBackend {
    /// the cpu backend fused and unfused (Cranelift code), the C tier and the automatic
    /// tier switch (every `--c-tier-every`th graph), and the interpreter backend
    Cpu,
    /// the cuda backend (the emulated device unless `KILN_CUDA_DEVICE` is set), small graphs
    Cuda,
    /// both
    All,
}

/// The options of `kiln fuzz`.
#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// how long to generate graphs
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// at most this many graphs (default: as many as the time allows)
    #[arg(long)]
    pub graphs: Option<u64>,
    /// the first graph's seed
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// the compiled backends to compare with eager
    #[arg(long, value_enum, default_value_t = FuzzBackend::Cpu)]
    pub backend: FuzzBackend,
    /// compare gradients too (the sum of the first output, through compiled training)
    #[arg(long)]
    pub grad: bool,
    /// check the C tier (every kernel built by the C compiler) and the automatic switch to
    /// it on every this many graphs (0: never): each kernel is a C compiler run
    #[arg(long, default_value_t = 8)]
    pub c_tier_every: u64,
    /// the most candidate ops per graph
    #[arg(long, default_value_t = 12)]
    pub max_steps: usize,
    /// where minimised divergences are written
    #[arg(long, default_value = "tests/regressions")]
    pub regressions: PathBuf,
    /// report divergences without minimising or writing them
    #[arg(long)]
    pub no_minify: bool,
    /// instead of generating graphs, check these regression files (`.kir` files that
    /// `kiln fuzz` wrote, or folders of them) again, as the test suite does
    #[arg(long, num_args = 1..)]
    pub replay: Vec<PathBuf>,
}

/// Checks of one divergence's minimisation at most.
const MINIFY_BUDGET: usize = 400;
/// A cuda check (emulated: one g++ run per launch) on every this many graphs only.
const CUDA_EVERY: u64 = 16;

/// Runs the command.
pub fn fuzz(a: &FuzzArgs) -> Result<(), CliError> {
    if !a.replay.is_empty() {
        return replay(&a.replay);
    }
    let cuda = matches!(a.backend, FuzzBackend::Cuda | FuzzBackend::All);
    if cuda {
        use_emulated_cuda_unless_set();
    }
    let cpu: &[Executor] = match a.backend {
        FuzzBackend::Cuda => &[],
        _ => &[Executor::Cpu, Executor::CpuUnfused, Executor::Interp],
    };
    // panics are caught and reported as divergences: keep their messages off stderr
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let limit = Duration::from_secs_f64(a.seconds.max(0.0));
    let (mut graphs, mut skipped, mut runs, mut found) = (0u64, 0u64, 0usize, Vec::new());
    while start.elapsed() < limit && a.graphs.is_none_or(|n| graphs < n) {
        let seed = a.seed.wrapping_add(graphs);
        let recipe = Recipe::random(seed, a.max_steps, true, true);
        let mut executors = cpu.to_vec();
        if !cpu.is_empty() && a.c_tier_every > 0 && seed % a.c_tier_every == 0 {
            executors.extend([Executor::CpuC, Executor::CpuTiered]);
        }
        if cuda && (cpu.is_empty() || seed % CUDA_EVERY == 0) {
            executors.push(Executor::Cuda);
        }
        let opts = CheckOptions {
            executors,
            cases: CheckOptions::default_cases(seed),
            grad: a.grad,
            sabotage: None,
        };
        let g = build(&recipe);
        graphs += 1;
        match check_graph(&g, &opts) {
            Outcome::Agree { runs: r } => runs += r,
            Outcome::Skipped => skipped += 1,
            Outcome::Diverged(d) => {
                eprintln!("graph {seed}: {d}");
                let origin = format!(
                    "kiln fuzz --seed {seed} --graphs 1{}{}",
                    if cuda { " --backend cuda" } else { "" },
                    if a.grad { " --grad" } else { "" }
                );
                if a.no_minify {
                    found.push(format!("graph {seed}: {d}"));
                    continue;
                }
                let (_, small, d) = minify(&recipe, &d, &opts, MINIFY_BUDGET);
                let name = format!("fuzz_{}_{seed}", d.executor.name().replace('-', "_"));
                let path = regression::write(&a.regressions, &name, &small, &d, &origin)?;
                eprintln!(
                    "  minimised to {} nodes: {}",
                    small.nodes().count(),
                    path.display()
                );
                found.push(format!("graph {seed}: {d} ({})", path.display()));
            }
        }
    }
    std::panic::set_hook(hook);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "kiln fuzz: {graphs} graphs in {secs:.1} s ({:.1} graphs/s), {runs} compiled runs compared, {skipped} skipped (eager rejected every input), {} divergences",
        graphs as f64 / secs.max(1e-9),
        found.len()
    );
    for f in &found {
        println!("  {f}");
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!("{} divergences", found.len()).into())
    }
}

/// The cuda executor runs on the emulated device unless `KILN_CUDA_DEVICE` names one.
fn use_emulated_cuda_unless_set() {
    if std::env::var_os("KILN_CUDA_DEVICE").is_none() {
        std::env::set_var("KILN_CUDA_DEVICE", "emulated");
    }
}

/// `kiln fuzz --replay`: checks each regression file (or each `.kir` file of a folder)
/// again; an error when one still diverges.
fn replay(paths: &[PathBuf]) -> Result<(), CliError> {
    use_emulated_cuda_unless_set();
    let mut cases = Vec::new();
    for p in paths {
        if p.is_dir() {
            cases.extend(regression::read_dir(p)?);
        } else {
            cases.push(regression::read(p)?);
        }
    }
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|r| {
            let result = r.check();
            match &result {
                Ok(()) => println!("agrees: {}", r.path.display()),
                Err(e) => println!("DIVERGES: {e}"),
            }
            result.err()
        })
        .collect();
    std::panic::set_hook(hook);
    println!(
        "kiln fuzz --replay: {} files, {} diverge",
        cases.len(),
        failures.len()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} regression files diverge",
            failures.len(),
            cases.len()
        )
        .into())
    }
}
