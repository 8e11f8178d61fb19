//! Random quantized weights for tests and benchmarks, made without running a quantizer.

use bytemuck::{bytes_of, pod_read_unaligned};
use half::f16;

use super::blocks::{
    Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8_0,
};
use super::GgmlType;

/// `n_blocks` blocks of valid `ty` data, deterministic in `seed`.
///
/// Quant bits are uniformly random; every scale field is a finite, normal f16 chosen
/// so that each dequantized weight lies in [-1, 1] (the largest code times the largest
/// scale reaches between a half and the whole of that range, so sums stay well scaled
/// and no test sees infinities or subnormals). Signed-scale types (Q4_0, Q5_0, Q8_0)
/// get scales of both signs, as ggml's quantizers produce them. For F32, F16 and BF16
/// a "block" is one value, uniform in [-1, 1).
///
/// Meant for GPU kernel tests that need megabytes of weights of a type quickly; the
/// values are not shaped like real weights (use [`super::quantize`] for that).
///
/// # Panics
///
/// When `ty` is not one of the types [`GgmlType::can_dequantize`] accepts.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    use GgmlType::*;
    let mut rng = SplitMix64(seed);
    let rng = &mut rng;
    match ty {
        F32 => gen(n_blocks, || rng.symmetric().to_le_bytes()),
        F16 => gen(n_blocks, || f16::from_f32(rng.symmetric()).to_le_bytes()),
        BF16 => gen(n_blocks, || {
            // Truncation is fine here: any bf16 in [-1, 1) is as good as another.
            ((rng.symmetric().to_bits() >> 16) as u16).to_le_bytes()
        }),
        // Each scale is `rng.scale(n)`: a magnitude in [0.5, 1) / n, where n is the
        // largest product of codes the scale multiplies.
        Q4_0 => blocks(rng, n_blocks, |b: &mut BlockQ4_0, r| {
            b.d = r.signed_scale(8.0)
        }),
        // w = d*q + m: d*q and -m each in [0.25, 0.5].
        Q4_1 => blocks(rng, n_blocks, |b: &mut BlockQ4_1, r| {
            b.d = r.scale(15.0 * 2.0);
            b.m = -r.scale(2.0);
        }),
        Q5_0 => blocks(rng, n_blocks, |b: &mut BlockQ5_0, r| {
            b.d = r.signed_scale(16.0)
        }),
        Q5_1 => blocks(rng, n_blocks, |b: &mut BlockQ5_1, r| {
            b.d = r.scale(31.0 * 2.0);
            b.m = -r.scale(2.0);
        }),
        Q8_0 => blocks(rng, n_blocks, |b: &mut BlockQ8_0, r| {
            b.d = r.signed_scale(128.0)
        }),
        // w = d*sc*q - dmin*m: each term at most 1/2 in magnitude.
        Q2_K => blocks(rng, n_blocks, |b: &mut BlockQ2K, r| {
            b.d = r.scale(15.0 * 3.0 * 2.0);
            b.dmin = r.scale(15.0 * 2.0);
        }),
        Q3_K => blocks(rng, n_blocks, |b: &mut BlockQ3K, r| {
            b.d = r.scale(32.0 * 4.0)
        }),
        Q4_K => blocks(rng, n_blocks, |b: &mut BlockQ4K, r| {
            b.d = r.scale(63.0 * 15.0 * 2.0);
            b.dmin = r.scale(63.0 * 2.0);
        }),
        Q5_K => blocks(rng, n_blocks, |b: &mut BlockQ5K, r| {
            b.d = r.scale(63.0 * 31.0 * 2.0);
            b.dmin = r.scale(63.0 * 2.0);
        }),
        Q6_K => blocks(rng, n_blocks, |b: &mut BlockQ6K, r| {
            b.d = r.scale(128.0 * 32.0)
        }),
        _ => panic!("random_blocks: {ty} cannot be dequantized, so brass has no use for it"),
    }
}

fn gen<const N: usize>(n: usize, mut value: impl FnMut() -> [u8; N]) -> Vec<u8> {
    (0..n).flat_map(|_| value()).collect()
}

/// Random bytes for each block, then `set_scales` overwrites the scale fields.
fn blocks<B: Block>(
    rng: &mut SplitMix64,
    n_blocks: usize,
    set_scales: impl Fn(&mut B, &mut SplitMix64),
) -> Vec<u8> {
    let mut out = Vec::with_capacity(n_blocks * size_of::<B>());
    let mut raw = vec![0u8; size_of::<B>()];
    for _ in 0..n_blocks {
        raw.fill_with(|| rng.next_u64() as u8);
        let mut block: B = pod_read_unaligned(&raw);
        set_scales(&mut block, rng);
        out.extend_from_slice(bytes_of(&block));
    }
    out
}

/// Sebastiano Vigna's SplitMix64: tiny, fast and good enough for test data.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 24 random bits.
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }

    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f32 {
        2.0 * self.unit() - 1.0
    }

    /// A positive scale in [0.5, 1) / `max_code`.
    fn scale(&mut self, max_code: f32) -> f16 {
        f16::from_f32((0.5 + 0.5 * self.unit()) / max_code)
    }

    fn signed_scale(&mut self, max_code: f32) -> f16 {
        let s = self.scale(max_code);
        if self.next_u64() & 1 == 0 {
            s
        } else {
            -s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequantize_row;

    #[test]
    fn random_blocks_decode_to_modest_finite_values() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.can_dequantize()) {
            let bytes = random_blocks(ty, 64, 7);
            assert_eq!(bytes.len(), 64 * ty.type_size(), "{ty}");
            let w = dequantize_row(ty, &bytes).unwrap();
            let amax = w.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            assert!(w.iter().all(|v| v.is_finite()), "{ty}");
            assert!(amax <= 1.0 && amax > 0.1, "{ty}: max |w| = {amax}");
            assert_eq!(bytes, random_blocks(ty, 64, 7), "{ty}: not deterministic");
            assert_ne!(bytes, random_blocks(ty, 64, 8), "{ty}: seed ignored");
        }
    }
}
