//! A session that runs out of context mid-stream keeps its last token.

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::model::{LoadOptions, Session};
use brass::sampling::{Sampler, SamplerConfig};

#[test]
fn running_out_of_context_keeps_the_last_token() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(8),
        ..Default::default()
    };
    let path = common::reference_path("synkq_q4_k_m.gguf");
    let mut session = Session::load(device, path, &options).unwrap();
    let prompt = [1, 100, 200, 300];
    let mut yielded = Vec::new();
    let mut error = None;
    let greedy = Sampler::new(SamplerConfig::greedy());
    for token in session.generate(&prompt[..], 20, greedy).unwrap() {
        match token {
            Ok(token) => yielded.push(token.id),
            Err(e) => error = Some(e.to_string()),
        }
    }
    // Positions 0..8: the prompt's 4, then 4 generated tokens fill the cache, and the
    // 5th is sampled from position 7's logits but has nowhere to go.
    assert_eq!(yielded.len(), 5, "{yielded:?}");
    let error = error.expect("the stream ends with an error past the context");
    assert!(error.contains("context"), "{error}");
    assert_eq!(session.position(), 8);
    let last = *yielded.last().unwrap();
    assert_eq!(session.pending_token(), Some(last));

    // Asking again is the same clear error, and still loses nothing.
    let again = session.greedy(&[], 1).unwrap_err().to_string();
    assert!(again.contains("room for 0"), "{again}");
    assert_eq!(session.pending_token(), Some(last));

    // After a reset the caller continues from it.
    session.reset();
    let next = session.greedy(&[last], 2).unwrap();
    assert_eq!(next.len(), 2);
}
