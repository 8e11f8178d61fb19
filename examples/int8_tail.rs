//! Where the int8 route's logit error comes from (issue 22): a CPU float64 forward pass
//! of a llama model, optionally rounding x to int8 groups of 32 before chosen matvecs
//! the way brass's dot4 kernels do (`brass`: q = round-half-even(x / amax * 127), the
//! scale amax / 127 kept in f32) or the way llama.cpp's CPU backend does (`llama`: q =
//! round(x / d), d = amax / 127 stored as f16, Q8_1's s = d * sum(q) stored as f16),
//! and brass on the GPU with the matvec routes and x_q8 / glu_q8 switches; every
//! variant teacher-forced along one sequence and compared with the exact pass on the
//! exact pass's top-5 logits per position.
//!
//! With `--llamacpp-logits`, llama.cpp's own logits along the sequence (written by
//! `tests/reference/llamacpp_logits.cpp`) are compared the same way, at every position;
//! `--write-sequence` then writes one sequence of `tests/reference/smollm2_q4_1_prompts.json`
//! and `--errors-dir` every variant's errors, to pool several prompts.
//!
//! ```text
//! cargo run --release --example int8_tail                       # the code prompt
//! cargo run --release --example int8_tail -- --reference tests/reference/smollm2_q4_1_f64.json
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::gguf::GgufFile;
use brass::hub::default_model_path;
use brass::kernels::matvec::Family;
use brass::model::{output_tensor, Config, Input, LoadOptions, Model};
use brass::quant::GgmlType;
use brass::router::{Force, Overrides};
use brass::tokenizer::Tokenizer;
use clap::Parser;
use half::f16;

#[derive(Parser, Debug)]
struct Args {
    #[arg(short, long)]
    model: Option<PathBuf>,
    #[arg(
        short,
        long,
        default_value = "def fibonacci(n):\n    if n <= 1:\n        return n\n"
    )]
    prompt: String,
    /// Greedy tokens (of the exact pass) appended to the prompt.
    #[arg(short = 'n', long, default_value_t = 24)]
    n_gen: usize,
    /// Teacher-force a reference file's sequence instead (tests/reference shape); also
    /// checks the exact pass against its logits.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// A llama.cpp reference to compare at the positions it shares with --reference.
    #[arg(long)]
    llamacpp: Option<PathBuf>,
    /// Write the sequence's ids here (whitespace-separated), for tests/reference/llamacpp_logits.cpp.
    #[arg(long)]
    write_ids: Option<PathBuf>,
    /// llama.cpp's logits along the sequence as tests/reference/llamacpp_logits.cpp writes them (every
    /// position's n_vocab f32s): compared like a variant, at every position.
    #[arg(long)]
    llamacpp_logits: Option<PathBuf>,
    /// With --llamacpp-logits: write the sequence, exact math's top-5 logits at each
    /// position and llama.cpp's logits for the same ids here, as JSON (one sequence of
    /// tests/reference/smollm2_q4_1_prompts.json).
    #[arg(long)]
    write_sequence: Option<PathBuf>,
    /// Write each variant's errors here (one file a variant: "pos id error" lines), so
    /// that several prompts' can be pooled.
    #[arg(long)]
    errors_dir: Option<PathBuf>,
    /// Skip the GPU variants.
    #[arg(long)]
    no_gpu: bool,
    /// Skip the CPU simulations rounding x at one point at a time.
    #[arg(long)]
    no_points: bool,
    /// Reruns of the brass and llama.cpp roundings with x perturbed by ~1e-6 first.
    #[arg(long, default_value_t = 0)]
    jitter_seeds: u64,
    /// Reruns of brass's and llama.cpp's roundings with each group's scale enlarged by
    /// up to this fraction at random (0.01: every value's rounding redrawn), seeds as
    /// the jitter reruns'.
    #[arg(long)]
    dither: Option<f64>,
    /// The first seed of the all-points jitter reruns (seeds first .. first + jitter_seeds).
    #[arg(long, default_value_t = 1)]
    jitter_first: u64,
    /// Run only the GPU variants whose names contain one of these (default: all).
    #[arg(long, value_delimiter = ',')]
    gpu: Vec<String>,
    /// Skip the CPU simulations.
    #[arg(long)]
    no_cpu: bool,
    /// Also run brass's rounding at only these points (bits of qkv, attn_out,
    /// gate_up, down, head; e.g. 30 = all but qkv), f16 KV.
    #[arg(long, value_delimiter = ',')]
    mask: Vec<u32>,
    /// Also run brass's rounding at every point with the F groups of largest scale in
    /// each x kept exact (a second plane for outlier groups only), for each F given.
    #[arg(long, value_delimiter = ',')]
    outliers: Vec<usize>,
    /// The same with the C values of largest magnitude kept exact, for each C given.
    #[arg(long, value_delimiter = ',')]
    channels: Vec<usize>,
    /// The points (bits, as --mask) where --channels applies.
    #[arg(long, default_value_t = 31)]
    channel_points: u32,
    /// Thresholds (times rms(x)) for --channels: the first values over it, not the largest.
    #[arg(long, value_delimiter = ',')]
    tau: Vec<f64>,
    /// Also run brass's rounding at every point with one int8 scale per this many values
    /// (16 or 8: two or four scales per 32-value group), for each given.
    #[arg(long, value_delimiter = ',')]
    scale_groups: Vec<usize>,
    /// The points (bits, as --mask) where --scale-groups applies.
    #[arg(long, default_value_t = 31)]
    scale_points: u32,
    /// With --scale-groups: each sub-group's scale is the group's divided by a power of
    /// two, 2^e with e in 0..=T, for each T given (0: free scales, the default).
    #[arg(long, value_delimiter = ',')]
    pow2_shifts: Vec<u32>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Scheme {
    Exact,
    Brass,
    Llama,
    /// brass's, with llama.cpp's rounding (half away from zero) only.
    BrassAway,
    /// brass's, with the scale stored as f16 only.
    BrassF16d,
}

/// The points where x is rounded: inputs of QKV, the attention output projection,
/// gate/up, down, and the head.
const POINTS: [&str; 5] = ["qkv", "attn_out", "gate_up", "down", "head"];

thread_local! {
    /// Nonzero: the seed of a relative perturbation of about 1e-6 applied to x before it
    /// is rounded (a stand-in for another engine's summation order upstream).
    static JITTER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Groups of the largest scale in each x left exact (not rounded).
    static OUTLIERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Values of the largest magnitude in each x left exact, the rest rounded.
    static CHANNELS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The points (bits, as --mask) where CHANNELS (or SCALE_GROUP) applies, and the point
    /// being rounded.
    static CHANNEL_POINTS: std::cell::Cell<u32> = const { std::cell::Cell::new(31) };
    static POINT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Nonzero: CHANNELS takes the first values over this many times rms(x) in index
    /// order instead of the largest.
    static TAU: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
    /// Values per int8 scale (brass's rounding): 32, or a divisor of it.
    static SCALE_GROUP: std::cell::Cell<usize> = const { std::cell::Cell::new(32) };
    /// Nonzero: SCALE_GROUP's scales are the group's over 2^e, e at most this.
    static POW2_SHIFT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Nonzero: each group's scale is enlarged by up to this fraction, drawn from
    /// JITTER's state (so every draw rounds every value independently).
    static DITHER: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// `f` with x perturbed by the jitter of `seed` before each rounding (none for seed 0).
fn jittered<T>(seed: u64, f: impl FnOnce() -> T) -> T {
    let state = match seed {
        0 => 0,
        _ => 0x9E37_79B9_7F4A_7C15 ^ seed,
    };
    JITTER.with(|j| j.set(state));
    let out = f();
    JITTER.with(|j| j.set(0));
    out
}

/// Uniform in [-1, 1), from JITTER's xorshift state.
fn jitter() -> f64 {
    JITTER.with(|j| {
        let mut s = j.get();
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        j.set(s);
        (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
}

struct Mat {
    rows: usize,
    cols: usize,
    w: Vec<f32>,
    /// Q4_1 / Q5_1: each block's minimum m, [row][block].
    mins: Option<Vec<f32>>,
}

fn load_mat(file: &GgufFile, name: &str) -> Mat {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
    let mut w = vec![0f32; rows * cols];
    let bytes = file.tensor_data(t);
    brass::quant::dequantize(t.ty, bytes, &mut w).unwrap();
    let mins = match t.ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let bb = if t.ty == GgmlType::Q4_1 { 20 } else { 24 };
            Some(
                bytes
                    .chunks_exact(bb)
                    .map(|b| f16::from_le_bytes([b[2], b[3]]).to_f32())
                    .collect(),
            )
        }
        _ => None,
    };
    Mat {
        rows,
        cols,
        w,
        mins,
    }
}

fn load_vec(file: &GgufFile, name: &str) -> Vec<f64> {
    let t = file.tensor(name).unwrap();
    let mut w = vec![0f32; t.n_elements() as usize];
    brass::quant::dequantize(t.ty, file.tensor_data(t), &mut w).unwrap();
    w.into_iter().map(f64::from).collect()
}

struct Layer {
    attn_norm: Vec<f64>,
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    ffn_norm: Vec<f64>,
    gate: Mat,
    up: Mat,
    down: Mat,
}

struct Cpu {
    cfg: Config,
    embd: Mat,
    layers: Vec<Layer>,
    norm: Vec<f64>,
    head: Mat,
}

/// x rounded as `scheme` does: the dequantized values and, per group, the error of the
/// stored s against d * sum(q) (what a minimum term multiplies beyond the dequantized x).
fn quantize(x: &[f64], scheme: Scheme) -> (Vec<f64>, Vec<f64>) {
    if scheme == Scheme::Exact {
        return (x.to_vec(), vec![0.0; x.len() / 32]);
    }
    let jittered: Vec<f64>;
    let x = if JITTER.with(|j| j.get()) != 0 {
        jittered = x.iter().map(|&a| a * (1.0 + 1e-6 * jitter())).collect();
        &jittered[..]
    } else {
        x
    };
    let here = CHANNEL_POINTS.with(|c| c.get()) & (1 << POINT.with(|p| p.get())) != 0;
    let n_channels = if here { CHANNELS.with(|c| c.get()) } else { 0 };
    let mut kept: Vec<(usize, f64)> = Vec::new();
    let removed: Vec<f64>;
    let x = if n_channels > 0 {
        let mut order: Vec<usize> = (0..x.len()).collect();
        let tau = TAU.with(|t| t.get());
        if tau > 0.0 {
            let rms = (x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64).sqrt();
            order.retain(|&i| x[i].abs() > tau * rms);
        } else {
            order.sort_by(|&a, &b| x[b].abs().total_cmp(&x[a].abs()));
        }
        let mut r = x.to_vec();
        for &i in &order[..n_channels.min(order.len())] {
            kept.push((i, x[i]));
            r[i] = 0.0;
        }
        removed = r;
        &removed[..]
    } else {
        x
    };
    let mut out = vec![0f64; x.len()];
    let mut s_err = vec![0f64; x.len() / 32];
    // The OUTLIERS groups of largest scale, ranked only when asked for.
    let n_exact = OUTLIERS.with(|o| o.get());
    let mut exact_groups: Vec<usize> = Vec::new();
    if n_exact > 0 {
        let amaxes: Vec<f64> = x
            .chunks_exact(32)
            .map(|c| c.iter().fold(0f64, |m, a| m.max(a.abs())))
            .collect();
        exact_groups = (0..amaxes.len()).collect();
        exact_groups.sort_by(|&a, &b| amaxes[b].total_cmp(&amaxes[a]));
        exact_groups.truncate(n_exact);
    }
    for (g, chunk) in x.chunks_exact(32).enumerate() {
        if exact_groups.contains(&g) {
            out[32 * g..32 * g + 32].copy_from_slice(chunk);
            continue;
        }
        let sub = if here {
            SCALE_GROUP.with(|c| c.get())
        } else {
            32
        };
        if sub < 32 && scheme == Scheme::Brass {
            // Each sub-group its own scale, rounded as below.
            let group_amax = chunk.iter().fold(0f32, |m, &a| m.max((a as f32).abs()));
            let max_shift = POW2_SHIFT.with(|c| c.get());
            for (i, part) in chunk.chunks_exact(sub).enumerate() {
                let mut amax = part.iter().fold(0f32, |m, &a| m.max((a as f32).abs()));
                if max_shift > 0 {
                    // The largest 2^-e of the group's amax that still holds this part.
                    let mut e = 0;
                    while e < max_shift && amax <= group_amax * 0.5f32.powi(e as i32 + 1) {
                        e += 1;
                    }
                    amax = group_amax * 0.5f32.powi(e as i32);
                }
                let inv = if amax > 0.0 { 1.0 / amax } else { 0.0 };
                let d = (amax / 127.0) as f64;
                for (j, &a) in part.iter().enumerate() {
                    out[32 * g + sub * i + j] = d * brass_round(a as f32, inv, false) as f64;
                }
            }
            continue;
        }
        let v: Vec<f32> = chunk.iter().map(|&a| a as f32).collect();
        let mut amax = v.iter().fold(0f32, |m, a| m.max(a.abs()));
        let dither = DITHER.with(|d| d.get());
        if dither > 0.0 {
            // A scale up to `dither` larger than amax / 127: the same rounding, with
            // every value's place between two steps drawn afresh.
            amax *= 1.0 + (dither * (jitter() + 1.0) / 2.0) as f32;
        }
        let d = amax / 127.0;
        let q: Vec<i32> = match scheme {
            Scheme::Llama => {
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                v.iter().map(|&a| (a * id).round() as i32).collect()
            }
            _ => {
                let inv = if amax > 0.0 { 1.0 / amax } else { 0.0 };
                let away = scheme == Scheme::BrassAway;
                v.iter().map(|&a| brass_round(a, inv, away)).collect()
            }
        };
        let sum: i32 = q.iter().sum();
        let (dd, s) = match scheme {
            Scheme::Llama => {
                let d16 = f16::from_f32(d).to_f32();
                (d16 as f64, f16::from_f32(sum as f32 * d).to_f32() as f64)
            }
            Scheme::BrassF16d => {
                let d16 = f16::from_f32(d).to_f32();
                (d16 as f64, (d16 * sum as f32) as f64)
            }
            _ => (d as f64, (d * sum as f32) as f64),
        };
        for (o, &qi) in out[32 * g..32 * g + 32].iter_mut().zip(&q) {
            *o = dd * qi as f64;
        }
        s_err[g] = s - dd * sum as f64;
    }
    for (i, v) in kept {
        out[i] = v;
    }
    (out, s_err)
}

/// brass's int8 value of `a` in a group whose 1 / amax is `inv`: half to even, or
/// (`away`) half away from zero.
fn brass_round(a: f32, inv: f32, away: bool) -> i32 {
    let t = (a * inv).clamp(-1.0, 1.0) * 127.0;
    match away {
        true => t.round() as i32,
        false => t.round_ties_even() as i32,
    }
}

fn matvec(m: &Mat, x: &[f64], s_err: &[f64]) -> Vec<f64> {
    assert_eq!(x.len(), m.cols);
    (0..m.rows)
        .map(|r| {
            let row = &m.w[r * m.cols..(r + 1) * m.cols];
            let mut acc: f64 = row.iter().zip(x).map(|(&w, &x)| w as f64 * x).sum();
            if let Some(mins) = &m.mins {
                let nb = m.cols / 32;
                acc += mins[r * nb..(r + 1) * nb]
                    .iter()
                    .zip(s_err)
                    .map(|(&mn, &e)| mn as f64 * e)
                    .sum::<f64>();
            }
            acc
        })
        .collect()
}

fn qmatvec(m: &Mat, x: &[f64], scheme: Scheme) -> Vec<f64> {
    let (xq, s_err) = quantize(x, scheme);
    matvec(m, &xq, &s_err)
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * s * b).collect()
}

fn rope(x: &mut [f64], n_heads: usize, head_dim: usize, rope_dim: usize, pos: usize, base: f64) {
    for h in 0..n_heads {
        for i in 0..rope_dim / 2 {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / rope_dim as f64);
            let (s, c) = theta.sin_cos();
            let j = h * head_dim + 2 * i;
            let (x0, x1) = (x[j], x[j + 1]);
            x[j] = x0 * c - x1 * s;
            x[j + 1] = x0 * s + x1 * c;
        }
    }
}

impl Cpu {
    fn load(file: &GgufFile) -> Cpu {
        let cfg = Config::from_gguf(file).unwrap();
        let layers = (0..cfg.n_layers)
            .map(|l| {
                let n = |s: &str| format!("blk.{l}.{s}.weight");
                Layer {
                    attn_norm: load_vec(file, &n("attn_norm")),
                    q: load_mat(file, &n("attn_q")),
                    k: load_mat(file, &n("attn_k")),
                    v: load_mat(file, &n("attn_v")),
                    o: load_mat(file, &n("attn_output")),
                    ffn_norm: load_vec(file, &n("ffn_norm")),
                    gate: load_mat(file, &n("ffn_gate")),
                    up: load_mat(file, &n("ffn_up")),
                    down: load_mat(file, &n("ffn_down")),
                }
            })
            .collect();
        Cpu {
            embd: load_mat(file, "token_embd.weight"),
            head: load_mat(file, output_tensor(file)),
            norm: load_vec(file, "output_norm.weight"),
            layers,
            cfg,
        }
    }

    /// Logits after each of `ids`, x rounded by `scheme` at the points in `mask`
    /// (bit i: POINTS[i]); `kv_f16`: the KV cache holds f16 values.
    fn run(&self, ids: &[u32], scheme: Scheme, mask: u32, kv_f16: bool) -> Vec<Vec<f64>> {
        self.run_gen(&mut ids.to_vec(), 0, scheme, mask, kv_f16)
    }

    /// As `run`, appending `n_gen` greedy tokens to `ids` (all but the last processed).
    fn run_gen(
        &self,
        ids: &mut Vec<u32>,
        mut n_gen: usize,
        scheme: Scheme,
        mask: u32,
        kv_f16: bool,
    ) -> Vec<Vec<f64>> {
        let c = &self.cfg;
        let kvd = c.n_kv_heads * c.head_dim;
        let sch = |p: usize| {
            POINT.with(|c| c.set(p as u32));
            if mask & (1 << p) != 0 {
                scheme
            } else {
                Scheme::Exact
            }
        };
        let mut kc = vec![Vec::<f64>::new(); c.n_layers];
        let mut vc = vec![Vec::<f64>::new(); c.n_layers];
        let kvr = |v: Vec<f64>| -> Vec<f64> {
            if kv_f16 {
                v.into_iter().map(|a| f16::from_f64(a).to_f64()).collect()
            } else {
                v
            }
        };
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < ids.len() {
            let id = ids[pos];
            let e = &self.embd;
            let mut x: Vec<f64> = e.w[id as usize * e.cols..(id as usize + 1) * e.cols]
                .iter()
                .map(|&a| a as f64)
                .collect();
            for (l, ly) in self.layers.iter().enumerate() {
                let h = rms_norm(&x, &ly.attn_norm, c.eps as f64);
                let mut q = qmatvec(&ly.q, &h, sch(0));
                let mut k = qmatvec(&ly.k, &h, sch(0));
                let v = qmatvec(&ly.v, &h, sch(0));
                rope(&mut q, c.n_heads, c.head_dim, c.rope_dim, pos, c.rope_base);
                rope(
                    &mut k,
                    c.n_kv_heads,
                    c.head_dim,
                    c.rope_dim,
                    pos,
                    c.rope_base,
                );
                kc[l].extend(kvr(k));
                vc[l].extend(kvr(v));
                let n_pos = pos + 1;
                let group = c.n_heads / c.n_kv_heads;
                let mut att = vec![0f64; c.n_heads * c.head_dim];
                let scale = 1.0 / (c.head_dim as f64).sqrt();
                for hh in 0..c.n_heads {
                    let kh = hh / group;
                    let qh = &q[hh * c.head_dim..(hh + 1) * c.head_dim];
                    let scores: Vec<f64> = (0..n_pos)
                        .map(|p| {
                            let kp = &kc[l][p * kvd + kh * c.head_dim..][..c.head_dim];
                            qh.iter().zip(kp).map(|(a, b)| a * b).sum::<f64>() * scale
                        })
                        .collect();
                    let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let ex: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                    let z: f64 = ex.iter().sum();
                    for (p, &w) in ex.iter().enumerate() {
                        let vp = &vc[l][p * kvd + kh * c.head_dim..][..c.head_dim];
                        for d in 0..c.head_dim {
                            att[hh * c.head_dim + d] += w / z * vp[d];
                        }
                    }
                }
                let o = qmatvec(&ly.o, &att, sch(1));
                for (a, b) in x.iter_mut().zip(&o) {
                    *a += b;
                }
                let h = rms_norm(&x, &ly.ffn_norm, c.eps as f64);
                let g = qmatvec(&ly.gate, &h, sch(2));
                let u = qmatvec(&ly.up, &h, sch(2));
                let act: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let dn = qmatvec(&ly.down, &act, sch(3));
                for (a, b) in x.iter_mut().zip(&dn) {
                    *a += b;
                }
            }
            let h = rms_norm(&x, &self.norm, c.eps as f64);
            out.push(qmatvec(&self.head, &h, sch(4)));
            if pos + 1 == ids.len() && n_gen > 1 {
                ids.push(top5(out.last().unwrap())[0]);
                n_gen -= 1;
            }
            pos += 1;
        }
        out
    }
}

fn top5(l: &[f64]) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..l.len() as u32).collect();
    idx.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]));
    idx.truncate(5);
    idx
}

/// At each position, |got - exact| for each of the exact pass's top-5 ids there (`tops`).
fn top5_errors(exact: &[Vec<f64>], tops: &[Vec<u32>], got: &[Vec<f64>]) -> Vec<Vec<f64>> {
    exact
        .iter()
        .zip(tops)
        .zip(got)
        .map(|((e, top), g)| {
            top.iter()
                .map(|&id| (g[id as usize] - e[id as usize]).abs())
                .collect()
        })
        .collect()
}

/// Of `top5_errors`' errors: (worst, its position, median, each position's worst).
fn compare(errors: &[Vec<f64>]) -> (f64, usize, f64, Vec<f64>) {
    let per_pos: Vec<f64> = errors
        .iter()
        .map(|e| e.iter().copied().fold(0.0, f64::max))
        .collect();
    let (worst_pos, &worst) =
        per_pos
            .iter()
            .enumerate()
            .fold((0, &0.0), |w, x| if x.1 > w.1 { x } else { w });
    let mut all: Vec<f64> = errors.concat();
    all.sort_by(f64::total_cmp);
    (worst, worst_pos, all[all.len() / 2], per_pos)
}

#[derive(serde::Deserialize)]
struct Reference {
    prompt_ids: Vec<u32>,
    steps: Vec<Step>,
    generated: Vec<u32>,
}
#[derive(serde::Deserialize)]
struct Step {
    top: Vec<(u32, f64)>,
}
fn read_ref(p: &PathBuf) -> Reference {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}
fn sequence(r: &Reference) -> Vec<u32> {
    let mut ids = r.prompt_ids.clone();
    ids.extend(&r.generated[..r.generated.len() - 1]);
    ids
}

fn main() {
    let args = Args::parse();
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| default_model_path().unwrap());
    let file = GgufFile::open(&path).unwrap();
    let t0 = std::time::Instant::now();
    let cpu = Cpu::load(&file);
    eprintln!("cpu weights loaded in {:.1} s", t0.elapsed().as_secs_f64());
    let reference = args.reference.as_ref().map(read_ref);
    let (ids, exact, n_prompt) = match &reference {
        Some(r) => {
            let ids = sequence(r);
            let exact = cpu.run(&ids, Scheme::Exact, 0, false);
            let mut worst = 0f64;
            for (e, s) in exact.iter().zip(&r.steps) {
                for &(id, v) in &s.top {
                    worst = worst.max((e[id as usize] - v).abs());
                }
            }
            println!(
                "exact CPU pass vs {}: worst top-5 diff {worst:.5}",
                args.reference.as_ref().unwrap().display()
            );
            (ids, exact, r.prompt_ids.len())
        }
        None => {
            let tok = Tokenizer::from_gguf(&file).unwrap();
            let mut ids = tok.encode(&args.prompt, true, true);
            let n_prompt = ids.len();
            let exact = cpu.run_gen(&mut ids, args.n_gen, Scheme::Exact, 0, false);
            println!(
                "sequence ({} prompt ids, {} in all): {:?}",
                n_prompt,
                ids.len(),
                ids
            );
            (ids, exact, n_prompt)
        }
    };
    eprintln!("exact pass: {:.1} s", t0.elapsed().as_secs_f64());
    if let Some(p) = &args.write_ids {
        let text: Vec<String> = ids.iter().map(u32::to_string).collect();
        std::fs::write(p, text.join(" ") + "\n").unwrap();
    }
    // (pos, id) pairs in both references' top-5 at the positions where their sequences
    // agree: where llama.cpp's error is known.
    let mut pairs: Vec<(usize, u32)> = Vec::new();
    if let (Some(r), Some(lp)) = (&reference, &args.llamacpp) {
        let l = read_ref(lp);
        let lids = sequence(&l);
        let shared = ids.iter().zip(&lids).take_while(|(a, b)| a == b).count();
        let mut errs = Vec::new();
        for (pos, (ls, rs)) in l.steps.iter().zip(&r.steps).take(shared).enumerate() {
            for &(id, v) in &ls.top {
                if rs.top.iter().any(|t| t.0 == id) {
                    errs.push((pos, (v - exact[pos][id as usize]).abs()));
                    pairs.push((pos, id));
                }
            }
        }
        let w = errs
            .iter()
            .cloned()
            .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        let mut v: Vec<f64> = errs.iter().map(|e| e.1).collect();
        v.sort_by(f64::total_cmp);
        println!(
            "llama.cpp reference vs exact over {shared} shared positions ({} logits): worst {:.4} at pos {}, median {:.4}",
            v.len(),
            w.1,
            w.0,
            v[v.len() / 2]
        );
    }

    if let Some(dir) = &args.errors_dir {
        std::fs::create_dir_all(dir).unwrap();
    }
    // The exact pass's top-5 at each position: what every variant is compared on.
    let tops: Vec<Vec<u32>> = exact.iter().map(|e| top5(e)).collect();
    let report = |name: &str, got: &[Vec<f64>]| {
        let errors = top5_errors(&exact, &tops, got);
        if let Some(dir) = &args.errors_dir {
            let mut lines = String::new();
            for (pos, (top, errs)) in tops.iter().zip(&errors).enumerate() {
                for (id, err) in top.iter().zip(errs) {
                    lines += &format!("{pos} {id} {err:.6}\n");
                }
            }
            let file: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            std::fs::write(dir.join(file + ".txt"), lines).unwrap();
        }
        let (w, p, med, per_pos) = compare(&errors);
        let mut order: Vec<usize> = (0..per_pos.len()).collect();
        order.sort_by(|&a, &b| per_pos[b].total_cmp(&per_pos[a]));
        let next: Vec<String> = order[1..4]
            .iter()
            .map(|&i| format!("{:.3}@{}", per_pos[i], i))
            .collect();
        println!(
            "{name:<34} worst {w:.4} at pos {p:>2}  median {med:.4}  next worst positions {}",
            next.join(" ")
        );
        if !pairs.is_empty() {
            let mut v: Vec<(f64, usize)> = pairs
                .iter()
                .map(|&(p, id)| ((got[p][id as usize] - exact[p][id as usize]).abs(), p))
                .collect();
            let w = v
                .iter()
                .cloned()
                .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            println!(
                "{:<34} on llama.cpp's shared logits: worst {:.4} at pos {}, median {:.4}",
                "",
                w.0,
                w.1,
                v[v.len() / 2].0
            );
        }
    };

    if let Some(p) = &args.llamacpp_logits {
        let bytes = std::fs::read(p).unwrap();
        let n_vocab = exact[0].len();
        assert_eq!(
            bytes.len(),
            4 * n_vocab * ids.len(),
            "{}: not {} positions of {n_vocab} logits",
            p.display(),
            ids.len()
        );
        let got: Vec<Vec<f64>> = bytes
            .chunks_exact(4 * n_vocab)
            .map(|pos| {
                pos.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                    .collect()
            })
            .collect();
        report("llama.cpp (tests/reference/llamacpp_logits.cpp)", &got);
        if let Some(out) = &args.write_sequence {
            let steps: Vec<serde_json::Value> = exact
                .iter()
                .zip(&got)
                .zip(&tops)
                .enumerate()
                .map(|(pos, ((e, l), top))| {
                    let top: Vec<serde_json::Value> = top
                        .iter()
                        .map(|&id| {
                            // f32 as both engines' logits are, to 5 decimals.
                            let r = |v: f64| (v * 1e5).round() / 1e5;
                            serde_json::json!([id, r(e[id as usize]), r(l[id as usize])])
                        })
                        .collect();
                    serde_json::json!({ "pos": pos, "top": top })
                })
                .collect();
            let seq = serde_json::json!({
                "prompt": args.prompt,
                "n_prompt": n_prompt,
                "ids": ids,
                "steps": steps,
            });
            std::fs::write(out, serde_json::to_string(&seq).unwrap()).unwrap();
        }
    }

    // CPU simulations.
    let all = (1u32 << POINTS.len()) - 1;
    let cpu_schemes: &[(Scheme, bool)] = if args.no_cpu {
        &[]
    } else {
        &[
            (Scheme::Exact, true),
            (Scheme::Brass, false),
            (Scheme::Brass, true),
            (Scheme::BrassAway, true),
            (Scheme::BrassF16d, true),
            (Scheme::Llama, true),
        ]
    };
    for &(scheme, kv) in cpu_schemes {
        let got = cpu.run(&ids, scheme, all, kv);
        report(&format!("cpu {scheme:?} all kv_f16={kv}"), &got);
    }
    for &mask in &args.mask {
        for seed in 0..=args.jitter_seeds {
            for scheme in [Scheme::Brass, Scheme::Llama] {
                let got = jittered(seed, || cpu.run(&ids, scheme, mask, true));
                report(
                    &format!("cpu {scheme:?} mask {mask:#07b} jitter {seed}"),
                    &got,
                );
            }
        }
    }
    for &f in &args.outliers {
        OUTLIERS.with(|o| o.set(f));
        for seed in 0..=args.jitter_seeds {
            let got = jittered(seed, || cpu.run(&ids, Scheme::Brass, all, true));
            report(&format!("cpu Brass outliers {f} jitter {seed}"), &got);
        }
        OUTLIERS.with(|o| o.set(0));
    }
    let shifts = if args.pow2_shifts.is_empty() {
        vec![0]
    } else {
        args.pow2_shifts.clone()
    };
    for &n in &args.scale_groups {
        assert!(n > 0 && 32 % n == 0, "--scale-groups: divisors of 32");
        for &t in &shifts {
            SCALE_GROUP.with(|c| c.set(n));
            POW2_SHIFT.with(|c| c.set(t));
            CHANNEL_POINTS.with(|c| c.set(args.scale_points));
            for seed in 0..=args.jitter_seeds {
                let got = jittered(seed, || cpu.run(&ids, Scheme::Brass, all, true));
                report(
                    &format!(
                        "cpu Brass scale group {n} pow2 shift {t} points {:#07b} jitter {seed}",
                        args.scale_points
                    ),
                    &got,
                );
            }
        }
        SCALE_GROUP.with(|c| c.set(32));
        POW2_SHIFT.with(|c| c.set(0));
    }
    CHANNEL_POINTS.with(|c| c.set(args.channel_points));
    let taus = if args.tau.is_empty() {
        vec![0.0]
    } else {
        args.tau.clone()
    };
    for &c in &args.channels {
        for &tau in &taus {
            CHANNELS.with(|o| o.set(c));
            TAU.with(|t| t.set(tau));
            for seed in 0..=args.jitter_seeds {
                let got = jittered(seed, || cpu.run(&ids, Scheme::Brass, all, true));
                report(
                    &format!("cpu Brass channels {c} tau {tau} jitter {seed}"),
                    &got,
                );
            }
            CHANNELS.with(|o| o.set(0));
            TAU.with(|t| t.set(0.0));
        }
    }
    let reruns = args.jitter_first..args.jitter_first + args.jitter_seeds;
    if let Some(f) = args.dither {
        DITHER.with(|d| d.set(f));
        for seed in reruns.clone() {
            for scheme in [Scheme::Brass, Scheme::Llama] {
                let got = jittered(seed, || cpu.run(&ids, scheme, all, true));
                report(&format!("cpu {scheme:?} dither {f} seed {seed}"), &got);
            }
        }
        DITHER.with(|d| d.set(0.0));
    }
    for seed in reruns.filter(|_| !args.no_cpu) {
        for scheme in [Scheme::Brass, Scheme::BrassF16d, Scheme::Llama] {
            let got = jittered(seed, || cpu.run(&ids, scheme, all, true));
            report(&format!("cpu {scheme:?} all kv_f16 jitter {seed}"), &got);
        }
    }
    for (p, name) in POINTS.iter().enumerate() {
        if args.no_points || args.no_cpu {
            break;
        }
        for scheme in [Scheme::Brass, Scheme::Llama] {
            let got = cpu.run(&ids, scheme, 1 << p, false);
            report(&format!("cpu {scheme:?} only {name}"), &got);
        }
    }

    if args.no_gpu {
        return;
    }
    let device: Arc<dyn Device> = Arc::new(WgpuDevice::open(&AdapterChoice::from_env()).unwrap());
    let variants: Vec<(&str, LoadOptions)> = vec![
        ("gpu default", LoadOptions::default()),
        (
            "gpu --force coop",
            routed(Overrides {
                force: Some(Force::Family(Family::Coop)),
                ..Default::default()
            }),
        ),
        (
            "gpu x_q8=false",
            routed(Overrides {
                x_q8: Some(false),
                ..Default::default()
            }),
        ),
        (
            "gpu x_q8=true",
            routed(Overrides {
                x_q8: Some(true),
                ..Default::default()
            }),
        ),
        (
            "gpu glu_q8=false",
            routed(Overrides {
                glu_q8: Some(false),
                ..Default::default()
            }),
        ),
        (
            "gpu glu_q8=true",
            routed(Overrides {
                glu_q8: Some(true),
                ..Default::default()
            }),
        ),
    ];
    for (name, mut opts) in variants {
        if !args.gpu.is_empty() && !args.gpu.iter().any(|g| name.contains(g.as_str())) {
            continue;
        }
        opts.context = Some(ids.len().max(64));
        let model = Model::load(device.clone(), &path, &opts).unwrap();
        let got: Vec<Vec<f64>> = ids
            .iter()
            .enumerate()
            .map(|(pos, &id)| {
                model
                    .forward_logits(Input::Token(id), pos)
                    .unwrap()
                    .into_iter()
                    .map(f64::from)
                    .collect()
            })
            .collect();
        report(name, &got);
    }
}

fn routed(routing: Overrides) -> LoadOptions {
    LoadOptions {
        routing,
        ..Default::default()
    }
}
