//! `KILN_LOGS=code` logging of compiled kernels. The environment is read by the frontend,
//! which installs a `tracing` subscriber for the categories `KILN_LOGS` names; here a
//! category is on when the current subscriber wants its target.

/// True when events with target `kiln::code` are wanted (`KILN_LOGS=code`, or a subscriber
/// of the program's own that enables the target).
pub fn code() -> bool {
    tracing::enabled!(target: "kiln::code", tracing::Level::INFO)
}
