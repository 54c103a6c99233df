//! The inputs the fuzzer runs a graph on: its symbols bound to a size triple's values,
//! floats standard normal with special values (NaN, ±inf, −0, a subnormal, a huge value)
//! sprinkled in, integers 0 or 1 (valid indices into any dim of size ≥ 2), bools at random,
//! and rank-2 inputs optionally as transposed (non-contiguous) views.

use crate::{Result, Tensor};
use kiln_ir::gen::splitmix;
use kiln_ir::{DType, Dim, Graph};

/// How a case lays out and fills its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// the sizes of the symbols `B` and `T`
    pub sizes: (usize, usize),
    /// the seed of the values
    pub seed: u64,
    /// rank-2 inputs as transposed views of a [n, m] tensor
    pub transposed: bool,
    /// special values in float inputs
    pub special: bool,
}

/// The special values: NaN, ±inf, −0, the smallest f32 subnormal, a value whose square
/// overflows f32.
const SPECIAL: [f64; 6] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.0,
    1.401_298_464_324_817e-45,
    3e19,
];

/// The concrete shape of `dims` with `B` and `T` bound to `sizes` (other symbols: the first).
pub fn bind(dims: &[Dim], sizes: (usize, usize)) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Const(n) => *n,
            Dim::Sym(s) if &**s == "T" => sizes.1,
            Dim::Sym(_) => sizes.0,
        })
        .collect()
}

/// The inputs of `g` for `spec`, in signature order.
pub fn make_inputs(g: &Graph, spec: InputSpec) -> Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(g.inputs().len());
    for (k, (_, id)) in g.inputs().iter().enumerate() {
        let ty = &g.node(*id).ty;
        let shape = bind(ty.shape.dims(), spec.sizes);
        let seed = spec.seed.wrapping_mul(31).wrapping_add(k as u64);
        out.push(if spec.transposed && shape.len() == 2 {
            filled(&[shape[1], shape[0]], ty.dtype, seed, spec.special)?.t()?
        } else {
            filled(&shape, ty.dtype, seed, spec.special)?
        });
    }
    Ok(out)
}

/// A tensor of `shape` and `dtype` filled as the module doc says.
fn filled(shape: &[usize], dtype: DType, seed: u64, special: bool) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let mut state = seed ^ 0x6b69_6c6e;
    let values: Vec<f64> = match dtype {
        DType::Bool => (0..n).map(|_| (splitmix(&mut state) & 1) as f64).collect(),
        d if d.is_int() => (0..n).map(|_| (splitmix(&mut state) & 1) as f64).collect(),
        _ => {
            let mut v = Tensor::randn(shape, DType::F64, seed)?.to_vec_f64()?;
            if special && n > 0 {
                for _ in 0..1 + n / 16 {
                    let at = splitmix(&mut state) as usize % n;
                    v[at] = SPECIAL[splitmix(&mut state) as usize % SPECIAL.len()];
                }
            }
            v
        }
    };
    Tensor::from_f64(&values, shape, dtype)
}
