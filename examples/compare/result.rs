//! The result file, `brass-compare/1`: plain serde types so `--merge` can read back
//! what any brass version of the same format wrote.

use brass::device::DeviceProfile;
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "brass-compare/1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompareFile {
    /// Always [`FORMAT`]; a reader refuses anything else.
    pub format: String,
    pub brass_version: String,
    /// `git rev-parse HEAD` of the source tree, when known.
    pub git_commit: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    pub quick: bool,
    pub devices: Vec<DeviceRun>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceRun {
    pub profile: DeviceProfile,
    /// From the profile, else brass's table of published figures (report only).
    pub vendor_peak_gbps: Option<f64>,
    pub probe: Probe,
    pub matvec: Vec<MatvecCase>,
    pub decode: Option<Decode>,
    /// Decode with tokens already in the KV cache (`--depth`).
    #[serde(default)]
    pub decode_at_depth: Vec<Decode>,
    /// Prompt processing (`--pp`), like llama-bench's `-p`.
    #[serde(default)]
    pub prompt: Vec<PromptRun>,
    /// Decode of many sequences at once (`--parallel`).
    #[serde(default)]
    pub parallel: Vec<ParallelRun>,
    /// Why a part was skipped (no timestamps, a failed load, ...).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    pub gbps: f64,
    pub median_gbps: f64,
    pub bytes: u64,
    pub runs: usize,
    pub timer: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MatvecCase {
    pub shape: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub family: String,
    pub kernel: String,
    pub m: u64,
    pub k: u64,
    /// Weights, x and y.
    pub bytes: u64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// `bytes / median`.
    pub gbps: f64,
    pub pct_of_probe: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Decode {
    /// File name, or `synthetic:<preset>[:<layers>L]`.
    pub model: String,
    /// Tokens already in the KV cache when the timed steps start (llama-bench's `-d`).
    #[serde(default)]
    pub depth: usize,
    /// Whether those tokens went through prefill (else their cache rows were left as
    /// allocated: the same work for decode).
    #[serde(default)]
    pub depth_prefilled: bool,
    /// KV-cache bytes one timed step reads (its middle one).
    #[serde(default)]
    pub kv_bytes_per_token: u64,
    pub layers: usize,
    pub weight_bytes_per_token: u64,
    pub tokens: usize,
    /// Greedy decode, one token read back per step (what `Session` does).
    pub tok_per_s: f64,
    pub ms_per_token: f64,
    /// `ms_per_token` split by the profiled step's shares (see `lm_head_method`).
    pub lm_head_ms: f64,
    pub rest_ms: f64,
    /// GPU time of the profiled step, every dispatch in its own timed pass (so above
    /// the real step time by the pass overhead).
    pub profile_total_ms: f64,
    pub profile_lm_head_ms: f64,
    /// `pipeline`: the lm-head's pipeline is used by no other tensor, its profiled
    /// time is exact. `isolated`: it shares a pipeline, so it was timed alone (same
    /// route, random weights) and the rest is the profile total minus that.
    pub lm_head_method: String,
    pub lm_head_tensor: String,
    pub lm_head_type: String,
    /// `weight_bytes_per_token / ms_per_token`.
    pub effective_gbps: f64,
    pub pct_of_probe: f64,
    /// The KV cache's format.
    #[serde(default)]
    pub kv: String,
    /// Attention's GPU time in the profiled step (decode and combine dispatches).
    #[serde(default)]
    pub attention_ms: f64,
    /// `kv_bytes_per_token / attention_ms` against the probe.
    #[serde(default)]
    pub attention_pct_of_probe: f64,
    /// Per pipeline: (name, ms, dispatches) of the profiled step, slowest first.
    pub pipelines: Vec<(String, f64, usize)>,
}

/// Published peak memory bandwidth, GB/s, for devices whose profile has none: matched
/// by case-insensitive substring of the adapter name, first match wins.
const VENDOR_PEAKS: &[(&str, f64)] = &[
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("A100", 2039.0),
    ("RTX 4090", 1008.0),
    ("RTX 3090", 936.0),
    ("M4 Max", 546.0),
    ("M3 Max", 400.0),
    ("M2 Max", 400.0),
    ("9070 XT", 644.0),
    ("7900 XTX", 960.0),
    ("MI300X", 5300.0),
];

pub fn vendor_peak(profile: &DeviceProfile) -> Option<f64> {
    let name = profile.name.to_lowercase();
    profile.vendor_peak_gbps.or_else(|| {
        VENDOR_PEAKS
            .iter()
            .find(|(key, _)| name.contains(&key.to_lowercase()))
            .map(|&(_, gbps)| gbps)
    })
}

/// Decode of many sequences at once (`Engine`), as llama-batched-bench's S_TG: every
/// sequence's prompt in, then steps of one token for each, timed while all run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ParallelRun {
    pub sequences: usize,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// From the first prompt's start to every sequence's first token.
    pub prompt_seconds: f64,
    /// Decode steps timed (every sequence running) and their time.
    pub steps: usize,
    pub decode_seconds: f64,
    /// Tokens per second of all sequences together, and of each.
    pub aggregate_tok_per_s: f64,
    pub per_sequence_tok_per_s: f64,
    /// One decode pass of all the sequences timed per dispatch (`Engine::profile_pass`):
    /// (pipeline, ms, dispatches), slowest first. Absent in results written before it.
    #[serde(default)]
    pub pass_profile: Vec<(String, f64, usize)>,
}

/// Prompt processing: `tokens` prompt tokens into an empty cache, timed to the GPU's
/// end, as llama-bench's ppN.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PromptRun {
    pub tokens: usize,
    /// How the plan processes prompts (`Plan::prefill`).
    pub route: String,
    pub seconds: f64,
    pub tokens_per_second: f64,
}
