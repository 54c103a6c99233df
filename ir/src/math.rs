//! Scalar math the reference semantics need and `std` lacks.

/// The error function, to full f64 precision (from `libm`).
pub fn erf(x: f64) -> f64 {
    libm::erf(x)
}
