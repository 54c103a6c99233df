//! Running a compiled loop nest on tensors: loop sizes and strides from the tensors' own
//! layouts, dims collapsed where every buffer allows, the kernel specialised for the
//! resulting inner-loop accesses (compiled on first use, cached), and the rows (or, for a
//! few long rows, the inner range) split across the kernel pool's threads when the work,
//! estimated from the body's operations, is worth it.

use super::c_tier::TieredFn;
use super::chain_fits::chain_fits;
use super::emit::{row_group, InnerAccess, Spec};
use super::jit::{compile, host_fma};
use crate::error::CodegenError;
use crate::loops::{value_ranges, Expr, LoopNest};
use crate::CodegenOptions;
use kiln_ir::Dim;
use kiln_runtime::pool;
use kiln_runtime::CpuTensor;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

/// Below this much estimated work (see [`element_cost`]: about one vector lane-operation per
/// unit, some 3 µs on one core) a kernel runs on the calling thread alone. Measured at the
/// break-even of the split on 2 cores: `x·1.5 + 0.5` gains from it from about 32768
/// elements (3.7 µs on one core; 8192 elements took 2.3 µs split against 1.4 alone), tiny's
/// chain from between 1024 and 2048 elements.
const PARALLEL_MIN_COST: usize = 1 << 17;
/// From this much estimated work on, a kernel is cut into several chunks per thread (load
/// balance); below it, one chunk per thread (least hand-over).
const BALANCE_MIN_COST: usize = 1 << 21;
/// From this much estimated work on (about 50 µs on one core), a kernel wakes sleeping pool
/// workers; below it, it is split only with workers still spinning after an earlier job,
/// since a wake costs its caller some 10 µs here (see [`pool::run`]).
const WAKE_MIN_COST: usize = 1 << 21;

/// The estimated work of one point of `nest` (row values are once per row and not counted):
/// each statement's `cost::stmt_cost` (1 for a load or a cheap op, ~24 for a polynomial
/// transcendental, less for one fitted to its argument's range, and a unary chain fitted as
/// one polynomial counted as that polynomial: see `chain_fits.rs`), plus one per store.
pub fn element_cost(nest: &LoopNest, opts: &CodegenOptions) -> usize {
    let ranges = value_ranges(&nest.body);
    let costs = chain_fits(nest, &ranges, host_fma(), opts.chain_fits).costs(nest, &ranges);
    let body: usize = nest
        .body
        .iter()
        .zip(&costs)
        .filter(|(s, _)| !s.row && !matches!(s.expr, Expr::Const(_) | Expr::InnerLen))
        .map(|(_, c)| c)
        .sum();
    (body + nest.stores.len()).max(1)
}

/// A loop nest with its compiled specialisations.
pub struct NestKernel {
    /// the nest
    pub nest: LoopNest,
    /// the estimated work of one point ([`element_cost`])
    cost: usize,
    /// true when the inner dim may merge with outer dims (no per-row values)
    flat: bool,
    compiled: Mutex<HashMap<Spec, Arc<TieredFn>>>,
    /// the layout of the last call, reused while the tensors' shapes and strides repeat
    last: Mutex<Option<Arc<CallLayout>>>,
    /// how its specialisations are generated
    opts: CodegenOptions,
}

/// A tensor's shape and strides.
type TensorLayout = (SmallVec<[usize; 4]>, SmallVec<[isize; 4]>);

/// Everything of a prepared call but the addresses, for one set of shapes and strides:
/// computing it (dims collapsed, the specialisation found) allocates, so a plan called
/// again on the same layouts reuses it.
struct CallLayout {
    /// per tensor, the shape and strides it was made for
    key: Vec<TensorLayout>,
    keep_inner: bool,
    f: Arc<TieredFn>,
    strides: Vec<i64>,
    sizes: Vec<i64>,
    rows: usize,
    inner: usize,
}

impl CallLayout {
    fn matches(&self, tensors: &[&CpuTensor], keep_inner: bool) -> bool {
        self.keep_inner == keep_inner
            && self.key.len() == tensors.len()
            && self
                .key
                .iter()
                .zip(tensors)
                .all(|((sh, st), t)| sh.as_slice() == t.shape() && st.as_slice() == t.strides())
    }
}

/// One call of a nest, prepared: addresses, strides, sizes and the kernel.
pub(crate) struct PreparedCall {
    /// the estimated work of one point
    cost: usize,
    ptrs: SmallVec<[usize; 8]>,
    layout: Arc<CallLayout>,
}

impl PreparedCall {
    /// Runs rows `[r0, r1)` over inner indices `[i0, i1)`.
    pub(crate) fn call(&self, r0: usize, r1: usize, i0: usize, i1: usize) {
        // SAFETY: the addresses and strides describe live tensors whose every reachable
        // element is in bounds (their layouts were checked when they were made); outputs
        // are buffers this plan owns, written at distinct indices by distinct calls.
        unsafe {
            self.layout.f.call(
                self.ptrs.as_ptr() as *const *mut u8,
                self.layout.strides.as_ptr(),
                self.layout.sizes.as_ptr(),
                r0 as i64,
                r1 as i64,
                i0 as i64,
                i1 as i64,
            )
        }
    }

    /// The rows: the product of the outer loop sizes.
    pub(crate) fn rows(&self) -> usize {
        self.layout.rows
    }

    /// The inner loop's length.
    pub(crate) fn inner(&self) -> usize {
        self.layout.inner
    }

    /// Runs the whole nest, in parallel when its estimated work is large enough.
    pub(crate) fn run(&self, reduces: bool) {
        let (rows, inner) = (self.rows(), self.inner());
        let points = rows.saturating_mul(inner.max(1));
        let work = points.saturating_mul(self.cost);
        let threads = pool::threads();
        if work < PARALLEL_MIN_COST || threads == 1 || rows == 0 {
            self.call(0, rows, 0, inner);
            return;
        }
        let per_thread = if work < BALANCE_MIN_COST { 1 } else { 4 };
        let wake = if work < WAKE_MIN_COST {
            pool::Wake::SpinningOnly
        } else {
            pool::Wake::Sleepers
        };
        if rows >= 2 * threads || reduces {
            let chunks = (threads * per_thread).min(rows);
            let per = rows.div_ceil(chunks);
            pool::run(chunks, wake, &|c| {
                let r0 = c * per;
                let r1 = (r0 + per).min(rows);
                if r0 < r1 {
                    self.call(r0, r1, 0, inner);
                }
            });
        } else {
            // a few long rows: split the inner range, in whole vector blocks
            let per = inner.div_ceil(threads * per_thread).next_multiple_of(64);
            let chunks = inner.div_ceil(per);
            pool::run(chunks, wake, &|c| {
                let i0 = c * per;
                let i1 = (i0 + per).min(inner);
                self.call(0, rows, i0, i1);
            });
        }
    }
}

impl NestKernel {
    /// Wraps a nest; nothing is compiled until a call needs a specialisation (with `opts`).
    pub fn new(nest: LoopNest, opts: &CodegenOptions) -> NestKernel {
        let flat = !nest.reduces
            && nest
                .body
                .iter()
                .all(|s| !s.row || matches!(s.expr, Expr::Const(_)));
        NestKernel {
            cost: element_cost(&nest, opts),
            nest,
            flat,
            compiled: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            opts: opts.clone(),
        }
    }

    /// This kernel with row kernels stepping `g` rows together (tests compare the grouped
    /// path, which [`row_group`] may not choose on this machine, with single rows).
    #[cfg(test)]
    pub(crate) fn with_row_group(mut self, g: usize) -> NestKernel {
        self.opts.row_group = g;
        self.opts.strided_row_group = g;
        self
    }

    /// For each input of a call on `inputs` (the nest's input buffers, in order), a row-major
    /// copy where the inner loop would read it along its last dim with scattered accesses
    /// (see [`CpuTensor::densified`]: a transposed input, for one), else `None`. The copy is
    /// a blocked transpose over the whole tensor; reading the original a lane at a time
    /// measured 3-7x slower than copy plus contiguous kernel (a transposed [8192, 1024]:
    /// softmax 35 ms against 4.9 with the copy's 1.7, `tanh(x·1.5 + 0.5)` 16 against 4.9).
    pub(crate) fn densified_inputs(
        &self,
        inputs: &[&CpuTensor],
    ) -> SmallVec<[Option<CpuTensor>; 4]> {
        let inner = self.nest.inner();
        self.nest
            .buffers
            .iter()
            .zip(inputs)
            .map(|(b, t)| {
                let along_inner = inner.is_some() && b.index.last() == Some(&inner);
                if along_inner {
                    t.densified()
                } else {
                    None
                }
            })
            .collect()
    }

    /// The kernel for `spec`, compiled by Cranelift on first use (and by the C compiler
    /// when the tier policy says so: see `cpu::c_tier`).
    pub(crate) fn kernel(&self, spec: &Spec) -> Result<Arc<TieredFn>, CodegenError> {
        if let Some(f) = self.compiled.lock().get(spec) {
            return Ok(Arc::clone(f));
        }
        let f = TieredFn::new(compile(&self.nest, spec)?, &self.nest, spec);
        self.compiled.lock().insert(spec.clone(), Arc::clone(&f));
        Ok(f)
    }

    /// The tiers of this kernel's specialisations compiled so far, and why.
    pub fn tiers(&self) -> Vec<super::c_tier::KernelTier> {
        self.compiled.lock().values().map(|t| t.report()).collect()
    }

    /// The loop sizes at these tensors (`None` if a size cannot be found or a loop is
    /// empty).
    fn loop_sizes(&self, tensors: &[&CpuTensor]) -> Option<Vec<usize>> {
        let mut sizes: Vec<Option<usize>> = self.nest.dims.iter().map(Dim::as_const).collect();
        for (b, t) in self.nest.buffers.iter().zip(tensors) {
            for (j, ix) in b.index.iter().enumerate() {
                if let Some(d) = ix {
                    sizes[*d] = Some(t.shape()[j]);
                }
            }
        }
        sizes.into_iter().collect()
    }

    /// Prepares a call on `tensors` (the nest's buffers, in order). `keep_inner` keeps the
    /// inner dim apart (an epilogue run by rows). `None` when a loop is empty or a size is
    /// unknown (the caller then runs the kernel eagerly).
    pub(crate) fn prepare(
        &self,
        tensors: &[&CpuTensor],
        keep_inner: bool,
    ) -> Result<Option<PreparedCall>, CodegenError> {
        let reuse = self
            .last
            .lock()
            .as_ref()
            .filter(|l| l.matches(tensors, keep_inner))
            .cloned();
        let layout = match reuse {
            Some(l) => l,
            None => match self.layout(tensors, keep_inner)? {
                Some(l) => {
                    let l = Arc::new(l);
                    *self.last.lock() = Some(Arc::clone(&l));
                    l
                }
                None => return Ok(None),
            },
        };
        Ok(Some(PreparedCall {
            cost: self.cost,
            ptrs: tensors.iter().map(|t| t.data_ptr() as usize).collect(),
            layout,
        }))
    }

    /// The layout of a call on `tensors` (see [`NestKernel::prepare`]).
    fn layout(
        &self,
        tensors: &[&CpuTensor],
        keep_inner: bool,
    ) -> Result<Option<CallLayout>, CodegenError> {
        let Some(sizes) = self.loop_sizes(tensors) else {
            return Ok(None);
        };
        if sizes.contains(&0) {
            return Ok(None);
        }
        let nb = tensors.len();
        let nd = sizes.len();
        // strides in elements per buffer per loop dim
        let mut st = vec![vec![0i64; nd]; nb];
        for (bi, (b, t)) in self.nest.buffers.iter().zip(tensors).enumerate() {
            for (j, ix) in b.index.iter().enumerate() {
                if let Some(d) = ix {
                    st[bi][*d] += t.strides()[j] as i64;
                }
            }
        }
        // dims outer first: (size, strides per buffer); the inner one last
        let mut dims: Vec<(usize, Vec<i64>)> = Vec::new();
        for d in 0..nd {
            let is_inner = d + 1 == nd;
            if sizes[d] == 1 && !is_inner {
                continue;
            }
            dims.push((sizes[d], st.iter().map(|s| s[d]).collect()));
        }
        if dims.is_empty() {
            dims.push((1, vec![0; nb]));
        }
        // merge neighbours: (outer, next) when outer.stride == next.stride * next.size
        let merge_inner = self.flat && !keep_inner;
        let mut merged: Vec<(usize, Vec<i64>)> = Vec::new();
        let last = dims.len() - 1;
        for (i, d) in dims.into_iter().enumerate() {
            let can = match merged.last() {
                Some(prev) => {
                    (i < last || merge_inner)
                        && prev
                            .1
                            .iter()
                            .zip(&d.1)
                            .all(|(&po, &no)| po == no * d.0 as i64)
                }
                None => false,
            };
            if can {
                let prev = merged.last_mut().expect("checked");
                prev.0 *= d.0;
                prev.1 = d.1;
            } else {
                merged.push(d);
            }
        }
        // a size-1 inner dim of a flat nest: drop it in favour of the previous dim
        if merge_inner && merged.len() > 1 && merged.last().is_some_and(|d| d.0 == 1) {
            merged.pop();
        }
        let (inner_size, inner_st) = merged.pop().expect("at least one dim");
        let outer = merged;
        let access: Vec<InnerAccess> = inner_st
            .iter()
            .map(|&s| match s {
                0 => InnerAccess::Broadcast,
                1 => InnerAccess::Contiguous,
                _ => InnerAccess::Strided,
            })
            .collect();
        let spec = Spec {
            outer: outer.len(),
            row_group: row_group(&self.nest, outer.len(), &access, &self.opts),
            access,
            opts: self.opts.clone(),
        };
        let f = self.kernel(&spec)?;
        let k = outer.len();
        let mut strides = vec![0i64; nb * (k + 1)];
        for (bi, buf) in self.nest.buffers.iter().enumerate() {
            let es = buf.dtype.size_bytes() as i64;
            for (j, d) in outer.iter().enumerate() {
                strides[bi * (k + 1) + j] = d.1[bi] * es;
            }
            strides[bi * (k + 1) + k] = inner_st[bi] * es;
        }
        let mut sz: Vec<i64> = outer.iter().map(|d| d.0 as i64).collect();
        sz.push(inner_size as i64);
        Ok(Some(CallLayout {
            key: tensors
                .iter()
                .map(|t| (t.shape().into(), t.strides().into()))
                .collect(),
            keep_inner,
            f,
            strides,
            sizes: sz,
            rows: outer.iter().map(|d| d.0).product(),
            inner: inner_size,
        }))
    }
}
