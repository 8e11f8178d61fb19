//! Model load time against layer count: a small synthetic shape at 1, 2, 4, ... times a
//! base layer count, loaded on one device. Loading does a fixed amount of work per
//! layer, so the time per layer should stay flat as the count doubles; a step that
//! scans everything created so far shows as a time per layer that grows with it.
//!
//! cargo bench --bench load -- [--layers 1000] [--doublings 4] [--adapter INDEX|NAME]

use std::sync::Arc;
use std::time::Instant;

use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
use brass::gguf::GgufFile;
use brass::model::{LoadOptions, Model};
use brass::quant::GgmlType;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Layers in the first, smallest model.
    #[arg(long, default_value_t = 1000)]
    layers: u64,
    /// How many times to double it.
    #[arg(long, default_value_t = 4)]
    doublings: u32,
    #[arg(long)]
    adapter: Option<String>,
    /// cargo bench passes --bench.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> brass::Result<()> {
    let args = Args::parse();
    let choice = match &args.adapter {
        Some(spec) => AdapterChoice::parse(spec),
        None => AdapterChoice::from_env(),
    };
    let device: Arc<dyn Device> = Arc::new(WgpuDevice::open(&choice)?);
    println!("adapter: {}", device.profile().name);
    println!(
        "{:>8} {:>10} {:>12} {:>14}",
        "layers", "file MB", "load s", "µs per layer"
    );
    let dir = std::env::temp_dir().join(format!("brass-load-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| brass::Error::Io {
        path: dir.clone(),
        source,
    })?;
    for doubling in 0..=args.doublings {
        let layers = args.layers << doubling;
        let spec = SyntheticSpec {
            name: format!("tiny-{layers}"),
            hidden: 64,
            ffn: 128,
            layers,
            heads: 2,
            kv_heads: 1,
            vocab: 320,
            context: 64,
            rope_base: 10_000.0,
            mix: QuantMix::Single(GgmlType::Q8_0),
            lm_head: None,
            seed: 1,
            arch: Arch::Llama,
            head_dim: None,
            sliding_window: None,
        };
        let path = dir.join(format!("{}.gguf", spec.name));
        write_synthetic(&spec, &path, |_, _| {})?;
        let file = GgufFile::open(&path)?;
        let options = LoadOptions {
            context: Some(16),
            ..Default::default()
        };
        let t0 = Instant::now();
        let model = Model::from_gguf(device.clone(), &file, &options)?;
        let seconds = t0.elapsed().as_secs_f64();
        drop(model);
        println!(
            "{layers:>8} {:>10.1} {seconds:>12.2} {:>14.1}",
            file.file_size() as f64 / 1e6,
            seconds * 1e6 / layers as f64
        );
        drop(file);
        std::fs::remove_file(&path).ok();
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
