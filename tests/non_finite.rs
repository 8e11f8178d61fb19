//! NaN and infinity in a model: bad float hyper-parameters fail at load, naming the key
//! and value; non-finite weights fail the step that meets them, naming the position.

mod common;

use std::io::Read;

use brass::gguf::{GgufBuilder, GgufFile, MetaValue};
use brass::model::synthetic::{QuantMix, SyntheticSpec};
use brass::model::Config;
use brass::Error;

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
    }
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
