//! Prompt processing in batches (prefill): the prompt's tokens go through the layers
//! many at a time, each matrix on a matmul over its matvec's weights (a weight block
//! decoded once per tile of tokens instead of once per token), attention causal over
//! the batch, and the KV cache written for all of them. Only the cache matters: the
//! prompt's last token then runs as a decode step, which gives its logits, so prefill
//! computes no output head and skips the last layer's attention output and FFN.
//!
//! [`Model::prefill_logits`] is the exception, for callers that want every prompt
//! position's logits (`decode --top-logits`, teacher-forced references): it runs the
//! last layer in full and the lm-head's matmul over the batch, a run of tokens at a time.
//!
//! [`PrefillPlan`] is part of the model's plan (pure, device-free); the pipelines and
//! batch buffers are made at the model's first prefill (the lm-head's at its first
//! `prefill_logits`), so a model that never prefills holds none.

use serde::Serialize;

use super::plan::{LayerPlan, Offsets, PlannedMatrix};
use super::Input;
use super::{Activation, Config, Matrix, Model};
use crate::device::{BufferUse, CommandList, DeviceProfile, OwnedBuffers, PipelineId, Slice};
use crate::kernels::attention::{PrefillAttention, PrefillPipelines};
use crate::kernels::matmul::{MatmulEngine, MatmulInput, MatmulLaunch};
use crate::kernels::matvec::Q8_GROUP_BYTES;
use crate::kernels::ops::{BatchNeeds, BatchOps};
use crate::{Error, Result};

/// Tokens per prefill batch unless `LoadOptions::ubatch` says otherwise (llama.cpp's
/// default ubatch).
pub const DEFAULT_UBATCH: usize = 512;

/// Prompt positions per lm-head matmul in [`Model::prefill_logits`]: their logits are
/// read back between runs, so this bounds the buffer (64 x 128,256 vocab x 4 bytes is
/// 33 MB) rather than the speed.
pub const LOGITS_RUN: u64 = 64;

/// How a prompt is processed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "route", rename_all = "snake_case")]
pub enum PrefillPlan {
    Batched(BatchedPrefill),
    /// Each token through the decode step, and why.
    TokenAtATime {
        reason: String,
    },
}

/// Batches of up to `ubatch` tokens, with these matmuls and this attention.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchedPrefill {
    pub ubatch: u64,
    /// Why the batch is `ubatch` tokens.
    pub ubatch_reason: String,
    /// How the matmuls multiply, and why.
    pub engine: MatmulEngine,
    pub engine_reason: String,
    pub attention: PrefillAttention,
    pub layers: Vec<LayerMatmuls>,
    /// How [`Model::prefill_logits`] gets the prompt's logits.
    pub logits: PromptLogits,
}

/// Every prompt position's logits: the lm-head's matmul over runs of `tokens`
/// positions of the batch, or each position as a decode step, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "route", rename_all = "snake_case")]
pub enum PromptLogits {
    Batched {
        head: Box<MatmulLaunch>,
        tokens: u64,
    },
    TokenAtATime {
        reason: String,
    },
}

/// A layer's matmuls, one per planned matrix, over the same weights.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerMatmuls {
    pub qkv: Vec<MatmulLaunch>,
    pub wo: MatmulLaunch,
    pub gate_up: Vec<MatmulLaunch>,
    pub down: MatmulLaunch,
}

/// The widths of the batch's rows, in elements per token.
#[derive(Clone, Copy, Debug)]
struct Widths {
    dim: u64,
    q_dim: u64,
    /// q, k and v side by side (`Offsets`).
    qkv: u64,
    /// gate and up side by side.
    gate_up: u64,
    ffn: u64,
}

impl Widths {
    fn of(config: &Config, offsets: &Offsets) -> Widths {
        let ffn = config.ffn_dim as u64;
        Widths {
            dim: config.dim as u64,
            q_dim: (config.n_heads * config.head_dim) as u64,
            qkv: offsets.v_first + config.kv_dim() as u64,
            gate_up: offsets.up_first + ffn,
            ffn,
        }
    }

    /// Bytes per token of each batch buffer, in the order `BatchActivations` makes them.
    fn buffer_bytes(&self) -> [(&'static str, u64); 9] {
        [
            ("prefill tokens", 4),
            ("prefill x", 4 * self.dim),
            ("prefill norm(x)", 4 * self.dim),
            ("prefill norm(x) as q8", q8_row(self.dim)),
            ("prefill q, k, v", 4 * self.qkv),
            ("prefill attention out", 4 * self.q_dim),
            ("prefill attention out as q8", q8_row(self.q_dim)),
            ("prefill block out", 4 * self.dim),
            ("prefill ffn gate, up", 4 * self.gate_up),
        ]
    }

    /// The FFN's hidden rows in the two forms a down projection may take: q8 (the
    /// quant types) and f32 (the float types). Made only for the down projections
    /// that take them, and counted both.
    fn hidden_bytes(&self) -> [(&'static str, u64); 2] {
        [
            ("prefill ffn hidden as q8", q8_row(self.ffn)),
            ("prefill ffn hidden", 4 * self.ffn),
        ]
    }

    /// Device bytes of the batch buffers per token of the batch.
    fn bytes_per_token(&self) -> u64 {
        self.buffer_bytes()
            .iter()
            .chain(&self.hidden_bytes())
            .map(|(_, b)| b)
            .sum()
    }

    /// The largest row of any batch buffer, which the binding limit caps.
    fn widest_row(&self) -> u64 {
        self.buffer_bytes()
            .iter()
            .chain(&self.hidden_bytes())
            .map(|&(_, b)| b)
            .max()
            .unwrap_or(4)
    }
}

/// Device bytes prefill's batch buffers take for batches of `ubatch` tokens, with the
/// logits of a run of `logits_tokens` (0 where prompt logits come token at a time).
pub fn batch_bytes(config: &Config, offsets: &Offsets, ubatch: u64, logits_tokens: u64) -> u64 {
    Widths::of(config, offsets)
        .bytes_per_token()
        .saturating_mul(ubatch)
        .saturating_add(logits_tokens.saturating_mul(4 * config.vocab as u64))
}

/// Plans prefill: batched where every layer matrix has a matmul over its route's
/// weights (the dot4 routes, and every float one) and the batch holds a token, else
/// token at a time with the first reason it cannot be batched. Pure: a preset's plan
/// is a device's.
pub fn plan_prefill(
    config: &Config,
    (layers, output): (&[LayerPlan], &PlannedMatrix),
    offsets: &Offsets,
    (kv, n_ctx): (crate::kernels::attention::KvType, usize),
    profile: &DeviceProfile,
    (asked, coop_matrix): (Option<usize>, Option<bool>),
) -> Result<PrefillPlan> {
    let token_at_a_time = |reason: String| Ok(PrefillPlan::TokenAtATime { reason });
    if asked == Some(1) {
        return token_at_a_time("a batch of 1 token was asked for".into());
    }
    let unbatched: Vec<&str> = [
        (config.qk_norm, "q/k norms"),
        (config.post_norms, "post-norms"),
        (config.activation != Activation::Silu, "GeGLU"),
        (config.sliding_window.is_some(), "sliding-window attention"),
    ]
    .into_iter()
    .filter_map(|(has, what)| has.then_some(what))
    .collect();
    if !unbatched.is_empty() {
        return token_at_a_time(format!(
            "the batch has no {} yet (the `{}` family's)",
            unbatched.join(", "),
            config.architecture
        ));
    }
    let (engine, engine_reason) = match MatmulEngine::route(profile, coop_matrix) {
        Ok(e) => e,
        Err(e) if coop_matrix == Some(true) => return Err(e),
        Err(e) => return token_at_a_time(format!("matmuls: {e}")),
    };
    let attention = match PrefillAttention::new(config.heads(), kv, profile) {
        Ok(a) => a,
        Err(e) => return token_at_a_time(format!("attention: {e}")),
    };
    let widths = Widths::of(config, offsets);
    let by_binding = profile.usable_binding_bytes() / widths.widest_row().max(1);
    let wanted = asked.unwrap_or(DEFAULT_UBATCH) as u64;
    let ubatch = wanted.min(by_binding).min(n_ctx as u64);
    if ubatch < 2 {
        return token_at_a_time(format!(
            "a batch row of {} bytes leaves room for {by_binding} tokens in a binding of {}",
            widths.widest_row(),
            profile.usable_binding_bytes()
        ));
    }
    // Forced cooperative matrices take every matrix; routed ones, those they fill.
    let engine_of = |m: u64| match coop_matrix {
        Some(true) => Ok(engine),
        _ => engine.for_matrix(profile, m, ubatch),
    };
    let matmul = |m: &PlannedMatrix| {
        engine_of(m.route.launch().m())
            .and_then(|e| MatmulLaunch::of(m.route.launch(), e))
            .map_err(|e| format!("`{}`: {e}", m.name()))
    };
    let mut planned = Vec::with_capacity(layers.len());
    for l in layers {
        let all = |ms: &[PlannedMatrix]| ms.iter().map(matmul).collect::<Result<Vec<_>, _>>();
        let layer = (|| {
            Ok::<_, String>(LayerMatmuls {
                qkv: all(&l.qkv)?,
                wo: matmul(&l.wo)?,
                gate_up: all(&l.gate_up)?,
                down: matmul(&l.down)?,
            })
        })();
        match layer {
            Ok(layer) => planned.push(layer),
            Err(reason) => return token_at_a_time(reason),
        }
    }
    let vocab_bytes = 4 * config.vocab as u64;
    let logits_tokens = ubatch
        .min(LOGITS_RUN)
        .min(profile.usable_binding_bytes() / vocab_bytes);
    let logits = match logits_tokens {
        0 => PromptLogits::TokenAtATime {
            reason: format!(
                "a token's {vocab_bytes} bytes of logits exceed a binding of {}",
                profile.usable_binding_bytes()
            ),
        },
        tokens => match engine
            .for_matrix(profile, config.vocab as u64, tokens)
            .and_then(|e| MatmulLaunch::of(output.route.launch(), e))
        {
            Ok(head) => PromptLogits::Batched {
                head: Box::new(head),
                tokens,
            },
            Err(e) => PromptLogits::TokenAtATime {
                reason: format!("`{}`: {e}", output.name()),
            },
        },
    };
    let ubatch_reason = if ubatch == wanted {
        match asked {
            Some(_) => format!("{ubatch} tokens, as asked"),
            None => format!("{ubatch} tokens, the default"),
        }
    } else if ubatch == by_binding {
        format!(
            "{ubatch} of {wanted} tokens: a batch's widest buffer ({} bytes a token) must fit \
             a binding of {}",
            widths.widest_row(),
            profile.usable_binding_bytes()
        )
    } else {
        format!("{ubatch} of {wanted} tokens: the context")
    };
    Ok(PrefillPlan::Batched(BatchedPrefill {
        ubatch,
        ubatch_reason,
        engine,
        engine_reason,
        attention,
        layers: planned,
        logits,
    }))
}

impl BatchedPrefill {
    /// The optional batch ops its matmuls' inputs need.
    pub fn needs(&self) -> BatchNeeds {
        let takes = |input, of: fn(&LayerMatmuls) -> &MatmulLaunch| {
            self.layers.iter().any(|l| of(l).input() == input)
        };
        BatchNeeds {
            silu_mul: takes(MatmulInput::F32, |l| &l.down),
            silu_mul_q8: takes(MatmulInput::Q8, |l| &l.down),
            quantize_rows: takes(MatmulInput::Q8, |l| &l.wo),
        }
    }
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
            PrefillPlan::Batched(BatchedPrefill {
                logits: PromptLogits::Batched { tokens, .. },
                ..
            }) => *tokens,
            _ => 0,
        }
    }
}

impl std::fmt::Display for PromptLogits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptLogits::Batched { head, tokens } => {
                write!(f, "{} in runs of {tokens} tokens", head.pipeline_key())
            }
            PromptLogits::TokenAtATime { reason } => write!(f, "token at a time: {reason}"),
        }
    }
}

impl std::fmt::Display for PrefillPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrefillPlan::TokenAtATime { reason } => write!(f, "token at a time: {reason}"),
            PrefillPlan::Batched(b) => {
                let mut kernels: Vec<String> = Vec::new();
                for l in &b.layers {
                    for m in l
                        .qkv
                        .iter()
                        .chain([&l.wo])
                        .chain(&l.gate_up)
                        .chain([&l.down])
                    {
                        let key = m.pipeline_key();
                        if !kernels.contains(&key) {
                            kernels.push(key);
                        }
                    }
                }
                write!(
                    f,
                    "batches of {} ({}); matmuls {} ({}); attention {}; prompt logits (when \
                     asked for) {}",
                    b.ubatch,
                    b.ubatch_reason,
                    kernels.join(", "),
                    b.engine_reason,
                    b.attention.pipeline_key(),
                    b.logits
                )
            }
        }
    }
}

/// What the first prefill creates: pipelines and batch buffers.
pub(super) struct PrefillState {
    ops: BatchOps,
    attention: PrefillPipelines,
    /// Per layer, qkv, then wo, gate_up and down, as `LayerMatmuls` lists them.
    matmuls: Vec<Vec<PipelineId>>,
    act: BatchActivations,
    /// The lm-head's pipeline and a run's logits, made at the first `prefill_logits`.
    head: Option<(PipelineId, Slice)>,
    buffers: OwnedBuffers<'static>,
}

/// The batch's buffers, a row per token.
struct BatchActivations {
    tokens: Slice,
    x: Slice,
    xn: Slice,
    xn_q8: Slice,
    qkv: Slice,
    att: Slice,
    att_q8: Slice,
    out: Slice,
    gate_up: Slice,
    hidden_q8: Option<Slice>,
    hidden: Option<Slice>,
}

impl PrefillState {
    fn new(model: &Model, batched: &BatchedPrefill) -> Result<PrefillState> {
        let device = model.device.clone();
        let dev = device.as_ref();
        let cache = &model.pipelines;
        let buffers = OwnedBuffers::new(device.clone());
        let widths = Widths::of(&model.config, &model.plan.offsets);
        let n = batched.ubatch;
        let needs = batched.needs();
        let make = |label: &str, per_token: u64| -> Result<Slice> {
            let bytes = (per_token * n).next_multiple_of(16);
            Ok(Slice::new(
                buffers.create(label, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };
        let mut made = widths
            .buffer_bytes()
            .into_iter()
            .map(|(label, per_token)| make(label, per_token))
            .collect::<Result<Vec<Slice>>>()?
            .into_iter();
        let mut next = move || made.next().expect("one slice per batch buffer");
        let [hidden_q8, hidden] = widths.hidden_bytes();
        let act = BatchActivations {
            tokens: next(),
            x: next(),
            xn: next(),
            xn_q8: next(),
            qkv: next(),
            att: next(),
            att_q8: next(),
            out: next(),
            gate_up: next(),
            hidden_q8: needs
                .silu_mul_q8
                .then(|| make(hidden_q8.0, hidden_q8.1))
                .transpose()?,
            hidden: needs
                .silu_mul
                .then(|| make(hidden.0, hidden.1))
                .transpose()?,
        };
        let matmuls = batched
            .layers
            .iter()
            .map(|l| {
                l.qkv
                    .iter()
                    .chain([&l.wo])
                    .chain(&l.gate_up)
                    .chain([&l.down])
                    .map(|m| m.pipeline(dev, cache))
                    .collect()
            })
            .collect::<Result<Vec<Vec<PipelineId>>>>()?;
        Ok(PrefillState {
            ops: BatchOps::new(dev, cache, needs)?,
            attention: batched.attention.pipelines(dev, cache)?,
            matmuls,
            act,
            head: None,
            buffers,
        })
    }

    fn head(
        &mut self,
        model: &Model,
        head: &MatmulLaunch,
        tokens: u64,
    ) -> Result<(PipelineId, Slice)> {
        if let Some(made) = self.head {
            return Ok(made);
        }
        let bytes = tokens * 4 * model.config.vocab as u64;
        let logits = self
            .buffers
            .create("prefill logits", bytes, BufferUse::Storage)?;
        let made = (
            head.pipeline(model.device.as_ref(), &model.pipelines)?,
            Slice::new(logits, 0, bytes),
        );
        self.head = Some(made);
        Ok(made)
    }
}

impl Model {
    /// Writes the KV cache for `tokens` at positions `start..start + tokens.len()`, in
    /// batches as the plan says (`Plan::prefill`), or token at a time where it says
    /// so. Computes no logits: run the token after these through a decode step for
    /// them. Returns once the work is queued.
    pub fn prefill(&self, tokens: &[u32], start: usize) -> Result<()> {
        self.check_prompt(tokens, start)?;
        let batched = match &self.plan.prefill {
            PrefillPlan::Batched(b) => b,
            PrefillPlan::TokenAtATime { .. } => {
                for (i, &id) in tokens.iter().enumerate() {
                    self.step(Input::Token(id), start + i)?;
                }
                return Ok(());
            }
        };
        let mut state = self.prefill_state(batched)?;
        let state = state.as_mut().expect("made by prefill_state");
        for (i, chunk) in tokens.chunks(batched.ubatch as usize).enumerate() {
            let pos = start + i * batched.ubatch as usize;
            self.device
                .upload(state.act.tokens.buffer, 0, bytemuck::cast_slice(chunk))?;
            let list = self.record_batch(state, batched, chunk.len() as u64, pos as u64, false)?;
            self.device.submit(&list)?;
        }
        Ok(())
    }

    /// Like [`Model::prefill`], and hands `each` every position's logits in order
    /// (position, logits): the lm-head's matmul over the batch where the plan has one
    /// (`PromptLogits`), else a decode step per token. `Error::NonFinite` names the
    /// first position with a NaN or infinite logit. Waits for each run of logits.
    pub fn prefill_logits(
        &self,
        tokens: &[u32],
        start: usize,
        mut each: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        let vocab = self.config.vocab;
        let (batched, head, run) = match &self.plan.prefill {
            PrefillPlan::Batched(
                b @ BatchedPrefill {
                    logits: PromptLogits::Batched { head, tokens },
                    ..
                },
            ) => (b, head, *tokens),
            _ => {
                self.check_prompt(tokens, start)?;
                for (i, &id) in tokens.iter().enumerate() {
                    each(
                        start + i,
                        &self.forward_logits(Input::Token(id), start + i)?,
                    )?;
                }
                return Ok(());
            }
        };
        self.check_prompt(tokens, start)?;
        let mut state = self.prefill_state(batched)?;
        let state = state.as_mut().expect("made by prefill_state");
        let (pipeline, logits) = state.head(self, head, run)?;
        let w = Widths::of(&self.config, &self.plan.offsets);
        for (i, chunk) in tokens.chunks(batched.ubatch as usize).enumerate() {
            let pos = start + i * batched.ubatch as usize;
            self.device
                .upload(state.act.tokens.buffer, 0, bytemuck::cast_slice(chunk))?;
            let mut list =
                self.record_batch(state, batched, chunk.len() as u64, pos as u64, true)?;
            for first in (0..chunk.len() as u64).step_by(run as usize) {
                let n = run.min(chunk.len() as u64 - first);
                let x = BatchX::both(state.act.xn, state.act.xn_q8, w.dim, first);
                let y = Slice::new(logits.buffer, logits.offset, n * 4 * vocab as u64);
                matmul_into(
                    &mut list,
                    &self.output,
                    head,
                    pipeline,
                    x,
                    (y, vocab as u64),
                    n,
                )?;
                self.device.submit(&list)?;
                list = CommandList::new();
                let values = crate::device::read_f32(
                    self.device.as_ref(),
                    logits.buffer,
                    logits.offset,
                    n as usize * vocab,
                )?;
                for (j, row) in values.chunks_exact(vocab).enumerate() {
                    let at = pos + first as usize + j;
                    let bad = row.iter().filter(|v| !v.is_finite()).count();
                    if bad > 0 {
                        return Err(Error::NonFinite(format!(
                            "non-finite logits at prompt position {at}: {bad} of {vocab} are NaN \
                             or infinite (batched prefill; --ubatch 1 runs the prompt as decode \
                             steps, which name the op that first gives them)"
                        )));
                    }
                    each(at, row)?;
                }
            }
        }
        Ok(())
    }

    fn check_prompt(&self, tokens: &[u32], start: usize) -> Result<()> {
        let end = start + tokens.len();
        if end > self.n_ctx {
            return Err(Error::ContextFull {
                what: format!("the prompt batch at positions {start}..{end}"),
                needed: end,
                context: self.n_ctx,
                trained: self.config.context_length,
                reset_helps: false,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= self.config.vocab) {
            return Err(Error::Invalid(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        Ok(())
    }

    /// The prefill state, made on first use.
    fn prefill_state(
        &self,
        batched: &BatchedPrefill,
    ) -> Result<std::sync::MutexGuard<'_, Option<PrefillState>>> {
        let mut state = self.prefill_state.lock().unwrap_or_else(|e| e.into_inner());
        if state.is_none() {
            *state = Some(PrefillState::new(self, batched)?);
        }
        Ok(state)
    }

    /// One batch of `n` tokens at positions `pos..pos + n`, their ids in the batch's
    /// token buffer:
    /// x = embed(tokens); per layer: the cache gets rope(Wk·norm(x)), Wv·norm(x), then
    /// (but for the last layer, unless `to_output_norm`)
    /// x += Wo·attention(rope(Wq·norm(x)), cache) and
    /// x += W_down·(silu(W_gate·norm(x)) * (W_up·norm(x))); with `to_output_norm` the
    /// batch's norm rows end as output_norm(x), the lm-head's input.
    fn record_batch(
        &self,
        state: &PrefillState,
        batched: &BatchedPrefill,
        n: u64,
        pos: u64,
        to_output_norm: bool,
    ) -> Result<CommandList> {
        let (c, a, ops) = (&self.config, &state.act, &state.ops);
        let w = Widths::of(c, &self.plan.offsets);
        let rows = |s: Slice, per_token: u64| Slice::new(s.buffer, s.offset, n * per_token);
        let (x, xn, xn_q8) = (
            rows(a.x, 4 * w.dim),
            rows(a.xn, 4 * w.dim),
            rows(a.xn_q8, q8_row(w.dim)),
        );
        let normed = BatchX::both(xn, xn_q8, w.dim, 0);
        let out = rows(a.out, 4 * w.dim);
        let mut list = CommandList::new();
        for d in ops.embed(&self.embed, (w.dim, n), rows(a.tokens, 4), x) {
            list.dispatch(d);
        }
        let first_norm = self
            .layers
            .first()
            .map_or(self.output_norm, |l| l.attn_norm);
        list.dispatch(ops.rms_norm((w.dim, n), c.eps, x, first_norm, (xn, xn_q8)));
        let last = self.layers.len().saturating_sub(1);
        for (i, (layer, plan)) in self.layers.iter().zip(&batched.layers).enumerate() {
            let pipelines = &state.matmuls[i];
            let mut pipeline = pipelines.iter().copied();
            let mut pipeline = move || pipeline.next().expect("one pipeline per matmul");
            let qkv = rows(a.qkv, 4 * w.qkv);
            for (m, launch) in layer.qkv.iter().zip(&plan.qkv) {
                matmul_into(&mut list, m, launch, pipeline(), normed, (qkv, w.qkv), n)?;
            }
            let offsets = self.plan.offsets;
            list.dispatch(batched.attention.rope_kv_batch(
                &state.attention,
                pos,
                n,
                layer.rope,
                (qkv, w.qkv),
                layer.qkv_bias,
                (offsets.k_first, offsets.v_first),
                layer.k_cache,
                layer.v_cache,
            ));
            if i == last && !to_output_norm {
                // Only the cache is wanted of the last layer (see the module's comment).
                break;
            }
            let att = rows(a.att, 4 * w.q_dim);
            for d in batched.attention.dispatches(
                &state.attention,
                pos,
                n,
                (qkv, w.qkv),
                layer.k_cache,
                layer.v_cache,
                (att, w.q_dim),
            )? {
                list.dispatch(d);
            }
            let att_q8 = rows(a.att_q8, q8_row(w.q_dim));
            if plan.wo.input() == MatmulInput::Q8 {
                list.dispatch(ops.quantize_rows((w.q_dim, n, w.q_dim), att, att_q8));
            }
            matmul_into(
                &mut list,
                &layer.wo,
                &plan.wo,
                pipeline(),
                BatchX::both(att, att_q8, w.q_dim, 0),
                (out, w.dim),
                n,
            )?;
            list.dispatch(ops.add_rms_norm(
                (w.dim, n),
                c.eps,
                (x, out),
                layer.ffn_norm,
                (xn, xn_q8),
            ));
            let gate_up = rows(a.gate_up, 4 * w.gate_up);
            for (m, launch) in layer.gate_up.iter().zip(&plan.gate_up) {
                matmul_into(
                    &mut list,
                    m,
                    launch,
                    pipeline(),
                    normed,
                    (gate_up, w.gate_up),
                    n,
                )?;
            }
            let up_first = offsets.up_first;
            let up = Slice::new(
                gate_up.buffer,
                gate_up.offset + 4 * up_first,
                gate_up.size - 4 * up_first,
            );
            // silu(gate) * up in the form this layer's down projection takes.
            let made = |h: Option<Slice>| {
                h.ok_or_else(|| Error::Invalid("prefill made no FFN hidden rows".into()))
            };
            let hidden = match plan.down.input() {
                MatmulInput::Q8 => {
                    let h = rows(made(a.hidden_q8)?, q8_row(w.ffn));
                    list.dispatch(ops.silu_mul_q8((w.ffn, n, w.gate_up), gate_up, up, h));
                    BatchX {
                        f32: None,
                        q8: Some((h, q8_row(w.ffn))),
                    }
                }
                MatmulInput::F32 => {
                    let h = rows(made(a.hidden)?, 4 * w.ffn);
                    list.dispatch(ops.silu_mul((w.ffn, n, w.gate_up), gate_up, up, h));
                    BatchX {
                        f32: Some((h, 4 * w.ffn)),
                        q8: None,
                    }
                }
            };
            matmul_into(
                &mut list,
                &layer.down,
                &plan.down,
                pipeline(),
                hidden,
                (out, w.dim),
                n,
            )?;
            let next_norm = self
                .layers
                .get(i + 1)
                .map_or(self.output_norm, |l| l.attn_norm);
            list.dispatch(ops.add_rms_norm((w.dim, n), c.eps, (x, out), next_norm, (xn, xn_q8)));
        }
        Ok(list)
    }
}

/// Bytes of `k` values quantized as the matmuls take them.
fn q8_row(k: u64) -> u64 {
    k.div_ceil(32) * Q8_GROUP_BYTES
}

/// A batch's x rows in the forms its matmuls take (`MatmulInput`), each with its
/// stride in bytes; a form no matmul of the plan takes is not made.
#[derive(Clone, Copy, Debug)]
struct BatchX {
    f32: Option<(Slice, u64)>,
    q8: Option<(Slice, u64)>,
}

impl BatchX {
    /// Rows of `k` values from token `first` on, both forms made.
    fn both(f32: Slice, q8: Slice, k: u64, first: u64) -> BatchX {
        let from = |s: Slice, stride: u64| {
            let skip = (first * stride).min(s.size);
            (Slice::new(s.buffer, s.offset + skip, s.size - skip), stride)
        };
        BatchX {
            f32: Some(from(f32, 4 * k)),
            q8: Some(from(q8, q8_row(k))),
        }
    }
}

/// y rows (`y_stride` floats a token, this matrix's from its `out_first`) = W · x rows
/// (in the form the launch takes) for `n` tokens.
fn matmul_into(
    list: &mut CommandList,
    w: &Matrix,
    launch: &MatmulLaunch,
    pipeline: PipelineId,
    x: BatchX,
    (y, y_stride): (Slice, u64),
    n: u64,
) -> Result<()> {
    let (x, x_stride) = match launch.input() {
        MatmulInput::F32 => x.f32,
        MatmulInput::Q8 => x.q8,
    }
    .ok_or_else(|| {
        Error::Invalid(format!(
            "`{}`: the batch has no x in the form {} takes",
            w.plan.name(),
            launch.kernel_name()
        ))
    })?;
    for d in launch.dispatches(
        pipeline,
        &w.parts,
        x,
        x_stride,
        y,
        (w.plan.out_first, y_stride),
        n,
    )? {
        list.dispatch(d);
    }
    Ok(())
}
