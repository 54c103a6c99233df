//! [`CompiledFn`]: a function wrapped by [`crate::compile`], with its cache of compiled
//! entries, their guards, recompiles, automatic dynamic shapes and the eager fallback.
//!
//! A call checks the cache entries' guards in order. An entry made from a trace without
//! graph breaks holds one compiled graph: a hit runs it without calling the function. An
//! entry whose trace had breaks re-runs the function under the tracer on every call (the
//! code between graphs must run), and each graph segment is compiled once, found again by
//! its text. A miss traces the function and compiles a new entry; past `cache_limit`
//! entries the function runs eagerly from then on, with one warning.

use super::args::{TensorArgs, TensorOutputs};
use super::backend::Executable;
use super::dynamic::{generalize, same_as_instantiated};
use super::explain::ExplainReport;
use super::functional::{write_back, WholeEffects};
use super::guards::{GuardFailure, Guards, TensorGuard};
use super::lazy;
use super::logs;
use super::repro;
use super::split_training::{assign_segments, SplitTraining, Trainer};
use super::stats::CompileStats;
use super::tracer::{GraphBreak, SegmentRunner, TraceEnd, Tracer};
use super::training::Training;
use super::{CompileOptions, Dynamic};
use crate::error::{Error, Result};
use crate::tensor::Repr;
use crate::Tensor;
use kiln_ir::Graph;
use kiln_runtime::CpuTensor;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The compiled form an entry holds.
enum EntryKind {
    /// one graph for the whole function (inputs: the arguments, then `params`)
    Whole {
        graph: Graph,
        exe: Arc<dyn Executable>,
        params: Vec<Tensor>,
        symbolic: bool,
        /// for inputs that require grad: the compiled forward and backward (`exe` is then
        /// not run)
        training: Option<Arc<Trainer>>,
        /// in-place updates written back, gradients set, `.grad` inputs fetched
        effects: Box<WholeEffects>,
    },
    /// the function breaks into several graphs: it re-runs under the tracer on each call;
    /// `eager_grad`: gradients are needed, which the segments do not record, so it runs
    /// eagerly (with autograd) instead
    Stepwise { eager_grad: bool },
}

struct Entry {
    guards: Guards,
    kind: EntryKind,
    /// for a symbolic entry: symbol sizes checked (true) or refuted (false) by a trace
    verified: Mutex<HashMap<Vec<usize>, bool>>,
}

#[derive(Default)]
struct CacheState {
    entries: Vec<Arc<Entry>>,
    dynamic: BTreeSet<(usize, usize)>,
    fallback: Option<String>,
    last_graphs: Vec<Graph>,
    last_breaks: Vec<GraphBreak>,
}

/// The state shared by all calls (and threads) of one compiled function.
pub(crate) struct Shared {
    opts: CompileOptions,
    state: Mutex<CacheState>,
    compile_lock: Mutex<()>,
    segments: Mutex<HashMap<String, Arc<dyn Executable>>>,
    calls: AtomicU64,
    hits: AtomicU64,
    traces: AtomicU64,
    compiles: AtomicU64,
    recompiles: AtomicU64,
    breaks: AtomicU64,
}

impl SegmentRunner for Shared {
    fn run_segment(&self, g: &Graph, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        let key = g.to_string();
        let cached = self.segments.lock().get(&key).cloned();
        let exe = match cached {
            Some(exe) => exe,
            None => {
                logs::log_graph(g);
                let exe: Arc<dyn Executable> = Arc::from(self.opts.backend.compile(g, &self.opts)?);
                self.compiles.fetch_add(1, Ordering::Relaxed);
                let mut segs = self.segments.lock();
                if segs.len() >= SEGMENT_CACHE_LIMIT {
                    segs.clear();
                }
                segs.insert(key, exe.clone());
                exe
            }
        };
        exe.run(inputs)
    }
}

/// At most this many break segments are kept compiled per function.
const SEGMENT_CACHE_LIMIT: usize = 256;

/// A symbolic entry remembers at most this many checked size tuples.
const VERIFIED_LIMIT: usize = 1024;

/// The function a [`CompiledFn`] wraps.
type BoxedFn<'f, A, O> = Box<dyn Fn(&A) -> Result<O> + Send + Sync + 'f>;

/// The size bound to each symbol by a passing guard check.
pub(crate) type Bindings = Vec<(Arc<str>, usize)>;

/// A function compiled by [`crate::compile`]: call it like the function with
/// [`CompiledFn::call`]. It is `Send + Sync`; concurrent calls are safe and each signature
/// is compiled once.
pub struct CompiledFn<'f, A: ?Sized + TensorArgs, O: TensorOutputs> {
    f: BoxedFn<'f, A, O>,
    shared: Arc<Shared>,
}

/// What one lookup found: an entry whose guards passed (with its symbol sizes), and the
/// failure of every entry whose guards did not.
struct Lookup {
    hits: Vec<(Arc<Entry>, Bindings)>,
    failures: Vec<(Arc<Entry>, GuardFailure)>,
}

impl<'f, A: ?Sized + TensorArgs, O: TensorOutputs> CompiledFn<'f, A, O> {
    pub(crate) fn new(
        f: impl Fn(&A) -> Result<O> + Send + Sync + 'f,
        opts: CompileOptions,
    ) -> CompiledFn<'f, A, O> {
        let dynamic: BTreeSet<(usize, usize)> = opts.mark_dynamic.iter().copied().collect();
        CompiledFn {
            f: Box::new(f),
            shared: Arc::new(Shared {
                opts,
                state: Mutex::new(CacheState {
                    dynamic,
                    ..CacheState::default()
                }),
                compile_lock: Mutex::new(()),
                segments: Mutex::new(HashMap::new()),
                calls: AtomicU64::new(0),
                hits: AtomicU64::new(0),
                traces: AtomicU64::new(0),
                compiles: AtomicU64::new(0),
                recompiles: AtomicU64::new(0),
                breaks: AtomicU64::new(0),
            }),
        }
    }

    /// The options it was compiled with.
    pub fn options(&self) -> &CompileOptions {
        &self.shared.opts
    }

    /// Calls the function: from a cache entry when its guards pass, else by tracing and
    /// compiling a new entry (or eagerly, past the cache limit). Results equal eager ones.
    pub fn call(&self, args: &A) -> Result<O> {
        if lazy::is_tracing() {
            // called from inside another traced function: inline it into that trace
            return (self.f)(args);
        }
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        let flat = args.flatten();
        for t in &flat {
            if t.is_cuda() {
                return Err(crate::error::invalid(
                    "compile",
                    t.shape(),
                    super::tracer::CUDA_ARGUMENTS,
                ));
            }
            t.real()?;
        }
        loop {
            if self.shared.state.lock().fallback.is_some() {
                return (self.f)(args);
            }
            let found = self.lookup(&flat);
            if let Some(out) = self.try_hits(args, &flat, &found.hits)? {
                return Ok(out);
            }
            // A miss: compile under the compile lock, unless another thread did meanwhile.
            let _compiling = self.shared.compile_lock.lock();
            let again = self.lookup(&flat);
            if again.hits.len() > found.hits.len() {
                continue;
            }
            return self.miss(args, &flat, &again.failures, None);
        }
    }

    fn lookup(&self, flat: &[Tensor]) -> Lookup {
        let st = self.shared.state.lock();
        let mut hits = Vec::new();
        let mut failures = Vec::new();
        for e in &st.entries {
            match e.check(flat) {
                Ok(b) => hits.push((e.clone(), b)),
                Err(f) => failures.push((e.clone(), f)),
            }
        }
        Lookup { hits, failures }
    }

    /// Runs the first entry among `hits` that applies; `None` when none does.
    fn try_hits(
        &self,
        args: &A,
        flat: &[Tensor],
        hits: &[(Arc<Entry>, Bindings)],
    ) -> Result<Option<O>> {
        for (entry, bindings) in hits {
            match &entry.kind {
                EntryKind::Stepwise { eager_grad: true } => {
                    self.shared.hits.fetch_add(1, Ordering::Relaxed);
                    return (self.f)(args).map(Some);
                }
                EntryKind::Stepwise { eager_grad: false } => {
                    self.shared.hits.fetch_add(1, Ordering::Relaxed);
                    let end = self.trace(args, flat)?;
                    return self.complete(args, end, flat).map(Some);
                }
                EntryKind::Whole {
                    graph,
                    exe,
                    params,
                    symbolic,
                    training,
                    effects,
                } => {
                    if *symbolic {
                        let key: Vec<usize> = bindings.iter().map(|(_, n)| *n).collect();
                        let known = entry.verified.lock().get(&key).copied();
                        match known {
                            Some(true) => {}
                            Some(false) => continue,
                            None => {
                                // New sizes: check that the function traces to this graph
                                // (once: another thread may have checked them meanwhile).
                                let _compiling = self.shared.compile_lock.lock();
                                match entry.verified.lock().get(&key) {
                                    Some(false) => continue,
                                    Some(true) => {
                                        self.shared.hits.fetch_add(1, Ordering::Relaxed);
                                        return run_whole(
                                            exe.as_ref(),
                                            training,
                                            flat,
                                            params,
                                            effects,
                                        )
                                        .map(Some);
                                    }
                                    None => {}
                                }
                                let end = self.trace(args, flat)?;
                                let ok = matches!(&end, TraceEnd::Whole { graph: g, params: p, .. }
                                    if same_as_instantiated(graph, bindings, g)
                                        && same_params(params, p, effects));
                                {
                                    let mut v = entry.verified.lock();
                                    if v.len() >= VERIFIED_LIMIT {
                                        v.clear();
                                    }
                                    v.insert(key, ok);
                                }
                                if !ok {
                                    return self.miss(args, flat, &[], Some(end)).map(Some);
                                }
                            }
                        }
                    }
                    self.shared.hits.fetch_add(1, Ordering::Relaxed);
                    return run_whole(exe.as_ref(), training, flat, params, effects).map(Some);
                }
            }
        }
        Ok(None)
    }

    /// Traces one call of the function; the graphs and breaks are kept for `explain`.
    fn trace(&self, args: &A, flat: &[Tensor]) -> Result<TraceEnd> {
        self.shared.traces.fetch_add(1, Ordering::Relaxed);
        let runner: Arc<dyn SegmentRunner> = self.shared.clone();
        let (tracer, lazy_args) = Tracer::start(
            &self.shared.opts.name,
            self.shared.opts.fullgraph,
            runner,
            flat,
        )?;
        let owned = args.rebuild(lazy_args);
        let result = {
            let _current = lazy::enter(tracer.clone());
            (self.f)(owned.borrow())
        };
        let outputs = result?.flatten();
        let end = tracer.finish(&outputs)?;
        let (mut graphs, breaks) = tracer.report();
        if let TraceEnd::Whole { graph, .. } = &end {
            graphs.push(graph.clone());
        }
        self.shared
            .breaks
            .fetch_add(breaks.len() as u64, Ordering::Relaxed);
        let mut st = self.shared.state.lock();
        st.last_graphs = graphs;
        st.last_breaks = breaks;
        Ok(end)
    }

    /// Finishes a traced call without making an entry: after breaks everything has run;
    /// a trace without breaks runs its graph as a segment (compiled once, by its text).
    fn complete(&self, args: &A, end: TraceEnd, flat: &[Tensor]) -> Result<O> {
        match end {
            TraceEnd::Done {
                needs_grad: true, ..
            } => (self.f)(args),
            TraceEnd::Done { outputs, .. } => Ok(O::unflatten(outputs)),
            TraceEnd::Whole {
                graph,
                params,
                effects,
            } => {
                // when gradients are needed: forward and backward compiled as an entry's
                // would be, without keeping them
                if let Some(t) = build_training(&graph, flat, &params, &effects, &self.shared.opts)?
                {
                    self.shared
                        .compiles
                        .fetch_add(t.graph_pairs().len() as u64 * 2, Ordering::Relaxed);
                    return run_whole(&NotRun, &Some(t), flat, &params, &effects);
                }
                run_whole(
                    &SegmentExe(&self.shared, &graph),
                    &None,
                    flat,
                    &params,
                    &effects,
                )
            }
        }
    }

    /// Makes a new entry (the compile lock is held by the caller).
    fn miss(
        &self,
        args: &A,
        flat: &[Tensor],
        failures: &[(Arc<Entry>, GuardFailure)],
        pre_traced: Option<TraceEnd>,
    ) -> Result<O> {
        let opts = &self.shared.opts;
        let dynamic = {
            let mut st = self.shared.state.lock();
            if st.fallback.is_some() {
                drop(st);
                return match pre_traced {
                    Some(end) => self.complete(args, end, flat),
                    None => (self.f)(args),
                };
            }
            if st.entries.len() >= opts.cache_limit {
                let why = failures
                    .last()
                    .map(|(_, f)| f.to_string())
                    .unwrap_or_else(|| "no entry's guards passed".into());
                let msg = format!(
                    "kiln: @{} reached cache_limit ({}); running it eagerly from now on. \
                     Last guard failure: {why}",
                    opts.name, opts.cache_limit
                );
                eprintln!("{msg}");
                tracing::warn!(target: "kiln::recompiles", "{msg}");
                st.fallback = Some(msg);
                drop(st);
                return match pre_traced {
                    Some(end) => self.complete(args, end, flat),
                    None => (self.f)(args),
                };
            }
            if opts.dynamic == Dynamic::Auto {
                for (_, f) in failures {
                    st.dynamic
                        .extend(f.changed_dims.iter().filter(|(a, _)| *a < flat.len()));
                }
            }
            let mut dynamic = st.dynamic.clone();
            match opts.dynamic {
                Dynamic::Never => dynamic.clear(),
                Dynamic::Always => {
                    for (i, t) in flat.iter().enumerate() {
                        dynamic.extend((0..t.rank()).map(|d| (i, d)));
                    }
                }
                Dynamic::Auto => {}
            }
            if let Some((_, f)) = failures.last() {
                if !st.entries.is_empty() {
                    let dims: Vec<String> = dynamic
                        .iter()
                        .map(|(a, d)| format!("arg{a} dim {d}"))
                        .collect();
                    let note = if dims.is_empty() {
                        String::new()
                    } else {
                        format!(" (dynamic: {})", dims.join(", "))
                    };
                    logs::log_recompile(&opts.name, f, &note);
                }
            }
            dynamic
        };
        let end = match pre_traced {
            Some(end) => end,
            None => self.trace(args, flat)?,
        };
        let layout = opts.backend.layout_sensitive();
        // The entry is kept even when running it fails below: a data-dependent runtime
        // error (an index out of range) is the call's, not the graph's.
        let (entry, out) = match end {
            TraceEnd::Whole {
                graph,
                params,
                effects,
            } => {
                let n_args = flat.len();
                // The latest entry that failed only on sizes is a second sample of the
                // same program: sizes equal in both are constants, not symbols.
                let previous = failures.iter().rev().find_map(|(e, f)| match &e.kind {
                    EntryKind::Whole { graph, .. } if !f.changed_dims.is_empty() => Some(graph),
                    _ => None,
                });
                let general = if dynamic.is_empty() {
                    None
                } else {
                    generalize(&graph, n_args, &dynamic, previous)
                };
                let mut symbolic = general.is_some();
                // what a failing compile writes to KILN_REPRO_DIR: the graph's inputs
                let repro_inputs: Vec<&Tensor> = flat.iter().chain(&params).collect();
                // the training graphs of these sizes, or the graph and inputs kept on failure
                let static_training = |graph: &Graph| {
                    repro::on_failure(
                        build_training(graph, flat, &params, &effects, opts),
                        graph,
                        &repro_inputs,
                        opts.backend,
                    )
                };
                let (graph, training) = match general {
                    Some(general) => {
                        match build_training(&general, flat, &params, &effects, opts) {
                            Ok(training) => (general, training),
                            // a derivative that needs a size the symbols hide (a count
                            // over a symbolic dim, a slice of one): this shape's own graph
                            Err(e) => {
                                tracing::info!(
                                    target: "kiln::recompiles",
                                    "@{}: training graph over symbolic sizes failed ({e}); compiling these sizes statically",
                                    opts.name
                                );
                                symbolic = false;
                                let training = static_training(&graph)?;
                                (graph, training)
                            }
                        }
                    }
                    None => {
                        let training = static_training(&graph)?;
                        (graph, training)
                    }
                };
                logs::log_graph(&graph);
                let exe: Arc<dyn Executable> = match &training {
                    // the training forward runs instead
                    Some(t) => {
                        self.shared
                            .compiles
                            .fetch_add(t.graph_pairs().len() as u64 * 2, Ordering::Relaxed);
                        Arc::new(NotRun)
                    }
                    None => {
                        self.shared.compiles.fetch_add(1, Ordering::Relaxed);
                        Arc::from(repro::on_failure(
                            opts.backend.compile(&graph, opts),
                            &graph,
                            &repro_inputs,
                            opts.backend,
                        )?)
                    }
                };
                let mut arg_guards = Vec::with_capacity(n_args);
                for ((name, id), t) in graph.inputs().iter().zip(flat) {
                    arg_guards.push(TensorGuard {
                        name: name.clone(),
                        dtype: t.dtype(),
                        dims: graph.node(*id).ty.shape.dims().to_vec(),
                        contiguous: layout.then(|| t.is_contiguous()),
                        requires_grad: t.requires_grad(),
                    });
                }
                let param_guards = graph.inputs()[n_args..]
                    .iter()
                    .zip(&params)
                    .map(|((name, _), p)| TensorGuard::exact(name.clone(), p, layout))
                    .collect();
                let mut params = params;
                // a `.grad` input is fetched from its leaf on every call: keep no tensor of
                // this one alive (its guard above holds its type)
                for (i, _) in &effects.grad_slots {
                    params[*i] = Tensor::zeros(&[0], params[*i].dtype())?;
                }
                let guards = Guards {
                    args: arg_guards,
                    params: param_guards,
                    grad_enabled: crate::autograd::is_grad_enabled(),
                };
                let verified = if symbolic {
                    let sizes = guards
                        .check(
                            flat,
                            &resolve_params(&params, &effects).map_err(|f| Error::Compile {
                                function: opts.name.clone(),
                                reason: format!("a gradient read by the trace is gone: {f}"),
                            })?,
                        )
                        .map_err(|f| Error::Compile {
                            function: opts.name.clone(),
                            reason: format!("the generalised guards reject their own trace: {f}"),
                        })?
                        .into_iter()
                        .map(|(_, n)| n)
                        .collect();
                    HashMap::from([(sizes, true)])
                } else {
                    HashMap::new()
                };
                let entry = Entry {
                    guards,
                    kind: EntryKind::Whole {
                        graph,
                        exe,
                        params,
                        symbolic,
                        training,
                        effects,
                    },
                    verified: Mutex::new(verified),
                };
                (entry, None)
            }
            TraceEnd::Done {
                outputs,
                needs_grad,
            } => {
                let guards = Guards {
                    args: flat
                        .iter()
                        .enumerate()
                        .map(|(i, t)| TensorGuard::exact(format!("arg{i}"), t, layout))
                        .collect(),
                    params: Vec::new(),
                    grad_enabled: crate::autograd::is_grad_enabled(),
                };
                let entry = Entry {
                    guards,
                    kind: EntryKind::Stepwise {
                        eager_grad: needs_grad,
                    },
                    verified: Mutex::new(HashMap::new()),
                };
                let out = if needs_grad {
                    logs::log_break(
                        &opts.name,
                        &"gradients are needed and the function breaks into several \
                          graphs: it runs eagerly, with autograd",
                    );
                    (self.f)(args)?
                } else {
                    O::unflatten(outputs)
                };
                (entry, Some(out))
            }
        };
        let entry = Arc::new(entry);
        {
            let mut st = self.shared.state.lock();
            if !st.entries.is_empty() {
                self.shared.recompiles.fetch_add(1, Ordering::Relaxed);
            }
            logs::log_guards(&opts.name, st.entries.len(), &entry.guards);
            st.entries.push(entry.clone());
        }
        match (out, &entry.kind) {
            (Some(out), _) => Ok(out),
            (
                None,
                EntryKind::Whole {
                    exe,
                    params,
                    training,
                    effects,
                    ..
                },
            ) => run_whole(exe.as_ref(), training, flat, params, effects),
            (None, EntryKind::Stepwise { .. }) => unreachable!("a stepwise trace has its outputs"),
        }
    }

    /// Traces one call on `args` without compiling and returns the captured graphs: the
    /// whole function's graph (not run; over symbols when the options make every dim
    /// dynamic), or, when the function breaks, the segments (which ran, as they must).
    ///
    /// A graph with side effects (in-place updates, a traced `backward()`, `.grad` set)
    /// runs once, as the call would (torch's `explain` runs the function too): its updates
    /// land and no leaf is left holding a gradient that was never computed.
    pub fn capture(&self, args: &A) -> Result<Vec<Graph>> {
        let flat = args.flatten();
        let end = self.trace(args, &flat)?;
        let mut general = None;
        if let TraceEnd::Whole { graph, .. } = &end {
            if self.shared.opts.dynamic == Dynamic::Always {
                let all: BTreeSet<(usize, usize)> = flat
                    .iter()
                    .enumerate()
                    .flat_map(|(i, t)| (0..t.rank()).map(move |d| (i, d)))
                    .collect();
                general = generalize(graph, flat.len(), &all, None);
            }
        }
        if let TraceEnd::Whole { effects, .. } = &end {
            if !effects.writes.is_empty() || !effects.set_grads.is_empty() {
                self.complete(args, end, &flat)?;
            }
        }
        if let Some(g) = general {
            logs::log_graph(&g);
            return Ok(vec![g]);
        }
        let graphs = self.shared.state.lock().last_graphs.clone();
        graphs.iter().for_each(logs::log_graph);
        Ok(graphs)
    }

    /// The counters so far.
    pub fn stats(&self) -> CompileStats {
        let s = &self.shared;
        let st = s.state.lock();
        CompileStats {
            calls: s.calls.load(Ordering::Relaxed),
            cache_hits: s.hits.load(Ordering::Relaxed),
            traces: s.traces.load(Ordering::Relaxed),
            compiles: s.compiles.load(Ordering::Relaxed),
            entries: st.entries.len(),
            recompiles: s.recompiles.load(Ordering::Relaxed),
            graph_breaks: s.breaks.load(Ordering::Relaxed),
            eager_fallback: st.fallback.clone(),
        }
    }

    /// The index of the cache entry whose guards `args` pass (what a call would use), or
    /// `None` (a call would trace and compile). Runs exactly the guard checks of a call.
    pub fn entry_for(&self, args: &A) -> Option<usize> {
        let flat = args.flatten();
        let st = self.shared.state.lock();
        st.entries.iter().position(|e| e.check(&flat).is_ok())
    }

    /// The guards of each cache entry, in lookup order.
    pub fn guards(&self) -> Vec<Guards> {
        let st = self.shared.state.lock();
        st.entries.iter().map(|e| e.guards.clone()).collect()
    }

    /// The forward and backward graphs of each entry compiled for gradients, in lookup
    /// order (what `explain` reports as partitions).
    pub fn training_graphs(&self) -> Vec<(Graph, Graph)> {
        let st = self.shared.state.lock();
        st.entries
            .iter()
            .flat_map(|e| match &e.kind {
                EntryKind::Whole {
                    training: Some(t), ..
                } => t.graph_pairs(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// The compiled graph of each entry made from a trace without breaks.
    pub fn graphs(&self) -> Vec<Graph> {
        let st = self.shared.state.lock();
        st.entries
            .iter()
            .filter_map(|e| match &e.kind {
                EntryKind::Whole { graph, .. } => Some(graph.clone()),
                EntryKind::Stepwise { .. } => None,
            })
            .collect()
    }

    /// Compiles dim `dim` of argument `arg` as a symbol from the next compile on (like
    /// `torch._dynamo.mark_dynamic`).
    pub fn mark_dynamic(&self, arg: usize, dim: usize) {
        self.shared.state.lock().dynamic.insert((arg, dim));
    }

    /// Drops every cache entry (and the eager fallback), e.g. after swapping a captured
    /// tensor for another one through interior mutability, which guards cannot see.
    pub fn reset(&self) {
        let mut st = self.shared.state.lock();
        st.entries.clear();
        st.fallback = None;
        st.dynamic = self.shared.opts.mark_dynamic.iter().copied().collect();
        self.shared.segments.lock().clear();
    }

    /// A report of the latest traced call: its graphs, its breaks, and every entry's
    /// guards.
    pub fn explain_last(&self) -> ExplainReport {
        let st = self.shared.state.lock();
        ExplainReport {
            name: self.shared.opts.name.clone(),
            graphs: st.last_graphs.clone(),
            breaks: st.last_breaks.clone(),
            guards: st.entries.iter().map(|e| e.guards.clone()).collect(),
            stats: None,
            partitions: st
                .entries
                .iter()
                .flat_map(|e| match &e.kind {
                    EntryKind::Whole {
                        training: Some(t), ..
                    } => t.reports(),
                    _ => Vec::new(),
                })
                .collect(),
            tiers: st
                .entries
                .iter()
                .flat_map(|e| match &e.kind {
                    EntryKind::Whole {
                        training: Some(t), ..
                    } => t.kernel_tiers(),
                    EntryKind::Whole { exe, .. } => exe.kernel_tiers(),
                    EntryKind::Stepwise { .. } => Vec::new(),
                })
                .chain(
                    self.shared
                        .segments
                        .lock()
                        .values()
                        .flat_map(|s| s.kernel_tiers()),
                )
                .collect(),
        }
    }
}

/// Runs a whole-function graph on the arguments and the entry's parameters (its forward,
/// recorded for autograd, when the entry was compiled for gradients).
fn run_whole<O: TensorOutputs>(
    exe: &dyn Executable,
    training: &Option<Arc<Trainer>>,
    flat: &[Tensor],
    params: &[Tensor],
    effects: &WholeEffects,
) -> Result<O> {
    let params = resolve_params(params, effects).map_err(|f| Error::Compile {
        function: "compiled".into(),
        reason: f.to_string(),
    })?;
    // checks of argument values the trace made (cross-entropy's target bounds): before
    // anything runs, so a failing call changes nothing
    for (i, check) in &effects.arg_checks {
        check(flat[*i].real()?)?;
    }
    let inputs: Vec<Tensor> = flat.iter().chain(&params).cloned().collect();
    let (mut outs, donated) = match training {
        Some(t) => (t.run(&inputs)?, vec![false; effects.writes.len()]),
        None => {
            let refs: Vec<&CpuTensor> = inputs.iter().map(|t| t.real()).collect::<Result<_>>()?;
            // updates computed into their tensors' memory where the backend can: no
            // buffer for the new value, no copy back; the one plan of the call reads the
            // arguments, so it may let go of lent ones after their last reader (only the
            // updated ones are read after it, and those are not let go of)
            let (outs, donated) = exe.run_releasing_lent(&refs, &effects.writes)?;
            (outs.into_iter().map(Tensor::from_cpu).collect(), donated)
        }
    };
    for (&(input, output), done) in effects.writes.iter().zip(donated) {
        if !done {
            write_back(inputs[input].real()?, outs[output].real()?)?;
        }
    }
    for (leaf, output) in &effects.set_grads {
        if let Some(m) = &leaf.grad_meta {
            *m.grad.lock() = output.map(|o| outs[o].detach());
        }
    }
    outs.truncate(effects.user_outputs);
    Ok(O::unflatten(outs))
}

/// An entry's parameters with each `.grad` input fetched from its leaf now; a missing
/// gradient is a guard failure.
fn resolve_params(
    params: &[Tensor],
    effects: &WholeEffects,
) -> std::result::Result<Vec<Tensor>, GuardFailure> {
    let mut out = params.to_vec();
    for (i, leaf) in &effects.grad_slots {
        out[*i] = leaf
            .grad_meta
            .as_ref()
            .and_then(|m| m.grad.lock().clone())
            .ok_or_else(|| GuardFailure {
                tensor: format!("p{}", i),
                reason: "the trace read a parameter's .grad, which is now None".into(),
                changed_dims: Vec::new(),
            })?;
    }
    Ok(out)
}

/// A whole graph run as a segment of the function (compiled once, found by its text).
struct SegmentExe<'a>(&'a Shared, &'a Graph);

impl Executable for SegmentExe<'_> {
    fn run(&self, inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        self.0.run_segment(self.1, inputs)
    }
}

impl Entry {
    /// Checks the entry's guards against a call's arguments (and its parameters, each
    /// `.grad` input fetched from its leaf), returning the symbols' sizes.
    fn check(&self, flat: &[Tensor]) -> std::result::Result<Bindings, GuardFailure> {
        match &self.kind {
            EntryKind::Whole {
                params, effects, ..
            } => {
                if let Some(reason) = effects.value_guards.iter().find_map(|g| g()) {
                    return Err(GuardFailure {
                        tensor: "*".into(),
                        reason,
                        changed_dims: Vec::new(),
                    });
                }
                if let Some(leaf) = effects.grad_absent.iter().find(|l| {
                    l.grad_meta
                        .as_ref()
                        .is_some_and(|m| m.grad.lock().is_some())
                }) {
                    return Err(GuardFailure {
                        tensor: format!("{:?}", leaf.shape()),
                        reason: "a parameter's .grad was None when traced and is set now \
                                 (the graph would not accumulate into it)"
                            .into(),
                        changed_dims: Vec::new(),
                    });
                }
                let params = resolve_params(params, effects)?;
                self.guards.check(flat, &params)
            }
            EntryKind::Stepwise { .. } => self.guards.check(flat, &[]),
        }
    }
}

/// True when two traces lifted the very same parameter tensors (same storage and layout),
/// `.grad` inputs aside (fetched from their leaf on every call).
fn same_params(a: &[Tensor], b: &[Tensor], effects: &WholeEffects) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).enumerate().all(|(i, (x, y))| {
            effects.grad_slots.iter().any(|(j, _)| *j == i)
                || match (&x.repr, &y.repr) {
                    (Repr::Real(x), Repr::Real(y)) => {
                        x.shares_storage(y)
                            && x.offset() == y.offset()
                            && x.shape() == y.shape()
                            && x.strides() == y.strides()
                    }
                    _ => false,
                }
        })
}

/// An entry's plain executable when the entry runs its training forward instead.
struct NotRun;

impl Executable for NotRun {
    fn run(&self, _inputs: &[&CpuTensor]) -> Result<Vec<CpuTensor>> {
        Err(Error::Compile {
            function: "compiled".into(),
            reason: "internal: a training entry's inference graph was run".into(),
        })
    }
}

/// Per graph input (arguments, then parameters), whether it needs a gradient: grad mode
/// is on and the tensor requires grad.
fn grad_mask(flat: &[Tensor], params: &[Tensor]) -> Vec<bool> {
    let on = crate::autograd::is_grad_enabled();
    flat.iter()
        .chain(params)
        .map(|t| on && t.requires_grad())
        .collect()
}

/// The compiled forward and backward of `graph` when some input needs a gradient (and a
/// gradient can flow); `None` otherwise, when the plain graph serves.
fn build_training(
    graph: &Graph,
    flat: &[Tensor],
    params: &[Tensor],
    effects: &WholeEffects,
    opts: &CompileOptions,
) -> Result<Option<Arc<Trainer>>> {
    if effects.backward || !effects.outputs_need_grad {
        // the function differentiated itself (its graph holds the backward already), or
        // its outputs do not depend on what requires grad through ops recorded with grad
        // mode on (an optimiser step under `no_grad`)
        return Ok(None);
    }
    let wants = grad_mask(flat, params);
    if !wants.iter().any(|&w| w) {
        return Ok(None);
    }
    let hints = symbol_sizes(graph, flat, params);
    if let Some(split) = &opts.gradient_split {
        // arguments are in no bucket; each parameter in the one the split gives it
        let buckets: Vec<Option<usize>> = flat
            .iter()
            .map(|_| None)
            .chain(params.iter().map(|p| split.bucket_of(p)))
            .collect();
        let segment_of = assign_segments(graph, &buckets);
        if segment_of.iter().flatten().any(|&s| s > 0) {
            let s = SplitTraining::build(graph, &segment_of, &wants, hints, opts)?;
            return Ok(Some(Arc::new(Trainer::Split(s))));
        }
    }
    Ok(Training::build(graph, &wants, hints, opts)?.map(|t| Arc::new(Trainer::Whole(Arc::new(t)))))
}

/// The size each symbol of `graph` has in this call (to weigh the partition).
fn symbol_sizes(graph: &Graph, flat: &[Tensor], params: &[Tensor]) -> HashMap<Arc<str>, usize> {
    let mut out = HashMap::new();
    for ((_, id), t) in graph.inputs().iter().zip(flat.iter().chain(params)) {
        for (d, &n) in graph.node(*id).ty.shape.dims().iter().zip(t.shape()) {
            if let kiln_ir::Dim::Sym(s) = d {
                out.insert(s.clone(), n);
            }
        }
    }
    out
}
