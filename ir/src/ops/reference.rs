//! The f64 reference semantics of the ops whose definition is more than an expression:
//! what the interpreter computes and every backend is compared with. Each follows PyTorch
//! (`torch.sign(nan)` is 0, `remainder` takes the divisor's sign, `round` ties to even).

use crate::Op;

/// `max(x, 0)`, NaN kept; `x` itself where it is not below 0, so `relu(-0) = -0` as in
/// PyTorch.
pub fn relu(x: f64) -> f64 {
    if x < 0.0 {
        0.0
    } else {
        x
    }
}

/// `1 / (1 + e^-x)`
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `x·Φ(x)` with the exact normal CDF, written with `erfc` so that the left tail does not
/// cancel.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// gelu's tanh approximation, `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// `x · sigmoid(x)`
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `maximum(a, b)`: NaN propagates, and equal operands give `b` (`maximum(0, -0) = -0`),
/// as PyTorch's vectorised loop gives them (its scalar loop gives `a`).
pub fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b {
        a
    } else {
        b
    }
}

/// `minimum(a, b)`: NaN propagates, and equal operands give `b`, as in PyTorch.
pub fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b {
        a
    } else {
        b
    }
}

/// `clamp(x, lo, hi) = minimum(hi, maximum(lo, x))`: NaN propagates from any operand,
/// `lo > hi` gives `hi`, and an `x` equal to a bound is kept (`clamp(-0, 0, 6) = -0`), as
/// in PyTorch.
pub fn clamp(x: f64, lo: f64, hi: f64) -> f64 {
    minimum(hi, maximum(lo, x))
}

/// `sign(x)` in {-1, 0, 1}; `sign(NaN) = 0` as PyTorch gives it.
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// `fmod(a, b)`: the remainder of truncated division, with `a`'s sign (C's `fmod`).
pub fn fmod(a: f64, b: f64) -> f64 {
    libm::fmod(a, b)
}

/// `remainder(a, b)`: the remainder of floored division, with `b`'s sign (Python's `%`),
/// computed exactly from `fmod` as PyTorch does.
pub fn remainder(a: f64, b: f64) -> f64 {
    let m = libm::fmod(a, b);
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m + b
    } else {
        m
    }
}

/// A value as a truth value (non-zero, NaN included, is true).
pub fn truth(x: f64) -> bool {
    x != 0.0
}

/// The bits of an integer operand (integers are exact in f64 up to 2^53).
pub fn int(x: f64) -> i64 {
    x as i64
}

/// `relu6(x) = clamp(x, 0, 6)`
pub fn relu6(x: f64) -> f64 {
    clamp(x, 0.0, 6.0)
}

/// `x · relu6(x + 3) / 6`
pub fn hardswish(x: f64) -> f64 {
    x * relu6(x + 3.0) / 6.0
}

/// `softplus(x) = log(1 + e^(βx)) / β`, or `x` where `βx > threshold`.
pub fn softplus_with(x: f64, beta: f64, threshold: f64) -> f64 {
    if x * beta > threshold {
        x
    } else {
        (x * beta).exp().ln_1p() / beta
    }
}

/// `x · tanh(softplus(x))`
pub fn mish(x: f64) -> f64 {
    x * softplus_with(x, 1.0, 20.0).tanh()
}

/// The attributed pointwise ops on one value (`leaky_relu`, `elu`, `softplus`, `hardtanh`,
/// `nan_to_num`).
pub fn unary_with_attrs(op: &Op, x: f64) -> f64 {
    match op {
        Op::LeakyRelu { negative_slope } => {
            if x > 0.0 {
                x
            } else {
                x * negative_slope.get()
            }
        }
        Op::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha.get() * x.exp_m1()
            }
        }
        Op::Softplus { beta, threshold } => softplus_with(x, beta.get(), threshold.get()),
        Op::Hardtanh { min_val, max_val } => clamp(x, min_val.get(), max_val.get()),
        Op::NanToNum {
            nan,
            posinf,
            neginf,
        } => {
            if x.is_nan() {
                nan.get()
            } else if x == f64::INFINITY {
                posinf.get()
            } else if x == f64::NEG_INFINITY {
                neginf.get()
            } else {
                x
            }
        }
        // the table names this reference only for the ops above
        _ => f64::NAN,
    }
}
