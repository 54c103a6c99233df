//! Tiering: a kernel starts on its Cranelift code; with the automatic policy it counts its
//! calls and time, and past the threshold it is queued for the C tier. Where the on-disk
//! cache holds objects, a new kernel first asks the background thread for its own (built
//! in this process or an earlier one, never compiled for this): found and checked, it runs
//! C code from about its first call. One background
//! thread builds queued kernels (C source, on-disk cache or the C compiler, load; one
//! build per source in the process, shared by kernels of the same source), checks
//! each once against its Cranelift code on the same inputs (`validate.rs`) and swaps the C
//! function in with one atomic store: calls already running finish on the code they
//! started with, the next calls take the new one. A kernel the C tier cannot take (no
//! compiler, a source it does not cover, a compile error, a mismatch) stays on Cranelift
//! for good, with a log line saying why.

use super::cache::Cache;
use super::compiler::{build_kernel, load_cached, CTierError, Compiler};
use super::source::{c_source, Lanes};
use super::validate::check_against;
use crate::cpu::emit::Spec;
use crate::cpu::jit::KernelFn;
use crate::loops::LoopNest;
use crate::options::TierPolicy;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Which code a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// the Cranelift code, counting calls toward the C tier (automatic policy)
    Counting,
    /// the Cranelift code, queued for (or being built by) the C tier
    Queued,
    /// the C tier's code
    C,
    /// the Cranelift code for good (Cranelift-only policy, or the C tier failed)
    Cranelift,
}

const COUNTING: u8 = 0;
const QUEUED: u8 = 1;
const C: u8 = 2;
const CRANELIFT: u8 = 3;

/// One specialisation of a loop nest, with the code it currently runs.
pub struct TieredFn {
    current: AtomicUsize,
    cranelift: KernelFn,
    state: AtomicU8,
    nanos: AtomicU64,
    calls: AtomicU64,
    threshold: u64,
    nest: LoopNest,
    spec: Spec,
    /// why the C tier did not take it, or how it was built
    note: Mutex<String>,
    /// when its C code was swapped in
    c_since: OnceLock<Instant>,
}

impl TieredFn {
    /// `cranelift`, the compiled code of `nest` at `spec`, under `spec`'s tier policy: the
    /// C-up-front policy builds the C kernel before returning (on failure the kernel stays
    /// on `cranelift`).
    pub fn new(cranelift: KernelFn, nest: &LoopNest, spec: &Spec) -> Arc<TieredFn> {
        // with objects in the cache, the automatic policy looks for this kernel's at once
        // (queued meanwhile: its calls run Cranelift code and do not count)
        let probe =
            spec.opts.tier == TierPolicy::Auto && Cache::has_entries(&cache_dir(&spec.opts));
        let state = match spec.opts.tier {
            TierPolicy::Auto if probe => QUEUED,
            TierPolicy::Auto => COUNTING,
            TierPolicy::CraneliftOnly => CRANELIFT,
            TierPolicy::CUpFront => QUEUED,
        };
        let t = Arc::new(TieredFn {
            current: AtomicUsize::new(cranelift as usize),
            cranelift,
            state: AtomicU8::new(state),
            nanos: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            threshold: spec.opts.c_tier_after.as_nanos().min(u64::MAX as u128) as u64,
            nest: nest.clone(),
            spec: spec.clone(),
            note: Mutex::new(match spec.opts.tier {
                TierPolicy::CraneliftOnly => "the tier policy is Cranelift only".to_string(),
                _ => String::new(),
            }),
            c_since: OnceLock::new(),
        });
        register(&t);
        if spec.opts.tier == TierPolicy::CUpFront {
            promote(&t);
        } else if probe {
            enqueue(&t, Job::Probe);
        }
        t
    }

    /// The tier the kernel runs now.
    pub fn tier(&self) -> Tier {
        match self.state.load(Ordering::Acquire) {
            COUNTING => Tier::Counting,
            QUEUED => Tier::Queued,
            C => Tier::C,
            _ => Tier::Cranelift,
        }
    }

    /// Why the kernel runs the tier it does (empty while it is counting or queued).
    pub fn note(&self) -> String {
        self.note.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.nest.name
    }

    /// Calls the current code; while counting, times the call and queues the kernel for
    /// the C tier once its calls have taken the threshold in all.
    ///
    /// # Safety
    /// As for any [`KernelFn`]: the addresses, strides and sizes describe live buffers
    /// whose every reached element is in bounds.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn call(
        &self,
        ptrs: *const *mut u8,
        strides: *const i64,
        sizes: *const i64,
        r0: i64,
        r1: i64,
        i0: i64,
        i1: i64,
    ) {
        let f = self.current.load(Ordering::Acquire);
        // SAFETY: `current` only ever holds a `KernelFn` (the Cranelift code or a loaded
        // C kernel of the same signature that is never unloaded).
        let f: KernelFn = unsafe { std::mem::transmute::<usize, KernelFn>(f) };
        if self.state.load(Ordering::Relaxed) != COUNTING {
            // SAFETY: the caller's contract.
            unsafe { f(ptrs, strides, sizes, r0, r1, i0, i1) };
            return;
        }
        let t = Instant::now();
        // SAFETY: the caller's contract.
        unsafe { f(ptrs, strides, sizes, r0, r1, i0, i1) };
        let ns = t.elapsed().as_nanos() as u64;
        self.calls.fetch_add(1, Ordering::Relaxed);
        let total = self.nanos.fetch_add(ns, Ordering::Relaxed) + ns;
        if total >= self.threshold
            && self
                .state
                .compare_exchange(COUNTING, QUEUED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            enqueue(self, Job::Build);
        }
    }
}

/// What the background thread does with a queued kernel.
#[derive(Clone, Copy, Debug)]
enum Job {
    /// build it (from the cache or the C compiler) and swap it in: it crossed the threshold
    Build,
    /// swap in its object if one is built already, else let it count (its first call)
    Probe,
}

/// The background builder's queue (the thread starts with the first kernel queued).
fn enqueue(t: &TieredFn, job: Job) {
    static QUEUE: OnceLock<Mutex<Sender<(usize, Job)>>> = OnceLock::new();
    let q = QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<(usize, Job)>();
        let spawned = std::thread::Builder::new()
            .name("kiln-c-tier".into())
            .spawn(move || {
                while let Ok((p, job)) = rx.recv() {
                    // SAFETY: the pointer came from `Arc::into_raw` below
                    let t = unsafe { Arc::from_raw(p as *const TieredFn) };
                    match job {
                        Job::Build => promote(&t),
                        Job::Probe => probe(&t),
                    }
                }
            });
        if spawned.is_err() {
            // no thread: kernels queued stay on Cranelift (their state says queued)
            tracing::warn!(target: "kiln::tiers", "the C tier's thread could not start");
        }
        Mutex::new(tx)
    });
    // the kernel lives at least until the builder is done with it
    let keep = TIERED.lock().ok().and_then(|reg| {
        reg.iter()
            .find(|w| std::ptr::eq(w.as_ptr(), t))
            .and_then(std::sync::Weak::upgrade)
    });
    if let (Some(a), Ok(tx)) = (keep, q.lock()) {
        let p = Arc::into_raw(a) as usize;
        if tx.send((p, job)).is_err() {
            // SAFETY: not sent: take the reference back
            drop(unsafe { Arc::from_raw(p as *const TieredFn) });
        }
    }
}

/// Every tiered kernel made (weakly held), so that the builder can keep one alive and the
/// CLI can report the tiers.
static TIERED: Mutex<Vec<std::sync::Weak<TieredFn>>> = Mutex::new(Vec::new());

/// Registers a new tiered kernel.
fn register(t: &Arc<TieredFn>) {
    if let Ok(mut reg) = TIERED.lock() {
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(t));
    }
}

/// One kernel specialisation's tier, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTier {
    /// the kernel's name
    pub kernel: String,
    /// the tier it runs now
    pub tier: Tier,
    /// why it runs that tier, or how its C code was built (empty while counting or queued)
    pub note: String,
    /// when its C code was swapped in (`None` unless it runs C code): the moment the kernel
    /// reached full speed
    pub c_since: Option<Instant>,
}

impl std::fmt::Display for KernelTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tier = match self.tier {
            Tier::Counting => "Cranelift (counting towards the C tier)",
            Tier::Queued => "Cranelift (queued for the C tier)",
            Tier::C => "C",
            Tier::Cranelift => "Cranelift",
        };
        if self.note.is_empty() {
            write!(f, "{}: {tier}", self.kernel)
        } else {
            write!(f, "{}: {tier}; {}", self.kernel, self.note)
        }
    }
}

impl TieredFn {
    /// This specialisation's tier, and why (while it counts: how far it is from the
    /// threshold).
    pub fn report(&self) -> KernelTier {
        let tier = self.tier();
        let note = match tier {
            Tier::Counting => format!(
                "{} calls, {:.1} ms of the {:.1} ms that send it to the C tier",
                self.calls.load(Ordering::Relaxed),
                self.nanos.load(Ordering::Relaxed) as f64 / 1e6,
                self.threshold as f64 / 1e6
            ),
            _ => self.note(),
        };
        KernelTier {
            kernel: self.name().to_string(),
            tier,
            note,
            c_since: if tier == Tier::C {
                self.c_since.get().copied()
            } else {
                None
            },
        }
    }
}

/// The tiered kernels alive now, in the process.
pub fn tiers() -> Vec<KernelTier> {
    TIERED
        .lock()
        .map(|reg| {
            reg.iter()
                .filter_map(std::sync::Weak::upgrade)
                .map(|t| t.report())
                .collect()
        })
        .unwrap_or_default()
}

/// True once the missing-compiler line has been written (one per process).
static NO_COMPILER_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Builds, checks and swaps in the C kernel of `t`, or leaves it on Cranelift for good.
fn promote(t: &TieredFn) {
    let start = Instant::now();
    match build(t) {
        Ok((f, how)) => {
            let calls = t.calls.load(Ordering::Relaxed);
            let ms = t.nanos.load(Ordering::Relaxed) as f64 / 1e6;
            let note = format!(
                "C tier after {calls} calls ({ms:.1} ms on Cranelift): {how}, ready in {:.0} ms",
                start.elapsed().as_secs_f64() * 1e3
            );
            swap_in(t, f, note);
        }
        Err(reason) => stay_on_cranelift(t, reason),
    }
}

/// Looks for `t`'s C code at its first call, without compiling it: the object of its
/// source built in this process, or the on-disk cache's. Found and checked, it is swapped
/// in (a process after the one that compiled it starts on C code); not found, the kernel
/// counts its calls toward the threshold as usual.
fn probe(t: &TieredFn) {
    let start = Instant::now();
    match cached(t) {
        Ok(Some((f, how))) => {
            let note = format!(
                "C tier at its first call: {how}, ready in {:.0} ms",
                start.elapsed().as_secs_f64() * 1e3
            );
            swap_in(t, f, note);
        }
        Ok(None) => t.state.store(COUNTING, Ordering::Release),
        Err(reason) => stay_on_cranelift(t, reason),
    }
}

/// `t`'s checked C kernel if it is built already (in this process or in the cache), and
/// where it came from.
fn cached(t: &TieredFn) -> Result<Option<(KernelFn, String)>, Reason> {
    let compiler = Compiler::find().map_err(|e| Reason::NoCompiler(e.to_string()))?;
    let source = c_source(&t.nest, &t.spec, Lanes::host()).map_err(Reason::Source)?;
    let cell = shared_build(&compiler.key(&source));
    let (f, how) = match cell.get() {
        Some(Ok((f, _, owner))) => (
            *f,
            format!("the object built for {owner} (the same source)"),
        ),
        // its build failed in this process: the threshold's build says why
        Some(Err(_)) => return Ok(None),
        None => {
            let Some(cache) = Cache::open(&cache_dir(&t.spec.opts)) else {
                return Ok(None);
            };
            let Some(f) =
                load_cached(compiler, &cache, &t.nest.name, &source).map_err(Reason::Build)?
            else {
                return Ok(None);
            };
            let how = "object from the cache".to_string();
            match cell.get_or_init(|| Ok((f, how.clone(), t.nest.name.clone()))) {
                Ok((f, _, _)) => (*f, how),
                Err(_) => return Ok(None),
            }
        }
    };
    check_against(&t.nest, &t.spec, t.cranelift, f).map_err(Reason::Mismatch)?;
    Ok(Some((f, how)))
}

/// The directory of the on-disk cache kernels built with `opts` use.
fn cache_dir(opts: &crate::CodegenOptions) -> std::path::PathBuf {
    opts.cache_dir.clone().unwrap_or_else(Cache::default_dir)
}

/// Swaps `f` in as `t`'s code, noting how it was made.
fn swap_in(t: &TieredFn, f: KernelFn, note: String) {
    // set first, so that a kernel seen on C has its time
    let _ = t.c_since.set(Instant::now());
    t.current.store(f as usize, Ordering::Release);
    t.state.store(C, Ordering::Release);
    tracing::info!(target: "kiln::tiers", "{}: {note}", t.name());
    if let Ok(mut n) = t.note.lock() {
        *n = note;
    }
}

/// Leaves `t` on its Cranelift code for good, saying why.
fn stay_on_cranelift(t: &TieredFn, reason: Reason) {
    t.current.store(t.cranelift as usize, Ordering::Release);
    t.state.store(CRANELIFT, Ordering::Release);
    let no_compiler = matches!(reason, Reason::NoCompiler(_));
    let text = reason.to_string();
    if no_compiler {
        if !NO_COMPILER_SAID.swap(true, Ordering::Relaxed) {
            if tracing::enabled!(target: "kiln::tiers", tracing::Level::WARN) {
                tracing::warn!(target: "kiln::tiers", "{text}: kernels stay on Cranelift");
            } else {
                eprintln!("kiln: {text}: kernels stay on Cranelift");
            }
        }
    } else {
        tracing::info!(target: "kiln::tiers", "{}: stays on Cranelift: {text}", t.name());
    }
    if let Ok(mut n) = t.note.lock() {
        *n = format!("Cranelift: {text}");
    }
}

/// Why a kernel stays on Cranelift.
#[derive(Debug, thiserror::Error)]
enum Reason {
    #[error("{0}")]
    NoCompiler(String),
    #[error("the C tier does not cover it ({0})")]
    Source(String),
    #[error("{0}")]
    Build(CTierError),
    #[error("its C code disagrees with its Cranelift code: {0}")]
    Mismatch(String),
}

/// A C kernel built in this process: its code and how the first kernel of its source got
/// it, or why it could not be built.
type SharedBuild = Result<(KernelFn, String, String), CTierError>;

/// The kernels this process has built, by cache key (source, compiler, flags). A model's
/// layers compute the same kernels on their own weights: MiniLM's 24 matmul epilogues are
/// four sources, each compiled once, where each was compiled for itself (25 compiles of 5
/// sources, 16.9 s cold to full speed). A cell is filled once; a second kernel of the same
/// source waits for the first one's build, if it is under way, and takes its result.
fn shared_build(key: &str) -> Arc<OnceLock<SharedBuild>> {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<SharedBuild>>>>> = OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(key.to_string()).or_default().clone()
}

/// The checked C kernel of `t` and how it was obtained.
fn build(t: &TieredFn) -> Result<(KernelFn, String), Reason> {
    let compiler = Compiler::find().map_err(|e| Reason::NoCompiler(e.to_string()))?;
    let source = c_source(&t.nest, &t.spec, Lanes::host()).map_err(Reason::Source)?;
    let cell = shared_build(&compiler.key(&source));
    let mut first = false;
    let shared = cell.get_or_init(|| {
        first = true;
        let cache = Cache::open(&cache_dir(&t.spec.opts));
        let built = build_kernel(compiler, cache.as_ref(), &t.nest.name, &source)?;
        let how = if built.cached {
            "object from the cache".to_string()
        } else {
            format!(
                "compiled by {} in {:.0} ms",
                compiler.identity,
                built.compile_time.as_secs_f64() * 1e3
            )
        };
        Ok((built.f, how, t.nest.name.clone()))
    });
    let (f, how, owner) = shared.clone().map_err(Reason::Build)?;
    // each kernel is checked against its own Cranelift code, shared object or not
    check_against(&t.nest, &t.spec, t.cranelift, f).map_err(Reason::Mismatch)?;
    let how = if first {
        how
    } else {
        format!("the object built for {owner} (the same source)")
    };
    Ok((f, how))
}

/// Waits until no kernel is queued for the C tier, or `timeout` passes; true when none is
/// (tests and benchmarks use it to reach steady state).
pub fn wait_for_c_tier(timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        let queued = tiers().iter().any(|t| t.tier == Tier::Queued);
        if !queued {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
