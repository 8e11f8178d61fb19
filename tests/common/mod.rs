//! Shared by the tests: the device under test, small deterministic inputs, and the
//! reference files.
#![allow(dead_code)]

pub mod exact;

use std::path::{Path, PathBuf};

use brass::device::{AdapterChoice, Device, WgpuDevice};

/// The bit patterns of `y`, for outputs that must agree exactly.
pub fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// A file of `tests/reference/` (its README says where each came from). Tests read
/// nothing outside the checkout.
pub fn reference_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(name)
}

/// A decode reference of `tests/reference/` (its README gives the shape): the prompt,
/// the top-5 logits after every processed token, and the greedy tokens.
#[derive(serde::Deserialize)]
pub struct Reference {
    pub prompt_ids: Vec<u32>,
    pub steps: Vec<Step>,
    pub generated: Vec<u32>,
}

/// The state after processing the token at `pos`: its top-5 (id, logit).
#[derive(serde::Deserialize)]
pub struct Step {
    pub pos: usize,
    pub top: Vec<(u32, f32)>,
}

/// The decode reference `name` of `tests/reference/`, parsed.
pub fn reference(name: &str) -> Reference {
    let path = reference_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON file of `tests/reference/`, parsed.
pub fn reference_json(name: &str) -> serde_json::Value {
    let path = reference_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON array of token ids.
pub fn token_ids(value: &serde_json::Value) -> Vec<u32> {
    let ids = value.as_array().expect("an array of token ids");
    ids.iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

/// Every case of the tokenizer cases file `cases_file` (`count` of them, `text` and
/// llama.cpp's `ids`) encoded as llama.cpp did; returns the cases for more checks.
pub fn assert_tokenizer_parity(
    tok: &brass::tokenizer::Tokenizer,
    cases_file: &str,
    count: usize,
) -> Vec<(String, Vec<u32>)> {
    let cases: Vec<(String, Vec<u32>)> = reference_json(cases_file)["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            (
                case["text"].as_str().unwrap().to_owned(),
                token_ids(&case["ids"]),
            )
        })
        .collect();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(text, expected)| {
            let got = tok.encode(text, true, true);
            (&got != expected)
                .then(|| format!("{text:?}\n   expected {expected:?}\n        got {got:?}"))
        })
        .collect();
    eprintln!(
        "{cases_file}: {}/{} cases match llama.cpp",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(cases.len(), count);
    cases
}

/// The adapter the GPU tests run on: `BRASS_ADAPTER` if set, else the best one wgpu
/// finds (lavapipe in CI). No adapter is a failure, not a skip: CI installs lavapipe.
pub fn gpu() -> WgpuDevice {
    let device = WgpuDevice::open(&AdapterChoice::from_env()).unwrap_or_else(|e| {
        panic!("GPU tests need an adapter (apt-get install mesa-vulkan-drivers): {e}")
    });
    eprintln!(
        "adapter: {} (subgroups {}..{})",
        device.profile().name,
        device.profile().subgroup_min,
        device.profile().subgroup_max
    );
    device
}

/// xorshift64*: deterministic test data without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}
