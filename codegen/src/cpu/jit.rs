//! The process-wide JIT: one Cranelift module for the host ISA, compiled kernels cached by a
//! structural key so identical kernels (of any function) compile once.

use super::emit::{emit_nest, Spec};
use super::math::libm_symbols;
use crate::error::CodegenError;
use crate::loops::LoopNest;
use crate::ClifOpt;
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{CompiledCode, Context};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module, ModuleReloc};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The signature of every generated kernel:
/// `(buffer addresses, strides in bytes [buffer][dim], sizes [dim], first row, end row,
/// first inner index, end inner index)`.
pub type KernelFn =
    unsafe extern "C" fn(*const *mut u8, *const i64, *const i64, i64, i64, i64, i64);

struct Jit {
    module: JITModule,
    cache: HashMap<String, KernelFn>,
    fctx: FunctionBuilderContext,
    compiled: usize,
    compile_time: Duration,
}

// SAFETY: the module is only used behind the mutex below; the code it owns is immutable
// once finalised and lives as long as the process.
unsafe impl Send for Jit {}

fn host_isa(opt: ClifOpt) -> Result<OwnedTargetIsa, CodegenError> {
    let err = |e: String| CodegenError::Jit {
        kernel: "<isa>".to_string(),
        reason: e,
    };
    let mut fb = settings::builder();
    // `none` by default: at `speed`, Cranelift's e-graph pass sinks a reduction's result
    // (the horizontal combine of the accumulators and its splat) into the next inner loop
    // and recomputes it every iteration; the loop nests already place each value where it
    // belongs. `CodegenOptions::clif_opt` turns the optimiser back on for comparison.
    fb.set("opt_level", opt.setting())
        .map_err(|e| err(e.to_string()))?;
    fb.set("is_pic", "false").map_err(|e| err(e.to_string()))?;
    fb.set("use_colocated_libcalls", "false")
        .map_err(|e| err(e.to_string()))?;
    let ib = cranelift_native::builder_with_options(true).map_err(|e| err(e.to_string()))?;
    ib.finish(settings::Flags::new(fb))
        .map_err(|e| err(e.to_string()))
}

/// The module for Cranelift optimisation level `opt` (one per level: the level is a
/// setting of the module's ISA).
fn jit(opt: ClifOpt) -> Result<&'static Mutex<Jit>, CodegenError> {
    type Slot = OnceLock<Result<Mutex<Jit>, CodegenError>>;
    static JITS: [Slot; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match opt {
        ClifOpt::None => &JITS[0],
        ClifOpt::Speed => &JITS[1],
        ClifOpt::SpeedAndSize => &JITS[2],
    };
    slot.get_or_init(|| {
        let isa = host_isa(opt)?;
        let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
        for (name, ptr) in libm_symbols() {
            jb.symbol(name, ptr);
        }
        Ok(Mutex::new(Jit {
            module: JITModule::new(jb),
            cache: HashMap::new(),
            fctx: FunctionBuilderContext::new(),
            compiled: 0,
            compile_time: Duration::ZERO,
        }))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// True when the host has fused multiply-add.
pub(crate) fn host_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The structural key of a nest at a specialisation: everything but names.
fn key(nest: &LoopNest, spec: &Spec) -> String {
    let bufs: Vec<_> = nest
        .buffers
        .iter()
        .map(|b| (b.role, b.dtype, &b.index))
        .collect();
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}",
        nest.dims.len(),
        bufs,
        nest.body,
        nest.stores,
        nest.phases,
        nest.reduces,
        spec
    )
}

/// The compiled kernel of `nest` at `spec`, compiling it unless an identical one exists.
pub(crate) fn compile(nest: &LoopNest, spec: &Spec) -> Result<KernelFn, CodegenError> {
    let k = key(nest, spec);
    let mut j = jit(spec.opts.clif_opt)?.lock();
    if let Some(f) = j.cache.get(&k) {
        return Ok(*f);
    }
    let start = Instant::now();
    let f = define(&mut j, nest, spec, None)?;
    j.compiled += 1;
    j.compile_time += start.elapsed();
    j.cache.insert(k, f);
    if crate::logging::code() {
        tracing::info!(
            target: "kiln::code",
            "compiled {} ({:?}) in {:.2} ms",
            nest.name,
            spec,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(f)
}

/// Compiles `ctx.func` as `Context::compile` does at `opt_level=none`, except that block
/// parameters with a single incoming value are kept: those are the cuts of
/// [`cut_multi_use_vectors`](super::cuts::cut_multi_use_vectors), which `compile`'s
/// constant-phi removal would undo.
fn compile_keeping_cuts(
    module: &JITModule,
    ctx: &mut Context,
    disasm: bool,
) -> Result<CompiledCode, String> {
    let isa = module.isa();
    cranelift_codegen::verify_function(&ctx.func, isa).map_err(|e| e.to_string())?;
    ctx.compute_cfg();
    ctx.compute_domtree();
    ctx.eliminate_unreachable_code(isa)
        .map_err(|e| e.to_string())?;
    ctx.func.dfg.resolve_all_aliases();
    let mut regalloc = regalloc2::Ctx::default();
    let stencil = isa
        .compile_function(
            &ctx.func,
            &ctx.domtree,
            &mut regalloc,
            disasm,
            &mut Default::default(),
        )
        .map_err(|e| format!("{e:?}"))?;
    Ok(stencil.apply_params(&ctx.func.params))
}

/// The Cranelift IR of `nest` at `spec`, as text (`kiln dump --stage clif`).
pub fn clif_text(nest: &LoopNest, spec: &Spec) -> Result<String, CodegenError> {
    let mut j = jit(spec.opts.clif_opt)?.lock();
    let mut text = String::new();
    define(&mut j, nest, spec, Some(&mut text))?;
    Ok(text)
}

/// Kernels compiled so far in this process and the time spent compiling them (every
/// optimisation level's module together).
pub fn jit_stats() -> (usize, Duration) {
    let mut total = (0, Duration::ZERO);
    for opt in [ClifOpt::None, ClifOpt::Speed, ClifOpt::SpeedAndSize] {
        if let Ok(j) = jit(opt) {
            let j = j.lock();
            total.0 += j.compiled;
            total.1 += j.compile_time;
        }
    }
    total
}

fn define(
    j: &mut Jit,
    nest: &LoopNest,
    spec: &Spec,
    text: Option<&mut String>,
) -> Result<KernelFn, CodegenError> {
    let err = |reason: String| CodegenError::Jit {
        kernel: nest.name.clone(),
        reason,
    };
    let Jit { module, fctx, .. } = j;
    // a fresh builder context: one left dirty by a failed build must not poison the next
    *fctx = FunctionBuilderContext::new();
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(cranelift_codegen::ir::AbiParam::new(ptr));
    sig.params.push(cranelift_codegen::ir::AbiParam::new(ptr));
    sig.params.push(cranelift_codegen::ir::AbiParam::new(ptr));
    for _ in 0..4 {
        sig.params.push(cranelift_codegen::ir::AbiParam::new(
            cranelift_codegen::ir::types::I64,
        ));
    }
    let fid = module
        .declare_anonymous_function(&sig)
        .map_err(|e| err(e.to_string()))?;
    let mut ctx: Context = module.make_context();
    ctx.func.signature = sig;
    emit_nest(module, fctx, &mut ctx.func, nest, spec, host_fma()).map_err(err)?;
    if spec.opts.cuts {
        super::cuts::cut_multi_use_vectors(&mut ctx.func);
    }
    if let Some(t) = text {
        *t = ctx.func.display().to_string();
        module.clear_context(&mut ctx);
        // the function stays declared but undefined; it is never called
        return Ok(unused_kernel);
    }
    let asm = spec.opts.print_asm;
    let code = compile_keeping_cuts(module, &mut ctx, asm).map_err(err)?;
    let relocs: Vec<ModuleReloc> = code
        .buffer
        .relocs()
        .iter()
        .map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, fid))
        .collect();
    module
        .define_function_bytes(
            fid,
            u64::from(code.buffer.alignment),
            code.code_buffer(),
            &relocs,
        )
        .map_err(|e| err(format!("{e:?}")))?;
    if asm {
        eprintln!(
            "---- {} ----\n{}",
            nest.name,
            code.vcode.as_deref().unwrap_or("")
        );
    }
    module.clear_context(&mut ctx);
    module
        .finalize_definitions()
        .map_err(|e| err(e.to_string()))?;
    let code = module.get_finalized_function(fid);
    let _ = Linkage::Local;
    // SAFETY: the function was built with exactly KernelFn's signature (system ABI).
    Ok(unsafe { std::mem::transmute::<*const u8, KernelFn>(code) })
}

unsafe extern "C" fn unused_kernel(
    _: *const *mut u8,
    _: *const i64,
    _: *const i64,
    _: i64,
    _: i64,
    _: i64,
    _: i64,
) {
}
