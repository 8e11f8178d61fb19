//! Decode attention's route: the kernel (on subgroups where the device has them) and
//! the chunking rule, from the profile and the context.

use serde::Serialize;

use super::{Clause, Overrides};
use crate::device::DeviceProfile;
use crate::kernels::attention::{AttentionLaunch, DecodeKernel, Heads, KvType};
use crate::Result;

/// What the router needs to know about a model's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionQuery {
    pub heads: Heads,
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
    pub fn launch(&self) -> &AttentionLaunch {
        &self.launch
    }

    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }
}

/// Routes decode attention: the subgroup kernel where the device has subgroups, the
/// portable one elsewhere; a long context spread over about
/// [`Tuning::attention_workgroups`](crate::device::Tuning::attention_workgroups)
/// workgroups.
pub fn route_attention(
    profile: &DeviceProfile,
    query: &AttentionQuery,
    overrides: &Overrides,
) -> Result<AttentionRoute> {
    let target = overrides
        .attention_workgroups
        .unwrap_or(profile.tuning.attention_workgroups);
    let launch = match profile.subgroups {
        true => AttentionLaunch::subgroup(
            query.heads,
            query.kv,
            (profile.subgroup_min, profile.subgroup_max),
            query.n_ctx,
            target,
        )?,
        false => AttentionLaunch::portable(query.heads, query.kv, query.n_ctx, target)?,
    };
    launch.check(profile)?;
    let kernel = match launch.kernel() {
        DecodeKernel::Subgroup { lane_pairs, .. } => Clause::AttentionSubgroups {
            subgroups: (profile.subgroup_min, profile.subgroup_max),
            pairs: lane_pairs,
            heads_per_group: launch.heads_per_group(),
            group: query.heads.group(),
        },
        DecodeKernel::Portable { .. } => Clause::AttentionPortable {
            heads_per_group: launch.heads_per_group(),
            group: query.heads.group(),
        },
    };
    let chunks = Clause::AttentionChunks {
        min_chunk: launch.min_chunk(),
        max_chunks: launch.max_chunks(),
        workgroups_per_chunk: launch.workgroups_per_chunk(),
        target,
        forced: overrides.attention_workgroups.is_some(),
    };
    let cache = Clause::KvCache {
        kv: query.kv,
        kb_per_token: launch.kv_bytes_read(1) as f64 / 1e3,
    };
    Ok(AttentionRoute {
        launch,
        clauses: vec![kernel, chunks, cache],
    })
}
