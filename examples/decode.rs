//! Decode with a GGUF model: streams text, then reports load time, the tokens generated,
//! the time to the first, decode tokens per second after it, and the effective weight
//! bandwidth per token.
//!
//! ```text
//! cargo run --release --example decode -- -p "The capital of France is" -n 32
//! cargo run --release --example decode -- --prompt-ids 504,3575,282,4649,314 --json --top-logits 5
//! cargo run --release --example decode -- --plan
//! cargo run --release --example decode -- --list-models
//! cargo run --release --example decode -- --model gemma3-270m --fetch-only
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brass::device::{bandwidth_probe, AdapterChoice, Device, WgpuDevice};
use brass::gguf::GgufFile;
use brass::model::{
    cache_dir, check_weights, default_model_path, Input, KnownModel, LoadOptions, Model, Session,
    Stats,
};
use brass::router::{Force, Overrides};
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::{ChatMessage, Tokenizer};
use clap::Parser;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Quantized LLM decode on the GPU with brass")]
struct Args {
    /// GGUF file, or the name of a known model (`--list-models`), fetched into the cache
    /// on first use; an existing file wins over a name (default: smollm2-135m,
    /// SmolLM2-135M-Instruct Q4_1).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// List the known models (name, file, size, whether cached) and exit.
    #[arg(long)]
    list_models: bool,
    /// Prompt text (special tokens such as <|im_start|> are parsed).
    #[arg(short, long, default_value = "The capital of France is")]
    prompt: String,
    /// Prompt as token ids, e.g. 504,3575,282 (overrides --prompt).
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<u32>>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 32)]
    n_tokens: usize,
    /// 0 is greedy (argmax on the GPU).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Adapter: an index (as examples/devices lists them) or a name substring (default:
    /// BRASS_ADAPTER, read the same way, else the best adapter).
    #[arg(long)]
    adapter: Option<String>,
    /// Force a matvec family (`dot4`, `coop` for exact activations, `scalar`) or kernel (`q4_1_coop`) for every tensor.
    #[arg(long)]
    force: Option<String>,
    /// Whether norms hand the dot4 matrices they feed x already quantized: true for
    /// all, false for none (default: for matrices of at least 128 MB).
    #[arg(long)]
    x_q8: Option<bool>,
    /// Whether a dot4 down projection takes silu(gate) * up quantized by its own
    /// dispatch: true for all, false for none, computing it while staging (default: for
    /// matrices of at least 8 MB).
    #[arg(long)]
    glu_q8: Option<bool>,
    /// The int8 planes dot4 matvecs multiply x on: 1 (default) rounds it as llama.cpp
    /// does; 2 adds its residual 256 times finer, logits within a few hundredths of
    /// exact math, at a cost (H200: 12 % of the Llama-3-8B shape's decode speed).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    x_planes: Option<u32>,
    /// Whether prefill matmuls multiply on cooperative matrices: true (refused where the
    /// adapter has none), false for dot4 (default: where the adapter has them).
    #[arg(long)]
    coop_matrix: Option<bool>,
    /// KV-cache positions, checked against the device's memory up front (default: the
    /// model's trained context where it fits, else the largest that does).
    #[arg(long)]
    context: Option<usize>,
    /// How the KV cache stores keys and values: f16 (default, as llama.cpp), q8_0
    /// (int8 blocks of 32, 56 % of f16's bytes at heads of 128) or f32 (exact math).
    #[arg(long, default_value = "f16")]
    kv_type: brass::kernels::attention::KvType,
    /// Prompt tokens per prefill batch (default 512; 1: token at a time).
    #[arg(long)]
    ubatch: Option<usize>,
    /// Print one JSON object (prompt ids, generated ids, text, timings) instead of text.
    #[arg(long)]
    json: bool,
    /// With --json: the K largest logits after every processed token, shaped like the
    /// files in tests/reference.
    #[arg(long, requires = "json")]
    top_logits: Option<usize>,
    /// Print the loaded model's plan (every matrix's kernel and why) and exit; with
    /// --json as JSON, in the schema of `inspect --plan --json`.
    #[arg(long)]
    plan: bool,
    /// Print the dispatch ledger at the end; exit non-zero if it has defects.
    #[arg(long)]
    audit: bool,
    /// Print the prompt's token ids as JSON and exit (no GPU needed).
    #[arg(long)]
    tokenize: bool,
    /// Before loading, scan every tensor's scales (and float tensors' values) for NaN
    /// and infinity; the first one found is an error naming tensor and block.
    #[arg(long)]
    check_weights: bool,
    /// Measure the device's streaming-read bandwidth to report % of it.
    #[arg(long)]
    probe: bool,
    /// Make sure the model is in the cache (fetching the default or named one if
    /// needed), print its path and exit.
    #[arg(long)]
    fetch_only: bool,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn prompt_ids(args: &Args, tokenizer: &Tokenizer) -> brass::Result<Vec<u32>> {
    if let Some(ids) = &args.prompt_ids {
        let vocab = tokenizer.vocab_size();
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(brass::Error::Invalid(format!(
                "prompt id {bad} is outside the vocabulary of {vocab} tokens (ids 0..{vocab})"
            )));
        }
        return Ok(ids.clone());
    }
    if args.chat {
        let messages = [ChatMessage::user(args.prompt.as_str())];
        let prompt = tokenizer.apply_chat_template(&messages, true)?;
        return Ok(tokenizer.encode_chat(&prompt));
    }
    Ok(tokenizer.encode(&args.prompt, true, true))
}

fn run(args: Args) -> brass::Result<ExitCode> {
    // Checked before the device opens, which can take seconds.
    let force = args.force.as_deref().map(str::parse::<Force>).transpose()?;
    if args.list_models {
        let cache = cache_dir()?;
        print!("{}", KnownModel::table(KnownModel::REGISTRY, &cache));
        println!("cache: {}", cache.display());
        return Ok(ExitCode::SUCCESS);
    }
    let path = match &args.model {
        Some(arg) => match KnownModel::for_arg(arg)? {
            Some(known) => known.cached_path()?,
            None => arg.clone(),
        },
        None => default_model_path()?,
    };
    if args.fetch_only {
        println!("{}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let file = GgufFile::open(&path)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let ids = prompt_ids(&args, &tokenizer)?;
    if args.tokenize {
        println!("{}", serde_json::to_string(&ids).expect("ids serialize"));
        return Ok(ExitCode::SUCCESS);
    }
    if ids.is_empty() {
        return Err(brass::Error::Invalid("the prompt is empty".into()));
    }
    if args.check_weights {
        let t0 = Instant::now();
        check_weights(&file)?;
        eprintln!(
            "weights: {} tensors, every scale finite ({:.2} s)",
            file.tensors().len(),
            t0.elapsed().as_secs_f64()
        );
    }

    let choice = match &args.adapter {
        Some(spec) => AdapterChoice::parse(spec),
        None => AdapterChoice::from_env(),
    };
    let wgpu_device = WgpuDevice::open(&choice)?;
    if wgpu_device.is_software() {
        eprintln!(
            "note: no GPU adapter in use; {} runs the kernels on the CPU (expect about a \
             token per second; see examples/devices for the adapters wgpu sees)",
            wgpu_device.adapter_name()
        );
    }
    let device: Arc<dyn Device> = Arc::new(wgpu_device);
    let options = LoadOptions {
        context: args.context,
        kv: args.kv_type,
        routing: Overrides {
            force,
            x_q8: args.x_q8,
            glu_q8: args.glu_q8,
            x_planes: args.x_planes,
            coop_matrix: args.coop_matrix,
            ..Overrides::default()
        },
        ubatch: args.ubatch,
        allow_past_trained_context: false,
    };
    let t0 = Instant::now();
    let model = Model::from_gguf(device.clone(), &file, &options)?;
    let load_time = t0.elapsed();
    eprintln!(
        "{} on {} in {:.2} s ({} layers, {:.1} MB of weights per token)",
        path.display(),
        device.profile().name,
        load_time.as_secs_f64(),
        model.config().n_layers,
        model.weight_bytes_per_token() as f64 / 1e6
    );
    eprintln!(
        "context: {}; KV cache {}",
        model.plan().context_reason,
        model.plan().kv
    );

    if args.plan {
        // The loaded model's own plan: what runs.
        match args.json {
            true => println!("{:#}", model.plan().to_json()),
            false => print!("{}", model.plan()),
        }
        return Ok(ExitCode::SUCCESS);
    }

    let sampler = Sampler::new(SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplerConfig::default()
    });

    let (generated, text, stats, steps) = if let Some(k) = args.top_logits {
        logits_run(&model, &tokenizer, &ids, args.n_tokens, sampler, k)?
    } else {
        let mut session = Session::new(model, tokenizer)?;
        let mut generated = Vec::new();
        let mut text = String::new();
        let mut out = std::io::stdout();
        for token in session.generate(&ids, args.n_tokens, sampler)? {
            let token = token?;
            if !args.json {
                print!("{}", token.text);
                let _ = out.flush();
            }
            generated.push(token.id);
            text.push_str(&token.text);
        }
        if !args.json {
            println!();
        }
        let stats = session.stats().clone();
        return report(
            &args,
            &path,
            &*device,
            session.model(),
            &ids,
            &generated,
            &text,
            load_time,
            &stats,
            None,
        );
    };
    report(
        &args,
        &path,
        &*device,
        &model,
        &ids,
        &generated,
        &text,
        load_time,
        &stats,
        Some(steps),
    )
}

type LogitsRun = (Vec<u32>, String, Stats, Vec<serde_json::Value>);

/// Decodes with full logits after every token, recording the top `k` per step: the
/// prompt's through batched prefill (`Model::prefill_logits`), then a decode step per
/// generated token.
fn logits_run(
    model: &Model,
    tokenizer: &Tokenizer,
    ids: &[u32],
    n: usize,
    mut sampler: Sampler,
    k: usize,
) -> brass::Result<LogitsRun> {
    let mut steps = Vec::new();
    let mut history = ids.to_vec();
    let mut record = |pos: usize, logits: &[f32], history: &[u32]| {
        let next = sampler.sample(logits, history);
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        let top: Vec<_> = order[..k.min(order.len())]
            .iter()
            .map(|&i| json!([i, logits[i as usize]]))
            .collect();
        steps.push(json!({"pos": pos, "top": top, "next": next}));
        next
    };
    let t0 = Instant::now();
    let mut last = None;
    model.prefill_logits(ids, 0, |pos, logits| {
        last = Some(record(pos, logits, ids));
        Ok(())
    })?;
    let prompt_time = t0.elapsed();
    let mut generated = Vec::new();
    let mut pos = ids.len();
    while let Some(token) = last.take() {
        generated.push(token);
        history.push(token);
        if tokenizer.is_eog(token) || pos + 1 >= ids.len() + n {
            break;
        }
        let logits = model.forward_logits(Input::Token(token), pos)?;
        last = Some(record(pos, &logits, &history));
        pos += 1;
    }
    // Counted as Session counts, except that an end-of-generation token stays in
    // `generated` here, as the reference files have it.
    let stats = Stats {
        prompt_tokens: ids.len(),
        time_to_first_token: prompt_time,
        generated_tokens: generated.len(),
        decode_steps: generated.len().saturating_sub(1),
        decode_time: t0.elapsed() - prompt_time,
    };
    let text = tokenizer.decode(&generated, true)?;
    Ok((generated, text, stats, steps))
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    path: &Path,
    device: &dyn Device,
    model: &Model,
    ids: &[u32],
    generated: &[u32],
    text: &str,
    load_time: Duration,
    stats: &Stats,
    steps: Option<Vec<serde_json::Value>>,
) -> brass::Result<ExitCode> {
    let weight_bytes = model.weight_bytes_per_token();
    let probe = if args.probe {
        Some(bandwidth_probe(device, 3)?)
    } else {
        None
    };
    if args.json {
        let mut timings = timings_json(load_time, ids.len(), stats, weight_bytes);
        timings["probe_gb_s"] = json!(probe.as_ref().map(|p| p.gbps));
        let mut out = json!({
            "model": path.display().to_string(),
            "adapter": device.profile().name,
            "prompt_ids": ids,
            "generated": generated,
            "text": text,
            "timings": timings,
        });
        if let Some(steps) = steps {
            out["steps"] = json!(steps);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("json serializes")
        );
    } else {
        if steps.is_some() {
            println!("{text}");
        }
        eprintln!(
            "{}",
            summary_line(load_time, ids.len(), stats, weight_bytes)
        );
        if let (Some(p), Some(tok_s)) = (&probe, stats.decode_tokens_per_second()) {
            let gbps = gb_per_s(weight_bytes, tok_s);
            eprintln!("{p}; decode reaches {:.1} % of it", 100.0 * gbps / p.gbps);
        }
    }
    if args.audit {
        let ledger = model.audit();
        eprintln!("{ledger}");
        if !ledger.defects().is_empty() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn gb_per_s(weight_bytes_per_token: u64, tokens_per_s: f64) -> f64 {
    weight_bytes_per_token as f64 * tokens_per_s / 1e9
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The text report: every rate only where something was timed, so no `inf` or `NaN`.
fn summary_line(
    load_time: Duration,
    prompt_len: usize,
    stats: &Stats,
    weight_bytes: u64,
) -> String {
    let mut line = format!(
        "load {:.2} s | prompt {}",
        load_time.as_secs_f64(),
        plural(prompt_len, "token")
    );
    if let Some(tok_s) = stats.prompt_tokens_per_second() {
        line += &format!(", {tok_s:.1} tok/s");
    }
    line += &format!(" | generated {}", plural(stats.generated_tokens, "token"));
    if !stats.time_to_first_token.is_zero() {
        line += &format!(
            ", the first after {:.2} s",
            stats.time_to_first_token.as_secs_f64()
        );
    }
    match stats.decode_tokens_per_second() {
        Some(tok_s) => {
            line += &format!(
                " | decode {} after the first, {tok_s:.1} tok/s, {:.2} GB/s effective",
                plural(stats.decode_steps, "step"),
                gb_per_s(weight_bytes, tok_s)
            )
        }
        None => line += " | no decode steps after the first",
    }
    line
}

/// The `timings` object of `--json`: rates are `null` where nothing was timed.
fn timings_json(
    load_time: Duration,
    prompt_len: usize,
    stats: &Stats,
    weight_bytes: u64,
) -> serde_json::Value {
    let decode_tok_s = stats.decode_tokens_per_second();
    json!({
        "load_s": load_time.as_secs_f64(),
        "prompt_tokens": prompt_len,
        "prompt_tok_s": stats.prompt_tokens_per_second(),
        "time_to_first_token_s": stats.time_to_first_token.as_secs_f64(),
        "generated_tokens": stats.generated_tokens,
        "decode_steps_after_first": stats.decode_steps,
        "decode_s": stats.decode_time.as_secs_f64(),
        "decode_tok_s": decode_tok_s,
        "weight_bytes_per_token": weight_bytes,
        "effective_gb_s": decode_tok_s.map(|t| gb_per_s(weight_bytes, t)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use brass::model::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
    use std::sync::OnceLock;

    const VOCAB: u64 = 300;

    /// A small synthetic model (tokenizer included), written once per test run.
    fn model_file() -> &'static Path {
        static PATH: OnceLock<PathBuf> = OnceLock::new();
        PATH.get_or_init(|| {
            let spec = SyntheticSpec {
                name: "decode-cli".into(),
                hidden: 256,
                ffn: 512,
                layers: 1,
                heads: 4,
                kv_heads: 2,
                vocab: VOCAB,
                context: 64,
                rope_base: 10_000.0,
                mix: QuantMix::Q4KM,
                lm_head: None,
                seed: 5,
                arch: Arch::Llama,
                head_dim: None,
                sliding_window: None,
            };
            let path =
                std::env::temp_dir().join(format!("brass-decode-cli-{}.gguf", std::process::id()));
            write_synthetic(&spec, &path, |_, _| {}).unwrap();
            path
        })
    }

    fn run_with(args: &[&str]) -> brass::Result<ExitCode> {
        let model = model_file().to_str().unwrap();
        run(Args::parse_from(["decode", "-m", model].iter().chain(args)))
    }

    #[test]
    fn prompt_ids_outside_the_vocabulary_are_refused_even_to_tokenize() {
        let err = run_with(&["--tokenize", "--prompt-ids", "5,300"]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("prompt id 300") && msg.contains("vocabulary of 300"),
            "{msg}"
        );
        assert!(run_with(&["--tokenize", "--prompt-ids", "5,299"]).is_ok());
    }

    #[test]
    fn a_model_is_a_file_or_a_known_name() {
        assert_eq!(run_with(&["--fetch-only"]).unwrap(), ExitCode::SUCCESS);
        let run_model = |model: &str| run(Args::parse_from(["decode", "-m", model, "--tokenize"]));
        let msg = run_model("no-such-model").unwrap_err().to_string();
        assert!(
            msg.contains("neither a file nor a known model") && msg.contains("gemma3-270m"),
            "{msg}"
        );
        let listed = run(Args::parse_from(["decode", "--list-models"]));
        assert_eq!(listed.unwrap(), ExitCode::SUCCESS);
    }

    #[test]
    fn a_missing_adapter_says_no_gpu_adapter_once() {
        let msg = run_with(&["--adapter", "no-such-gpu-xyz"])
            .unwrap_err()
            .to_string();
        assert_eq!(msg.matches("no GPU adapter").count(), 1, "{msg}");
    }

    #[test]
    fn a_numeric_adapter_is_an_index() {
        let msg = run_with(&["--adapter", "99"]).unwrap_err().to_string();
        assert!(msg.contains("adapter index 99 not found"), "{msg}");
    }

    #[test]
    fn a_bad_force_is_refused_before_the_device_opens_and_lists_the_valid_names() {
        // The adapter cannot open: the error is the force's only if it is checked first.
        let msg = run_with(&["--force", "bogus", "--adapter", "no-such-gpu-xyz"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`bogus`") && msg.contains("dot4, coop, scalar"),
            "{msg}"
        );
    }

    #[test]
    fn top_logits_needs_json() {
        assert!(Args::try_parse_from(["decode", "--top-logits", "5"]).is_err());
        assert!(Args::try_parse_from(["decode", "--top-logits", "5", "--json"]).is_ok());
    }

    fn stats(generated: usize, ttft_ms: u64, decode_ms: u64) -> Stats {
        Stats {
            prompt_tokens: if generated > 0 { 5 } else { 0 },
            time_to_first_token: Duration::from_millis(ttft_ms),
            generated_tokens: generated,
            decode_steps: generated.saturating_sub(1),
            decode_time: Duration::from_millis(decode_ms),
        }
    }

    #[test]
    fn the_report_counts_generated_tokens_and_rates_the_steps_after_the_first() {
        let load = Duration::from_millis(500);
        // 32 generated: the first after 0.5 s, 31 more in 3.1 s.
        let s = stats(32, 500, 3100);
        let line = summary_line(load, 5, &s, 1_000_000_000);
        assert!(line.contains("prompt 5 tokens, 10.0 tok/s"), "{line}");
        assert!(
            line.contains("generated 32 tokens, the first after 0.50 s"),
            "{line}"
        );
        assert!(
            line.contains("decode 31 steps after the first, 10.0 tok/s, 10.00 GB/s"),
            "{line}"
        );
        let t = timings_json(load, 5, &s, 1_000_000_000);
        assert_eq!(t["generated_tokens"], 32);
        assert_eq!(t["decode_steps_after_first"], 31);
        assert_eq!(t["decode_tok_s"], 10.0);
        assert_eq!(t["time_to_first_token_s"], 0.5);

        // One token: no decode rate. None at all (-n 0): no rate of any kind.
        for (generated, ttft) in [(1, 500), (0, 0)] {
            let s = stats(generated, ttft, 0);
            let line = summary_line(load, 5, &s, 1_000_000_000);
            assert!(
                line.contains(&format!("generated {}", plural(generated, "token"))),
                "{line}"
            );
            assert!(line.contains("no decode steps after the first"), "{line}");
            assert!(!line.contains("inf") && !line.contains("NaN"), "{line}");
            let t = timings_json(load, 5, &s, 1_000_000_000);
            assert!(
                t["decode_tok_s"].is_null() && t["effective_gb_s"].is_null(),
                "{t}"
            );
            assert_eq!(t["prompt_tok_s"].is_null(), generated == 0, "{t}");
        }
    }
}
