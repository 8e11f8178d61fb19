//! The model planner: from a GGUF file, a device profile and the load options, every
//! matrix of the forward pass (which tensors are stacked into one, the form its x
//! arrives in, its route), with no device. `Model::from_gguf` uploads what it says, and
//! `decode --plan` and `inspect --plan` print it: the plan that is printed is the plan
//! that runs.

use serde::Serialize;

use super::prefill::{batch_bytes, plan_prefill, PrefillPlan, DEFAULT_UBATCH};
use super::{Activation, Config, LoadOptions, MemoryNeed};
use crate::device::DeviceProfile;
use crate::gguf::{GgufFile, TensorInfo};
use crate::kernels::attention::KvType;
use crate::kernels::matvec::XForm;
use crate::router::{
    route_attention, route_matvec, write_route_table, AttentionQuery, AttentionRoute, MatvecQuery,
    Route, RouteRow, XInput,
};
use crate::{Error, Result};

/// A weight matrix of the forward pass: one GGUF tensor, or several stacked row-wise
/// when they share an input and a type (Q, K and V; gate and up), so that one dispatch
/// computes them all.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedMatrix {
    /// The tensors, in row order.
    pub tensors: Vec<String>,
    /// The element of the output buffer its first row writes.
    pub out_first: u64,
    pub route: Route,
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
    pub wo: PlannedMatrix,
    /// Writes [gate; up] into one buffer, likewise.
    pub gate_up: Vec<PlannedMatrix>,
    pub down: PlannedMatrix,
}

/// Where q, k, v and gate, up sit in their shared buffers (elements): each at an
/// offset the device can bind an op's input at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Offsets {
    pub k_first: u64,
    pub v_first: u64,
    pub up_first: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub device: String,
    pub config: Config,
    /// Positions the KV cache holds.
    pub n_ctx: usize,
    /// Why the context is `n_ctx`: asked for, the trained length, or what fits.
    pub context_reason: String,
    pub kv: KvType,
    /// Decode attention, the same for every layer.
    pub attention: AttentionRoute,
    pub offsets: Offsets,
    pub layers: Vec<LayerPlan>,
    /// The lm-head: `output.weight`, or the tied `token_embd.weight`.
    pub output: PlannedMatrix,
    /// How prompts are processed: in batches on matmuls, or token at a time.
    pub prefill: PrefillPlan,
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
    let align = (profile.storage_offset_alignment.max(4) / 4) as u64;
    let k_first = q_dim.next_multiple_of(align);
    let offsets = Offsets {
        k_first,
        v_first: (k_first + kv_dim).next_multiple_of(align),
        up_first: ffn.next_multiple_of(align),
    };
    // The largest batch prefill may take is counted against the device with the cache.
    let prefill_bytes = batch_bytes(
        &config,
        &offsets,
        options.ubatch.unwrap_or(DEFAULT_UBATCH) as u64,
        super::prefill::LOGITS_RUN,
    );
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
    let layers = (0..config.n_layers)
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
    // Tied embeddings: the quantized token_embd doubles as the lm-head.
    let output_name = if file.tensor("output.weight").is_some() {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let output = planner.matrix(output_name, config.vocab as u64, dim, XInput::Norm)?;
    let prefill = plan_prefill(
        &config,
        (&layers, &output),
        &offsets,
        (options.kv, n_ctx),
        profile,
        (options.ubatch, options.routing.coop_matrix),
    )?;
    Ok(Plan {
        device: profile.name.clone(),
        config,
        n_ctx,
        context_reason,
        kv: options.kv,
        attention,
        offsets,
        layers,
        output,
        prefill,
    })
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
        MemoryNeed::of(config, file, n, options.kv, profile)?.with_prefill(prefill_bytes)
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
    let by_binding =
        profile.usable_binding_bytes() / MemoryNeed::per_position_binding(config, options.kv);
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
            route: self.route(name, MatvecQuery { ty: t.ty, m, k, x })?,
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
        };
        Ok(vec![PlannedMatrix {
            tensors: names.to_vec(),
            out_first: first[0],
            route: self.route(&name, query)?,
        }])
    }
}

impl Plan {
    /// Every matrix, in forward-pass order.
    pub fn matrices(&self) -> impl Iterator<Item = &PlannedMatrix> {
        self.layers
            .iter()
            .flat_map(|l| {
                l.qkv
                    .iter()
                    .chain([&l.wo])
                    .chain(&l.gate_up)
                    .chain([&l.down])
            })
            .chain([&self.output])
    }

    /// Per norm dispatch of a step, in order (the first norm, then each layer's two),
    /// whether it writes its output quantized as well: when a matrix it feeds takes x
    /// that way.
    pub fn norms_q8(&self) -> Vec<bool> {
        let takes_q8 =
            |ms: &[PlannedMatrix]| ms.iter().any(|m| m.route.launch().x_form() == XForm::Q8);
        let block_input = |i: usize| match self.layers.get(i) {
            Some(l) => takes_q8(&l.qkv),
            None => takes_q8(std::slice::from_ref(&self.output)),
        };
        std::iter::once(block_input(0))
            .chain(
                (0..self.layers.len())
                    .flat_map(|i| [takes_q8(&self.layers[i].gate_up), block_input(i + 1)]),
            )
            .collect()
    }

    /// The plan as `--plan --json` prints it, for decode and inspect alike: the device,
    /// and per matrix its tensors, type, M, K, pipeline and clauses.
    pub fn to_json(&self) -> serde_json::Value {
        let matvecs: Vec<serde_json::Value> = self
            .matrices()
            .map(|m| {
                let launch = m.route.launch();
                serde_json::json!({
                    "tensors": m.tensors,
                    "type": launch.kernel().ty.name(),
                    "m": launch.m(),
                    "k": launch.k(),
                    "kernel": launch.pipeline_key(),
                    "clauses": m.route.clauses().iter().map(|c| c.to_string()).collect::<Vec<_>>(),
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
            "context_reason": self.context_reason,
            "attention": attention,
            "prefill": self.prefill,
            "matvecs": matvecs,
        })
    }
}

impl std::fmt::Display for Plan {
    /// The route table with a legend of clauses, then the context and attention.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan for {}:", self.device)?;
        let names: Vec<String> = self.matrices().map(PlannedMatrix::name).collect();
        let rows: Vec<RouteRow> = self
            .matrices()
            .zip(&names)
            .map(|(m, name)| RouteRow {
                tensor: name,
                route: &m.route,
            })
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
        Ok(())
    }
}
