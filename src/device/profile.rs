//! `DeviceProfile`: everything the router may know about a device, as a plain value.
//!
//! A profile comes from a live adapter (`WgpuDevice::profile`) or from a named preset, so
//! routing decisions are testable for hardware this machine does not have.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backend {
    Vulkan,
    Metal,
    Dx12,
    Gl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Vendor {
    Apple,
    Amd,
    Nvidia,
    Intel,
    /// Mesa's software rasterizers (lavapipe) report this PCI vendor id.
    Mesa,
    Other(u32),
}

impl Vendor {
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub backend: Backend,
    pub vendor: Vendor,
    pub name: String,
    pub driver: String,
    /// Whether subgroup operations are available to compute shaders.
    pub subgroups: bool,
    /// The range the adapter reports. The size a pipeline actually runs with is only
    /// known inside the shader (`subgroup_size`), so kernels must work for all of it.
    pub subgroup_min: u32,
    pub subgroup_max: u32,
    pub f16: bool,
    pub timestamps: bool,
    pub workgroup_storage_bytes: u32,
    pub max_invocations_per_workgroup: u32,
    pub max_workgroup_size_x: u32,
    pub max_workgroups_per_dim: u32,
    pub max_binding_bytes: u64,
    pub max_buffer_bytes: u64,
    pub max_storage_buffers_per_stage: u32,
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
    pub size: u32,
    pub input: CoopInput,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CoopInput {
    F16,
    F32,
}

impl CoopInput {
    pub fn wgsl(self) -> &'static str {
        match self {
            CoopInput::F16 => "f16",
            CoopInput::F32 => "f32",
        }
    }

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
    /// larger size (fewer loads per multiply-add).
    pub fn pick(offered: &[(u32, u32, u32, CoopInput, bool)], f16: bool) -> Option<CoopMatrix> {
        offered
            .iter()
            .filter(|&&(m, n, k, input, f32_acc)| {
                m == n
                    && n == k
                    && (m == 8 || m == 16)
                    && f32_acc
                    && (f16 || input == CoopInput::F32)
            })
            .map(|&(size, _, _, input, _)| CoopMatrix { size, input })
            .max_by_key(|c| (c.input == CoopInput::F16, c.size))
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
}

fn h200_attention_workgroups() -> u64 {
    Tuning::H200.attention_workgroups
}

fn h200_coop_min_workgroups() -> u64 {
    Tuning::H200.coop_min_workgroups
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
        attention_workgroups: 264,
        coop_min_workgroups: 64,
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
    /// that hardware: limits as its driver reports them, and the vendor's peak
    /// bandwidth.
    pub fn preset(name: &str) -> Result<Self> {
        let base = DeviceProfile {
            backend: Backend::Vulkan,
            vendor: Vendor::Other(0),
            name: String::new(),
            driver: String::new(),
            subgroups: true,
            subgroup_min: 32,
            subgroup_max: 32,
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
                vendor: Vendor::Apple,
                name: "Apple M4 Max (40-core GPU)".into(),
                driver: "Metal".into(),
                // Metal reports 4..64 and runs 32; kernels are written for the range.
                subgroup_min: 4,
                subgroup_max: 64,
                workgroup_storage_bytes: 32 * 1024,
                max_binding_bytes: 2 * GIB,
                max_buffer_bytes: 96 * GIB,
                vendor_peak_gbps: Some(546.0),
                memory_bytes: Some(128 * GIB),
                compute_units: Some(40),
                // wgpu's Metal backend lists 8x8 simdgroup matrices, f16 into f32.
                coop_matrix: Some(CoopMatrix {
                    size: 8,
                    input: CoopInput::F16,
                }),
                tuning: Tuning::scaled_from_h200(40),
                ..base
            },
            "rdna4" => DeviceProfile {
                vendor: Vendor::Amd,
                name: "AMD Radeon RX 9070 XT (RADV GFX1201)".into(),
                driver: "radv".into(),
                subgroup_min: 32,
                subgroup_max: 64,
                workgroup_storage_bytes: 64 * 1024,
                vendor_peak_gbps: Some(644.0),
                memory_bytes: Some(16 * GIB),
                compute_units: Some(64),
                tuning: Tuning::scaled_from_h200(64),
                ..base
            },
            "h200" => DeviceProfile {
                vendor: Vendor::Nvidia,
                name: "NVIDIA H200".into(),
                driver: "NVIDIA".into(),
                workgroup_storage_bytes: 48 * 1024,
                max_binding_bytes: 2 * GIB - 4,
                max_buffer_bytes: 4 * GIB,
                storage_offset_alignment: 32,
                // As the NVIDIA driver (580.159) lists them through wgpu.
                coop_matrix: Some(CoopMatrix {
                    size: 16,
                    input: CoopInput::F16,
                }),
                vendor_peak_gbps: Some(4800.0),
                memory_bytes: Some(141 * 1_000_000_000),
                compute_units: Some(132),
                ..base
            },
            "lavapipe" => DeviceProfile {
                vendor: Vendor::Mesa,
                name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
                driver: "llvmpipe".into(),
                subgroup_min: 8,
                subgroup_max: 8,
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
