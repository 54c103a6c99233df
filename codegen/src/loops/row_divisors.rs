//! Division by a row value as multiplication by its reciprocal: `p / r`, with `p` varying
//! along the inner loop and `r` constant along it (a softmax's row sum, a per-row load),
//! becomes a product with `1/r` computed once per row. A vector division costs several
//! times a multiplication (≈3.5 cycles per F32X4 against 0.5 here), and softmax's last loop
//! is one division per element otherwise.
//!
//! The divisor is first scaled into the range where its reciprocal is a normal number:
//! `p / r = (p · 1/(r·s)) · s` with `s = 2^64` when `|r| < 2^-126`, `2^-64` when
//! `|r| > 2^126`, else 1 (all exact). Without it, `1/r` overflows for a subnormal `r`
//! (`x / 1e-45` became `x · inf`, infinite where the quotient is 1) and loses bits for a
//! huge one. The result then differs from `p / r` by at most one rounding of the
//! reciprocal (≤ 1.5 ulp in all; eager softmax multiplies by the reciprocal too). The
//! special values agree: `r = ±0` gives `±inf` or NaN (`0·inf`), `r = ±inf` gives `±0` or
//! NaN, NaN gives NaN.
//!
//! A literal divisor (`x / 3.0`, a decomposed `hardswish`'s `/ 6`) is rewritten only when
//! its reciprocal is exact (a power of two), where the product is the quotient bit for bit:
//! dividing by a constant is what the user wrote, and eager divides, so compiled code does
//! too (`CompileOptions::fast_math` lets the optimiser multiply instead).

use super::{Expr, ScalarType, Stmt, Store, ValueId};
use kiln_ir::{BinaryOp, UnaryOp};

/// Rewrites every point `p / r` with a row-level `r` into `(p * recip(r·s)) * s` (a literal
/// `r` with an exact reciprocal into `p * (1/r)`); the row statements, one set per distinct
/// divisor, are placed before the first division by it, and `stores` follow the
/// renumbering. Returns how many divisions were rewritten.
pub(crate) fn reciprocal_row_divisors(body: &mut Vec<Stmt>, stores: &mut [Store]) -> usize {
    let old = std::mem::take(body);
    // the new id of each old statement
    let mut new_id: Vec<ValueId> = Vec::with_capacity(old.len());
    // per divisor (an old id): its reciprocal and its scale (None for an exact literal)
    let mut recip_of: Vec<(ValueId, ValueId, Option<ValueId>)> = Vec::new();
    let mut rewritten = 0;
    for stmt in &old {
        let mut expr = stmt.expr.clone();
        rename(&mut expr, &new_id);
        let divisor = match stmt.expr {
            Expr::Binary(BinaryOp::Div, _, r)
                if !stmt.row && old[r].row && old[r].ty == ScalarType::F32 =>
            {
                match old[r].expr {
                    Expr::Const(c) if !exact_reciprocal(c) => None,
                    Expr::Const(_) => Some((r, true)),
                    _ => Some((r, false)),
                }
            }
            _ => None,
        };
        if let (Some((r, literal)), Expr::Binary(_, p, _)) = (divisor, expr.clone()) {
            let (inv, scale) = match recip_of.iter().find(|(d, _, _)| *d == r) {
                Some(&(_, inv, scale)) => (inv, scale),
                None => {
                    let divisor = new_id[r];
                    let (inv, scale) = if literal {
                        let recip = Expr::Unary(UnaryOp::Recip, divisor);
                        (push(body, recip, ScalarType::F32), None)
                    } else {
                        let (inv, scale) = scaled_reciprocal(body, divisor);
                        (inv, Some(scale))
                    };
                    recip_of.push((r, inv, scale));
                    (inv, scale)
                }
            };
            expr = match scale {
                None => Expr::Binary(BinaryOp::Mul, p, inv),
                Some(s) => {
                    body.push(Stmt {
                        expr: Expr::Binary(BinaryOp::Mul, p, inv),
                        ty: ScalarType::F32,
                        row: false,
                    });
                    Expr::Binary(BinaryOp::Mul, body.len() - 1, s)
                }
            };
            rewritten += 1;
        }
        body.push(Stmt {
            expr,
            ty: stmt.ty,
            row: stmt.row,
        });
        new_id.push(body.len() - 1);
    }
    for store in stores {
        store.value = new_id[store.value];
    }
    rewritten
}

/// Renames the operands of `e` (old statement ids) to their new ids.
fn rename(e: &mut Expr, new_id: &[ValueId]) {
    match e {
        Expr::Load(_) | Expr::Const(_) | Expr::InnerLen => {}
        Expr::Unary(_, x)
        | Expr::BoolToF32(x)
        | Expr::Widen(x)
        | Expr::Narrow(x)
        | Expr::Round(_, x)
        | Expr::Reduce(_, x) => *x = new_id[*x],
        Expr::Binary(_, x, y) => {
            *x = new_id[*x];
            *y = new_id[*y];
        }
        Expr::Where(c, x, y) => {
            *c = new_id[*c];
            *x = new_id[*x];
            *y = new_id[*y];
        }
    }
}

/// Appends a row statement; returns its id.
fn push(body: &mut Vec<Stmt>, expr: Expr, ty: ScalarType) -> ValueId {
    body.push(Stmt {
        expr,
        ty,
        row: true,
    });
    body.len() - 1
}

/// Row statements for `s` (see the module doc) and `1/(r·s)`: returns (reciprocal, scale).
fn scaled_reciprocal(body: &mut Vec<Stmt>, r: ValueId) -> (ValueId, ValueId) {
    use ScalarType::{Bool, F32};
    let magnitude = push(body, Expr::Unary(UnaryOp::Abs, r), F32);
    let tiny_limit = push(body, Expr::Const(2f64.powi(-126)), F32);
    let huge_limit = push(body, Expr::Const(2f64.powi(126)), F32);
    let tiny = push(
        body,
        Expr::Binary(BinaryOp::Lt, magnitude, tiny_limit),
        Bool,
    );
    let huge = push(
        body,
        Expr::Binary(BinaryOp::Gt, magnitude, huge_limit),
        Bool,
    );
    let up = push(body, Expr::Const(2f64.powi(64)), F32);
    let down = push(body, Expr::Const(2f64.powi(-64)), F32);
    let one = push(body, Expr::Const(1.0), F32);
    let big_or_one = push(body, Expr::Where(huge, down, one), F32);
    let scale = push(body, Expr::Where(tiny, up, big_or_one), F32);
    let scaled = push(body, Expr::Binary(BinaryOp::Mul, r, scale), F32);
    let inv = push(body, Expr::Unary(UnaryOp::Recip, scaled), F32);
    (inv, scale)
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
        let mut stores = vec![Store {
            buffer: 0,
            value: 4,
        }];
        assert_eq!(reciprocal_row_divisors(&mut body, &mut stores), 2);
        // r's scale and reciprocal (12 row statements) before the first division by it,
        // then a point product and the scaling per division
        assert_eq!(body.len(), 8 + 12 + 2);
        let (scale, inv) = (11, 13);
        assert_eq!(body[12], stmt(Expr::Binary(BinaryOp::Mul, 1, scale), true));
        assert_eq!(body[inv], stmt(Expr::Unary(UnaryOp::Recip, 12), true));
        assert_eq!(body[14], stmt(Expr::Binary(BinaryOp::Mul, 0, inv), false));
        assert_eq!(body[15].expr, Expr::Binary(BinaryOp::Mul, 14, scale));
        assert_eq!(body[16].expr, Expr::Unary(UnaryOp::Exp, 0));
        assert_eq!(body[17], stmt(Expr::Binary(BinaryOp::Mul, 16, inv), false));
        assert_eq!(body[18].expr, Expr::Binary(BinaryOp::Mul, 17, scale));
        assert_eq!(body[19].expr, Expr::Binary(BinaryOp::Div, 1, 0));
        assert_eq!(body[21].expr, Expr::Binary(BinaryOp::Div, 1, 20));
        // the store of q / r follows it
        assert_eq!(stores[0].value, 18);
        // every operand is defined before it is used
        for (i, st) in body.iter().enumerate() {
            assert!(super::super::phases::operands(&st.expr)
                .iter()
                .all(|&o| o < i));
        }
    }

    /// The rewrite's arithmetic, in f32: `(p · 1/(r·s)) · s` against `p / r`.
    fn rewritten(p: f32, r: f32) -> f32 {
        let s: f32 = if r.abs() < 2f32.powi(-126) {
            2f32.powi(64)
        } else if r.abs() > 2f32.powi(126) {
            2f32.powi(-64)
        } else {
            1.0
        };
        (p * (1.0 / (r * s))) * s
    }

    #[test]
    fn the_scaled_reciprocal_keeps_subnormal_and_huge_divisors_right() {
        let tiny = f32::from_bits(1); // 1.4e-45
        assert_eq!(rewritten(tiny, tiny), 1.0);
        assert_eq!(rewritten(-tiny, tiny), -1.0);
        assert_eq!(rewritten(1.0, tiny), f32::INFINITY);
        assert_eq!(rewritten(0.0, tiny), 0.0);
        let huge = 3.0 * 2f32.powi(126);
        assert_eq!(rewritten(huge, huge), 1.0);
        let q = rewritten(f32::MAX, huge);
        assert!((q - f32::MAX / huge).abs() <= 2.0 * f32::EPSILON * q, "{q}");
        assert_eq!(rewritten(1.0, 0.0), f32::INFINITY);
        assert_eq!(rewritten(1.0, -0.0), f32::NEG_INFINITY);
        assert!(rewritten(0.0, 0.0).is_nan());
        assert_eq!(rewritten(1.0, f32::INFINITY), 0.0);
        assert!(rewritten(1.0, f32::NAN).is_nan());
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
        assert_eq!(reciprocal_row_divisors(&mut body, &mut []), 1);
        assert_eq!(body[2].expr, Expr::Binary(BinaryOp::Div, 0, 1));
        assert_eq!(body[4].expr, Expr::Unary(UnaryOp::Recip, 3));
        assert_eq!(body[5].expr, Expr::Binary(BinaryOp::Mul, 0, 4));
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
