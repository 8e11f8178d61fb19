//! Token ids → text.
//!
//! Every token decodes to bytes, not text: a byte-level BPE token, or an SPM byte token,
//! can hold part of a multi-byte UTF-8 character. [`TokenStreamDecoder`] therefore holds
//! back an incomplete sequence until the token that completes it arrives.

use super::unicode::char_to_byte;
use super::{TokenType, Tokenizer, TokenizerModel};
use crate::{Error, Result};

/// The bytes every token decodes to, in one buffer (token `i` is
/// `bytes[ends[i - 1]..ends[i]]`), built once like llama.cpp's piece cache.
#[derive(Debug)]
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Pieces {
    pub fn build(model: TokenizerModel, tokens: &[String], types: &[TokenType]) -> Pieces {
        let mut bytes = Vec::with_capacity(tokens.iter().map(String::len).sum());
        let mut ends = Vec::with_capacity(tokens.len());
        for (text, &ty) in tokens.iter().zip(types) {
            match ty {
                // Special tokens render as their text; whether they render at all is
                // decided at decode time.
                TokenType::Control | TokenType::Unknown | TokenType::UserDefined => {
                    bytes.extend_from_slice(text.as_bytes())
                }
                TokenType::Normal => match model {
                    // Characters outside GPT-2's byte alphabet cannot come from
                    // encoding; they are kept as UTF-8 rather than dropped.
                    TokenizerModel::Bpe => {
                        for c in text.chars() {
                            match char_to_byte(c) {
                                Some(b) => bytes.push(b),
                                None => {
                                    bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes())
                                }
                            }
                        }
                    }
                    TokenizerModel::SentencePiece => {
                        bytes.extend_from_slice(text.replace('\u{2581}', " ").as_bytes())
                    }
                },
                TokenType::Byte => match parse_byte_token(text) {
                    Some(b) => bytes.push(b),
                    None => bytes.extend_from_slice(text.as_bytes()),
                },
                // llama.cpp renders unused and undefined tokens as nothing.
                TokenType::Unused | TokenType::Undefined => {}
            }
            ends.push(bytes.len());
        }
        Pieces { bytes, ends }
    }

    fn get(&self, id: u32) -> Option<&[u8]> {
        let id = id as usize;
        let end = *self.ends.get(id)?;
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        Some(&self.bytes[start..end])
    }
}

/// `<0xAB>` → 0xAB.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Tokenizer {
    /// The bytes token `id` decodes to. Control and unknown-type tokens give their text,
    /// or nothing when `skip_special`; user-defined tokens always give their text (as in
    /// llama.cpp). An id outside the vocabulary is an error.
    pub fn token_to_piece(&self, id: u32, skip_special: bool) -> Result<&[u8]> {
        let piece = self.pieces.get(id).ok_or_else(|| self.unknown_id(id))?;
        let special = matches!(
            self.types[id as usize],
            TokenType::Control | TokenType::Unknown
        );
        Ok(if skip_special && special { &[] } else { piece })
    }

    /// Decodes a whole sequence. Invalid or incomplete UTF-8 (e.g. a sequence cut in the
    /// middle of a character) becomes U+FFFD. An id outside the vocabulary is an error.
    ///
    /// With a SentencePiece vocabulary that prepends a space when encoding
    /// (`add_space_prefix`), the first piece that renders anything loses that leading
    /// space, as SentencePiece's own decoder does. (llama.cpp's `llama_detokenize` keeps
    /// it when a BOS comes first, even a skipped one.) Decode generated continuations
    /// with [`TokenStreamDecoder`], which never strips.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut decoder = self.stream_decoder(skip_special);
        let mut text = String::new();
        let mut strip_space = self.model == TokenizerModel::SentencePiece && self.add_space_prefix;
        for &id in ids {
            let piece = self.token_to_piece(id, skip_special)?;
            if strip_space && !piece.is_empty() {
                strip_space = false;
                if piece.first() == Some(&b' ') {
                    decoder.pending.extend_from_slice(&piece[1..]);
                    drain_utf8(&mut decoder.pending, &mut text, false);
                    continue;
                }
            }
            text.push_str(&decoder.push(id)?);
        }
        text.push_str(&decoder.finish());
        Ok(text)
    }

    /// A decoder for generated tokens, one at a time.
    pub fn stream_decoder(&self, skip_special: bool) -> TokenStreamDecoder<'_> {
        TokenStreamDecoder {
            tokenizer: self,
            skip_special,
            pending: Vec::new(),
        }
    }

    fn unknown_id(&self, id: u32) -> Error {
        Error::Invalid(format!(
            "token id {id} is outside the vocabulary ({} tokens)",
            self.tokens.len()
        ))
    }
}

/// Turns a stream of token ids into text as soon as it is valid UTF-8.
///
/// ```no_run
/// # fn demo(tokenizer: &brass::tokenizer::Tokenizer, generated: &[u32]) -> brass::Result<()> {
/// let mut stream = tokenizer.stream_decoder(true);
/// for &id in generated {
///     print!("{}", stream.push(id)?);
/// }
/// print!("{}", stream.finish());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TokenStreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    skip_special: bool,
    /// Bytes of an incomplete UTF-8 sequence waiting for the next token.
    pending: Vec<u8>,
}

impl TokenStreamDecoder<'_> {
    /// Adds one token and returns the text that became complete (possibly empty).
    /// Bytes that can never become valid UTF-8 come out as U+FFFD. An id outside the
    /// vocabulary is an error and leaves the decoder unchanged.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tokenizer.token_to_piece(id, self.skip_special)?;
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        drain_utf8(&mut self.pending, &mut out, false);
        Ok(out)
    }

    /// Ends the stream: a trailing incomplete sequence comes out as U+FFFD.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        drain_utf8(&mut self.pending, &mut out, true);
        out
    }

    /// Whether bytes are held back waiting for the rest of a character.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Moves the valid UTF-8 prefix of `pending` to `out`, replacing invalid bytes with
/// U+FFFD. An incomplete sequence at the end stays in `pending` unless `flush`.
fn drain_utf8(pending: &mut Vec<u8>, out: &mut String, flush: bool) {
    let mut rest: &[u8] = pending;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                rest = &[];
                break;
            }
            Err(e) => {
                let (valid, tail) = rest.split_at(e.valid_up_to());
                // `valid_up_to` guarantees this prefix is UTF-8; the default is never used.
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                match e.error_len() {
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &tail[bad..];
                    }
                    None if flush => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &[];
                        break;
                    }
                    None => {
                        rest = tail;
                        break;
                    }
                }
            }
        }
    }
    let keep = rest.len();
    let start = pending.len() - keep;
    pending.drain(..start);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_holds_back_incomplete_sequences() {
        let mut pending = "é".as_bytes()[..1].to_vec();
        let mut out = String::new();
        drain_utf8(&mut pending, &mut out, false);
        assert_eq!((out.as_str(), pending.len()), ("", 1));
        pending.push("é".as_bytes()[1]);
        pending.extend_from_slice(b"x\xFFy\xE4\xB8");
        drain_utf8(&mut pending, &mut out, false);
        assert_eq!(out, "éx\u{FFFD}y");
        assert_eq!(pending, b"\xE4\xB8");
        drain_utf8(&mut pending, &mut out, true);
        assert_eq!(out, "éx\u{FFFD}y\u{FFFD}");
        assert!(pending.is_empty());
    }

    #[test]
    fn byte_tokens() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x0A"), None);
        assert_eq!(parse_byte_token("<0x123>"), None);
    }
}
