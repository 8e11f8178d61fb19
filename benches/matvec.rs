//! Every matvec kernel over real shapes: GPU-timestamped, weight copies rotated to
//! defeat the last-level cache, reported as median µs, GB/s and % of the device's own
//! streaming-read bandwidth (the probe), as a table and as JSON.
//!
//! cargo bench --bench matvec -- [--types q4_k,q6_k] [--families coop,scalar] [--kernels q4_k_dot4]
//!     [--shapes llama3-8b,muse] [--iters 30] [--x-q8] [--prefetch true|false] [--json out.json]
//!     [--adapter INDEX|NAME] [--cols N] [--x-direct --columns-at-once C]
//!
//! With --cols N each dispatch multiplies N columns of x (a decode step of N sequences):
//! GB/s and % then count the weights once and x and y N times, as the dispatch reads them.
//! With --columns-at-once C (x in place) each loaded weight slice is dotted with C of them.

use std::collections::HashMap;

use brass::device::{bandwidth_probe, AdapterChoice, Device, WgpuDevice};
use brass::gguf::synthetic::{SyntheticSpec, PRESETS};
use brass::kernels::matvec::{Batches, Family, MatvecKernel, MATVEC_KERNELS};
use brass::kernels::timing::{time_matvec_columns, time_stream_read, Effort, Times};
use brass::kernels::PipelineCache;
use brass::quant::GgmlType;
use brass::router::{route_matvec, Force, MatvecQuery, Overrides, XInput};
use clap::Parser;
use serde::Serialize;

#[derive(Parser)]
struct Args {
    /// Weight types (default: every type with a kernel).
    #[arg(long, value_delimiter = ',')]
    types: Vec<String>,
    /// Families (default: coop,scalar).
    #[arg(long, value_delimiter = ',')]
    families: Vec<String>,
    /// Kernels by name, e.g. q4_k_dot4 (default: every kernel of the families).
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Shape groups: synthetic presets, or prefixes of them (default: smollm2-135m,
    /// llama3-8b, muse-30b).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Timed iterations per case, after warm-up.
    #[arg(long, default_value_t = 30)]
    iters: usize,
    /// Bytes of distinct weight copies to rotate through, in MB (several times the L2).
    #[arg(long, default_value_t = 256)]
    rotate_mb: u64,
    #[arg(long)]
    json: Option<String>,
    #[arg(long)]
    adapter: Option<String>,
    /// A/B: override the routed coop workgroup size (invocations).
    #[arg(long)]
    coop_wg: Option<u32>,
    /// A/B: override the routed dot4 lanes per row (0: a whole subgroup, or a power of
    /// two no wider than the smallest subgroup).
    #[arg(long)]
    coop_lanes: Option<u32>,
    /// Time dot4 routes on x already quantized, as the model's norms hand it to the
    /// matvecs they feed (the quantization itself is then the norm's work).
    #[arg(long)]
    x_q8: bool,
    /// A/B, implies --x-q8: x read in place by the lanes, forced.
    #[arg(long, conflicts_with = "x_staged")]
    x_direct: bool,
    /// A/B, implies --x-q8: x copied into workgroup memory, forced.
    #[arg(long)]
    x_staged: bool,
    /// A/B: as many workgroups as the row batches need, up to this many, in place of
    /// the router's caps.
    #[arg(long)]
    coop_groups: Option<u32>,
    /// A/B: row batches with each lane loading its next slice ahead (true) or in a
    /// plain grid-stride loop (false), where the kernel can (the dot4 kernels that
    /// split slices, x in one tile), staged columns too.
    #[arg(long)]
    prefetch: Option<bool>,
    /// GPU work before each timed run, in ms: GPUs drop their clocks while the CPU
    /// prepares the next case, and would otherwise be timed half asleep.
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    /// Columns of x per dispatch (`MatvecLaunch::dispatches_columns`).
    #[arg(long, default_value_t = 1)]
    cols: u64,
    /// A/B, with --x-direct: columns each loaded weight slice is dotted with
    /// (`Overrides::columns_at_once`; Q4_K and Q5_K dot4).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    columns_at_once: Option<u32>,
    /// A/B, with --cols N: whether x of several columns is staged at once, each loaded
    /// weight slice dotted with every one (`Overrides::staged_columns`; default where
    /// it fits).
    #[arg(long)]
    staged_columns: Option<bool>,
    /// A/B, with --cols N: whether staged columns take all the columns in tiles of x
    /// where one tile of all of K holds fewer (`Overrides::staged_tiles`; default no).
    #[arg(long)]
    staged_tiles: Option<bool>,
    /// cargo bench passes --bench; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The synthetic presets the bench runs unless `--shapes` names others.
const DEFAULT_GROUPS: [&str; 3] = ["smollm2-135m", "llama3-8b", "muse-30b"];

/// (label, M, K, only this type if any).
type Shape = (String, u64, u64, Option<GgmlType>);

/// Every matvec of the synthetic presets named by `groups` (a prefix names a preset:
/// `muse`), or of the default ones: the shape catalog the router tests share. A
/// preset's lm-head of its own type runs only that type.
fn shapes(groups: &[String]) -> brass::Result<Vec<Shape>> {
    let mut out = Vec::new();
    for preset in PRESETS {
        let named = match groups.is_empty() {
            true => DEFAULT_GROUPS.contains(&preset),
            false => groups.iter().any(|g| preset.starts_with(g.as_str())),
        };
        if !named {
            continue;
        }
        let spec = SyntheticSpec::preset(preset)?;
        for (matrix, m, k) in spec.matvec_shapes() {
            let only = spec.lm_head.filter(|_| matrix == "lm_head");
            let label = format!("{preset} {matrix} {m}x{k}");
            out.push((label, m, k, only));
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct Case {
    shape: String,
    ty: GgmlType,
    kernel: String,
    family: Family,
    m: u64,
    k: u64,
    /// Columns of x per dispatch.
    cols: u64,
    bytes: u64,
    copies: usize,
    median_us: f64,
    min_us: f64,
    max_us: f64,
    gbps: f64,
    pct_of_probe: f64,
    /// Per matvec in a chain of dependent ones in one pass (see kernels::timing).
    chained_us: f64,
    chained_pct_of_probe: f64,
    /// The probe's streaming read of the same weight bytes in one dispatch, timed the
    /// same way: the most a matvec of this size can reach (kernels::timing).
    read_median_us: f64,
    read_chained_us: f64,
    /// `read_median_us / median_us` and `read_chained_us / chained_us`, in %.
    pct_of_read: f64,
    chained_pct_of_read: f64,
    route: String,
}

#[derive(Serialize)]
struct Report {
    brass_version: &'static str,
    profile: brass::device::DeviceProfile,
    probe: brass::device::ProbeResult,
    cases: Vec<Case>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
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
    println!(
        "{:<32} {:<6} {:<40} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9} {:>7} {:>7} {:>7}",
        "shape",
        "type",
        "kernel",
        "MB",
        "median µs",
        "min µs",
        "GB/s",
        "% probe",
        "chain µs",
        "% chain",
        "% read",
        "% chread"
    );
    println!(
        "(% read, % chread: a pure streaming read of the same weight bytes in one dispatch, \
         alone and chained, over the matvec's time)"
    );
    let cache = PipelineCache::new();
    let wanted = |list: &[String], name: &str| {
        list.is_empty() || list.iter().any(|s| s.eq_ignore_ascii_case(name))
    };
    let mut cases = Vec::new();
    // Read ceilings by weight bytes: shared by every kernel of a type on a shape.
    let mut reads = HashMap::new();
    for (label, m, k, only) in shapes(&args.shapes)? {
        let mut types: Vec<GgmlType> = Vec::new();
        for k in MATVEC_KERNELS {
            if !types.contains(&k.ty) {
                types.push(k.ty);
            }
        }
        for ty in types {
            // A type whose block does not divide K cannot hold the shape (K-quants
            // need K % 256 == 0; SmolLM2's 576 is not).
            if only.is_some_and(|t| t != ty)
                || !wanted(&args.types, ty.name())
                || ty.bytes_for(k).is_none()
            {
                continue;
            }
            for kernel in MATVEC_KERNELS.iter().filter(|k| k.ty == ty) {
                let short = kernel.name.trim_start_matches("matvec/");
                if !wanted(&args.families, kernel.family.name()) || !wanted(&args.kernels, short) {
                    continue;
                }
                let case = bench_case(
                    &device,
                    &cache,
                    args,
                    (&label, kernel, m, k),
                    probe.gbps,
                    &mut reads,
                )?;
                println!(
                    "{:<32} {:<6} {:<40} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>6.1}% {:>9.1} {:>6.1}% {:>6.1}% {:>6.1}%",
                    label,
                    ty.name(),
                    case.kernel.trim_start_matches("matvec/"),
                    case.bytes as f64 / 1e6,
                    case.median_us,
                    case.min_us,
                    case.gbps,
                    case.pct_of_probe,
                    case.chained_us,
                    case.chained_pct_of_probe,
                    case.pct_of_read,
                    case.chained_pct_of_read
                );
                cases.push(case);
            }
        }
    }
    if let Some(path) = &args.json {
        let report = Report {
            brass_version: env!("CARGO_PKG_VERSION"),
            profile,
            probe,
            cases,
        };
        let text = serde_json::to_string_pretty(&report).expect("plain values");
        std::fs::write(path, text).map_err(|e| brass::Error::Io {
            path: path.into(),
            source: e,
        })?;
        println!("\nwrote {path}");
    }
    Ok(())
}

fn bench_case(
    device: &WgpuDevice,
    cache: &PipelineCache,
    args: &Args,
    (label, kernel, m, k): (&str, &MatvecKernel, u64, u64),
    probe_gbps: f64,
    reads: &mut HashMap<u64, Times>,
) -> brass::Result<Case> {
    let (ty, family) = (kernel.ty, kernel.family);
    let quantized_x = args.x_q8 || args.x_direct || args.x_staged;
    let query = MatvecQuery {
        ty,
        m,
        k,
        x: if quantized_x {
            XInput::Norm
        } else {
            XInput::F32
        },
        columns: args.cols,
    };
    let splits = kernel.splits_slices();
    let overrides = Overrides {
        force: Some(Force::Kernel(kernel.name.to_string())),
        x_q8: quantized_x.then_some(true),
        x_in_place: (args.x_direct || args.x_staged).then_some(args.x_direct),
        columns_at_once: args.columns_at_once,
        staged_columns: args.staged_columns,
        staged_prefetch: args.prefetch,
        staged_tiles: args.staged_tiles,
        workgroup_size: args.coop_wg,
        lanes: args.coop_lanes,
        max_workgroups: args.coop_groups,
        batches: args.prefetch.filter(|_| splits).map(|on| match on {
            true => Batches::Prefetch,
            false => Batches::GridStride,
        }),
        ..Overrides::default()
    };
    let route = route_matvec(device.profile(), &query, &overrides)?;
    let launch = route.launch();
    let effort = Effort {
        iters: args.iters,
        rotate_bytes: args.rotate_mb * 1_000_000,
        warmup: std::time::Duration::from_millis(args.warmup_ms),
    };
    let t = time_matvec_columns(device, cache, launch, args.cols, effort)?;
    let weight_bytes = launch.weight_bytes();
    let read = match reads.get(&weight_bytes) {
        Some(r) => *r,
        None => {
            let r = time_stream_read(device, weight_bytes, effort)?;
            reads.insert(weight_bytes, r);
            r
        }
    };

    let bytes = launch.bytes_moved() + (args.cols - 1) * (launch.x_bytes() + m * 4);
    let gbps = bytes as f64 / (t.median_us * 1e3);
    Ok(Case {
        shape: label.to_string(),
        ty,
        kernel: route.pipeline_key(),
        family,
        m,
        k,
        cols: args.cols,
        bytes,
        copies: t.copies,
        median_us: t.median_us,
        min_us: t.min_us,
        max_us: t.max_us,
        gbps,
        pct_of_probe: 100.0 * gbps / probe_gbps,
        chained_us: t.chained_us,
        chained_pct_of_probe: 100.0 * bytes as f64 / (t.chained_us * 1e3) / probe_gbps,
        read_median_us: read.median_us,
        read_chained_us: read.chained_us,
        pct_of_read: 100.0 * read.median_us / t.median_us,
        chained_pct_of_read: 100.0 * read.chained_us / t.chained_us,
        route: route.reason(),
    })
}
