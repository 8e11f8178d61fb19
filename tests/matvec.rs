//! Every matvec kernel against its CPU reference on the GPU under test (lavapipe in CI,
//! at subgroup sizes 4, 8 and 16 via LP_NATIVE_VECTOR_WIDTH).

mod common;

use brass::device::{
    read_f32, BufferUse, CommandList, Device, DeviceProfile, IndexChecks, PipelineId, Slice,
};
use brass::kernels::matvec::{
    self, cpu_reference, int8_x_error_bound, nmse, Batches, Dot4Launch, Dot4X, Family,
    LaunchConfig, Layout, MatvecKernel, MatvecLaunch, XForm, MATVEC_KERNELS, MAX_COLUMNS,
};
use brass::kernels::ops::{Activation, Ops, OpsOn};
use brass::kernels::{PipelineCache, PipelineTemplate};
use brass::quant::{pack_scale_min_k4, random_blocks, GgmlType};
use brass::router::{route_matvec, Force, MatvecQuery, Overrides, XInput};

use common::bits;

/// llama.cpp's bound for MUL_MAT in its backend tests.
const MAX_NMSE: f64 = 5e-4;

fn weights(ty: GgmlType, m: u64, k: u64, seed: u64) -> Vec<u8> {
    let n_blocks = (m * k) as usize / ty.block_size();
    random_blocks(ty, n_blocks, seed)
}

/// Random weights and x from one seed, and the CPU reference's y for them.
fn reference_case(ty: GgmlType, m: u64, k: u64, seed: u64) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let w = weights(ty, m, k, seed);
    let x = common::Rng::new(seed).vec(k as usize);
    let expected = cpu_reference(ty, &w, m as usize, k as usize, &x).unwrap();
    (w, x, expected)
}

/// `kernel`'s launch for an M x K matvec on `profile`, x handed over as `x`, with
/// `overrides` besides forcing the kernel.
fn launch_of(
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    shape: (u64, u64),
    x: XInput,
    overrides: Overrides,
) -> MatvecLaunch {
    launch_for_steps(profile, kernel, shape, x, 1, overrides)
}

/// [`launch_of`] for a model whose decode steps take up to `rows` rows.
fn launch_for_steps(
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    (m, k): (u64, u64),
    x: XInput,
    rows: u64,
    overrides: Overrides,
) -> MatvecLaunch {
    let query = MatvecQuery {
        ty: kernel.ty,
        m,
        k,
        x,
        columns: rows,
    };
    let overrides = Overrides {
        force: Some(Force::Kernel(kernel.name.to_string())),
        ..overrides
    };
    route_matvec(profile, &query, &overrides)
        .unwrap_or_else(|e| panic!("{} {m} x {k}: {e}", kernel.name))
        .launch()
        .clone()
}

/// `launch`'s pipeline, and where the kernel keeps its own indices in range
/// (`IndexChecks::Kernel`, created without wgpu's clamps on Vulkan) the same WGSL with
/// wgpu's clamps: every run compares the two bit for bit, so an index past its array,
/// which reads what the clamp hides, fails whichever test runs the kernel.
fn pipelines_of(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
) -> Vec<PipelineId> {
    let own = launch.pipeline(device, cache).unwrap();
    let template = launch.template();
    if template.index_checks != IndexChecks::Kernel {
        return vec![own];
    }
    let key = format!("{} Wgpu checks", launch.pipeline_key());
    let clamped = cache
        .get_or_create(device, &key, || {
            let template = PipelineTemplate {
                index_checks: IndexChecks::Wgpu,
                ..template
            };
            Ok((launch.source()?, template))
        })
        .unwrap();
    vec![own, clamped]
}

/// The output of [`pipelines_of`]'s runs, which must all have the same bits.
fn one_output(launch: &MatvecLaunch, ys: Vec<Vec<f32>>) -> Vec<f32> {
    assert!(
        ys.iter().all(|y| bits(y) == bits(&ys[0])),
        "{}: with and without wgpu's index clamps, different bits",
        launch.pipeline_key()
    );
    ys.into_iter().next().unwrap()
}

/// Runs `launch` on the device and returns y. `x` is the whole input binding: K values,
/// quantized x, or gate and up.
///
/// Runs it twice, y overwritten with NaN in between, and asserts both runs agree bit
/// for bit: a dot4 batch queue left unreset by the first would skip rows of the second.
/// Where the kernel keeps its own index checks, runs it with wgpu's clamps too, and
/// asserts the same bits ([`pipelines_of`]).
fn run(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
    w: &[u8],
    x: &[f32],
) -> Vec<f32> {
    let m = launch.m();
    let parts = launch.upload_weights(device, "w", w).unwrap();
    let x_bytes = x.len() as u64 * 4;
    let xb = device
        .create_buffer("x", x_bytes, BufferUse::Storage)
        .unwrap();
    device.upload(xb, 0, bytemuck::cast_slice(x)).unwrap();
    // y lands a few elements into its buffer, as stacked matvecs write side by side.
    const Y_FIRST: u64 = 3;
    let yb = device
        .create_buffer("y", (Y_FIRST + m) * 4, BufferUse::Storage)
        .unwrap();
    let queue = launch.new_queue(device).unwrap();
    assert_eq!(x_bytes, launch.x_bytes(), "{}", launch.pipeline_key());
    let ys = pipelines_of(device, cache, launch)
        .into_iter()
        .map(|pipeline| {
            let mut list = CommandList::new();
            for d in launch
                .dispatches(
                    pipeline,
                    &parts,
                    Slice::new(xb, 0, x_bytes),
                    Slice::new(yb, 0, (Y_FIRST + m) * 4),
                    Y_FIRST,
                    queue,
                )
                .unwrap()
            {
                list.dispatch(d);
            }
            let run_once = || {
                let poison = vec![f32::NAN; (Y_FIRST + m) as usize];
                device.upload(yb, 0, bytemuck::cast_slice(&poison)).unwrap();
                device.submit(&list).unwrap();
                read_f32(device, yb, 0, (Y_FIRST + m) as usize).unwrap()[Y_FIRST as usize..]
                    .to_vec()
            };
            let y = run_once();
            let again = run_once();
            let differ = y
                .iter()
                .zip(&again)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ,
                0,
                "{}: a second run differs in {differ} of {m} rows",
                launch.pipeline_key(),
            );
            y
        });
    let y = one_output(launch, ys.collect());
    for b in parts
        .iter()
        .map(|s| s.buffer)
        .chain([xb, yb])
        .chain(queue.map(|q| q.buffer))
    {
        device.destroy_buffer(b).unwrap();
    }
    y
}

/// Every output of `launch` within what rounding x to int8 on its planes can explain,
/// plus `slack` relative to the reference for f32 arithmetic.
#[allow(clippy::too_many_arguments)]
fn assert_within_int8_bound(
    ctx: &str,
    launch: &MatvecLaunch,
    (w, x): (&[u8], &[f32]),
    expected: &[f32],
    actual: &[f32],
    slack: f64,
) {
    let planes = launch.x_stage().int8_planes();
    let (ty, m, k) = (launch.kernel().ty, launch.m() as usize, launch.k() as usize);
    let bound = int8_x_error_bound(ty, w, m, k, x, planes).unwrap();
    for (i, ((&e, &a), &b)) in expected.iter().zip(actual).zip(&bound).enumerate() {
        let diff = (e as f64 - a as f64).abs();
        assert!(
            diff <= b * 1.001 + slack * (1.0 + e.abs() as f64),
            "{ctx}: y[{i}] = {a}, reference {e}, off by {diff:.3e} > bound {b:.3e}"
        );
    }
}

fn check(
    device: &dyn Device,
    cache: &PipelineCache,
    profile: &DeviceProfile,
    kernel: &MatvecKernel,
    (m, k): (u64, u64),
    (dot4_lanes, x_planes): (Option<u32>, Option<u32>),
) {
    let ty = kernel.ty;
    let overrides = Overrides {
        lanes: dot4_lanes,
        x_planes,
        ..Overrides::default()
    };
    let launch = launch_of(profile, kernel, (m, k), XInput::F32, overrides);
    let seed = m * 31 + k * 7 + ty.id() as u64;
    let (w, x, expected) = reference_case(ty, m, k, seed);
    let actual = run(device, cache, &launch, &w, &x);
    let err = nmse(&expected, &actual);
    let ctx = format!("{} on {m} x {k}", launch.pipeline_key());
    if launch.x_stage().int8_planes() > 0 {
        // Every output within what rounding x to int8 can explain...
        assert_within_int8_bound(&ctx, &launch, (&w, &x), &expected, &actual, 1e-5);
        // ...and NMSE where there are enough outputs for it to be a statistic: with int8
        // x one output is a single draw of the rounding noise.
        if m < 16 {
            return;
        }
    }
    assert!(err <= MAX_NMSE, "{ctx}: NMSE {err:.3e} > {MAX_NMSE:e}");
}

/// `profile` with workgroup memory for 512 f16, 256 f32 or 512 int8 elements per tile,
/// so that K = 1,280 spans several tiles with a partial last one.
fn small_tiles(profile: &DeviceProfile) -> DeviceProfile {
    let mut small = profile.clone();
    small.workgroup_storage_bytes = 1200;
    small
}

/// Shapes every kernel must get right: one row, rows not a multiple of any rows-per-
/// workgroup, K of one block, a wide K, and K spanning several tiles with a partial
/// last tile (forced by a profile with little workgroup memory). One test per kernel,
/// named after it (`cargo test --test matvec q4_k_dot4`).
fn kernel_matches_its_cpu_reference(name: &str) {
    let kernel = matvec::find_by_name(name).unwrap_or_else(|| panic!("no kernel {name}"));
    let device = common::gpu();
    let cache = PipelineCache::new();
    let profile = device.profile().clone();
    let small_tiles = small_tiles(&profile);
    let unit = kernel.ty.block_size().max(32) as u64;
    for (m, k) in [
        (1, 256),
        (67, 256),
        (130, 576u64.next_multiple_of(unit)),
        (3, 16384),
    ] {
        check(&device, &cache, &profile, kernel, (m, k), (None, None));
    }
    if kernel.family.cooperative() {
        // 1280 = 2.5 tiles of 512 (f16, int8) or 5 of 256 (f32).
        check(
            &device,
            &cache,
            &small_tiles,
            kernel,
            (45, 1280),
            (None, None),
        );
    }
    // x on two int8 planes: the same shapes within the second plane's bound, 256 times
    // tighter than one plane's.
    if kernel.family == Family::Dot4 {
        for (m, k) in [(67, 256), (3, 16384)] {
            check(&device, &cache, &profile, kernel, (m, k), (None, Some(2)));
        }
        check(
            &device,
            &cache,
            &small_tiles,
            kernel,
            (45, 1280),
            (Some(4), Some(2)),
        );
    }
    // Several rows per subgroup (dot4: 2 or 4 lanes per row, so 2 to 8 rows per
    // subgroup at widths 4 to 16): M not a multiple of them, one tile and several.
    if kernel.family == Family::Dot4 {
        for lanes in [2, 4] {
            for (m, k) in [(1, 256), (67, 256), (130, 576u64.next_multiple_of(unit))] {
                check(
                    &device,
                    &cache,
                    &profile,
                    kernel,
                    (m, k),
                    (Some(lanes), None),
                );
            }
            check(
                &device,
                &cache,
                &small_tiles,
                kernel,
                (45, 1280),
                (Some(lanes), None),
            );
        }
    }
}

macro_rules! kernel_tests {
    ($($kernel:ident),* $(,)?) => {
        $(
            #[test]
            fn $kernel() {
                kernel_matches_its_cpu_reference(stringify!($kernel));
            }
        )*

        /// A kernel missing from the list below would go untested.
        #[test]
        fn every_kernel_has_its_test() {
            let tested = [$(concat!("matvec/", stringify!($kernel))),*];
            for kernel in MATVEC_KERNELS {
                assert!(tested.contains(&kernel.name), "{} has no test", kernel.name);
            }
        }
    };
}

kernel_tests! {
    f32_scalar, f32_coop,
    f16_scalar, f16_coop,
    q8_0_scalar, q8_0_coop, q8_0_dot4,
    q4_0_scalar, q4_0_coop, q4_0_dot4,
    q4_1_scalar, q4_1_coop, q4_1_dot4,
    q5_0_scalar, q5_0_coop, q5_0_dot4,
    q5_1_scalar, q5_1_coop, q5_1_dot4,
    q4_k_scalar, q4_k_coop, q4_k_dot4,
    q5_k_scalar, q5_k_coop, q5_k_dot4,
    q6_k_scalar, q6_k_coop, q6_k_dot4,
}

/// A kernel whose weights are rearranged on upload (Q6_K's dot4 reads the blocks'
/// 208-byte bodies first, then their d) is right in every row part, each its own buffer
/// with its own tail of d values.
#[test]
fn rearranged_weights_are_right_in_every_part() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    // Q6_K's bodies first, Q4_K's scales and Q5_K's scales and fifth bits regrouped.
    for ty in [GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q5_K] {
        let launch = three_part_dot4_launch(&device, ty);
        let (m, k) = (launch.m(), launch.k());
        assert_ne!(launch.kernel().layout, Layout::Gguf, "{ty}");
        let w = weights(ty, m, k, 7);
        let x = common::Rng::new(8).vec(k as usize);
        let expected = cpu_reference(ty, &w, m as usize, k as usize, &x).unwrap();
        let actual = run(&device, &cache, &launch, &w, &x);
        assert_within_int8_bound(
            &launch.pipeline_key(),
            &launch,
            (&w, &x),
            &expected,
            &actual,
            1e-5,
        );
    }
}

/// A 45 x 1,536 dot4 route of `ty` with the binding limit cut so that its weights
/// split into three parts: 16, 16 and 13 rows, each its own buffer.
fn three_part_dot4_launch(device: &dyn Device, ty: GgmlType) -> MatvecLaunch {
    let mut profile = device.profile().clone();
    let (m, k) = (45, 1536);
    profile.max_binding_bytes = 16 * ty.bytes_for(k).unwrap() + 8;
    let kernel = matvec::find(ty, Family::Dot4).unwrap();
    let launch = launch_of(&profile, kernel, (m, k), XInput::F32, Overrides::default());
    assert_eq!(launch.parts().len(), 3, "{:?}", launch.parts());
    launch
}

/// A block-local layout uploads its parts a piece at a time (others a part at a time),
/// from a matrix given whole
/// or as stacked tensors: pieces of any size, and tensors split anywhere (inside a part,
/// a piece or a block), give the bytes `Layout::arrange` gives for the whole part.
#[test]
fn weights_arranged_in_pieces_are_the_whole_arrangement() {
    let device = common::gpu();
    // Gguf, regrouped block-local and (where a type has it) bodies-first layouts.
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let launch = three_part_dot4_launch(&device, ty);
        let (m, k) = (launch.m(), launch.k());
        let layout = launch.kernel().layout;
        let w = weights(ty, m, k, 9);
        let block = ty.type_size();
        let (third, row) = (w.len() / 3 + 1, launch.row_bytes() as usize);
        let splits: [&[usize]; 3] = [&[], &[third], &[row, third, 2 * third - 5]];
        // One block (rounded up to four), seven, and more than a part.
        for (piece, cuts) in [1, 7 * block, 1 << 20].into_iter().zip(splits) {
            let mut tensors = Vec::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([&w.len()]) {
                tensors.push(&w[from..cut]);
                from = cut;
            }
            let parts = launch
                .upload_weights_in_pieces(&device, "w", &tensors, piece)
                .unwrap();
            for (p, slice) in launch.parts().iter().zip(&parts) {
                let start = (p.first_row * launch.row_bytes()) as usize;
                let len = (p.rows * launch.row_bytes()) as usize;
                let read = device.read(slice.buffer, 0, len as u64).unwrap();
                assert!(
                    read == *layout.arrange(&w[start..start + len], block),
                    "{ty}, pieces of {piece} bytes, tensors cut at {cuts:?}, rows from {}",
                    p.first_row
                );
            }
            for slice in parts {
                device.destroy_buffer(slice.buffer).unwrap();
            }
        }
    }
}

#[test]
fn bodies_first_puts_every_blocks_rest_after_all_bodies() {
    let layout = Layout::BodiesFirst {
        body_start: 1,
        body_len: 2,
    };
    let two_blocks = [0u8, 1, 2, 3, 10, 11, 12, 13];
    assert_eq!(
        &*layout.arrange(&two_blocks, 4),
        &[1, 2, 11, 12, 0, 3, 10, 13]
    );
    assert_eq!(&*Layout::Gguf.arrange(&two_blocks, 4), &two_blocks);
}

#[test]
fn q5_k_fifth_bits_are_regrouped_by_sub_block() {
    // One block whose qh byte l has only bit l % 8 set: weight l of sub-block l % 8.
    let mut block = [0u8; 176];
    for (i, b) in block.iter_mut().enumerate() {
        *b = i as u8;
    }
    for l in 0..32 {
        block[16 + l] = 1 << (l % 8);
    }
    let out = Layout::Q5kByPair.arrange(&block, 176);
    assert_eq!(&out[..4], &block[..4], "d and dmin stay");
    let scales: [u8; 12] = block[4..16].try_into().unwrap();
    assert_eq!(out[4..16], matvec::k_scales_by_pair(&scales), "the scales");
    assert_eq!(&out[48..], &block[48..], "qs stays");
    for s in 0..8 {
        let word = u32::from_le_bytes(out[16 + 4 * s..][..4].try_into().unwrap());
        // Weights s, s + 8, s + 16, s + 24: k = l / 4, b = l % 4, at bit 8b + k.
        let expected = [s, s + 8, s + 16, s + 24]
            .into_iter()
            .fold(0u32, |acc, l| acc | 1 << (8 * (l % 4) + l / 4));
        assert_eq!(word, expected, "sub-block {s}: {word:#010x}");
    }
}

#[test]
fn k_scales_are_regrouped_by_pair() {
    // Distinct 6-bit values: scale of sub-block s = 10 + s, minimum 40 + 3s (up to 61,
    // so every minimum's top bits are exercised).
    let sc: [u8; 8] = std::array::from_fn(|s| 10 + s as u8);
    let m: [u8; 8] = std::array::from_fn(|s| 40 + 3 * s as u8);
    let out = matvec::k_scales_by_pair(&pack_scale_min_k4(&sc, &m));
    for j in 0..4 {
        let (a, b, c) = (out[j], out[4 + j], out[8 + j]);
        assert_eq!(a & 63, sc[2 * j], "pair {j}: scale of sub-block {}", 2 * j);
        assert_eq!(b & 63, sc[2 * j + 1], "pair {j}: scale of {}", 2 * j + 1);
        assert_eq!(c & 63, m[2 * j], "pair {j}: minimum of {}", 2 * j);
        let m1 = (a >> 6) | (b >> 6) << 2 | (c >> 6) << 4;
        assert_eq!(m1, m[2 * j + 1], "pair {j}: minimum of {}", 2 * j + 1);
    }
    // The Q4_K layout moves the scales and nothing else.
    let block: Vec<u8> = (0..144).map(|i| (i * 7) as u8).collect();
    let out = Layout::KScalesByPair.arrange(&block, 144);
    let scales: [u8; 12] = block[4..16].try_into().unwrap();
    assert_eq!(out[..4], block[..4]);
    assert_eq!(out[4..16], matvec::k_scales_by_pair(&scales));
    assert_eq!(out[16..], block[16..]);
}

/// The router's dot4 lane rule reads each kernel's slices per block from its spec; they
/// must be the WGSL's.
#[test]
fn dot4_slices_per_block_match_the_wgsl() {
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        let source = MatvecLaunch::canonical(kernel, false).source().unwrap();
        let line = source
            .lines()
            .find(|l| l.starts_with("const SLICES: u32 = "))
            .unwrap_or_else(|| panic!("{} declares no SLICES", kernel.name));
        let wgsl: u64 = line["const SLICES: u32 = ".len()..]
            .trim_end_matches("u;")
            .parse()
            .unwrap();
        assert_eq!(kernel.slices_per_block(), wgsl, "{}", kernel.name);
    }
}

/// Whether a dot4 kernel splits its slices into loads and arithmetic (the router asks
/// only those to load a slice ahead) is stated in its spec and in the WGSL.
#[test]
fn dot4_splits_slices_matches_the_wgsl() {
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        assert_eq!(
            kernel.splits_slices(),
            MatvecLaunch::canonical(kernel, false)
                .source()
                .unwrap()
                .lines()
                .any(|l| l.starts_with("fn slice_load(")),
            "{}",
            kernel.name
        );
    }
}

/// Router clause 6: a Q4_K, Q5_K or Q6_K dot4 route that loads each lane's next slice ahead, also
/// across the end of a row, computes what one that does not computes, within the int8
/// bound of the reference; and where both add a lane's slices one at a time (`STEP` 1,
/// or teams of lanes; Q4_K's whole-subgroup rows otherwise add them in pairs), the same
/// sums in the same order, bit for bit. On one and two workgroups (dozens of row batches
/// each, the last ragged), a whole subgroup per row and teams of 4 lanes, rows of 8 and
/// of 20 slices (some lanes run past a row's last slice).
#[test]
fn dot4_prefetch_gives_the_same_bits() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let mut compared = 0;
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.splits_slices()) {
        let source = MatvecLaunch::canonical(kernel, false).source().unwrap();
        let step = source
            .lines()
            .find_map(|l| l.strip_prefix("const STEP: u32 = "))
            .unwrap_or_else(|| panic!("{} declares no STEP", kernel.name));
        let one_at_a_time = step == "1u;";
        for (m, k) in [(333, 512), (37, 1280)] {
            let seed = 7 * m + k + kernel.ty.id() as u64;
            let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
            for lanes in [0, 4] {
                for groups in [1, 2] {
                    let [plain, ahead] = [Batches::GridStride, Batches::Prefetch].map(|b| {
                        let overrides = Overrides {
                            lanes: Some(lanes),
                            batches: Some(b),
                            max_workgroups: Some(groups),
                            ..Overrides::default()
                        };
                        let profile = device.profile();
                        let launch = launch_of(profile, kernel, (m, k), XInput::F32, overrides);
                        assert!(launch.parts()[0].workgroups[0] <= groups);
                        let actual = run(&device, &cache, &launch, &w, &x);
                        let ctx = format!("{} on {groups} workgroups", launch.pipeline_key());
                        assert_within_int8_bound(&ctx, &launch, (&w, &x), &expected, &actual, 1e-5);
                        bits(&actual)
                    });
                    if one_at_a_time || lanes > 0 {
                        assert_eq!(plain, ahead, "{} {m} x {k} lanes {lanes}", kernel.name);
                        compared += 1;
                    }
                }
            }
        }
    }
    // Q5_K and Q6_K on both lane counts, Q4_K on teams: 2 shapes x 2 workgroup counts.
    assert_eq!(compared, (2 * 2 * 2 + 2) * 2);
}

/// A weight bigger than lavapipe's 128 MiB binding is split into row parts.
#[test]
fn weights_beyond_the_binding_limit_are_split() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let mut profile = device.profile().clone();
    let ty = GgmlType::Q4_1;
    let k = 4096u64;
    let row_bytes = ty.bytes_for(k).unwrap();
    let real_limit = profile.usable_binding_bytes();
    // On a device with huge bindings, pretend the limit is 128 MiB so the split path
    // still runs; the buffers stay the same size either way.
    profile.max_binding_bytes = profile.max_binding_bytes.min(128 << 20);
    let m = (profile.usable_binding_bytes() / row_bytes) * 5 / 4;
    // One matrix and its CPU reference, for every family.
    let w = weights(ty, m, k, 99);
    let x = common::Rng::new(5).vec(k as usize);
    let expected = cpu_reference(ty, &w, m as usize, k as usize, &x).unwrap();
    for family in Family::ALL {
        let kernel = matvec::find(ty, family).unwrap();
        let launch = launch_of(&profile, kernel, (m, k), XInput::F32, Overrides::default());
        assert_eq!(launch.parts().len(), 2, "{:?}", launch.parts());
        assert!(launch
            .parts()
            .iter()
            .all(|p| p.rows * row_bytes <= real_limit));
        let actual = run(&device, &cache, &launch, &w, &x);
        let err = nmse(&expected, &actual);
        assert!(
            err <= MAX_NMSE,
            "{}: NMSE {err:.3e} over {m} rows",
            kernel.name
        );
    }
}

/// A `glu` dot4 route multiplies silu(gate) * up, read from two parts of one binding,
/// as the FFN's down projection does: every quant type, one tile and several. And bit
/// for bit the same when ops/silu_mul_q8 quantizes it and the route copies it.
#[test]
fn dot4_applies_swiglu_while_staging() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let ops = Ops::new(Activation::Silu);
    let ops = ops.on(&device, &cache);
    each_dot4_case(device.profile(), (67, 512), |kernel, profile, (m, k)| {
        let seed = m + k + kernel.ty.id() as u64;
        let w = weights(kernel.ty, m, k, seed);
        let mut rng = common::Rng::new(seed);
        let gate: Vec<f32> = rng.vec(k as usize).iter().map(|v| v * 4.0).collect();
        let up = rng.vec(k as usize);
        // [gate; 4 unused; up], as the model's buffer pads up to an aligned offset.
        let x_up = k + 4;
        let mut both = gate.clone();
        both.extend([9.0; 4]);
        both.extend(&up);
        let glu: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
            .collect();

        let glu_q8 = |on| Overrides {
            glu_q8: Some(on),
            x_in_place: Some(false),
            ..Overrides::default()
        };
        let x_form = XInput::Glu { up: x_up };
        let launch = launch_of(profile, kernel, (m, k), x_form, glu_q8(false));
        let actual = run(&device, &cache, &launch, &w, &both);
        let expected = cpu_reference(kernel.ty, &w, m as usize, k as usize, &glu).unwrap();
        // The CPU's exp and the GPU's may differ in the last bits: 1e-4 of slack.
        let ctx = format!("{} glu {m} x {k}", kernel.name);
        assert_within_int8_bound(&ctx, &launch, (&w, &glu), &expected, &actual, 1e-4);

        // The large models' path: silu(gate) * up quantized once by ops/silu_mul_q8 and
        // copied while staging. The same quantized x, staged the same way: the same bits.
        let q8 = silu_mul_q8(&device, ops, &gate, &up);
        let launch = launch_of(profile, kernel, (m, k), x_form, glu_q8(true));
        let from_op = run(&device, &cache, &launch, &w, &q8);
        assert_eq!(bits(&actual), bits(&from_op), "{ctx}: from silu_mul_q8");
    });
}

/// ops/silu_mul_q8 on the device: silu(gate) * up quantized, as f32 words.
fn silu_mul_q8(device: &dyn Device, ops: OpsOn, gate: &[f32], up: &[f32]) -> Vec<f32> {
    let upload = |v: &[f32]| {
        let b = device
            .create_buffer("t", v.len() as u64 * 4, BufferUse::Storage)
            .unwrap();
        device.upload(b, 0, bytemuck::cast_slice(v)).unwrap();
        Slice::new(b, 0, v.len() as u64 * 4)
    };
    let (g, u) = (upload(gate), upload(up));
    let n = gate.len() as u64;
    let out_bytes = n.div_ceil(32) * matvec::Q8_GROUP_BYTES;
    let out = device
        .create_buffer("q8", out_bytes, BufferUse::Storage)
        .unwrap();
    let mut list = CommandList::new();
    list.dispatch(
        ops.glu_q8((n, 1, n), g, u, Slice::new(out, 0, out_bytes))
            .unwrap(),
    );
    device.submit(&list).unwrap();
    let q8 = read_f32(device, out, 0, out_bytes as usize / 4).unwrap();
    for b in [g.buffer, u.buffer, out] {
        device.destroy_buffer(b).unwrap();
    }
    q8
}

/// Every dot4 kernel on two shapes, `one_tile` with x in one tile on `profile` and 45 x
/// 1,280 with x in several (a profile with little workgroup memory), handed to `f` with
/// the profile to route on and (M, K).
fn each_dot4_case(
    profile: &DeviceProfile,
    one_tile: (u64, u64),
    mut f: impl FnMut(&MatvecKernel, &DeviceProfile, (u64, u64)),
) {
    let small_tiles = small_tiles(profile);
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        for (p, shape) in [(profile, one_tile), (&small_tiles, (45, 1280))] {
            f(kernel, p, shape);
        }
    }
}

/// An `x_q8` dot4 route takes x already quantized (as the norms write it): staging
/// copies it, or the lanes read it in place (`Dot4X::InPlace`). Every quant type, one tile and
/// several, on one int8 plane and on two, within the same int8 bound as quantizing while
/// staging. Where the staged
/// route is one tile with the same lanes, both give the same output bit for bit: the
/// same sums in the same order.
#[test]
fn dot4_takes_prequantized_x_staged_or_in_place() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let mut compared = 0;
    each_dot4_case(device.profile(), (67, 512), |kernel, profile, (m, k)| {
        let seed = 3 * m + k + kernel.ty.id() as u64;
        let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
        let q8: Vec<f32> = matvec::quantize_x_q8(&x)
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(q8.len() as u64 * 4, k / 32 * matvec::Q8_GROUP_BYTES);

        for planes in [1, 2] {
            let outputs = [false, true].map(|direct| {
                let overrides = Overrides {
                    x_q8: Some(true),
                    x_in_place: Some(direct),
                    x_planes: Some(planes),
                    ..Overrides::default()
                };
                let launch = launch_of(profile, kernel, (m, k), XInput::Norm, overrides);
                let LaunchConfig::Dot4(c) = launch.config() else {
                    panic!("{}", launch.pipeline_key())
                };
                let one_tile = match c.x {
                    Dot4X::InPlace => true,
                    Dot4X::Staged { tile, .. } => k <= tile as u64,
                };
                assert_eq!(c.x == Dot4X::InPlace, direct);
                let actual = run(&device, &cache, &launch, &w, &q8);
                let ctx = format!("{} {m} x {k}", launch.pipeline_key());
                assert_within_int8_bound(&ctx, &launch, (&w, &x), &expected, &actual, 1e-5);
                (bits(&actual), one_tile.then_some(c.lanes))
            });
            let [(staged, staged_order), (direct, direct_order)] = outputs;
            if staged_order.is_some() && staged_order == direct_order {
                assert_eq!(
                    staged, direct,
                    "{} {m} x {k} on {planes} planes: staged vs in place",
                    kernel.name
                );
                compared += 1;
            }
        }
    });
    assert!(compared > 0, "no route compared staged and in place");
}

/// dot4 workgroups take row batches in a grid-stride loop, or with `queue` their first
/// by their index and the rest from the batch queue. On one or two workgroups, far fewer
/// than the rows need (999 rows in batches of 16 to 64 rows, or 45 rows in several x
/// tiles), every row is still computed, once, and the queue is left reset for the next
/// dispatch (`run` runs each route twice).
#[test]
fn dot4_rows_are_covered_on_any_number_of_workgroups() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    each_dot4_case(device.profile(), (999, 512), |kernel, profile, (m, k)| {
        let seed = 5 * m + k + kernel.ty.id() as u64;
        let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
        for (batches, groups) in [
            (Batches::GridStride, 1),
            (Batches::GridStride, 2),
            (Batches::Queue, 1),
            (Batches::Queue, 2),
        ] {
            let overrides = Overrides {
                batches: Some(batches),
                max_workgroups: Some(groups),
                ..Overrides::default()
            };
            let launch = launch_of(profile, kernel, (m, k), XInput::F32, overrides);
            // As many as the row batches need, up to `groups` (45 rows are one batch on
            // subgroups of 4).
            assert!(launch.parts().iter().all(|p| p.workgroups[0] <= groups));
            let actual = run(&device, &cache, &launch, &w, &x);
            let ctx = format!("{} on {groups} workgroups", launch.pipeline_key());
            assert_within_int8_bound(&ctx, &launch, (&w, &x), &expected, &actual, 1e-5);
        }
    });
}

/// The timing the bench and `compare` use runs a launch of each x form (f32, quantized,
/// gate and up), each with its own size of x binding.
#[test]
fn timing_runs_every_x_form() {
    use brass::kernels::timing::{time_matvec, Effort};
    let device = common::gpu();
    let cache = PipelineCache::new();
    let kernel = matvec::find(GgmlType::Q4_1, Family::Dot4).unwrap();
    let effort = Effort {
        iters: 2,
        rotate_bytes: 0,
        warmup: std::time::Duration::ZERO,
    };
    let (m, k) = (64, 512);
    for (x, x_q8) in [
        (XInput::F32, None),
        (XInput::Norm, Some(true)),
        (XInput::Glu { up: k + 4 }, Some(false)),
    ] {
        let overrides = Overrides {
            x_q8,
            glu_q8: x_q8,
            ..Overrides::default()
        };
        let launch = launch_of(device.profile(), kernel, (m, k), x, overrides);
        let t = time_matvec(&device, &cache, &launch, effort)
            .unwrap_or_else(|e| panic!("{}: {e}", launch.pipeline_key()));
        assert!(t.median_us > 0.0, "{}", launch.pipeline_key());
    }
}

/// Column counts every family is checked at: one, a few, and the most one dispatch takes.
const COLUMN_COUNTS: [u64; 5] = [1, 2, 3, 8, MAX_COLUMNS];

/// Column c's x binding for `launch` (its x form: f32, quantized, or gate and up) and
/// the x its y is W times.
fn column_x(launch: &MatvecLaunch, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let k = launch.k() as usize;
    let mut rng = common::Rng::new(seed);
    let x = rng.vec(k);
    match launch.x_form() {
        XForm::F32 => (x.clone(), x),
        XForm::Q8 => {
            let q8 = matvec::quantize_x_q8(&x)
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            (q8, x)
        }
        XForm::Glu { up } => {
            let u = rng.vec(k);
            let mut both = x.clone();
            both.resize(up as usize, 9.0);
            both.extend(&u);
            let glu = x
                .iter()
                .zip(&u)
                .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            (both, glu)
        }
    }
}

/// Runs `launch` on the columns `xs` (x bindings) by one dispatch of `dispatches_columns`
/// (x and y columns with strides a little past their sizes, y from element 3), twice,
/// asserting both runs agree bit for bit (the batch queue is left reset); y per column.
fn run_columns(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
    parts: &[Slice],
    xs: &[Vec<f32>],
) -> Vec<Vec<f32>> {
    let (m, cols) = (launch.m(), xs.len() as u64);
    let x_stride = (launch.x_bytes() + 16).next_multiple_of(16);
    let y_stride = m * 4 + 4;
    const Y_FIRST: u64 = 3;
    let mut x_all = vec![f32::NAN; (cols * x_stride / 4) as usize];
    for (c, x) in xs.iter().enumerate() {
        let at = c * x_stride as usize / 4;
        x_all[at..at + x.len()].copy_from_slice(x);
    }
    let x_bytes = x_all.len() as u64 * 4;
    let xb = device
        .create_buffer("x", x_bytes, BufferUse::Storage)
        .unwrap();
    device.upload(xb, 0, bytemuck::cast_slice(&x_all)).unwrap();
    let y_len = Y_FIRST + cols * (y_stride / 4);
    let yb = device
        .create_buffer("y", y_len * 4, BufferUse::Storage)
        .unwrap();
    let queue = launch.new_queue(device).unwrap();
    let ys = pipelines_of(device, cache, launch)
        .into_iter()
        .map(|pipeline| {
            let mut list = CommandList::new();
            for d in launch
                .dispatches_columns(
                    pipeline,
                    parts,
                    Slice::new(xb, 0, x_bytes),
                    x_stride,
                    Slice::new(yb, 0, y_len * 4),
                    y_stride,
                    Y_FIRST,
                    cols,
                    queue,
                )
                .unwrap()
            {
                list.dispatch(d);
            }
            let run_once = || {
                let poison = vec![f32::NAN; y_len as usize];
                device.upload(yb, 0, bytemuck::cast_slice(&poison)).unwrap();
                device.submit(&list).unwrap();
                read_f32(device, yb, 0, y_len as usize).unwrap()
            };
            let y = run_once();
            assert_eq!(
                bits(&y),
                bits(&run_once()),
                "{}: a second run differs",
                launch.pipeline_key()
            );
            y
        });
    let y = one_output(launch, ys.collect());
    for b in [xb, yb].into_iter().chain(queue.map(|q| q.buffer)) {
        device.destroy_buffer(b).unwrap();
    }
    (0..cols)
        .map(|c| {
            let at = (Y_FIRST + c * y_stride / 4) as usize;
            y[at..at + m as usize].to_vec()
        })
        .collect()
}

/// For `launch`: every column of a dispatch of 1, 2, 3, 8 and the most columns is bit
/// for bit a one-column dispatch (`dispatches`, the single-token decode's call) of the
/// same x, and within the tolerance of the CPU reference. Returns the routes checked.
fn check_columns(device: &dyn Device, cache: &PipelineCache, launch: &MatvecLaunch) {
    let (ty, m, k) = (launch.kernel().ty, launch.m(), launch.k());
    let ctx = launch.pipeline_key();
    assert_eq!(launch.max_columns(), MAX_COLUMNS, "{ctx}");
    let seed = m * 13 + k + ty.id() as u64;
    let w = weights(ty, m, k, seed);
    let parts = launch.upload_weights(device, "w", &w).unwrap();
    let columns: Vec<_> = (0..MAX_COLUMNS)
        .map(|c| column_x(launch, seed + c))
        .collect();
    let alone: Vec<Vec<f32>> = columns
        .iter()
        .map(|(x, _)| run(device, cache, launch, &w, x))
        .collect();
    for (c, ((_, x), y)) in columns.iter().zip(&alone).enumerate() {
        let expected = cpu_reference(ty, &w, m as usize, k as usize, x).unwrap();
        let ctx = format!("{ctx}: column {c} alone");
        if launch.x_stage().int8_planes() > 0 {
            assert_within_int8_bound(&ctx, launch, (&w, x), &expected, y, 1e-4);
        } else {
            let err = nmse(&expected, y);
            assert!(err <= MAX_NMSE, "{ctx}: NMSE {err:.3e} > {MAX_NMSE:e}");
        }
    }
    for cols in COLUMN_COUNTS {
        let xs: Vec<Vec<f32>> = columns[..cols as usize]
            .iter()
            .map(|(x, _)| x.clone())
            .collect();
        let ys = run_columns(device, cache, launch, &parts, &xs);
        for (c, (y, one)) in ys.iter().zip(&alone).enumerate() {
            assert_eq!(
                bits(y),
                bits(one),
                "{ctx}: column {c} of {cols} vs the same x alone"
            );
        }
    }
    for s in parts {
        device.destroy_buffer(s.buffer).unwrap();
    }
}

/// Every kernel of `family`, routed as the router routes an f32 x, on one tile of x and
/// (for the staging families) several, through `check_columns`.
fn family_columns(family: Family) {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let profile = device.profile().clone();
    let small_tiles = small_tiles(&profile);
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == family) {
        let mut shapes = vec![(&profile, (67, 512))];
        if family.cooperative() {
            shapes.push((&small_tiles, (45, 1280)));
        }
        for (p, shape) in shapes {
            let launch = launch_of(p, kernel, shape, XInput::F32, Overrides::default());
            check_columns(&device, &cache, &launch);
        }
    }
}

/// Columns of the scalar family: see `check_columns`.
#[test]
fn scalar_columns_are_one_column_dispatches_bit_for_bit() {
    family_columns(Family::Scalar);
}

/// Columns of the coop family, x in one tile and in several: see `check_columns`.
#[test]
fn coop_columns_are_one_column_dispatches_bit_for_bit() {
    family_columns(Family::Coop);
}

/// Columns of the dot4 family on its default route, x in one tile and in several: see
/// `check_columns`.
#[test]
fn dot4_columns_are_one_column_dispatches_bit_for_bit() {
    family_columns(Family::Dot4);
}

/// Columns of the dot4 family on its other routes: x quantized and read in place or
/// staged, gate and up (SwiGLU while staging), the batch queue, teams of 4 lanes on two
/// int8 planes, and (Q4_K, Q5_K) loading a slice ahead. See `check_columns`.
#[test]
fn dot4_columns_on_every_route_are_one_column_dispatches_bit_for_bit() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let (m, k) = (67, 512);
    let routes = [
        (
            XInput::Norm,
            Overrides {
                x_q8: Some(true),
                x_in_place: Some(true),
                ..Overrides::default()
            },
        ),
        (
            XInput::Norm,
            Overrides {
                x_q8: Some(true),
                x_in_place: Some(false),
                ..Overrides::default()
            },
        ),
        (
            XInput::Glu { up: k + 4 },
            Overrides {
                glu_q8: Some(false),
                x_in_place: Some(false),
                ..Overrides::default()
            },
        ),
        (
            XInput::F32,
            Overrides {
                batches: Some(Batches::Queue),
                max_workgroups: Some(2),
                ..Overrides::default()
            },
        ),
        (
            XInput::F32,
            Overrides {
                lanes: Some(4),
                x_planes: Some(2),
                ..Overrides::default()
            },
        ),
    ];
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        for (x, overrides) in &routes {
            let launch = launch_of(device.profile(), kernel, (m, k), *x, overrides.clone());
            check_columns(&device, &cache, &launch);
        }
        if kernel.splits_slices() {
            for lanes in [0, 4] {
                let overrides = Overrides {
                    lanes: Some(lanes),
                    batches: Some(Batches::Prefetch),
                    max_workgroups: Some(2),
                    ..Overrides::default()
                };
                let launch = launch_of(device.profile(), kernel, (m, k), XInput::F32, overrides);
                check_columns(&device, &cache, &launch);
            }
        }
    }
}

/// dot4 launches that read x in place and dot each loaded slice with several columns
/// (`columns_at_once`: 2, 5 and the most, one and two int8 planes, whole subgroups and
/// teams of 4 lanes): each column of every count is bit for bit the launch's
/// one-column dispatch and within the int8 bound of the CPU reference (see
/// `check_columns`). A kernel that does not split its slices, or a launch that stages
/// x, takes columns one at a time, and its plan says why.
#[test]
fn dot4_columns_at_once_are_one_column_dispatches_bit_for_bit() {
    use brass::kernels::matvec::{LaunchConfig, MAX_COLUMNS_AT_ONCE};
    use brass::router::Clause;
    let device = common::gpu();
    let cache = PipelineCache::new();
    let (m, k) = (67, 512);
    let at_once = |launch: &MatvecLaunch| match launch.config() {
        LaunchConfig::Dot4(c) => c.columns_at_once,
        other => panic!("{other:?}"),
    };
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        for (columns, lanes, planes) in [(2, 0, 1), (5, 4, 2), (MAX_COLUMNS_AT_ONCE, 0, 1)] {
            let overrides = Overrides {
                x_q8: Some(true),
                x_in_place: Some(true),
                columns_at_once: Some(columns),
                lanes: Some(lanes),
                x_planes: Some(planes),
                ..Overrides::default()
            };
            let launch = launch_of(device.profile(), kernel, (m, k), XInput::Norm, overrides);
            let taken = if kernel.splits_slices() { columns } else { 1 };
            assert_eq!(at_once(&launch), taken, "{}", launch.pipeline_key());
            check_columns(&device, &cache, &launch);
        }
        if !kernel.splits_slices() {
            // One at a time, and the clause says so.
            let overrides = Overrides {
                force: Some(Force::Kernel(kernel.name.to_string())),
                x_q8: Some(true),
                x_in_place: Some(true),
                columns_at_once: Some(4),
                ..Overrides::default()
            };
            let query = MatvecQuery {
                ty: kernel.ty,
                m,
                k,
                x: XInput::Norm,
                columns: 1,
            };
            let route = route_matvec(device.profile(), &query, &overrides).unwrap();
            assert_eq!(at_once(route.launch()), 1);
            assert!(
                route.clauses().contains(&Clause::ColumnsAtOnce {
                    columns: 1,
                    asked: 4
                }),
                "{:?}",
                route.clauses()
            );
        }
    }
}

/// The staging dot4 routes of a model whose decode steps take several rows stage up to
/// 8 of them at once and dot each loaded slice with every one (`staged_columns`): x
/// quantized while staging, copied, and SwiGLU while staging; one and two int8 planes;
/// whole subgroups and teams of 4 lanes; each lane loading its next slice ahead and
/// not (one workgroup taking every row, so each subgroup takes several). Where a
/// workgroup memory holds the step's columns only in smaller tiles, they
/// are staged tile by tile where asked (2 tiles, the second partial: K = 768 in tiles
/// of 512; else 5 at once in one tile), or fewer at once where even the smallest tile
/// holds too few (4 of 8, in 2 tiles of 256).
/// Every column of every count (runs of 8 and past them) is bit for bit the launch's
/// one-column dispatch and within the int8 bound of the CPU reference
/// (`check_columns`, which also runs it with wgpu's index clamps). Kernels that do not
/// split their slices, and a run that turns it off, stage one column at a time, and the
/// clause says which; slices are loaded ahead by default where x is one tile, and not
/// where the run says no.
#[test]
fn dot4_staged_columns_are_one_column_dispatches_bit_for_bit() {
    use brass::kernels::matvec::MAX_COLUMNS_AT_ONCE;
    use brass::router::Clause;
    let device = common::gpu();
    let cache = PipelineCache::new();
    let (m, k) = (67, 512);
    let staged = |launch: &MatvecLaunch| match launch.config() {
        LaunchConfig::Dot4(c) => {
            assert!(matches!(c.x, Dot4X::Staged { .. }), "{c:?}");
            c.staged_columns()
        }
        other => panic!("{other:?}"),
    };
    let tile_of = |launch: &MatvecLaunch| match launch.config() {
        LaunchConfig::Dot4(Dot4Launch {
            x: Dot4X::Staged { tile, .. },
            ..
        }) => tile,
        other => panic!("{other:?}"),
    };
    let prefetched = |launch: &MatvecLaunch| match launch.config() {
        LaunchConfig::Dot4(Dot4Launch {
            x: Dot4X::Staged { batches, .. },
            ..
        }) => batches == Batches::Prefetch,
        other => panic!("{other:?}"),
    };
    let with_memory = |bytes: u32| {
        let mut p = device.profile().clone();
        p.workgroup_storage_bytes = bytes;
        p
    };
    // Eight columns' int8 tiles of 512 on one plane take 7,712 bytes (of 768, 10,592);
    // four of 256, 2,432, and five 3,032.
    let eight_of_512 = with_memory(7_712);
    let four_of_256 = with_memory(3 * 960 + 32);
    // (x, rows, lanes, planes, profile, K, columns staged, tile)
    let glu = |k: u64| XInput::Glu { up: k + 4 };
    let routes = [
        (XInput::F32, 8, 0, 1, device.profile(), k, 8, 512),
        (XInput::Norm, 8, 4, 2, device.profile(), k, 8, 512),
        (glu(k), 5, 0, 1, device.profile(), k, 5, 512),
        (XInput::Norm, 8, 0, 1, &eight_of_512, 768, 8, 512),
        (glu(768), 8, 0, 1, &eight_of_512, 768, 8, 512),
        (XInput::Norm, 8, 0, 1, &four_of_256, k, 4, 256),
    ];
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        for &(x, rows, lanes, planes, profile, k, columns, tile) in &routes {
            for prefetch in [false, true] {
                let overrides = Overrides {
                    x_q8: Some(true),
                    glu_q8: Some(false),
                    x_in_place: Some(false),
                    lanes: Some(lanes),
                    x_planes: Some(planes),
                    staged_prefetch: Some(prefetch),
                    staged_tiles: Some(true),
                    // Loading ahead carries a lane from one row into the next: one
                    // workgroup gives each subgroup several rows.
                    max_workgroups: prefetch.then_some(1),
                    ..Overrides::default()
                };
                let launch = launch_for_steps(profile, kernel, (m, k), x, rows, overrides);
                let key = launch.pipeline_key();
                if kernel.splits_slices() {
                    assert_eq!(staged(&launch), columns, "{key}");
                    assert_eq!(tile_of(&launch), tile, "{key}");
                    let one_tile = k <= tile as u64;
                    assert_eq!(prefetched(&launch), prefetch && one_tile, "{key}");
                    if prefetch && !one_tile {
                        // Nothing loaded ahead: the same launch as without.
                        continue;
                    }
                } else {
                    assert_eq!(staged(&launch), 1, "{key}");
                    if prefetch {
                        continue;
                    }
                }
                check_columns(&device, &cache, &launch);
            }
        }
    }
    // Not asked: as many as one tile of all of K holds (K = 768: 5 of 8 in 7,712
    // bytes, one tile).
    let q4_k = matvec::find_by_name("q4_k_dot4").unwrap();
    let untiled = Overrides {
        x_q8: Some(true),
        x_in_place: Some(false),
        ..Overrides::default()
    };
    let launch = launch_for_steps(&eight_of_512, q4_k, (m, 768), XInput::Norm, 8, untiled);
    assert_eq!((staged(&launch), tile_of(&launch)), (5, 768));
    assert!(prefetched(&launch));
    check_columns(&device, &cache, &launch);
    let query = MatvecQuery {
        ty: q4_k.ty,
        m,
        k,
        x: XInput::F32,
        columns: 32,
    };
    let route = |o: Overrides| route_matvec(device.profile(), &query, &o).unwrap();
    let on = route(Overrides::default());
    assert_eq!(staged(on.launch()), MAX_COLUMNS_AT_ONCE);
    assert!(prefetched(on.launch()));
    assert!(
        on.reason().contains("8 columns of x staged at once")
            && on
                .reason()
                .contains("each lane loading its next slice ahead"),
        "{}",
        on.reason()
    );
    let not_ahead = route(Overrides {
        staged_prefetch: Some(false),
        ..Overrides::default()
    });
    assert_eq!(staged(not_ahead.launch()), MAX_COLUMNS_AT_ONCE);
    assert!(!prefetched(not_ahead.launch()));
    assert!(
        !not_ahead.reason().contains("slice ahead"),
        "{}",
        not_ahead.reason()
    );
    let q6_k = matvec::find_by_name("q6_k_dot4").unwrap();
    let q6_k_route = route_matvec(
        device.profile(),
        &MatvecQuery {
            ty: q6_k.ty,
            ..query
        },
        &Overrides {
            force: Some(Force::Kernel(q6_k.name.to_string())),
            ..Overrides::default()
        },
    )
    .unwrap();
    // Unlike one column's rule, Q6_K's staged columns load ahead too.
    assert_eq!(staged(q6_k_route.launch()), MAX_COLUMNS_AT_ONCE);
    assert!(prefetched(q6_k_route.launch()), "{}", q6_k_route.reason());
    assert!(q6_k_route.reason().contains("slice ahead"));
    let off = route(Overrides {
        staged_columns: Some(false),
        ..Overrides::default()
    });
    assert_eq!(staged(off.launch()), 1);
    assert!(
        off.clauses()
            .iter()
            .any(|c| matches!(c, Clause::StagedColumns { off: true, .. })),
        "{}",
        off.reason()
    );
    // A model of one sequence: nothing changes, nothing said.
    let one = route_matvec(
        device.profile(),
        &MatvecQuery {
            columns: 1,
            ..query
        },
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(staged(one.launch()), 1);
    assert!(
        !one.reason().contains("columns of x staged"),
        "{}",
        one.reason()
    );
}
