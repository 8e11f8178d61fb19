//! The device layer on the GPU under test: round trips, errors instead of panics, the
//! ledger, the probe, and the adapter's expected properties (given as data by CI).

mod common;

use brass::device::{
    bandwidth_probe, coop_compute_probe, f32_compute_probe, int8_compute_probe, read_f32, Access,
    BufferId, BufferUse, CommandList, Device, Dispatch, IndexChecks, PipelineDesc, PipelineId,
    Slice, Timing, UPLOAD_CHUNK,
};
use brass::Error;

const SCALE_WGSL: &str = "
struct Params { n: u32, factor: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.n) { dst[gid.x] = src[gid.x] * params.factor; }
}";

fn scale_pipeline(
    device: &dyn Device,
    name: &str,
    fallback: Option<&str>,
) -> brass::device::PipelineId {
    device
        .create_pipeline(&PipelineDesc {
            name,
            wgsl: SCALE_WGSL,
            entry: "main",
            constants: &[],
            params_bytes: 8,
            storage: &[Access::Read, Access::ReadWrite],
            fallback_reason: fallback,
            index_checks: IndexChecks::Wgpu,
        })
        .unwrap()
}

/// `dst[i] = src[i] * factor` over `n` floats.
fn scale(p: PipelineId, src: BufferId, dst: BufferId, n: u64, factor: f32) -> Dispatch {
    Dispatch {
        pipeline: p,
        params: vec![n as u32, factor.to_bits()],
        storage: vec![Slice::new(src, 0, n * 4), Slice::new(dst, 0, n * 4)],
        workgroups: [(n as u32).div_ceil(64), 1, 1],
        bytes_read: n * 4,
    }
}

/// A source buffer holding `data` and a destination of the same size.
fn src_and_dst(device: &dyn Device, data: &[f32]) -> (BufferId, BufferId) {
    let bytes = data.len() as u64 * 4;
    let src = device
        .create_buffer("src", bytes, BufferUse::Storage)
        .unwrap();
    let dst = device
        .create_buffer("dst", bytes, BufferUse::Storage)
        .unwrap();
    device.upload(src, 0, bytemuck::cast_slice(data)).unwrap();
    (src, dst)
}

#[test]
fn upload_dispatch_read_round_trip_and_ledger() {
    let device = common::gpu();
    let n = 1000u64;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (src, dst) = src_and_dst(&device, &data);
    let used = scale_pipeline(&device, "test/scale", None);
    let _unused = scale_pipeline(&device, "test/never-dispatched", None);
    let _declared = scale_pipeline(&device, "test/fallback", Some("kept for devices without X"));

    let mut list = CommandList::new();
    for factor in [2.0f32, 3.0] {
        list.dispatch(scale(used, src, dst, n, factor));
        // A copy between dispatches: the second reads what the first wrote.
        list.copy(Slice::new(dst, 0, n * 4), src, 0);
    }
    device.submit(&list).unwrap();
    let out = read_f32(&device, src, 0, n as usize).unwrap();
    assert!(out.iter().enumerate().all(|(i, &v)| v == i as f32 * 6.0));

    let ledger = device.ledger();
    let by_name = |name: &str| ledger.entries.iter().find(|e| e.name == name).unwrap();
    assert_eq!(by_name("test/scale").dispatches, 2);
    assert_eq!(by_name("test/scale").bytes_read, 2 * n * 4);
    let defects: Vec<_> = ledger.defects().iter().map(|e| e.name.clone()).collect();
    assert_eq!(
        defects,
        ["test/never-dispatched"],
        "the declared fallback is not a defect"
    );
    assert!(ledger.to_string().contains("DEFECT"));
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let device = common::gpu();
    let buf = device
        .create_buffer("small", 64, BufferUse::Storage)
        .unwrap();
    assert!(matches!(
        device.upload(buf, 32, &[0u8; 64]),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(device.read(buf, 0, 128), Err(Error::Invalid(_))));
    let too_big = device.profile().max_buffer_bytes + 1;
    let err = device
        .create_buffer("huge", too_big, BufferUse::Weights)
        .unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");

    let err = device
        .create_pipeline(&PipelineDesc {
            name: "test/broken",
            wgsl: "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
            entry: "main",
            constants: &[],
            params_bytes: 4,
            storage: &[],
            fallback_reason: None,
            index_checks: IndexChecks::Wgpu,
        })
        .unwrap_err();
    assert!(
        matches!(&err, Error::Shader { name, .. } if name == "test/broken"),
        "{err}"
    );

    // A dispatch binding the wrong number of buffers is refused before it reaches wgpu.
    let p = scale_pipeline(&device, "test/scale-misbound", Some("test"));
    let mut list = CommandList::new();
    list.dispatch(Dispatch {
        pipeline: p,
        params: vec![1, 0],
        storage: vec![Slice::new(buf, 0, 64)],
        workgroups: [1, 1, 1],
        bytes_read: 0,
    });
    assert!(matches!(device.submit(&list), Err(Error::Invalid(_))));
    // ...and the device is still usable afterwards.
    device.upload(buf, 0, &[1u8; 64]).unwrap();
    assert_eq!(device.read(buf, 0, 4).unwrap(), [1, 1, 1, 1]);

    // A destroyed pipeline leaves the ledger and the live count, and dispatching it (or
    // destroying it again) is refused.
    let (src, dst) = src_and_dst(&device, &[1.0; 16]);
    let p = scale_pipeline(&device, "test/scale-destroyed", None);
    device
        .submit(&list_of(scale(p, src, dst, 16, 2.0)))
        .unwrap();
    let live = device.memory_in_use().pipelines;
    device.destroy_pipeline(p).unwrap();
    assert_eq!(device.memory_in_use().pipelines, live - 1);
    assert!(device.ledger().entries.iter().all(|e| e.pipeline != p.0));
    let err = device
        .submit(&list_of(scale(p, src, dst, 16, 2.0)))
        .unwrap_err();
    assert!(err.to_string().contains("destroyed"), "{err}");
    assert!(matches!(device.destroy_pipeline(p), Err(Error::Invalid(_))));
}

fn list_of(d: Dispatch) -> CommandList {
    let mut list = CommandList::new();
    list.dispatch(d);
    list
}

#[test]
fn timestamps_and_the_bandwidth_probe() {
    let device = common::gpu();
    if device.profile().timestamps {
        let p = scale_pipeline(&device, "test/timed", None);
        let a = device
            .create_buffer("t-in", 2048, BufferUse::Storage)
            .unwrap();
        let b = device
            .create_buffer("t-out", 2048, BufferUse::Storage)
            .unwrap();
        let mut list = CommandList::new();
        for _ in 0..3 {
            list.dispatch(scale(p, a, b, 512, 1.0));
        }
        let per = device.submit_timed(&list, Timing::PerDispatch).unwrap();
        assert_eq!(per.len(), 3);
        let whole = device.submit_timed(&list, Timing::Whole).unwrap();
        assert_eq!(whole.len(), 1);
        assert!(whole[0] > 0.0 && per.iter().all(|&t| t >= 0.0));
    }
    let probe = bandwidth_probe(&device, 2).unwrap();
    eprintln!("{probe}");
    assert!(probe.gbps > 0.1 && probe.gbps < 100_000.0, "{probe}");
    assert!(probe.bytes >= 16 << 20);
}

/// The compute probes measure a rate where the device has the units and timestamps;
/// the matrix probe says why not where it has no cooperative matrices (lavapipe), and
/// where it has them (the H200: run with BRASS_ADAPTER=NVIDIA) measures them faster than
/// the f32 units it does not use.
#[test]
fn the_compute_probes_measure_or_say_why_not() {
    let device = common::gpu();
    if !device.profile().timestamps {
        return;
    }
    let int8 = int8_compute_probe(&device, 1, 2.0).unwrap();
    let f32 = f32_compute_probe(&device, 1, 2.0).unwrap();
    eprintln!("{int8}\n{f32}");
    assert!(int8.int8_tops > 0.0 && f32.f32_tflops > 0.0);
    match (
        device.profile().coop_matrix,
        coop_compute_probe(&device, 1, 2.0),
    ) {
        (None, Err(e)) => assert!(e.to_string().contains("no cooperative matrices"), "{e}"),
        (Some(_), Ok(matrix)) => {
            eprintln!("{matrix}");
            assert!(
                matrix.tflops.is_finite() && matrix.tflops > f32.f32_tflops,
                "{matrix}"
            );
        }
        (shape, result) => panic!("cooperative matrices {shape:?}, probe {result:?}"),
    }
}

/// CI states what it expects of the adapter as data: `BRASS_EXPECT_SUBGROUP=4` when it
/// runs lavapipe with LP_NATIVE_VECTOR_WIDTH=128, and so on. The GPU is asked too: the
/// subgroup size a pipeline really runs with must lie in the reported range.
#[test]
fn adapter_matches_expectations() {
    let device = common::gpu();
    let profile = device.profile();
    if let Ok(want) = std::env::var("BRASS_EXPECT_SUBGROUP") {
        let want: u32 = want.parse().unwrap();
        assert_eq!(
            (profile.subgroup_min, profile.subgroup_max),
            (want, want),
            "{profile}"
        );
    }
    if !profile.subgroups {
        return;
    }
    let wgsl = "
struct Params { unused: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(subgroup_size) sg: u32, @builtin(local_invocation_index) i: u32) {
    if (i == 0u) { out[0] = sg; }
}";
    let p = device
        .create_pipeline(&PipelineDesc {
            name: "test/subgroup-size",
            wgsl,
            entry: "main",
            constants: &[],
            params_bytes: 4,
            storage: &[Access::ReadWrite],
            fallback_reason: None,
            index_checks: IndexChecks::Wgpu,
        })
        .unwrap();
    let b = device.create_buffer("sg", 16, BufferUse::Storage).unwrap();
    let mut list = CommandList::new();
    list.dispatch(Dispatch {
        pipeline: p,
        params: vec![0],
        storage: vec![Slice::new(b, 0, 16)],
        workgroups: [1, 1, 1],
        bytes_read: 0,
    });
    device.submit(&list).unwrap();
    let sg = u32::from_le_bytes(device.read(b, 0, 4).unwrap().try_into().unwrap());
    assert!(
        (profile.subgroup_min..=profile.subgroup_max).contains(&sg),
        "runs {sg}, {profile}"
    );
}

#[test]
fn an_unknown_adapter_name_is_a_clear_error() {
    let err =
        brass::device::WgpuDevice::open(&brass::device::AdapterChoice::by_name("no-such-gpu-xyz"))
            .err()
            .expect("no adapter has that name");
    let msg = err.to_string();
    // The choice in words, and what there is to choose from, by index.
    assert!(
        msg.contains(r#"adapter named "no-such-gpu-xyz" not found"#)
            && msg.contains("wgpu sees")
            && msg.contains(": 0 "),
        "{msg}"
    );
}

/// An adapter choice reads as a person would say it, never as its struct.
#[test]
fn an_adapter_choice_displays_in_words() {
    use brass::device::{AdapterChoice, Backend};
    let said = |c: AdapterChoice| c.to_string();
    assert_eq!(said(AdapterChoice::parse("99")), "adapter index 99");
    assert_eq!(
        said(AdapterChoice::parse("NVIDIA")),
        r#"adapter named "NVIDIA""#
    );
    assert_eq!(said(AdapterChoice::default()), "any adapter");
    let vulkan_llvmpipe = AdapterChoice {
        backend: Some(Backend::Vulkan),
        ..AdapterChoice::by_name("llvmpipe")
    };
    assert_eq!(said(vulkan_llvmpipe), r#"Vulkan adapter named "llvmpipe""#);
}

/// `--adapter` and `BRASS_ADAPTER` read a number as an index, anything else as a name.
#[test]
fn an_adapter_spec_is_an_index_or_a_name() {
    use brass::device::AdapterChoice;
    let index = AdapterChoice::parse("3");
    assert_eq!((index.index, index.name), (Some(3), None));
    let name = AdapterChoice::parse("NVIDIA");
    assert_eq!((name.index, name.name.as_deref()), (None, Some("NVIDIA")));
}

/// A read queued with a submission sees that submission's result, even when later work
/// that overwrites the buffer was queued before the read is redeemed.
#[test]
fn queued_reads_see_their_own_submission() {
    let device = common::gpu();
    let n = 256u64;
    let (src, dst) = src_and_dst(&device, &vec![1.0f32; n as usize]);
    let p = scale_pipeline(&device, "test/scale-queued", None);
    let scaled = |factor: f32| {
        let mut list = CommandList::new();
        list.dispatch(scale(p, src, dst, n, factor));
        list
    };
    let first = device
        .submit_read(&scaled(2.0), Slice::new(dst, 0, 16))
        .unwrap();
    let second = device
        .submit_read(&scaled(5.0), Slice::new(dst, 0, 16))
        .unwrap();
    let as_f32 = |b: Vec<u8>| -> Vec<f32> { bytemuck::pod_collect_to_vec(&b) };
    assert_eq!(as_f32(device.finish_read(first).unwrap()), [2.0; 4]);
    assert_eq!(as_f32(device.finish_read(second).unwrap()), [5.0; 4]);
}

/// Uploads leave at most UPLOAD_CHUNK of staging pending however they are split: a model
/// uploaded a tensor piece at a time (as the regrouped K-quant layouts go up) must not
/// hold its whole size in staging memory until the first submission.
#[test]
fn small_uploads_flush_their_staging_as_they_add_up() {
    let device = common::gpu();
    let piece = 4usize << 20;
    let pieces = UPLOAD_CHUNK / piece * 3 / 2;
    let buffer = device
        .create_buffer("pieces", (pieces * piece) as u64, BufferUse::Storage)
        .unwrap();
    let mut most = 0;
    for i in 0..pieces {
        let data = vec![i as u8; piece];
        device.upload(buffer, (i * piece) as u64, &data).unwrap();
        most = most.max(device.pending_upload_bytes());
        assert!(
            device.pending_upload_bytes() < UPLOAD_CHUNK,
            "after piece {i}"
        );
    }
    assert!(
        most >= UPLOAD_CHUNK - piece,
        "pieces were flushed early: {most}"
    );
    for i in [0, pieces / 2, pieces - 1] {
        let got = device.read(buffer, (i * piece) as u64, 16).unwrap();
        assert_eq!(got, vec![i as u8; 16], "piece {i}");
    }
    device.destroy_buffer(buffer).unwrap();
}

/// Small uploads are gathered into one batch and copied out later; the batch must keep
/// every upload in order with the large (direct) ones, submissions, reads and buffers
/// destroyed before it is flushed.
#[test]
fn gathered_small_uploads_land_in_order() {
    let device = common::gpu();
    let large = 1usize << 20;
    let a = device
        .create_buffer("a", large as u64, BufferUse::Storage)
        .unwrap();
    // Small, then large over it: the large one wins.
    device.upload(a, 0, &[1u8; 64]).unwrap();
    device.upload(a, 0, &vec![2u8; large]).unwrap();
    assert_eq!(device.read(a, 0, 128).unwrap(), vec![2u8; 128]);
    // Large, then small over its start.
    device.upload(a, 0, &vec![3u8; large]).unwrap();
    device.upload(a, 0, &[4u8; 64]).unwrap();
    let got = device.read(a, 0, 128).unwrap();
    assert_eq!(&got[..64], &[4u8; 64]);
    assert_eq!(&got[64..], &[3u8; 64]);
    // A length that is no multiple of 4.
    device.upload(a, 8, &[5, 6, 7, 8, 9, 10]).unwrap();
    assert_eq!(
        device.read(a, 4, 12).unwrap(),
        [4, 4, 4, 4, 5, 6, 7, 8, 9, 10, 0, 0]
    );

    // A submitted list sees the uploads made before it.
    let b = device.create_buffer("b", 64, BufferUse::Storage).unwrap();
    let c = device.create_buffer("c", 64, BufferUse::Storage).unwrap();
    device.upload(b, 0, &[7u8; 64]).unwrap();
    let mut list = CommandList::new();
    list.copy(Slice::new(b, 0, 64), c, 0);
    device.submit(&list).unwrap();
    assert_eq!(device.read(c, 0, 64).unwrap(), vec![7u8; 64]);

    // Many buffers, some destroyed before the batch is flushed, across several batches.
    let many: Vec<BufferId> = (0..3000)
        .map(|i| {
            let id = device
                .create_buffer(&format!("many {i}"), 4096, BufferUse::Storage)
                .unwrap();
            device.upload(id, 0, &[(i % 251) as u8; 4096]).unwrap();
            id
        })
        .collect();
    for id in many.iter().step_by(2) {
        device.destroy_buffer(*id).unwrap();
    }
    for (i, id) in many.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(
            device.read(*id, 4000, 96).unwrap(),
            vec![(i % 251) as u8; 96],
            "buffer {i}"
        );
        device.destroy_buffer(*id).unwrap();
    }
    for id in [a, b, c] {
        device.destroy_buffer(id).unwrap();
    }
}

/// Opening a device with `XDG_RUNTIME_DIR` unset prints nothing about it (Mesa's
/// libwayland-client would, on every instance). Run in a child process, since the
/// variable is process-wide and brass sets it once.
#[test]
fn no_xdg_runtime_dir_message_when_it_is_unset() {
    const CHILD: &str = "BRASS_TEST_XDG_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let device = common::gpu();
        brass::device::list_adapters();
        drop(device);
        common::gpu();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_xdg_runtime_dir_message_when_it_is_unset",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stderr}");
    assert!(
        stderr.contains("adapter:"),
        "the child opened no device: {stderr}"
    );
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
}
