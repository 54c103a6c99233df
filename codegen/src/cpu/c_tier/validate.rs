//! The check a C kernel passes before it replaces Cranelift code: both run on the same
//! inputs (seeded random values in buffers laid out as the specialisation says: contiguous,
//! broadcast or strided along the inner loop, three rows per outer dim, an inner length
//! that exercises the unrolled loop, the one-vector loop and the partial last vector) into
//! separate outputs, which must agree: bools exactly, floats within the per-op error
//! budget (`2e-5` relative plus `1e-6` absolute; NaN where the other is NaN).

use crate::cpu::emit::{InnerAccess, Spec};
use crate::cpu::jit::KernelFn;
use crate::loops::{LoopNest, Role};
use kiln_ir::DType;

/// Rows per outer dim in the check.
const ROWS_PER_DIM: usize = 3;

/// One buffer of the check: its bytes (starting at a multiple of 64, as the allocator's
/// blocks do, so that a kernel's aligned stores, streaming ones included, run here) and its
/// strides in bytes (outer dims, then inner).
struct Buf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
    strides: Vec<i64>,
    bool_: bool,
}

impl Buf {
    /// `len` zero bytes starting at a multiple of 64.
    fn zeroed(len: usize) -> (Vec<u8>, usize) {
        let storage = vec![0u8; len + 64];
        let start = storage.as_ptr().align_offset(64).min(64);
        (storage, start)
    }

    fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// A small deterministic generator (xorshift), so the check needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A float in [-2, 2].
    fn value(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }
}

fn buffers(nest: &LoopNest, spec: &Spec, inner: usize, seed: u64) -> Vec<Buf> {
    let k = spec.outer;
    let mut rng = Rng(seed | 1);
    nest.buffers
        .iter()
        .zip(&spec.access)
        .map(|(b, a)| {
            let bool_ = b.dtype == DType::Bool;
            let es = if bool_ { 1 } else { 4 };
            let step = match a {
                InnerAccess::Contiguous => 1,
                InnerAccess::Broadcast => 0,
                InnerAccess::Strided => 3,
            };
            let extent = if step == 0 { 1 } else { (inner - 1) * step + 1 };
            let mut strides = vec![0i64; k + 1];
            strides[k] = (step * es) as i64;
            let mut s = extent;
            for j in (0..k).rev() {
                strides[j] = (s * es) as i64;
                s *= ROWS_PER_DIM;
            }
            let n = s * es;
            let (mut storage, start) = Buf::zeroed(n);
            let bytes = &mut storage[start..start + n];
            if b.role == Role::Input {
                if bool_ {
                    for x in bytes.iter_mut() {
                        *x = (rng.next() >> 33) as u8 & 1;
                    }
                } else {
                    for c in bytes.chunks_exact_mut(4) {
                        c.copy_from_slice(&rng.value().to_ne_bytes());
                    }
                }
            }
            Buf {
                storage,
                start,
                len: n,
                strides,
                bool_,
            }
        })
        .collect()
}

/// Runs `f` over every row and the whole inner range of `bufs`.
fn run(f: KernelFn, bufs: &mut [Buf], k: usize, inner: usize) {
    let ptrs: Vec<*mut u8> = bufs
        .iter_mut()
        .map(|b| b.bytes_mut().as_mut_ptr())
        .collect();
    let strides: Vec<i64> = bufs.iter().flat_map(|b| b.strides.clone()).collect();
    let mut sizes = vec![ROWS_PER_DIM as i64; k];
    sizes.push(inner as i64);
    let rows = ROWS_PER_DIM.pow(k as u32) as i64;
    // SAFETY: each buffer holds every element its strides reach for these sizes (built
    // above for exactly these sizes), and the outputs are distinct allocations.
    unsafe {
        f(
            ptrs.as_ptr(),
            strides.as_ptr(),
            sizes.as_ptr(),
            0,
            rows,
            0,
            inner as i64,
        )
    };
}

/// Runs `cranelift` and `c` (two compiled forms of `nest` at `spec`) on the same inputs;
/// `Err` says where their outputs first differ.
pub fn check_against(
    nest: &LoopNest,
    spec: &Spec,
    cranelift: KernelFn,
    c: KernelFn,
) -> Result<(), String> {
    let k = spec.outer;
    let w = super::source::Lanes::host().0;
    // the unrolled loop twice, the one-vector loop once, and a partial vector
    for inner in [8 * w + w + 7, 1, w] {
        for seed in [0x9e37_79b9_7f4a_7c15u64, 42] {
            let mut a = buffers(nest, spec, inner, seed);
            let mut b = buffers(nest, spec, inner, seed);
            run(cranelift, &mut a, k, inner);
            run(c, &mut b, k, inner);
            for (bi, (x, y)) in a.iter().zip(&b).enumerate() {
                if nest.buffers[bi].role != Role::Output {
                    continue;
                }
                compare(&nest.buffers[bi].name, x, y, inner)?;
            }
        }
    }
    Ok(())
}

fn compare(name: &str, x: &Buf, y: &Buf, inner: usize) -> Result<(), String> {
    if x.bool_ {
        return match x.bytes().iter().zip(y.bytes()).position(|(p, q)| p != q) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{name} (inner length {inner}) byte {i}: {} against {}",
                x.bytes()[i],
                y.bytes()[i]
            )),
        };
    }
    let f = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let (p, q) = (f(x.bytes()), f(y.bytes()));
    for (i, (&a, &b)) in p.iter().zip(&q).enumerate() {
        let same = (a.is_nan() && b.is_nan())
            || a == b
            || (a - b).abs() <= 2e-5 * a.abs().max(b.abs()) + 1e-6;
        if !same {
            return Err(format!(
                "{name} (inner length {inner}) element {i}: Cranelift {a:e}, C {b:e}"
            ));
        }
    }
    Ok(())
}
