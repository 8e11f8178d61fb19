//! Decode past 4,096 positions: a small synthetic model teacher-forced over 4,200
//! positions on the GPU under test, against an exact-math (f64) forward pass computed
//! here on the CPU from the same file (dequantized weights, RoPE, attention over every
//! cached position).

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::gguf::GgufFile;
use brass::kernels::attention::KvType;
use brass::kernels::matvec::Family;
use brass::model::synthetic::{write_synthetic, QuantMix, SyntheticSpec};
use brass::model::{Config, Input, LoadOptions, Model};
use brass::quant::{dequantize, GgmlType};
use brass::router::{Force, Overrides};

const POSITIONS: usize = 4200;
/// Positions whose logits are compared: the first, the middle, either side of 4,096 and
/// the last.
const CHECKED: [usize; 6] = [0, 1, 2047, 4095, 4096, POSITIONS - 1];

fn spec() -> SyntheticSpec {
    SyntheticSpec {
        name: "long".into(),
        hidden: 128,
        ffn: 256,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: 512,
        context: 8192,
        rope_base: 10_000.0,
        mix: QuantMix::Single(GgmlType::Q8_0),
        lm_head: None,
        seed: 11,
    }
}

/// A row-major matrix of `cols` values a row, in f64.
struct Mat {
    cols: usize,
    w: Vec<f64>,
}

impl Mat {
    fn load(file: &GgufFile, name: &str) -> Mat {
        let t = file.tensor(name).unwrap_or_else(|| panic!("no {name}"));
        let mut out = vec![0f32; t.n_elements() as usize];
        dequantize(t.ty, file.tensor_data(t), &mut out).unwrap();
        Mat {
            cols: t.cols() as usize,
            w: out.into_iter().map(f64::from).collect(),
        }
    }

    fn mul(&self, x: &[f64]) -> Vec<f64> {
        self.w
            .chunks_exact(self.cols)
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }

    fn row(&self, r: usize) -> &[f64] {
        &self.w[r * self.cols..(r + 1) * self.cols]
    }
}

struct Layer {
    attn_norm: Mat,
    wq: Mat,
    wk: Mat,
    wv: Mat,
    wo: Mat,
    ffn_norm: Mat,
    gate: Mat,
    up: Mat,
    down: Mat,
    k_cache: Vec<f64>,
    v_cache: Vec<f64>,
}

/// The llama forward pass in f64.
struct Exact {
    c: Config,
    embd: Mat,
    layers: Vec<Layer>,
    out_norm: Mat,
    output: Mat,
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * w).collect()
}

impl Exact {
    fn new(file: &GgufFile) -> Exact {
        let c = Config::from_gguf(file).unwrap();
        let layers = (0..c.n_layers)
            .map(|i| {
                let m = |s: &str| Mat::load(file, &format!("blk.{i}.{s}.weight"));
                Layer {
                    attn_norm: m("attn_norm"),
                    wq: m("attn_q"),
                    wk: m("attn_k"),
                    wv: m("attn_v"),
                    wo: m("attn_output"),
                    ffn_norm: m("ffn_norm"),
                    gate: m("ffn_gate"),
                    up: m("ffn_up"),
                    down: m("ffn_down"),
                    k_cache: Vec::new(),
                    v_cache: Vec::new(),
                }
            })
            .collect();
        let output = match file.tensor("output.weight") {
            Some(_) => Mat::load(file, "output.weight"),
            None => Mat::load(file, "token_embd.weight"),
        };
        Exact {
            embd: Mat::load(file, "token_embd.weight"),
            out_norm: Mat::load(file, "output_norm.weight"),
            output,
            layers,
            c,
        }
    }

    fn rope(&self, x: &mut [f64], n_heads: usize, pos: usize) {
        let (hd, rd) = (self.c.head_dim, self.c.rope_dim);
        for h in 0..n_heads {
            for i in 0..rd / 2 {
                let theta = pos as f64 * self.c.rope_base.powf(-2.0 * i as f64 / rd as f64);
                let (s, co) = theta.sin_cos();
                let j = h * hd + 2 * i;
                let (a, b) = (x[j], x[j + 1]);
                x[j] = a * co - b * s;
                x[j + 1] = a * s + b * co;
            }
        }
    }

    /// The logits after `token` at `pos` (positions in order from 0).
    fn step(&mut self, token: u32, pos: usize) -> Vec<f64> {
        let c = self.c.clone();
        let eps = c.eps as f64;
        let (hd, nh, nkv) = (c.head_dim, c.n_heads, c.n_kv_heads);
        let group = nh / nkv;
        let kv_dim = nkv * hd;
        let mut x = self.embd.row(token as usize).to_vec();
        for li in 0..self.layers.len() {
            let xn = rms_norm(&x, &self.layers[li].attn_norm.w, eps);
            let l = &self.layers[li];
            let mut q = l.wq.mul(&xn);
            let mut k = l.wk.mul(&xn);
            let v = l.wv.mul(&xn);
            self.rope(&mut q, nh, pos);
            self.rope(&mut k, nkv, pos);
            let l = &mut self.layers[li];
            l.k_cache.extend(&k);
            l.v_cache.extend(&v);
            let n_pos = pos + 1;
            let mut att = vec![0f64; nh * hd];
            for h in 0..nh {
                let kvh = h / group;
                let qh = &q[h * hd..(h + 1) * hd];
                let scores: Vec<f64> = (0..n_pos)
                    .map(|t| {
                        let kt = &l.k_cache[t * kv_dim + kvh * hd..][..hd];
                        qh.iter().zip(kt).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (t, et) in e.iter().enumerate() {
                    let vt = &l.v_cache[t * kv_dim + kvh * hd..][..hd];
                    for d in 0..hd {
                        att[h * hd + d] += et * vt[d] / sum;
                    }
                }
            }
            let o = l.wo.mul(&att);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let xn = rms_norm(&x, &l.ffn_norm.w, eps);
            let (g, u) = (l.gate.mul(&xn), l.up.mul(&xn));
            let hidden: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let d = l.down.mul(&hidden);
            x.iter_mut().zip(&d).for_each(|(x, d)| *x += d);
        }
        self.output.mul(&rms_norm(&x, &self.out_norm.w, eps))
    }
}

/// Teacher-forces `ids` through the model and returns the logits at [`CHECKED`].
fn decode(model: &Model, ids: &[u32]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for (pos, &id) in ids.iter().enumerate() {
        if CHECKED.contains(&pos) {
            out.push(model.forward_logits(Input::Token(id), pos).unwrap());
        } else {
            model.step(Input::Token(id), pos).unwrap();
        }
    }
    out
}

/// Over 4,200 positions the exact route stays as close to exact math as it starts,
/// through many chunks of split attention and the combine pass.
#[test]
fn decode_past_4096_positions_matches_exact_math() {
    let path = std::env::temp_dir().join(format!("brass-long-{}.gguf", std::process::id()));
    write_synthetic(&spec(), &path, |_, _| {}).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let mut rng = common::Rng::new(5);
    let ids: Vec<u32> = (0..POSITIONS)
        .map(|_| (rng.next_u64() % spec().vocab) as u32)
        .collect();
    let t = std::time::Instant::now();
    let mut exact = Exact::new(&file);
    let expected: Vec<Vec<f64>> = (0..POSITIONS)
        .map(|pos| exact.step(ids[pos], pos))
        .enumerate()
        .filter(|(pos, _)| CHECKED.contains(pos))
        .map(|(_, l)| l)
        .collect();

    eprintln!("exact math: {:.1} s", t.elapsed().as_secs_f64());
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    // The exact route: coop matvecs (x staged as f16 where the device has it, which
    // moves this random model's logits by up to about 0.8 % of their range) and the
    // f32 cache. The f16 cache's own error is `tests/attention.rs`'s.
    for (family, kv, bound) in [(Family::Coop, KvType::F32, 1e-2)] {
        let options = LoadOptions {
            context: Some(POSITIONS),
            kv,
            routing: Overrides {
                force: Some(Force::Family(family)),
                // Few workgroups: a CPU adapter gains nothing from more (the GPU
                // tunings' persistent grids cost a tiny model's step 45 ms on
                // lavapipe), and the positions still split into many chunks.
                attention_workgroups: Some(16),
                ..Overrides::default()
            },
            ubatch: None,
        };
        let model = Model::from_gguf(device.clone(), &file, &options).unwrap();
        let split = model.plan().attention.launch().split(POSITIONS as u64);
        assert!(
            split.n_chunks > 1,
            "{split:?}: the test must reach the combine pass"
        );
        let t = std::time::Instant::now();
        let got = decode(&model, &ids);
        eprintln!(
            "{family:?} {kv}: {:.1} s on the GPU",
            t.elapsed().as_secs_f64()
        );
        for ((pos, want), have) in CHECKED.iter().zip(&expected).zip(&got) {
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let err = want
                .iter()
                .zip(have)
                .map(|(w, h)| (w - *h as f64).abs())
                .fold(0f64, f64::max);
            eprintln!(
                "{family:?} {kv} pos {pos}: max |logit error| {err:.2e} (logits up to {scale:.2})"
            );
            assert!(
                err <= bound * (1.0 + scale),
                "{family:?} {kv} at position {pos}: logits {err} from exact math"
            );
        }
        let audit = model.audit();
        assert!(audit.defects().is_empty(), "{audit}");
    }
    let _ = std::fs::remove_file(&path);
}
