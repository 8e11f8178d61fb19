//! What a model takes on the device, counted from the file and the context before
//! anything is allocated, so that a model or context too big for the device is refused
//! with its numbers instead of failing (or aborting on a host allocation) half way.

use crate::device::DeviceProfile;
use crate::gguf::GgufFile;
use crate::kernels::attention::{KvType, PART_STRIDE_CHUNKS};
use crate::{Error, Result};

use super::config::{output_tensor, Config};
use super::layout::{Offsets, Widths};

/// Device bytes a model needs, by what they hold: an estimate within a few percent.
/// Buffers are padded to 16 bytes and shared activations to the binding alignment,
/// which it leaves out; a tensor the forward pass does not read is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    /// The matrices as the file stores them, and the norm weights.
    pub weights: u64,
    /// The token embedding table, dequantized to f32.
    pub embedding: u64,
    /// Keys and values of every layer for the whole context, for every sequence.
    pub kv_cache: u64,
    /// The sequences `kv_cache` and the decode rows are counted for
    /// ([`LoadOptions::sequences`](super::LoadOptions::sequences)).
    pub sequences: usize,
    /// The format `kv_cache` is counted in.
    pub kv: KvType,
    /// Activations (a decode step's rows, and prefill's batch with `with_prefill`),
    /// logits, attention partials and the RoPE table.
    pub scratch: u64,
}

impl MemoryNeed {
    /// Counts with checked arithmetic: a size past 2^64 bytes is an error that names it.
    /// The attention partials are counted for `profile`'s most chunks; the KV cache, and
    /// a decode row with its logits, once per sequence of `sequences`.
    pub fn of(
        config: &Config,
        file: &GgufFile,
        (n_ctx, sequences): (usize, usize),
        kv: KvType,
        profile: &DeviceProfile,
    ) -> Result<MemoryNeed> {
        let too_big = |what: &str| {
            Error::OutOfMemory(format!(
                "{what} takes more than 2^64 bytes (context {n_ctx}, {} layers, vocabulary {}, \
                 hidden size {})",
                config.n_layers, config.vocab, config.dim
            ))
        };
        let product = |what: &str, factors: &[u64]| -> Result<u64> {
            factors
                .iter()
                .try_fold(1u64, |n, &f| n.checked_mul(f))
                .ok_or_else(|| too_big(what))
        };
        let sum = |what: &str, terms: &[u64]| -> Result<u64> {
            terms
                .iter()
                .try_fold(0u64, |n, &t| n.checked_add(t))
                .ok_or_else(|| too_big(what))
        };
        let (dim, vocab, ctx) = (config.dim as u64, config.vocab as u64, n_ctx as u64);
        let tied = output_tensor(file) == "token_embd.weight";
        let mut weights = 0u64;
        for t in file.tensors() {
            // Parsing checked that every tensor's data lies inside the file.
            let bytes = file.tensor_data(t).len() as u64;
            let uploaded = match t.name.as_str() {
                // Only the f32 table (`embedding`) is uploaded, unless it is the lm-head too.
                "token_embd.weight" if !tied => 0,
                _ if t.dims.len() == 1 => product("a norm", &[t.n_elements(), 4])?,
                _ => bytes,
            };
            weights = sum("the weights", &[weights, uploaded])?;
        }
        let embedding = product("the f32 embedding table", &[vocab, dim, 4])?;
        let kv_cache = product(
            "the KV cache",
            &[
                config.n_layers as u64,
                2,
                ctx,
                sequences as u64,
                config.n_kv_heads as u64,
                kv.row_bytes(config.head_dim as u64),
            ],
        )?;
        // At most one chunk per workgroup of the target, each (m, l) and head_dim floats
        // per query head, in slots rounded up to whole strides.
        let chunks = profile
            .tuning
            .attention_workgroups
            .max(1)
            .next_multiple_of(PART_STRIDE_CHUNKS);
        // A decode step's row of each buffer of the forward pass.
        let widths = Widths::of(config, &Offsets::of(config, profile));
        // A second table for the local layers' RoPE base.
        let rope_tables = 1 + config.sliding_window.is_some() as u64;
        let scratch = sum(
            "the scratch buffers",
            &[
                product(
                    "the decode rows",
                    &[widths.bytes_per_row(), sequences as u64],
                )?,
                product(
                    "the attention partials",
                    &[config.n_heads as u64, chunks, config.head_dim as u64 + 2, 4],
                )?,
                product("the logits", &[vocab, 4, sequences as u64])?,
                product(
                    "the RoPE tables",
                    &[rope_tables, ctx, config.rope_dim as u64 / 2, 2, 4],
                )?,
            ],
        )?;
        let need = MemoryNeed {
            weights,
            embedding,
            kv_cache,
            sequences,
            kv,
            scratch,
        };
        need.checked_total()?;
        Ok(need)
    }

    /// With `bytes` more of scratch: prefill's batch buffers.
    pub fn with_prefill(mut self, bytes: u64) -> Result<MemoryNeed> {
        self.scratch = self.scratch.checked_add(bytes).ok_or_else(|| {
            Error::OutOfMemory(format!("prefill's batch buffers take {bytes} bytes"))
        })?;
        self.checked_total()?;
        Ok(self)
    }

    fn checked_total(&self) -> Result<u64> {
        [self.embedding, self.kv_cache, self.scratch]
            .iter()
            .try_fold(self.weights, |n, &t| n.checked_add(t))
            .ok_or_else(|| {
                Error::OutOfMemory(format!("the model needs more than 2^64 bytes: {self}"))
            })
    }

    /// All of it.
    pub fn total(&self) -> u64 {
        self.checked_total().unwrap_or(u64::MAX)
    }

    /// Bytes per position of the largest buffer one dispatch binds whole: a layer's K
    /// cache, or the RoPE table.
    pub fn per_position_binding(config: &Config, kv: KvType) -> u64 {
        (config.n_kv_heads as u64 * kv.row_bytes(config.head_dim as u64))
            .max(config.rope_dim as u64 * 4)
    }

    /// Refuses a model that needs more memory than the device has, where the device
    /// says how much it has, or a context whose per-layer buffers (the K and V caches
    /// of every sequence, the RoPE table), each bound whole by one dispatch, pass the
    /// device's binding limit.
    pub fn check_fits(
        &self,
        profile: &DeviceProfile,
        config: &Config,
        n_ctx: usize,
        kv: KvType,
    ) -> Result<()> {
        let sequences = match self.sequences {
            1 => String::new(),
            n => format!(" for each of {n} sequences"),
        };
        if let Some(memory) = profile.memory_bytes {
            if self.total() > memory {
                return Err(Error::OutOfMemory(format!(
                    "the model with a context of {n_ctx}{sequences} needs {} and {} has {}: \
                     {self}",
                    gb(self.total()),
                    profile.name,
                    gb(memory)
                )));
            }
        }
        let per_position = Self::per_position_binding(config, kv);
        let binding = profile.usable_binding_bytes();
        // Cannot overflow: `of` counted the KV cache, which is at least this.
        let positions = n_ctx as u64 * self.sequences as u64;
        if per_position * positions > binding {
            return Err(Error::OutOfMemory(format!(
                "a context of {n_ctx}{sequences} makes a layer's K cache (or RoPE table) {} \
                 bytes in {kv}, past {}'s {binding}-byte binding limit: at most {} positions \
                 fit in all, since attention binds every sequence's together",
                per_position * positions,
                profile.name,
                binding / per_position
            )));
        }
        Ok(())
    }
}

fn gb(bytes: u64) -> String {
    match bytes {
        0..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.2} GB", bytes as f64 / 1e9),
    }
}

impl std::fmt::Display for MemoryNeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "weights {}, f32 embedding table {}, KV cache {} ({}{}), scratch {}",
            gb(self.weights),
            gb(self.embedding),
            gb(self.kv_cache),
            self.kv,
            match self.sequences {
                1 => String::new(),
                n => format!(", {n} sequences"),
            },
            gb(self.scratch)
        )
    }
}
