//! A model on a [`Device`], in the order its data flows:
//! - `config`: the family table and the file's facts, read once;
//! - [`plan()`]: every launch of the forward pass, routed by [`crate::router`] with no
//!   device (each matrix's matvec for one token and matmul for a batch, attention,
//!   the batch size, the buffers);
//! - `load`: the weights uploaded once, the buffers made;
//! - `forward`: one forward pass over any number of tokens, recorded as one command
//!   list and submitted once: a decode step is one token, a prompt's batch many;
//! - [`Session`]: a conversation over a model and its tokenizer;
//! - [`Engine`]: many sequences over one model, each step reading the weights once for
//!   all of them.
//!
//! The token id lives in a GPU buffer: the embedding lookup reads it, and the argmax
//! that ends every step writes the next one there, so greedy decode needs only the
//! 4-byte id back per token (or nothing, when the host queues ahead).

mod config;
mod engine;
mod forward;
mod layout;
mod load;
mod memory;
mod non_finite;
mod plan;
mod session;

pub use config::{output_tensor, Config, Family, SlidingWindow, Swa, FAMILIES};
pub use engine::{Engine, Event, SequenceId, SequenceOptions, StopReason};
pub use forward::StepTicket;
pub use layout::{Offsets, Widths};
pub use memory::MemoryNeed;
pub use non_finite::check_weights;
pub use plan::{
    plan, BatchedPrefill, DecodeColumns, LayerPlan, Plan, PlannedMatrix, PrefillPlan, PromptLogits,
    DECODE_COLUMN_SPANS, DECODE_MATRIX_UNITS_FROM, DEFAULT_UBATCH, LOGITS_RUN,
};
pub use session::{Generate, Prompt, Session, Stats, Token};

pub use crate::kernels::attention::KvType;
pub use crate::kernels::ops::Activation;

use std::sync::{Arc, Mutex, OnceLock};

use crate::device::{Device, LedgerReport, OwnedBuffers, PipelineId, Slice};
use crate::kernels::attention::{AttentionPipelines, PrefillPipelines};
use crate::kernels::ops::{EmbedPart, Ops};
use crate::kernels::PipelineCache;
use crate::router::Overrides;
use crate::{Error, Result};

/// Choices made at load time.
///
/// # Examples
///
/// A context of 4,096 positions in a KV cache of q8_0 blocks, checked against the
/// file's trained context before a device is opened:
///
/// ```no_run
/// use std::sync::Arc;
///
/// use brass::device::{AdapterChoice, WgpuDevice};
/// use brass::gguf::GgufFile;
/// use brass::model::{Config, KvType, LoadOptions, Session};
///
/// # fn main() -> brass::Result<()> {
/// let path = brass::hub::default_model_path()?;
/// let options = LoadOptions {
///     context: Some(4096),
///     kv: KvType::Q8_0,
///     ..LoadOptions::default()
/// };
/// options.validate(&Config::from_gguf(&GgufFile::open(&path)?)?)?;
///
/// let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// let session = Session::load(device, &path, &options)?;
/// assert_eq!(session.model().context(), 4096);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
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
    /// Sequences the model serves at once (default 1): each has its own region of
    /// `context` positions in every layer's KV cache, counted against the device's
    /// memory and binding limit before anything is allocated. An [`Engine`] steps them
    /// together; a [`Session`] uses the first.
    pub sequences: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            context: None,
            kv: KvType::default(),
            routing: Overrides::default(),
            ubatch: None,
            allow_past_trained_context: false,
            sequences: 1,
        }
    }
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
        if self.sequences == 0 {
            return Err(Error::Setting {
                setting: "LoadOptions::sequences",
                value: "0".into(),
                expected: "must be at least 1 sequence".into(),
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

/// Where a decode step's token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The host supplies the id (prompt tokens, sampled tokens, teacher forcing).
    Token(u32),
    /// The id the previous step's argmax left in the token buffer (greedy decode).
    Previous,
}

/// A planned matrix on the device: its weights, and the pipelines of its matvec and
/// matmul, each made on its first dispatch.
struct Matrix {
    plan: PlannedMatrix,
    parts: Vec<Slice>,
    /// A dot4 route's batch queue (shared by all of them).
    queue: Option<Slice>,
    matvec: OnceLock<PipelineId>,
    matmul: OnceLock<PipelineId>,
    /// An unpacked matmul's three (the weights' unpacking, x's, the multiply): a
    /// batch's, and a decode step's rows' (`PlannedMatrix::decode_unpacked`).
    unpacked: OnceLock<[PipelineId; 3]>,
    decode_unpacked: OnceLock<[PipelineId; 3]>,
    /// The decode columns' (`PlannedMatrix::decode_columns`): the narrow tile's and
    /// the wide one's.
    columns: [OnceLock<PipelineId>; 2],
}

/// One transformer block's weights and KV cache.
struct Layer {
    attn_norm: Slice,
    /// Writes [q; k; v] into one buffer: one matrix when the three tensors share a type
    /// and their outputs can sit back to back, else three.
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
    /// Writes [gate; up] into one buffer, likewise.
    gate_up: Vec<Matrix>,
    down: Matrix,
    /// Every sequence's keys, a region of `Model::cache_region` bytes each.
    k_cache: Slice,
    /// Every sequence's values, likewise.
    v_cache: Slice,
}

/// The attention pipelines of a decode step and of a batch, each made on first use.
#[derive(Default)]
struct AttentionPipelineCells {
    decode: OnceLock<AttentionPipelines>,
    prefill: OnceLock<PrefillPipelines>,
}

/// The model's weights on the device.
struct Weights {
    embed: Vec<EmbedPart>,
    layers: Vec<Layer>,
    output_norm: Slice,
    output: Matrix,
}

/// A model's weights on a device, with its KV cache and its forward pass:
/// [`step`](Model::step) and [`forward`](Model::forward) run one token at a position,
/// [`prefill`](Model::prefill) a prompt's tokens in batches. It has no tokenizer;
/// [`Session`] pairs it with one and tracks the position.
///
/// # Examples
///
/// Greedy decoding by hand: the prompt but its last token into the KV cache in
/// batches, then a decode step per token, each leaving its greedy id where the next
/// step reads it ([`Input::Previous`]).
///
/// ```no_run
/// use std::sync::Arc;
///
/// use brass::device::{AdapterChoice, WgpuDevice};
/// use brass::gguf::GgufFile;
/// use brass::model::{Input, LoadOptions, Model};
/// use brass::tokenizer::Tokenizer;
///
/// # fn main() -> brass::Result<()> {
/// let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// let file = GgufFile::open(brass::hub::default_model_path()?)?;
/// let tokenizer = Tokenizer::from_gguf(&file)?;
/// let model = Model::from_gguf(device, &file, &LoadOptions::default())?;
///
/// let prompt = tokenizer.encode("The capital of France is", true, false);
/// let (&last, rest) = prompt.split_last().expect("a prompt of at least one token");
/// model.prefill(rest, 0)?;
/// let mut pos = rest.len();
/// let mut ids = vec![model.forward(Input::Token(last), pos)?];
/// for _ in 0..7 {
///     pos += 1;
///     ids.push(model.forward(Input::Previous, pos)?);
/// }
/// println!("{}", tokenizer.decode(&ids, true)?);
/// # Ok(())
/// # }
/// ```
pub struct Model {
    device: Arc<dyn Device>,
    config: Config,
    /// What was uploaded, and how each op runs.
    plan: Plan,
    weights: Weights,
    ops: Ops,
    /// A decode step's buffers (made at load).
    step: layout::StepBuffers,
    /// A prefill batch's buffers, made at the first batch.
    batch: Mutex<Option<layout::BatchBuffers>>,
    /// The attention pipelines of a decode step and of a batch, each made on first use.
    attention: AttentionPipelineCells,
    /// The decode columns' span sum (`matmul/span_sum`), made on first use where they
    /// sum K in spans.
    span_sum: OnceLock<PipelineId>,
    n_ctx: usize,
    /// Bytes of one sequence's region of a layer's K (or V) cache: its `n_ctx`
    /// positions, rounded up to where a binding may start.
    cache_region: u64,
    /// Positions of one sequence's region: `n_ctx`, or a few more where that rounds
    /// the region to where a binding may start. Sequence s's rows start at row
    /// `s * cache_positions` of the cache.
    cache_positions: u64,
    /// The layers' distinct attention windows, in layer order: a decode pass's row
    /// table has a block of rows for each.
    windows: Vec<Option<u64>>,
    /// Keeps every pipeline the model uses alive and deduplicated, and destroys them
    /// when the model is dropped.
    pipelines: PipelineCache,
    /// Every buffer above but the batch's: freed when the model is dropped.
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

impl Model {
    /// The model's hyperparameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The device it is loaded on.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The dispatch audit of this model's pipelines: the device's ledger, less what
    /// others created on the same device (another model, a load that failed half way,
    /// a bandwidth probe). Pipelines are made by the first pass that dispatches them, so
    /// one made and never dispatched (`LedgerReport::defects`) is a defect whichever
    /// phases (decode steps, prompt batches, prompt logits) ran.
    pub fn audit(&self) -> LedgerReport {
        let mine: std::collections::HashSet<u32> =
            self.pipelines.ids().into_iter().map(|id| id.0).collect();
        let mut report = self.device.ledger();
        report.entries.retain(|e| mine.contains(&e.pipeline));
        report
    }

    /// Positions the KV cache holds, per sequence.
    pub fn context(&self) -> usize {
        self.n_ctx
    }

    /// Sequences the KV cache holds a region for
    /// ([`LoadOptions::sequences`]).
    pub fn sequences(&self) -> usize {
        self.plan.sequences
    }

    /// Sequence `seq`'s cache regions, each layer's K then its V in layer order: what
    /// a fork copies and a saved sequence holds.
    fn cache_regions(&self, seq: usize) -> impl Iterator<Item = Slice> + '_ {
        self.weights.layers.iter().flat_map(move |l| {
            let (k, v) = self.cache_of(l, seq);
            [k, v]
        })
    }

    /// Layer `l`'s K and V cache regions of sequence `seq`.
    fn cache_of(&self, l: &Layer, seq: usize) -> (Slice, Slice) {
        let bytes = self.plan.attention.launch().cache_bytes().max(4);
        let region =
            |s: Slice| Slice::new(s.buffer, s.offset + seq as u64 * self.cache_region, bytes);
        (region(l.k_cache), region(l.v_cache))
    }

    /// The plan this model was loaded from: every matrix and its routes, in
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
}
