//! Decode with a GGUF model: streams text, then reports load time, prompt and decode
//! tokens per second, and the effective weight bandwidth per token.
//!
//! ```text
//! cargo run --release --example decode -- -p "The capital of France is" -n 32
//! cargo run --release --example decode -- --prompt-ids 504,3575,282,4649,314 --json --top-logits 5
//! cargo run --release --example decode -- --plan
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brass::device::{bandwidth_probe, AdapterChoice, Device, WgpuDevice};
use brass::gguf::GgufFile;
use brass::model::{default_model_path, Input, LoadOptions, Model, Session};
use brass::router::Force;
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::{ChatMessage, Tokenizer};
use clap::Parser;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Quantized LLM decode on the GPU with brass")]
struct Args {
    /// GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched into the cache on first use).
    #[arg(short, long)]
    model: Option<PathBuf>,
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
    /// Adapter name substring (default: BRASS_ADAPTER, else the best adapter).
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
    /// KV-cache positions (default: the model's context, at most 4096).
    #[arg(long)]
    context: Option<usize>,
    /// Print one JSON object (prompt ids, generated ids, text, timings) instead of text.
    #[arg(long)]
    json: bool,
    /// With --json: the K largest logits after every processed token, shaped like the
    /// files in shared/reference.
    #[arg(long)]
    top_logits: Option<usize>,
    /// Print every tensor's route and exit.
    #[arg(long)]
    plan: bool,
    /// Print the dispatch ledger at the end; exit non-zero if it has defects.
    #[arg(long)]
    audit: bool,
    /// Print the prompt's token ids as JSON and exit (no GPU needed).
    #[arg(long)]
    tokenize: bool,
    /// Measure the device's streaming-read bandwidth to report % of it.
    #[arg(long)]
    probe: bool,
    /// Make sure the model is in the cache (fetching the default one if needed), print
    /// its path and exit.
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
        return Ok(ids.clone());
    }
    let text = if args.chat {
        tokenizer.apply_chat_template(&[ChatMessage::user(args.prompt.as_str())], true)?
    } else {
        args.prompt.clone()
    };
    Ok(tokenizer.encode(&text, true, true))
}

fn run(args: Args) -> brass::Result<ExitCode> {
    let path = match &args.model {
        Some(p) => p.clone(),
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

    let choice = match &args.adapter {
        Some(name) => AdapterChoice::by_name(name),
        None => AdapterChoice::from_env(),
    };
    let wgpu_device = WgpuDevice::open(&choice).map_err(|e| {
        brass::Error::NoAdapter(format!(
            "{e}\nbrass needs a GPU through Vulkan or Metal; on Linux without one, install Mesa's \
             lavapipe (apt-get install mesa-vulkan-drivers)"
        ))
    })?;
    if wgpu_device.is_software() {
        eprintln!(
            "note: no GPU adapter in use; {} runs the kernels on the CPU (expect about a \
             token per second; see examples/devices for the adapters wgpu sees)",
            wgpu_device.adapter_name()
        );
    }
    let device: Arc<dyn Device> = Arc::new(wgpu_device);
    let force = args.force.as_deref().map(str::parse::<Force>).transpose()?;
    let options = LoadOptions {
        context: args.context,
        force,
        x_q8: args.x_q8,
        glu_q8: args.glu_q8,
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

    if args.plan {
        print_plan(&model);
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

    let (generated, text, prompt_time, decode_time, steps) = if let Some(k) = args.top_logits {
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
        let s = session.stats().clone();
        return report(
            &args,
            &*device,
            session.model(),
            &ids,
            &generated,
            &text,
            load_time,
            s.prompt_time,
            s.decode_time,
            None,
        );
    };
    report(
        &args,
        &*device,
        &model,
        &ids,
        &generated,
        &text,
        load_time,
        prompt_time,
        decode_time,
        Some(steps),
    )
}

type LogitsRun = (Vec<u32>, String, Duration, Duration, Vec<serde_json::Value>);

/// Decodes with full logits after every token, recording the top `k` per step.
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
    let mut generated = Vec::new();
    let t0 = Instant::now();
    let mut prompt_time = Duration::ZERO;
    let mut next = 0;
    let mut pos = 0;
    while pos < ids.len() + n.saturating_sub(1) {
        let id = if pos < ids.len() { ids[pos] } else { next };
        let logits = model.forward_logits(Input::Token(id), pos)?;
        next = sampler.sample(&logits, &history);
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
        if pos + 1 == ids.len() {
            prompt_time = t0.elapsed();
        }
        if pos + 1 >= ids.len() {
            generated.push(next);
            history.push(next);
            if tokenizer.is_eog(next) {
                break;
            }
        }
        pos += 1;
    }
    let decode_time = t0.elapsed() - prompt_time;
    let text = tokenizer.decode(&generated, true)?;
    Ok((generated, text, prompt_time, decode_time, steps))
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    device: &dyn Device,
    model: &Model,
    ids: &[u32],
    generated: &[u32],
    text: &str,
    load_time: Duration,
    prompt_time: Duration,
    decode_time: Duration,
    steps: Option<Vec<serde_json::Value>>,
) -> brass::Result<ExitCode> {
    // The first generated token comes out of the prompt pass; the rest are decode steps.
    let decode_tokens = generated.len().saturating_sub(1);
    let prompt_tps = ids.len() as f64 / prompt_time.as_secs_f64();
    let per_token = decode_time.as_secs_f64() / decode_tokens.max(1) as f64;
    let decode_tps = if decode_tokens > 0 {
        1.0 / per_token
    } else {
        0.0
    };
    let gbps = if decode_tokens > 0 {
        model.weight_bytes_per_token() as f64 / per_token / 1e9
    } else {
        0.0
    };
    let probe = if args.probe {
        Some(bandwidth_probe(device, 3)?)
    } else {
        None
    };
    if args.json {
        let mut out = json!({
            "model": args.model.as_ref().map(|p| p.display().to_string()),
            "adapter": device.profile().name,
            "prompt_ids": ids,
            "generated": generated,
            "text": text,
            "timings": {
                "load_s": load_time.as_secs_f64(),
                "prompt_tokens": ids.len(),
                "prompt_s": prompt_time.as_secs_f64(),
                "prompt_tok_s": prompt_tps,
                "decode_tokens": decode_tokens,
                "decode_s": decode_time.as_secs_f64(),
                "decode_tok_s": decode_tps,
                "weight_bytes_per_token": model.weight_bytes_per_token(),
                "effective_gb_s": gbps,
                "probe_gb_s": probe.as_ref().map(|p| p.gbps),
            },
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
            "load {:.2} s | prompt {} tokens, {:.1} tok/s | decode {} tokens, {:.1} tok/s | {:.2} GB/s effective",
            load_time.as_secs_f64(),
            ids.len(),
            prompt_tps,
            decode_tokens,
            decode_tps,
            gbps
        );
        if let Some(p) = &probe {
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

fn print_plan(model: &Model) {
    println!(
        "{:<28} {:>6} {:>14}  {:<28} reason",
        "tensor", "type", "M x K", "kernel"
    );
    for (name, r) in model.plan() {
        let shape = format!("{} x {}", r.m, r.k);
        let kernel = r.pipeline_key();
        println!(
            "{name:<28} {:>6} {shape:>14}  {kernel:<28} {}",
            r.ty.name(),
            r.reason()
        );
    }
}
