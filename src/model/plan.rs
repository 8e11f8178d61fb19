//! The model planner: from a GGUF file, a device profile and the load options, every
//! launch of the forward pass, with no device: each matrix (which tensors are stacked
//! into one, the form its x arrives in) with its matvec for one token and its matmul for
//! a batch, decode and prefill attention, the batch size, and the buffers the pass
//! works in. `Model::from_plan` uploads and allocates what it says, and `decode --plan`
//! and `inspect --plan` print it: the plan that is printed is the plan that runs.

use serde::Serialize;

use super::config::{output_tensor, Config};
use super::layout::{batch_bytes, Offsets, Widths};
use super::{Activation, LoadOptions, MemoryNeed};
use crate::device::DeviceProfile;
use crate::gguf::{GgufFile, TensorInfo};
use crate::kernels::attention::KvType;
use crate::kernels::matmul::{
    span_scratch_bytes, MatmulEngine, MatmulLaunch, UnpackedEngine, UnpackedMatmul,
};
use crate::kernels::matvec::Family;
use crate::router::{
    route_attention, route_batch, route_matmul, route_matmul_engine, route_matvec,
    route_prefill_attention, write_route_table, AttentionQuery, AttentionRoute, BatchLaunch,
    Clause, EngineRoute, MatmulRoute, MatvecQuery, PrefillAttentionRoute, Route, RouteRow, XInput,
    UNPACKED_TILE,
};
use crate::{Error, Result};

/// Tokens per prefill batch unless `LoadOptions::ubatch` says otherwise; cut to the
/// context and to a binding (`route_batch`). Measured on an H100 (2026-12-06, one
/// lease, `compare --synthetic SHAPE --pp 512,2048 --ubatch 512|1024|2048`,
/// `results/prefill/q_in_matrices/h100_2026-12-06/`): a prompt of 2,048 tokens in one
/// batch against four of 512 ran 1.08x (Llama-3-8B shape), 1.26x (Llama-3.2-1B), 1.40x
/// (SmolLM2-135M) and 1.66x (Qwen2.5-1.5B), 1,024 in between where tried (8B, SmolLM2);
/// a prompt of 512 the same. The gain is largest for the small shapes, whose batches of
/// 512 leave most of the device idle in each matmul (a reading, not profiled). It costs
/// 4x the rows of scratch: 709 MB for the 8B shape, 177 MB at 512.
pub const DEFAULT_UBATCH: usize = 2048;

/// Prompt positions per lm-head matmul of `Model::prefill_logits`: their logits are
/// read back between runs, so this bounds the buffer (64 x 128,256 vocab x 4 bytes is
/// 33 MB) rather than the speed.
pub const LOGITS_RUN: u64 = 64;

/// Rows a decode step of several sequences needs before its quant matrices multiply
/// on the matrix units rather than by the column matvec. Measured on the H200
/// (2026-12-04, `bench matmul --columns 2:2:4` beside `bench matvec --cols`, Q4_K 8B
/// shapes, median µs, `results/parallel/h200_2026-12-04_columns/`): at 8 rows the
/// column matvec wins (4,096 x 4,096: 48 against 71; 14,336 x 4,096: 134 against 265;
/// 4,096 x 14,336: 126 against 227), at 16 they are even (87 against 72; 262 against
/// 268; 240 against 234), at 32 the matrix units take about half the time (165 against
/// 77; 513 against 282; 472 against 246). A whole step of the 8B shape (`compare
/// --parallel 16,17,24 --coop-matrix true|false`, same lease): a step on the matrix
/// units costs about the same from 17 rows to 32 (one tile of 32 tokens), 37 ms, and
/// the column matvec's about 1.93 ms a row, so they cross near 19 rows: at 17 the
/// matrix units lost (479.6 against 499.9 tok/s), at 24 they won (655.9 against 507.2).
///
/// Remeasured on an H100 (2026-12-05, `results/prefill/index_checks/`) once the matrix
/// kernels ran without wgpu's index clamps (`IndexChecks::Kernel`: the columns 1.7-1.9
/// times faster) and x reached the column matvec quantized by the norms
/// (`Tuning::q8_min_columns`): `compare --parallel 10,12,14 | 1,4,8,16 --parallel-prompt
/// 128 -n 128 --x-q8 true --decode-units-from 4|10|20`, alternated, tok/s together: the
/// matrix units lost at 8 rows (420.7 against 646.8), 10 (516.7 against 665.7) and 12
/// (604.4 against 674.7), drew at 14 (702.1 against 695.1) and won at 16 (784.1 against
/// 700.4).
///
/// Moved to 11 once steps that fit one block of tokens took the narrow tile
/// ([`DecodeColumns`]; H100, 2026-12-06, `results/parallel/columns_experiments/`): the
/// same build at `--parallel 10,11,12` on the column matvec and with `--decode-units-from
/// 10`, tok/s together: 637.1 against 647.4 at 10 rows (even), 643.2 against 705.7 at
/// 11, 646.7 against 760.6 at 12.
///
/// Moved to 9 once the decode columns summed K in [`DECODE_COLUMN_SPANS`] spans (H100,
/// 2026-12-06, same section, `lease8.sh`): `--parallel 8` and `10` on the column matvec
/// and with `--decode-units-from 8`, tok/s together: 622.7 against 608.5 at 8 rows
/// (the column matvec still ahead), 636.7 against 751.2 at 10. A step of 8-16 rows on
/// the matrix units takes 13.1-13.9 ms whatever its rows, one on the column matvec 12.9
/// ms at 8 and 15.7 at 10, so 9 rows (not timed) falls to the matrix units.
///
/// Moved to 13 once staged columns took rows in teams of lanes (H100, 2026-12-07,
/// `results/parallel/staged_prefetch` lease4 and `results/parallel/wide_tile`):
/// `--parallel N` on the matrix units and with `--decode-units-from N+1`, tok/s
/// together: the column matvec ahead at 12 rows (924.4 against 891.2), the matrix
/// units at 13 (966.0 against 944.6), 14 (1,035.2 against 980.5), 15 (1,095.5 against
/// 982.0) and 16 (1,159.6 against 1,046.7). A step on the units takes 15.3-15.7 ms of
/// GPU time at 12-16 rows, one on the column matvec 14.0 at 12 and 14.8 at 13: fewer
/// rows, less. Those column figures are from before staged columns took a workgroup
/// per compute unit (`Tuning::staged_columns_workgroups`, 8 rows 1.10x), which may
/// move the crossover up again.
///
/// Moved to 14 when timed with it (H100, 2026-12-07, `results/parallel/fetch_round`,
/// `h100_2026-12-07b`): the column matvec ahead at 12 rows (1,014.5 against 931.4) and
/// at 13 (1,038.9 and 1,037.1 against 1,012.0 and 1,012.6), the two even at 14 (1,083.6
/// against 1,085.0), the matrix units ahead at 16 (1,216.5 against 1,168.3).
pub const DECODE_MATRIX_UNITS_FROM: u64 = 14;

/// Spans each matrix on the decode columns sums K in over workgroups (both tiles
/// alike, so a row's sums are the same in either; `wgsl/matmul/columns.wgsl`'s
/// K_SPANS), their sums added in span order by `matmul/span_sum`. Two keep the
/// 4,096-row matrices (128 workgroups of 32 rows, one multiprocessor each) from a lone
/// chain of 32 or 112 rounds. H100, 2026-12-06 (`compare --synthetic llama3-8b
/// --parallel N --parallel-prompt 128 -n 128 --decode-column-spans 2` against one
/// span, same lease, `results/parallel/columns_experiments/`, section 7): 12 sequences
/// 883.3 against 755.2 tok/s, 16 1,151.8 against 979.4 (a pass of 16 rows 15.8 against
/// 17.8 ms of GPU time), 24 1,121.4 against 1,109.6, 32 1,416.5 against 1,429.1 (4
/// spans 1,425.3): the narrow tile gains 17 %, the wide one draws.
pub const DECODE_COLUMN_SPANS: u32 = 2;

/// The decode columns' tiles ([`DecodeColumns`]): 4 groups of 32 per K step; the
/// narrow tile (one block of tokens) takes 2 blocks of rows, a part of each round's K
/// a subgroup (4 parts), and the wide tile (two) 4, two of the same parts a subgroup,
/// or 2 where that does not fit the workgroup memory (both tiles in the same parts, so
/// a row's sums are the same in either). On an H100 (`compare --synthetic llama3-8b --parallel N
/// --parallel-prompt 128 -n 128`, `results/parallel/staged_prefetch`, lease4), both
/// tiles in 4 row blocks ran 32 sequences at 1,630.2 tok/s against 1,424.7 in 2 (a pass
/// of 32 rows 22.0 against 24.6 ms of GPU time) but 16 at 909.3 against 1,161.5: 4 row
/// blocks for the wide tile alone, in the narrow tile's parts.
const DECODE_COLUMNS_K_GROUPS: u32 = 4;
/// Blocks of rows of the narrow decode-columns tile ([`DECODE_COLUMNS_K_GROUPS`]).
const DECODE_NARROW_ROW_BLOCKS: u32 = 2;
/// Blocks of rows of the wide decode-columns tile, the first that fits
/// ([`DECODE_COLUMNS_K_GROUPS`]).
const DECODE_WIDE_ROW_BLOCKS: [u32; 2] = [4, 2];

/// A matrix's decode rows on the matrix units (`matmul/columns.wgsl`), in two tiles
/// of the same rows and K steps: one block of tokens for steps of that many rows or
/// fewer, two for more. A token's outputs are the same bits in either (its sums run
/// over the same K parts in the same order; the token blocks only say how many columns
/// a workgroup multiplies), so a step's tile changes no row's logits. On an H100 the
/// narrow tile ran 14,336 x 4,096 Q4_K in 98.2-98.9 µs at 8-16 tokens against
/// 155.3-163.4 in the wide (results/parallel/columns_experiments).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeColumns {
    /// One block of tokens a workgroup.
    pub narrow: MatmulLaunch,
    /// Two blocks of tokens a workgroup.
    pub wide: MatmulLaunch,
}

impl DecodeColumns {
    /// The launch for a step of `rows` rows, the narrow tile where they fit one, with
    /// its place in [narrow, wide].
    pub fn for_rows(&self, rows: u64) -> (&MatmulLaunch, usize) {
        match rows <= self.narrow.engine().token_tile() {
            true => (&self.narrow, 0),
            false => (&self.wide, 1),
        }
    }
}

/// The unpacked matmul's tile for a decode step's rows where the run asks for unpacked
/// matmuls, as (row parts, token blocks a subgroup): 4 x 2, 256 rows by 64 tokens at
/// S = 16, between the prompt's 128 x 128 (a step of 32 rows would leave three
/// quarters of its tokens empty) and 512 x 32 (28 workgroups for a 14,336-row
/// matrix). Not measured: `results/prefill/unpacked/lease.sh` benches the three at 32
/// tokens.
pub const DECODE_UNPACKED_TILE: (u32, u32) = (4, 2);

/// A weight matrix of the forward pass: one GGUF tensor, or several stacked row-wise
/// when they share an input and a type (Q, K and V; gate and up), so that one dispatch
/// computes them all. One token multiplies it by its matvec, a batch by its matmul
/// (`router::linear_kind`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedMatrix {
    /// The tensors, in row order.
    pub tensors: Vec<String>,
    /// The element of the output buffer its first row writes.
    pub out_first: u64,
    /// Its matvec.
    pub route: Route,
    /// Its matmul over the same weights, where prompts are batched.
    pub batch: Option<MatmulRoute>,
    /// Its decode step's rows on the matrix units, from `DECODE_MATRIX_UNITS_FROM`
    /// rows a step, where the model serves that many sequences and the adapter has
    /// cooperative matrices (`matmul/columns.wgsl`).
    pub decode_columns: Option<DecodeColumns>,
    /// Its decode step's rows unpacked (`matmul/unpacked`, where the run asks for
    /// unpacked matmuls), from `DECODE_MATRIX_UNITS_FROM` rows a step, in place of the
    /// decode columns.
    pub decode_unpacked: Option<UnpackedMatmul>,
}

impl PlannedMatrix {
    /// The tensors' names joined: `blk.0.attn_q.weight + blk.0.attn_k.weight + ...`.
    pub fn name(&self) -> String {
        self.tensors.join(" + ")
    }
}

/// One transformer block's matrices.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerPlan {
    /// Writes [q; k; v] into one buffer: one matrix when the three tensors share a
    /// type and their outputs can sit back to back, else three.
    pub qkv: Vec<PlannedMatrix>,
    /// The attention output projection (`attn_output`).
    pub wo: PlannedMatrix,
    /// Writes [gate; up] into one buffer, likewise.
    pub gate_up: Vec<PlannedMatrix>,
    /// The FFN's down projection (`ffn_down`).
    pub down: PlannedMatrix,
}

impl LayerPlan {
    /// The layer's matrices in forward-pass order.
    pub fn matrices(&self) -> impl Iterator<Item = &PlannedMatrix> {
        self.qkv
            .iter()
            .chain([&self.wo])
            .chain(&self.gate_up)
            .chain([&self.down])
    }

    fn matrices_mut(&mut self) -> impl Iterator<Item = &mut PlannedMatrix> {
        self.qkv
            .iter_mut()
            .chain([&mut self.wo])
            .chain(&mut self.gate_up)
            .chain([&mut self.down])
    }
}

/// Every launch of a model's forward pass on one device, routed and explained before
/// anything is uploaded: what [`plan()`] returns and a [`Model`](super::Model) is
/// loaded from. Serializes to JSON for tools that show or compare routes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The adapter it was routed for ([`DeviceProfile::name`]).
    pub device: String,
    /// The file the plan was made for: its size and a hash of its header and tensor
    /// table (`GgufFile::identity`), so a plan cannot load another file's weights.
    pub file: (u64, u64),
    /// The model's hyperparameters.
    pub config: Config,
    /// Positions the KV cache holds, per sequence.
    pub n_ctx: usize,
    /// Sequences the model serves at once, each with its own `n_ctx` positions of cache
    /// ([`LoadOptions::sequences`](super::LoadOptions::sequences)).
    pub sequences: usize,
    /// Why the context is `n_ctx`: asked for, the trained length, or what fits.
    pub context_reason: String,
    /// How the KV cache stores keys and values ([`LoadOptions::kv`](super::LoadOptions::kv)).
    pub kv: KvType,
    /// Decode attention, the same for every layer.
    pub attention: AttentionRoute,
    /// Where q, k, v and gate, up sit in their shared buffers.
    pub offsets: Offsets,
    /// Every transformer block's matrices, in order.
    pub layers: Vec<LayerPlan>,
    /// The lm-head: `output.weight`, or the tied `token_embd.weight`.
    pub output: PlannedMatrix,
    /// How prompts are processed: in batches on matmuls, or token at a time.
    pub prefill: PrefillPlan,
    /// How a decode step of several sequences runs (`sequences` > 1), and why its
    /// rows' logits do not depend on each other.
    pub decode_rows: Vec<Clause>,
    /// Rows a decode step needs before its quant matrices take the matrix units, where
    /// the plan gave them that route ([`DECODE_MATRIX_UNITS_FROM`], unless the run asked
    /// otherwise: [`Overrides::decode_units_from`](crate::router::Overrides)).
    pub decode_units_from: u64,
    /// Who keeps the kernels' indices in range ([`Clause::IndexChecks`]).
    pub index_checks: Clause,
}

/// How a prompt is processed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "route", rename_all = "snake_case")]
pub enum PrefillPlan {
    /// In batches of up to `ubatch` tokens, each matrix on its matmul
    /// (`PlannedMatrix::batch`).
    Batched(Box<BatchedPrefill>),
    /// Each token through the decode step, and why.
    TokenAtATime {
        /// Why prompts are not batched.
        clauses: Vec<Clause>,
    },
}

/// A batched prefill's routes beside its matrices' matmuls.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchedPrefill {
    /// Tokens per batch, at most.
    pub ubatch: u64,
    /// Why the batch is `ubatch` tokens.
    pub batch: Clause,
    /// The engine the quant matrices were routed to.
    pub engine: EngineRoute,
    /// The batch's attention.
    pub attention: PrefillAttentionRoute,
    /// How `Model::prefill_logits` gets the prompt's logits.
    pub logits: PromptLogits,
}

/// Every prompt position's logits: the lm-head's matmul (`Plan::output`'s batch
/// route) over runs of `tokens` positions of the batch, or each position as a decode
/// step.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "route", rename_all = "snake_case")]
pub enum PromptLogits {
    /// The lm-head's matmul over runs of positions.
    Batched {
        /// Positions per run: at most [`LOGITS_RUN`], the batch, and what one binding
        /// holds of their logits.
        tokens: u64,
        /// Why runs of that many.
        clause: Clause,
    },
    /// A decode step per position.
    TokenAtATime {
        /// Why: no matmul for the lm-head, or its logits too wide for a binding.
        clause: Clause,
    },
}

impl PrefillPlan {
    /// Tokens per batch: 1 when token at a time.
    pub fn ubatch(&self) -> u64 {
        match self {
            PrefillPlan::Batched(b) => b.ubatch,
            PrefillPlan::TokenAtATime { .. } => 1,
        }
    }

    /// Positions per lm-head matmul of `prefill_logits`, 0 where they are decode steps.
    pub fn logits_tokens(&self) -> u64 {
        match self {
            PrefillPlan::Batched(b) => match b.logits {
                PromptLogits::Batched { tokens, .. } => tokens,
                PromptLogits::TokenAtATime { .. } => 0,
            },
            PrefillPlan::TokenAtATime { .. } => 0,
        }
    }
}

impl std::fmt::Display for PromptLogits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptLogits::Batched { clause, .. } | PromptLogits::TokenAtATime { clause } => {
                write!(f, "{clause}")
            }
        }
    }
}

impl std::fmt::Display for PrefillPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |clauses: &[Clause]| {
            clauses
                .iter()
                .map(Clause::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        match self {
            PrefillPlan::TokenAtATime { clauses } => {
                write!(f, "token at a time: {}", join(clauses))
            }
            PrefillPlan::Batched(b) => {
                write!(
                    f,
                    "{}; matmuls below; attention {}: {}; {}",
                    b.batch,
                    b.attention.launch().pipeline_key(),
                    join(b.attention.clauses()),
                    b.logits
                )
            }
        }
    }
}

fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo> {
    file.tensor(name)
        .ok_or_else(|| Error::Invalid(format!("the model has no `{name}` tensor")))
}

/// `name` as an M x K matrix, or an error saying what shape it has.
fn matrix_tensor<'f>(file: &'f GgufFile, name: &str, m: u64, k: u64) -> Result<&'f TensorInfo> {
    let t = tensor(file, name)?;
    if t.dims.len() != 2 || t.cols() != k || t.rows() != m {
        return Err(Error::Invalid(format!(
            "`{name}` has shape {:?}, expected [{k}, {m}] (columns, rows)",
            t.dims
        )));
    }
    Ok(t)
}

/// Plans `file` on `profile`: device-free, so a preset's plan is the plan a device with
/// that profile runs.
pub fn plan(file: &GgufFile, profile: &DeviceProfile, options: &LoadOptions) -> Result<Plan> {
    let config = Config::from_gguf(file)?;
    options.validate(&config)?;
    let (dim, kv_dim, ffn) = (
        config.dim as u64,
        config.kv_dim() as u64,
        config.ffn_dim as u64,
    );
    let q_dim = (config.n_heads * config.head_dim) as u64;
    let offsets = Offsets::of(&config, profile);
    let widths = Widths::of(&config, &offsets);
    // The largest batch prefill may take is counted against the device with the cache.
    let prefill_bytes = batch_bytes(
        &widths,
        config.vocab as u64,
        options.ubatch.unwrap_or(DEFAULT_UBATCH) as u64,
        LOGITS_RUN,
    );
    let prefill_bytes = prefill_bytes
        .saturating_add(unpacked_scratch_bound(&config, &widths, profile, options))
        .saturating_add(span_scratch_bound(&config, &widths, options));
    let (n_ctx, context_reason) = context(&config, file, profile, options, prefill_bytes)?;
    let attention = route_attention(
        profile,
        &AttentionQuery {
            heads: config.heads(),
            kv: options.kv,
            n_ctx: n_ctx as u64,
        },
        &options.routing,
    )?;
    // The matvecs that compute act(gate) * up while staging x know silu only: a GeGLU
    // down projection takes it in f32 from its own dispatch (`ops/gelu_mul`).
    let down_input = match config.activation {
        Activation::Silu => XInput::Glu {
            up: offsets.up_first,
        },
        Activation::GeluTanh => XInput::F32,
    };
    let planner = Planner {
        file,
        profile,
        options,
    };
    let mut layers = (0..config.n_layers)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            Ok(LayerPlan {
                qkv: planner.stack(
                    &[n("attn_q"), n("attn_k"), n("attn_v")],
                    &[q_dim, kv_dim, kv_dim],
                    &[0, offsets.k_first, offsets.v_first],
                    dim,
                )?,
                wo: planner.matrix(&n("attn_output"), dim, q_dim, XInput::F32)?,
                gate_up: planner.stack(
                    &[n("ffn_gate"), n("ffn_up")],
                    &[ffn, ffn],
                    &[0, offsets.up_first],
                    dim,
                )?,
                down: planner.matrix(&n("ffn_down"), dim, ffn, down_input)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut output = planner.matrix(output_tensor(file), config.vocab as u64, dim, XInput::Norm)?;
    let prefill = plan_prefill(
        &config,
        (&mut layers, &mut output),
        &widths,
        (options.kv, n_ctx),
        profile,
        options,
    )?;
    let decode_units_from = decode_units_from(options);
    let units = decode_columns_plan(
        profile,
        (options, decode_units_from),
        (&mut layers, &mut output),
    )?;
    let decode_rows = decode_rows_plan((options, decode_units_from), &layers, &output, units);
    Ok(Plan {
        decode_rows,
        decode_units_from,
        index_checks: Clause::IndexChecks {
            kernels_own: profile.kernel_index_checks,
        },
        device: profile.name.clone(),
        file: file.identity(),
        config,
        n_ctx,
        sequences: options.sequences,
        context_reason,
        kv: options.kv,
        attention,
        offsets,
        layers,
        output,
        prefill,
    })
}

/// Rows a decode step needs before its quant matrices take the matrix units: the run's
/// ask, else [`DECODE_MATRIX_UNITS_FROM`].
fn decode_units_from(options: &LoadOptions) -> u64 {
    options
        .routing
        .decode_units_from
        .unwrap_or(DECODE_MATRIX_UNITS_FROM)
        .max(1)
}

/// Gives each quant matrix over dot4 weights, where the model serves at least `from`
/// sequences ([`decode_units_from`]) and the run did not turn the matrix
/// units off, its decode rows on them: unpacked where the run asked for that and the
/// adapter runs it (layer matrices only, whose unpacked weights one scratch holds),
/// else as columns where the adapter has cooperative matrices of a tile that fits.
/// Returns the columns' engines (narrow, wide), or None; refuses row blocks the run
/// asked for whose tile does not fit the adapter.
fn decode_columns_plan(
    profile: &DeviceProfile,
    (options, from): (&LoadOptions, u64),
    (layers, output): (&mut [LayerPlan], &mut PlannedMatrix),
) -> Result<Option<(MatmulEngine, MatmulEngine)>> {
    if (options.sequences as u64) < from || options.routing.coop_matrix == Some(false) {
        return Ok(None);
    }
    decode_unpacked_plan(profile, options, layers);
    let asked_row_blocks = options.routing.decode_row_blocks;
    // The spans' sums of a step meet in one binding: where the widest row part's would
    // not fit one, K in one span.
    let widest_part = layers
        .iter()
        .flat_map(LayerPlan::matrices)
        .chain([&*output])
        .flat_map(|m| m.route.launch().parts().iter().map(|p| p.rows))
        .max()
        .unwrap_or(0);
    let asked = decode_column_spans(options);
    let fits = span_scratch_bytes(asked, options.sequences as u64, widest_part)
        <= profile.usable_binding_bytes();
    let spans = if fits { asked } else { 1 };
    let plans_tiles =
        || decode_columns_tiles(profile, DECODE_NARROW_ROW_BLOCKS, &DECODE_WIDE_ROW_BLOCKS);
    let tiles = match asked_row_blocks {
        Some(row_blocks) => decode_columns_tiles(profile, row_blocks, &[row_blocks]),
        None => plans_tiles(),
    };
    let Some((narrow, wide)) = tiles.map(|(n, w)| (n.in_k_spans(spans), w.in_k_spans(spans)))
    else {
        // Row blocks the run asked for, where the plan's own tiles would fit: refused,
        // rather than the decode columns dropped without a word.
        return match asked_row_blocks {
            Some(asked) if plans_tiles().is_some() => Err(Error::Setting {
                setting: "Overrides::decode_row_blocks",
                value: asked.to_string(),
                expected: format!(
                    "1, 2, 4 or 8 blocks of rows whose tile fits the adapter's {} bytes of \
                     workgroup memory",
                    profile.workgroup_storage_bytes
                ),
            }),
            _ => Ok(None),
        };
    };
    let columns = |m: &PlannedMatrix| {
        Some(DecodeColumns {
            narrow: MatmulLaunch::of(m.route.launch(), narrow).ok()?,
            wide: MatmulLaunch::of(m.route.launch(), wide).ok()?,
        })
    };
    let dot4 = |m: &&mut PlannedMatrix| m.route.launch().family() == Family::Dot4;
    for m in layers
        .iter_mut()
        .flat_map(LayerPlan::matrices_mut)
        .filter(dot4)
    {
        if m.decode_unpacked.is_none() {
            m.decode_columns = columns(m);
        }
    }
    if dot4(&output) {
        output.decode_columns = columns(output);
    }
    Ok(Some((narrow, wide)))
}

/// The decode columns' narrow tile (one block of tokens) in `narrow_row_blocks` blocks
/// of rows, a part of K a subgroup, and the wide tile (two) in the first of
/// `wide_row_blocks` that fits, in the narrow tile's parts; or None where either does
/// not fit `profile`.
fn decode_columns_tiles(
    profile: &DeviceProfile,
    narrow_row_blocks: u32,
    wide_row_blocks: &[u32],
) -> Option<(MatmulEngine, MatmulEngine)> {
    let tile = |row_blocks, token_blocks| {
        MatmulEngine::coop_columns(profile, row_blocks, token_blocks, DECODE_COLUMNS_K_GROUPS)
    };
    let narrow = tile(narrow_row_blocks, 1)?;
    let wide = wide_row_blocks
        .iter()
        .find_map(|&row_blocks| tile(row_blocks, 2)?.in_k_parts(narrow.k_parts()))?;
    Some((narrow, wide))
}

/// Gives the layer matrices over dot4 weights their unpacked decode rows where the run
/// asked (`--unpacked-matmul true`), the adapter runs the unpacked engine, and the
/// scratch fits a binding; independent of whether the columns' tile fits.
fn decode_unpacked_plan(profile: &DeviceProfile, options: &LoadOptions, layers: &mut [LayerPlan]) {
    if options.routing.unpacked_matmul != Some(true) {
        return;
    }
    let Ok(engine) = UnpackedEngine::on(profile, DECODE_UNPACKED_TILE, true) else {
        return;
    };
    let binding = profile.usable_binding_bytes();
    let rows = options.sequences as u64;
    for m in layers.iter_mut().flat_map(LayerPlan::matrices_mut) {
        let launch = m.route.launch();
        if launch.family() != Family::Dot4 {
            continue;
        }
        m.decode_unpacked = UnpackedMatmul::of(launch, engine)
            .ok()
            .filter(|u| u.weight_scratch_bytes().max(u.x_scratch_bytes(rows)) <= binding);
    }
}

/// The clauses of a decode step over several sequences: none for one.
fn decode_rows_plan(
    (options, from): (&LoadOptions, u64),
    layers: &[LayerPlan],
    output: &PlannedMatrix,
    units: Option<(MatmulEngine, MatmulEngine)>,
) -> Vec<Clause> {
    let sequences = options.sequences;
    if sequences < 2 {
        return Vec::new();
    }
    let matrices = || layers.iter().flat_map(LayerPlan::matrices).chain([output]);
    let columns = matrices()
        .map(|m| m.route.launch().max_columns())
        .min()
        .unwrap_or(1);
    let mut clauses = vec![Clause::DecodeRowsAsColumns {
        sequences: sequences as u64,
        columns,
    }];
    if let Some((narrow, wide)) = units {
        let on_units = matrices().filter(|m| m.decode_columns.is_some()).count() as u64;
        clauses.push(Clause::DecodeRowsOnMatrixUnits {
            from,
            matrices: on_units,
            rows: (narrow.tile(), wide.tile()),
            tokens: (narrow.token_tile(), wide.token_tile()),
            k_parts: wide.k_parts(),
            k_spans: (wide.k_spans(), decode_column_spans(options)),
        });
    }
    let unpacked: Vec<&UnpackedMatmul> = matrices()
        .filter_map(|m| m.decode_unpacked.as_ref())
        .collect();
    if let Some(e) = unpacked.first().map(|u| u.engine()) {
        clauses.push(Clause::DecodeRowsUnpacked {
            from,
            matrices: unpacked.len() as u64,
            tile: (e.tile_rows(), e.tile_tokens()),
        });
    }
    clauses.push(Clause::DecodeAttentionRows);
    clauses
}

/// Plans prefill, giving each matrix its matmul: batched where the batch holds two
/// tokens or more, the prefill attention fits the device and every layer matrix has
/// a matmul over its matvec's weights; else token at a time, with the clause that says
/// why. Pure: a preset's plan is a device's.
fn plan_prefill(
    config: &Config,
    (layers, output): (&mut [LayerPlan], &mut PlannedMatrix),
    widths: &Widths,
    (kv, n_ctx): (KvType, usize),
    profile: &DeviceProfile,
    options: &LoadOptions,
) -> Result<PrefillPlan> {
    let token_at_a_time = |clause: Clause| {
        Ok(PrefillPlan::TokenAtATime {
            clauses: vec![clause],
        })
    };
    let asked = options.ubatch.map(|n| n as u64);
    let (ubatch, batch) = route_batch(
        profile,
        (asked, DEFAULT_UBATCH as u64),
        widths.widest_row(),
        n_ctx as u64,
    );
    let Some(ubatch) = ubatch else {
        return token_at_a_time(batch);
    };
    let coop = options.routing.coop_matrix;
    let engine = route_matmul_engine(profile, coop)?
        .with_unpacked(profile, options.routing.unpacked_matmul)?;
    let Ok(attention) = route_prefill_attention(
        profile,
        config.heads(),
        (kv, n_ctx as u64),
        (coop, options.routing.matrix_attention),
    ) else {
        return token_at_a_time(Clause::NoPrefillAttention);
    };
    let mut routed = Vec::new();
    for m in layers.iter().flat_map(LayerPlan::matrices) {
        match route_matmul(profile, &engine, m.route.launch(), ubatch) {
            Ok(r) => routed.push(r),
            Err(_) => {
                return token_at_a_time(Clause::NoMatmul {
                    kernel: m.route.launch().kernel().name,
                })
            }
        }
    }
    for (m, r) in layers
        .iter_mut()
        .flat_map(LayerPlan::matrices_mut)
        .zip(routed)
    {
        m.batch = Some(r);
    }
    let vocab_bytes = 4 * config.vocab as u64;
    let binding = profile.usable_binding_bytes();
    let tokens = ubatch.min(LOGITS_RUN).min(binding / vocab_bytes);
    // The lm-head stays tiled: its unpacked weights (vocabulary x dim) would outweigh
    // every layer matrix's scratch, for a matmul that runs only where prompt logits
    // are asked for.
    let tiled = engine.clone().with_unpacked(profile, None)?;
    let head = (tokens > 0)
        .then(|| route_matmul(profile, &tiled, output.route.launch(), tokens).ok())
        .flatten();
    let logits = match head {
        Some(head) => {
            output.batch = Some(head);
            PromptLogits::Batched {
                tokens,
                clause: Clause::PromptLogitsRuns { tokens },
            }
        }
        None if tokens == 0 => PromptLogits::TokenAtATime {
            clause: Clause::PromptLogitsTooWide {
                bytes: vocab_bytes,
                binding,
            },
        },
        None => PromptLogits::TokenAtATime {
            clause: Clause::NoMatmul {
                kernel: output.route.launch().kernel().name,
            },
        },
    };
    Ok(PrefillPlan::Batched(Box::new(BatchedPrefill {
        ubatch,
        batch,
        engine,
        attention,
        logits,
    })))
}

/// What the unpacked matmuls' scratch can take, where the run asks for them and the
/// adapter can run them (0 elsewhere): for a prompt's batch, and for a decode step of
/// many sequences where the model serves that many, the unpacked weights of the
/// largest layer matrix (q, k and v stacked, gate and up stacked, the output and down
/// projections) and the widest unpacked x of its rows, each in whole tiles. Counted
/// against the device before the matrices are routed, so at least what
/// `Plan::unpacked_scratch` and `Plan::decode_unpacked_scratch` find.
fn unpacked_scratch_bound(
    config: &Config,
    widths: &Widths,
    profile: &DeviceProfile,
    options: &LoadOptions,
) -> u64 {
    if options.routing.unpacked_matmul != Some(true) {
        return 0;
    }
    let (dim, ffn) = (config.dim as u64, config.ffn_dim as u64);
    let q_dim = (config.n_heads * config.head_dim) as u64;
    let shapes = [
        (widths.qkv, dim),
        (dim, q_dim),
        (widths.gate_up, dim),
        (dim, ffn),
    ];
    let scratch = |tile, rows: u64| {
        let Ok(engine) = UnpackedEngine::on(profile, tile, true) else {
            return 0;
        };
        let bytes = engine.shape.input.bytes();
        let weights = shapes
            .iter()
            .map(|&(m, k)| m.next_multiple_of(engine.tile_rows()) * k * bytes)
            .max()
            .unwrap_or(0);
        let widest = shapes.iter().map(|&(_, k)| k).max().unwrap_or(0);
        let x = rows.next_multiple_of(engine.tile_tokens()) * widest * bytes;
        weights.saturating_add(x)
    };
    let ubatch = options.ubatch.unwrap_or(DEFAULT_UBATCH) as u64;
    let sequences = options.sequences as u64;
    let decode = match sequences >= decode_units_from(options) {
        true => scratch(DECODE_UNPACKED_TILE, sequences),
        false => 0,
    };
    scratch(UNPACKED_TILE, ubatch).saturating_add(decode)
}

/// Spans the decode columns sum K in: as the run asks, else [`DECODE_COLUMN_SPANS`].
fn decode_column_spans(options: &LoadOptions) -> u32 {
    options
        .routing
        .decode_column_spans
        .unwrap_or(DECODE_COLUMN_SPANS)
        .max(1)
}

/// What the decode columns' K-span scratch can take, where they sum K in spans and the
/// model serves enough sequences to reach the matrix units (0 elsewhere): every span's
/// sums of the widest matrix (the output head at most) for every sequence. Counted
/// against the device before the matrices are routed, so at least what
/// `Plan::decode_span_scratch` finds.
fn span_scratch_bound(config: &Config, widths: &Widths, options: &LoadOptions) -> u64 {
    let spans = decode_column_spans(options);
    let sequences = options.sequences as u64;
    if spans < 2 || sequences < decode_units_from(options) {
        return 0;
    }
    let widest = [
        widths.qkv,
        widths.gate_up,
        config.dim as u64,
        config.vocab as u64,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    span_scratch_bytes(spans, sequences, widest)
}

/// Share of the device's memory a default context may fill: the rest is left to the
/// driver and to other work on the device.
const DEFAULT_CONTEXT_MEMORY_SHARE: f64 = 0.9;

/// The context: the one asked for, checked against the device; by default the trained
/// length where it fits, else the largest that does (a multiple of 256), saying so.
fn context(
    config: &Config,
    file: &GgufFile,
    profile: &DeviceProfile,
    options: &LoadOptions,
    prefill_bytes: u64,
) -> Result<(usize, String)> {
    let need = |n: usize| {
        MemoryNeed::of(config, file, (n, options.sequences), options.kv, profile)?
            .with_prefill(prefill_bytes)
    };
    let trained = config.context_length;
    if let Some(n) = options.context {
        need(n)?.check_fits(profile, config, n, options.kv)?;
        // `LoadOptions::validate` refused it past the trained context unless allowed.
        return Ok(match n > trained {
            true => (
                n,
                format!("{n} positions, as asked: past the trained {trained}, as allowed"),
            ),
            false => (n, format!("{n} positions, as asked")),
        });
    }
    let fits = |n: usize| need(n).and_then(|m| m.check_fits(profile, config, n, options.kv));
    if fits(trained).is_ok() {
        return Ok((trained, format!("the trained context of {trained}")));
    }
    let fixed = need(0)?.total();
    let per_position = need(1)?.total() - fixed;
    let by_memory = profile.memory_bytes.map_or(u64::MAX, |memory| {
        ((memory as f64 * DEFAULT_CONTEXT_MEMORY_SHARE) as u64).saturating_sub(fixed)
            / per_position.max(1)
    });
    let by_binding = profile.usable_binding_bytes()
        / MemoryNeed::per_position_binding(config, options.kv)
        / options.sequences.max(1) as u64;
    let n = (by_memory.min(by_binding).min(trained as u64) as usize) / 256 * 256;
    if n == 0 {
        // Nothing fits: the trained context's refusal has the numbers.
        fits(trained)?;
    }
    fits(n)?;
    Ok((
        n,
        format!(
            "{n} of the trained {trained}: the largest multiple of 256 whose KV cache fits \
             ({} of {}'s memory, {} bytes per binding; {} per position in {})",
            if by_memory <= by_binding {
                "90 %"
            } else {
                "all"
            },
            profile.name,
            profile.usable_binding_bytes(),
            per_position,
            options.kv
        ),
    ))
}

struct Planner<'a> {
    file: &'a GgufFile,
    profile: &'a DeviceProfile,
    options: &'a LoadOptions,
}

impl Planner<'_> {
    fn route(&self, name: &str, query: MatvecQuery) -> Result<Route> {
        route_matvec(self.profile, &query, &self.options.routing).map_err(|e| match e {
            Error::UnsupportedType(what) => Error::UnsupportedType(format!("`{name}`: {what}")),
            other => other,
        })
    }

    fn matrix(&self, name: &str, m: u64, k: u64, x: XInput) -> Result<PlannedMatrix> {
        let t = matrix_tensor(self.file, name, m, k)?;
        Ok(PlannedMatrix {
            tensors: vec![name.to_string()],
            out_first: 0,
            route: self.route(
                name,
                MatvecQuery {
                    ty: t.ty,
                    m,
                    k,
                    x,
                    columns: self.options.sequences as u64,
                },
            )?,
            batch: None,
            decode_columns: None,
            decode_unpacked: None,
        })
    }

    /// Tensors sharing a norm's output as input, writing `rows[i]` outputs each at
    /// element `first[i]` of one buffer: one matrix when they share a type and their
    /// outputs are back to back, else one matrix each.
    fn stack(
        &self,
        names: &[String],
        rows: &[u64],
        first: &[u64],
        k: u64,
    ) -> Result<Vec<PlannedMatrix>> {
        let tensors = names
            .iter()
            .zip(rows)
            .map(|(n, &m)| matrix_tensor(self.file, n, m, k))
            .collect::<Result<Vec<_>>>()?;
        let ty = tensors[0].ty;
        let same_type = tensors.iter().all(|t| t.ty == ty);
        let back_to_back = first
            .iter()
            .zip(rows)
            .zip(first.iter().skip(1))
            .all(|((&f, &m), &next)| f + m == next);
        if !(same_type && back_to_back) {
            return names
                .iter()
                .zip(rows)
                .zip(first)
                .map(|((name, &m), &out_first)| {
                    Ok(PlannedMatrix {
                        out_first,
                        ..self.matrix(name, m, k, XInput::Norm)?
                    })
                })
                .collect();
        }
        let name = names.join(" + ");
        let m = rows.iter().sum();
        let query = MatvecQuery {
            ty,
            m,
            k,
            x: XInput::Norm,
            columns: self.options.sequences as u64,
        };
        Ok(vec![PlannedMatrix {
            tensors: names.to_vec(),
            out_first: first[0],
            route: self.route(&name, query)?,
            batch: None,
            decode_columns: None,
            decode_unpacked: None,
        }])
    }
}

impl Plan {
    /// Bytes of the batch's unpacked-matmul scratch, where its matrices have unpacked
    /// routes: the largest matrix's unpacked weights, and the largest x of a batch.
    pub fn unpacked_scratch(&self) -> Option<(u64, u64)> {
        let ubatch = self.prefill.ubatch();
        self.layers
            .iter()
            .flat_map(LayerPlan::matrices)
            .filter_map(|m| match m.batch.as_ref()?.launch() {
                BatchLaunch::Unpacked(u) => {
                    Some((u.weight_scratch_bytes(), u.x_scratch_bytes(ubatch)))
                }
                BatchLaunch::Tiled(_) => None,
            })
            .reduce(|(w, x), (w2, x2)| (w.max(w2), x.max(x2)))
    }

    /// Bytes of a decode step's unpacked-matmul scratch over `rows` rows, where its
    /// matrices have unpacked decode routes: the largest matrix's unpacked weights, and
    /// the rows' x.
    pub fn decode_unpacked_scratch(&self, rows: u64) -> Option<(u64, u64)> {
        self.layers
            .iter()
            .flat_map(LayerPlan::matrices)
            .filter_map(|m| m.decode_unpacked.as_ref())
            .map(|u| (u.weight_scratch_bytes(), u.x_scratch_bytes(rows)))
            .reduce(|(w, x), (w2, x2)| (w.max(w2), x.max(x2)))
    }

    /// Bytes of a decode step's K-span scratch over `rows` rows, where its decode
    /// columns sum K in spans: the largest matrix's spans of sums, in either tile.
    pub fn decode_span_scratch(&self, rows: u64) -> Option<u64> {
        self.matrices()
            .filter_map(|m| m.decode_columns.as_ref())
            .flat_map(|c| [&c.narrow, &c.wide])
            .filter(|l| l.engine().k_spans() > 1)
            .map(|l| l.span_scratch_bytes(rows))
            .max()
    }

    /// Every matrix, in forward-pass order.
    pub fn matrices(&self) -> impl Iterator<Item = &PlannedMatrix> {
        self.layers
            .iter()
            .flat_map(LayerPlan::matrices)
            .chain([&self.output])
    }

    /// The plan as `--plan --json` prints it, for decode and inspect alike: the device,
    /// and per matrix its tensors, type, M, K, pipeline and clauses.
    pub fn to_json(&self) -> serde_json::Value {
        let matvecs: Vec<serde_json::Value> = self
            .matrices()
            .map(|m| {
                let launch = m.route.launch();
                let matmul = m.batch.as_ref().map(|b| {
                    serde_json::json!({
                        "kernel": b.launch().pipeline_key(),
                        "clauses": b.clauses().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                    })
                });
                serde_json::json!({
                    "tensors": m.tensors,
                    "type": launch.kernel().ty.name(),
                    "m": launch.m(),
                    "k": launch.k(),
                    "kernel": launch.pipeline_key(),
                    "clauses": m.route.clauses().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                    "matmul": matmul,
                })
            })
            .collect();
        let attention = serde_json::json!({
            "kernel": self.attention.launch().pipeline_key(),
            "kv": self.kv.name(),
            "clauses": self.attention.clauses().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        });
        serde_json::json!({
            "device": self.device,
            "context": self.n_ctx,
            "sequences": self.sequences,
            "decode_rows": self.decode_rows.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "context_reason": self.context_reason,
            "attention": attention,
            "prefill": self.prefill,
            "prefill_summary": self.prefill.to_string(),
            "matvecs": matvecs,
        })
    }
}

impl std::fmt::Display for Plan {
    /// The matvecs' route table with a legend of clauses, the context and attention,
    /// then prefill's routes and, where it batches, the matmuls' table.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan for {}:", self.device)?;
        let names: Vec<String> = self.matrices().map(PlannedMatrix::name).collect();
        let rows: Vec<RouteRow> = self
            .matrices()
            .zip(&names)
            .map(|(m, name)| RouteRow::matvec(name, &m.route))
            .collect();
        write_route_table(f, &rows)?;
        writeln!(f, "forward: {}", self.config.forward_summary())?;
        writeln!(f, "context: {}", self.context_reason)?;
        writeln!(
            f,
            "attention: {}: {}",
            self.attention.launch().pipeline_key(),
            self.attention
                .clauses()
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        )?;
        writeln!(f, "prefill: {}", self.prefill)?;
        writeln!(f, "index checks: {}", self.index_checks)?;
        if !self.decode_rows.is_empty() {
            let clauses: Vec<String> = self.decode_rows.iter().map(|c| c.to_string()).collect();
            writeln!(f, "decode rows: {}", clauses.join("; "))?;
        }
        let rows: Vec<RouteRow> = self
            .matrices()
            .zip(&names)
            .filter_map(|(m, name)| Some(RouteRow::matmul(name, m.batch.as_ref()?)))
            .collect();
        if !rows.is_empty() {
            writeln!(f, "prefill matmuls:")?;
            write_route_table(f, &rows)?;
        }
        Ok(())
    }
}
