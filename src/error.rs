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
}

impl Error {
    pub(crate) fn gguf(offset: u64, what: impl Into<String>) -> Self {
        Error::Gguf {
            offset,
            what: what.into(),
        }
    }
}
