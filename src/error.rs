//! One error type for the whole crate. Every variant says what went wrong and where.

use std::path::PathBuf;

/// `std::result::Result` with [`Error`] as its default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in brass. Each variant's message (its `Display`) names
/// what is wrong, with the numbers, and is meant to be shown as it is; match on the
/// variant where a caller can do something about it.
///
/// # Examples
///
/// A stream that reaches the end of the KV cache ends with [`Error::ContextFull`], so
/// a caller can keep what was generated and stop there rather than fail:
///
/// ```no_run
/// use std::sync::Arc;
///
/// use brass::device::{AdapterChoice, WgpuDevice};
/// use brass::model::{LoadOptions, Session};
/// use brass::sampling::{Sampler, SamplerConfig};
/// use brass::Error;
///
/// # fn main() -> brass::Result<()> {
/// let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// let options = LoadOptions { context: Some(64), ..LoadOptions::default() };
/// let mut session = Session::load(device, brass::hub::default_model_path()?, &options)?;
///
/// // Room for 64 positions and a request for 1,000 tokens: the stream runs out first.
/// let greedy = Sampler::new(SamplerConfig::greedy());
/// let mut text = String::new();
/// for token in session.generate("Once upon a time", 1000, greedy)? {
///     match token {
///         Ok(token) => text.push_str(&token.text),
///         Err(Error::ContextFull { context, .. }) => {
///             eprintln!("stopped at the end of the {context}-position context");
///             break;
///         }
///         Err(e) => return Err(e),
///     }
/// }
/// println!("{text}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read, written or created.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// A GGUF file is malformed. `offset` is the byte offset in the file where the
    /// problem was found.
    #[error("malformed GGUF at byte {offset}: {what}")]
    Gguf {
        /// Bytes from the start of the file.
        offset: u64,
        /// What is wrong there.
        what: String,
    },

    /// A tensor type brass cannot read, or cannot do what was asked with (dequantize,
    /// quantize, route to a kernel); the message names the tensor where there is one.
    #[error("unsupported tensor type: {0}")]
    UnsupportedType(String),

    /// A metadata key a model needs is missing, of the wrong type, or out of range.
    #[error("metadata key `{key}`: {what}")]
    Metadata {
        /// The GGUF key (`llama.attention.head_count`).
        key: String,
        /// What is wrong with it.
        what: String,
    },

    /// Quantized data and its length disagree: bytes that are not whole blocks, or
    /// values that do not fill the room given for them.
    #[error("quant: {0}")]
    Quant(String),

    /// No adapter matches the [`AdapterChoice`](crate::device::AdapterChoice), or wgpu
    /// found none at all.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),

    /// The device refused or failed an operation: it could not be opened, a wait timed
    /// out (a hang), a read-back never completed, or wgpu reported a validation error.
    #[error("device: {0}")]
    Device(String),

    /// The device has no room for what was asked, reported by the driver or refused up
    /// front by brass where the model or its context needs more memory than the
    /// device has ([`MemoryNeed`](crate::model::MemoryNeed)).
    #[error("out of device memory: {0}")]
    OutOfMemory(String),

    /// The device was lost (a driver reset or crash); nothing on it can be used again,
    /// and a new device must be opened.
    #[error("device lost: {0}")]
    DeviceLost(String),

    /// A kernel did not build: naga could not parse or translate its WGSL, or the
    /// driver refused the pipeline.
    #[error("shader `{name}`: {what}")]
    Shader {
        /// The pipeline's name ([`PipelineDesc::name`](crate::device::PipelineDesc::name)).
        name: String,
        /// naga's or the driver's message.
        what: String,
    },

    /// NaN or infinity in a model's weights or in what a decode step computed.
    #[error("{0}")]
    NonFinite(String),

    /// A request the API cannot carry out as asked: an argument out of range (a token
    /// id outside the vocabulary, an empty prompt), files that disagree (a tokenizer
    /// and an embedding of different sizes), or a call in the wrong state.
    #[error("{0}")]
    Invalid(String),

    /// A setting outside the values it accepts, named as the API names it
    /// (`SamplerConfig::top_p`, `LoadOptions::context`), so that a caller who exposes it
    /// under another name (the decode example's `--top-p`) can say it in its own words.
    #[error("{setting} = {value}: {expected}")]
    Setting {
        /// The setting, as `Type::field` (`SamplerConfig::top_p`).
        setting: &'static str,
        /// The value given, as `Display` writes it.
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
        /// Positions needed in all, those already in the cache included.
        needed: usize,
        /// Positions the KV cache holds ([`Model::context`](crate::model::Model::context)).
        context: usize,
        /// Positions the model was trained for
        /// ([`Config::context_length`](crate::model::Config::context_length)).
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
