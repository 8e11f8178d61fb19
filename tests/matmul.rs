//! Every matmul kernel against its CPU reference on the GPU under test (lavapipe in CI,
//! at subgroup sizes 4, 8 and 16 via LP_NATIVE_VECTOR_WIDTH): token counts 1, 2, 7, 64
//! and 300 (partial tiles of tokens), rows that leave a partial tile, K steps that
//! leave a partial step, weights split across bindings, and outputs written side by
//! side into a wider y. The cooperative-matrix kernels run the same cases
//! where the adapter has cooperative matrices (the H200 here; lavapipe has none, and
//! says so in the output), and are translated to SPIR-V and MSL by tests/spirv.rs.

mod common;

use brass::device::{read_f32, BufferUse, CommandList, Device, DeviceProfile};
use brass::kernels::matmul::{self, cpu_reference, MatmulEngine, MatmulLaunch, MATMUL_KERNELS};
use brass::kernels::matvec::{self, quantize_x_q8, Family, MatvecLaunch, Q8_GROUP_BYTES};
use brass::kernels::PipelineCache;
use brass::quant::{dequantize, random_blocks, GgmlType};
use brass::router::{route_matvec, Force, MatvecQuery, Overrides, XInput};

const TOKEN_COUNTS: [u64; 5] = [1, 2, 7, 64, 300];

/// The dot4 matvec launch of `ty` for M x K on `profile`, whose weights the matmul reads.
fn matvec_launch(profile: &DeviceProfile, ty: GgmlType, (m, k): (u64, u64)) -> MatvecLaunch {
    let kernel = matvec::find(ty, Family::Dot4).unwrap();
    let query = MatvecQuery {
        ty,
        m,
        k,
        x: XInput::F32,
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

struct Case {
    ty: GgmlType,
    m: u64,
    k: u64,
    n_tokens: u64,
    /// Where the outputs go in each token's row of y, and that row's length.
    y_first: u64,
    y_stride: u64,
}

/// The engine `coop` asks for on the device under test, or None (with a note) where it
/// has no cooperative matrices.
fn engine(device: &dyn Device, coop: bool) -> Option<MatmulEngine> {
    match MatmulEngine::route(device.profile(), Some(coop)) {
        Ok((engine, _)) => Some(engine),
        Err(e) if coop => {
            eprintln!(
                "cooperative-matrix matmuls not run on {}: {e}",
                device.profile().name
            );
            None
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
    let x_q8: Vec<u8> = xs.iter().flat_map(|x| quantize_x_q8(x)).collect();
    let expected = cpu_reference(ty, &w, (m as usize, k as usize), &x_q8, n_tokens as usize)
        .unwrap_or_else(|e| panic!("{what}: {e}"));

    let parts = launch.upload_weights(device, "w", &w).unwrap();
    let x_bytes = x_q8.len() as u64;
    let xb = device
        .create_buffer("x", x_bytes, BufferUse::Storage)
        .unwrap();
    device.upload(xb, 0, &x_q8).unwrap();
    let y_len = n_tokens * y_stride;
    let yb = device
        .create_buffer("y", y_len * 4, BufferUse::Storage)
        .unwrap();
    let sentinel = f32::NAN;
    device
        .upload(yb, 0, bytemuck::cast_slice(&vec![sentinel; y_len as usize]))
        .unwrap();
    let pipeline = mm.pipeline(device, cache).unwrap();
    let mut list = CommandList::new();
    for d in mm
        .dispatches(
            pipeline,
            &parts,
            brass::device::Slice::new(xb, 0, x_bytes),
            mm.x_bytes_per_token(),
            brass::device::Slice::new(yb, 0, y_len * 4),
            (y_first, y_stride),
            n_tokens,
        )
        .unwrap()
    {
        list.dispatch(d);
    }
    device.submit(&list).unwrap();
    let y = read_f32(device, yb, 0, y_len as usize).unwrap();
    for p in &parts {
        device.destroy_buffer(p.buffer).unwrap();
    }
    device.destroy_buffer(xb).unwrap();
    device.destroy_buffer(yb).unwrap();

    let x_bytes_per_token = (k / 32 * Q8_GROUP_BYTES) as usize;
    for t in 0..n_tokens as usize {
        let x = matmul::dequantize_x_q8(
            &x_q8[t * x_bytes_per_token..][..x_bytes_per_token],
            k as usize,
        );
        let scale = magnitudes(ty, &w, (m as usize, k as usize), &x);
        let row = &y[t * y_stride as usize..][..y_stride as usize];
        for (i, &v) in row.iter().enumerate() {
            let r = i as i64 - y_first as i64;
            if r < 0 || r >= m as i64 {
                assert!(
                    v.is_nan(),
                    "{what}: token {t} element {i} outside the outputs was written"
                );
                continue;
            }
            let (r, want) = (r as usize, expected[t][r as usize]);
            let tol = match engine {
                // The kernel's integer sums are exact; what remains is f32 rounding of
                // the scaled group sums, a few ulps of the terms' magnitude per group.
                MatmulEngine::Dot4 { .. } => 1e-5 * scale[r] + 1e-6,
                // Weights and x are rounded to f16 (2^-11 each) before they multiply:
                // at most 2^-10 of each product's magnitude, plus f32 accumulation.
                MatmulEngine::CoopMatrix { .. } => 2f64.powi(-10) * scale[r] + 1e-5,
            };
            assert!(
                (v as f64 - want as f64).abs() <= tol,
                "{what}: token {t} row {r}: {v}, reference {want} (tol {tol:.2e})"
            );
        }
    }
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
    let Some(engine) = engine(&device, coop) else {
        return;
    };
    let cache = PipelineCache::new();
    for kernel in MATMUL_KERNELS {
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
            check(&device, &cache, &launch, engine, &case);
        }
        eprintln!("{}: ok", kernel.name);
    }
}

/// Weights in three bindings (16, 16 and 13 rows), outputs at an offset inside a
/// wider row of y, as a stacked q, k, v matrix writes them.
#[test]
fn matmul_over_split_weights_writes_side_by_side() {
    let device = common::gpu();
    let cache = PipelineCache::new();
    let engines = [engine(&device, false), engine(&device, true)];
    for (kernel, engine) in MATMUL_KERNELS.iter().zip(engines.iter().flatten().cycle()) {
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

/// The router's clause: cooperative matrices where the adapter has them and a batch
/// fills the device with their tiles, dot4 otherwise or when asked; asked for where
/// there are none, a clear refusal.
#[test]
fn matmuls_take_cooperative_matrices_where_they_fill_the_device() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let (coop, why) = MatmulEngine::route(&h200, None).unwrap();
    assert!(matches!(coop, MatmulEngine::CoopMatrix { .. }), "{coop:?}");
    assert!(why.contains("cooperative matrices"), "{why}");
    // 4,096 rows at 512 tokens: 32 x 4 tiles of 128; 1,024 rows: 8 x 4.
    assert_eq!(coop.for_matrix(&h200, 4096, 512).unwrap(), coop);
    assert!(matches!(
        coop.for_matrix(&h200, 1024, 512).unwrap(),
        MatmulEngine::Dot4 { .. }
    ));
    let (off, why) = MatmulEngine::route(&h200, Some(false)).unwrap();
    assert!(matches!(off, MatmulEngine::Dot4 { k_groups: 4 }), "{off:?}");
    assert!(why.contains("off, as asked"), "{why}");

    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let (dot4, why) = MatmulEngine::route(&lavapipe, None).unwrap();
    assert!(matches!(dot4, MatmulEngine::Dot4 { .. }), "{dot4:?}");
    assert!(why.contains("no cooperative matrix"), "{why}");
    let err = MatmulEngine::route(&lavapipe, Some(true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cooperative matrices asked for"), "{err}");
}

/// Every quant type with a dot4 matvec has a matmul reading its weights, and the
/// float types, which have none, are refused with the reason.
#[test]
fn matmuls_cover_the_dot4_matvecs() {
    for kernel in matvec::MATVEC_KERNELS
        .iter()
        .filter(|k| k.family == Family::Dot4)
    {
        let mm = matmul::for_matvec(kernel).unwrap_or_else(|| panic!("{}", kernel.name));
        assert_eq!(mm.ty, kernel.ty);
    }
    let profile = DeviceProfile::preset("lavapipe").unwrap();
    let coop =
        matvec::MatvecLaunch::canonical(matvec::find(GgmlType::F16, Family::Coop).unwrap(), false);
    let (dot4, _) = MatmulEngine::route(&profile, None).unwrap();
    let err = MatmulLaunch::of(&coop, dot4).unwrap_err().to_string();
    assert!(err.contains("dot4"), "{err}");
}
