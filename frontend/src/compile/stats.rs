//! The counters a compiled function keeps, apart from the cache that fills them so that
//! reports (`explain`) read them without depending on the cache.

/// Counters of a compiled function, for tests and reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileStats {
    /// calls made
    pub calls: u64,
    /// calls answered by an entry's compiled graph without tracing
    pub cache_hits: u64,
    /// times the function ran under the tracer
    pub traces: u64,
    /// graphs handed to the backend's compiler (whole entries and break segments)
    pub compiles: u64,
    /// cache entries now held
    pub entries: usize,
    /// entries made because the guards of every existing entry failed
    pub recompiles: u64,
    /// graph breaks seen over all traces
    pub graph_breaks: u64,
    /// why the function runs eagerly, once the cache limit was hit
    pub eager_fallback: Option<String>,
}
