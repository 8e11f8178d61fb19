//! The device layer: what model code is written against.
//!
//! `Device` is backend-agnostic and object safe. Work is described as a `CommandList`
//! (plain data: dispatches and copies) and handed to the device whole, so one decode
//! step becomes one command buffer, a list can be recorded once and replayed, and every
//! dispatch passes through one place where the ledger counts it.
//!
//! Kernel convention, shared by every WGSL file in `wgsl/`: binding 0 of group 0 is a
//! uniform block of parameters (bound with a dynamic offset into a per-submission
//! arena), bindings 1.. are storage buffers in the order the pipeline declares them.

mod ledger;
mod probe;
mod profile;
pub mod translate;
mod wgpu_device;

pub use ledger::{LedgerEntry, LedgerReport};
pub use probe::{
    bandwidth_probe, coop_compute_probe, coop_probe_source, f32_compute_probe, int8_compute_probe,
    probe_sources, ComputeProbe, FloatComputeProbe, MatrixComputeProbe, ProbeResult, StreamRead,
};
pub use profile::{
    Backend, CoopInput, CoopMatrix, DeviceProfile, Tuning, Vendor, LLVMPIPE_LOOP_ITERATIONS,
    PRESETS,
};
pub use wgpu_device::{list_adapters, AdapterChoice, AdapterSummary, WgpuDevice, UPLOAD_CHUNK};

use std::sync::{Arc, Mutex};

use crate::Result;

/// Handle of a buffer owned by a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// Handle of a compute pipeline owned by a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PipelineId(pub u32);

/// What a buffer is for, which decides how the device may use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferUse {
    /// Read by kernels (weights, constants): upload target, never written by kernels.
    Weights,
    /// Written and read by kernels (activations, KV cache, outputs); can be read back.
    Storage,
}

/// How a kernel uses one of its storage bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads only (`var<storage, read>`).
    Read,
    /// Reads and writes (`var<storage, read_write>`).
    ReadWrite,
}

/// Everything needed to build a compute pipeline.
#[derive(Clone, Debug)]
pub struct PipelineDesc<'a> {
    /// Stable name for reports and the ledger, e.g. `matvec/q4_k_coop`.
    pub name: &'a str,
    /// Complete WGSL source.
    pub wgsl: &'a str,
    /// The entry point, a `@compute` function of `wgsl`.
    pub entry: &'a str,
    /// Values for the shader's `override` declarations.
    pub constants: &'a [(&'a str, f64)],
    /// Size in bytes of the uniform parameter block at binding 0.
    pub params_bytes: u32,
    /// Storage bindings 1.., in order.
    pub storage: &'a [Access],
    /// Why this pipeline may legitimately see zero dispatches in a run (a declared
    /// fallback); `None` means an undispatched pipeline is a defect.
    pub fallback_reason: Option<&'a str>,
    /// Who keeps the kernel's array indices in range.
    pub index_checks: IndexChecks,
}

/// Who keeps a kernel's indices into its arrays in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IndexChecks {
    /// wgpu: every dynamic index into an array clamped to its last element, and every
    /// loop bounded by a counter.
    #[default]
    Wgpu,
    /// The kernel: its indices into workgroup tiles follow from its invocation ids and
    /// constants, in range by construction. Where the backend bounds storage reads
    /// itself (Vulkan's robust buffer access), the device creates it without wgpu's
    /// clamps, which hide an index's alignment from the driver (a cooperative-matrix
    /// load of rows 16 bytes at a time needs it); elsewhere as [`IndexChecks::Wgpu`].
    Kernel,
}

/// A byte range of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slice {
    /// The buffer the range lies in.
    pub buffer: BufferId,
    /// Bytes from the buffer's start; a storage binding's must be a multiple of
    /// [`DeviceProfile::storage_offset_alignment`].
    pub offset: u64,
    /// Bytes in the range.
    pub size: u64,
}

impl Slice {
    /// `size` bytes of `buffer` from `offset`.
    pub fn new(buffer: BufferId, offset: u64, size: u64) -> Self {
        Slice {
            buffer,
            offset,
            size,
        }
    }
}

/// One compute dispatch: a pipeline, its parameters and bindings, and the grid.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The pipeline to run.
    pub pipeline: PipelineId,
    /// Contents of the uniform parameter block, as 32-bit words.
    pub params: Vec<u32>,
    /// Storage bindings 1.., in the order and with the access the pipeline declared
    /// ([`PipelineDesc::storage`]).
    pub storage: Vec<Slice>,
    /// Workgroups in x, y and z, each at most [`DeviceProfile::max_workgroups_per_dim`].
    pub workgroups: [u32; 3],
    /// Bytes this dispatch is expected to read from device memory, for the ledger and
    /// for reporting GB/s.
    pub bytes_read: u64,
}

/// One entry of a [`CommandList`].
#[derive(Clone, Debug)]
pub enum Command {
    /// A compute dispatch.
    Dispatch(Dispatch),
    /// A buffer-to-buffer copy of `src` to `dst` at `dst_offset` (offsets and sizes
    /// multiples of 4), ordered with the dispatches around it.
    Copy {
        /// The bytes copied.
        src: Slice,
        /// The buffer they are copied into.
        dst: BufferId,
        /// Where in `dst`, in bytes.
        dst_offset: u64,
    },
}

/// An ordered list of commands, submitted as one command buffer.
#[derive(Clone, Debug, Default)]
pub struct CommandList {
    /// The commands, in the order they run.
    pub commands: Vec<Command>,
}

impl CommandList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a dispatch.
    pub fn dispatch(&mut self, d: Dispatch) {
        self.commands.push(Command::Dispatch(d));
    }

    /// Appends a copy of `src` into `dst` at `dst_offset` bytes.
    pub fn copy(&mut self, src: Slice, dst: BufferId, dst_offset: u64) {
        self.commands.push(Command::Copy {
            src,
            dst,
            dst_offset,
        });
    }

    /// The dispatches, in order, without the copies.
    pub fn dispatches(&self) -> impl Iterator<Item = &Dispatch> {
        self.commands.iter().filter_map(|c| match c {
            Command::Dispatch(d) => Some(d),
            Command::Copy { .. } => None,
        })
    }

    /// Whether the list has no commands.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// A read-back queued behind a submission, redeemed with `Device::finish_read`.
#[derive(Debug)]
#[must_use = "a ticket holds a staging buffer until it is redeemed"]
pub struct ReadTicket(pub(crate) u64);

/// What [`Device::submit_timed`] measures with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// GPU timestamp queries: the GPU's own time for the work.
    GpuTimestamps,
    /// The host's clock around each submission and its wait, because the GPU's
    /// timestamps read as zeros (wgpu's Metal backend on macOS 26, gfx-rs/wgpu#9414): a
    /// time that includes submitting and waiting (tenths of a millisecond), so small
    /// kernels read far slower than they run.
    WallClockTimestampsZero,
}

impl Clock {
    /// A word for reports: `gpu-timestamps` or `wall-clock`.
    pub fn label(self) -> &'static str {
        match self {
            Clock::GpuTimestamps => "gpu-timestamps",
            Clock::WallClockTimestampsZero => "wall-clock",
        }
    }

    /// The note a report prints when its times are not the GPU's own.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Clock::GpuTimestamps => None,
            Clock::WallClockTimestampsZero => Some(
                "GPU timestamps read as zeros (wgpu's Metal backend on macOS 26, \
                 gfx-rs/wgpu#9414): timed by the wall clock around each submission, which \
                 includes submitting and waiting, so small kernels read slower than they run",
            ),
        }
    }
}

/// GPU nanoseconds from a timestamp read-back, `stamps` being (begin, end) pairs in
/// ticks of `period_ns`; `None` when no pair advanced, as when every stamp reads zero
/// (gfx-rs/wgpu#9414): such a reading measures nothing, and taken as times it would
/// report 0 µs and infinite bandwidth.
pub fn gpu_intervals(stamps: &[u64], period_ns: f64) -> Option<Vec<f64>> {
    let intervals: Vec<f64> = stamps
        .chunks_exact(2)
        .map(|p| p[1].saturating_sub(p[0]) as f64 * period_ns)
        .collect();
    if intervals.iter().all(|&ns| ns <= 0.0) {
        return None;
    }
    Some(intervals)
}

/// How `Device::submit_timed` measures a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// One GPU interval around the whole list.
    Whole,
    /// One GPU interval per dispatch (each dispatch gets its own compute pass).
    PerDispatch,
}

/// The backend-agnostic device.
pub trait Device: Send + Sync {
    /// What the router may know of the device: its limits, features and tuning, fixed
    /// when it was opened.
    fn profile(&self) -> &DeviceProfile;

    /// A zero-initialized buffer. Fails with a clear error when `bytes` exceeds the
    /// device's buffer limit or the device is out of memory.
    fn create_buffer(&self, label: &str, bytes: u64, usage: BufferUse) -> Result<BufferId>;

    /// Copies `data` into `buffer` at `offset` (both multiples of 4).
    fn upload(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<()>;

    /// The size in bytes `buffer` was created with; an error for a destroyed or unknown id.
    fn buffer_size(&self, buffer: BufferId) -> Result<u64>;

    /// Frees a buffer; its id becomes invalid.
    fn destroy_buffer(&self, buffer: BufferId) -> Result<()>;

    /// Compiles `desc` into a pipeline and enters it in the ledger with no dispatches.
    /// Fails with [`Error::Shader`](crate::Error::Shader) when the WGSL does not
    /// translate or the driver refuses it.
    fn create_pipeline(&self, desc: &PipelineDesc) -> Result<PipelineId>;
    /// Frees a pipeline and what was bound for it; it leaves the ledger, and a later
    /// dispatch of it is an error.
    fn destroy_pipeline(&self, pipeline: PipelineId) -> Result<()>;

    /// Queues a list for execution without waiting for it.
    fn submit(&self, list: &CommandList) -> Result<()>;

    /// Runs a list, waits, and returns nanoseconds: one entry for `Timing::Whole`, one
    /// per dispatch for `Timing::PerDispatch`. GPU time, unless the device's timestamps
    /// read as zeros: then the list runs again (each dispatch in its own submission for
    /// `PerDispatch`) timed by the wall clock, and [`Device::clock`] says so from then
    /// on. Errors if the device has no timestamp support.
    fn submit_timed(&self, list: &CommandList, timing: Timing) -> Result<Vec<f64>>;

    /// What `submit_timed` measures with now: reports print [`Clock::note`] beside
    /// times taken since.
    fn clock(&self) -> Clock {
        Clock::GpuTimestamps
    }

    /// Queues `list` followed by a copy of `src` for reading back, and returns without
    /// waiting: the CPU can queue more work before it needs the bytes.
    fn submit_read(&self, list: &CommandList, src: Slice) -> Result<ReadTicket>;

    /// Waits for the submission `ticket` came from (not for work queued after it) and
    /// returns the bytes it read.
    fn finish_read(&self, ticket: ReadTicket) -> Result<Vec<u8>>;

    /// Waits for all queued work, then returns `len` bytes of `buffer` from `offset`.
    fn read(&self, buffer: BufferId, offset: u64, len: u64) -> Result<Vec<u8>>;

    /// Waits for all queued work.
    fn wait(&self) -> Result<()>;

    /// Dispatch counts and bytes per pipeline since the device was created.
    fn ledger(&self) -> LedgerReport;

    /// The buffers alive on the device and their bytes.
    fn memory_in_use(&self) -> MemoryInUse;
}

/// What [`Device::memory_in_use`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInUse {
    /// Live buffers.
    pub buffers: usize,
    /// Their sizes together, in bytes.
    pub bytes: u64,
    /// Live pipelines.
    pub pipelines: usize,
}

/// Buffers freed together when this is dropped. A model keeps everything it creates on
/// the device in one, so that dropping the model, or a load that fails half way, gives
/// the device its memory back: an app that keeps its device and switches models, or
/// retries a load, loses nothing. Benchmarks borrow the device for a run's scratch.
pub struct OwnedBuffers<'d> {
    device: DeviceHandle<'d>,
    ids: Mutex<Vec<BufferId>>,
}

enum DeviceHandle<'d> {
    Shared(Arc<dyn Device>),
    Borrowed(&'d dyn Device),
}

impl OwnedBuffers<'static> {
    /// An empty set that keeps `device` alive as long as it lives (what a model holds).
    pub fn new(device: Arc<dyn Device>) -> Self {
        OwnedBuffers {
            device: DeviceHandle::Shared(device),
            ids: Mutex::new(Vec::new()),
        }
    }
}

impl<'d> OwnedBuffers<'d> {
    /// An empty set that borrows `device`: scratch for one run (probes, benchmarks).
    pub fn borrowing(device: &'d dyn Device) -> Self {
        OwnedBuffers {
            device: DeviceHandle::Borrowed(device),
            ids: Mutex::new(Vec::new()),
        }
    }

    fn device(&self) -> &dyn Device {
        match &self.device {
            DeviceHandle::Shared(d) => d.as_ref(),
            DeviceHandle::Borrowed(d) => *d,
        }
    }

    /// A new buffer, owned by this set.
    pub fn create(&self, label: &str, bytes: u64, usage: BufferUse) -> Result<BufferId> {
        let id = self.device().create_buffer(label, bytes, usage)?;
        self.adopt(id);
        Ok(id)
    }

    /// A new buffer holding `data`, owned by this set.
    pub fn create_with(&self, label: &str, data: &[u8], usage: BufferUse) -> Result<Slice> {
        let bytes = (data.len().max(4) as u64).next_multiple_of(4);
        let id = self.create(label, bytes, usage)?;
        self.device().upload(id, 0, data)?;
        Ok(Slice::new(id, 0, bytes))
    }

    /// Takes ownership of buffers created elsewhere.
    pub fn adopt_all(&self, slices: Vec<Slice>) -> Vec<Slice> {
        for s in &slices {
            self.adopt(s.buffer);
        }
        slices
    }

    /// Takes ownership of a buffer created elsewhere: it is freed with the set.
    pub fn adopt(&self, id: BufferId) {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
    }

    /// Hands every buffer to the caller: none is freed when this is dropped.
    pub fn release(self) {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Drop for OwnedBuffers<'_> {
    fn drop(&mut self) {
        let ids = std::mem::take(self.ids.get_mut().unwrap_or_else(|e| e.into_inner()));
        for id in ids {
            // A lost device has freed everything already; nothing else can fail here.
            let _ = self.device().destroy_buffer(id);
        }
    }
}

/// Reads `len` f32 values from a buffer.
pub fn read_f32(
    device: &dyn Device,
    buffer: BufferId,
    offset: u64,
    len: usize,
) -> Result<Vec<f32>> {
    let bytes = device.read(buffer, offset, len as u64 * 4)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_of_zero_timestamps_is_no_time_at_all() {
        // What wgpu's Metal backend reads back on macOS 26: every stamp zero.
        assert_eq!(gpu_intervals(&[0; 8], 1.0), None);
        // Stamps that never advance measure nothing either.
        assert_eq!(gpu_intervals(&[7, 7, 9, 9], 1.0), None);
        // A real reading, one interval of which is below the timer's resolution.
        assert_eq!(
            gpu_intervals(&[100, 150, 150, 150, 200, 260], 2.0),
            Some(vec![100.0, 0.0, 120.0])
        );
        assert_eq!(Clock::GpuTimestamps.note(), None);
        let note = Clock::WallClockTimestampsZero.note().unwrap();
        assert!(note.contains("gfx-rs/wgpu#9414"), "{note}");
        assert_eq!(Clock::WallClockTimestampsZero.label(), "wall-clock");
    }
}
