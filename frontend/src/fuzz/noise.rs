//! Rounding noise: how far rounding alone can move a result, estimated by running the f64
//! truth again with every rounding op's result (and a reduction's, norm's or product's
//! operands) multiplied by `1 + δ`, δ uniform in ±2 units of roundoff of the dtype the op
//! computes in (Monte Carlo arithmetic, after Parker's; CESTAC is the same idea). Where a
//! result cancels (a layer norm's weight gradient that is 0 in real arithmetic, a softmax
//! backward of a constant gradient, the centred values of nearly equal inputs), the
//! perturbed runs scatter as widely as any correct f32 computation may land, where a
//! well-conditioned result moves by a few units of roundoff only.
//!
//! Only eager execution on this thread is perturbed, and only inside [`with_noise`]: the
//! fuzzer's truth runs there, nothing else.

use kiln_ir::{DType, Op, ReduceOp};
use kiln_runtime::{CpuTensor, EagerArg};
use std::cell::Cell;

/// How many perturbed runs estimate the noise.
pub const SAMPLES: u64 = 4;

/// The state of the perturbation on this thread.
#[derive(Clone, Copy)]
struct Noise {
    /// the unit roundoff of the dtype the next ops compute in
    unit: f64,
    /// the generator's state (splitmix64)
    state: u64,
}

thread_local! {
    static NOISE: Cell<Option<Noise>> = const { Cell::new(None) };
}

/// The unit roundoff of `dtype` (half its epsilon), 0 for integers and bools.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        DType::F64 => 2f64.powi(-53),
        _ => 0.0,
    }
}

/// Runs `f` with eager ops on this thread perturbed (stream `seed`), starting at `unit`
/// ([`set_unit`] changes it); the state before is restored after, a panic included.
pub fn with_noise<R>(seed: u64, unit: f64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Noise>);
    impl Drop for Restore {
        fn drop(&mut self) {
            NOISE.with(|n| n.set(self.0));
        }
    }
    let state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    let _restore = Restore(NOISE.with(|n| n.replace(Some(Noise { unit, state }))));
    f()
}

/// Sets the unit roundoff of the ops that follow (inside [`with_noise`]; no effect outside).
pub fn set_unit(unit: f64) {
    NOISE.with(|n| {
        if let Some(mut s) = n.get() {
            s.unit = unit;
            n.set(Some(s));
        }
    });
}

/// True inside [`with_noise`].
pub(crate) fn active() -> bool {
    NOISE.with(|n| n.get().is_some())
}

/// The next δ in ±2 units of roundoff.
fn next_delta() -> f64 {
    NOISE.with(|n| {
        let Some(mut s) = n.get() else { return 0.0 };
        s.state = s.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        n.set(Some(s));
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        2.0 * s.unit * (2.0 * u - 1.0)
    })
}

/// True for ops whose result is rounded: the smooth pointwise ops (`add`, `exp`, ...; not
/// `abs`, `floor`, `maximum`, comparisons or casts, which are exact), sums and means,
/// variances, norms, softmaxes, products and convolutions. Views, copies, gathers and creation are
/// exact.
fn rounds(op: &Op) -> bool {
    match op {
        Op::Unary(_) | Op::Binary(_) => op.info().smooth,
        Op::LeakyRelu { .. } | Op::Elu { .. } | Op::Softplus { .. } | Op::IndexAdd { .. } => true,
        _ => perturbs_operands(op),
    }
}

/// True for ops that sum many terms (reductions, variances, norms, softmaxes, products,
/// convolutions):
/// their operands are perturbed too, which stands for the rounding of each term and
/// partial sum (relative to the terms, not to the possibly cancelled result).
fn perturbs_operands(op: &Op) -> bool {
    match op {
        Op::Reduce { op, .. } => matches!(op, ReduceOp::Sum | ReduceOp::Mean),
        Op::Var { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Linear
        | Op::Matmul
        | Op::Convolution { .. } => true,
        _ => false,
    }
}

/// `t` with each element times `1 + δ` (f64 tensors only; others as they are).
fn perturbed(t: &CpuTensor) -> Option<CpuTensor> {
    if t.dtype() != DType::F64 {
        return None;
    }
    let v: Vec<f64> = t
        .to_f64_vec()
        .iter()
        .map(|x| x * (1.0 + next_delta()))
        .collect();
    CpuTensor::from_f64(&v, t.shape(), DType::F64).ok()
}

/// Runs `op` eagerly with rounding noise (see the module doc): `execute` computes it on
/// the operands it is given.
pub(crate) fn execute_perturbed<E>(
    op: &Op,
    args: &[EagerArg<'_>],
    execute: impl FnOnce(&Op, &[EagerArg<'_>]) -> Result<CpuTensor, E>,
) -> Result<CpuTensor, E> {
    if !rounds(op) {
        return execute(op, args);
    }
    let out = if perturbs_operands(op) {
        let owned: Vec<Option<CpuTensor>> = args
            .iter()
            .map(|a| match a {
                EagerArg::Tensor(t) => perturbed(t),
                EagerArg::Scalar(_) => None,
            })
            .collect();
        let moved: Vec<EagerArg<'_>> = args
            .iter()
            .zip(&owned)
            .map(|(a, p)| match p {
                Some(t) => EagerArg::Tensor(t),
                None => *a,
            })
            .collect();
        execute(op, &moved)?
    } else {
        execute(op, args)?
    };
    Ok(perturbed(&out).unwrap_or(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perturbation_is_scoped_and_bounded() {
        assert!(!active());
        let unit = unit_roundoff(DType::F32);
        let deltas: Vec<f64> = with_noise(7, unit, || {
            assert!(active());
            (0..1000).map(|_| next_delta()).collect()
        });
        assert!(!active());
        assert!(deltas.iter().all(|d| d.abs() <= 2.0 * unit));
        // spread over the range, not stuck
        assert!(deltas.iter().any(|d| *d > unit) && deltas.iter().any(|d| *d < -unit));
        // outside the scope nothing moves
        assert_eq!(next_delta(), 0.0);
        // a panic inside restores the state
        let r = std::panic::catch_unwind(|| with_noise(1, unit, || panic!("inside")));
        assert!(r.is_err() && !active());
    }
}
