//! Reading and writing tensors as safetensors files (named, typed, row-major, little-endian),
//! so that inputs and outputs can be exchanged with PyTorch, JAX or numpy.

use crate::error::{Error, Result};
use crate::Tensor;
use half::{bf16, f16};
use kiln_ir::DType;
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::path::Path;

fn io_err(path: &Path, reason: impl ToString) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn to_st(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

fn from_st(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        _ => return None,
    })
}

/// The tensor's elements as little-endian bytes, row-major.
pub fn to_le_bytes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(match t.dtype() {
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        DType::I32 => t
            .to_vec::<i32>()?
            .into_iter()
            .flat_map(i32::to_le_bytes)
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()?
            .into_iter()
            .flat_map(i64::to_le_bytes)
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()?
            .into_iter()
            .flat_map(f16::to_le_bytes)
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()?
            .into_iter()
            .flat_map(bf16::to_le_bytes)
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()?
            .into_iter()
            .flat_map(f32::to_le_bytes)
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()?
            .into_iter()
            .flat_map(f64::to_le_bytes)
            .collect(),
    })
}

/// A tensor of `dtype` and `shape` from little-endian row-major bytes.
pub fn from_le_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
    fn chunks<const N: usize, T>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks_exact gives N bytes")))
            .collect()
    }
    let want = shape
        .iter()
        .try_fold(dtype.size_bytes(), |n, &d| n.checked_mul(d));
    if want != Some(bytes.len()) {
        return Err(crate::error::invalid(
            "from_le_bytes",
            shape,
            format!(
                "{} bytes do not hold the {dtype} elements of the shape",
                bytes.len()
            ),
        ));
    }
    let b = bytes;
    let t = match dtype {
        DType::Bool => Tensor::from_vec(b.iter().map(|&x| x != 0).collect::<Vec<bool>>(), shape),
        DType::I32 => Tensor::from_vec(chunks(b, i32::from_le_bytes), shape),
        DType::I64 => Tensor::from_vec(chunks(b, i64::from_le_bytes), shape),
        DType::F16 => Tensor::from_vec(chunks(b, f16::from_le_bytes), shape),
        DType::BF16 => Tensor::from_vec(chunks(b, bf16::from_le_bytes), shape),
        DType::F32 => Tensor::from_vec(chunks(b, f32::from_le_bytes), shape),
        DType::F64 => Tensor::from_vec(chunks(b, f64::from_le_bytes), shape),
    };
    t.map_err(|e| e.within("from_le_bytes"))
}

/// Reads every tensor of a safetensors file, in the file's order.
pub fn load(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    load_bytes(&bytes, path)
}

/// Reads every tensor of a safetensors file's bytes, in the file's order; `origin` (the
/// file's path, or what else the bytes came from) names them in errors.
pub fn load_bytes(bytes: &[u8], origin: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = origin.as_ref();
    let st =
        SafeTensors::deserialize(bytes).map_err(|e| io_err(path, format!("safetensors: {e}")))?;
    let mut out = Vec::new();
    for name in st.names() {
        let view = st
            .tensor(name)
            .map_err(|e| io_err(path, format!("safetensors: {e}")))?;
        let dtype = from_st(view.dtype()).ok_or_else(|| {
            io_err(
                path,
                format!(
                    "tensor `{name}` has dtype {:?}, which kiln does not support",
                    view.dtype()
                ),
            )
        })?;
        out.push((
            name.to_string(),
            from_le_bytes(view.data(), view.shape(), dtype)?,
        ));
    }
    Ok(out)
}

struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Writes named tensors to a safetensors file.
pub fn save(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let prepared = tensors
        .iter()
        .map(|(n, t)| {
            Ok((
                n.clone(),
                Bytes {
                    dtype: to_st(t.dtype()),
                    shape: t.shape().to_vec(),
                    data: to_le_bytes(t)?,
                },
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(prepared.iter().map(|(n, b)| (n.as_str(), b)), None, path)
        .map_err(|e| io_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes read from memory give the file's tensors; bytes that are not a safetensors file
    /// (empty, truncated, a header longer than the bytes, garbage) give an I/O error naming
    /// their origin, never a panic.
    #[test]
    fn load_bytes_reads_files_and_rejects_garbage_with_its_origin() {
        let dir = std::env::temp_dir().join(format!("kiln-io-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.5], &[3]).unwrap();
        save(&path, &[("x".into(), x)]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let read = load_bytes(&bytes, "memory").unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].0, "x");
        assert_eq!(read[0].1.to_vec_f64().unwrap(), vec![1.0, -2.0, 3.5]);
        let mut huge_header = bytes.clone();
        huge_header[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        for bad in [
            &[][..],
            &bytes[..bytes.len() - 1],
            &bytes[..10],
            &huge_header[..],
            b"not a safetensors file at all",
        ] {
            match load_bytes(bad, "memory") {
                Err(Error::Io { path, .. }) => assert_eq!(path, "memory"),
                other => panic!("{} bytes: {other:?}", bad.len()),
            }
        }
    }
}
