//! Any byte string, read as a GGUF file: the tokenizer it describes, if any, must load
//! or fail with an error, never panic; a tokenizer that loads must encode and decode a
//! fixed text, and render its chat template (`tokenizer.chat_template`) for a short
//! conversation the way `Session::chat` does, returning `Ok` or `Err` within bounded
//! time and memory.

#![no_main]

use brass::gguf::GgufFile;
use brass::tokenizer::{ChatMessage, Tokenizer};
use libfuzzer_sys::fuzz_target;

/// Plain words, spaces, digits, punctuation, multi-byte characters, and special-token
/// spellings that a vocabulary may contain.
const TEXT: &str =
    "Hello world! 123  tabs\tand\nlines <s></s><|im_start|>user<|im_end|> héllo 日本 🦀";

/// Encodes `text`; every id must be in the vocabulary, so decoding must succeed, whole
/// and one token at a time.
fn round_trip(tok: &Tokenizer, text: &str, add_special: bool, parse_special: bool) -> u64 {
    let ids = tok.encode(text, add_special, parse_special);
    for &id in &ids {
        assert!(
            (id as usize) < tok.vocab_size(),
            "id {id} out of vocabulary"
        );
    }
    let mut sum = ids.len() as u64;
    for skip_special in [false, true] {
        let decoded = tok
            .decode(&ids, skip_special)
            .expect("decode of encoded ids");
        sum = sum.wrapping_add(decoded.len() as u64);
        let mut stream = tok.stream_decoder(skip_special);
        for &id in &ids {
            sum = sum.wrapping_add(stream.push(id).expect("stream decode").len() as u64);
        }
        sum = sum.wrapping_add(stream.finish().len() as u64);
    }
    sum
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(tok) = Tokenizer::from_gguf(&file) else {
        return;
    };
    // The input's length picks the flags, so that each run does one encode and one
    // render, and the fuzzer still reaches every combination.
    let bits = data.len();
    let mut sum = round_trip(&tok, TEXT, bits & 1 != 0, bits & 2 != 0);
    sum = sum.wrapping_add(tok.eog_ids().len() as u64);

    let messages = [
        ChatMessage::system("Be brief."),
        ChatMessage::user("Hi <|im_start|> there"),
    ];
    if let Ok(prompt) = tok.apply_chat_template(&messages, bits & 4 != 0) {
        // As Session::chat does: the prompt is encoded with special tokens. A template
        // may render up to about a megabyte; the first few KiB exercise the encoder.
        let mut end = prompt.len().min(4096);
        while !prompt.is_char_boundary(end) {
            end -= 1;
        }
        sum = sum.wrapping_add(round_trip(&tok, &prompt[..end], true, true));
    }
    std::hint::black_box(sum);
});
