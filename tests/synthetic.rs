//! Synthetic models: the file's tensor table follows the spec and mix, brass loads and
//! decodes it, and the presets have the sizes of the real models they stand for.

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec, PRESETS};
use brass::gguf::GgufFile;
use brass::model::{Input, LoadOptions, Model};
use brass::quant::GgmlType;
use brass::tokenizer::Tokenizer;

fn tiny() -> SyntheticSpec {
    SyntheticSpec {
        name: "tiny".into(),
        hidden: 256,
        ffn: 512,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: 1024,
        context: 128,
        rope_base: 10_000.0,
        mix: QuantMix::Q4KM,
        lm_head: None,
        seed: 7,
        arch: Arch::Llama,
        head_dim: None,
        sliding_window: None,
    }
}

fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("brass-synthetic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn tiny_model_writes_loads_and_decodes() {
    let spec = tiny();
    let path = temp_path("tiny.gguf");
    let mut last = (0, 0);
    write_synthetic(&spec, &path, |done, total| {
        assert!(done >= last.0, "progress went backwards");
        last = (done, total);
    })
    .unwrap();

    let file = GgufFile::open(&path).unwrap();
    assert_eq!(last, (file.file_size(), file.file_size()));
    assert_eq!(file.tensors().len(), 2 + 9 * 2 + 1);
    for (name, ty, dims) in spec.tensors() {
        let t = file.tensor(&name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!((t.ty, &t.dims), (ty, &dims), "{name}");
    }
    let ty = |name: &str| file.tensor(name).unwrap().ty;
    assert_eq!(ty("token_embd.weight"), GgmlType::Q4_K);
    assert_eq!(ty("output.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.0.attn_q.weight"), GgmlType::Q4_K);
    // With 2 layers, llama.cpp's use_more_bits picks layer 1 (the last eighth).
    assert_eq!(ty("blk.1.attn_v.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.1.ffn_down.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.0.attn_norm.weight"), GgmlType::F32);
    let norm = file.tensor_data(file.tensor("output_norm.weight").unwrap());
    assert_eq!(&norm[..4], &1f32.to_le_bytes());
    assert_eq!(file.get_u32("llama.attention.head_count_kv").unwrap(), 2);

    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let ids = tokenizer.encode("the synthetic model", false, false);
    assert!(!ids.is_empty() && ids.iter().all(|&id| id < 1024));
    assert_eq!(
        tokenizer.decode(&ids, false).unwrap(),
        "the synthetic model"
    );

    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(16),
        ..Default::default()
    };
    let model = Model::from_gguf(device, &file, &options).unwrap();
    assert_eq!(model.config().vocab, 1024);
    let mut token = model.forward(Input::Token(ids[0]), 0).unwrap();
    for pos in 1..4 {
        assert!(token < 1024);
        token = model.forward(Input::Previous, pos).unwrap();
    }
    drop(file);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn single_type_mix_and_fallback() {
    let spec = SyntheticSpec {
        mix: QuantMix::Single(GgmlType::Q8_0),
        ..tiny()
    };
    assert!(spec
        .tensors()
        .iter()
        .all(|(_, ty, _)| matches!(ty, GgmlType::Q8_0 | GgmlType::F32)));
    // SmolLM2's rows of 576 cannot hold K-quant super-blocks: llama.cpp's fallbacks.
    let smol = SyntheticSpec::preset("smollm2-135m").unwrap();
    let t = smol.tensors();
    let ty = |name: &str| t.iter().find(|(n, ..)| n == name).unwrap().1;
    assert_eq!(ty("blk.0.attn_q.weight"), GgmlType::Q5_0);
    assert_eq!(ty("blk.0.ffn_down.weight"), GgmlType::Q6_K); // rows of 1536
    assert_eq!(ty("output.weight"), GgmlType::Q8_0);
    assert_eq!("q4_k_m".parse::<QuantMix>().unwrap(), QuantMix::Q4KM);
    assert_eq!(
        "Q8_0".parse::<QuantMix>().unwrap(),
        QuantMix::Single(GgmlType::Q8_0)
    );
    assert!("q9_9".parse::<QuantMix>().is_err());
}

#[test]
fn preset_tensor_tables() {
    for name in PRESETS {
        let spec = SyntheticSpec::preset(name).unwrap();
        let n = spec.tensors().len() as u64;
        // llama's 9 tensors a layer; qwen2 adds 3 biases, qwen3 2 q/k norms, gemma3
        // those and 2 post-norms, without the lm-head.
        let (per_layer, outer) = match spec.arch {
            Arch::Llama => (9, 3),
            Arch::Qwen2 => (12, 3),
            Arch::Qwen3 => (11, 3),
            Arch::Gemma3 => (13, 2),
        };
        assert_eq!(n, outer + per_layer * spec.layers, "{name}");
        spec.builder().unwrap(); // every shape is valid for its type
    }
    let gb = |b: u64| b as f64 / 1e9;

    let l3 = SyntheticSpec::preset("llama3-8b").unwrap();
    let t = l3.tensors();
    let find = |name: &str| t.iter().find(|(n, ..)| n == name).unwrap().clone();
    assert_eq!(find("blk.0.attn_k.weight").2, vec![4096, 1024]);
    assert_eq!(find("blk.0.ffn_down.weight").2, vec![14_336, 4096]);
    assert_eq!(find("output.weight").2, vec![4096, 128_256]);
    // llama.cpp's Meta-Llama-3-8B Q4_K_M tensor data is 4.92 GB (4.58 GiB).
    let total = gb(l3.tensor_bytes().unwrap());
    assert!((4.85..5.0).contains(&total), "llama3-8b Q4_K_M {total} GB");

    let muse = SyntheticSpec::preset("muse-30b").unwrap();
    let (_, ty, dims) = muse.tensors().pop().unwrap();
    assert_eq!((ty, dims), (GgmlType::Q5_K, vec![6656, 202_048]));
    let params: u64 = muse
        .tensors()
        .iter()
        .map(|(_, _, d)| d.iter().product::<u64>())
        .sum();
    assert!(
        (29e9..31e9).contains(&(params as f64)),
        "{params} parameters"
    );

    let small = SyntheticSpec::preset("llama3.2-1b").unwrap();
    assert_eq!(small.head_dim(), 64);
    let t = small.tensors();
    let find = |name: &str| t.iter().find(|(n, ..)| n == name).unwrap().clone();
    assert_eq!(find("blk.15.ffn_down.weight").2, vec![8192, 2048]);

    let wide = SyntheticSpec::preset("hidden-12288").unwrap();
    assert_eq!(wide.ffn, 4 * 12_288);
    assert_eq!(wide.head_dim(), 128);
    assert!(SyntheticSpec::preset("nope").is_err());

    // The families' parameter counts: Qwen3-8B 8.19 B, Qwen2.5-7B 7.62 B, Gemma 3 4B's
    // language model 3.88 B.
    for (name, arch, billions) in [
        ("qwen3-8b", Arch::Qwen3, 8.19),
        ("qwen2.5-7b", Arch::Qwen2, 7.62),
        ("gemma3-4b", Arch::Gemma3, 3.88),
    ] {
        let spec = SyntheticSpec::preset(name).unwrap();
        assert_eq!(spec.arch, arch);
        let params: u64 = spec
            .tensors()
            .iter()
            .map(|(_, _, d)| d.iter().product::<u64>())
            .sum();
        let b = params as f64 / 1e9;
        assert!((b - billions).abs() < 0.05, "{name}: {b} B parameters");
    }
}

/// Norms create only the variants they dispatch. With x quantized for every dot4 matrix
/// a norm feeds but only the lm-head on dot4 (the layers F16, on coop), the last norm
/// alone writes q8: the H200 found `ops/rms_norm_q8` created and never dispatched in a
/// decode of the Llama-3-8B and 30B shapes, whose first norm writes f32 and whose head
/// takes q8.
#[test]
fn only_the_head_taking_q8_creates_only_the_norm_variants_dispatched() {
    let spec = SyntheticSpec {
        mix: QuantMix::Single(GgmlType::F16),
        lm_head: Some(GgmlType::Q8_0),
        ..tiny()
    };
    let path = temp_path("head_q8.gguf");
    write_synthetic(&spec, &path, |_, _| {}).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(8),
        routing: brass::router::Overrides {
            x_q8: Some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    let model = Model::from_gguf(device, &file, &options).unwrap();
    for pos in 0..2 {
        model.forward(Input::Token(5), pos).unwrap();
    }
    let audit = model.audit();
    assert!(audit.defects().is_empty(), "{audit}");
    let dispatched = |name: &str| {
        audit.entries.iter().any(|e| {
            (e.name == name || e.name.starts_with(&format!("{name} "))) && e.dispatches > 0
        })
    };
    assert!(dispatched("ops/add_rms_norm_q8"), "{audit}");
    assert!(dispatched("ops/rms_norm"), "{audit}");
    drop(file);
    std::fs::remove_file(&path).unwrap();
}
