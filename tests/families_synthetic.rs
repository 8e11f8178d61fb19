//! qwen2, qwen3, gemma3 and a Mistral-style llama (a sliding window on every layer) on
//! tiny synthetic files (random weights, the families' tensors and metadata): brass's
//! exact route against an exact-math (f64) forward pass of the same file
//! (`common::exact`), token by token over enough positions that the sliding windows (8
//! here) drop keys; and the default route against the same, printed. Both also on
//! matrix units (the adapter's, or lavapipe's emulated), prompts on flash attention.

mod common;
#[path = "common/coop_emulation.rs"]
mod coop_emulation;
#[path = "common/emulated_units.rs"]
mod emulated_units;

use std::sync::Arc;

use brass::device::Device;
use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec, SyntheticWindow};
use brass::gguf::GgufFile;
use brass::kernels::attention::{KvType, RopeStyle};
use brass::kernels::matvec::Family;
use brass::kernels::ops::Activation;
use brass::model::{Config, Input, LoadOptions, Model, PrefillPlan};
use brass::quant::GgmlType;
use brass::router::{Force, Overrides};
use common::exact::Exact;

const POSITIONS: usize = 24;
const WINDOW: u64 = 8;

fn spec(arch: Arch) -> SyntheticSpec {
    let base = SyntheticSpec {
        name: format!("tiny-{arch}"),
        hidden: 128,
        ffn: 256,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: 512,
        context: 64,
        rope_base: 10_000.0,
        mix: QuantMix::Single(GgmlType::Q8_0),
        lm_head: None,
        seed: 23,
        arch,
        head_dim: None,
        sliding_window: None,
    };
    match arch {
        // Heads of 64 on a 128 model (q is 256 wide, as Gemma 3's heads are wider than
        // dim / heads), three layers of which the last is global, and Q4_K_M's mix
        // (Q5_0 where a row of 128 cannot take K-quants, Q4_K and Q6_K on 256).
        Arch::Gemma3 => SyntheticSpec {
            layers: 3,
            head_dim: Some(64),
            mix: QuantMix::Q4KM,
            rope_base: 1e6,
            sliding_window: Some(SyntheticWindow {
                window: WINDOW,
                pattern: Some(3),
                rope_base: 10_000.0,
            }),
            ..base
        },
        Arch::Qwen3 => SyntheticSpec {
            layers: 3,
            rope_base: 1e6,
            ..base
        },
        // Mistral 7B v0.1's files: llama with attention.sliding_window (4,096 there).
        Arch::Llama => SyntheticSpec {
            sliding_window: Some(SyntheticWindow {
                window: WINDOW,
                pattern: None,
                rope_base: 10_000.0,
            }),
            ..base
        },
        _ => base,
    }
}

/// What the family's config must say: brass's family table, checked apart from the
/// forward pass (the exact forward follows the config).
fn check_config(arch: Arch, c: &Config) {
    assert_eq!(c.architecture, arch.name());
    let s = spec(arch);
    assert_eq!(c.head_dim as u64, s.head_dim());
    let llama = arch == Arch::Llama;
    let rope = if llama {
        RopeStyle::Normal
    } else {
        RopeStyle::Neox
    };
    assert_eq!(c.rope, rope, "{arch}");
    assert_eq!(c.qkv_bias, arch == Arch::Qwen2, "{arch}");
    assert_eq!(
        c.qk_norm,
        matches!(arch, Arch::Qwen3 | Arch::Gemma3),
        "{arch}"
    );
    let gemma = arch == Arch::Gemma3;
    assert_eq!(c.post_norms, gemma);
    let act = if gemma {
        Activation::GeluTanh
    } else {
        Activation::Silu
    };
    assert_eq!(c.activation, act);
    let scale = if gemma { (128f32).sqrt() } else { 1.0 };
    assert_eq!(c.embed_scale, scale);
    match c.sliding_window {
        Some(w) => {
            assert!(gemma || llama);
            assert_eq!(w.window, WINDOW as usize);
            assert_eq!(w.rope_base, 10_000.0);
            // Gemma's third layer is global; none of Mistral's is.
            let local: Vec<bool> = (0..c.n_layers).map(|i| w.is_local(i)).collect();
            match llama {
                true => assert!(local.iter().all(|&l| l), "{local:?}"),
                false => assert_eq!(local, [true, true, false]),
            }
        }
        None => assert!(!gemma && !llama),
    }
}

fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// Worst relative error (max |logit error| / max |logit|) over the positions, and the
/// positions where the exact top-1 leads by more than 0.1 but brass's top-1 differs.
fn compare(want: &[Vec<f64>], have: &[Vec<f32>]) -> (f64, Vec<usize>) {
    let mut worst = 0f64;
    let mut flips = Vec::new();
    for (pos, (w, h)) in want.iter().zip(have).enumerate() {
        let scale = w.iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = w
            .iter()
            .zip(h)
            .map(|(w, h)| (w - *h as f64).abs())
            .fold(0f64, f64::max);
        worst = worst.max(err / scale);
        let top = argmax(w);
        let second = (0..w.len())
            .filter(|&i| i != top)
            .map(|i| w[i])
            .fold(f64::NEG_INFINITY, f64::max);
        let h64: Vec<f64> = h.iter().map(|&v| v as f64).collect();
        if w[top] - second > 0.1 && argmax(&h64) != top {
            flips.push(pos);
        }
    }
    (worst, flips)
}

fn check(arch: Arch) {
    let t = std::time::Instant::now();
    let path = std::env::temp_dir().join(format!(
        "brass-families-synthetic-{arch}-{}.gguf",
        std::process::id()
    ));
    write_synthetic(&spec(arch), &path, |_, _| {}).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let mut exact = Exact::new(&file);
    check_config(arch, &exact.c);
    let mut rng = common::Rng::new(3);
    let ids: Vec<u32> = (0..POSITIONS)
        .map(|_| (rng.next_u64() % spec(arch).vocab) as u32)
        .collect();
    let want: Vec<Vec<f64>> = (0..POSITIONS).map(|p| exact.step(ids[p], p)).collect();
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    // An adapter with matrix units (prompts on flash attention and the tiled matmuls by
    // default): its own, or lavapipe's emulated.
    let units = Some(emulated_units::on_matrix_units(common::gpu()))
        .filter(|u| u.profile().coop_matrix.is_some());
    let exact_route = LoadOptions {
        context: Some(POSITIONS),
        kv: KvType::F32,
        routing: Overrides {
            force: Some(Force::Family(Family::Coop)),
            ..Overrides::default()
        },
        ..LoadOptions::default()
    };
    let default_route = LoadOptions {
        context: Some(POSITIONS),
        ..LoadOptions::default()
    };
    // Over the exact route's f32 cache prompts take flash attention only where asked:
    // its f16 Q, K, V and probabilities against the same bounds.
    let exact_flash = LoadOptions {
        routing: Overrides {
            matrix_attention: Some(true),
            ..exact_route.routing.clone()
        },
        ..exact_route.clone()
    };
    // The exact route's bound on the worst relative logit error (max |error| / max
    // |logit| over the 24 positions), measured on lavapipe: qwen2 7.2e-3 (its x staged
    // as f16, as in tests/long_context.rs, and biases of up to 1), qwen3 1.8e-3, gemma3
    // 1.5e-4; 1.5e-2 leaves twice qwen2's. The default (int8) route is measured and
    // printed, not bounded: on these random-weight files it was 3.4e-3 (gemma3), 4.7e-2
    // (qwen3) and 1.3e-1 (qwen2, with top-1 flips at gaps above 0.1), which wants a
    // look before it gets a bound.
    //
    // (name, device, options, bounded, prompts on flash attention)
    let own_units = device.profile().coop_matrix.is_some();
    let mut routes = vec![
        ("exact", device.clone(), exact_route, true, false),
        (
            "default",
            device.clone(),
            default_route.clone(),
            false,
            own_units,
        ),
    ];
    if let Some(units) = units {
        routes.push((
            "exact, flash attention",
            units.clone(),
            exact_flash,
            true,
            true,
        ));
        if !own_units {
            routes.push(("default on matrix units", units, default_route, false, true));
        }
    }
    for (route, device, options, bounded, on_flash) in routes {
        let model = Model::from_gguf(device.clone(), &file, &options).unwrap();
        let have: Vec<Vec<f32>> = ids
            .iter()
            .enumerate()
            .map(|(pos, &id)| model.forward_logits(Input::Token(id), pos).unwrap())
            .collect();
        let (worst, flips) = compare(&want, &have);
        eprintln!(
            "{arch} {route} route: worst relative logit error {worst:.2e}, top-1 flips {flips:?}"
        );
        // The same prompt in batches of 5 (a window of 8 spans two or three), every
        // position's logits (the last from its decode step, as ever).
        let batched = LoadOptions {
            ubatch: Some(5),
            ..options
        };
        let in_batches = Model::from_gguf(device.clone(), &file, &batched).unwrap();
        let PrefillPlan::Batched(b) = &in_batches.plan().prefill else {
            panic!("{arch} {route}: {}", in_batches.plan().prefill);
        };
        let attention = b.attention.launch().pipeline_key();
        eprintln!("{arch} {route}: prompt attention {attention}");
        let flash = attention.starts_with("attention/flash");
        assert_eq!(flash, on_flash, "{arch} {route}: {attention}");
        let mut from_batches = Vec::new();
        in_batches
            .prefill_logits(&ids, 0, |_, logits| {
                from_batches.push(logits.to_vec());
                Ok(())
            })
            .unwrap();
        let (batch_worst, batch_flips) = compare(&want, &from_batches);
        let apart = relative_apart(&have, &from_batches);
        eprintln!(
            "{arch} {route} route in batches: worst relative logit error {batch_worst:.2e}, \
             top-1 flips {batch_flips:?}; {apart:.2e} from token at a time"
        );
        let audit = in_batches.audit();
        assert!(audit.defects().is_empty(), "{audit}");
        if !bounded {
            // Flash attention's f16 rounding (2^-11 of Q or of a probability, either
            // alone) moves the int8 roundings of x after it, which on these random
            // weights moves logits by up to 5.8e-2 (lavapipe, emulated units; 4.4e-2 on
            // the H200); the route's own distance from exact math is of that kind.
            let bound = if flash {
                DEFAULT_APART.max(worst)
            } else {
                DEFAULT_APART
            };
            assert!(
                apart <= bound,
                "{arch} {route} route: batched logits {apart:.2e} (relative) from token at a \
                 time, bound {bound:.2e}"
            );
            continue;
        }
        assert!(
            batch_worst <= EXACT_BOUND && batch_flips.is_empty(),
            "{arch} {route} route in batches: {batch_worst:.2e} from exact math, flips \
             {batch_flips:?}"
        );
        assert!(
            apart <= EXACT_APART,
            "{arch} {route} route: batched logits {apart:.2e} (relative) from token at a time"
        );
        let bound = EXACT_BOUND;
        assert!(
            worst <= bound,
            "{arch} {route} route: logits {worst:.2e} (relative) from exact math, bound {bound:.1e}"
        );
        assert!(
            flips.is_empty(),
            "{arch} {route} route: top-1 differs where exact math's leads by > 0.1 at {flips:?}"
        );
        let audit = model.audit();
        assert!(audit.defects().is_empty(), "{audit}");
    }
    let _ = std::fs::remove_file(&path);
    eprintln!("{arch}: {:.1} s", t.elapsed().as_secs_f64());
}

const EXACT_BOUND: f64 = 1.5e-2;

/// How far batched logits may be from token at a time's, relative to the largest
/// |logit|. The exact route's batches multiply f32 x where its matvecs stage x as f16:
/// ... The default route rounds x to int8 alike in both, and the sums' order differs.
const EXACT_APART: f64 = 1.5e-2;
const DEFAULT_APART: f64 = 1e-2;

/// The largest |a - b| over the positions, relative to the largest |a|.
fn relative_apart(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(a, b)| {
            let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            let err = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            err as f64 / scale
        })
        .fold(0f64, f64::max)
}

#[test]
fn qwen2_synthetic_matches_exact_math() {
    check(Arch::Qwen2);
}

#[test]
fn qwen3_synthetic_matches_exact_math() {
    check(Arch::Qwen3);
}

#[test]
fn gemma3_synthetic_matches_exact_math() {
    check(Arch::Gemma3);
}

#[test]
fn mistral_style_llama_synthetic_matches_exact_math() {
    check(Arch::Llama);
}

/// The family presets' files have llama.cpp's tensors for their architecture.
#[test]
fn family_presets_have_their_tensors() {
    let names = |p: &str| -> Vec<String> {
        let spec = SyntheticSpec::preset(p).unwrap();
        spec.tensors().into_iter().map(|(n, ..)| n).collect()
    };
    let qwen3 = names("qwen3-8b");
    assert!(qwen3.contains(&"blk.35.attn_q_norm.weight".to_string()));
    assert!(qwen3.contains(&"output.weight".to_string()));
    assert!(!qwen3.iter().any(|n| n.ends_with(".bias")));
    let qwen2 = names("qwen2.5-7b");
    for t in ["q", "k", "v"] {
        assert!(qwen2.contains(&format!("blk.27.attn_{t}.bias")));
    }
    assert!(!qwen2
        .iter()
        .any(|n| n.contains("_norm.weight") && n.contains("attn_q")));
    let gemma = names("gemma3-4b");
    for t in [
        "attn_q_norm",
        "attn_k_norm",
        "post_attention_norm",
        "post_ffw_norm",
    ] {
        assert!(gemma.contains(&format!("blk.33.{t}.weight")), "{t}");
    }
    assert!(!gemma.contains(&"output.weight".to_string()));
    let g = SyntheticSpec::preset("gemma3-4b").unwrap();
    assert_eq!(g.head_dim(), 256);
    let q = g.tensors();
    let wq = q.iter().find(|(n, ..)| n == "blk.0.attn_q.weight").unwrap();
    assert_eq!(wq.2, vec![2560, 8 * 256]);
}
