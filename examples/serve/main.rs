//! An OpenAI-compatible HTTP server over brass's many-sequences engine.
//!
//! ```text
//! cargo run --release --example serve                       # the default model, 127.0.0.1:8080
//! curl -N http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \
//!   -d '{"model": "smollm2-135m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}'
//! ```
//!
//! `POST /v1/chat/completions` and `/v1/completions` (whole or streamed as server-sent
//! events), `GET /v1/models` and `GET /health`. Concurrent requests are concurrent
//! sequences of one model, each step reading the weights once for all of them; past
//! `--sequences` they wait in a queue, past `--queue` they get 503.

mod http;
mod openai;
mod scheduler;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::serve::ListenerExt;
use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::gguf::GgufFile;
use brass::hub::{FetchOutput, KnownModel, DEFAULT_MODEL};
use brass::kernels::attention::KvType;
use brass::model::{Engine, LoadOptions};
use brass::tokenizer::Tokenizer;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "An OpenAI-compatible HTTP server over brass")]
struct Args {
    /// GGUF file, or the name of a known model (`decode --list-models`), fetched on first
    /// use (default: smollm2-135m).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// The model's name in the API (`/v1/models`, each request's `model`; default: the
    /// known model's name, else the file's name without `.gguf`).
    #[arg(long)]
    model_name: Option<String>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// The port (0: any free one; the line `listening on http://...` says which).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Requests answered at once, each a sequence of the engine with its own KV cache.
    #[arg(long, default_value_t = 8)]
    sequences: usize,
    /// Positions per sequence: a request's prompt and reply together (checked against
    /// the device's memory for all sequences before anything is allocated).
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Requests that may wait for a sequence; past them a request gets 503.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    queue: u64,
    /// The largest request body taken, in bytes (larger: 413).
    #[arg(long, default_value_t = 1 << 20)]
    max_body_bytes: usize,
    /// How the KV cache stores keys and values: f16, q8_0 or f32.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Prompt tokens per prefill batch (default 512).
    #[arg(long)]
    ubatch: Option<usize>,
    /// Adapter: an index or a name substring (default: BRASS_ADAPTER, else the best).
    #[arg(long)]
    adapter: Option<String>,
    /// Process every prompt from its start. By default a finished request's cache is
    /// held until its region is needed, and a prompt that begins as a held or running
    /// one did takes the rows it can bit for bit (`Engine::reusable`: the reply is the
    /// one it gets from scratch; usage counts them as `cached_tokens`).
    #[arg(long)]
    no_prompt_cache: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let options = LoadOptions {
        context: Some(args.context),
        kv: args.kv_type,
        ubatch: args.ubatch,
        sequences: args.sequences,
        ..LoadOptions::default()
    };
    let (path, known) = match &args.model {
        Some(arg) => match KnownModel::for_arg(arg)? {
            Some(known) => (known.cached_path_with(FetchOutput::Progress)?, Some(known)),
            None => (arg.clone(), None),
        },
        None => (
            DEFAULT_MODEL.cached_path_with(FetchOutput::Progress)?,
            Some(&DEFAULT_MODEL),
        ),
    };
    let model_name = match (&args.model_name, known) {
        (Some(name), _) => name.clone(),
        (None, Some(known)) => KnownModel::REGISTRY
            .iter()
            .find(|(_, m)| m.file == known.file)
            .map_or(known.file.trim_end_matches(".gguf"), |(name, _)| *name)
            .to_string(),
        (None, None) => path
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
    };
    let file = GgufFile::open(&path)?;
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file)?);
    if tokenizer.chat_template().is_none() {
        eprintln!(
            "warning: {model_name} has no chat template; /v1/chat/completions renders a \
             generic turn format"
        );
    }
    let choice = match &args.adapter {
        Some(spec) => AdapterChoice::parse(spec),
        None => AdapterChoice::from_env(),
    };
    let device: Arc<dyn Device> = Arc::new(WgpuDevice::open(&choice)?);
    let engine = Engine::from_gguf(device.clone(), &file, &options)?;
    let context = engine.model().context();
    eprintln!(
        "{model_name} ({}) on {}: {} sequences of {context} positions, queue {}",
        path.display(),
        device.profile().name,
        args.sequences,
        args.queue
    );
    // How the steps of many sequences run, as the plan says (the matrix units past a
    // number of rows, where the adapter has them).
    for clause in &engine.model().plan().decode_rows {
        eprintln!("  decode rows: {clause}");
    }

    let (jobs, queue) = std::sync::mpsc::sync_channel(args.queue as usize);
    let load = Arc::new(scheduler::Load::default());
    let engine_thread = {
        let (tokenizer, load) = (tokenizer.clone(), load.clone());
        let prompt_cache = !args.no_prompt_cache;
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || scheduler::run(engine, tokenizer, queue, load, prompt_cache))?
    };
    let app = Arc::new(http::App {
        model_name,
        tokenizer,
        context,
        jobs,
        load,
        sequences: args.sequences,
        queue: args.queue as usize,
        next_id: AtomicU64::new(0),
        started: http::now(),
        max_body_bytes: args.max_body_bytes,
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.host, args.port)).await?;
        // Tests and scripts read the port from this line.
        println!("listening on http://{}", listener.local_addr()?);
        // A chunk per token is a small write every step: sent at once, not held back
        // by Nagle's algorithm for the last one's acknowledgement.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        // On a signal, requests running get a grace period to finish, then are dropped.
        let (stopping, mut stop_seen) = tokio::sync::watch::channel(false);
        let server = axum::serve(listener, http::router(app)).with_graceful_shutdown(async move {
            shutdown().await;
            let _ = stopping.send(true);
        });
        let grace = async {
            let _ = stop_seen.changed().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            served = server => served?,
            () = grace => eprintln!(
                "requests still running {} s after the signal are dropped",
                SHUTDOWN_GRACE.as_secs()
            ),
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    // The runtime's end drops every request still streaming and with them the queue's
    // senders; the engine then drops its sequences, ends, and frees the model on its own
    // thread before the process exits (a device torn down under a running thread's
    // feet faults in NVIDIA's driver).
    drop(runtime);
    if engine_thread.join().is_err() {
        return Err("the engine's thread panicked".into());
    }
    served
}

/// How long requests still running may take after Ctrl-C or SIGTERM.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
    eprintln!("shutting down");
}
