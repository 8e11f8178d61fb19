//! Why a route is what it is: one typed clause per decision, in the order the router
//! made them, each with the numbers it compared.

use serde::Serialize;

use super::prefill::NoCoopMatrix;
use crate::device::{Backend, CoopMatrix};
use crate::kernels::attention::{KvType, Merge, NoMatrixAttention};
use crate::kernels::matvec::{Batches, Family, XStage};
use crate::quant::GgmlType;

/// One decision of the router, with the numbers it compared: a route's clauses, in
/// the order they were made, say why it is what it is. `Display` writes each as a
/// line of a route's explanation (what [`Route::reason`](super::Route::reason)
/// joins), and it serializes as that line. Sizes are in bytes unless a field's name says otherwise (`_kib`: KiB,
/// `_mb`: MB of 10^6 bytes); `forced` marks a choice an override made.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Clause {
    /// The matvec family was forced ([`Overrides::force`](super::Overrides::force)).
    ForcedFamily(Family),
    /// Forced to dot4 with float weights, which keep x float: coop instead.
    ForcedDot4HasNoKernel(GgmlType),
    /// The matvec kernel was forced, by name.
    ForcedKernel(&'static str),
    /// The device has subgroups and the workgroup memory for dot4: x rounded to int8
    /// groups, as llama.cpp's Q8_1.
    Dot4 {
        /// The adapter's subgroup sizes, (smallest, largest).
        subgroups: (u32, u32),
        /// Workgroup memory, in KiB.
        workgroup_kib: u32,
    },
    /// The device has subgroups and the workgroup memory for coop: exact activations.
    Coop {
        /// The adapter's subgroup sizes, (smallest, largest).
        subgroups: (u32, u32),
        /// Workgroup memory, in KiB.
        workgroup_kib: u32,
    },
    /// The device has no subgroups: scalar.
    ScalarNoSubgroups,
    /// No coop kernel for this weight type: scalar.
    ScalarNoCoopKernel(GgmlType),
    /// Subgroups too small or too little workgroup memory for the cooperative
    /// families: scalar.
    ScalarDeviceTooSmall,
    /// The norm feeding the matrix writes its output quantized as well.
    NormWritesQ8 {
        /// The matrices' weights the norm feeds, in MB.
        weight_mb: f64,
        /// The rule's threshold, in MB
        /// ([`Tuning::norm_q8_min_bytes`](crate::device::Tuning::norm_q8_min_bytes)).
        min_mb: u64,
        /// Columns (rows of a decode step) the matrix multiplies at most, where they
        /// decided it ([`Tuning::q8_min_columns`](crate::device::Tuning::q8_min_columns)).
        columns: Option<u64>,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// silu(gate) * up quantized once by `ops/silu_mul_q8`.
    GluQuantizedOnce {
        /// The down projection's weights, in MB.
        weight_mb: f64,
        /// The rule's threshold, in MB
        /// ([`Tuning::glu_q8_min_bytes`](crate::device::Tuning::glu_q8_min_bytes)).
        min_mb: u64,
        /// Columns (rows of a decode step) the matrix multiplies at most, where they
        /// decided it ([`Tuning::q8_min_columns`](crate::device::Tuning::q8_min_columns)).
        columns: Option<u64>,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// silu(gate) * up computed by each workgroup while it stages x.
    GluWhileStaging,
    /// x arrives quantized; staging copies it.
    StagingCopiesQ8,
    /// x read in place: each loaded weight slice is dotted with `columns` of a step's
    /// rows at once, as asked (`asked`); one, where its kernel does not split its
    /// slices. (Staged, [`Clause::StagedColumns`] says.)
    ColumnsAtOnce {
        /// Columns taken at once.
        columns: u32,
        /// Columns the override asked for.
        asked: u32,
    },
    /// A staging route of a model whose decode steps take up to `rows` rows: its
    /// workgroups stage `columns` of them at once (x in one tile), each loaded weight
    /// slice dotted with every one; one where `bytes` (two columns' tiles) would not fit
    /// the device's workgroup memory or the run said no.
    StagedColumns {
        /// Columns staged at once.
        columns: u32,
        /// A decode step's rows at most.
        rows: u64,
        /// Tiles of x a row takes (staged tile by tile where more than one).
        tiles: u64,
        /// Workgroup memory the columns' tiles take (two columns', where none fit).
        bytes: u64,
        /// The device's workgroup memory, in KiB.
        workgroup_kib: u32,
        /// Whether the run turned it off (`staged_columns` no, or one column at once).
        off: bool,
        /// Whether each lane loads its next weight slice ahead.
        prefetch: bool,
    },
    /// x arrives quantized and the lanes read it in place: nothing staged.
    ReadInPlace {
        /// Rows of each workgroup's one batch.
        rows_per_workgroup: u64,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// x fits one tile: staged once per workgroup.
    XStagedOnce {
        /// The form it is staged in.
        stage: XStage,
        /// Workgroup memory the tile takes.
        bytes: u64,
        /// The device's workgroup memory, in KiB.
        workgroup_kib: u32,
    },
    /// x is staged tile by tile.
    XTiles {
        /// The form it is staged in.
        stage: XStage,
        /// Tiles a row takes.
        tiles: u64,
        /// Elements of x per tile.
        tile: u32,
        /// The device's workgroup memory, in KiB.
        workgroup_kib: u32,
    },
    /// Staged columns' rows taken by teams of `lanes` lanes rather than whole
    /// subgroups: each of a row's columns ends in a subgroup sum, and a team's sums
    /// serve as many rows at once as the subgroup holds teams.
    StagedColumnsTeam {
        /// Lanes per row.
        lanes: u32,
        /// Rows each subgroup sum serves, in subgroups of the adapter's smallest and
        /// largest sizes (the same on NVIDIA and Apple; AMD and Intel may run either).
        rows_per_sum: (u32, u32),
        /// Row batches the largest part makes with this team.
        batches: u64,
        /// Row batches a team must leave ([`Tuning::staged_team_min_batches`]).
        ///
        /// [`Tuning::staged_team_min_batches`]: crate::device::Tuning::staged_team_min_batches
        min_batches: u64,
    },
    /// dot4 rows taken by teams of `lanes` lanes rather than whole subgroups, which
    /// would leave more lanes idle in a row's last round.
    TeamLanes {
        /// Lanes per row.
        lanes: u32,
        /// Slices of the row (per x tile), a slice being one lane's share of a block.
        slices: u64,
        /// Lanes a whole subgroup would leave idle, in percent.
        whole_idle_pct: f64,
        /// Lanes the team leaves idle, in percent.
        team_idle_pct: f64,
    },
    /// The weights exceed a binding: the rows are split into parts, a binding and a
    /// dispatch each.
    SplitAcrossBindings {
        /// The weights' bytes.
        bytes: u64,
        /// The device's largest binding.
        limit: u64,
        /// Parts made.
        parts: u64,
        /// Rows per part, at most.
        rows_per_part: u64,
    },
    /// Workgroups capped so that what they stage of x stays a small share of the
    /// weights they read.
    StagingCapsWorkgroups {
        /// Workgroups launched.
        workgroups: u64,
        /// The weights' bytes per byte of x staged, at least
        /// ([`Tuning::dot4_weight_per_staged_x`](crate::device::Tuning::dot4_weight_per_staged_x)).
        weight_per_staged_x: u64,
    },
    /// Staged columns on at most this many workgroups, one per compute unit
    /// ([`Tuning::staged_columns_workgroups`]): each stages the step's columns of x once
    /// and takes its share of the row batches.
    ///
    /// [`Tuning::staged_columns_workgroups`]: crate::device::Tuning::staged_columns_workgroups
    StagedColumnsWorkgroups {
        /// Workgroups at most.
        workgroups: u64,
    },
    /// Staging workgroups take row batches from a queue.
    BatchQueue {
        /// Row batches per workgroup.
        per_workgroup: f64,
        /// Weights per batch.
        batch_bytes: u64,
    },
    /// Each lane loads its next slice ahead, across rows.
    Prefetch {
        /// Row batches per workgroup.
        per_workgroup: f64,
    },
    /// An A/B override set this launch choice.
    Override(Override),
    /// Decode attention on the subgroup kernel.
    AttentionSubgroups {
        /// As the adapter reports them.
        subgroups: (u32, u32),
        /// `DeviceProfile::subgroup_runs`: the width they run at, where that is fixed.
        runs: Option<u32>,
        /// Lanes per team.
        team: u32,
        /// 16-byte words of a row each lane reads.
        lane_words: u32,
        /// Query heads per workgroup.
        heads_per_group: u32,
        /// Query heads per KV head.
        group: u64,
        /// Invocations per workgroup.
        invocations: u32,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// The heads are not whole 16-byte words of the cache's values, which the subgroup
    /// kernel reads: portable.
    AttentionRowsNotWords {
        /// Values per head.
        head_dim: u64,
        /// The cache's format.
        kv: KvType,
        /// Values per 16-byte word in that format.
        word_values: u64,
    },
    /// Subgroups narrower than a team of the subgroup kernel: portable.
    AttentionSubgroupsNarrow {
        /// The device's smallest subgroup.
        subgroup_min: u32,
        /// Lanes a team needs.
        lanes: u32,
    },
    /// Decode attention on the portable kernel.
    AttentionPortable {
        /// Query heads per workgroup.
        heads_per_group: u32,
        /// Query heads per KV head.
        group: u64,
        /// Whether the device has subgroups (else that is why).
        subgroups: bool,
    },
    /// How decode attention splits a step's positions into chunks.
    AttentionChunks {
        /// Positions per chunk, at least.
        min_chunk: u64,
        /// Chunks per step, at most.
        max_chunks: u64,
        /// Workgroups per chunk (KV heads by head groups).
        workgroups_per_chunk: u64,
        /// Workgroups aimed at
        /// ([`Tuning::attention_workgroups`](crate::device::Tuning::attention_workgroups)).
        target: u64,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// How a split step's chunks are merged, on this backend.
    AttentionMerge {
        /// The merge.
        merge: Merge,
        /// The backend, which decides whether the in-dispatch merge is trusted.
        backend: Backend,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// The device ends an invocation's loops after `limit` iterations in all, so a
    /// chunk of decode attention holds at most `max_chunk` positions.
    AttentionLoopLimit {
        /// Loop iterations per invocation
        /// ([`DeviceProfile::loop_iterations`](crate::device::DeviceProfile::loop_iterations)).
        limit: u64,
        /// Positions per chunk, at most.
        max_chunk: u64,
    },
    /// The KV cache's format and what a step reads of it.
    KvCache {
        /// The format.
        kv: KvType,
        /// K and V kB (10^3 bytes) read per cached position per layer.
        kb_per_token: f64,
    },
    /// A batch's quant matrices multiply on cooperative matrices, where the batch
    /// splits a matrix into at least `min_tiles` tiles of `tile` (all, where forced).
    MatmulCoopMatrix {
        /// The cooperative-matrix shape.
        shape: CoopMatrix,
        /// Groups of 32 staged per K step.
        k_groups: u32,
        /// Tiles that fill the device
        /// ([`Tuning::coop_min_workgroups`](crate::device::Tuning::coop_min_workgroups)).
        min_tiles: u64,
        /// Rows (and tokens) per tile.
        tile: u64,
        /// Whether an override decided it rather than the rule.
        forced: bool,
    },
    /// ... on dot4, and why not on cooperative matrices.
    MatmulDot4 {
        /// Groups of 32 staged per K step; 0 in an error that gives only the reason.
        k_groups: u32,
        /// Why not cooperative matrices.
        why: NoCoopMatrix,
    },
    /// This matrix splits into fewer tiles than cooperative matrices need to fill the
    /// device: dot4.
    MatmulCoopFewTiles {
        /// Tiles a batch splits it into.
        tiles: u64,
        /// Tiles that fill the device.
        min: u64,
        /// dot4's groups of 32 staged per K step.
        k_groups: u32,
    },
    /// Float weights multiply f32 x on f32 FMAs.
    MatmulFloatWeights {
        /// The weights' type.
        ty: GgmlType,
    },
    /// The matrix's matvec keeps x exact: its matmul multiplies f32 x on f32 FMAs too.
    MatmulExactX {
        /// The matvec's family.
        family: Family,
    },
    /// x arrives rounded to int8 per 32 values, by the op before.
    MatmulXQ8,
    /// The batch's quant matrices on the matrix units unpacked: weights decoded once
    /// per batch, x converted once per x, both into rows of the matrix input type
    /// that the multiply loads straight from memory (`matmul/unpacked.wgsl`).
    MatmulUnpacked {
        /// The cooperative-matrix shape.
        shape: CoopMatrix,
        /// Rows and tokens per tile.
        tile: (u64, u64),
        /// Whether a subgroup loads the next K step's matrices before multiplying.
        prefetch: bool,
        /// Bytes of the two scratch buffers: the matrix's unpacked weights, and a
        /// batch's unpacked x.
        scratch: (u64, u64),
    },
    /// Unpacked matmuls were asked for, and this matrix's unpacked weights or its
    /// batch's x would not fit one binding: it stays tiled.
    MatmulUnpackedPastBinding {
        /// Bytes of its unpacked weights and of a batch's unpacked x.
        scratch: (u64, u64),
        /// The largest binding the device takes.
        binding: u64,
    },
    /// (token, query head) rows and key positions per prefill attention workgroup.
    PrefillAttentionTiles {
        /// (token, query head) rows per workgroup.
        rows: u32,
        /// Key positions per tile.
        key_tile: u32,
        /// Slices a head's output is computed in.
        slices: u64,
        /// Workgroup memory a workgroup takes.
        bytes: u64,
        /// Workgroup memory the device has.
        budget: u64,
    },
    /// Prefill attention on the matrix units (`attention/flash.wgsl`): Q Kᵀ and P V on
    /// `shape` matrices, `rows` (token, query head) rows by `key_tile` keys a tile.
    PrefillAttentionOnMatrixUnits {
        /// The matrices.
        shape: CoopMatrix,
        /// (token, query head) rows per workgroup.
        rows: u32,
        /// Key positions per tile.
        key_tile: u32,
        /// Slices a head's output is computed in.
        slices: u64,
        /// Workgroup memory a workgroup takes.
        bytes: u64,
        /// Workgroup memory the device has.
        budget: u64,
    },
    /// Prefill attention on f32 FMAs, 8 x 4 tiles in each invocation's registers
    /// (`attention/prefill.wgsl`), and why not on the matrix units.
    PrefillAttentionScalar {
        /// Why not.
        why: NoMatrixAttention,
    },
    /// The device ends an invocation's loops after `limit` iterations: a dispatch walks
    /// at most `keys` key positions.
    PrefillKeyPasses {
        /// Loop iterations per invocation.
        limit: u64,
        /// Key positions per pass, at most.
        keys: u64,
    },
    /// The device stops an invocation's loops after `limit` iterations; the matrix
    /// kernel, which has no passes, walks the context's `keys` in `iterations` at most,
    /// within half of that (a longer context would take the scalar kernel).
    PrefillMatrixWalkWithinLoopLimit {
        /// Loop iterations per invocation.
        limit: u64,
        /// Key positions a walk takes at most: the context.
        keys: u64,
        /// Loop iterations an invocation runs for them, at most.
        iterations: u64,
    },
    /// Prompts are batched: `tokens` a batch.
    Batch {
        /// Tokens per batch.
        tokens: u64,
        /// Whether [`LoadOptions::ubatch`](crate::model::LoadOptions::ubatch) asked for
        /// it (else the default).
        asked: bool,
    },
    /// The batch is cut so that its widest buffer fits a binding.
    BatchByBinding {
        /// Tokens per batch.
        tokens: u64,
        /// Tokens asked for (or the default).
        wanted: u64,
        /// Bytes per token of the widest buffer.
        row_bytes: u64,
        /// The device's largest binding.
        binding: u64,
    },
    /// The batch is cut to the context.
    BatchByContext {
        /// Tokens per batch.
        tokens: u64,
        /// Tokens asked for (or the default).
        wanted: u64,
    },
    /// A batch of one token was asked for: prompts go token at a time.
    BatchOfOneAsked,
    /// A decode step of several sequences: its rows (a token of each) are the columns
    /// of each matrix's matvec, up to `columns` a dispatch (more rows take more
    /// dispatches), each reduced as a lone row is: a sequence's logits are the same,
    /// bit for bit, whoever shares its step.
    DecodeRowsAsColumns {
        /// Sequences the model serves at once.
        sequences: u64,
        /// Columns one matvec dispatch takes at most.
        columns: u64,
    },
    /// Who keeps the kernels' array indices in range
    /// ([`DeviceProfile::kernel_index_checks`](crate::device::DeviceProfile::kernel_index_checks)).
    IndexChecks {
        /// The kernels that keep their indices in range by construction (the
        /// matrix-unit kernels: tiled matmuls, decode columns, flash attention; and the
        /// dot4 matvecs) run without wgpu's clamps; else every kernel has the clamps.
        kernels_own: bool,
    },
    /// A decode step of `from` rows or more: the quant matrices (`matrices` of them)
    /// multiply its rows on the matrix units, `rows` by `tokens` a workgroup. A row's
    /// result still does not depend on the others, but is not the column matvec's: the
    /// weights and x are rounded to f16 before they multiply.
    DecodeRowsOnMatrixUnits {
        /// Rows a step needs.
        from: u64,
        /// Matrices that take them there.
        matrices: u64,
        /// Rows of a workgroup's tile: the narrow tile's and the wide tile's.
        rows: (u64, u64),
        /// Tokens of a workgroup's tile: the narrow tile's, for steps of that many rows
        /// or fewer, and the wide tile's, for more.
        tokens: (u64, u64),
        /// Parts each round's K is summed in, both tiles alike.
        k_parts: u32,
        /// Spans K is summed in over workgroups (1: none), and the spans the run asked
        /// for or the default: fewer where their sums would not fit one binding.
        k_spans: (u32, u32),
    },
    /// Steps of `from` rows or more multiply the layer matrices unpacked, as asked
    /// (`matmul/unpacked`: each step unpacks each matrix's weights and the rows' x).
    DecodeRowsUnpacked {
        /// Rows a step needs.
        from: u64,
        /// Matrices that take them there.
        matrices: u64,
        /// Rows and tokens of a workgroup's tile.
        tile: (u64, u64),
    },
    /// A decode step of several sequences: RoPE with the cache append, and attention,
    /// are one dispatch each over the step's rows, each row at its own position in its
    /// own sequence's region of the cache, split as its own positions split alone.
    DecodeAttentionRows,
    /// Prompts go token at a time: this matrix's matvec has no matmul.
    NoMatmul {
        /// The matvec kernel.
        kernel: &'static str,
    },
    /// Prompts go token at a time: the prefill attention cannot run here.
    NoPrefillAttention,
    /// The prompt's logits: the lm-head's matmul over runs of `tokens` positions (the
    /// logits are read back between runs).
    PromptLogitsRuns {
        /// Positions per run.
        tokens: u64,
    },
    /// The prompt's logits: a decode step per position, a token's logits being wider
    /// than a binding.
    PromptLogitsTooWide {
        /// A token's logits.
        bytes: u64,
        /// The device's largest binding.
        binding: u64,
    },
}

/// An A/B override of a launch choice (benches, tests), named in the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Override {
    /// Invocations per workgroup.
    WorkgroupSize(u32),
    /// dot4 lanes per row (0: a whole subgroup).
    Lanes(u32),
    /// Workgroups per dispatch, at most.
    MaxWorkgroups(u32),
    /// How staging dot4 workgroups take row batches.
    Batches(Batches),
    /// The int8 planes dot4 multiplies x on (1 or 2).
    XPlanes(u32),
}

impl From<Clause> for String {
    fn from(c: Clause) -> String {
        c.to_string()
    }
}

impl std::fmt::Display for Clause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let forced = |on: bool| if on { " (forced)" } else { "" };
        match *self {
            Clause::ForcedFamily(family) => write!(f, "forced family {}", family.name()),
            Clause::ForcedDot4HasNoKernel(ty) => write!(
                f,
                "forced family dot4 has no {ty} kernel (x stays float for float weights): coop"
            ),
            Clause::ForcedKernel(name) => write!(f, "forced kernel {name}"),
            Clause::Dot4 {
                subgroups: (min, max),
                workgroup_kib,
            } => write!(
                f,
                "subgroups {min}..{max} and {workgroup_kib} KiB workgroup memory: dot4 (x \
                 rounded to int8 groups, as llama.cpp's Q8_1; force coop for exact activations)"
            ),
            Clause::Coop {
                subgroups: (min, max),
                workgroup_kib,
            } => write!(
                f,
                "subgroups {min}..{max} and {workgroup_kib} KiB workgroup memory: coop"
            ),
            Clause::AttentionSubgroups {
                subgroups: (min, max),
                runs,
                team,
                lane_words,
                heads_per_group,
                group,
                invocations,
                forced: on,
            } => write!(
                f,
                "subgroups {}: split-K attention on subgroups, teams of {team} \
                 lanes reading a row in 16-byte words ({lane_words} a lane), four positions \
                 per team at a time, a quarter of the team keeping each head slot's softmax, \
                 {heads_per_group} of the {group} query heads of a KV head per workgroup of \
                 {invocations}{}",
                match runs {
                    Some(width) => format!("run {width} lanes (reported {min}..{max})"),
                    None => format!("{min}..{max}"),
                },
                forced(on)
            ),
            Clause::AttentionRowsNotWords {
                head_dim,
                kv,
                word_values,
            } => write!(
                f,
                "heads of {head_dim} are not whole 16-byte words of {word_values} {kv} \
                 values, which the subgroup kernel reads: portable"
            ),
            Clause::AttentionSubgroupsNarrow {
                subgroup_min,
                lanes,
            } => write!(
                f,
                "subgroups of {subgroup_min} lanes, narrower than the {lanes} a team of the \
                 subgroup kernel spreads its head slots over: portable"
            ),
            Clause::AttentionPortable {
                heads_per_group,
                group,
                subgroups,
            } => write!(
                f,
                "{}portable split-K attention, {heads_per_group} of the {group} query heads \
                 of a KV head per workgroup",
                if subgroups { "" } else { "no subgroups: " }
            ),
            Clause::AttentionChunks {
                min_chunk,
                max_chunks,
                workgroups_per_chunk,
                target,
                forced: on,
            } => write!(
                f,
                "positions in chunks of at least {min_chunk}, at most {max_chunks} chunks of \
                 {workgroups_per_chunk} workgroups (about {target}{}); one chunk writes the \
                 output",
                forced(on)
            ),
            Clause::AttentionLoopLimit { limit, max_chunk } => write!(
                f,
                "the device stops an invocation's loops after {limit} iterations: chunks of \
                 at most {max_chunk} positions (more chunks for a longer context)"
            ),
            Clause::AttentionMerge {
                merge: Merge::LastWorkgroup,
                backend,
                forced: on,
            } => write!(
                f,
                "{backend:?}: several chunks merged by the last workgroup of each KV head to \
                 finish, no second dispatch{}",
                forced(on)
            ),
            Clause::AttentionMerge {
                merge: Merge::CombinePass,
                backend,
                forced: on,
            } => write!(
                f,
                "{backend:?}: several chunks merged by attention/combine, a second dispatch \
                 (the merge by the last workgroup is the subgroup kernel's, trusted on \
                 Vulkan){}",
                forced(on)
            ),
            Clause::MatmulCoopMatrix {
                shape,
                k_groups,
                min_tiles,
                tile,
                forced: true,
            } => write!(
                f,
                "cooperative matrices {shape}, {k_groups} groups of 32 per K step (forced: \
                 every matrix; tiles of {tile}, {min_tiles} fill the device)"
            ),
            Clause::MatmulCoopMatrix {
                shape,
                k_groups,
                min_tiles,
                tile,
                ..
            } => write!(
                f,
                "cooperative matrices {shape}, {k_groups} groups of 32 per K step, for \
                 matrices a batch splits into at least {min_tiles} tiles of {tile}"
            ),
            Clause::MatmulDot4 { k_groups, why } => {
                let why = match why {
                    NoCoopMatrix::Asked => "cooperative matrices off, as asked".to_string(),
                    NoCoopMatrix::NoShape => "the adapter offers no cooperative matrix brass \
                                              stages (f16 or f32 in, f32 out)"
                        .to_string(),
                    NoCoopMatrix::NoSubgroups => "the adapter has no subgroups".to_string(),
                    NoCoopMatrix::TooManyInvocations { invocations, limit } => format!(
                        "a cooperative-matrix workgroup of {invocations} invocations exceeds \
                         the device's {limit}"
                    ),
                    NoCoopMatrix::TileTooBig { bytes, limit } => format!(
                        "a cooperative-matrix tile takes {bytes} bytes of workgroup memory, \
                         past the device's {limit}"
                    ),
                };
                if k_groups == 0 {
                    write!(f, "{why}")
                } else {
                    write!(
                        f,
                        "dot4 (x in int8), {k_groups} groups of 32 per K step: {why}"
                    )
                }
            }
            Clause::MatmulCoopFewTiles {
                tiles,
                min,
                k_groups,
            } => write!(
                f,
                "{tiles} cooperative-matrix tiles, fewer than the {min} that fill the device: \
                 dot4, {k_groups} groups of 32 per K step"
            ),
            Clause::MatmulFloatWeights { ty } => {
                write!(f, "{ty} weights: f32 x on f32 multiply-adds")
            }
            Clause::MatmulExactX { family } => write!(
                f,
                "routed to {} (exact activations): f32 x on f32 multiply-adds",
                family.name()
            ),
            Clause::MatmulXQ8 => write!(f, "x rounded to int8 per 32 values by the op before"),
            Clause::MatmulUnpacked {
                shape,
                tile: (rows, tokens),
                prefetch,
                scratch: (weights, x),
            } => write!(
                f,
                "unpacked on cooperative matrices {shape} (as asked): weights decoded once a \
                 batch and x (both int8 planes) once an x, into rows the multiply loads \
                 straight from memory ({weights} + {x} bytes of scratch), tiles of {rows} \
                 rows by {tokens} tokens{}",
                if prefetch {
                    ", a K step loaded ahead"
                } else {
                    ""
                }
            ),
            Clause::MatmulUnpackedPastBinding {
                scratch: (weights, x),
                binding,
            } => write!(
                f,
                "tiled, not unpacked as asked: {weights} bytes of unpacked weights or {x} of \
                 x exceed the largest binding ({binding} bytes)"
            ),
            Clause::PrefillAttentionTiles {
                rows,
                key_tile,
                slices,
                bytes,
                budget,
            } => write!(
                f,
                "causal flash attention, {rows} (token, query head) rows by {key_tile} keys \
                 a tile, {slices} slice(s) of the head ({bytes} of {budget} bytes of \
                 workgroup memory)"
            ),
            Clause::PrefillAttentionOnMatrixUnits {
                shape,
                rows,
                key_tile,
                slices,
                bytes,
                budget,
            } => write!(
                f,
                "causal flash attention on {shape} matrix units, {rows} (token, query head) \
                 rows by {key_tile} keys a tile, {slices} slice(s) of the head ({bytes} of \
                 {budget} bytes of workgroup memory); q, K, P and V meet in {}",
                shape.input.wgsl()
            ),
            Clause::PrefillAttentionScalar { why } => {
                write!(f, "prefill attention on f32 FMAs in register tiles: {why}")
            }
            Clause::PrefillKeyPasses { limit, keys } => write!(
                f,
                "the device stops an invocation's loops after {limit} iterations: passes \
                 of at most {keys} keys"
            ),
            Clause::PrefillMatrixWalkWithinLoopLimit {
                limit,
                keys,
                iterations,
            } => write!(
                f,
                "the device stops an invocation's loops after {limit} iterations: the \
                 walk over {keys} keys takes {iterations} at most, within half of them"
            ),
            Clause::Batch {
                tokens,
                asked: true,
            } => write!(f, "batches of {tokens} tokens, as asked"),
            Clause::Batch { tokens, .. } => write!(f, "batches of {tokens} tokens, the default"),
            Clause::BatchByBinding {
                tokens,
                wanted,
                row_bytes,
                binding,
            } => write!(
                f,
                "batches of {tokens} of {wanted} tokens: a batch's widest buffer ({row_bytes} \
                 bytes a token) must fit a binding of {binding}"
            ),
            Clause::BatchByContext { tokens, wanted } => {
                write!(f, "batches of {tokens} of {wanted} tokens: the context")
            }
            Clause::BatchOfOneAsked => write!(f, "a batch of 1 token was asked for"),
            Clause::DecodeRowsAsColumns { sequences, columns } => write!(
                f,
                "{sequences} sequences step together: a step's rows are the columns of each \
                 matvec, up to {columns} a dispatch (more take more), each reduced as a lone \
                 row is, so a sequence's logits do not depend on who shares its step"
            ),
            Clause::IndexChecks { kernels_own: true } => write!(
                f,
                "the matrix-unit kernels (tiled matmuls, decode columns, flash attention) \
                 and the dot4 matvecs keep their indices in range themselves, without \
                 wgpu's clamps (Vulkan's robust buffer access bounds their storage reads); \
                 every other kernel has wgpu's"
            ),
            Clause::IndexChecks { kernels_own: false } => {
                write!(f, "every kernel has wgpu's index clamps")
            }
            Clause::DecodeRowsOnMatrixUnits {
                from,
                matrices,
                rows: (narrow_rows, wide_rows),
                tokens: (narrow, wide),
                k_parts,
                k_spans,
            } => {
                write!(
                    f,
                    "steps of {from} rows or more multiply {matrices} quant matrices on the \
                     matrix units, {narrow_rows} x {narrow} a workgroup for steps of up to \
                     {narrow} rows and {wide_rows} x {wide} for more (a row's sums the same \
                     in either: each round's K in {k_parts} parts, summed in part order)"
                )?;
                let (spans, wanted) = k_spans;
                if spans > 1 {
                    write!(
                        f,
                        ", K in {spans} spans over workgroups summed in span order"
                    )?;
                } else if wanted > 1 {
                    write!(
                        f,
                        ", K in one span ({wanted} spans' sums of a step would exceed a binding)"
                    )?;
                }
                write!(
                    f,
                    ": still no row depends on another, but weights and x meet in f16, so a \
                     row's logits are not the column matvec's"
                )
            }
            Clause::DecodeRowsUnpacked {
                from,
                matrices,
                tile: (rows, tokens),
            } => write!(
                f,
                "steps of {from} rows or more multiply {matrices} quant matrices unpacked, as \
                 asked: each step decodes their weights and the rows' x into f16 rows \
                 multiplied from memory, {rows} x {tokens} a workgroup; no row depends on \
                 another, but weights and x meet in f16, so a row's logits are not the \
                 column matvec's"
            ),
            Clause::DecodeAttentionRows => write!(
                f,
                "RoPE, the cache append and attention take every row in one dispatch each, \
                 each row at its own position in its own sequence's cache, split as it is \
                 alone"
            ),
            Clause::NoMatmul { kernel } => write!(
                f,
                "{kernel} has no matmul over its weights: prompts go token at a time"
            ),
            Clause::NoPrefillAttention => write!(
                f,
                "no prefill attention fits the device: prompts go token at a time"
            ),
            Clause::PromptLogitsRuns { tokens } => write!(
                f,
                "prompt logits (when asked for): the lm-head's matmul over runs of {tokens} \
                 positions"
            ),
            Clause::PromptLogitsTooWide { bytes, binding } => write!(
                f,
                "prompt logits (when asked for): a decode step each, a token's {bytes} bytes \
                 of logits exceeding a binding of {binding}"
            ),
            Clause::KvCache { kv, kb_per_token } => write!(
                f,
                "KV cache in {kv}: {kb_per_token:.1} kB read per cached position per layer"
            ),
            Clause::ScalarNoSubgroups => write!(f, "no subgroups: scalar"),
            Clause::ScalarNoCoopKernel(ty) => write!(f, "no coop kernel for {ty}: scalar"),
            Clause::ScalarDeviceTooSmall => write!(
                f,
                "subgroups too small or too little workgroup memory: scalar"
            ),
            Clause::NormWritesQ8 {
                weight_mb,
                min_mb,
                forced: true,
                ..
            } => write!(
                f,
                "x quantized once, by the norm that produced it (forced; {weight_mb:.0} MB of \
                 weights, the rule is at least {min_mb} MB)"
            ),
            Clause::NormWritesQ8 {
                columns: Some(columns),
                ..
            } => write!(
                f,
                "x quantized once, by the norm that produced it, for steps of up to \
                 {columns} rows (staging would quantize each row in every workgroup)"
            ),
            Clause::NormWritesQ8 {
                weight_mb, min_mb, ..
            } => write!(
                f,
                "x quantized once, by the norm that produced it, for {weight_mb:.0} MB of \
                 weights (at least {min_mb} MB)"
            ),
            Clause::GluQuantizedOnce {
                weight_mb,
                min_mb,
                forced: true,
                ..
            } => write!(
                f,
                "input silu(gate) * up, quantized once by its own dispatch (forced; \
                 {weight_mb:.0} MB of weights, the rule is at least {min_mb} MB)"
            ),
            Clause::GluQuantizedOnce {
                columns: Some(columns),
                ..
            } => write!(
                f,
                "input silu(gate) * up, quantized once by its own dispatch, for steps of up \
                 to {columns} rows (staging would compute each row in every workgroup)"
            ),
            Clause::GluQuantizedOnce {
                weight_mb, min_mb, ..
            } => write!(
                f,
                "input silu(gate) * up, quantized once by its own dispatch, for \
                 {weight_mb:.0} MB of weights (at least {min_mb} MB)"
            ),
            Clause::GluWhileStaging => write!(f, "input silu(gate) * up, computed while staging x"),
            Clause::StagingCopiesQ8 => write!(f, "x arrives quantized; staging copies it"),
            Clause::ColumnsAtOnce { asked: 1, .. } => {
                write!(f, "columns one at a time, as asked")
            }
            Clause::ColumnsAtOnce { columns, asked } if columns == asked => write!(
                f,
                "each weight slice dotted with {columns} columns at once, as asked"
            ),
            Clause::ColumnsAtOnce { asked, .. } => write!(
                f,
                "columns one at a time: {asked} at once asked, which needs a kernel that \
                 splits its slices"
            ),
            Clause::StagedColumns {
                rows, off: true, ..
            } => write!(
                f,
                "steps of up to {rows} rows: x staged one column at a time, as asked"
            ),
            Clause::StagedColumns {
                columns: 1,
                rows,
                bytes,
                workgroup_kib,
                ..
            } => write!(
                f,
                "steps of up to {rows} rows: x staged one column at a time (two columns' \
                 tiles would take {bytes} bytes of {workgroup_kib} KiB)"
            ),
            Clause::StagedColumns {
                columns,
                rows,
                tiles,
                bytes,
                workgroup_kib,
                prefetch,
                ..
            } => write!(
                f,
                "steps of up to {rows} rows: {columns} columns of x staged at once{} ({bytes} \
                 bytes of {workgroup_kib} KiB), each weight slice dotted with every one, \
                 batches in a grid-stride loop{}",
                if tiles > 1 {
                    format!(" in {tiles} tiles, each row's totals summed over them")
                } else {
                    String::new()
                },
                if prefetch {
                    ", each lane loading its next slice ahead"
                } else {
                    ""
                }
            ),
            Clause::ReadInPlace {
                rows_per_workgroup,
                forced: on,
            } => write!(
                f,
                "x arrives quantized and its lanes read it in place{}: nothing staged, one \
                 batch of {rows_per_workgroup} rows per workgroup",
                forced(on)
            ),
            Clause::XStagedOnce {
                stage,
                bytes,
                workgroup_kib,
            } => write!(
                f,
                "x staged once per workgroup as {} ({bytes} of {workgroup_kib} KiB workgroup \
                 memory)",
                stage.name()
            ),
            Clause::XTiles {
                stage,
                tiles,
                tile,
                workgroup_kib,
            } => write!(
                f,
                "x staged as {} in {tiles} tiles of {tile} (workgroup memory {workgroup_kib} KiB)",
                stage.name()
            ),
            Clause::StagedColumnsTeam {
                lanes,
                rows_per_sum: (fewest, most),
                batches,
                min_batches,
            } => {
                let rows = if fewest == most {
                    format!("{fewest}")
                } else {
                    format!("{fewest}-{most}")
                };
                write!(
                    f,
                    "{lanes} lanes per row of staged columns: each column's subgroup sums \
                     serve {rows} rows at once, {batches} row batches (at least {min_batches})"
                )
            }
            Clause::TeamLanes {
                lanes,
                slices,
                whole_idle_pct,
                team_idle_pct,
            } => write!(
                f,
                "{lanes} lanes per row: {slices} slices a row leave {whole_idle_pct:.0} % of a \
                 whole subgroup's lanes idle, {team_idle_pct:.0} % of {lanes}"
            ),
            Clause::SplitAcrossBindings {
                bytes,
                limit,
                parts,
                rows_per_part,
            } => write!(
                f,
                "{bytes} bytes exceed the {limit}-byte binding: {parts} parts of up to \
                 {rows_per_part} rows"
            ),
            Clause::StagingCapsWorkgroups {
                workgroups,
                weight_per_staged_x,
            } => write!(
                f,
                "{workgroups} workgroups: more would stage more than 1/{weight_per_staged_x} \
                 of the weights' bytes in x (each workgroup quantizes all of it)"
            ),
            Clause::StagedColumnsWorkgroups { workgroups } => write!(
                f,
                "staged columns on at most {workgroups} workgroups (one per compute unit), \
                 each staging the step's columns of x once for its share of the row batches"
            ),
            Clause::BatchQueue {
                per_workgroup,
                batch_bytes,
            } => write!(
                f,
                "row batches from a queue: {per_workgroup:.2} batches of {:.0} KB per workgroup",
                batch_bytes as f64 / 1e3
            ),
            Clause::Prefetch { per_workgroup } => write!(
                f,
                "each lane loads its next slice ahead, across rows: {per_workgroup:.1} row \
                 batches per workgroup"
            ),
            Clause::Override(o) => match o {
                Override::WorkgroupSize(wg) => write!(f, "override: {wg} invocations"),
                Override::Lanes(lanes) => write!(f, "override: {lanes} lanes per row"),
                Override::MaxWorkgroups(n) => write!(f, "override: at most {n} workgroups"),
                Override::Batches(b) => write!(f, "override: row batches {b:?}"),
                Override::XPlanes(n) => write!(f, "override: x on {n} int8 planes"),
            },
        }
    }
}
