//! Split-K decode attention over the KV cache of real model shapes: one layer's step at
//! several context depths, GPU-timestamped with cache copies rotated past the
//! last-level cache, reported as µs, GB/s of K and V read and % of the device's
//! streaming-read bandwidth (the probe), beside a pure read of the same bytes. Then
//! prefill attention: one layer's causal attention for a prompt of `--prefill-tokens`
//! tokens (512, 2,048 and 8,192 unless told) from position `--prefill-start`, by the
//! scalar kernel and, where the adapter has matrix units, by `attention/flash`, as µs,
//! GB/s of K and V the workgroups read, TFLOP/s, and that as a % of the device's f32
//! multiply-add probe (what the kernel multiplies on) and of its matrix probe (what a
//! kernel on its matrix units could reach), where it has matrix units.
//!
//! cargo bench --bench attention -- [--shapes llama3-8b,smollm2] [--n-pos 512,4096,32768]
//!     [--heads 4/1x128] [--kv f16,f32,q8_0] [--workgroups 256,512] [--min-chunk 64,128]
//!     [--merge last-workgroup,combine] [--portable] [--iters 30] [--adapter INDEX|NAME]
//!     [--prefill-tokens 512,2048,8192] [--prefill-start 0] [--no-decode] [--no-prefill]
//!     [--flash-tiles 64:32,32:64] [--scalar-tiles 64:32:16,32:32:32,16:32:32:8]

use brass::device::{
    bandwidth_probe, coop_compute_probe, f32_compute_probe, AdapterChoice, Device, WgpuDevice,
};
use brass::gguf::synthetic::SyntheticSpec;
use brass::kernels::attention::{
    AttentionLaunch, Heads, KvType, Merge, PrefillAttention, RopeStyle,
};
use brass::kernels::timing::{time_attention, time_prefill_attention, time_stream_read, Effort};
use brass::kernels::PipelineCache;
use brass::router::{route_attention, AttentionQuery, Overrides};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Synthetic presets (or prefixes) whose heads to time (default: llama3-8b,
    /// smollm2-135m).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Heads of no preset, as QUERY/KVxHEAD_DIM (4/1x128: one KV head's rows laid out
    /// back to back, where a preset's KV heads interleave by position).
    #[arg(long, value_delimiter = ',')]
    heads: Vec<String>,
    /// Positions in the cache.
    #[arg(long, value_delimiter = ',', default_values_t = [512u64, 4096, 32768])]
    n_pos: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = [KvType::F16])]
    kv: Vec<KvType>,
    /// A/B: workgroups a long context is spread over (default: the device's tuning).
    #[arg(long, value_delimiter = ',')]
    workgroups: Vec<u64>,
    /// A/B: positions a chunk takes at least (default: the kernel's rule).
    #[arg(long, value_delimiter = ',')]
    min_chunk: Vec<u64>,
    /// A/B: invocations per decode workgroup (default: the kernel's).
    #[arg(long, value_delimiter = ',')]
    invocations: Vec<u32>,
    /// A/B: how split steps merge their chunks (default: the route's).
    #[arg(long, value_delimiter = ',')]
    merge: Vec<Merge>,
    /// Time the decode dispatch alone, without the combine pass (a merge by the last
    /// workgroup is inside it).
    #[arg(long)]
    decode_only: bool,
    /// Time the portable kernel (no subgroups) instead of the routed one.
    #[arg(long)]
    portable: bool,
    #[arg(long, default_value_t = 30)]
    iters: usize,
    /// Bytes of distinct cache copies to rotate through, in MB (several times the L2).
    #[arg(long, default_value_t = 256)]
    rotate_mb: u64,
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    #[arg(long)]
    adapter: Option<String>,
    /// Prompt lengths to time prefill attention at.
    #[arg(long, value_delimiter = ',', default_values_t = [512u64, 2048, 8192])]
    prefill_tokens: Vec<u64>,
    /// Positions already in the cache before the prompt.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64])]
    prefill_start: Vec<u64>,
    /// The spread of the prefill scores q·k / √d (standard deviations, comma-separated):
    /// 0 for q of constant 0.25, where no row's max moves after its first keys; more
    /// makes the flash kernel rescale its accumulators as a real model's rows do.
    #[arg(long, value_delimiter = ',', default_values_t = [0.0f64])]
    score_std: Vec<f64>,
    /// Leave out decode attention.
    #[arg(long)]
    no_decode: bool,
    /// Leave out prefill attention.
    #[arg(long)]
    no_prefill: bool,
    /// Also time the matrix kernel at these tiles, ROWS:KEYS each (comma-separated),
    /// beside the one the router picks, where they fit the workgroup memory.
    #[arg(long, value_delimiter = ',')]
    flash_tiles: Vec<String>,
    /// Also time the kernel without matrix units at these tiles, ROWS:KEYS:CHUNK each,
    /// or ROWS:KEYS:CHUNK:TILE_ROWS with register tiles of 8 or 4 rows (the router's 4
    /// where not given; comma-separated; the whole head per workgroup), where they fit
    /// the workgroup memory, however much the router allows itself.
    #[arg(long, value_delimiter = ',')]
    scalar_tiles: Vec<String>,
    /// cargo bench passes --bench; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    if let Err(e) = run(&Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> brass::Result<()> {
    let choice = match &args.adapter {
        Some(spec) => AdapterChoice::parse(spec),
        None => AdapterChoice::from_env(),
    };
    let device = WgpuDevice::open(&choice)?;
    let profile = device.profile().clone();
    if !profile.timestamps {
        return Err(brass::Error::Device(format!(
            "{} has no GPU timestamps",
            profile.name
        )));
    }
    let probe = bandwidth_probe(&device, 10)?;
    println!("{}\n{probe}\n", profile.name);
    // The probe's is the first timed submission: zero timestamps show there.
    if let Some(note) = device.clock().note() {
        println!("note: {note}\n");
    }
    let groups: Vec<String> = match args.shapes.is_empty() && args.heads.is_empty() {
        true => vec!["llama3-8b".into(), "smollm2-135m".into()],
        false => args.shapes.clone(),
    };
    let effort = Effort {
        iters: args.iters,
        rotate_bytes: args.rotate_mb * 1_000_000,
        warmup: std::time::Duration::from_millis(args.warmup_ms),
    };
    let cache = PipelineCache::new();
    let mut shapes = Vec::new();
    for group in &groups {
        let spec = SyntheticSpec::preset_by_prefix(group)?;
        shapes.push((spec.name.clone(), spec.attention_heads()));
    }
    for spec in &args.heads {
        shapes.push(("heads".to_string(), parse_heads(spec)?));
    }
    if !args.no_decode {
        decode(args, &device, &cache, &shapes, effort, probe.gbps)?;
    }
    if !args.no_prefill {
        prefill(args, &device, &cache, &shapes, effort)?;
    }
    Ok(())
}

/// The matrix kernel at each of `--flash-tiles` that suits the adapter's matrices and
/// fits its workgroup memory (the others said and left out).
fn flash_tiles(
    args: &Args,
    profile: &brass::device::DeviceProfile,
    heads: Heads,
    kv: KvType,
) -> brass::Result<Vec<PrefillAttention>> {
    let Some(shape) = profile.coop_matrix else {
        return Ok(Vec::new());
    };
    let mut launches = Vec::new();
    for spec in &args.flash_tiles {
        let tile = spec
            .split_once(':')
            .and_then(|(r, k)| Some((r.parse().ok()?, k.parse().ok()?)))
            .ok_or_else(|| {
                brass::Error::Invalid(format!("--flash-tiles {spec}: expected ROWS:KEYS"))
            })?;
        let sizes = (shape, profile.subgroup_max, profile.subgroup_min);
        let launch =
            PrefillAttention::matrix_tiles(heads, kv, sizes, tile, profile.max_workgroups_per_dim);
        let unsuited = format!("does not suit {shape} matrices");
        launches.extend(fitting(profile, ("flash", spec), launch, &unsuited));
    }
    Ok(launches)
}

/// `launch`, the `kind` tile `spec`, where it is one and fits `profile`'s workgroup
/// memory; else None, and the output says why.
fn fitting(
    profile: &brass::device::DeviceProfile,
    (kind, spec): (&str, &str),
    launch: Option<PrefillAttention>,
    unsuited: &str,
) -> Option<PrefillAttention> {
    let limit = profile.workgroup_storage_bytes;
    match launch {
        Some(l) if l.workgroup_bytes() <= limit as u64 => Some(l),
        Some(l) => {
            let bytes = l.workgroup_bytes();
            println!("{kind} tile {spec}: {bytes} bytes of workgroup memory, past {limit}");
            None
        }
        None => {
            println!("{kind} tile {spec}: {unsuited}");
            None
        }
    }
}

/// The kernel without matrix units at each of `--scalar-tiles` that fits the device's
/// workgroup memory (the others said and left out).
fn scalar_tiles(
    args: &Args,
    profile: &brass::device::DeviceProfile,
    heads: Heads,
    kv: KvType,
) -> brass::Result<Vec<PrefillAttention>> {
    let mut launches = Vec::new();
    for spec in &args.scalar_tiles {
        let sizes: Vec<u32> = spec.split(':').filter_map(|n| n.parse().ok()).collect();
        let (rows, keys, chunk, tile_rows) = match sizes[..] {
            [rows, keys, chunk] => (rows, keys, chunk, None),
            [rows, keys, chunk, tile_rows] => (rows, keys, chunk, Some(tile_rows)),
            _ => {
                return Err(brass::Error::Invalid(format!(
                    "--scalar-tiles {spec}: expected ROWS:KEYS:CHUNK[:TILE_ROWS]"
                )))
            }
        };
        let tiles = (rows, keys, chunk);
        let launch =
            PrefillAttention::scalar_tiles(heads, kv, tiles, profile.max_workgroups_per_dim)
                .and_then(|l| match tile_rows {
                    Some(rows) => l.with_tile_rows(rows),
                    None => Some(l),
                });
        let unsuited = "rows not a multiple of 8 (of the register tile's 8 or 4 rows), or \
                        keys or pairs of 4";
        if let Some(l) = fitting(profile, ("scalar", spec), launch, unsuited) {
            launches.push(l.with_loop_limit(profile.loop_iterations)?);
        }
    }
    Ok(launches)
}

/// QUERY/KVxHEAD_DIM, e.g. 32/8x128.
fn parse_heads(spec: &str) -> brass::Result<Heads> {
    let bad = || brass::Error::Invalid(format!("--heads {spec}: QUERY/KVxHEAD_DIM, e.g. 32/8x128"));
    let (q, rest) = spec.split_once('/').ok_or_else(bad)?;
    let (kv, hd) = rest.split_once('x').ok_or_else(bad)?;
    let n = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let head_dim = n(hd)?;
    Ok(Heads {
        n_heads: n(q)?,
        n_kv_heads: n(kv)?,
        head_dim,
        rope_dim: head_dim,
        rope: RopeStyle::Normal,
    })
}

fn decode(
    args: &Args,
    device: &WgpuDevice,
    cache: &PipelineCache,
    shapes: &[(String, Heads)],
    effort: Effort,
    probe_gbps: f64,
) -> brass::Result<()> {
    let profile = device.profile();
    println!(
        "{:<14} {:<4} {:<72} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "shape",
        "kv",
        "kernel",
        "n_pos",
        "chunks",
        "KV MB",
        "median µs",
        "chain µs",
        "GB/s",
        "% probe",
        "% read"
    );
    println!(
        "(GB/s and % probe: K and V bytes over the chained time; % read: a pure streaming \
         read of the same bytes, chained, over it)"
    );
    let (targets, min_chunks) = (choices(&args.workgroups), choices(&args.min_chunk));
    let (invocations, merges) = (choices(&args.invocations), choices(&args.merge));
    let variants: Vec<Overrides> = targets
        .iter()
        .flat_map(|&t| min_chunks.iter().map(move |&c| (t, c)))
        .flat_map(|(t, c)| invocations.iter().map(move |&i| (t, c, i)))
        .flat_map(|(t, c, i)| {
            merges.iter().map(move |&m| Overrides {
                attention_workgroups: t,
                attention_min_chunk: c,
                attention_invocations: i,
                attention_merge: m,
                ..Overrides::default()
            })
        })
        .collect();
    for (name, heads) in shapes {
        let heads = *heads;
        for &kv in &args.kv {
            for &n_pos in &args.n_pos {
                for overrides in &variants {
                    let query = AttentionQuery {
                        heads,
                        kv,
                        n_ctx: n_pos,
                    };
                    let launch = match args.portable {
                        true => AttentionLaunch::portable(
                            heads,
                            kv,
                            n_pos,
                            overrides
                                .attention_workgroups
                                .unwrap_or(profile.tuning.attention_workgroups),
                        )?,
                        false => route_attention(profile, &query, overrides)?
                            .launch()
                            .clone(),
                    };
                    let t =
                        time_attention(device, cache, &launch, n_pos, args.decode_only, effort)?;
                    let bytes = launch.kv_bytes_read(n_pos);
                    let read = time_stream_read(device, bytes, effort)?;
                    let gbps = bytes as f64 / (t.chained_us * 1e3);
                    println!(
                        "{:<14} {:<4} {:<72} {:>7} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>6.1}% {:>6.1}%",
                        name,
                        kv.name(),
                        launch.pipeline_key(),
                        n_pos,
                        launch.split(n_pos).n_chunks,
                        bytes as f64 / 1e6,
                        t.median_us,
                        t.chained_us,
                        gbps,
                        100.0 * gbps / probe_gbps,
                        100.0 * read.chained_us / t.chained_us
                    );
                }
            }
        }
    }
    Ok(())
}

/// An A/B flag's values, or the route's own (None) where none are given.
fn choices<T: Copy>(given: &[T]) -> Vec<Option<T>> {
    match given.is_empty() {
        true => vec![None],
        false => given.iter().map(|&v| Some(v)).collect(),
    }
}

fn prefill(
    args: &Args,
    device: &WgpuDevice,
    cache: &PipelineCache,
    shapes: &[(String, Heads)],
    effort: Effort,
) -> brass::Result<()> {
    let f32_probe = f32_compute_probe(device, 5, 20.0)?;
    println!("\n{f32_probe}");
    let matrix_probe = match device.profile().coop_matrix {
        Some(_) => {
            let probe = coop_compute_probe(device, 5, 20.0)?;
            println!("{probe}");
            Some(probe.tflops)
        }
        None => {
            println!(
                "no matrix probe: {} has no matrix units",
                device.profile().name
            );
            None
        }
    };
    println!(
        "\n{:<14} {:<4} {:<72} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7} {:>8}",
        "shape",
        "kv",
        "prefill kernel",
        "tokens",
        "start",
        "score σ",
        "KV MB",
        "median µs",
        "chain µs",
        "GB/s",
        "TFLOP/s",
        "% f32",
        "% matrix"
    );
    println!(
        "(per layer; GB/s: K and V bytes the workgroups read over the chained time; TFLOP/s: \
         the causal attention's q·k and weight·v, two per multiply-add; % of the f32 and \
         matrix probes)"
    );
    for (name, heads) in shapes {
        let heads = *heads;
        for &kv in &args.kv {
            let mut launches = vec![PrefillAttention::new(heads, kv, device.profile())?];
            for tile in scalar_tiles(args, device.profile(), heads, kv)? {
                if !launches.contains(&tile) {
                    launches.push(tile);
                }
            }
            let keys = args.prefill_tokens.iter().max().copied().unwrap_or(0);
            match PrefillAttention::on_matrix_units(heads, kv, device.profile(), keys)? {
                Ok(matrix) => {
                    launches.push(matrix);
                    for tile in flash_tiles(args, device.profile(), heads, kv)? {
                        if !launches.contains(&tile) {
                            launches.push(tile);
                        }
                    }
                }
                Err(why) => println!("{name} {}: no matrix kernel: {why}", kv.name()),
            }
            for launch in &launches {
                launch.check(device.profile())?;
                for (&start, &score_std) in args
                    .prefill_start
                    .iter()
                    .flat_map(|s| args.score_std.iter().map(move |d| (s, d)))
                {
                    for &n_tokens in &args.prefill_tokens {
                        let t = time_prefill_attention(
                            device,
                            cache,
                            launch,
                            (start, n_tokens),
                            score_std,
                            effort,
                        )?;
                        let bytes = launch.kv_bytes_read(start, n_tokens, None);
                        let flops = launch.flops(start, n_tokens);
                        let tflops = flops as f64 / (t.chained_us * 1e6);
                        let of_matrix = matrix_probe
                            .map_or("-".to_string(), |p| format!("{:.1}%", 100.0 * tflops / p));
                        println!(
                        "{:<14} {:<4} {:<72} {:>7} {:>7} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>8.1} \
                         {:>8.2} {:>6.1}% {:>8}",
                        name,
                        kv.name(),
                        launch.pipeline_key(),
                        n_tokens,
                        start,
                        score_std,
                        bytes as f64 / 1e6,
                        t.median_us,
                        t.chained_us,
                        bytes as f64 / (t.chained_us * 1e3),
                        tflops,
                        100.0 * tflops / f32_probe.f32_tflops,
                        of_matrix,
                    );
                    }
                }
            }
        }
    }
    Ok(())
}
