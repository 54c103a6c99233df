//! A plan recorded as a device graph ([`super::plan::CudaPlan::capture`]): static input
//! and output buffers, every intermediate kept alive, and the gathers' error cells, read
//! after each replay.

use super::device_tensor::{host_bytes, DeviceTensor};
use super::gpu::{GpuDevice, GpuError, GpuGraph};
use crate::error::CodegenError;
use kiln_runtime::CpuTensor;

/// A gather's error cell (see [`super::gather`]) and what to say when it is set.
pub(crate) struct GatherCheck {
    pub(crate) kernel: String,
    pub(crate) cell: DeviceTensor,
    pub(crate) dim: usize,
    pub(crate) shape: Vec<usize>,
}

impl GatherCheck {
    /// Reads the cell (waiting for the queued work): an index out of range is an error.
    pub(crate) fn verify(&self, gpu: &dyn GpuDevice, plan: &str) -> Result<(), CodegenError> {
        let mut cell = [0u8; 16];
        gpu.download(self.cell.ptr(), &mut cell)
            .map_err(|e| CodegenError::Device {
                plan: plan.to_string(),
                kernel: self.kernel.clone(),
                reason: e.to_string(),
            })?;
        let flag = i64::from_le_bytes(cell[..8].try_into().expect("8 bytes"));
        let bad = i64::from_le_bytes(cell[8..].try_into().expect("8 bytes"));
        if flag == 0 {
            return Ok(());
        }
        Err(CodegenError::Device {
            plan: plan.to_string(),
            kernel: self.kernel.clone(),
            reason: format!(
                "index_select: index {bad} is out of range for dim {} of size {} (shape {:?})",
                self.dim, self.shape[self.dim], self.shape
            ),
        })
    }
}

/// A plan recorded as a device graph for fixed input shapes ([`CudaPlan::capture`]).
pub struct CapturedPlan {
    pub(crate) name: String,
    pub(crate) graph: Box<dyn GpuGraph>,
    /// the buffers the recorded work reads its inputs from
    pub(crate) inputs: Vec<DeviceTensor>,
    /// where it leaves its outputs (overwritten by the next replay)
    pub(crate) outputs: Vec<DeviceTensor>,
    pub(crate) checks: Vec<GatherCheck>,
    /// every tensor the recorded work reads or writes (alive as long as the graph)
    pub(crate) _keep: Vec<DeviceTensor>,
}

impl std::fmt::Debug for CapturedPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedPlan")
            .field("name", &self.name)
            .field("recorded", &self.graph.len())
            .finish()
    }
}

impl CapturedPlan {
    /// Launches and GEMMs recorded.
    pub fn recorded(&self) -> usize {
        self.graph.len()
    }

    /// Copies `inputs` (the recorded dtypes and shapes) into the graph's input buffers,
    /// replays it and copies the outputs back.
    pub fn run_host(
        &self,
        gpu: &dyn GpuDevice,
        inputs: &[&CpuTensor],
    ) -> Result<Vec<CpuTensor>, CodegenError> {
        let dev = |e: GpuError| CodegenError::Device {
            plan: self.name.clone(),
            kernel: "graph replay".to_string(),
            reason: e.to_string(),
        };
        if inputs.len() != self.inputs.len()
            || inputs
                .iter()
                .zip(&self.inputs)
                .any(|(t, s)| t.dtype() != s.dtype() || t.shape() != s.shape())
        {
            return Err(CodegenError::Inputs {
                plan: self.name.clone(),
                reason: format!(
                    "the recorded graph takes {:?}, got {:?}",
                    self.inputs
                        .iter()
                        .map(|t| (t.dtype(), t.shape().to_vec()))
                        .collect::<Vec<_>>(),
                    inputs
                        .iter()
                        .map(|t| (t.dtype(), t.shape().to_vec()))
                        .collect::<Vec<_>>()
                ),
            });
        }
        for (t, s) in inputs.iter().zip(&self.inputs) {
            gpu.upload(s.ptr(), &host_bytes(t)).map_err(dev)?;
        }
        self.graph.replay().map_err(dev)?;
        for c in &self.checks {
            c.verify(gpu, &self.name)?;
        }
        self.outputs
            .iter()
            .map(|t| t.download(gpu).map_err(dev))
            .collect()
    }
}
