//! Helpers shared by the compiled-training tests.
#![allow(dead_code)] // each test file uses some of them

use kiln::{Backend, CompileOptions, Tensor};

/// The backends and fusion settings every comparison runs on.
pub fn option_sets() -> Vec<(&'static str, CompileOptions)> {
    vec![
        ("cpu fused", CompileOptions::default()),
        ("cpu unfused", CompileOptions::default().fusion(false)),
        ("eager", CompileOptions::default().backend(Backend::Eager)),
        ("interp", CompileOptions::default().backend(Backend::Interp)),
    ]
}

/// A real tensor's elements as f64.
pub fn values(t: &Tensor) -> Vec<f64> {
    t.as_cpu().expect("a real tensor").to_f64_vec()
}
