//! Quantize → dequantize round trips, judged by ggml's own yardsticks.
//!
//! `ggml_test_signal` reproduces ggml's `tests/test-quantize-fns.cpp`: 4096 values of
//! `0.1 + 2*cosf(i)`, and its "total quantization error", which is
//! `sqrt(Σ (x - x')²) / n` (ggml's `array_rmse`; note: *not* the MSE, and not an RMSE
//! either, since the root is taken before dividing by n), checked against its
//! thresholds. Run with `--nocapture` to see the per-type table.
//!
//! The other tests use seeded random data of several shapes (gaussian, heavy outliers,
//! zero and constant blocks, small and huge magnitudes). Their bounds on the relative
//! RMSE are ggml's own error: on exactly these data (and the cos signal) brass's
//! quantizers produce blocks byte-identical to ggml's `quantize_row_*_ref` built
//! without FMA contraction (checked with a C harness around ggml-quants.c, outside this
//! repository), so the error measured here is the error ggml's reference makes; each
//! bound is that error with about 10 % headroom.

use brass::quant::{dequantize_row, quantize, GgmlType};

/// Types with a quantizer, and ggml's threshold for its total error on the cos signal.
/// All of them fall under `MAX_QUANTIZATION_TOTAL_ERROR`; ggml's looser 2- and 3-bit
/// thresholds (0.0075 for Q2_K, 0.0040 for Q3_K) apply to types brass does not
/// quantize.
const MAX_QUANTIZATION_TOTAL_ERROR: f64 = 0.002;
const TYPES: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q6_K,
    GgmlType::Q5_1,
    GgmlType::Q5_0,
    GgmlType::Q5_K,
    GgmlType::Q4_1,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
];

/// ggml's `generate_data`: `0.1 + amplitude*cosf(i + offset)`, the sum done in double
/// (the literal 0.1 is a double) and stored as float.
fn ggml_test_signal(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + f64::from(2.0 * (i as f32 + offset).cos())) as f32)
        .collect()
}

/// ggml's `array_rmse`: sqrt of the sum of squared differences, divided by n.
fn ggml_total_error(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    sum.sqrt() / a.len() as f64
}

fn mse(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len() as f64
}

fn rms(a: &[f32]) -> f64 {
    (a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / a.len() as f64).sqrt()
}

/// RMSE relative to the data's RMS.
fn relative_rmse(x: &[f32], y: &[f32]) -> f64 {
    mse(x, y).sqrt() / rms(x)
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let bytes = quantize(ty, x).unwrap();
    assert_eq!(
        bytes.len() as u64,
        ty.bytes_for(x.len() as u64).unwrap(),
        "{ty}"
    );
    dequantize_row(ty, &bytes).unwrap()
}

/// xorshift64: a fixed-seed source of test data, no dependency needed.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly standard normal: a centred sum of four uniforms, scaled to variance 1.
    fn gaussian(&mut self) -> f32 {
        ((0..4).map(|_| self.uniform()).sum::<f32>() - 2.0) * 3f32.sqrt()
    }
}

/// Named test distributions, each a whole number of 256-value super-blocks.
fn distributions() -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let n = 64 * 256;
    let mut gen = |f: &mut dyn FnMut(&mut Rng, usize) -> f32| -> Vec<f32> {
        (0..n).map(|i| f(&mut rng, i)).collect()
    };
    vec![
        ("gaussian", gen(&mut |r, _| r.gaussian())),
        // 1 % of values 50× larger than the rest, as in real weights' outlier channels.
        (
            "outliers",
            gen(&mut |r, _| {
                let g = r.gaussian();
                if r.uniform() < 0.01 {
                    50.0 * g
                } else {
                    g
                }
            }),
        ),
        // Every other 256-block all zeros, the rest small gaussian weights.
        (
            "zero blocks",
            gen(&mut |r, i| {
                if (i / 256) % 2 == 0 {
                    0.0
                } else {
                    0.02 * r.gaussian()
                }
            }),
        ),
        ("relu-like", gen(&mut |r, _| r.gaussian().max(0.0))),
        ("small (1e-3)", gen(&mut |r, _| 1e-3 * r.gaussian())),
        ("huge (1e3)", gen(&mut |r, _| 1e3 * r.gaussian())),
    ]
}

/// ggml's relative RMSE on the distributions above, plus headroom (see the file's doc):
/// the worst over the well-behaved ones, and the one with outliers, which stretch the
/// block scales.
fn relative_rmse_bound(ty: GgmlType, dist: &str) -> f64 {
    use GgmlType::*;
    let (typical, outliers) = match ty {
        F32 => (0.0, 0.0),
        F16 => (2.5e-4, 2.5e-4),
        BF16 => (1.9e-3, 1.9e-3),
        Q8_0 => (5.6e-3, 1.3e-2),
        Q6_K => (2.25e-2, 3.7e-2),
        Q5_1 => (4.1e-2, 6.0e-2),
        Q5_K => (3.9e-2, 5.5e-2),
        Q5_0 => (4.5e-2, 8.0e-2),
        Q4_1 => (8.5e-2, 1.35e-1),
        Q4_K => (7.7e-2, 8.6e-2),
        Q4_0 => (9.1e-2, 1.0e-1),
        _ => unreachable!("{ty} has no quantizer"),
    };
    if dist == "outliers" {
        outliers
    } else {
        typical
    }
}

#[test]
fn ggml_quantize_fns_thresholds() {
    let x = ggml_test_signal(0.0, 32 * 128);
    println!();
    println!("ggml test-quantize-fns signal (4096 × 0.1 + 2cos(i)):");
    println!("type  | ggml total error | threshold | MSE       | relative RMSE");
    println!("------|------------------|-----------|-----------|--------------");
    let mut failures = Vec::new();
    for ty in TYPES {
        let y = round_trip(ty, &x);
        let total = ggml_total_error(&x, &y);
        println!(
            "{:<5} | {total:<16.7} | {MAX_QUANTIZATION_TOTAL_ERROR:<9} | {:<9.3e} | {:.3e}",
            ty.name(),
            mse(&x, &y),
            relative_rmse(&x, &y)
        );
        // Written as ggml writes it, so a NaN error fails too.
        let ok = total < MAX_QUANTIZATION_TOTAL_ERROR;
        if !ok {
            failures.push(format!("{ty}: {total} ≥ {MAX_QUANTIZATION_TOTAL_ERROR}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn relative_error_on_random_data() {
    let dists = distributions();
    println!();
    println!("relative RMSE (RMSE / RMS of the data):");
    print!("{:<5}", "type");
    for (name, _) in &dists {
        print!(" | {name:<11}");
    }
    println!();
    let mut failures = Vec::new();
    for ty in TYPES {
        print!("{:<5}", ty.name());
        for (name, x) in &dists {
            let y = round_trip(ty, x);
            assert!(
                y.iter().all(|v| v.is_finite()),
                "{ty} on {name}: non-finite output"
            );
            let err = relative_rmse(x, &y);
            print!(" | {err:<11.3e}");
            let bound = relative_rmse_bound(ty, name);
            if err > bound {
                failures.push(format!("{ty} on {name}: {err:.4e} > {bound:.4e}"));
            }
        }
        println!();
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn zero_and_constant_blocks() {
    for ty in TYPES {
        let n = ty.block_size().max(256);
        let zeros = round_trip(ty, &vec![0.0; n]);
        assert!(
            zeros.iter().all(|&v| v == 0.0),
            "{ty}: zeros must stay zeros"
        );

        // A constant block has no spread for the scale to capture; its value must still
        // come back to within the precision of an f16 scale (2^-11 relative) — or, for
        // bf16, 2^-8.
        for c in [0.37f32, -1.5, 20.0] {
            let y = round_trip(ty, &vec![c; n]);
            let tolerance = if ty == GgmlType::BF16 { 4e-3 } else { 1e-3 };
            for v in y {
                assert!(
                    (v - c).abs() <= tolerance * c.abs(),
                    "{ty}: constant {c} came back as {v}"
                );
            }
        }
    }
}

/// Weights so small that the block scale falls below f16's normal range (about 6e-5)
/// lose precision, and below its smallest subnormal (6e-8) vanish: that is ggml's
/// format, not a bug. The affine K-quants (Q4_K, Q5_K) even overshoot there, because
/// `d` and `dmin` round to subnormals independently (ggml's reference does exactly the
/// same). This pins the part that must hold: finite output, and no amplification from
/// the formats that store a single scale.
#[test]
fn scales_below_the_f16_range() {
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..16 * 256).map(|_| 1e-6 * rng.gaussian()).collect();
    println!();
    println!("data of RMS 1e-6 (block scales below f16's normal range):");
    for ty in TYPES {
        let y = round_trip(ty, &x);
        let err = relative_rmse(&x, &y);
        println!("{:<5} relative RMSE {err:.3e}", ty.name());
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        if !matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
            assert!(err <= 1.0, "{ty}: {err}");
        }
    }
}

/// Re-quantizing dequantized data gives back the very same blocks for the formats with
/// one scale (and a minimum) per block: the largest value lands exactly on an end
/// code, so the re-derived scale is the stored f16 scale again, and every value sits
/// exactly on a level. K-quants search over scales and refit their sub-block scales
/// against a 6-bit grid, so they only promise that a second pass adds little error.
#[test]
fn requantizing_dequantized_data_is_stable() {
    use GgmlType::*;
    for (name, x) in distributions() {
        for ty in [F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1] {
            let q1 = quantize(ty, &x).unwrap();
            let y1 = dequantize_row(ty, &q1).unwrap();
            let q2 = quantize(ty, &y1).unwrap();
            assert!(q1 == q2, "{ty} on {name}: re-quantizing changed the blocks");
            let y2 = dequantize_row(ty, &q2).unwrap();
            assert!(y1.iter().zip(&y2).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        for ty in [Q4_K, Q5_K, Q6_K] {
            let y1 = round_trip(ty, &x);
            let y2 = round_trip(ty, &y1);
            let first = mse(&x, &y1);
            let second = mse(&y1, &y2);
            assert!(
                second <= 0.5 * first,
                "{ty} on {name}: second pass error {second:.3e} vs first {first:.3e}"
            );
        }
    }
}

#[test]
fn partial_blocks_and_unsupported_types_are_errors() {
    for ty in TYPES {
        let bs = ty.block_size();
        if bs > 1 {
            assert!(quantize(ty, &vec![1.0; bs + 1]).is_err(), "{ty}");
        }
        assert!(quantize(ty, &[]).is_ok_and(|b| b.is_empty()), "{ty}");
    }
    for ty in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q8_1,
        GgmlType::IQ4_NL,
    ] {
        assert!(quantize(ty, &vec![1.0; 256]).is_err(), "{ty}");
    }
}
