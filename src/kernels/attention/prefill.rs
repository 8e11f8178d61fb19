//! Prompt processing (prefill): the batched forms of decode's two attention dispatches,
//! under `wgsl/attention/`:
//! - `rope_kv_batch`: RoPE and the KV-cache append for many tokens at once, the same
//!   bits per token as `rope_kv`;
//! - `prefill`: causal attention of many query tokens over the cache, flash-attention
//!   style (key tiles staged in workgroup memory once for a block of (token, query
//!   head) rows of one KV head, an online softmax), with no cap on the head size or the
//!   token count, in f32 FMAs on 8 x 4 tiles in registers;
//! - `flash`: the same on the adapter's matrix units (Q Kᵀ and P V on cooperative
//!   matrices, the accumulators in them across the whole walk), where it has them
//!   ([`PrefillAttention::on_matrix_units`]).
//!
//! A [`PrefillAttention`] is a typed value made by a pure function of the heads, the
//! cache format and the device's limits. The CPU reference is decode's, per token:
//! [`rope_ref`](super::rope_ref) and [`attention_ref`](super::attention_ref) over the
//! first `start + t + 1` cache rows.

use serde::Serialize;

use crate::device::{
    Access, CoopMatrix, Device, DeviceProfile, Dispatch, IndexChecks, PipelineId, Slice,
};
use crate::{Error, Result};

use super::super::matmul::coop_preamble;
use super::super::wgsl::{compose, WgslConst, WgslValue};
use super::super::{PipelineCache, PipelineTemplate};
use super::{
    rope_kv_pipeline, rope_kv_units, template, AttentionLaunch, Heads, KvType, RopeStyle,
    ROPE_KV_BATCH_STORAGE,
};

/// Invocations of a prefill workgroup, at most (or one per row, where rows are more).
pub const PREFILL_WG: u32 = 128;
/// Pairs of a head staged per chunk of a K or V tile, at most.
pub const PREFILL_CHUNK: u32 = 32;
/// Rows of the register tiles an invocation of `attention/prefill.wgsl` computes: 4,
/// not 8, for twice the invocations on the same workgroup memory. Measured on the H200
/// (2026-12-05, `results/prefill/tiles/h200_2026-12-05`, 2,048 tokens, one layer):
/// 32 rows x 32 keys x 32 pairs of the 8B shape's heads 38.7 ms with 8-row tiles
/// (workgroups of 32), 20.0 with 4-row tiles (of 64); SmolLM2's 4.6 against 2.8. On
/// lavapipe 4-row tiles are about 5 % slower (its invocations are SIMD lanes of one
/// thread).
const PREFILL_TILE_ROWS: u32 = 4;
/// Keys, or output pairs, of those tiles.
const PREFILL_TILE: u32 = 4;
/// Workgroup memory a prefill workgroup takes at most, however much the device has:
/// the 48 KiB WebGPU devices commonly offer. On the H200 (2026-12-05) the 8B shape's
/// 32-row tiles with 32-pair chunks (37.5 KB) took 20.0 ms at 2,048 tokens where the
/// 16-pair chunks that 32 KB allowed took 22.9.
pub const PREFILL_WORKGROUP_BYTES: u64 = 48 << 10;
/// (rows, key tile) in order of preference: most rows first (each K and V byte staged
/// serves every row), then longer key tiles (fewer barriers per position). Both are
/// multiples of the register tile.
const SHAPES: [(u32, u32); 7] = [
    (32, 32),
    (16, 32),
    (16, 16),
    (8, 32),
    (8, 16),
    (8, 8),
    (8, 4),
];
/// Invocations of a `rope_kv_batch` workgroup (the WGSL's WG).
const ROPE_WG: u64 = 64;
/// Subgroups of a workgroup of `attention/flash.wgsl`.
pub const FLASH_SUBGROUPS: u32 = 8;
/// (rows, key tile) of `attention/flash.wgsl` in order of preference: most rows first
/// (each staged K and V tile serves every row), then longer key tiles (fewer barriers
/// per key) for heads of [`LONG_KEY_TILE_HEAD`] values and more.
fn flash_shapes(head_dim: u64) -> [(u32, u32); 9] {
    let mut shapes = [
        (64, 32),
        (64, 64),
        (32, 64),
        (32, 32),
        (16, 64),
        (16, 32),
        (8, 64),
        (8, 32),
        (8, 16),
    ];
    if head_dim >= LONG_KEY_TILE_HEAD {
        shapes.swap(0, 1);
    }
    shapes
}
/// The head size from which 64 rows take 64-key tiles before 32-key ones. On the H200
/// (2026-12-05, `results/prefill/prefetch/h200_2026-12-05_lease2/`) 64-key tiles ran
/// the 8B's 128-value heads 1.09-1.14x faster at 512 to 8,192 tokens, and 32-key tiles
/// SmolLM2's 64-value heads 1.20-1.35x faster at 2,048 and more. (A reading, not
/// profiled: a short head's tile of scores costs as much softmax as a long one's but
/// half the multiplies.)
const LONG_KEY_TILE_HEAD: u64 = 128;

/// How prefill attention multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillEngine {
    /// `attention/prefill.wgsl`: f32 FMAs on 8 x 4 tiles in registers, no subgroups.
    Scalar,
    /// `attention/flash.wgsl`: Q Kᵀ and P V on cooperative matrices of `shape`.
    Matrix {
        /// The matrices the adapter offers.
        shape: CoopMatrix,
        /// The adapter's largest subgroup (the workgroup has [`FLASH_SUBGROUPS`]).
        subgroup_max: u32,
        /// Output matrices each subgroup accumulates.
        out_blocks: u32,
        /// Invocations that take one row's softmax step together.
        team: u32,
    },
}

/// Why prefill attention does not run on the matrix units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NoMatrixAttention {
    /// The run turned cooperative matrices, or the matrix attention, off.
    Asked,
    /// The cache is f32 and the run did not ask for the matrix kernel: an f32 cache is
    /// the run's ask for f32 attention, and the matrix kernel multiplies f16 Q, K, V and
    /// probabilities (`--matrix-attention true` runs it all the same).
    F32Cache,
    /// The adapter offers no shape brass stages (f16 or f32 in, f32 out).
    NoShape,
    /// The adapter has no subgroups, or lanes too few for a softmax team.
    NoSubgroups,
    /// The device ends an invocation's loops after a count, and a workgroup walking
    /// the context's keys would run past half of it: the keys would need passes, which
    /// only the scalar kernel takes.
    LoopLimit {
        /// Keys the longest walk takes: the context.
        keys: u64,
        /// Loop iterations an invocation runs for them, at most.
        iterations: u64,
        /// The device's count.
        limit: u64,
    },
    /// [`FLASH_SUBGROUPS`] subgroups of the adapter's largest size exceed a workgroup.
    TooManyInvocations {
        /// Invocations such a workgroup has.
        invocations: u32,
        /// The device's invocations per workgroup.
        limit: u32,
    },
    /// Not even the smallest tile of the head fits the workgroup memory.
    TileTooBig {
        /// Workgroup memory the smallest tile takes.
        bytes: u64,
        /// The device's workgroup memory.
        limit: u32,
    },
}

impl std::fmt::Display for NoMatrixAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoMatrixAttention::Asked => {
                write!(
                    f,
                    "the run turned cooperative matrices or matrix attention off"
                )
            }
            NoMatrixAttention::F32Cache => write!(
                f,
                "the f32 cache asks for f32 attention, and the matrix kernel \
                 (attention/flash) multiplies f16 operands (--matrix-attention true runs it)"
            ),
            NoMatrixAttention::NoShape => write!(f, "the adapter has no cooperative matrices"),
            NoMatrixAttention::NoSubgroups => {
                write!(f, "the adapter has no subgroups of at least 4 lanes")
            }
            NoMatrixAttention::LoopLimit {
                keys,
                iterations,
                limit,
            } => write!(
                f,
                "the device stops an invocation's loops after {limit} iterations and \
                 {keys} keys take up to {iterations}, past half of that, so the keys go in \
                 passes, which the scalar kernel takes"
            ),
            NoMatrixAttention::TooManyInvocations { invocations, limit } => write!(
                f,
                "{invocations} invocations a workgroup, past the device's {limit}"
            ),
            NoMatrixAttention::TileTooBig { bytes, limit } => write!(
                f,
                "the smallest tile takes {bytes} bytes of workgroup memory, past the \
                 device's {limit}"
            ),
        }
    }
}

/// Prefill attention for a model's heads and KV format on one device: the tiling of
/// `attention/prefill.wgsl`, fixed when the model is planned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PrefillAttention {
    heads: Heads,
    kv: KvType,
    engine: PrefillEngine,
    wg: u32,
    /// (token, query head) rows per workgroup.
    rows: u32,
    /// Key positions per tile.
    key_tile: u32,
    /// Pairs of a head staged at once (the scalar kernel's; the matrix kernel stages
    /// whole rows).
    chunk: u32,
    /// Output pairs per workgroup: the whole head unless its accumulators do not fit.
    slice: u32,
    /// Rows of an invocation's register tile (the scalar kernel's): 8, or 4 (twice the
    /// invocations on the same workgroup memory).
    tile_rows: u32,
    /// The grid's limit per dimension: more row blocks take more dispatches.
    max_workgroups_per_dim: u32,
    /// Key positions a dispatch walks at most, where the device cuts an invocation's
    /// loops short ([`DeviceProfile::loop_iterations`]): longer prompts take a pass
    /// per this many keys. None: every key in one pass.
    keys_per_pass: Option<u64>,
    /// Key positions the matrix kernel's walk may take at most, where the device cuts
    /// an invocation's loops short (it has no passes: the launch was fitted to this
    /// many, and refuses more). None: any.
    max_keys: Option<u64>,
}

/// The pipelines of a [`PrefillAttention`] on a device.
#[derive(Clone, Copy, Debug)]
pub struct PrefillPipelines {
    /// RoPE and the append for a batch of tokens.
    pub rope_kv_batch: PipelineId,
    /// The batch's attention.
    pub prefill: PipelineId,
}

const PREFILL_STORAGE: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
];
/// Bytes of the prefill kernel's parameters (the WGSL's `Params`).
const PREFILL_PARAMS_BYTES: u32 = 48;
/// Bytes of a (token, query head) row's state between passes: its running max and sum.
pub const PREFILL_STATE_BYTES: u64 = 8;

impl PrefillAttention {
    /// The launch for `profile`: tiles as large as its workgroup memory allows, up to
    /// [`PREFILL_WORKGROUP_BYTES`].
    pub fn new(heads: Heads, kv: KvType, profile: &DeviceProfile) -> Result<PrefillAttention> {
        let budget = (profile.workgroup_storage_bytes as u64).min(PREFILL_WORKGROUP_BYTES);
        Self::with_budget(heads, kv, budget, profile.max_workgroups_per_dim)?
            .with_loop_limit(profile.loop_iterations)
    }

    /// This launch with its keys split into passes that keep each invocation's loop
    /// iterations within half of `limit` (a margin for loops the count below misses),
    /// where the device has one; every key in one pass where it has none.
    pub fn with_loop_limit(self, limit: Option<u64>) -> Result<PrefillAttention> {
        let Some(limit) = limit else {
            return Ok(PrefillAttention {
                keys_per_pass: None,
                max_keys: None,
                ..self
            });
        };
        let budget = (limit / 2).saturating_sub(self.fixed_loop_iterations());
        let tiles = budget / self.loop_iterations_per_key_tile();
        if tiles == 0 {
            return Err(Error::Invalid(format!(
                "prefill attention: a key tile takes {} loop iterations of an invocation,                  and the device allows {limit} in all",
                self.loop_iterations_per_key_tile() + self.fixed_loop_iterations()
            )));
        }
        Ok(PrefillAttention {
            keys_per_pass: Some(tiles * self.key_tile as u64),
            ..self
        })
    }

    /// Loop iterations an invocation of `attention/prefill.wgsl` runs per key tile, at
    /// most: each loop counted as its trips plus one (the trip that finds it done, which
    /// lavapipe's count includes).
    fn loop_iterations_per_key_tile(&self) -> u64 {
        let (wg, rows, kt, chunk) = (
            self.wg as u64,
            self.rows as u64,
            self.key_tile as u64,
            self.chunk as u64,
        );
        let (tile_rows, tile) = (self.tile_rows as u64, PREFILL_TILE as u64);
        let half = self.heads.head_dim / 2;
        let strided = |n: u64| n.div_ceil(wg) + 1;
        let q_chunks = half.div_ceil(chunk);
        let q_staging = if chunk >= half {
            0
        } else {
            strided(rows * chunk)
        };
        let score_tiles = (rows / tile_rows) * (kt / tile);
        let scores = strided(score_tiles) + score_tiles.div_ceil(wg) * (chunk + 1);
        let per_q_chunk = q_staging + strided(kt * chunk) + scores;
        // The max, then the weights.
        let softmax = 2 * (kt + 1);
        let v_chunks = (self.slice as u64).div_ceil(chunk);
        let value_tiles = (rows / tile_rows) * (chunk / tile);
        let per_v_chunk =
            strided(kt * chunk) + strided(value_tiles) + value_tiles.div_ceil(wg) * (kt + 1);
        1 + (q_chunks + 1)
            + q_chunks * per_q_chunk
            + softmax
            + (v_chunks + 1)
            + v_chunks * per_v_chunk
    }

    /// Loop iterations an invocation runs outside its key tiles: the accumulators'
    /// start, the resident q and the output.
    fn fixed_loop_iterations(&self) -> u64 {
        let wg = self.wg as u64;
        let strided = |n: u64| n.div_ceil(wg) + 1;
        let rows = self.rows as u64;
        2 * strided(rows * self.slice as u64) + strided(rows * self.heads.head_dim / 2)
    }

    /// Key positions the matrix kernel's walk may take at most, where the device cuts
    /// an invocation's loops short (None: any).
    pub fn max_keys(&self) -> Option<u64> {
        self.max_keys
    }

    /// Key positions a dispatch walks at most (None: all of them in one).
    pub fn keys_per_pass(&self) -> Option<u64> {
        self.keys_per_pass
    }

    /// The launch whose workgroups take at most `workgroup_bytes` of workgroup memory:
    /// the most rows (then the longest key tile, then the longest chunk) that fit with
    /// the whole head's output per workgroup, or, where not even the fewest rows do, the
    /// head's output split into the fewest slices that fit (each slice recomputes the
    /// scores).
    pub fn with_budget(
        heads: Heads,
        kv: KvType,
        workgroup_bytes: u64,
        max_workgroups_per_dim: u32,
    ) -> Result<PrefillAttention> {
        AttentionLaunch::check_heads(heads, kv)?;
        let half = (heads.head_dim / 2) as u32;
        let widest = half.min(PREFILL_CHUNK).next_multiple_of(PREFILL_TILE);
        let chunks: Vec<u32> = std::iter::successors(Some(widest), |&c| {
            (c > PREFILL_TILE).then(|| (c / 2).next_multiple_of(PREFILL_TILE))
        })
        .collect();
        let mut slice = half;
        loop {
            let fits = SHAPES.iter().find_map(|&(rows, key_tile)| {
                let chunk = chunks.iter().copied().find(|&chunk| {
                    Self::bytes_of(rows, key_tile, chunk, slice) <= workgroup_bytes
                })?;
                Some((rows, key_tile, chunk))
            });
            let tiled =
                fits.and_then(|tiles| Self::scalar_tiles(heads, kv, tiles, max_workgroups_per_dim));
            if let Some(launch) = tiled {
                return Ok(PrefillAttention { slice, ..launch });
            }
            if slice == 1 {
                return Err(Error::Invalid(format!(
                    "prefill attention needs at least {} bytes of workgroup memory, not {}",
                    Self::bytes_of(8, PREFILL_TILE, PREFILL_TILE, 1),
                    workgroup_bytes
                )));
            }
            slice = slice.div_ceil(2);
        }
    }

    /// The scalar kernel's launch with `rows` (token, query head) rows by `key_tile` keys
    /// a tile and K and V staged `chunk` pairs at a time, the whole head's output per
    /// workgroup, whatever its workgroup memory (which [`Self::workgroup_bytes`] says):
    /// None where the sizes are not multiples of the register tile (rows of 8; keys and
    /// pairs of 4). [`Self::with_budget`] picks among these; the bench times any of them.
    pub fn scalar_tiles(
        heads: Heads,
        kv: KvType,
        (rows, key_tile, chunk): (u32, u32, u32),
        max_workgroups_per_dim: u32,
    ) -> Option<PrefillAttention> {
        let suits = |n: u32, of: u32| n > 0 && n.is_multiple_of(of);
        if !(suits(rows, PREFILL_TILE_ROWS)
            && suits(key_tile, PREFILL_TILE)
            && suits(chunk, PREFILL_TILE))
        {
            return None;
        }
        Some(PrefillAttention {
            heads,
            kv,
            engine: PrefillEngine::Scalar,
            wg: Self::invocations(rows, key_tile, chunk, PREFILL_TILE_ROWS),
            rows,
            key_tile,
            chunk,
            slice: (heads.head_dim / 2) as u32,
            tile_rows: PREFILL_TILE_ROWS,
            max_workgroups_per_dim: max_workgroups_per_dim.max(1),
            keys_per_pass: None,
            max_keys: None,
        })
    }

    /// The scalar launch with register tiles of `tile_rows` rows (8 or 4), its
    /// invocations following: None for another size, or rows not a multiple of it.
    pub fn with_tile_rows(self, tile_rows: u32) -> Option<PrefillAttention> {
        let fits = matches!(self.engine, PrefillEngine::Scalar)
            && [8, 4].contains(&tile_rows)
            && self.rows.is_multiple_of(tile_rows);
        fits.then(|| PrefillAttention {
            tile_rows,
            wg: Self::invocations(self.rows, self.key_tile, self.chunk, tile_rows),
            ..self
        })
    }

    /// Rows of an invocation's register tile (the scalar kernel's).
    pub fn tile_rows(&self) -> u32 {
        self.tile_rows
    }

    /// Invocations of a workgroup of `attention/prefill.wgsl`: one per register tile of
    /// the scores or of a V chunk's output, whichever are more (a warp at least, and one
    /// per row for the softmax), up to [`PREFILL_WG`].
    fn invocations(rows: u32, key_tile: u32, chunk: u32, tile_rows: u32) -> u32 {
        let row_tiles = rows / tile_rows;
        (row_tiles * key_tile.max(chunk) / PREFILL_TILE)
            .next_power_of_two()
            .clamp(32, PREFILL_WG)
            .max(rows)
    }

    /// The launch of `attention/flash.wgsl` on `profile`'s matrix units: of the tiles
    /// that fit its workgroup memory, the one that computes the head in the fewest
    /// slices, then the one with the most rows, then the longest key tile, for prompts
    /// within `keys` positions (where the device cuts an invocation's loops short, the
    /// walk over them must stay within half its count). An error says why the adapter
    /// cannot run it.
    pub fn on_matrix_units(
        heads: Heads,
        kv: KvType,
        profile: &DeviceProfile,
        keys: u64,
    ) -> Result<std::result::Result<PrefillAttention, NoMatrixAttention>> {
        AttentionLaunch::check_heads(heads, kv)?;
        let Some(shape) = profile.coop_matrix else {
            return Ok(Err(NoMatrixAttention::NoShape));
        };
        if !profile.subgroups || profile.subgroup_min < 4 {
            return Ok(Err(NoMatrixAttention::NoSubgroups));
        }
        let subgroup_max = profile.subgroup_max;
        let wg = FLASH_SUBGROUPS * subgroup_max;
        let limit = profile
            .max_invocations_per_workgroup
            .min(profile.max_workgroup_size_x);
        if wg > limit {
            return Ok(Err(NoMatrixAttention::TooManyInvocations {
                invocations: wg,
                limit,
            }));
        }
        let launch = match Self::matrix_with_budget(
            heads,
            kv,
            (shape, subgroup_max, profile.subgroup_min),
            profile.workgroup_storage_bytes,
            profile.max_workgroups_per_dim,
        ) {
            Ok(launch) => launch,
            Err(why) => return Ok(Err(why)),
        };
        let Some(limit) = profile.loop_iterations else {
            return Ok(Ok(launch));
        };
        if let Err(why) = launch.walk_within(keys, limit) {
            return Ok(Err(why));
        }
        Ok(Ok(PrefillAttention {
            max_keys: Some(keys),
            ..launch
        }))
    }

    /// The loop iterations the matrix kernel's walk over `keys` keys takes
    /// ([`Self::matrix_loop_iterations`]), where they stay within half of a device's
    /// `limit`; else why not.
    fn walk_within(&self, keys: u64, limit: u64) -> std::result::Result<u64, NoMatrixAttention> {
        let iterations = self.matrix_loop_iterations(keys);
        if iterations > limit / 2 {
            return Err(NoMatrixAttention::LoopLimit {
                keys,
                iterations,
                limit,
            });
        }
        Ok(iterations)
    }

    /// Loop iterations an invocation of `attention/flash.wgsl` runs at most when its
    /// workgroup walks `keys` keys, every tile rescaling: each loop counted as its trips
    /// plus one, as in [`Self::with_loop_limit`]. Zero for the scalar kernel, which
    /// counts its own in passes.
    pub fn matrix_loop_iterations(&self, keys: u64) -> u64 {
        let PrefillEngine::Matrix {
            shape,
            subgroup_max,
            out_blocks,
            team,
        } = self.engine
        else {
            return 0;
        };
        let s = shape.size as u64;
        let wg = FLASH_SUBGROUPS as u64 * subgroup_max as u64;
        let (rows, kt) = (self.rows as u64, self.key_tile as u64);
        let (hdp, team, out_blocks) = (self.padded_head(shape), team as u64, out_blocks as u64);
        let strided = |n: u64| n.div_ceil(wg) + 1;
        // A subgroup's S x S, element by element over its lanes (at least 4).
        let per_lane = (s * s).div_ceil(4) + 1;
        let shuffles = team.ilog2() as u64 + 1;
        // A subgroup takes an eighth of the score blocks: its row block's key blocks
        // part % COL_GROUPS, + COL_GROUPS, ...
        let score_blocks = (rows / s) * (kt / s);
        // K and V each fetched, then put.
        let per_tile = 4 * strided(kt * hdp / 2)
            + (score_blocks.div_ceil(FLASH_SUBGROUPS as u64) + 1) * (hdp / s + 1)
            + 2 * (kt.div_ceil(team) + 1 + shuffles)
            + out_blocks * 2 * per_lane
            + (kt / s + 1);
        let fixed = strided(rows * hdp / 2)
            + (hdp / s + 1)
            + strided(self.score_len(shape))
            + out_blocks * per_lane
            + strided(kt * hdp / 2);
        // The look-ahead, once: each tile's K fetched and put, its scores, its max; then
        // the shuffles and a rescale.
        let look_ahead_tile = 2 * strided(kt * hdp / 2)
            + (score_blocks.div_ceil(FLASH_SUBGROUPS as u64) + 1) * (hdp / s + 1)
            + (kt.div_ceil(team) + 1);
        let look_ahead = strided(kt * hdp / 2)
            + (keys.div_ceil(kt) + 1) * (look_ahead_tile + 1)
            + shuffles
            + out_blocks * 2 * per_lane;
        fixed + (keys.div_ceil(kt) + 1) * (per_tile + 1) + look_ahead
    }

    /// [`Self::on_matrix_units`] for matrices of `shape`, subgroups of `subgroup_max`
    /// lanes at most and `subgroup_min` at least, `workgroup_bytes` of workgroup memory,
    /// whatever the device under test offers (the kernel catalog's canonical launches,
    /// and the tests that run the kernel with its matrix operations emulated).
    pub fn matrix_with_budget(
        heads: Heads,
        kv: KvType,
        (shape, subgroup_max, subgroup_min): (CoopMatrix, u32, u32),
        workgroup_bytes: u32,
        max_workgroups_per_dim: u32,
    ) -> std::result::Result<PrefillAttention, NoMatrixAttention> {
        let candidates = flash_shapes(heads.head_dim).into_iter().filter_map(|tile| {
            Self::matrix_tiles(
                heads,
                kv,
                (shape, subgroup_max, subgroup_min),
                tile,
                max_workgroups_per_dim,
            )
        });
        let (fitting, too_big): (Vec<_>, Vec<_>) =
            candidates.partition(|l| l.workgroup_bytes() <= workgroup_bytes as u64);
        fitting
            .into_iter()
            .min_by_key(PrefillAttention::n_slices)
            .ok_or(NoMatrixAttention::TileTooBig {
                bytes: too_big
                    .iter()
                    .map(PrefillAttention::workgroup_bytes)
                    .min()
                    .unwrap_or(u64::MAX),
                limit: workgroup_bytes,
            })
    }

    /// The matrix kernel's launch with `rows` (token, query head) rows by `key_tile` keys
    /// a tile, whatever its workgroup memory (which [`Self::workgroup_bytes`] says), for
    /// matrices of `shape` and subgroups of `subgroup_max` lanes at most and
    /// `subgroup_min` at least: None where the tile does not suit the matrices (rows a
    /// multiple of their size whose row blocks divide the 8 subgroups, no more rows than
    /// invocations, keys a multiple).
    /// [`Self::on_matrix_units`] picks among these; the bench times any of them.
    pub fn matrix_tiles(
        heads: Heads,
        kv: KvType,
        (shape, subgroup_max, subgroup_min): (CoopMatrix, u32, u32),
        (rows, key_tile): (u32, u32),
        max_workgroups_per_dim: u32,
    ) -> Option<PrefillAttention> {
        let s = shape.size;
        let wg = FLASH_SUBGROUPS * subgroup_max;
        let row_blocks = rows / s;
        // Every row needs a softmax team of at least one invocation.
        let fits_grid = rows.is_multiple_of(s)
            && row_blocks > 0
            && FLASH_SUBGROUPS.is_multiple_of(row_blocks)
            && rows <= wg
            && key_tile.is_multiple_of(s)
            && key_tile > 0;
        if !fits_grid {
            return None;
        }
        let col_groups = FLASH_SUBGROUPS / row_blocks;
        let blocks = (heads.head_dim as u32).div_ceil(s);
        let out_blocks = blocks.div_ceil(col_groups).min(4);
        let team = (wg / rows).clamp(1, 4).min(subgroup_min);
        Some(PrefillAttention {
            heads,
            kv,
            engine: PrefillEngine::Matrix {
                shape,
                subgroup_max,
                out_blocks,
                team,
            },
            wg,
            rows,
            key_tile,
            chunk: 0,
            slice: col_groups * out_blocks * s / 2,
            tile_rows: PREFILL_TILE_ROWS,
            max_workgroups_per_dim: max_workgroups_per_dim.max(1),
            keys_per_pass: None,
            max_keys: None,
        })
    }

    /// How it multiplies.
    pub fn engine(&self) -> PrefillEngine {
        self.engine
    }

    fn bytes_of(rows: u32, key_tile: u32, chunk: u32, slice: u32) -> u64 {
        let (rows, key_tile, chunk, slice) =
            (rows as u64, key_tile as u64, chunk as u64, slice as u64);
        // q chunk, K/V chunk (K's rows padded by a key), scores, accumulators, and the
        // running max, sum and rescale factor per row.
        8 * rows * chunk
            + 8 * chunk * (key_tile + 1)
            + 4 * rows * key_tile
            + 8 * rows * slice
            + 12 * rows
    }

    /// Workgroup memory a workgroup takes.
    pub fn workgroup_bytes(&self) -> u64 {
        match self.engine {
            PrefillEngine::Scalar => {
                Self::bytes_of(self.rows, self.key_tile, self.chunk, self.slice)
            }
            PrefillEngine::Matrix { shape, .. } => {
                let (rows, kt) = (self.rows as u64, self.key_tile as u64);
                let ct = shape.input.bytes();
                // The q rows or the K or V tile; the scores (or each subgroup's
                // S x S); P, [row][key] padded by 8; a factor and a sum per row and the
                // flag of a rescale.
                self.kv_len(shape) * ct
                    + 4 * self.score_len(shape)
                    + rows * (kt + 8) * ct
                    + 8 * rows
                    + 16
            }
        }
    }

    /// The matrix kernel's head on matrices of `shape`: rounded up to their size (the
    /// WGSL's HDP; its staged rows take 8 more).
    fn padded_head(&self, shape: CoopMatrix) -> u64 {
        self.heads.head_dim.next_multiple_of(shape.size as u64)
    }

    /// Elements of the matrix kernel's K/V tile: K [key][d] with rows of the padded
    /// head and 8 more, or V [d][key] with rows of the key tile and 8 more; before the
    /// walk, the rows' q as K.
    fn kv_len(&self, shape: CoopMatrix) -> u64 {
        let (kt, head) = (self.key_tile as u64, self.padded_head(shape));
        let rows = (self.rows as u64).max(kt);
        (rows * (head + 8)).max(head * (kt + 8))
    }

    /// Elements of the matrix kernel's scores: a tile's, or each subgroup's S x S
    /// where that is more.
    fn score_len(&self, shape: CoopMatrix) -> u64 {
        ((self.rows as u64 + 8) * self.key_tile as u64)
            .max(FLASH_SUBGROUPS as u64 * (shape.size as u64).pow(2))
    }

    /// The heads it attends over.
    pub fn heads(&self) -> Heads {
        self.heads
    }

    /// The format of the KV cache it reads.
    pub fn kv(&self) -> KvType {
        self.kv
    }

    /// (token, query head) rows per workgroup.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Key positions per tile staged in workgroup memory.
    pub fn key_tile(&self) -> u32 {
        self.key_tile
    }

    /// Output pairs per workgroup.
    pub fn slice(&self) -> u32 {
        self.slice
    }

    /// Workgroups that each compute a slice of the same rows' output.
    pub fn n_slices(&self) -> u64 {
        (self.heads.head_dim / 2).div_ceil(self.slice as u64)
    }

    /// Row blocks of one KV head for `n_tokens` tokens.
    pub fn n_blocks(&self, n_tokens: u64) -> u64 {
        (n_tokens * self.heads.group()).div_ceil(self.rows as u64)
    }

    /// Whether `profile` can run this launch.
    pub fn check(&self, profile: &DeviceProfile) -> Result<()> {
        let fail = |what: String| Err(Error::Invalid(format!("prefill attention: {what}")));
        if let PrefillEngine::Matrix {
            shape,
            subgroup_max,
            team,
            ..
        } = self.engine
        {
            if profile.coop_matrix != Some(shape) || profile.subgroup_max != subgroup_max {
                return fail(format!(
                    "{shape} matrices and subgroups of {subgroup_max}: not what {} offers",
                    profile.name
                ));
            }
            if !profile.subgroups || profile.subgroup_min < team {
                return fail(format!("softmax teams of {team} lanes"));
            }
            if let Some(limit) = profile.loop_iterations {
                let Some(keys) = self.max_keys else {
                    return fail(format!("{} stops an invocation's loops", profile.name));
                };
                if let Err(why) = self.walk_within(keys, limit) {
                    return fail(why.to_string());
                }
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
        if self.max_workgroups_per_dim as u64 > limit
            || self.heads.n_kv_heads > limit
            || self.n_slices() > limit
        {
            return fail(format!("more than {limit} workgroups in a dimension"));
        }
        Ok(())
    }

    fn root(&self) -> &'static str {
        match (self.engine, self.kv) {
            (PrefillEngine::Scalar, KvType::F32) => "attention/prefill_f32.wgsl",
            (PrefillEngine::Scalar, KvType::F16) => "attention/prefill_f16.wgsl",
            (PrefillEngine::Scalar, KvType::Q8_0) => "attention/prefill_q8_0.wgsl",
            (PrefillEngine::Matrix { .. }, KvType::F32) => "attention/flash_f32.wgsl",
            (PrefillEngine::Matrix { .. }, KvType::F16) => "attention/flash_f16.wgsl",
            (PrefillEngine::Matrix { .. }, KvType::Q8_0) => "attention/flash_q8_0.wgsl",
        }
    }

    /// The RoPE + batched append pipeline's ledger name and root.
    pub fn rope_kv_batch_root(&self) -> &'static str {
        match self.kv {
            KvType::F32 => "attention/rope_kv_batch_f32.wgsl",
            KvType::F16 => "attention/rope_kv_batch_f16.wgsl",
            KvType::Q8_0 => "attention/rope_kv_batch_q8_0.wgsl",
        }
    }

    /// The constants of the prefill kernel's WGSL.
    pub fn constants(&self) -> Vec<WgslConst> {
        let u = WgslConst::u32;
        if let PrefillEngine::Matrix {
            shape,
            subgroup_max,
            out_blocks,
            team,
        } = self.engine
        {
            let mut consts = coop_preamble(shape).1;
            consts.extend([
                u("SUBGROUP_MAX", subgroup_max),
                u("HD", self.heads.head_dim as u32),
                u("HDP", self.padded_head(shape) as u32),
                u("KV_ROW", self.kv.row_words(self.heads.head_dim) as u32),
                u("ROWS", self.rows),
                u("KT", self.key_tile),
                u("OUT_BLOCKS", out_blocks),
                u("TEAM", team),
                u("SC_LEN", self.score_len(shape) as u32),
                u("KV_LEN", self.kv_len(shape) as u32),
            ]);
            return consts;
        }
        vec![
            u("WG", self.wg),
            u("HD", self.heads.head_dim as u32),
            u("KV_ROW", self.kv.row_words(self.heads.head_dim) as u32),
            u("ROWS", self.rows),
            u("TILE_QUADS", self.tile_rows / 4),
            u("KT", self.key_tile),
            u("CHUNK", self.chunk),
            u("SLICE", self.slice),
        ]
    }

    /// The prefill pipeline's ledger name: its root and every constant.
    pub fn pipeline_key(&self) -> String {
        let mut key = self.root().trim_end_matches(".wgsl").to_string();
        if let PrefillEngine::Matrix { shape, .. } = self.engine {
            key += &format!(" {shape}");
        }
        for c in self.constants() {
            if let WgslValue::U32(v) = c.value {
                key += &format!(" {}{v}", c.name.to_lowercase());
            }
        }
        key
    }

    /// The prefill kernel's complete WGSL, its constants declared.
    pub fn source(&self) -> Result<String> {
        let enables = match self.engine {
            PrefillEngine::Scalar => Vec::new(),
            PrefillEngine::Matrix { shape, .. } => coop_preamble(shape).0,
        };
        compose(self.root(), &enables, &self.constants())
    }

    /// Creates the batched append and the prefill pipelines.
    pub fn pipelines(
        &self,
        device: &dyn Device,
        cache: &PipelineCache,
    ) -> Result<PrefillPipelines> {
        let rope_kv_batch = rope_kv_pipeline(
            device,
            cache,
            self.rope_kv_batch_root(),
            self.heads.rope,
            (48, ROPE_KV_BATCH_STORAGE),
        )?;
        let prefill = cache.get_or_create(device, &self.pipeline_key(), || {
            let template = PipelineTemplate {
                index_checks: match self.engine {
                    PrefillEngine::Matrix { .. } => IndexChecks::Kernel,
                    PrefillEngine::Scalar => IndexChecks::Wgpu,
                },
                ..template(PREFILL_PARAMS_BYTES, PREFILL_STORAGE)
            };
            Ok((self.source()?, template))
        })?;
        Ok(PrefillPipelines {
            rope_kv_batch,
            prefill,
        })
    }

    /// RoPE and the KV-cache append of `n_tokens` tokens at positions `start..`: token
    /// t's q (at element `t * row_stride` of `qkv`) rotated in place, its k (at
    /// `t * row_stride + k_first`) rotated into row `start + t` of `k_cache`, its v (at
    /// `t * row_stride + v_first`) copied into that row of `v_cache`. `table` is
    /// [`rope_table`](super::rope_table)'s output on the device, over every position
    /// up to `start + n_tokens`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv_batch(
        &self,
        p: &PrefillPipelines,
        start: u64,
        n_tokens: u64,
        table: Slice,
        (qkv, row_stride): (Slice, u64),
        bias: Slice,
        (k_first, v_first): (u64, u64),
        k_cache: Slice,
        v_cache: Slice,
    ) -> Dispatch {
        let h = self.heads;
        let per_token = rope_kv_units(h, self.kv);
        let limit = self.max_workgroups_per_dim as u64;
        Dispatch {
            pipeline: p.rope_kv_batch,
            params: vec![
                h.n_heads as u32,
                h.n_kv_heads as u32,
                h.head_dim as u32,
                h.rope_dim as u32,
                start as u32,
                n_tokens as u32,
                row_stride as u32,
                k_first as u32,
                v_first as u32,
                self.kv.row_words(h.head_dim) as u32,
                0,
                0,
            ],
            storage: vec![table, qkv, bias, k_cache, v_cache],
            workgroups: [
                per_token.div_ceil(ROPE_WG).clamp(1, limit) as u32,
                n_tokens.clamp(1, limit) as u32,
                1,
            ],
            bytes_read: n_tokens * ((h.n_heads * h.head_dim + 2 * h.kv_dim()) * 8 + h.rope_dim * 4),
        }
    }

    /// Causal attention of `n_tokens` query tokens at positions `start..` over the
    /// cache: token t's q rows at element `t * q_stride` of `q` (query head h at
    /// `+ h * head_dim`), its output rows at `t * out_stride` of `out` (f32), and
    /// token t attends to cache rows `0..=start + t`, which must all be written.
    /// `state` holds [`PREFILL_STATE_BYTES`] per (token, query head) between passes
    /// ([`Self::keys_per_pass`]). With a `window` (a local layer's), token t attends
    /// only to its last `window` positions. One dispatch, more where the row blocks
    /// exceed the grid's limit or the keys take several passes.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatches(
        &self,
        p: &PrefillPipelines,
        start: u64,
        n_tokens: u64,
        (q, q_stride): (Slice, u64),
        k_cache: Slice,
        v_cache: Slice,
        (out, out_stride): (Slice, u64),
        state: Slice,
        window: Option<u64>,
    ) -> Result<Vec<Dispatch>> {
        let h = self.heads;
        let q_width = h.n_heads * h.head_dim;
        let n_pos = start + n_tokens;
        let cache_bytes = n_pos * h.n_kv_heads * self.kv.row_bytes(h.head_dim);
        let rows_bytes = |stride: u64| ((n_tokens.max(1) - 1) * stride + q_width) * 4;
        let state_bytes = n_tokens * h.n_heads * PREFILL_STATE_BYTES;
        let fail = |what: String| Err(Error::Invalid(format!("prefill attention: {what}")));
        if n_tokens == 0 {
            return fail("no tokens".into());
        }
        if window == Some(0) {
            return fail("a window of no positions".into());
        }
        if n_pos > u32::MAX as u64 || n_tokens * h.group() > u32::MAX as u64 {
            return fail(format!("{n_tokens} tokens from position {start}"));
        }
        if k_cache.size < cache_bytes || v_cache.size < cache_bytes {
            return fail(format!(
                "{n_pos} positions need {cache_bytes} bytes of K and V cache; the slices \
                 hold {} and {}",
                k_cache.size, v_cache.size
            ));
        }
        if q_stride < q_width || out_stride < q_width {
            return fail(format!(
                "rows of {q_width} values {q_stride} and {out_stride} apart overlap"
            ));
        }
        if q.size < rows_bytes(q_stride) || out.size < rows_bytes(out_stride) {
            return fail(format!(
                "{n_tokens} rows need {} bytes of q and {} of output; the slices hold {} \
                 and {}",
                rows_bytes(q_stride),
                rows_bytes(out_stride),
                q.size,
                out.size
            ));
        }
        if let Some(max_keys) = self.max_keys.filter(|&keys| n_pos > keys) {
            return fail(format!(
                "{n_pos} positions: the launch walks at most {max_keys} keys within the \
                 device's loop limit"
            ));
        }
        if state.size < state_bytes {
            return fail(format!(
                "{n_tokens} tokens need {state_bytes} bytes of state; the slice holds {}",
                state.size
            ));
        }
        let scale = 1.0 / (h.head_dim as f32).sqrt();
        let n_blocks = self.n_blocks(n_tokens);
        let per_dispatch = self.max_workgroups_per_dim as u64;
        let per_block = self.kv_bytes_read(start, n_tokens, window) / n_blocks;
        let window_param = window.map_or(0, |w| w.min(n_pos)) as u32;
        let keys_per_pass = self.keys_per_pass.unwrap_or(n_pos).max(1);
        let mut dispatches = Vec::new();
        for key_first in (0..n_pos).step_by(keys_per_pass as usize) {
            let key_end = (key_first + keys_per_pass).min(n_pos);
            // Blocks run latest first, so those still unfinished lead the grid.
            let active = (0..n_blocks)
                .filter(|&b| self.block_last_pos(start, n_tokens, b) >= key_first)
                .count() as u64;
            for first in (0..active).step_by(per_dispatch as usize) {
                let blocks = per_dispatch.min(active - first);
                dispatches.push(Dispatch {
                    pipeline: p.prefill,
                    params: vec![
                        h.n_kv_heads as u32,
                        h.group() as u32,
                        start as u32,
                        n_tokens as u32,
                        q_stride as u32,
                        out_stride as u32,
                        scale.to_bits(),
                        first as u32,
                        key_first as u32,
                        key_end as u32,
                        h.n_heads as u32,
                        window_param,
                    ],
                    storage: vec![q, k_cache, v_cache, out, state],
                    workgroups: [blocks as u32, h.n_kv_heads as u32, self.n_slices() as u32],
                    bytes_read: (per_block * blocks + rows_bytes(q_stride) * blocks / n_blocks)
                        * (key_end - key_first)
                        / n_pos,
                });
            }
        }
        Ok(dispatches)
    }

    /// The position of the last token of row block `b` (in token order).
    fn block_last_pos(&self, start: u64, n_tokens: u64, b: u64) -> u64 {
        let n_rows = n_tokens * self.heads.group();
        start + (((b + 1) * self.rows as u64).min(n_rows) - 1) / self.heads.group()
    }

    /// K and V bytes the workgroups of a prefill read from the cache (each K tile once
    /// per output slice, each V pair once), per layer: each block from its first row's
    /// first key (0, or where its `window` starts) to its last row's position.
    pub fn kv_bytes_read(&self, start: u64, n_tokens: u64, window: Option<u64>) -> u64 {
        let group = self.heads.group();
        let positions: u64 = (0..self.n_blocks(n_tokens))
            .map(|b| {
                let first_pos = start + b * self.rows as u64 / group;
                let first_key = window.map_or(0, |w| (first_pos + 1).saturating_sub(w));
                self.block_last_pos(start, n_tokens, b) + 1 - first_key
            })
            .sum();
        let row_bytes = self.heads.n_kv_heads * self.kv.row_bytes(self.heads.head_dim);
        positions * row_bytes * (self.n_slices() + 1)
    }

    /// Floating-point operations of the causal attention (q·k and weight·v, two per
    /// multiply-add), per layer.
    pub fn flops(&self, start: u64, n_tokens: u64) -> u64 {
        let h = self.heads;
        // Token t attends to start + t + 1 positions.
        let positions = n_tokens * (start + 1) + n_tokens * n_tokens.saturating_sub(1) / 2;
        4 * h.n_heads * h.head_dim * positions
    }

    /// A canonical launch for tools that list every kernel (`kernels::spirv`): the
    /// Llama-3-8B heads with [`PREFILL_WORKGROUP_BYTES`].
    pub fn canonical(kv: KvType) -> PrefillAttention {
        let heads = Heads {
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            rope_dim: 128,
            rope: RopeStyle::Normal,
        };
        Self::with_budget(heads, kv, PREFILL_WORKGROUP_BYTES, 65535)
            .expect("the canonical heads are valid")
    }

    /// Every prefill kernel as (name, complete WGSL): the scalar kernel's
    /// [`Self::canonical`] launch, and the matrix kernel's for the same heads on 16x16
    /// f16 matrices (NVIDIA's, as `flash_<format>_16x16`) and 8x8 f16 (Metal's,
    /// `_8x8`), subgroups of 32 and 48 KiB of workgroup memory.
    pub(super) fn sources() -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for kv in KvType::ALL {
            let launch = Self::canonical(kv);
            out.push((
                launch.root().trim_end_matches(".wgsl").to_string(),
                launch.source()?,
            ));
            for size in [16, 8] {
                let shape = CoopMatrix::f16_as_offered(size);
                let flash =
                    Self::matrix_with_budget(launch.heads, kv, (shape, 32, 32), 48 << 10, 65535)
                        .map_err(|why| Error::Invalid(format!("prefill attention: {why}")))?;
                out.push((
                    format!("{}_{size}x{size}", flash.root().trim_end_matches(".wgsl")),
                    flash.source()?,
                ));
            }
            out.push(super::rope_kv_source(
                launch.rope_kv_batch_root(),
                RopeStyle::Normal,
            )?);
        }
        Ok(out)
    }
}
