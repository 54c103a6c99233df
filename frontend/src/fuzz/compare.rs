//! How the fuzzer decides that two executors agree on an output.
//!
//! Integers and bools must be equal. Floats are compared normwise, as the random-program
//! tests do: each element within `atol + rtol · scale` of the reference, where `scale` is
//! the largest finite magnitude of the reference output, because a random program chains
//! ops whose roundings (different summation orders, fused or decomposed composites,
//! polynomial transcendentals) add up relative to the output's size, not to each element's.
//! NaN must meet NaN and an infinity the same infinity.
//!
//! | output dtype | atol | rtol (of the scale) | why |
//! |---|---|---|---|
//! | f32, and f64 (it may come from f32 arithmetic and a cast) | 1e-5 | 1e-4 | f32 sums in another order; the transcendentals' few ulp |
//! | f16 | 1e-3 | 8 · 2⁻¹⁰ | each decomposed intermediate rounds to f16 where an eager composite rounds once: 8 roundings |
//! | bf16 | 1e-2 | 8 · 2⁻⁷ | as f16 |
//!
//! An output is compared within the loosest bounds of the dtypes it is computed through
//! (a bf16 linear cast to f32 carries bf16's rounding), and a gradient within the loosest
//! of the whole graph ([`loosest`]): it flows back through every op, so through the lowest
//! precision.
//!
//! Ill-conditioned results can be worse than any fixed bound: a layer norm's gradient over
//! three bf16 elements cancels terms many times its size, and eager's own answer is then a
//! few percent off (kiln eager, the cuda backend and torch's bf16 each land on another side
//! of the true value); an f32 layer norm of three nearly equal values likewise. Where an
//! executor disagrees with eager, the graph is run once more with its float dtypes widened
//! to f64 (the truth, see [`super::widened`]), and the executor agrees when it is no farther
//! from the truth than twice eager's own distance plus the dtype's bounds
//! ([`no_farther_from_truth`]): a miscompile lands much farther.
//!
//! A result that cancels to 0 in real arithmetic defeats that bound: eager may land on 0
//! exactly, where a correct compiled function lands on rounding noise. So the truth also
//! comes with its rounding noise ([`super::noise`]: the spread of perturbed f64 runs), and
//! an executor agrees when it and eager are both within [`NOISE_FACTOR`] times that noise,
//! plus the bounds, of the truth ([`within_rounding_noise`]). For the interpreter, whose
//! f64 arithmetic is the truth, that is the only fallback: eager itself must be within the
//! noise.

use crate::Tensor;
use kiln_ir::DType;

/// `(atol, rtol)` of float outputs of `dtype` (see the module doc).
pub fn bounds(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (1e-3, 8.0 * 2f64.powi(-10)),
        DType::BF16 => (1e-2, 8.0 * 2f64.powi(-7)),
        _ => (1e-5, 1e-4),
    }
}

/// `Ok` when `got` matches `want` (dtype, shape, then values as the module doc says), or
/// the first difference.
pub fn agree(got: &Tensor, want: &Tensor) -> Result<(), String> {
    agree_within(got, want, bounds(want.dtype()))
}

/// The loosest bounds of float `dtypes` (f32's when there are none): the precision of a
/// result computed through all of them (a gradient flowing back through a bf16 softmax
/// into an f32 sum carries bf16's rounding).
pub fn loosest(dtypes: impl IntoIterator<Item = DType>) -> (f64, f64) {
    dtypes
        .into_iter()
        .filter(|d| d.is_float())
        .map(bounds)
        .fold(bounds(DType::F32), |a, b| if b.1 > a.1 { b } else { a })
}

/// [`agree`] with float values within `(atol, rtol)`.
pub fn agree_within(got: &Tensor, want: &Tensor, bounds: (f64, f64)) -> Result<(), String> {
    compare_values(got, want, bounds, false)
}

/// [`agree`] for the interpreter backend, which computes in f64 and holds every value as
/// an f64: where eager's f32 arithmetic overflowed (an infinity, or inf − inf = NaN), the
/// interpreter may hold a finite value or another non-finite one; and integers past 2⁵³
/// (an i64 saturated from an infinity) are not exact there. Such elements are not compared.
pub fn agree_with_f64_oracle(got: &Tensor, want: &Tensor) -> Result<(), String> {
    agree_with_f64_oracle_within(got, want, bounds(want.dtype()))
}

/// [`agree_with_f64_oracle`] with float values within `(atol, rtol)` (the interpreter's
/// gradients: its f64 products inside a matmul's backward do not overflow where eager's
/// f32 ones give inf - inf = NaN).
pub fn agree_with_f64_oracle_within(
    got: &Tensor,
    want: &Tensor,
    bounds: (f64, f64),
) -> Result<(), String> {
    compare_values(got, want, bounds, true)
}

fn compare_values(
    got: &Tensor,
    want: &Tensor,
    (atol, rtol): (f64, f64),
    oracle: bool,
) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!("{} vs {}", got.tensor_type(), want.tensor_type()));
    }
    let (g, w) = match (got.to_vec_f64(), want.to_vec_f64()) {
        (Ok(g), Ok(w)) => (g, w),
        (Err(e), _) | (_, Err(e)) => return Err(format!("reading the values: {e}")),
    };
    let exact = !want.dtype().is_float();
    let scale = w
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let inexact = |v: f64| {
        if exact {
            v.abs() >= 2f64.powi(53)
        } else {
            !v.is_finite()
        }
    };
    for (i, (p, q)) in g.iter().zip(&w).enumerate() {
        let ok = if oracle && (inexact(*q) || exact && inexact(*p)) {
            true
        } else if exact || !q.is_finite() {
            p == q || (p.is_nan() && q.is_nan())
        } else {
            (p - q).abs() <= atol + rtol * scale
        };
        if !ok {
            return Err(format!(
                "element {i}: {p} vs {q} (scale {scale:e}, atol {atol:e}, rtol {rtol:e})"
            ));
        }
    }
    Ok(())
}

/// Normwise distances of `got` and `want` from `truth`, over the elements where all are
/// finite (and the noise is, when given).
struct Distances {
    /// the largest finite magnitude of the truth
    scale: f64,
    /// the largest finite noise
    spread: f64,
    got_err: f64,
    want_err: f64,
}

/// Reads the three tensors and measures [`Distances`]. Non-finite elements of `got` and
/// `want` must match (an error names the first that does not), unless `got`'s infinity is
/// the truth rounded to the dtype, or `oracle` and eager's is not finite; elements whose
/// truth or `noise` is not finite are left out.
fn distances(
    got: &Tensor,
    want: &Tensor,
    truth: &Tensor,
    noise: Option<&[f64]>,
    oracle: bool,
) -> Result<Distances, String> {
    if got.shape() != want.shape() || truth.shape() != want.shape() {
        return Err(format!(
            "{} vs {} (truth {})",
            got.tensor_type(),
            want.tensor_type(),
            truth.tensor_type()
        ));
    }
    let read = |t: &Tensor| {
        t.to_vec_f64()
            .map_err(|e| format!("reading the values: {e}"))
    };
    let (g, w, t) = (read(got)?, read(want)?, read(truth)?);
    if let Some(n) = noise.filter(|n| n.len() != t.len()) {
        return Err(format!("{} noise values for {}", n.len(), t.len()));
    }
    let dtype = want.dtype();
    let mut d = Distances {
        scale: 0.0,
        spread: 0.0,
        got_err: 0.0,
        want_err: 0.0,
    };
    for (i, ((p, q), r)) in g.iter().zip(&w).zip(&t).enumerate() {
        if oracle && !q.is_finite() {
            continue;
        }
        if !q.is_finite() || !p.is_finite() {
            // an infinity that is the truth rounded to the dtype (a finite true value past
            // its range) is right, whatever eager's rounding made of it: `1/x` of an x
            // that cancelled to ±1e-45 overflows to the truth's sign or the other
            let rounded = dtype.is_float() && p.is_infinite() && dtype.round_f64(*r) == *p;
            if !(p == q || p.is_nan() && q.is_nan() || rounded) {
                return Err(format!("element {i}: {p} vs {q}"));
            }
            continue;
        }
        let n = noise.map_or(0.0, |n| n[i]);
        if !r.is_finite() || !n.is_finite() {
            continue;
        }
        d.scale = d.scale.max(r.abs());
        d.spread = d.spread.max(n);
        d.got_err = d.got_err.max((p - r).abs());
        d.want_err = d.want_err.max((q - r).abs());
    }
    Ok(d)
}

/// `Ok` when `got` is no farther from `truth` (the same values computed in f64) than twice
/// `want`'s (eager's) distance from it, plus `(atol, rtol)` of the truth's scale (normwise,
/// over the finite elements; non-finite elements of `got` and `want` must match as in
/// [`agree`], unless `got`'s infinity is the truth rounded to the dtype).
pub fn no_farther_from_truth(
    got: &Tensor,
    want: &Tensor,
    truth: &Tensor,
    (atol, rtol): (f64, f64),
) -> Result<(), String> {
    let d = distances(got, want, truth, None, false)?;
    let bound = 2.0 * d.want_err + atol + rtol * d.scale;
    if d.got_err <= bound {
        Ok(())
    } else {
        Err(format!(
            "{:e} from the f64 truth, eager {:e} (bound {bound:e})",
            d.got_err, d.want_err
        ))
    }
}

/// How many times the rounding noise's spread a result may stray from the truth
/// ([`within_rounding_noise`]).
pub const NOISE_FACTOR: f64 = 2.0;

/// `Ok` when `got` and `want` (eager) are each within [`NOISE_FACTOR`] times the rounding
/// noise plus `(atol, rtol)` of the truth's scale from `truth` (normwise over the finite
/// elements; `noise` is each element's largest distance from the truth over the perturbed
/// runs of [`super::noise`], and elements where it is not finite sit on a cliff rounding
/// can push them over, so are not compared). Non-finite elements of `got` and `want` must
/// match as in [`no_farther_from_truth`]; with `oracle` (`got` is the interpreter's),
/// elements where eager is not finite are not compared, as in [`agree_with_f64_oracle`].
///
/// This is what settles a result that cancels: a layer norm's weight gradient that is 0
/// in real arithmetic lands on rounding noise in f32, eager's anywhere in it and a compiled
/// function's elsewhere, both far from the truth against its scale (see the module doc).
pub fn within_rounding_noise(
    got: &Tensor,
    want: &Tensor,
    truth: &Tensor,
    noise: &[f64],
    (atol, rtol): (f64, f64),
    oracle: bool,
) -> Result<(), String> {
    let d = distances(got, want, truth, Some(noise), oracle)?;
    let bound = NOISE_FACTOR * d.spread + atol + rtol * d.scale;
    if d.got_err <= bound && d.want_err <= bound {
        Ok(())
    } else {
        Err(format!(
            "{:e} and eager {:e} from the f64 truth, rounding noise {:e} (bound {bound:e})",
            d.got_err, d.want_err, d.spread
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::DType;

    fn f32s(v: &[f64]) -> Tensor {
        Tensor::from_f64(v, &[v.len()], DType::F32).unwrap()
    }

    #[test]
    fn an_infinity_that_is_the_rounded_truth_is_right() {
        let truth = Tensor::from_f64(&[1.0, 7e44], &[2], DType::F64).unwrap();
        // eager overflowed to the other sign: the truth's rounding wins
        let (got, want) = (f32s(&[1.0, f64::INFINITY]), f32s(&[1.0, f64::NEG_INFINITY]));
        assert!(no_farther_from_truth(&got, &want, &truth, bounds(DType::F32)).is_ok());
        // the other way round, got is not the truth's rounding
        assert!(no_farther_from_truth(&want, &got, &truth, bounds(DType::F32)).is_err());
        // a finite truth inside f32's range is no excuse for an infinity
        let truth = Tensor::from_f64(&[1.0, 3.0], &[2], DType::F64).unwrap();
        assert!(no_farther_from_truth(&got, &want, &truth, bounds(DType::F32)).is_err());
    }

    #[test]
    fn rounding_noise_excuses_what_it_spans_and_no_more() {
        let b = bounds(DType::F32);
        // a cancelled result: truth 0 beside 1e3, eager 0, the executor 6 (noise 4)
        let truth = Tensor::from_f64(&[0.0, 1e3], &[2], DType::F64).unwrap();
        let (got, want) = (f32s(&[6.0, 1e3]), f32s(&[0.0, 1e3]));
        assert!(within_rounding_noise(&got, &want, &truth, &[4.0, 0.0], b, false).is_ok());
        // twice the noise plus the bounds (0.1) and no more
        assert!(within_rounding_noise(&got, &want, &truth, &[2.95, 0.0], b, false).is_ok());
        assert!(within_rounding_noise(&got, &want, &truth, &[2.5, 0.0], b, false).is_err());
        // eager must be within too (the interpreter's check: eager is what is tested)
        assert!(within_rounding_noise(&want, &got, &truth, &[2.5, 0.0], b, true).is_err());
        // noise that is not finite leaves the element out; an infinity still must match
        assert!(within_rounding_noise(&got, &want, &truth, &[f64::NAN, 0.0], b, false).is_ok());
        let inf = f32s(&[f64::INFINITY, 1e3]);
        assert!(within_rounding_noise(&inf, &want, &truth, &[f64::NAN, 0.0], b, false).is_err());
        // the interpreter is not compared where eager overflowed
        assert!(within_rounding_noise(&want, &inf, &truth, &[0.0, 0.0], b, true).is_ok());
    }
}
