//! Division by a row value as multiplication by its reciprocal: `p / r`, with `p` varying
//! along the inner loop and `r` constant along it (a softmax's row sum, a per-row load),
//! becomes `p * (1/r)` with `1/r` computed once per row. A vector division costs several
//! times a multiplication (≈3.5 cycles per F32X4 against 0.5 here), and softmax's last loop
//! is one division per element otherwise.
//!
//! The result differs from `p / r` by at most one rounding of `1/r` (≤ 1.5 ulp in all; eager
//! softmax multiplies by the reciprocal too). The special values agree: `r = ±0` gives
//! `±inf` or NaN (`0·inf`), `r = ±inf` gives `±0` or NaN, NaN gives NaN. The one range where
//! they part is `0 < |r| < 2^-128`, where `1/r` overflows and a finite `p / r` becomes
//! infinite.
//!
//! A literal divisor (`x / 3.0`, a decomposed `hardswish`'s `/ 6`) is rewritten only when
//! its reciprocal is exact (a power of two), where the product is the quotient bit for bit:
//! dividing by a constant is what the user wrote, and eager divides, so compiled code does
//! too (`CompileOptions::fast_math` lets the optimiser multiply instead).

use super::{Expr, ScalarType, Stmt};
use kiln_ir::{BinaryOp, UnaryOp};

/// Rewrites every point `p / r` with a row-level `r` into `p * recip(r)`; one reciprocal
/// statement per distinct divisor, appended to the body (phase planning computes it with
/// the other row values before the loop that needs it). Returns how many divisions were
/// rewritten.
pub(crate) fn reciprocal_row_divisors(body: &mut Vec<Stmt>) -> usize {
    let mut recip_of: Vec<(usize, usize)> = Vec::new();
    let mut rewritten = 0;
    for v in 0..body.len() {
        let Expr::Binary(BinaryOp::Div, p, r) = body[v].expr else {
            continue;
        };
        if body[v].row || !body[r].row || body[r].ty != ScalarType::F32 {
            continue;
        }
        if let Expr::Const(c) = body[r].expr {
            if !exact_reciprocal(c) {
                continue;
            }
        }
        let inv = match recip_of.iter().find(|(d, _)| *d == r) {
            Some(&(_, inv)) => inv,
            None => {
                body.push(Stmt {
                    expr: Expr::Unary(UnaryOp::Recip, r),
                    ty: ScalarType::F32,
                    row: true,
                });
                recip_of.push((r, body.len() - 1));
                body.len() - 1
            }
        };
        body[v].expr = Expr::Binary(BinaryOp::Mul, p, inv);
        rewritten += 1;
    }
    rewritten
}

/// True when `1/c` is exact in f32: `c` a power of two whose reciprocal is a normal number.
fn exact_reciprocal(c: f64) -> bool {
    let c = c as f32;
    let bits = c.to_bits();
    let exponent = (bits >> 23) & 0xff;
    bits & 0x7f_ffff == 0 && (1..=253).contains(&exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(expr: Expr, row: bool) -> Stmt {
        Stmt::f32(expr, row)
    }

    #[test]
    fn point_over_row_becomes_a_product_with_one_reciprocal_per_divisor() {
        let mut body = vec![
            stmt(Expr::Load(0), false),                          // 0: p
            stmt(Expr::Reduce(kiln_ir::ReduceOp::Sum, 0), true), // 1: r
            stmt(Expr::Binary(BinaryOp::Div, 0, 1), false),      // 2: p / r
            stmt(Expr::Unary(UnaryOp::Exp, 0), false),           // 3
            stmt(Expr::Binary(BinaryOp::Div, 3, 1), false),      // 4: q / r
            stmt(Expr::Binary(BinaryOp::Div, 1, 0), false),      // 5: r / p stays
            stmt(Expr::Const(2.0), true),                        // 6
            stmt(Expr::Binary(BinaryOp::Div, 1, 6), true),       // 7: row / row stays
        ];
        assert_eq!(reciprocal_row_divisors(&mut body), 2);
        assert_eq!(body.len(), 9);
        assert_eq!(body[8], stmt(Expr::Unary(UnaryOp::Recip, 1), true));
        assert_eq!(body[2].expr, Expr::Binary(BinaryOp::Mul, 0, 8));
        assert_eq!(body[4].expr, Expr::Binary(BinaryOp::Mul, 3, 8));
        assert_eq!(body[5].expr, Expr::Binary(BinaryOp::Div, 1, 0));
        assert_eq!(body[7].expr, Expr::Binary(BinaryOp::Div, 1, 6));
    }

    #[test]
    fn a_literal_divisor_becomes_a_product_only_when_its_reciprocal_is_exact() {
        let mut body = vec![
            stmt(Expr::Load(0), false),                     // 0: p
            stmt(Expr::Const(3.0), true),                   // 1
            stmt(Expr::Binary(BinaryOp::Div, 0, 1), false), // 2: p / 3 stays
            stmt(Expr::Const(-0.25), true),                 // 3
            stmt(Expr::Binary(BinaryOp::Div, 0, 3), false), // 4: p / -0.25 = p * -4
        ];
        assert_eq!(reciprocal_row_divisors(&mut body), 1);
        assert_eq!(body[2].expr, Expr::Binary(BinaryOp::Div, 0, 1));
        assert_eq!(body[4].expr, Expr::Binary(BinaryOp::Mul, 0, 5));
        for (c, exact) in [
            (1.0, true),
            (2.0, true),
            (0.5, true),
            (6.0, false),
            (0.1, false),
        ] {
            assert_eq!(exact_reciprocal(c), exact, "{c}");
        }
        // 2^127's reciprocal is a denormal, 2^-127 is one itself
        assert!(!exact_reciprocal(2f64.powi(127)));
        assert!(!exact_reciprocal(2f64.powi(-127)));
        assert!(!exact_reciprocal(0.0) && !exact_reciprocal(f64::INFINITY));
    }
}
