//! Every matmul kernel over the synthetic presets' shapes at prompt-sized token counts:
//! GPU-timestamped, weight copies rotated, reported as median µs, TFLOP/s (2·M·K·N) and
//! % of the device's own rate for its arithmetic (the compute probes: int8 dot4 for the
//! dot4 kernels, the cooperative-matrix probe for the kernels on matrix units, f32 fma
//! for the fma kernels), beside the
//! weight bytes' GB/s, as a table and as JSON. Each quant case runs on dot4 and, where
//! the adapter has them, on cooperative matrices, and on fma over the GGUF rows its
//! exact route (coop) uploads; F32 and F16 on fma. `--columns` adds the decode steps'
//! kernel on the matrix units (`matmul/columns.wgsl`) in the tiles named, K split over
//! workgroups in the spans named (their sum's dispatch timed with them). Where the
//! adapter has matrix units, each quant case also runs the unpacked matmul
//! (`matmul/unpacked.rs`) in the configurations `--unpacked` names: its three steps
//! apart (the weights' unpacking, x's, the multiply) and their sum, the figure to hold
//! beside the coopmat kernel's.
//!
//! cargo bench --bench matmul -- [--shapes llama3-8b] [--types q4_k,f16] [--kernels fma]
//!     [--tokens 64,512,2048,8192] [--iters 10] [--json out.json] [--adapter INDEX|NAME]
//!     [--columns 2:2:4,4:2:4:2:4] [--unpacked 2:1,4:1,2:0,4:1:4 | none] [--matrices ffn_up,ffn_down]

use brass::device::{
    coop_compute_probe, f32_compute_probe, int8_compute_probe, AdapterChoice, Device, WgpuDevice,
};
use brass::gguf::synthetic::{SyntheticSpec, PRESETS};
use brass::kernels::matmul::{
    MatmulEngine, MatmulInput, MatmulLaunch, UnpackedEngine, UnpackedMatmul, MATMUL_KERNELS,
};
use brass::kernels::matvec::{self, Family};
use brass::kernels::timing::{time_matmul, time_unpacked_matmul, Effort, Times};
use brass::kernels::PipelineCache;
use brass::quant::GgmlType;
use brass::router::{route_matmul_engine, route_matvec, Force, MatvecQuery, Overrides, XInput};
use clap::Parser;
use serde::Serialize;

#[derive(Parser)]
struct Args {
    /// Shape groups: synthetic presets or prefixes of them (default: smollm2-135m,
    /// llama3-8b).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Weight types (default: each preset's own, Q4_K and Q6_K, and Q4_1 and Q8_0 for
    /// SmolLM2's shapes; F16 and F32 on asking).
    #[arg(long, value_delimiter = ',')]
    types: Vec<String>,
    /// Kernels whose WGSL file's name contains one of these (`fma`, `dot4`, `coopmat`,
    /// `columns`, `q4_k`, `q4_k_coopmat`; default: all of the types').
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Matrices of each shape group by name (attn_q, attn_k, ffn_up, ffn_down, lm_head;
    /// default: all).
    #[arg(long, value_delimiter = ',')]
    matrices: Vec<String>,
    /// Tokens per matmul (llama-bench's pp sizes; 2,048 and 8,192 to see that long
    /// prompts run at the pace of short ones).
    #[arg(long, value_delimiter = ',', default_values_t = [64u64, 512, 2048, 8192])]
    tokens: Vec<u64>,
    #[arg(long, default_value_t = 10)]
    iters: usize,
    #[arg(long, default_value_t = 256)]
    rotate_mb: u64,
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    #[arg(long)]
    json: Option<String>,
    #[arg(long)]
    adapter: Option<String>,
    /// Also every decode-columns engine (`matmul/columns.wgsl`) of these row blocks,
    /// token blocks, groups per K step, K spans (1 where left out) and K parts (8 / row
    /// blocks where left out, or twice that) that the adapter can run, as
    /// `ROW_BLOCKS:TOKEN_BLOCKS:K_GROUPS[:K_SPANS[:K_PARTS]]`.
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// The unpacked matmuls to run where the adapter has matrix units, as
    /// `ROW_PARTS:PREFETCH[:TOKEN_BLOCKS]` (row parts 1, 2, 4 or 8 of a tile's 8
    /// subgroups; 1 to load a K step ahead, 0 not; 2 or 4 blocks of tokens a subgroup,
    /// default 2), or `none`.
    #[arg(long, value_delimiter = ',', default_values_t = ["2:1".to_string()])]
    unpacked: Vec<String>,
    /// cargo bench passes --bench; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const DEFAULT_GROUPS: [&str; 2] = ["smollm2-135m", "llama3-8b"];
const DEFAULT_TYPES: [GgmlType; 4] = [
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
];

#[derive(Serialize)]
struct Case {
    shape: String,
    kernel: String,
    m: u64,
    k: u64,
    n_tokens: u64,
    k_groups: u32,
    k_step: u32,
    median_us: f64,
    min_us: f64,
    tflops: f64,
    /// % of the int8 probe for the dot4 kernels, of the matrix probe for the
    /// cooperative-matrix ones, of the f32 probe for the fma ones.
    pct_of_probe: f64,
    probe: &'static str,
    weight_gbps: f64,
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
    let probe = int8_compute_probe(&device, 5, 20.0)?;
    let f32_probe = f32_compute_probe(&device, 5, 20.0)?;
    let mut engines = vec![route_matmul_engine(&profile, Some(false))?.engine()];
    let mut coop_probe = None;
    match route_matmul_engine(&profile, Some(true)) {
        Ok(coop) => {
            engines.push(coop.engine());
            coop_probe = Some(coop_compute_probe(&device, 5, 20.0)?);
        }
        Err(e) => println!("{e}"),
    }
    for spec in &args.columns {
        let parsed: Vec<u32> = spec.split(':').filter_map(|v| v.parse().ok()).collect();
        let (row_blocks, token_blocks, k_groups, k_spans, k_parts) = match parsed[..] {
            [r, t, k] => (r, t, k, 1, None),
            [r, t, k, s] if s > 0 => (r, t, k, s, None),
            [r, t, k, s, p] if s > 0 => (r, t, k, s, Some(p)),
            _ => {
                return Err(brass::Error::Invalid(format!(
                    "--columns {spec}: ROW_BLOCKS:TOKEN_BLOCKS:K_GROUPS[:K_SPANS[:K_PARTS]]"
                )))
            }
        };
        let engine = MatmulEngine::coop_columns(&profile, row_blocks, token_blocks, k_groups)
            .and_then(|e| e.in_k_parts(k_parts.unwrap_or(e.k_parts())));
        match engine {
            Some(engine) => engines.push(engine.in_k_spans(k_spans)),
            None => println!("decode columns {spec}: cannot run on {}", profile.name),
        }
    }
    let mut unpacked = Vec::new();
    for spec in args.unpacked.iter().filter(|s| *s != "none") {
        let parsed: Vec<u32> = spec.split(':').filter_map(|v| v.parse().ok()).collect();
        let (row_parts, prefetch, part_tokens) = match parsed[..] {
            [r, p @ (0 | 1)] => (r, p, 2),
            [r, p @ (0 | 1), t] => (r, p, t),
            _ => {
                return Err(brass::Error::Invalid(format!(
                    "--unpacked {spec}: ROW_PARTS:PREFETCH[:TOKEN_BLOCKS] (PREFETCH 0 or 1)"
                )))
            }
        };
        match UnpackedEngine::on(&profile, (row_parts, part_tokens), prefetch == 1) {
            Ok(engine) => unpacked.push(engine),
            Err(e) => println!("unpacked {spec}: {e}"),
        }
    }
    println!("{}\n{probe}\n{f32_probe}", profile.name);
    if let Some(coop) = &coop_probe {
        println!("{coop}");
    }
    println!();
    if let Some(note) = device.clock().note() {
        println!("note: {note}\n");
    }
    println!(
        "{:<40} {:<44} {:>6} {:>10} {:>10} {:>8} {:>13} {:>9}",
        "shape", "kernel", "tokens", "median µs", "min µs", "TFLOP/s", "% of probe", "weight GB/s"
    );
    let effort = Effort {
        iters: args.iters,
        rotate_bytes: args.rotate_mb << 20,
        warmup: std::time::Duration::from_millis(args.warmup_ms),
    };
    let cache = PipelineCache::new();
    let mut cases = Vec::new();
    for preset in PRESETS {
        let named = match args.shapes.is_empty() {
            true => DEFAULT_GROUPS.contains(&preset),
            false => args.shapes.iter().any(|g| preset.starts_with(g.as_str())),
        };
        if !named {
            continue;
        }
        let spec = SyntheticSpec::preset(preset)?;
        for (matrix, m, k) in spec.matvec_shapes() {
            if !args.matrices.is_empty() && !args.matrices.iter().any(|n| n == matrix) {
                continue;
            }
            for kernel in MATMUL_KERNELS {
                let ty = kernel.ty;
                let wanted = match args.types.is_empty() {
                    true => DEFAULT_TYPES.contains(&ty),
                    false => args.types.iter().any(|t| t.eq_ignore_ascii_case(ty.name())),
                };
                if !wanted || !k.is_multiple_of(ty.block_size() as u64) {
                    continue;
                }
                // The fma matmuls read any of their type's non-dot4 matvecs' weights;
                // coop's are the ones a GPU with subgroups decodes with.
                let (family, engines) = match kernel.input {
                    MatmulInput::Q8 => (Family::Dot4, &engines[..]),
                    MatmulInput::F32 => (Family::Coop, &[MatmulEngine::Fma][..]),
                };
                let mv = matvec::find(ty, family).expect("a matvec per matmul");
                let query = MatvecQuery {
                    ty,
                    m,
                    k,
                    x: XInput::Norm,
                    columns: 1,
                };
                let overrides = Overrides {
                    force: Some(Force::Kernel(mv.name.to_string())),
                    ..Overrides::default()
                };
                let matvec = route_matvec(&profile, &query, &overrides)?.launch().clone();
                for &engine in engines {
                    let launch = MatmulLaunch::of(&matvec, engine)?;
                    // By the file each engine runs (`q4_k_dot4`, `q4_k_columns`, ...).
                    let named = args.kernels.is_empty()
                        || args
                            .kernels
                            .iter()
                            .any(|n| launch.kernel_name().contains(n.as_str()));
                    if !named {
                        continue;
                    }
                    for &n in &args.tokens {
                        // The bench binds one output for all of the tokens; a model's
                        // batches are at most its ubatch tokens.
                        let y_bytes = n * launch.m() * 4;
                        if y_bytes > profile.max_binding_bytes {
                            println!(
                                "{:<40} {:<44} {:>6} skipped: its output ({y_bytes} bytes) is \
                                 past the largest binding ({} bytes)",
                                format!("{preset} {matrix} {m}x{k}"),
                                launch.pipeline_key(),
                                n,
                                profile.max_binding_bytes
                            );
                            continue;
                        }
                        let t = time_matmul(&device, &cache, &matvec, &launch, n, effort)?;
                        let tflops = launch.flops(n) as f64 / t.median_us / 1e6;
                        let (peak, probe_name) = match (launch.engine(), &coop_probe) {
                            (
                                MatmulEngine::CoopMatrix { .. } | MatmulEngine::CoopColumns { .. },
                                Some(coop),
                            ) => (coop.tflops, "matrix"),
                            _ => match launch.input() {
                                MatmulInput::Q8 => (probe.int8_tops, "int8"),
                                MatmulInput::F32 => (f32_probe.f32_tflops, "f32"),
                            },
                        };
                        let case = Case {
                            shape: format!("{preset} {matrix} {m}x{k}"),
                            kernel: launch.pipeline_key(),
                            m,
                            k,
                            n_tokens: n,
                            k_groups: launch.engine().k_groups(),
                            k_step: launch.engine().k_step(),
                            median_us: t.median_us,
                            min_us: t.min_us,
                            tflops,
                            pct_of_probe: 100.0 * tflops / peak,
                            probe: probe_name,
                            weight_gbps: matvec.weight_bytes() as f64 / t.median_us / 1e3,
                        };
                        print_case(&case);
                        cases.push(case);
                    }
                }
                let (Some(coop), MatmulInput::Q8) = (&coop_probe, kernel.input) else {
                    continue;
                };
                for &engine in &unpacked {
                    let launch = UnpackedMatmul::of(&matvec, engine)?;
                    let [unpack_key, x_key, gemm_key] = launch.pipeline_keys();
                    for &n in &args.tokens {
                        let shape = format!("{preset} {matrix} {m}x{k}");
                        let y_bytes = n * m * 4;
                        if y_bytes.max(launch.x_scratch_bytes(n)) > profile.max_binding_bytes {
                            println!("{shape:<40} {gemm_key:<44} {n:>6} skipped: past the largest binding");
                            continue;
                        }
                        let t = time_unpacked_matmul(&device, &cache, &matvec, &launch, n, effort)?;
                        let total = Times {
                            median_us: t.unpack.median_us + t.unpack_x.median_us + t.gemm.median_us,
                            min_us: t.unpack.min_us + t.unpack_x.min_us + t.gemm.min_us,
                            ..t.gemm
                        };
                        // Each step's flops, and whether its time moves the weights (x's
                        // unpacking reads none: no weight GB/s).
                        let flops = launch.flops(n);
                        let steps = [
                            (unpack_key.clone(), t.unpack, 0, true),
                            (x_key.clone(), t.unpack_x, 0, false),
                            (gemm_key.clone(), t.gemm, flops, true),
                            (format!("{gemm_key} + unpacking"), total, flops, true),
                        ];
                        for (kernel, times, flops, weights) in steps {
                            let tflops = flops as f64 / times.median_us / 1e6;
                            let case = Case {
                                shape: shape.clone(),
                                kernel,
                                m,
                                k,
                                n_tokens: n,
                                k_groups: 0,
                                k_step: engine.shape.size,
                                median_us: times.median_us,
                                min_us: times.min_us,
                                tflops,
                                pct_of_probe: 100.0 * tflops / coop.tflops,
                                probe: "matrix",
                                weight_gbps: match weights {
                                    true => matvec.weight_bytes() as f64 / times.median_us / 1e3,
                                    false => 0.0,
                                },
                            };
                            print_case(&case);
                            cases.push(case);
                        }
                    }
                }
            }
        }
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "profile": profile,
            "int8_probe": probe,
            "f32_probe": f32_probe,
            "matrix_probe": coop_probe,
            "cases": cases,
        });
        let text = serde_json::to_string_pretty(&report).expect("plain values");
        std::fs::write(path, text).map_err(|e| brass::Error::Io {
            path: path.into(),
            source: e,
        })?;
        println!("\nwrote {path}");
    }
    Ok(())
}

fn print_case(case: &Case) {
    println!(
        "{:<40} {:<44} {:>6} {:>10.1} {:>10.1} {:>8.2} {:>7.1}% {:<4} {:>9.0}",
        case.shape,
        case.kernel,
        case.n_tokens,
        case.median_us,
        case.min_us,
        case.tflops,
        case.pct_of_probe,
        case.probe,
        case.weight_gbps
    );
}
