//! The forward pass's buffer layout, read by both the memory count (`MemoryNeed`) and
//! the allocation: where q, k, v and gate, up sit in their shared rows, each buffer's
//! bytes per token, and the buffers a decode step (one row) and a prefill batch
//! (`ubatch` rows) are made of.

use serde::Serialize;

use super::config::Config;
use crate::device::{BufferUse, DeviceProfile, OwnedBuffers, Slice};
use crate::kernels::attention::{
    AttentionLaunch, PartBytes, Partials, ATTENTION_ROW_BYTES, PREFILL_STATE_BYTES,
};
use crate::kernels::matvec::Q8_GROUP_BYTES;
use crate::kernels::ops::{ARGMAX_SCRATCH_WORDS, ARGMAX_TOKEN_WORDS};
use crate::Result;

/// Where q, k, v and gate, up sit in their shared buffers (elements): each at an
/// offset the device can bind an op's input at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Offsets {
    /// Where k starts, after q.
    pub k_first: u64,
    /// Where v starts, after k.
    pub v_first: u64,
    /// Where up starts, after gate.
    pub up_first: u64,
}

/// The widths of a token's rows in the forward pass's buffers, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widths {
    /// The residual stream: [`Config::dim`].
    pub dim: u64,
    /// The query heads together, and attention's output: `n_heads * head_dim`.
    pub q_dim: u64,
    /// Query heads.
    pub n_heads: u64,
    /// q, k and v side by side (`Offsets`).
    pub qkv: u64,
    /// gate and up side by side.
    pub gate_up: u64,
    /// act(gate) * up: [`Config::ffn_dim`].
    pub ffn: u64,
}

impl Widths {
    /// The widths of `config`'s rows, with q, k, v and gate, up placed at `offsets`.
    pub fn of(config: &Config, offsets: &Offsets) -> Widths {
        Widths {
            dim: config.dim as u64,
            q_dim: (config.n_heads * config.head_dim) as u64,
            n_heads: config.n_heads as u64,
            qkv: offsets.v_first + config.kv_dim() as u64,
            gate_up: offsets.up_first + config.ffn_dim as u64,
            ffn: config.ffn_dim as u64,
        }
    }

    /// The forward pass's buffers with a row per token, as (label, bytes per row), in
    /// the order `forward::Rows` makes them: what a decode step (one row) and a prefill
    /// batch (`ubatch` rows) allocate, and `MemoryNeed` counts.
    pub fn row_buffers(&self) -> [(&'static str, u64); ROW_BUFFERS] {
        [
            ("x", 4 * self.dim),
            ("norm(x)", 4 * self.dim),
            ("norm(x) as q8", q8_row(self.dim)),
            ("q, k, v", 4 * self.qkv),
            ("attention out", 4 * self.q_dim),
            ("attention out as q8", q8_row(self.q_dim)),
            ("attention state", PREFILL_STATE_BYTES * self.n_heads),
            ("block out", 4 * self.dim),
            ("norm(block out)", 4 * self.dim),
            ("ffn gate, up", 4 * self.gate_up),
            ("ffn hidden", 4 * self.ffn),
            ("ffn hidden as q8", q8_row(self.ffn)),
        ]
    }

    /// Bytes of a row of every buffer together.
    pub fn bytes_per_row(&self) -> u64 {
        self.row_buffers().iter().map(|(_, b)| b).sum()
    }

    /// The widest row of any buffer, which the binding limit caps.
    pub fn widest_row(&self) -> u64 {
        self.row_buffers()
            .iter()
            .map(|&(_, b)| b)
            .max()
            .unwrap_or(4)
    }
}

/// How many buffers [`Widths::row_buffers`] lists.
pub const ROW_BUFFERS: usize = 12;

/// Bytes of `k` values quantized as the matvecs and matmuls take them.
pub fn q8_row(k: u64) -> u64 {
    k.div_ceil(32) * Q8_GROUP_BYTES
}

/// Device bytes of a prefill batch's buffers: `ubatch` rows of every row buffer, the
/// batch's token ids, and the logits of a run of `logits_tokens` prompt positions.
pub fn batch_bytes(widths: &Widths, vocab: u64, ubatch: u64, logits_tokens: u64) -> u64 {
    (widths.bytes_per_row() + 4)
        .saturating_mul(ubatch)
        .saturating_add(logits_tokens.saturating_mul(4 * vocab))
}

impl Offsets {
    /// Each part at an offset `profile` can bind an op's input at.
    pub fn of(config: &Config, profile: &DeviceProfile) -> Offsets {
        let align = (profile.storage_offset_alignment.max(4) / 4) as u64;
        let q_dim = (config.n_heads * config.head_dim) as u64;
        let k_first = q_dim.next_multiple_of(align);
        Offsets {
            k_first,
            v_first: (k_first + config.kv_dim() as u64).next_multiple_of(align),
            up_first: (config.ffn_dim as u64).next_multiple_of(align),
        }
    }
}

/// The buffers a forward pass works in, a row per token (`Widths::row_buffers`), for up
/// to `capacity` tokens, and the tokens' ids (u32).
pub(super) struct Rows {
    pub capacity: u64,
    pub tokens: Slice,
    pub x: Slice,
    pub xn: Slice,
    pub xn_q8: Slice,
    pub qkv: Slice,
    pub att: Slice,
    pub att_q8: Slice,
    pub att_state: Slice,
    pub out: Slice,
    pub post: Slice,
    pub gate_up: Slice,
    pub hidden: Slice,
    pub hidden_q8: Slice,
    /// A batch's scratch for the unpacked matmuls, where the plan has them.
    pub unpacked: Option<UnpackedScratch>,
    /// A decode step's scratch for the decode columns' K spans, where the plan has
    /// them (`Plan::decode_span_scratch`).
    pub spans: Option<Slice>,
}

/// Where a batch's unpacked matmuls (`router::BatchLaunch::Unpacked`) decode their
/// operands: one matrix's weights at a time, and the x they multiply.
#[derive(Clone, Copy, Debug)]
pub(super) struct UnpackedScratch {
    pub weights: Slice,
    pub x: Slice,
}

impl UnpackedScratch {
    /// Buffers of `weights` and `x` bytes (`Plan::unpacked_scratch`,
    /// `Plan::decode_unpacked_scratch`), labelled as `whose`.
    pub(super) fn new(
        buffers: &OwnedBuffers,
        whose: &str,
        (weights, x): (u64, u64),
    ) -> Result<UnpackedScratch> {
        let storage = |what: &str, bytes: u64| -> Result<Slice> {
            let label = format!("{whose} unpacked {what}");
            let b = buffers.create(&label, bytes, BufferUse::Storage)?;
            Ok(Slice::new(b, 0, bytes))
        };
        Ok(UnpackedScratch {
            weights: storage("weights", weights)?,
            x: storage("x", x)?,
        })
    }
}

impl Rows {
    pub(super) fn new(
        buffers: &OwnedBuffers,
        widths: &Widths,
        capacity: u64,
        tokens: Slice,
    ) -> Result<Rows> {
        let made: Vec<Slice> = widths
            .row_buffers()
            .iter()
            .map(|&(label, per_row)| {
                let bytes = (per_row * capacity).next_multiple_of(16);
                Ok(Slice::new(
                    buffers.create(label, bytes, BufferUse::Storage)?,
                    0,
                    bytes,
                ))
            })
            .collect::<Result<_>>()?;
        let [x, xn, xn_q8, qkv, att, att_q8, att_state, out, post, gate_up, hidden, hidden_q8]: [Slice;
            ROW_BUFFERS] = made.try_into().expect("one slice per row buffer");
        Ok(Rows {
            capacity,
            tokens,
            x,
            xn,
            xn_q8,
            qkv,
            att,
            att_q8,
            att_state,
            out,
            post,
            gate_up,
            hidden,
            hidden_q8,
            unpacked: None,
            spans: None,
        })
    }
}

/// Bytes of a decode pass's attention row table (`AttentionRow`): for each of `windows`
/// distinct layer windows, a block of `rows` rows starting where a binding may.
pub(super) fn row_table_bytes(windows: u64, rows: u64, align: u64) -> u64 {
    windows * (rows * ATTENTION_ROW_BYTES).next_multiple_of(align.max(16))
}

/// A decode step's buffers: one row, and what only a step has: split attention's
/// partials, the logits and argmax's scratch. Its token buffer holds the id, then
/// argmax's count of non-finite logits and the id the step embedded.
pub(super) struct StepBuffers {
    pub rows: Rows,
    pub parts: Partials,
    /// The attention row table (`forward::DecodeScratch::rows`).
    pub att_rows: Slice,
    pub logits: Slice,
    pub argmax_scratch: Slice,
}

/// Split attention's partials of `bytes`, each buffer made by `storage` and labelled
/// after `prefix`.
fn partials(
    storage: impl Fn(&str, u64) -> Result<Slice>,
    prefix: &str,
    bytes: PartBytes,
) -> Result<Partials> {
    Ok(Partials {
        ml: storage(&format!("{prefix}attention partials (m, l)"), bytes.ml)?,
        acc: storage(&format!("{prefix}attention partials"), bytes.acc)?,
        counts: storage(&format!("{prefix}attention merge counts"), bytes.counts)?,
    })
}

impl StepBuffers {
    pub(super) fn new(
        buffers: &OwnedBuffers,
        widths: &Widths,
        attention: &AttentionLaunch,
        (vocab, windows, align): (u64, u64, u64),
    ) -> Result<StepBuffers> {
        let storage = |label: &str, bytes: u64| -> Result<Slice> {
            let bytes = bytes.max(4);
            Ok(Slice::new(
                buffers.create(label, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };
        Ok(StepBuffers {
            rows: Rows::new(
                buffers,
                widths,
                1,
                storage("token", 4 * ARGMAX_TOKEN_WORDS)?,
            )?,
            parts: partials(storage, "", attention.part_bytes())?,
            att_rows: storage("attention rows", row_table_bytes(windows, 1, align))?,
            logits: storage("logits", 4 * vocab)?,
            argmax_scratch: storage("argmax candidates", 4 * ARGMAX_SCRATCH_WORDS)?,
        })
    }
}

/// A prefill batch's buffers, made at a model's first batch, and the logits of a run of
/// prompt positions, made at its first `prefill_logits`.
pub(super) struct BatchBuffers {
    pub rows: Rows,
    pub logits: Option<Slice>,
    pub buffers: OwnedBuffers<'static>,
}

/// The buffers of a decode step over up to `capacity` sequences' rows (`Engine`): the
/// rows, each row's token id, its logits (`stride` floats apart, so each row's start
/// can be bound) and its argmax record (`result_stride` bytes apart, likewise).
pub(super) struct DecodeRows {
    pub rows: Rows,
    /// Split attention's partials for every row, and the attention row table.
    pub parts: Partials,
    pub att_rows: Slice,
    pub logits: Slice,
    pub stride: u64,
    pub scratch: Slice,
    pub results: Slice,
    pub result_stride: u64,
}

impl DecodeRows {
    pub(super) fn new(
        buffers: &OwnedBuffers,
        widths: &Widths,
        (capacity, vocab, windows): (u64, u64, u64),
        (attention, profile): (&AttentionLaunch, &DeviceProfile),
    ) -> Result<DecodeRows> {
        let storage = |label: &str, bytes: u64| -> Result<Slice> {
            let bytes = bytes.max(16).next_multiple_of(16);
            Ok(Slice::new(
                buffers.create(label, bytes, BufferUse::Storage)?,
                0,
                bytes,
            ))
        };
        let align = profile.storage_offset_alignment.max(16) as u64;
        let stride = (4 * vocab).next_multiple_of(align) / 4;
        let result_stride = (4 * ARGMAX_TOKEN_WORDS).next_multiple_of(align);
        Ok(DecodeRows {
            rows: Rows::new(
                buffers,
                widths,
                capacity,
                storage("decode rows' tokens", 4 * capacity)?,
            )?,
            parts: partials(
                storage,
                "decode rows' ",
                attention.part_bytes_rows(capacity),
            )?,
            att_rows: storage(
                "decode rows' attention rows",
                row_table_bytes(windows, capacity, align),
            )?,
            logits: storage("decode rows' logits", 4 * stride * capacity)?,
            stride,
            scratch: storage("argmax candidates", 4 * ARGMAX_SCRATCH_WORDS)?,
            results: storage("decode rows' argmax", result_stride * capacity)?,
            result_stride,
        })
    }
}
