//! Where one decode step's GPU time goes, per pipeline (GPU timestamps per dispatch), or
//! one prompt batch's (`--prompt N`: N tokens into the cache after `--depth`).
//!
//! cargo run --release --example profile_step -- [MODEL] [--x-planes 2] [--depth N]
//!     [--prompt N]

use std::sync::Arc;

use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::hub::default_model_path;
use brass::model::{Input, LoadOptions, Model};
use brass::router::Overrides;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// A GGUF file (default: the default model).
    model: Option<std::path::PathBuf>,
    /// A/B: the int8 planes dot4 matvecs multiply x on.
    #[arg(long)]
    x_planes: Option<u32>,
    /// Positions already in the KV cache (as allocated) at the profiled step.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Profile a prompt batch of this many tokens at `--depth` instead of a decode
    /// step (at most the plan's batch).
    #[arg(long, default_value_t = 0)]
    prompt: usize,
    /// A/B: invocations per decode attention workgroup.
    #[arg(long)]
    attention_invocations: Option<u32>,
}

fn main() -> brass::Result<()> {
    let args = Args::parse();
    let path = args.model.map_or_else(default_model_path, Ok)?;
    let device: Arc<dyn Device> = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
    let model = Model::load(
        device,
        path,
        &LoadOptions {
            context: Some(args.depth + args.prompt + 64),
            // A depth past the trained context is a timing question, not a text one.
            allow_past_trained_context: true,
            routing: Overrides {
                x_planes: args.x_planes,
                attention_invocations: args.attention_invocations,
                ..Overrides::default()
            },
            ..Default::default()
        },
    )?;
    // Half a second of steps first: GPUs lower their clocks while the CPU loads the
    // model, and a profile taken straight after loading Llama-3-8B read three times the
    // step time of the same build's decode.
    let warm_until = std::time::Instant::now() + std::time::Duration::from_millis(500);
    for pos in 0.. {
        model.forward(Input::Token(1), args.depth + pos % 3)?;
        if pos >= 3 && std::time::Instant::now() >= warm_until {
            break;
        }
    }
    let profile = if args.prompt > 0 {
        // Ids below 251, inside every vocabulary.
        let chunk: Vec<u32> = (0..args.prompt as u32).map(|i| 1 + i % 250).collect();
        model.prefill(&chunk, args.depth)?;
        let t = std::time::Instant::now();
        model.prefill(&chunk, args.depth)?;
        model.forward(Input::Token(1), args.depth + args.prompt)?;
        println!(
            "a prompt batch of {} tokens and a step, wall: {:.1} ms",
            args.prompt,
            t.elapsed().as_secs_f64() * 1e3
        );
        model.profile_prompt_batch(&chunk, args.depth)?
    } else {
        let t = std::time::Instant::now();
        model.forward(Input::Token(1), args.depth + 3)?;
        println!("one step, wall: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        model.profile_step(Input::Token(1), args.depth + 4)?
    };
    let mut total = 0.0;
    for (name, ns, n) in profile {
        println!("{name:<40} {n:>5} dispatches {:>9.3} ms", ns / 1e6);
        total += ns;
    }
    println!("{:<40} {:>5}            {:>9.3} ms", "sum", "", total / 1e6);
    if let Some(note) = model.device().clock().note() {
        println!("note: {note}");
    }
    Ok(())
}
