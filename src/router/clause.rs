//! Why a route is what it is: one typed clause per decision, in the order the router
//! made them, each with the numbers it compared.

use serde::Serialize;

use super::prefill::NoCoopMatrix;
use crate::device::{Backend, CoopMatrix};
use crate::kernels::attention::{KvType, Merge};
use crate::kernels::matvec::{Batches, Family, XStage};
use crate::quant::GgmlType;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Clause {
    ForcedFamily(Family),
    /// Forced to dot4 with float weights, which keep x float: coop instead.
    ForcedDot4HasNoKernel(GgmlType),
    ForcedKernel(&'static str),
    Dot4 {
        subgroups: (u32, u32),
        workgroup_kib: u32,
    },
    Coop {
        subgroups: (u32, u32),
        workgroup_kib: u32,
    },
    ScalarNoSubgroups,
    ScalarNoCoopKernel(GgmlType),
    ScalarDeviceTooSmall,
    /// The norm feeding the matrix writes its output quantized as well.
    NormWritesQ8 {
        weight_mb: f64,
        min_mb: u64,
        forced: bool,
    },
    /// silu(gate) * up quantized once by `ops/silu_mul_q8`.
    GluQuantizedOnce {
        weight_mb: f64,
        min_mb: u64,
        forced: bool,
    },
    GluWhileStaging,
    StagingCopiesQ8,
    ReadInPlace {
        rows_per_workgroup: u64,
        forced: bool,
    },
    XStagedOnce {
        stage: XStage,
        bytes: u64,
        workgroup_kib: u32,
    },
    XTiles {
        stage: XStage,
        tiles: u64,
        tile: u32,
        workgroup_kib: u32,
    },
    TeamLanes {
        lanes: u32,
        slices: u64,
        whole_idle_pct: f64,
        team_idle_pct: f64,
    },
    SplitAcrossBindings {
        bytes: u64,
        limit: u64,
        parts: u64,
        rows_per_part: u64,
    },
    StagingCapsWorkgroups {
        workgroups: u64,
        weight_per_staged_x: u64,
    },
    BatchQueue {
        per_workgroup: f64,
        batch_bytes: u64,
    },
    Prefetch {
        per_workgroup: f64,
    },
    Override(Override),
    AttentionSubgroups {
        /// As the adapter reports them.
        subgroups: (u32, u32),
        /// `DeviceProfile::subgroup_runs`: the width they run at, where that is fixed.
        runs: Option<u32>,
        team: u32,
        lane_words: u32,
        heads_per_group: u32,
        group: u64,
        invocations: u32,
        forced: bool,
    },
    AttentionRowsNotWords {
        head_dim: u64,
        kv: KvType,
        word_values: u64,
    },
    AttentionSubgroupsNarrow {
        subgroup_min: u32,
        lanes: u32,
    },
    AttentionPortable {
        heads_per_group: u32,
        group: u64,
        subgroups: bool,
    },
    AttentionChunks {
        min_chunk: u64,
        max_chunks: u64,
        workgroups_per_chunk: u64,
        target: u64,
        forced: bool,
    },
    AttentionMerge {
        merge: Merge,
        backend: Backend,
        forced: bool,
    },
    /// The device ends an invocation's loops after `limit` iterations in all, so a
    /// chunk of decode attention holds at most `max_chunk` positions.
    AttentionLoopLimit {
        limit: u64,
        max_chunk: u64,
    },
    KvCache {
        kv: KvType,
        kb_per_token: f64,
    },
    /// A batch's quant matrices multiply on cooperative matrices, where the batch
    /// splits a matrix into at least `min_tiles` tiles of `tile` (all, where forced).
    MatmulCoopMatrix {
        shape: CoopMatrix,
        k_groups: u32,
        min_tiles: u64,
        tile: u64,
        forced: bool,
    },
    /// ... on dot4, and why not on cooperative matrices.
    MatmulDot4 {
        k_groups: u32,
        why: NoCoopMatrix,
    },
    /// This matrix splits into fewer tiles than cooperative matrices need to fill the
    /// device: dot4.
    MatmulCoopFewTiles {
        tiles: u64,
        min: u64,
        k_groups: u32,
    },
    /// Float weights multiply f32 x on f32 FMAs.
    MatmulFloatWeights {
        ty: GgmlType,
    },
    /// The matrix's matvec keeps x exact: its matmul multiplies f32 x on f32 FMAs too.
    MatmulExactX {
        family: Family,
    },
    /// x arrives rounded to int8 per 32 values, by the op before.
    MatmulXQ8,
    /// (token, query head) rows and key positions per prefill attention workgroup.
    PrefillAttentionTiles {
        rows: u32,
        key_tile: u32,
        slices: u64,
        bytes: u64,
        budget: u64,
    },
    /// The device ends an invocation's loops after `limit` iterations: a dispatch walks
    /// at most `keys` key positions.
    PrefillKeyPasses {
        limit: u64,
        keys: u64,
    },
    Batch {
        tokens: u64,
        asked: bool,
    },
    BatchByBinding {
        tokens: u64,
        wanted: u64,
        row_bytes: u64,
        binding: u64,
    },
    BatchByContext {
        tokens: u64,
        wanted: u64,
    },
    /// A batch of one token was asked for: prompts go token at a time.
    BatchOfOneAsked,
    /// Prompts go token at a time: this matrix's matvec has no matmul.
    NoMatmul {
        kernel: &'static str,
    },
    /// Prompts go token at a time: the prefill attention cannot run here.
    NoPrefillAttention,
    /// The prompt's logits: the lm-head's matmul over runs of `tokens` positions (the
    /// logits are read back between runs).
    PromptLogitsRuns {
        tokens: u64,
    },
    /// The prompt's logits: a decode step per position, a token's logits being wider
    /// than a binding.
    PromptLogitsTooWide {
        bytes: u64,
        binding: u64,
    },
}

/// An A/B override of a launch choice (benches, tests), named in the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Override {
    WorkgroupSize(u32),
    Lanes(u32),
    MaxWorkgroups(u32),
    Batches(Batches),
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
            Clause::PrefillKeyPasses { limit, keys } => write!(
                f,
                "the device stops an invocation's loops after {limit} iterations: passes \
                 of at most {keys} keys"
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
            } => write!(
                f,
                "x quantized once, by the norm that produced it (forced; {weight_mb:.0} MB of \
                 weights, the rule is at least {min_mb} MB)"
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
            } => write!(
                f,
                "input silu(gate) * up, quantized once by its own dispatch (forced; \
                 {weight_mb:.0} MB of weights, the rule is at least {min_mb} MB)"
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
