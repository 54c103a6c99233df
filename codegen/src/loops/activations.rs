//! Re-forming the activations that decomposition spelled out: the `decompose` pass writes
//! `gelu` as `x * 0.5 * (erf(x * 0.7071067811865476) + 1)` and its tanh form as
//! `x * 0.5 * (tanh((x + x*x*x * 0.044715) * 0.7978845608028654) + 1)` (PyTorch's
//! decompositions), which the code generators would otherwise compute op by op. The
//! backends have each as one routine (`x·Φ(x)` through an erfc-based tail, and
//! `x / (1 + e^(-2u))`, the same function as `0.5·x·(1 + tanh u)`): cheaper, and accurate
//! where the spelled-out form cancels (`1 + tanh u` and `1 + erf` for x ≪ 0, where eager's
//! own rounding error is up to `0.5·|x|·2^-24` absolute).
//!
//! Only these exact shapes are matched (multiplications and additions in either operand
//! order, the constants as decomposition writes them), so no other program changes.

use super::{Expr, Stmt, ValueId};
use kiln_ir::{BinaryOp, UnaryOp};
use std::f64::consts::FRAC_1_SQRT_2;

/// The constants of the tanh form as decomposition writes them (`1/√2` is
/// [`FRAC_1_SQRT_2`], which prints as decomposition's `0.7071067811865476`).
const SQRT_2_OVER_PI: f64 = 0.7978845608028654;
const GELU_CUBIC: f64 = 0.044715;

/// Rewrites every statement that computes a decomposed gelu (either form) into the one
/// unary op; the statements it was built from are left for dead-code removal by phase
/// planning (which schedules only what stores and reductions need). Returns how many were
/// re-formed.
pub(crate) fn fuse_activations(body: &mut [Stmt]) -> usize {
    let mut fused = 0;
    for v in 0..body.len() {
        if let Some((op, x)) = gelu_of(body, v) {
            body[v].expr = Expr::Unary(op, x);
            fused += 1;
        }
    }
    fused
}

fn is_const(body: &[Stmt], v: ValueId, c: f64) -> bool {
    matches!(body[v].expr, Expr::Const(k) if k == c)
}

/// `(a, b)` when `v` is `op(a, b)`.
fn binary(body: &[Stmt], v: ValueId, op: BinaryOp) -> Option<(ValueId, ValueId)> {
    match body[v].expr {
        Expr::Binary(o, a, b) if o == op => Some((a, b)),
        _ => None,
    }
}

/// `x` when `v` is `op(x, c)` or `op(c, x)` for the constant `c` (op commutative).
fn with_const(body: &[Stmt], v: ValueId, op: BinaryOp, c: f64) -> Option<ValueId> {
    let (a, b) = binary(body, v, op)?;
    if is_const(body, b, c) {
        Some(a)
    } else if is_const(body, a, c) {
        Some(b)
    } else {
        None
    }
}

fn unary(body: &[Stmt], v: ValueId, op: UnaryOp) -> Option<ValueId> {
    match body[v].expr {
        Expr::Unary(o, x) if o == op => Some(x),
        _ => None,
    }
}

/// Both operand orders of a commutative `v = op(a, b)`.
fn orders(body: &[Stmt], v: ValueId, op: BinaryOp) -> Vec<(ValueId, ValueId)> {
    match binary(body, v, op) {
        Some((a, b)) => vec![(a, b), (b, a)],
        None => vec![],
    }
}

/// `(GeluTanh or Gelu, x)` when `v` is a decomposed gelu of `x`.
fn gelu_of(body: &[Stmt], v: ValueId) -> Option<(UnaryOp, ValueId)> {
    for (half, one_plus) in orders(body, v, BinaryOp::Mul) {
        let Some(x) = with_const(body, half, BinaryOp::Mul, 0.5) else {
            continue;
        };
        let Some(f) = with_const(body, one_plus, BinaryOp::Add, 1.0) else {
            continue;
        };
        if let Some(u) = unary(body, f, UnaryOp::Tanh) {
            if is_tanh_argument(body, u, x) {
                return Some((UnaryOp::GeluTanh, x));
            }
        }
        if let Some(s) = unary(body, f, UnaryOp::Erf) {
            if with_const(body, s, BinaryOp::Mul, FRAC_1_SQRT_2) == Some(x) {
                return Some((UnaryOp::Gelu, x));
            }
        }
    }
    None
}

/// Whether `u` is `(x + x*x*x * 0.044715) * sqrt(2/π)`.
fn is_tanh_argument(body: &[Stmt], u: ValueId, x: ValueId) -> bool {
    let Some(s) = with_const(body, u, BinaryOp::Mul, SQRT_2_OVER_PI) else {
        return false;
    };
    orders(body, s, BinaryOp::Add).into_iter().any(|(a, k)| {
        a == x
            && with_const(body, k, BinaryOp::Mul, GELU_CUBIC)
                .is_some_and(|cube| is_cube(body, cube, x))
    })
}

/// Whether `c` is `x*x*x` (as `(x*x)*x` or `x*(x*x)`).
fn is_cube(body: &[Stmt], c: ValueId, x: ValueId) -> bool {
    orders(body, c, BinaryOp::Mul).into_iter().any(|(sq, y)| {
        y == x && binary(body, sq, BinaryOp::Mul).is_some_and(|(p, q)| p == x && q == x)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::ScalarType;

    fn stmt(expr: Expr) -> Stmt {
        Stmt {
            expr,
            ty: ScalarType::F32,
            row: false,
        }
    }

    /// The body decomposition gives `gelu_tanh(x)` (x = value 0), with the tanh argument's
    /// additions and multiplications in the given orders.
    fn tanh_form(swap: bool) -> Vec<Stmt> {
        use BinaryOp::{Add, Mul};
        let c = |k| stmt(Expr::Const(k));
        let b = |op, x: usize, y: usize| {
            if swap {
                stmt(Expr::Binary(op, y, x))
            } else {
                stmt(Expr::Binary(op, x, y))
            }
        };
        vec![
            stmt(Expr::Load(0)),                 // 0 x
            b(Mul, 0, 0),                        // 1 x*x
            b(Mul, 1, 0),                        // 2 x*x*x
            c(GELU_CUBIC),                       // 3
            b(Mul, 2, 3),                        // 4
            b(Add, 0, 4),                        // 5
            c(SQRT_2_OVER_PI),                   // 6
            b(Mul, 5, 6),                        // 7
            stmt(Expr::Unary(UnaryOp::Tanh, 7)), // 8
            c(1.0),                              // 9
            b(Add, 8, 9),                        // 10
            c(0.5),                              // 11
            b(Mul, 0, 11),                       // 12
            b(Mul, 12, 10),                      // 13
        ]
    }

    #[test]
    fn decomposed_gelu_tanh_is_reformed_in_either_operand_order() {
        for swap in [false, true] {
            let mut body = tanh_form(swap);
            assert_eq!(fuse_activations(&mut body), 1);
            assert_eq!(body[13].expr, Expr::Unary(UnaryOp::GeluTanh, 0));
        }
    }

    #[test]
    fn decomposed_gelu_erf_is_reformed() {
        use BinaryOp::{Add, Mul};
        let mut body = vec![
            stmt(Expr::Load(0)),
            stmt(Expr::Const(FRAC_1_SQRT_2)),
            stmt(Expr::Binary(Mul, 0, 1)),
            stmt(Expr::Unary(UnaryOp::Erf, 2)),
            stmt(Expr::Const(1.0)),
            stmt(Expr::Binary(Add, 3, 4)),
            stmt(Expr::Const(0.5)),
            stmt(Expr::Binary(Mul, 0, 6)),
            stmt(Expr::Binary(Mul, 7, 5)),
        ];
        assert_eq!(fuse_activations(&mut body), 1);
        assert_eq!(body[8].expr, Expr::Unary(UnaryOp::Gelu, 0));
    }

    #[test]
    fn near_misses_are_left_alone() {
        // a different constant, or the tanh of another value, is not gelu
        let mut body = tanh_form(false);
        body[11].expr = Expr::Const(0.25);
        assert_eq!(fuse_activations(&mut body), 0);
        let mut body = tanh_form(false);
        body[1].expr = Expr::Binary(BinaryOp::Mul, 0, 9); // x*1, not x*x
        assert_eq!(fuse_activations(&mut body), 0);
    }
}
