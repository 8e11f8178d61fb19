//! The model loader's errors on a tiny hand-built llama: each names what is wrong.

mod common;

use std::sync::Arc;

use brass::device::Device;
use brass::gguf::{GgufBuilder, GgufFile};
use brass::model::{Input, LoadOptions, Model};
use brass::quant::GgmlType;
use brass::Error;

const DIM: u64 = 64;
const FFN: u64 = 128;
const VOCAB: u64 = 40;

/// A one-layer llama with F32 weights; `q_type` is the type of `blk.0.attn_q.weight`.
fn tiny(arch: &str, q_type: GgmlType) -> GgufFile {
    tiny_without(arch, q_type, "")
}

/// `tiny` without the tensor named `missing`.
fn tiny_without(arch: &str, q_type: GgmlType, missing: &str) -> GgufFile {
    GgufFile::from_bytes(tiny_builder(arch, q_type, missing).to_bytes()).unwrap()
}

fn tiny_builder(arch: &str, q_type: GgmlType, missing: &str) -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", arch);
    for (k, v) in [
        ("block_count", 1u32),
        ("embedding_length", DIM as u32),
        ("feed_forward_length", FFN as u32),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("context_length", 128),
    ] {
        b.set(format!("{arch}.{k}"), v);
    }
    let mut rng = common::Rng::new(3);
    let mut f32_tensor = |b: &mut GgufBuilder, name: &str, dims: &[u64]| {
        if name == missing {
            return;
        }
        let n = dims.iter().product::<u64>() as usize;
        let data: Vec<f32> = rng.vec(n);
        b.add_tensor(
            name,
            GgmlType::F32,
            dims,
            bytemuck::cast_slice::<f32, u8>(&data).to_vec(),
        )
        .unwrap();
    };
    f32_tensor(&mut b, "token_embd.weight", &[DIM, VOCAB]);
    f32_tensor(&mut b, "output_norm.weight", &[DIM]);
    f32_tensor(&mut b, "blk.0.attn_norm.weight", &[DIM]);
    f32_tensor(&mut b, "blk.0.ffn_norm.weight", &[DIM]);
    let kv = DIM / 2;
    for (name, dims) in [
        ("attn_k", [DIM, kv]),
        ("attn_v", [DIM, kv]),
        ("attn_output", [DIM, DIM]),
        ("ffn_gate", [DIM, FFN]),
        ("ffn_up", [DIM, FFN]),
        ("ffn_down", [FFN, DIM]),
    ] {
        f32_tensor(&mut b, &format!("blk.0.{name}.weight"), &dims);
    }
    let q_bytes = q_type.bytes_for(DIM * DIM).unwrap() as usize;
    b.add_tensor(
        "blk.0.attn_q.weight",
        q_type,
        &[DIM, DIM],
        vec![0u8; q_bytes],
    )
    .unwrap();
    b
}

fn load(file: &GgufFile) -> brass::Result<Model> {
    load_on(Arc::new(common::gpu()), file)
}

fn load_on(device: Arc<dyn Device>, file: &GgufFile) -> brass::Result<Model> {
    Model::from_gguf(
        device,
        file,
        &LoadOptions {
            context: Some(8),
            ..Default::default()
        },
    )
}

#[test]
fn a_tiny_llama_runs_and_stops_at_its_context() {
    let model = load(&tiny("llama", GgmlType::F32)).unwrap();
    // Q, K, V share a type and so do gate and up: each group is one stacked matrix.
    let names: Vec<String> = model.plan().matrices().map(|m| m.name()).collect();
    assert_eq!(
        names,
        [
            "blk.0.attn_q.weight + blk.0.attn_k.weight + blk.0.attn_v.weight",
            "blk.0.attn_output.weight",
            "blk.0.ffn_gate.weight + blk.0.ffn_up.weight",
            "blk.0.ffn_down.weight",
            "token_embd.weight",
        ]
    );
    for pos in 0..8 {
        let logits = model.forward_logits(Input::Token(pos as u32), pos).unwrap();
        assert_eq!(logits.len(), VOCAB as usize);
        assert!(
            logits.iter().all(|v| v.is_finite()),
            "pos {pos}: {logits:?}"
        );
    }
    let err = model.forward(Input::Previous, 8).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ContextFull {
                needed: 9,
                context: 8,
                trained: 128,
                ..
            }
        ) && err.to_string().contains("raise LoadOptions::context"),
        "{err}"
    );
    let err = model.forward(Input::Token(VOCAB as u32), 0).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
}

#[test]
fn an_unsupported_architecture_is_named() {
    let err = load(&tiny("gpt2", GgmlType::F32)).unwrap_err().to_string();
    assert!(err.contains("unsupported architecture `gpt2`"), "{err}");
}

#[test]
fn an_unsupported_tensor_type_names_the_tensor() {
    let err = load(&tiny("llama", GgmlType::BF16)).unwrap_err();
    assert!(matches!(err, Error::UnsupportedType(_)), "{err}");
    assert!(err.to_string().contains("blk.0.attn_q.weight"), "{err}");
}

/// An app that keeps its device loses no memory (buffers and pipelines) to a load that
/// fails half way (here at the first layer's attn_q, after the embeddings and a norm are
/// on the device) nor to a model it drops.
#[test]
fn a_failed_load_and_a_dropped_model_give_their_memory_back() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let before = device.memory_in_use();
    let err = load_on(device.clone(), &tiny("llama", GgmlType::BF16)).unwrap_err();
    assert!(matches!(err, Error::UnsupportedType(_)), "{err}");
    assert_eq!(device.memory_in_use(), before, "after the failed load");
    let model = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
    let loaded = device.memory_in_use();
    assert!(
        loaded.bytes >= (VOCAB * DIM * 4) * 2 && loaded.buffers > before.buffers,
        "a loaded model holds at least its embeddings and lm-head: {loaded:?}"
    );
    model.forward_logits(Input::Token(1), 0).unwrap();
    // Pipelines are made by the first step that dispatches them.
    let stepped = device.memory_in_use();
    assert!(stepped.pipelines > before.pipelines, "{stepped:?}");
    drop(model);
    assert_eq!(device.memory_in_use(), before, "after dropping the model");
}

/// A load that fails half way (here at the missing output norm) leaves no pipeline
/// behind: the device's ledger keeps nothing of it to list as never dispatched. A
/// model makes its pipelines as its passes first dispatch them, so one that has not
/// run holds none, and a model's audit covers its own pipelines only: the same kernels
/// made by another model on the same device are that model's.
#[test]
fn a_failed_loads_pipelines_go_and_audits_are_per_model() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let before = device.memory_in_use().pipelines;
    let broken = tiny_without("llama", GgmlType::F32, "output_norm.weight");
    let err = load_on(device.clone(), &broken).unwrap_err();
    assert!(err.to_string().contains("output_norm.weight"), "{err}");
    assert_eq!(device.memory_in_use().pipelines, before);
    assert!(device.ledger().defects().is_empty(), "{}", device.ledger());

    let idle = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
    let model = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
    let other = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
    for pos in 0..2 {
        model.forward_logits(Input::Token(3), pos).unwrap();
    }
    other.forward_logits(Input::Token(3), 0).unwrap();
    let audit = model.audit();
    assert!(audit.defects().is_empty(), "{audit}");
    assert!(audit.total_dispatches() > 0 && !audit.entries.is_empty());
    assert!(idle.audit().entries.is_empty(), "{}", idle.audit());
    // The same kernels, each model's own pipelines: `model` ran two steps, `other` one.
    let others = other.audit();
    assert_eq!(others.entries.len(), audit.entries.len());
    assert_eq!(2 * others.total_dispatches(), audit.total_dispatches());
    assert!(device.ledger().defects().is_empty(), "{}", device.ledger());
}

/// A prompt longer than the context is refused before anything runs, and the session
/// carries on as if it had not been asked.
#[test]
fn a_prompt_longer_than_the_context_is_refused_and_loses_nothing() {
    use brass::model::Session;
    use brass::tokenizer::{Tokenizer, TokenizerData};
    let model = load(&tiny("llama", GgmlType::F32)).unwrap();
    let tokenizer = || {
        let tokens = (0..VOCAB).map(|i| format!("t{i}")).collect();
        Tokenizer::new(TokenizerData::bpe(tokens, Vec::new(), "default")).unwrap()
    };
    let mut session = Session::new(model, tokenizer()).unwrap();
    session.greedy(&[1, 2, 3], 2).unwrap();
    let at = session.position();
    let err = session.greedy(&[1; 9], 1).unwrap_err();
    // The 9 after the 5 in the cache (3 prompt tokens, 2 generated).
    assert!(
        matches!(
            err,
            Error::ContextFull {
                needed: 14,
                context: 8,
                reset_helps: true,
                ..
            }
        ) && err.to_string().contains("or reset the session"),
        "{err}"
    );
    assert_eq!(session.position(), at);
    let after_refusal = session.greedy(&[4], 2).unwrap();

    // The same conversation without the refused prompt.
    let mut plain =
        Session::new(load(&tiny("llama", GgmlType::F32)).unwrap(), tokenizer()).unwrap();
    plain.greedy(&[1, 2, 3], 2).unwrap();
    assert_eq!(plain.greedy(&[4], 2).unwrap(), after_refusal);
}

/// A model file that changes between open and load (here it grows) is refused: the
/// load would otherwise upload a mix of old and new bytes.
#[test]
fn a_file_changed_after_open_is_refused_by_the_load() {
    let dir = std::env::temp_dir().join(format!("brass-model-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("changed.gguf");
    std::fs::write(&path, tiny("llama", GgmlType::F32).as_bytes()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let mut append = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut append, &[0u8; 64]).unwrap();
    drop(append);
    let err = load(&file).unwrap_err().to_string();
    assert!(err.contains("changed while brass had it open"), "{err}");
    std::fs::remove_file(&path).unwrap();
}

/// BPE tokens t0, t1, ... without merges.
fn tokenizer_of(n: u64) -> brass::tokenizer::Tokenizer {
    use brass::tokenizer::{Tokenizer, TokenizerData};
    let tokens = (0..n).map(|i| format!("t{i}")).collect();
    Tokenizer::new(TokenizerData::bpe(tokens, Vec::new(), "default")).unwrap()
}

/// A tokenizer with fewer tokens than the embedding has rows would let the model
/// generate ids it cannot decode; one with more, encode ids the model has no row for.
/// Both are refused where model and tokenizer meet, with both counts.
#[test]
fn a_tokenizer_that_does_not_match_the_embedding_is_refused() {
    use brass::model::Session;
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    for tokens in [VOCAB - 1, VOCAB + 1] {
        let model = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
        let err = Session::new(model, tokenizer_of(tokens))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("tokenizer has {tokens} tokens"))
                && err.contains(&format!("has {VOCAB} rows")),
            "{err}"
        );
    }
    let model = load_on(device.clone(), &tiny("llama", GgmlType::F32)).unwrap();
    Session::new(model, tokenizer_of(VOCAB)).unwrap();

    // Session::load checks before uploading anything.
    let mut b = tiny_builder("llama", GgmlType::F32, "");
    let tokens: Vec<String> = (0..VOCAB - 1).map(|i| format!("t{i}")).collect();
    b.set("tokenizer.ggml.model", "gpt2")
        .set("tokenizer.ggml.pre", "default")
        .set_array(
            "tokenizer.ggml.tokens",
            tokens.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .set_array("tokenizer.ggml.merges", Vec::<&str>::new());
    let dir = std::env::temp_dir().join(format!("brass-model-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short-tokenizer.gguf");
    std::fs::write(&path, b.to_bytes()).unwrap();
    let before = device.memory_in_use();
    let err = Session::load(device.clone(), &path, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("tokenizer has {} tokens", VOCAB - 1))
            && err.contains(&format!("has {VOCAB} rows")),
        "{err}"
    );
    assert_eq!(device.memory_in_use(), before);
    std::fs::remove_file(&path).unwrap();
}
