//! `Engine`: many sequences on one model. Each sequence's logits are bit for bit what
//! it gets alone, whoever joins, leaves or shares its steps; a fork continues as its
//! prefix processed again; a saved sequence continues exactly in another process; bad
//! files and too many sequences are refused with what is wrong.

mod common;
#[path = "common/coop_emulation.rs"]
mod coop_emulation;
#[path = "common/emulated_units.rs"]
mod emulated_units;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
use brass::gguf::GgufFile;
use brass::model::{Engine, Event, LoadOptions, SequenceId, SequenceOptions, StopReason};
use brass::Error;

const VOCAB: u64 = 512;
const CONTEXT: usize = 128;
/// Small, so prompts take several batches and a batch of one.
const UBATCH: usize = 16;
const SEQUENCES: usize = 8;
const EOS: u32 = 2;

fn spec(seed: u64) -> SyntheticSpec {
    SyntheticSpec {
        name: format!("engine-{seed}"),
        hidden: 256,
        ffn: 512,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: VOCAB,
        context: 4096,
        rope_base: 10_000.0,
        mix: QuantMix::Q4KM,
        lm_head: None,
        seed,
        arch: Arch::Llama,
        head_dim: None,
        sliding_window: None,
    }
}

/// A synthetic file per seed, written once per test process.
fn model_file(seed: u64) -> PathBuf {
    static FILES: OnceLock<std::sync::Mutex<BTreeMap<u64, PathBuf>>> = OnceLock::new();
    let files = FILES.get_or_init(Default::default);
    let mut files = files.lock().unwrap();
    files
        .entry(seed)
        .or_insert_with(|| {
            let path = std::env::temp_dir()
                .join(format!("brass-engine-{seed}-{}.gguf", std::process::id()));
            write_synthetic(&spec(seed), &path, |_, _| {}).unwrap();
            path
        })
        .clone()
}

fn options(sequences: usize) -> LoadOptions {
    LoadOptions {
        context: Some(CONTEXT),
        ubatch: Some(UBATCH),
        sequences,
        ..LoadOptions::default()
    }
}

fn engine_of(path: &Path, options: &LoadOptions) -> Engine {
    Engine::load(Arc::new(common::gpu()), path, options).unwrap()
}

/// An engine on the adapter's matrix units, or on emulated ones where it has none
/// (`emulated_units`: lavapipe).
fn engine_on_units(path: &Path, options: &LoadOptions) -> Engine {
    Engine::load(
        emulated_units::on_matrix_units(common::gpu()),
        path,
        options,
    )
    .unwrap()
}

fn greedy(max_tokens: usize) -> SequenceOptions {
    SequenceOptions {
        max_tokens,
        logits: true,
        ..SequenceOptions::default()
    }
}

/// What a sequence produced: each token with its logits' bits, and why it stopped.
#[derive(Debug, Default, PartialEq)]
struct Run {
    tokens: Vec<(u32, Vec<u32>)>,
    stop: Option<StopReason>,
}

fn record(runs: &mut BTreeMap<SequenceId, Run>, events: Vec<Event>) {
    for e in events {
        match e {
            Event::Token { seq, id, logits } => {
                let logits = logits.expect("asked for logits");
                let bits = logits.iter().map(|v| v.to_bits()).collect();
                runs.entry(seq).or_default().tokens.push((id, bits));
            }
            Event::Done { seq, reason } => {
                let run = runs.entry(seq).or_default();
                assert!(run.stop.is_none(), "{seq} stopped twice");
                run.stop = Some(reason);
            }
        }
    }
}

/// Every prompt of `prompts` added at once and stepped until all are done (each up to
/// `max_tokens`, end of generation ignored), its run in the prompts' order.
fn all_together(engine: &mut Engine, prompts: &[&Vec<u32>], max_tokens: usize) -> Vec<Run> {
    let opts = SequenceOptions {
        stop_at_eog: false,
        ..greedy(max_tokens)
    };
    let sequences: Vec<(&[u32], SequenceOptions)> = prompts
        .iter()
        .map(|p| (p.as_slice(), opts.clone()))
        .collect();
    run_together(engine, &sequences)
}

/// Each prompt added with its options at once and stepped until all are done, then
/// removed; their runs in that order.
fn run_together(engine: &mut Engine, sequences: &[(&[u32], SequenceOptions)]) -> Vec<Run> {
    let ids: Vec<SequenceId> = sequences
        .iter()
        .map(|(prompt, options)| engine.add(prompt, options.clone()).unwrap())
        .collect();
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    ids.iter()
        .map(|id| {
            engine.remove(*id).unwrap();
            runs.remove(id).unwrap()
        })
        .collect()
}

/// Runs `prompt` alone on `engine` to its end.
fn alone(engine: &mut Engine, prompt: &[u32], max_tokens: usize) -> Run {
    let seq = engine.add(prompt, greedy(max_tokens)).unwrap();
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    engine.remove(seq).unwrap();
    runs.remove(&seq).unwrap_or_default()
}

fn prompts() -> Vec<Vec<u32>> {
    let mut rng = common::Rng::new(42);
    let mut random = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| 3 + (rng.next_u64() % (VOCAB - 3)) as u32)
            .collect()
    };
    vec![
        random(1),
        random(37),
        // Hostile: the end-of-sequence id, over and over.
        vec![EOS; 70],
        random(3),
        random(16),
        random(60),
        random(17),
        random(2),
    ]
}

const MAX_TOKENS: usize = 6;

/// The default routes: the Q4_K and Q6_K matvecs stage up to 8 of a step's rows of x
/// at once and dot each loaded weight slice with every one (router clause 7).
#[test]
fn each_sequence_gets_bit_for_bit_what_it_gets_alone() {
    let engine = each_sequence_alone_on(engine_of);
    let plan = engine.model().plan().to_string();
    assert!(
        plan.contains("steps of up to 8 rows: 8 columns of x staged at once"),
        "{plan}"
    );
}

/// As [`each_sequence_gets_bit_for_bit_what_it_gets_alone`], on the adapter's matrix
/// units or emulated ones: prompts on flash attention and the tiled matmuls, steps of
/// many rows on the decode columns (the H200's default routes).
#[test]
fn each_sequence_on_matrix_units_gets_bit_for_bit_what_it_gets_alone() {
    let engine = each_sequence_alone_on(engine_on_units);
    let plan = engine.model().plan().to_string();
    if engine.model().device().profile().coop_matrix.is_some() {
        assert!(plan.contains("causal flash attention on"), "{plan}");
    }
}

/// The check of [`each_sequence_gets_bit_for_bit_what_it_gets_alone`] on the engine
/// `load` gives; the engine, for what else a caller checks of its plan.
fn each_sequence_alone_on(load: fn(&Path, &LoadOptions) -> Engine) -> Engine {
    each_sequence_alone_with(load, options(SEQUENCES))
}

/// As [`each_sequence_gets_bit_for_bit_what_it_gets_alone`], the dot4 matrices reading
/// x in place and dotting each loaded slice with up to 8 of a step's rows at once
/// (`Overrides::columns_at_once`), where their kernels split slices (Q4_K, Q5_K).
#[test]
fn each_sequence_with_columns_at_once_gets_bit_for_bit_what_it_gets_alone() {
    let mut options = options(SEQUENCES);
    options.routing = brass::router::Overrides {
        x_q8: Some(true),
        glu_q8: Some(true),
        x_in_place: Some(true),
        columns_at_once: Some(8),
        ..options.routing
    };
    let engine = each_sequence_alone_with(engine_of, options);
    let plan = engine.model().plan().to_string();
    assert!(
        plan.contains("each weight slice dotted with 8 columns at once"),
        "{plan}"
    );
}

fn each_sequence_alone_with(
    load: fn(&Path, &LoadOptions) -> Engine,
    options: LoadOptions,
) -> Engine {
    let path = model_file(5);
    let mut engine = load(&path, &options);
    let plan = engine.model().plan().to_string();
    assert!(
        plan.contains(&format!("decode rows: {SEQUENCES} sequences step together")),
        "{plan}"
    );
    let prompts = prompts();
    let expected: Vec<Run> = prompts
        .iter()
        .map(|p| alone(&mut engine, p, MAX_TOKENS))
        .collect();
    for (p, run) in prompts.iter().zip(&expected) {
        assert!(
            !run.tokens.is_empty() || matches!(run.stop, Some(StopReason::Stop(_))),
            "a prompt of {} tokens gave nothing: {run:?}",
            p.len()
        );
    }
    for n in 1..=SEQUENCES {
        // Sequence i joins at step 2i (so prompts are mid-batch while others decode);
        // the second leaves after its third token.
        let mut runs = BTreeMap::new();
        let mut ids: Vec<Option<SequenceId>> = vec![None; n];
        let mut step = 0;
        loop {
            for (i, id) in ids.iter_mut().enumerate() {
                if id.is_none() && step == 2 * i {
                    *id = Some(engine.add(&prompts[i], greedy(MAX_TOKENS)).unwrap());
                }
            }
            let all_joined = ids.iter().all(Option::is_some);
            if all_joined && engine.running() == 0 {
                break;
            }
            record(&mut runs, engine.step().unwrap());
            if let Some(leaver) = ids.get(1).copied().flatten() {
                let run = runs.entry(leaver).or_default();
                if run.stop.is_none() && run.tokens.len() == 3 {
                    engine.remove(leaver).unwrap();
                    run.stop = Some(StopReason::MaxTokens);
                }
            }
            step += 1;
            assert!(step < 1000, "the engine never finished");
        }
        for (i, id) in ids.iter().enumerate() {
            let id = id.unwrap();
            let got = runs.remove(&id).unwrap_or_default();
            let want = &expected[i];
            let (got_ids, want_ids): (Vec<u32>, Vec<u32>) = (
                got.tokens.iter().map(|t| t.0).collect(),
                want.tokens.iter().map(|t| t.0).collect(),
            );
            let compared = got.tokens.len();
            if i == 1 && n > 1 {
                assert_eq!(compared, 3.min(want.tokens.len()), "the leaver's tokens");
            } else {
                assert_eq!(got.stop, want.stop, "N = {n}, sequence {i}: how it stopped");
                assert_eq!(compared, want.tokens.len(), "N = {n}, sequence {i}");
            }
            assert_eq!(
                got_ids[..],
                want_ids[..compared],
                "N = {n}, sequence {i}: tokens"
            );
            for (t, (g, w)) in got.tokens.iter().zip(&want.tokens).enumerate() {
                assert!(
                    g.1 == w.1,
                    "N = {n}, sequence {i}, token {t}: logits differ from the sequence alone"
                );
            }
            if engine.sequences().contains(&id) {
                engine.remove(id).unwrap();
            }
        }
        assert!(engine.sequences().is_empty());
    }
    engine
}

/// Prompts joining together are processed in the same step while they come to at most
/// a batch's tokens, each cut as it is alone: short ones all give their first token at
/// the first step, one that does not fit waits for the next, and each sequence's tokens
/// and logits are bit for bit what it gets alone.
#[test]
fn prompts_joining_together_share_a_step_up_to_a_batch() {
    prompts_joining_together_on(engine_of);
}

/// As [`prompts_joining_together_share_a_step_up_to_a_batch`], on the adapter's matrix
/// units or emulated ones (prompts on flash attention).
#[test]
fn prompts_joining_together_on_matrix_units_share_a_step_up_to_a_batch() {
    prompts_joining_together_on(engine_on_units);
}

fn prompts_joining_together_on(load: fn(&Path, &LoadOptions) -> Engine) {
    let path = model_file(5);
    let mut rng = common::Rng::new(7);
    // Prompt tokens before each one's last: 2 + 1 + 0 + 8 = 11 of the batch's 16, then
    // 16 more, which must wait.
    let prompts: Vec<Vec<u32>> = [3usize, 2, 1, 9, 17]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| 3 + (rng.next_u64() % (VOCAB - 3)) as u32)
                .collect()
        })
        .collect();
    let mut engine = load(&path, &options(prompts.len()));
    let expected: Vec<Run> = prompts
        .iter()
        .map(|p| alone(&mut engine, p, MAX_TOKENS))
        .collect();
    let ids: Vec<SequenceId> = prompts
        .iter()
        .map(|p| engine.add(p, greedy(MAX_TOKENS)).unwrap())
        .collect();
    let mut runs = BTreeMap::new();
    record(&mut runs, engine.step().unwrap());
    for (i, id) in ids.iter().enumerate() {
        // Its first token, or its stop where that token ends it.
        assert_eq!(
            runs.contains_key(id),
            i < 4,
            "prompt {i} ({} tokens): heard from at the first step",
            prompts[i].len()
        );
    }
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    for (i, id) in ids.iter().enumerate() {
        assert!(
            runs.remove(id).unwrap_or_default() == expected[i],
            "prompt {i}: not what it gets alone"
        );
    }
}

/// Greedy sequences that ask for no logits have each step's pass queued ahead of the
/// host (ids passed on the GPU): the same tokens as each alone, through joins, leaves
/// and stops.
#[test]
fn greedy_steps_queued_ahead_give_the_tokens_each_gives_alone() {
    let path = model_file(5);
    let mut engine = engine_of(&path, &options(SEQUENCES));
    let plain = |max_tokens| SequenceOptions {
        max_tokens,
        ..SequenceOptions::default()
    };
    let ids_of = |engine: &mut Engine, seq: SequenceId| engine.tokens(seq).unwrap().to_vec();
    let prompts = prompts();
    let lengths = [9, 3, 12, 7, 1, 10, 4, 8];
    let mut expected = Vec::new();
    for (p, &n) in prompts.iter().zip(&lengths) {
        let seq = engine.add(p, plain(n)).unwrap();
        while engine.running() > 0 {
            engine.step().unwrap();
        }
        expected.push((
            ids_of(&mut engine, seq),
            engine.stopped(seq).unwrap().cloned(),
        ));
        engine.remove(seq).unwrap();
        // Asking for logits keeps every pass waiting for the host: the passes queued
        // ahead (two in flight) give the same tokens and stop.
        let waited = alone(&mut engine, p, n);
        let (queued, stop) = expected.last().unwrap();
        let waited_ids: Vec<u32> = waited.tokens.iter().map(|t| t.0).collect();
        assert_eq!(
            queued[p.len()..],
            waited_ids[..],
            "prompt of {} tokens",
            p.len()
        );
        assert_eq!(
            stop.as_ref(),
            waited.stop.as_ref(),
            "prompt of {} tokens",
            p.len()
        );
    }
    let mut ids: Vec<Option<SequenceId>> = vec![None; SEQUENCES];
    let mut step = 0;
    let mut left = None;
    while ids.iter().any(Option::is_none) || engine.running() > 0 {
        for (i, id) in ids.iter_mut().enumerate() {
            if id.is_none() && step == 3 * i {
                *id = Some(engine.add(&prompts[i], plain(lengths[i])).unwrap());
            }
        }
        engine.step().unwrap();
        // The sixth leaves early, while a pass including it may be queued.
        if let Some(six) = ids[5] {
            if left.is_none() && engine.tokens(six).unwrap().len() == prompts[5].len() + 2 {
                left = Some(ids_of(&mut engine, six));
                engine.remove(six).unwrap();
            }
        }
        step += 1;
        assert!(step < 1000);
    }
    for (i, id) in ids.iter().enumerate() {
        let (want, stop) = &expected[i];
        if i == 5 {
            let left = left.as_ref().expect("the sixth left");
            assert_eq!(left[..], want[..left.len()]);
            continue;
        }
        let seq = id.unwrap();
        assert_eq!(&ids_of(&mut engine, seq), want, "sequence {i}");
        assert_eq!(engine.stopped(seq).unwrap(), stop.as_ref(), "sequence {i}");
    }
}

/// Random prompts of ordinary ids (no special ones), `n` tokens a call.
fn random_tokens(seed: u64) -> impl FnMut(usize) -> Vec<u32> {
    let mut rng = common::Rng::new(seed);
    move |n| {
        (0..n)
            .map(|_| 3 + (rng.next_u64() % (VOCAB - 3)) as u32)
            .collect()
    }
}

#[test]
fn a_fork_continues_as_its_prefix_processed_again() {
    let path = model_file(7);
    let mut engine = engine_of(&path, &options(4));
    let mut random = random_tokens(9);
    // 2 batches and one token: the forks' first batch starts where a fresh
    // sequence's third does, so both cut every prompt alike.
    let system = random(2 * UBATCH + 1);
    let questions = [random(5), random(20), random(1)];
    let parent = engine.add(&system, greedy(0)).unwrap();
    while engine.running() > 0 {
        engine.step().unwrap();
    }
    assert_eq!(
        engine.stopped(parent).unwrap(),
        Some(&StopReason::MaxTokens)
    );
    let forks: Vec<SequenceId> = questions
        .iter()
        .map(|q| engine.fork(parent, q, greedy(MAX_TOKENS)).unwrap())
        .collect();
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    for f in &forks {
        engine.remove(*f).unwrap();
    }
    engine.remove(parent).unwrap();
    for (q, f) in questions.iter().zip(&forks) {
        let full: Vec<u32> = system.iter().chain(q).copied().collect();
        let want = alone(&mut engine, &full, MAX_TOKENS);
        let got = runs.remove(f).unwrap_or_default();
        assert_eq!(got, want, "a fork with a question of {} tokens", q.len());
    }
}

/// A prompt that begins as an earlier one did takes that one's rows, copied
/// (`add_reusing`) or in place (`replace`), as far as `reusable` says: whole prompt
/// batches, or all but the last token where the earlier prompt had its length. Each
/// gets bit for bit the run it gets from scratch, and so does one that takes the rows
/// of a sequence that itself took rows. A fork's rows were cut from elsewhere: none.
///
/// On lavapipe this model's prompt rows have the same bits however the prompt is cut
/// (taking 37 rows where 32 are whole batches, or a last part of one token, which goes
/// by the decode pass, gave the same runs), so this cannot tell the rule from a laxer
/// one here: the rule is for routes whose batch kernels differ from the decode pass's.
#[test]
fn a_prompt_takes_an_earlier_prompts_rows_and_gets_its_run_from_scratch() {
    let path = model_file(7);
    let mut engine = engine_of(&path, &options(6));
    let mut random = random_tokens(13);
    // Two batches and six tokens: the rows of the first 2 * UBATCH + 5 are batched, the
    // last batch of them a part one.
    let earlier = random(2 * UBATCH + 6);
    let n = earlier.len();
    let with = |head: &[u32], tail: Vec<u32>| -> Vec<u32> { [head, &tail].concat() };
    let mut last_other = earlier.clone();
    last_other[n - 1] = if earlier[n - 1] == 3 { 4 } else { 3 };
    let cases: Vec<(&str, Vec<u32>, usize)> = vec![
        ("the same", earlier.clone(), n - 1),
        ("another last token", last_other, n - 1),
        ("longer", with(&earlier, random(7)), 2 * UBATCH),
        (
            "shorter, then apart",
            with(&earlier[..UBATCH + 3], random(4)),
            UBATCH,
        ),
        (
            "apart from the first",
            with(&[earlier[0] ^ 1], random(9)),
            0,
        ),
    ];
    let from = engine.add(&earlier, greedy(0)).unwrap();
    while engine.running() > 0 {
        engine.step().unwrap();
    }
    for (what, prompt, rows) in &cases {
        assert_eq!(engine.reusable(from, prompt).unwrap(), *rows, "{what}");
    }
    let fork = engine.fork(from, &[], greedy(0)).unwrap();
    assert_eq!(engine.reusable(fork, &earlier).unwrap(), 0, "a fork's rows");
    engine.remove(fork).unwrap();

    let mut copies = Vec::new();
    for (what, prompt, rows) in &cases[1..] {
        let (seq, took) = engine
            .add_reusing(from, prompt, greedy(MAX_TOKENS))
            .unwrap();
        assert_eq!(took, *rows, "{what}");
        copies.push(seq);
    }
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    let mut got: Vec<(&str, &[u32], Run)> = cases[1..]
        .iter()
        .zip(&copies)
        .map(|((what, prompt, _), seq)| (*what, prompt.as_slice(), runs.remove(seq).unwrap()))
        .collect();
    // In place: the earlier prompt again where it stands, and the longer prompt again
    // from the sequence that took its rows from the earlier one.
    let (same, _, _) = &cases[0];
    let (seq, took) = engine.replace(from, &earlier, greedy(MAX_TOKENS)).unwrap();
    assert_eq!(took, n - 1, "{same}, in place");
    let (longer, longer_prompt, _) = &cases[2];
    let (again, took_again) = engine
        .replace(copies[1], longer_prompt, greedy(MAX_TOKENS))
        .unwrap();
    assert_eq!(took_again, longer_prompt.len() - 1, "{longer}, in place");
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    got.push((same, &earlier, runs.remove(&seq).unwrap()));
    got.push((longer, longer_prompt, runs.remove(&again).unwrap()));
    for id in engine.sequences() {
        engine.remove(id).unwrap();
    }
    for (what, prompt, run) in got {
        let want = alone(&mut engine, prompt, MAX_TOKENS);
        assert_eq!(run, want, "{what}: its rows taken, against from scratch");
    }
}

/// Forced tokens are fed in place of drawn ones. A sequence forced along the tokens a
/// sequence draws alone gets that one's logits bit for bit; one forced along other
/// tokens hands those out and then draws from them; and where no logits are asked (so
/// the engine queues greedy passes ahead, their ids left on the GPU), the forced
/// tokens are still what each pass is fed: the same tokens follow as with logits.
#[test]
fn forced_tokens_are_fed_in_place_of_drawn_ones() {
    let path = model_file(5);
    let mut engine = engine_of(&path, &options(SEQUENCES));
    let prompts = prompts();
    let prompt = &prompts[1];
    let drawn_alone = alone(&mut engine, prompt, MAX_TOKENS);
    let drawn: Vec<u32> = drawn_alone.tokens.iter().map(|t| t.0).collect();
    assert_eq!(drawn.len(), MAX_TOKENS);
    let forced = |forced: &[u32], logits, max_tokens| SequenceOptions {
        forced: forced.to_vec(),
        logits,
        stop_at_eog: false,
        ..greedy(max_tokens)
    };
    // This synthetic model draws one id after most tokens, so a token fed in place of
    // another often changes nothing that follows. The forced token is one that changes
    // the draw after it: fed the GPU's argmax instead, the tokens would differ.
    let draw_after = |engine: &mut Engine, ids: &[u32]| -> Vec<u32> {
        let sequences: Vec<(&[u32], SequenceOptions)> = ids
            .iter()
            .map(|&id| (prompt.as_slice(), forced(&[id], true, 2)))
            .collect();
        let runs = run_together(engine, &sequences);
        runs.iter().map(|run| run.tokens[1].0).collect()
    };
    let candidates: Vec<u32> = (3..3 + 2 * SEQUENCES as u32).collect();
    let changing: Vec<u32> = candidates
        .chunks(SEQUENCES)
        .flat_map(|ids| {
            let after = draw_after(&mut engine, ids);
            ids.iter()
                .zip(after)
                .filter(|&(_, after)| after != drawn[1])
                .map(|(&id, _)| id)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !changing.is_empty(),
        "none of ids {candidates:?} changes the draw after it"
    );
    let other = &[changing[0]; 3][..];
    assert!(other.iter().all(|id| !drawn.contains(id)), "{other:?}");
    let runs = run_together(
        &mut engine,
        &[
            (prompt, forced(&drawn, true, MAX_TOKENS)),
            (prompt, forced(other, true, MAX_TOKENS)),
            // Sharing the steps: another prompt, drawing.
            (&prompts[4], greedy(MAX_TOKENS)),
        ],
    );
    assert_eq!(runs[0], drawn_alone, "forced along its own draws");
    let other_run = &runs[1];
    let ids: Vec<u32> = other_run.tokens.iter().map(|t| t.0).collect();
    assert_eq!(ids[..3], other[..], "the forced tokens are handed out");
    assert_eq!(ids.len(), MAX_TOKENS, "{:?}", other_run.stop);
    // The first step's logits are the prompt's, whatever is forced after.
    assert_eq!(other_run.tokens[0].1, drawn_alone.tokens[0].1);
    assert_ne!(ids[3], drawn[3], "drawing after the forced tokens");
    let no_logits = engine
        .add(prompt, forced(other, false, MAX_TOKENS))
        .unwrap();
    while engine.running() > 0 {
        for event in engine.step().unwrap() {
            assert!(!matches!(
                event,
                Event::Token {
                    logits: Some(_),
                    ..
                }
            ));
        }
    }
    assert_eq!(engine.tokens(no_logits).unwrap()[prompt.len()..], ids[..]);
    let bad = SequenceOptions {
        forced: vec![VOCAB as u32],
        ..greedy(1)
    };
    let refused = engine.add(prompt, bad).unwrap_err().to_string();
    assert!(refused.contains("outside the vocabulary"), "{refused}");
}

/// Each token of `run` and a fingerprint of its logits' bits, as one line a child
/// process can be handed.
fn fingerprints(run: &Run) -> String {
    let each = run.tokens.iter().map(|(id, bits)| {
        let print = bits.iter().fold(0u32, |h, b| h.rotate_left(5) ^ b);
        format!("{id}:{print:08x}")
    });
    each.collect::<Vec<_>>().join(",")
}

/// Where the child process finds what to restore, and what it must produce.
const RESTORE_ENV: &str = "BRASS_TEST_RESTORE";

#[test]
fn a_saved_sequence_continues_exactly_in_another_process() {
    let path = model_file(5);
    let mut engine = engine_of(&path, &options(2));
    let prompt: Vec<u32> = (0..23).map(|i| 3 + (i * 37 % 500) as u32).collect();
    let seq = engine.add(&prompt, greedy(usize::MAX)).unwrap();
    let mut runs = BTreeMap::new();
    while runs.get(&seq).map_or(0, |r: &Run| r.tokens.len()) < 4 {
        record(&mut runs, engine.step().unwrap());
    }
    let saved = std::env::temp_dir().join(format!("brass-engine-{}.seq", std::process::id()));
    engine.save(seq, &saved).unwrap();
    let before = runs.remove(&seq).unwrap().tokens.len();
    while runs.get(&seq).map_or(0, |r: &Run| r.tokens.len()) < 6 {
        record(&mut runs, engine.step().unwrap());
    }
    let expected = fingerprints(&runs[&seq]);
    assert_eq!(before, 4);
    drop(engine);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "restored_child", "--nocapture"])
        .env(
            RESTORE_ENV,
            format!("{}|{}|{}", path.display(), saved.display(), expected),
        )
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the restoring process failed:\n{log}");
    assert!(log.contains("restored: 6 tokens as expected"), "{log}");
    std::fs::remove_file(&saved).ok();
}

/// Run by `a_saved_sequence_continues_exactly_in_another_process` in a process of its
/// own; fails when run without it.
#[test]
#[ignore = "a child of a_saved_sequence_continues_exactly_in_another_process"]
fn restored_child() {
    let what = std::env::var(RESTORE_ENV).expect("run by its parent test");
    let [model, saved, expected]: [&str; 3] =
        what.splitn(3, '|').collect::<Vec<_>>().try_into().unwrap();
    let mut engine = engine_of(Path::new(model), &options(2));
    let seq = engine.restore(saved, greedy(6)).unwrap();
    let mut runs = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut runs, engine.step().unwrap());
    }
    let got = fingerprints(&runs[&seq]);
    assert_eq!(got, expected);
    println!("restored: {} tokens as expected", runs[&seq].tokens.len());
}

fn restore_error(engine: &mut Engine, file: &Path) -> String {
    match engine.restore(file, greedy(1)) {
        Ok(_) => panic!("{} was restored", file.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_saved_files_are_refused_with_what_is_wrong() {
    let path = model_file(5);
    let mut engine = engine_of(&path, &options(2));
    let seq = engine.add(&[5, 6, 7, 8, 9, 10], greedy(2)).unwrap();
    while engine.running() > 0 {
        engine.step().unwrap();
    }
    let dir = std::env::temp_dir();
    let good = dir.join(format!("brass-engine-good-{}.seq", std::process::id()));
    engine.save(seq, &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let bad = dir.join(format!("brass-engine-bad-{}.seq", std::process::id()));

    std::fs::write(&bad, &bytes[..bytes.len() - 100]).unwrap();
    assert!(restore_error(&mut engine, &bad).contains("truncated"));
    std::fs::write(&bad, &bytes[..20]).unwrap();
    assert!(restore_error(&mut engine, &bad).contains("truncated"));
    let mut flipped = bytes.clone();
    let at = flipped.len() - 200;
    flipped[at] ^= 0x40;
    std::fs::write(&bad, &flipped).unwrap();
    assert!(restore_error(&mut engine, &bad).contains("corrupted"));
    std::fs::write(&bad, b"not a sequence at all").unwrap();
    assert!(restore_error(&mut engine, &bad).contains("not a saved brass sequence"));

    let mut other = engine_of(&model_file(6), &options(1));
    assert!(restore_error(&mut other, &good).contains("another model"));
    drop(other);
    let q8 = LoadOptions {
        kv: brass::model::KvType::Q8_0,
        ..options(1)
    };
    let mut other = engine_of(&path, &q8);
    assert!(restore_error(&mut other, &good).contains("KV cache"));
    // The good file still restores, and nothing above took a sequence's place.
    drop(other);
    engine.remove(seq).unwrap();
    engine.restore(&good, greedy(1)).unwrap();
    engine.add(&[3], greedy(1)).unwrap();
    std::fs::remove_file(&good).ok();
    std::fs::remove_file(&bad).ok();
}

#[test]
fn too_many_sequences_are_refused_before_allocating() {
    let path = model_file(5);
    let device = common::gpu();
    let file = GgufFile::open(&path).unwrap();
    let options = LoadOptions {
        sequences: 1 << 20,
        ..options(1)
    };
    let err =
        brass::model::plan(&file, brass::device::Device::profile(&device), &options).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
    let said = err.to_string();
    assert!(said.contains(&format!("{} sequences", 1 << 20)), "{said}");

    let zero = LoadOptions {
        sequences: 0,
        ..options
    };
    let err =
        brass::model::plan(&file, brass::device::Device::profile(&device), &zero).unwrap_err();
    assert!(err.to_string().contains("LoadOptions::sequences"), "{err}");

    // A sequence past the ones loaded for is refused, and loses nothing.
    let mut engine = engine_of(&path, &self::options(2));
    let a = engine.add(&[3, 4], greedy(1)).unwrap();
    engine.add(&[5, 6], greedy(1)).unwrap();
    let said = engine.add(&[7], greedy(1)).unwrap_err().to_string();
    assert!(said.contains("all 2 sequences"), "{said}");
    let long = vec![3u32; CONTEXT + 1];
    engine.remove(a).unwrap();
    assert!(matches!(
        engine.add(&long, greedy(1)),
        Err(Error::ContextFull { .. })
    ));
    while engine.running() > 0 {
        engine.step().unwrap();
    }
}

#[test]
fn a_hostile_prompt_of_special_tokens_changes_no_other_sequence() {
    use brass::tokenizer::ChatMessage;
    let path = brass::hub::default_model_path().unwrap();
    let options = LoadOptions {
        context: Some(512),
        sequences: 3,
        ..LoadOptions::default()
    };
    let mut engine = engine_of(&path, &options);
    let tokenizer = engine.tokenizer();
    let conversation = [
        ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
        ChatMessage::user("What is the capital of Japan?"),
    ];
    let chat = tokenizer.encode_chat(&tokenizer.apply_chat_template(&conversation, true).unwrap());
    let completion = tokenizer.encode("The capital of France is", true, false);
    // Every special id the tokenizer knows by text, over and over: starts and ends of
    // turns, end of text.
    let specials = tokenizer.encode("<|im_start|><|im_end|><|endoftext|>", false, true);
    assert_eq!(specials.len(), 3, "{specials:?}");
    let hostile: Vec<u32> = specials.iter().copied().cycle().take(120).collect();
    let runs: Vec<(Vec<u32>, usize)> = vec![(chat, 10), (hostile, 6), (completion, 3)];
    let expected: Vec<Run> = runs
        .iter()
        .map(|(p, n)| alone(&mut engine, p, *n))
        .collect();
    let ids: Vec<SequenceId> = runs
        .iter()
        .map(|(p, n)| engine.add(p, greedy(*n)).unwrap())
        .collect();
    let mut got = BTreeMap::new();
    while engine.running() > 0 {
        record(&mut got, engine.step().unwrap());
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            got.remove(id).unwrap_or_default(),
            expected[i],
            "sequence {i}"
        );
    }
    let text = |run: &Run| {
        let ids: Vec<u32> = run.tokens.iter().map(|t| t.0).collect();
        engine.tokenizer().decode(&ids, true).unwrap()
    };
    assert!(text(&expected[0]).starts_with("The capital of Japan is Tokyo"));
    assert!(text(&expected[2]).starts_with(" Paris."));
}

/// A decode step of many rows (20 sequences, and 23: on an adapter with cooperative
/// matrices, real or emulated (lavapipe), `DECODE_MATRIX_UNITS_FROM` rows or more, the plan's
/// `DecodeRowsOnMatrixUnits`; every prompt is one token, so every step has all): every
/// sequence's tokens and logits are its own whoever shares the steps (the same 20
/// sequences in the opposite order, beside 3 others, give the same bits), and its
/// logits are those it gets alone within f16's rounding of weights and x (exactly
/// them where the steps stay on the column matvec).
#[test]
fn steps_of_many_rows_keep_each_sequence_its_own() {
    many_rows_keep_each_sequence_its_own(options(24));
}

/// A step's decode columns take one block of tokens where its rows fit one and two
/// where they do not (`DecodeColumns`): sequences stepping in the narrow tile (as many
/// as it holds, all in every step) get the same tokens and logits, bit for bit, as
/// when 3 more make their steps take the wide one, whose workgroups take twice the
/// blocks of rows and two of the narrow tile's K parts a subgroup. The crossover is
/// moved down to 4 rows so that lavapipe's tile of 8 tokens (matrices of 8 x 8 at 8
/// lanes) is reached.
#[test]
fn steps_in_either_token_tile_keep_each_sequence_its_bits() {
    tiles_keep_each_sequence_its_bits(None, None);
}

/// As [`steps_in_either_token_tile_keep_each_sequence_its_bits`], each matrix summing K
/// in 3 spans over workgroups (`Overrides::decode_column_spans`), which the span sum
/// adds in span order: the plan says so, the span sum is dispatched, and a sequence's
/// bits still do not move with the tile or the company.
#[test]
fn steps_in_k_spans_keep_each_sequence_its_bits() {
    tiles_keep_each_sequence_its_bits(None, Some(3));
}

/// As [`steps_in_either_token_tile_keep_each_sequence_its_bits`], each workgroup taking
/// 4 blocks of rows (`Overrides::decode_row_blocks`; the tiles' K parts halve), in both
/// tiles alike: a sequence's bits still do not move with the tile or the company.
#[test]
fn steps_in_four_row_blocks_keep_each_sequence_its_bits() {
    tiles_keep_each_sequence_its_bits(Some(4), None);
}

/// The ledger names each tile's pipeline by its blocks of rows and tokens (`rows2x8
/// tokens1x8`): the tiles the plan's clause states are the ones checked, both in
/// `row_blocks` where asked, else the wide one in twice the narrow one's.
fn tiles_keep_each_sequence_its_bits(row_blocks: Option<u32>, spans: Option<u32>) {
    let mut options = options(24);
    options.routing.decode_units_from = Some(4);
    options.routing.decode_column_spans = spans;
    options.routing.decode_row_blocks = row_blocks;
    let path = model_file(13);
    let mut engine = engine_on_units(&path, &options);
    let tiles = engine
        .model()
        .plan()
        .decode_rows
        .iter()
        .find_map(|c| match c {
            brass::router::Clause::DecodeRowsOnMatrixUnits { rows, tokens, .. } => {
                Some((*rows, tokens.0))
            }
            _ => None,
        });
    let Some(((narrow_rows, wide_rows), narrow_tokens)) = tiles else {
        let adapter = &engine.model().device().profile().name;
        eprintln!("{adapter}: no decode columns (no matrix units, real or emulated)");
        return;
    };
    let narrow = narrow_tokens as usize;
    assert!(narrow >= 4, "a narrow tile of {narrow} tokens");
    // The narrow tile is one block of tokens: a block's rows are as many.
    let blocks = |rows: u64| rows / narrow_tokens;
    let expected = match row_blocks {
        Some(asked) => (asked as u64, asked as u64),
        None => (2, 4),
    };
    assert_eq!((blocks(narrow_rows), blocks(wide_rows)), expected);
    let tile_names = [
        format!("rows{}x{narrow} tokens1x", expected.0),
        format!("rows{}x{narrow} tokens2x", expected.1),
    ];
    let mut rng = common::Rng::new(13);
    let mut one = || vec![3 + (rng.next_u64() % (VOCAB - 3)) as u32];
    let prompts: Vec<Vec<u32>> = (0..narrow + 3).map(|_| one()).collect();
    // Every prompt is one token, so every decode step has all of the sequences.
    let all: Vec<&Vec<u32>> = prompts.iter().collect();
    let in_narrow = all_together(&mut engine, &all[..narrow], 4);
    let in_wide = all_together(&mut engine, &all, 4);
    for (i, (a, b)) in in_narrow.iter().zip(&in_wide).enumerate() {
        assert_eq!(a.tokens.len(), 4);
        assert_eq!(a, b, "sequence {i}: its bits moved with the step's tile");
    }
    // Both tiles ran: the ledger counts each one's dispatches.
    let ledger = engine.model().audit();
    for tile in &tile_names {
        let dispatched = ledger
            .entries
            .iter()
            .filter(|e| e.name.contains("_columns") && e.name.contains(tile.as_str()))
            .map(|e| e.dispatches)
            .sum::<u64>();
        assert!(dispatched > 0, "no decode columns of {tile}: {ledger}");
    }
    if let Some(spans) = spans {
        let plan = engine.model().plan().to_string();
        assert!(plan.contains(&format!("K in {spans} spans")), "{plan}");
        let summed = ledger
            .entries
            .iter()
            .filter(|e| e.name == "matmul/span_sum")
            .map(|e| e.dispatches)
            .sum::<u64>();
        assert!(summed > 0, "no span sums: {ledger}");
    }
}

/// As [`steps_of_many_rows_keep_each_sequence_its_own`], the steps' layer matrices
/// unpacked (`--unpacked-matmul true`: `Clause::DecodeRowsUnpacked`), on the adapter's
/// matrix units or on emulated ones.
#[test]
fn unpacked_steps_of_many_rows_keep_each_sequence_its_own() {
    let mut options = options(24);
    options.routing.unpacked_matmul = Some(true);
    let engine = many_rows_keep_each_sequence_its_own(options);
    let unpacked = engine
        .model()
        .plan()
        .decode_rows
        .iter()
        .any(|c| matches!(c, brass::router::Clause::DecodeRowsUnpacked { .. }));
    let profile = engine.model().device().profile();
    assert!(
        unpacked || profile.coop_matrix.is_none(),
        "{}",
        engine.model().plan()
    );
}

/// The check of [`steps_of_many_rows_keep_each_sequence_its_own`] with `options`; the
/// engine, for what else a caller checks of its plan.
fn many_rows_keep_each_sequence_its_own(options: LoadOptions) -> Engine {
    let path = model_file(11);
    let mut engine = engine_on_units(&path, &options);
    let on_units = engine.model().plan().decode_rows.iter().any(|c| {
        matches!(
            c,
            brass::router::Clause::DecodeRowsOnMatrixUnits { .. }
                | brass::router::Clause::DecodeRowsUnpacked { .. }
        )
    });
    let adapter = engine.model().device().profile().name.clone();
    eprintln!("{adapter}: steps of many rows on the matrix units: {on_units}");
    let mut rng = common::Rng::new(7);
    let mut one = || vec![3 + (rng.next_u64() % (VOCAB - 3)) as u32];
    let prompts: Vec<Vec<u32>> = (0..20).map(|_| one()).collect();
    let others: Vec<Vec<u32>> = (0..3).map(|_| one()).collect();
    // Every prompt is one token, the decode row of its first step, so every decode
    // pass has all of them.
    let forward: Vec<&Vec<u32>> = prompts.iter().collect();
    let first = all_together(&mut engine, &forward, 4);
    let backward: Vec<&Vec<u32>> = others.iter().chain(prompts.iter().rev()).collect();
    let mut second = all_together(&mut engine, &backward, 4);
    second.drain(..others.len());
    second.reverse();
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_eq!(
            a, b,
            "sequence {i}: its bits moved with who shared its steps"
        );
    }
    let mut worst = 0f32;
    for (i, (prompt, run)) in prompts.iter().zip(&first).enumerate() {
        let lone = alone(&mut engine, prompt, 4);
        assert_eq!(lone.tokens.len(), run.tokens.len());
        for ((_, a), (_, b)) in lone.tokens.iter().zip(&run.tokens) {
            let a: Vec<f32> = a.iter().map(|&v| f32::from_bits(v)).collect();
            let b: Vec<f32> = b.iter().map(|&v| f32::from_bits(v)).collect();
            let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
            let diff = a
                .iter()
                .zip(&b)
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            worst = worst.max(diff / scale);
            if on_units {
                // f16 keeps 11 bits of each operand; two layers of them leave the
                // logits within a percent of their largest.
                assert!(
                    diff <= 0.01 * scale,
                    "sequence {i}: {diff} of {scale} from alone"
                );
            } else {
                assert_eq!(a, b, "sequence {i}: not its logits alone");
            }
        }
    }
    eprintln!("largest difference from alone: {worst:.2e} of the logits' largest");
    engine
}
