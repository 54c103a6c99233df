//! The C tier: hot loop-nest kernels recompiled by the system C compiler at the host's
//! full vector width, the way JVMs tier their JITs.
//!
//! Every kernel runs its Cranelift code from the first call (compiled in milliseconds, no
//! toolchain needed). Under the automatic policy ([`crate::TierPolicy`]) a kernel whose
//! calls have taken [`crate::CodegenOptions::c_tier_after`] in all is handed to a background
//! thread, which writes its C source ([`source`]: GCC/Clang vector extensions of 16 f32
//! lanes with AVX-512, 8 with AVX2; kiln's own polynomials from `kiln_math.h`, not libm),
//! takes the shared object from the on-disk cache ([`cache`]) or compiles it with
//! `cc -O3 -march=native` ([`compiler`]), checks it once against the Cranelift code on the
//! same inputs ([`validate`]) and swaps it in atomically ([`tiering`]). Nothing ever waits
//! for the C compiler except under the C-up-front policy, and a machine without one runs
//! Cranelift code only (one log line, never an error).

pub mod cache;
pub mod compiler;
pub mod reference;
pub mod source;
pub mod streams;
pub mod tiering;
pub mod validate;

pub use tiering::{tiers, wait_for_c_tier, KernelTier, Tier, TieredFn};

#[cfg(test)]
mod tests;
