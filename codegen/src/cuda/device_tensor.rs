//! Tensors in device memory: a shared device buffer and a strided layout over it (shape,
//! element strides, offset), as [`CpuTensor`] is over host memory. Views (reshape when the
//! strides allow, permute, transpose, expand, slice) make new layouts over the same buffer,
//! with eager mode's rules.

use super::gpu::{DevicePtr, GpuBuffer, GpuDevice, GpuError};
use kiln_ir::DType;
use kiln_runtime::{contiguous_strides, CpuTensor};
use std::sync::Arc;

/// A view a device tensor cannot take (the op, the tensor's shape, why).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} of a device tensor of shape {shape:?}: {reason}")]
pub struct LayoutError {
    /// the view op
    pub op: &'static str,
    /// the tensor's shape
    pub shape: Vec<usize>,
    /// what is wrong
    pub reason: String,
}

/// A tensor in device memory.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    buf: Arc<dyn GpuBuffer>,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
}

impl DeviceTensor {
    /// A contiguous tensor of `shape` in fresh device memory (contents unspecified).
    pub fn empty(gpu: &dyn GpuDevice, dtype: DType, shape: &[usize]) -> Result<Self, GpuError> {
        let n: usize = shape.iter().product();
        let buf = gpu.alloc((n * dtype.size_bytes()).max(1))?;
        Ok(DeviceTensor {
            buf,
            dtype,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape).to_vec(),
            offset: 0,
        })
    }

    /// Copies a host tensor to the device (row-major; any layout of `t` is read as eager
    /// reads it).
    pub fn upload(gpu: &dyn GpuDevice, t: &CpuTensor) -> Result<Self, GpuError> {
        let d = DeviceTensor::empty(gpu, t.dtype(), t.shape())?;
        if !cfg!(target_endian = "little") {
            gpu.upload(d.ptr(), &host_bytes(t))?;
            return Ok(d);
        }
        // a little-endian host stores every dtype as the device does (bool as 0 or 1): its
        // bytes go as they are, in one copy (a strided tensor is made contiguous first)
        let c = if t.is_contiguous() {
            t.clone()
        } else {
            t.deep_copy()
        };
        let len = c.numel() * c.dtype().size_bytes();
        if len > 0 {
            let _lock = c.read_lock();
            // SAFETY: `c` is contiguous, so its `numel` elements lie from `data_ptr` on; the
            // read lock keeps in-place writers out while the bytes are copied.
            let bytes = unsafe { std::slice::from_raw_parts(c.data_ptr() as *const u8, len) };
            gpu.upload(d.ptr(), bytes)?;
        }
        Ok(d)
    }

    /// Copies the tensor to the host (waiting for the work queued before).
    pub fn download(&self, gpu: &dyn GpuDevice) -> Result<CpuTensor, GpuError> {
        let extent = self.extent();
        if cfg!(target_endian = "little") && self.dtype != DType::Bool {
            return self.download_raw(gpu, extent);
        }
        let es = self.dtype.size_bytes();
        let mut raw = vec![0u8; extent * es];
        if extent > 0 {
            gpu.download(self.ptr(), &mut raw)?;
        }
        // gather the strided elements row-major
        let n: usize = self.shape.iter().product();
        let mut out = Vec::with_capacity(n * es);
        let mut idx = vec![0usize; self.shape.len()];
        for _ in 0..n {
            let at: isize = idx
                .iter()
                .zip(&self.strides)
                .map(|(&i, &s)| i as isize * s)
                .sum();
            let at = at as usize * es;
            out.extend_from_slice(&raw[at..at + es]);
            for d in (0..idx.len()).rev() {
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        from_host_bytes(&out, self.dtype, &self.shape).map_err(|reason| GpuError {
            device: gpu.name(),
            op: "download".to_string(),
            reason,
        })
    }

    /// [`DeviceTensor::download`] on a little-endian host, for every dtype but bool (whose
    /// device bytes are checked one by one): the elements the layout reaches are copied
    /// into host memory as they are, then viewed with the tensor's layout (and made
    /// contiguous when it has gaps).
    fn download_raw(&self, gpu: &dyn GpuDevice, extent: usize) -> Result<CpuTensor, GpuError> {
        let fail = |reason: String| GpuError {
            device: gpu.name(),
            op: "download".to_string(),
            reason,
        };
        // SAFETY: the download below writes every element before anything reads one (on
        // failure the tensor is dropped unread)
        let raw =
            unsafe { CpuTensor::uninit(self.dtype, &[extent]) }.map_err(|e| fail(e.to_string()))?;
        if extent > 0 {
            // SAFETY: `raw` is fresh, contiguous, `extent` elements long and shared with
            // nothing, so it may be written through its address.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(raw.data_ptr(), extent * self.dtype.size_bytes())
            };
            gpu.download(self.ptr(), bytes)?;
        }
        let view = raw
            .with_layout(&self.shape, &self.strides, 0)
            .map_err(|e| fail(e.to_string()))?;
        Ok(if view.is_contiguous() {
            view
        } else {
            view.deep_copy()
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Element strides.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// The device address of the first element (the offset applied).
    pub fn ptr(&self) -> DevicePtr {
        self.buf.ptr() + (self.offset * self.dtype.size_bytes()) as u64
    }
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the layout is row-major with no gaps.
    pub fn is_contiguous(&self) -> bool {
        self.shape
            .iter()
            .zip(&self.strides)
            .zip(contiguous_strides(&self.shape))
            .all(|((&n, &s), c)| n <= 1 || s == c)
    }
    /// True when both share device memory.
    pub fn shares_buffer(&self, other: &DeviceTensor) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }

    /// Elements from the first to one past the last addressed one (strides ≥ 0).
    fn extent(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .map(|(&n, &s)| (n as isize - 1) * s)
            .sum::<isize>() as usize
            + 1
    }

    fn with(&self, shape: Vec<usize>, strides: Vec<isize>, offset: usize) -> DeviceTensor {
        DeviceTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape,
            strides,
            offset,
        }
    }

    /// The same elements as `shape`, if a view can hold them (else `None`: a copy is
    /// needed).
    pub fn reshape(&self, shape: &[usize]) -> Option<DeviceTensor> {
        let st = kiln_runtime::view_strides(&self.shape, &self.strides, shape)?;
        Some(self.with(shape.to_vec(), st.to_vec(), self.offset))
    }
    /// A [`LayoutError`] for view `op` with `reason`.
    fn bad(&self, op: &'static str, reason: String) -> LayoutError {
        LayoutError {
            op,
            shape: self.shape.clone(),
            reason,
        }
    }
    /// Result dim i is dim `dims[i]` (`dims` a permutation of the dims).
    pub fn permute(&self, dims: &[usize]) -> Result<DeviceTensor, LayoutError> {
        let mut seen = vec![false; self.shape.len()];
        let ok = dims.len() == self.shape.len()
            && dims
                .iter()
                .all(|&d| d < seen.len() && !std::mem::replace(&mut seen[d], true));
        if !ok {
            return Err(self.bad(
                "permute",
                format!("{dims:?} is not a permutation of the dims"),
            ));
        }
        let shape = dims.iter().map(|&d| self.shape[d]).collect();
        let strides = dims.iter().map(|&d| self.strides[d]).collect();
        Ok(self.with(shape, strides, self.offset))
    }
    /// Swaps two dims.
    pub fn transpose(&self, a: usize, b: usize) -> Result<DeviceTensor, LayoutError> {
        let rank = self.shape.len();
        if a >= rank || b >= rank {
            return Err(self.bad(
                "transpose",
                format!("dims {a} and {b} of a rank-{rank} tensor"),
            ));
        }
        let (mut shape, mut strides) = (self.shape.clone(), self.strides.clone());
        shape.swap(a, b);
        strides.swap(a, b);
        Ok(self.with(shape, strides, self.offset))
    }
    /// Broadcasts to `shape`: stride 0 on new dims and on dims stretched from 1.
    pub fn expand(&self, shape: &[usize]) -> Result<DeviceTensor, LayoutError> {
        let (r, tr) = (shape.len(), self.shape.len());
        let fits =
            r >= tr && (0..tr).all(|i| self.shape[i] == shape[r - tr + i] || self.shape[i] == 1);
        if !fits {
            return Err(self.bad("expand", format!("cannot broadcast to {shape:?}")));
        }
        let mut st = vec![0isize; r];
        for i in 0..tr {
            if self.shape[i] == shape[r - tr + i] {
                st[r - tr + i] = self.strides[i];
            }
        }
        Ok(self.with(shape.to_vec(), st, self.offset))
    }
    /// `x[start:end:step]` along dim `d` (`start ≤ end ≤` the dim's size, `step ≥ 1`).
    pub fn slice(
        &self,
        d: usize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<DeviceTensor, LayoutError> {
        if d >= self.shape.len() || start > end || end > self.shape[d] || step == 0 {
            return Err(self.bad(
                "slice",
                format!("dim {d}, {start}..{end} step {step} is out of bounds"),
            ));
        }
        let (mut shape, mut strides) = (self.shape.clone(), self.strides.clone());
        shape[d] = (end - start).div_ceil(step);
        let offset = if shape.contains(&0) {
            self.offset
        } else {
            (self.offset as isize + start as isize * strides[d]) as usize
        };
        strides[d] *= step as isize;
        Ok(self.with(shape, strides, offset))
    }
}

/// A host tensor's elements, row-major, as device bytes (little-endian; bool one byte):
/// exact for every dtype.
pub fn host_bytes(t: &CpuTensor) -> Vec<u8> {
    fn le<T: kiln_runtime::Element, const N: usize>(
        t: &CpuTensor,
        f: impl Fn(T) -> [u8; N],
    ) -> Vec<u8> {
        t.to_vec::<T>()
            .expect("the dtype matches T")
            .into_iter()
            .flat_map(f)
            .collect()
    }
    match t.dtype() {
        DType::Bool => le::<bool, 1>(t, |x| [u8::from(x)]),
        DType::F16 => le::<half::f16, 2>(t, half::f16::to_le_bytes),
        DType::BF16 => le::<half::bf16, 2>(t, half::bf16::to_le_bytes),
        DType::F32 => le::<f32, 4>(t, f32::to_le_bytes),
        DType::F64 => le::<f64, 8>(t, f64::to_le_bytes),
        DType::I32 => le::<i32, 4>(t, i32::to_le_bytes),
        DType::I64 => le::<i64, 8>(t, i64::to_le_bytes),
    }
}

/// A host tensor of `shape` from row-major device bytes (exact for every dtype).
pub fn from_host_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<CpuTensor, String> {
    fn build<T: kiln_runtime::Element, const N: usize>(
        bytes: &[u8],
        shape: &[usize],
        f: impl Fn([u8; N]) -> T,
    ) -> Result<CpuTensor, String> {
        let v: Vec<T> = bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("N bytes")))
            .collect();
        CpuTensor::from_slice(&v, shape).map_err(|e| e.to_string())
    }
    match dtype {
        DType::Bool => build::<bool, 1>(bytes, shape, |[b]| b != 0),
        DType::F16 => build(bytes, shape, half::f16::from_le_bytes),
        DType::BF16 => build(bytes, shape, half::bf16::from_le_bytes),
        DType::F32 => build(bytes, shape, f32::from_le_bytes),
        DType::F64 => build(bytes, shape, f64::from_le_bytes),
        DType::I32 => build(bytes, shape, i32::from_le_bytes),
        DType::I64 => build(bytes, shape, i64::from_le_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::emulated_gpu::EmulatedGpu;

    /// A `[rows, cols]` tensor of every kind of value a dtype holds (signs, zero, NaN and
    /// infinity for floats).
    fn sample(dtype: DType, rows: usize, cols: usize) -> CpuTensor {
        let v: Vec<f64> = (0..rows * cols)
            .map(|i| match i % 7 {
                0 => -(i as f64) * 0.37,
                1 => 0.0,
                2 if dtype.is_float() => f64::NAN,
                3 if dtype.is_float() => f64::NEG_INFINITY,
                _ => i as f64 * 1.25 - 3.0,
            })
            .collect();
        CpuTensor::from_f64(&v, &[rows, cols], dtype).unwrap()
    }

    /// Bitwise equality (NaN equals NaN), dtype and shape included.
    fn same(a: &CpuTensor, b: &CpuTensor) {
        assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()));
        let bits = |t: &CpuTensor| -> Vec<u64> {
            t.to_f64_vec()
                .iter()
                .map(|x| if x.is_nan() { 1 } else { x.to_bits() })
                .collect()
        };
        assert_eq!(bits(a), bits(b));
    }

    #[test]
    fn every_dtype_round_trips_contiguous_and_strided() {
        let gpu = EmulatedGpu::new();
        for dtype in [
            DType::Bool,
            DType::F16,
            DType::BF16,
            DType::F32,
            DType::F64,
            DType::I32,
            DType::I64,
        ] {
            for (rows, cols) in [(0, 3), (1, 1), (3, 5), (7, 9)] {
                let host = sample(dtype, rows, cols);
                let dev = DeviceTensor::upload(&gpu, &host).unwrap();
                same(&dev.download(&gpu).unwrap(), &host);
                // a strided host tensor goes up as eager reads it
                let t = host
                    .with_layout(&[cols, rows], &[1, cols as isize], 0)
                    .unwrap();
                same(
                    &DeviceTensor::upload(&gpu, &t)
                        .unwrap()
                        .download(&gpu)
                        .unwrap(),
                    &t,
                );
                // strided device views come down as the same views of the host tensor
                let dt = dev.transpose(0, 1).unwrap();
                same(&dt.download(&gpu).unwrap(), &t.deep_copy());
                if rows > 1 {
                    let ds = dev.slice(0, 1, rows, 1).unwrap();
                    let hs = host.with_layout(&[rows - 1, cols], &[cols as isize, 1], cols);
                    same(&ds.download(&gpu).unwrap(), &hs.unwrap().deep_copy());
                }
                if rows == 1 {
                    let de = dev.expand(&[4, cols]).unwrap();
                    let he = host.with_layout(&[4, cols], &[0, 1], 0).unwrap();
                    same(&de.download(&gpu).unwrap(), &he.deep_copy());
                }
            }
        }
        assert_eq!(gpu.live_blocks(), 0);
    }
}
