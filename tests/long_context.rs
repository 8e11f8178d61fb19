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
use brass::model::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
use brass::model::{Input, LoadOptions, Model};
use brass::quant::GgmlType;
use brass::router::{Force, Overrides};
use common::exact::Exact;

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
        arch: Arch::Llama,
        head_dim: None,
        sliding_window: None,
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
