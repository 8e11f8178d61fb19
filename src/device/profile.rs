//! `DeviceProfile`: everything the router may know about a device, as a plain value.
//!
//! A profile comes from a live adapter (`WgpuDevice::profile`) or from a named preset, so
//! routing decisions are testable for hardware this machine does not have.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The graphics API wgpu drives the adapter through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backend {
    /// Vulkan.
    Vulkan,
    /// Metal (macOS, iOS).
    Metal,
    /// Direct3D 12 (Windows), with the `dx12` feature.
    Dx12,
    /// OpenGL ES / WebGL, with the `gles` feature.
    Gl,
}

/// Who made the adapter, from its PCI vendor id: a fact for reports (the profile's
/// `Display`); the router decides on limits and features, not on vendors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Vendor {
    /// Apple (its GPUs through Metal).
    Apple,
    /// AMD (and ATI).
    Amd,
    /// NVIDIA.
    Nvidia,
    /// Intel.
    Intel,
    /// Mesa's software rasterizers (lavapipe) report this PCI vendor id.
    Mesa,
    /// Any other vendor, by its PCI vendor id.
    Other(u32),
}

impl Vendor {
    /// The vendor of a PCI vendor id as wgpu reports it (`AdapterInfo::vendor`).
    pub fn from_pci_id(id: u32) -> Self {
        match id {
            0x106b => Vendor::Apple,
            0x1002 | 0x1022 => Vendor::Amd,
            0x10de => Vendor::Nvidia,
            0x8086 => Vendor::Intel,
            0x10005 => Vendor::Mesa,
            other => Vendor::Other(other),
        }
    }
}

/// Everything the router may know about a device, as a plain value: its backend,
/// limits and features as wgpu reports them, with facts wgpu does not report taken
/// from the preset of the same adapter. Sizes are in bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// The API the adapter is driven through.
    pub backend: Backend,
    /// Who made it.
    pub vendor: Vendor,
    /// The adapter's name as the driver reports it (`NVIDIA H200`, `llvmpipe (LLVM
    /// 19.1.7, 256 bits)`).
    pub name: String,
    /// The driver's name and version, where it reports them.
    pub driver: String,
    /// Whether subgroup operations are available to compute shaders.
    pub subgroups: bool,
    /// The range the adapter reports. The size a pipeline actually runs with is only
    /// known inside the shader (`subgroup_size`), so kernels must work for all of it.
    pub subgroup_min: u32,
    /// The largest subgroup width the adapter reports (see `subgroup_min`).
    pub subgroup_max: u32,
    /// The width every pipeline runs at, where that is a fact of the hardware rather
    /// than the driver's choice per pipeline: 32 on Apple GPUs, whose SIMD-groups are
    /// 32 threads wide while wgpu's Metal backend reports 4..64 for every Metal device
    /// (wgpu-hal 30, `metal/mod.rs`, "hardcoded based on typical values"). `None` where
    /// it varies: RDNA runs wave32 or wave64 per pipeline, lavapipe the width it was
    /// started with. Kernels whose layout is fixed when they are built (decode
    /// attention's teams) size themselves by it; everything else still works for the
    /// whole reported range.
    #[serde(default)]
    pub subgroup_runs: Option<u32>,
    /// Whether shaders may use `f16` (wgpu's `SHADER_F16`).
    pub f16: bool,
    /// Whether the adapter has GPU timestamp queries (wgpu's `TIMESTAMP_QUERY`); without
    /// them timed runs use the wall clock.
    pub timestamps: bool,
    /// Workgroup (shared) memory one workgroup may declare.
    pub workgroup_storage_bytes: u32,
    /// Invocations in one workgroup, all dimensions together.
    pub max_invocations_per_workgroup: u32,
    /// A workgroup's largest x dimension.
    pub max_workgroup_size_x: u32,
    /// Workgroups a dispatch may have in each dimension.
    pub max_workgroups_per_dim: u32,
    /// The largest storage binding; larger matrices are split across bindings.
    pub max_binding_bytes: u64,
    /// The largest buffer the device creates.
    pub max_buffer_bytes: u64,
    /// Storage bindings one pipeline may declare.
    pub max_storage_buffers_per_stage: u32,
    /// What a storage binding's offset must be a multiple of.
    pub storage_offset_alignment: u32,
    /// Vendor peak memory bandwidth in GB/s, where known. Reports put measured figures
    /// beside it; the router never reads it.
    pub vendor_peak_gbps: Option<f64>,
    /// Device memory in bytes, where the driver says: the sum of Vulkan's device-local
    /// heaps (on a CPU adapter, system memory). Models and contexts are refused before
    /// anything is allocated when they need more (`model::MemoryNeed`).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Compute units (NVIDIA SMs, AMD CUs, Apple GPU cores), where known: wgpu does not
    /// report them, so a live profile takes them from the preset of the same adapter.
    #[serde(default)]
    pub compute_units: Option<u32>,
    /// The cooperative-matrix shape matmuls multiply on, where the adapter has one
    /// ([`CoopMatrix::pick`]).
    #[serde(default)]
    pub coop_matrix: Option<CoopMatrix>,
    /// Whether kernels of [`IndexChecks::Kernel`](super::IndexChecks::Kernel) run
    /// without wgpu's index clamps: on Vulkan, whose robust buffer access bounds storage
    /// reads, unless `BRASS_INDEX_CHECKS=wgpu` asks for the clamps everywhere (A/B).
    #[serde(default)]
    pub kernel_index_checks: bool,
    /// Loop iterations one shader invocation may run, all its loops together, where the
    /// driver ends them past that: llvmpipe (lavapipe) stops every loop of an invocation
    /// silently once 65,535 iterations have run (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS,
    /// "shared between every loop" in `lp_bld_limits.h`). Kernels whose loops grow with
    /// the context split their work so no invocation comes near it. None: no such limit.
    #[serde(default)]
    pub loop_iterations: Option<u64>,
    /// The router's measured thresholds and launch sizes for this device.
    #[serde(default)]
    pub tuning: Tuning,
}

/// A cooperative-matrix multiply the adapter does in hardware (wgpu's
/// `EXPERIMENTAL_COOPERATIVE_MATRIX`: NVIDIA's tensor cores through
/// VK_KHR_cooperative_matrix, Apple's simdgroup matrices): `size` x `size` x `size`,
/// inputs of `input`, accumulators f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CoopMatrix {
    /// The side of the square: 8 or 16.
    pub size: u32,
    /// The type of the multiplied matrices.
    pub input: CoopInput,
    /// Whether a matrix load may read through a pointer to vectors of the matrix's
    /// elements, as SPIR-V's (Vulkan's) may; the MSL that naga writes for Metal loads
    /// through scalar pointers only. The matmuls stage four values a store where it may
    /// (`wgsl/matmul/staged_vec4.wgsl`), else one (`staged_scalar.wgsl`).
    #[serde(default)]
    pub vector_loads: bool,
}

/// The element type of a cooperative matrix's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CoopInput {
    /// Half precision (`f16`).
    F16,
    /// Single precision (`f32`).
    F32,
}

impl CoopInput {
    /// The WGSL type name: `f16` or `f32`.
    pub fn wgsl(self) -> &'static str {
        match self {
            CoopInput::F16 => "f16",
            CoopInput::F32 => "f32",
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            CoopInput::F16 => 2,
            CoopInput::F32 => 4,
        }
    }
}

impl CoopMatrix {
    /// The configuration matmuls use from those an adapter lists as (M, N, K, input,
    /// accumulator is f32): square ones only, f16 inputs (half the staging, and where
    /// NVIDIA's tensor cores are) before f32 where the device has shader f16, then the
    /// larger size (fewer loads per multiply-add). `vector_loads`: the backend's, as
    /// [`CoopMatrix::vector_loads`] says.
    pub fn pick(
        offered: &[(u32, u32, u32, CoopInput, bool)],
        f16: bool,
        vector_loads: bool,
    ) -> Option<CoopMatrix> {
        offered
            .iter()
            .filter(|&&(m, n, k, input, f32_acc)| {
                m == n
                    && n == k
                    && (m == 8 || m == 16)
                    && f32_acc
                    && (f16 || input == CoopInput::F32)
            })
            .map(|&(size, _, _, input, _)| CoopMatrix {
                size,
                input,
                vector_loads,
            })
            .max_by_key(|c| (c.input == CoopInput::F16, c.size))
    }

    /// The f16 matrices of `size` as the adapters that offer them load them: 16 x 16
    /// as on Vulkan (vector loads), 8 x 8 as on Apple's Metal (scalar loads); for
    /// composing kernels without an adapter (the SPIR-V dumps).
    pub fn f16_as_offered(size: u32) -> CoopMatrix {
        CoopMatrix {
            size,
            input: CoopInput::F16,
            vector_loads: size == 16,
        }
    }
}

impl std::fmt::Display for CoopMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{0}x{0} {1}", self.size, self.input.wgsl())
    }
}

/// The numbers the router's clauses compare against, as data per device rather than
/// constants: each was measured on one GPU (the H200 unless a preset says otherwise),
/// and `router` explains where each applies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// Workgroups a matvec whose x fits one tile is spread over at most (each loops
    /// over row batches): a few per compute unit.
    pub persistent_workgroups: u64,
    /// dot4 spreads a matvec over no fewer workgroups than this (about two per compute
    /// unit), whatever x staging costs.
    pub dot4_min_workgroups: u64,
    /// dot4 keeps what its workgroups stage (4 bytes per x value each) to at most
    /// 1/this of the weights they read.
    pub dot4_weight_per_staged_x: u64,
    /// A dot4 route takes row batches from a queue with at least this many batches per
    /// workgroup...
    pub queue_min_batches: f64,
    /// ...of at least this many bytes of weights each.
    pub queue_min_batch_bytes: u64,
    /// A Q4_K / Q5_K dot4 route loads each lane's next slice ahead with at least this many
    /// row batches per workgroup.
    pub prefetch_min_batches: f64,
    /// A norm writes its output quantized for the dot4 matrices it feeds of at least
    /// this many bytes of weights.
    pub norm_q8_min_bytes: u64,
    /// silu(gate) * up is quantized by its own dispatch for dot4 down projections of at
    /// least this many bytes of weights (smaller ones compute it while staging).
    pub glu_q8_min_bytes: u64,
    /// x is quantized once, by the norm or by silu(gate) * up's own dispatch, for every
    /// dot4 matrix of a model whose decode steps take at least this many rows: staging
    /// x from f32 quantizes it again in every workgroup for every row. Measured on an
    /// H100 (2026-12-05, `compare --synthetic llama3-8b --parallel 1,8,32 --x-q8 true`
    /// against the rule by weight size, alternated): 8 sequences 645.4-646.1 tok/s
    /// together against 466.9-468.4; one sequence 266.4 against 271.6, which a model
    /// serving one conversation keeps.
    pub q8_min_columns: u64,
    /// Workgroups split-K decode attention spreads a long context over (per layer):
    /// two per compute unit. On the H200 256 beat 384 and 512 at every depth measured
    /// (8B heads, one layer: 15.9 against 21.7 and 19.8 µs at 4,096 positions, 58.6
    /// against 77.6 and 64.2 at 32,768), and 264 (two per SM) beat 256 in decode just
    /// past 4,096 positions, where 256 take a fifth step a chunk (results/long_context).
    #[serde(default = "h200_attention_workgroups")]
    pub attention_workgroups: u64,
    /// A prefill matmul multiplies on cooperative matrices (where the adapter has
    /// them) when a batch makes at least this many of its 8S x 8S tiles; fewer leave
    /// the device idle, and dot4's smaller tiles do better. On the H200, 32 tiles
    /// (1,024 rows at 512 tokens) ran at half dot4's speed and 128 at 1.5x.
    #[serde(default = "h200_coop_min_workgroups")]
    pub coop_min_workgroups: u64,
    /// Staged columns take a row with the narrowest team of lanes that leaves at
    /// least this many row batches (about one per compute unit). On an H100 at 8
    /// columns (2026-12-07, `results/parallel/staged_prefetch`), teams of 8 took the
    /// Q4_K 4,096 x 4,096 matrix (128 batches) from 27.3 to 18.8 µs and the 14,336 x
    /// 4,096 one from 70.0 to 53.0; 1,024 rows lost with 64 batches (16 lanes: 14.1
    /// against 13.4 µs).
    #[serde(default = "h200_staged_team_min_batches")]
    pub staged_team_min_batches: u64,
    /// Staged columns (a step's columns of x staged per workgroup) run on at most this
    /// many workgroups, one per compute unit: each stages the columns once and takes
    /// its share of the row batches. On an H100 at 8 columns (2026-12-07,
    /// `results/parallel/staged_prefetch`, lease4, and `results/parallel/wide_tile`),
    /// 132 took the Q4_K 14,336 x 4,096 matrix from 49.6 to 42.0 µs and the head from
    /// 270.5 to 228.1, and 8 sequences of the 8B shape from 923.8 / 923.5 to 1,013.0 /
    /// 1,009.8 tok/s together (`compare --coop-groups 132`, alternated).
    #[serde(default = "h200_staged_columns_workgroups")]
    pub staged_columns_workgroups: u64,
}

fn h200_attention_workgroups() -> u64 {
    Tuning::H200.attention_workgroups
}

fn h200_coop_min_workgroups() -> u64 {
    Tuning::H200.coop_min_workgroups
}

fn h200_staged_team_min_batches() -> u64 {
    Tuning::H200.staged_team_min_batches
}

fn h200_staged_columns_workgroups() -> u64 {
    Tuning::H200.staged_columns_workgroups
}

impl Tuning {
    /// Measured on one H200 (132 SMs); see `router` for each measurement.
    pub const H200: Tuning = Tuning {
        persistent_workgroups: 1024,
        dot4_min_workgroups: 256,
        dot4_weight_per_staged_x: 4,
        queue_min_batches: 4.0,
        queue_min_batch_bytes: 32 * 1024,
        prefetch_min_batches: 8.0,
        norm_q8_min_bytes: 128_000_000,
        glu_q8_min_bytes: 8_000_000,
        q8_min_columns: 2,
        attention_workgroups: 264,
        coop_min_workgroups: 64,
        staged_team_min_batches: 128,
        staged_columns_workgroups: 132,
    };
    const H200_COMPUTE_UNITS: u64 = 132;

    /// The H200's figures with the workgroup counts scaled to `compute_units`: nothing
    /// has been measured on such a device yet, and the counts are per compute unit.
    pub fn scaled_from_h200(compute_units: u32) -> Tuning {
        let scale = |n: u64| {
            (n * compute_units as u64)
                .div_ceil(Self::H200_COMPUTE_UNITS)
                .max(1)
        };
        Tuning {
            persistent_workgroups: scale(Self::H200.persistent_workgroups),
            dot4_min_workgroups: scale(Self::H200.dot4_min_workgroups),
            attention_workgroups: scale(Self::H200.attention_workgroups),
            coop_min_workgroups: scale(Self::H200.coop_min_workgroups),
            staged_team_min_batches: scale(Self::H200.staged_team_min_batches),
            staged_columns_workgroups: scale(Self::H200.staged_columns_workgroups),
            ..Self::H200
        }
    }
}

impl Default for Tuning {
    /// A device nothing is known of runs the H200's figures.
    fn default() -> Self {
        Tuning::H200
    }
}

/// The names accepted by `DeviceProfile::preset`.
pub const PRESETS: [&str; 4] = ["m4-max", "rdna4", "h200", "lavapipe"];

/// The loop iterations llvmpipe lets one invocation run ([`DeviceProfile::loop_iterations`]).
pub const LLVMPIPE_LOOP_ITERATIONS: u64 = 65_535;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

impl DeviceProfile {
    /// A named profile of hardware brass targets ([`PRESETS`]), for routing without
    /// that hardware: limits as its driver reports them through wgpu 30, and the
    /// vendor's peak bandwidth. Each fact says where it comes from: a driver's source
    /// (Mesa as of 25.x, wgpu-hal 30), a vendor's specification, or a measurement of
    /// brass's (`results/`).
    pub fn preset(name: &str) -> Result<Self> {
        let base = DeviceProfile {
            backend: Backend::Vulkan,
            kernel_index_checks: true,
            vendor: Vendor::Other(0),
            name: String::new(),
            driver: String::new(),
            subgroups: true,
            subgroup_min: 32,
            subgroup_max: 32,
            subgroup_runs: None,
            f16: true,
            timestamps: true,
            workgroup_storage_bytes: 32 * 1024,
            max_invocations_per_workgroup: 1024,
            max_workgroup_size_x: 1024,
            max_workgroups_per_dim: 65535,
            max_binding_bytes: 2 * GIB - 1,
            max_buffer_bytes: 2 * GIB - 1,
            max_storage_buffers_per_stage: 8,
            storage_offset_alignment: 256,
            vendor_peak_gbps: None,
            memory_bytes: None,
            compute_units: None,
            coop_matrix: None,
            loop_iterations: None,
            tuning: Tuning::H200,
        };
        let profile = match name {
            "m4-max" => DeviceProfile {
                backend: Backend::Metal,
                kernel_index_checks: false,
                vendor: Vendor::Apple,
                name: "Apple M4 Max (40-core GPU)".into(),
                driver: "Metal".into(),
                // wgpu reports 4..64 for every Metal device (wgpu-hal 30, metal/mod.rs,
                // `subgroup_min_size: 4, subgroup_max_size: 64`); Apple GPUs run
                // SIMD-groups of 32 (`apple_simd_width`).
                subgroup_min: 4,
                subgroup_max: 64,
                subgroup_runs: Some(32),
                // wgpu-hal 30, metal/adapter.rs: `max_total_threadgroup_memory` is 32 KiB
                // on every macOS GPU family (Apple's Metal feature set tables: 32 KB of
                // threadgroup memory).
                workgroup_storage_bytes: 32 * 1024,
                // wgpu reports maxBufferLength for both (metal/adapter.rs, "No limit, use
                // maxBufferSize"); brass keeps a binding to 2 GiB on Metal (DESIGN.md).
                // The buffer figure is not checked against a public source for this
                // machine.
                max_binding_bytes: 2 * GIB,
                max_buffer_bytes: 96 * GIB,
                // wgpu-hal 30, metal/adapter.rs: `min_storage_buffer_offset_alignment: 32`
                // ("No documented limit. Use 32").
                storage_offset_alignment: 32,
                // Apple's M4 Max specification (40-core GPU: 546 GB/s, up to 128 GB).
                vendor_peak_gbps: Some(546.0),
                memory_bytes: Some(128 * GIB),
                compute_units: Some(40),
                // wgpu-hal 30, metal/adapter.rs `cooperative_matrix_properties`: 8x8x8
                // simdgroup matrices, f16 into f32 among them, from MTLGPUFamily Apple7.
                coop_matrix: Some(CoopMatrix {
                    size: 8,
                    input: CoopInput::F16,
                    vector_loads: false,
                }),
                tuning: Tuning::scaled_from_h200(40),
                ..base
            },
            "rdna4" => DeviceProfile {
                vendor: Vendor::Amd,
                name: "AMD Radeon RX 9070 XT (RADV GFX1201)".into(),
                driver: "radv".into(),
                // RADV's VK_EXT_subgroup_size_control on GFX10+: wave32 and wave64.
                subgroup_min: 32,
                subgroup_max: 64,
                // Mesa, src/amd/vulkan/radv_physical_device.c: `max_shared_size` is 65536
                // from GFX7 on (`maxComputeSharedMemorySize`).
                workgroup_storage_bytes: 64 * 1024,
                // AMD's RX 9070 XT specification: 64 compute units, 16 GB GDDR6 at
                // 644.6 GB/s.
                vendor_peak_gbps: Some(644.0),
                memory_bytes: Some(16 * GIB),
                compute_units: Some(64),
                // Mesa, src/amd/vulkan/radv_physical_device.c:
                // `radv_cooperative_matrix_enabled` is `gfx_level >= GFX11 && !use_llvm`
                // (RDNA3 and RDNA4 with ACO, RADV's default compiler), and
                // `fill_array_sizes_structs` lists 16x16x16 at subgroup scope, f16 x f16
                // into f32 among them: the configuration wgpu-hal 30 keeps
                // (vulkan/adapter.rs, subgroup scope only) and `CoopMatrix::pick` takes.
                coop_matrix: Some(CoopMatrix {
                    size: 16,
                    input: CoopInput::F16,
                    vector_loads: true,
                }),
                tuning: Tuning::scaled_from_h200(64),
                ..base
            },
            "h200" => DeviceProfile {
                vendor: Vendor::Nvidia,
                name: "NVIDIA H200".into(),
                driver: "NVIDIA".into(),
                // Measured through wgpu 30 on the H200 (driver 580.159): 48 KiB of
                // workgroup memory, bindings of 2 GiB - 4, buffers of 4 GiB, offsets
                // aligned to 32, and the cooperative matrices the driver lists.
                workgroup_storage_bytes: 48 * 1024,
                max_binding_bytes: 2 * GIB - 4,
                max_buffer_bytes: 4 * GIB,
                storage_offset_alignment: 32,
                coop_matrix: Some(CoopMatrix {
                    size: 16,
                    input: CoopInput::F16,
                    vector_loads: true,
                }),
                // NVIDIA's H200 specification: 141 GB of HBM3e at 4.8 TB/s, 132 SMs
                // (SXM).
                vendor_peak_gbps: Some(4800.0),
                memory_bytes: Some(141 * 1_000_000_000),
                compute_units: Some(132),
                ..base
            },
            "lavapipe" => DeviceProfile {
                vendor: Vendor::Mesa,
                name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
                driver: "llvmpipe".into(),
                // Mesa, src/gallium/frontends/lavapipe/lvp_device.c: `subgroupSize` (and
                // min and max) is `lp_native_vector_width / 32`, 8 at the default 256
                // bits (LP_NATIVE_VECTOR_WIDTH=128 or 512: 4 or 16).
                subgroup_min: 8,
                subgroup_max: 8,
                // Measured on Mesa 22.3.6 through wgpu 30 (`maxStorageBufferRange` is the
                // gallium screen's PIPE_CAP_MAX_SHADER_BUFFER_SIZE_UINT), and its offset
                // alignment (PIPE_CAP_SHADER_BUFFER_OFFSET_ALIGNMENT).
                max_binding_bytes: 128 * MIB,
                storage_offset_alignment: 16,
                loop_iterations: Some(LLVMPIPE_LOOP_ITERATIONS),
                ..base
            },
            other => {
                return Err(Error::Invalid(format!(
                    "unknown device profile `{other}`; presets are {}",
                    PRESETS.join(", ")
                )))
            }
        };
        Ok(profile)
    }

    /// The preset describing the same hardware as `name` (an adapter's name), if any.
    pub fn preset_named(name: &str) -> Option<Self> {
        PRESETS
            .iter()
            .filter_map(|p| Self::preset(p).ok())
            .find(|p| p.name == name)
    }

    /// The subgroup sizes a pipeline may run at: [`DeviceProfile::subgroup_runs`] where
    /// the hardware fixes it, else the reported range.
    pub fn subgroup_sizes_run(&self) -> (u32, u32) {
        match self.subgroup_runs {
            Some(width) => (width, width),
            None => (self.subgroup_min, self.subgroup_max),
        }
    }

    /// The width Apple GPUs execute SIMD-groups at (`threadExecutionWidth`, 32 on every
    /// Apple GPU family; llama.cpp's Metal kernels assume it too, `N_SIMDWIDTH` in
    /// ggml-metal), for a live Metal adapter on Apple silicon, whose Metal device names
    /// start with "Apple" ("Apple M1", "Apple M4 Max"). An Intel Mac's Intel or AMD GPU
    /// runs other widths and gets `None`.
    pub fn apple_simd_width(backend: Backend, adapter_name: &str) -> Option<u32> {
        (backend == Backend::Metal && adapter_name.starts_with("Apple")).then_some(32)
    }

    /// The largest binding a kernel may use: the binding limit rounded down to a whole
    /// number of 16-byte words, since kernels read `vec4<u32>`.
    pub fn usable_binding_bytes(&self) -> u64 {
        self.max_binding_bytes.min(self.max_buffer_bytes) & !15
    }
}

impl std::fmt::Display for DeviceProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} ({:?}, {:?}, driver {})",
            self.name, self.backend, self.vendor, self.driver
        )?;
        if self.subgroups {
            writeln!(
                f,
                "  subgroups        {}..{}",
                self.subgroup_min, self.subgroup_max
            )?;
        } else {
            writeln!(f, "  subgroups        none")?;
        }
        writeln!(f, "  shader f16       {}", self.f16)?;
        writeln!(f, "  timestamps       {}", self.timestamps)?;
        writeln!(
            f,
            "  workgroup memory {} KiB",
            self.workgroup_storage_bytes / 1024
        )?;
        writeln!(
            f,
            "  invocations/wg   {}",
            self.max_invocations_per_workgroup
        )?;
        writeln!(f, "  max binding      {} MiB", self.max_binding_bytes / MIB)?;
        match self.coop_matrix {
            Some(c) => writeln!(f, "  coop matrix      {c}")?,
            None => writeln!(f, "  coop matrix      none")?,
        }
        write!(f, "  max buffer       {} MiB", self.max_buffer_bytes / MIB)?;
        match self.memory_bytes {
            Some(bytes) => write!(
                f,
                "\n  memory           {:.1} GiB",
                bytes as f64 / GIB as f64
            ),
            None => write!(f, "\n  memory           not reported"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_builds_and_unknown_names_are_errors() {
        for name in PRESETS {
            let p = DeviceProfile::preset(name).unwrap();
            assert!(
                p.subgroups && p.subgroup_min >= 4 && p.subgroup_max <= 128,
                "{name}"
            );
            assert!(p.usable_binding_bytes().is_multiple_of(16));
        }
        let err = DeviceProfile::preset("voodoo2").unwrap_err().to_string();
        assert!(err.contains("voodoo2") && err.contains("h200"), "{err}");
    }
}
