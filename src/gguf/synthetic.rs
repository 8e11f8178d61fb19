//! Synthetic models: the tensor table and metadata of a real model shape, filled
//! with random (but valid) quantized blocks, so decode can be benchmarked at shapes whose
//! real weights are not at hand (a 30B-class model, a 12,288-wide one). The architecture
//! is llama's, or one of the families brass runs ([`Arch`]: qwen2, qwen3, gemma3), with
//! the tensors and metadata keys llama.cpp loads for it.
//!
//! The weights mean nothing, so the generated text is noise; what matters is that every
//! tensor has the type and shape the real model would have, which is all a decode step's
//! timing depends on. Files are streamed to disk tensor by tensor
//! ([`GgufBuilder::write_streaming`]): an 8B model never sits in memory.
//!
//! ```no_run
//! use brass::gguf::synthetic::{write_synthetic, SyntheticSpec};
//!
//! let mut spec = SyntheticSpec::preset("llama3-8b").unwrap();
//! spec.layers = 2; // a quick run
//! write_synthetic(&spec, "/tmp/llama3-8b-2l.gguf", |done, total| {
//!     eprint!("\r{done}/{total} bytes");
//! })?;
//! # Ok::<(), brass::Error>(())
//! ```

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;

use super::GgufBuilder;
use crate::kernels::attention::{Heads, RopeStyle};
use crate::model::{Family, Swa, FAMILIES};
use crate::quant::{random_blocks, GgmlType};
use crate::{Error, Result};

/// How a model's tensors are quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantMix {
    /// llama.cpp's `Q4_K_M`: Q4_K everywhere (token embedding included) except Q6_K for
    /// the lm-head and for `attn_v` / `ffn_down` in the layers llama.cpp's
    /// `use_more_bits` picks (the first and last eighth, and every third in between:
    /// half of them).
    Q4KM,
    /// One type for every matrix and the token embedding.
    Single(GgmlType),
}

impl fmt::Display for QuantMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantMix::Q4KM => f.write_str("Q4_K_M"),
            QuantMix::Single(ty) => f.write_str(ty.name()),
        }
    }
}

impl FromStr for QuantMix {
    type Err = Error;

    /// `q4_k_m`, or any single type name (`q8_0`, `Q4_K`, `f16`), case-insensitive.
    fn from_str(s: &str) -> Result<QuantMix> {
        if s.eq_ignore_ascii_case("q4_k_m") {
            return Ok(QuantMix::Q4KM);
        }
        GgmlType::from_name(s)
            .filter(|ty| ty.can_dequantize())
            .map(QuantMix::Single)
            .ok_or_else(|| Error::Invalid(format!("unknown quant mix `{s}` (q4_k_m or a type)")))
    }
}

/// The architecture a synthetic file declares (`general.architecture`): a row of the
/// family table ([`FAMILIES`], [`Arch::family`]), whose facts decide the metadata prefix
/// and the tensors each layer has beyond llama's:
///
/// | arch | extra tensors per layer | other |
/// |---|---|---|
/// | `llama` | none | |
/// | `qwen2` | `attn_{q,k,v}.bias` (F32; `qkv_bias`) | |
/// | `qwen3` | `attn_{q,k}_norm.weight` (F32, head size; `qk_norm`) | |
/// | `gemma3` | `attn_{q,k}_norm.weight`, `post_attention_norm.weight`, `post_ffw_norm.weight` (`post_norms`) | no `output.weight` (`tied_embeddings`) |
///
/// Outside llama, the F32 tensors are random rather than llama's all-ones norms, so
/// that tests see them: norm weights in [0.75, 1.25), biases in [-1, 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arch {
    /// llama (SmolLM2, Llama 3): the base the others add to.
    #[default]
    Llama,
    /// qwen2 (Qwen 2.5): biases on q, k and v.
    Qwen2,
    /// qwen3: per-head norms on q and k.
    Qwen3,
    /// gemma3: per-head norms, post-norms, tied embeddings and local layers.
    Gemma3,
}

impl Arch {
    /// Every architecture, in the order of [`FAMILIES`].
    pub const ALL: [Arch; 4] = [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3];

    /// Its row of the family table.
    pub fn family(self) -> &'static Family {
        &FAMILIES[self as usize]
    }

    /// The `general.architecture` value and metadata prefix.
    pub fn name(self) -> &'static str {
        self.family().architecture
    }
}

// One variant per family, in the table's order.
const _: () = assert!(Arch::ALL.len() == FAMILIES.len());

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = Error;

    fn from_str(s: &str) -> Result<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
                let (last, rest) = names.split_last().expect("families");
                Error::Invalid(format!(
                    "unknown architecture `{s}` ({} or {last})",
                    rest.join(", ")
                ))
            })
    }
}

/// Gemma 3's local attention (`gemma3.attention.sliding_window` and the keys around it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyntheticWindow {
    /// Positions a local layer's query sees, its own included.
    pub window: u64,
    /// Every `pattern`-th layer is global (`attention.sliding_window_pattern`); `None`
    /// writes no key, and llama.cpp and brass take Gemma 3's 6.
    pub pattern: Option<u64>,
    /// RoPE's base on the local layers (`rope.freq_base_swa`).
    pub rope_base: f32,
}

/// A model shape. Head size is `hidden / heads` unless `head_dim` says otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// `general.name`, and the file-name stem tools use.
    pub name: String,
    /// The model's width (`embedding_length`).
    pub hidden: u64,
    /// The feed-forward width (`feed_forward_length`).
    pub ffn: u64,
    /// Transformer blocks (`block_count`), at most [`MAX_LAYERS`].
    pub layers: u64,
    /// Query heads (`attention.head_count`); `hidden` must be a multiple of it.
    pub heads: u64,
    /// Key and value heads (`attention.head_count_kv`); `heads` must be a multiple of it.
    pub kv_heads: u64,
    /// Tokens in the vocabulary, at most [`MAX_VOCAB`]; rows of the token embedding and
    /// the lm-head.
    pub vocab: u64,
    /// The context the model declares it was trained for (`context_length`), in positions.
    pub context: u64,
    /// RoPE's base (`rope.freq_base`).
    pub rope_base: f32,
    /// How the matrices and the token embedding are quantized.
    pub mix: QuantMix,
    /// Overrides the mix's type for the lm-head (`output.weight`).
    pub lm_head: Option<GgmlType>,
    /// Seeds the random weights; the same spec and seed give the same file.
    pub seed: u64,
    /// The family whose metadata and tensors the file has.
    pub arch: Arch,
    /// The head size where it is not `hidden / heads` (Gemma 3: 256 on 2,560 / 8):
    /// written as `attention.key_length` and `attention.value_length`.
    pub head_dim: Option<u64>,
    /// Gemma 3's local layers; only gemma3 takes one.
    pub sliding_window: Option<SyntheticWindow>,
}

/// Bounds that refuse a mistyped shape (`--layers 18446744073709551615`) at once, where
/// building its tensor table or vocabulary would grow memory without end. Real models
/// have at most a few hundred layers, vocabularies of up to about 260K tokens, and
/// (Llama-3.1-405B at F16) 0.8 TB of tensors.
///
/// This one is the most layers [`SyntheticSpec::layers`] may have.
pub const MAX_LAYERS: u64 = 1 << 16;
/// The most tokens [`SyntheticSpec::vocab`] may have (see [`MAX_LAYERS`]).
pub const MAX_VOCAB: u64 = 1 << 20;
/// The most bytes of tensors a synthetic file may have, all together (1 TiB; see
/// [`MAX_LAYERS`]).
pub const MAX_TENSOR_BYTES: u64 = 1 << 40;

/// The names [`SyntheticSpec::preset`] accepts.
pub const PRESETS: [&str; 10] = [
    "smollm2-135m",
    "llama3.2-1b",
    "llama3-8b",
    "muse-30b",
    "hidden-12288",
    "qwen3-8b",
    "qwen2.5-7b",
    "gemma3-4b",
    "qwen2.5-1.5b",
    "gemma3-270m",
];

impl SyntheticSpec {
    /// A named model shape, Q4_K_M:
    ///
    /// | preset | hidden | FFN | layers | heads | KV heads | vocab |
    /// |---|---|---|---|---|---|---|
    /// | `smollm2-135m` | 576 | 1,536 | 30 | 9 | 3 | 49,152 |
    /// | `llama3.2-1b` | 2,048 | 8,192 | 16 | 32 | 8 | 128,256 |
    /// | `llama3-8b` | 4,096 | 14,336 | 32 | 32 | 8 | 128,256 |
    /// | `muse-30b` | 6,656 | 17,920 | 60 | 52 | 4 | 202,048 |
    /// | `hidden-12288` | 12,288 | 49,152 | 4 | 96 | 8 | 128,256 |
    /// | `qwen3-8b` | 4,096 | 12,288 | 36 | 32 | 8 | 151,936 |
    /// | `qwen2.5-7b` | 3,584 | 18,944 | 28 | 28 | 4 | 152,064 |
    /// | `gemma3-4b` | 2,560 | 10,240 | 34 | 8 (of 256) | 4 | 262,144 |
    /// | `qwen2.5-1.5b` | 1,536 | 8,960 | 28 | 12 | 2 | 151,936 |
    /// | `gemma3-270m` | 640 | 2,048 | 18 | 4 (of 256) | 1 | 262,144 |
    ///
    /// `llama3.2-1b` sits between the two in matrix size (its lm-head is written apart,
    /// where Llama-3.2-1B ties it to the embeddings). `muse-30b` is a 30B-class shape (about 29.9 B parameters) built around the two
    /// figures brass must handle without shape caps: hidden size 6,656 (LLaMA-30B's) and
    /// a 202,048-token vocabulary with a Q5_K lm-head. Its 52 heads of 128 share 4 KV
    /// heads (GQA needs a divisor of 52; 4 keeps the KV cache small as 8 would on a
    /// power-of-two head count). `hidden-12288` stands in for a 70B-and-up width; it has
    /// only 4 layers by default so it fits anywhere, set `layers` for more.
    ///
    /// The family presets have their models' architecture and metadata: `qwen3-8b`
    /// (Qwen3-8B: q/k norms, context 40,960, RoPE base 10^6), `qwen2.5-7b` (Qwen2.5-7B:
    /// Q/K/V biases, context 32,768, base 10^6) and `gemma3-4b` (Gemma 3 4B's shape:
    /// heads of 256, q/k norms and post-norms, lm-head tied to the embeddings, context
    /// 131,072, a 1,024-position window on five layers of six with RoPE base 10,000
    /// there and 10^6 on the global ones). llama.cpp's Gemma 3 4B file also sets
    /// `rope.scaling.factor` 8 (linear, the global layers' positions), which brass
    /// refuses today, so this file leaves that key out: it runs on brass, and its
    /// global layers' RoPE is not the real model's. `qwen2.5-1.5b` and `gemma3-270m`
    /// have the shapes, tensor types and metadata of the two real files brass fetches
    /// (`decode --model qwen2.5-coder-1.5b | gemma3-270m`), for devices those files
    /// cannot be copied to; gemma3-270m's tied table is Q8_0 as in the real file.
    pub fn preset(name: &str) -> Result<SyntheticSpec> {
        let spec = |hidden, ffn, layers, heads, kv_heads, vocab| SyntheticSpec {
            name: name.to_string(),
            hidden,
            ffn,
            layers,
            heads,
            kv_heads,
            vocab,
            context: 8192,
            rope_base: 500_000.0,
            mix: QuantMix::Q4KM,
            lm_head: None,
            seed: 0x5eed,
            arch: Arch::Llama,
            head_dim: None,
            sliding_window: None,
        };
        Ok(match name {
            "smollm2-135m" => SyntheticSpec {
                context: 8192,
                rope_base: 100_000.0,
                ..spec(576, 1536, 30, 9, 3, 49_152)
            },
            "llama3.2-1b" => spec(2048, 8192, 16, 32, 8, 128_256),
            "llama3-8b" => spec(4096, 14_336, 32, 32, 8, 128_256),
            "muse-30b" => SyntheticSpec {
                lm_head: Some(GgmlType::Q5_K),
                ..spec(6656, 17_920, 60, 52, 4, 202_048)
            },
            "hidden-12288" => spec(12_288, 4 * 12_288, 4, 96, 8, 128_256),
            "qwen3-8b" => SyntheticSpec {
                context: 40_960,
                rope_base: 1e6,
                arch: Arch::Qwen3,
                ..spec(4096, 12_288, 36, 32, 8, 151_936)
            },
            "qwen2.5-7b" => SyntheticSpec {
                context: 32_768,
                rope_base: 1e6,
                arch: Arch::Qwen2,
                ..spec(3584, 18_944, 28, 28, 4, 152_064)
            },
            "gemma3-4b" => SyntheticSpec {
                context: 131_072,
                rope_base: 1e6,
                arch: Arch::Gemma3,
                head_dim: Some(256),
                sliding_window: Some(SyntheticWindow {
                    window: 1024,
                    pattern: None,
                    rope_base: 10_000.0,
                }),
                ..spec(2560, 10_240, 34, 8, 4, 262_144)
            },
            "qwen2.5-1.5b" => SyntheticSpec {
                context: 32_768,
                rope_base: 1e6,
                arch: Arch::Qwen2,
                ..spec(1536, 8960, 28, 12, 2, 151_936)
            },
            "gemma3-270m" => SyntheticSpec {
                context: 32_768,
                rope_base: 1e6,
                arch: Arch::Gemma3,
                head_dim: Some(256),
                sliding_window: Some(SyntheticWindow {
                    window: 512,
                    pattern: None,
                    rope_base: 10_000.0,
                }),
                ..spec(640, 2048, 18, 4, 1, 262_144)
            },
            _ => {
                return Err(Error::Invalid(format!(
                    "unknown synthetic preset `{name}` (one of {})",
                    PRESETS.join(", ")
                )))
            }
        })
    }

    /// The first preset whose name starts with `prefix` (`llama3` for `llama3-8b`).
    pub fn preset_by_prefix(prefix: &str) -> Result<SyntheticSpec> {
        let name = PRESETS
            .iter()
            .find(|p| p.starts_with(prefix))
            .ok_or_else(|| {
                Error::Invalid(format!("no synthetic preset `{prefix}`: {PRESETS:?}"))
            })?;
        Self::preset(name)
    }

    /// The head size: `head_dim` where set, else `hidden / heads`.
    pub fn head_dim(&self) -> u64 {
        self.head_dim.unwrap_or(self.hidden / self.heads.max(1))
    }

    /// The heads decode attention reads, RoPE over the whole head in the normal style
    /// (attention reads the cache alike whatever the style; the append differs).
    pub fn attention_heads(&self) -> Heads {
        let head_dim = self.head_dim();
        Heads {
            n_heads: self.heads,
            n_kv_heads: self.kv_heads,
            head_dim,
            rope_dim: head_dim,
            rope: RopeStyle::Normal,
        }
    }

    /// The distinct matvec shapes of this model's decode step, as (matrix, M, K):
    /// the shape catalog the router tests and `benches/matvec.rs` share.
    pub fn matvec_shapes(&self) -> [(&'static str, u64, u64); 5] {
        let (h, f) = (self.hidden, self.ffn);
        [
            ("attn_q", self.heads * self.head_dim(), h),
            ("attn_k", self.kv_heads * self.head_dim(), h),
            ("ffn_up", f, h),
            ("ffn_down", h, f),
            ("lm_head", self.vocab, h),
        ]
    }

    /// Every tensor in file order (llama.cpp's): `(name, type, dims)`, dims in ggml
    /// order (`dims[0]` is the row length).
    pub fn tensors(&self) -> Vec<(String, GgmlType, Vec<u64>)> {
        let (h, f) = (self.hidden, self.ffn);
        let kv = self.kv_heads * self.head_dim();
        let q = self.heads * self.head_dim();
        let family = self.arch.family();
        let mut out = vec![(
            "token_embd.weight".to_string(),
            // A tied table is the lm-head too, and llama.cpp's quantizer types it so.
            self.matrix_type(
                match family.tied_embeddings {
                    true => Role::Output,
                    false => Role::TokenEmbd,
                },
                h,
            ),
            vec![h, self.vocab],
        )];
        for i in 0..self.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let more_bits = use_more_bits(i, self.layers);
            let m = |role, cols| self.matrix_type(role, cols);
            let f32 = |s: &str, len| (n(s), GgmlType::F32, vec![len]);
            let bias = |s: &str, len| (format!("blk.{i}.{s}.bias"), GgmlType::F32, vec![len]);
            let qkv_bias = family.qkv_bias;
            out.push(f32("attn_norm", h));
            out.push((n("attn_q"), m(Role::Plain, h), vec![h, q]));
            out.extend(qkv_bias.then(|| bias("attn_q", q)));
            out.push((n("attn_k"), m(Role::Plain, h), vec![h, kv]));
            out.extend(qkv_bias.then(|| bias("attn_k", kv)));
            out.push((n("attn_v"), m(Role::MoreBits(more_bits), h), vec![h, kv]));
            out.extend(qkv_bias.then(|| bias("attn_v", kv)));
            if family.qk_norm {
                out.push(f32("attn_q_norm", self.head_dim()));
                out.push(f32("attn_k_norm", self.head_dim()));
            }
            out.push((n("attn_output"), m(Role::Plain, q), vec![q, h]));
            out.extend(family.post_norms.then(|| f32("post_attention_norm", h)));
            out.extend([
                f32("ffn_norm", h),
                (n("ffn_gate"), m(Role::Plain, h), vec![h, f]),
                (n("ffn_up"), m(Role::Plain, h), vec![h, f]),
                (n("ffn_down"), m(Role::MoreBits(more_bits), f), vec![f, h]),
            ]);
            out.extend(family.post_norms.then(|| f32("post_ffw_norm", h)));
        }
        out.push(("output_norm.weight".into(), GgmlType::F32, vec![h]));
        // A tied family's lm-head is the token embedding (`crate::model::output_tensor`).
        if !family.tied_embeddings {
            out.push((
                "output.weight".into(),
                self.matrix_type(Role::Output, h),
                vec![h, self.vocab],
            ));
        }
        out
    }

    /// Bytes of tensor data (the file is this plus its header and padding), counted with
    /// checked arithmetic after the spec's checks: a shape past [`MAX_LAYERS`],
    /// [`MAX_VOCAB`] or [`MAX_TENSOR_BYTES`] is refused with its numbers.
    pub fn tensor_bytes(&self) -> Result<u64> {
        self.check()?;
        let mut total = 0u64;
        for (name, ty, dims) in self.tensors() {
            let bytes = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .and_then(|n| ty.bytes_for(n));
            total = bytes.and_then(|b| total.checked_add(b)).ok_or_else(|| {
                Error::Invalid(format!(
                    "synthetic `{}`: tensor {name} ({ty:?}, dims {dims:?}) takes the total past \
                     2^64 bytes",
                    self.name
                ))
            })?;
        }
        if total > MAX_TENSOR_BYTES {
            return Err(Error::Invalid(format!(
                "synthetic `{}`: {total} bytes of tensors ({} layers) exceed the bound of \
                 {MAX_TENSOR_BYTES} (1 TiB)",
                self.name, self.layers
            )));
        }
        Ok(total)
    }

    /// The type of a matrix whose rows are `cols` long, falling back like llama.cpp's
    /// quantizer when the type's block does not divide the row (K-quants need 256; e.g.
    /// SmolLM2's 576).
    fn matrix_type(&self, role: Role, cols: u64) -> GgmlType {
        let ty = match (self.mix, role) {
            (_, Role::Output) if self.lm_head.is_some() => self.lm_head.unwrap(),
            (QuantMix::Q4KM, Role::Output | Role::MoreBits(true)) => GgmlType::Q6_K,
            (QuantMix::Q4KM, _) => GgmlType::Q4_K,
            (QuantMix::Single(ty), _) => ty,
        };
        if cols.is_multiple_of(ty.block_size() as u64) {
            return ty;
        }
        // llama.cpp's `llama_tensor_get_type` fallbacks for rows that are not a whole
        // number of 256-value super-blocks.
        match ty {
            GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
            GgmlType::Q4_K => GgmlType::Q5_0,
            GgmlType::Q5_K => GgmlType::Q5_1,
            GgmlType::Q6_K => GgmlType::Q8_0,
            _ => GgmlType::F16,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Invalid(format!("synthetic `{}`: {what}", self.name)));
        if self.hidden == 0 || self.ffn == 0 || self.layers == 0 || self.vocab == 0 {
            return bad("hidden, ffn, layers and vocab must be nonzero".into());
        }
        // Before anything builds the tensor table or vocabulary, whose sizes these are.
        if self.layers > MAX_LAYERS {
            return bad(format!(
                "{} layers exceed the bound of {MAX_LAYERS}",
                self.layers
            ));
        }
        if self.vocab > MAX_VOCAB {
            return bad(format!(
                "vocab {} exceeds the bound of {MAX_VOCAB}",
                self.vocab
            ));
        }
        if self.head_dim == Some(0) {
            return bad("head size 0".into());
        }
        if let Some(w) = self.sliding_window {
            match self.arch.family().swa {
                // Local layers in a pattern (Gemma 3): any window.
                Swa::Pattern(_) => {}
                // llama's window (Mistral's) takes every layer; the Qwen files have none.
                Swa::AllLayers if self.arch != Arch::Llama => {
                    return bad(format!(
                        "{} takes no sliding window (gemma3 and llama, as Mistral, do)",
                        self.arch
                    ))
                }
                Swa::AllLayers if w.pattern.is_some() => {
                    return bad("a llama (Mistral) window takes every layer: no pattern".into())
                }
                Swa::AllLayers => {}
            }
            if w.window == 0 || w.pattern == Some(0) {
                return bad("sliding window and its pattern must be nonzero".into());
            }
        }
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return bad(format!(
                "{} heads do not divide {}",
                self.heads, self.hidden
            ));
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} KV heads do not divide {} heads",
                self.kv_heads, self.heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return bad(format!("head size {} is odd (RoPE)", self.head_dim()));
        }
        if self.vocab < MIN_VOCAB {
            return bad(format!(
                "vocab {} is below {MIN_VOCAB} (bytes + EOS)",
                self.vocab
            ));
        }
        Ok(())
    }

    /// The builder with all metadata and every tensor deferred.
    pub fn builder(&self) -> Result<GgufBuilder> {
        self.tensor_bytes()?;
        let mut b = GgufBuilder::new();
        let u32_of = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| Error::Invalid(format!("{what} {v} exceeds u32")))
        };
        let arch = self.arch.name();
        let k = |key: &str| format!("{arch}.{key}");
        b.set("general.architecture", arch)
            .set("general.name", self.name.as_str())
            .set(
                "general.description",
                format!("brass synthetic model, {} (random weights)", self.mix).as_str(),
            )
            .set(k("block_count"), u32_of(self.layers, "layers")?)
            .set(k("context_length"), u32_of(self.context, "context")?)
            .set(k("embedding_length"), u32_of(self.hidden, "hidden")?)
            .set(k("feed_forward_length"), u32_of(self.ffn, "ffn")?)
            .set(k("attention.head_count"), u32_of(self.heads, "heads")?)
            .set(
                k("attention.head_count_kv"),
                u32_of(self.kv_heads, "kv_heads")?,
            );
        // llama.cpp's gemma3 files state the head size whatever it is.
        if self.head_dim.is_some() || self.arch == Arch::Gemma3 {
            let head = u32_of(self.head_dim(), "head size")?;
            b.set(k("attention.key_length"), head)
                .set(k("attention.value_length"), head);
        }
        if let Some(w) = self.sliding_window {
            b.set(
                k("attention.sliding_window"),
                u32_of(w.window, "sliding window")?,
            );
            // Local layers with a RoPE base of their own.
            if matches!(self.arch.family().swa, Swa::Pattern(_)) {
                b.set(k("rope.freq_base_swa"), w.rope_base);
            }
            if let Some(pattern) = w.pattern {
                b.set(
                    k("attention.sliding_window_pattern"),
                    u32_of(pattern, "sliding window pattern")?,
                );
            }
        }
        // llama's files say 1e-5; Qwen2/3's and Gemma 3's 1e-6.
        let eps = if self.arch == Arch::Llama {
            1e-5f32
        } else {
            1e-6
        };
        b.set(k("rope.freq_base"), self.rope_base)
            .set(
                k("rope.dimension_count"),
                u32_of(self.head_dim(), "head size")?,
            )
            .set(k("attention.layer_norm_rms_epsilon"), eps)
            .set(k("vocab_size"), u32_of(self.vocab, "vocab")?);
        let vocab = synthetic_vocab(self.vocab as usize);
        b.set("tokenizer.ggml.model", "gpt2")
            .set("tokenizer.ggml.pre", "default")
            .set_array(
                "tokenizer.ggml.tokens",
                vocab.tokens.iter().map(String::as_str).collect::<Vec<_>>(),
            )
            .set_array("tokenizer.ggml.token_type", vocab.types)
            .set_array(
                "tokenizer.ggml.merges",
                vocab.merges.iter().map(String::as_str).collect::<Vec<_>>(),
            )
            .set("tokenizer.ggml.bos_token_id", EOS_ID)
            .set("tokenizer.ggml.eos_token_id", EOS_ID)
            .set("tokenizer.ggml.add_bos_token", false);
        for (name, ty, dims) in self.tensors() {
            b.add_tensor_deferred(name, ty, &dims)?;
        }
        Ok(b)
    }
}

#[derive(Clone, Copy)]
enum Role {
    TokenEmbd,
    Plain,
    /// `attn_v` / `ffn_down`: Q6_K in Q4_K_M when `use_more_bits` says so.
    MoreBits(bool),
    Output,
}

/// llama.cpp's `use_more_bits(i_layer, n_layers)`.
fn use_more_bits(i: u64, n: u64) -> bool {
    // `i - n / 8` cannot underflow: the first clause took every smaller i.
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `<|endoftext|>`, right after the 256 byte tokens: BOS and EOS.
const EOS_ID: u32 = 256;
const MIN_VOCAB: u64 = 257;

struct Vocab {
    tokens: Vec<String>,
    types: Vec<i32>,
    merges: Vec<String>,
}

/// A byte-level BPE vocabulary of exactly `n` tokens: the 256 byte tokens in GPT-2's
/// byte-to-unicode spelling (so any text encodes), `<|endoftext|>`, two-letter merges
/// (`Ġt`, `th`, ... so English text makes some merged tokens), and `<|synthetic_N|>`
/// fillers typed *unused* (llama.cpp type 5), which keeps them out of special-token
/// matching: a 200K vocabulary of control tokens would make every encode scan them all.
fn synthetic_vocab(n: usize) -> Vocab {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut types = vec![1i32; 256];
    tokens.push("<|endoftext|>".into());
    types.push(3);
    let firsts = std::iter::once('Ġ').chain('a'..='z');
    let pairs = firsts.flat_map(|a| ('a'..='z').map(move |b| (a, b)));
    let mut merges = Vec::new();
    for (a, b) in pairs.take(n.saturating_sub(tokens.len())) {
        merges.push(format!("{a} {b}"));
        tokens.push(format!("{a}{b}"));
        types.push(1);
    }
    let fillers = tokens.len()..n;
    tokens.extend(fillers.clone().map(|i| format!("<|synthetic_{i}|>")));
    types.extend(fillers.map(|_| 5));
    Vocab {
        tokens,
        types,
        merges,
    }
}

/// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the rest
/// (controls, space, ...) are shifted to U+0100 and up, in byte order.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + shifted).expect("below U+0200")
}

/// Blocks generated per `random_blocks` call: bounded memory (a few MB) whatever the
/// tensor size.
const CHUNK_BLOCKS: usize = 1 << 14;

/// Writes the model to `path`, calling `progress(bytes_written, file_size)` after each
/// chunk. The file is written beside `path` under a temporary name and renamed over it at
/// the end, so an interrupted run never leaves a truncated model behind; `path` must be
/// new or a regular file. Anything else there (a directory, a device node such as
/// `/dev/full`, a FIFO, a socket, and a symbolic link, whatever it points to) is refused
/// before anything is written and left as it was: a rename would replace the node or the
/// link itself, not write through it. Give a link's target path to write there.
pub fn write_synthetic(
    spec: &SyntheticSpec,
    path: impl AsRef<Path>,
    mut progress: impl FnMut(u64, u64),
) -> Result<()> {
    let path = path.as_ref();
    let builder = spec.builder()?;
    let total = builder.file_size();
    let tensors = spec.tensors();
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    check_output(path)?;
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not a file path", path.display())))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".partial-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    // create_new: never through a link or file someone left at the temporary name.
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let header = total - spec.tensor_bytes()?;
    let mut done = 0u64;
    let result = builder.write_streaming(&mut w, |index, out: &mut dyn Write| {
        let (name, ty, dims) = &tensors[index];
        let n_blocks = (dims.iter().product::<u64>() / ty.block_size() as u64) as usize;
        if *ty == GgmlType::F32 && spec.arch == Arch::Llama {
            // Norm weights: 1.0, as an untrained norm is.
            let ones: Vec<u8> = (0..n_blocks).flat_map(|_| 1f32.to_le_bytes()).collect();
            out.write_all(&ones)?;
            done += ones.len() as u64;
        } else if *ty == GgmlType::F32 {
            // The other families' norms and biases vary, so that a forward pass that
            // skipped or misplaced one would show.
            let mut rng = spec.seed ^ ((index as u64) << 32) ^ 0xf32;
            let (centre, spread) = if name.ends_with(".bias") {
                (0.0, 1.0)
            } else {
                (1.0, 0.25)
            };
            let values: Vec<u8> = (0..n_blocks)
                .flat_map(|_| (centre + spread * symmetric(&mut rng)).to_le_bytes())
                .collect();
            out.write_all(&values)?;
            done += values.len() as u64;
        } else {
            for (c, first) in (0..n_blocks).step_by(CHUNK_BLOCKS).enumerate() {
                let seed = spec.seed ^ ((index as u64) << 32) ^ c as u64;
                let data = random_blocks(*ty, CHUNK_BLOCKS.min(n_blocks - first), seed);
                out.write_all(&data)?;
                done += data.len() as u64;
                progress((header + done).min(total), total);
            }
        }
        progress((header + done).min(total), total);
        Ok(())
    });
    let result = result
        .and_then(|()| w.into_inner().map_err(io::IntoInnerError::into_error))
        .map_err(io_err(path))
        // Again: the write takes minutes, time enough for `path` to become something else.
        .and_then(|_| check_output(path))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io_err(path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    progress(total, total);
    Ok(())
}

/// A value in [-1, 1) from SplitMix64 state `s`.
fn symmetric(s: &mut u64) -> f32 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// `Ok` when `path` does not exist or is a regular file (not a link to one).
fn check_output(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(meta) if meta.is_file() => return Ok(()),
        Ok(meta) => meta,
    };
    let ft = meta.file_type();
    let what = if ft.is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        format!("a symbolic link (to {})", target.display())
    } else if ft.is_dir() {
        "a directory".into()
    } else {
        super::special_file_kind(&ft)
            .unwrap_or("a special file")
            .into()
    };
    Err(Error::Invalid(format!(
        "{} is {what}, not a regular file: refusing to replace it (write to a new path, \
         over a regular file, or to a link's target path)",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        assert_eq!(byte_char(b'A'), 'A');
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(0), '\u{100}');
        assert_eq!(byte_char(0xAD), '\u{143}');
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn each_arch_is_the_family_table_row_of_its_name() {
        for arch in Arch::ALL {
            assert_eq!(format!("{arch:?}").to_lowercase(), arch.name());
            assert_eq!(arch.name().parse::<Arch>().unwrap(), arch);
        }
        let err = "gpt2".parse::<Arch>().unwrap_err().to_string();
        assert!(err.contains("(llama, qwen2, qwen3 or gemma3)"), "{err}");
    }

    #[test]
    fn more_bits_is_half_of_32_layers() {
        assert_eq!((0..32).filter(|&i| use_more_bits(i, 32)).count(), 16);
    }

    #[test]
    fn vocab_has_the_requested_size() {
        for n in [257, 300, 1024, 49_152] {
            let v = synthetic_vocab(n);
            assert_eq!(v.tokens.len(), n);
            assert_eq!(v.types.len(), n);
        }
    }
}
