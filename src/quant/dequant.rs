//! CPU reference dequantization, bit-exact with gguf-py (and so with ggml's
//! `dequantize_row_*`).
//!
//! Why bit-exactness is robust here: every format decodes as `scale * q (+/- offset)`,
//! where `scale` is an f16 (11 significant bits) times at most a 7-bit integer sub-block
//! scale, and `q` has at most 6 bits. That product needs at most 24 significant bits, so
//! it is exact in f32 in any association (`(d * sc) * q` or `d * (sc * q)`), and a fused
//! multiply-add rounds the same as a separate multiply and add. The only rounding is
//! the final add or subtract of the minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), which every
//! order computes identically. We still follow gguf-py's order (`d * sc` and
//! `dmin * m` first, then `scale * q - min`) so the code reads like the reference.

use bytemuck::pod_read_unaligned;
use half::f16;

use super::blocks::{
    q3k_scales, scale_min_k4, Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, QK32,
};
use super::{GgmlType, QK_K};
use crate::{Error, Result};

/// Dequantizes `bytes` (a whole number of `ty` blocks) into `out`.
///
/// `bytes` needs no particular alignment, so a slice of an mmap'd file works as is.
/// Fails, without panicking, when `ty` cannot be dequantized, when `bytes` is not a whole
/// number of blocks, or when `out` does not hold exactly as many values as `bytes`.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let kernel = kernel(ty)
        .ok_or_else(|| Error::UnsupportedType(format!("dequantizing {ty} is not implemented")))?;
    let (block_elems, block_bytes) = ty.block_layout();
    if !bytes.len().is_multiple_of(block_bytes) {
        return Err(Error::Quant(format!(
            "{ty}: {} bytes is not a whole number of {block_bytes}-byte blocks",
            bytes.len()
        )));
    }
    let expected = bytes.len() / block_bytes * block_elems;
    if out.len() != expected {
        return Err(Error::Quant(format!(
            "{ty}: {} bytes hold {expected} values but the output has room for {}",
            bytes.len(),
            out.len()
        )));
    }
    kernel(bytes, out);
    Ok(())
}

/// Dequantizes `bytes` into a new vector; see [`dequantize`].
pub fn dequantize_row(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>> {
    let (block_elems, block_bytes) = ty.block_layout();
    let mut out = vec![0.0; bytes.len() / block_bytes * block_elems];
    dequantize(ty, bytes, &mut out)?;
    Ok(out)
}

/// A dequantizer over sizes already checked by [`dequantize`].
type Kernel = fn(&[u8], &mut [f32]);

fn kernel(ty: GgmlType) -> Option<Kernel> {
    use GgmlType::*;
    let kernel: Kernel = match ty {
        F32 => |b, o| per_element(b, o, f32::from_le_bytes),
        F16 => |b, o| per_element(b, o, |x| f16::from_le_bytes(x).to_f32()),
        // bf16 is the top half of an f32; shifting keeps NaN payloads as gguf-py does.
        BF16 => |b, o| {
            per_element(b, o, |x| {
                f32::from_bits(u32::from(u16::from_le_bytes(x)) << 16)
            })
        },
        Q4_0 => |b, o| per_block(b, o, BlockQ4_0::dequantize),
        Q4_1 => |b, o| per_block(b, o, BlockQ4_1::dequantize),
        Q5_0 => |b, o| per_block(b, o, BlockQ5_0::dequantize),
        Q5_1 => |b, o| per_block(b, o, BlockQ5_1::dequantize),
        Q8_0 => |b, o| per_block(b, o, BlockQ8_0::dequantize),
        Q2_K => |b, o| per_block(b, o, BlockQ2K::dequantize),
        Q3_K => |b, o| per_block(b, o, BlockQ3K::dequantize),
        Q4_K => |b, o| per_block(b, o, BlockQ4K::dequantize),
        Q5_K => |b, o| per_block(b, o, BlockQ5K::dequantize),
        Q6_K => |b, o| per_block(b, o, BlockQ6K::dequantize),
        _ => return None,
    };
    debug_assert!(ty.can_dequantize());
    Some(kernel)
}

fn per_element<const N: usize>(bytes: &[u8], out: &mut [f32], convert: impl Fn([u8; N]) -> f32) {
    for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        let mut raw = [0u8; N];
        raw.copy_from_slice(chunk);
        *o = convert(raw);
    }
}

fn per_block<B: Block, const N: usize>(
    bytes: &[u8],
    out: &mut [f32],
    dequant: impl Fn(&B, &mut [f32; N]),
) {
    const { assert!(B::ELEMS == N) };
    for (chunk, out) in bytes
        .chunks_exact(size_of::<B>())
        .zip(out.chunks_exact_mut(N))
    {
        // Tensor bytes have no alignment guarantee: copy the block out instead of casting.
        let block: B = pod_read_unaligned(chunk);
        let out: &mut [f32; N] = out.try_into().expect("chunks_exact_mut yields N values");
        dequant(&block, out);
    }
}

impl BlockQ4_0 {
    /// The block's 32 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK32]) {
        let d = self.d.to_f32();
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * f32::from((q & 0x0F) as i8 - 8);
            out[j + QK32 / 2] = d * f32::from((q >> 4) as i8 - 8);
        }
    }
}

impl BlockQ4_1 {
    /// The block's 32 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (j, &q) in self.qs.iter().enumerate() {
            out[j] = d * f32::from(q & 0x0F) + m;
            out[j + QK32 / 2] = d * f32::from(q >> 4) + m;
        }
    }
}

/// The 5-bit quants of a Q5_0/Q5_1 block: low nibbles from `qs`, bit 4 of quant `j`
/// from bit `j` of the little-endian `qh`.
fn q5_quants(qh: [u8; 4], qs: &[u8; QK32 / 2]) -> [u8; QK32] {
    let qh = u32::from_le_bytes(qh);
    let high = |j: usize| (((qh >> j) & 1) as u8) << 4;
    std::array::from_fn(|j| {
        let low = if j < QK32 / 2 {
            qs[j] & 0x0F
        } else {
            qs[j - QK32 / 2] >> 4
        };
        low | high(j)
    })
}

impl BlockQ5_0 {
    /// The block's 32 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK32]) {
        let d = self.d.to_f32();
        for (o, q) in out.iter_mut().zip(q5_quants(self.qh, &self.qs)) {
            *o = d * f32::from(q as i8 - 16);
        }
    }
}

impl BlockQ5_1 {
    /// The block's 32 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        for (o, q) in out.iter_mut().zip(q5_quants(self.qh, &self.qs)) {
            *o = d * f32::from(q) + m;
        }
    }
}

impl BlockQ8_0 {
    /// The block's 32 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK32]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * f32::from(q);
        }
    }
}

// The K-quant loops below walk a super-block as ggml lays it out: two (Q2_K, Q3_K,
// Q6_K) or four (Q4_K, Q5_K) slabs, each slab's quant bytes shared by several runs of
// 32 weights that take different bit fields of the same bytes.

impl BlockQ2K {
    /// The block's 256 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for (half, out) in out.chunks_exact_mut(128).enumerate() {
            let qs = &self.qs[32 * half..32 * half + 32];
            for (shift, out) in out.chunks_exact_mut(32).enumerate() {
                for (sub, out) in out.chunks_exact_mut(16).enumerate() {
                    let sc = self.scales[8 * half + 2 * shift + sub];
                    let dl = d * f32::from(sc & 0x0F);
                    let ml = dmin * f32::from(sc >> 4);
                    for (o, &q) in out.iter_mut().zip(&qs[16 * sub..]) {
                        *o = dl * f32::from((q >> (2 * shift)) & 3) - ml;
                    }
                }
            }
        }
    }
}

impl BlockQ3K {
    /// The block's 256 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let scales = q3k_scales(&self.scales);
        for (run, out) in out.chunks_exact_mut(32).enumerate() {
            // Runs 0..4 take 2-bit fields of qs[0..32], runs 4..8 of qs[32..64]; run `r`
            // takes its high bits from bit `r` of every hmask byte.
            let (half, shift) = (run / 4, 2 * (run % 4));
            let qs = &self.qs[32 * half..32 * half + 32];
            for (sub, out) in out.chunks_exact_mut(16).enumerate() {
                let dl = d * f32::from(scales[2 * run + sub] as i8 - 32);
                for (l, o) in out.iter_mut().enumerate() {
                    let l = 16 * sub + l;
                    let low = ((qs[l] >> shift) & 3) as i8;
                    let high_clear = (self.hmask[l] >> run) & 1 == 0;
                    *o = dl * f32::from(low - if high_clear { 4 } else { 0 });
                }
            }
        }
    }
}

impl BlockQ4K {
    /// The block's 256 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for (slab, out) in out.chunks_exact_mut(64).enumerate() {
            let qs = &self.qs[32 * slab..32 * slab + 32];
            let (lo, hi) = out.split_at_mut(32);
            let (sc, m) = scale_min_k4(2 * slab, &self.scales);
            let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
            let (sc, m) = scale_min_k4(2 * slab + 1, &self.scales);
            let (d2, m2) = (d * f32::from(sc), dmin * f32::from(m));
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(qs) {
                *lo = d1 * f32::from(q & 0x0F) - m1;
                *hi = d2 * f32::from(q >> 4) - m2;
            }
        }
    }
}

impl BlockQ5K {
    /// The block's 256 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        for (slab, out) in out.chunks_exact_mut(64).enumerate() {
            let qs = &self.qs[32 * slab..32 * slab + 32];
            let (lo, hi) = out.split_at_mut(32);
            let (sc, m) = scale_min_k4(2 * slab, &self.scales);
            let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
            let (sc, m) = scale_min_k4(2 * slab + 1, &self.scales);
            let (d2, m2) = (d * f32::from(sc), dmin * f32::from(m));
            // Run `r` of 32 weights takes its fifth bit from bit `r` of every qh byte.
            let (bit_lo, bit_hi) = (2 * slab, 2 * slab + 1);
            for (l, ((lo, hi), &q)) in lo.iter_mut().zip(hi).zip(qs).enumerate() {
                let h = self.qh[l];
                let q_lo = (q & 0x0F) | (((h >> bit_lo) & 1) << 4);
                let q_hi = (q >> 4) | (((h >> bit_hi) & 1) << 4);
                *lo = d1 * f32::from(q_lo) - m1;
                *hi = d2 * f32::from(q_hi) - m2;
            }
        }
    }
}

impl BlockQ6K {
    /// The block's 256 weights, in order, bit-exact with ggml's `dequantize_row_*`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (half, out) in out.chunks_exact_mut(128).enumerate() {
            let ql = &self.ql[64 * half..64 * half + 64];
            let qh = &self.qh[32 * half..32 * half + 32];
            // Run `r` (0..4) of 32 weights: low nibbles (r < 2) or high nibbles of
            // ql[32 * (r % 2)..], and bits 2r..2r+2 of qh.
            for (run, out) in out.chunks_exact_mut(32).enumerate() {
                let ql = &ql[32 * (run % 2)..32 * (run % 2) + 32];
                let nibble_shift = 4 * (run / 2);
                for (sub, out) in out.chunks_exact_mut(16).enumerate() {
                    let scale = d * f32::from(self.scales[8 * half + 2 * run + sub]);
                    for (l, o) in out.iter_mut().enumerate() {
                        let l = 16 * sub + l;
                        let low = (ql[l] >> nibble_shift) & 0x0F;
                        let high = (qh[l] >> (2 * run)) & 3;
                        *o = scale * f32::from((low | (high << 4)) as i8 - 32);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes_and_types() {
        let mut out = vec![0.0; 32];
        assert!(dequantize(GgmlType::Q4_0, &[0; 17], &mut out).is_err());
        assert!(dequantize(GgmlType::Q4_0, &[0; 18], &mut out[..31]).is_err());
        assert!(dequantize(GgmlType::Q4_0, &[0; 18], &mut out).is_ok());
        assert!(dequantize(GgmlType::IQ2_XXS, &[0; 66], &mut vec![0.0; 256]).is_err());
        assert!(dequantize(GgmlType::Q8_1, &[0; 36], &mut out).is_err());
    }

    #[test]
    fn every_dequantizable_type_has_a_kernel() {
        for ty in GgmlType::ALL {
            assert_eq!(kernel(ty).is_some(), ty.can_dequantize(), "{ty}");
        }
    }

    #[test]
    fn reads_unaligned_bytes() {
        // One Q8_0 block at an odd offset: d = 1.0 (0x3C00), q = 0, 1, 2, ...
        let mut bytes = [0u8; 1 + 34];
        bytes[1..3].copy_from_slice(&0x3C00u16.to_le_bytes());
        for j in 0..32 {
            bytes[3 + j] = j as u8;
        }
        let out = dequantize_row(GgmlType::Q8_0, &bytes[1..]).unwrap();
        assert_eq!(out, (0..32).map(|j| j as f32).collect::<Vec<_>>());
    }

    #[test]
    fn plain_float_types() {
        let bf16 = dequantize_row(GgmlType::BF16, &[0x80, 0x3F, 0x00, 0xC0]).unwrap();
        assert_eq!(bf16, [1.0, -2.0]);
        let f16 = dequantize_row(GgmlType::F16, &[0x00, 0x3C, 0x00, 0xC0]).unwrap();
        assert_eq!(f16, [1.0, -2.0]);
        let f32 = dequantize_row(GgmlType::F32, &1.5f32.to_le_bytes()).unwrap();
        assert_eq!(f32, [1.5]);
    }
}
