//! The GGUF reader against the default model, SmolLM2-135M-Instruct Q4_1.
//!
//! The model is taken from `$BRASS_MODEL`, else `~/.cache/brass/`. When neither is
//! there the test prints a note and passes, so that machines without the model can
//! still run the suite; CI fetches it (`.ci/run`: `decode -- --fetch-only`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use brass::gguf::GgufFile;
use brass::quant::GgmlType;

const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BRASS_MODEL") {
        // An explicit path that does not exist is a mistake, not a reason to skip.
        return Some(PathBuf::from(path));
    }
    let path = PathBuf::from(std::env::var_os("HOME")?)
        .join(".cache/brass")
        .join(FILE_NAME);
    path.exists().then_some(path)
}

fn open_model() -> Option<GgufFile> {
    let Some(path) = model_path() else {
        eprintln!("skipping: {FILE_NAME} not found (set BRASS_MODEL or put it in ~/.cache/brass/)");
        return None;
    };
    let start = Instant::now();
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    eprintln!(
        "opened and parsed {} in {:?}",
        path.display(),
        start.elapsed()
    );
    Some(file)
}

#[test]
fn header_and_hyperparameters() {
    let Some(f) = open_model() else { return };
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(f.get_u32("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(f.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(f.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(f.get_u64("llama.context_length").unwrap(), 8192);
    assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 100_000.0);
    assert_eq!(
        f.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert_eq!(f.get_u32("general.file_type").unwrap(), 3); // MOSTLY_Q4_1
}

#[test]
fn tokenizer_metadata() {
    let Some(f) = open_model() else { return };
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(f.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 1);
    assert_eq!(f.get_u32("tokenizer.ggml.eos_token_id").unwrap(), 2);
    assert!(!f.get_bool("tokenizer.ggml.add_bos_token").unwrap());

    let tokens = f
        .get_array("tokenizer.ggml.tokens")
        .unwrap()
        .as_strs()
        .unwrap();
    assert_eq!(tokens.len(), 49_152);
    assert_eq!(tokens[..3], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
    let types = f
        .get_array("tokenizer.ggml.token_type")
        .unwrap()
        .as_i32s()
        .unwrap();
    assert_eq!(types.len(), 49_152);
    let merges = f
        .get_array("tokenizer.ggml.merges")
        .unwrap()
        .as_strs()
        .unwrap();
    assert_eq!(merges.len(), 48_900);
    assert_eq!(merges[0], "Ġ t");
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));
}

#[test]
fn tensor_table() {
    let Some(f) = open_model() else { return };
    assert_eq!(f.tensors().len(), 272);

    let mut per_type = BTreeMap::new();
    for t in f.tensors() {
        *per_type.entry(t.ty).or_insert(0) += 1;
    }
    assert_eq!(
        per_type,
        BTreeMap::from([
            (GgmlType::F32, 61),
            (GgmlType::Q4_1, 210),
            (GgmlType::Q8_0, 1)
        ])
    );

    let shape = |name: &str| {
        let t = f.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        (t.ty, t.dims.clone())
    };
    assert_eq!(
        shape("token_embd.weight"),
        (GgmlType::Q8_0, vec![576, 49_152])
    );
    assert_eq!(
        shape("blk.0.ffn_gate.weight"),
        (GgmlType::Q4_1, vec![576, 1536])
    );
    assert_eq!(
        shape("blk.0.ffn_down.weight"),
        (GgmlType::Q4_1, vec![1536, 576])
    );
    assert_eq!(
        shape("blk.0.attn_k.weight"),
        (GgmlType::Q4_1, vec![576, 192])
    );
    assert_eq!(
        shape("blk.29.attn_q.weight"),
        (GgmlType::Q4_1, vec![576, 576])
    );
    assert_eq!(shape("output_norm.weight"), (GgmlType::F32, vec![576]));
    // The embedding doubles as the lm-head.
    assert!(f.tensor("output.weight").is_none());

    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!((embd.cols(), embd.rows()), (576, 49_152));
    assert_eq!(embd.n_bytes, 49_152 * 576 / 32 * 34);
}

#[test]
fn tensor_data_covers_the_data_section() {
    let Some(f) = open_model() else { return };
    let mut end = 0;
    for t in f.tensors() {
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes, "{}", t.name);
        // The map is page aligned, so in-file alignment is address alignment.
        assert_eq!(data.as_ptr() as usize % 32, 0, "{}", t.name);
        end = end.max(t.offset + t.n_bytes);
    }
    assert_eq!(f.data_offset() + end, f.file_size());

    // The first F32 norm weight holds ordinary values.
    let norm = f.tensor("blk.0.attn_norm.weight").unwrap();
    let values: &[f32] = bytemuck::cast_slice(f.tensor_data(norm));
    assert_eq!(values.len(), 576);
    assert!(values.iter().all(|v| v.is_finite()));
}
