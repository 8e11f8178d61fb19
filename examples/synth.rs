//! Writes a synthetic model (random weights, real shapes) for benchmarks: llama, or the
//! qwen2, qwen3 and gemma3 presets.
//!
//! ```text
//! cargo run --release --example synth -- --preset llama3-8b [--layers 4] [--mix q4_k_m] [--context 32768] -o out.gguf
//! ```
//!
//! `-o` must be a new path or a regular file, which is replaced by a rename once the
//! whole model is written; a directory, device node, FIFO, socket or symbolic link there
//! is refused and left alone (give a link's target to write there).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use brass::gguf::synthetic::{write_synthetic, QuantMix, SyntheticSpec, PRESETS};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Write a synthetic GGUF model with random weights")]
struct Args {
    /// One of `brass::gguf::synthetic::PRESETS`: smollm2-135m, llama3.2-1b, llama3-8b,
    /// muse-30b, hidden-12288, qwen3-8b, qwen2.5-7b, gemma3-4b, qwen2.5-1.5b, gemma3-270m.
    #[arg(long)]
    preset: String,
    /// Override the trained context length the file states (`<arch>.context_length`):
    /// what brass and llama.cpp size their KV cache by when asked for none.
    #[arg(long)]
    context: Option<u64>,
    /// Override the layer count (quick runs).
    #[arg(long)]
    layers: Option<u64>,
    /// q4_k_m, or one type for every matrix (q8_0, q4_k, f16, ...).
    #[arg(long)]
    mix: Option<QuantMix>,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    #[arg(short, long)]
    output: PathBuf,
}

fn main() -> brass::Result<()> {
    let args = Args::parse();
    let mut spec = SyntheticSpec::preset(&args.preset)
        .map_err(|e| brass::Error::Invalid(format!("{e}; presets: {}", PRESETS.join(", "))))?;
    if let Some(layers) = args.layers {
        spec.layers = layers;
    }
    if let Some(mix) = args.mix {
        spec.mix = mix;
    }
    if let Some(context) = args.context {
        spec.context = context;
    }
    spec.seed = args.seed;
    eprintln!(
        "{} ({}, {}, {} layers): {:.2} GB of tensors",
        spec.name,
        spec.arch,
        spec.mix,
        spec.layers,
        spec.tensor_bytes()? as f64 / 1e9
    );
    let t = Instant::now();
    let mut last_pct = u64::MAX;
    write_synthetic(&spec, &args.output, |done, total| {
        let pct = done * 100 / total.max(1);
        if pct != last_pct {
            last_pct = pct;
            eprint!("\r{pct:>3}%");
            let _ = std::io::stderr().flush();
        }
    })?;
    eprintln!(
        "\rwrote {} in {:.1} s",
        args.output.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
