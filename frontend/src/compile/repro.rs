//! `KILN_REPRO_DIR`: when compiling a traced graph fails, write the graph and the inputs of
//! the call that traced it to that directory (`repro_<name>_<n>.kir` and `.safetensors`,
//! inputs named as the graph names them), with the error and the command that runs it
//! again, so a compiler bug met in user code becomes a file (the Inductor minifier's
//! `repro.py` idea; `kiln fuzz` shrinks such graphs). The error itself is returned as
//! before; a repro that cannot be written is logged, never an error of its own.

use super::Backend;
use crate::error::Result;
use crate::Tensor;
use kiln_ir::Graph;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the repros one process writes.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// `r`, after writing `g` and `inputs` to `KILN_REPRO_DIR` when `r` is an error and the
/// variable is set.
pub(crate) fn on_failure<T>(
    r: Result<T>,
    g: &Graph,
    inputs: &[&Tensor],
    backend: Backend,
) -> Result<T> {
    if let (Err(e), Some(dir)) = (&r, std::env::var_os("KILN_REPRO_DIR")) {
        match write(&PathBuf::from(dir), g, inputs, backend, &e.to_string()) {
            Ok(path) => {
                eprintln!(
                    "kiln: compiling @{} failed; its graph and inputs are in {}",
                    g.name(),
                    path.display()
                );
            }
            Err(w) => tracing::warn!(target: "kiln::code", "KILN_REPRO_DIR: {w}"),
        }
    }
    r
}

fn write(
    dir: &std::path::Path,
    g: &Graph,
    inputs: &[&Tensor],
    backend: Backend,
    error: &str,
) -> std::result::Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
    let stem = format!("repro_{}_{}_{n}", g.name(), std::process::id());
    let kir = dir.join(format!("{stem}.kir"));
    let st = dir.join(format!("{stem}.safetensors"));
    let backend = format!("{backend:?}").to_lowercase();
    let mut text = String::new();
    for line in format!(
        "compiling @{} for the {backend} backend failed: {error}",
        g.name()
    )
    .lines()
    {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&format!(
        "# reproduce: cargo run --release -- run {} --inputs {} --backend {backend}\n",
        kir.display(),
        st.display()
    ));
    text.push_str(&g.to_string());
    std::fs::write(&kir, text).map_err(|e| format!("{}: {e}", kir.display()))?;
    let named: Vec<(String, Tensor)> = g
        .inputs()
        .iter()
        .zip(inputs)
        .map(|((name, _), t)| Ok((name.clone(), t.detach().contiguous()?)))
        .collect::<Result<_>>()
        .map_err(|e| e.to_string())?;
    crate::io::save(&st, &named).map_err(|e| e.to_string())?;
    Ok(kir)
}
