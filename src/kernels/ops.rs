//! The non-matvec ops of a llama decode step, one WGSL file each under `wgsl/ops/`:
//! embedding lookup, RMSNorm, RoPE, KV-cache append, decode attention (GQA), SiLU·mul
//! (f32, or quantized for a dot4 down projection),
//! residual add fused with the RMSNorm that follows it, and argmax. Each has a CPU reference here (f64 accumulation), the
//! ground truth in `tests/ops.rs`.
//!
//! None of them needs subgroups or f16: they are a small share of a token's bytes, so
//! the portable version is the only one until a measurement says otherwise.

use crate::device::{Access, Device, Dispatch, PipelineId, Slice};
use crate::Result;

use super::wgsl::{compose, WgslConst};
use super::{PipelineCache, PipelineTemplate};

/// One op's static description: its WGSL and its bindings.
struct OpSpec {
    name: &'static str,
    /// Its WGSL file under `wgsl/`, which includes what it shares with sibling ops.
    root: &'static str,
    params_bytes: u32,
    storage: &'static [Access],
    /// Runs as one workgroup as wide as the device allows (up to [`WIDE_WG`]): the host
    /// sets `WG`. A single workgroup is latency-bound, and a wider one needs fewer round
    /// trips to memory per invocation.
    wide: bool,
    /// Writes its output also quantized for the dot4 matvecs (`wgsl/ops/q8_out.wgsl`),
    /// through a binding after the op's others.
    q8_out: bool,
}

/// The widest single workgroup the `wide` ops use.
const WIDE_WG: u32 = 1024;

/// Invocations of an `attention_split` workgroup.
pub const SPLIT_WG: u32 = 256;
/// Positions per tile of `attention_split` (scores of a tile sit in workgroup memory).
pub const SPLIT_TILE: u32 = 64;
/// Query heads an `attention_split` workgroup serves at most.
pub const SPLIT_HEADS_MAX: u32 = 16;
/// Accumulators per `attention_split` invocation: a workgroup holds query heads x
/// head_dim of them, so it serves at most `SPLIT_WG * SPLIT_ACC / head_dim` heads.
pub const SPLIT_ACC: u32 = 8;
/// Positions per chunk at least: below that a chunk's fixed costs dominate.
pub const SPLIT_MIN_CHUNK: u64 = 16;

impl OpSpec {
    /// The complete WGSL for a device allowing `max_wg` invocations per workgroup.
    fn source(&self, max_wg: u32) -> Result<String> {
        let mut consts = Vec::new();
        if self.name == ATTENTION_SPLIT.name {
            consts.extend([
                WgslConst::u32("WG", SPLIT_WG),
                WgslConst::u32("TILE", SPLIT_TILE),
                WgslConst::u32("HEADS_MAX", SPLIT_HEADS_MAX),
                WgslConst::u32("ACC", SPLIT_ACC),
            ]);
        }
        if self.wide {
            consts.push(WgslConst::u32("WG", WIDE_WG.min(max_wg)));
        }
        if self.q8_out {
            consts.push(WgslConst::u32("Q8_BINDING", self.storage.len() as u32));
        }
        compose(self.root, &[], &consts)
    }
}

const R: Access = Access::Read;
const RW: Access = Access::ReadWrite;

const EMBED: OpSpec = OpSpec {
    name: "ops/embed",
    root: "ops/embed.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: false,
    q8_out: false,
};
const RMS_NORM: OpSpec = OpSpec {
    name: "ops/rms_norm",
    root: "ops/rms_norm_f32.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: true,
    q8_out: false,
};
const ROPE_KV: OpSpec = OpSpec {
    name: "ops/rope_kv",
    root: "ops/rope_kv.wgsl",
    params_bytes: 32,
    storage: &[R, RW, RW, RW],
    wide: false,
    q8_out: false,
};
/// Split-K decode attention (`wgsl/ops/attention_split.wgsl`): its constants are
/// [`SPLIT_WG`], [`SPLIT_TILE`], [`SPLIT_HEADS_MAX`] and [`SPLIT_ACC`].
const ATTENTION_SPLIT: OpSpec = OpSpec {
    name: "ops/attention_split",
    root: "ops/attention_split.wgsl",
    params_bytes: 32,
    storage: &[R, R, R, RW, RW],
    wide: false,
    q8_out: false,
};
const ATTENTION_COMBINE: OpSpec = OpSpec {
    name: "ops/attention_combine",
    root: "ops/attention_combine.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: false,
    q8_out: false,
};
const SILU_MUL: OpSpec = OpSpec {
    name: "ops/silu_mul",
    root: "ops/silu_mul.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: false,
    q8_out: false,
};
/// silu(gate) * up written only quantized, for a dot4 down projection that copies or
/// reads it in place rather than computing it in every workgroup (`glu`).
const SILU_MUL_Q8: OpSpec = OpSpec {
    name: "ops/silu_mul_q8",
    root: "ops/silu_mul_q8.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: false,
    q8_out: false,
};
const ADD_RMS_NORM: OpSpec = OpSpec {
    name: "ops/add_rms_norm",
    root: "ops/add_rms_norm_f32.wgsl",
    params_bytes: 16,
    storage: &[RW, R, R, RW],
    wide: true,
    q8_out: false,
};
/// The norms writing their output also quantized, for the dot4 matvecs that read it:
/// storage as above plus out_q8.
const RMS_NORM_Q8: OpSpec = OpSpec {
    name: "ops/rms_norm_q8",
    root: "ops/rms_norm_q8.wgsl",
    storage: &[R, R, RW, RW],
    q8_out: true,
    ..RMS_NORM
};
const ADD_RMS_NORM_Q8: OpSpec = OpSpec {
    name: "ops/add_rms_norm_q8",
    root: "ops/add_rms_norm_q8.wgsl",
    storage: &[RW, R, R, RW, RW],
    q8_out: true,
    ..ADD_RMS_NORM
};
const ARGMAX: OpSpec = OpSpec {
    name: "ops/argmax",
    root: "ops/argmax.wgsl",
    params_bytes: 16,
    storage: &[R, RW, RW],
    wide: false,
    q8_out: false,
};

/// Logits per argmax workgroup in its first stage: eight per invocation.
const ARGMAX_CHUNK: u64 = 2048;
/// Workgroups of argmax's first stage at most, so its scratch has a fixed size.
pub const ARGMAX_MAX_GROUPS: u64 = 1024;
/// u32 words of argmax's scratch: a (value, index, non-finite count) triple per
/// first-stage workgroup.
pub const ARGMAX_SCRATCH_WORDS: u64 = 3 * ARGMAX_MAX_GROUPS;
/// u32 words argmax writes to its token buffer: the id, the count of NaN or infinite
/// logits, and the id the buffer held before (the one the step embedded).
pub const ARGMAX_TOKEN_WORDS: u64 = 3;

/// Every op, for tools that list, precompile or translate kernels.
const ALL_OPS: [OpSpec; 11] = [
    EMBED,
    RMS_NORM,
    RMS_NORM_Q8,
    ROPE_KV,
    ATTENTION_SPLIT,
    ATTENTION_COMBINE,
    SILU_MUL,
    SILU_MUL_Q8,
    ADD_RMS_NORM,
    ADD_RMS_NORM_Q8,
    ARGMAX,
];

/// WebGPU guarantees this many workgroups per dimension; elementwise kernels loop over
/// whatever a capped grid does not cover.
const MAX_GROUPS: u64 = 65535;

fn groups_for(n: u64, wg: u64) -> [u32; 3] {
    [n.div_ceil(wg).clamp(1, MAX_GROUPS) as u32, 1, 1]
}

fn get(device: &dyn Device, cache: &PipelineCache, spec: &OpSpec) -> Result<PipelineId> {
    let profile = device.profile();
    let max_wg = profile
        .max_invocations_per_workgroup
        .min(profile.max_workgroup_size_x);
    cache.get_or_create(device, spec.name, || {
        let template = PipelineTemplate {
            params_bytes: spec.params_bytes,
            storage: spec.storage,
            fallback_reason: None,
        };
        Ok((spec.source(max_wg)?, template))
    })
}

/// The attention heads of a layer, as RoPE and the KV cache see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    /// Dimensions of each head that RoPE rotates (even, at most `head_dim`).
    pub rope_dim: u64,
}

/// How split-K decode attention divides `n_pos` positions: `n_chunks` chunks of
/// `chunk` positions (the last shorter), each taken by one workgroup per KV head and
/// head group of `heads_per_group` query heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionSplit {
    pub heads: Heads,
    pub n_pos: u64,
    pub heads_per_group: u64,
    pub chunk: u64,
    pub n_chunks: u64,
}

impl AttentionSplit {
    /// Chunks so that about `target_workgroups` workgroups share the positions (of at
    /// least [`SPLIT_MIN_CHUNK`] each): a short context runs on few, a long one on
    /// about `target_workgroups`: the partial buffers of
    /// [`max_part_bytes`](Self::max_part_bytes) serve every context.
    pub fn new(heads: Heads, n_pos: u64, target_workgroups: u64) -> crate::Result<Self> {
        let group = heads.n_heads / heads.n_kv_heads.max(1);
        let by_acc = (SPLIT_WG * SPLIT_ACC) as u64 / heads.head_dim.max(1);
        let heads_per_group = group.min(SPLIT_HEADS_MAX as u64).min(by_acc);
        if heads_per_group == 0 || n_pos == 0 {
            return Err(crate::Error::Invalid(format!(
                "split attention over {n_pos} positions of heads of {} values: a workgroup \
                 holds at most {} accumulators per query head",
                heads.head_dim,
                SPLIT_WG * SPLIT_ACC
            )));
        }
        let max_chunks = Self::max_chunks(heads, heads_per_group, target_workgroups);
        let n_chunks = n_pos.div_ceil(SPLIT_MIN_CHUNK).clamp(1, max_chunks);
        let chunk = n_pos.div_ceil(n_chunks);
        Ok(AttentionSplit {
            heads,
            n_pos,
            heads_per_group,
            chunk,
            n_chunks: n_pos.div_ceil(chunk),
        })
    }

    /// The most chunks any context is split into.
    fn max_chunks(heads: Heads, heads_per_group: u64, target_workgroups: u64) -> u64 {
        let group = heads.n_heads / heads.n_kv_heads.max(1);
        let per_chunk = heads.n_kv_heads * group.div_ceil(heads_per_group);
        target_workgroups.div_ceil(per_chunk.max(1)).max(1)
    }

    pub fn workgroups(&self) -> [u32; 3] {
        let group = self.heads.n_heads / self.heads.n_kv_heads;
        [
            self.n_chunks as u32,
            self.heads.n_kv_heads as u32,
            group.div_ceil(self.heads_per_group) as u32,
        ]
    }

    /// Bytes of the (m, l) and the accumulator partials this split writes.
    pub fn part_bytes(&self) -> (u64, u64) {
        let slots = self.heads.n_heads * self.n_chunks;
        (slots * 8, slots * self.heads.head_dim * 4)
    }

    /// Bytes of the partial buffers that serve every context of `heads` on
    /// `target_workgroups`: the largest split's [`part_bytes`](Self::part_bytes).
    pub fn max_part_bytes(heads: Heads, target_workgroups: u64) -> crate::Result<(u64, u64)> {
        let long = AttentionSplit::new(heads, u64::MAX / 2, target_workgroups)?;
        Ok(long.part_bytes())
    }
}

/// One row part of an embedding table: rows `first_row..first_row + rows` in `table`.
#[derive(Clone, Copy, Debug)]
pub struct EmbedPart {
    pub first_row: u64,
    pub rows: u64,
    pub table: Slice,
}

/// The pipelines of every op, and the dispatches that run them.
///
/// Slices are f32 arrays unless noted; sizes are in elements.
#[derive(Clone, Debug)]
pub struct Ops {
    embed: PipelineId,
    rms_norm: Norms,
    rope_kv: PipelineId,
    attention_split: PipelineId,
    attention_combine: PipelineId,
    /// Absent when every FFN computes SiLU·mul inside its down projection (a `glu`
    /// matvec route): a pipeline that is never dispatched is an audit defect.
    silu_mul: Option<PipelineId>,
    /// Present when some down projection takes silu(gate) * up quantized.
    silu_mul_q8: Option<PipelineId>,
    add_rms_norm: Norms,
    argmax: PipelineId,
}

/// A norm's pipelines: writing f32 only, and writing its output also quantized for the
/// dot4 matvecs (`wgsl/ops/q8_out.wgsl`); each only if the model dispatches it.
#[derive(Clone, Copy, Debug)]
struct Norms {
    f32: Option<PipelineId>,
    q8: Option<PipelineId>,
}

impl Norms {
    fn pick(&self, q8: bool) -> PipelineId {
        let p = if q8 { self.q8 } else { self.f32 };
        p.expect("a norm variant the ops were created without (OpsNeeds)")
    }
}

/// Which ops a model dispatches beyond the ones every model does.
#[derive(Clone, Copy, Debug)]
pub struct OpsNeeds {
    pub silu_mul: bool,
    pub silu_mul_q8: bool,
    /// The plain RMSNorm (a model's first norm).
    pub rms_norm: NormNeeds,
    /// The residual add fused with RMSNorm (every later norm).
    pub add_rms_norm: NormNeeds,
}

/// Which variants of a norm a model dispatches: writing f32 only, and writing its output
/// also quantized. Each is its own pipeline, and one created but never dispatched would
/// be an audit defect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NormNeeds {
    pub f32: bool,
    pub q8: bool,
}

impl NormNeeds {
    pub const NONE: NormNeeds = NormNeeds {
        f32: false,
        q8: false,
    };
    pub const F32: NormNeeds = NormNeeds {
        f32: true,
        q8: false,
    };
    pub const Q8: NormNeeds = NormNeeds {
        f32: false,
        q8: true,
    };

    /// The variants that norms writing q8 or not (`q8`, one entry per dispatch) use.
    pub fn of(q8: &[bool]) -> NormNeeds {
        NormNeeds {
            f32: q8.iter().any(|&q| !q),
            q8: q8.iter().any(|&q| q),
        }
    }
}

impl OpsNeeds {
    /// Every op, the norms writing f32 only.
    pub const F32: OpsNeeds = OpsNeeds {
        silu_mul: true,
        silu_mul_q8: false,
        rms_norm: NormNeeds::F32,
        add_rms_norm: NormNeeds::F32,
    };
}

impl Ops {
    /// Creates (or finds in `cache`) every op's pipeline, the norms writing f32 only.
    pub fn new(device: &dyn Device, cache: &PipelineCache) -> Result<Ops> {
        Ops::with(device, cache, OpsNeeds::F32)
    }

    /// The pipelines of the ops in `needs`: a pipeline created and never dispatched
    /// would be an audit defect.
    pub fn with(device: &dyn Device, cache: &PipelineCache, needs: OpsNeeds) -> Result<Ops> {
        let norms = |n: NormNeeds, f32: &OpSpec, q8: &OpSpec| -> Result<Norms> {
            Ok(Norms {
                f32: n.f32.then(|| get(device, cache, f32)).transpose()?,
                q8: n.q8.then(|| get(device, cache, q8)).transpose()?,
            })
        };
        Ok(Ops {
            embed: get(device, cache, &EMBED)?,
            rms_norm: norms(needs.rms_norm, &RMS_NORM, &RMS_NORM_Q8)?,
            rope_kv: get(device, cache, &ROPE_KV)?,
            attention_split: get(device, cache, &ATTENTION_SPLIT)?,
            attention_combine: get(device, cache, &ATTENTION_COMBINE)?,
            silu_mul: needs
                .silu_mul
                .then(|| get(device, cache, &SILU_MUL))
                .transpose()?,
            silu_mul_q8: needs
                .silu_mul_q8
                .then(|| get(device, cache, &SILU_MUL_Q8))
                .transpose()?,
            add_rms_norm: norms(needs.add_rms_norm, &ADD_RMS_NORM, &ADD_RMS_NORM_Q8)?,
            argmax: get(device, cache, &ARGMAX)?,
        })
    }

    /// `out[..dim] = table[token[0]]`, `token` a u32 buffer. One dispatch per part;
    /// the part that holds the token writes.
    pub fn embed(&self, parts: &[EmbedPart], dim: u64, token: Slice, out: Slice) -> Vec<Dispatch> {
        parts
            .iter()
            .map(|p| Dispatch {
                pipeline: self.embed,
                params: vec![dim as u32, p.first_row as u32, p.rows as u32, 0],
                storage: vec![p.table, token, out],
                workgroups: groups_for(dim, 256),
                bytes_read: dim * 4,
            })
            .collect()
    }

    /// `out = x / rms(x) * w` over `n` elements, and with the q8 norms the same
    /// quantized into `out_q8` (`matvec::quantize_x_q8`'s layout).
    ///
    /// Panics if the ops were created without the variant asked for.
    pub fn rms_norm(
        &self,
        n: u64,
        eps: f32,
        x: Slice,
        w: Slice,
        out: Slice,
        out_q8: Option<Slice>,
    ) -> Dispatch {
        Dispatch {
            pipeline: self.rms_norm.pick(out_q8.is_some()),
            params: vec![n as u32, eps.to_bits(), 0, 0],
            storage: [x, w, out].into_iter().chain(out_q8).collect(),
            workgroups: [1, 1, 1],
            bytes_read: n * 8,
        }
    }

    /// RoPE and the KV-cache append of one position: q (`heads.n_heads` heads) rotated
    /// in place, k rotated into row `pos` of `k_cache`, v copied into row `pos` of
    /// `v_cache`. q, k and v lie in `qkv` from elements 0, `k_first` and `v_first`;
    /// `table` is [`rope_table`]'s output on the device.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv(
        &self,
        heads: Heads,
        pos: u64,
        table: Slice,
        qkv: Slice,
        (k_first, v_first): (u64, u64),
        k_cache: Slice,
        v_cache: Slice,
    ) -> Dispatch {
        let kv_dim = heads.n_kv_heads * heads.head_dim;
        let q_pairs = heads.n_heads * (heads.rope_dim / 2);
        Dispatch {
            pipeline: self.rope_kv,
            params: vec![
                heads.n_heads as u32,
                heads.n_kv_heads as u32,
                heads.head_dim as u32,
                heads.rope_dim as u32,
                pos as u32,
                k_first as u32,
                v_first as u32,
                0,
            ],
            storage: vec![table, qkv, k_cache, v_cache],
            workgroups: groups_for(q_pairs + 2 * kv_dim, 64),
            bytes_read: (heads.n_heads * heads.head_dim + 2 * kv_dim) * 4 + heads.rope_dim * 4,
        }
    }

    /// Split-K decode attention: the two dispatches of [`AttentionSplit`] `split`, the
    /// chunks into `part_ml` and `part_acc` ([`AttentionSplit::part_bytes`]) and their
    /// merge into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_split(
        &self,
        split: &AttentionSplit,
        q: Slice,
        k_cache: Slice,
        v_cache: Slice,
        part_ml: Slice,
        part_acc: Slice,
        out: Slice,
    ) -> [Dispatch; 2] {
        let h = split.heads;
        let scale = 1.0 / (h.head_dim as f32).sqrt();
        let kv_bytes = 2 * split.n_pos * h.n_kv_heads * h.head_dim * 4;
        let (ml_bytes, acc_bytes) = split.part_bytes();
        [
            Dispatch {
                pipeline: self.attention_split,
                params: vec![
                    h.n_heads as u32,
                    h.n_kv_heads as u32,
                    h.head_dim as u32,
                    split.n_pos as u32,
                    split.chunk as u32,
                    split.n_chunks as u32,
                    split.heads_per_group as u32,
                    scale.to_bits(),
                ],
                storage: vec![q, k_cache, v_cache, part_ml, part_acc],
                workgroups: split.workgroups(),
                bytes_read: kv_bytes + h.n_heads * h.head_dim * 4,
            },
            Dispatch {
                pipeline: self.attention_combine,
                params: vec![
                    h.n_heads as u32,
                    h.head_dim as u32,
                    split.n_chunks as u32,
                    0,
                ],
                storage: vec![part_ml, part_acc, out],
                workgroups: [h.n_heads as u32, 1, 1],
                bytes_read: ml_bytes + acc_bytes,
            },
        ]
    }

    /// `out = silu(gate) * up` over `n` elements.
    ///
    /// Panics if these ops were created without silu_mul.
    pub fn silu_mul(&self, n: u64, gate: Slice, up: Slice, out: Slice) -> Dispatch {
        Dispatch {
            pipeline: self
                .silu_mul
                .expect("ops created without silu_mul (OpsNeeds)"),
            params: vec![n as u32, 0, 0, 0],
            storage: vec![gate, up, out],
            workgroups: groups_for(n, 256),
            bytes_read: n * 8,
        }
    }

    /// `silu(gate) * up` over `n` elements, written only quantized into `out_q8`
    /// (`matvec::quantize_x_q8`'s layout, `n.div_ceil(32)` groups).
    ///
    /// Panics if these ops were created without silu_mul_q8.
    pub fn silu_mul_q8(&self, n: u64, gate: Slice, up: Slice, out_q8: Slice) -> Dispatch {
        Dispatch {
            pipeline: self
                .silu_mul_q8
                .expect("ops created without silu_mul_q8 (OpsNeeds)"),
            params: vec![n as u32, 0, 0, 0],
            storage: vec![gate, up, out_q8],
            // Eight groups of 32 per workgroup (wgsl/ops/silu_mul_q8.wgsl).
            workgroups: groups_for(n.div_ceil(32), 8),
            bytes_read: n * 8,
        }
    }

    /// `x += y`, then `out = x / rms(x) * w`, over `n` elements; `out_q8` as for
    /// [`Ops::rms_norm`].
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        n: u64,
        eps: f32,
        x: Slice,
        y: Slice,
        w: Slice,
        out: Slice,
        out_q8: Option<Slice>,
    ) -> Dispatch {
        Dispatch {
            pipeline: self.add_rms_norm.pick(out_q8.is_some()),
            params: vec![n as u32, eps.to_bits(), 0, 0],
            storage: [x, y, w, out].into_iter().chain(out_q8).collect(),
            workgroups: [1, 1, 1],
            bytes_read: n * 12,
        }
    }

    /// `token[0] = argmax(logits[..n])`, lowest index on ties, `token[1]` = the NaN or
    /// infinite logits among them, `token[2]` = `token[0]` as it was: two dispatches,
    /// the first leaving one candidate per workgroup in `scratch`
    /// ([`ARGMAX_SCRATCH_WORDS`] u32). `token` holds [`ARGMAX_TOKEN_WORDS`] u32.
    pub fn argmax(&self, n: u64, logits: Slice, scratch: Slice, token: Slice) -> [Dispatch; 2] {
        let groups = n.div_ceil(ARGMAX_CHUNK).clamp(1, ARGMAX_MAX_GROUPS);
        let chunk = n.div_ceil(groups);
        let stage = |params: Vec<u32>, groups: u64, bytes_read: u64| Dispatch {
            pipeline: self.argmax,
            params,
            storage: vec![logits, scratch, token],
            workgroups: [groups as u32, 1, 1],
            bytes_read,
        };
        [
            stage(vec![n as u32, chunk as u32, 0, 0], groups, n * 4),
            stage(vec![groups as u32, 0, 1, 0], 1, groups * 12),
        ]
    }
}

// ---------------------------------------------------------------------------------
// CPU references (f64 accumulation).

/// Row `token` of a row-major `[rows][dim]` table.
pub fn embed_ref(table: &[f32], dim: usize, token: u32) -> Vec<f32> {
    let start = token as usize * dim;
    table[start..start + dim].to_vec()
}

pub fn rms_norm_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &w)| (v as f64 * scale * w as f64) as f32)
        .collect()
}

/// `(cos, sin)` of `pos · base^(-2i / rope_dim)` for `pos < n_pos`, `i < rope_dim / 2`,
/// interleaved, row-major by position: the table `ops/rope_kv` reads.
pub fn rope_table(base: f64, rope_dim: usize, n_pos: usize) -> Vec<f32> {
    let half = rope_dim / 2;
    let mut out = Vec::with_capacity(n_pos * half * 2);
    for pos in 0..n_pos {
        for i in 0..half {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / rope_dim as f64);
            out.push(theta.cos() as f32);
            out.push(theta.sin() as f32);
        }
    }
    out
}

/// llama.cpp's normal-mode RoPE on adjacent pairs, in f64.
pub fn rope_ref(
    x: &[f32],
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    pos: usize,
    base: f64,
) -> Vec<f32> {
    let mut out = x.to_vec();
    for h in 0..n_heads {
        for i in 0..rope_dim / 2 {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / rope_dim as f64);
            let (s, c) = theta.sin_cos();
            let j = h * head_dim + 2 * i;
            let (x0, x1) = (x[j] as f64, x[j + 1] as f64);
            out[j] = (x0 * c - x1 * s) as f32;
            out[j + 1] = (x0 * s + x1 * c) as f32;
        }
    }
    out
}

/// Decode attention of one query over `n_pos` cached positions (`[pos][kv_head][d]`).
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
        for d in 0..head_dim {
            let acc: f64 = (0..n_pos)
                .map(|t| e[t] * v_cache[t * kv_dim + kvh * head_dim + d] as f64)
                .sum();
            out[h * head_dim + d] = (acc / sum) as f32;
        }
    }
    out
}

pub fn silu_mul_ref(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| {
            let g = g as f64;
            (g / (1.0 + (-g).exp()) * u as f64) as f32
        })
        .collect()
}

/// `(x + y, rms_norm(x + y, w))`: the updated residual and the normed copy.
pub fn add_rms_norm_ref(x: &[f32], y: &[f32], w: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let sum: Vec<f32> = x.iter().zip(y).map(|(&a, &b)| a + b).collect();
    let normed = rms_norm_ref(&sum, w, eps);
    (sum, normed)
}

/// The highest value's index, the lowest index on ties; NaN never wins.
pub fn argmax_ref(x: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &v) in x.iter().enumerate() {
        if v > best_v || (!found && v == best_v) {
            best = i;
            best_v = v;
            found = true;
        }
    }
    best as u32
}

/// How many values are NaN or infinite: argmax's `token[1]`.
pub fn non_finite_ref(x: &[f32]) -> u32 {
    x.iter().filter(|v| !v.is_finite()).count() as u32
}

/// Every op's (name, WGSL), for tools that translate every shader (`kernels::spirv`).
///
/// Panics if an op's WGSL does not compose (a file missing from `wgsl/`).
pub fn sources() -> Vec<(&'static str, String)> {
    ALL_OPS
        .iter()
        .map(|op| {
            (
                op.name,
                op.source(WIDE_WG).unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .collect()
}
