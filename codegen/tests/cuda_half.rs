//! f16 and bf16 in the CUDA backend: the op programs of the CUDA tests with every f32
//! turned into f16 (then bf16), their kernels run by the emulation harness and compared
//! with the interpreter (tolerance 8 units in the last place, for the math functions);
//! the conversions exact on every one of the 65536 bit patterns; a fused chain rounding
//! each op's result and each literal to the half type, as eager mode does; and every half
//! kernel compiled by NVRTC and ptxas (skipped without NVRTC unless `KILN_REQUIRE_NVRTC`).

mod common;

use common::PROGRAMS;
use kiln_codegen::cuda::emulate::{emulate, EmuBuffer};
use kiln_codegen::cuda::emulate_check::{check_kernel, loop_sizes, loop_strides, EMU_THREADS};
use kiln_codegen::cuda::nvrtc::{compile_and_assemble, nvrtc_for_tests};
use kiln_codegen::cuda::{cuda_kernel, group_kernel};
use kiln_codegen::loops::{lower_kernel, lower_kernel_half};
use kiln_ir::interp::{eval, Value};
use kiln_ir::text::parse_module;
use kiln_ir::DType;
use kiln_passes::pipeline::{run_passes, PassOptions};
use kiln_passes::schedule::{schedule, Kernel};

/// The kernels of every graph of `text` after decompose + fuse: (label, kernel).
fn kernels(text: &str, file: &str) -> Vec<(String, Kernel)> {
    let mut out = Vec::new();
    for g in parse_module(text).unwrap_or_else(|e| panic!("{file}: {e}")) {
        let opt = run_passes(
            &g,
            &["decompose", "fuse"],
            &PassOptions::rendering(kiln_codegen::cuda::renders),
            false,
        )
        .unwrap_or_else(|e| panic!("{file} @{}: {e}", g.name()));
        let s = schedule(&opt).unwrap_or_else(|e| panic!("{file} @{}: {e}", g.name()));
        for k in s.kernels {
            out.push((format!("{file} @{} {}", g.name(), k.body.name()), k));
        }
    }
    out
}

#[test]
fn programs_in_half_precision_match_the_interpreter() {
    for dt in ["f16", "bf16"] {
        let text = PROGRAMS.replace("f32", dt);
        let mut ran = 0;
        let mut failures = Vec::new();
        for (what, k) in kernels(&text, dt) {
            match check_kernel(&k.body, 37, &what, EMU_THREADS) {
                Ok(true) => ran += 1,
                Ok(false) => {}
                Err(e) => {
                    eprintln!("{e}");
                    failures.push(what);
                }
            }
        }
        eprintln!("{dt}: emulated {ran} kernels of the op programs");
        assert!(failures.is_empty(), "{dt}: {failures:?}");
        assert!(ran >= 12, "{dt}: only {ran} kernels emulated");
    }
}

#[test]
fn the_cpu_form_keeps_half_precision_out() {
    // the CPU backend's nests are f32/bool: half kernels run on its eager kernels
    let g =
        parse_module("graph @h(%x: f16[8]) -> f16[8] {\n  %0 = exp %x : f16[8]\n  return %0\n}\n")
            .unwrap()
            .remove(0);
    assert!(lower_kernel(&g).is_err());
    assert!(lower_kernel_half(&g).is_ok());
}

/// Every f16 (or bf16) bit pattern as a value, in bit order.
fn all_patterns(dtype: DType) -> Value {
    let data: Vec<f64> = (0..=u16::MAX)
        .map(|b| match dtype {
            DType::F16 => half::f16::from_bits(b).to_f64(),
            _ => half::bf16::from_bits(b).to_f64(),
        })
        .collect();
    Value::new(dtype, vec![data.len()], data).expect("value")
}

fn bits(x: f64, dtype: DType) -> u16 {
    match dtype {
        DType::F16 => half::f16::from_f64(x).to_bits(),
        _ => half::bf16::from_f64(x).to_bits(),
    }
}

/// Emulates the kernel of the one-kernel graph `text` on `inputs` (half buffers); returns
/// the output's bit patterns and the interpreter's.
fn run_exact(text: &str, inputs: &[Value], dtype: DType) -> (Vec<u16>, Vec<u16>) {
    let g = parse_module(text).expect("valid IR").remove(0);
    let nest = lower_kernel_half(&g).expect("a nest");
    let k = cuda_kernel(&nest).expect("CUDA C");
    let want = eval(&g, inputs).expect("interpreter");
    let n = want[0].data.len();
    let mut shapes: Vec<Vec<usize>> = inputs.iter().map(|v| v.shape.clone()).collect();
    shapes.push(want[0].shape.clone());
    let mut buffers: Vec<EmuBuffer> = inputs
        .iter()
        .map(|v| EmuBuffer {
            bytes: v
                .data
                .iter()
                .flat_map(|&x| bits(x, dtype).to_le_bytes())
                .collect(),
        })
        .collect();
    buffers.push(EmuBuffer {
        bytes: vec![0xA5; 2 * n],
    });
    let sizes = loop_sizes(&nest, &shapes, 1);
    let strides = loop_strides(&nest, &shapes, k.ndims);
    emulate(&k.source, &k.name, 64, 3, &mut buffers, &sizes, &strides)
        .unwrap_or_else(|e| panic!("{e}\n{}", k.source));
    let got = buffers[inputs.len()]
        .bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let want = want[0].data.iter().map(|&x| bits(x, dtype)).collect();
    (got, want)
}

/// True when two bit patterns are the same number (any NaN equals any NaN).
fn same(a: u16, b: u16, dtype: DType) -> bool {
    let nan = |x: u16| match dtype {
        DType::F16 => half::f16::from_bits(x).is_nan(),
        _ => half::bf16::from_bits(x).is_nan(),
    };
    a == b || (nan(a) && nan(b))
}

#[test]
fn conversions_are_exact_on_every_bit_pattern() {
    for (dtype, ty) in [(DType::F16, "f16"), (DType::BF16, "bf16")] {
        // widening and narrowing back: neg is exact, so every pattern must come back negated
        let x = all_patterns(dtype);
        let text = format!(
            "graph @neg(%x: {ty}[65536]) -> {ty}[65536] {{\n  %0 = neg %x : {ty}[65536]\n  return %0\n}}\n"
        );
        let (got, want) = run_exact(&text, std::slice::from_ref(&x), dtype);
        let bad = (0..got.len())
            .filter(|&i| !same(got[i], want[i], dtype))
            .count();
        assert_eq!(bad, 0, "{ty} neg: {bad} patterns differ");
        // rounding: a product of two half values is exact in f32, so the kernel rounds once,
        // as the interpreter does (ties to even, subnormals, overflow to inf)
        let y_data: Vec<f64> = (0..=u16::MAX as usize)
            .map(|i| {
                let b = (i.wrapping_mul(40503) % 65536) as u16;
                match dtype {
                    DType::F16 => half::f16::from_bits(b).to_f64(),
                    _ => half::bf16::from_bits(b).to_f64(),
                }
            })
            .collect();
        let y = Value::new(dtype, vec![65536], y_data).unwrap();
        let text = format!(
            "graph @mul(%x: {ty}[65536], %y: {ty}[65536]) -> {ty}[65536] {{\n  %0 = mul %x, %y : {ty}[65536]\n  return %0\n}}\n"
        );
        let (got, want) = run_exact(&text, &[x, y], dtype);
        let bad: Vec<usize> = (0..got.len())
            .filter(|&i| !same(got[i], want[i], dtype))
            .collect();
        assert!(
            bad.is_empty(),
            "{ty} mul: {} products differ, e.g. element {}: {:#06x} vs {:#06x}",
            bad.len(),
            bad[0],
            got[bad[0]],
            want[bad[0]]
        );
    }
}

/// Bit patterns of `got` that are not the number `want` has at the same place.
fn differing(got: &[u16], want: &[u16], dtype: DType) -> Vec<(usize, u16, u16)> {
    (0..got.len())
        .filter(|&i| !same(got[i], want[i], dtype))
        .map(|i| (i, got[i], want[i]))
        .collect()
}

#[test]
fn a_fused_chain_rounds_each_half_result_and_literal_as_eager_does() {
    // (dtype, inputs whose square overflows the type, a scale bringing that square back in
    // range, a literal the type rounds, inputs on which that rounding shows)
    let cases = [
        // 300² = 90000 overflows f16 (65504): eager's product is inf, and so its half; the
        // literal 65519 is 65504 in f16, so -20 + 65519 is 65472 (torch's answer too)
        (
            DType::F16,
            "f16",
            [300.0, -300.0, 2.0, 0.5],
            0.5,
            "add",
            65519.0,
            [-20.0, 0.0, 20.0, -0.5],
        ),
        // 1e20² overflows bf16 (3.4e38); the literal 1 + 2^-8 is 1 in bf16, so 20 stays 20
        (
            DType::BF16,
            "bf16",
            [1e20, -1e20, 2.0, 0.5],
            1e-10,
            "mul",
            1.00390625,
            [20.0, -20.0, 3.0, 0.0],
        ),
    ];
    for (dtype, ty, big, scale, op, lit, small) in cases {
        let chain = format!(
            "graph @chain(%x: {ty}[4]) -> {ty}[4] {{\n  %0 = mul %x, %x : {ty}[4]\n  %1 = mul %0, {scale:?} : {ty}[4]\n  return %1\n}}\n"
        );
        let x = Value::new(dtype, vec![4], big.to_vec()).unwrap();
        let (got, want) = run_exact(&chain, &[x], dtype);
        assert_eq!(differing(&got, &want, dtype), vec![], "{ty}: x·x·{scale}");
        let first = match dtype {
            DType::F16 => half::f16::from_bits(got[0]).to_f64(),
            _ => half::bf16::from_bits(got[0]).to_f64(),
        };
        assert_eq!(
            first,
            f64::INFINITY,
            "{ty}: the square overflows before the scale"
        );
        let literal = format!(
            "graph @literal(%x: {ty}[4]) -> {ty}[4] {{\n  %0 = {op} %x, {lit:?} : {ty}[4]\n  return %0\n}}\n"
        );
        let x = Value::new(dtype, vec![4], small.to_vec()).unwrap();
        let (got, want) = run_exact(&literal, &[x], dtype);
        assert_eq!(differing(&got, &want, dtype), vec![], "{ty}: {op} {lit}");
    }
}

#[test]
fn every_half_kernel_compiles_with_nvrtc_and_ptxas() {
    if !nvrtc_for_tests().unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let mut compiled = 0;
    for dt in ["f16", "bf16"] {
        for (what, k) in kernels(&PROGRAMS.replace("f32", dt), dt) {
            let Ok(c) = group_kernel(&k.body) else {
                continue;
            };
            let st = compile_and_assemble(&c, "compute_90", "sm_90")
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!st.spills(), "{what} spills: {st}");
            compiled += 1;
        }
    }
    eprintln!("NVRTC + ptxas compiled {compiled} f16/bf16 kernels");
    assert!(compiled >= 24, "only {compiled} half kernels");
}
