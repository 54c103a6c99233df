//! The flat host data a collective moves, and its conversions from and to tensors.

use super::dist_err;
use crate::error::Result;
use crate::{DType, Tensor};
use kiln_runtime::CpuTensor;

/// A collective's data: one contiguous host array of a type the engines reduce natively.
#[derive(Clone, Debug, PartialEq)]
pub enum CommBuffer {
    /// f32 elements
    F32(Vec<f32>),
    /// f64 elements
    F64(Vec<f64>),
    /// i64 elements (counts, flags, shape signatures)
    I64(Vec<i64>),
}

impl CommBuffer {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            CommBuffer::F32(v) => v.len(),
            CommBuffer::F64(v) => v.len(),
            CommBuffer::I64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CommBuffer::F32(_) => DType::F32,
            CommBuffer::F64(_) => DType::F64,
            CommBuffer::I64(_) => DType::I64,
        }
    }

    /// Bytes of data.
    pub fn bytes(&self) -> usize {
        self.len() * 8 / if self.dtype() == DType::F32 { 2 } else { 1 }
    }

    /// An all-zero buffer of `len` elements of `dtype` (f32, f64 or i64; another dtype is an
    /// error naming `op`). Its 2 MiB-aligned interior is backed by transparent huge pages
    /// where the kernel gives them (see [`advise_huge_pages`]).
    pub fn zeros(dtype: DType, len: usize, op: &str) -> Result<CommBuffer> {
        Ok(match dtype {
            DType::F32 => CommBuffer::F32(huge_zeroed(len)),
            DType::F64 => CommBuffer::F64(huge_zeroed(len)),
            DType::I64 => CommBuffer::I64(huge_zeroed(len)),
            other => return Err(unsupported(op, other)),
        })
    }

    /// The values of `t` in row-major order (f32, f64 or i64 tensors).
    pub(crate) fn from_tensor(t: &Tensor, op: &str) -> Result<CommBuffer> {
        let mut buf = CommBuffer::zeros(t.dtype(), t.numel(), op)?;
        buf.write(0, t)?;
        Ok(buf)
    }

    /// Elements `[start, start + len)` as a tensor of `shape`.
    pub(crate) fn tensor(&self, start: usize, shape: &[usize]) -> Result<Tensor> {
        self.tensor_divided(start, shape, 1)
    }

    /// Elements `[start, start + len)` divided by `d` (integers: truncated, as torch's
    /// integer division), as a tensor of `shape`: one pass over the elements.
    pub(crate) fn tensor_divided(&self, start: usize, shape: &[usize], d: usize) -> Result<Tensor> {
        let r = self.range(start, shape.iter().product(), "DistributedDataParallel")?;
        let made = match self {
            CommBuffer::F32(v) => {
                let d = d as f32;
                CpuTensor::from_slice_mapped(&v[r], shape, |x| x / d)
            }
            CommBuffer::F64(v) => {
                let d = d as f64;
                CpuTensor::from_slice_mapped(&v[r], shape, |x| x / d)
            }
            CommBuffer::I64(v) => {
                let d = d as i64;
                CpuTensor::from_slice_mapped(&v[r], shape, |x| x / d)
            }
        };
        Ok(Tensor::from_cpu(made.map_err(|e| {
            crate::Error::from(e).within("DistributedDataParallel")
        })?))
    }

    /// Copies `t`'s values (row-major, any layout, same dtype) to elements
    /// `[start, start + t.numel())`, in one pass.
    pub(crate) fn write(&mut self, start: usize, t: &Tensor) -> Result<()> {
        let r = self.range(start, t.numel(), "all_reduce")?;
        let src = t.read("all_reduce")?;
        let done = match self {
            CommBuffer::F32(v) => src.copy_to_slice(&mut v[r]),
            CommBuffer::F64(v) => src.copy_to_slice(&mut v[r]),
            CommBuffer::I64(v) => src.copy_to_slice(&mut v[r]),
        };
        done.map_err(|e| crate::Error::from(e).within("all_reduce"))
    }

    /// Elements `[start, start + n)`, or an error naming `op` where they pass the end.
    fn range(&self, start: usize, n: usize, op: &str) -> Result<std::ops::Range<usize>> {
        match start.checked_add(n) {
            Some(end) if end <= self.len() => Ok(start..end),
            _ => Err(dist_err(
                op,
                format!(
                    "elements {start}..{start}+{n} pass the end of a buffer of {}",
                    self.len()
                ),
            )),
        }
    }

    /// Sets elements `[start, start + len)` to zero.
    pub(crate) fn zero(&mut self, start: usize, len: usize) {
        match self {
            CommBuffer::F32(v) => v[start..start + len].fill(0.0),
            CommBuffer::F64(v) => v[start..start + len].fill(0.0),
            CommBuffer::I64(v) => v[start..start + len].fill(0),
        }
    }

    /// Every element divided by `d` (integers: truncated, as torch's integer division).
    // the world of size 1 never averages
    #[cfg_attr(not(any(feature = "mpi", feature = "nccl")), allow(dead_code))]
    pub(crate) fn divide(&mut self, d: usize) {
        match self {
            CommBuffer::F32(v) => v.iter_mut().for_each(|x| *x /= d as f32),
            CommBuffer::F64(v) => v.iter_mut().for_each(|x| *x /= d as f64),
            CommBuffer::I64(v) => v.iter_mut().for_each(|x| *x /= d as i64),
        }
    }
}

/// `len` zeros in a fresh vector, backed by huge pages where the kernel gives them.
fn huge_zeroed<T: Copy + Default>(len: usize) -> Vec<T> {
    let v = vec![T::default(); len];
    advise_huge_pages(&v);
    v
}

/// Asks the kernel to back the 2 MiB-aligned interior of `data` with transparent huge
/// pages: `madvise(MADV_HUGEPAGE)`, which a system with THP in `madvise` mode needs for
/// pages not touched yet, then `MADV_COLLAPSE` (Linux 6.1), which moves pages already
/// touched (memory the allocator reused) onto huge pages now, keeping their contents. An
/// all-reduce over shared memory pins and copies its peer's pages one by one (Open MPI's
/// CMA single copy), so a 25 MiB bucket on 2 MiB pages moved in about half the time it took
/// on 4 KiB pages here (`MPI_Allreduce` from C: 4.6–8.0 against 10.4–13.4 ms). Only
/// advice: where the kernel declines (no THP, an older kernel), nothing changes.
pub fn advise_huge_pages<T>(data: &[T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = data.as_ptr() as usize;
        let end = start + std::mem::size_of_val(data);
        let (first, last) = (start.next_multiple_of(HUGE), end & !(HUGE - 1));
        if last > first {
            let (p, n) = (first as *mut libc::c_void, last - first);
            // SAFETY: [first, last) lies inside `data`'s allocation; both advices change how
            // its pages are backed, never their contents.
            unsafe {
                libc::madvise(p, n, libc::MADV_HUGEPAGE);
                #[cfg(target_env = "gnu")]
                libc::madvise(p, n, libc::MADV_COLLAPSE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = data;
}

fn unsupported(op: &str, dtype: DType) -> crate::Error {
    dist_err(
        op,
        format!("{dtype} tensors are not supported (f32, f64 and i64 are)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kB of anonymous huge pages in the mapping of this process that holds `addr`.
    #[cfg(target_os = "linux")]
    fn huge_kb_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                    return kb.trim().trim_end_matches("kB").trim().parse().ok();
                }
            }
        }
        None
    }

    #[test]
    fn large_buffers_are_zero_and_on_huge_pages_where_the_kernel_has_them() {
        let n = 6 << 20; // 24 MiB of f32
        let mut b = CommBuffer::zeros(DType::F32, n, "test").unwrap();
        let CommBuffer::F32(v) = &mut b else {
            panic!("an f32 buffer")
        };
        assert!(v.iter().all(|&x| x == 0.0));
        v.fill(1.0);
        #[cfg(target_os = "linux")]
        {
            let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_default();
            if thp.is_empty() || thp.contains("[never]") {
                println!("skipped the page check: transparent huge pages are off here ({thp:?})");
                return;
            }
            let mid = v.as_ptr() as usize + n * 2;
            let kb = huge_kb_at(mid).expect("the buffer's mapping is in /proc/self/smaps");
            // the 2 MiB-aligned interior: at least 20 of the 24 MiB
            assert!(
                kb >= 20 << 10,
                "{kb} kB of huge pages under a 24 MiB buffer"
            );
        }
    }

    #[test]
    fn writes_and_reads_any_layout_and_divides_as_it_copies_out() {
        let t = Tensor::from_vec((0..12).map(|i| i as f32).collect(), &[3, 4])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        assert!(!t.is_contiguous());
        let mut b = CommBuffer::zeros(DType::F32, 14, "test").unwrap();
        b.write(1, &t).unwrap();
        let want: Vec<f32> = t.to_vec().unwrap();
        assert_eq!(b.tensor(1, &[4, 3]).unwrap().to_vec::<f32>().unwrap(), want);
        let halves: Vec<f32> = want.iter().map(|v| v / 2.0).collect();
        let got = b.tensor_divided(1, &[12], 2).unwrap();
        assert_eq!(got.to_vec::<f32>().unwrap(), halves);
        b.zero(1, 12);
        assert!(b
            .tensor(0, &[14])
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0));
        let mut i = CommBuffer::zeros(DType::I64, 2, "test").unwrap();
        i.write(0, &Tensor::from_vec(vec![7i64, -7], &[2]).unwrap())
            .unwrap();
        assert_eq!(
            i.tensor_divided(0, &[2], 2)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [3, -3]
        );
        let e = b
            .write(0, &Tensor::from_vec(vec![1i64], &[1]).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("all_reduce"), "{e}");
        // past the end: an error, not a panic
        let e = b.write(5, &t).unwrap_err().to_string();
        assert!(e.contains("pass the end of a buffer of 14"), "{e}");
        assert!(b.tensor(10, &[2, 3]).is_err());
    }
}
