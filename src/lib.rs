//! brass: quantized LLM decode on GPUs through wgpu.
//!
//! The data flow is GGUF file → mmap → tensor table → device buffers → router plan →
//! one command buffer per token. See `DESIGN.md` in the shared folder and README.md.

pub mod device;
pub mod error;
pub mod gguf;
pub mod kernels;
pub mod model;
pub mod quant;
pub mod router;
pub mod sampling;
pub mod tokenizer;

pub use error::{Error, Result};
