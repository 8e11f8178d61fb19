//! Model families on their real files: Qwen2.5-Coder-1.5B-Instruct (`qwen2`: Q/K/V
//! biases, NEOX RoPE) against the exact-math and llama.cpp references in
//! `tests/reference/` (see its README), and Gemma-3-270M (`gemma3`) against llama.cpp's
//! reference and exact math computed here from the file, on the default (int8) route.
//!
//! The file comes through the known-model registry, as `.ci/run` fetches it. Its 41
//! prompt positions go through batched prefill (`Model::prefill_logits`): one pass over
//! the 1 GB of weights, where teacher-forcing token by token takes lavapipe minutes.

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::gguf::GgufFile;
use brass::hub::KnownModel;
use brass::kernels::attention::KvType;
use brass::kernels::matvec::Family;
use brass::model::{Input, LoadOptions, Model};
use brass::router::{Force, Overrides};
use common::exact::Exact;
use common::{reference, Reference};

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

/// Every |logit - reference| over the reference's top-5 at each of `logits`' positions.
fn errors(logits: &[Vec<f32>], r: &Reference) -> Vec<f32> {
    logits
        .iter()
        .zip(&r.steps)
        .flat_map(|(l, step)| {
            step.top
                .iter()
                .map(|&(id, want)| (l[id as usize] - want).abs())
        })
        .collect()
}

/// (median, worst) of `errors`.
fn median_and_worst(errors: Vec<f32>) -> (f32, f32) {
    let s = Spread::of(errors);
    (s.median, s.worst)
}

/// The median, 95th percentile and largest of some errors.
#[derive(Clone, Copy, Debug)]
struct Spread {
    median: f32,
    p95: f32,
    worst: f32,
}

impl Spread {
    fn of(mut errors: Vec<f32>) -> Spread {
        errors.sort_by(f32::total_cmp);
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
        Spread {
            median: at(0.5),
            p95: at(0.95),
            worst: at(1.0),
        }
    }
}

/// Along the prompt: top-1 as exact math's wherever its gap exceeds 0.1, and the int8
/// route's logits no further from exact math than llama.cpp's are (its CPU backend
/// rounds activations the same way): median no worse, worst within 1.25x (issue 22's
/// bar). Then greedy continues as exact math does while exact math's gaps exceed 0.1.
/// Measured on lavapipe: median 0.028 and worst 1.87, where llama.cpp's are 0.068
/// and 6.38; 40 of 41 top-1 (the other a 0.04 near-tie).
#[test]
fn qwen2_matches_exact_math_along_the_prompt_and_greedy() {
    let path = KnownModel::by_name("qwen2.5-coder-1.5b")
        .and_then(KnownModel::cached_path)
        .unwrap_or_else(|e| panic!("{e} (.ci/run fetches it: decode --model qwen2.5-coder-1.5b)"));
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(64),
        ..LoadOptions::default()
    };
    let model = Model::load(device, &path, &options).unwrap();
    assert_eq!(model.config().architecture, "qwen2");
    let exact = reference("qwen2_prime_f64.json");
    let llamacpp = reference("qwen2_prime_llamacpp.json");
    assert_eq!(exact.prompt_ids, llamacpp.prompt_ids);
    let prompt = &exact.prompt_ids;

    let mut logits = Vec::new();
    model
        .prefill_logits(prompt, 0, |_, l| {
            logits.push(l.to_vec());
            Ok(())
        })
        .unwrap();
    for (p, (l, step)) in logits.iter().zip(&exact.steps).enumerate() {
        if step.top[0].1 - step.top[1].1 > 0.1 {
            assert_eq!(argmax(l), step.top[0].0, "position {p}: top-1");
        }
    }
    let (median, worst) = median_and_worst(errors(&logits, &exact));
    // llama.cpp's own logits at the same positions, against the same exact math.
    let theirs: Vec<f32> = llamacpp.steps[..prompt.len()]
        .iter()
        .zip(&exact.steps)
        .flat_map(|(l, e)| {
            e.top.iter().filter_map(|&(id, want)| {
                let got = l.top.iter().find(|&&(i, _)| i == id)?;
                Some((got.1 - want).abs())
            })
        })
        .collect();
    let (their_median, their_worst) = median_and_worst(theirs);
    eprintln!(
        "qwen2 prompt, top-5 logits against exact math: median {median:.3}, worst {worst:.3} \
         (llama.cpp: {their_median:.3}, {their_worst:.3})"
    );
    assert!(
        median <= their_median,
        "median {median} > llama.cpp's {their_median}"
    );
    assert!(
        worst <= 1.25 * their_worst,
        "worst {worst} > 1.25 x llama.cpp's {their_worst}"
    );

    let mut next = argmax(logits.last().unwrap());
    let mut greedy = Vec::new();
    for (i, &want) in exact.generated.iter().enumerate() {
        let step = &exact.steps[prompt.len() - 1 + i];
        if step.top[0].1 - step.top[1].1 <= 0.1 {
            break;
        }
        assert_eq!(next, want, "greedy token {i}: {greedy:?} so far");
        greedy.push(next);
        next = model.forward(Input::Token(next), prompt.len() + i).unwrap();
    }
    eprintln!("greedy: {} tokens as exact math's", greedy.len());
    assert!(
        !greedy.is_empty(),
        "exact math has no confident first token"
    );
    let ledger = model.audit();
    assert!(ledger.defects().is_empty(), "ledger defects:\n{ledger}");
}

/// Gemma-3-270M Q4_K_M (`gemma3`: embeddings times sqrt(dim), q/k norms, post-norms,
/// GeGLU, heads of 256 on a 640 model, one KV head, local layers on their own RoPE
/// base), teacher-forced along llama.cpp's own greedy sequence (the prompt and its
/// first 15 tokens: 32 positions).
///
/// The repository has no exact-math reference for this file, so the test computes one:
/// the f64 forward pass of `tests/common/exact.rs` from the file's dequantized weights
/// (25 s on one core of the CI machine, where brass's exact route, `--force coop`, took
/// lavapipe 145 s over these positions; it stood in for exact math before, within
/// median 0.003 and worst 0.027 of it). The exact route is still checked on the file:
/// at its first [`GEMMA3_EXACT_ROUTE`] positions, each of llama.cpp's top-5 logits
/// within 0.08 of exact math (`tests/decode_reference.rs`'s bound for it on the default
/// model). The gate is the qwen2 test's: the default (int8) route no further from exact
/// math than llama.cpp is (llama.cpp's CPU backend also rounds activations to int8):
/// median no worse, 95th percentile within 1.25x, worst within 2.5x (below). Top-1 as
/// llama.cpp's at 90 % of the positions or more (the bar) and wherever
/// llama.cpp's gap exceeds 0.5. Then greedy decoding gives llama.cpp's tokens until its
/// first gap under 0.1. Measured on lavapipe with the prompt batched: default route to
/// exact math median 0.135, 95th percentile 0.884, worst 2.028; llama.cpp to exact math
/// 0.249, 0.926, 1.343 (a token at a time, as before gemma3's prompts batched: 0.161,
/// worst 1.331); top-1 30 of 32.
///
/// The window of its local layers (512) is longer than these positions; the
/// sliding-window kernels are `tests/attention.rs`'s.
#[test]
fn gemma3_agrees_with_llamacpp_and_exact_math() {
    let path = KnownModel::by_name("gemma3-270m")
        .and_then(KnownModel::cached_path)
        .unwrap_or_else(|e| panic!("{e} (.ci/run fetches it: decode --model gemma3-270m)"));
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let load = |options: LoadOptions| {
        let options = LoadOptions {
            context: Some(64),
            ..options
        };
        Model::load(device.clone(), &path, &options).unwrap()
    };
    let llamacpp = reference("gemma3_poem_llamacpp.json");
    let prompt = &llamacpp.prompt_ids;
    let forced: Vec<u32> = prompt
        .iter()
        .chain(&llamacpp.generated[..15])
        .copied()
        .collect();
    let exact: Vec<Vec<f64>> = {
        let file = GgufFile::open(&path).unwrap();
        let mut exact = Exact::new(&file);
        forced
            .iter()
            .enumerate()
            .map(|(pos, &id)| exact.step(id, pos))
            .collect()
    };

    let exact_route = load(LoadOptions {
        kv: KvType::F32,
        routing: Overrides {
            force: Some(Force::Family(Family::Coop)),
            ..Overrides::default()
        },
        ..LoadOptions::default()
    });
    let mut exact_route_worst = 0f64;
    exact_route
        .prefill_logits(&forced[..GEMMA3_EXACT_ROUTE], 0, |p, l| {
            for &(id, _) in &llamacpp.steps[p].top {
                let err = (f64::from(l[id as usize]) - exact[p][id as usize]).abs();
                exact_route_worst = exact_route_worst.max(err);
                assert!(
                    err <= 0.08,
                    "exact route, position {p}: logit of {id} is {}, exact math {}",
                    l[id as usize],
                    exact[p][id as usize]
                );
            }
            Ok(())
        })
        .unwrap();
    drop(exact_route);

    let model = load(LoadOptions::default());
    let config = model.config();
    assert_eq!(config.architecture, "gemma3");
    assert_eq!(
        (config.dim, config.head_dim, config.n_kv_heads),
        (640, 256, 1)
    );
    // The prompt through prefill in a batch (the last token as a decode step), the
    // rest as decode steps that also read back the GPU's argmax, which is greedy's next
    // token wherever the forced token is greedy's (checked below).
    let mut logits = Vec::new();
    model
        .prefill_logits(prompt, 0, |_, l| {
            logits.push(l.to_vec());
            Ok(())
        })
        .unwrap();
    let mut gpu_top1 = vec![None; prompt.len()];
    for (pos, &id) in forced.iter().enumerate().skip(prompt.len()) {
        let (top1, l) = model
            .forward_token_and_logits(Input::Token(id), pos)
            .unwrap();
        gpu_top1.push(Some(top1));
        logits.push(l);
    }

    let mut agree = 0;
    for (p, (l, step)) in logits.iter().zip(&llamacpp.steps).enumerate() {
        let top1 = argmax(l) == step.top[0].0;
        agree += top1 as usize;
        if step.top[0].1 - step.top[1].1 > 0.5 {
            assert!(
                top1,
                "position {p}: top-1 {} where llama.cpp's is {:?}",
                argmax(l),
                step.top
            );
        }
    }
    // |logit - exact math's| over llama.cpp's top-5 ids at each position.
    let from_exact = |logits: &dyn Fn(usize, u32) -> f32| {
        let errors = exact
            .iter()
            .zip(&llamacpp.steps)
            .enumerate()
            .flat_map(|(p, (e, step))| step.top.iter().map(move |&(id, _)| (p, id, e[id as usize])))
            .map(|(p, id, want)| (f64::from(logits(p, id)) - want).abs() as f32)
            .collect();
        Spread::of(errors)
    };
    let ours = from_exact(&|p, id| logits[p][id as usize]);
    let theirs = from_exact(&|p, id| {
        let top = &llamacpp.steps[p].top;
        top.iter().find(|&&(i, _)| i == id).unwrap().1
    });
    let (median, worst, their_median, their_worst) =
        (ours.median, ours.worst, theirs.median, theirs.worst);
    eprintln!(
        "gemma3: exact route at its first {GEMMA3_EXACT_ROUTE} positions within \
         {exact_route_worst:.3} of exact math; top-1 as llama.cpp's at {agree} of {} \
         positions; top-5 logits against exact math: median {median:.3}, 95th percentile \
         {:.3}, worst {worst:.3} (llama.cpp: {their_median:.3}, {:.3}, {their_worst:.3})",
        logits.len(),
        ours.p95,
        theirs.p95
    );
    assert!(
        agree * 10 >= logits.len() * 9,
        "top-1 agreement {agree} of {}",
        logits.len()
    );
    assert!(
        median <= their_median,
        "median {median} > llama.cpp's {their_median}"
    );
    // The prompt's positions come from its batch (the last from a decode step), where
    // summation order differs from a decode step's and tips other int8 roundings: the
    // single worst logit swings with it (position 2 of this prompt: 0.94-1.47 for decode
    // steps at subgroup sizes 4-16 and over a batched cache, 2.03 from the batch, where
    // llama.cpp's is 0.98). So the tail is held at the 95th percentile, 1.25x, and the
    // worst within 2.5x, as the default model's seven-prompt test does
    // (tests/decode_reference.rs).
    assert!(
        ours.p95 <= 1.25 * theirs.p95,
        "95th percentile {} > 1.25 x llama.cpp's {}",
        ours.p95,
        theirs.p95
    );
    assert!(
        worst <= 2.5 * their_worst,
        "worst {worst} > 2.5 x llama.cpp's {their_worst}"
    );

    // Greedy: the first token from the prompt's logits, each next one the GPU's argmax
    // of the step that took the token before (the forced step where that token is the
    // forced one, a new step past them).
    let mut next = argmax(&logits[prompt.len() - 1]);
    let mut greedy = Vec::new();
    for (i, &want) in llamacpp.generated.iter().enumerate() {
        let step = &llamacpp.steps[prompt.len() - 1 + i];
        if step.top[0].1 - step.top[1].1 <= 0.1 {
            break;
        }
        assert_eq!(next, want, "greedy token {i}: {greedy:?} so far");
        greedy.push(next);
        let pos = prompt.len() + i;
        next = match gpu_top1.get(pos) {
            Some(&Some(top1)) => top1,
            _ => model.forward(Input::Token(next), pos).unwrap(),
        };
    }
    eprintln!("greedy: {} tokens as llama.cpp's", greedy.len());
    assert!(greedy.len() >= 8, "greedy: only {greedy:?} as llama.cpp's");
    let ledger = model.audit();
    assert!(ledger.defects().is_empty(), "ledger defects:\n{ledger}");
}

/// The positions of Gemma-3-270M the exact route runs (4.5 s each on lavapipe).
const GEMMA3_EXACT_ROUTE: usize = 4;
