//! Device memory for accelerator backends (CUDA first): the caching allocator, generic
//! over the memory it manages ([`DeviceMemory`]), so its pooling is tested here against a
//! fake device and the CUDA driver plugs in behind the same trait.

mod caching;

pub use caching::{
    device_size_class, CachingAllocator, DeviceAllocError, DeviceAllocStats, DeviceBuffer,
    DeviceMemory, StreamId,
};
