//! Every matmul kernel against its CPU reference on the GPU under test (lavapipe in CI,
//! at subgroup sizes 4, 8 and 16 via LP_NATIVE_VECTOR_WIDTH): token counts 1, 2, 7, 64
//! and 300 (partial tiles of tokens), rows that leave a partial tile, K steps that
//! leave a partial step, weights split across bindings, and outputs written side by
//! side into a wider y. The cooperative-matrix kernels run the same cases: on the
//! adapter's matrix units where it has them (the H200 here), else with their matrices
//! emulated on subgroups (`common/coop_emulation.rs`: lavapipe, 8 x 8 matrices at 4 and
//! 8 lanes, 16 x 16 at 16, operands in f32 and f16), which runs everything in them but
//! the matrix instructions; and they are translated to SPIR-V and MSL by tests/spirv.rs.
//! The fma kernels (every type over GGUF rows, f32 x) run the same cases over the
//! weights of each of their type's coop and scalar matvecs, with K that leaves a
//! partial K step (F32, F16), odd K for F16 and, for the quant types, blocks of 18, 22,
//! 34 and 210 bytes (rows only 2-byte aligned).

mod common;
#[path = "common/coop_emulation.rs"]
mod coop_emulation;

use brass::device::{
    read_f32, BufferUse, CommandList, CoopInput, CoopMatrix, Device, DeviceProfile, IndexChecks,
    PipelineId,
};
use brass::kernels::matmul::{
    self, cpu_reference, cpu_reference_f32x, MatmulEngine, MatmulInput, MatmulKernel, MatmulLaunch,
    SpanScratch, UnpackedEngine, UnpackedMatmul, MATMUL_KERNELS,
};
use brass::kernels::matvec::{
    self, quantize_x_q8, Family, Layout, MatvecKernel, MatvecLaunch, Q8_GROUP_BYTES,
};
use brass::kernels::{PipelineCache, PipelineTemplate};
use brass::quant::{dequantize, random_blocks, GgmlType};
use brass::router::{route_matmul_engine, route_matvec, Force, MatvecQuery, Overrides, XInput};

use common::bits;

const TOKEN_COUNTS: [u64; 5] = [1, 2, 7, 64, 300];

/// The dot4 matvec launch of `ty` for M x K on `profile`, whose weights the matmul reads.
fn matvec_launch(profile: &DeviceProfile, ty: GgmlType, mk: (u64, u64)) -> MatvecLaunch {
    matvec_launch_of(profile, ty, Family::Dot4, mk)
}

/// The `family` matvec launch of `ty` for M x K on `profile`.
fn matvec_launch_of(
    profile: &DeviceProfile,
    ty: GgmlType,
    family: Family,
    (m, k): (u64, u64),
) -> MatvecLaunch {
    let kernel = matvec::find(ty, family).unwrap();
    let query = MatvecQuery {
        ty,
        m,
        k,
        x: XInput::F32,
        columns: 1,
    };
    let overrides = Overrides {
        force: Some(Force::Kernel(kernel.name.to_string())),
        ..Overrides::default()
    };
    route_matvec(profile, &query, &overrides)
        .unwrap_or_else(|e| panic!("{} {m} x {k}: {e}", kernel.name))
        .launch()
        .clone()
}

/// Per row, sum |w_i * x_i| over its dequantized weights and x as the kernel takes it:
/// the scale of the f32 rounding its sums may carry.
fn magnitudes(ty: GgmlType, w: &[u8], (m, k): (usize, usize), x: &[f32]) -> Vec<f64> {
    let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
    let mut row = vec![0f32; k];
    (0..m)
        .map(|r| {
            dequantize(ty, &w[r * row_bytes..][..row_bytes], &mut row).unwrap();
            row.iter()
                .zip(x)
                .map(|(&w, &x)| (w as f64 * x as f64).abs())
                .sum()
        })
        .collect()
}

/// `w` with every block's quants zeroed, for the types whose weights are a scaled quant
/// plus an offset (Q4_1 and Q5_1: d·q + m; Q4_K and Q5_K: d·sc·q − dmin·m): each weight
/// then decodes to its offset. None for the types whose weights are products alone.
fn offsets_only(ty: GgmlType, w: &[u8]) -> Option<Vec<u8>> {
    let quants = match ty {
        GgmlType::Q4_1 => 4..20,
        GgmlType::Q5_1 => 4..24,
        GgmlType::Q4_K => 16..144,
        GgmlType::Q5_K => 16..176,
        _ => return None,
    };
    let mut out = w.to_vec();
    for block in out.chunks_exact_mut(ty.type_size()) {
        block[quants.clone()].fill(0);
    }
    Some(out)
}

struct Case {
    ty: GgmlType,
    m: u64,
    k: u64,
    n_tokens: u64,
    /// Where the outputs go in each token's row of y, and that row's length.
    y_first: u64,
    y_stride: u64,
}

/// The engines to test on the device under test: dot4, or (`coop`) cooperative
/// matrices: the routed engine where the adapter has them, else the emulated ones
/// (`emulated_engines`, with two groups per K step where they fit, else one), with a
/// note.
fn engines(device: &dyn Device, coop: bool) -> Vec<MatmulEngine> {
    match route_matmul_engine(device.profile(), Some(coop)) {
        Ok(routed) => vec![routed.engine()],
        Err(e) if coop => {
            eprintln!(
                "cooperative-matrix matmuls on {}: {e}; their matrices emulated",
                device.profile().name
            );
            let budget = device.profile().workgroup_storage_bytes as u64;
            emulated_engines(device, |shape, lanes| {
                let k_groups = match matmul::coop_workgroup_bytes(shape, 2) <= budget {
                    true => 2,
                    false => 1,
                };
                let engine = MatmulEngine::CoopMatrix {
                    shape,
                    subgroup_max: lanes,
                    k_groups,
                };
                vec![(engine, matmul::coop_workgroup_bytes(shape, k_groups))]
            })
        }
        Err(e) => panic!("{e}"),
    }
}

/// Runs `case` with `launch` on `engine` and checks every output against the CPU
/// reference, and that nothing outside the outputs was written.
fn check(
    device: &dyn Device,
    cache: &PipelineCache,
    launch: &MatvecLaunch,
    engine: MatmulEngine,
    case: &Case,
) {
    let Case {
        ty,
        m,
        k,
        n_tokens,
        y_first,
        y_stride,
    } = *case;
    let mm = MatmulLaunch::of(launch, engine).unwrap();
    let what = format!("{} {m} x {k}, {n_tokens} tokens", mm.pipeline_key());
    let seed = m * 7919 + k * 31 + n_tokens;
    let w = random_blocks(ty, (m * k) as usize / ty.block_size(), seed);
    let mut rng = common::Rng::new(seed);
    let xs: Vec<Vec<f32>> = (0..n_tokens).map(|_| rng.vec(k as usize)).collect();
    let mk = (m as usize, k as usize);
    // x as the kernel takes it, and per token the values it multiplies by.
    let (x_data, x_values, expected): (Vec<u8>, Vec<Vec<f32>>, _) = match mm.input() {
        MatmulInput::Q8 => {
            let x_q8: Vec<u8> = xs.iter().flat_map(|x| quantize_x_q8(x)).collect();
            let per_token = (k / 32 * Q8_GROUP_BYTES) as usize;
            // The decode columns read both int8 planes; the prompt's matmuls the first.
            let columns = matches!(engine, MatmulEngine::CoopColumns { .. });
            let values: Vec<Vec<f32>> = (0..n_tokens as usize)
                .map(|t| {
                    let q8 = &x_q8[t * per_token..][..per_token];
                    match columns {
                        true => matmul::dequantize_x_q8_planes(q8, k as usize),
                        false => matmul::dequantize_x_q8(q8, k as usize),
                    }
                })
                .collect();
            let expected = match columns {
                true => cpu_reference_f32x(ty, &w, mk, &values.concat(), n_tokens as usize),
                false => cpu_reference(ty, &w, mk, &x_q8, n_tokens as usize),
            };
            (x_q8, values, expected)
        }
        MatmulInput::F32 => {
            let flat: Vec<f32> = xs.concat();
            let expected = cpu_reference_f32x(ty, &w, mk, &flat, n_tokens as usize);
            (bytemuck::cast_slice(&flat).to_vec(), xs, expected)
        }
    };
    let expected = expected.unwrap_or_else(|e| panic!("{what}: {e}"));

    let parts = launch.upload_weights(device, "w", &w).unwrap();
    let y = run_matmul(
        device,
        cache,
        &mm,
        &parts,
        &x_data,
        n_tokens,
        (y_first, y_stride),
    );
    for p in &parts {
        device.destroy_buffer(p.buffer).unwrap();
    }

    let tol = |scale: f64, offsets: f64| match mm.engine() {
        // The kernel's integer sums are exact; what remains is f32 rounding of the
        // scaled group sums, a few ulps of the terms' magnitude per group.
        MatmulEngine::Dot4 { .. } => 1e-5 * scale + 1e-6,
        MatmulEngine::CoopMatrix { .. } | MatmulEngine::CoopColumns { .. } => coop_tol(scale),
        // x is the reference's own, and so is each weight where it is a product (f16
        // widens exactly; the quants' scales multiply in ggml's order). A scaled quant
        // plus an offset the GPU may fuse, rounding once where the reference rounds
        // twice: within 2^-24 (3|w| + |offset|) of it. Then f32 arithmetic: a dot
        // product of K terms summed in order in f32 is within K·2^-24 of Σ|w·x| of the
        // exact one (the classic γ_K bound, fused multiply-adds or not), and the
        // reference's rounding to f32 adds at most 2^-24 of it. The absolute term
        // covers outputs whose terms are all tiny.
        MatmulEngine::Fma => 2f64.powi(-24) * ((k + 4) as f64 * scale + offsets) + 1e-6,
    };
    let outputs = Outputs {
        what: &what,
        y: &y,
        expected: &expected,
        x_values: &x_values,
        y_place: (y_first, y_stride),
    };
    outputs.assert_within(ty, &w, mk, tol);
}

/// Weights and x rounded to f16 (2^-11 each) before they multiply: at most 2^-10 of
/// each product's magnitude, plus f32 accumulation.
fn coop_tol(scale: f64) -> f64 {
    2f64.powi(-10) * scale + 1e-5
}

/// A kernel's outputs beside the CPU reference's, per token, in a y whose token rows
/// hold them at `y_place` (first element, row length).
struct Outputs<'a> {
    what: &'a str,
    y: &'a [f32],
    expected: &'a [Vec<f32>],
    /// The x values the kernel multiplied, per token.
    x_values: &'a [Vec<f32>],
    y_place: (u64, u64),
}

impl Outputs<'_> {
    /// Every output within `tol(Σ|w·x|, Σ|offset·x|)` of the reference (the second
    /// magnitude for the types whose weights carry an offset, else 0), and every
    /// element outside the outputs still NaN.
    fn assert_within(
        &self,
        ty: GgmlType,
        w: &[u8],
        (m, k): (usize, usize),
        tol: impl Fn(f64, f64) -> f64,
    ) {
        let (what, (y_first, y_stride)) = (self.what, self.y_place);
        let offsets = offsets_only(ty, w);
        for (t, x) in self.x_values.iter().enumerate() {
            let scale = magnitudes(ty, w, (m, k), x);
            let offset_scale = offsets.as_ref().map(|o| magnitudes(ty, o, (m, k), x));
            let row = &self.y[t * y_stride as usize..][..y_stride as usize];
            for (i, &v) in row.iter().enumerate() {
                let r = i as i64 - y_first as i64;
                if r < 0 || r >= m as i64 {
                    assert!(
                        v.is_nan(),
                        "{what}: token {t} element {i} outside the outputs was written"
                    );
                    continue;
                }
                let (r, want) = (r as usize, self.expected[t][r as usize]);
                let tol = tol(scale[r], offset_scale.as_ref().map_or(0.0, |o| o[r]));
                assert!(
                    (v as f64 - want as f64).abs() <= tol,
                    "{what}: token {t} row {r}: {v}, reference {want} (tol {tol:.2e})"
                );
            }
        }
    }
}

/// The decode-columns configurations the tests run where the adapter can, as (row
/// blocks, token blocks, groups per K step, K parts): each row block count and token
/// block count, with groups per K step the router or the bench may pick, a part of K
/// a subgroup (8 / row blocks) or two (the plan's wide tile, 4 row blocks in 4 parts).
const COLUMNS_CONFIGS: [(u32, u32, u32, u32); 8] = [
    (1, 1, 8, 8),
    (1, 2, 16, 8),
    (2, 1, 4, 4),
    (2, 2, 4, 4),
    (2, 2, 8, 4),
    (4, 2, 4, 2),
    (4, 2, 4, 4),
    (8, 1, 4, 1),
];

/// The decode-columns engines of [`COLUMNS_CONFIGS`] the device under test runs, the
/// first also with K in 3 spans (at 4 groups a round, the tests' K-quants' 4 rounds
/// split 1, 1, 2; the 5-group types' 2 rounds 0, 1, 1); where it has no cooperative
/// matrices, emulated: the narrow tile's 2 row blocks and two token blocks (also in 3
/// spans), the plan's wide tile (4 row blocks, two parts a subgroup) and the smallest
/// (with a note: each emulated pipeline takes lavapipe seconds to compile).
fn columns_engines(device: &dyn Device) -> Vec<MatmulEngine> {
    let mut engines: Vec<MatmulEngine> = COLUMNS_CONFIGS
        .iter()
        .filter_map(|&(rb, tb, kg, parts)| {
            MatmulEngine::coop_columns(device.profile(), rb, tb, kg)?.in_k_parts(parts)
        })
        .collect();
    if let Some(&first) = engines.first() {
        engines.push(first.in_k_spans(3));
        return engines;
    }
    eprintln!(
        "decode-columns matmuls on {}: no cooperative matrices; their matrices emulated",
        device.profile().name
    );
    emulated_engines(device, |shape, lanes| {
        [(2, 2, 4, 4), (4, 2, 4, 4), (1, 1, 8, 8)]
            .iter()
            .map(|&(row_blocks, token_blocks, k_groups, k_parts)| {
                let engine = MatmulEngine::CoopColumns {
                    shape,
                    subgroup_max: lanes,
                    k_groups,
                    row_blocks,
                    token_blocks,
                    k_parts,
                    k_spans: 1,
                };
                let bytes =
                    matmul::columns_workgroup_bytes(shape, k_groups, row_blocks, token_blocks);
                (engine, bytes)
            })
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flat_map(|e| match e {
        MatmulEngine::CoopColumns {
            row_blocks: 2,
            k_parts: 4,
            ..
        } => vec![e, e.in_k_spans(3)],
        e => vec![e],
    })
    .collect()
}

#[test]
fn every_decode_columns_matmul_matches_its_cpu_reference() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    for engine in columns_engines(&device) {
        for kernel in quant_kernels() {
            let (m, k) = (70, k_of(kernel.ty));
            let launch = matvec_launch(device.profile(), kernel.ty, (m, k));
            for n_tokens in [1, 5, 16, 19, 33] {
                let case = Case {
                    ty: kernel.ty,
                    m,
                    k,
                    n_tokens,
                    y_first: 3,
                    y_stride: m + 5,
                };
                check(&device, &cache, &launch, engine, &case);
            }
        }
        eprintln!("{engine:?}: ok");
    }
}

/// A decode step's rows on the matrix units are batch invariant: each token's outputs
/// are bit for bit those of a dispatch of that token alone, wherever it sits among 19
/// (in the first token tile or the second). The tokens checked alone are the first
/// two, those either side of each boundary of blocks of 8 and 16 tokens (the blocks
/// the emulated and real tiles take: 8 x 8, 16 x 16) and the last; each alone is a
/// dispatch as long as all 19, and all 19 of them took lavapipe 212 s of CI's 8-lane run.
#[test]
fn decode_columns_give_a_token_the_same_bits_alone_and_among_others() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    for engine in columns_engines(&device) {
        for kernel in quant_kernels() {
            let (m, k) = (70, 2 * k_of(kernel.ty));
            let launch = matvec_launch(device.profile(), kernel.ty, (m, k));
            let mm = MatmulLaunch::of(&launch, engine).unwrap();
            let w = random_blocks(kernel.ty, (m * k) as usize / kernel.ty.block_size(), m + k);
            let parts = launch.upload_weights(&device, "w", &w).unwrap();
            let mut rng = common::Rng::new(k);
            let n = 19u64;
            let xs: Vec<u8> = (0..n)
                .flat_map(|_| quantize_x_q8(&rng.vec(k as usize)))
                .collect();
            let per_token = mm.x_bytes_per_token() as usize;
            let ys = (0, m);
            let together = run_matmul(&device, &cache, &mm, &parts, &xs, n, ys);
            for t in [0, 1, 7, 8, 15, 16, n as usize - 1] {
                let alone = run_matmul(
                    &device,
                    &cache,
                    &mm,
                    &parts,
                    &xs[t * per_token..][..per_token],
                    1,
                    ys,
                );
                let column = &together[t * m as usize..][..m as usize];
                assert!(
                    alone
                        .iter()
                        .zip(column)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{}: token {t} of {n} differs from its dispatch alone",
                    mm.pipeline_key()
                );
            }
            for p in &parts {
                device.destroy_buffer(p.buffer).unwrap();
            }
        }
        eprintln!("{engine:?}: ok");
    }
}

/// A step's tile does not change a token's bits: the plan's decode columns take one
/// block of tokens for steps that fit one and two for more (`DecodeColumns`), the wide
/// tile in twice the row blocks, each subgroup taking two of the narrow tile's K
/// parts, and each of up to one block of tokens gets the same bits from both. In the
/// plan's tiles (2 and 4 row blocks, 4 parts of 4 groups), or where the wide one does
/// not fit the workgroup memory (lavapipe at 16 lanes) in the narrow tile's token
/// block: 1 and 2 row blocks in 8 parts.
#[test]
fn decode_columns_give_a_token_the_same_bits_in_either_token_tile() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let k_groups = 4;
    // (narrow row blocks and token blocks, wide ones, K parts)
    let candidates = [((2, 1), (4, 2), 4), ((1, 1), (2, 1), 8)];
    let pair_of = |((nr, nt), (wr, wt), parts): ((u32, u32), (u32, u32), u32)| {
        let tile = |rb, tb| {
            MatmulEngine::coop_columns(device.profile(), rb, tb, k_groups)?.in_k_parts(parts)
        };
        Some((tile(nr, nt)?, tile(wr, wt)?))
    };
    let mut pairs: Vec<(MatmulEngine, MatmulEngine)> = candidates
        .into_iter()
        .find_map(pair_of)
        .into_iter()
        .collect();
    if pairs.is_empty() {
        pairs = emulated_engines(&device, |shape, lanes| {
            let engine = |row_blocks, token_blocks, k_parts| MatmulEngine::CoopColumns {
                shape,
                subgroup_max: lanes,
                k_groups,
                row_blocks,
                token_blocks,
                k_parts,
                k_spans: 1,
            };
            candidates
                .map(|((nr, nt), (wr, wt), parts)| {
                    let bytes = matmul::columns_workgroup_bytes(shape, k_groups, wr, wt);
                    ((engine(nr, nt, parts), engine(wr, wt, parts)), bytes)
                })
                .into_iter()
                .filter(|&(_, bytes)| bytes <= device.profile().workgroup_storage_bytes as u64)
                .take(1)
                .collect()
        });
    }
    assert!(
        !pairs.is_empty(),
        "no decode columns on {}",
        device.profile().name
    );
    for (narrow, wide) in pairs {
        for kernel in quant_kernels() {
            let (m, k) = (70, k_of(kernel.ty));
            let launch = matvec_launch(device.profile(), kernel.ty, (m, k));
            let w = random_blocks(kernel.ty, (m * k) as usize / kernel.ty.block_size(), m ^ k);
            let parts = launch.upload_weights(&device, "w", &w).unwrap();
            let mut rng = common::Rng::new(m + k);
            for n in [1, 7, narrow.token_tile()] {
                let xs: Vec<u8> = (0..n)
                    .flat_map(|_| quantize_x_q8(&rng.vec(k as usize)))
                    .collect();
                let [a, b] = [narrow, wide].map(|engine| {
                    let mm = MatmulLaunch::of(&launch, engine).unwrap();
                    run_matmul(&device, &cache, &mm, &parts, &xs, n, (0, m))
                });
                assert!(a.iter().all(|v| v.is_finite()));
                assert_eq!(
                    bits(&a),
                    bits(&b),
                    "{:?} against {:?}, {n} tokens",
                    narrow,
                    wide
                );
            }
            for p in &parts {
                device.destroy_buffer(p.buffer).unwrap();
            }
        }
        eprintln!("{narrow:?} and {wide:?}: ok");
    }
}

/// The unpacked engines the tests run, as (row parts, token blocks a subgroup, loading
/// a step ahead): the route's tile (128 x 128 at S = 16), the tallest without the
/// double buffer, and four token blocks both ways.
const UNPACKED_CONFIGS: [((u32, u32), bool); 4] = [
    ((2, 2), true),
    ((8, 2), false),
    ((4, 4), true),
    ((1, 4), false),
];

/// The unpacked engines of [`UNPACKED_CONFIGS`] on the device under test; where it has
/// no cooperative matrices, the same emulated.
fn unpacked_engines(device: &dyn Device) -> Vec<UnpackedEngine> {
    let p = device.profile();
    if p.coop_matrix.is_some() {
        return UNPACKED_CONFIGS
            .iter()
            .map(|&(rows, ahead)| UnpackedEngine::on(p, rows, ahead).unwrap())
            .collect();
    }
    eprintln!(
        "unpacked matmuls on {}: no cooperative matrices; their matrices emulated",
        p.name
    );
    emulated_engines(device, |shape, lanes| {
        UNPACKED_CONFIGS
            .iter()
            .map(|&(rows, ahead)| (UnpackedEngine::new(shape, lanes, rows, ahead).unwrap(), 0))
            .collect()
    })
}

/// The unpacked matmul's three pipelines; on an adapter without cooperative matrices,
/// the multiply with its matrices emulated on subgroups.
fn unpacked_pipelines(
    device: &dyn Device,
    cache: &PipelineCache,
    um: &UnpackedMatmul,
) -> [PipelineId; 3] {
    if device.profile().coop_matrix.is_some() {
        return um.pipelines(device, cache).unwrap();
    }
    let [unpack_key, x_key, gemm_key] = um.pipeline_keys();
    let [unpack, x, gemm] = UnpackedMatmul::templates();
    let e = um.engine();
    [
        cache.get_or_create(device, &unpack_key, || Ok((um.unpack_source()?, unpack))),
        cache.get_or_create(device, &x_key, || Ok((um.x_source()?, x))),
        cache.get_or_create(device, &format!("{gemm_key} emulated"), || {
            let source = coop_emulation::emulate(&um.gemm_source()?, e.shape.size, e.subgroup_max);
            Ok((source, gemm))
        }),
    ]
    .map(Result::unwrap)
}

/// The unpacked matmul (weights and x decoded once into rows of the matrices' input
/// type, then multiplied from memory) against the CPU reference, over weights in three
/// bindings, for batches of 300, 64, 7 and 1 tokens through the same two scratch
/// buffers (each batch's last tile of tokens holds stale tokens of the one before),
/// outputs written into a wider y; the unpacking grids in rows of 9 workgroups, as a
/// matrix past the device's workgroups per dimension lays them out.
#[test]
fn every_unpacked_matmul_matches_its_cpu_reference() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let profile = device.profile().clone();
    // The unpacking grids laid out as the largest matrices' are: rows of 9 workgroups.
    let narrow_grid = DeviceProfile {
        max_workgroups_per_dim: 9,
        ..profile.clone()
    };
    let new_buffer = |what, bytes| {
        let b = device
            .create_buffer(what, bytes, BufferUse::Storage)
            .unwrap();
        brass::device::Slice::new(b, 0, bytes)
    };
    for engine in unpacked_engines(&device) {
        for kernel in quant_kernels() {
            let (ty, m, k) = (kernel.ty, 70, k_of(kernel.ty));
            let mut split = profile.clone();
            split.max_binding_bytes = 32 * ty.bytes_for(k).unwrap() + 8;
            let launch = matvec_launch(&split, ty, (m, k));
            assert_eq!(launch.parts().len(), 3, "{:?}", launch.parts());
            let um = UnpackedMatmul::of(&launch, engine).unwrap();
            let [unpack, unpack_x, gemm] = unpacked_pipelines(&device, &cache, &um);
            let w = random_blocks(ty, (m * k) as usize / ty.block_size(), m + k);
            let parts = launch.upload_weights(&device, "w", &w).unwrap();
            let wu = new_buffer("unpacked weights", um.weight_scratch_bytes());
            let xu = new_buffer("unpacked x", um.x_scratch_bytes(300));
            let mut list = CommandList::new();
            for d in um
                .unpack_dispatches(&narrow_grid, unpack, &parts, wu)
                .unwrap()
            {
                list.dispatch(d);
            }
            device.submit(&list).unwrap();
            let (y_first, y_stride) = (3, m + 5);
            for n_tokens in [300u64, 64, 7, 1] {
                let what = format!("{:?} {m} x {k}, {n_tokens} tokens", um.pipeline_keys());
                let mut rng = common::Rng::new(n_tokens + k);
                let x_q8: Vec<u8> = (0..n_tokens)
                    .flat_map(|_| quantize_x_q8(&rng.vec(k as usize)))
                    .collect();
                let per_token = um.x_bytes_per_token() as usize;
                let x_values: Vec<Vec<f32>> = x_q8
                    .chunks_exact(per_token)
                    .map(|q8| matmul::dequantize_x_q8_planes(q8, k as usize))
                    .collect();
                let mk = (m as usize, k as usize);
                let expected =
                    cpu_reference_f32x(ty, &w, mk, &x_values.concat(), n_tokens as usize).unwrap();
                let x = new_buffer("x", x_q8.len() as u64);
                device.upload(x.buffer, 0, &x_q8).unwrap();
                let y_len = (n_tokens * y_stride) as usize;
                let y = new_buffer("y", 4 * y_len as u64);
                device
                    .upload(y.buffer, 0, bytemuck::cast_slice(&vec![f32::NAN; y_len]))
                    .unwrap();
                let mut list = CommandList::new();
                let stride = per_token as u64;
                list.dispatch(
                    um.unpack_x_dispatch(&narrow_grid, unpack_x, x, stride, xu, n_tokens)
                        .unwrap(),
                );
                list.dispatch(
                    um.gemm_dispatch(gemm, (wu, xu), y, (y_first, y_stride), n_tokens)
                        .unwrap(),
                );
                device.submit(&list).unwrap();
                let out = read_f32(&device, y.buffer, 0, y_len).unwrap();
                for b in [x, y] {
                    device.destroy_buffer(b.buffer).unwrap();
                }
                let outputs = Outputs {
                    what: &what,
                    y: &out,
                    expected: &expected,
                    x_values: &x_values,
                    y_place: (y_first, y_stride),
                };
                outputs.assert_within(ty, &w, mk, |scale, _| coop_tol(scale));
            }
            for b in parts.iter().chain([&wu, &xu]) {
                device.destroy_buffer(b.buffer).unwrap();
            }
        }
        eprintln!("{engine:?}: ok");
    }
}

/// y = W x for the `n_tokens` tokens of `x_data` in the matmul's form: token t's
/// outputs at `t * y_stride + y_first`, every other element of y left NaN (so that a
/// stray write shows).
fn run_matmul(
    device: &dyn Device,
    cache: &PipelineCache,
    mm: &MatmulLaunch,
    parts: &[brass::device::Slice],
    x_data: &[u8],
    n_tokens: u64,
    y_at: (u64, u64),
) -> Vec<f32> {
    let pipeline = pipeline_of(device, cache, mm, None);
    run_matmul_on(device, pipeline, mm, parts, x_data, n_tokens, y_at)
}

/// [`run_matmul`] on `pipeline`.
fn run_matmul_on(
    device: &dyn Device,
    pipeline: PipelineId,
    mm: &MatmulLaunch,
    parts: &[brass::device::Slice],
    x_data: &[u8],
    n_tokens: u64,
    (y_first, y_stride): (u64, u64),
) -> Vec<f32> {
    let x_bytes = x_data.len() as u64;
    let xb = device
        .create_buffer("x", x_bytes, BufferUse::Storage)
        .unwrap();
    device.upload(xb, 0, x_data).unwrap();
    let y_len = n_tokens * y_stride;
    let yb = device
        .create_buffer("y", y_len * 4, BufferUse::Storage)
        .unwrap();
    device
        .upload(yb, 0, bytemuck::cast_slice(&vec![f32::NAN; y_len as usize]))
        .unwrap();
    let x = brass::device::Slice::new(xb, 0, x_bytes);
    let y = brass::device::Slice::new(yb, 0, y_len * 4);
    let stride = mm.x_bytes_per_token();
    // In K spans, a scratch of NaN: a span sum left unwritten would show.
    let scratch_bytes = mm.span_scratch_bytes(n_tokens);
    let scratch = (mm.engine().k_spans() > 1).then(|| {
        let b = device
            .create_buffer("spans", scratch_bytes, BufferUse::Storage)
            .unwrap();
        let nan = vec![f32::NAN; (scratch_bytes / 4) as usize];
        device.upload(b, 0, bytemuck::cast_slice(&nan)).unwrap();
        b
    });
    let spans = scratch.map(|b| SpanScratch {
        scratch: brass::device::Slice::new(b, 0, scratch_bytes),
        sum: matmul::span_sum_pipeline(device, &PipelineCache::new()).unwrap(),
    });
    if spans.is_some() {
        assert!(
            mm.dispatches(pipeline, parts, x, stride, y, (y_first, y_stride), n_tokens)
                .is_err(),
            "K spans without a scratch"
        );
    }
    let ds = mm.dispatches_with_spans(
        pipeline,
        parts,
        x,
        stride,
        y,
        (y_first, y_stride),
        n_tokens,
        spans,
    );
    let mut list = CommandList::new();
    ds.unwrap().into_iter().for_each(|d| list.dispatch(d));
    device.submit(&list).unwrap();
    let y = read_f32(device, yb, 0, y_len as usize).unwrap();
    device.destroy_buffer(xb).unwrap();
    device.destroy_buffer(yb).unwrap();
    if let Some(b) = scratch {
        device.destroy_buffer(b).unwrap();
    }
    y
}

/// The matmul's pipeline; on an adapter without cooperative matrices, a kernel on them
/// with its matrices emulated on subgroups (`coop_emulation`). `checks` creates it with
/// those index checks rather than its template's.
fn pipeline_of(
    device: &dyn Device,
    cache: &PipelineCache,
    mm: &MatmulLaunch,
    checks: Option<IndexChecks>,
) -> PipelineId {
    let emulated = match mm.engine() {
        MatmulEngine::CoopMatrix {
            shape,
            subgroup_max,
            ..
        }
        | MatmulEngine::CoopColumns {
            shape,
            subgroup_max,
            ..
        } if device.profile().coop_matrix.is_none() => Some((shape, subgroup_max)),
        _ => None,
    };
    if emulated.is_none() && checks.is_none() {
        return mm.pipeline(device, cache).unwrap();
    }
    let key = format!(
        "{}{}{}",
        mm.pipeline_key(),
        if emulated.is_some() { " emulated" } else { "" },
        checks.map_or(String::new(), |c| format!(" {c:?} checks"))
    );
    let template = PipelineTemplate {
        index_checks: checks.unwrap_or(mm.template().index_checks),
        ..mm.template()
    };
    cache
        .get_or_create(device, &key, || {
            let source = mm.source()?;
            Ok(match emulated {
                Some((shape, lanes)) => (
                    coop_emulation::emulate(&source, shape.size, lanes),
                    template,
                ),
                None => (source, template),
            })
        })
        .unwrap()
}

/// Engines on cooperative matrices to run emulated on the device under test, with its
/// subgroup size and the matrices the emulation takes there (8 x 8 up to 8 lanes, else
/// 16 x 16), operands in f32 (at 8 lanes, or without f16) and, where it has f16, in
/// f16: `make` builds each from (shape, lanes), and those that fit its workgroup
/// memory (`bytes`) are kept. The f16 engines stage four values a store (Vulkan's
/// vector loads), the f32 ones a value a store (Metal's scalar loads), so that both
/// stagings run. None where the adapter has matrix units (the real ones
/// run there) or subgroups this emulation does not take.
fn emulated_engines<E>(
    device: &dyn Device,
    make: impl Fn(CoopMatrix, u32) -> Vec<(E, u64)>,
) -> Vec<E> {
    let p = device.profile();
    let lanes = p.subgroup_max;
    if p.coop_matrix.is_some()
        || !p.subgroups
        || p.subgroup_min != lanes
        || !(4..=16).contains(&lanes)
    {
        eprintln!("no emulated matrices on {}", p.name);
        return Vec::new();
    }
    // Staging f32 or f16 operands shares every index and every lane's share of the
    // work, so f32 needs one subgroup size only: 8 lanes, or wherever there is no f16
    // (as for tests/attention.rs's emulated flash). At 4 and 16 lanes the f32 engines
    // were half of this file's two minutes on lavapipe.
    let mut inputs = Vec::new();
    if lanes == 8 || !p.f16 {
        inputs.push(CoopInput::F32);
    }
    if p.f16 {
        inputs.push(CoopInput::F16);
    }
    inputs
        .into_iter()
        .flat_map(|input| {
            let shape = CoopMatrix {
                size: lanes.max(8),
                input,
                vector_loads: input == CoopInput::F16,
            };
            make(shape, lanes)
        })
        .filter(|&(_, bytes)| bytes <= p.workgroup_storage_bytes as u64)
        .map(|(engine, _)| engine)
        .collect()
}

/// K per type: for the 32-weight types 160 (five groups: a partial K step), for the
/// K-quants 512 (two super-blocks).
fn k_of(ty: GgmlType) -> u64 {
    if ty.block_size() == 256 {
        512
    } else {
        160
    }
}

#[test]
fn every_matmul_matches_its_cpu_reference() {
    every_kernel_matches(false);
}

#[test]
fn every_coop_matrix_matmul_matches_its_cpu_reference() {
    every_kernel_matches(true);
}

fn every_kernel_matches(coop: bool) {
    let device = common::gpu();
    let cache = PipelineCache::new();
    for engine in engines(&device, coop) {
        every_kernel_matches_on(&device, &cache, engine);
    }
}

fn every_kernel_matches_on(device: &dyn Device, cache: &PipelineCache, engine: MatmulEngine) {
    for kernel in quant_kernels() {
        let (m, k) = (70, k_of(kernel.ty));
        let launch = matvec_launch(device.profile(), kernel.ty, (m, k));
        for n_tokens in TOKEN_COUNTS {
            let case = Case {
                ty: kernel.ty,
                m,
                k,
                n_tokens,
                y_first: 0,
                y_stride: m,
            };
            check(device, cache, &launch, engine, &case);
        }
        eprintln!("{} on {engine:?}: ok", kernel.name);
    }
}

/// Weights in three bindings (16, 16 and 13 rows), outputs at an offset inside a
/// wider row of y, as a stacked q, k, v matrix writes them.
#[test]
fn matmul_over_split_weights_writes_side_by_side() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let engines = [engines(&device, false), engines(&device, true)].concat();
    for (kernel, engine) in quant_kernels().zip(engines.iter().cycle()) {
        let (m, k) = (45, k_of(kernel.ty));
        let mut profile = device.profile().clone();
        profile.max_binding_bytes = 16 * kernel.ty.bytes_for(k).unwrap() + 8;
        let launch = matvec_launch(&profile, kernel.ty, (m, k));
        assert_eq!(launch.parts().len(), 3, "{:?}", launch.parts());
        let case = Case {
            ty: kernel.ty,
            m,
            k,
            n_tokens: 7,
            y_first: 5,
            y_stride: m + 12,
        };
        check(&device, &cache, &launch, *engine, &case);
    }
}

fn quant_kernels() -> impl Iterator<Item = &'static MatmulKernel> {
    MATMUL_KERNELS.iter().filter(|k| k.input == MatmulInput::Q8)
}

fn fma_kernels() -> impl Iterator<Item = &'static MatmulKernel> {
    MATMUL_KERNELS
        .iter()
        .filter(|k| k.input == MatmulInput::F32)
}

/// K for the fma kernels. F32 and F16: 96 (whole K steps), 100 (a partial step, rows
/// 4-byte aligned for F16) and, for F16, 33 (odd: every other row starts 2-byte
/// aligned, and its last weight shares a word with the next row's first). The quant
/// types' whole blocks are whole K steps: one block and several, so that Q8_0's,
/// Q4_0's, Q5_0's and Q6_K's odd-sized rows start 2-byte aligned every other row.
fn fma_ks(ty: GgmlType) -> &'static [u64] {
    match (ty, ty.block_size()) {
        (GgmlType::F16, _) => &[96, 100, 33],
        (_, 1) => &[96, 100],
        (_, 32) => &[32, 160],
        _ => &[256, 512],
    }
}

/// Every fma matmul over the weights of each of its type's coop and scalar matvecs (all
/// upload the GGUF rows), given the dot4 route's engine, which they do not take.
#[test]
fn every_fma_matmul_matches_its_cpu_reference() {
    let device = common::gpu();
    let routed = engines(&device, false)[0];
    let cache = PipelineCache::new();
    for kernel in fma_kernels() {
        for family in [Family::Coop, Family::Scalar] {
            for &k in fma_ks(kernel.ty) {
                let m = 70;
                let launch = matvec_launch_of(device.profile(), kernel.ty, family, (m, k));
                for n_tokens in TOKEN_COUNTS {
                    let case = Case {
                        ty: kernel.ty,
                        m,
                        k,
                        n_tokens,
                        y_first: 0,
                        y_stride: m,
                    };
                    check(&device, &cache, &launch, routed, &case);
                }
            }
            eprintln!("{} over {family:?} weights: ok", kernel.name);
        }
    }
}

/// The fma matmuls over weights in three bindings (16, 16 and 13 rows; with K = 33 an
/// F16 part is 1,056 bytes, with K = 256 a Q6_K one 3,360), writing side by side into
/// a wider y.
#[test]
fn fma_matmul_over_split_weights_writes_side_by_side() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let routed = engines(&device, false)[0];
    for kernel in fma_kernels() {
        let ty = kernel.ty;
        for &k in fma_ks(ty) {
            let m = 45;
            let mut profile = device.profile().clone();
            profile.max_binding_bytes = 16 * ty.bytes_for(k).unwrap() + 8;
            let launch = matvec_launch_of(&profile, ty, Family::Coop, (m, k));
            assert_eq!(launch.parts().len(), 3, "{:?}", launch.parts());
            for n_tokens in [7, 70] {
                let case = Case {
                    ty,
                    m,
                    k,
                    n_tokens,
                    y_first: 5,
                    y_stride: m + 12,
                };
                check(&device, &cache, &launch, routed, &case);
            }
        }
    }
}

/// Every matvec has a matmul reading its weights: a dot4 matvec its type's dot4 matmul
/// (Q8_0's and Q4_0's keep the GGUF rows too, and still get theirs), any other its
/// type's fma matmul, on the fma engine whatever was routed. A matvec whose layout no
/// matmul reads is refused with the reason, as is the fma engine for a dot4 matvec's
/// weights.
#[test]
fn matmuls_cover_every_matvec() {
    for kernel in matvec::MATVEC_KERNELS {
        let mm = matmul::for_matvec(kernel).unwrap_or_else(|| panic!("{}", kernel.name));
        let engine = match kernel.family {
            Family::Dot4 => "dot4",
            Family::Coop | Family::Scalar => "fma",
        };
        let stem = kernel.ty.name().to_lowercase();
        assert_eq!(
            mm.name,
            format!("matmul/{stem}_{engine}"),
            "{}",
            kernel.name
        );
        assert_eq!(mm.ty, kernel.ty);
    }
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let engines = [
        route_matmul_engine(&lavapipe, None).unwrap().engine(),
        route_matmul_engine(&h200, None).unwrap().engine(),
    ];
    for kernel in matvec::MATVEC_KERNELS
        .iter()
        .filter(|k| k.family != Family::Dot4)
    {
        let mv = MatvecLaunch::canonical(kernel, false);
        for engine in engines {
            let mm = MatmulLaunch::of(&mv, engine).unwrap();
            assert_eq!(mm.engine(), MatmulEngine::Fma);
            assert_eq!(mm.input(), MatmulInput::F32);
            assert_eq!(mm.x_bytes_per_token(), 4 * mv.k());
            assert_eq!(
                mm.pipeline_key(),
                format!("matmul/{}_fma k_step16", kernel.ty.name().to_lowercase())
            );
        }
    }
    // Q6_K's dot4 layout under a coop kernel: no matmul reads it.
    static BODIES_FIRST_COOP: MatvecKernel = MatvecKernel {
        ty: GgmlType::Q6_K,
        family: Family::Coop,
        name: "matvec/q6_k_coop",
        layout: Layout::BodiesFirst {
            body_start: 0,
            body_len: 208,
        },
    };
    let mv = MatvecLaunch::canonical(&BODIES_FIRST_COOP, false);
    let err = MatmulLaunch::of(&mv, engines[0]).unwrap_err().to_string();
    assert!(err.contains("no matmul kernel"), "{err}");
    let q4_dot4 =
        MatvecLaunch::canonical(matvec::find(GgmlType::Q4_K, Family::Dot4).unwrap(), false);
    let err = MatmulLaunch::of(&q4_dot4, MatmulEngine::Fma)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the fma engine reads GGUF rows"), "{err}");
}

/// A float matmul's x is f32 at any 4-byte stride (K = 33 values: 132 bytes), where
/// q8 x needs 16-byte strides.
#[test]
fn float_matmul_x_strides_are_4_byte_multiples() {
    let profile = DeviceProfile::preset("lavapipe").unwrap();
    let device = common::gpu();
    let mv = matvec_launch_of(&profile, GgmlType::F16, Family::Coop, (8, 33));
    let mm = MatmulLaunch::of(&mv, route_matmul_engine(&profile, None).unwrap().engine()).unwrap();
    let pipeline = mm.pipeline(&device, &PipelineCache::new()).unwrap();
    let w = brass::device::Slice::new(
        device.create_buffer("w", 1024, BufferUse::Storage).unwrap(),
        0,
        1024,
    );
    let xy = device
        .create_buffer("xy", 4096, BufferUse::Storage)
        .unwrap();
    let x = brass::device::Slice::new(xy, 0, 2048);
    let y = brass::device::Slice::new(xy, 2048, 2048);
    let ds = mm.dispatches(pipeline, &[w], x, 132, y, (0, 8), 3).unwrap();
    assert_eq!(ds[0].params[5], 33, "the stride in floats");
    assert!(mm.dispatches(pipeline, &[w], x, 130, y, (0, 8), 3).is_err());
    assert!(mm.dispatches(pipeline, &[w], x, 128, y, (0, 8), 3).is_err());
}

/// The matrix-unit matmuls (the prompts' tiles and the decode columns, on the adapter's
/// units or emulated ones) give the same bits created without wgpu's index clamps
/// (`IndexChecks::Kernel`, their route's) as with them: a kernel whose index left its
/// arrays would read what the clamp hides, and differ. Partial tiles of rows and tokens
/// at every kernel type: one token, part of a tile, and a whole tile and part of the
/// next (300 tokens, as before, took lavapipe 415 s of CI's 8-lane run, and as long
/// again at 4 and 16 lanes, for no index the tile and a part do not reach).
#[test]
fn matrix_unit_matmuls_give_the_same_bits_without_wgpu_clamps() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let engines: Vec<MatmulEngine> = engines(&device, true)
        .into_iter()
        .chain(columns_engines(&device))
        .collect();
    if engines.is_empty() {
        eprintln!(
            "no matrix units, real or emulated, on {}",
            device.profile().name
        );
        return;
    }
    for engine in engines {
        for kernel in quant_kernels() {
            let (m, k) = (70, k_of(kernel.ty));
            let launch = matvec_launch(device.profile(), kernel.ty, (m, k));
            let mm = MatmulLaunch::of(&launch, engine).unwrap();
            assert_eq!(mm.template().index_checks, IndexChecks::Kernel);
            let w = random_blocks(kernel.ty, (m * k) as usize / kernel.ty.block_size(), m + k);
            let parts = launch.upload_weights(&device, "w", &w).unwrap();
            for n_tokens in [1, 19, engine.token_tile() + 11] {
                let mut rng = common::Rng::new(n_tokens);
                let x: Vec<u8> = (0..n_tokens)
                    .flat_map(|_| quantize_x_q8(&rng.vec(k as usize)))
                    .collect();
                let [clamped, own] = [IndexChecks::Wgpu, IndexChecks::Kernel].map(|checks| {
                    let pipeline = pipeline_of(&device, &cache, &mm, Some(checks));
                    run_matmul_on(&device, pipeline, &mm, &parts, &x, n_tokens, (0, m))
                });
                assert!(clamped.iter().all(|v| v.is_finite()));
                assert_eq!(
                    bits(&clamped),
                    bits(&own),
                    "{} {n_tokens} tokens",
                    mm.pipeline_key()
                );
            }
            for p in &parts {
                device.destroy_buffer(p.buffer).unwrap();
            }
        }
        eprintln!("{engine:?}: the same bits");
    }
}
