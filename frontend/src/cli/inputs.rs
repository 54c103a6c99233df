//! Inputs for `kiln run`: random tensors of each input's type (symbolic dims sized by
//! `--dim`), or tensors of a safetensors file matched to inputs by name.

use super::CliError;
use kiln::{DType, Dim, Graph, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Resolves a symbolic dim's size from `--dim`, or fails naming the flag to pass.
fn size_of(d: &Dim, dims: &HashMap<String, usize>, input: &str) -> Result<usize, CliError> {
    match d {
        Dim::Const(n) => Ok(*n),
        Dim::Sym(s) => dims.get(s.as_ref()).copied().ok_or_else(|| {
            format!("input %{input} has symbolic dim {s}: pass its size with --dim {s}=N").into()
        }),
    }
}

/// A random tensor: normal floats, integers in [-5, 5), or fair booleans.
pub fn random_tensor(shape: &[usize], dtype: DType, seed: u64) -> kiln::Result<Tensor> {
    let u = Tensor::rand(shape, DType::F64, seed)?;
    match dtype {
        DType::Bool => u.lt(0.5),
        DType::I32 | DType::I64 => (&u * 10.0)?.sub(5.0)?.cast(DType::F64)?.cast(dtype),
        d => Tensor::randn(shape, d, seed),
    }
}

/// Builds the graph's inputs in signature order.
pub fn make_inputs(
    g: &Graph,
    seed: u64,
    file: Option<&Path>,
    dims: &[(String, usize)],
) -> Result<Vec<Tensor>, CliError> {
    let dims: HashMap<String, usize> = dims.iter().cloned().collect();
    let mut named: HashMap<String, Tensor> = match file {
        Some(f) => kiln::io::load(f)?.into_iter().collect(),
        None => HashMap::new(),
    };
    let mut out = Vec::new();
    for (i, (name, id)) in g.inputs().iter().enumerate() {
        if let Some(t) = named.remove(name) {
            out.push(t);
            continue;
        }
        if file.is_some() {
            return Err(format!("the inputs file has no tensor named `{name}`").into());
        }
        let ty = &g.node(*id).ty;
        let shape = ty
            .shape
            .dims()
            .iter()
            .map(|d| size_of(d, &dims, name))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(random_tensor(
            &shape,
            ty.dtype,
            seed.wrapping_add(i as u64),
        )?);
    }
    Ok(out)
}
