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
    load_with(path, family, None, None)
}

/// As [`load`], with the dot4 matrices taking x already quantized (`Some(true)`: all
/// of them, `None`: by size, as `LoadOptions` decides): the norms' output, and
/// silu(gate) * up from `ops/silu_mul_q8` for the down projections; and on `planes`
/// int8 planes (default one).
fn load_with(path: &Path, family: Family, q8: Option<bool>, planes: Option<u32>) -> Model {
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
                x_planes: planes,
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
// README: up to 0.55 on the default model, 0.04 on the synthetic one). On the default
// model the worst of them is noise that moves with any change of summation order (issue
// 22: 0.68 to 1.12 at one position as the attention kernel changed), so no bound on it
// holds there; the synthetic model's stays small, and the default model is held to
// llama.cpp's top-1 below. Rounding moves a pair of logits apart by up to twice that, so
// top-1 is only held where the reference's own top-2 gap is wider.
//
// On two int8 planes (`--x-planes 2`: the residual 256 times finer) they stay with the
// exact route's (measured on lavapipe: 0.0030 on the default model, 0.0001 on the
// synthetic one), so that route is held to the exact route's bounds.

// These run with every norm writing its output quantized for the matrices it feeds
// and every down projection taking silu(gate) * up quantized by ops/silu_mul_q8 (the
// default only does so for large matrices), so those ops are checked whole-model; the
// agreement test below runs the default (here: down projections computing it while
// staging).

#[test]
fn dot4_synthetic_k_quant_model_error_is_llamacpp_class() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    let model = load_with(&path, Family::Dot4, Some(true), None);
    teacher_forced(&model, &reference("synkq_q4_k_m_f64.json"), 0.05, 0.1);
    teacher_forced(&model, &reference("synkq_q4_k_m_llamacpp.json"), 0.1, 0.2);
    assert_no_defects(&model);
}

#[test]
fn dot4_two_planes_default_model_error_is_exact_route_class() {
    let path = default_model_path().unwrap();
    let model = load_with(&path, Family::Dot4, Some(true), Some(2));
    teacher_forced(&model, &reference("smollm2_q4_1_f64.json"), 0.08, 0.1);
    teacher_forced(&model, &reference("smollm2_q4_1_llamacpp.json"), 1.2, 2.4);
    assert_no_defects(&model);
}

#[test]
fn dot4_two_planes_synthetic_k_quant_model_error_is_exact_route_class() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    let model = load_with(&path, Family::Dot4, Some(true), Some(2));
    teacher_forced(&model, &reference("synkq_q4_k_m_f64.json"), 0.01, 0.1);
    teacher_forced(&model, &reference("synkq_q4_k_m_llamacpp.json"), 0.1, 0.2);
    assert_no_defects(&model);
}

/// Issue 22's bound, for the route as a user loads it (f16 KV cache, as llama.cpp's
/// reference has) with x on `planes` int8 planes, on the positions where a model's `_f64` and `_llamacpp`
/// references processed the same tokens (the prompt and the greedy tokens both picked,
/// so both logits are of one context) and the logits in both top-5s there: llama.cpp's
/// error is its logit minus the exact one, the default route's its own minus the exact
/// one. The worst must be at most 1.25 times llama.cpp's and the median no larger.
fn route_within_llamacpp(model_path: &Path, name: &str, planes: u32) {
    let exact = reference(&format!("{name}_f64.json"));
    let llama = reference(&format!("{name}_llamacpp.json"));
    let (a, b) = (sequence(&exact), sequence(&llama));
    let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    assert!(
        shared >= exact.prompt_ids.len(),
        "{name}: {shared} shared positions"
    );
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(64),
        routing: Overrides {
            x_planes: Some(planes),
            ..Overrides::default()
        },
        ..LoadOptions::default()
    };
    let model = Model::load(device, model_path, &options).unwrap();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for (pos, &id) in a[..shared].iter().enumerate() {
        let logits = model.forward_logits(Input::Token(id), pos).unwrap();
        for &(tid, l) in &llama.steps[pos].top {
            if let Some(&(_, e)) = exact.steps[pos].top.iter().find(|t| t.0 == tid) {
                ours.push(((logits[tid as usize] - e).abs(), pos));
                theirs.push(((l - e).abs(), pos));
            }
        }
    }
    let stats = |v: &mut Vec<(f32, usize)>| {
        let worst = v
            .iter()
            .copied()
            .fold((0f32, 0), |w, x| if x.0 > w.0 { x } else { w });
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        (worst, v[v.len() / 2].0)
    };
    let ((w, wp), med) = stats(&mut ours);
    let ((lw, lwp), lmed) = stats(&mut theirs);
    eprintln!(
        "{name}: {shared} shared positions, {} logits: {planes} plane(s) worst {w:.4} (pos \
         {wp}), median {med:.4}; llama.cpp worst {lw:.4} (pos {lwp}), median {lmed:.4}",
        ours.len()
    );
    assert!(
        w <= 1.25 * lw,
        "{name}: the worst logit error {w} (pos {wp}) > 1.25 x llama.cpp's {lw}"
    );
    assert!(
        med <= lmed,
        "{name}: the median logit error {med} > llama.cpp's {lmed}"
    );
    assert_no_defects(&model);
}

// One plane (the default route) fails the default model's: worst 0.667 at position 5
// against 1.25 x 0.399, median 0.151 against 0.142 (lavapipe); two planes pass it with
// 0.0064 and 0.0021.

#[test]
fn two_planes_default_model_error_within_llamacpp() {
    route_within_llamacpp(&default_model_path().unwrap(), "smollm2_q4_1", 2);
}

#[test]
fn two_planes_synthetic_k_quant_model_error_within_llamacpp() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    route_within_llamacpp(&path, "synkq_q4_k_m", 2);
}

#[test]
fn dot4_default_model_agrees_with_llamacpp() {
    agreement_with_llamacpp(Family::Dot4);
}
