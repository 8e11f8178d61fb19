//! Weight formats: GGML type ids, block layouts, CPU reference dequantization and
//! reference quantizers.

use crate::{Error, Result};

mod blocks;
mod dequant;
mod finite;
mod quantize;
mod random;

pub use blocks::{pack_scale_min_k4, scale_min_k4};
pub use blocks::{
    Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8_0, QK32,
};
pub use dequant::{dequantize, dequantize_row};
pub use finite::{first_non_finite, NonFinite};
pub use quantize::{can_quantize, quantize};
pub use random::random_blocks;

/// Every tensor type GGUF files may carry, with ggml's numeric ids.
///
/// Only some of them can be dequantized or run on the GPU (`can_dequantize`); the rest
/// are known so that files holding them can still be opened and inspected.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    /// 32-bit floats: 4 bytes each.
    F32 = 0,
    /// IEEE half-precision floats: 2 bytes each.
    F16 = 1,
    /// 4-bit quants with a scale per 32 weights ([`BlockQ4_0`]): 32-weight blocks of 18 bytes, 4.5
    /// bits a weight.
    Q4_0 = 2,
    /// 4-bit quants with a scale and a minimum per 32 weights ([`BlockQ4_1`]): 32-weight blocks of
    /// 20 bytes, 5 bits a weight.
    Q4_1 = 3,
    /// 5-bit quants with a scale per 32 weights ([`BlockQ5_0`]): 32-weight blocks of 22 bytes, 5.5
    /// bits a weight.
    Q5_0 = 6,
    /// 5-bit quants with a scale and a minimum per 32 weights ([`BlockQ5_1`]): 32-weight blocks of
    /// 24 bytes, 6 bits a weight.
    Q5_1 = 7,
    /// 8-bit quants with a scale per 32 weights ([`BlockQ8_0`]): 32-weight blocks of 34 bytes, 8.5
    /// bits a weight.
    Q8_0 = 8,
    /// 8-bit quants with a scale and their sum per 32 weights (ggml's activation format): 32-weight
    /// blocks of 36 bytes, 9 bits a weight. Opened and listed, not computed by brass.
    Q8_1 = 9,
    /// 2-bit K-quant ([`BlockQ2K`]): 256-weight blocks of 84 bytes, 2.625 bits a weight.
    Q2_K = 10,
    /// 3-bit K-quant ([`BlockQ3K`]): 256-weight blocks of 110 bytes, 3.4375 bits a weight.
    Q3_K = 11,
    /// 4-bit K-quant ([`BlockQ4K`]): 256-weight blocks of 144 bytes, 4.5 bits a weight.
    Q4_K = 12,
    /// 5-bit K-quant ([`BlockQ5K`]): 256-weight blocks of 176 bytes, 5.5 bits a weight.
    Q5_K = 13,
    /// 6-bit K-quant ([`BlockQ6K`]): 256-weight blocks of 210 bytes, 6.5625 bits a weight.
    Q6_K = 14,
    /// 8-bit K-quant (ggml's intermediate for K-quant dot products): 256-weight blocks of 292
    /// bytes, 9.125 bits a weight. Opened and listed, not computed by brass.
    Q8_K = 15,
    /// 2-bit i-quant: 256-weight blocks of 66 bytes, 2.0625 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ2_XXS = 16,
    /// 2-bit i-quant: 256-weight blocks of 74 bytes, 2.3125 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ2_XS = 17,
    /// 3-bit i-quant: 256-weight blocks of 98 bytes, 3.0625 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ3_XXS = 18,
    /// 1-bit i-quant: 256-weight blocks of 50 bytes, 1.5625 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ1_S = 19,
    /// 4-bit i-quant on a non-linear grid, per 32 weights: 32-weight blocks of 18 bytes, 4.5 bits a
    /// weight. Opened and listed, not computed by brass.
    IQ4_NL = 20,
    /// 3-bit i-quant: 256-weight blocks of 110 bytes, 3.4375 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ3_S = 21,
    /// 2-bit i-quant: 256-weight blocks of 82 bytes, 2.5625 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ2_S = 22,
    /// 4-bit i-quant on a non-linear grid, per super-block: 256-weight blocks of 136 bytes, 4.25
    /// bits a weight. Opened and listed, not computed by brass.
    IQ4_XS = 23,
    /// 8-bit integers: 1 byte each. Opened and listed, not computed by brass.
    I8 = 24,
    /// 16-bit integers: 2 bytes each. Opened and listed, not computed by brass.
    I16 = 25,
    /// 32-bit integers: 4 bytes each. Opened and listed, not computed by brass.
    I32 = 26,
    /// 64-bit integers: 8 bytes each. Opened and listed, not computed by brass.
    I64 = 27,
    /// 64-bit floats: 8 bytes each. Opened and listed, not computed by brass.
    F64 = 28,
    /// 1-bit i-quant: 256-weight blocks of 56 bytes, 1.75 bits a weight. Opened and listed, not
    /// computed by brass.
    IQ1_M = 29,
    /// bfloat16, the top half of an f32: 2 bytes each.
    BF16 = 30,
    /// Ternary quant (-1, 0, 1): 256-weight blocks of 54 bytes, 1.6875 bits a weight. Opened and
    /// listed, not computed by brass.
    TQ1_0 = 34,
    /// Ternary quant (-1, 0, 1): 256-weight blocks of 66 bytes, 2.0625 bits a weight. Opened and
    /// listed, not computed by brass.
    TQ2_0 = 35,
    /// OCP microscaling FP4: 4-bit floats with a shared power-of-two scale per 32: 32-weight blocks
    /// of 17 bytes, 4.25 bits a weight. Opened and listed, not computed by brass.
    MXFP4 = 39,
}

/// The K-quant super-block: 256 weights.
pub const QK_K: usize = 256;

impl GgmlType {
    /// Every type, in id order.
    pub const ALL: [GgmlType; 32] = {
        use GgmlType::*;
        [
            F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
            IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64,
            IQ1_M, BF16, TQ1_0, TQ2_0, MXFP4,
        ]
    };

    /// The type with ggml id `id`; `None` for ids ggml has retired or never used.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The type named `name` ([`GgmlType::name`]), ignoring case.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's id for the type, as GGUF's tensor table stores it.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name for the type (`"Q4_K"`, `"F16"`, ...).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// (elements per block, bytes per block), as in ggml's type traits.
    pub const fn block_layout(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (QK_K, 84),
            Q3_K => (QK_K, 110),
            Q4_K => (QK_K, 144),
            Q5_K => (QK_K, 176),
            Q6_K => (QK_K, 210),
            Q8_K => (QK_K, 292),
            IQ2_XXS => (QK_K, 66),
            IQ2_XS => (QK_K, 74),
            IQ3_XXS => (QK_K, 98),
            IQ1_S => (QK_K, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (QK_K, 110),
            IQ2_S => (QK_K, 82),
            IQ4_XS => (QK_K, 136),
            IQ1_M => (QK_K, 56),
            TQ1_0 => (QK_K, 54),
            TQ2_0 => (QK_K, 66),
            MXFP4 => (32, 17),
        }
    }

    /// Elements per block: 1 for plain types, 32 or 256 for quants.
    pub fn block_size(self) -> usize {
        self.block_layout().0
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.block_layout().1
    }

    /// Bytes for `n_elements` values, or `None` when `n_elements` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let (bs, ts) = self.block_layout();
        if !n_elements.is_multiple_of(bs as u64) {
            return None;
        }
        (n_elements / bs as u64).checked_mul(ts as u64)
    }

    /// Whether `quant::dequantize` (and so brass) handles this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
        )
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GgmlType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_name(s).ok_or_else(|| Error::UnsupportedType(format!("unknown type name `{s}`")))
    }
}

impl serde::Serialize for GgmlType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}
