//! The device compiled CUDA plans run on: chosen by `KILN_CUDA_DEVICE` (a device ordinal,
//! default 0; or `emulated` for the [`EmulatedGpu`], which runs the generated CUDA C on the
//! CPU: slow, for tests and for debugging generated code without a GPU), opened once per
//! process and shared.

use super::driver_gpu::DriverGpu;
use super::emulated_gpu::EmulatedGpu;
use super::gpu::{GpuDevice, GpuError};
use std::sync::{Arc, OnceLock};

/// The environment variable naming the device.
pub const DEVICE_VAR: &str = "KILN_CUDA_DEVICE";

/// What `KILN_CUDA_DEVICE` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// a CUDA device by ordinal
    Cuda(usize),
    /// the emulated device
    Emulated,
}

/// Parses a `KILN_CUDA_DEVICE` value (unset: device 0).
pub fn parse_choice(value: Option<&str>) -> Result<DeviceChoice, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DeviceChoice::Cuda(0)),
        Some("emulated") => Ok(DeviceChoice::Emulated),
        Some(s) => s
            .strip_prefix("cuda:")
            .unwrap_or(s)
            .parse()
            .map(DeviceChoice::Cuda)
            .map_err(|_| {
                format!("{DEVICE_VAR}={s}: expected a device ordinal (0, cuda:1) or `emulated`")
            }),
    }
}

/// Opens the device `choice` names.
pub fn open(choice: DeviceChoice) -> Result<Arc<dyn GpuDevice>, GpuError> {
    Ok(match choice {
        DeviceChoice::Emulated => Arc::new(EmulatedGpu::new()),
        DeviceChoice::Cuda(n) => Arc::new(DriverGpu::open(n)?),
    })
}

/// The process's CUDA device (see the module doc), opened on first use; the error (no
/// driver, no device, a bad `KILN_CUDA_DEVICE`) is kept and returned on every call.
pub fn default_gpu() -> Result<Arc<dyn GpuDevice>, GpuError> {
    static GPU: OnceLock<Result<Arc<dyn GpuDevice>, GpuError>> = OnceLock::new();
    GPU.get_or_init(|| {
        let var = std::env::var(DEVICE_VAR).ok();
        let choice = parse_choice(var.as_deref()).map_err(|reason| GpuError {
            device: "cuda".to_string(),
            op: "choose a device".to_string(),
            reason,
        })?;
        open(choice)
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!(parse_choice(None), Ok(DeviceChoice::Cuda(0)));
        assert_eq!(parse_choice(Some("1")), Ok(DeviceChoice::Cuda(1)));
        assert_eq!(parse_choice(Some("cuda:2")), Ok(DeviceChoice::Cuda(2)));
        assert_eq!(parse_choice(Some("emulated")), Ok(DeviceChoice::Emulated));
        let e = parse_choice(Some("gpu0")).unwrap_err();
        assert!(e.contains("KILN_CUDA_DEVICE=gpu0"), "{e}");
    }

    #[test]
    fn the_emulated_device_opens() {
        let gpu = open(DeviceChoice::Emulated).unwrap();
        assert_eq!(gpu.name(), "emulated");
    }
}
