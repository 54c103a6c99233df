//! Whether the passes' log categories are on. `KILN_LOGS` is read by the frontend, which
//! installs a `tracing` subscriber for the categories it names; here a category is on when
//! the current subscriber wants its target (`kiln::passes`, `kiln::rules`).

/// Each pass's name, time and node counts, and the e-graph's phases (`KILN_LOGS=passes`).
pub fn passes() -> bool {
    tracing::enabled!(target: "kiln::passes", tracing::Level::INFO)
}

/// The rewrite rules that fired in each optimisation (`KILN_LOGS=rules`).
pub fn rules() -> bool {
    tracing::enabled!(target: "kiln::rules", tracing::Level::INFO)
}
