//! The eager kernels, one file per family.

pub(crate) mod conv;
mod conv_by_channel;
mod conv_few_outputs;
pub(crate) mod create;
pub(crate) mod few_rows;
pub(crate) mod inplace;
pub(crate) mod layout;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod pointwise;
pub(crate) mod reduce;
