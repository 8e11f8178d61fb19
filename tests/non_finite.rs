//! NaN and infinity in a model: bad float hyper-parameters fail at load, naming the key
//! and value; non-finite weights fail the step that meets them, naming the position.

mod common;

use std::io::Read;

use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec};
use brass::gguf::{GgufBuilder, GgufFile, MetaValue};
use std::sync::Arc;

use brass::device::Device;
use brass::hub::default_model_path;
use brass::model::{check_weights, Config, LoadOptions, Model, Session};
use brass::quant::{Block, BlockQ4K, BlockQ6K};
use brass::sampling::{Sampler, SamplerConfig};
use brass::tokenizer::Tokenizer;
use brass::Error;
use half::f16;

fn tiny() -> SyntheticSpec {
    SyntheticSpec {
        name: "tiny".into(),
        hidden: 256,
        ffn: 512,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        vocab: 512,
        context: 64,
        rope_base: 10_000.0,
        mix: QuantMix::Q4KM,
        lm_head: None,
        seed: 7,
        arch: Arch::Llama,
        head_dim: None,
        sliding_window: None,
    }
}

/// The tiny model's file (random, valid blocks; norms 1.0) as bytes.
fn tiny_bytes(spec: &SyntheticSpec) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("brass-non-finite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Tests run in parallel: each call writes its own file.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("{}-{call}.gguf", spec.name));
    write_synthetic(spec, &path, |_, _| {}).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes
}

/// `bytes` with `value` written at `at` bytes into block `block` of `tensor`.
fn patched(mut bytes: Vec<u8>, tensor: &str, block: u64, at: usize, value: &[u8]) -> GgufFile {
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let t = file.tensor(tensor).unwrap();
    let start = (file.data_offset() + t.offset) as usize + block as usize * t.ty.type_size() + at;
    bytes[start..start + value.len()].copy_from_slice(value);
    GgufFile::from_bytes(bytes).unwrap()
}

fn scale_offset<B: Block>(field: &str) -> usize {
    B::SCALES.iter().find(|(f, _)| *f == field).unwrap().1
}

/// The tiny model's header with `edit` applied, its tensors zero (enough for anything
/// that only reads metadata).
fn header_with(edit: impl FnOnce(&mut GgufBuilder)) -> GgufFile {
    let mut b = tiny().builder().unwrap();
    edit(&mut b);
    let mut bytes = Vec::new();
    b.write_streaming(&mut bytes, |index, w| {
        let n = b.tensor_infos()[index].n_bytes;
        std::io::copy(&mut std::io::repeat(0).take(n), w).map(|_| ())
    })
    .unwrap();
    GgufFile::from_bytes(bytes).unwrap()
}

#[test]
fn float_hyperparameters_must_be_positive_and_finite() {
    assert!(Config::from_gguf(&header_with(|_| {})).is_ok());
    for key in [
        "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon",
    ] {
        for value in [f32::NAN, f32::INFINITY, 0.0, -1.0] {
            let file = header_with(|b| {
                b.set(key, value);
            });
            match Config::from_gguf(&file) {
                Err(Error::Metadata { key: k, what }) => {
                    assert_eq!(k, key);
                    assert!(what.contains(&value.to_string()), "{key} = {value}: {what}");
                }
                other => panic!("{key} = {value}: {other:?}"),
            }
        }
        // Present but not a float: an error, not the default.
        let file = header_with(|b| {
            b.set(key, "ten thousand");
        });
        assert!(
            matches!(Config::from_gguf(&file), Err(Error::Metadata { key: k, .. }) if k == key),
            "{key} as a string"
        );
    }
}

#[test]
fn integer_hyperparameters_must_be_positive_and_of_their_type() {
    for key in ["llama.embedding_length", "llama.context_length"] {
        let file = header_with(|b| {
            b.set(key, 0u32);
        });
        match Config::from_gguf(&file) {
            Err(Error::Metadata { key: k, what }) => {
                assert_eq!(k, key);
                assert!(what.contains('0'), "{key}: {what}");
            }
            other => panic!("{key} = 0: {other:?}"),
        }
    }
    for key in [
        "llama.attention.head_count_kv",
        "llama.rope.dimension_count",
        "llama.context_length",
    ] {
        let file = header_with(|b| {
            b.set(key, MetaValue::F32(2.0));
        });
        assert!(
            matches!(Config::from_gguf(&file), Err(Error::Metadata { key: k, .. }) if k == key),
            "{key} as a float"
        );
    }
}

#[test]
fn check_weights_names_the_tensor_block_and_scale() {
    let bytes = tiny_bytes(&tiny());
    check_weights(&GgufFile::from_bytes(bytes.clone()).unwrap()).unwrap();
    check_weights(&GgufFile::open(default_model_path().unwrap()).unwrap()).unwrap();

    let inf = f16::INFINITY.to_le_bytes();
    let cases = [
        (
            "blk.0.attn_k.weight",
            37,
            scale_offset::<BlockQ4K>("dmin"),
            &inf[..],
            "block 37 of 128 has scale `dmin` = inf",
        ),
        (
            "blk.1.ffn_down.weight",
            0,
            scale_offset::<BlockQ6K>("d"),
            &f16::NAN.to_le_bytes()[..],
            "block 0 of 512 has scale `d` = NaN",
        ),
        (
            "blk.1.ffn_norm.weight",
            255,
            0,
            &f32::NEG_INFINITY.to_le_bytes()[..],
            "element 255 of 256 is -inf",
        ),
    ];
    for (tensor, block, at, value, expected) in cases {
        let file = patched(bytes.clone(), tensor, block, at, value);
        match check_weights(&file) {
            Err(Error::NonFinite(what)) => {
                assert!(what.contains(&format!("`{tensor}`")), "{what}");
                assert!(what.contains(expected), "{what}");
            }
            other => panic!("{tensor}: {other:?}"),
        }
    }
    // Two bad tensors: the first in file order is named.
    let file = patched(bytes, "blk.1.attn_q.weight", 3, 0, &inf);
    let mut both = file.as_bytes().to_vec();
    let t = file.tensor("blk.0.ffn_up.weight").unwrap();
    let start = (file.data_offset() + t.offset) as usize;
    both[start..start + 2].copy_from_slice(&inf);
    let err = check_weights(&GgufFile::from_bytes(both).unwrap()).unwrap_err();
    assert!(err.to_string().contains("`blk.0.ffn_up.weight`"), "{err}");
}

fn session(file: &GgufFile) -> Session {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let options = LoadOptions {
        context: Some(16),
        ..Default::default()
    };
    let model = Model::from_gguf(device, file, &options).unwrap();
    Session::new(model, Tokenizer::from_gguf(file).unwrap()).unwrap()
}

/// What generating from a three-token prompt gives, greedy on the GPU and sampled on
/// the CPU: the first item must be the error (never an empty or any other success).
fn generate_errors(file: &GgufFile) -> [String; 2] {
    let mut s = session(file);
    let samplers = [
        SamplerConfig::greedy(),
        SamplerConfig {
            temperature: 0.8,
            ..SamplerConfig::default()
        },
    ];
    samplers.map(|config| {
        s.reset();
        let temperature = config.temperature;
        let mut tokens = s
            .generate(&[5u32, 6, 7][..], 4, Sampler::new(config))
            .unwrap();
        match tokens.next() {
            Some(Err(Error::NonFinite(what))) => {
                assert!(tokens.next().is_none(), "{what}: generation went on");
                what
            }
            other => panic!("temperature {temperature}: {other:?}"),
        }
    })
}

#[test]
fn infinite_scales_in_one_tensor_fail_the_step_naming_position_and_tensor() {
    let good = tiny_bytes(&tiny());
    // The good model decodes: the check does not fire on finite logits.
    let mut s = session(&GgufFile::from_bytes(good.clone()).unwrap());
    assert_eq!(s.greedy(&[5, 6, 7], 3).unwrap().len(), 3);
    drop(s);

    // blk.0's q, k and v are one stacked matrix: the replay still names k.
    let inf = f16::INFINITY.to_le_bytes();
    let file = patched(good, "blk.0.attn_k.weight", 37, 0, &inf);
    for what in generate_errors(&file) {
        assert!(what.contains("non-finite logits at position 2"), "{what}");
        assert!(what.contains("of 512 are NaN or infinite"), "{what}");
        assert!(what.contains("came out of `blk.0.attn_k.weight`"), "{what}");
    }
}

#[test]
fn a_data_section_of_0xff_fails_the_check_and_the_step() {
    let mut bytes = tiny_bytes(&tiny());
    let data = GgufFile::from_bytes(bytes.clone()).unwrap().data_offset() as usize;
    bytes[data..].fill(0xFF);
    let file = GgufFile::from_bytes(bytes).unwrap();
    let err = check_weights(&file).unwrap_err();
    assert!(
        err.to_string()
            .contains("`token_embd.weight` (Q4_K) block 0 of 512 has scale `d` = NaN"),
        "{err}"
    );
    for what in generate_errors(&file) {
        assert!(
            what.contains("non-finite logits at position 2: 512 of 512"),
            "{what}"
        );
        assert!(
            what.contains("came out of the embedding lookup in `token_embd.weight`"),
            "{what}"
        );
    }
}
