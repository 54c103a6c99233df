//! `KILN_LOGS`: what the compiler prints as it works, like `TORCH_LOGS`.
//!
//! `KILN_LOGS=graphs,guards,recompiles,breaks,passes,code,rules,partition,tiers` (or `all`) turns categories on; each event
//! is a `tracing` event with target `kiln::<category>`. When the variable is set and the
//! program has no `tracing` subscriber, kiln installs one that writes to stderr.

use super::guards::{GuardFailure, Guards};
use kiln_ir::Graph;
use std::sync::OnceLock;

/// The log categories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogCategory {
    /// each captured graph, in the textual IR
    Graphs,
    /// each new cache entry's guards
    Guards,
    /// each recompile, with the guard that failed
    Recompiles,
    /// each graph break, with its reason and source line
    Breaks,
    /// each optimiser pass, with its time and node counts
    Passes,
    /// each kernel the cpu backend compiles, with its specialisation and compile time
    Code,
    /// the rewrite rules that fired in each optimisation, with their counts
    Rules,
    /// what each forward/backward partition saves and recomputes (compiled training)
    Partition,
    /// each kernel the C tier takes (or leaves on Cranelift), with why and how long it took
    Tiers,
}

impl LogCategory {
    const ALL: [LogCategory; 9] = [
        LogCategory::Graphs,
        LogCategory::Guards,
        LogCategory::Recompiles,
        LogCategory::Breaks,
        LogCategory::Passes,
        LogCategory::Code,
        LogCategory::Rules,
        LogCategory::Partition,
        LogCategory::Tiers,
    ];

    /// The name used in `KILN_LOGS`.
    pub fn name(self) -> &'static str {
        match self {
            LogCategory::Graphs => "graphs",
            LogCategory::Guards => "guards",
            LogCategory::Recompiles => "recompiles",
            LogCategory::Breaks => "breaks",
            LogCategory::Passes => "passes",
            LogCategory::Code => "code",
            LogCategory::Rules => "rules",
            LogCategory::Partition => "partition",
            LogCategory::Tiers => "tiers",
        }
    }
}

/// The categories named by a `KILN_LOGS` value (unknown names are ignored).
pub fn parse_log_spec(spec: &str) -> Vec<LogCategory> {
    let names: Vec<&str> = spec.split(',').map(str::trim).collect();
    LogCategory::ALL
        .into_iter()
        .filter(|c| names.contains(&c.name()) || names.contains(&"all"))
        .collect()
}

/// The categories `KILN_LOGS` names (read once: the only place kiln reads it). When any is
/// on and the program has no `tracing` subscriber, kiln installs one that writes those
/// categories' events (targets `kiln::<category>`) to stderr; the passes and code
/// generators ask the subscriber (`tracing::enabled!`) instead of the environment.
fn enabled_set() -> &'static [LogCategory] {
    static SET: OnceLock<Vec<LogCategory>> = OnceLock::new();
    SET.get_or_init(|| {
        let set = std::env::var("KILN_LOGS")
            .map(|s| parse_log_spec(&s))
            .unwrap_or_default();
        if !set.is_empty() && !tracing::dispatcher::has_been_set() {
            use tracing_subscriber::layer::SubscriberExt;
            let targets = tracing_subscriber::filter::Targets::new().with_targets(
                set.iter()
                    .map(|c| (format!("kiln::{}", c.name()), tracing::Level::INFO)),
            );
            let subscriber = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .without_time()
                .with_target(true)
                .finish()
                .with(targets);
            let _ = tracing::subscriber::set_global_default(subscriber);
        }
        set
    })
}

/// True when `KILN_LOGS` turns `c` on.
pub fn enabled(c: LogCategory) -> bool {
    enabled_set().contains(&c)
}

pub(crate) fn log_graph(g: &Graph) {
    if enabled(LogCategory::Graphs) {
        tracing::info!(target: "kiln::graphs", "captured graph\n{g}");
    }
}

pub(crate) fn log_guards(function: &str, entry: usize, guards: &Guards) {
    if enabled(LogCategory::Guards) {
        tracing::info!(target: "kiln::guards", "@{function} entry {entry}: {guards}");
    }
}

pub(crate) fn log_recompile(function: &str, failure: &GuardFailure, dynamic: &str) {
    if enabled(LogCategory::Recompiles) {
        tracing::info!(target: "kiln::recompiles", "@{function} recompiling: {failure}{dynamic}");
    }
}

pub(crate) fn log_break(function: &str, b: &dyn std::fmt::Display) {
    if enabled(LogCategory::Breaks) {
        tracing::info!(target: "kiln::breaks", "@{function} graph break: {b}");
    }
}

pub(crate) fn log_partition(function: &str, report: &kiln_passes::partition::PartitionReport) {
    if enabled(LogCategory::Partition) {
        tracing::info!(target: "kiln::partition", "@{function} forward/backward partition: {report}");
    }
}
