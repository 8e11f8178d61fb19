//! An exact-math (f64) forward pass on the CPU, from a file's dequantized weights and its
//! [`Config`]: llama's, and what qwen2, qwen3 and gemma3 change (Q/K/V biases, NEOX
//! RoPE, per-head q/k RMSNorm before RoPE, scaled embeddings, post-norms before the
//! residual adds, GELU-tanh, the local layers' window and RoPE base).

use brass::gguf::GgufFile;
use brass::model::{output_tensor, Config};
use brass::quant::dequantize;

/// A row-major matrix of `cols` values a row, in f64.
pub struct Mat {
    pub cols: usize,
    pub w: Vec<f64>,
}

impl Mat {
    pub fn load(file: &GgufFile, name: &str) -> Mat {
        let t = file.tensor(name).unwrap_or_else(|| panic!("no {name}"));
        let mut out = vec![0f32; t.n_elements() as usize];
        dequantize(t.ty, file.tensor_data(t), &mut out).unwrap();
        Mat {
            cols: t.cols() as usize,
            w: out.into_iter().map(f64::from).collect(),
        }
    }

    pub fn mul(&self, x: &[f64]) -> Vec<f64> {
        assert_eq!(x.len(), self.cols);
        self.w
            .chunks_exact(self.cols)
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.w[r * self.cols..(r + 1) * self.cols]
    }
}

struct Layer {
    attn_norm: Vec<f64>,
    wq: Mat,
    wk: Mat,
    wv: Mat,
    /// `attn_{q,k,v}.bias` (`Config::qkv_bias`).
    bias: Option<[Vec<f64>; 3]>,
    /// `attn_{q,k}_norm.weight` (`Config::qk_norm`).
    qk_norm: Option<[Vec<f64>; 2]>,
    wo: Mat,
    /// `post_attention_norm.weight`, `post_ffw_norm.weight` (`Config::post_norms`).
    post_norms: Option<[Vec<f64>; 2]>,
    ffn_norm: Vec<f64>,
    gate: Mat,
    up: Mat,
    down: Mat,
    /// A local layer's window: it attends to keys pos - window + 1 ..= pos.
    window: Option<usize>,
    rope_base: f64,
    k_cache: Vec<f64>,
    v_cache: Vec<f64>,
}

/// The forward pass in f64, a token at a time, with its own KV cache.
pub struct Exact {
    pub c: Config,
    embd: Mat,
    layers: Vec<Layer>,
    out_norm: Vec<f64>,
    output: Mat,
}

pub fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    assert_eq!(x.len(), w.len());
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * w).collect()
}

impl Exact {
    pub fn new(file: &GgufFile) -> Exact {
        let c = Config::from_gguf(file).unwrap();
        let vector = |name: &str| Mat::load(file, name).w;
        let layers = (0..c.n_layers)
            .map(|i| {
                let m = |s: &str| Mat::load(file, &format!("blk.{i}.{s}.weight"));
                let v = |s: &str| vector(&format!("blk.{i}.{s}.weight"));
                let b = |s: &str| vector(&format!("blk.{i}.{s}.bias"));
                let local = c.sliding_window.filter(|w| w.is_local(i));
                Layer {
                    attn_norm: v("attn_norm"),
                    wq: m("attn_q"),
                    wk: m("attn_k"),
                    wv: m("attn_v"),
                    bias: c.qkv_bias.then(|| [b("attn_q"), b("attn_k"), b("attn_v")]),
                    qk_norm: c.qk_norm.then(|| [v("attn_q_norm"), v("attn_k_norm")]),
                    wo: m("attn_output"),
                    post_norms: c
                        .post_norms
                        .then(|| [v("post_attention_norm"), v("post_ffw_norm")]),
                    ffn_norm: v("ffn_norm"),
                    gate: m("ffn_gate"),
                    up: m("ffn_up"),
                    down: m("ffn_down"),
                    window: local.map(|w| w.window),
                    rope_base: local.map_or(c.rope_base, |w| w.rope_base),
                    k_cache: Vec::new(),
                    v_cache: Vec::new(),
                }
            })
            .collect();
        Exact {
            embd: Mat::load(file, "token_embd.weight"),
            out_norm: vector("output_norm.weight"),
            output: Mat::load(file, output_tensor(file)),
            layers,
            c,
        }
    }

    /// RoPE on each of `n_heads` heads of `x` at `pos`, in the file's pairing.
    fn rope(&self, x: &mut [f64], n_heads: usize, pos: usize, base: f64) {
        let (hd, rd) = (self.c.head_dim, self.c.rope_dim);
        for h in 0..n_heads {
            for i in 0..rd / 2 {
                let theta = pos as f64 * base.powf(-2.0 * i as f64 / rd as f64);
                let (s, co) = theta.sin_cos();
                let (a, b) = self.c.rope.pair(i, rd);
                let (a, b) = (h * hd + a, h * hd + b);
                let (xa, xb) = (x[a], x[b]);
                x[a] = xa * co - xb * s;
                x[b] = xa * s + xb * co;
            }
        }
    }

    /// The logits after `token` at `pos` (positions in order from 0).
    pub fn step(&mut self, token: u32, pos: usize) -> Vec<f64> {
        let c = self.c.clone();
        let eps = c.eps as f64;
        let (hd, nh, nkv) = (c.head_dim, c.n_heads, c.n_kv_heads);
        let group = nh / nkv;
        let kv_dim = nkv * hd;
        let scale = f64::from(c.embed_scale);
        let mut x: Vec<f64> = self
            .embd
            .row(token as usize)
            .iter()
            .map(|v| v * scale)
            .collect();
        for li in 0..self.layers.len() {
            let l = &self.layers[li];
            let xn = rms_norm(&x, &l.attn_norm, eps);
            let mut q = l.wq.mul(&xn);
            let mut k = l.wk.mul(&xn);
            let mut v = l.wv.mul(&xn);
            if let Some([bq, bk, bv]) = &l.bias {
                for (x, b) in [(&mut q, bq), (&mut k, bk), (&mut v, bv)] {
                    x.iter_mut().zip(b).for_each(|(x, b)| *x += b);
                }
            }
            if let Some([nq, nk]) = &l.qk_norm {
                for (x, w) in [(&mut q, nq), (&mut k, nk)] {
                    let normed: Vec<f64> = x
                        .chunks_exact(hd)
                        .flat_map(|h| rms_norm(h, w, eps))
                        .collect();
                    *x = normed;
                }
            }
            let base = l.rope_base;
            self.rope(&mut q, nh, pos, base);
            self.rope(&mut k, nkv, pos, base);
            let l = &mut self.layers[li];
            l.k_cache.extend(&k);
            l.v_cache.extend(&v);
            let first = l.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let mut att = vec![0f64; nh * hd];
            for h in 0..nh {
                let kvh = h / group;
                let qh = &q[h * hd..(h + 1) * hd];
                let scores: Vec<f64> = (first..=pos)
                    .map(|t| {
                        let kt = &l.k_cache[t * kv_dim + kvh * hd..][..hd];
                        qh.iter().zip(kt).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (t, et) in (first..=pos).zip(&e) {
                    let vt = &l.v_cache[t * kv_dim + kvh * hd..][..hd];
                    for d in 0..hd {
                        att[h * hd + d] += et * vt[d] / sum;
                    }
                }
            }
            let mut o = l.wo.mul(&att);
            if let Some([post, _]) = &l.post_norms {
                o = rms_norm(&o, post, eps);
            }
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let xn = rms_norm(&x, &l.ffn_norm, eps);
            let (g, u) = (l.gate.mul(&xn), l.up.mul(&xn));
            let hidden: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| c.activation.of(*g) * u)
                .collect();
            let mut d = l.down.mul(&hidden);
            if let Some([_, post]) = &l.post_norms {
                d = rms_norm(&d, post, eps);
            }
            x.iter_mut().zip(&d).for_each(|(x, d)| *x += d);
        }
        self.output.mul(&rms_norm(&x, &self.out_norm, eps))
    }
}
