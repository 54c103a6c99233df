//! A counter-based random generator: element `i` of a tensor drawn with seed `s` is a pure
//! function of `(s, i)`, so eager kernels (in parallel, in any order), the interpreter and
//! generated code all produce the same numbers.

/// SplitMix64's finaliser: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn bits(seed: u64, i: u64, stream: u64) -> u64 {
    mix(mix(seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_add(i.wrapping_mul(2).wrapping_add(stream)))
}

/// Uniform sample in [0, 1) for element `i`, with 24 random bits (exact in f32 and f64).
pub fn uniform(seed: u64, i: u64) -> f64 {
    (bits(seed, i, 0) >> 40) as f64 * (1.0 / (1u64 << 24) as f64)
}

/// Standard normal sample for element `i` (Box–Muller over two 53-bit uniforms).
pub fn normal(seed: u64, i: u64) -> f64 {
    let u1 = ((bits(seed, i, 0) >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64);
    let u2 = (bits(seed, i, 1) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_plausible() {
        let n = 100_000u64;
        let m: f64 = (0..n).map(|i| normal(7, i)).sum::<f64>() / n as f64;
        let v: f64 = (0..n).map(|i| normal(7, i).powi(2)).sum::<f64>() / n as f64;
        assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.02, "mean {m} var {v}");
        let u: f64 = (0..n).map(|i| uniform(7, i)).sum::<f64>() / n as f64;
        assert!((u - 0.5).abs() < 0.01);
        assert!((0..n).all(|i| (0.0..1.0).contains(&uniform(3, i))));
    }
}
