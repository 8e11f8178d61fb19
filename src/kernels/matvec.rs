//! Matvec kernels: y = W·x with W stored as in GGUF (row-major, rows of quant blocks),
//! x and y f32. A kernel may ask for its blocks' fields rearranged on upload
//! ([`Layout`]); the bytes and the row parts stay the same.
//!
//! Families:
//! - `Scalar`: one invocation per row, byte-at-a-time reads; core WGSL only.
//! - `Coop`: one subgroup per row, x staged per workgroup as f16 or f32 in K-tiles, the
//!   dot in floats: exact activations.
//! - `Dot4`: a subgroup (or a team of its lanes) per row, x rounded to int8 groups of 32
//!   while staging (as llama.cpp rounds activations to Q8_1), the dot on packed 4x8-bit
//!   integer dot products; each lane reads 16-byte pieces of the row. Quant types only.
//!
//! A kernel's WGSL is its per-type file (`wgsl/matvec/<type>_<family>.wgsl`), which
//! includes its family's driver (`scalar.wgsl`, `coop.wgsl`, `dot4.wgsl`) and helpers.

use serde::Serialize;

mod launch;

pub(crate) use launch::{coop_rows_per_workgroup, dot4_rows_per_workgroup};
pub use launch::{
    create_queue, Batches, CoopLaunch, Dot4Launch, Dot4X, FloatX, LaunchConfig, MatvecLaunch,
    RowPart, StagedFrom, XForm, ARRANGE_PIECE_BYTES, MAX_COLUMNS, MAX_COLUMNS_AT_ONCE, QUEUE_BYTES,
};

use super::wgsl::{compose, WgslConst};
use crate::quant::{dequantize, GgmlType};
use crate::{Error, Result};

/// A matvec kernel family: how a kernel spreads a row over invocations and what it
/// multiplies x as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Family {
    /// One invocation per row, byte-at-a-time reads: core WGSL only, for devices
    /// without subgroups (or too small for the cooperative families).
    Scalar,
    /// Subgroup-cooperative, x staged as floats: the exact-activation path.
    Coop,
    /// Subgroup-cooperative, x rounded to int8 while staging and multiplied on packed
    /// integer dot products, as llama.cpp's Q8_1 activations.
    Dot4,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 3] = [Family::Dot4, Family::Coop, Family::Scalar];

    /// The name in kernel names and overrides: `scalar`, `coop` or `dot4`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Scalar => "scalar",
            Family::Coop => "coop",
            Family::Dot4 => "dot4",
        }
    }

    /// The family called `s` ([`Family::name`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Whether kernels of this family run one subgroup per row.
    pub fn cooperative(self) -> bool {
        self != Family::Scalar
    }
}

/// A matvec kernel: one weight type under one family, with its WGSL file and the
/// layout it reads. [`MATVEC_KERNELS`] lists them all.
#[derive(Debug)]
pub struct MatvecKernel {
    /// The weight type it reads.
    pub ty: GgmlType,
    /// How it spreads rows and multiplies.
    pub family: Family,
    /// `matvec/<type>_<family>`, also the WGSL file's path under `wgsl/`.
    pub name: &'static str,
    /// How the weights lie in the kernel's buffers.
    pub layout: Layout,
}

/// How a kernel's weights lie in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As in the GGUF file: rows of blocks.
    Gguf,
    /// Per buffer (a row part): bytes `body_start .. body_start + body_len` of every
    /// block first, block after block, then the rest of every block in the same order.
    /// With `body_len` a multiple of 16 every body starts 16-byte aligned, so a kernel
    /// reads blocks of any size (Q6_K's 210 bytes) as whole `vec4<u32>`s. Same size as
    /// the GGUF bytes, and a row part is still a run of whole rows.
    BodiesFirst {
        /// The body's first byte within a block.
        body_start: usize,
        /// Bytes of a block's body.
        body_len: usize,
    },
    /// Q4_K blocks for a lane per pair of sub-blocks (2j, 2j + 1): the 12 `scales`
    /// bytes regrouped so that the pair's two scales and two minimums are byte j of
    /// header words 1, 2 and 3 (see [`k_scales_by_pair`]), one shift apart from any
    /// other pair's, where GGUF's packing takes a different formula for pairs 0-1 and
    /// 2-3 (`wgsl/matvec/k_scale_min_dot4.wgsl`). d, dmin and qs stay where they are.
    KScalesByPair,
    /// Q5_K blocks as [`Layout::KScalesByPair`], and with their 32 `qh` bytes regrouped
    /// per sub-block: word s (bytes 16 + 4s ..) holds sub-block s's 32 fifth bits, the
    /// bit of weight 4k + b at bit 8b + k, so that a lane decoding sub-blocks 2j and
    /// 2j + 1 loads their 8 bytes rather than all 32, and moves each quant word's four
    /// bits into place with one shift (`wgsl/matvec/q5_k_dot4.wgsl`).
    Q5kByPair,
}

impl Layout {
    /// `part` (whole blocks of `block_bytes`) as this layout stores it.
    pub fn arrange<'a>(self, part: &'a [u8], block_bytes: usize) -> std::borrow::Cow<'a, [u8]> {
        match self {
            Layout::Gguf => std::borrow::Cow::Borrowed(part),
            Layout::BodiesFirst {
                body_start,
                body_len,
            } => {
                let n = part.len() / block_bytes;
                let rest = block_bytes - body_len;
                let mut out = vec![0u8; part.len()];
                let (bodies, rests) = out.split_at_mut(n * body_len);
                for (i, block) in part.chunks_exact(block_bytes).enumerate() {
                    let body_end = body_start + body_len;
                    bodies[i * body_len..][..body_len]
                        .copy_from_slice(&block[body_start..body_end]);
                    let r = &mut rests[i * rest..][..rest];
                    r[..body_start].copy_from_slice(&block[..body_start]);
                    r[body_start..].copy_from_slice(&block[body_end..]);
                }
                std::borrow::Cow::Owned(out)
            }
            Layout::KScalesByPair | Layout::Q5kByPair => {
                let mut out = part.to_vec();
                self.arrange_blocks_in_place(&mut out, block_bytes);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// Whether each block is rearranged within its own bytes, so that any run of whole
    /// blocks can be arranged (and uploaded) apart from the rest.
    pub fn block_local(self) -> bool {
        !matches!(self, Layout::BodiesFirst { .. })
    }

    /// Arranges `blocks` (whole blocks of `block_bytes`) in place, for a
    /// [`block_local`](Self::block_local) layout.
    fn arrange_blocks_in_place(self, blocks: &mut [u8], block_bytes: usize) {
        debug_assert!(self.block_local());
        if self == Layout::Gguf {
            return;
        }
        for block in blocks.chunks_exact_mut(block_bytes) {
            let scales: [u8; 12] = block[4..16].try_into().expect("12 bytes");
            block[4..16].copy_from_slice(&k_scales_by_pair(&scales));
            if self == Layout::Q5kByPair {
                let qh = &mut block[16..48];
                let words = q5k_fifth_bits_by_sub_block(qh);
                for (dst, word) in qh.chunks_exact_mut(4).zip(words) {
                    dst.copy_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
}

/// A K-quant block's 12 `scales` bytes (ggml's 6-bit packing, [`scale_min_k4`]) as
/// [`Layout::KScalesByPair`] stores them: byte j of the first four is sub-block 2j's
/// scale, of the next four sub-block 2j + 1's scale, of the last four sub-block 2j's
/// minimum, each in its low 6 bits; their top 2 bits hold sub-block 2j + 1's minimum,
/// low bits first.
///
/// [`scale_min_k4`]: crate::quant::scale_min_k4
pub fn k_scales_by_pair(scales: &[u8; 12]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..4 {
        let (sc0, m0) = crate::quant::scale_min_k4(2 * j, scales);
        let (sc1, m1) = crate::quant::scale_min_k4(2 * j + 1, scales);
        out[j] = sc0 | (m1 & 3) << 6;
        out[4 + j] = sc1 | (m1 >> 2 & 3) << 6;
        out[8 + j] = m0 | (m1 >> 4) << 6;
    }
    out
}

/// A Q5_K block's `qh` (bit s of byte l: the fifth bit of weight l of sub-block s) as
/// [`Layout::Q5kByPair`] stores it: word s, bit 8b + k = bit s of byte 4k + b. For each
/// b that is the transpose of an 8 x 8 bit matrix (row k = byte 4k + b), done in a u64
/// with three swaps (Hacker's Delight's transpose8) rather than bit by bit.
fn q5k_fifth_bits_by_sub_block(qh: &[u8]) -> [u32; 8] {
    let mut words = [0u32; 8];
    for b in 0..4 {
        let mut x = (0..8).fold(0u64, |acc, k| acc | u64::from(qh[4 * k + b]) << (8 * k));
        x = (x & 0xAA55_AA55_AA55_AA55)
            | (x & 0x00AA_00AA_00AA_00AA) << 7
            | (x >> 7) & 0x00AA_00AA_00AA_00AA;
        x = (x & 0xCCCC_3333_CCCC_3333)
            | (x & 0x0000_CCCC_0000_CCCC) << 14
            | (x >> 14) & 0x0000_CCCC_0000_CCCC;
        x = (x & 0xF0F0_F0F0_0F0F_0F0F)
            | (x & 0x0000_0000_F0F0_F0F0) << 28
            | (x >> 28) & 0x0000_0000_F0F0_F0F0;
        // Byte s of x now holds bit s of every row k, at bit k.
        for (s, word) in words.iter_mut().enumerate() {
            *word |= (((x >> (8 * s)) & 0xff) as u32) << (8 * b);
        }
    }
    words
}

macro_rules! kernel {
    ($ty:ident, $family:ident, $file:literal) => {
        kernel!($ty, $family, $file, Layout::Gguf)
    };
    ($ty:ident, $family:ident, $file:literal, $layout:expr) => {
        MatvecKernel {
            ty: GgmlType::$ty,
            family: Family::$family,
            name: concat!("matvec/", $file),
            layout: $layout,
        }
    };
}

/// Bytes per 32 values of x quantized as `wgsl/matvec/q8_x.wgsl` describes
/// ([`quantize_x_q8`]): two int8 planes and a tail each.
pub const Q8_GROUP_BYTES: u64 = 96;

/// The most int8 planes a dot4 matvec multiplies x on ([`Dot4Launch::planes`]).
pub const MAX_X_PLANES: u32 = 2;

/// Every matvec kernel brass has: the dispatch table, one line per kernel.
pub const MATVEC_KERNELS: &[MatvecKernel] = &[
    kernel!(F32, Scalar, "f32_scalar"),
    kernel!(F32, Coop, "f32_coop"),
    kernel!(F16, Scalar, "f16_scalar"),
    kernel!(F16, Coop, "f16_coop"),
    kernel!(Q8_0, Scalar, "q8_0_scalar"),
    kernel!(Q8_0, Coop, "q8_0_coop"),
    kernel!(Q8_0, Dot4, "q8_0_dot4"),
    kernel!(Q4_0, Scalar, "q4_0_scalar"),
    kernel!(Q4_0, Coop, "q4_0_coop"),
    kernel!(Q4_0, Dot4, "q4_0_dot4"),
    kernel!(Q5_0, Scalar, "q5_0_scalar"),
    kernel!(Q5_0, Coop, "q5_0_coop"),
    kernel!(Q5_0, Dot4, "q5_0_dot4"),
    kernel!(Q5_1, Scalar, "q5_1_scalar"),
    kernel!(Q5_1, Coop, "q5_1_coop"),
    kernel!(Q5_1, Dot4, "q5_1_dot4"),
    kernel!(Q4_1, Scalar, "q4_1_scalar"),
    kernel!(Q4_1, Coop, "q4_1_coop"),
    kernel!(Q4_1, Dot4, "q4_1_dot4"),
    kernel!(Q4_K, Scalar, "q4_k_scalar"),
    kernel!(Q4_K, Coop, "q4_k_coop"),
    kernel!(Q4_K, Dot4, "q4_k_dot4", Layout::KScalesByPair),
    kernel!(Q5_K, Scalar, "q5_k_scalar"),
    kernel!(Q5_K, Coop, "q5_k_coop"),
    kernel!(Q5_K, Dot4, "q5_k_dot4", Layout::Q5kByPair),
    kernel!(Q6_K, Scalar, "q6_k_scalar"),
    kernel!(Q6_K, Coop, "q6_k_coop"),
    // {ql, qh, scales} (208 bytes) aligned, d (2 bytes) after all of them.
    kernel!(
        Q6_K,
        Dot4,
        "q6_k_dot4",
        Layout::BodiesFirst {
            body_start: 0,
            body_len: 208
        }
    ),
];

/// The kernel of `family` for `ty` weights, if brass has one.
pub fn find(ty: GgmlType, family: Family) -> Option<&'static MatvecKernel> {
    MATVEC_KERNELS
        .iter()
        .find(|k| k.ty == ty && k.family == family)
}

/// The kernel called `name`, with or without its `matvec/` prefix (`q4_k_dot4`).
pub fn find_by_name(name: &str) -> Option<&'static MatvecKernel> {
    let name = name.strip_prefix("matvec/").unwrap_or(name);
    MATVEC_KERNELS
        .iter()
        .find(|k| &k.name["matvec/".len()..] == name)
}

/// How a coop kernel stages x in workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum XStage {
    /// f32 values.
    F32,
    /// Needs SHADER_F16.
    F16,
    /// int8 groups of 32 with an f32 scale and sum each (the `dot4` driver).
    Int8,
    /// The same on two int8 planes, the second the first's residual 256 times finer
    /// ([`Dot4Launch::planes`]).
    Int8x2,
}

impl XStage {
    /// The int8 stage of x on `planes` planes (1 or 2).
    pub fn int8(planes: u32) -> XStage {
        match planes {
            2 => XStage::Int8x2,
            _ => XStage::Int8,
        }
    }

    /// The int8 planes x is staged on: 0 for float stages.
    pub fn int8_planes(self) -> u32 {
        match self {
            XStage::F32 | XStage::F16 => 0,
            XStage::Int8 => 1,
            XStage::Int8x2 => 2,
        }
    }

    /// The stage's name in reports and pipeline names: `f32`, `f16`, `int8` or `int8x2`.
    pub fn name(self) -> &'static str {
        match self {
            XStage::F32 => "f32",
            XStage::F16 => "f16",
            XStage::Int8 => "int8",
            XStage::Int8x2 => "int8x2",
        }
    }

    /// Workgroup memory a tile of `tile` elements takes. Float tiles pad each
    /// 32-element unit to an odd number of words (see `wgsl/matvec/coop.wgsl`); int8
    /// tiles add a scale and a sum per 32 elements and bank padding
    /// (`wgsl/matvec/dot4.wgsl`).
    pub fn tile_bytes(self, tile: u64) -> u64 {
        self.columns_tile_bytes(tile, 1)
    }

    /// Workgroup memory `columns` columns' tiles of `tile` elements take, staged at once
    /// (more than one: [`Dot4Launch::columns_at_once`] with x staged).
    pub fn columns_tile_bytes(self, tile: u64, columns: u64) -> u64 {
        match self {
            XStage::F32 => columns * (tile / 32) * 33 * 4,
            XStage::F16 => columns * (tile / 32) * 34 * 2,
            // dot4.wgsl: per column and plane, int8 halves in 16-byte slots (one of
            // padding per 8 groups, at most 15 more to place the second halves); per
            // column a scale and sum per slot; then the second plane's placeholder slot
            // where there is one plane, and the batch queue's counter.
            XStage::Int8 | XStage::Int8x2 => {
                let slots = tile / 32 + tile / 256;
                let planes = self.int8_planes() as u64;
                columns * (planes * (2 * slots + 15) * 16 + slots * 8) + (2 - planes) * 16 + 16
            }
        }
    }
}

impl MatvecKernel {
    /// The complete WGSL source: the kernel's file (`wgsl/<name>.wgsl`) with what it
    /// includes, composed with a launch's `constants` ([`MatvecLaunch::constants`]).
    pub fn source(&self, enables: &[&str], constants: &[WgslConst]) -> Result<String> {
        compose(&format!("{}.wgsl", self.name), enables, constants)
    }

    /// Slices per block (a slice is one dot4 lane's share of a block): the per-type
    /// file's `SLICES`, which a test checks.
    pub fn slices_per_block(&self) -> u64 {
        match self.ty {
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 4,
            _ => 1,
        }
    }

    /// Whether a dot4 kernel's per-type file splits a slice into `slice_load` and
    /// `slice_math`, so that the driver can load one slice ahead
    /// ([`Batches::Prefetch`]) or dot a loaded slice with several columns
    /// ([`Dot4Launch::columns_at_once`]); a test checks it against the WGSL.
    pub fn splits_slices(&self) -> bool {
        self.family == Family::Dot4
            && matches!(self.ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
    }

    /// Whether the router loads this kernel's slices one ahead where it can
    /// ([`Batches::Prefetch`]): those that split them, but Q6_K, whose slice already
    /// holds five loads: split the same way it gained nothing on the H200 (see the
    /// router's batches rule).
    pub fn prefetch_pays(&self) -> bool {
        self.splits_slices() && self.ty != GgmlType::Q6_K
    }
}

impl PartialEq for MatvecKernel {
    /// Kernels are the entries of [`MATVEC_KERNELS`]: one per name.
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// Rows per scalar workgroup, fixed by `wgsl/matvec/scalar.wgsl`.
pub const SCALAR_ROWS_PER_WG: u64 = 64;

/// CPU reference: dequantize each row exactly as ggml does, accumulate in f64.
pub fn cpu_reference(
    ty: GgmlType,
    weights: &[u8],
    m: usize,
    k: usize,
    x: &[f32],
) -> Result<Vec<f32>> {
    for_each_row(ty, weights, m, k, x, |row| {
        row.iter()
            .zip(x)
            .map(|(&w, &x)| w as f64 * x as f64)
            .sum::<f64>() as f32
    })
}

/// `f` of each dequantized row of an M x K matrix, after checking the sizes.
fn for_each_row<T>(
    ty: GgmlType,
    weights: &[u8],
    m: usize,
    k: usize,
    x: &[f32],
    mut f: impl FnMut(&[f32]) -> T,
) -> Result<Vec<T>> {
    let row_bytes = ty
        .bytes_for(k as u64)
        .ok_or_else(|| Error::Invalid(format!("K = {k} is not a whole number of {ty} blocks")))?
        as usize;
    if weights.len() < m * row_bytes || x.len() < k {
        return Err(Error::Invalid(format!(
            "matvec reference: {} weight bytes and {} x values for {m} x {k} {ty}",
            weights.len(),
            x.len()
        )));
    }
    let mut row = vec![0f32; k];
    (0..m)
        .map(|r| {
            dequantize(ty, &weights[r * row_bytes..(r + 1) * row_bytes], &mut row)?;
            Ok(f(&row))
        })
        .collect()
}

/// Per row, the most that quantizing x to int8 on `planes` planes as the `dot4` matvecs
/// do can move y: sum |w_i| * e_i, with e_i the most a value of x's group moves. On one
/// plane (scale amax / 127, round to nearest) that is half a step; on two a whole step of
/// the second plane, amax / (127 * 256) (its residual may round to 128, clamped to 127).
/// An exact kernel stays within it whatever the data, so a test can hold every output
/// to it, including a single row, where NMSE is one noisy sample.
pub fn int8_x_error_bound(
    ty: GgmlType,
    weights: &[u8],
    m: usize,
    k: usize,
    x: &[f32],
    planes: u32,
) -> Result<Vec<f64>> {
    let half_steps: Vec<f64> = x[..k.min(x.len())]
        .chunks(32)
        .flat_map(|g| {
            let amax = g.iter().fold(0f32, |a, v| a.max(v.abs()));
            let step = amax as f64 / 127.0;
            let e = match planes {
                1 => step / 2.0,
                _ => step / 256.0,
            };
            std::iter::repeat_n(e, g.len())
        })
        .collect();
    for_each_row(ty, weights, m, k, x, |row| {
        row.iter()
            .zip(&half_steps)
            .map(|(&w, &h)| (w as f64).abs() * h)
            .sum()
    })
}

/// x quantized as the dot4 kernels take it (`wgsl/matvec/q8_x.wgsl`): per 32 values
/// (zero-padded past the end) the first plane, q1 = x / d1 rounded with d1 = amax / 127
/// (16 + 16 int8), its tail (d1, d1 times the sum of q1 as f32, the sums of q1's halves
/// as i32), the second plane, q2 = (x - d1 q1) / (d1 / 256) rounded (16 + 16 int8), and
/// the two planes' tail (d = d1 / 256, d times the sum of 256 q1 + q2, the halves' sums
/// of 256 q1 + q2). The CPU twin of the WGSL `q8_group`, for tests and benchmarks that
/// hand a kernel pre-quantized x.
pub fn quantize_x_q8(x: &[f32]) -> Vec<u8> {
    // pack4x8snorm: floor(0.5 + 127 * clamp(v, -1, 1)).
    let snorm = |v: f32| (0.5 + 127.0 * v.clamp(-1.0, 1.0)).floor() as i8;
    let mut out = Vec::with_capacity(x.len().div_ceil(32) * Q8_GROUP_BYTES as usize);
    for chunk in x.chunks(32) {
        let mut g = [0f32; 32];
        g[..chunk.len()].copy_from_slice(chunk);
        let amax = g.iter().fold(0f32, |a, v| a.max(v.abs()));
        let inv = if amax > 0.0 { 1.0 / amax } else { 0.0 };
        // q8_planes: the residual in units of the first plane's step, 256 times over.
        let (q1, q2): (Vec<i8>, Vec<i8>) = g
            .iter()
            .map(|&v| {
                let q1 = snorm(v * inv);
                let q1f = q1 as f32 / 127.0 * 127.0;
                (q1, snorm((v * inv * 127.0 - q1f) * 256.0 / 127.0))
            })
            .unzip();
        let sums = |q: &[i8]| {
            let sum = |h: &[i8]| h.iter().map(|&v| v as i32).sum::<i32>();
            (sum(&q[..16]), sum(&q[16..]))
        };
        let tail = |out: &mut Vec<u8>, d: f32, (lo, hi): (i32, i32)| {
            out.extend(d.to_le_bytes());
            out.extend((d * (lo + hi) as f32).to_le_bytes());
            out.extend(lo.to_le_bytes());
            out.extend(hi.to_le_bytes());
        };
        let (s1, s2) = (sums(&q1), sums(&q2));
        out.extend(q1.iter().map(|&v| v as u8));
        tail(&mut out, amax / 127.0, s1);
        out.extend(q2.iter().map(|&v| v as u8));
        let both = (256 * s1.0 + s2.0, 256 * s1.1 + s2.1);
        tail(&mut out, amax / (127.0 * 256.0), both);
    }
    out
}

/// Normalized mean squared error, the bound llama.cpp's backend tests put on MUL_MAT.
pub fn nmse(reference: &[f32], actual: &[f32]) -> f64 {
    let err: f64 = reference
        .iter()
        .zip(actual)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let norm: f64 = reference.iter().map(|&a| (a as f64).powi(2)).sum();
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::{random_blocks, GgmlType};

    /// The transposes against the layout's definition, bit by bit, on the qh bytes of
    /// random Q5_K blocks.
    #[test]
    fn fifth_bits_transpose_matches_the_definition() {
        for block in random_blocks(GgmlType::Q5_K, 200, 5).chunks_exact(176) {
            let qh = &block[16..48];
            let mut expected = [0u32; 8];
            for (l, byte) in qh.iter().enumerate() {
                for (s, word) in expected.iter_mut().enumerate() {
                    *word |= u32::from((byte >> s) & 1) << (8 * (l % 4) + l / 4);
                }
            }
            assert_eq!(super::q5k_fifth_bits_by_sub_block(qh), expected, "{qh:?}");
        }
    }
}
