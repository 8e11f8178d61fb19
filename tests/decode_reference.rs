//! Whole-model decode against `tests/reference/`: exact-math (`_f64`) references,
//! teacher-forced position by position, free-running greedy tokens, and llama.cpp's
//! output as an independent check. See that folder's README for what each file is.
//!
//! A model's cache at a position depends only on the tokens up to it, so where two
//! sequences checked on one model share their first tokens, those positions run once
//! (the default model's exact-math and llama.cpp sequences share their first 10), and
//! the three tests of the default model on the coop route share one pass (see
//! [`coop_default_model`]).

mod common;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use brass::device::Device;
use brass::kernels::attention::KvType;
use brass::kernels::matvec::Family;
use brass::model::{default_model_path, Input, LoadOptions, Model};
use brass::router::{Force, Overrides};
use common::{reference, Reference};

/// Loads a model on the test GPU with every matvec in `family`: `coop` keeps
/// activations exact (the `_f64` oracle), `dot4` rounds them to int8 as llama.cpp does.
fn load(path: &Path, family: Family) -> Model {
    load_with(path, family, None)
}

/// As [`load`], with the dot4 matrices taking x already quantized (`Some(true)`: all
/// of them, `None`: by size, as `LoadOptions` decides): the norms' output, and
/// silu(gate) * up from `ops/silu_mul_q8` for the down projections.
fn load_with(path: &Path, family: Family, q8: Option<bool>) -> Model {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    Model::load(
        device,
        path,
        &LoadOptions {
            context: Some(64),
            // An exact cache on every route, so each bound below is its route's own
            // error. The f16 cache's is `tests/attention.rs`'s; on the int8 route it
            // adds to the tail (issue 22): the default model's worst logit error at
            // position 13 went from under 0.8 to 0.87 with it.
            kv: KvType::F32,
            routing: Overrides {
                force: Some(Force::Family(family)),
                x_q8: q8,
                glu_q8: q8,
                ..Overrides::default()
            },
            ubatch: None,
        },
    )
    .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// The model's dispatch ledger defects, printed; empty if none.
fn defects(model: &Model) -> String {
    let ledger = model.audit();
    match ledger.defects().is_empty() {
        true => String::new(),
        false => format!("{ledger}"),
    }
}

fn assert_no_defects(defects: &str) {
    assert!(defects.is_empty(), "ledger defects:\n{defects}");
}

/// The sequence a reference processed: prompt, then every generated token but the last.
fn sequence(r: &Reference) -> Vec<u32> {
    let mut ids = r.prompt_ids.clone();
    ids.extend(&r.generated[..r.generated.len() - 1]);
    ids
}

/// How many leading positions `a` and `b` share: the cache `a` leaves there is `b`'s.
fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Teacher-forces each of `seqs` through `model` in turn; returns every position's
/// logits. Positions a sequence shares with the one before, from the first, are taken
/// from that one's run (the cache there holds the same tokens), not run again.
fn teacher_forced_logits(model: &Model, seqs: &[&[u32]]) -> Vec<Vec<Vec<f32>>> {
    let mut out: Vec<Vec<Vec<f32>>> = Vec::with_capacity(seqs.len());
    for (i, seq) in seqs.iter().enumerate() {
        let (mut logits, shared) = match i.checked_sub(1) {
            Some(prev) => {
                let shared = shared_prefix(seqs[prev], seq);
                (out[prev][..shared].to_vec(), shared)
            }
            None => (Vec::new(), 0),
        };
        for (pos, &id) in seq.iter().enumerate().skip(shared) {
            logits.push(model.forward_logits(Input::Token(id), pos).unwrap());
        }
        out.push(logits);
    }
    out
}

/// Checks every position of `r`'s sequence teacher-forced (`logits`, one per position):
/// each of the reference's top-5 logits within `tol`, and the same top-1 wherever the
/// reference's own top-2 gap exceeds `min_gap`.
fn teacher_forced(logits: &[Vec<f32>], r: &Reference, tol: f32, min_gap: f32) {
    let ids = sequence(r);
    assert_eq!(ids.len(), r.steps.len());
    assert_eq!(logits.len(), r.steps.len());
    let mut worst = 0f32;
    for (pos, (logits, step)) in logits.iter().zip(&r.steps).enumerate() {
        assert_eq!(step.pos, pos);
        for &(tid, expected) in &step.top {
            let err = (logits[tid as usize] - expected).abs();
            worst = worst.max(err);
            assert!(
                err <= tol,
                "pos {pos}: logit of {tid} is {}, reference {expected} (tol {tol})",
                logits[tid as usize]
            );
        }
        let gap = step.top[0].1 - step.top[1].1;
        if gap > min_gap {
            let top1 = brass::kernels::ops::argmax_ref(logits);
            assert_eq!(
                top1, step.top[0].0,
                "pos {pos}: top-1 (reference gap {gap})"
            );
        }
    }
    eprintln!(
        "teacher-forced over {} positions: worst top-5 logit error {worst:.4}",
        ids.len()
    );
}

/// Greedy tokens after the prompt that the coop test checks.
const GREEDY: usize = 24;

/// What the default model gives on the coop route, for the three tests of it.
struct CoopDefault {
    /// Every position's logits along the exact-math reference's sequence.
    exact_logits: Vec<Vec<f32>>,
    /// Greedy decode after that reference's prompt, each step fed the id the GPU's
    /// argmax left (`Input::Previous`): its first [`GREEDY`] tokens, or up to and
    /// including the first that leaves the reference's sequence.
    greedy: Vec<u32>,
    /// The GPU's argmax at every position of llama.cpp's sequence, teacher-forced.
    llamacpp_top1: Vec<u32>,
    defects: String,
}

/// One pass of the default model on the coop route (a decode step takes lavapipe about
/// 1.8 s there) along the exact-math reference's sequence, each step reading back both
/// the GPU's argmax and the logits: the prompt, then greedy decode from the GPU's own
/// ids while they are the reference's (so those steps are both the greedy test's and
/// the teacher-forced test's), then the rest teacher-forced; then llama.cpp's sequence
/// from where it leaves that one. The tests run it once, whichever asks first.
fn coop_default_model() -> &'static CoopDefault {
    static RUN: OnceLock<CoopDefault> = OnceLock::new();
    RUN.get_or_init(|| {
        let model = load(&default_model_path().unwrap(), Family::Coop);
        let exact = reference("smollm2_q4_1_f64.json");
        let seq = sequence(&exact);
        let last_prompt = exact.prompt_ids.len() - 1;
        let mut ids = Vec::with_capacity(seq.len());
        let mut exact_logits = Vec::with_capacity(seq.len());
        let mut greedy = Vec::new();
        let mut on_path = true;
        for (pos, &id) in seq.iter().enumerate() {
            // Greedy: the step after the prompt's last token takes the GPU's argmax of
            // the step before, while greedy is still on the reference's path.
            let greedy_step = pos > last_prompt && pos < last_prompt + GREEDY;
            let input = match greedy_step && on_path {
                true => Input::Previous,
                false => Input::Token(id),
            };
            let (top1, logits) = model.forward_token_and_logits(input, pos).unwrap();
            if pos >= last_prompt && pos < last_prompt + GREEDY && on_path {
                greedy.push(top1);
                // The next step takes the GPU's id only if it is the reference's token:
                // otherwise greedy has left the path (the greedy test fails) and the
                // rest of the sequence is teacher-forced.
                on_path = seq.get(pos + 1).is_none_or(|&next| next == top1);
            }
            ids.push(top1);
            exact_logits.push(logits);
        }
        let llamacpp = sequence(&reference("smollm2_q4_1_llamacpp.json"));
        let shared = shared_prefix(&seq, &llamacpp);
        let mut llamacpp_top1 = ids[..shared].to_vec();
        for (pos, &id) in llamacpp.iter().enumerate().skip(shared) {
            llamacpp_top1.push(model.forward(Input::Token(id), pos).unwrap());
        }
        eprintln!(
            "coop: {} positions along exact math's sequence, {} of llama.cpp's shared, {} run",
            seq.len(),
            shared,
            llamacpp.len() - shared
        );
        CoopDefault {
            exact_logits,
            greedy,
            llamacpp_top1,
            defects: defects(&model),
        }
    })
}

#[test]
fn default_model_teacher_forced_matches_exact_math() {
    let run = coop_default_model();
    teacher_forced(
        &run.exact_logits,
        &reference("smollm2_q4_1_f64.json"),
        0.08,
        0.1,
    );
    assert_no_defects(&run.defects);
}

#[test]
fn synthetic_k_quant_model_teacher_forced_matches_exact_math() {
    let model = load(&common::reference_path("synkq_q4_k_m.gguf"), Family::Coop);
    let r = reference("synkq_q4_k_m_f64.json");
    let logits = teacher_forced_logits(&model, &[&sequence(&r)]);
    teacher_forced(&logits[0], &r, 0.01, 0.1);
    assert_no_defects(&defects(&model));
}

/// Greedy decode of [`GREEDY`] tokens after the prompt, the id argmax left on the GPU
/// feeding the next step: no upload between tokens.
#[test]
fn default_model_greedy_reproduces_exact_math_tokens() {
    let run = coop_default_model();
    let r = reference("smollm2_q4_1_f64.json");
    assert_eq!(run.greedy, r.generated[..GREEDY]);
    assert_no_defects(&run.defects);
}

/// Top-1 agreement with llama.cpp, teacher-forced along its own sequence: the GPU's
/// argmax at each position (`top1`).
fn agreement_with_llamacpp(family: Family, top1: &[u32]) {
    let r = reference("smollm2_q4_1_llamacpp.json");
    let n = sequence(&r).len();
    assert_eq!(top1.len(), n);
    let agree = top1
        .iter()
        .zip(&r.steps)
        .filter(|(&id, step)| id == step.top[0].0)
        .count();
    let rate = agree as f64 / n as f64;
    eprintln!(
        "{}: top-1 agreement with llama.cpp: {agree} of {n}",
        family.name()
    );
    assert!(
        rate >= 0.9,
        "top-1 agreement with llama.cpp {agree} of {n} < 90%"
    );
}

#[test]
fn default_model_agrees_with_llamacpp() {
    let run = coop_default_model();
    agreement_with_llamacpp(Family::Coop, &run.llamacpp_top1);
    assert_no_defects(&run.defects);
}

// dot4 rounds activations to int8 groups as llama.cpp's CPU backend does (Q8_1 / Q8_K).
// Its logits then move from exact math about as far as llama.cpp's do (the reference
// README: up to 0.55 on the default model, 0.04 on the synthetic one; brass's dot4
// measured 0.68 and 0.031 on lavapipe). Rounding moves a pair of logits apart by up to
// twice that, so top-1 is only held where the reference's own top-2 gap is wider; below
// it greedy picks follow the rounding noise (the default model's fifth token is 1797
// for llama.cpp with a gap of 0.26 and 2988 for exact math, and dot4 has produced
// either as its summation order changed).

// These two run with every norm writing its output quantized for the matrices it feeds
// and every down projection taking silu(gate) * up quantized by ops/silu_mul_q8 (the
// default only does so for large matrices), so those ops are checked whole-model; the
// agreement test below runs the default (here: down projections computing it while
// staging).

/// Teacher-forced along the exact-math and llama.cpp references of `model_path`
/// (`name`: their files' stem), each checked with its bound and top-1 gap.
fn dot4_error_is_llamacpp_class(model_path: &Path, name: &str, bounds: [(f32, f32); 2]) {
    let model = load_with(model_path, Family::Dot4, Some(true));
    let refs = [
        reference(&format!("{name}_f64.json")),
        reference(&format!("{name}_llamacpp.json")),
    ];
    let seqs = refs.each_ref().map(sequence);
    let logits = teacher_forced_logits(&model, &seqs.each_ref().map(Vec::as_slice));
    for ((logits, r), (tol, min_gap)) in logits.iter().zip(&refs).zip(bounds) {
        teacher_forced(logits, r, tol, min_gap);
    }
    assert_no_defects(&defects(&model));
}

#[test]
fn dot4_default_model_error_is_llamacpp_class() {
    dot4_error_is_llamacpp_class(
        &default_model_path().unwrap(),
        "smollm2_q4_1",
        [(0.8, 1.6), (1.2, 2.4)],
    );
}

#[test]
fn dot4_synthetic_k_quant_model_error_is_llamacpp_class() {
    dot4_error_is_llamacpp_class(
        &common::reference_path("synkq_q4_k_m.gguf"),
        "synkq_q4_k_m",
        [(0.05, 0.1), (0.1, 0.2)],
    );
}

#[test]
fn dot4_default_model_agrees_with_llamacpp() {
    let model = load(&default_model_path().unwrap(), Family::Dot4);
    let r = reference("smollm2_q4_1_llamacpp.json");
    let top1: Vec<u32> = sequence(&r)
        .iter()
        .enumerate()
        .map(|(pos, &id)| model.forward(Input::Token(id), pos).unwrap())
        .collect();
    agreement_with_llamacpp(Family::Dot4, &top1);
    assert_no_defects(&defects(&model));
}
