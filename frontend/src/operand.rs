//! Operands of binary ops: a tensor or a scalar, so that `x.add(&y)` and `x.add(1.5)` both work.

use crate::Tensor;
use kiln_ir::Scalar;

/// The right-hand side of a binary op: a tensor or a scalar literal.
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    /// a tensor operand
    Tensor(&'a Tensor),
    /// a scalar operand (takes part in type promotion like a Python number in PyTorch)
    Scalar(Scalar),
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Tensor(t)
    }
}

macro_rules! scalar_operand {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand<'_> {
            fn from(v: $t) -> Self {
                Operand::Scalar(Scalar::from(v))
            }
        }
    )*};
}
scalar_operand!(f64, f32, i64, i32, bool);

impl From<Scalar> for Operand<'_> {
    fn from(s: Scalar) -> Self {
        Operand::Scalar(s)
    }
}
