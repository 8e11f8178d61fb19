//! The model's facts, read once from a GGUF file: its family (what llama's forward pass
//! gains per architecture), hyperparameters, and which tensor each weight is.

use crate::gguf::GgufFile;
use crate::kernels::attention::{Heads, RopeStyle};
use crate::kernels::ops::Activation;
use crate::{Error, Result};

/// The hyperparameters of a llama-architecture model, from GGUF metadata.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Config {
    /// `general.architecture`: `llama`, `qwen2`, `qwen3` or `gemma3` ([`FAMILIES`]).
    pub architecture: String,
    /// Transformer blocks (`block_count`).
    pub n_layers: usize,
    /// The model's width: values per token of the residual stream (`embedding_length`).
    pub dim: usize,
    /// The feed-forward width (`feed_forward_length`).
    pub ffn_dim: usize,
    /// Query heads (`attention.head_count`).
    pub n_heads: usize,
    /// Key and value heads (`attention.head_count_kv`, default `n_heads`); divides
    /// `n_heads`.
    pub n_kv_heads: usize,
    /// Values per head (`attention.key_length`, default `dim / n_heads`); even.
    pub head_dim: usize,
    /// Dimensions of each head that RoPE rotates (`rope.dimension_count`).
    pub rope_dim: usize,
    /// RoPE's base (`rope.freq_base`, default 10,000).
    pub rope_base: f64,
    /// Positions are multiplied by this before RoPE (1 / `rope.scaling.factor`, linear
    /// scaling), on every layer but a sliding window's local ones.
    pub rope_position_scale: f64,
    /// The RMS norms' epsilon (`attention.layer_norm_rms_epsilon`, default 1e-5).
    pub eps: f32,
    /// Tokens in the vocabulary: rows of the token embedding and of the lm-head.
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
    /// Whether `layer` (from 0) attends within the window rather than to every position.
    pub fn is_local(&self, layer: usize) -> bool {
        layer % self.pattern < self.pattern - 1
    }
}

/// An architecture brass runs: llama's forward pass, with what the family changes, and
/// the tensors its files have for it. [`FAMILIES`] is the table; the model reads it
/// ([`Config`]), and so does the synthetic writer ([`crate::gguf::synthetic`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Family {
    /// `general.architecture`, and the prefix of the family's metadata keys.
    pub architecture: &'static str,
    /// Which of a head's values RoPE rotates together.
    pub rope: RopeStyle,
    /// The Q, K and V projections add a bias (`blk.N.attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
    /// Each head of q and k is RMS-normalized before RoPE
    /// (`blk.N.attn_{q,k}_norm.weight`).
    pub qk_norm: bool,
    /// The attention and FFN outputs are RMS-normalized before their residual adds
    /// (`blk.N.post_attention_norm.weight`, `blk.N.post_ffw_norm.weight`).
    pub post_norms: bool,
    /// The gated FFN's activation.
    pub activation: Activation,
    /// Embeddings scaled by sqrt(dim).
    pub embed_scaled: bool,
    /// Every model of the family ties its lm-head to the token embedding: its files
    /// have no `output.weight` (Gemma 3). In the other families it depends on the model
    /// (SmolLM2 ties, Qwen2.5-Coder-1.5B does not), and the file says: [`output_tensor`].
    pub tied_embeddings: bool,
    /// Which layers a sliding window (`attention.sliding_window`, where the file sets
    /// one) makes local.
    pub swa: Swa,
}

/// Where a family's sliding window applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swa {
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
    tied_embeddings: false,
    swa: Swa::AllLayers,
};

/// Every family brass runs, llama's first.
pub const FAMILIES: &[Family] = &[
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
    // after attention and the FFN as well as before, GeGLU, the lm-head tied to the
    // embeddings, and five local (sliding-window) layers to every global one. The
    // GGUF's norm weights already hold Gemma's 1 + w.
    Family {
        architecture: "gemma3",
        rope: RopeStyle::Neox,
        qk_norm: true,
        post_norms: true,
        activation: Activation::GeluTanh,
        embed_scaled: true,
        tied_embeddings: true,
        swa: Swa::Pattern(6),
        ..LLAMA
    },
];

impl Family {
    /// The family whose `general.architecture` is `architecture`; one brass does not run
    /// is an error naming those it does.
    pub fn by_architecture(architecture: &str) -> Result<&'static Family> {
        FAMILIES
            .iter()
            .find(|f| f.architecture == architecture)
            .ok_or_else(|| {
                let known: Vec<_> = FAMILIES.iter().map(|f| f.architecture).collect();
                Error::Invalid(format!(
                    "unsupported architecture `{architecture}`: brass runs {}",
                    known.join(", ")
                ))
            })
    }
}

impl Config {
    /// Reads the hyperparameters of `file`'s architecture. [`Error::Invalid`] for an
    /// architecture brass does not run; [`Error::Metadata`] naming the key for one that is
    /// missing, of the wrong type, or inconsistent with the others (heads that do not
    /// divide the width, an odd head size).
    pub fn from_gguf(file: &GgufFile) -> Result<Config> {
        let arch = file.architecture()?.to_string();
        let family = Family::by_architecture(&arch)?;
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

    /// Values per position of one layer's K cache (and V cache): `n_kv_heads * head_dim`.
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

/// The lm-head's tensor: `output.weight`, or where the file has none (tied
/// embeddings, as Gemma's), the token embedding, which doubles as the lm-head.
pub fn output_tensor(file: &GgufFile) -> &'static str {
    if file.tensor("output.weight").is_some() {
        "output.weight"
    } else {
        "token_embd.weight"
    }
}
