//! How the code generators generate: the knobs that measurements turn. Each has a built-in
//! default that the compiler uses; [`CodegenOptions::from_env`] is the one place that reads
//! their `KILN_*` overrides, and only the frontend (`kiln::CompileOptions::default`) calls
//! it, so nothing below the top of the compiler reads the environment.

/// Cranelift's optimisation level for generated kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClifOpt {
    /// no Cranelift optimisation (the default: at `speed`, Cranelift's e-graph sank a
    /// reduction's horizontal combine into the next inner loop; the loop nests already place
    /// each value where it belongs)
    #[default]
    None,
    /// Cranelift's `speed`
    Speed,
    /// Cranelift's `speed_and_size`
    SpeedAndSize,
}

impl ClifOpt {
    /// The name Cranelift's `opt_level` setting takes.
    pub fn setting(self) -> &'static str {
        match self {
            ClifOpt::None => "none",
            ClifOpt::Speed => "speed",
            ClifOpt::SpeedAndSize => "speed_and_size",
        }
    }

    fn parse(s: &str) -> Option<ClifOpt> {
        Some(match s {
            "none" => ClifOpt::None,
            "speed" => ClifOpt::Speed,
            "speed_and_size" => ClifOpt::SpeedAndSize,
            _ => return None,
        })
    }
}

/// Which code the CPU backend's loop-nest kernels run (see `cpu::c_tier`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TierPolicy {
    /// Cranelift code from the first call; a kernel whose calls have taken
    /// [`CodegenOptions::c_tier_after`] is rebuilt by the C compiler in the background and
    /// swapped in when ready (the default)
    #[default]
    Auto,
    /// Cranelift code only
    CraneliftOnly,
    /// every kernel built by the C compiler at its first call, which waits for it (like
    /// `max-autotune`: slow first calls, full speed at once); Cranelift where that fails
    CUpFront,
}

impl TierPolicy {
    /// The name `KILN_TIER` takes: `auto`, `cranelift` or `c`.
    pub fn name(self) -> &'static str {
        match self {
            TierPolicy::Auto => "auto",
            TierPolicy::CraneliftOnly => "cranelift",
            TierPolicy::CUpFront => "c",
        }
    }

    /// The policy of a `KILN_TIER` name.
    pub fn parse(s: &str) -> Option<TierPolicy> {
        Some(match s {
            "auto" => TierPolicy::Auto,
            "cranelift" => TierPolicy::CraneliftOnly,
            "c" => TierPolicy::CUpFront,
            _ => return None,
        })
    }
}

/// The CPU backend's code generation options (part of every kernel's cache key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CodegenOptions {
    /// vectors per inner-loop iteration (`None`: the emitter's choice from the loop's
    /// cost, 4 or 8); `KILN_UNROLL`
    pub unroll: Option<i64>,
    /// rows a row kernel steps together (1 to 8; 1 measured fastest on the current
    /// machine, see `cpu::emit::row_group`); `KILN_ROW_GROUP`
    pub row_group: usize,
    /// rows a row kernel whose inner loop reads every buffer it reads with a stride (a
    /// reduction over an outer dim: a bias gradient, `sum(x, 0)` of a row-major matrix)
    /// steps together (1 to 8; see `cpu::emit::row_group`); `KILN_STRIDED_ROW_GROUP`
    pub strided_row_group: usize,
    /// compute runs of smooth ops on a bounded input as one fitted polynomial
    /// (`cpu/chain_fits.rs`); `KILN_NO_CHAIN_FITS` turns it off
    pub chain_fits: bool,
    /// make each multiply-used vector a block parameter before compiling (`cpu/cuts.rs`);
    /// `KILN_NO_CUTS` turns it off
    pub cuts: bool,
    /// Cranelift's optimisation level; `KILN_CLIF_OPT`
    pub clif_opt: ClifOpt,
    /// print each compiled kernel's machine code to stderr; `KILN_ASM`
    pub print_asm: bool,
    /// which tier loop-nest kernels run; `KILN_TIER` (`auto`, `cranelift`, `c`)
    pub tier: TierPolicy,
    /// under [`TierPolicy::Auto`], the time a kernel's calls take in all before it is
    /// queued for the C tier; `KILN_C_TIER_AFTER_MS`
    pub c_tier_after: std::time::Duration,
    /// the C tier's on-disk cache (`None`: `KILN_CACHE_DIR`, else the user's cache
    /// directory; see `cpu::c_tier::cache::Cache::default_dir`)
    pub cache_dir: Option<std::path::PathBuf>,
    /// the C tier writes a kernel's outputs with streaming (non-temporal) stores in calls
    /// that store at least this many bytes (`None`: never; the default is three quarters of
    /// the host's last-level cache, see `cpu::c_tier::streams`); `KILN_STREAM_MIN_BYTES`
    /// (a number of bytes, or `never`)
    pub stream_min_bytes: Option<u64>,
}

/// The default of [`CodegenOptions::c_tier_after`], in milliseconds.
pub const C_TIER_AFTER_MS: u64 = 20;

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            unroll: None,
            row_group: 1,
            strided_row_group: 4,
            chain_fits: true,
            cuts: true,
            clif_opt: ClifOpt::None,
            print_asm: false,
            tier: TierPolicy::Auto,
            c_tier_after: std::time::Duration::from_millis(C_TIER_AFTER_MS),
            cache_dir: None,
            stream_min_bytes: crate::cpu::c_tier::streams::host_stream_min_bytes(),
        }
    }
}

impl CodegenOptions {
    /// The defaults with the `KILN_*` overrides of the environment applied (unparsable
    /// values are ignored): the only function of the code generators that reads it.
    pub fn from_env() -> CodegenOptions {
        let var = |k: &str| std::env::var(k).ok();
        let set = |k: &str| std::env::var_os(k).is_some();
        let d = CodegenOptions::default();
        CodegenOptions {
            unroll: var("KILN_UNROLL").and_then(|v| v.parse().ok()).or(d.unroll),
            row_group: var("KILN_ROW_GROUP")
                .and_then(|v| v.parse().ok())
                .filter(|g: &usize| (1..=8).contains(g))
                .unwrap_or(d.row_group),
            strided_row_group: var("KILN_STRIDED_ROW_GROUP")
                .and_then(|v| v.parse().ok())
                .filter(|g: &usize| (1..=8).contains(g))
                .unwrap_or(d.strided_row_group),
            chain_fits: !set("KILN_NO_CHAIN_FITS"),
            cuts: !set("KILN_NO_CUTS"),
            clif_opt: var("KILN_CLIF_OPT")
                .and_then(|v| ClifOpt::parse(&v))
                .unwrap_or(d.clif_opt),
            print_asm: set("KILN_ASM"),
            tier: var("KILN_TIER")
                .and_then(|v| TierPolicy::parse(&v))
                .unwrap_or(d.tier),
            c_tier_after: var("KILN_C_TIER_AFTER_MS")
                .and_then(|v| v.parse().ok())
                .map(std::time::Duration::from_millis)
                .unwrap_or(d.c_tier_after),
            cache_dir: d.cache_dir,
            stream_min_bytes: match var("KILN_STREAM_MIN_BYTES").as_deref() {
                Some("never") => None,
                Some(v) => v.parse().ok().or(d.stream_min_bytes),
                None => d.stream_min_bytes,
            },
        }
    }
}
