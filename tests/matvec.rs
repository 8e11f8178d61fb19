//! Every matvec kernel against its CPU reference on the GPU under test (lavapipe in CI,
//! at subgroup sizes 4, 8 and 16 via LP_NATIVE_VECTOR_WIDTH).

mod common;

use brass::device::{read_f32, BufferUse, CommandList, Device, DeviceProfile, Slice};
use brass::kernels::matvec::{
    self, cpu_reference, int8_x_error_bound, nmse, Family, Layout, MatvecKernel, XStage,
    MATVEC_KERNELS,
};
use brass::kernels::ops::{NormNeeds, Ops, OpsNeeds};
use brass::kernels::PipelineCache;
use brass::quant::{pack_scale_min_k4, random_blocks, GgmlType};
use brass::router::{route_matvec, take_x_q8, Force, Route};

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

/// y's bit patterns, for outputs that must agree exactly.
fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// Runs `route` on the device and returns y. `x` is the whole input binding: K values,
/// or for a `glu` route gate and up with up starting at element `x_up`.
///
/// Runs it twice, y overwritten with NaN in between, and asserts both runs agree bit
/// for bit: a dot4 batch queue left unreset by the first would skip rows of the second.
fn run(
    device: &dyn Device,
    cache: &PipelineCache,
    route: &Route,
    w: &[u8],
    x: &[f32],
    x_up: Option<u64>,
) -> Vec<f32> {
    let parts = matvec::upload_weights(device, "w", route, w).unwrap();
    let x_bytes = x.len() as u64 * 4;
    let xb = device
        .create_buffer("x", x_bytes, BufferUse::Storage)
        .unwrap();
    device.upload(xb, 0, bytemuck::cast_slice(x)).unwrap();
    // y lands a few elements into its buffer, as stacked matvecs write side by side.
    const Y_FIRST: u64 = 3;
    let yb = device
        .create_buffer("y", (Y_FIRST + route.m) * 4, BufferUse::Storage)
        .unwrap();
    let pipeline = matvec::pipeline(device, cache, route).unwrap();
    let queue = matvec::queue(device, route).unwrap();
    let mut list = CommandList::new();
    for d in matvec::dispatches(
        pipeline,
        route.k,
        route.row_bytes,
        &route.parts,
        &parts,
        Slice::new(xb, 0, x_bytes),
        Slice::new(yb, 0, (Y_FIRST + route.m) * 4),
        Y_FIRST,
        x_up,
        queue,
    )
    .unwrap()
    {
        list.dispatch(d);
    }
    let run_once = || {
        let poison = vec![f32::NAN; (Y_FIRST + route.m) as usize];
        device.upload(yb, 0, bytemuck::cast_slice(&poison)).unwrap();
        device.submit(&list).unwrap();
        read_f32(device, yb, 0, (Y_FIRST + route.m) as usize).unwrap()[Y_FIRST as usize..].to_vec()
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
        "{}: a second run differs in {differ} of {} rows",
        route.pipeline_key(),
        route.m
    );
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

/// Every output within what rounding x to int8 can explain, plus `slack` relative to
/// the reference for f32 arithmetic.
#[allow(clippy::too_many_arguments)]
fn assert_within_int8_bound(
    ctx: &str,
    ty: GgmlType,
    w: &[u8],
    (m, k): (u64, u64),
    x: &[f32],
    expected: &[f32],
    actual: &[f32],
    slack: f64,
) {
    let bound = int8_x_error_bound(ty, w, m as usize, k as usize, x).unwrap();
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
    rows_per_subgroup: u32,
    dot4_lanes: Option<u32>,
) {
    let ty = kernel.ty;
    let force = Force::Kernel(kernel.name.to_string());
    let mut route = route_matvec(profile, ty, m, k, Some(&force)).unwrap();
    if let Some(c) = route.coop.as_mut() {
        c.rows = rows_per_subgroup;
        if let Some(lanes) = dot4_lanes {
            c.lanes = lanes;
        }
    }
    let seed = m * 31 + k * 7 + ty.id() as u64;
    let (w, x, expected) = reference_case(ty, m, k, seed);
    let actual = run(device, cache, &route, &w, &x, None);
    let err = nmse(&expected, &actual);
    let ctx = format!("{} on {m} x {k} (route: {})", route.kernel, route.reason());
    if route.coop.is_some_and(|c| c.x == XStage::Int8) {
        // Every output within what rounding x to int8 can explain...
        assert_within_int8_bound(&ctx, ty, &w, (m, k), &x, &expected, &actual, 1e-5);
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
/// last tile (forced by a profile with little workgroup memory). One test per weight
/// type (`cargo test --test matvec kernels_q4_k`), so that they run in parallel.
fn every_kernel_of_a_type_matches_its_cpu_reference(ty: GgmlType) {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let profile = device.profile().clone();
    let small_tiles = small_tiles(&profile);
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.ty == ty) {
        let unit = kernel.ty.block_size().max(32) as u64;
        for (m, k) in [
            (1, 256),
            (67, 256),
            (130, 576u64.next_multiple_of(unit)),
            (3, 16384),
        ] {
            check(&device, &cache, &profile, kernel, (m, k), 1, None);
        }
        if kernel.family.cooperative() {
            // 1280 = 2.5 tiles of 512 (f16, int8) or 5 of 256 (f32).
            check(&device, &cache, &small_tiles, kernel, (45, 1280), 1, None);
        }
        // Several rows per subgroup (coop: two per subgroup; dot4: 2 or 4 lanes per
        // row, so 2 to 8 rows per subgroup at widths 4 to 16): M not a multiple of
        // them, one tile and several.
        let variants: &[(u32, Option<u32>)] = match kernel.family {
            Family::Scalar => &[],
            Family::Coop => &[(2, None)],
            Family::Dot4 => &[(1, Some(2)), (1, Some(4))],
        };
        for &(r, lanes) in variants {
            for (m, k) in [(1, 256), (67, 256), (130, 576u64.next_multiple_of(unit))] {
                check(&device, &cache, &profile, kernel, (m, k), r, lanes);
            }
            check(&device, &cache, &small_tiles, kernel, (45, 1280), r, lanes);
        }
    }
}

macro_rules! kernels_of_each_type {
    ($($test:ident: $ty:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                every_kernel_of_a_type_matches_its_cpu_reference(GgmlType::$ty);
            }
        )*

        /// A kernel of a type missing from the list above would go untested.
        #[test]
        fn every_kernel_type_has_its_test() {
            let tested = [$(GgmlType::$ty),*];
            for kernel in MATVEC_KERNELS {
                assert!(tested.contains(&kernel.ty), "{} has no test", kernel.name);
            }
        }
    };
}

kernels_of_each_type! {
    kernels_f32: F32,
    kernels_f16: F16,
    kernels_q8_0: Q8_0,
    kernels_q4_0: Q4_0,
    kernels_q4_1: Q4_1,
    kernels_q5_0: Q5_0,
    kernels_q5_1: Q5_1,
    kernels_q4_k: Q4_K,
    kernels_q5_k: Q5_K,
    kernels_q6_k: Q6_K,
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
        let route = three_part_dot4_route(&device, ty);
        let (m, k) = (route.m, route.k);
        assert_ne!(route.matvec_kernel().layout, Layout::Gguf, "{ty}");
        let w = weights(ty, m, k, 7);
        let x = common::Rng::new(8).vec(k as usize);
        let expected = cpu_reference(ty, &w, m as usize, k as usize, &x).unwrap();
        let actual = run(&device, &cache, &route, &w, &x, None);
        assert_within_int8_bound(
            &route.reason(),
            ty,
            &w,
            (m, k),
            &x,
            &expected,
            &actual,
            1e-5,
        );
    }
}

/// A 45 x 1,536 dot4 route of `ty` with the binding limit cut so that its weights
/// split into three parts: 16, 16 and 13 rows, each its own buffer.
fn three_part_dot4_route(device: &dyn Device, ty: GgmlType) -> Route {
    let mut profile = device.profile().clone();
    let (m, k) = (45, 1536);
    profile.max_binding_bytes = 16 * ty.bytes_for(k).unwrap() + 8;
    let force = Force::Family(Family::Dot4);
    let route = route_matvec(&profile, ty, m, k, Some(&force)).unwrap();
    assert_eq!(route.parts.len(), 3, "{}", route.reason());
    route
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
        let route = three_part_dot4_route(&device, ty);
        let (m, k) = (route.m, route.k);
        let layout = route.matvec_kernel().layout;
        let w = weights(ty, m, k, 9);
        let block = ty.type_size();
        let (third, row) = (w.len() / 3 + 1, route.row_bytes as usize);
        let splits: [&[usize]; 3] = [&[], &[third], &[row, third, 2 * third - 5]];
        // One block (rounded up to four), seven, and more than a part.
        for (piece, cuts) in [1, 7 * block, 1 << 20].into_iter().zip(splits) {
            let mut tensors = Vec::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([&w.len()]) {
                tensors.push(&w[from..cut]);
                from = cut;
            }
            let parts =
                matvec::upload_weights_in_pieces(&device, "w", &route, &tensors, piece).unwrap();
            for (p, slice) in route.parts.iter().zip(&parts) {
                let start = (p.first_row * route.row_bytes) as usize;
                let len = (p.rows * route.row_bytes) as usize;
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

/// The router's dot4 lane rule reads each kernel's slices per block from the Rust
/// side; they must be the WGSL's.
#[test]
fn dot4_slices_per_block_match_the_wgsl() {
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        let source = kernel.source(None);
        let line = source
            .lines()
            .find(|l| l.starts_with("const SLICES: u32 = "))
            .unwrap_or_else(|| panic!("{} declares no SLICES", kernel.name));
        let wgsl: u64 = line["const SLICES: u32 = ".len()..]
            .trim_end_matches("u;")
            .parse()
            .unwrap();
        assert_eq!(
            matvec::dot4_slices_per_block(kernel.ty),
            wgsl,
            "{}",
            kernel.name
        );
    }
}

/// Whether a dot4 kernel splits its slices into loads and arithmetic (router clause 6
/// asks only those to load a slice ahead) is stated in Rust and in the WGSL.
#[test]
fn dot4_splits_slices_matches_the_wgsl() {
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        assert_eq!(
            matvec::dot4_splits_slices(kernel.ty),
            kernel
                .source(None)
                .lines()
                .any(|l| l.starts_with("fn slice_load(")),
            "{}",
            kernel.name
        );
    }
}

/// Router clause 6: a Q4_K or Q5_K dot4 route that loads each lane's next slice ahead, also
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
    let split = MATVEC_KERNELS
        .iter()
        .filter(|k| k.family == Family::Dot4 && matvec::dot4_splits_slices(k.ty));
    for kernel in split {
        let source = kernel.source(None);
        let step = source
            .lines()
            .find_map(|l| l.strip_prefix("const STEP: u32 = "))
            .unwrap_or_else(|| panic!("{} declares no STEP", kernel.name));
        let one_at_a_time = step == "1u;";
        for (m, k) in [(333, 512), (37, 1280)] {
            let force = Force::Kernel(kernel.name.to_string());
            let routed = route_matvec(device.profile(), kernel.ty, m, k, Some(&force)).unwrap();
            assert!(k <= routed.coop.unwrap().tile as u64, "one tile");
            let seed = 7 * m + k + kernel.ty.id() as u64;
            let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
            for lanes in [0, 4] {
                for groups in [1, 2] {
                    let [plain, ahead] = [false, true].map(|prefetch| {
                        let mut route = routed.clone();
                        let c = route.coop.as_mut().unwrap();
                        (c.lanes, c.prefetch, c.queue) = (lanes, prefetch, false);
                        for part in &mut route.parts {
                            part.workgroups = [groups, 1, 1];
                        }
                        let actual = run(&device, &cache, &route, &w, &x, None);
                        let ctx = format!("{} on {groups} workgroups", route.pipeline_key());
                        assert_within_int8_bound(
                            &ctx,
                            kernel.ty,
                            &w,
                            (m, k),
                            &x,
                            &expected,
                            &actual,
                            1e-5,
                        );
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
    // Q5_K on both lane counts, Q4_K on teams: 2 shapes x 2 workgroup counts.
    assert_eq!(compared, (2 * 2 + 2) * 2);
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
    for family in Family::ALL {
        let route = route_matvec(&profile, ty, m, k, Some(&Force::Family(family))).unwrap();
        assert_eq!(route.parts.len(), 2, "{}", route.reason());
        assert!(route.parts.iter().all(|p| p.rows * row_bytes <= real_limit));
        let w = weights(ty, m, k, 99);
        let x = common::Rng::new(5).vec(k as usize);
        let expected = cpu_reference(ty, &w, m as usize, k as usize, &x).unwrap();
        let actual = run(&device, &cache, &route, &w, &x, None);
        let err = nmse(&expected, &actual);
        assert!(
            err <= MAX_NMSE,
            "{}: NMSE {err:.3e} over {m} rows",
            route.kernel
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
    let ops = Ops::with(
        &device,
        &cache,
        OpsNeeds {
            silu_mul: false,
            silu_mul_q8: true,
            rms_norm: NormNeeds::NONE,
            add_rms_norm: NormNeeds::NONE,
        },
    )
    .unwrap();
    each_dot4_route(device.profile(), (67, 512), |kernel, routed, (m, k)| {
        let mut route = routed.clone();
        route.coop.as_mut().unwrap().glu = true;
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

        let actual = run(&device, &cache, &route, &w, &both, Some(x_up));
        let expected = cpu_reference(kernel.ty, &w, m as usize, k as usize, &glu).unwrap();
        // The CPU's exp and the GPU's may differ in the last bits: 1e-4 of slack.
        let ctx = format!("{} glu {m} x {k}", kernel.name);
        assert_within_int8_bound(&ctx, kernel.ty, &w, (m, k), &glu, &expected, &actual, 1e-4);

        // The large models' path: silu(gate) * up quantized once by ops/silu_mul_q8 and
        // copied while staging. The same quantized x, staged the same way: the same bits.
        let q8 = silu_mul_q8(&device, &ops, &gate, &up);
        let mut route = routed;
        take_x_q8(device.profile(), &mut route, Some(false));
        let from_op = run(&device, &cache, &route, &w, &q8, None);
        assert_eq!(bits(&actual), bits(&from_op), "{ctx}: from silu_mul_q8");
    });
}

/// ops/silu_mul_q8 on the device: silu(gate) * up quantized, as f32 words.
fn silu_mul_q8(device: &dyn Device, ops: &Ops, gate: &[f32], up: &[f32]) -> Vec<f32> {
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
    list.dispatch(ops.silu_mul_q8(n, g, u, Slice::new(out, 0, out_bytes)));
    device.submit(&list).unwrap();
    let q8 = read_f32(device, out, 0, out_bytes as usize / 4).unwrap();
    for b in [g.buffer, u.buffer, out] {
        device.destroy_buffer(b).unwrap();
    }
    q8
}

/// Every dot4 kernel's forced route on two shapes, `one_tile` with x in one tile and
/// 45 x 1,280 with x in several (a profile with little workgroup memory), handed to `f`
/// with its (M, K).
fn each_dot4_route(
    profile: &DeviceProfile,
    one_tile: (u64, u64),
    mut f: impl FnMut(&MatvecKernel, Route, (u64, u64)),
) {
    let small_tiles = small_tiles(profile);
    for kernel in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
        for (p, (m, k)) in [(profile, one_tile), (&small_tiles, (45, 1280))] {
            let force = Force::Kernel(kernel.name.to_string());
            f(
                kernel,
                route_matvec(p, kernel.ty, m, k, Some(&force)).unwrap(),
                (m, k),
            );
        }
    }
}

/// An `x_q8` dot4 route takes x already quantized (as the norms write it): staging
/// copies it, or the lanes read it in place (`x_direct`). Every quant type, one tile and
/// several, within the same int8 bound as quantizing while staging. Where the staged
/// route is one tile with the same lanes, both give the same output bit for bit: the
/// same sums in the same order.
#[test]
fn dot4_takes_prequantized_x_staged_or_in_place() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let mut compared = 0;
    each_dot4_route(device.profile(), (67, 512), |kernel, routed, (m, k)| {
        let seed = 3 * m + k + kernel.ty.id() as u64;
        let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
        let q8: Vec<f32> = matvec::quantize_x_q8(&x)
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(q8.len() as u64 * 4, k / 32 * matvec::Q8_GROUP_BYTES);

        let outputs = [false, true].map(|direct| {
            let mut route = routed.clone();
            take_x_q8(device.profile(), &mut route, Some(direct));
            let c = route.coop.unwrap();
            assert_eq!(c.x_direct, direct);
            let actual = run(&device, &cache, &route, &w, &q8, None);
            let ctx = format!("{} {} {m} x {k}", kernel.name, route.pipeline_key());
            assert_within_int8_bound(&ctx, kernel.ty, &w, (m, k), &x, &expected, &actual, 1e-5);
            (
                bits(&actual),
                (k <= c.tile as u64 || direct).then_some(c.lanes),
            )
        });
        let [(staged, staged_order), (direct, direct_order)] = outputs;
        if staged_order.is_some() && staged_order == direct_order {
            assert_eq!(
                staged, direct,
                "{} {m} x {k}: staged vs in place",
                kernel.name
            );
            compared += 1;
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
    each_dot4_route(device.profile(), (999, 512), |kernel, routed, (m, k)| {
        let seed = 5 * m + k + kernel.ty.id() as u64;
        let (w, x, expected) = reference_case(kernel.ty, m, k, seed);
        for (queue, groups) in [(false, 1), (false, 2), (true, 1), (true, 2)] {
            let mut route = routed.clone();
            route.coop.as_mut().unwrap().queue = queue;
            for part in &mut route.parts {
                part.workgroups = [groups, 1, 1];
            }
            let actual = run(&device, &cache, &route, &w, &x, None);
            let ctx = format!("{} on {groups} workgroups", route.pipeline_key());
            assert_within_int8_bound(&ctx, kernel.ty, &w, (m, k), &x, &expected, &actual, 1e-5);
        }
    });
}
