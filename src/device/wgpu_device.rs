//! `WgpuDevice`: the `Device` trait over wgpu 30 (Vulkan, Metal, and optionally GL/DX12).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::ledger::Ledger;
use super::{
    Access, Backend, BufferId, BufferUse, Clock, Command, CommandList, CoopInput, CoopMatrix,
    Device, DeviceProfile, IndexChecks, LedgerReport, MemoryInUse, PipelineDesc, PipelineId,
    ReadTicket, Slice, Timing, Tuning, Vendor, LLVMPIPE_LOOP_ITERATIONS,
};
use crate::{Error, Result};

/// How long a wait for the GPU may take before it is reported as a hang. Long enough
/// for the biggest kernels on lavapipe.
const GPU_WAIT: Duration = Duration::from_secs(300);

/// Staging memory that uploads may leave pending, at most: past it the queue is flushed,
/// so that a multi-GB model does not need a multi-GB staging copy however its uploads are
/// split (one call per tensor, or a tensor in pieces).
pub const UPLOAD_CHUNK: usize = 64 << 20;

/// Uploads of at most this many bytes are gathered into one batch (see [`SmallUploads`]).
const SMALL_UPLOAD: usize = 256 << 10;
/// The batch's size: one write of this many bytes, then copies out to the targets.
const SMALL_BATCH: usize = 4 << 20;

/// Small uploads gathered into one staging write and copied to their buffers by one
/// command list. Each `queue.write_buffer` makes its own staging allocation; on a device
/// whose staging and storage memory are one type (lavapipe), those freed between live
/// buffers leave holes that every later allocation scans, which made loading a model of
/// many tiny layers quadratic (8,000 layers 26 s, against 1.2 s for 1,000). One batch
/// of a fixed size leaves one hole, refilled by the next.
#[derive(Default)]
struct SmallUploads {
    data: Vec<u8>,
    /// `(target, offset in target, offset in data, bytes)`, every one a multiple of 4.
    copies: Vec<(wgpu::Buffer, u64, u64, u64)>,
    /// The device-side copy of `data`, made on first use.
    scratch: Option<wgpu::Buffer>,
}

/// Which adapter to open. Fields combine: all given ones must match.
#[derive(Clone, Debug, Default)]
pub struct AdapterChoice {
    /// Case-insensitive substring of the adapter name.
    pub name: Option<String>,
    /// Index into `list_adapters()`.
    pub index: Option<usize>,
    /// Only adapters on this backend.
    pub backend: Option<Backend>,
}

impl AdapterChoice {
    /// `BRASS_ADAPTER` (read by [`AdapterChoice::parse`]) and `BRASS_BACKEND`
    /// (`vulkan`, `metal`, `dx12`, `gl`).
    pub fn from_env() -> Self {
        let mut choice = std::env::var("BRASS_ADAPTER")
            .map(|v| AdapterChoice::parse(&v))
            .unwrap_or_default();
        if let Ok(v) = std::env::var("BRASS_BACKEND") {
            choice.backend = parse_backend(&v);
        }
        choice
    }

    /// An index into `list_adapters()` if `spec` is a number, else a name substring: how
    /// `BRASS_ADAPTER` and the examples' `--adapter` read it.
    pub fn parse(spec: &str) -> Self {
        match spec.trim().parse::<usize>() {
            Ok(index) => AdapterChoice {
                index: Some(index),
                ..Default::default()
            },
            Err(_) => AdapterChoice::by_name(spec),
        }
    }

    /// The first adapter whose name contains `name`, ignoring case.
    pub fn by_name(name: &str) -> Self {
        AdapterChoice {
            name: Some(name.to_string()),
            ..Default::default()
        }
    }
}

/// As a person would say it: `adapter index 3`, `adapter named "NVIDIA"`, `Vulkan
/// adapter named "llvmpipe"`, `any adapter`.
impl std::fmt::Display for AdapterChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(backend) = self.backend {
            write!(f, "{backend:?} ")?;
        }
        match (&self.index, &self.name) {
            (None, None) if self.backend.is_none() => f.write_str("any adapter"),
            (None, None) => f.write_str("adapter"),
            (Some(i), None) => write!(f, "adapter index {i}"),
            (None, Some(name)) => write!(f, "adapter named {name:?}"),
            (Some(i), Some(name)) => write!(f, "adapter index {i} named {name:?}"),
        }
    }
}

pub fn parse_backend(s: &str) -> Option<Backend> {
    match s.to_ascii_lowercase().as_str() {
        "vulkan" | "vk" => Some(Backend::Vulkan),
        "metal" | "mtl" => Some(Backend::Metal),
        "dx12" | "d3d12" => Some(Backend::Dx12),
        "gl" | "gles" | "opengl" => Some(Backend::Gl),
        _ => None,
    }
}

/// An adapter as [`list_adapters`] lists it, without opening it.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Its place in the list, as [`AdapterChoice::index`] takes it.
    pub index: usize,
    /// The adapter's name as the driver reports it.
    pub name: String,
    /// The API wgpu drives it through.
    pub backend: Backend,
    /// wgpu's `DeviceType`, spelt as its `Debug` form (`DiscreteGpu`, `Cpu`).
    pub device_type: String,
    /// The driver's name and version, where it reports them.
    pub driver: String,
}

fn backend_of(b: wgpu::Backend) -> Backend {
    match b {
        wgpu::Backend::Metal => Backend::Metal,
        wgpu::Backend::Dx12 => Backend::Dx12,
        wgpu::Backend::Gl => Backend::Gl,
        _ => Backend::Vulkan,
    }
}

fn instance() -> wgpu::Instance {
    give_wayland_a_runtime_dir();
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

/// Mesa's Vulkan drivers (lavapipe, RADV, ANV) load libwayland-client, which prints
/// "error: XDG_RUNTIME_DIR is invalid or not set in the environment." on stderr for every
/// instance when the variable is unset, though brass opens no window. It is harmless but
/// reads like a failure, so where the variable does not name a directory, brass points
/// it at a private one (`$TMPDIR/brass-runtime-UID`, mode 0700) before wgpu first loads
/// Vulkan. It is set once, before any thread of brass's reads the environment; a value
/// that names a directory is left alone.
fn give_wayland_a_runtime_dir() {
    #[cfg(all(unix, not(target_vendor = "apple")))]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let current = std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from);
            if current.is_some_and(|d| d.is_absolute() && d.is_dir()) {
                return;
            }
            let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
                return;
            };
            let dir = std::env::temp_dir().join(format!("brass-runtime-{uid}"));
            let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
            let ours = std::fs::symlink_metadata(&dir)
                .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0);
            if made.is_ok() || ours {
                std::env::set_var("XDG_RUNTIME_DIR", &dir);
            }
        });
    }
}

/// The adapter's memory: its largest device-local heap as Vulkan reports it (NVIDIA's
/// small second one is a window onto the same memory). A CPU adapter allocates from
/// system memory whatever heap it reports (lavapipe says 2 GiB), so there it is the
/// larger of the two. wgpu has no portable query; on other backends (Metal) this is
/// `None` and a model too big for the device is refused by the allocation that fails.
fn device_memory_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    let heap = largest_device_local_heap(adapter);
    if adapter.get_info().device_type == wgpu::DeviceType::Cpu {
        return heap.max(system_memory_bytes());
    }
    heap
}

#[cfg(all(
    feature = "vulkan",
    not(target_vendor = "apple"),
    not(target_arch = "wasm32")
))]
fn largest_device_local_heap(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: reads properties of the physical device, which outlives the guard.
    let vulkan = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let properties = unsafe {
        vulkan
            .shared_instance()
            .raw_instance()
            .get_physical_device_memory_properties(vulkan.raw_physical_device())
    };
    // VK_MEMORY_HEAP_DEVICE_LOCAL_BIT.
    const DEVICE_LOCAL: u32 = 1;
    properties
        .memory_heaps_as_slice()
        .iter()
        .filter(|heap| heap.flags.as_raw() & DEVICE_LOCAL != 0)
        .map(|heap| heap.size)
        .max()
}

#[cfg(not(all(
    feature = "vulkan",
    not(target_vendor = "apple"),
    not(target_arch = "wasm32")
)))]
fn largest_device_local_heap(_: &wgpu::Adapter) -> Option<u64> {
    None
}

/// `MemTotal` from /proc/meminfo, where there is one.
fn system_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

fn adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let mut all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    // Compute-capable adapters only, best first: discrete, integrated, virtual, CPU.
    all.retain(|a| a.get_info().backend != wgpu::Backend::Noop);
    all.sort_by_key(|a| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    });
    all
}

/// Every adapter wgpu can see, in the order `AdapterChoice::index` uses.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters(&instance())
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            AdapterSummary {
                index,
                name: info.name,
                backend: backend_of(info.backend),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_string(),
            }
        })
        .collect()
}

struct BufferEntry {
    buffer: wgpu::Buffer,
    size: u64,
}

struct PipelineEntry {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    params_bytes: u64,
    n_storage: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct BindKey {
    pipeline: PipelineId,
    storage: Vec<Slice>,
}

struct State {
    buffers: Vec<Option<BufferEntry>>,
    /// By `PipelineId`; `None` once destroyed (ids are not reused).
    pipelines: Vec<Option<PipelineEntry>>,
    bind_groups: HashMap<BindKey, wgpu::BindGroup>,
    ledger: Ledger,
    /// Uniform parameter blocks of one submission, one aligned slot per dispatch.
    arena: Option<wgpu::Buffer>,
    /// Read-backs queued by `submit_read`, by ticket.
    pending_reads: HashMap<u64, PendingRead>,
    next_ticket: u64,
}

struct PendingRead {
    staging: wgpu::Buffer,
    len: u64,
    submission: wgpu::SubmissionIndex,
    mapped: std::sync::mpsc::Receiver<Result<(), wgpu::BufferAsyncError>>,
}

/// A wgpu device with brass's bookkeeping.
pub struct WgpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    profile: DeviceProfile,
    /// The adapter is a CPU implementation (lavapipe, SwiftShader, WARP).
    software: bool,
    spirv_passthrough: bool,
    uniform_align: u64,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Vec<wgpu::Error>>>,
    state: Mutex<State>,
    /// Bytes written by `upload` since it last flushed the queue: an upper bound on the
    /// staging memory wgpu holds for them (any submission also frees it).
    pending_upload: AtomicUsize,
    /// Set once a timestamp read-back came back all zeros (gfx-rs/wgpu#9414): timed
    /// submissions are wall-clock from then on (`Device::clock`).
    timestamps_read_zero: AtomicBool,
    /// Taken before `state` when both are held, and held from writing a batch to the
    /// submission that copies it out.
    small_uploads: Mutex<SmallUploads>,
    /// Last, so that it drops after every wgpu handle above: leaves the gate `Drop`
    /// entered.
    _leaves_gate: LeavesLifecycleGate,
}

/// Devices of a process are created and destroyed one at a time. On the H200 (NVIDIA
/// 580.159.04) a thread dropping its device while others created or used theirs hung
/// the process now and then: tests/ops.rs, ten tests on ten threads each opening a
/// device, hung in 6 of 15 runs, one device's drop never returning and every other
/// thread waiting in the driver; with creation and destruction serialized, 8 runs of 8
/// passed (results/hardening/h200_2026-12-03_device_lifecycle).
static LIFECYCLE: Gate = Gate {
    busy: Mutex::new(false),
    free: std::sync::Condvar::new(),
};

struct Gate {
    busy: Mutex<bool>,
    free: std::sync::Condvar,
}

impl Gate {
    fn enter(&self) {
        let mut busy = lock(&self.busy);
        while *busy {
            busy = self
                .free
                .wait(busy)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        *busy = true;
    }

    fn leave(&self) {
        *lock(&self.busy) = false;
        self.free.notify_one();
    }
}

/// Leaves [`LIFECYCLE`] when dropped.
struct LeavesLifecycleGate;

impl Drop for LeavesLifecycleGate {
    fn drop(&mut self) {
        LIFECYCLE.leave();
    }
}

impl Drop for WgpuDevice {
    fn drop(&mut self) {
        // The fields, wgpu's device and queue among them, drop after this, and the last
        // of them leaves the gate.
        LIFECYCLE.enter();
    }
}

impl WgpuDevice {
    /// Opens the best adapter matching `choice` (high performance first).
    pub fn open(choice: &AdapterChoice) -> Result<Self> {
        LIFECYCLE.enter();
        let _leaves = LeavesLifecycleGate;
        let instance = instance();
        let all = adapters(&instance);
        if all.is_empty() {
            return Err(Error::NoAdapter(
                "wgpu found no adapter (no Vulkan/Metal driver; on Linux install \
                 mesa-vulkan-drivers for lavapipe)"
                    .into(),
            ));
        }
        let listed: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let info = a.get_info();
                format!(
                    "{i} {}, {:?} {:?}",
                    info.name,
                    backend_of(info.backend),
                    info.device_type
                )
            })
            .collect();
        let picked = all.into_iter().enumerate().find(|(i, a)| {
            let info = a.get_info();
            choice.index.is_none_or(|want| want == *i)
                && choice.backend.is_none_or(|b| b == backend_of(info.backend))
                && choice
                    .name
                    .as_ref()
                    .is_none_or(|n| info.name.to_lowercase().contains(&n.to_lowercase()))
        });
        let Some((_, adapter)) = picked else {
            return Err(Error::NoAdapter(format!(
                "{choice} not found ({}: {})",
                match listed.len() {
                    1 => "wgpu sees 1 adapter".to_string(),
                    n => format!("wgpu sees {n} adapters"),
                },
                listed.join("; ")
            )));
        };
        Self::from_adapter(adapter)
    }

    fn from_adapter(adapter: wgpu::Adapter) -> Result<Self> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let wanted =
            wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY;
        // SPIR-V passthrough is opt-in (BRASS_SPIRV_PASSTHROUGH=1): the driver then gets
        // exactly the SPIR-V under spirv/, not wgpu's own translation of the WGSL.
        let passthrough = std::env::var("BRASS_SPIRV_PASSTHROUGH").is_ok_and(|v| v == "1")
            && info.backend == wgpu::Backend::Vulkan
            && adapter
                .features()
                .contains(wgpu::Features::PASSTHROUGH_SHADERS);
        let wanted = if passthrough {
            wanted | wgpu::Features::PASSTHROUGH_SHADERS
        } else {
            wanted
        };
        // Only Vulkan bounds storage reads itself (robust buffer access); an A/B sets
        // BRASS_INDEX_CHECKS=wgpu to give every kernel wgpu's clamps.
        let kernel_index_checks = info.backend == wgpu::Backend::Vulkan
            && std::env::var("BRASS_INDEX_CHECKS").map_or(true, |v| v != "wgpu");
        let f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let coop_matrix = if adapter
            .features()
            .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        {
            CoopMatrix::pick(
                &coop_matrix_offers(&adapter),
                f16,
                info.backend == wgpu::Backend::Vulkan,
            )
        } else {
            None
        };
        let wanted = if coop_matrix.is_some() {
            wanted | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        } else {
            wanted
        };
        let features = adapter.features() & wanted;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("brass"),
            required_features: features,
            required_limits: limits.clone(),
            // SAFETY: the one experimental feature brass asks for is cooperative
            // matrices, and only where the adapter lists a configuration the matmuls
            // use (`CoopMatrix::pick`); their results are checked against the CPU
            // reference on such an adapter (tests/matmul.rs).
            experimental_features: if coop_matrix.is_some() {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        }))
        .map_err(|e| Error::Device(format!("request_device on {}: {e}", info.name)))?;

        let lost = Arc::new(Mutex::new(None));
        let lost_cb = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            *lock(&lost_cb) = Some(format!("{reason:?}: {msg}"));
        });
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let uncaptured_cb = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| lock(&uncaptured_cb).push(e)));

        let profile = DeviceProfile {
            backend: backend_of(info.backend),
            vendor: Vendor::from_pci_id(info.vendor),
            name: info.name.clone(),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroup_min: info.subgroup_min_size,
            subgroup_max: info.subgroup_max_size,
            subgroup_runs: DeviceProfile::apple_simd_width(backend_of(info.backend), &info.name),
            f16: features.contains(wgpu::Features::SHADER_F16),
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            workgroup_storage_bytes: limits.max_compute_workgroup_storage_size,
            max_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_workgroup_size_x: limits.max_compute_workgroup_size_x,
            max_workgroups_per_dim: limits.max_compute_workgroups_per_dimension,
            max_binding_bytes: limits.max_storage_buffer_binding_size,
            max_buffer_bytes: limits.max_buffer_size,
            max_storage_buffers_per_stage: limits.max_storage_buffers_per_shader_stage,
            storage_offset_alignment: limits.min_storage_buffer_offset_alignment,
            vendor_peak_gbps: None,
            memory_bytes: device_memory_bytes(&adapter),
            compute_units: None,
            coop_matrix,
            kernel_index_checks,
            loop_iterations: (info.driver == "llvmpipe").then_some(LLVMPIPE_LOOP_ITERATIONS),
            tuning: Tuning::default(),
        };
        // wgpu reports no compute-unit count: a known adapter's comes from its preset,
        // and with it the tuning measured (or scaled) for that hardware.
        let profile = match DeviceProfile::preset_named(&profile.name) {
            Some(known) => DeviceProfile {
                compute_units: known.compute_units,
                tuning: known.tuning,
                ..profile
            },
            None => profile,
        };
        Ok(WgpuDevice {
            device,
            queue,
            profile,
            software: info.device_type == wgpu::DeviceType::Cpu,
            spirv_passthrough: passthrough,
            uniform_align: limits.min_uniform_buffer_offset_alignment.max(16) as u64,
            lost,
            uncaptured,
            pending_upload: AtomicUsize::new(0),
            timestamps_read_zero: AtomicBool::new(false),
            small_uploads: Mutex::new(SmallUploads::default()),
            _leaves_gate: LeavesLifecycleGate,
            state: Mutex::new(State {
                buffers: Vec::new(),
                pipelines: Vec::new(),
                bind_groups: HashMap::new(),
                ledger: Ledger::default(),
                arena: None,
                pending_reads: HashMap::new(),
                next_ticket: 0,
            }),
        })
    }

    /// The adapter's name ([`DeviceProfile::name`]).
    pub fn adapter_name(&self) -> &str {
        &self.profile.name
    }

    /// Whether the adapter runs on the CPU (lavapipe and the like) rather than a GPU.
    pub fn is_software(&self) -> bool {
        self.software
    }

    /// Whether kernels reach the driver as naga's SPIR-V through passthrough.
    pub fn uses_spirv_passthrough(&self) -> bool {
        self.spirv_passthrough
    }

    /// Turns a lost device or an error wgpu reported asynchronously into an `Error`.
    fn check(&self) -> Result<()> {
        if let Some(msg) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost(msg));
        }
        if let Some(e) = lock(&self.uncaptured).drain(..).next() {
            return Err(convert_error(e, "device"));
        }
        Ok(())
    }

    /// Bytes uploaded since `upload` last flushed the queue: below [`UPLOAD_CHUNK`].
    pub fn pending_upload_bytes(&self) -> usize {
        self.pending_upload.load(Ordering::Relaxed)
    }

    /// Writes the gathered small uploads and submits their copies. Every submission and
    /// direct write goes after it, so uploads land in the order they were made.
    fn flush_small_uploads(&self) {
        let mut small = lock(&self.small_uploads);
        if let Some(copies) = self.small_upload_copies(&mut small) {
            self.queue.submit([copies]);
        }
    }

    /// Writes the gathered small uploads to the scratch buffer and returns the command
    /// buffer that copies them out, to submit ahead of (or with) the next work: a decode
    /// step's token then needs no submission of its own. The caller holds the lock until
    /// it submits them, since the next batch's write to the one scratch buffer would
    /// land before these copies run.
    fn small_upload_copies(&self, small: &mut SmallUploads) -> Option<wgpu::CommandBuffer> {
        if small.copies.is_empty() {
            return None;
        }
        let scratch = small
            .scratch
            .get_or_insert_with(|| {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("brass small uploads"),
                    size: SMALL_BATCH as u64,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .clone();
        self.queue.write_buffer(&scratch, 0, &small.data);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        for (target, at, from, len) in small.copies.drain(..) {
            encoder.copy_buffer_to_buffer(&scratch, from, &target, at, len);
        }
        small.data.clear();
        Some(encoder.finish())
    }

    /// Adds one upload of at most [`SMALL_UPLOAD`] bytes, already checked against its
    /// buffer, to the batch; a full batch is flushed first.
    fn gather_small_upload(&self, target: wgpu::Buffer, offset: u64, data: &[u8]) -> Result<()> {
        let padded = data.len().next_multiple_of(4);
        let mut small = lock(&self.small_uploads);
        if small.data.len() + padded > SMALL_BATCH {
            if let Some(copies) = self.small_upload_copies(&mut small) {
                self.queue.submit([copies]);
            }
            self.note_pending_upload(SMALL_BATCH)?;
        }
        let from = small.data.len() as u64;
        small.data.extend_from_slice(data);
        small.data.resize(from as usize + padded, 0);
        small.copies.push((target, offset, from, padded as u64));
        Ok(())
    }

    /// Counts staging bytes written since the queue was last waited on, and waits for it
    /// once they reach [`UPLOAD_CHUNK`], which frees them.
    fn note_pending_upload(&self, bytes: usize) -> Result<()> {
        let pending = self.pending_upload.fetch_add(bytes, Ordering::Relaxed);
        if pending + bytes >= UPLOAD_CHUNK {
            self.queue.submit([]);
            self.poll_wait()?;
            self.pending_upload.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    fn poll_wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(GPU_WAIT),
            })
            .map_err(|e| match e {
                wgpu::PollError::Timeout => Error::Device(format!(
                    "the GPU did not finish within {} s (hung or far too slow)",
                    GPU_WAIT.as_secs()
                )),
                other => Error::DeviceLost(other.to_string()),
            })?;
        self.check()
    }

    /// Records `list`, then `after` (copies of its results), and submits them, all under
    /// the state lock. The lock must be held until `queue.submit`: `encode` writes
    /// this list's dispatch parameters into the one parameter arena with
    /// `queue.write_buffer`, which takes effect at the next submission made from any
    /// thread, so another session encoding in between would hand its parameters to
    /// these dispatches.
    fn encode_and_submit(
        &self,
        list: &CommandList,
        queries: Option<(&wgpu::QuerySet, Timing)>,
        after: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<wgpu::SubmissionIndex> {
        let mut small = lock(&self.small_uploads);
        let uploads = self.small_upload_copies(&mut small);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let mut state = lock(&self.state);
        if let Err(e) = self.encode(&mut state, &mut encoder, list, queries) {
            // The uploads still land.
            self.queue.submit(uploads);
            return Err(e);
        }
        after(&mut encoder);
        Ok(self
            .queue
            .submit(uploads.into_iter().chain([encoder.finish()])))
    }

    /// Records `list` into `encoder`; with `per_dispatch_queries`, dispatch `i` writes
    /// timestamps `2i` and `2i + 1` into that query set. Only `encode_and_submit` calls
    /// it.
    fn encode(
        &self,
        state: &mut State,
        encoder: &mut wgpu::CommandEncoder,
        list: &CommandList,
        queries: Option<(&wgpu::QuerySet, Timing)>,
    ) -> Result<()> {
        // Lay out the parameter blocks and grow the arena if needed.
        let mut slots = Vec::new();
        let mut arena_bytes = 0u64;
        for d in list.dispatches() {
            let p = state
                .pipelines
                .get(d.pipeline.0 as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| {
                    Error::Invalid(format!("unknown or destroyed pipeline {:?}", d.pipeline))
                })?;
            if d.params.len() as u64 * 4 > p.params_bytes {
                return Err(Error::Invalid(format!(
                    "dispatch passes {} bytes of parameters to a pipeline that takes {}",
                    d.params.len() * 4,
                    p.params_bytes
                )));
            }
            if d.storage.len() != p.n_storage {
                return Err(Error::Invalid(format!(
                    "dispatch binds {} storage buffers to a pipeline that takes {}",
                    d.storage.len(),
                    p.n_storage
                )));
            }
            slots.push(arena_bytes);
            arena_bytes += p.params_bytes.div_ceil(self.uniform_align) * self.uniform_align;
        }
        let arena_bytes = arena_bytes.max(self.uniform_align);
        if state.arena.as_ref().is_none_or(|a| a.size() < arena_bytes) {
            let size = arena_bytes.next_power_of_two();
            state.arena = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("brass params arena"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
            // Every cached bind group points at the old arena.
            state.bind_groups.clear();
        }
        let mut arena_data = vec![0u8; arena_bytes as usize];
        for (d, &slot) in list.dispatches().zip(&slots) {
            let bytes: &[u8] = bytemuck::cast_slice(&d.params);
            arena_data[slot as usize..slot as usize + bytes.len()].copy_from_slice(bytes);
        }
        let arena = state.arena.clone().expect("arena exists after growth");
        self.queue.write_buffer(&arena, 0, &arena_data);

        // Bind groups first, so the pass can borrow them.
        for d in list.dispatches() {
            let key = BindKey {
                pipeline: d.pipeline,
                storage: d.storage.clone(),
            };
            if state.bind_groups.contains_key(&key) {
                continue;
            }
            let p = state.pipelines[d.pipeline.0 as usize]
                .as_ref()
                .expect("checked while laying out the parameters");
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &arena,
                    offset: 0,
                    size: wgpu::BufferSize::new(p.params_bytes),
                }),
            }];
            for (i, s) in d.storage.iter().enumerate() {
                let entry = state
                    .buffers
                    .get(s.buffer.0 as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| Error::Invalid(format!("unknown buffer {:?}", s.buffer)))?;
                if s.offset
                    .checked_add(s.size)
                    .is_none_or(|end| end > entry.size)
                    || s.size == 0
                {
                    return Err(Error::Invalid(format!(
                        "binding {} = bytes {}..+{} of a {}-byte buffer",
                        i + 1,
                        s.offset,
                        s.size,
                        entry.size
                    )));
                }
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &entry.buffer,
                        offset: s.offset,
                        size: wgpu::BufferSize::new(s.size),
                    }),
                });
            }
            let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &p.layout,
                entries: &entries,
            });
            state.bind_groups.insert(key, group);
        }

        let mut pass: Option<wgpu::ComputePass> = None;
        let mut slot_iter = slots.iter();
        let mut dispatch_index = 0u32;
        let whole = matches!(queries, Some((_, Timing::Whole)));
        for c in &list.commands {
            match c {
                Command::Dispatch(d) => {
                    let per_dispatch = match queries {
                        Some((qs, Timing::PerDispatch)) => Some(qs),
                        _ => None,
                    };
                    if per_dispatch.is_some() {
                        pass = None;
                    }
                    if pass.is_none() {
                        let timestamp_writes = match queries {
                            Some((qs, Timing::PerDispatch)) => {
                                Some(wgpu::ComputePassTimestampWrites {
                                    query_set: qs,
                                    beginning_of_pass_write_index: Some(2 * dispatch_index),
                                    end_of_pass_write_index: Some(2 * dispatch_index + 1),
                                })
                            }
                            // The whole-list interval starts at the first pass and
                            // ends in an empty pass after everything (see below).
                            Some((qs, Timing::Whole)) if dispatch_index == 0 => {
                                Some(wgpu::ComputePassTimestampWrites {
                                    query_set: qs,
                                    beginning_of_pass_write_index: Some(0),
                                    end_of_pass_write_index: None,
                                })
                            }
                            Some((_, Timing::Whole)) => None,
                            None => None,
                        };
                        pass = Some(
                            encoder
                                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                                    label: None,
                                    timestamp_writes,
                                })
                                .forget_lifetime(),
                        );
                    }
                    let p = state.pipelines[d.pipeline.0 as usize]
                        .as_ref()
                        .expect("checked while laying out the parameters");
                    let key = BindKey {
                        pipeline: d.pipeline,
                        storage: d.storage.clone(),
                    };
                    let group = &state.bind_groups[&key];
                    let slot = *slot_iter.next().expect("one slot per dispatch");
                    let cp = pass.as_mut().expect("pass is open");
                    cp.set_pipeline(&p.pipeline);
                    cp.set_bind_group(0, group, &[slot as u32]);
                    let [x, y, z] = d.workgroups;
                    let max = self.profile.max_workgroups_per_dim;
                    if x > max || y > max || z > max {
                        return Err(Error::Invalid(format!(
                            "dispatch of {x}x{y}x{z} workgroups exceeds the device's {max} per dimension"
                        )));
                    }
                    cp.dispatch_workgroups(x, y, z);
                    state.ledger.count(d.pipeline, d.bytes_read);
                    dispatch_index += 1;
                }
                Command::Copy {
                    src,
                    dst,
                    dst_offset,
                } => {
                    pass = None;
                    let s = self.buffer_entry(state, src.buffer)?;
                    let t = self.buffer_entry(state, *dst)?;
                    encoder.copy_buffer_to_buffer(
                        &s.buffer,
                        src.offset,
                        &t.buffer,
                        *dst_offset,
                        src.size,
                    );
                }
            }
        }
        drop(pass);
        if whole {
            if let Some((qs, _)) = queries {
                // The end stamp goes after everything, outside any pass.
                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: qs,
                        beginning_of_pass_write_index: None,
                        end_of_pass_write_index: Some(1),
                    }),
                });
            }
        }
        Ok(())
    }

    fn buffer_entry<'s>(&self, state: &'s State, id: BufferId) -> Result<&'s BufferEntry> {
        state
            .buffers
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Invalid(format!("unknown buffer {id:?}")))
    }

    /// GPU nanoseconds per interval, or `None` where the timestamps read as zeros.
    fn run_timed_chunk(&self, list: &CommandList, timing: Timing) -> Result<Option<Vec<f64>>> {
        let n_intervals = match timing {
            Timing::Whole => u32::from(list.dispatches().next().is_some()),
            Timing::PerDispatch => list.dispatches().count() as u32,
        };
        if n_intervals == 0 {
            return Ok(Some(Vec::new()));
        }
        let n_queries = 2 * n_intervals;
        let qs = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("brass timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: n_queries,
        });
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("brass timestamp resolve"),
            size: n_queries as u64 * 8,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("brass timestamp readback"),
            size: n_queries as u64 * 8,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.encode_and_submit(list, Some((&qs, timing)), |encoder| {
            encoder.resolve_query_set(&qs, 0..n_queries, &resolve, 0);
            encoder.copy_buffer_to_buffer(&resolve, 0, &staging, 0, n_queries as u64 * 8);
        })?;
        let stamps: Vec<u64> = bytemuck::pod_collect_to_vec(&self.map_read(&staging)?);
        let period = self.queue.get_timestamp_period() as f64;
        Ok(super::gpu_intervals(&stamps, period))
    }

    /// Runs `list` timed by the host's clock around each submission and its wait: the
    /// whole list, or each dispatch (with the copies before it) in its own submission.
    fn submit_wall_clock(&self, list: &CommandList, timing: Timing) -> Result<Vec<f64>> {
        let timed = |part: &CommandList| -> Result<f64> {
            let start = Instant::now();
            self.submit(part)?;
            self.wait()?;
            Ok(start.elapsed().as_nanos() as f64)
        };
        match timing {
            Timing::Whole if list.dispatches().next().is_none() => Ok(Vec::new()),
            Timing::Whole => Ok(vec![timed(list)?]),
            Timing::PerDispatch => {
                let mut times = Vec::new();
                let mut part = CommandList::new();
                for c in &list.commands {
                    part.commands.push(c.clone());
                    if matches!(c, Command::Dispatch(_)) {
                        times.push(timed(&part)?);
                        part = CommandList::new();
                    }
                }
                if !part.is_empty() {
                    self.submit(&part)?;
                    self.wait()?;
                }
                Ok(times)
            }
        }
    }

    fn staging_buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("brass readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// The source of a read-back of `len` bytes at `offset`, checked.
    fn read_source(&self, buffer: BufferId, offset: u64, len: u64) -> Result<(wgpu::Buffer, u64)> {
        let padded = len.next_multiple_of(4).max(4);
        let state = lock(&self.state);
        let e = self.buffer_entry(&state, buffer)?;
        if !offset.is_multiple_of(4) || offset.checked_add(padded).is_none_or(|end| end > e.size) {
            return Err(Error::Invalid(format!(
                "read of {len} bytes at offset {offset} from a {}-byte buffer",
                e.size
            )));
        }
        Ok((e.buffer.clone(), padded))
    }

    fn map_read(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.poll_wait()?;
        rx.recv_timeout(Duration::from_secs(1))
            .map_err(|_| Error::Device("buffer mapping never completed".into()))?
            .map_err(|e| Error::Device(format!("map_async: {e}")))?;
        let data = staging
            .get_mapped_range(..)
            .map_err(|e| Error::Device(format!("get_mapped_range: {e}")))?
            .to_vec();
        staging.unmap();
        Ok(data)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain bookkeeping behind, still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn convert_error(e: wgpu::Error, what: &str) -> Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory(what.to_string()),
        other => Error::Device(format!("{what}: {other}")),
    }
}

impl Device for WgpuDevice {
    fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    fn create_buffer(&self, label: &str, bytes: u64, usage: BufferUse) -> Result<BufferId> {
        self.check()?;
        if bytes > self.profile.max_buffer_bytes {
            return Err(Error::OutOfMemory(format!(
                "buffer `{label}` of {bytes} bytes exceeds {}'s {}-byte buffer limit",
                self.profile.name, self.profile.max_buffer_bytes
            )));
        }
        let usages = match usage {
            // Weights are copy sources too, so benchmarks can replicate them on the GPU.
            BufferUse::Weights | BufferUse::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC
            }
        };
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: usages,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(convert_error(
                e,
                &format!("creating buffer `{label}` of {bytes} bytes"),
            ));
        }
        let mut state = lock(&self.state);
        state.buffers.push(Some(BufferEntry {
            size: buffer.size(),
            buffer,
        }));
        Ok(BufferId(state.buffers.len() as u32 - 1))
    }

    fn upload(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<()> {
        self.check()?;
        let target = {
            let state = lock(&self.state);
            let e = self.buffer_entry(&state, buffer)?;
            if !offset.is_multiple_of(4)
                || offset
                    .checked_add(data.len() as u64)
                    .is_none_or(|end| end > e.size)
            {
                return Err(Error::Invalid(format!(
                    "upload of {} bytes at offset {offset} into a {}-byte buffer",
                    data.len(),
                    e.size
                )));
            }
            e.buffer.clone()
        };
        if data.len() <= SMALL_UPLOAD {
            self.gather_small_upload(target, offset, data)?;
            return self.check();
        }
        self.flush_small_uploads();
        for (i, chunk) in data.chunks(UPLOAD_CHUNK).enumerate() {
            let at = offset + (i * UPLOAD_CHUNK) as u64;
            if chunk.len() % 4 == 0 {
                self.queue.write_buffer(&target, at, chunk);
            } else {
                let mut padded = chunk.to_vec();
                padded.resize(chunk.len().next_multiple_of(4), 0);
                self.queue.write_buffer(&target, at, &padded);
            }
            self.note_pending_upload(chunk.len())?;
        }
        self.check()
    }

    fn buffer_size(&self, buffer: BufferId) -> Result<u64> {
        let state = lock(&self.state);
        Ok(self.buffer_entry(&state, buffer)?.size)
    }

    fn memory_in_use(&self) -> MemoryInUse {
        let state = lock(&self.state);
        let live = state.buffers.iter().flatten();
        MemoryInUse {
            buffers: live.clone().count(),
            bytes: live.map(|e| e.size).sum(),
            pipelines: state.pipelines.iter().flatten().count(),
        }
    }

    fn destroy_buffer(&self, buffer: BufferId) -> Result<()> {
        // A gathered upload may still copy into it.
        self.flush_small_uploads();
        let mut state = lock(&self.state);
        let entry = state
            .buffers
            .get_mut(buffer.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| Error::Invalid(format!("unknown buffer {buffer:?}")))?;
        entry.buffer.destroy();
        state
            .bind_groups
            .retain(|k, _| k.storage.iter().all(|s| s.buffer != buffer));
        Ok(())
    }

    fn destroy_pipeline(&self, pipeline: PipelineId) -> Result<()> {
        let mut state = lock(&self.state);
        state
            .pipelines
            .get_mut(pipeline.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| Error::Invalid(format!("unknown pipeline {pipeline:?}")))?;
        state.bind_groups.retain(|k, _| k.pipeline != pipeline);
        state.ledger.forget(pipeline);
        Ok(())
    }

    fn create_pipeline(&self, desc: &PipelineDesc) -> Result<PipelineId> {
        self.check()?;
        // naga first: its messages point at the WGSL line, wgpu's do not always.
        let module = naga::front::wgsl::parse_str(desc.wgsl).map_err(|e| Error::Shader {
            name: desc.name.to_string(),
            what: e.emit_to_string(desc.wgsl),
        })?;
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .map_err(|e| Error::Shader {
            name: desc.name.to_string(),
            what: e.emit_to_string(desc.wgsl),
        })?;

        let params_bytes = (desc.params_bytes as u64).max(16).next_multiple_of(16);
        let mut layout_entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: true,
                min_binding_size: wgpu::BufferSize::new(params_bytes),
            },
            count: None,
        }];
        for (i, access) in desc.storage.iter().enumerate() {
            layout_entries.push(wgpu::BindGroupLayoutEntry {
                binding: i as u32 + 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: *access == Access::Read,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(desc.name),
                entries: &layout_entries,
            });
        let pipeline_layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(desc.name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let shader = if self.spirv_passthrough {
            let (words, size) = super::translate::spirv_and_workgroup_size(
                desc.name,
                desc.wgsl,
                desc.entry,
                desc.constants,
            )?;
            let entry_points = [wgpu::PassthroughShaderEntryPoint {
                name: desc.entry.into(),
                workgroup_size: size.into(),
            }];
            // SAFETY: the SPIR-V is naga's translation of WGSL that naga validated above,
            // with overrides resolved; wgpu's robustBufferAccess still bounds every read.
            unsafe {
                self.device.create_shader_module_passthrough(
                    wgpu::ShaderModuleDescriptorPassthrough {
                        label: Some(desc.name),
                        entry_points: entry_points[..].into(),
                        spirv: Some(words.into()),
                        ..Default::default()
                    },
                )
            }
        } else if desc.index_checks == IndexChecks::Kernel && self.profile.kernel_index_checks {
            let checks = wgpu::ShaderRuntimeChecks {
                bounds_checks: false,
                force_loop_bounding: false,
                ..wgpu::ShaderRuntimeChecks::checked()
            };
            // SAFETY: the kernel's indices into its workgroup arrays are in range by
            // construction (IndexChecks::Kernel), its loops are bounded by its
            // parameters, and on Vulkan robust buffer access bounds its storage reads.
            unsafe {
                self.device.create_shader_module_trusted(
                    wgpu::ShaderModuleDescriptor {
                        label: Some(desc.name),
                        source: wgpu::ShaderSource::Wgsl(desc.wgsl.into()),
                    },
                    checks,
                )
            }
        } else {
            self.device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(desc.name),
                    source: wgpu::ShaderSource::Wgsl(desc.wgsl.into()),
                })
        };
        let constants = if self.spirv_passthrough {
            &[][..]
        } else {
            desc.constants
        };
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(desc.name),
                layout: Some(&pipeline_layout),
                module: &shader,
                entry_point: Some(desc.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Shader {
                name: desc.name.to_string(),
                what: e.to_string(),
            });
        }
        let mut state = lock(&self.state);
        let id = PipelineId(state.pipelines.len() as u32);
        state.pipelines.push(Some(PipelineEntry {
            pipeline,
            layout,
            params_bytes,
            n_storage: desc.storage.len(),
        }));
        state.ledger.register(id, desc.name, desc.fallback_reason);
        Ok(id)
    }

    fn submit(&self, list: &CommandList) -> Result<()> {
        self.check()?;
        self.encode_and_submit(list, None, |_| {})?;
        self.check()
    }

    fn submit_timed(&self, list: &CommandList, timing: Timing) -> Result<Vec<f64>> {
        self.check()?;
        if !self.profile.timestamps {
            return Err(Error::Device(format!(
                "{} has no timestamp queries",
                self.profile.name
            )));
        }
        if self.timestamps_read_zero.load(Ordering::Relaxed) {
            return self.submit_wall_clock(list, timing);
        }
        let gpu_times = match timing {
            Timing::Whole => self.run_timed_chunk(list, timing)?,
            Timing::PerDispatch => {
                // A query set holds at most 4096 stamps: time long lists in pieces that
                // never split a dispatch from the copies before it.
                let max = (wgpu::QUERY_SET_MAX_QUERIES / 2) as usize;
                let mut times = Some(Vec::new());
                let mut chunk = CommandList::new();
                for c in &list.commands {
                    if matches!(c, Command::Dispatch(_)) && chunk.dispatches().count() == max {
                        times = self.run_timed_chunk(&chunk, timing)?.and_then(|t| {
                            times.map(|mut all| {
                                all.extend(t);
                                all
                            })
                        });
                        chunk = CommandList::new();
                    }
                    chunk.commands.push(c.clone());
                }
                match (times, self.run_timed_chunk(&chunk, timing)?) {
                    (Some(mut all), Some(last)) => {
                        all.extend(last);
                        Some(all)
                    }
                    _ => None,
                }
            }
        };
        match gpu_times {
            Some(times) => Ok(times),
            None => {
                // The list has run, but nothing measured it: from now on (and for it,
                // again) the wall clock does.
                self.timestamps_read_zero.store(true, Ordering::Relaxed);
                self.submit_wall_clock(list, timing)
            }
        }
    }

    fn clock(&self) -> Clock {
        if self.timestamps_read_zero.load(Ordering::Relaxed) {
            Clock::WallClockTimestampsZero
        } else {
            Clock::GpuTimestamps
        }
    }

    fn read(&self, buffer: BufferId, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check()?;
        let (source, padded) = self.read_source(buffer, offset, len)?;
        let staging = self.staging_buffer(padded);
        let mut small = lock(&self.small_uploads);
        let uploads = self.small_upload_copies(&mut small);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&source, offset, &staging, 0, padded);
        self.queue
            .submit(uploads.into_iter().chain([encoder.finish()]));
        drop(small);
        let mut data = self.map_read(&staging)?;
        data.truncate(len as usize);
        Ok(data)
    }

    fn submit_read(&self, list: &CommandList, src: Slice) -> Result<ReadTicket> {
        self.check()?;
        let (source, padded) = self.read_source(src.buffer, src.offset, src.size)?;
        let staging = self.staging_buffer(padded);
        let submission = self.encode_and_submit(list, None, |encoder| {
            encoder.copy_buffer_to_buffer(&source, src.offset, &staging, 0, padded);
        })?;
        let (tx, mapped) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        let mut state = lock(&self.state);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.pending_reads.insert(
            ticket,
            PendingRead {
                staging,
                len: src.size,
                submission,
                mapped,
            },
        );
        drop(state);
        self.check()?;
        Ok(ReadTicket(ticket))
    }

    fn finish_read(&self, ticket: ReadTicket) -> Result<Vec<u8>> {
        let pending = lock(&self.state)
            .pending_reads
            .remove(&ticket.0)
            .ok_or_else(|| Error::Invalid(format!("unknown read ticket {}", ticket.0)))?;
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(pending.submission),
                timeout: Some(GPU_WAIT),
            })
            .map_err(|e| Error::Device(format!("waiting for a read-back: {e}")))?;
        self.check()?;
        pending
            .mapped
            .recv_timeout(Duration::from_secs(1))
            .map_err(|_| Error::Device("buffer mapping never completed".into()))?
            .map_err(|e| Error::Device(format!("map_async: {e}")))?;
        let mut data = pending
            .staging
            .get_mapped_range(..)
            .map_err(|e| Error::Device(format!("get_mapped_range: {e}")))?
            .to_vec();
        pending.staging.unmap();
        data.truncate(pending.len as usize);
        Ok(data)
    }

    fn wait(&self) -> Result<()> {
        self.poll_wait()
    }

    fn ledger(&self) -> LedgerReport {
        lock(&self.state).ledger.report()
    }
}

/// The adapter's cooperative-matrix configurations as (M, N, K, input, whether the
/// accumulator is f32), those of an input type brass stages.
fn coop_matrix_offers(adapter: &wgpu::Adapter) -> Vec<(u32, u32, u32, CoopInput, bool)> {
    adapter
        .cooperative_matrix_properties()
        .iter()
        .filter_map(|p| {
            let input = match p.ab_type {
                wgpu::CooperativeScalarType::F16 => CoopInput::F16,
                wgpu::CooperativeScalarType::F32 => CoopInput::F32,
                _ => return None,
            };
            let f32_acc = p.cr_type == wgpu::CooperativeScalarType::F32;
            Some((p.m_size, p.n_size, p.k_size, input, f32_acc))
        })
        .collect()
}
