//! A safetensors file, memory-mapped and read tensor by tensor with its published names.

use crate::{DType, Error, Result, Tensor};
use memmap2::Mmap;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};
use std::path::{Path, PathBuf};

/// A memory-mapped safetensors file. [`Weights::get`] copies one tensor out, checking its
/// dtype and shape; a missing or mis-shaped tensor is an [`Error::Io`] that names the file,
/// the tensor and what was expected.
pub struct Weights {
    path: PathBuf,
    map: Mmap,
    /// the header, parsed once: each tensor's dtype, shape and byte range
    metadata: Metadata,
    /// where the tensors' bytes start in the file (after the header)
    data_start: usize,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights").field("path", &self.path).finish()
    }
}

impl Weights {
    /// Maps `path` and checks that its header parses.
    pub fn open(path: &Path) -> Result<Weights> {
        let file = std::fs::File::open(path).map_err(|e| io_err(path, e.to_string()))?;
        // SAFETY: the map is read-only and private to this value; kiln never writes the file.
        // A file truncated by another process while mapped could fault on access: the
        // weights are copied out once, right after opening, by every loader in kiln.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err(path, e.to_string()))?;
        // deserialize checks every tensor's byte range against the file as well
        SafeTensors::deserialize(&map).map_err(|e| io_err(path, e.to_string()))?;
        let (header_len, metadata) =
            SafeTensors::read_metadata(&map).map_err(|e| io_err(path, e.to_string()))?;
        Ok(Weights {
            path: path.to_path_buf(),
            map,
            metadata,
            data_start: 8 + header_len,
        })
    }

    /// The tensors' names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.metadata.tensors().into_keys().collect();
        n.sort();
        n
    }

    /// Tensor `name` as f32 of exactly `shape` (f16, bf16 and f64 tensors are converted).
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let info = self.metadata.info(name).ok_or_else(|| {
            // the names sharing the longest prefix with the one asked for
            let common = |n: &str| {
                n.bytes()
                    .zip(name.bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            let mut near = self.names();
            near.sort_by_key(|n| std::cmp::Reverse(common(n)));
            near.truncate(3);
            io_err(
                &self.path,
                format!("no tensor `{name}` (expected shape {shape:?}); similar names: {near:?}"),
            )
        })?;
        if info.shape != shape {
            return Err(io_err(
                &self.path,
                format!(
                    "tensor `{name}` has shape {:?}, expected {shape:?}",
                    info.shape
                ),
            ));
        }
        let dtype = match info.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            Dtype::F64 => DType::F64,
            other => {
                return Err(io_err(
                    &self.path,
                    format!("tensor `{name}` has dtype {other:?}, expected a float type"),
                ))
            }
        };
        let (start, end) = info.data_offsets;
        let bytes = &self.map[self.data_start + start..self.data_start + end];
        let t = crate::io::from_le_bytes(bytes, shape, dtype)?;
        if dtype == DType::F32 {
            Ok(t)
        } else {
            t.cast(DType::F32)
        }
    }
}

fn io_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}
