//! Finding NaN and infinity in tensor data without dequantizing it: a quantized
//! weight is a finite integer times the block's f16 scales, so it is finite exactly
//! when they are; float tensors are checked value by value.

use bytemuck::pod_read_unaligned;
use half::{bf16, f16};

use super::blocks::{
    Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8_0,
};
use super::GgmlType;
use crate::{Error, Result};

/// The first NaN or infinity in a tensor's data.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFinite {
    /// The block that holds it; for F32, F16 and BF16 tensors, the element.
    pub block: u64,
    /// The scale field (`d`, `m`, `dmin`), or `value` for a float tensor.
    pub field: &'static str,
    /// The value found: NaN or ±infinity.
    pub value: f32,
}

/// The first NaN or infinity in `bytes`, data of a `ty` tensor, in block order (and
/// field order within a block), or `None` when every value is finite.
pub fn first_non_finite(ty: GgmlType, bytes: &[u8]) -> Result<Option<NonFinite>> {
    use GgmlType::*;
    Ok(match ty {
        F32 => per_value(bytes, f32::from_le_bytes),
        F16 => per_value(bytes, |b| f16::from_le_bytes(b).to_f32()),
        BF16 => per_value(bytes, |b| bf16::from_le_bytes(b).to_f32()),
        _ => {
            let scales = scale_fields(ty).ok_or_else(|| {
                Error::UnsupportedType(format!("checking {ty} values is not implemented"))
            })?;
            per_block(bytes, ty.type_size(), scales)
        }
    })
}

/// [`Block::SCALES`] of `ty`'s block.
fn scale_fields(ty: GgmlType) -> Option<&'static [(&'static str, usize)]> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => BlockQ4_0::SCALES,
        Q4_1 => BlockQ4_1::SCALES,
        Q5_0 => BlockQ5_0::SCALES,
        Q5_1 => BlockQ5_1::SCALES,
        Q8_0 => BlockQ8_0::SCALES,
        Q2_K => BlockQ2K::SCALES,
        Q3_K => BlockQ3K::SCALES,
        Q4_K => BlockQ4K::SCALES,
        Q5_K => BlockQ5K::SCALES,
        Q6_K => BlockQ6K::SCALES,
        _ => return None,
    })
}

fn per_value<const N: usize>(bytes: &[u8], value: impl Fn([u8; N]) -> f32) -> Option<NonFinite> {
    bytes
        .chunks_exact(N)
        .map(|b| value(pod_read_unaligned(b)))
        .enumerate()
        .find(|(_, v)| !v.is_finite())
        .map(|(i, value)| NonFinite {
            block: i as u64,
            field: "value",
            value,
        })
}

fn per_block(
    bytes: &[u8],
    block_bytes: usize,
    scales: &[(&'static str, usize)],
) -> Option<NonFinite> {
    bytes
        .chunks_exact(block_bytes)
        .enumerate()
        .find_map(|(i, block)| {
            scales.iter().find_map(|&(field, at)| {
                let value = f16::from_le_bytes([block[at], block[at + 1]]).to_f32();
                (!value.is_finite()).then_some(NonFinite {
                    block: i as u64,
                    field,
                    value,
                })
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::random_blocks;

    #[test]
    fn finds_the_first_non_finite_scale_of_every_format() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.can_dequantize()) {
            let mut bytes = random_blocks(ty, 6, 1);
            assert_eq!(first_non_finite(ty, &bytes).unwrap(), None, "{ty}");
            let dequantized = crate::quant::dequantize_row(ty, &bytes).unwrap();
            assert!(dequantized.iter().all(|v| v.is_finite()), "{ty}");
            // Infinity in the last scale field of block 4: the dequantized block holds
            // NaN or infinity from there, and the scan names that block and field.
            let (elems, block_bytes) = ty.block_layout();
            let (field, at) = match ty {
                GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => ("value", 0),
                _ => *scale_fields(ty).unwrap().last().unwrap(),
            };
            let inf: &[u8] = match ty {
                GgmlType::F32 => &f32::INFINITY.to_le_bytes(),
                GgmlType::BF16 => &bf16::INFINITY.to_le_bytes(),
                _ => &f16::INFINITY.to_le_bytes(),
            };
            let start = 4 * block_bytes + at;
            bytes[start..start + inf.len()].copy_from_slice(inf);
            let found = first_non_finite(ty, &bytes).unwrap().unwrap();
            assert_eq!((found.block, found.field), (4, field), "{ty}");
            assert!(found.value.is_infinite(), "{ty}");
            let dequantized = crate::quant::dequantize_row(ty, &bytes).unwrap();
            let first_bad = dequantized.iter().position(|v| !v.is_finite());
            assert_eq!(first_bad.map(|i| i / elems), Some(4), "{ty}");
        }
        assert!(first_non_finite(GgmlType::IQ2_XXS, &[]).is_err());
    }
}
