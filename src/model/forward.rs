//! The forward pass, written once for any number of tokens: a decode step is one token,
//! a prompt's batch many. Each op covers the pass's rows in one dispatch; each matrix
//! is a matvec for one token and a matmul for many (`router::linear_kind`); attention
//! is split-K decode attention for one token and causal flash attention for many. The
//! family's features (biases, q/k norms, post-norms, GeGLU, scaled embeddings, local
//! layers) are in the one pass, so every family batches its prompts.
//!
//! Pipelines are made by the first pass that dispatches them, so a model that never
//! processes a prompt in batches, or never asks for a prompt's logits, makes none of
//! theirs, and the dispatch audit holds whichever phases ran.

use std::sync::OnceLock;

use super::layout::{q8_row, BatchBuffers, Rows, UnpackedScratch, Widths};
use super::non_finite::Probes;
use super::{Input, Layer, Matrix, Model, PrefillPlan};
use crate::device::{
    BufferUse, CommandList, Dispatch, OwnedBuffers, PipelineId, ReadTicket, Slice,
};
use crate::kernels::attention::{AttentionLaunch, AttentionRow, Partials, ATTENTION_ROW_BYTES};
use crate::kernels::matmul::{
    span_sum_pipeline, MatmulInput, MatmulLaunch, SpanScratch, UnpackedMatmul,
};
use crate::kernels::matvec::XForm;
use crate::kernels::ops::{OpsOn, ARGMAX_TOKEN_WORDS};
use crate::router::{linear_kind, BatchLaunch, LinearKind};
use crate::{Error, Result};

/// What a forward pass leaves at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Output {
    /// The KV cache only: the last layer stops once it has written it.
    Cache,
    /// The output norm's rows, the lm-head's input (prompt logits multiply them in
    /// runs).
    Normed,
    /// The logits of every row, and each row's argmax, where `Head` says.
    Logits(Head),
}

/// Where a pass ending in logits leaves them: row r's logits at float `r * stride` of
/// `logits`, and its argmax record ([`ARGMAX_TOKEN_WORDS`] u32: the id, the count of
/// non-finite logits, the id the record held before) at byte `r * result_stride` of
/// `results`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub logits: Slice,
    pub stride: u64,
    pub scratch: Slice,
    pub results: Slice,
    pub result_stride: u64,
}

/// A decode row's sequence and position: the token of the row is sequence `seq`'s at
/// position `pos`, attending to that sequence's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SeqAt {
    pub seq: usize,
    pub pos: u64,
}

/// What a decode pass (matvecs, split attention) needs beyond its rows: split
/// attention's partials for every row, and the table its attention rows are written to
/// (`layout::row_table_bytes`).
#[derive(Clone, Copy, Debug)]
pub(super) struct DecodeScratch {
    pub parts: Partials,
    pub rows: Slice,
}

/// A decode pass's attention rows over one layer window: each row's own position,
/// cache region and split, and where the table holds them.
struct WindowRows {
    window: Option<u64>,
    rows: Vec<AttentionRow>,
    table: Slice,
}

/// Where a pass's tokens sit in the sequences' caches.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place<'a> {
    /// Consecutive tokens of sequence `seq` from position `pos` on: a decode step of one
    /// token, or a prompt's batch.
    Run { seq: usize, pos: u64 },
    /// One token per row, each the next of its own sequence: a decode step of many
    /// sequences. Every op runs on each row as it would on a lone decode step's.
    Each(&'a [SeqAt]),
}

/// The value in `cell`, made by `make` the first time.
fn once<T: Copy>(cell: &OnceLock<T>, make: impl FnOnce() -> Result<T>) -> Result<T> {
    if let Some(&made) = cell.get() {
        return Ok(made);
    }
    let made = make()?;
    Ok(*cell.get_or_init(|| made))
}

/// x rows in the forms a matrix may take them in, with their strides in bytes.
#[derive(Clone, Copy, Debug)]
struct X {
    f32: (Slice, u64),
    q8: Option<(Slice, u64)>,
}

impl X {
    /// Rows of `k` f32 values, from token `first` on, and their q8 form where given.
    fn rows(f32: Slice, q8: Option<Slice>, k: u64, first: u64) -> X {
        let from = |s: Slice, stride: u64| {
            let skip = (first * stride).min(s.size);
            (Slice::new(s.buffer, s.offset + skip, s.size - skip), stride)
        };
        X {
            f32: from(f32, 4 * k),
            q8: q8.map(|q8| from(q8, q8_row(k))),
        }
    }

    fn q8(&self) -> Result<(Slice, u64)> {
        self.q8
            .ok_or_else(|| Error::Invalid("a matrix takes x quantized, and none was made".into()))
    }
}

/// One forward pass being recorded: `n` tokens at positions `pos..pos + n`.
struct Pass<'m> {
    model: &'m Model,
    rows: &'m Rows,
    /// A decode pass's scratch (None for a prompt's batch).
    decode: Option<DecodeScratch>,
    /// A decode pass's attention rows, per layer window (written by `record`).
    att_rows: Vec<WindowRows>,
    n: u64,
    place: Place<'m>,
    w: Widths,
    ops: OpsOn<'m>,
    list: CommandList,
}

impl<'m> Pass<'m> {
    /// The first `n` rows of `s`, `per_row` bytes each.
    fn first_rows(&self, s: Slice, per_row: u64) -> Slice {
        Slice::new(s.buffer, s.offset, self.n * per_row)
    }

    fn x(&self) -> Slice {
        self.first_rows(self.rows.x, 4 * self.w.dim)
    }

    fn out(&self) -> Slice {
        self.first_rows(self.rows.out, 4 * self.w.dim)
    }

    fn qkv(&self) -> Slice {
        self.first_rows(self.rows.qkv, 4 * self.w.qkv)
    }

    fn gate_up(&self) -> Slice {
        self.first_rows(self.rows.gate_up, 4 * self.w.gate_up)
    }

    /// norm(x), in both forms.
    fn normed(&self) -> X {
        X::rows(self.rows.xn, Some(self.rows.xn_q8), self.w.dim, 0)
    }

    fn kind(&self) -> LinearKind {
        match self.place {
            Place::Run { .. } => linear_kind(self.n),
            Place::Each(_) => LinearKind::Matvec,
        }
    }

    /// The decode rows of a matvec pass, each with its sequence and position.
    fn decode_rows(&self) -> Vec<SeqAt> {
        match self.place {
            Place::Run { seq, pos } => vec![SeqAt { seq, pos }],
            Place::Each(rows) => rows.to_vec(),
        }
    }

    /// The sequence and first position of a batch's tokens.
    fn run(&self) -> Result<(usize, u64)> {
        match self.place {
            Place::Run { seq, pos } => Ok((seq, pos)),
            Place::Each(_) => Err(Error::Invalid(
                "a prompt batch over the rows of several sequences".into(),
            )),
        }
    }

    /// The pass's attention rows over layer window `window`.
    fn window_rows(&self, window: Option<u64>) -> Result<&WindowRows> {
        self.att_rows
            .iter()
            .find(|w| w.window == window)
            .ok_or_else(|| Error::Invalid("a decode pass without its attention rows".into()))
    }

    /// `bytes` of `s` from byte `at` on, as a binding: its offset must be one the
    /// device binds at.
    fn bound_at(&self, s: Slice, at: u64, bytes: u64) -> Result<Slice> {
        let align = self.model.device.profile().storage_offset_alignment.max(4) as u64;
        let offset = s.offset + at;
        if !offset.is_multiple_of(align) {
            return Err(Error::Invalid(format!(
                "a decode row at byte {offset}, which {} cannot bind at (a multiple of \
                 {align})",
                self.model.device.profile().name
            )));
        }
        Ok(Slice::new(s.buffer, offset, bytes))
    }

    /// The decode columns `m` multiplies this pass's rows with, and where their
    /// pipeline is kept: in a decode step of the plan's `decode_units_from` rows or
    /// more, where the plan gave it them, in the tile for the step's rows.
    fn on_matrix_units<'a>(
        &self,
        m: &'a Matrix,
    ) -> Option<(&'a MatmulLaunch, &'a OnceLock<PipelineId>)> {
        match self.place {
            Place::Each(_) if self.n >= self.model.plan.decode_units_from => {
                let (launch, tile) = m.plan.decode_columns.as_ref()?.for_rows(self.n);
                Some((launch, &m.columns[tile]))
            }
            _ => None,
        }
    }

    /// The unpacked matmul `m` multiplies this pass's rows with: in a decode step of
    /// the plan's `decode_units_from` rows or more, where the plan gave it one.
    fn unpacked_rows<'a>(&self, m: &'a Matrix) -> Option<&'a UnpackedMatmul> {
        match self.place {
            Place::Each(_) if self.n >= self.model.plan.decode_units_from => {
                m.plan.decode_unpacked.as_ref()
            }
            _ => None,
        }
    }

    /// Whether `m` multiplies this pass's rows on the matrix units (the decode columns
    /// or unpacked), where a matvec would take them.
    fn rows_on_units(&self, m: &Matrix) -> bool {
        self.on_matrix_units(m).is_some() || self.unpacked_rows(m).is_some()
    }

    /// Whether any of `ms` takes x quantized in this pass: a matvec whose route reads
    /// x as the op before wrote it quantized (`XForm::Q8`), or a matmul of int8 x
    /// (the decode columns' and the unpacked decode rows' included).
    fn takes_q8(&self, ms: &[&Matrix]) -> bool {
        ms.iter().any(|m| match self.kind() {
            LinearKind::Matvec if self.rows_on_units(m) => true,
            LinearKind::Matvec => m.plan.route.launch().x_form() == XForm::Q8,
            LinearKind::Matmul => m
                .plan
                .batch
                .as_ref()
                .is_some_and(|b| b.launch().input() == MatmulInput::Q8),
        })
    }

    /// The norm's output rows as the matrices `feeds` take them: f32, and quantized
    /// where one of them takes it so.
    fn norm_out(&self, feeds: &[&Matrix]) -> (Slice, Option<Slice>) {
        let xn = self.first_rows(self.rows.xn, 4 * self.w.dim);
        let q8 = self
            .takes_q8(feeds)
            .then(|| self.first_rows(self.rows.xn_q8, q8_row(self.w.dim)));
        (xn, q8)
    }

    /// x = embed(tokens); xn = norm(x) with the first norm.
    fn embed(&mut self, norm: Slice, feeds: &[&Matrix], probes: &mut Probes) -> Result<()> {
        let (dim, n) = (self.w.dim, self.n);
        let tokens = self.first_rows(self.rows.tokens, 4);
        for d in self
            .ops
            .embed(&self.model.weights.embed, (dim, n), tokens, self.x())?
        {
            self.list.dispatch(d);
        }
        probes.at(
            &self.list,
            || "the embedding lookup in `token_embd.weight`".into(),
            self.x(),
        );
        let eps = self.model.config.eps;
        let out = self.norm_out(feeds);
        let d = self.ops.rms_norm((dim, n), eps, self.x(), norm, out)?;
        self.list.dispatch(d);
        Ok(())
    }

    /// x += post(y) (post: the family's norm of a block's output, where it has one);
    /// then xn = norm(x) by `norm`, in the forms `feeds` take.
    fn residual(
        &mut self,
        y: Slice,
        post: Option<Slice>,
        norm: Slice,
        feeds: &[&Matrix],
    ) -> Result<()> {
        let (dim, n, eps) = (self.w.dim, self.n, self.model.config.eps);
        let y = match post {
            Some(w) => {
                let normed = self.first_rows(self.rows.post, 4 * dim);
                let d = self.ops.rms_norm((dim, n), eps, y, w, (normed, None))?;
                self.list.dispatch(d);
                normed
            }
            None => y,
        };
        let out = self.norm_out(feeds);
        let d = self
            .ops
            .add_rms_norm((dim, n), eps, (self.x(), y), norm, out)?;
        self.list.dispatch(d);
        Ok(())
    }

    /// y rows (`y_stride` floats a token, each matrix from its `out_first`) = W · x
    /// rows for each matrix of `ms`: its matvec for one token, its matmul for many.
    fn linear(&mut self, ms: &[&Matrix], x: X, (y, y_stride): (Slice, u64)) -> Result<()> {
        let model = self.model;
        let dev = model.device.as_ref();
        // The matrices of one call share x: the unpacked ones convert it once.
        let mut x_unpacked = false;
        for m in ms {
            if let Some(u) = self.unpacked_rows(m) {
                // A step of many rows, unpacked as asked (`DecodeRowsUnpacked`).
                let fresh = !std::mem::replace(&mut x_unpacked, true);
                let x = fresh.then_some(x);
                self.unpacked_matmul(m, u, &m.decode_unpacked, x, (y, y_stride))?;
                continue;
            }
            if let Some((launch, pipeline)) = self.on_matrix_units(m) {
                // A step of many rows: its matrices on the matrix units (the plan's
                // `DecodeRowsOnMatrixUnits`), every row still computed alone.
                self.matmul(m, launch, pipeline, x, (y, y_stride))?;
                continue;
            }
            match self.kind() {
                LinearKind::Matvec => {
                    let launch = m.plan.route.launch();
                    let pipeline = once(&m.matvec, || launch.pipeline(dev, &model.pipelines))?;
                    let (x, x_stride) = match launch.x_form() {
                        XForm::Q8 => x.q8()?,
                        XForm::F32 | XForm::Glu { .. } => x.f32,
                    };
                    // Each row a column of one dispatch, computed as a lone row is
                    // (`MatvecLaunch::dispatches_columns`), so a row's result does not
                    // depend on the others.
                    let mut first = 0;
                    while first < self.n {
                        let cols = (self.n - first).min(launch.max_columns());
                        let bytes = (cols - 1) * x_stride + launch.x_bytes();
                        let x = self.bound_at(x, first * x_stride, bytes)?;
                        let out_first = m.plan.out_first + first * y_stride;
                        let y_bytes = (out_first + (cols - 1) * y_stride + launch.m()) * 4;
                        let y = Slice::new(y.buffer, y.offset, y_bytes);
                        for d in launch.dispatches_columns(
                            pipeline,
                            &m.parts,
                            x,
                            x_stride,
                            y,
                            4 * y_stride,
                            out_first,
                            cols,
                            m.queue,
                        )? {
                            self.list.dispatch(d);
                        }
                        first += cols;
                    }
                }
                LinearKind::Matmul => {
                    let launch = m
                        .plan
                        .batch
                        .as_ref()
                        .ok_or_else(|| {
                            Error::Invalid(format!("`{}` has no matmul planned", m.plan.name()))
                        })?
                        .launch();
                    match launch {
                        BatchLaunch::Tiled(launch) => {
                            self.matmul(m, launch, &m.matmul, x, (y, y_stride))?
                        }
                        BatchLaunch::Unpacked(u) => {
                            let fresh = !std::mem::replace(&mut x_unpacked, true);
                            let x = fresh.then_some(x);
                            self.unpacked_matmul(m, u, &m.unpacked, x, (y, y_stride))?
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// y rows = W · x rows by `u`, over `m`'s weights (its pipelines made once, in
    /// `pipelines`): the weights unpacked into the pass's scratch, x too where `x` is
    /// given (the first unpacked matrix of a `linear` call; the others find it there),
    /// then the multiply.
    fn unpacked_matmul(
        &mut self,
        m: &Matrix,
        u: &UnpackedMatmul,
        pipelines: &OnceLock<[PipelineId; 3]>,
        x: Option<X>,
        (y, y_stride): (Slice, u64),
    ) -> Result<()> {
        let model = self.model;
        let dev = model.device.as_ref();
        let [unpack, unpack_x, gemm] = once(pipelines, || u.pipelines(dev, &model.pipelines))?;
        let scratch = self
            .rows
            .unpacked
            .ok_or_else(|| Error::Invalid("an unpacked matmul without its scratch".into()))?;
        let profile = dev.profile();
        if let Some(x) = x {
            let (x, x_stride) = x.q8()?;
            let d = u.unpack_x_dispatch(profile, unpack_x, x, x_stride, scratch.x, self.n)?;
            self.list.dispatch(d);
        }
        for d in u.unpack_dispatches(profile, unpack, &m.parts, scratch.weights)? {
            self.list.dispatch(d);
        }
        let d = u.gemm_dispatch(
            gemm,
            (scratch.weights, scratch.x),
            y,
            (m.plan.out_first, y_stride),
            self.n,
        )?;
        self.list.dispatch(d);
        Ok(())
    }

    /// y rows = W · x rows by `launch`, a matmul over `m`'s weights (its pipeline made
    /// once, in `pipeline`).
    fn matmul(
        &mut self,
        m: &Matrix,
        launch: &MatmulLaunch,
        pipeline: &OnceLock<PipelineId>,
        x: X,
        (y, y_stride): (Slice, u64),
    ) -> Result<()> {
        let model = self.model;
        let dev = model.device.as_ref();
        let pipeline = once(pipeline, || launch.pipeline(dev, &model.pipelines))?;
        let (x, x_stride) = match launch.input() {
            MatmulInput::F32 => x.f32,
            MatmulInput::Q8 => x.q8()?,
        };
        // Decode columns in K spans: their sums meet in the step's scratch, then the span
        // sum adds them in order.
        let spans = if launch.engine().k_spans() > 1 {
            Some(SpanScratch {
                scratch: self.rows.spans.ok_or_else(|| {
                    Error::Invalid("decode columns in K spans without their scratch".into())
                })?,
                sum: once(&model.span_sum, || span_sum_pipeline(dev, &model.pipelines))?,
            })
        } else {
            None
        };
        for d in launch.dispatches_with_spans(
            pipeline,
            &m.parts,
            x,
            x_stride,
            y,
            (m.plan.out_first, y_stride),
            self.n,
            spans,
        )? {
            self.list.dispatch(d);
        }
        Ok(())
    }

    /// q, k, v = W_qkv · xn; each head of q and k RMS-normed where the family does;
    /// rope(q) in place, and the cache gets rope(k) and v at the pass's positions
    /// (biases added on the way, zeros where the family has none).
    fn qkv_into_cache(&mut self, l: &Layer, probes: &mut Probes) -> Result<()> {
        let model = self.model;
        let (c, offsets) = (&model.config, model.plan.offsets);
        let qkv = self.qkv();
        let ms: Vec<&Matrix> = l.qkv.iter().collect();
        self.linear(&ms, self.normed(), (qkv, self.w.qkv))?;
        let row = |first: u64, n: u64| Slice::new(qkv.buffer, qkv.offset + 4 * first, 4 * n);
        let kv_dim = c.kv_dim() as u64;
        probes.stacked(
            &self.list,
            &l.qkv,
            [
                row(0, self.w.q_dim),
                row(offsets.k_first, kv_dim),
                row(offsets.v_first, kv_dim),
            ],
        );
        if let Some(w) = l.qk_norm {
            let heads = (c.n_heads as u64, c.n_kv_heads as u64, c.head_dim as u64);
            let d = self.ops.head_rms_norm(
                heads,
                offsets.k_first,
                c.eps,
                (self.n, self.w.qkv),
                qkv,
                w,
            )?;
            self.list.dispatch(d);
        }
        let dev = model.device.as_ref();
        let firsts = (offsets.k_first, offsets.v_first);
        let ds: Vec<Dispatch> = match self.kind() {
            LinearKind::Matvec => {
                let launch = model.plan.attention.launch();
                let p = once(&model.attention.decode, || {
                    launch.pipelines(dev, &model.pipelines)
                })?;
                let rows = self.window_rows(l.window)?;
                vec![launch.rope_kv_rows(
                    &p,
                    &rows.rows,
                    rows.table,
                    l.rope,
                    ((qkv, self.w.qkv), l.qkv_bias),
                    firsts,
                    l.k_cache,
                    l.v_cache,
                )?]
            }
            LinearKind::Matmul => {
                let launch = self.batched()?.attention.launch();
                let p = once(&model.attention.prefill, || {
                    launch.pipelines(dev, &model.pipelines)
                })?;
                let (seq, pos) = self.run()?;
                let (k_cache, v_cache) = model.cache_of(l, seq);
                vec![launch.rope_kv_batch(
                    &p,
                    pos,
                    self.n,
                    l.rope,
                    (qkv, self.w.qkv),
                    l.qkv_bias,
                    firsts,
                    k_cache,
                    v_cache,
                )]
            }
        };
        for d in ds {
            self.list.dispatch(d);
        }
        Ok(())
    }

    /// The batched prefill's routes (a pass of many tokens runs only where prompts
    /// batch).
    fn batched(&self) -> Result<&'m super::BatchedPrefill> {
        match &self.model.plan.prefill {
            PrefillPlan::Batched(b) => Ok(b),
            PrefillPlan::TokenAtATime { .. } => Err(Error::Invalid(
                "a pass of several tokens where prompts go token at a time".into(),
            )),
        }
    }

    /// out = Wo · attention(q, the cache up to each token's position, or over a local
    /// layer's window).
    fn attention(&mut self, l: &Layer, probes: &mut Probes) -> Result<()> {
        let model = self.model;
        let dev = model.device.as_ref();
        let qkv = self.qkv();
        let att = self.first_rows(self.rows.att, 4 * self.w.q_dim);
        match self.kind() {
            LinearKind::Matvec => {
                let launch = model.plan.attention.launch();
                let p = once(&model.attention.decode, || {
                    launch.pipelines(dev, &model.pipelines)
                })?;
                let scratch = self
                    .decode
                    .ok_or_else(|| Error::Invalid("a decode pass without its scratch".into()))?;
                let rows = self.window_rows(l.window)?;
                let combine = || AttentionLaunch::combine_pipeline(dev, &model.pipelines);
                for d in launch.dispatches_rows(
                    &p,
                    combine,
                    &rows.rows,
                    rows.table,
                    (qkv, self.w.qkv),
                    l.k_cache,
                    l.v_cache,
                    scratch.parts,
                    (att, self.w.q_dim),
                )? {
                    self.list.dispatch(d);
                }
            }
            LinearKind::Matmul => {
                let launch = self.batched()?.attention.launch();
                let p = once(&model.attention.prefill, || {
                    launch.pipelines(dev, &model.pipelines)
                })?;
                let (seq, pos) = self.run()?;
                let (k_cache, v_cache) = model.cache_of(l, seq);
                for d in launch.dispatches(
                    &p,
                    pos,
                    self.n,
                    (qkv, self.w.qkv),
                    k_cache,
                    v_cache,
                    (att, self.w.q_dim),
                    self.rows.att_state,
                    l.window,
                )? {
                    self.list.dispatch(d);
                }
            }
        }
        probes.at(
            &self.list,
            || format!("the attention feeding `{}`", l.wo.plan.name()),
            att,
        );
        // The output projection takes the attention out quantized where it asks.
        let q8 = match self.takes_q8(&[&l.wo]) {
            true => {
                let att_q8 = self.first_rows(self.rows.att_q8, q8_row(self.w.q_dim));
                let q_dim = self.w.q_dim;
                let d = self
                    .ops
                    .quantize_rows((q_dim, self.n, q_dim), att, att_q8)?;
                self.list.dispatch(d);
                Some(att_q8)
            }
            false => None,
        };
        let x = X::rows(att, q8, self.w.q_dim, 0);
        self.linear(&[&l.wo], x, (self.out(), self.w.dim))?;
        probes.at(&self.list, || format!("`{}`", l.wo.plan.name()), self.out());
        Ok(())
    }

    /// out = W_down · (act(W_gate · xn) * (W_up · xn)).
    fn ffn(&mut self, l: &Layer, probes: &mut Probes) -> Result<()> {
        let gate_up = self.gate_up();
        let ms: Vec<&Matrix> = l.gate_up.iter().collect();
        self.linear(&ms, self.normed(), (gate_up, self.w.gate_up))?;
        let up_first = self.model.plan.offsets.up_first;
        let up = Slice::new(
            gate_up.buffer,
            gate_up.offset + 4 * up_first,
            gate_up.size - 4 * up_first,
        );
        let shape = (self.w.ffn, self.n, self.w.gate_up);
        let f32_hidden = self.first_rows(self.rows.hidden, 4 * self.w.ffn);
        let q8_hidden = self.first_rows(self.rows.hidden_q8, q8_row(self.w.ffn));
        let glu_inside = self.kind() == LinearKind::Matvec
            && !self.rows_on_units(&l.down)
            && matches!(l.down.plan.route.launch().x_form(), XForm::Glu { .. });
        let x = if glu_inside {
            // The down projection's matvec computes act(gate) * up itself.
            X::rows(gate_up, None, self.w.gate_up, 0)
        } else if self.takes_q8(&[&l.down]) {
            let d = self.ops.glu_q8(shape, gate_up, up, q8_hidden)?;
            self.list.dispatch(d);
            X::rows(f32_hidden, Some(q8_hidden), self.w.ffn, 0)
        } else {
            let d = self.ops.glu(shape, gate_up, up, f32_hidden)?;
            self.list.dispatch(d);
            X::rows(f32_hidden, None, self.w.ffn, 0)
        };
        self.linear(&[&l.down], x, (self.out(), self.w.dim))?;
        probes.at(
            &self.list,
            || format!("`{}`", l.down.plan.name()),
            self.out(),
        );
        Ok(())
    }
}

impl Model {
    /// The forward pass over `n` tokens at positions `pos..pos + n`, their ids in
    /// `rows.tokens`:
    ///   x = embed(tokens)
    ///   per layer: q, k, v = W_qkv · norm(x); the cache gets rope(k), v;
    ///     x += post(W_o · attention(rope(q), cache));
    ///     x += post(W_down · (act(W_gate · norm(x)) * (W_up · norm(x))))
    ///   logits = W_out · norm(x); token = argmax(logits)
    /// post is the family's norm of a block's output (Gemma's), or nothing. Each
    /// residual add is fused with the norm that follows it, so xn always holds norm(x)
    /// for the block about to run. `output` says where the pass ends.
    pub(super) fn record(
        &self,
        rows: &Rows,
        decode: Option<DecodeScratch>,
        (n, place): (u64, Place),
        output: Output,
        probes: &mut Probes,
    ) -> Result<CommandList> {
        if n == 0 || n > rows.capacity {
            return Err(Error::Invalid(format!(
                "a pass of {n} tokens in buffers for {}",
                rows.capacity
            )));
        }
        if let Place::Each(at) = place {
            if at.len() as u64 != n {
                return Err(Error::Invalid(format!(
                    "a pass of {n} rows placed in {} sequences",
                    at.len()
                )));
            }
        }
        let weights = &self.weights;
        let mut pass = self.pass(rows, decode, (n, place));
        if pass.kind() == LinearKind::Matvec {
            let table = decode
                .ok_or_else(|| Error::Invalid("a decode pass without its scratch".into()))?
                .rows;
            pass.att_rows = self.attention_rows(&pass.decode_rows(), table)?;
        }
        let layers = &weights.layers;
        let norm_of = |i: usize| layers.get(i).map_or(weights.output_norm, |l| l.attn_norm);
        let norm_name = |i: usize| match i < layers.len() {
            true => format!("blk.{i}.attn_norm.weight"),
            false => "output_norm.weight".into(),
        };
        // The matrices a block's input norm feeds: the next layer's q, k and v, or the
        // lm-head after the last.
        let fed_by_norm = |i: usize| -> Vec<&Matrix> {
            match layers.get(i) {
                Some(l) => l.qkv.iter().collect(),
                None => vec![&weights.output],
            }
        };
        let dim = pass.w.dim;
        let normed_rows = |pass: &Pass| pass.first_rows(rows.xn, 4 * dim);
        pass.embed(norm_of(0), &fed_by_norm(0), probes)?;
        probes.at(
            &pass.list,
            || format!("the RMS norm by `{}`", norm_name(0)),
            normed_rows(&pass),
        );
        let last = layers.len().saturating_sub(1);
        for (i, l) in layers.iter().enumerate() {
            pass.qkv_into_cache(l, probes)?;
            if i == last && output == Output::Cache {
                break;
            }
            pass.attention(l, probes)?;
            let gate_up: Vec<&Matrix> = l.gate_up.iter().collect();
            pass.residual(pass.out(), l.post_norms.map(|p| p.0), l.ffn_norm, &gate_up)?;
            probes.at(
                &pass.list,
                || format!("the RMS norm by `blk.{i}.ffn_norm.weight`"),
                normed_rows(&pass),
            );
            pass.ffn(l, probes)?;
            let next = fed_by_norm(i + 1);
            pass.residual(pass.out(), l.post_norms.map(|p| p.1), norm_of(i + 1), &next)?;
            probes.at(
                &pass.list,
                || format!("the RMS norm by `{}`", norm_name(i + 1)),
                normed_rows(&pass),
            );
        }
        if let Output::Logits(head) = output {
            pass.linear(
                &[&weights.output],
                pass.normed(),
                (head.logits, head.stride),
            )?;
            probes.at(
                &pass.list,
                || format!("`{}`", weights.output.plan.name()),
                head.logits,
            );
            let vocab = self.config.vocab as u64;
            for r in 0..n {
                let logits = pass.bound_at(head.logits, r * 4 * head.stride, 4 * vocab)?;
                let record = 4 * ARGMAX_TOKEN_WORDS;
                let token = pass.bound_at(head.results, r * head.result_stride, record)?;
                for d in pass.ops.argmax(vocab, logits, head.scratch, token)? {
                    pass.list.dispatch(d);
                }
            }
        }
        Ok(pass.list)
    }

    /// A pass of `n` tokens placed at `place` over `rows`, nothing recorded yet.
    fn pass<'m>(
        &'m self,
        rows: &'m Rows,
        decode: Option<DecodeScratch>,
        (n, place): (u64, Place<'m>),
    ) -> Pass<'m> {
        Pass {
            model: self,
            rows,
            decode,
            att_rows: Vec::new(),
            n,
            place,
            w: Widths::of(&self.config, &self.plan.offsets),
            ops: self.ops.on(self.device.as_ref(), &self.pipelines),
            list: CommandList::new(),
        }
    }

    /// A decode step's whole pass at `pos` (logits and argmax), noting in `probes` where
    /// each op's output can be read back.
    pub(super) fn record_step_probed(&self, pos: u64, probes: &mut Probes) -> Result<CommandList> {
        self.record_step((0, pos), self.step_logits(), probes)
    }

    /// A decode step's logits, argmax'd into its token buffer, where the next step
    /// embeds the id from.
    fn step_logits(&self) -> Output {
        let step = &self.step;
        Output::Logits(Head {
            logits: step.logits,
            stride: self.config.vocab as u64,
            scratch: step.argmax_scratch,
            results: step.rows.tokens,
            result_stride: 0,
        })
    }

    /// A decode step's pass for sequence `seq` over the token in the token buffer at
    /// `pos`.
    fn record_step(
        &self,
        (seq, pos): (usize, u64),
        output: Output,
        probes: &mut Probes,
    ) -> Result<CommandList> {
        let step = &self.step;
        let place = Place::Run { seq, pos };
        let scratch = DecodeScratch {
            parts: step.parts,
            rows: step.att_rows,
        };
        self.record(&step.rows, Some(scratch), (1, place), output, probes)
    }

    /// The token buffer of a decode step.
    pub(super) fn token_buffer(&self) -> Slice {
        self.step.rows.tokens
    }

    /// Records and submits the decode step for the token at `pos`; the next token's
    /// greedy id is left in the token buffer. Returns without waiting.
    pub fn step(&self, input: Input, pos: usize) -> Result<()> {
        let list = self.prepare((0, input), pos, self.step_logits())?;
        self.device.submit(&list)
    }

    /// Like `step`, and queues a read-back of the greedy id it produces. Redeem the
    /// ticket with `token`; meanwhile the next step can already be queued with
    /// `Input::Previous`, so the GPU never waits for the CPU between tokens.
    pub fn step_read(&self, input: Input, pos: usize) -> Result<StepTicket> {
        let list = self.prepare((0, input), pos, self.step_logits())?;
        Ok(StepTicket {
            read: self.device.submit_read(&list, self.token_buffer())?,
            pos,
        })
    }

    /// The greedy id a `step_read` produced (waits for that step only), or
    /// `Error::NonFinite` if any of the step's logits was NaN or infinite: the count
    /// comes back in the same read.
    pub fn token(&self, ticket: StepTicket) -> Result<u32> {
        let bytes = self.device.finish_read(ticket.read)?;
        let [id, non_finite, embedded]: [u32; 3] = bytemuck::pod_read_unaligned(&bytes[..12]);
        if non_finite > 0 {
            return Err(self.non_finite_logits(ticket.pos, embedded, non_finite));
        }
        Ok(id)
    }

    /// Checks the position and input, uploads an explicit token, records the step.
    fn prepare(
        &self,
        (seq, input): (usize, Input),
        pos: usize,
        output: Output,
    ) -> Result<CommandList> {
        if pos >= self.n_ctx {
            return Err(Error::ContextFull {
                what: format!("the step at position {pos}"),
                needed: pos + 1,
                context: self.n_ctx,
                trained: self.config.context_length,
                reset_helps: false,
            });
        }
        if let Input::Token(id) = input {
            if id as usize >= self.config.vocab {
                return Err(Error::Invalid(format!(
                    "token id {id} is outside the vocabulary of {}",
                    self.config.vocab
                )));
            }
            self.device
                .upload(self.token_buffer().buffer, 0, &id.to_le_bytes())?;
        }
        self.record_step((seq, pos as u64), output, &mut Probes::default())
    }

    /// One decode step; returns the greedy next token (4 bytes read back).
    pub fn forward(&self, input: Input, pos: usize) -> Result<u32> {
        let ticket = self.step_read(input, pos)?;
        self.token(ticket)
    }

    /// One decode step; returns all logits (for sampling and tests), or
    /// `Error::NonFinite` if any is NaN or infinite.
    pub fn forward_logits(&self, input: Input, pos: usize) -> Result<Vec<f32>> {
        self.step(input, pos)?;
        let logits = self.read_logits()?;
        let non_finite = logits.iter().filter(|v| !v.is_finite()).count();
        if non_finite > 0 {
            let token = self.device.read(self.token_buffer().buffer, 8, 4)?;
            let embedded = bytemuck::pod_read_unaligned(&token);
            return Err(self.non_finite_logits(pos, embedded, non_finite as u32));
        }
        Ok(logits)
    }

    fn read_logits(&self) -> Result<Vec<f32>> {
        crate::device::read_f32(
            self.device.as_ref(),
            self.step.logits.buffer,
            0,
            self.config.vocab,
        )
    }

    /// One decode step; returns both the greedy next token, as [`forward`](Self::forward)
    /// does, and all logits, as [`forward_logits`](Self::forward_logits) does: tests
    /// check the GPU's argmax and the logits of one step without running it twice.
    pub fn forward_token_and_logits(&self, input: Input, pos: usize) -> Result<(u32, Vec<f32>)> {
        let id = self.forward(input, pos)?;
        Ok((id, self.read_logits()?))
    }

    /// Writes the KV cache for `tokens` at positions `start..start + tokens.len()`, in
    /// batches as the plan says (`Plan::prefill`; a batch of one token, or a plan that
    /// goes token at a time, is a decode step's pass). Computes no logits: run the
    /// token after these through a decode step for them. Returns once the work is
    /// queued.
    pub fn prefill(&self, tokens: &[u32], start: usize) -> Result<()> {
        self.check_prompt(tokens, start)?;
        let ubatch = self.plan.prefill.ubatch() as usize;
        for (i, chunk) in tokens.chunks(ubatch).enumerate() {
            self.prefill_chunk(0, chunk, start + i * ubatch)?;
        }
        Ok(())
    }

    /// One of `prefill`'s batches, for sequence `seq`: `chunk` (at most the plan's
    /// `ubatch` tokens) into its cache at `pos`. Queued, not waited for.
    pub(super) fn prefill_chunk(&self, seq: usize, chunk: &[u32], pos: usize) -> Result<()> {
        match chunk {
            [] => Ok(()),
            [id] => {
                // A decode step's pass, as a lone token's is.
                let list = self.prepare((seq, Input::Token(*id)), pos, Output::Cache)?;
                self.device.submit(&list)
            }
            _ => {
                let mut batch = self.batch_buffers()?;
                let batch = batch.as_mut().expect("made by batch_buffers");
                let list = self.record_batch(batch, chunk, (seq, pos), Output::Cache)?;
                self.device.submit(&list)
            }
        }
    }

    /// Like [`Model::prefill`], and hands `each` every position's logits in order
    /// (position, logits): the last position's from a decode step, as when the prompt
    /// is prefilled and its last token decoded (so asking for logits changes no
    /// token), the others' from the lm-head over each batch's rows where the plan has
    /// it (`PromptLogits`), else from a decode step each. `Error::NonFinite` names the
    /// first position with a NaN or infinite logit. Waits for each run of logits.
    pub fn prefill_logits(
        &self,
        tokens: &[u32],
        start: usize,
        mut each: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        self.check_prompt(tokens, start)?;
        let Some((&last, body)) = tokens.split_last() else {
            return Ok(());
        };
        let ubatch = self.plan.prefill.ubatch() as usize;
        let run = self.plan.prefill.logits_tokens();
        for (i, chunk) in body.chunks(ubatch).enumerate() {
            let pos = start + i * ubatch;
            if chunk.len() > 1 && run > 0 {
                self.batch_logits(chunk, pos, run, &mut each)?;
                continue;
            }
            for (j, &id) in chunk.iter().enumerate() {
                each(pos + j, &self.forward_logits(Input::Token(id), pos + j)?)?;
            }
        }
        let pos = start + body.len();
        each(pos, &self.forward_logits(Input::Token(last), pos)?)
    }

    /// `chunk` at `pos` through every layer as a batch, then the lm-head over runs of
    /// `run` of its normed rows, each run's logits read back and handed to `each`.
    fn batch_logits(
        &self,
        chunk: &[u32],
        pos: usize,
        run: u64,
        each: &mut impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        let vocab = self.config.vocab as u64;
        let mut batch = self.batch_buffers()?;
        let batch = batch.as_mut().expect("made by batch_buffers");
        let logits = match batch.logits {
            Some(made) => made,
            None => {
                let bytes = run * 4 * vocab;
                let made = Slice::new(
                    batch
                        .buffers
                        .create("prompt logits", bytes, BufferUse::Storage)?,
                    0,
                    bytes,
                );
                *batch.logits.insert(made)
            }
        };
        let mut list = self.record_batch(batch, chunk, (0, pos), Output::Normed)?;
        let n = chunk.len() as u64;
        let dim = self.config.dim as u64;
        for first in (0..n).step_by(run as usize) {
            let rows = run.min(n - first);
            let x = X::rows(batch.rows.xn, Some(batch.rows.xn_q8), dim, first);
            let place = Place::Run {
                seq: 0,
                pos: pos as u64 + first,
            };
            let mut head = self.pass(&batch.rows, None, (rows, place));
            head.list = list;
            head.linear(&[&self.weights.output], x, (logits, vocab))?;
            self.device.submit(&head.list)?;
            list = CommandList::new();
            let values = crate::device::read_f32(
                self.device.as_ref(),
                logits.buffer,
                logits.offset,
                (rows * vocab) as usize,
            )?;
            for (j, row) in values.chunks_exact(vocab as usize).enumerate() {
                let at = pos + first as usize + j;
                let bad = row.iter().filter(|v| !v.is_finite()).count();
                if bad > 0 {
                    return Err(Error::NonFinite(format!(
                        "non-finite logits at prompt position {at}: {bad} of {vocab} are NaN \
                         or infinite (batched prefill; --ubatch 1 runs the prompt as decode \
                         steps, which name the op that first gives them)"
                    )));
                }
                each(at, row)?;
            }
        }
        Ok(())
    }

    fn check_prompt(&self, tokens: &[u32], start: usize) -> Result<()> {
        let end = start + tokens.len();
        if end > self.n_ctx {
            return Err(Error::ContextFull {
                what: format!("the prompt batch at positions {start}..{end}"),
                needed: end,
                context: self.n_ctx,
                trained: self.config.context_length,
                reset_helps: false,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= self.config.vocab) {
            return Err(Error::Invalid(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        Ok(())
    }

    /// The batch's buffers, made on first use.
    fn batch_buffers(&self) -> Result<std::sync::MutexGuard<'_, Option<BatchBuffers>>> {
        let mut batch = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        if batch.is_none() {
            let buffers = OwnedBuffers::new(self.device.clone());
            let ubatch = self.plan.prefill.ubatch();
            let tokens_bytes = (4 * ubatch).next_multiple_of(16);
            let tokens = Slice::new(
                buffers.create("prefill tokens", tokens_bytes, BufferUse::Storage)?,
                0,
                tokens_bytes,
            );
            let widths = Widths::of(&self.config, &self.plan.offsets);
            let mut rows = Rows::new(&buffers, &widths, ubatch, tokens)?;
            if let Some(bytes) = self.plan.unpacked_scratch() {
                rows.unpacked = Some(UnpackedScratch::new(&buffers, "prefill", bytes)?);
            }
            *batch = Some(BatchBuffers {
                rows,
                logits: None,
                buffers,
            });
        }
        Ok(batch)
    }

    /// Uploads `chunk`'s ids and records its pass at `pos`.
    fn record_batch(
        &self,
        batch: &BatchBuffers,
        chunk: &[u32],
        (seq, pos): (usize, usize),
        output: Output,
    ) -> Result<CommandList> {
        self.device
            .upload(batch.rows.tokens.buffer, 0, bytemuck::cast_slice(chunk))?;
        let n = chunk.len() as u64;
        let place = Place::Run {
            seq,
            pos: pos as u64,
        };
        self.record(
            &batch.rows,
            None,
            (n, place),
            output,
            &mut Probes::default(),
        )
    }
}

/// A step queued by [`Model::step_read`]: redeem it with [`Model::token`].
#[derive(Debug)]
#[must_use = "a ticket holds a staging buffer until it is redeemed"]
pub struct StepTicket {
    pub(super) read: ReadTicket,
    pos: usize,
}

impl Model {
    /// Runs the step for `pos` with one GPU timestamp interval per dispatch and returns
    /// (pipeline name, total nanoseconds, dispatches), slowest first: where a token's
    /// time goes. Each dispatch gets its own pass, so totals include pass overhead
    /// (and its own submission, timed by the wall clock, where the device's timestamps
    /// read as zeros: `Device::clock` says which).
    pub fn profile_step(&self, input: Input, pos: usize) -> Result<Vec<(String, f64, usize)>> {
        if let Input::Token(id) = input {
            self.device
                .upload(self.token_buffer().buffer, 0, &id.to_le_bytes())?;
        }
        let list = self.record_step((0, pos as u64), self.step_logits(), &mut Probes::default())?;
        self.profile_list(&list)
    }

    /// Runs one prompt batch, `chunk` into the cache at `start` (at most the plan's
    /// `ubatch` tokens, as [`Model::prefill`] cuts them), timed per dispatch like
    /// [`Model::profile_step`]: where a prompt's time goes. A lone token's batch is a
    /// decode step's pass.
    pub fn profile_prompt_batch(
        &self,
        chunk: &[u32],
        start: usize,
    ) -> Result<Vec<(String, f64, usize)>> {
        self.check_prompt(chunk, start)?;
        let ubatch = self.plan.prefill.ubatch() as usize;
        if chunk.len() > ubatch {
            return Err(Error::Invalid(format!(
                "a prompt batch of {} tokens: the plan's batches take {ubatch} at most",
                chunk.len()
            )));
        }
        match chunk {
            [] => Ok(Vec::new()),
            [id] => self.profile_step(Input::Token(*id), start),
            _ => {
                let mut batch = self.batch_buffers()?;
                let batch = batch.as_mut().expect("made by batch_buffers");
                let list = self.record_batch(batch, chunk, (0, start), Output::Cache)?;
                self.profile_list(&list)
            }
        }
    }

    /// Runs `list` timed per dispatch: GPU time summed per pipeline (name, ns,
    /// dispatches), slowest first.
    pub(super) fn profile_list(&self, list: &CommandList) -> Result<Vec<(String, f64, usize)>> {
        let times = self
            .device
            .submit_timed(list, crate::device::Timing::PerDispatch)?;
        let names: std::collections::HashMap<u32, String> = self
            .device
            .ledger()
            .entries
            .into_iter()
            .map(|e| (e.pipeline, e.name))
            .collect();
        let mut by_name: std::collections::BTreeMap<String, (f64, usize)> = Default::default();
        for (d, ns) in list.dispatches().zip(times) {
            let name = names
                .get(&d.pipeline.0)
                .cloned()
                .unwrap_or_else(|| format!("{:?}", d.pipeline));
            let e = by_name.entry(name).or_default();
            e.0 += ns;
            e.1 += 1;
        }
        let mut out: Vec<_> = by_name.into_iter().map(|(n, (t, c))| (n, t, c)).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(out)
    }
}

impl Model {
    /// Writes a decode pass's attention rows into `table`, a block per distinct layer
    /// window: each row's position, its sequence's cache region and the split its own
    /// positions take (`AttentionLaunch::row`), so each row attends as a lone step's
    /// would whoever shares the pass. Uploaded now, ahead of the pass's submission.
    fn attention_rows(&self, at: &[SeqAt], table: Slice) -> Result<Vec<WindowRows>> {
        let launch = self.plan.attention.launch();
        let windows = &self.windows;
        let align = self.device.profile().storage_offset_alignment as u64;
        let block = super::layout::row_table_bytes(1, at.len() as u64, align);
        if windows.len() as u64 * block > table.size {
            return Err(Error::Invalid(format!(
                "{} attention rows in {} windows, past a row table of {} bytes",
                at.len(),
                windows.len(),
                table.size
            )));
        }
        let mut bytes = vec![0u8; (windows.len() as u64 * block) as usize];
        let mut out = Vec::new();
        for (i, &window) in windows.iter().enumerate() {
            let rows = at
                .iter()
                .map(|a| launch.row(a.pos, a.seq as u64 * self.cache_positions, window))
                .collect::<Result<Vec<_>>>()?;
            let first = i as u64 * block;
            let row_bytes = AttentionRow::bytes(&rows);
            bytes[first as usize..][..row_bytes.len()].copy_from_slice(row_bytes);
            out.push(WindowRows {
                window,
                table: Slice::new(
                    table.buffer,
                    table.offset + first,
                    rows.len() as u64 * ATTENTION_ROW_BYTES,
                ),
                rows,
            });
        }
        self.device.upload(table.buffer, table.offset, &bytes)?;
        Ok(out)
    }
}
