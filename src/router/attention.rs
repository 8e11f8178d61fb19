//! Decode attention's route: the kernel (on subgroups where the device has them) and
//! the chunking rule, from the profile and the context.

use serde::Serialize;

use super::{Clause, Overrides};
use crate::device::{Backend, DeviceProfile};
use crate::kernels::attention::{
    AttentionLaunch, DecodeKernel, Heads, KvType, Merge, DECODE_HEADS, DECODE_WG,
};
use crate::Result;

/// What the router needs to know about a model's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionQuery {
    /// The model's attention heads.
    pub heads: Heads,
    /// The KV cache's format.
    pub kv: KvType,
    /// Positions the KV cache holds.
    pub n_ctx: u64,
}

/// Decode attention's launch and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttentionRoute {
    launch: AttentionLaunch,
    clauses: Vec<Clause>,
}

impl AttentionRoute {
    /// The launch: kernel, merge and chunking rule.
    pub fn launch(&self) -> &AttentionLaunch {
        &self.launch
    }

    /// Why, in the order decided.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }
}

/// Routes decode attention: the subgroup kernel where the device runs subgroups of at
/// least four lanes (`DeviceProfile::subgroup_sizes_run`) and a head's row is whole 16-byte words of the cache format, the
/// portable one elsewhere; a long context spread over about
/// [`Tuning::attention_workgroups`](crate::device::Tuning::attention_workgroups)
/// workgroups, whose chunks the subgroup kernel's last workgroup merges on Vulkan (the
/// backend whose barriers make other workgroups' writes visible; see
/// `attention/decode_merge.wgsl`) and a combine pass merges elsewhere.
pub fn route_attention(
    profile: &DeviceProfile,
    query: &AttentionQuery,
    overrides: &Overrides,
) -> Result<AttentionRoute> {
    let target = overrides
        .attention_workgroups
        .unwrap_or(profile.tuning.attention_workgroups);
    let (heads, kv) = (query.heads, query.kv);
    let words = heads.head_dim.is_multiple_of(kv.word_values());
    // The kernel's teams are fixed when it is built: sized for the widths pipelines run
    // at, which on Apple GPUs is 32 whatever Metal reports.
    let (sg_min, sg_max) = profile.subgroup_sizes_run();
    let wide = sg_min >= DECODE_HEADS;
    let mut clauses = Vec::new();
    if profile.subgroups && !words {
        clauses.push(Clause::AttentionRowsNotWords {
            head_dim: heads.head_dim,
            kv,
            word_values: kv.word_values(),
        });
    }
    if profile.subgroups && !wide {
        clauses.push(Clause::AttentionSubgroupsNarrow {
            subgroup_min: sg_min,
            lanes: DECODE_HEADS,
        });
    }
    let launch = match profile.subgroups && words && wide {
        true => AttentionLaunch::subgroup(
            heads,
            kv,
            (sg_min, sg_max),
            profile.workgroup_storage_bytes as u64,
            overrides.attention_invocations.unwrap_or(DECODE_WG),
            query.n_ctx,
            target,
        )?,
        false => AttentionLaunch::portable(heads, kv, query.n_ctx, target)?,
    };
    let launch = match overrides.attention_min_chunk {
        Some(n) => launch.with_min_chunk(n),
        None => launch,
    };
    let subgroup_kernel = matches!(launch.kernel(), DecodeKernel::Subgroup { .. });
    let merge = match (overrides.attention_merge, subgroup_kernel) {
        (Some(merge), _) => merge,
        (None, true) if profile.backend == Backend::Vulkan => Merge::LastWorkgroup,
        (None, _) => Merge::CombinePass,
    };
    let launch = launch
        .with_merge(merge)?
        .with_loop_limit(profile.loop_iterations)?;
    launch.check(profile)?;
    clauses.push(match launch.kernel() {
        DecodeKernel::Subgroup { team, lane_words } => Clause::AttentionSubgroups {
            subgroups: (profile.subgroup_min, profile.subgroup_max),
            runs: profile.subgroup_runs,
            team,
            lane_words,
            heads_per_group: launch.heads_per_group(),
            group: heads.group(),
            invocations: launch.invocations(),
            forced: overrides.attention_invocations.is_some(),
        },
        DecodeKernel::Portable { .. } => Clause::AttentionPortable {
            heads_per_group: launch.heads_per_group(),
            group: heads.group(),
            subgroups: profile.subgroups,
        },
    });
    let chunks = Clause::AttentionChunks {
        min_chunk: launch.min_chunk(),
        max_chunks: launch.max_chunks(),
        workgroups_per_chunk: launch.workgroups_per_chunk(),
        target,
        forced: overrides.attention_workgroups.is_some() || overrides.attention_min_chunk.is_some(),
    };
    let merge = Clause::AttentionMerge {
        merge,
        backend: profile.backend,
        forced: overrides.attention_merge.is_some(),
    };
    let cache = Clause::KvCache {
        kv: query.kv,
        kb_per_token: launch.kv_bytes_read(1) as f64 / 1e3,
    };
    clauses.extend([chunks, merge]);
    if let (Some(limit), Some(max_chunk)) = (profile.loop_iterations, launch.max_chunk()) {
        clauses.push(Clause::AttentionLoopLimit { limit, max_chunk });
    }
    clauses.push(cache);
    Ok(AttentionRoute { launch, clauses })
}
