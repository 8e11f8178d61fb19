//! The bandwidth probe: the device's own streaming-read rate, the yardstick every
//! kernel and decode step is reported against.

use serde::Serialize;

use super::{
    Access, BufferUse, CommandList, CoopMatrix, Device, Dispatch, IndexChecks, OwnedBuffers,
    PipelineDesc, Slice, Timing,
};
use crate::Result;

const STREAM_READ: &str = include_str!("../../wgsl/probe/stream_read.wgsl");
const FILL: &str = include_str!("../../wgsl/probe/fill.wgsl");
const DOT4_PEAK: &str = include_str!("../../wgsl/probe/dot4_peak.wgsl");
const FMA_PEAK: &str = include_str!("../../wgsl/probe/fma_peak.wgsl");

/// The probes' kernels, for tools that translate every shader.
pub fn probe_sources() -> [(&'static str, &'static str); 4] {
    [
        ("probe/stream_read", STREAM_READ),
        ("probe/fill", FILL),
        ("probe/dot4_peak", DOT4_PEAK),
        ("probe/fma_peak", FMA_PEAK),
    ]
}

/// Far beyond any GPU's last-level cache (the H200's L2 is about 50 MB).
const TARGET_BYTES: u64 = 1 << 30;

/// What [`bandwidth_probe`] measured: the streaming-read rate every kernel's GB/s is
/// compared with.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeResult {
    /// [`DeviceProfile::name`](super::DeviceProfile::name) of the adapter measured.
    pub adapter: String,
    /// Bytes one run reads: up to 1 GiB, less where the device binds less.
    pub bytes: u64,
    /// Timed runs, after one warm-up.
    pub runs: usize,
    /// The fastest run, in nanoseconds.
    pub best_ns: f64,
    /// The median run, in nanoseconds.
    pub median_ns: f64,
    /// `bytes / best_ns`: the rate a kernel is held to.
    pub gbps: f64,
    /// `bytes / median_ns`, in GB/s (10^9 bytes a second), as `gbps`.
    pub median_gbps: f64,
    /// `gpu-timestamps`, or `wall-clock` on devices without timestamps or whose
    /// timestamps read as zeros (less exact: includes submission overhead).
    pub timer: &'static str,
    /// Why the timer is the wall clock where the device claims timestamps
    /// ([`Clock::note`](super::Clock::note)).
    pub note: Option<&'static str>,
}

impl std::fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "streaming read on {}: {:.1} GB/s best, {:.1} GB/s median ({} MiB, {} runs, {})",
            self.adapter,
            self.gbps,
            self.median_gbps,
            self.bytes >> 20,
            self.runs,
            self.timer
        )?;
        match self.note {
            Some(note) => write!(f, "; {note}"),
            None => Ok(()),
        }
    }
}

/// The probe's streaming-read kernel, also the yardstick `kernels::timing` holds a
/// matvec to at its own size: a pure read of as many bytes, in one dispatch.
pub struct StreamRead {
    pipeline: super::PipelineId,
    wg: u32,
    max_groups: u32,
}

impl StreamRead {
    /// Creates the kernel's pipeline on `device`, its workgroups as wide as the device
    /// allows up to 256 invocations.
    pub fn new(device: &dyn Device) -> Result<Self> {
        let profile = device.profile();
        let wg = 256u32
            .min(profile.max_workgroup_size_x)
            .min(profile.max_invocations_per_workgroup);
        let pipeline = device.create_pipeline(&PipelineDesc {
            name: "probe/stream_read",
            wgsl: STREAM_READ,
            entry: "main",
            constants: &[("WG", wg as f64)],
            params_bytes: 8,
            storage: &[Access::Read, Access::ReadWrite],
            fallback_reason: None,
            index_checks: IndexChecks::Wgpu,
        })?;
        Ok(StreamRead {
            pipeline,
            wg,
            max_groups: profile.max_workgroups_per_dim,
        })
    }

    /// Reads all of `src` (a multiple of 16 bytes) with about `loads` 16-byte loads per
    /// invocation (fewer, more workgroups); `sink` (16 bytes) is written only in name,
    /// which also makes reads that share a sink run one after another.
    pub fn dispatch(&self, src: Slice, sink: Slice, loads: u32) -> Dispatch {
        let n_vec4 = (src.size / 16) as u32;
        let groups = n_vec4.div_ceil(self.wg * loads).clamp(1, self.max_groups);
        Dispatch {
            pipeline: self.pipeline,
            params: vec![n_vec4, 0x5eed_f00d],
            storage: vec![src, sink],
            workgroups: [groups, 1, 1],
            bytes_read: src.size,
        }
    }
}

/// Measures streaming-read bandwidth over the largest buffer the device binds, up to
/// 1 GiB.
pub fn bandwidth_probe(device: &dyn Device, runs: usize) -> Result<ProbeResult> {
    let profile = device.profile().clone();
    let bytes = TARGET_BYTES.min(profile.usable_binding_bytes());
    let n_vec4 = (bytes / 16) as u32;
    // Freed when this returns, also on an error.
    let owned = OwnedBuffers::borrowing(device);
    let buffer = owned.create("probe source", bytes, BufferUse::Storage)?;
    let sink = owned.create("probe sink", 16, BufferUse::Storage)?;
    let fill = device.create_pipeline(&PipelineDesc {
        name: "probe/fill",
        wgsl: FILL,
        entry: "main",
        constants: &[],
        params_bytes: 8,
        storage: &[Access::ReadWrite],
        fallback_reason: None,
        index_checks: IndexChecks::Wgpu,
    })?;
    let read = StreamRead::new(device)?;
    let max_groups = profile.max_workgroups_per_dim;
    let mut setup = CommandList::new();
    setup.dispatch(Dispatch {
        pipeline: fill,
        params: vec![n_vec4 * 4, 0x9e37_79b9],
        storage: vec![Slice::new(buffer, 0, bytes)],
        workgroups: [(n_vec4 * 4).div_ceil(256 * 64).clamp(1, max_groups), 1, 1],
        bytes_read: 0,
    });
    device.submit(&setup)?;
    device.wait()?;

    let mut list = CommandList::new();
    // About 16 loads per invocation: enough in flight, few enough workgroups.
    list.dispatch(read.dispatch(Slice::new(buffer, 0, bytes), Slice::new(sink, 0, 16), 16));
    let timed = |list: &CommandList| -> Result<f64> {
        if profile.timestamps {
            Ok(device.submit_timed(list, Timing::Whole)?[0])
        } else {
            let t = std::time::Instant::now();
            device.submit(list)?;
            device.wait()?;
            Ok(t.elapsed().as_nanos() as f64)
        }
    };
    timed(&list)?; // warm-up: first-use costs (pipeline, page faults) are not bandwidth
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| timed(&list))
        .collect::<Result<_>>()?;
    times.sort_by(f64::total_cmp);
    let best = times[0];
    let median = times[times.len() / 2];
    Ok(ProbeResult {
        adapter: profile.name,
        bytes,
        runs: times.len(),
        best_ns: best,
        median_ns: median,
        gbps: bytes as f64 / best,
        median_gbps: bytes as f64 / median,
        // Asked after the runs: the first timed one is where zero timestamps show.
        timer: if profile.timestamps {
            device.clock().label()
        } else {
            "wall-clock"
        },
        note: if profile.timestamps {
            device.clock().note()
        } else {
            None
        },
    })
}

/// The device's packed int8 dot-product rate, the yardstick the dot4 matmuls are held
/// to.
#[derive(Clone, Debug, Serialize)]
pub struct ComputeProbe {
    /// [`DeviceProfile::name`](super::DeviceProfile::name) of the adapter measured.
    pub adapter: String,
    /// dot4I8Packed per second, as 8 integer operations each (4 multiply-adds), in
    /// units of 10^12: comparable with a matmul's 2 * M * K * N.
    pub int8_tops: f64,
    /// The fastest run, in nanoseconds.
    pub ns: f64,
    /// What timed it ([`Clock::label`](super::Clock::label)).
    pub timer: &'static str,
}

impl std::fmt::Display for ComputeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "int8 dot4 on {}: {:.1} TOPS ({:.2} ms, {})",
            self.adapter,
            self.int8_tops,
            self.ns / 1e6,
            self.timer
        )
    }
}

/// Measures the int8 dot-product rate with GPU timestamps: eight independent chains
/// per invocation over enough workgroups to fill the device, the loop lengthened until
/// a run takes at least `min_ms`; the best of `runs`.
pub fn int8_compute_probe(device: &dyn Device, runs: usize, min_ms: f64) -> Result<ComputeProbe> {
    let (ops, ns) = peak_rate(device, ("probe/dot4_peak", DOT4_PEAK), runs, min_ms)?;
    Ok(ComputeProbe {
        adapter: device.profile().name.clone(),
        int8_tops: ops / ns / 1e3,
        ns,
        timer: device.clock().label(),
    })
}

/// The device's f32 multiply-add rate, the yardstick the fma matmuls are held to.
#[derive(Clone, Debug, Serialize)]
pub struct FloatComputeProbe {
    /// [`DeviceProfile::name`](super::DeviceProfile::name) of the adapter measured.
    pub adapter: String,
    /// f32 operations per second (a multiply-add is two), in units of 10^12:
    /// comparable with a matmul's 2 * M * K * N.
    pub f32_tflops: f64,
    /// The fastest run, in nanoseconds.
    pub ns: f64,
    /// What timed it ([`Clock::label`](super::Clock::label)).
    pub timer: &'static str,
}

impl std::fmt::Display for FloatComputeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "f32 fma on {}: {:.1} TFLOP/s ({:.2} ms, {})",
            self.adapter,
            self.f32_tflops,
            self.ns / 1e6,
            self.timer
        )
    }
}

/// Measures the f32 multiply-add rate as [`int8_compute_probe`] measures int8's: eight
/// independent chains of vec4 fma per invocation (`wgsl/probe/fma_peak.wgsl`).
pub fn f32_compute_probe(
    device: &dyn Device,
    runs: usize,
    min_ms: f64,
) -> Result<FloatComputeProbe> {
    let (ops, ns) = peak_rate(device, ("probe/fma_peak", FMA_PEAK), runs, min_ms)?;
    Ok(FloatComputeProbe {
        adapter: device.profile().name.clone(),
        f32_tflops: ops / ns / 1e3,
        ns,
        timer: device.clock().label(),
    })
}

/// The device's cooperative-matrix rate, the yardstick the cooperative-matrix matmuls
/// are held to (the int8 and f32 probes measure units those kernels do not use).
#[derive(Clone, Debug, Serialize)]
pub struct MatrixComputeProbe {
    /// [`DeviceProfile::name`](super::DeviceProfile::name) of the adapter measured.
    pub adapter: String,
    /// The matrices multiplied: the profile's (`DeviceProfile::coop_matrix`).
    pub shape: CoopMatrix,
    /// Operations per second (a multiply-add is two), in units of 10^12: comparable
    /// with a matmul's 2 * M * K * N.
    pub tflops: f64,
    /// The fastest run, in nanoseconds.
    pub ns: f64,
    /// What timed it ([`Clock::label`](super::Clock::label)).
    pub timer: &'static str,
}

impl std::fmt::Display for MatrixComputeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cooperative matrices on {}: {:.1} TFLOP/s ({:.2} ms, {})",
            self.shape,
            self.adapter,
            self.tflops,
            self.ns / 1e6,
            self.timer
        )
    }
}

/// Subgroups of the largest size per workgroup of the matrix probe.
const COOP_PROBE_SUBGROUPS: u32 = 4;

/// The matrix probe's WGSL for matrices of `shape` (`wgsl/probe/coop_peak.wgsl` with
/// the enables and aliases the matmuls get).
pub fn coop_probe_source(shape: CoopMatrix) -> Result<String> {
    let (enables, consts) = crate::kernels::matmul::coop_preamble(shape);
    crate::kernels::wgsl::compose("probe/coop_peak.wgsl", &enables, &consts)
}

/// Measures the cooperative-matrix rate as [`int8_compute_probe`] measures int8's:
/// eight independent chains of `coopMultiplyAdd` per subgroup on the profile's matrices
/// (`wgsl/probe/coop_peak.wgsl`), 2 * S^3 operations each. An error where the adapter
/// has no cooperative matrices.
pub fn coop_compute_probe(
    device: &dyn Device,
    runs: usize,
    min_ms: f64,
) -> Result<MatrixComputeProbe> {
    let profile = device.profile().clone();
    let shape = profile.coop_matrix.ok_or_else(|| {
        crate::Error::Device(format!(
            "{} has no cooperative matrices (VK_KHR_cooperative_matrix, Metal's simdgroup \
             matrices) for the matrix probe",
            profile.name
        ))
    })?;
    let wgsl = coop_probe_source(shape)?;
    // Counted as subgroups of the largest size: where smaller ones run there are more
    // of them, so more work than counted, and the rate is understated, not inflated.
    let wg = COOP_PROBE_SUBGROUPS * profile.subgroup_max;
    let per_step = 2.0 * (shape.size as f64).powi(3);
    let per_iteration = COOP_PROBE_SUBGROUPS as f64 * 4.0 * 8.0 * per_step;
    let name = format!("probe/coop_peak_{}x{}", shape.size, shape.size);
    let (ops, ns) = peak_rate_of(device, (&name, &wgsl), wg, per_iteration, (runs, min_ms))?;
    Ok(MatrixComputeProbe {
        adapter: profile.name.clone(),
        shape,
        tflops: ops / ns / 1e3,
        ns,
        timer: device.clock().label(),
    })
}

/// Runs a peak-rate kernel (eight chains of UNROLL = 4 steps per loop iteration, 8
/// operations a step, as dot4_peak.wgsl and fma_peak.wgsl both count them) with GPU
/// timestamps, the loop lengthened until a run takes at least `min_ms`: the best of
/// `runs`, as (operations, ns).
fn peak_rate(
    device: &dyn Device,
    (name, wgsl): (&str, &str),
    runs: usize,
    min_ms: f64,
) -> Result<(f64, f64)> {
    let wg = 256u32
        .min(device.profile().max_workgroup_size_x)
        .min(device.profile().max_invocations_per_workgroup);
    // Eight chains of UNROLL = 4 steps per loop iteration, 8 operations a step.
    peak_rate_of(
        device,
        (name, wgsl),
        wg,
        wg as f64 * 32.0 * 8.0,
        (runs, min_ms),
    )
}

/// Runs a peak-rate kernel of `wg` invocations a workgroup, whose workgroups each do
/// `ops_per_iteration` operations per loop iteration, as [`peak_rate`] describes.
fn peak_rate_of(
    device: &dyn Device,
    (name, wgsl): (&str, &str),
    wg: u32,
    ops_per_iteration: f64,
    (runs, min_ms): (usize, f64),
) -> Result<(f64, f64)> {
    let profile = device.profile().clone();
    if !profile.timestamps {
        return Err(crate::Error::Device(format!(
            "{} has no GPU timestamps for the compute probe",
            profile.name
        )));
    }
    let owned = OwnedBuffers::borrowing(device);
    // One float per invocation, where the matrix probe would write (it never does).
    let sink_bytes = 4 * wg as u64;
    let sink = owned.create("probe sink", sink_bytes, BufferUse::Storage)?;
    let pipeline = device.create_pipeline(&PipelineDesc {
        name,
        wgsl,
        entry: "main",
        constants: &[("WG", wg as f64)],
        params_bytes: 8,
        storage: &[Access::ReadWrite],
        fallback_reason: None,
        index_checks: IndexChecks::Wgpu,
    })?;
    // Several waves of workgroups on any device brass targets (the H200 holds about
    // 1,000 of 256 invocations at once).
    let groups = 4096u32.min(profile.max_workgroups_per_dim);
    let run = |iters: u32| -> Result<f64> {
        let mut list = CommandList::new();
        list.dispatch(Dispatch {
            pipeline,
            params: vec![iters, 0x5eed_f00d],
            storage: vec![Slice::new(sink, 0, sink_bytes)],
            workgroups: [groups, 1, 1],
            bytes_read: 0,
        });
        Ok(device.submit_timed(&list, Timing::Whole)?[0])
    };
    let mut iters = 1u32;
    let mut ns = run(iters)?;
    while ns < min_ms * 1e6 && iters < 1 << 20 {
        iters *= 4;
        ns = run(iters)?;
    }
    let best = (0..runs.max(1))
        .map(|_| run(iters))
        .collect::<Result<Vec<f64>>>()?
        .into_iter()
        .fold(ns, f64::min);
    let ops = groups as f64 * iters as f64 * ops_per_iteration;
    Ok((ops, best))
}
