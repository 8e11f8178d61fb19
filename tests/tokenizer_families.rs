//! Tokenizer parity with llama.cpp on the real Qwen2.5-Coder-1.5B and Gemma-3-270M files,
//! and their chat templates.
//!
//! The files come through the known-model registry (`KnownModel::cached_path`): fetched
//! into the brass cache on first use, as `.ci/run` does before the tests, and verified
//! by size and SHA-256. Only the tokenizer is read from them (`tests/families.rs` runs
//! the qwen2 model; gemma3's forward pass is not in brass yet).
//!
//! The cases are `tests/reference/{qwen2,gemma3}_tokenizer_cases.json` (llama.cpp's
//! `llama_tokenize`, add_special and parse_special on); the chat prompts are the ones
//! the decode references in the same folder were made with (its README quotes them).

mod common;

use std::sync::OnceLock;

use brass::gguf::GgufFile;
use brass::hub::KnownModel;
use brass::tokenizer::{ChatMessage, PreTokenizer, TokenType, Tokenizer, TokenizerModel};

const QWEN: &str = "qwen2.5-coder-1.5b";
const GEMMA: &str = "gemma3-270m";

fn load(name: &str) -> Tokenizer {
    let path = KnownModel::by_name(name)
        .and_then(KnownModel::cached_path)
        .unwrap_or_else(|e| panic!("{name}: {e} (.ci/run fetches it: decode --model {name})"));
    let file = GgufFile::open(&path).unwrap();
    Tokenizer::from_gguf(&file).unwrap()
}

fn qwen() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| load(QWEN))
}

fn gemma() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| load(GEMMA))
}

#[test]
fn qwen2_matches_llama_cpp_on_all_reference_cases() {
    let tok = qwen();
    for (text, ids) in common::assert_tokenizer_parity(tok, "qwen2_tokenizer_cases.json", 50) {
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
}

#[test]
fn gemma3_matches_llama_cpp_on_all_reference_cases() {
    let tok = gemma();
    for (text, ids) in common::assert_tokenizer_parity(tok, "gemma3_tokenizer_cases.json", 50) {
        assert_eq!(ids[0], 2, "BOS first");
        assert_eq!(tok.decode(&ids[1..], false).unwrap(), text);
    }
}

#[test]
fn qwen2_metadata() {
    let tok = qwen();
    assert_eq!(tok.model(), TokenizerModel::Bpe);
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Qwen2));
    assert_eq!(tok.vocab_size(), 151_936);
    assert!(!tok.adds_bos());
    assert_eq!(tok.token_id("<|im_start|>"), Some(151_644));
    assert_eq!(tok.token_type(151_644), Some(TokenType::Control));
    assert!(tok.is_eog(151_645), "<|im_end|> ends generation");
}

#[test]
fn gemma3_metadata() {
    let tok = gemma();
    assert_eq!(tok.model(), TokenizerModel::SentencePiece);
    assert_eq!(tok.vocab_size(), 262_144);
    assert!(tok.adds_bos());
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.token_id("<start_of_turn>"), Some(105));
    assert_eq!(tok.token_type(105), Some(TokenType::Control));
    assert!(tok.is_eog(106), "<end_of_turn> ends generation");
    // Byte fallback: every byte has its token.
    assert!((0..=255).all(|b| tok.token_id(&format!("<0x{b:02X}>")).is_some()));
}

#[test]
fn qwen2_chat_template_gives_the_reference_prompt() {
    let tok = qwen();
    let messages = [
        ChatMessage::system("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
        ChatMessage::user("Write a Python function that checks whether a number is prime."),
    ];
    let prompt = tok.apply_chat_template(&messages, true).unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
         assistant.<|im_end|>\n<|im_start|>user\nWrite a Python function that checks whether \
         a number is prime.<|im_end|>\n<|im_start|>assistant\n"
    );
    let expected =
        common::token_ids(&common::reference_json("qwen2_prime_llamacpp.json")["prompt_ids"]);
    assert_eq!(tok.encode_chat(&prompt), expected);
    assert_eq!(
        expected,
        common::token_ids(&common::reference_json("qwen2_prime_f64.json")["prompt_ids"])
    );
    // Without a system message the template supplies Qwen's own.
    let default_system = tok.apply_chat_template(&messages[1..], true).unwrap();
    assert_eq!(default_system, prompt);
}

/// The file has no `tokenizer.chat_template` (Gemma-3-270M is a base model): its turn
/// tokens select Gemma's format.
#[test]
fn gemma3_chat_template_gives_the_reference_prompt() {
    let tok = gemma();
    let user = ChatMessage::user("Write a short poem about the sea.");
    let prompt = tok
        .apply_chat_template(std::slice::from_ref(&user), true)
        .unwrap();
    assert_eq!(
        prompt,
        "<bos><start_of_turn>user\nWrite a short poem about the sea.<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    // The template writes BOS itself, and the file asks for one: one BOS, not two.
    let expected =
        common::token_ids(&common::reference_json("gemma3_poem_llamacpp.json")["prompt_ids"]);
    assert_eq!(tok.encode_chat(&prompt), expected);
    // Gemma has no system turn: the template puts the system text before the first
    // user message.
    let with_system = tok
        .apply_chat_template(&[ChatMessage::system("Be brief."), user], true)
        .unwrap();
    assert_eq!(
        with_system,
        "<bos><start_of_turn>user\nBe brief.\n\nWrite a short poem about the sea.\
         <end_of_turn>\n<start_of_turn>model\n"
    );
}
