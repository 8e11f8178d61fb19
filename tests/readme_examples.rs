//! The examples of the README ("Use it as a crate") and of the crate docs (`src/lib.rs`)
//! run as they are written, on the default model with greedy decoding, and print what
//! the docs say they print.
//!
//! Each example's prompt was chosen for margin: at every step of the text shown, the
//! chosen token's logit led the next by at least 1.18 (measured with `decode --json
//! --top-logits 3` on lavapipe at subgroup sizes 4, 8 and 16, and on the exact route,
//! `--force coop --kv-type f32`), where the int8 route's error against exact math is a
//! few tenths at worst (DESIGN.md: its top-1 is held where the exact gap is above 0.5),
//! so the text holds on GPUs too. The example before, "What is the capital of France?"
//! alone, led by 0.05 at its first token ("The" against "L"), and some machines
//! answered "L'Étoile, la Marseillaise, ...".

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::hub::default_model_path;
use brass::model::{Generate, LoadOptions, Session};
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::ChatMessage;

const README: &str = include_str!("../README.md");
const CRATE_DOCS: &str = include_str!("../src/lib.rs");
const ENGINE_DOCS: &str = include_str!("../src/model/engine.rs");

fn greedy() -> Sampler {
    Sampler::new(SamplerConfig::greedy())
}

fn session() -> Session {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    // As the examples load it: the default options, the default model.
    Session::load(
        device,
        default_model_path().unwrap(),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// What an example's loop prints: every token's text.
fn streamed(tokens: Generate) -> String {
    tokens.map(|t| t.unwrap().text).collect()
}

/// Fails unless `docs` holds each of `lines` (code the test runs, output it checks), so
/// that an edit of the docs that this test does not follow fails it.
fn assert_documented(docs: &str, what: &str, lines: &[&str]) {
    for line in lines {
        assert!(docs.contains(line), "{what} no longer contains:\n{line}");
    }
}

#[test]
fn the_readme_example_answers_as_the_readme_says() {
    assert_documented(
        README,
        "README.md",
        &[
            "use brass::hub::default_model_path;",
            r#"ChatMessage::system("You are a helpful assistant. Answer in one sentence."),"#,
            r#"ChatMessage::user("What is the capital of Japan?"),"#,
            "session.chat(&conversation, 32, Sampler::new(SamplerConfig::greedy()))",
            "```text\nThe capital of Japan is Tokyo.\n```",
        ],
    );
    let mut session = session();
    let conversation = [
        ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
        ChatMessage::user("What is the capital of Japan?"),
    ];
    let text = streamed(session.chat(&conversation, 32, greedy()).unwrap());
    assert_eq!(text, "The capital of Japan is Tokyo.");
}

#[test]
fn the_crate_docs_example_prints_what_they_say() {
    assert_documented(
        CRATE_DOCS,
        "src/lib.rs",
        &[
            "use brass::hub::default_model_path;",
            r#"session.generate("The capital of France is", 2, greedy())"#,
            r#"ChatMessage::system("You are a helpful assistant. Answer in one sentence."),"#,
            r#"ChatMessage::user("What is the capital of Japan?"),"#,
            "session.chat(&conversation, 32, greedy())",
            "//! ```text\n//!  Paris.\n//! The capital of Japan is Tokyo.\n//! ```",
        ],
    );
    let mut session = session();
    let completion = streamed(
        session
            .generate("The capital of France is", 2, greedy())
            .unwrap(),
    );
    assert_eq!(completion, " Paris.");
    let conversation = [
        ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
        ChatMessage::user("What is the capital of Japan?"),
    ];
    let answer = streamed(session.chat(&conversation, 32, greedy()).unwrap());
    assert_eq!(answer, "The capital of Japan is Tokyo.");
    // The stats line the example prints counts both calls: 2 tokens, then 7 and the
    // end of the turn (not counted).
    assert_eq!(session.stats().generated_tokens, 2 + 7);
}

#[test]
fn the_readme_engine_example_answers_as_the_readme_says() {
    use brass::model::{Engine, SequenceOptions};
    assert_documented(
        README,
        "README.md",
        &[
            "let options = LoadOptions { sequences: 2, ..LoadOptions::default() };",
            "let chat = tokenizer.encode_chat(&tokenizer.apply_chat_template(&conversation, true)?);",
            r#"let completion = tokenizer.encode("The capital of France is", true, false);"#,
            "let japan = engine.add(&chat, up_to(32))?;",
            "let france = engine.add(&completion, up_to(2))?;",
            "let reply = &engine.tokens(seq)?[prompt.len()..];",
            "```text\nJapan: \"The capital of Japan is Tokyo.\"\nFrance: \" Paris.\"\n```",
        ],
    );
    assert_documented(
        ENGINE_DOCS,
        "src/model/engine.rs",
        &[
            "/// let options = LoadOptions { sequences: 2, ..LoadOptions::default() };",
            "/// let japan = engine.add(&chat, up_to(32))?;",
            "/// let france = engine.add(&completion, up_to(2))?;",
            "///     let reply = &engine.tokens(seq)?[prompt.len()..];",
            "/// Japan: \"The capital of Japan is Tokyo.\"\n/// France: \" Paris.\"",
        ],
    );
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        sequences: 2,
        ..LoadOptions::default()
    };
    let mut engine = Engine::load(device, default_model_path().unwrap(), &options).unwrap();
    let tokenizer = engine.tokenizer();
    let conversation = [
        ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
        ChatMessage::user("What is the capital of Japan?"),
    ];
    let chat = tokenizer.encode_chat(&tokenizer.apply_chat_template(&conversation, true).unwrap());
    let completion = tokenizer.encode("The capital of France is", true, false);
    let up_to = |max_tokens| SequenceOptions {
        max_tokens,
        ..SequenceOptions::default()
    };
    let japan = engine.add(&chat, up_to(32)).unwrap();
    let france = engine.add(&completion, up_to(2)).unwrap();
    while engine.running() > 0 {
        engine.step().unwrap();
    }
    let mut printed = Vec::new();
    for (name, seq, prompt) in [("Japan", japan, &chat), ("France", france, &completion)] {
        let reply = &engine.tokens(seq).unwrap()[prompt.len()..];
        let text = engine.tokenizer().decode(reply, true).unwrap();
        printed.push(format!("{name}: {text:?}"));
    }
    assert_eq!(
        printed.join("\n"),
        "Japan: \"The capital of Japan is Tokyo.\"\nFrance: \" Paris.\""
    );
}
