//! Reading [`TokenizerData`] from a GGUF file's `tokenizer.*` keys.

use super::{TokenizerData, TokenizerModel};
use crate::gguf::{GgufFile, MetaArray, MetaValue};
use crate::{Error, Result};

impl TokenizerData {
    /// Reads the tokenizer metadata. Required: `tokenizer.ggml.model` (`gpt2` or
    /// `llama`), `tokenizer.ggml.tokens`, and for `gpt2` `tokenizer.ggml.merges`. Every
    /// other key is optional, but present with the wrong type is an error.
    pub fn from_gguf(file: &GgufFile) -> Result<TokenizerData> {
        let model_name = file.get_str("tokenizer.ggml.model")?;
        let model = TokenizerModel::from_gguf_name(model_name).ok_or_else(|| Error::Metadata {
            key: "tokenizer.ggml.model".into(),
            what: format!(
                "tokenizer {model_name:?} is not supported (brass has \"gpt2\" and \"llama\")"
            ),
        })?;

        let strings = |key: &str, array: &MetaArray| -> Result<Vec<String>> {
            let strs = array
                .as_strs()
                .ok_or_else(|| wrong_type(key, "an array of strings"))?;
            Ok(strs.into_iter().map(str::to_owned).collect())
        };
        let tokens = strings(
            "tokenizer.ggml.tokens",
            file.get_array("tokenizer.ggml.tokens")?,
        )?;
        let merges = match model {
            TokenizerModel::Bpe => strings(
                "tokenizer.ggml.merges",
                file.get_array("tokenizer.ggml.merges")?,
            )?,
            TokenizerModel::SentencePiece => match optional(
                file,
                "tokenizer.ggml.merges",
                "an array",
                MetaValue::as_array,
            )? {
                Some(array) => strings("tokenizer.ggml.merges", array)?,
                None => Vec::new(),
            },
        };

        let token_types = match optional(
            file,
            "tokenizer.ggml.token_type",
            "an array",
            MetaValue::as_array,
        )? {
            Some(array) => array
                .as_i32s()
                .ok_or_else(|| wrong_type("tokenizer.ggml.token_type", "an array of integers"))?,
            None => Vec::new(),
        };
        // llama.cpp accepts integer scores too.
        let scores = match optional(
            file,
            "tokenizer.ggml.scores",
            "an array",
            MetaValue::as_array,
        )? {
            Some(array) => array
                .as_f32s()
                .or_else(|| {
                    array
                        .as_i32s()
                        .map(|v| v.into_iter().map(|s| s as f32).collect())
                })
                .ok_or_else(|| wrong_type("tokenizer.ggml.scores", "an array of numbers"))?,
            None => Vec::new(),
        };

        let id = |key| optional(file, key, "a token id (u32)", MetaValue::as_u32);
        let flag = |key| optional(file, key, "a BOOL", MetaValue::as_bool);
        Ok(TokenizerData {
            model,
            pre: optional(file, "tokenizer.ggml.pre", "a STRING", MetaValue::as_str)?
                .unwrap_or_default()
                .to_owned(),
            tokens,
            token_types,
            scores,
            merges,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            chat_template: optional(
                file,
                "tokenizer.chat_template",
                "a STRING",
                MetaValue::as_str,
            )?
            .map(str::to_owned),
        })
    }
}

/// An optional key: absent is `None`, present with the wrong type is an error.
fn optional<'a, T>(
    file: &'a GgufFile,
    key: &str,
    expected: &str,
    convert: impl FnOnce(&'a MetaValue) -> Option<T>,
) -> Result<Option<T>> {
    match file.get(key) {
        None => Ok(None),
        Some(value) => convert(value)
            .map(Some)
            .ok_or_else(|| wrong_type(key, expected)),
    }
}

fn wrong_type(key: &str, expected: &str) -> Error {
    Error::Metadata {
        key: key.to_owned(),
        what: format!("expected {expected}"),
    }
}
