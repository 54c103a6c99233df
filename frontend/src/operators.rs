//! `+ - * /` and unary `-` on tensors and scalars. Like every op they can fail (shapes that
//! do not broadcast), so they return [`Result<Tensor>`]: `let y = (&a + &b)?;`. Scalars are
//! `f64` or `i64` (one float and one integer type, so that literals like `2.0` infer).

use crate::error::Result;
use crate::{Operand, Tensor};
use kiln_ir::{BinaryOp, Op, Scalar};
use std::ops::{Add, Div, Mul, Neg, Sub};

#[track_caller]
fn binary(op: BinaryOp, a: Operand<'_>, b: Operand<'_>) -> Result<Tensor> {
    Tensor::apply(&Op::Binary(op), &[a, b])
}

macro_rules! tensor_operators {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, self.into(), rhs.into())
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, (&self).into(), (&rhs).into())
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, (&self).into(), rhs.into())
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, self.into(), (&rhs).into())
            }
        }
        tensor_operators!(@scalars $trait $method $op f64 i64);
    )*};
    (@scalars $trait:ident $method:ident $op:ident $($s:ty)*) => {$(
        impl $trait<$s> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: $s) -> Result<Tensor> {
                binary(BinaryOp::$op, self.into(), Operand::Scalar(Scalar::from(rhs)))
            }
        }
        impl $trait<$s> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: $s) -> Result<Tensor> {
                binary(BinaryOp::$op, (&self).into(), Operand::Scalar(Scalar::from(rhs)))
            }
        }
        impl $trait<&Tensor> for $s {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, Operand::Scalar(Scalar::from(self)), rhs.into())
            }
        }
        impl $trait<Tensor> for $s {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary(BinaryOp::$op, Operand::Scalar(Scalar::from(self)), (&rhs).into())
            }
        }
    )*};
}

tensor_operators!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
