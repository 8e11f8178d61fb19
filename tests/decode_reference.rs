//! Whole-model decode against `tests/reference/`: exact-math (`_f64`) references,
//! teacher-forced position by position, free-running greedy tokens, and llama.cpp's
//! output as an independent check. See that folder's README for what each file is.

mod common;

use std::path::Path;
use std::sync::Arc;

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

fn assert_no_defects(model: &Model) {
    let ledger = model.audit();
    assert!(ledger.defects().is_empty(), "ledger defects:\n{ledger}");
}

/// The sequence a reference processed: prompt, then every generated token but the last.
fn sequence(r: &Reference) -> Vec<u32> {
    let mut ids = r.prompt_ids.clone();
    ids.extend(&r.generated[..r.generated.len() - 1]);
    ids
}

/// Teacher-forces `r`'s sequence through `model` and checks every position: each of the
/// reference's top-5 logits within `tol`, and the same top-1 wherever the reference's
/// own top-2 gap exceeds `min_gap`.
fn teacher_forced(model: &Model, r: &Reference, tol: f32, min_gap: f32) {
    let ids = sequence(r);
    assert_eq!(ids.len(), r.steps.len());
    let mut worst = 0f32;
    for (pos, (&id, step)) in ids.iter().zip(&r.steps).enumerate() {
        assert_eq!(step.pos, pos);
        let logits = model.forward_logits(Input::Token(id), pos).unwrap();
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
            let top1 = brass::kernels::ops::argmax_ref(&logits);
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

#[test]
fn default_model_teacher_forced_matches_exact_math() {
    let model = load(&default_model_path().unwrap(), Family::Coop);
    teacher_forced(&model, &reference("smollm2_q4_1_f64.json"), 0.08, 0.1);
    assert_no_defects(&model);
}

#[test]
fn synthetic_k_quant_model_teacher_forced_matches_exact_math() {
    let model = load(&common::reference_path("synkq_q4_k_m.gguf"), Family::Coop);
    teacher_forced(&model, &reference("synkq_q4_k_m_f64.json"), 0.01, 0.1);
    assert_no_defects(&model);
}

/// Greedy decode of `n` tokens after `r`'s prompt.
fn greedy(model: &Model, r: &Reference, n: usize) -> Vec<u32> {
    let (last, rest) = r.prompt_ids.split_last().unwrap();
    for (pos, &id) in rest.iter().enumerate() {
        model.step(Input::Token(id), pos).unwrap();
    }
    let mut pos = rest.len();
    let mut generated = vec![model.forward(Input::Token(*last), pos).unwrap()];
    while generated.len() < n {
        pos += 1;
        // The id argmax left on the GPU feeds the next step: no upload between tokens.
        generated.push(model.forward(Input::Previous, pos).unwrap());
    }
    generated
}

#[test]
fn default_model_greedy_reproduces_exact_math_tokens() {
    let model = load(&default_model_path().unwrap(), Family::Coop);
    let r = reference("smollm2_q4_1_f64.json");
    assert_eq!(greedy(&model, &r, 24), r.generated[..24]);
    assert_no_defects(&model);
}

/// Top-1 agreement with llama.cpp, teacher-forced along its own sequence.
fn agreement_with_llamacpp(family: Family) {
    let model = load(&default_model_path().unwrap(), family);
    let r = reference("smollm2_q4_1_llamacpp.json");
    let ids = sequence(&r);
    let agree = ids
        .iter()
        .zip(&r.steps)
        .enumerate()
        .filter(|(pos, (&id, step))| {
            model.forward(Input::Token(id), *pos).unwrap() == step.top[0].0
        })
        .count();
    let rate = agree as f64 / ids.len() as f64;
    eprintln!(
        "{}: top-1 agreement with llama.cpp: {agree} of {}",
        family.name(),
        ids.len()
    );
    assert!(
        rate >= 0.9,
        "top-1 agreement with llama.cpp {agree} of {} < 90%",
        ids.len()
    );
    assert_no_defects(&model);
}

#[test]
fn default_model_agrees_with_llamacpp() {
    agreement_with_llamacpp(Family::Coop);
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

#[test]
fn dot4_default_model_error_is_llamacpp_class() {
    let model = load_with(&default_model_path().unwrap(), Family::Dot4, Some(true));
    teacher_forced(&model, &reference("smollm2_q4_1_f64.json"), 0.8, 1.6);
    teacher_forced(&model, &reference("smollm2_q4_1_llamacpp.json"), 1.2, 2.4);
    assert_no_defects(&model);
}

#[test]
fn dot4_synthetic_k_quant_model_error_is_llamacpp_class() {
    let model = load_with(
        &common::reference_path("synkq_q4_k_m.gguf"),
        Family::Dot4,
        Some(true),
    );
    teacher_forced(&model, &reference("synkq_q4_k_m_f64.json"), 0.05, 0.1);
    teacher_forced(&model, &reference("synkq_q4_k_m_llamacpp.json"), 0.1, 0.2);
    assert_no_defects(&model);
}

#[test]
fn dot4_default_model_agrees_with_llamacpp() {
    agreement_with_llamacpp(Family::Dot4);
}
