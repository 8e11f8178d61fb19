//! `Session` on a small synthetic llama: its counts agree with the tokens it yields,
//! `chat` is the template rendered and generated, and prompt ids are checked.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
use brass::gguf::GgufFile;
use brass::model::{LoadOptions, Model, Session, Stats};
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::{ChatMessage, Tokenizer, TokenizerData};

const VOCAB: u64 = 512;
const CONTEXT: usize = 96;
const TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
                        {% if add_generation_prompt %}assistant:{% endif %}";

fn model_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let spec = SyntheticSpec {
            name: "session".into(),
            hidden: 256,
            ffn: 512,
            layers: 1,
            heads: 4,
            kv_heads: 2,
            vocab: VOCAB,
            context: CONTEXT as u64,
            rope_base: 10_000.0,
            mix: QuantMix::Q4KM,
            lm_head: None,
            seed: 11,
            arch: Arch::Llama,
            head_dim: None,
            sliding_window: None,
        };
        let path = std::env::temp_dir().join(format!("brass-session-{}.gguf", std::process::id()));
        write_synthetic(&spec, &path, |_, _| {}).unwrap();
        path
    })
}

/// The synthetic model with `TEMPLATE` as its chat template.
fn session() -> Session {
    let file = GgufFile::open(model_file()).unwrap();
    let mut data = TokenizerData::from_gguf(&file).unwrap();
    data.chat_template = Some(TEMPLATE.into());
    let options = LoadOptions {
        context: Some(CONTEXT),
        ..Default::default()
    };
    let model = Model::from_gguf(Arc::new(common::gpu()), &file, &options).unwrap();
    Session::new(model, Tokenizer::new(data).unwrap()).unwrap()
}

fn greedy() -> Sampler {
    Sampler::new(SamplerConfig::greedy())
}

fn ids_of(session: &mut Session, prompt: &[u32], max_tokens: usize, sampler: Sampler) -> Vec<u32> {
    let tokens = session.generate(prompt, max_tokens, sampler).unwrap();
    tokens.map(|t| t.unwrap().id).collect()
}

/// Steps after a call's first token: one per yielded token after it, and one more for
/// an end-of-generation token that stopped the stream early.
fn steps_after_first(yielded: usize, max_tokens: usize) -> usize {
    if yielded == max_tokens {
        yielded.saturating_sub(1)
    } else {
        yielded
    }
}

#[test]
fn stats_count_the_tokens_yielded_and_time_the_steps_after_the_first() {
    let mut session = session();
    let prompt = session.tokenizer().encode("the cat sat", false, false);
    let first = ids_of(&mut session, &prompt, 6, greedy());
    assert!(
        first.len() >= 2,
        "the test needs a stream of several tokens: {first:?}"
    );
    let s = session.stats().clone();
    assert_eq!(s.prompt_tokens, prompt.len());
    assert_eq!(s.generated_tokens, first.len());
    assert_eq!(s.decode_steps, steps_after_first(first.len(), 6));
    assert!(
        !s.time_to_first_token.is_zero() && !s.decode_time.is_zero(),
        "{s:?}"
    );
    assert!(s.decode_tokens_per_second().is_some() && s.prompt_tokens_per_second().is_some());

    // A second call, sampled on the CPU: its prompt is the unfed last token and the new
    // ids; the counts add up.
    let more = session.tokenizer().encode(" on", false, false);
    let sampled = Sampler::new(SamplerConfig {
        seed: 3,
        ..SamplerConfig::default()
    });
    let second = ids_of(&mut session, &more, 4, sampled);
    let t = session.stats();
    assert_eq!(t.prompt_tokens, s.prompt_tokens + 1 + more.len());
    assert_eq!(t.generated_tokens, first.len() + second.len());
    assert_eq!(
        t.decode_steps,
        s.decode_steps + steps_after_first(second.len(), 4)
    );

    // Nothing asked, nothing counted, no rates.
    session.reset();
    assert!(ids_of(&mut session, &prompt, 0, greedy()).is_empty());
    assert_eq!(session.stats(), &Stats::default());
}

#[test]
fn rates_are_counts_over_their_own_time() {
    let stats = Stats {
        prompt_tokens: 6,
        time_to_first_token: Duration::from_millis(500),
        generated_tokens: 5,
        decode_steps: 4,
        decode_time: Duration::from_secs(2),
    };
    assert_eq!(stats.prompt_tokens_per_second(), Some(12.0));
    assert_eq!(stats.decode_tokens_per_second(), Some(2.0));
    let one_token = Stats {
        decode_steps: 0,
        decode_time: Duration::ZERO,
        ..stats
    };
    assert_eq!(one_token.decode_tokens_per_second(), None);
    assert_eq!(Stats::default().prompt_tokens_per_second(), None);
}

#[test]
fn chat_generates_from_the_rendered_template_and_feeds_only_what_the_cache_lacks() {
    let mut session = session();
    let encode = |session: &Session, messages: &[ChatMessage]| {
        let text = session
            .tokenizer()
            .apply_chat_template(messages, true)
            .unwrap();
        session.tokenizer().encode(&text, true, true)
    };
    let chat = |session: &mut Session, messages: &[ChatMessage], n: usize| -> Vec<u32> {
        let tokens = session.chat(messages, n, greedy()).unwrap();
        tokens.map(|t| t.unwrap().id).collect()
    };

    let first = [
        ChatMessage::system("be brief"),
        ChatMessage::user("the cat"),
    ];
    let first_ids = encode(&session, &first);
    let reply = chat(&mut session, &first, 1);
    assert_eq!(session.stats().prompt_tokens, first_ids.len());
    assert_eq!(session.position(), first_ids.len());
    let reply_text = session.tokenizer().decode(&reply, false).unwrap();

    // The next turn starts with the tokens in the cache: only the rest is fed.
    let mut second = first.to_vec();
    second.push(ChatMessage::assistant(reply_text));
    second.push(ChatMessage::user("and the dog"));
    let second_ids = encode(&session, &second);
    assert!(
        second_ids.starts_with(&first_ids),
        "the template renders turns in order"
    );
    let fed_before = session.stats().prompt_tokens;
    let continued = chat(&mut session, &second, 3);
    assert_eq!(
        session.stats().prompt_tokens - fed_before,
        second_ids.len() - first_ids.len()
    );

    // A conversation that does not continue the cached one starts over.
    let other = [ChatMessage::user("a different start")];
    let other_ids = encode(&session, &other);
    let fed_before = session.stats().prompt_tokens;
    let restarted = chat(&mut session, &other, 3);
    assert_eq!(session.stats().prompt_tokens - fed_before, other_ids.len());

    // Each reply is what generating from the rendered conversation alone gives.
    for (ids, n, expected) in [
        (&first_ids, 1, &reply),
        (&second_ids, 3, &continued),
        (&other_ids, 3, &restarted),
    ] {
        session.reset();
        assert_eq!(&ids_of(&mut session, ids, n, greedy()), expected);
    }

    // A model without a template says which key is missing.
    let file = GgufFile::open(model_file()).unwrap();
    let options = LoadOptions {
        context: Some(8),
        ..Default::default()
    };
    let model = Model::from_gguf(Arc::new(common::gpu()), &file, &options).unwrap();
    let mut untemplated = Session::new(model, Tokenizer::from_gguf(&file).unwrap()).unwrap();
    let err = untemplated
        .chat(&other, 1, greedy())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("tokenizer.chat_template"), "{err}");
}

#[test]
fn prompt_ids_outside_the_vocabulary_are_refused_before_anything_runs() {
    let mut session = session();
    let err = session
        .generate(&[1, VOCAB as u32][..], 1, greedy())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!("{VOCAB}")) && err.contains("outside the vocabulary"),
        "{err}"
    );
    assert_eq!(session.position(), 0);
    assert_eq!(session.stats(), &Stats::default());
}
