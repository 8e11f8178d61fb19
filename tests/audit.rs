//! The dispatch audit holds on every kind of run: a pipeline the model made and never
//! dispatched is a defect, whichever phases ran. A model makes each pipeline on the
//! first pass that dispatches it, so a run that never batches a prompt holds no batch
//! pipeline, and one that batches holds none it does not run. The cases: a one-token
//! prompt, a long prompt (several batches and a remainder of one token), decode steps
//! only, a prompt's logits, and a chat continued over several calls.

mod common;

use std::sync::Arc;

use brass::device::{Device, LedgerReport};
use brass::gguf::GgufFile;
use brass::model::{Input, LoadOptions, Model, Session};
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::{ChatMessage, Tokenizer, TokenizerData};

/// The two-layer synthetic Q4_K_M model of `tests/reference`, prompts in batches of 16.
fn model() -> Model {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(96),
        ubatch: Some(16),
        ..LoadOptions::default()
    };
    let path = common::reference_path("synkq_q4_k_m.gguf");
    Model::load(device, &path, &options).unwrap()
}

fn ids(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 997 + 13) % 8192).collect()
}

/// The audit has no defect; returns its pipelines' names.
fn clean(what: &str, audit: LedgerReport) -> Vec<String> {
    assert!(audit.defects().is_empty(), "{what}:\n{audit}");
    assert!(audit.total_dispatches() > 0, "{what}: nothing ran");
    audit.entries.into_iter().map(|e| e.name).collect()
}

fn batched(names: &[String]) -> bool {
    names
        .iter()
        .any(|n| n.starts_with("matmul/") || n.starts_with("attention/prefill"))
}

/// A one-token prompt is a decode step: no batch pipeline is made.
#[test]
fn a_one_token_prompt_makes_no_batch_pipeline() {
    let model = model();
    let prompt = ids(1);
    let (last, rest) = prompt.split_last().unwrap();
    model.prefill(rest, 0).unwrap();
    let mut next = model.forward(Input::Token(*last), 0).unwrap();
    for pos in 1..4 {
        next = model.forward(Input::Token(next), pos).unwrap();
    }
    let names = clean("one-token prompt", model.audit());
    assert!(!batched(&names), "{names:?}");
}

/// A prompt of 41 tokens: batches of 16, 16 and 8 (the last token is the decode
/// step's), and decode after it. Then a one-token prefill, which is a decode step's
/// pass too.
#[test]
fn a_long_prompt_dispatches_every_pipeline_it_makes() {
    let model = model();
    let prompt = ids(41);
    let (last, rest) = prompt.split_last().unwrap();
    model.prefill(rest, 0).unwrap();
    let mut next = model.forward(Input::Token(*last), rest.len()).unwrap();
    for pos in prompt.len()..prompt.len() + 3 {
        next = model.forward(Input::Token(next), pos).unwrap();
    }
    model.prefill(&[next], prompt.len() + 3).unwrap();
    let names = clean("long prompt", model.audit());
    assert!(batched(&names), "{names:?}");
}

/// Decode steps alone make no batch pipeline.
#[test]
fn decode_only_makes_no_batch_pipeline() {
    let model = model();
    for (pos, id) in ids(6).into_iter().enumerate() {
        model.forward_logits(Input::Token(id), pos).unwrap();
    }
    let names = clean("decode only", model.audit());
    assert!(!batched(&names), "{names:?}");
}

/// A prompt's logits: batches through every layer and the lm-head's matmul, the last
/// position a decode step.
#[test]
fn prompt_logits_dispatch_every_pipeline_they_make() {
    let model = model();
    let mut positions = 0;
    model
        .prefill_logits(&ids(20), 0, |_, _| {
            positions += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(positions, 20);
    let names = clean("prompt logits", model.audit());
    assert!(batched(&names), "{names:?}");
}

/// A chat continued over three calls (each feeding what the cache lacks), on a
/// session of the same model with a chat template.
#[test]
fn a_chat_continued_over_several_calls_is_clean() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    let file = GgufFile::open(&path).unwrap();
    let mut data = TokenizerData::from_gguf(&file).unwrap();
    data.chat_template = Some(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}assistant:{% endif %}"
            .into(),
    );
    let options = LoadOptions {
        context: Some(256),
        ubatch: Some(16),
        ..LoadOptions::default()
    };
    let model = Model::from_gguf(Arc::new(common::gpu()), &file, &options).unwrap();
    let mut session = Session::new(model, Tokenizer::new(data).unwrap()).unwrap();
    let mut messages = vec![ChatMessage::user("a first question, long enough to batch")];
    for turn in 0..3 {
        let greedy = Sampler::new(SamplerConfig::greedy());
        let reply: Vec<u32> = session
            .chat(&messages, 3, greedy)
            .unwrap()
            .map(|t| t.unwrap().id)
            .collect();
        let text = session.tokenizer().decode(&reply, false).unwrap();
        messages.push(ChatMessage::assistant(text));
        messages.push(ChatMessage::user(format!("question {turn}, and one more")));
        clean(&format!("chat turn {turn}"), session.model().audit());
    }
}
