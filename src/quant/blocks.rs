//! Byte layouts of ggml's quantized blocks, field for field as in `ggml-common.h`.
//!
//! Every struct is `#[repr(C)]` with no padding, so its size equals ggml's block size
//! (checked at compile time below) and `bytemuck` may view raw tensor bytes as blocks.
//! All `f16` fields sit at even offsets, so the 2-byte alignment of `f16` never adds
//! padding; the structs are still read with `bytemuck::pod_read_unaligned`, because
//! tensor data from an mmap carries no alignment guarantee at all.
//!
//! Naming follows ggml: `d` is the block scale, `m`/`dmin` the (super-block) minimum,
//! `qs` the low bits of the quants, `qh` their high bits, `scales` the packed sub-block
//! scales of the K-quants.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{GgmlType, QK_K};

/// Weights per block of the 32-wide formats (Q4_0 … Q8_0).
pub const QK32: usize = 32;

/// A quantized block: its ggml type and how many weights it holds.
pub trait Block: Pod {
    /// The ggml type whose blocks these are.
    const TYPE: GgmlType;
    /// Weights per block.
    const ELEMS: usize;
    /// Name and byte offset of each f16 scale field (`d`, and `m` or `dmin` where the
    /// format has one): the only bytes of a block that can hold NaN or infinity.
    const SCALES: &'static [(&'static str, usize)];
}

/// 4-bit, symmetric: `w = d * (q - 8)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// The scale.
    pub d: f16,
    /// Weight `j` in the low nibble of `qs[j]`, weight `j + 16` in the high nibble.
    pub qs: [u8; QK32 / 2],
}

/// 4-bit with a minimum: `w = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// The scale.
    pub d: f16,
    /// The minimum, added to every weight.
    pub m: f16,
    /// Weight `j` in the low nibble of `qs[j]`, weight `j + 16` in the high nibble.
    pub qs: [u8; QK32 / 2],
}

/// 5-bit, symmetric: `w = d * (q - 16)`; bit 4 of weight `j` is bit `j` of `qh` (LE u32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// The scale.
    pub d: f16,
    /// A little-endian `u32`, kept as bytes so the struct needs no 4-byte alignment.
    pub qh: [u8; 4],
    /// The low 4 bits, as [`BlockQ4_0::qs`].
    pub qs: [u8; QK32 / 2],
}

/// 5-bit with a minimum: `w = d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// The scale.
    pub d: f16,
    /// The minimum, added to every weight.
    pub m: f16,
    /// Bit 4 of weight `j` is bit `j` of this little-endian `u32`.
    pub qh: [u8; 4],
    /// The low 4 bits, as [`BlockQ4_0::qs`].
    pub qs: [u8; QK32 / 2],
}

/// 8-bit, symmetric: `w = d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// The scale.
    pub d: f16,
    /// The quants, one per weight.
    pub qs: [i8; QK32],
}

/// 2-bit K-quant: 16 sub-blocks of 16 weights, `w = d * sc * q - dmin * m`, with `sc`
/// in the low and `m` in the high nibble of `scales[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2K {
    /// Per sub-block, its scale in the low nibble and its minimum in the high one.
    pub scales: [u8; QK_K / 16],
    /// The 2-bit quants, four to a byte.
    pub qs: [u8; QK_K / 4],
    /// The super-block scale of the sub-block scales.
    pub d: f16,
    /// The super-block scale of the sub-block minimums.
    pub dmin: f16,
}

/// 3-bit K-quant: 16 sub-blocks of 16 weights with signed 6-bit scales,
/// `w = d * (sc - 32) * (q - 4 * !hbit)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3K {
    /// The high bit of each quant; a *clear* bit means "subtract 4".
    pub hmask: [u8; QK_K / 8],
    /// The low 2 bits of the quants, four to a byte.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales: low nibbles in bytes 0..8, high 2-bit pairs in 8..12.
    pub scales: [u8; 12],
    /// The super-block scale of the sub-block scales.
    pub d: f16,
}

/// 4-bit K-quant: 8 sub-blocks of 32 weights, `w = d * sc * q - dmin * m`, with 6-bit
/// `sc` and `m` packed into `scales` (see [`scale_min_k4`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4K {
    /// The super-block scale of the sub-block scales.
    pub d: f16,
    /// The super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums, packed ([`scale_min_k4`]).
    pub scales: [u8; 12],
    /// The 4-bit quants, two to a byte.
    pub qs: [u8; QK_K / 2],
}

/// 5-bit K-quant: Q4_K plus one high bit per weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5K {
    /// The super-block scale of the sub-block scales.
    pub d: f16,
    /// The super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums, packed as Q4_K's ([`scale_min_k4`]).
    pub scales: [u8; 12],
    /// The fifth bit of each quant.
    pub qh: [u8; QK_K / 8],
    /// The low 4 bits of the quants, two to a byte.
    pub qs: [u8; QK_K / 2],
}

/// 6-bit K-quant: 16 sub-blocks of 16 weights with signed 8-bit scales,
/// `w = d * sc * (q - 32)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// The signed scale of each sub-block.
    pub scales: [i8; QK_K / 16],
    /// The super-block scale of the sub-block scales.
    pub d: f16,
}

macro_rules! impl_block {
    ($($block:ty => $ty:ident, $elems:expr, $bytes:expr, [$($scale:ident),+];)*) => {$(
        // The layout must be ggml's byte for byte; a padded struct would not be `Pod`
        // anyway, but this also pins the size to the type table in `mod.rs`.
        const _: () = assert!(size_of::<$block>() == $bytes);
        const _: () = assert!(GgmlType::$ty.block_layout().0 == $elems);
        const _: () = assert!(GgmlType::$ty.block_layout().1 == $bytes);
        impl Block for $block {
            const TYPE: GgmlType = GgmlType::$ty;
            const ELEMS: usize = $elems;
            const SCALES: &'static [(&'static str, usize)] =
                &[$((stringify!($scale), std::mem::offset_of!($block, $scale))),+];
        }
    )*};
}

impl_block! {
    BlockQ4_0 => Q4_0, QK32, 18, [d];
    BlockQ4_1 => Q4_1, QK32, 20, [d, m];
    BlockQ5_0 => Q5_0, QK32, 22, [d];
    BlockQ5_1 => Q5_1, QK32, 24, [d, m];
    BlockQ8_0 => Q8_0, QK32, 34, [d];
    BlockQ2K => Q2_K, QK_K, 84, [d, dmin];
    BlockQ3K => Q3_K, QK_K, 110, [d];
    BlockQ4K => Q4_K, QK_K, 144, [d, dmin];
    BlockQ5K => Q5_K, QK_K, 176, [d, dmin];
    BlockQ6K => Q6_K, QK_K, 210, [d];
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) of a Q4_K/Q5_K block.
///
/// Packing (ggml's `get_scale_min_k4`): sub-blocks 0..4 keep their scale and minimum in
/// the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4..8 keep their low 4 bits in the
/// nibbles of byte `j + 4` and their top 2 bits in the spare top bits of bytes `j - 4`
/// (scale) and `j` (minimum).
#[inline]
pub fn scale_min_k4(j: usize, scales: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// The inverse of [`scale_min_k4`]: packs eight 6-bit scales and minimums.
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (sc[j] & 63, m[j] & 63);
        if j < 4 {
            out[j] |= ls;
            out[j + 4] |= lm;
        } else {
            out[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            out[j - 4] |= (ls >> 4) << 6;
            out[j] |= (lm >> 4) << 6;
        }
    }
    out
}

/// The 16 signed scales of a Q3_K block, still biased by 32 (0..64).
///
/// Scale `i` has its low 4 bits in nibble `i / 8` of byte `i % 8` and its top 2 bits in
/// bits `2 * (i / 4)` of byte `8 + i % 4`.
#[inline]
pub fn q3k_scales(scales: &[u8; 12]) -> [u8; 16] {
    std::array::from_fn(|i| {
        let low = (scales[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        low | (high << 4)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k4_scale_packing_round_trips() {
        let sc: [u8; 8] = [0, 1, 17, 63, 32, 5, 48, 62];
        let m: [u8; 8] = [63, 2, 33, 0, 15, 16, 47, 1];
        let packed = pack_scale_min_k4(&sc, &m);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &packed), (sc[j], m[j]), "sub-block {j}");
        }
    }

    #[test]
    fn f16_fields_sit_where_ggml_puts_them() {
        let mut b = BlockQ6K::zeroed();
        b.d = f16::from_bits(0xABCD);
        let bytes = bytemuck::bytes_of(&b);
        assert_eq!(&bytes[208..], &[0xCD, 0xAB]);

        let mut b = BlockQ3K::zeroed();
        b.d = f16::from_bits(0x1234);
        assert_eq!(&bytemuck::bytes_of(&b)[108..], &[0x34, 0x12]);
    }
}
