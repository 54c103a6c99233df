//! How a compiled function's arguments and results are flattened to tensors and rebuilt.

use crate::Tensor;
use std::borrow::Borrow;

/// The arguments of a compiled function: one tensor, a tuple of tensors, a slice or a
/// `Vec` of them. A function `Fn(&A) -> Result<O>` is compiled; it is called with `&A`.
pub trait TensorArgs {
    /// An owned value that borrows as `Self` (the same type, or `Vec` for a slice).
    type Owned: Borrow<Self>;
    /// The tensors, in order.
    fn flatten(&self) -> Vec<Tensor>;
    /// The same structure holding `tensors` (as many as `flatten` gave) instead.
    fn rebuild(&self, tensors: Vec<Tensor>) -> Self::Owned;
}

impl TensorArgs for Tensor {
    type Owned = Tensor;
    fn flatten(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
    fn rebuild(&self, tensors: Vec<Tensor>) -> Tensor {
        tensors.into_iter().next().expect("one tensor")
    }
}

impl TensorArgs for [Tensor] {
    type Owned = Vec<Tensor>;
    fn flatten(&self) -> Vec<Tensor> {
        self.to_vec()
    }
    fn rebuild(&self, tensors: Vec<Tensor>) -> Vec<Tensor> {
        tensors
    }
}

impl TensorArgs for Vec<Tensor> {
    type Owned = Vec<Tensor>;
    fn flatten(&self) -> Vec<Tensor> {
        self.clone()
    }
    fn rebuild(&self, tensors: Vec<Tensor>) -> Vec<Tensor> {
        tensors
    }
}

impl<const N: usize> TensorArgs for [Tensor; N] {
    type Owned = [Tensor; N];
    fn flatten(&self) -> Vec<Tensor> {
        self.to_vec()
    }
    fn rebuild(&self, tensors: Vec<Tensor>) -> [Tensor; N] {
        tensors.try_into().unwrap_or_else(|_| panic!("{N} tensors"))
    }
}

macro_rules! tensor_ty {
    ($v:ident) => {
        Tensor
    };
}

macro_rules! tuple_args {
    ($($t:ident),*) => {
        impl TensorArgs for ($(tensor_ty!($t),)*) {
            type Owned = Self;
            #[allow(non_snake_case)]
            fn flatten(&self) -> Vec<Tensor> {
                let ($($t,)*) = self;
                vec![$($t.clone()),*]
            }
            #[allow(non_snake_case)]
            fn rebuild(&self, tensors: Vec<Tensor>) -> Self {
                let mut it = tensors.into_iter();
                $(let $t = it.next().expect("tensor");)*
                ($($t,)*)
            }
        }

        impl TensorOutputs for ($(tensor_ty!($t),)*) {
            #[allow(non_snake_case)]
            fn flatten(self) -> Vec<Tensor> {
                let ($($t,)*) = self;
                vec![$($t),*]
            }
            #[allow(non_snake_case)]
            fn unflatten(tensors: Vec<Tensor>) -> Self {
                let mut it = tensors.into_iter();
                $(let $t = it.next().expect("tensor");)*
                ($($t,)*)
            }
        }
    };
}

/// The result of a compiled function: one tensor, a tuple of tensors or a `Vec`.
pub trait TensorOutputs: Sized {
    /// The tensors, in order.
    fn flatten(self) -> Vec<Tensor>;
    /// The same structure from tensors (as many, in the order `flatten` gave).
    fn unflatten(tensors: Vec<Tensor>) -> Self;
}

impl TensorOutputs for Tensor {
    fn flatten(self) -> Vec<Tensor> {
        vec![self]
    }
    fn unflatten(tensors: Vec<Tensor>) -> Tensor {
        tensors.into_iter().next().expect("one tensor")
    }
}

impl TensorOutputs for Vec<Tensor> {
    fn flatten(self) -> Vec<Tensor> {
        self
    }
    fn unflatten(tensors: Vec<Tensor>) -> Vec<Tensor> {
        tensors
    }
}

tuple_args!(a, b);
tuple_args!(a, b, c);
tuple_args!(a, b, c, d);
