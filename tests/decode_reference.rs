//! Whole-model decode against `tests/reference/`: exact-math (`_f64`) references,
//! teacher-forced position by position, free-running greedy tokens, and llama.cpp's
//! output as an independent check. See that folder's README for what each file is.
//!
//! A model's cache at a position depends only on the tokens up to it, so where two
//! sequences checked on one model share their first tokens, those positions run once
//! (the default model's exact-math and llama.cpp sequences share their first 10), and
//! the three tests of the default model on the coop route share one pass (see
//! [`coop_default_model`]). The seven prompts of the default route's test are decoded
//! together by an [`Engine`], a row of each step each, every position a decode step's
//! (forced tokens, [`forced_logits`]): a row's logits are its bits alone
//! (`tests/engine.rs`), and on the dot4 route lavapipe takes a step of 7 rows in 1.5
//! times one row's time (the seven prompts took 286 s, 549 s a position at a time).
//! The coop route's pass did not gain (as three rows of one engine it took 662 s
//! against 408 s, both runs sharing the machine with other tests), so its sequences
//! still go a position at a time.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use brass::device::Device;
use brass::hub::default_model_path;
use brass::kernels::attention::KvType;
use brass::kernels::matvec::Family;
use brass::model::{Engine, Event, Input, LoadOptions, Model, SequenceId, SequenceOptions};
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
            ..Default::default()
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

/// Teacher-forces every one of `seqs` through `engine` at once, each a row of the
/// steps: its first token its prompt and the rest forced (so every position is a
/// decode step's), the logits of each step asked. Returns every position's logits, as
/// [`teacher_forced_logits`] does.
fn forced_logits(engine: &mut Engine, seqs: &[&[u32]]) -> Vec<Vec<Vec<f32>>> {
    let ids: Vec<SequenceId> = seqs
        .iter()
        .map(|seq| {
            let options = SequenceOptions {
                max_tokens: seq.len(),
                forced: seq[1..].to_vec(),
                logits: true,
                stop_at_eog: false,
                ..SequenceOptions::default()
            };
            engine.add(&seq[..1], options).unwrap()
        })
        .collect();
    let mut logits: BTreeMap<SequenceId, Vec<Vec<f32>>> = BTreeMap::new();
    while engine.running() > 0 {
        for event in engine.step().unwrap() {
            if let Event::Token {
                seq,
                logits: Some(l),
                ..
            } = event
            {
                logits.entry(seq).or_default().push(l);
            }
        }
    }
    ids.iter()
        .map(|id| {
            engine.remove(*id).unwrap();
            logits.remove(id).unwrap_or_default()
        })
        .collect()
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

/// Teacher-forced along the exact-math and llama.cpp references of `model_path`
/// (`name`: their files' stem) with x on `planes` int8 planes (default one), each
/// checked with its bound and top-1 gap.
fn dot4_error_within(model_path: &Path, name: &str, planes: Option<u32>, bounds: [(f32, f32); 2]) {
    let model = load_with(model_path, Family::Dot4, Some(true), planes);
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
fn dot4_synthetic_k_quant_model_error_is_llamacpp_class() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    dot4_error_within(&path, "synkq_q4_k_m", None, [(0.05, 0.1), (0.1, 0.2)]);
}

#[test]
fn dot4_two_planes_default_model_error_is_exact_route_class() {
    let path = default_model_path().unwrap();
    dot4_error_within(&path, "smollm2_q4_1", Some(2), [(0.08, 0.1), (1.2, 2.4)]);
}

#[test]
fn dot4_two_planes_synthetic_k_quant_model_error_is_exact_route_class() {
    let path = common::reference_path("synkq_q4_k_m.gguf");
    dot4_error_within(&path, "synkq_q4_k_m", Some(2), [(0.01, 0.1), (0.1, 0.2)]);
}

/// Issue 22's bound, for the route as a user loads it (f16 KV cache, as llama.cpp's
/// reference has) with x on `planes` int8 planes, on the positions where a model's
/// `_f64` and `_llamacpp` references processed the same tokens (the prompt and the greedy tokens both picked,
/// so both logits are of one context) and the logits in both top-5s there: llama.cpp's
/// error is its logit minus the exact one, the default route's its own minus the exact
/// one. The worst must be at most 1.25 times llama.cpp's and the median no larger.
fn route_within_llamacpp(model_path: &Path, name: &str, planes: u32) {
    let exact = reference(&format!("{name}_f64.json"));
    let llama = reference(&format!("{name}_llamacpp.json"));
    let (a, b) = (sequence(&exact), sequence(&llama));
    let shared = shared_prefix(&a, &b);
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
    assert_no_defects(&defects(&model));
}

// One plane (the default route) fails the default model's: worst 0.667 at position 5
// against 1.25 x 0.399, median 0.151 against 0.142 (lavapipe); two planes pass it with
// 0.0064 and 0.0021. Those 45 logits are too few to tell two engines of one rounding
// apart: llama.cpp fails the same bound against itself with only its attention kernel
// switched (flash attention off: worst 0.560, median 0.150). The default route is
// compared on 1,430 logits instead, below.

/// `smollm2_q4_1_prompts.json`: sequences teacher-forced through exact math and llama.cpp.
#[derive(serde::Deserialize)]
struct Prompts {
    sequences: Vec<PromptSequence>,
}

/// A prompt and exact math's greedy continuation, and at each position exact math's
/// top-5 as (id, exact logit, llama.cpp's logit).
#[derive(serde::Deserialize)]
struct PromptSequence {
    name: String,
    ids: Vec<u32>,
    steps: Vec<PromptStep>,
}

#[derive(serde::Deserialize)]
struct PromptStep {
    top: Vec<(u32, f32, f32)>,
}

/// The error at quantile `q` of `errors` (sorted), nearest rank.
fn quantile(errors: &[f32], q: f64) -> f32 {
    errors[((q * errors.len() as f64) as usize).min(errors.len() - 1)]
}

/// Issue 22: the default route's int8 error is llama.cpp's. The default route as a user
/// loads it (int8 x, f16 KV cache) and llama.cpp's CPU backend (which rounds x the same
/// way) are teacher-forced along exact math's sequences of seven prompts (prose, chat,
/// code, JSON, numbers: 286 positions) and compared with exact math on its top-5 at
/// every position: 1,430 logits, pooled. Bounds: the median within 1.1x of llama.cpp's,
/// the 99th percentile within 1.25x, the worst within 2.5x.
///
/// Not the letter (worst within 1.25x, median no worse), which no engine that
/// rounds as llama.cpp does meets reliably: with every value's rounding drawn afresh
/// (a scale up to 1 % larger at random, `examples/int8_tail --dither 0.01`), eight
/// draws each of brass's and llama.cpp's arithmetic give pooled medians of 0.150-0.176,
/// 99th percentiles of 0.68-1.00 and worsts of 1.02-2.05, the two alike; one draw's
/// worst exceeds 1.25x another's in 17 % of pairs and its median another's in half.
/// So the worst bound here catches a tail gone wrong, not the lottery of one logit,
/// and the 99th percentile carries the 1.25x.
///
/// Measured on lavapipe, subgroup sizes 8 / 4 / 16: median 0.1445 / 0.1431 / 0.1381,
/// 99th percentile 0.697 / 0.792 / 0.800, worst 1.222 (code prompt, position 37) /
/// 1.727 / 1.443 (chat prompt, positions 19 and 10); llama.cpp 0.1467, 0.782, 0.993
/// (0.1429, 0.733, 1.050 with its flash attention off). A tail twice llama.cpp's, what
/// the issue feared, fails the 99th percentile.
#[test]
fn default_route_error_is_llamacpps_over_seven_prompts() {
    let prompts: Prompts =
        serde_json::from_value(common::reference_json("smollm2_q4_1_prompts.json")).unwrap();
    // The exact logits are examples/int8_tail's float64 pass; along the France sequence
    // they must be the independent numpy reference's.
    let france = reference("smollm2_q4_1_f64.json");
    let first = &prompts.sequences[0];
    assert_eq!(
        first.ids,
        sequence(&france),
        "{}: not the f64 reference's sequence",
        first.name
    );
    for (pos, (step, r)) in first.steps.iter().zip(&france.steps).enumerate() {
        for &(id, exact, _) in &step.top {
            let (_, want) = *r.top.iter().find(|t| t.0 == id).expect("the same top-5");
            assert!(
                (exact - want).abs() < 1e-4,
                "pos {pos} id {id}: {exact} against {want}"
            );
        }
    }

    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let longest = prompts.sequences.iter().map(|s| s.ids.len()).max().unwrap();
    let options = LoadOptions {
        context: Some(longest),
        sequences: prompts.sequences.len(),
        ..LoadOptions::default()
    };
    let mut engine = Engine::load(device, default_model_path().unwrap(), &options).unwrap();
    let seqs: Vec<&[u32]> = prompts.sequences.iter().map(|s| s.ids.as_slice()).collect();
    let logits = forced_logits(&mut engine, &seqs);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut ours_worst = (0f32, "", 0);
    for (seq, logits) in prompts.sequences.iter().zip(&logits) {
        for (pos, (step, l)) in seq.steps.iter().zip(logits).enumerate() {
            for &(id, exact, llama) in &step.top {
                let err = (l[id as usize] - exact).abs();
                if err > ours_worst.0 {
                    ours_worst = (err, seq.name.as_str(), pos);
                }
                ours.push(err);
                theirs.push((llama - exact).abs());
            }
        }
    }
    ours.sort_by(f32::total_cmp);
    theirs.sort_by(f32::total_cmp);
    let [(med, p99, worst), (lmed, lp99, lworst)] =
        [&ours, &theirs].map(|v| (quantile(v, 0.5), quantile(v, 0.99), *v.last().unwrap()));
    let (_, at, pos) = ours_worst;
    eprintln!(
        "{} logits: default route median {med:.4}, 99th percentile {p99:.3}, worst {worst:.3} \
         ({at}, position {pos}); llama.cpp {lmed:.4}, {lp99:.3}, {lworst:.3}",
        ours.len()
    );
    assert!(med <= 1.1 * lmed, "median {med} > 1.1 x llama.cpp's {lmed}");
    assert!(
        p99 <= 1.25 * lp99,
        "99th percentile {p99} > 1.25 x llama.cpp's {lp99}"
    );
    assert!(
        worst <= 2.5 * lworst,
        "worst {worst} ({at}, position {pos}) > 2.5 x llama.cpp's {lworst}"
    );
    assert_no_defects(&defects(engine.model()));
}

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
