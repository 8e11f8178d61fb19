//! A session that runs out of context mid-stream ends its stream with
//! `Error::ContextFull` (which the decode example turns into a clean stop) and keeps its
//! last token.

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::model::{LoadOptions, Session};
use brass::sampling::{Sampler, SamplerConfig};
use brass::Error;

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
            Err(e) => error = Some(e),
        }
    }
    // Positions 0..8: the prompt's 4, then 4 generated tokens fill the cache, and the
    // 5th is sampled from position 7's logits but has nowhere to go.
    assert_eq!(yielded.len(), 5, "{yielded:?}");
    let error = error.expect("the stream ends with an error past the context");
    assert!(
        matches!(
            error,
            Error::ContextFull {
                needed: 9,
                context: 8,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(session.position(), 8);
    let last = *yielded.last().unwrap();
    assert_eq!(session.pending_token(), Some(last));

    // Asking again is the same clear error, and still loses nothing.
    let again = session.greedy(&[], 1).unwrap_err();
    assert!(
        matches!(
            again,
            Error::ContextFull {
                needed: 9,
                context: 8,
                reset_helps: true,
                ..
            }
        ),
        "{again}"
    );
    assert_eq!(session.pending_token(), Some(last));

    // After a reset the caller continues from it.
    session.reset();
    let next = session.greedy(&[last], 2).unwrap();
    assert_eq!(next.len(), 2);
}
