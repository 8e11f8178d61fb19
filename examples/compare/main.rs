//! Cross-GPU comparison runs: for each adapter, the bandwidth probe, a matvec suite
//! (coop and scalar, real shapes) and a decode benchmark, written as one versioned
//! JSON file (`brass-compare/1`); `--merge` turns several such files into a Markdown
//! report with SVG charts.
//!
//! ```text
//! cargo run --release --example compare -- [--adapter INDEX|NAME] [--quick] [-n 64] \
//!     [--model PATH | --synthetic llama3-8b [--layers N]] [--parallel 1,8,32] \
//!     -o results/h200.json
//! cargo run --release --example compare -- --merge results/*.json -o results/
//! ```
//!
//! The lm-head / rest split of a token comes from `Model::profile_step` (GPU time per
//! pipeline). When the lm-head's pipeline serves no other tensor its profiled time is
//! exact; when it is shared (a tied Q4_1 embedding on SmolLM2, a Q6_K output next to
//! Q6_K `ffn_down`s), the lm-head matvec is timed alone with the same route.

mod report;
mod result;
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use brass::device::{list_adapters, AdapterChoice, Device, WgpuDevice};
use brass::gguf::synthetic::{write_synthetic, QuantMix, SyntheticSpec};
use brass::gguf::GgufFile;
use brass::hub::default_model_path;
use brass::kernels::attention::Merge;
use brass::model::LoadOptions;
use brass::router::Overrides;
use clap::Parser;

use result::{CompareFile, DeviceRun, FORMAT};

#[derive(Parser, Debug)]
#[command(about = "brass cross-GPU comparison: bandwidth probe, matvec suite, decode")]
struct Args {
    /// Only this adapter: an index (as examples/devices lists them) or a name substring
    /// (default: every adapter).
    #[arg(long)]
    adapter: Option<String>,
    /// Small suite and few tokens: for lavapipe and smoke tests.
    #[arg(long)]
    quick: bool,
    /// Decode this GGUF model (default: the default model).
    #[arg(long, conflicts_with = "synthetic")]
    model: Option<PathBuf>,
    /// Decode a synthetic model of this preset, written to the cache first.
    #[arg(long)]
    synthetic: Option<String>,
    /// Layers of the synthetic model (default: the preset's).
    #[arg(long, requires = "synthetic")]
    layers: Option<u64>,
    /// Quant mix of the synthetic model (default: q4_k_m).
    #[arg(long, requires = "synthetic")]
    mix: Option<QuantMix>,
    /// Tokens to decode (default 64, 4 with --quick).
    #[arg(short = 'n', long)]
    tokens: Option<usize>,
    /// Whether norms hand the dot4 matrices they feed x already quantized: true for
    /// all, false for none (default: the model's rule; see `router::Overrides::x_q8`).
    #[arg(long)]
    x_q8: Option<bool>,
    /// Columns (a step's rows, one per sequence) each loaded weight slice of a dot4
    /// matvec is dotted with, 1 to 8 (default: 1; on the H200 8 ran 0.87-1.23x at 8
    /// columns and 0.70x at one, see wgsl/matvec/dot4.wgsl `batch_rows`): x then
    /// arrives quantized and is read in place (as with --x-q8 true --glu-q8 true, unless
    /// those say otherwise), where the kernel splits its slices (Q4_K, Q5_K).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    columns_at_once: Option<u32>,
    /// A/B: whether the staging dot4 matvecs of a model of many sequences stage several
    /// of a step's columns at once and dot each loaded weight slice with every one
    /// (default: where they fit; see `router::Overrides::staged_columns`).
    #[arg(long)]
    staged_columns: Option<bool>,
    /// A/B: whether staged columns load each lane's next weight slice ahead (default:
    /// yes where x is one tile; see `router::Overrides::staged_prefetch`).
    #[arg(long)]
    staged_prefetch: Option<bool>,
    /// A/B: whether staged columns take all of a step's columns in tiles of x where one
    /// tile of all of K holds fewer (default: no, slower at 8 sequences on the H100;
    /// see `router::Overrides::staged_tiles`).
    #[arg(long)]
    staged_tiles: Option<bool>,
    /// A/B: dot4 lanes per row, 0 for a whole subgroup (default: the router's rules,
    /// teams of lanes for staged columns where row batches remain; see
    /// `router::Overrides::lanes`), as the matvec bench's `--coop-lanes`.
    #[arg(long)]
    coop_lanes: Option<u32>,
    /// A/B: workgroups a dot4 matvec's row part takes at most, in place of the rules
    /// that cap them (`router::Overrides::max_workgroups`), as the bench's `--coop-groups`.
    #[arg(long)]
    coop_groups: Option<u32>,
    /// Whether a dot4 down projection takes silu(gate) * up quantized by its own
    /// dispatch: true for all, false for none (default: the model's rule; see
    /// `router::Overrides::glu_q8`).
    #[arg(long)]
    glu_q8: Option<bool>,
    /// The int8 planes dot4 matvecs multiply x on: 1 (default) rounds it as llama.cpp
    /// does; 2 adds its residual 256 times finer, logits within a few hundredths of
    /// exact math, at a cost (H200: 12 % of the Llama-3-8B shape's decode speed).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    x_planes: Option<u32>,
    /// Whether prefill matmuls, and the decode steps of many rows, multiply on
    /// cooperative matrices: true (refused where the adapter has none), false for dot4
    /// and the column matvec (default: where the adapter has them).
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
    /// A/B: blocks of 16 rows each decode-columns workgroup multiplies (1, 2, 4 or 8),
    /// both tiles of every matrix alike, K in 8 / N parts; refused where the tile does
    /// not fit the adapter's workgroup memory. Default: 2 for steps of up to 16 rows and
    /// 4 for more, both in 4 parts.
    #[arg(long)]
    decode_row_blocks: Option<u32>,
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
    /// Also decode with this many tokens already in the KV cache (comma-separated),
    /// as llama-bench's `-d`.
    #[arg(long, value_delimiter = ',')]
    depth: Vec<usize>,
    /// Fill the depth's cache rows through prefill (true), or leave them as allocated
    /// (false: zeros). Decode reads every cached row alike whatever it holds, so the
    /// timing is the same; false spares the prefill of a long depth (minutes at 32,768
    /// on an 8B model).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    depth_prefill: bool,
    /// How the KV cache stores keys and values (f16, q8_0, or f32 for exact math).
    #[arg(long, default_value = "f16")]
    kv_type: brass::kernels::attention::KvType,
    /// A/B: workgroups decode attention spreads a long context over (default: the
    /// device's tuning).
    #[arg(long)]
    attention_workgroups: Option<u64>,
    /// A/B: positions a decode attention chunk takes at least (default: the kernel's
    /// rule).
    #[arg(long)]
    attention_min_chunk: Option<u64>,
    /// A/B: invocations per decode attention workgroup (default: the kernel's).
    #[arg(long)]
    attention_invocations: Option<u32>,
    /// A/B: how split decode attention merges its chunks, last-workgroup or combine
    /// (default: the backend's).
    #[arg(long)]
    attention_merge: Option<Merge>,
    /// Also time prompt processing of this many tokens (comma-separated), as
    /// llama-bench's `-p` (0: none).
    #[arg(long, value_delimiter = ',', default_value = "512")]
    pp: Vec<usize>,
    /// Also decode this many sequences at once (comma-separated), each a prompt of
    /// `--parallel-prompt` tokens then `-n` tokens, as llama-batched-bench: aggregate
    /// and per-sequence tok/s.
    #[arg(long, value_delimiter = ',')]
    parallel: Vec<usize>,
    /// Prompt tokens of each `--parallel` sequence.
    #[arg(long, default_value_t = 128)]
    parallel_prompt: usize,
    /// Prompt tokens per prefill batch (default: the model's plan, 2,048).
    #[arg(long)]
    ubatch: Option<usize>,
    #[arg(long)]
    skip_matvec: bool,
    #[arg(long)]
    skip_decode: bool,
    /// Merge these result files into a report instead of measuring.
    #[arg(long, num_args = 1..)]
    merge: Vec<PathBuf>,
    /// Result file (default: compare.json), or with --merge the report directory.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.merge.is_empty() {
        measure(&args)
    } else {
        merge(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn merge(args: &Args) -> Result<(), String> {
    let mut files = Vec::new();
    for path in &args.merge {
        match report::read(path)? {
            Some(file) => files.push((path, file)),
            None => eprintln!("skipped {}: a matvec benchmark's results", path.display()),
        }
    }
    let entries: Vec<report::Entry> = files
        .iter()
        .flat_map(|(path, file)| {
            file.devices.iter().map(move |run| report::Entry {
                source: path.display().to_string(),
                file,
                run,
            })
        })
        .collect();
    let dir = args.output.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
        Ok::<(), String>(())
    };
    write("report.md", report::markdown(&entries))?;
    write("decode_split.svg", report::decode_split_svg(&entries))?;
    write("bandwidth.svg", report::bandwidth_svg(&entries))
}

/// The model to decode, and its name in the results.
fn model_path(args: &Args) -> brass::Result<(PathBuf, String)> {
    let Some(preset) = &args.synthetic else {
        let path = match &args.model {
            Some(p) => p.clone(),
            None => default_model_path()?,
        };
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        return Ok((path, name));
    };
    let mut spec = SyntheticSpec::preset(preset)?;
    if let Some(layers) = args.layers {
        spec.layers = layers;
    }
    if let Some(mix) = args.mix {
        spec.mix = mix;
    }
    let name = format!("synthetic:{}:{}:{}L", spec.name, spec.mix, spec.layers);
    // Cached by everything that decides the content, so reruns skip the writing.
    let dir = brass::hub::cache_dir()?.join("synthetic");
    let file = format!(
        "{}-{}-{}L-{:x}.gguf",
        spec.name,
        spec.mix.to_string().to_lowercase(),
        spec.layers,
        spec.seed
    );
    let path = dir.join(file);
    if !path.is_file() {
        std::fs::create_dir_all(&dir).map_err(|source| brass::Error::Io {
            path: dir.clone(),
            source,
        })?;
        eprintln!(
            "writing {} ({:.2} GB)",
            path.display(),
            spec.tensor_bytes()? as f64 / 1e9
        );
        let mut last = 0;
        write_synthetic(&spec, &path, |done, total| {
            let pct = done * 10 / total.max(1);
            if pct != last {
                last = pct;
                eprint!("{}% ", pct * 10);
            }
        })?;
        eprintln!();
    }
    Ok((path, name))
}

fn measure(args: &Args) -> Result<(), String> {
    let tokens = args
        .tokens
        .unwrap_or(if args.quick { 4 } else { 64 })
        .max(1);
    let model = if args.skip_decode {
        None
    } else {
        let (path, name) = model_path(args).map_err(|e| e.to_string())?;
        let file = GgufFile::open(&path).map_err(|e| e.to_string())?;
        // A file copied under another name (`model.gguf`) still says what it holds.
        let name = match file.get_str("general.name") {
            Ok(model) if args.synthetic.is_none() && !model.is_empty() => {
                format!("{model} ({name})")
            }
            _ => name,
        };
        Some((file, name))
    };
    let wanted = args.adapter.as_deref().map(AdapterChoice::parse);
    let adapters: Vec<_> = list_adapters()
        .into_iter()
        .filter(|a| {
            wanted.as_ref().is_none_or(|w| {
                w.index.is_none_or(|i| i == a.index)
                    && w.name
                        .as_ref()
                        .is_none_or(|n| a.name.to_lowercase().contains(&n.to_lowercase()))
            })
        })
        .collect();
    if adapters.is_empty() {
        return Err("no adapter matches".into());
    }
    let mut devices = Vec::new();
    for a in adapters {
        eprintln!("{} ({:?}, {})", a.name, a.backend, a.driver);
        let choice = AdapterChoice {
            index: Some(a.index),
            ..Default::default()
        };
        let device: Arc<dyn Device> =
            Arc::new(WgpuDevice::open(&choice).map_err(|e| e.to_string())?);
        let run = measure_device(args, device, model.as_ref(), tokens)
            .map_err(|e| format!("{}: {e}", a.name))?;
        devices.push(run);
    }
    let out = CompareFile {
        format: FORMAT.to_string(),
        brass_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: git_commit(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        quick: args.quick,
        devices,
    };
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("compare.json"));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&out).expect("plain values");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn measure_device(
    args: &Args,
    device: Arc<dyn Device>,
    model: Option<&(GgufFile, String)>,
    tokens: usize,
) -> brass::Result<DeviceRun> {
    let profile = device.profile().clone();
    let probe = run::probe(device.as_ref(), args.quick)?;
    let mut notes = Vec::new();
    // Matvec cases and the decode split need GPU timestamps.
    let timed = profile.timestamps;
    if !timed {
        notes.push("no GPU timestamps: matvec suite and decode split skipped".into());
    }
    let matvec = if timed && !args.skip_matvec {
        run::matvec_suite(device.as_ref(), args.quick, probe.gbps)?
    } else {
        Vec::new()
    };
    // The A/B choices; the context is sized for each run.
    let load = LoadOptions {
        kv: args.kv_type,
        routing: Overrides {
            x_q8: args.x_q8.or(args.columns_at_once.map(|_| true)),
            glu_q8: args.glu_q8.or(args.columns_at_once.map(|_| true)),
            x_in_place: args.columns_at_once.map(|_| true),
            columns_at_once: args.columns_at_once,
            staged_columns: args.staged_columns,
            staged_prefetch: args.staged_prefetch,
            staged_tiles: args.staged_tiles,
            lanes: args.coop_lanes,
            max_workgroups: args.coop_groups,
            x_planes: args.x_planes,
            attention_workgroups: args.attention_workgroups,
            attention_min_chunk: args.attention_min_chunk,
            attention_invocations: args.attention_invocations,
            attention_merge: args.attention_merge,
            coop_matrix: args.coop_matrix,
            decode_units_from: args.decode_units_from,
            decode_column_spans: args.decode_column_spans,
            decode_row_blocks: args.decode_row_blocks,
            matrix_attention: args.matrix_attention,
            unpacked_matmul: args.unpacked_matmul,
            ..Overrides::default()
        },
        ubatch: args.ubatch,
        // Depths (and prompt lengths) past the trained context are timing questions
        // here, asked of synthetic weights as often as of real ones.
        allow_past_trained_context: true,
        ..Default::default()
    };
    let prompt = match model {
        Some((file, name)) if !args.skip_decode => args
            .pp
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| run::prompt(device.clone(), file, name, n, &load))
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    let (decode, decode_at_depth) = match model {
        Some((file, name)) if timed => {
            let at = |depth| {
                let (device, quick) = (device.clone(), args.quick);
                let fill = args.depth_prefill;
                run::decode(
                    device,
                    file,
                    name,
                    tokens,
                    quick,
                    &load,
                    probe.gbps,
                    (depth, fill),
                )
            };
            let at_depth = args
                .depth
                .iter()
                .map(|&d| at(d))
                .collect::<Result<_, _>>()?;
            (Some(at(0)?), at_depth)
        }
        _ => (None, Vec::new()),
    };
    let parallel = match model {
        Some((file, name)) if !args.skip_decode => args
            .parallel
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| {
                let lengths = (args.parallel_prompt.max(1), tokens);
                run::parallel(device.clone(), file, name, n, lengths, &load)
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    if let Some(note) = device.clock().note() {
        notes.push(note.to_string());
    }
    Ok(DeviceRun {
        vendor_peak_gbps: result::vendor_peak(&profile),
        profile,
        probe,
        matvec,
        decode,
        decode_at_depth,
        prompt,
        parallel,
        notes,
    })
}

/// The commit measured: the one the binary was built from (`BRASS_GIT_COMMIT`, named
/// by build.rs or the environment at build time), else `git rev-parse HEAD` in the
/// source tree now if it is brass's repository (with `-dirty` when it has uncommitted
/// changes).
fn git_commit() -> Option<String> {
    if let Some(c) = option_env!("BRASS_GIT_COMMIT") {
        return Some(c.to_string());
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    // Only brass's own repository, as in build.rs: an unpacked crate inside another
    // repository is not at that repository's commit.
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let top = Path::new(String::from_utf8_lossy(&top.stdout).trim()).canonicalize();
    if top.ok() != dir.canonicalize().ok() {
        return None;
    }
    let head = git(&["rev-parse", "HEAD"])?;
    let mut commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        commit.push_str("-dirty");
    }
    Some(commit)
}
