//! One device's measurements: the bandwidth probe, the matvec suite and decode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use brass::device::{bandwidth_probe, Device};
use brass::gguf::GgufFile;
use brass::kernels::matvec::{self, Family};
use brass::kernels::PipelineCache;
use brass::model::{Engine, Event, Input, LoadOptions, Model, SequenceOptions};
use brass::quant::GgmlType;
use brass::router::{route_matvec, Force, MatvecQuery, Overrides, XInput};

use crate::result::{Decode, MatvecCase, ParallelRun, Probe, PromptRun};
use brass::kernels::timing::{time_matvec, Effort};

/// (label, M, K, types): real shapes, few enough that a full run takes a minute or so.
type Shape = (&'static str, u64, u64, &'static [GgmlType]);

const FULL: &[Shape] = {
    use GgmlType::*;
    &[
        ("smollm2 ffn_up 1536x576", 1536, 576, &[Q4_1, Q8_0]),
        ("smollm2 lm_head 49152x576", 49_152, 576, &[Q4_1, Q8_0]),
        ("llama3 attn_q 4096x4096", 4096, 4096, &[Q4_K, Q8_0]),
        (
            "llama3 ffn_up 14336x4096",
            14_336,
            4096,
            &[Q4_K, Q5_K, Q6_K, Q8_0, F16],
        ),
        ("llama3 ffn_down 4096x14336", 4096, 14_336, &[Q4_K, Q6_K]),
        ("llama3 lm_head 128256x4096", 128_256, 4096, &[Q6_K]),
        ("muse lm_head 202048x6656", 202_048, 6656, &[Q5_K]),
    ]
};

/// For lavapipe (a CPU): small shapes, a few iterations.
const QUICK: &[Shape] = {
    use GgmlType::*;
    &[
        ("smollm2 ffn_up 1536x576", 1536, 576, &[Q4_1, Q8_0]),
        ("llama3 attn_q 4096x4096", 4096, 4096, &[Q4_K, Q6_K]),
    ]
};

pub fn probe(device: &dyn Device, quick: bool) -> brass::Result<Probe> {
    let p = bandwidth_probe(device, if quick { 3 } else { 10 })?;
    eprintln!("  {p}");
    Ok(Probe {
        gbps: p.gbps,
        median_gbps: p.median_gbps,
        bytes: p.bytes,
        runs: p.runs,
        timer: p.timer.to_string(),
    })
}

pub fn effort(quick: bool) -> Effort {
    if quick {
        Effort {
            iters: 5,
            rotate_bytes: 32 << 20,
            warmup: Duration::ZERO,
        }
    } else {
        Effort {
            iters: 30,
            rotate_bytes: 256 << 20,
            warmup: Duration::from_millis(300),
        }
    }
}

/// Every shape × type × family (dot4, coop, scalar) that has a kernel.
pub fn matvec_suite(
    device: &dyn Device,
    quick: bool,
    probe_gbps: f64,
) -> brass::Result<Vec<MatvecCase>> {
    let cache = PipelineCache::new();
    let mut cases = Vec::new();
    eprintln!(
        "  {:<28} {:<5} {:<7} {:>13} {:>13} {:>6}",
        "shape", "type", "family", "median", "bandwidth", "probe"
    );
    for &(label, m, k, types) in if quick { QUICK } else { FULL } {
        for &ty in types {
            for family in Family::ALL {
                if matvec::find(ty, family).is_none() {
                    continue;
                }
                let overrides = Overrides {
                    force: Some(Force::Family(family)),
                    ..Overrides::default()
                };
                let query = MatvecQuery {
                    ty,
                    m,
                    k,
                    x: XInput::F32,
                    columns: 1,
                };
                let route = route_matvec(device.profile(), &query, &overrides)?;
                let t = time_matvec(device, &cache, route.launch(), effort(quick))?;
                let bytes = route.launch().bytes_moved();
                let gbps = bytes as f64 / (t.median_us * 1e3);
                let case = MatvecCase {
                    shape: label.to_string(),
                    ty: ty.name().to_string(),
                    family: family.name().to_string(),
                    kernel: route.pipeline_key(),
                    m,
                    k,
                    bytes,
                    median_us: t.median_us,
                    min_us: t.min_us,
                    max_us: t.max_us,
                    gbps,
                    pct_of_probe: 100.0 * gbps / probe_gbps,
                };
                eprintln!(
                    "  {:<28} {:<5} {:<7} {:>10.1} µs {:>8.1} GB/s {:>5.1}%",
                    case.shape, case.ty, case.family, case.median_us, gbps, case.pct_of_probe
                );
                cases.push(case);
            }
        }
    }
    Ok(cases)
}

/// Greedy steps at `positions`, each queued before the previous token is read back (as
/// Session decodes), so that the GPU never waits for the CPU between them.
fn queued_steps(model: &Model, positions: impl IntoIterator<Item = usize>) -> brass::Result<()> {
    let mut in_flight = None;
    for pos in positions {
        let next = model.step_read(Input::Previous, pos)?;
        if let Some(ticket) = in_flight.replace(next) {
            model.token(ticket)?;
        }
    }
    if let Some(ticket) = in_flight {
        model.token(ticket)?;
    }
    Ok(())
}

/// Greedy decode of `tokens` tokens after a warm-up, then one profiled step for the
/// lm-head / rest split.
///
/// The warm-up repeats a step for as long as `effort(quick).warmup` (300 ms), as the
/// matvec benchmarks do: a GPU that has idled while the model loaded needs that long to
/// reach its clocks, and a short decode (a few layers, a few tokens) would otherwise be
/// timed half asleep. A fixed two steps left the H200 reading a 2-layer model's
/// matrices at a quarter of the rate the benchmarks measure for the same shapes.
#[allow(clippy::too_many_arguments)]
pub fn decode(
    device: Arc<dyn Device>,
    file: &GgufFile,
    model_name: &str,
    tokens: usize,
    quick: bool,
    load: &LoadOptions,
    probe_gbps: f64,
    (depth, fill): (usize, bool),
) -> brass::Result<Decode> {
    // The first timed step's position: `depth` tokens already in the KV cache.
    let first = depth.max(2);
    let options = LoadOptions {
        context: Some(first + tokens + 2),
        ..load.clone()
    };
    let t = Instant::now();
    let model = Model::from_gguf(device.clone(), file, &options)?;
    eprintln!(
        "  loaded {model_name} in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // The cache filled as a prompt fills it (in batches where the plan has them; or
    // left as allocated, see `--depth-prefill`), then one step that leaves a greedy id
    // for the steps after it. Any ids will do: the
    // work per token does not depend on them.
    if fill {
        let vocab = model.config().vocab as u64;
        let prompt: Vec<u32> = (0..first as u64 - 1)
            .map(|i| ((i * 7919 + 1) % vocab) as u32)
            .collect();
        model.prefill(&prompt, 0)?;
    }
    model.forward(Input::Token(1), first - 1)?;
    // The same position over and over: its cache slot is rewritten, and the timed steps
    // that follow start from it as they would have.
    let warm_until = Instant::now() + effort(quick).warmup;
    queued_steps(
        &model,
        std::iter::repeat(first - 1).take_while(|_| Instant::now() < warm_until),
    )?;
    let t = Instant::now();
    queued_steps(&model, first..first + tokens)?;
    let seconds = t.elapsed().as_secs_f64();
    let ms_per_token = seconds * 1e3 / tokens as f64;

    let profiled = model.profile_step(Input::Previous, first + tokens)?;
    let total_ns: f64 = profiled.iter().map(|p| p.1).sum();
    let plan = model.plan();
    let (lm_name, lm_route) = (plan.output.name(), plan.output.route.clone());
    let lm_key = lm_route.pipeline_key();
    // Whether another matrix runs the lm-head's pipeline (it is counted too).
    let shared = plan
        .matrices()
        .filter(|m| m.route.pipeline_key() == lm_key)
        .count()
        > 1;
    let (lm_ns, method) = if shared {
        let cache = PipelineCache::new();
        let t = time_matvec(device.as_ref(), &cache, lm_route.launch(), effort(quick))?;
        (t.median_us * 1e3, "isolated")
    } else {
        let ns = profiled.iter().find(|p| p.0 == lm_key).map_or(0.0, |p| p.1);
        (ns, "pipeline")
    };
    let lm_share = (lm_ns / total_ns).clamp(0.0, 1.0);
    let bytes = model.weight_bytes_per_token();
    let effective_gbps = bytes as f64 / (ms_per_token * 1e6);
    let c = model.config();
    // K and V of every layer at the timed steps' middle position, as attention reads
    // them.
    let middle = (first + tokens / 2) as u64;
    let kv_bytes_per_token = c.n_layers as u64 * plan.attention.launch().kv_bytes_read(middle);
    // Attention's GPU time in the profiled step (one pass per dispatch, so with each
    // pass's overhead).
    let attention_ns: f64 = profiled
        .iter()
        .filter(|p| p.0.starts_with("attention/decode") || p.0.starts_with("attention/combine"))
        .map(|p| p.1)
        .sum();
    let attention_gbps = kv_bytes_per_token as f64 / attention_ns.max(1.0);
    let d = Decode {
        model: model_name.to_string(),
        depth,
        depth_prefilled: fill,
        kv_bytes_per_token,
        layers: model.config().n_layers,
        weight_bytes_per_token: bytes,
        tokens,
        tok_per_s: tokens as f64 / seconds,
        ms_per_token,
        lm_head_ms: ms_per_token * lm_share,
        rest_ms: ms_per_token * (1.0 - lm_share),
        profile_total_ms: total_ns / 1e6,
        profile_lm_head_ms: lm_ns / 1e6,
        lm_head_method: method.to_string(),
        lm_head_tensor: lm_name,
        lm_head_type: lm_route.launch().kernel().ty.name().to_string(),
        effective_gbps,
        pct_of_probe: 100.0 * effective_gbps / probe_gbps,
        kv: plan.kv.name().to_string(),
        attention_ms: attention_ns / 1e6,
        attention_pct_of_probe: 100.0 * attention_gbps / probe_gbps,
        pipelines: profiled
            .into_iter()
            .map(|(name, ns, n)| (name, ns / 1e6, n))
            .collect(),
    };
    eprintln!(
        "  decode at depth {depth}: {:.2} tok/s, {:.2} ms/token (lm-head {:.2}, rest {:.2}; {}), \
         {:.1} GB/s of weights = {:.1}% of probe, {:.1} MB of {} KV cache per token; \
         attention {:.3} ms of the profiled step ({:.1}% of probe)",
        d.tok_per_s,
        d.ms_per_token,
        d.lm_head_ms,
        d.rest_ms,
        method,
        effective_gbps,
        d.pct_of_probe,
        d.kv_bytes_per_token as f64 / 1e6,
        d.kv,
        d.attention_ms,
        d.attention_pct_of_probe
    );
    Ok(d)
}

/// Prompt processing of `tokens` tokens at position 0, after one untimed run (pipelines
/// and first-use costs), timed from the first upload to the GPU's end.
pub fn prompt(
    device: Arc<dyn Device>,
    file: &GgufFile,
    model_name: &str,
    tokens: usize,
    load: &LoadOptions,
) -> brass::Result<PromptRun> {
    let options = LoadOptions {
        context: Some(tokens + 1),
        ..load.clone()
    };
    let model = Model::from_gguf(device.clone(), file, &options)?;
    let vocab = model.config().vocab as u64;
    // Any ids: the work per token does not depend on them.
    let ids: Vec<u32> = (0..tokens as u64)
        .map(|i| (i * 7919 + 1) % vocab)
        .map(|i| i as u32)
        .collect();
    let route = model.plan().prefill.to_string();
    model.prefill(&ids, 0)?;
    device.wait()?;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        model.prefill(&ids, 0)?;
        device.wait()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    let run = PromptRun {
        tokens,
        route,
        seconds: best,
        tokens_per_second: tokens as f64 / best,
    };
    eprintln!(
        "  {model_name}: prompt of {tokens} tokens in {:.1} ms: {:.1} tok/s ({})",
        best * 1e3,
        run.tokens_per_second,
        run.route
    );
    Ok(run)
}

/// `sequences` sequences on one model (`Engine`), each a prompt of `prompt` tokens then
/// `generated` tokens (end-of-generation ids ignored), as llama-batched-bench runs
/// them: after an untimed round (pipelines), the prompts are timed until every
/// sequence has its first token, then the decode steps while all run.
pub fn parallel(
    device: Arc<dyn Device>,
    file: &GgufFile,
    model_name: &str,
    sequences: usize,
    (prompt, generated): (usize, usize),
    load: &LoadOptions,
) -> brass::Result<ParallelRun> {
    let options = LoadOptions {
        context: Some(prompt + generated + 1),
        sequences,
        ..load.clone()
    };
    let mut engine = Engine::from_gguf(device.clone(), file, &options)?;
    let vocab = engine.model().config().vocab as u64;
    let each = |tokens: usize| SequenceOptions {
        max_tokens: tokens,
        stop_at_eog: false,
        ..SequenceOptions::default()
    };
    // Any ids, a different prompt per sequence: the work per token does not depend on
    // them.
    let ids = |seq: usize, n: usize| -> Vec<u32> {
        (0..n as u64)
            .map(|i| ((seq as u64 * 104_729 + i * 7919 + 1) % vocab) as u32)
            .collect()
    };
    let run = |engine: &mut Engine, prompt: usize, generated: usize, timed: bool| {
        let seqs: Vec<_> = (0..sequences)
            .map(|s| engine.add(&ids(s, prompt), each(generated)))
            .collect::<brass::Result<_>>()?;
        let start = Instant::now();
        let mut first = std::collections::HashSet::new();
        while first.len() < sequences {
            for e in engine.step()? {
                if let Event::Token { seq, .. } = e {
                    first.insert(seq);
                }
            }
        }
        let prompt_seconds = start.elapsed().as_secs_f64();
        // Where a step's GPU time goes, outside the timed steps (the sequences do not
        // advance).
        let profile = match timed {
            true => engine.profile_pass()?,
            false => Vec::new(),
        };
        let (mut steps, start) = (0, Instant::now());
        while engine.running() == sequences {
            engine.step()?;
            steps += 1;
        }
        let decode_seconds = start.elapsed().as_secs_f64();
        while engine.running() > 0 {
            engine.step()?;
        }
        for s in seqs {
            engine.remove(s)?;
        }
        if timed {
            eprintln!(
                "  {model_name}: {sequences} sequences: prompts in {:.1} ms, {steps} steps of \
                 {sequences} tokens in {:.1} ms",
                prompt_seconds * 1e3,
                decode_seconds * 1e3
            );
            let total_ns: f64 = profile.iter().map(|p| p.1).sum();
            let top: Vec<String> = profile
                .iter()
                .take(5)
                .map(|(name, ns, n)| format!("{name} {:.3} ms ({n})", ns / 1e6))
                .collect();
            eprintln!(
                "    one pass of {sequences} rows: {:.3} ms of GPU time; {}",
                total_ns / 1e6,
                top.join(", ")
            );
        }
        let profile = profile
            .into_iter()
            .map(|(name, ns, n)| (name, ns / 1e6, n))
            .collect();
        Ok::<_, brass::Error>((prompt_seconds, steps, decode_seconds, profile))
    };
    run(&mut engine, prompt.min(8), 3, false)?;
    let (prompt_seconds, steps, decode_seconds, pass_profile) =
        run(&mut engine, prompt, generated, true)?;
    let aggregate = (steps * sequences) as f64 / decode_seconds.max(1e-9);
    eprintln!(
        "  {model_name}: {sequences} sequences: {aggregate:.1} tok/s together, {:.1} each",
        aggregate / sequences as f64
    );
    Ok(ParallelRun {
        sequences,
        prompt_tokens: prompt,
        generated_tokens: generated,
        prompt_seconds,
        steps,
        decode_seconds,
        aggregate_tok_per_s: aggregate,
        per_sequence_tok_per_s: aggregate / sequences as f64,
        pass_profile,
    })
}
