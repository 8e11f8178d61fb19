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

use brass::device::{bandwidth_probe, list_adapters, AdapterChoice, Device, WgpuDevice};
use brass::gguf::GgufFile;
use brass::hub::{cache_dir, FetchOutput, KnownModel, ModelKind, DEFAULT_MODEL};
use brass::model::{check_weights, Config, Input, LoadOptions, Model, Session, Stats};
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
    /// List the known models (name, file, size, kind, whether cached) and exit.
    #[arg(long)]
    list_models: bool,
    /// List the adapters wgpu finds and exit; exits non-zero when it finds none (`./decode`
    /// asks this before it installs lavapipe).
    #[arg(long)]
    list_adapters: bool,
    /// Show pip's own output while a model is fetched (default: a progress line per
    /// piece).
    #[arg(short, long)]
    verbose: bool,
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
    /// At least 0; 0 is greedy (argmax on the GPU).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the K likeliest tokens (0: off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Keep the likeliest tokens up to this probability, 0..=1 (1: off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Keep tokens at least this share of the likeliest one's probability, 0..=1 (0: off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Above 0: logits of tokens seen in the last 64 divided by it (1: off).
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
    /// Columns (a step's rows, one per sequence) each loaded weight slice of a dot4
    /// matvec is dotted with, 1 to 8 (default: 1; on the H200 8 ran 0.87-1.23x at 8
    /// columns and 0.70x at one, see wgsl/matvec/dot4.wgsl `batch_rows`): x then
    /// arrives quantized and is read in place (as with --x-q8 true --glu-q8 true, unless
    /// those say otherwise), where the kernel splits its slices (Q4_K, Q5_K).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    columns_at_once: Option<u32>,
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
    /// A/B: rows a decode step of many sequences needs before its quant matrices
    /// multiply on the matrix units (default 14, where an H100 measured the crossover).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    decode_units_from: Option<u64>,
    /// A/B: spans each matrix of a decode step on the matrix units sums K in over
    /// workgroups (default 2), its spans' sums added in span order by a second
    /// dispatch (`wgsl/matmul/span_sum.wgsl`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    decode_column_spans: Option<u32>,
    /// Whether prompts' attention runs on the matrix units (attention/flash, f16
    /// operands): true where the adapter can run it, false for the scalar kernel (f32;
    /// default: the matrix units where the adapter has them, unless the cache is f32).
    #[arg(long)]
    matrix_attention: Option<bool>,
    /// Whether a prompt batch's quant matrices multiply unpacked (matmul/unpacked:
    /// weights and x decoded once a batch into rows the matrix units load from memory):
    /// true where the adapter has matrix units (default: tiled, until measured).
    #[arg(long)]
    unpacked_matmul: Option<bool>,
    /// KV-cache positions, at least 1 and at most the model's trained context, checked
    /// against the device's memory up front (default: the trained context where it
    /// fits, else the largest that does). A generation that reaches its end stops there.
    #[arg(long)]
    context: Option<usize>,
    /// Let --context pass the context the model was trained for (refused otherwise:
    /// positions past it are untrained, and the text degrades with no error to show it).
    #[arg(long)]
    allow_past_trained_context: bool,
    /// How the KV cache stores keys and values: f16 (default, as llama.cpp), q8_0
    /// (int8 blocks of 32, 56 % of f16's bytes at heads of 128) or f32 (exact math).
    #[arg(long, default_value = "f16")]
    kv_type: brass::kernels::attention::KvType,
    /// Prompt tokens per prefill batch, at least 1 (default 2,048; 1: token at a time).
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
            eprintln!("error: {}", in_flag_words(&e));
            ExitCode::FAILURE
        }
    }
}

/// The library's settings as this command's flags: brass's errors name what an API
/// caller set (`LoadOptions::context`), this command's user typed `--context`.
const FLAGS: [(&str, &str); 8] = [
    ("SamplerConfig::temperature", "--temperature"),
    ("SamplerConfig::top_p", "--top-p"),
    ("SamplerConfig::min_p", "--min-p"),
    ("SamplerConfig::repetition_penalty", "--repeat-penalty"),
    // Before `LoadOptions::context`, of which it is a longer name.
    (
        "LoadOptions::allow_past_trained_context",
        "--allow-past-trained-context",
    ),
    ("LoadOptions::context", "--context"),
    ("LoadOptions::ubatch", "--ubatch"),
    ("LoadOptions::kv", "--kv-type"),
];

/// An error as this command's user should read it: in flags, not API names.
fn in_flag_words(e: &brass::Error) -> String {
    let rename = |text: &str| {
        FLAGS.iter().fold(text.to_string(), |text, (api, flag)| {
            text.replace(api, flag)
        })
    };
    match e {
        brass::Error::Setting {
            setting,
            value,
            expected,
        } => match FLAGS.iter().find(|(api, _)| api == setting) {
            Some((_, flag)) => format!("{flag} {value}: {}", rename(expected)),
            None => rename(&e.to_string()),
        },
        brass::Error::ContextFull {
            what,
            needed,
            context,
            trained,
            ..
        } => format!(
            "{what} needs {needed} positions, past the context of {context} ({})",
            raise_context(*context, *trained)
        ),
        _ => rename(&e.to_string()),
    }
}

/// What to do about a full context, in flags.
fn raise_context(context: usize, trained: usize) -> String {
    if context < trained {
        format!("raise --context, up to the {trained} the model was trained for")
    } else {
        format!(
            "the model was trained for {trained}; --allow-past-trained-context lets --context \
             go past it"
        )
    }
}

/// Why a generation stopped before its `-n` tokens, if it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Generated as many tokens as asked.
    Tokens,
    /// The model ended its text (an end-of-generation token).
    EndOfText,
    /// The KV cache is full: `context` positions, the model trained for `trained`.
    ContextFull { context: usize, trained: usize },
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Tokens => "tokens",
            Stop::EndOfText => "end_of_text",
            Stop::ContextFull { .. } => "context_full",
        }
    }

    /// The line printed on stderr after the text, for a stop the user did not ask for.
    fn note(self) -> Option<String> {
        match self {
            Stop::ContextFull { context, trained } => Some(format!(
                "stopped: the context of {context} positions is full ({})",
                raise_context(context, trained)
            )),
            Stop::Tokens | Stop::EndOfText => None,
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
    run_to_stop(args).map(|(code, _)| code)
}

/// [`run`], and why the generation stopped where there was one.
fn run_to_stop(args: Args) -> brass::Result<(ExitCode, Option<Stop>)> {
    // Checked before anything is fetched or the device opens, which can take seconds.
    let force = args.force.as_deref().map(str::parse::<Force>).transpose()?;
    let sampling = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplerConfig::default()
    };
    sampling.validate()?;
    let options = LoadOptions {
        context: args.context,
        kv: args.kv_type,
        routing: Overrides {
            force,
            x_q8: args.x_q8.or(args.columns_at_once.map(|_| true)),
            glu_q8: args.glu_q8.or(args.columns_at_once.map(|_| true)),
            x_in_place: args.columns_at_once.map(|_| true),
            columns_at_once: args.columns_at_once,
            x_planes: args.x_planes,
            coop_matrix: args.coop_matrix,
            decode_units_from: args.decode_units_from,
            decode_column_spans: args.decode_column_spans,
            matrix_attention: args.matrix_attention,
            unpacked_matmul: args.unpacked_matmul,
            ..Overrides::default()
        },
        ubatch: args.ubatch,
        allow_past_trained_context: args.allow_past_trained_context,
        ..LoadOptions::default()
    };
    if args.list_models {
        let cache = cache_dir()?;
        print!("{}", KnownModel::table(KnownModel::REGISTRY, &cache));
        println!("cache: {}", cache.display());
        return Ok((ExitCode::SUCCESS, None));
    }
    if args.list_adapters {
        return Ok((print_adapters(), None));
    }
    let fetch_output = match args.verbose {
        true => FetchOutput::Verbose,
        false => FetchOutput::Progress,
    };
    let (path, known) = match &args.model {
        Some(arg) => match KnownModel::for_arg(arg)? {
            Some(known) => (known.cached_path_with(fetch_output)?, Some(known)),
            None => (arg.clone(), None),
        },
        None => (
            DEFAULT_MODEL.cached_path_with(fetch_output)?,
            Some(&DEFAULT_MODEL),
        ),
    };
    if args.fetch_only {
        println!("{}", path.display());
        return Ok((ExitCode::SUCCESS, None));
    }
    let file = GgufFile::open(&path)?;
    // Before the device opens: the trained context is in the file.
    options.validate(&Config::from_gguf(&file)?)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    if args.chat && args.prompt_ids.is_none() {
        if let Some(warning) = chat_warning(&args, known, &file) {
            eprintln!("warning: {warning}");
        }
    }
    let ids = prompt_ids(&args, &tokenizer)?;
    if args.tokenize {
        println!("{}", serde_json::to_string(&ids).expect("ids serialize"));
        return Ok((ExitCode::SUCCESS, None));
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
        return Ok((ExitCode::SUCCESS, None));
    }

    let sampler = Sampler::new(sampling);

    let (generated, text, stats, steps, stop) = if let Some(k) = args.top_logits {
        logits_run(&model, &tokenizer, &ids, args.n_tokens, sampler, k)?
    } else {
        let mut session = Session::new(model, tokenizer)?;
        let mut generated = Vec::new();
        let mut text = String::new();
        let mut out = std::io::stdout();
        let mut stop = Stop::EndOfText;
        for token in session.generate(&ids, args.n_tokens, sampler)? {
            let token = match token {
                Ok(token) => token,
                // The end of the context ends the text; the library says so with an
                // error, for callers that would rather treat it as one.
                Err(brass::Error::ContextFull {
                    context, trained, ..
                }) => {
                    stop = Stop::ContextFull { context, trained };
                    break;
                }
                Err(e) => return Err(e),
            };
            if !args.json {
                print!("{}", token.text);
                let _ = out.flush();
            }
            generated.push(token.id);
            text.push_str(&token.text);
        }
        if generated.len() == args.n_tokens {
            stop = Stop::Tokens;
        }
        if !args.json {
            println!();
        }
        let stats = session.stats().clone();
        let code = report(
            &args,
            &path,
            &*device,
            session.model(),
            (&ids, &generated, &text, stop),
            load_time,
            &stats,
            None,
        )?;
        return Ok((code, Some(stop)));
    };
    let code = report(
        &args,
        &path,
        &*device,
        &model,
        (&ids, &generated, &text, stop),
        load_time,
        &stats,
        Some(steps),
    )?;
    Ok((code, Some(stop)))
}

/// Prints the adapters wgpu finds; FAILURE when there are none.
fn print_adapters() -> ExitCode {
    let adapters = list_adapters();
    for a in &adapters {
        println!(
            "{} {} ({:?}, {}, {})",
            a.index, a.name, a.backend, a.device_type, a.driver
        );
    }
    if adapters.is_empty() {
        eprintln!(
            "wgpu finds no adapter: no Vulkan or Metal driver (on Linux, Mesa's lavapipe runs \
             on the CPU: apt-get install mesa-vulkan-drivers, or ./decode in the checkout \
             installs it)"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Why `--chat` will likely give junk, if it will: a base model answers turns it was
/// never tuned on, and a file without a chat template is most likely one.
fn chat_warning(args: &Args, known: Option<&KnownModel>, file: &GgufFile) -> Option<String> {
    let name = args
        .model
        .as_ref()
        .map_or("the model".into(), |m| format!("{}", m.display()));
    if let Some(known) = known.filter(|k| k.kind == ModelKind::Base) {
        return Some(format!(
            "{name} is a base model ({}), not tuned for chat: --chat wraps the prompt in \
             turns it was never trained on, and its reply is likely junk; without --chat it \
             continues the prompt's text",
            known.file
        ));
    }
    if file.get("tokenizer.chat_template").is_none() {
        return Some(format!(
            "{name} has no chat template (tokenizer.chat_template), as base models have none: \
             --chat renders a generic turn format, and a base model's reply is likely junk"
        ));
    }
    None
}

type LogitsRun = (Vec<u32>, String, Stats, Vec<serde_json::Value>, Stop);

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
    let mut stop = Stop::Tokens;
    while let Some(token) = last.take() {
        generated.push(token);
        history.push(token);
        if tokenizer.is_eog(token) {
            stop = Stop::EndOfText;
            break;
        }
        if pos + 1 >= ids.len() + n {
            break;
        }
        if pos >= model.context() {
            stop = Stop::ContextFull {
                context: model.context(),
                trained: model.config().context_length,
            };
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
    Ok((generated, text, stats, steps, stop))
}

/// The prompt's ids, the generated ids, their text and why generation stopped.
type Generated<'a> = (&'a [u32], &'a [u32], &'a str, Stop);

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    path: &Path,
    device: &dyn Device,
    model: &Model,
    (ids, generated, text, stop): Generated,
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
            "stop": stop.name(),
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
        if let Some(note) = stop.note() {
            eprintln!("{note}");
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
    use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
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
    fn a_numeric_adapter_is_an_index_said_in_words() {
        let msg = in_flag_words(&run_with(&["--adapter", "99"]).unwrap_err());
        assert!(msg.contains("adapter index 99 not found"), "{msg}");
        // And the adapters there are, by index.
        assert!(msg.contains("wgpu sees") && msg.contains(": 0 "), "{msg}");
        assert!(
            !msg.contains("Some(") && !msg.contains("AdapterChoice"),
            "{msg}"
        );
    }

    /// Refused before anything is fetched or opened (the adapter named cannot open, so
    /// the error is the flag's only if it comes first), in the flag's words.
    fn refused(args: &[&str], flag_and_value: &str, range: &str) {
        let all: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--adapter", "no-such-gpu-xyz"])
            .collect();
        let err = run_with(&all).unwrap_err();
        let msg = in_flag_words(&err);
        assert!(
            msg.starts_with(flag_and_value) && msg.contains(range),
            "{args:?}: {msg}"
        );
        assert!(
            !msg.contains("SamplerConfig") && !msg.contains("LoadOptions"),
            "{args:?}: {msg}"
        );
    }

    #[test]
    fn top_p_outside_0_to_1_is_refused() {
        refused(&["--top-p", "2"], "--top-p 2:", "0..=1");
        refused(&["--top-p=-0.5"], "--top-p -0.5:", "0..=1");
    }

    #[test]
    fn min_p_outside_0_to_1_is_refused() {
        refused(&["--min-p", "5"], "--min-p 5:", "0..=1");
    }

    #[test]
    fn a_negative_or_nan_temperature_is_refused() {
        refused(&["--temperature=-1"], "--temperature -1:", "at least 0");
        refused(&["--temperature=nan"], "--temperature NaN:", "at least 0");
    }

    #[test]
    fn a_repeat_penalty_not_above_0_is_refused() {
        refused(&["--repeat-penalty=0"], "--repeat-penalty 0:", "above 0");
        refused(&["--repeat-penalty=-1"], "--repeat-penalty -1:", "above 0");
    }

    #[test]
    fn a_ubatch_of_0_is_refused() {
        refused(&["--ubatch", "0"], "--ubatch 0:", "at least 1");
    }

    #[test]
    fn a_context_of_0_is_refused() {
        refused(&["--context", "0"], "--context 0:", "at least 1");
    }

    /// The synthetic model is trained for 64 positions.
    #[test]
    fn a_context_past_the_trained_one_is_refused_unless_allowed() {
        refused(
            &["--context", "100"],
            "--context 100:",
            "past the 64 positions the model was trained for",
        );
        let msg = in_flag_words(&run_with(&["--context", "100"]).unwrap_err());
        assert!(msg.contains("--allow-past-trained-context"), "{msg}");
        let allowed = run_with(&[
            "--context",
            "100",
            "--allow-past-trained-context",
            "--tokenize",
        ]);
        assert_eq!(allowed.unwrap(), ExitCode::SUCCESS);
        // Up to the trained context needs nothing.
        assert!(run_with(&["--context", "64", "--tokenize"]).is_ok());
    }

    /// A generation that reaches the end of the context stops there and succeeds, on
    /// both paths: the session's stream and `--top-logits`' step by step.
    #[test]
    fn a_generation_that_fills_the_context_stops_cleanly() {
        for extra in [&[][..], &["--json", "--top-logits", "3"][..]] {
            let args: Vec<&str> = ["--prompt-ids", "5,6,7", "--context", "8", "-n", "20"]
                .into_iter()
                .chain(extra.iter().copied())
                .collect();
            let (code, stop) = run_to_stop(Args::parse_from(
                ["decode", "-m", model_file().to_str().unwrap()]
                    .iter()
                    .chain(&args),
            ))
            .unwrap();
            assert_eq!(code, ExitCode::SUCCESS, "{extra:?}");
            assert_eq!(
                stop,
                Some(Stop::ContextFull {
                    context: 8,
                    trained: 64
                }),
                "{extra:?}"
            );
        }
        let note = Stop::ContextFull {
            context: 8,
            trained: 64,
        }
        .note()
        .unwrap();
        assert!(
            note.starts_with("stopped: the context of 8 positions is full")
                && note.contains("raise --context, up to the 64"),
            "{note}"
        );
    }

    #[test]
    fn errors_name_flags_not_api_fields() {
        let full = brass::Error::ContextFull {
            what: "the step at position 8".into(),
            needed: 9,
            context: 8,
            trained: 8192,
            reset_helps: false,
        };
        assert!(full.to_string().contains("raise LoadOptions::context"));
        let msg = in_flag_words(&full);
        assert!(
            msg.contains("raise --context, up to the 8192") && !msg.contains("LoadOptions"),
            "{msg}"
        );
        let at_trained = brass::Error::ContextFull {
            what: "the step at position 8192".into(),
            needed: 8193,
            context: 8192,
            trained: 8192,
            reset_helps: false,
        };
        let msg = in_flag_words(&at_trained);
        assert!(msg.contains("--allow-past-trained-context"), "{msg}");
    }

    #[test]
    fn chat_with_a_base_model_warns() {
        let file = GgufFile::open(model_file()).unwrap();
        let args = Args::parse_from(["decode", "--chat", "--model", "gemma3-270m"]);
        let gemma = KnownModel::by_name("gemma3-270m").unwrap();
        let warning = chat_warning(&args, Some(gemma), &file).unwrap();
        assert!(warning.contains("base model"), "{warning}");
        // The synthetic file has no chat template either.
        let args = Args::parse_from(["decode", "--chat"]);
        let warning = chat_warning(&args, None, &file).unwrap();
        assert!(warning.contains("no chat template"), "{warning}");
        let smollm = KnownModel::by_name("smollm2-135m").unwrap();
        assert!(smollm.kind == ModelKind::Instruct);
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
