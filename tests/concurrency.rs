//! Sessions sharing one device from several threads give exactly the tokens they give
//! alone, greedy (GPU argmax, steps queued ahead) and sampled (logits read back).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use brass::device::Device;
use brass::model::{LoadOptions, Session};
use brass::sampling::{Sampler, SamplerConfig};

const TOKENS: usize = 10;

/// The synthetic K-quant reference model (hidden 512, 2 layers, 8,192 tokens): a step
/// is a few milliseconds on lavapipe, so the threads' steps interleave many times, and
/// its logits are far from flat, so different prompts give different streams.
fn model_file() -> PathBuf {
    common::reference_path("synkq_q4_k_m.gguf")
}

/// Multi-token prompts: the prompt's steps are submitted without a read-back, which is
/// where sessions on one device used to overwrite each other's dispatch parameters.
fn prompt(session: usize) -> Vec<u32> {
    (0..5)
        .map(|i| (37 + 1009 * session + 131 * i) as u32)
        .collect()
}

fn sampler(sampled: bool, session: usize) -> Sampler {
    Sampler::new(if sampled {
        SamplerConfig {
            temperature: 0.9,
            top_k: 40,
            seed: 1000 + session as u64,
            ..SamplerConfig::greedy()
        }
    } else {
        SamplerConfig::greedy()
    })
}

fn generate(session: &mut Session, index: usize, sampled: bool) -> Vec<u32> {
    session.reset();
    session
        .generate(&prompt(index), TOKENS, sampler(sampled, index))
        .unwrap()
        .map(|t| t.unwrap().id)
        .collect()
}

fn sessions_alone_then_together(n: usize, sampled: bool) {
    let path = model_file();
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let load = |p: &Path| {
        let options = LoadOptions {
            context: Some(32),
            ..Default::default()
        };
        Session::load(device.clone(), p, &options).unwrap()
    };
    let mut sessions: Vec<Session> = (0..n).map(|_| load(&path)).collect();
    let alone: Vec<Vec<u32>> = sessions
        .iter_mut()
        .enumerate()
        .map(|(i, s)| generate(s, i, sampled))
        .collect();
    // Different prompts must give different streams, or a mix-up could go unseen.
    for i in 1..n {
        assert_ne!(alone[0], alone[i], "sessions 0 and {i} generate alike");
    }
    for round in 0..2 {
        let barrier = Barrier::new(n);
        let together: Vec<Vec<u32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = sessions
                .iter_mut()
                .enumerate()
                .map(|(i, s)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        generate(s, i, sampled)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(together, alone, "round {round}: {n} sessions on one device");
    }
}

#[test]
fn two_sessions_greedy() {
    sessions_alone_then_together(2, false);
}

#[test]
fn two_sessions_sampled() {
    sessions_alone_then_together(2, true);
}

#[test]
fn four_sessions_greedy() {
    sessions_alone_then_together(4, false);
}

#[test]
fn four_sessions_sampled() {
    sessions_alone_then_together(4, true);
}
