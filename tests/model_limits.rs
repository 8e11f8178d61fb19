//! Models and contexts too big for the device: refused before anything is allocated,
//! with the numbers, never an abort on a host allocation or a panic on wrapped sizes.
//! The huge files are sparse: a real header, then zeros that take no disk.

mod common;

use std::sync::Arc;

use brass::device::{Device, WgpuDevice};
use brass::gguf::{GgufBuilder, GgufFile};
use brass::model::{LoadOptions, Model};
use brass::quant::GgmlType;
use brass::Error;

struct Shape {
    dim: u64,
    ffn: u64,
    vocab: u64,
    layers: u64,
}

/// A llama of `shape` with Q4_0 matrices and every byte of data zero, written as a
/// sparse file: only the header is on disk.
fn sparse_llama(name: &str, shape: &Shape) -> (tempdir::Dir, GgufFile) {
    sparse_llama_trained_for(name, shape, 128)
}

/// [`sparse_llama`] trained for a context of `context`.
fn sparse_llama_trained_for(name: &str, shape: &Shape, context: u32) -> (tempdir::Dir, GgufFile) {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", "llama");
    for (k, v) in [
        ("block_count", shape.layers as u32),
        ("embedding_length", shape.dim as u32),
        ("feed_forward_length", shape.ffn as u32),
        ("attention.head_count", 1),
        ("attention.head_count_kv", 1),
        ("context_length", context),
    ] {
        b.set(format!("llama.{k}"), v);
    }
    let (d, f) = (shape.dim, shape.ffn);
    let q4 = GgmlType::Q4_0;
    b.add_tensor_deferred("token_embd.weight", q4, &[d, shape.vocab])
        .unwrap();
    b.add_tensor_deferred("output_norm.weight", GgmlType::F32, &[d])
        .unwrap();
    for i in 0..shape.layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        b.add_tensor_deferred(n("attn_norm"), GgmlType::F32, &[d])
            .unwrap();
        b.add_tensor_deferred(n("ffn_norm"), GgmlType::F32, &[d])
            .unwrap();
        for (t, dims) in [
            ("attn_q", [d, d]),
            ("attn_k", [d, d]),
            ("attn_v", [d, d]),
            ("attn_output", [d, d]),
            ("ffn_gate", [d, f]),
            ("ffn_up", [d, f]),
            ("ffn_down", [f, d]),
        ] {
            b.add_tensor_deferred(n(t), q4, &dims).unwrap();
        }
    }
    let dir = tempdir::Dir::new(name);
    let path = dir.path.join(format!("{name}.gguf"));
    std::fs::write(&path, b.header_bytes()).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(b.file_size()).unwrap();
    drop(file);
    let gguf = GgufFile::open(&path).unwrap();
    (dir, gguf)
}

/// A folder removed when the test ends, pass or fail.
mod tempdir {
    pub struct Dir {
        pub path: std::path::PathBuf,
    }
    impl Dir {
        pub fn new(name: &str) -> Dir {
            let path =
                std::env::temp_dir().join(format!("brass-limits-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.path).ok();
        }
    }
}

fn device() -> Arc<WgpuDevice> {
    let device = Arc::new(common::gpu());
    assert!(
        device.profile().memory_bytes.is_some(),
        "{} reports no memory size; these tests need one (any Vulkan device has it)",
        device.profile().name
    );
    device
}

/// Loads with `context`, expects an out-of-memory refusal naming `needle`, and checks
/// that nothing was left allocated.
fn refused(file: &GgufFile, context: usize, needle: &str) -> String {
    let device = device();
    let before = device.memory_in_use();
    let err = Model::from_gguf(
        device.clone(),
        file,
        &LoadOptions {
            context: Some(context),
            // These contexts pass the tiny models' trained one: allowed, so that what
            // refuses them is the device's memory.
            allow_past_trained_context: true,
            ..Default::default()
        },
    )
    .expect_err("a model too big for the device loaded");
    let msg = err.to_string();
    assert!(matches!(err, Error::OutOfMemory(_)), "{msg}");
    assert!(msg.contains(needle), "`{needle}` not in: {msg}");
    assert_eq!(device.memory_in_use(), before, "{msg}");
    msg
}

#[test]
fn a_vocabulary_of_2_pow_31_is_refused_with_its_numbers() {
    let (_dir, file) = sparse_llama(
        "vocab",
        &Shape {
            dim: 64,
            ffn: 64,
            vocab: 1 << 31,
            layers: 1,
        },
    );
    // 2^31 rows of 64 f32: 549.76 GB of embedding table.
    let msg = refused(&file, 16, "f32 embedding table 549.76 GB");
    assert!(msg.contains("needs") && msg.contains(" has "), "{msg}");
}

#[test]
fn a_hidden_size_of_2_pow_20_is_refused_with_its_numbers() {
    let (_dir, file) = sparse_llama(
        "hidden",
        &Shape {
            dim: 1 << 20,
            ffn: 64,
            vocab: 512,
            layers: 1,
        },
    );
    // Four 2^20 x 2^20 Q4_0 matrices, three 2^20 x 64, the tied embedding of 512 rows
    // (18 bytes a 32-value block) and three f32 norms.
    let weights =
        (4 * (1u64 << 40) + 3 * 64 * (1 << 20) + 512 * (1 << 20)) / 32 * 18 + 3 * 4 * (1 << 20);
    refused(
        &file,
        16,
        &format!("weights {:.2} GB", weights as f64 / 1e9),
    );
}

/// Each test its own: tests run in parallel in one process.
fn tiny(name: &str) -> (tempdir::Dir, GgufFile) {
    sparse_llama(
        name,
        &Shape {
            dim: 64,
            ffn: 64,
            vocab: 512,
            layers: 2,
        },
    )
}

#[test]
fn a_context_whose_byte_count_wraps_is_refused() {
    let (_dir, file) = tiny("wraps");
    let msg = refused(&file, 1 << 56, "more than 2^64 bytes");
    assert!(msg.contains("context 72057594037927936"), "{msg}");
}

#[test]
fn a_context_past_the_devices_memory_is_refused_with_its_numbers() {
    let (_dir, file) = tiny("past-memory");
    let memory = device().profile().memory_bytes.unwrap();
    // Keys and values of 64 f16 (the default cache) in each of 2 layers: 512 bytes a
    // position, and the RoPE table besides.
    let context = (memory / 512 + 1) as usize;
    refused(
        &file,
        context,
        &format!("with a context of {context} needs"),
    );
}

#[test]
fn a_context_past_the_binding_limit_says_how_many_positions_fit() {
    let (_dir, file) = tiny("past-binding");
    let profile = device().profile().clone();
    // One layer's RoPE table: 256 bytes a position (its f16 K cache takes 128).
    let fit = profile.usable_binding_bytes() / 256;
    let context = fit as usize + 1;
    if 1024 * context as u64 > profile.memory_bytes.unwrap() {
        eprintln!("skipped: the memory check refuses this context first");
        return;
    }
    refused(&file, context, &format!("at most {fit} positions fit"));
}

/// The same tiny model with a reasonable context loads: the checks above refuse sizes,
/// not models.
#[test]
fn the_tiny_model_with_a_normal_context_loads() {
    let (_dir, file) = tiny("normal");
    let model = Model::from_gguf(
        device(),
        &file,
        &LoadOptions {
            context: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(model.context(), 64);
}

/// With no context asked for, a model gets the context it was trained for where the
/// device holds it.
#[test]
fn the_default_context_is_the_trained_one() {
    let (_dir, file) = tiny("trained");
    let model = Model::from_gguf(device(), &file, &LoadOptions::default()).unwrap();
    assert_eq!(model.context(), 128);
    assert!(
        model
            .plan()
            .context_reason
            .contains("trained context of 128"),
        "{}",
        model.plan().context_reason
    );
}

/// A trained context the device cannot hold (2^31 positions: 256 GB of RoPE table
/// alone) defaults to the largest multiple of 256 that fits, and says why; it loads.
#[test]
fn a_trained_context_past_the_device_defaults_to_what_fits() {
    let shape = Shape {
        dim: 64,
        ffn: 64,
        vocab: 512,
        layers: 2,
    };
    let (_dir, file) = sparse_llama_trained_for("too-long", &shape, 1 << 31);
    let device = device();
    let profile = device.profile().clone();
    let model = Model::from_gguf(device, &file, &LoadOptions::default()).unwrap();
    let plan = model.plan();
    // The RoPE table (256 bytes a position) is the largest buffer bound whole.
    let by_binding = profile.usable_binding_bytes() / 256;
    assert!(
        model.context() as u64 <= by_binding,
        "{}",
        plan.context_reason
    );
    assert!(
        model.context() as u64 + 256
            > by_binding.min(
                // 90 % of memory over about 768 bytes a position, where memory binds first.
                profile.memory_bytes.unwrap() * 9 / 10 / 768
            ),
        "{}",
        plan.context_reason
    );
    assert_eq!(model.context() % 256, 0);
    assert!(
        plan.context_reason.contains("of the trained 2147483648"),
        "{}",
        plan.context_reason
    );
}

/// Load options out of range are refused by name before anything is planned or
/// allocated (no device is needed to see it): a context or a batch of 0, and a context
/// past the one the model was trained for (128 here) unless that is allowed, when the
/// plan's reason says so.
#[test]
fn load_options_out_of_range_are_refused_by_name() {
    use brass::device::DeviceProfile;
    use brass::model::plan;
    let (_dir, file) = tiny("options");
    let h200 = DeviceProfile::preset("h200").unwrap();
    let refused = |options: LoadOptions, setting: &str, value: &str, expected: &str| {
        let err = plan(&file, &h200, &options).unwrap_err();
        assert!(
            matches!(&err, Error::Setting { setting: s, value: v, expected: e }
                if *s == setting && v == value && e.contains(expected)),
            "{err}"
        );
    };
    let with = |context: Option<usize>, ubatch: Option<usize>| LoadOptions {
        context,
        ubatch,
        ..Default::default()
    };
    refused(
        with(Some(0), None),
        "LoadOptions::context",
        "0",
        "at least 1",
    );
    refused(
        with(None, Some(0)),
        "LoadOptions::ubatch",
        "0",
        "at least 1",
    );
    refused(
        with(Some(129), None),
        "LoadOptions::context",
        "129",
        "past the 128 positions the model was trained for",
    );
    assert_eq!(
        plan(&file, &h200, &with(Some(128), Some(1))).unwrap().n_ctx,
        128
    );
    let allowed = plan(
        &file,
        &h200,
        &LoadOptions {
            allow_past_trained_context: true,
            ..with(Some(129), None)
        },
    )
    .unwrap();
    assert_eq!(allowed.n_ctx, 129);
    assert!(
        allowed.context_reason.contains("past the trained 128"),
        "{}",
        allowed.context_reason
    );
}
