//! A module's parameters saved to and loaded from safetensors files by torch's names
//! (`state_dict()` keys), so checkpoints move between kiln and PyTorch
//! (`safetensors.torch.save_file(model.state_dict(), path)` writes what
//! [`load_parameters`] reads).

use super::Module;
use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::Tensor;
use std::path::Path;

fn io_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Writes every parameter of `module` to `path` under its name, in its own dtype (f32 for
/// the layers' default initialisation), detached.
pub fn save_parameters(module: &(impl Module + ?Sized), path: &Path) -> Result<()> {
    let named: Vec<(String, Tensor)> = module
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (n, t.detach()))
        .collect();
    crate::io::save(path, &named)
}

/// Copies the tensors of the safetensors file `path` into `module`'s parameters, in place
/// (under [`no_grad`]; so every clone of a parameter, an optimiser's included, sees the
/// values), converting float dtypes to each parameter's.
///
/// As torch's `load_state_dict(strict=True)`: every parameter must be in the file with its
/// shape, and the file must hold nothing else. Everything is checked before anything is
/// copied, so an error leaves the module as it was; it names the missing and unexpected
/// keys, or the parameter whose shape differs.
pub fn load_parameters(module: &(impl Module + ?Sized), path: &Path) -> Result<()> {
    let file = crate::io::load(path)?;
    load_named(module, &file).map_err(|reason| io_err(path, reason))
}

/// Checks `file` against `module`'s parameters, then copies it in; the reason on failure.
fn load_named(
    module: &(impl Module + ?Sized),
    file: &[(String, Tensor)],
) -> std::result::Result<(), String> {
    let params = module.named_parameters();
    let missing: Vec<&str> = params
        .iter()
        .filter(|(n, _)| !file.iter().any(|(f, _)| f == n))
        .map(|(n, _)| n.as_str())
        .collect();
    let unexpected: Vec<&str> = file
        .iter()
        .filter(|(f, _)| !params.iter().any(|(n, _)| n == f))
        .map(|(f, _)| f.as_str())
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("missing key(s): {missing:?}"));
    }
    if !unexpected.is_empty() {
        problems.push(format!("unexpected key(s): {unexpected:?}"));
    }
    let mut pairs = Vec::new();
    for (name, p) in &params {
        let Some((_, t)) = file.iter().find(|(f, _)| f == name) else {
            continue;
        };
        if t.shape() != p.shape() {
            problems.push(format!(
                "size mismatch for {name}: the file's shape is {:?}, the parameter's is {:?}",
                t.shape(),
                p.shape()
            ));
        } else if !t.dtype().is_float() {
            problems.push(format!(
                "{name}: the file's dtype is {}, a parameter needs a float type",
                t.dtype()
            ));
        } else {
            pairs.push((p, t));
        }
    }
    if !problems.is_empty() {
        return Err(format!(
            "cannot load the parameters: {}",
            problems.join("; ")
        ));
    }
    let _off = no_grad();
    for (p, t) in pairs {
        p.copy_(t).map_err(|e| e.to_string())?;
    }
    Ok(())
}
