//! Text ↔ token ids, with exact parity with llama.cpp for the vocabularies GGUF files carry.
//!
//! - [`TokenizerData`] is the tokenizer as plain data (the `tokenizer.*` metadata);
//!   [`TokenizerData::from_gguf`] reads it from a file.
//! - [`Tokenizer`] is built from it and encodes ([`Tokenizer::encode`]), decodes
//!   ([`Tokenizer::decode`], [`TokenStreamDecoder`]) and renders chat templates
//!   ([`Tokenizer::apply_chat_template`]).
//!
//! Two algorithms exist: GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`:
//! SmolLM2, Llama 3, Qwen2, ...) with llama.cpp's per-model pre-tokenizers
//! ([`PreTokenizer`]), and SentencePiece BPE (`"llama"`: Llama 2, Mistral, TinyLlama).
//!
//! Encoding follows llama.cpp's `llama_tokenize`: special tokens are cut out of the text
//! first (longest text first, like `tokenizer_st_partition`), then each remaining
//! stretch of text is tokenized on its own.

mod bpe;
mod chat;
mod decode;
mod metadata;
mod pretokenize;
mod spm;
mod unicode;

use std::collections::HashMap;
use std::fmt;

pub use chat::{render_chat_template, ChatMessage};
pub use decode::TokenStreamDecoder;
pub use pretokenize::PreTokenizer;

use crate::{Error, Result};

/// Which tokenization algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerModel {
    /// `"gpt2"`: byte-level BPE with ranked merges.
    Bpe,
    /// `"llama"`: SentencePiece BPE with scored pieces and `<0xXX>` byte fallback.
    SentencePiece,
}

impl TokenizerModel {
    /// The model for a `tokenizer.ggml.model` value, if brass implements it.
    pub fn from_gguf_name(name: &str) -> Option<TokenizerModel> {
        match name {
            "gpt2" => Some(TokenizerModel::Bpe),
            "llama" => Some(TokenizerModel::SentencePiece),
            _ => None,
        }
    }
}

/// A token's type (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// No type given (0), or a number llama.cpp does not define; decodes to nothing.
    Undefined,
    /// An ordinary piece of text.
    Normal,
    /// The unknown token (`<unk>`): SPM's fallback for a byte it has no token for.
    Unknown,
    /// A special token such as `<|im_start|>`: parsed out of text only when asked to,
    /// skippable when decoding.
    Control,
    /// Added by the model's authors; always parsed out of text and always rendered.
    UserDefined,
    /// Reserved and unused; decodes to nothing.
    Unused,
    /// An SPM `<0xXX>` byte-fallback token.
    Byte,
}

impl TokenType {
    /// llama.cpp's numbering; unknown numbers are [`TokenType::Undefined`].
    pub fn from_i32(value: i32) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// A tokenizer as plain data, one field per `tokenizer.*` GGUF key. Optional settings are
/// `None` when the file does not have them; [`Tokenizer::new`] then applies llama.cpp's
/// defaults for the model and pre-tokenizer.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizerData {
    /// `tokenizer.ggml.model`
    pub model: TokenizerModel,
    /// `tokenizer.ggml.pre` (BPE only; empty means llama.cpp's default pre-tokenizer).
    pub pre: String,
    /// `tokenizer.ggml.tokens`
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` (empty: every token is normal).
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores` (empty: all zero; SPM merges by these).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.merges`, `"left right"` in rank order (BPE).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SPM: prepend a space to the text).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`
    pub chat_template: Option<String>,
}

impl TokenizerData {
    /// A byte-level BPE vocabulary with everything optional left unset.
    pub fn bpe(tokens: Vec<String>, merges: Vec<String>, pre: impl Into<String>) -> TokenizerData {
        TokenizerData {
            merges,
            pre: pre.into(),
            ..TokenizerData::empty(TokenizerModel::Bpe, tokens)
        }
    }

    /// A SentencePiece vocabulary with everything optional left unset.
    pub fn sentencepiece(tokens: Vec<String>, scores: Vec<f32>) -> TokenizerData {
        TokenizerData {
            scores,
            ..TokenizerData::empty(TokenizerModel::SentencePiece, tokens)
        }
    }

    fn empty(model: TokenizerModel, tokens: Vec<String>) -> TokenizerData {
        TokenizerData {
            model,
            pre: String::new(),
            tokens,
            token_types: Vec::new(),
            scores: Vec::new(),
            merges: Vec::new(),
            bos: None,
            eos: None,
            unk: None,
            add_bos: None,
            add_eos: None,
            add_space_prefix: None,
            chat_template: None,
        }
    }
}

/// Boxed: both hold 256-entry byte tables.
enum Algorithm {
    Bpe {
        pre: PreTokenizer,
        bpe: Box<bpe::Bpe>,
    },
    Spm(Box<spm::Spm>),
}

/// Texts that end generation, after llama.cpp's `special_eog_ids` heuristic (GGUF has
/// no key for them). Like llama.cpp, such tokens are treated as control tokens even if
/// the file types them otherwise.
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// A ready tokenizer. Cheap to share by reference; encoding and decoding take `&self`.
pub struct Tokenizer {
    model: TokenizerModel,
    tokens: Vec<String>,
    types: Vec<TokenType>,
    scores: Vec<f32>,
    token_to_id: HashMap<String, u32>,
    algorithm: Algorithm,
    pieces: decode::Pieces,
    /// Control, user-defined and unknown-type tokens, longest text first: the order in
    /// which they are cut out of the text.
    special: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: Vec<u32>,
    chat_template: Option<String>,
}

/// A stretch of input after special tokens are cut out.
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

impl Tokenizer {
    /// Builds a tokenizer. Errors name the GGUF key of the offending field
    /// ([`Error::Metadata`]): too few token types or scores, duplicate tokens, an
    /// unsupported pre-tokenizer, or `add_bos` / `add_eos` without the token id. Special
    /// token ids outside the vocabulary are ignored, as llama.cpp does.
    pub fn new(data: TokenizerData) -> Result<Tokenizer> {
        let n = data.tokens.len();
        let meta = |key: &str, what: String| Error::Metadata {
            key: key.to_owned(),
            what,
        };
        if n == 0 || n > u32::MAX as usize {
            return Err(meta("tokenizer.ggml.tokens", format!("{n} tokens")));
        }
        if !data.token_types.is_empty() && data.token_types.len() < n {
            let what = format!("{} entries for {n} tokens", data.token_types.len());
            return Err(meta("tokenizer.ggml.token_type", what));
        }
        if !data.scores.is_empty() && data.scores.len() < n {
            return Err(meta(
                "tokenizer.ggml.scores",
                format!("{} entries for {n} tokens", data.scores.len()),
            ));
        }

        let mut token_to_id = HashMap::with_capacity(n);
        for (id, text) in data.tokens.iter().enumerate() {
            // An empty token can never match; llama.cpp renames it, brass leaves it out.
            if text.is_empty() {
                continue;
            }
            if let Some(first) = token_to_id.insert(text.clone(), id as u32) {
                return Err(meta(
                    "tokenizer.ggml.tokens",
                    format!("duplicate token {text:?} (ids {first} and {id})"),
                ));
            }
        }

        let mut types: Vec<TokenType> = if data.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            data.token_types[..n]
                .iter()
                .map(|&t| TokenType::from_i32(t))
                .collect()
        };
        let in_vocab = |id: Option<u32>| id.filter(|&id| (id as usize) < n);
        let (bos, eos, unk) = match data.model {
            // llama.cpp's defaults for SPM files that omit the ids.
            TokenizerModel::SentencePiece => (
                in_vocab(data.bos.or(Some(1))),
                in_vocab(data.eos.or(Some(2))),
                in_vocab(data.unk.or(Some(0))),
            ),
            TokenizerModel::Bpe => (in_vocab(data.bos), in_vocab(data.eos), in_vocab(data.unk)),
        };

        let mut eog: Vec<u32> = END_OF_GENERATION_TEXTS
            .iter()
            .filter_map(|t| token_to_id.get(*t).copied())
            .collect();
        for &id in &eog {
            types[id as usize] = TokenType::Control;
        }
        eog.extend(eos);
        eog.sort_unstable();
        eog.dedup();

        let (algorithm, add_bos_default, add_space_prefix) = match data.model {
            TokenizerModel::Bpe => {
                let pre = PreTokenizer::from_name(&data.pre).ok_or_else(|| {
                    meta(
                        "tokenizer.ggml.pre",
                        format!("pre-tokenizer {:?} is not supported", data.pre),
                    )
                })?;
                let llama3 = PreTokenizer::is_llama3_family(&data.pre);
                let bpe = Box::new(bpe::Bpe::new(&token_to_id, n as u32, &data.merges, llama3));
                (Algorithm::Bpe { pre, bpe }, llama3, false)
            }
            TokenizerModel::SentencePiece => (
                Algorithm::Spm(Box::new(spm::Spm::new(&token_to_id, unk))),
                true,
                data.add_space_prefix.unwrap_or(true),
            ),
        };
        let add_bos = data.add_bos.unwrap_or(add_bos_default);
        let add_eos = data.add_eos.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(meta(
                "tokenizer.ggml.add_bos_token",
                "true, but there is no valid bos_token_id".into(),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(meta(
                "tokenizer.ggml.add_eos_token",
                "true, but there is no valid eos_token_id".into(),
            ));
        }

        let mut special: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                matches!(
                    types[id as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                ) && !data.tokens[id as usize].is_empty()
            })
            .collect();
        // Stable: among equal lengths the lower id is tried first.
        special.sort_by_key(|&id| std::cmp::Reverse(data.tokens[id as usize].len()));

        let pieces = decode::Pieces::build(data.model, &data.tokens, &types);
        let chat_template = data.chat_template.or_else(|| {
            chat::fallback_template(|text| token_to_id.contains_key(text)).map(String::from)
        });
        Ok(Tokenizer {
            model: data.model,
            tokens: data.tokens,
            types,
            scores: data.scores,
            token_to_id,
            algorithm,
            pieces,
            special,
            bos,
            eos,
            add_bos,
            add_eos,
            add_space_prefix,
            eog,
            chat_template,
        })
    }

    /// Reads the tokenizer of a GGUF file.
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Tokenizer> {
        Tokenizer::new(TokenizerData::from_gguf(file)?)
    }

    /// Tokenizes `text` like llama.cpp's `llama_tokenize(text, add_special, parse_special)`.
    ///
    /// - `add_special`: add BOS / EOS where the model asks for them
    ///   (`tokenizer.ggml.add_bos_token`, `add_eos_token`).
    /// - `parse_special`: text such as `<|im_start|>` becomes the control token rather
    ///   than being spelled out. User-defined tokens are recognized either way.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let fragments = self.partition(text, parse_special);
        match &self.algorithm {
            Algorithm::Bpe { pre, bpe } => {
                let mut words = Vec::new();
                let mut scratch = bpe::Scratch::default();
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(text) => {
                            words.clear();
                            pre.split_into(text, &mut words);
                            for word in &words {
                                bpe.encode_word(word, &self.token_to_id, &mut scratch, &mut out);
                            }
                        }
                    }
                }
            }
            Algorithm::Spm(spm) => {
                // SentencePiece prepends a space to the text, and llama.cpp does so again
                // after every special token.
                let mut after_special = true;
                let mut escaped = String::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                        Fragment::Text(text) => {
                            escaped.clear();
                            if self.add_space_prefix && after_special {
                                escaped.push('\u{2581}');
                            }
                            escaped.extend(
                                text.chars().map(|c| if c == ' ' { '\u{2581}' } else { c }),
                            );
                            spm.encode(&escaped, &self.token_to_id, &self.scores, &mut out);
                            after_special = false;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// Tokenizes a prompt [`Tokenizer::apply_chat_template`] rendered: special tokens
    /// parsed and BOS / EOS added as the model asks, except that a BOS the template wrote
    /// itself (Gemma's and Llama 3's do) is not doubled: the prompt starts with one, as
    /// llama.cpp's chat prompts do.
    pub fn encode_chat(&self, prompt: &str) -> Vec<u32> {
        let mut ids = self.encode(prompt, true, true);
        if let Some(bos) = self.bos.filter(|_| self.add_bos) {
            if ids.starts_with(&[bos, bos]) && prompt.starts_with(&self.tokens[bos as usize]) {
                ids.remove(0);
            }
        }
        ids
    }

    /// Cuts special tokens out of `text`, longest token text first, so that e.g.
    /// `<|im_start|>` wins over any shorter special token inside it.
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text(text));
        for &id in &self.special {
            let needle = self.tokens[id as usize].as_str();
            if !parse_special && self.types[id as usize] != TokenType::UserDefined {
                continue;
            }
            if !fragments
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(needle)))
            {
                continue;
            }
            let mut split = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    split.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(needle) {
                    if at > 0 {
                        split.push(Fragment::Text(&rest[..at]));
                    }
                    split.push(Fragment::Token(id));
                    rest = &rest[at + needle.len()..];
                }
                if !rest.is_empty() {
                    split.push(Fragment::Text(rest));
                }
            }
            fragments = split;
        }
        fragments
    }

    /// Renders the model's chat template (`tokenizer.chat_template`) for `messages`,
    /// ending with the assistant's turn header when `add_generation_prompt`. The result
    /// contains special-token text: encode it with [`Tokenizer::encode_chat`]. A file
    /// without a template whose vocabulary has Gemma's `<start_of_turn>` and
    /// `<end_of_turn>` gets Gemma's turn format.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| Error::Metadata {
                key: "tokenizer.chat_template".into(),
                what: "not present".into(),
            })?;
        let text = |id: Option<u32>| id.map_or("", |id| self.tokens[id as usize].as_str());
        render_chat_template(
            template,
            messages,
            add_generation_prompt,
            text(self.bos),
            text(self.eos),
        )
    }

    /// The tokenization algorithm.
    pub fn model(&self) -> TokenizerModel {
        self.model
    }

    /// The pre-tokenizer, for BPE vocabularies.
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match &self.algorithm {
            Algorithm::Bpe { pre, .. } => Some(*pre),
            Algorithm::Spm(_) => None,
        }
    }

    /// Tokens in the vocabulary; ids run from 0 to one below it.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The beginning-of-sequence token, where the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, where the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn adds_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generating `id` should end generation: EOS and the end-of-turn tokens
    /// llama.cpp recognizes by their text (`<|im_end|>`, `<|eot_id|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// The vocabulary entry of `id` as stored (BPE tokens in GPT-2's byte alphabet, SPM
    /// tokens with '▁').
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary entry, spelled as stored.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// The type of token `id`; `None` outside the vocabulary.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The model's Jinja chat template (`tokenizer.chat_template`), where the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model)
            .field("pre_tokenizer", &self.pre_tokenizer())
            .field("vocab_size", &self.tokens.len())
            .field("special_tokens", &self.special.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}
