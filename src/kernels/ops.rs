//! The elementwise and reduction ops of a llama decode step, one WGSL file each under
//! `wgsl/ops/`: embedding lookup, RMSNorm, SiLU·mul (f32, or quantized for a dot4 down
//! projection), the residual add fused with the RMSNorm that follows it, and argmax.
//! RoPE, the KV cache and attention are [`super::attention`]'s. Each has a CPU
//! reference here (f64 accumulation), the ground truth in `tests/ops.rs`.
//!
//! None of them needs subgroups or f16: they are a small share of a token's bytes, so
//! the portable version is the only one until a measurement says otherwise.

use std::sync::OnceLock;

use crate::device::{Access, Device, Dispatch, IndexChecks, PipelineId, Slice};
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
    /// The gated FFN ops' activation (`wgsl/ops/glu_act.wgsl`'s GELU): GELU where
    /// true, silu where false; None for every other op.
    gelu: Option<bool>,
}

/// The widest single workgroup the `wide` ops use.
const WIDE_WG: u32 = 1024;

impl OpSpec {
    /// The complete WGSL for a device allowing `max_wg` invocations per workgroup.
    fn source(&self, max_wg: u32) -> Result<String> {
        let mut consts = Vec::new();
        if self.wide {
            consts.push(WgslConst::u32("WG", WIDE_WG.min(max_wg)));
        }
        if self.q8_out {
            consts.push(WgslConst::u32("Q8_BINDING", self.storage.len() as u32));
        }
        if let Some(gelu) = self.gelu {
            consts.push(WgslConst::bool("GELU", gelu));
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
    gelu: None,
};
const RMS_NORM: OpSpec = OpSpec {
    name: "ops/rms_norm",
    root: "ops/rms_norm_f32.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: true,
    q8_out: false,
    gelu: None,
};
const SILU_MUL: OpSpec = OpSpec {
    name: "ops/silu_mul",
    root: "ops/silu_mul.wgsl",
    params_bytes: 16,
    storage: &[R, R, RW],
    wide: false,
    q8_out: false,
    gelu: Some(false),
};
/// GELU(gate) * up (Gemma's GeGLU): silu_mul's WGSL with GELU set.
const GELU_MUL: OpSpec = OpSpec {
    name: "ops/gelu_mul",
    gelu: Some(true),
    ..SILU_MUL
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
    gelu: Some(false),
};
const GELU_MUL_Q8: OpSpec = OpSpec {
    name: "ops/gelu_mul_q8",
    gelu: Some(true),
    ..SILU_MUL_Q8
};
/// Per-head RMSNorm of q and k, in place (Qwen3, Gemma 3).
const HEAD_RMS_NORM: OpSpec = OpSpec {
    name: "ops/head_rms_norm",
    root: "ops/head_rms_norm.wgsl",
    params_bytes: 32,
    storage: &[RW, R],
    wide: false,
    q8_out: false,
    gelu: None,
};
const ADD_RMS_NORM: OpSpec = OpSpec {
    name: "ops/add_rms_norm",
    root: "ops/add_rms_norm_f32.wgsl",
    params_bytes: 16,
    storage: &[RW, R, R, RW],
    wide: true,
    q8_out: false,
    gelu: None,
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
/// Rows of x written quantized, for the matmuls that take the prefill batch's
/// attention output.
const QUANTIZE_ROWS: OpSpec = OpSpec {
    name: "ops/quantize_rows",
    root: "ops/quantize_rows.wgsl",
    params_bytes: 16,
    storage: &[R, RW],
    wide: false,
    q8_out: false,
    gelu: None,
};
const ARGMAX: OpSpec = OpSpec {
    name: "ops/argmax",
    root: "ops/argmax.wgsl",
    params_bytes: 16,
    storage: &[R, RW, RW],
    wide: false,
    q8_out: false,
    gelu: None,
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
const ALL_OPS: [OpSpec; 12] = [
    EMBED,
    QUANTIZE_ROWS,
    RMS_NORM,
    RMS_NORM_Q8,
    SILU_MUL,
    SILU_MUL_Q8,
    GELU_MUL,
    GELU_MUL_Q8,
    HEAD_RMS_NORM,
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
            index_checks: IndexChecks::Wgpu,
        };
        Ok((spec.source(max_wg)?, template))
    })
}

/// One row part of an embedding table: rows `first_row..first_row + rows` in `table`.
#[derive(Clone, Copy, Debug)]
pub struct EmbedPart {
    /// The first token id (row) it holds.
    pub first_row: u64,
    /// Rows in the part.
    pub rows: u64,
    /// Where the rows lie: row `first_row` at the slice's start.
    pub table: Slice,
}

/// The gated FFN's elementwise part: act(gate) * up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Activation {
    /// silu(g) = g / (1 + e^-g) (SwiGLU).
    Silu,
    /// GELU in its tanh form, 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
    /// (GeGLU, as llama.cpp's `ggml_gelu`).
    GeluTanh,
}

impl Activation {
    /// act(g) in f64, the CPU references' activation.
    pub fn of(self, g: f64) -> f64 {
        match self {
            Activation::Silu => g / (1.0 + (-g).exp()),
            Activation::GeluTanh => {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                0.5 * g * (1.0 + u.tanh())
            }
        }
    }
}

/// Every op's pipeline, each made on its first dispatch: a pipeline made and never
/// dispatched is an audit defect, and which variants a model dispatches (a norm
/// writing q8 or not, the FFN's hidden rows in f32 or q8) depends on its routes and on
/// which phases run, so none is made ahead.
///
/// An op covers `rows` rows of a batch, one dispatch for all of them: a decode step is
/// one row, a prompt's batch many, through the same WGSL.
#[derive(Debug)]
pub struct Ops {
    activation: Activation,
    made: [OnceLock<PipelineId>; ALL_OPS.len()],
}

/// [`Ops`] on a device, creating pipelines in `cache`.
#[derive(Clone, Copy)]
pub struct OpsOn<'a> {
    ops: &'a Ops,
    device: &'a dyn Device,
    cache: &'a PipelineCache,
}

impl Ops {
    /// The ops of a model whose gated FFN runs `activation`.
    pub fn new(activation: Activation) -> Ops {
        Ops {
            activation,
            made: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// These ops on `device`, their pipelines made through `cache` on first use.
    pub fn on<'a>(&'a self, device: &'a dyn Device, cache: &'a PipelineCache) -> OpsOn<'a> {
        OpsOn {
            ops: self,
            device,
            cache,
        }
    }
}

impl OpsOn<'_> {
    /// `spec`'s pipeline, made on first use.
    fn pipeline(&self, spec: &OpSpec) -> Result<PipelineId> {
        let i = ALL_OPS
            .iter()
            .position(|s| s.name == spec.name)
            .expect("every op is in ALL_OPS");
        if let Some(&id) = self.ops.made[i].get() {
            return Ok(id);
        }
        let id = get(self.device, self.cache, spec)?;
        Ok(*self.ops.made[i].get_or_init(|| id))
    }

    fn glu_spec(&self, q8: bool) -> &'static OpSpec {
        match (self.ops.activation, q8) {
            (Activation::Silu, false) => &SILU_MUL,
            (Activation::Silu, true) => &SILU_MUL_Q8,
            (Activation::GeluTanh, false) => &GELU_MUL,
            (Activation::GeluTanh, true) => &GELU_MUL_Q8,
        }
    }

    /// Row r of `out` (`dim` elements each) = the table's row `tokens[r]`, for `rows`
    /// tokens (u32 ids in `tokens`, read on the GPU): one dispatch per table part, each
    /// writing the rows whose token it holds.
    pub fn embed(
        &self,
        parts: &[EmbedPart],
        (dim, rows): (u64, u64),
        tokens: Slice,
        out: Slice,
    ) -> Result<Vec<Dispatch>> {
        let pipeline = self.pipeline(&EMBED)?;
        Ok(parts
            .iter()
            .map(|p| Dispatch {
                pipeline,
                params: vec![dim as u32, p.first_row as u32, p.rows as u32, 0],
                storage: vec![p.table, tokens, out],
                workgroups: [groups_for(dim, 256)[0], rows as u32, 1],
                bytes_read: rows * dim * 4,
            })
            .collect())
    }

    /// Each of `rows` rows of `n` elements: `out = x / rms(x) * w`, and where `out_q8`
    /// is given, the same quantized into it (`matvec::quantize_x_q8`'s layout, row
    /// after row).
    pub fn rms_norm(
        &self,
        (n, rows): (u64, u64),
        eps: f32,
        x: Slice,
        w: Slice,
        (out, out_q8): (Slice, Option<Slice>),
    ) -> Result<Dispatch> {
        let spec = if out_q8.is_some() {
            &RMS_NORM_Q8
        } else {
            &RMS_NORM
        };
        Ok(Dispatch {
            pipeline: self.pipeline(spec)?,
            params: vec![n as u32, eps.to_bits(), 0, 0],
            storage: [x, w, out].into_iter().chain(out_q8).collect(),
            workgroups: [rows as u32, 1, 1],
            bytes_read: rows * n * 8,
        })
    }

    /// Each of `rows` rows of `n` elements: `x += y`, then `out = x / rms(x) * w`;
    /// `out_q8` as for [`OpsOn::rms_norm`].
    pub fn add_rms_norm(
        &self,
        (n, rows): (u64, u64),
        eps: f32,
        (x, y): (Slice, Slice),
        w: Slice,
        (out, out_q8): (Slice, Option<Slice>),
    ) -> Result<Dispatch> {
        let spec = if out_q8.is_some() {
            &ADD_RMS_NORM_Q8
        } else {
            &ADD_RMS_NORM
        };
        Ok(Dispatch {
            pipeline: self.pipeline(spec)?,
            params: vec![n as u32, eps.to_bits(), 0, 0],
            storage: [x, y, w, out].into_iter().chain(out_q8).collect(),
            workgroups: [rows as u32, 1, 1],
            bytes_read: rows * n * 12,
        })
    }

    /// Per-head RMSNorm of q and k in place, for `rows` rows of `qkv` `row_stride`
    /// values apart: the `n_q_heads` query heads from each row's element 0, the
    /// `n_kv_heads` KV heads from `k_first`, each `head_dim` values, times `w`'s q
    /// weights (its first `head_dim`) or k weights (the next).
    pub fn head_rms_norm(
        &self,
        (n_q_heads, n_kv_heads, head_dim): (u64, u64, u64),
        k_first: u64,
        eps: f32,
        (rows, row_stride): (u64, u64),
        qkv: Slice,
        w: Slice,
    ) -> Result<Dispatch> {
        let heads = n_q_heads + n_kv_heads;
        Ok(Dispatch {
            pipeline: self.pipeline(&HEAD_RMS_NORM)?,
            params: vec![
                head_dim as u32,
                n_q_heads as u32,
                k_first as u32,
                row_stride as u32,
                eps.to_bits(),
                0,
                0,
                0,
            ],
            storage: vec![qkv, w],
            workgroups: [heads as u32, rows as u32, 1],
            bytes_read: rows * heads * head_dim * 8,
        })
    }

    /// `act(gate) * up` (the model's [`Activation`]) of `rows` rows of `n` elements,
    /// row r at element r * `stride` of `gate` and of `up`, written row after row.
    pub fn glu(
        &self,
        (n, rows, stride): (u64, u64, u64),
        gate: Slice,
        up: Slice,
        out: Slice,
    ) -> Result<Dispatch> {
        Ok(Dispatch {
            pipeline: self.pipeline(self.glu_spec(false))?,
            params: vec![n as u32, rows as u32, stride as u32, 0],
            storage: vec![gate, up, out],
            workgroups: groups_for(rows * n, 256),
            bytes_read: rows * n * 8,
        })
    }

    /// [`OpsOn::glu`] written only quantized (`matvec::quantize_x_q8`'s layout, row
    /// after row).
    pub fn glu_q8(
        &self,
        (n, rows, stride): (u64, u64, u64),
        gate: Slice,
        up: Slice,
        out_q8: Slice,
    ) -> Result<Dispatch> {
        Ok(Dispatch {
            pipeline: self.pipeline(self.glu_spec(true))?,
            params: vec![n as u32, rows as u32, stride as u32, 0],
            storage: vec![gate, up, out_q8],
            // Eight groups of 32 per workgroup (wgsl/ops/q8_rows.wgsl).
            workgroups: groups_for(rows * n.div_ceil(32), 8),
            bytes_read: rows * n * 8,
        })
    }

    /// `rows` rows of `n` elements of x, row r at element r * `stride`, written
    /// quantized row after row.
    pub fn quantize_rows(
        &self,
        (n, rows, stride): (u64, u64, u64),
        x: Slice,
        out_q8: Slice,
    ) -> Result<Dispatch> {
        Ok(Dispatch {
            pipeline: self.pipeline(&QUANTIZE_ROWS)?,
            params: vec![n as u32, rows as u32, stride as u32, 0],
            storage: vec![x, out_q8],
            workgroups: groups_for(rows * n.div_ceil(32), 8),
            bytes_read: rows * n * 4,
        })
    }

    /// `token[0] = argmax(logits[..n])`, lowest index on ties, `token[1]` = the NaN or
    /// infinite logits among them, `token[2]` = `token[0]` as it was: two dispatches,
    /// the first leaving one candidate per workgroup in `scratch`
    /// ([`ARGMAX_SCRATCH_WORDS`] u32). `token` holds [`ARGMAX_TOKEN_WORDS`] u32.
    pub fn argmax(
        &self,
        n: u64,
        logits: Slice,
        scratch: Slice,
        token: Slice,
    ) -> Result<[Dispatch; 2]> {
        let pipeline = self.pipeline(&ARGMAX)?;
        let groups = n.div_ceil(ARGMAX_CHUNK).clamp(1, ARGMAX_MAX_GROUPS);
        let chunk = n.div_ceil(groups);
        let stage = |params: Vec<u32>, groups: u64, bytes_read: u64| Dispatch {
            pipeline,
            params,
            storage: vec![logits, scratch, token],
            workgroups: [groups as u32, 1, 1],
            bytes_read,
        };
        Ok([
            stage(vec![n as u32, chunk as u32, 0, 0], groups, n * 4),
            stage(vec![groups as u32, 0, 1, 0], 1, groups * 12),
        ])
    }
}

// ---------------------------------------------------------------------------------
// CPU references (f64 accumulation).

/// Row `token` of a row-major `[rows][dim]` table.
pub fn embed_ref(table: &[f32], dim: usize, token: u32) -> Vec<f32> {
    let start = token as usize * dim;
    table[start..start + dim].to_vec()
}

/// RMS norm: `x / sqrt(mean(x²) + eps) * w`, elementwise.
pub fn rms_norm_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &w)| (v as f64 * scale * w as f64) as f32)
        .collect()
}

/// silu(gate) * up ([`glu_ref`] with [`Activation::Silu`]).
pub fn silu_mul_ref(gate: &[f32], up: &[f32]) -> Vec<f32> {
    glu_ref(Activation::Silu, gate, up)
}

/// act(gate) * up.
pub fn glu_ref(act: Activation, gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| (act.of(g as f64) * u as f64) as f32)
        .collect()
}

/// Each `head_dim` values of `x` (heads end to end) RMS-normalized and times `w`.
pub fn head_rms_norm_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    x.chunks(w.len())
        .flat_map(|head| rms_norm_ref(head, w, eps))
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
