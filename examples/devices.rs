//! Lists every adapter wgpu sees with its brass profile, and runs the bandwidth probe.
//!
//! cargo run --release --example devices [-- --no-probe] [-- --adapter NAME] [--json]

use brass::device::{bandwidth_probe, list_adapters, AdapterChoice, Device, WgpuDevice};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Only this adapter (name substring or index); default: all.
    #[arg(long)]
    adapter: Option<String>,
    /// Skip the bandwidth probe.
    #[arg(long)]
    no_probe: bool,
    /// Timed probe runs (the best is reported).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> brass::Result<()> {
    let adapters = list_adapters();
    if adapters.is_empty() {
        return Err(brass::Error::NoAdapter(
            "wgpu sees no adapter; on Linux, `apt-get install mesa-vulkan-drivers` gives lavapipe"
                .into(),
        ));
    }
    let mut results = Vec::new();
    for a in &adapters {
        if let Some(want) = &args.adapter {
            let by_index = want.parse::<usize>().ok() == Some(a.index);
            if !by_index && !a.name.to_lowercase().contains(&want.to_lowercase()) {
                continue;
            }
        }
        let device = WgpuDevice::open(&AdapterChoice {
            index: Some(a.index),
            ..Default::default()
        })?;
        let probe = if args.no_probe {
            None
        } else {
            Some(bandwidth_probe(&device, args.runs)?)
        };
        if args.json {
            results.push(serde_json::json!({
                "index": a.index,
                "device_type": a.device_type,
                "profile": device.profile(),
                "probe": probe,
            }));
        } else {
            println!(
                "[{}] {} adapter: {}",
                a.index,
                a.device_type,
                device.profile()
            );
            if let Some(p) = probe {
                println!("  {p}");
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("JSON of plain values")
        );
    }
    Ok(())
}
