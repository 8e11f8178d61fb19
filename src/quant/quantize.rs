//! CPU quantizers following ggml's reference algorithms (`quantize_row_*_ref`).
//!
//! They exist to write synthetic GGUF models and to make weights for kernel tests, so
//! they favour matching ggml's choices (which scale, which rounding) over speed.
//!
//! Arithmetic is f32 in ggml's order of operations, non-fused, as a portable (no FMA
//! contraction) C build of ggml computes it. On the test data (random gaussians,
//! outliers, zero/constant/sparse blocks, magnitudes from 1e-6 to 1e3) every block came
//! out byte-identical to ggml's `quantize_row_*_ref` built that way. A build with FMA
//! contraction (`-march=native`) picks different K-quant scales in about a tenth of
//! the blocks, since their scale search compares near-equal errors. The one place that
//! may differ from the non-fused build, in rare near-ties (none in the test data), is
//! Q4_0/Q5_0's rounding, which follows gguf-py (see `round_scaled`).

use bytemuck::bytes_of;
use half::f16;
use std::array::from_fn;

use super::blocks::{
    pack_scale_min_k4, scale_min_k4, Block, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0,
    BlockQ5_1, BlockQ6K, BlockQ8_0, QK32,
};
use super::{GgmlType, QK_K};
use crate::{Error, Result};

/// Quantizes `src` to `ty`, returning the raw block bytes as they would sit in a GGUF
/// tensor.
///
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. Other
/// types, and a `src` whose length is not a whole number of blocks, are errors.
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>> {
    use GgmlType::*;
    if !can_quantize(ty) {
        return Err(Error::UnsupportedType(format!(
            "quantizing to {ty} is not implemented"
        )));
    }
    let block_elems = ty.block_size();
    if !src.len().is_multiple_of(block_elems) {
        return Err(Error::Quant(format!(
            "{ty}: {} values is not a whole number of {block_elems}-value blocks",
            src.len()
        )));
    }
    Ok(match ty {
        F32 => src.iter().flat_map(|v| v.to_le_bytes()).collect(),
        F16 => src
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        BF16 => src
            .iter()
            .flat_map(|&v| f32_to_bf16(v).to_le_bytes())
            .collect(),
        Q4_0 => per_block(src, BlockQ4_0::quantize),
        Q4_1 => per_block(src, BlockQ4_1::quantize),
        Q5_0 => per_block(src, BlockQ5_0::quantize),
        Q5_1 => per_block(src, BlockQ5_1::quantize),
        Q8_0 => per_block(src, BlockQ8_0::quantize),
        Q4_K => per_block(src, BlockQ4K::quantize),
        Q5_K => per_block(src, BlockQ5K::quantize),
        Q6_K => per_block(src, BlockQ6K::quantize),
        _ => unreachable!("can_quantize({ty}) is true but no quantizer is wired up"),
    })
}

/// Whether [`quantize`] handles `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K | Q6_K
    )
}

fn per_block<B: Block, const N: usize>(src: &[f32], quant: impl Fn(&[f32; N]) -> B) -> Vec<u8> {
    const { assert!(B::ELEMS == N) };
    let mut out = Vec::with_capacity(src.len() / N * size_of::<B>());
    for chunk in src.chunks_exact(N) {
        let chunk: &[f32; N] = chunk.try_into().expect("chunks_exact yields N values");
        out.extend_from_slice(bytes_of(&quant(chunk)));
    }
    out
}

/// f32 → bf16 as ggml does it: round to nearest even, NaNs forced quiet (a plain
/// truncation could turn a NaN with only low payload bits into infinity).
fn f32_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if bits & 0x7FFF_FFFF > 0x7F80_0000 {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16
}

/// ggml's `nearest_int`: round half to even (its float trick is exact for
/// |x| < 2^22, far beyond any quant range).
#[inline]
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// `trunc(x * id + offset)` for Q4_0/Q5_0, computed as gguf-py does.
///
/// ggml's C writes `(int8_t)(x*id + 8.5f)`, whose result depends on whether the compiler
/// fused the multiply-add (gguf-py calls this rounding "cursed"). gguf-py forms the
/// product exactly in f64, adds the offset there and rounds to f32 before truncating:
/// in effect a fused f32 multiply-add. Doing the same keeps files written by brass and
/// by gguf-py identical, whatever the host's FMA support.
#[inline]
fn round_scaled(x: f32, id: f32, offset: f64) -> i32 {
    ((f64::from(x) * f64::from(id) + offset) as f32) as i32
}

/// ggml's threshold under which a group of weights counts as all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The value of largest magnitude, sign kept; the first one wins a tie, as in ggml.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Smallest and largest value, starting from ±f32::MAX as ggml does.
fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    })
}

fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Packs 32 quants of up to 5 bits: low nibbles pair weight `j` with `j + 16` in one
/// byte, and bit 4 of weight `j` becomes bit `j` of the little-endian `qh` word.
fn pack_q5(q: &[u8; QK32]) -> ([u8; 4], [u8; QK32 / 2]) {
    let qs = from_fn(|j| (q[j] & 0x0F) | ((q[j + QK32 / 2] & 0x0F) << 4));
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >> 4) & 1) << j);
    (qh.to_le_bytes(), qs)
}

impl BlockQ8_0 {
    /// Symmetric 8-bit: `d = absmax / 127`, `q = round(x / d)` (half away from zero).
    pub fn quantize(x: &[f32; QK32]) -> Self {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse_or_zero(d);
        Self {
            d: f16::from_f32(d),
            qs: from_fn(|j| (x[j] * id).round() as i8),
        }
    }
}

impl BlockQ4_0 {
    /// Symmetric 4-bit: the largest-magnitude value maps exactly to quant 0 (`-8 * d`),
    /// which is why `d` carries its sign.
    pub fn quantize(x: &[f32; QK32]) -> Self {
        let d = signed_absmax(x) / -8.0;
        let id = inverse_or_zero(d);
        let q: [u8; QK32] = from_fn(|j| round_scaled(x[j], id, 8.5).clamp(0, 15) as u8);
        Self {
            d: f16::from_f32(d),
            qs: from_fn(|j| q[j] | (q[j + QK32 / 2] << 4)),
        }
    }
}

impl BlockQ5_0 {
    /// Symmetric 5-bit, as Q4_0 with 32 levels.
    pub fn quantize(x: &[f32; QK32]) -> Self {
        let d = signed_absmax(x) / -16.0;
        let id = inverse_or_zero(d);
        let q: [u8; QK32] = from_fn(|j| round_scaled(x[j], id, 16.5).clamp(0, 31) as u8);
        let (qh, qs) = pack_q5(&q);
        Self {
            d: f16::from_f32(d),
            qh,
            qs,
        }
    }
}

impl BlockQ4_1 {
    /// Affine 4-bit: `min` maps to 0 and `max` to 15.
    pub fn quantize(x: &[f32; QK32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse_or_zero(d);
        let q: [u8; QK32] = from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(15));
        Self {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs: from_fn(|j| q[j] | (q[j + QK32 / 2] << 4)),
        }
    }
}

impl BlockQ5_1 {
    /// Affine 5-bit: `min` maps to 0 and `max` to 31.
    pub fn quantize(x: &[f32; QK32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse_or_zero(d);
        let q: [u8; QK32] = from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(31));
        let (qh, qs) = pack_q5(&q);
        Self {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh,
            qs,
        }
    }
}

/// Affine quantization of one sub-block to `0..=nmax` with weighted least squares
/// (ggml's `make_qkx2_quants`, squared error): returns `(scale, min)` with `x ≈ scale * L
/// - min`, `min >= 0`, and fills `l`.
///
/// It starts from the plain min/max mapping, then tries `nstep + 1` stretched grids
/// (`nmax + rmin + rdelta * step` levels over the range); for each it solves the 2×2
/// weighted least-squares problem for the best scale and offset of those levels, and
/// keeps whichever has the lowest weighted error. The offset is capped at zero so the
/// block's minimum stays representable as an unsigned `min`.
fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: u8,
    l: &mut [u8],
    (rmin, rdelta, nstep): (f32, f32, u32),
) -> (f32, f32) {
    let n = x.len();
    let nmax_f = f32::from(nmax);
    let clamp_level = |v: i32| v.clamp(0, i32::from(nmax)) as u8;

    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }

    let weighted_error = |scale: f32, min: f32, l: &[u8]| {
        let mut err = 0.0f32;
        for i in 0..n {
            let diff = scale * f32::from(l[i]) + min - x[i];
            err += weights[i] * (diff * diff);
        }
        err
    };

    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    for i in 0..n {
        l[i] = clamp_level(nearest_int(iscale * (x[i] - min)));
    }
    let mut best_error = weighted_error(scale, min, l);

    // Sub-blocks are 32 weights in every K-quant that uses this.
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for step in 0..=nstep {
        let iscale = (rmin + rdelta * step as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let level = clamp_level(nearest_int(iscale * (x[i] - min)));
            aux[i] = level;
            let wl = weights[i] * f32::from(level);
            sum_l += wl;
            sum_l2 += wl * f32::from(level);
            sum_xl += wl * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let err = weighted_error(this_scale, this_min, aux);
            if err < best_error {
                l.copy_from_slice(aux);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Symmetric quantization of one sub-block to `-nmax..nmax` weighted by `x²` (ggml's
/// `make_qx_quants` with `rmse_type = 1`): returns the scale and fills `l` with the
/// quants biased by `nmax`.
///
/// Tries 19 grids around `nmax` levels for the largest-magnitude value and keeps the
/// one whose least-squares scale explains the most weighted energy.
fn make_qx_quants(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let max = signed_absmax(x);
    if max.abs() < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // (Σ w·x·l, Σ w·l²) with w = x², accumulated in ggml's order.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let fill = |l: &mut [u8], iscale: f32| {
        for (l, &v) in l.iter_mut().zip(x) {
            *l = (level(iscale, v) + nmax) as u8;
        }
    };

    let iscale = -(nmax as f32) / max;
    fill(l, iscale);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(l, iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The fields Q4_K and Q5_K share, with the quants still unpacked (one per weight).
struct KAffine {
    d: f16,
    dmin: f16,
    scales: [u8; 12],
    levels: [u8; QK_K],
}

/// Q4_K/Q5_K share everything but the quant width and the search grid: per 32-weight
/// sub-block an affine fit (weighted towards large values and the block's RMS), then
/// the eight scales and minimums quantized to 6 bits against their maxima, and finally
/// every weight re-quantized against the scales as they will be decoded.
fn quantize_k_affine(x: &[f32; QK_K], nmax: u8, grid: (f32, f32, u32)) -> KAffine {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let x = &x[32 * j..32 * j + 32];
        let sum_x2 = x.iter().fold(0.0f32, |s, &v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = from_fn(|i| av_x + x[i].abs());
        let l = &mut levels[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(x, &weights, nmax, l, grid);
        // Plain comparisons rather than f32::max, to treat NaN and -0.0 as ggml does.
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inverse = |max: f32| if max > 0.0 { 63.0 / max } else { 0.0 };
    let (inv_scale, inv_min) = (inverse(max_scale), inverse(max_min));
    // `as u8` wraps a (never expected) negative value exactly as ggml's uint8_t store.
    let six_bits = |v: f32| (nearest_int(v) as u8).min(63);
    let ls: [u8; 8] = from_fn(|j| six_bits(inv_scale * scales[j]));
    let lm: [u8; 8] = from_fn(|j| six_bits(inv_min * mins[j]));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);

    // Re-quantize against the scales as the decoder will see them (6-bit, f16).
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let d = d.to_f32() * f32::from(sc);
        if d == 0.0 {
            // Keep the sub-block fit's levels; they decode to -dm whatever they are.
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        let x = &x[32 * j..32 * j + 32];
        for (l, &v) in levels[32 * j..32 * j + 32].iter_mut().zip(x) {
            *l = nearest_int((v + dm) / d).clamp(0, i32::from(nmax)) as u8;
        }
    }
    KAffine {
        d,
        dmin,
        scales: packed,
        levels,
    }
}

impl BlockQ4K {
    /// ggml's `quantize_row_q4_K_ref`.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let k = quantize_k_affine(x, 15, (-1.0, 0.1, 20));
        // Each 64-weight slab: weights 0..32 in the low nibbles, 32..64 in the high.
        let qs = from_fn(|i| {
            let (slab, l) = (i / 32, i % 32);
            k.levels[64 * slab + l] | (k.levels[64 * slab + 32 + l] << 4)
        });
        Self {
            d: k.d,
            dmin: k.dmin,
            scales: k.scales,
            qs,
        }
    }
}

impl BlockQ5K {
    /// ggml's `quantize_row_q5_K_ref`.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let k = quantize_k_affine(x, 31, (-0.5, 0.1, 15));
        let qs = from_fn(|i| {
            let (slab, l) = (i / 32, i % 32);
            (k.levels[64 * slab + l] & 0x0F) | ((k.levels[64 * slab + 32 + l] & 0x0F) << 4)
        });
        // Run `r` of 32 weights keeps its fifth bits in bit `r` of qh[0..32].
        let qh =
            from_fn(|l| (0..8).fold(0u8, |acc, run| acc | ((k.levels[32 * run + l] >> 4) << run)));
        Self {
            d: k.d,
            dmin: k.dmin,
            scales: k.scales,
            qh,
            qs,
        }
    }
}

impl BlockQ6K {
    /// ggml's `quantize_row_q6_K_ref`: a symmetric fit per 16-weight sub-block, the 16
    /// scales quantized to signed 8 bits against the largest, then every weight
    /// re-quantized against the decoded scales.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let l = &mut levels[16 * ib..16 * ib + 16];
            scales[ib] = make_qx_quants(&x[16 * ib..16 * ib + 16], 32, l);
            if scales[ib].abs() > max_abs_scale {
                max_abs_scale = scales[ib].abs();
                max_scale = scales[ib];
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            return bytemuck::Zeroable::zeroed();
        }

        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        let qscales: [i8; 16] = from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
        // Re-quantize against the scales as the decoder will see them.
        for j in 0..16 {
            let d = d.to_f32() * f32::from(qscales[j]);
            if d == 0.0 {
                // Keep the sub-block fit's levels; they decode to 0 whatever they are.
                continue;
            }
            let x = &x[16 * j..16 * j + 16];
            for (l, &v) in levels[16 * j..16 * j + 16].iter_mut().zip(x) {
                *l = (nearest_int(v / d).clamp(-32, 31) + 32) as u8;
            }
        }

        // Per 128-weight half: runs 0,1 go to the low nibbles of ql[0..32], ql[32..64],
        // runs 2,3 to their high nibbles; each run's top 2 bits to bits 2r of qh.
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for half in 0..2 {
            let lv = &levels[128 * half..128 * half + 128];
            for l in 0..32 {
                ql[64 * half + l] = (lv[l] & 0x0F) | ((lv[l + 64] & 0x0F) << 4);
                ql[64 * half + 32 + l] = (lv[l + 32] & 0x0F) | ((lv[l + 96] & 0x0F) << 4);
                qh[32 * half + l] =
                    (0..4).fold(0u8, |acc, run| acc | ((lv[l + 32 * run] >> 4) << (2 * run)));
            }
        }
        Self {
            ql,
            qh,
            scales: qscales,
            d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(
            [0.5, 1.5, 2.5, -0.5, -1.5].map(nearest_int),
            [0, 2, 2, 0, -2]
        );
    }

    #[test]
    fn bf16_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8000)), 0x3F80); // tie → even
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F81_8000)), 0x3F82); // tie → even
        assert_eq!(f32_to_bf16(f32::from_bits(0x7F80_0001)) & 0x7FC0, 0x7FC0); // NaN stays NaN
    }

    #[test]
    fn rejects_partial_blocks_and_unsupported_types() {
        assert!(quantize(GgmlType::Q4_K, &[0.0; 255]).is_err());
        assert!(quantize(GgmlType::Q2_K, &[0.0; 256]).is_err());
        assert!(quantize(GgmlType::Q8_0, &[0.0; 64]).is_ok_and(|b| b.len() == 68));
        for ty in GgmlType::ALL {
            let n = ty.block_size() * 2;
            assert_eq!(
                quantize(ty, &vec![0.5; n]).is_ok(),
                can_quantize(ty),
                "{ty}"
            );
        }
    }
}
