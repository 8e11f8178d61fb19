//! One error type for the whole crate. Every variant says what went wrong and where.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A GGUF file is malformed. `offset` is the byte offset in the file where the
    /// problem was found.
    #[error("malformed GGUF at byte {offset}: {what}")]
    Gguf { offset: u64, what: String },

    #[error("unsupported tensor type: {0}")]
    UnsupportedType(String),

    #[error("metadata key `{key}`: {what}")]
    Metadata { key: String, what: String },

    #[error("quant: {0}")]
    Quant(String),

    #[error("no GPU adapter: {0}")]
    NoAdapter(String),

    #[error("device: {0}")]
    Device(String),

    #[error("out of device memory: {0}")]
    OutOfMemory(String),

    #[error("device lost: {0}")]
    DeviceLost(String),

    #[error("shader `{name}`: {what}")]
    Shader { name: String, what: String },

    /// NaN or infinity in a model's weights or in what a decode step computed.
    #[error("{0}")]
    NonFinite(String),

    #[error("{0}")]
    Invalid(String),

    /// A setting outside the values it accepts, named as the API names it
    /// (`SamplerConfig::top_p`, `LoadOptions::context`), so that a caller who exposes it
    /// under another name (the decode example's `--top-p`) can say it in its own words.
    #[error("{setting} = {value}: {expected}")]
    Setting {
        setting: &'static str,
        value: String,
        /// What it accepts, and why where that is not obvious.
        expected: String,
    },

    /// The KV cache has no room for what was asked: `needed` positions in all against
    /// the `context` it holds (`LoadOptions::context`), the model trained for `trained`.
    /// A stream that runs into the end of the context ends with this error, so a caller
    /// can tell it from a failure and stop there.
    #[error(
        "{what} needs {needed} positions, past the context of {context} (raise \
         LoadOptions::context{}; the model was trained for {trained})",
        if *.reset_helps { " or reset the session" } else { "" }
    )]
    ContextFull {
        /// What asked for the positions: `the step at position 8`, `a prompt of 12
        /// tokens after the 60 in the cache`.
        what: String,
        needed: usize,
        context: usize,
        trained: usize,
        /// Whether the session holds earlier tokens that a reset would free.
        reset_helps: bool,
    },
}

impl Error {
    pub(crate) fn gguf(offset: u64, what: impl Into<String>) -> Self {
        Error::Gguf {
            offset,
            what: what.into(),
        }
    }
}
