//! Decode attention and the KV cache it reads, under `wgsl/attention/`:
//! - `rope_kv`: RoPE on q and k, and the append of k and v to the cache, in the cache's
//!   format ([`KvType`]);
//! - `decode`: split-K attention (flash-decoding) on subgroups: chunks of positions
//!   spread over the GPU, every query head of a KV head served by one workgroup so
//!   each K and V byte is read once per token;
//! - `decode_portable`: the same split without subgroups;
//! - `decode_merge`: the chunks merged by the last workgroup of each KV head to finish
//!   (inside `decode`; [`Merge`]);
//! - `combine`: merges the chunks in a second dispatch, for the portable kernel and
//!   where the merge inside `decode` is not trusted;
//! - `rope_kv_batch` and `prefill`: the same for a prompt's tokens at once
//!   ([`PrefillAttention`], in `prefill.rs`).
//!
//! `rope_kv`, `decode`, `decode_portable` and `combine` serve the rows of a step: each
//! row one token of some sequence, at its own position, over its own region of one cache
//! buffer per layer, as the step's row table says ([`AttentionRow`], written by the host
//! each step). A lone sequence's step is the one-row case of the same pipelines
//! ([`AttentionLaunch::rope_kv`], [`AttentionLaunch::dispatches`]): GPU compilers
//! contract multiply-adds per shader, so only the same shader guarantees a row the same
//! bits alone as beside others, and each row's split is its own position's, so its
//! reduction order does not depend on the other rows either.
//!
//! An [`AttentionLaunch`] is a typed value the router makes once per model
//! (`router::route_attention`); [`AttentionLaunch::split`] divides a step's positions
//! into chunks, a pure function of the launch and the position. [`attention_ref`] is
//! the f64 CPU reference.

use serde::Serialize;

use crate::device::{Access, Device, DeviceProfile, Dispatch, IndexChecks, PipelineId, Slice};
use crate::{Error, Result};

use super::wgsl::{compose, WgslConst, WgslValue};
use super::{PipelineCache, PipelineTemplate};

mod prefill;
pub use prefill::{
    NoMatrixAttention, PrefillAttention, PrefillEngine, PrefillPipelines, FLASH_SUBGROUPS,
    PREFILL_CHUNK, PREFILL_STATE_BYTES, PREFILL_WG, PREFILL_WORKGROUP_BYTES,
};

/// The attention heads of a layer, as RoPE and the KV cache see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Heads {
    /// Query heads.
    pub n_heads: u64,
    /// Key and value heads; `n_heads` is a multiple of it (grouped-query attention).
    pub n_kv_heads: u64,
    /// Values per head, of q, k and v alike.
    pub head_dim: u64,
    /// Dimensions of each head RoPE rotates.
    pub rope_dim: u64,
    /// Which of a head's values RoPE rotates together.
    pub rope: RopeStyle,
}

/// How RoPE pairs a head's values: llama.cpp's rope modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeStyle {
    /// Adjacent values (2i, 2i + 1): llama files, whose converter permuted Q and K to
    /// match.
    #[default]
    Normal,
    /// Value i with i + rope_dim / 2: qwen2 and gemma3 files.
    Neox,
}

impl RopeStyle {
    /// The two values of a head that rotated pair `i` of `rope_dim / 2` takes.
    pub fn pair(self, i: usize, rope_dim: usize) -> (usize, usize) {
        match self {
            RopeStyle::Normal => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + rope_dim / 2),
        }
    }
}

/// The RoPE + append pipeline at `root` (`rope_kv` or `rope_kv_batch` in a cache
/// format) for `heads`' rope mode: its ledger name and WGSL.
fn rope_kv_source(root: &str, rope: RopeStyle) -> Result<(String, String)> {
    let stem = root.trim_end_matches(".wgsl");
    let name = match rope {
        RopeStyle::Normal => stem.to_string(),
        RopeStyle::Neox => format!("{stem} neox"),
    };
    let neox = WgslConst::bool("NEOX", rope == RopeStyle::Neox);
    Ok((name, compose(root, &[], &[neox])?))
}

/// The RoPE + append pipeline, created on first use.
fn rope_kv_pipeline(
    device: &dyn Device,
    cache: &PipelineCache,
    root: &str,
    rope: RopeStyle,
    (params_bytes, storage): (u32, &'static [Access]),
) -> Result<PipelineId> {
    let (name, source) = rope_kv_source(root, rope)?;
    cache.get_or_create(device, &name, || {
        Ok((source, template(params_bytes, storage)))
    })
}

/// Units of work `attention/rope_kv` takes per token: a pair of values of q, then of
/// k and v for plain caches, or a block of 32 of k and v for q8_0.
fn rope_kv_units(h: Heads, kv: KvType) -> u64 {
    let q_pairs = h.n_heads * (h.head_dim / 2);
    match kv {
        KvType::F32 | KvType::F16 => q_pairs + h.kv_dim(),
        KvType::Q8_0 => q_pairs + 2 * h.kv_dim() / KV_Q8_BLOCK,
    }
}

impl Heads {
    /// Query heads per KV head.
    pub fn group(&self) -> u64 {
        self.n_heads / self.n_kv_heads.max(1)
    }

    /// Values per position of the K cache (and of the V cache).
    pub fn kv_dim(&self) -> u64 {
        self.n_kv_heads * self.head_dim
    }
}

/// How the KV cache stores its values. A cache holds one row per position and KV head:
/// `head_dim` values in the format's words ([`KvType::row_words`] of them), laid out
/// `[position][kv head][row]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    /// Exact: what the exact-math references compare against.
    F32,
    /// Half the bytes of f32; each value rounded to f16 (relative error up to 2^-11).
    #[default]
    F16,
    /// ggml's q8_0 blocks: per 32 values, int8 values q and a scale d = max|x| / 127
    /// (each value d * q, q rounded half away from zero), with d kept in f32 rather than
    /// ggml's f16 (the padded row has room for it). A head of 128 takes 144 bytes where
    /// f16 takes 256; each value is off by at most d / 2, 1/254 of its block's largest.
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// Values per q8_0 block of the KV cache.
pub const KV_Q8_BLOCK: u64 = 32;

impl KvType {
    /// Every format, f32 first.
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8_0];

    /// The format's name: `f32`, `f16` or `q8_0` (what `FromStr` reads).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of the word the cache is written in (`KvWord` in the WGSL): a pair of
    /// values for f32 and f16, four int8 values (or a scale) for q8_0.
    pub fn word_bytes(self) -> u64 {
        match self {
            KvType::F32 => 8,
            KvType::F16 | KvType::Q8_0 => 4,
        }
    }

    /// Words of one row of `head_dim` values (the WGSL's KV_ROW): pairs for f32 and f16;
    /// for q8_0 the int8 values, a scale per block, padding to a multiple of 4 words.
    pub fn row_words(self, head_dim: u64) -> u64 {
        match self {
            KvType::F32 | KvType::F16 => head_dim / 2,
            KvType::Q8_0 => (head_dim / 4 + head_dim / KV_Q8_BLOCK).next_multiple_of(4),
        }
    }

    /// Bytes of one row of `head_dim` values.
    pub fn row_bytes(self, head_dim: u64) -> u64 {
        self.row_words(head_dim) * self.word_bytes()
    }

    /// Values of a 16-byte word as `attention/decode` reads the cache.
    pub fn word_values(self) -> u64 {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 8,
            KvType::Q8_0 => 16,
        }
    }

    /// Whether rows of `head_dim` values can be stored in this format.
    pub fn check_head_dim(self, head_dim: u64) -> Result<()> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::Invalid(format!(
                "a head of {head_dim} values: the KV cache holds pairs of values"
            )));
        }
        if self == KvType::Q8_0 && !head_dim.is_multiple_of(KV_Q8_BLOCK) {
            return Err(Error::Invalid(format!(
                "a q8_0 KV cache holds whole blocks of {KV_Q8_BLOCK} values; heads of \
                 {head_dim} are not: use --kv-type f16"
            )));
        }
        Ok(())
    }

    /// The values a row of `values` reads back as from the cache: what a CPU reference
    /// of this format computes with.
    pub fn stored_row(self, values: &[f32]) -> Vec<f32> {
        match self {
            KvType::F32 => values.to_vec(),
            KvType::F16 => values
                .iter()
                .map(|&v| half::f16::from_f32(v).to_f32())
                .collect(),
            KvType::Q8_0 => values
                .chunks(KV_Q8_BLOCK as usize)
                .flat_map(|block| {
                    let (d, q) = q8_block(block);
                    q.into_iter().map(move |q| q as f32 * d)
                })
                .collect(),
        }
    }

    /// Rows of `head_dim` values (`values.len()` a multiple of it) in the cache's
    /// layout, as `attention/rope_kv` writes them.
    pub fn encode(self, values: &[f32], head_dim: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            values.len() / head_dim.max(1) * self.row_bytes(head_dim as u64) as usize,
        );
        for row in values.chunks(head_dim) {
            match self {
                KvType::F32 => out.extend(row.iter().flat_map(|v| v.to_le_bytes())),
                KvType::F16 => out.extend(
                    row.iter()
                        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes()),
                ),
                KvType::Q8_0 => {
                    let start = out.len();
                    let blocks: Vec<(f32, Vec<i8>)> =
                        row.chunks(KV_Q8_BLOCK as usize).map(q8_block).collect();
                    out.extend(blocks.iter().flat_map(|(_, q)| q.iter().map(|&q| q as u8)));
                    out.extend(blocks.iter().flat_map(|(d, _)| d.to_le_bytes()));
                    out.resize(start + self.row_bytes(head_dim as u64) as usize, 0);
                }
            }
        }
        out
    }

    /// The values of `n_rows` rows of `head_dim` in the cache's layout.
    pub fn decode(self, bytes: &[u8], head_dim: usize, n_rows: usize) -> Vec<f32> {
        let row_bytes = self.row_bytes(head_dim as u64) as usize;
        let mut out = Vec::with_capacity(n_rows * head_dim);
        for row in bytes.chunks(row_bytes).take(n_rows) {
            match self {
                KvType::F32 => out.extend(
                    row.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
                KvType::F16 => out.extend(
                    row.chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
                ),
                KvType::Q8_0 => {
                    let scales = &row[head_dim..];
                    out.extend(row[..head_dim].iter().enumerate().map(|(i, &q)| {
                        let s = &scales[4 * (i / KV_Q8_BLOCK as usize)..];
                        q as i8 as f32 * f32::from_le_bytes([s[0], s[1], s[2], s[3]])
                    }));
                }
            }
        }
        out
    }
}

/// One q8_0 block of the KV cache as `attention/rope_kv_block.wgsl` quantizes it: d =
/// max|x| / 127, q = x * (1 / d) rounded half away from zero.
fn q8_block(block: &[f32]) -> (f32, Vec<i8>) {
    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = block
        .iter()
        .map(|&x| (x * id).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (d, q)
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = Error;

    fn from_str(s: &str) -> Result<KvType> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| Error::Invalid(format!("unknown KV cache type `{s}`: f16, q8_0 or f32")))
    }
}

/// The kernel of a decode attention launch, with what it fixes at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DecodeKernel {
    /// `attention/decode.wgsl`: teams of `team` lanes (at least 4, within the smallest
    /// subgroup the device may run) read a row in 16-byte words, `lane_words` per lane,
    /// four positions at a time, each quarter of a team keeping one head slot's softmax.
    Subgroup {
        /// Lanes per team.
        team: u32,
        /// 16-byte words of a row each lane reads.
        lane_words: u32,
    },
    /// `attention/decode_portable.wgsl`: scores of `tile` positions in workgroup
    /// memory, `acc` accumulator pairs per invocation.
    Portable {
        /// Positions scored per tile.
        tile: u32,
        /// Accumulator pairs per invocation.
        acc: u32,
    },
}

/// How a step split into several chunks merges them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Merge {
    /// Inside the decode dispatch: the last workgroup of each KV head and head group to
    /// finish its chunk merges the column (`attention/decode_merge.wgsl`; subgroup
    /// kernel only).
    LastWorkgroup,
    /// `attention/combine.wgsl`, a second dispatch.
    CombinePass,
}

impl std::str::FromStr for Merge {
    type Err = Error;

    fn from_str(s: &str) -> Result<Merge> {
        match s {
            "last-workgroup" => Ok(Merge::LastWorkgroup),
            "combine" => Ok(Merge::CombinePass),
            _ => Err(Error::Invalid(format!(
                "unknown attention merge `{s}`: last-workgroup or combine"
            ))),
        }
    }
}

/// Bytes of the partials a split step leaves (see [`Partials`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartBytes {
    /// Of the running maximum and sum (m, l) of every query head and chunk.
    pub ml: u64,
    /// Of the accumulators: a head's values per query head and chunk, in f32.
    pub acc: u64,
    /// Of the finished-chunk counts of [`Merge::LastWorkgroup`]: the subgroup kernel
    /// binds them whichever the merge; 0 for the portable kernel.
    pub counts: u64,
}

/// Where a step split into chunks leaves its partials: (m, l) and the accumulator of
/// each query head and chunk, and (subgroup kernel) the count of each column's finished
/// chunks for [`Merge::LastWorkgroup`], which must be zeros before the first step (a
/// new buffer's) and which every step leaves so. `ml` and `acc` must start at a
/// multiple of 256 bytes (see `attention/decode_merge.wgsl`).
#[derive(Clone, Copy, Debug)]
pub struct Partials {
    /// (m, l) of every query head and chunk.
    pub ml: Slice,
    /// The accumulators of every query head and chunk.
    pub acc: Slice,
    /// Finished chunks per column; zeros between steps.
    pub counts: Slice,
}

/// A query head's partial slots start this many chunks apart at least: 256 bytes of
/// (m, l), so no cache line holds two heads' partials.
pub const PART_STRIDE_CHUNKS: u64 = 32;

/// How one step's positions are divided: `n_chunks` chunks of `chunk` positions (the
/// last shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Split {
    /// Positions the step attends to.
    pub n_pos: u64,
    /// Positions per chunk.
    pub chunk: u64,
    /// Chunks: `n_pos.div_ceil(chunk)`.
    pub n_chunks: u64,
}

/// One row of a decode step's row table (`attention/rows.wgsl`), which the host writes
/// each step: row r of the step is one token of some sequence, its q, k and v row r of
/// the qkv rows. 32 bytes, eight little-endian u32s: `pos`, `cache_first`,
/// `window_first`, `chunk`, `n_chunks`, then three zeros. Made by
/// [`AttentionLaunch::row`], which fixes the split.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttentionRow {
    /// The token's position in its sequence.
    pub pos: u32,
    /// The cache row of its sequence's position 0: sequences' regions are consecutive
    /// ranges of one cache buffer per layer.
    pub cache_first: u32,
    /// The first position attended to: `max(0, pos + 1 - window)` on a sliding-window
    /// layer, else 0.
    pub window_first: u32,
    /// Positions per chunk: [`AttentionLaunch::split`] of the positions the row
    /// attends to, as a lone step of this row takes.
    pub chunk: u32,
    /// Chunks of that split.
    pub n_chunks: u32,
    /// Zeros (the WGSL struct's padding to 32 bytes).
    pub pad: [u32; 3],
}

/// Bytes of an [`AttentionRow`] in the row table.
pub const ATTENTION_ROW_BYTES: u64 = 32;

impl AttentionRow {
    /// `rows` as the row table holds them on the device.
    pub fn bytes(rows: &[AttentionRow]) -> &[u8] {
        bytemuck::cast_slice(rows)
    }
}

/// Decode attention for a model's heads and KV format on one device: the kernel, its
/// constants and the chunking rule, fixed when the model is planned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttentionLaunch {
    heads: Heads,
    kv: KvType,
    kernel: DecodeKernel,
    merge: Merge,
    wg: u32,
    /// Query heads per workgroup: a KV head's group, or a part of it.
    heads_per_group: u32,
    /// Positions the cache holds.
    n_ctx: u64,
    /// Workgroups a long context is spread over (per layer), at most.
    target_workgroups: u64,
    /// Positions per chunk at least.
    min_chunk: u64,
    /// Positions per chunk at most, where the device cuts an invocation's loops short
    /// ([`DeviceProfile::loop_iterations`]).
    max_chunk: Option<u64>,
}

/// Invocations of a subgroup decode workgroup, where its workgroup memory allows. On
/// the H200 128 beat 256 and 512 at every depth (8B heads at 4,096 positions: 19.8
/// against 23.1 µs a layer; results/long_context).
pub const DECODE_WG: u32 = 128;
/// Invocations of a subgroup decode workgroup at least (see `subgroup`).
pub const DECODE_MIN_WG: u32 = 32;
/// Query heads a subgroup decode workgroup serves at most (the kernel scores a vec4 of
/// heads): more split into head groups, each reading the KV head again.
pub const DECODE_HEADS: u32 = 4;
/// Positions a team of the subgroup kernel takes at once. Eight (two fours, all their
/// rows read before any is used) were faster on the H200 from 16,384 positions and
/// slower up to 4,096 (results/long_context).
pub const DECODE_ROWS: u32 = 4;
/// Positions a chunk of the subgroup kernel takes at least, rounded up to whole steps
/// (every team's rows once): shorter ones cost more in the combine pass and each
/// workgroup's fixed work than their parallelism gains. On the H200 64 was best or
/// tied for the 8B and SmolLM2 heads at 2,048 to 32,768 positions (results/long_context).
pub const DECODE_MIN_CHUNK: u64 = 64;
/// Workgroup memory the subgroup kernel may take, however much the device has.
pub const DECODE_WORKGROUP_BYTES: u64 = 40 << 10;
/// Loop iterations a decode invocation runs outside its chunk's steps, at most: the
/// query's staging, the teams' merge, the chunks' merge by the last workgroup (its
/// rounds over a context's chunks) and the output.
const DECODE_FIXED_LOOP_ITERATIONS: u64 = 4096;
/// Invocations of a portable decode workgroup.
pub const PORTABLE_WG: u32 = 256;
/// Positions per tile of the portable kernel.
pub const PORTABLE_TILE: u32 = 64;
/// Query heads a portable workgroup serves at most.
pub const PORTABLE_HEADS: u32 = 16;
/// Accumulator pairs per invocation of the portable kernel, at most.
pub const PORTABLE_ACC: u32 = 8;

impl AttentionLaunch {
    /// The subgroup kernel for subgroups of `sg_min..=sg_max` lanes and
    /// `workgroup_bytes` of workgroup memory, on workgroups of `invocations` (a power of
    /// two; fewer where workgroup memory asks, more where a subgroup is wider). Refused
    /// where a head's row is not whole 16-byte words of the format (f16 heads not a
    /// multiple of 8, f32 of 4): the portable kernel takes those.
    pub fn subgroup(
        heads: Heads,
        kv: KvType,
        (sg_min, sg_max): (u32, u32),
        workgroup_bytes: u64,
        invocations: u32,
        n_ctx: u64,
        target_workgroups: u64,
    ) -> Result<AttentionLaunch> {
        Self::check_heads(heads, kv)?;
        let word_values = kv.word_values();
        if !heads.head_dim.is_multiple_of(word_values) {
            return Err(Error::Invalid(format!(
                "subgroup decode attention reads rows in words of {word_values} {kv} values; \
                 heads of {} are not whole words",
                heads.head_dim
            )));
        }
        let data_words = heads.head_dim / word_values;
        // The largest power of two no wider than the smallest subgroup, nor (rounded up
        // to a power of two) than a row's words, but at least a lane per head slot: the
        // team's scores are reduce-scattered over its four quarters.
        let sg_floor = 1u64 << (63 - (sg_min.max(1) as u64).leading_zeros());
        if sg_floor < DECODE_HEADS as u64 {
            return Err(Error::Invalid(format!(
                "subgroup decode attention needs subgroups of at least {DECODE_HEADS} lanes, \
                 not {sg_min}"
            )));
        }
        let team = data_words
            .next_power_of_two()
            .max(DECODE_HEADS as u64)
            .min(sg_floor);
        let lane_words = data_words.div_ceil(team);
        // At least 32 invocations: on lavapipe at 4 lanes, the earlier decode kernel's
        // workgroups of 16 (four subgroups) gave wrong sums over 9,000 positions, and 32
        // or 64 the right ones. The cause is not found; no GPU runs subgroups that small.
        let wg_min = sg_max.max(DECODE_MIN_WG).next_power_of_two();
        let budget = workgroup_bytes.min(DECODE_WORKGROUP_BYTES);
        let mut wg = invocations.next_power_of_two().max(wg_min);
        let mut g = heads.group().min(DECODE_HEADS as u64) as u32;
        while Self::subgroup_bytes(heads, kv, wg, g, team) > budget {
            if wg / 2 >= wg_min {
                wg /= 2;
            } else if g > 1 {
                g -= 1;
            } else {
                return Err(Error::Invalid(format!(
                    "subgroup decode attention over heads of {} needs {} bytes of workgroup \
                     memory, past {budget}",
                    heads.head_dim,
                    Self::subgroup_bytes(heads, kv, wg, g, team)
                )));
            }
        }
        let teams = wg as u64 / team;
        Ok(AttentionLaunch {
            heads,
            kv,
            kernel: DecodeKernel::Subgroup {
                team: team as u32,
                lane_words: lane_words as u32,
            },
            merge: Merge::LastWorkgroup,
            wg,
            heads_per_group: g,
            n_ctx,
            target_workgroups: target_workgroups.max(1),
            min_chunk: DECODE_MIN_CHUNK.next_multiple_of(teams * DECODE_ROWS as u64),
            max_chunk: None,
        })
    }

    /// Workgroup memory of the subgroup kernel: scaled q (4 head slots), each team's
    /// accumulators for `g` heads, each team's (m, l).
    fn subgroup_bytes(heads: Heads, kv: KvType, wg: u32, g: u32, team: u64) -> u64 {
        let word_values = kv.word_values();
        let data_words = heads.head_dim / word_values;
        let vals = 4 * word_values;
        let teams = wg as u64 / team;
        4 * data_words * vals + teams * g as u64 * data_words * vals + 2 * teams * 16
    }

    /// The portable kernel.
    pub fn portable(
        heads: Heads,
        kv: KvType,
        n_ctx: u64,
        target_workgroups: u64,
    ) -> Result<AttentionLaunch> {
        Self::check_heads(heads, kv)?;
        let half = heads.head_dim / 2;
        let by_acc = (PORTABLE_WG * PORTABLE_ACC) as u64 / half.max(1);
        let heads_per_group = heads.group().min(PORTABLE_HEADS as u64).min(by_acc);
        if heads_per_group == 0 {
            return Err(Error::Invalid(format!(
                "portable decode attention keeps at most {} value pairs of a head per \
                 workgroup; heads of {} values need {half}",
                PORTABLE_WG * PORTABLE_ACC,
                heads.head_dim
            )));
        }
        let acc = (heads_per_group * half).div_ceil(PORTABLE_WG as u64) as u32;
        Ok(AttentionLaunch {
            heads,
            kv,
            kernel: DecodeKernel::Portable {
                tile: PORTABLE_TILE,
                acc,
            },
            merge: Merge::CombinePass,
            wg: PORTABLE_WG,
            heads_per_group: heads_per_group as u32,
            n_ctx,
            target_workgroups: target_workgroups.max(1),
            min_chunk: PORTABLE_TILE as u64,
            max_chunk: None,
        })
    }

    fn check_heads(heads: Heads, kv: KvType) -> Result<()> {
        if heads.n_kv_heads == 0 || !heads.n_heads.is_multiple_of(heads.n_kv_heads) {
            return Err(Error::Invalid(format!(
                "attention of {} query heads over {} KV heads: the KV heads must divide \
                 the query heads",
                heads.n_heads, heads.n_kv_heads
            )));
        }
        kv.check_head_dim(heads.head_dim)
    }

    /// The heads it attends over.
    pub fn heads(&self) -> Heads {
        self.heads
    }

    /// The format of the KV cache it reads.
    pub fn kv(&self) -> KvType {
        self.kv
    }

    /// The decode kernel and its compile-time layout.
    pub fn kernel(&self) -> DecodeKernel {
        self.kernel
    }

    /// How a split step's chunks are merged.
    pub fn merge(&self) -> Merge {
        self.merge
    }

    /// This launch merging chunks by `merge` (the subgroup kernel's default is
    /// [`Merge::LastWorkgroup`]); the portable kernel has only the combine pass.
    pub fn with_merge(self, merge: Merge) -> Result<AttentionLaunch> {
        if let (DecodeKernel::Portable { .. }, Merge::LastWorkgroup) = (self.kernel, merge) {
            return Err(Error::Invalid(
                "the portable decode attention kernel merges its chunks by the combine pass".into(),
            ));
        }
        Ok(AttentionLaunch { merge, ..self })
    }

    /// Query heads per workgroup: a KV head's group, or a part of it.
    pub fn heads_per_group(&self) -> u32 {
        self.heads_per_group
    }

    /// Invocations per decode workgroup.
    pub fn invocations(&self) -> u32 {
        self.wg
    }

    /// Positions the cache holds.
    pub fn n_ctx(&self) -> u64 {
        self.n_ctx
    }

    /// The fewest positions a chunk holds: a step over fewer runs as one chunk.
    pub fn min_chunk(&self) -> u64 {
        self.min_chunk
    }

    /// This launch with chunks of at least `n` positions (the router's A/B override of
    /// the kernel's own rule).
    pub fn with_min_chunk(self, n: u64) -> AttentionLaunch {
        AttentionLaunch {
            min_chunk: n.max(1),
            ..self
        }
    }

    /// This launch with chunks short enough that no invocation runs more than half of
    /// `limit` loop iterations (a margin for loops the count misses), where the device
    /// has such a limit; a context longer than the chunks `target_workgroups` allows
    /// then takes more chunks.
    pub fn with_loop_limit(self, limit: Option<u64>) -> Result<AttentionLaunch> {
        let Some(limit) = limit else {
            return Ok(AttentionLaunch {
                max_chunk: None,
                ..self
            });
        };
        let (per_step, step_positions) = self.loop_iterations_per_step();
        let steps = (limit / 2).saturating_sub(DECODE_FIXED_LOOP_ITERATIONS) / per_step;
        if steps == 0 {
            return Err(Error::Invalid(format!(
                "decode attention: a step over {step_positions} positions takes {per_step} \
                 loop iterations of an invocation, and the device allows {limit} in all"
            )));
        }
        Ok(AttentionLaunch {
            max_chunk: Some(steps * step_positions),
            ..self
        })
    }

    /// Loop iterations an invocation runs per step of its chunk, at most, and the
    /// positions a step covers: each loop counted as its trips plus one (the trip that
    /// finds it done, which lavapipe's count includes).
    fn loop_iterations_per_step(&self) -> (u64, u64) {
        let wg = self.wg as u64;
        let g = self.heads_per_group as u64;
        match self.kernel {
            DecodeKernel::Subgroup { team, lane_words } => {
                let (team, lw) = (team as u64, lane_words as u64);
                let slot_lanes = (team / 4).max(1);
                let butterfly = slot_lanes.ilog2() as u64 + 1;
                let spread = if lw > 1 { (lw + 1) + lw * (g + 1) } else { 0 };
                let teams = wg / team;
                (
                    1 + (lw + 1) + butterfly + spread,
                    teams * DECODE_ROWS as u64,
                )
            }
            DecodeKernel::Portable { tile, acc } => {
                let (tile, acc) = (tile as u64, acc as u64);
                let half = self.heads.head_dim / 2;
                let dots = (g * tile).div_ceil(wg);
                let per_tile = 1
                    + (dots + 1)
                    + dots * (half + 1)
                    + 2 * (tile + 1)
                    + (acc + 1)
                    + acc * (tile + 1);
                (per_tile, tile)
            }
        }
    }

    /// Positions per chunk at most (None: as many as the split gives).
    pub fn max_chunk(&self) -> Option<u64> {
        self.max_chunk
    }

    /// Workgroups per chunk: one per KV head and head group.
    pub fn workgroups_per_chunk(&self) -> u64 {
        self.heads.n_kv_heads * self.head_groups()
    }

    fn head_groups(&self) -> u64 {
        self.heads.group().div_ceil(self.heads_per_group as u64)
    }

    /// The most chunks a step is split into: about `target_workgroups` workgroups.
    pub fn max_chunks(&self) -> u64 {
        self.target_workgroups
            .div_ceil(self.workgroups_per_chunk())
            .max(1)
    }

    /// The chunks of a step over `n_pos` positions: as many chunks of at least
    /// `min_chunk` positions as fit, up to [`max_chunks`](Self::max_chunks), and more
    /// where chunks would be longer than [`max_chunk`](Self::max_chunk).
    pub fn split(&self, n_pos: u64) -> Split {
        let n_pos = n_pos.max(1);
        let n_chunks = (n_pos / self.min_chunk).clamp(1, self.max_chunks());
        let n_chunks = match self.max_chunk {
            Some(most) => n_chunks.max(n_pos.div_ceil(most)),
            None => n_chunks,
        };
        let chunk = n_pos.div_ceil(n_chunks);
        Split {
            n_pos,
            chunk,
            n_chunks: n_pos.div_ceil(chunk),
        }
    }

    /// Partial slots per query head: the largest split's chunks (no step over fewer
    /// positions splits into more), rounded up to [`PART_STRIDE_CHUNKS`].
    pub fn part_stride(&self) -> u64 {
        self.split(self.n_ctx)
            .n_chunks
            .next_multiple_of(PART_STRIDE_CHUNKS)
    }

    /// Bytes of the partials of the largest split; counts only for the subgroup
    /// kernel, which binds them whichever the merge.
    pub fn part_bytes(&self) -> PartBytes {
        let slots = self.heads.n_heads * self.part_stride();
        let counts = match self.kernel {
            DecodeKernel::Subgroup { .. } => self.workgroups_per_chunk() * 4,
            DecodeKernel::Portable { .. } => 0,
        };
        PartBytes {
            ml: slots * 8,
            acc: slots * self.heads.head_dim * 4,
            counts,
        }
    }

    /// Bytes of one position's K rows (all KV heads; V's are as many).
    pub fn position_bytes(&self) -> u64 {
        self.heads.n_kv_heads * self.kv.row_bytes(self.heads.head_dim)
    }

    /// Bytes of one layer's K cache (the V cache is as big).
    pub fn cache_bytes(&self) -> u64 {
        self.n_ctx * self.position_bytes()
    }

    /// K and V bytes a step over `n_pos` positions reads, per layer.
    pub fn kv_bytes_read(&self, n_pos: u64) -> u64 {
        2 * n_pos * self.position_bytes() * self.head_groups()
    }

    /// Whether `profile` can run this launch.
    pub fn check(&self, profile: &DeviceProfile) -> Result<()> {
        let fail = |what: String| Err(Error::Invalid(format!("decode attention: {what}")));
        if let DecodeKernel::Subgroup { team, .. } = self.kernel {
            if !profile.subgroups {
                return fail(format!("{} has no subgroups", profile.name));
            }
            let (sg_min, sg_max) = profile.subgroup_sizes_run();
            if team > sg_min.max(1) || !self.wg.is_multiple_of(sg_max.max(1)) {
                return fail(format!(
                    "made for other subgroup sizes than {}'s {sg_min}..={sg_max}",
                    profile.name
                ));
            }
        }
        if self.wg
            > profile
                .max_invocations_per_workgroup
                .min(profile.max_workgroup_size_x)
        {
            return fail(format!("{} invocations per workgroup", self.wg));
        }
        if self.workgroup_bytes() > profile.workgroup_storage_bytes as u64 {
            return fail(format!(
                "{} bytes of workgroup memory, past {}'s {}",
                self.workgroup_bytes(),
                profile.name,
                profile.workgroup_storage_bytes
            ));
        }
        let limit = profile.max_workgroups_per_dim as u64;
        if self.max_chunks() > limit || self.heads.n_kv_heads > limit {
            return fail(format!("more than {limit} workgroups in a dimension"));
        }
        let binding = profile.usable_binding_bytes();
        if self.cache_bytes() > binding {
            return fail(format!(
                "a layer's K cache of {} positions takes {} bytes, past {}'s {binding}-byte \
                 binding limit: at most {} positions fit in {}",
                self.n_ctx,
                self.cache_bytes(),
                profile.name,
                binding / self.position_bytes(),
                self.kv
            ));
        }
        Ok(())
    }

    fn workgroup_bytes(&self) -> u64 {
        let g = self.heads_per_group as u64;
        match self.kernel {
            DecodeKernel::Subgroup { team, .. } => {
                Self::subgroup_bytes(self.heads, self.kv, self.wg, g as u32, team as u64)
            }
            DecodeKernel::Portable { tile, .. } => 4 * (g * tile as u64 + 3 * g),
        }
    }

    fn root(&self) -> &'static str {
        match (self.kernel, self.kv) {
            (DecodeKernel::Subgroup { .. }, KvType::F32) => "attention/decode_f32.wgsl",
            (DecodeKernel::Subgroup { .. }, KvType::F16) => "attention/decode_f16.wgsl",
            (DecodeKernel::Subgroup { .. }, KvType::Q8_0) => "attention/decode_q8_0.wgsl",
            (DecodeKernel::Portable { .. }, KvType::F32) => "attention/decode_portable_f32.wgsl",
            (DecodeKernel::Portable { .. }, KvType::F16) => "attention/decode_portable_f16.wgsl",
            (DecodeKernel::Portable { .. }, KvType::Q8_0) => "attention/decode_portable_q8_0.wgsl",
        }
    }

    /// The constants of the decode kernel's WGSL.
    pub fn constants(&self) -> Vec<WgslConst> {
        let u = WgslConst::u32;
        let mut consts = vec![
            u("WG", self.wg),
            u("HD", self.heads.head_dim as u32),
            u("KV_ROW", self.kv.row_words(self.heads.head_dim) as u32),
            u("G", self.heads_per_group),
        ];
        match self.kernel {
            DecodeKernel::Subgroup { team, lane_words } => consts.extend([
                u("TEAM", team),
                u("LW", lane_words),
                u("MERGE", (self.merge == Merge::LastWorkgroup) as u32),
            ]),
            DecodeKernel::Portable { tile, acc } => consts.extend([u("TILE", tile), u("ACC", acc)]),
        }
        consts
    }

    /// The decode pipeline's ledger name: its root and every constant.
    pub fn pipeline_key(&self) -> String {
        let root = self.root().trim_end_matches(".wgsl");
        let mut key = root.to_string();
        for c in self.constants() {
            if let WgslValue::U32(v) = c.value {
                key += &format!(" {}{v}", c.name.to_lowercase());
            }
        }
        key
    }

    /// The decode kernel's complete WGSL, its constants declared.
    pub fn source(&self) -> Result<String> {
        compose(self.root(), &[], &self.constants())
    }

    /// The RoPE + append pipeline's ledger name and root.
    pub fn rope_kv_root(&self) -> &'static str {
        match self.kv {
            KvType::F32 => "attention/rope_kv_f32.wgsl",
            KvType::F16 => "attention/rope_kv_f16.wgsl",
            KvType::Q8_0 => "attention/rope_kv_q8_0.wgsl",
        }
    }

    /// Creates the append and decode pipelines. The combine pipeline comes from
    /// [`combine_pipeline`](Self::combine_pipeline) at the first step that splits, and
    /// only for [`Merge::CombinePass`]: a short run on a long context, or a merge
    /// inside the decode dispatch, never creates it, and so never holds a pipeline it
    /// does not dispatch.
    pub fn pipelines(
        &self,
        device: &dyn Device,
        cache: &PipelineCache,
    ) -> Result<AttentionPipelines> {
        let rope_kv = rope_kv_pipeline(
            device,
            cache,
            self.rope_kv_root(),
            self.heads.rope,
            (48, ROPE_KV_STORAGE),
        )?;
        let decode = cache.get_or_create(device, &self.pipeline_key(), || {
            let storage = match self.kernel {
                DecodeKernel::Subgroup { .. } => SUBGROUP_DECODE_STORAGE,
                DecodeKernel::Portable { .. } => DECODE_STORAGE,
            };
            Ok((self.source()?, template(32, storage)))
        })?;
        Ok(AttentionPipelines { rope_kv, decode })
    }

    /// The combine pass's pipeline (one for every launch), created on first use.
    pub fn combine_pipeline(device: &dyn Device, cache: &PipelineCache) -> Result<PipelineId> {
        cache.get_or_create(device, COMBINE_NAME, || {
            Ok((combine_source()?.1, template(16, COMBINE_STORAGE)))
        })
    }

    /// Row `r`'s entry of a step's row table: its token at position `pos` of a
    /// sequence whose cache region starts at cache row `cache_first`, attending to the
    /// last `window` positions where given (a local layer), else all of them; its split
    /// is [`split`](Self::split) of the positions it attends to, as a lone decode step
    /// takes, so the row's reduction order is the same whatever rows share its step.
    pub fn row(&self, pos: u64, cache_first: u64, window: Option<u64>) -> Result<AttentionRow> {
        if pos >= self.n_ctx {
            return Err(Error::Invalid(format!(
                "attention at position {pos} of a sequence of {} positions",
                self.n_ctx
            )));
        }
        let window_first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        self.row_over(window_first..pos + 1, cache_first)
    }

    /// [`row`](Self::row) over the positions `positions` (`window_first..pos + 1`).
    fn row_over(&self, positions: std::ops::Range<u64>, cache_first: u64) -> Result<AttentionRow> {
        let (first, n_pos) = (positions.start, positions.end);
        if first >= n_pos || n_pos > self.n_ctx {
            return Err(Error::Invalid(format!(
                "attention over positions {first}..{n_pos} of a cache of {}",
                self.n_ctx
            )));
        }
        let split = self.split(n_pos - first);
        let u = |what: &str, v: u64| {
            u32::try_from(v).map_err(|_| {
                Error::Invalid(format!("attention row: {what} {v} does not fit in 32 bits"))
            })
        };
        Ok(AttentionRow {
            pos: u("position", n_pos - 1)?,
            cache_first: u("first cache row", cache_first)?,
            window_first: first as u32,
            chunk: split.chunk as u32,
            n_chunks: split.n_chunks as u32,
            pad: [0; 3],
        })
    }

    /// Partials for steps of up to `n_rows` rows (see [`part_bytes`](Self::part_bytes)).
    pub fn part_bytes_rows(&self, n_rows: u64) -> PartBytes {
        let one = self.part_bytes();
        PartBytes {
            ml: one.ml * n_rows,
            acc: one.acc * n_rows,
            counts: one.counts * n_rows,
        }
    }

    /// Whether one binding of `profile` holds a layer's K cache (and so its V cache) of
    /// `positions` positions: every sequence's region of a step's rows is in the one
    /// binding. The error gives the numbers, and how many positions fit, so a caller can
    /// serve fewer sequences, or shorter ones.
    pub fn check_cache_binding(&self, profile: &DeviceProfile, positions: u64) -> Result<()> {
        let binding = profile.usable_binding_bytes();
        let bytes = positions.saturating_mul(self.position_bytes());
        if bytes > binding {
            return Err(Error::Invalid(format!(
                "decode attention: a layer's K cache of {positions} positions (every \
                 sequence's region) takes {bytes} bytes, past {}'s {binding}-byte binding \
                 limit: at most {} positions of {} fit in one binding",
                profile.name,
                binding / self.position_bytes(),
                self.kv
            )));
        }
        Ok(())
    }

    /// RoPE and the KV-cache append of the rows of a step, one dispatch: row r's q, k
    /// and v are at `r * row_stride` elements of `qkv` (q first, k at `k_first`, v at
    /// `v_first` after it), `bias` is laid out as one row (zeros for models without) and
    /// added first; q is rotated in place, k rotated into cache row `cache_first + pos`
    /// of `k_cache` (`rows[r]`'s), v copied into that row of `v_cache`. `table` is
    /// [`rope_table`]'s output on the device; `row_table` holds `rows` (as
    /// [`AttentionRow::bytes`] gives them), written before the dispatch runs.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv_rows(
        &self,
        p: &AttentionPipelines,
        rows: &[AttentionRow],
        row_table: Slice,
        table: Slice,
        ((qkv, row_stride), bias): ((Slice, u64), Slice),
        (k_first, v_first): (u64, u64),
        k_cache: Slice,
        v_cache: Slice,
    ) -> Result<Dispatch> {
        let h = self.heads;
        let n_rows = rows.len() as u64;
        self.check_rows(rows, row_table, k_cache)?;
        Ok(Dispatch {
            pipeline: p.rope_kv,
            params: vec![
                h.n_heads as u32,
                h.n_kv_heads as u32,
                h.head_dim as u32,
                h.rope_dim as u32,
                n_rows as u32,
                row_stride as u32,
                k_first as u32,
                v_first as u32,
                self.kv.row_words(h.head_dim) as u32,
                0,
                0,
                0,
            ],
            storage: vec![table, qkv, bias, k_cache, v_cache, row_table],
            workgroups: [
                rope_kv_units(h, self.kv).div_ceil(64).clamp(1, 65535) as u32,
                n_rows.clamp(1, 65535) as u32,
                1,
            ],
            bytes_read: n_rows * ((h.n_heads * h.head_dim + 2 * h.kv_dim()) * 8 + h.rope_dim * 4),
        })
    }

    /// A lone sequence's RoPE and KV-cache append of position `pos`: the one-row case
    /// of [`rope_kv_rows`](Self::rope_kv_rows), the same pipeline, q at element 0 of
    /// `qkv`. `row_table` holds [`row`](Self::row)`(pos, 0, ..)` (the window does not
    /// matter here), written before the dispatch runs.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv(
        &self,
        p: &AttentionPipelines,
        pos: u64,
        row_table: Slice,
        table: Slice,
        (qkv, bias): (Slice, Slice),
        firsts: (u64, u64),
        k_cache: Slice,
        v_cache: Slice,
    ) -> Result<Dispatch> {
        let row = self.row(pos, 0, None)?;
        let stride = qkv.size / 4;
        self.rope_kv_rows(
            p,
            &[row],
            row_table,
            table,
            ((qkv, stride), bias),
            firsts,
            k_cache,
            v_cache,
        )
    }

    /// Whether `rows` can be served: each row's split the one [`row`](Self::row) gives
    /// it (anything else would make a row's bits depend on how it was built), the
    /// table holding them all and the cache every row's cache rows.
    fn check_rows(&self, rows: &[AttentionRow], row_table: Slice, k_cache: Slice) -> Result<()> {
        if rows.is_empty() {
            return Err(Error::Invalid("an attention step of no rows".into()));
        }
        if row_table.size < rows.len() as u64 * ATTENTION_ROW_BYTES {
            return Err(Error::Invalid(format!(
                "a row table of {} bytes for {} rows of {ATTENTION_ROW_BYTES}",
                row_table.size,
                rows.len()
            )));
        }
        let cache_rows = k_cache.size / self.position_bytes();
        for (r, row) in rows.iter().enumerate() {
            let positions = row.window_first as u64..row.pos as u64 + 1;
            let own = self.row_over(positions, row.cache_first as u64)?;
            if *row != own {
                return Err(Error::Invalid(format!(
                    "attention row {r}: {row:?} is not the row its position takes, {own:?}"
                )));
            }
            let end = row.cache_first as u64 + row.pos as u64 + 1;
            if end > cache_rows {
                return Err(Error::Invalid(format!(
                    "attention row {r} reaches cache row {end} of a cache of {cache_rows}"
                )));
            }
        }
        Ok(())
    }

    /// Decode attention of a step's rows, each over its own sequence's cache rows: row
    /// r's q at `r * q_stride` elements of `q`, its output at `r * out_stride` of `out`,
    /// its positions, cache region and split as `rows[r]` says (`row_table` holds
    /// `rows`, as [`AttentionRow::bytes`] gives them, written before the dispatches run).
    /// One decode dispatch over every row (as many chunks as the longest row's split; a
    /// row's workgroups past its chunks do nothing), and the combine pass for every row
    /// where any row splits into several chunks and they merge by
    /// [`Merge::CombinePass`] (`combine` is [`combine_pipeline`](Self::combine_pipeline),
    /// asked for only then). `parts` hold [`part_bytes_rows`](Self::part_bytes_rows) of
    /// at least `rows.len()`.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches_rows(
        &self,
        p: &AttentionPipelines,
        combine: impl FnOnce() -> Result<PipelineId>,
        rows: &[AttentionRow],
        row_table: Slice,
        (q, q_stride): (Slice, u64),
        k_cache: Slice,
        v_cache: Slice,
        parts: Partials,
        (out, out_stride): (Slice, u64),
    ) -> Result<Vec<Dispatch>> {
        self.check_rows(rows, row_table, k_cache)?;
        let h = self.heads;
        let n_rows = rows.len() as u64;
        // The subgroup kernel reads q and writes out in 16-byte words, the portable one
        // in pairs.
        let align = match self.kernel {
            DecodeKernel::Subgroup { .. } => 4,
            DecodeKernel::Portable { .. } => 2,
        };
        if !q_stride.is_multiple_of(align) || !out_stride.is_multiple_of(align) {
            return Err(Error::Invalid(format!(
                "decode attention rows {q_stride} (q) and {out_stride} (out) elements apart: \
                 the kernel reads them in groups of {align}"
            )));
        }
        let z = self.head_groups() * n_rows;
        if z > u16::MAX as u64 {
            return Err(Error::Invalid(format!(
                "decode attention over {n_rows} rows of {} head groups: more than {} \
                 workgroups in a dimension",
                self.head_groups(),
                u16::MAX
            )));
        }
        let stride = self.part_stride();
        let want = self.part_bytes_rows(n_rows);
        if parts.ml.size < want.ml || parts.acc.size < want.acc || parts.counts.size < want.counts {
            return Err(Error::Invalid(format!(
                "decode attention partials for fewer than {n_rows} rows"
            )));
        }
        let scale = 1.0 / (h.head_dim as f32).sqrt();
        let mut storage = vec![q, k_cache, v_cache, parts.ml, parts.acc, out, row_table];
        if let DecodeKernel::Subgroup { .. } = self.kernel {
            storage.push(parts.counts);
        }
        let most_chunks = rows.iter().map(|r| r.n_chunks).max().unwrap_or(1);
        let merge_bytes = |r: &AttentionRow| match r.n_chunks {
            1 => 0,
            n => h.n_heads * n as u64 * (8 + h.head_dim * 4),
        };
        let merges: u64 = rows.iter().map(merge_bytes).sum();
        let kv_read: u64 = rows
            .iter()
            .map(|r| self.kv_bytes_read((r.pos + 1 - r.window_first) as u64))
            .sum();
        let mut out_dispatches = vec![Dispatch {
            pipeline: p.decode,
            params: vec![
                h.n_kv_heads as u32,
                h.group() as u32,
                scale.to_bits(),
                stride as u32,
                q_stride as u32,
                out_stride as u32,
                0,
                0,
            ],
            storage,
            workgroups: [most_chunks, h.n_kv_heads as u32, z as u32],
            bytes_read: kv_read
                + n_rows * h.n_heads * h.head_dim * 4
                + if self.merge == Merge::LastWorkgroup {
                    merges
                } else {
                    0
                },
        }];
        if most_chunks > 1 && self.merge == Merge::CombinePass {
            out_dispatches.push(Dispatch {
                pipeline: combine()?,
                params: vec![
                    (h.head_dim / 2) as u32,
                    h.n_heads as u32,
                    stride as u32,
                    out_stride as u32,
                ],
                storage: vec![parts.ml, parts.acc, out, row_table],
                workgroups: [h.n_heads as u32, n_rows as u32, 1],
                bytes_read: merges,
            });
        }
        Ok(out_dispatches)
    }

    /// A lone sequence's attention of `q` over the cache rows `positions` (the first
    /// `positions.end`, or a sliding window's last ones) into `out`: the one-row case of
    /// [`dispatches_rows`](Self::dispatches_rows), the same pipelines, so its bits are a
    /// row's in any step. `row_table` holds [`row`](Self::row) of these positions at
    /// cache row 0, written before the dispatches run; `parts` hold
    /// [`part_bytes`](Self::part_bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches(
        &self,
        p: &AttentionPipelines,
        combine: impl FnOnce() -> Result<PipelineId>,
        positions: std::ops::Range<u64>,
        row_table: Slice,
        q: Slice,
        k_cache: Slice,
        v_cache: Slice,
        parts: Partials,
        out: Slice,
    ) -> Result<Vec<Dispatch>> {
        let row = self.row_over(positions, 0)?;
        let q_dim = self.heads.n_heads * self.heads.head_dim;
        self.dispatches_rows(
            p,
            combine,
            &[row],
            row_table,
            (q, q_dim),
            k_cache,
            v_cache,
            parts,
            (out, q_dim),
        )
    }

    /// A canonical launch for tools that list every kernel (`kernels::spirv`): the
    /// Llama-3-8B heads on subgroups of 32, or portable.
    pub fn canonical(kv: KvType, subgroups: bool) -> AttentionLaunch {
        let heads = Heads {
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            rope_dim: 128,
            rope: RopeStyle::Normal,
        };
        let launch = match subgroups {
            true => Self::subgroup(heads, kv, (32, 32), 48 << 10, DECODE_WG, 8192, 512),
            false => Self::portable(heads, kv, 8192, 512),
        };
        launch.expect("the canonical heads are valid")
    }
}

/// `attention/rope_kv.wgsl`'s bindings: `rope_kv_batch`'s and the row table.
const ROPE_KV_STORAGE: &[Access] = &[
    Access::Read,
    Access::ReadWrite,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::Read,
];
/// `attention/rope_kv_batch.wgsl`'s bindings.
pub(crate) const ROPE_KV_BATCH_STORAGE: &[Access] = ROPE_KV_STORAGE.split_at(5).0;
/// The subgroup kernel's bindings: [`DECODE_STORAGE`]'s and the merge counts.
const SUBGROUP_DECODE_STORAGE: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::Read,
    Access::ReadWrite,
];
/// Both decode kernels' bindings (`attention/decode_io.wgsl`), the row table last.
const DECODE_STORAGE: &[Access] = SUBGROUP_DECODE_STORAGE.split_at(7).0;
const COMBINE_ROOT: &str = "attention/combine.wgsl";
const COMBINE_NAME: &str = "attention/combine";
const COMBINE_STORAGE: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite, Access::Read];

/// The pipelines of an [`AttentionLaunch`] on a device.
#[derive(Clone, Copy, Debug)]
pub struct AttentionPipelines {
    /// RoPE on q and k and the append of k and v to the cache.
    pub rope_kv: PipelineId,
    /// The decode kernel.
    pub decode: PipelineId,
}

fn template(params_bytes: u32, storage: &'static [Access]) -> PipelineTemplate {
    PipelineTemplate {
        params_bytes,
        storage,
        fallback_reason: None,
        index_checks: IndexChecks::Wgpu,
    }
}

/// The combine pass's (ledger name, WGSL): one pipeline serves every launch.
pub fn combine_source() -> Result<(String, String)> {
    Ok((COMBINE_NAME.to_string(), compose(COMBINE_ROOT, &[], &[])?))
}

/// Every attention kernel's (name, WGSL) in a canonical configuration, for tools that
/// translate every shader.
pub fn sources() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for kv in KvType::ALL {
        for subgroups in [true, false] {
            let launch = AttentionLaunch::canonical(kv, subgroups);
            out.push((
                launch.root().trim_end_matches(".wgsl").to_string(),
                launch.source()?,
            ));
        }
        let root = AttentionLaunch::canonical(kv, true).rope_kv_root();
        out.push(rope_kv_source(root, RopeStyle::Normal)?);
        let (_, neox) = rope_kv_source(root, RopeStyle::Neox)?;
        out.push((format!("{}_neox", root.trim_end_matches(".wgsl")), neox));
    }
    out.push(combine_source()?);
    out.extend(PrefillAttention::sources()?);
    Ok(out)
}

/// cos/sin of every (position, rotated pair) for RoPE with `base`, computed in f64,
/// interleaved, row-major by position: the table `attention/rope_kv` reads.
pub fn rope_table(base: f64, rope_dim: usize, n_pos: usize) -> Vec<f32> {
    rope_table_scaled(base, rope_dim, n_pos, 1.0, None)
}

/// [`rope_table`] with every position multiplied by `position_scale` (linear RoPE
/// scaling: 1 / `rope.scaling.factor`; llama.cpp's freq_scale) and pair i's angle
/// divided by `freq_factors[i]` where given (Llama 3.x's `rope_freqs.weight`, rope_dim
/// / 2 values).
///
/// Panics if `freq_factors` has fewer than rope_dim / 2 values.
pub fn rope_table_scaled(
    base: f64,
    rope_dim: usize,
    n_pos: usize,
    position_scale: f64,
    freq_factors: Option<&[f32]>,
) -> Vec<f32> {
    let half = rope_dim / 2;
    let factor = |i: usize| freq_factors.map_or(1.0, |f| f[i] as f64);
    let mut out = Vec::with_capacity(n_pos * half * 2);
    for pos in 0..n_pos {
        for i in 0..half {
            let theta = pos as f64 * position_scale * base.powf(-2.0 * i as f64 / rope_dim as f64)
                / factor(i);
            out.push(theta.cos() as f32);
            out.push(theta.sin() as f32);
        }
    }
    out
}

/// RoPE of `n_heads` heads in `rope`'s pairing (llama.cpp's normal or NEOX mode), in
/// f64.
#[allow(clippy::too_many_arguments)]
pub fn rope_ref(
    x: &[f32],
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    rope: RopeStyle,
    pos: usize,
    base: f64,
) -> Vec<f32> {
    let mut out = x.to_vec();
    for h in 0..n_heads {
        for i in 0..rope_dim / 2 {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / rope_dim as f64);
            let (s, c) = theta.sin_cos();
            let (a, b) = rope.pair(i, rope_dim);
            let (j0, j1) = (h * head_dim + a, h * head_dim + b);
            let (x0, x1) = (x[j0] as f64, x[j1] as f64);
            out[j0] = (x0 * c - x1 * s) as f32;
            out[j1] = (x0 * s + x1 * c) as f32;
        }
    }
    out
}

/// Decode attention of one query over `n_pos` cached positions (`[pos][kv_head][d]`),
/// in f64.
pub fn attention_ref(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    n_pos: usize,
) -> Vec<f32> {
    let kv_dim = n_kv_heads * head_dim;
    let group = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0f32; n_heads * head_dim];
    for h in 0..n_heads {
        let kvh = h / group;
        let qh = &q[h * head_dim..(h + 1) * head_dim];
        let scores: Vec<f64> = (0..n_pos)
            .map(|t| {
                let k = &k_cache[t * kv_dim + kvh * head_dim..][..head_dim];
                qh.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        // Position by position, each dimension's sum still in position order: the cache
        // is read row after row rather than a column at a time.
        let mut acc = vec![0f64; head_dim];
        for (t, &weight) in e.iter().enumerate() {
            let v = &v_cache[t * kv_dim + kvh * head_dim..][..head_dim];
            for (a, &x) in acc.iter_mut().zip(v) {
                *a += weight * x as f64;
            }
        }
        for (o, a) in out[h * head_dim..][..head_dim].iter_mut().zip(acc) {
            *o = (a / sum) as f32;
        }
    }
    out
}
