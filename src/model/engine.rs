//! Many sequences on one model, stepped together.
//!
//! Each sequence has its own region of every layer's KV cache, its own position, sampler
//! and stop conditions. A step runs joining prompts' chunks, about a batch's tokens of
//! them (so a long prompt never stalls the running sequences for more than a batch, and
//! many short ones join in few steps), and then one decode pass
//! whose rows are the next tokens of every running sequence: the forward pass of
//! `forward.rs` with rows placed in several sequences (`Place::Each`), so each layer's
//! weights are read for all of them at once.
//!
//! A sequence's logits do not depend on who shares its steps: every op of a decode pass
//! computes each row as it computes a lone decode step's row, with the same pipelines,
//! the same reduction order and the same attention split, and a prompt is cut into the
//! same batches whoever else is running. The tests check it bit for bit. One limit,
//! stated in the plan (`Clause::DecodeRowsOnMatrixUnits`): on an adapter with
//! cooperative matrices, a model serving `DECODE_MATRIX_UNITS_FROM` (14) sequences or
//! more multiplies the steps of that many rows on the matrix units, where weights and x
//! meet in f16. A row's result there still depends on nothing but the row, so the steps
//! of many rows give a sequence the same bits whoever shares them, but not the bits of
//! the steps of few rows.

use std::path::Path;
use std::sync::Arc;

use super::forward::{DecodeScratch, Head, Output, Place, SeqAt};
use super::layout::{DecodeRows, UnpackedScratch, Widths};
use super::non_finite::Probes;
use super::{LoadOptions, Model};
use crate::device::{BufferUse, CommandList, Device, OwnedBuffers, Slice};
use crate::gguf::GgufFile;
use crate::sampling::{Sampler, SamplerConfig};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// A sequence of an [`Engine`], unique over the engine's life (never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceId(pub u64);

impl std::fmt::Display for SequenceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sequence {}", self.0)
    }
}

/// How a sequence generates.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceOptions {
    /// Tokens to generate at most; 0 only processes the prompt (a prefix to fork from).
    pub max_tokens: usize,
    /// How each token is drawn (greedy by default).
    pub sampler: SamplerConfig,
    /// Ids that end the sequence when generated, besides the tokenizer's
    /// end-of-generation ids. The stop id is not handed out as a token.
    pub stop_ids: Vec<u32>,
    /// Whether the tokenizer's end-of-generation ids (EOS, end of turn) end it (default
    /// true; benchmarks that generate a fixed count turn it off, as
    /// `llama-batched-bench` does).
    pub stop_at_eog: bool,
    /// Whether each [`Event::Token`] carries the logits it was drawn from.
    pub logits: bool,
    /// Tokens fed in place of its first drawn ones (teacher forcing): its i-th token is
    /// `forced[i]`, whatever the logits say, and then it draws as `sampler` says. Each
    /// step still computes the logits at its position, and the event carries them
    /// where `logits` asks, so a given continuation is scored position by position on
    /// the decode route, with the bits a decode of those tokens gets (the tests check
    /// whole models against reference logits this way, many sequences a step). Forced
    /// tokens count toward `max_tokens`, and a stop id among them stops the sequence.
    pub forced: Vec<u32>,
}

impl Default for SequenceOptions {
    fn default() -> Self {
        SequenceOptions {
            max_tokens: usize::MAX,
            sampler: SamplerConfig::greedy(),
            stop_ids: Vec::new(),
            stop_at_eog: true,
            logits: false,
            forced: Vec::new(),
        }
    }
}

/// Why a sequence stopped generating.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// It generated an end-of-generation id (EOS, end of turn), or one of its
    /// `stop_ids`: that id.
    Stop(u32),
    /// It generated `max_tokens`.
    MaxTokens,
    /// Its next token would pass the end of its context.
    ContextFull,
    /// Its logits had NaN or infinite values (the message says how many, where).
    NonFinite(String),
}

/// What a step did for a sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A generated token.
    Token {
        /// Whose.
        seq: SequenceId,
        /// The id.
        id: u32,
        /// The logits it was drawn from, where the sequence asked
        /// (`SequenceOptions::logits`).
        logits: Option<Vec<f32>>,
    },
    /// The sequence stopped; it keeps its cache until [`Engine::remove`] (to be forked
    /// or saved).
    Done {
        /// Whose.
        seq: SequenceId,
        /// Why.
        reason: StopReason,
    },
}

/// One sequence's state.
struct Sequence {
    id: SequenceId,
    /// Its region of the KV cache.
    slot: usize,
    /// Every token so far: the prompt, then each generated one. The first `cached` are in
    /// the cache; the rest are still to be fed.
    tokens: Vec<u32>,
    cached: usize,
    /// Where its rows are a lone prompt's: that prompt's length, its rows before the
    /// last token computed in the batches a lone prompt of its first tokens is cut in
    /// (from its start), so a later prompt can take them bit for bit
    /// ([`Engine::reusable`]). None for forks and restored sequences, cut from elsewhere.
    lone: Option<usize>,
    sampler: Sampler,
    options: SequenceOptions,
    produced: usize,
    done: Option<StopReason>,
}

impl Sequence {
    /// Tokens still to feed before the next token can be drawn.
    fn pending(&self) -> usize {
        self.tokens.len() - self.cached
    }

    /// Whether the next token comes from the GPU's argmax alone.
    fn gpu_greedy(&self) -> bool {
        self.sampler.config().is_greedy()
    }
}

/// A model serving many sequences at once: each step reads the weights once for the
/// next token of every running sequence.
///
/// Sequences join ([`add`](Self::add), [`fork`](Self::fork), [`restore`](Self::restore),
/// and [`add_reusing`](Self::add_reusing) or [`replace`](Self::replace), which take
/// the rows of an earlier prompt that began as theirs does) and leave
/// ([`remove`](Self::remove)) between steps. Their number at once is the
/// model's [`LoadOptions::sequences`], each with [`Model::context`] positions.
///
/// # Examples
///
/// A chat and a completion answered together, greedy (the README's example, which
/// `tests/readme_examples.rs` runs):
///
/// ```no_run
/// use std::sync::Arc;
///
/// use brass::device::{AdapterChoice, WgpuDevice};
/// use brass::hub::default_model_path;
/// use brass::model::{Engine, LoadOptions, SequenceOptions};
/// use brass::tokenizer::ChatMessage;
///
/// # fn main() -> brass::Result<()> {
/// let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// let options = LoadOptions { sequences: 2, ..LoadOptions::default() };
/// let mut engine = Engine::load(device, default_model_path()?, &options)?;
/// let tokenizer = engine.tokenizer();
/// let conversation = [
///     ChatMessage::system("You are a helpful assistant. Answer in one sentence."),
///     ChatMessage::user("What is the capital of Japan?"),
/// ];
/// let chat = tokenizer.encode_chat(&tokenizer.apply_chat_template(&conversation, true)?);
/// let completion = tokenizer.encode("The capital of France is", true, false);
/// let up_to = |max_tokens| SequenceOptions { max_tokens, ..SequenceOptions::default() };
/// let japan = engine.add(&chat, up_to(32))?;
/// let france = engine.add(&completion, up_to(2))?;
/// while engine.running() > 0 {
///     engine.step()?; // a prompt batch, then a token for every sequence whose prompt is in
/// }
/// for (name, seq, prompt) in [("Japan", japan, &chat), ("France", france, &completion)] {
///     let reply = &engine.tokens(seq)?[prompt.len()..];
///     println!("{name}: {:?}", engine.tokenizer().decode(reply, true)?);
/// }
/// # Ok(())
/// # }
/// ```
///
/// prints
///
/// ```text
/// Japan: "The capital of Japan is Tokyo."
/// France: " Paris."
/// ```
pub struct Engine {
    model: Model,
    tokenizer: Tokenizer,
    rows: DecodeRows,
    /// In the order they joined: prompts are processed first come, first served.
    sequences: Vec<Sequence>,
    next_id: u64,
    /// Where rows copied between two regions of one buffer (a fork's, a reused
    /// prompt's) pass on their way (a copy cannot have the same buffer at both ends):
    /// one region, made at the first copy.
    copy_staging: Option<Slice>,
    /// The decode pass queued ahead of the step that will take its tokens.
    ahead: Option<Ahead>,
    buffers: OwnedBuffers<'static>,
}

/// A decode pass queued ahead: its rows (sequence, position) and its read-back.
struct Ahead {
    rows: Vec<(SequenceId, usize)>,
    ticket: crate::device::ReadTicket,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model)
            .field("sequences", &self.sequences.len())
            .finish()
    }
}

impl Engine {
    /// An engine over `model` (loaded with the [`LoadOptions::sequences`] it will
    /// serve) and its tokenizer.
    pub fn new(model: Model, tokenizer: Tokenizer) -> Result<Engine> {
        super::session::check_vocab(&tokenizer, model.config().vocab)?;
        let buffers = OwnedBuffers::new(model.device().clone());
        let widths = Widths::of(model.config(), &model.plan().offsets);
        let windows = model.windows.len() as u64;
        let capacity = model.sequences() as u64;
        let mut rows = DecodeRows::new(
            &buffers,
            &widths,
            (capacity, model.config().vocab as u64, windows),
            (model.plan().attention.launch(), model.device().profile()),
        )?;
        if let Some(bytes) = model.plan().decode_unpacked_scratch(capacity) {
            let scratch = UnpackedScratch::new(&buffers, "decode rows'", bytes)?;
            rows.rows.unpacked = Some(scratch);
        }
        if let Some(bytes) = model.plan().decode_span_scratch(capacity) {
            let b = buffers.create("decode rows' K spans", bytes, BufferUse::Storage)?;
            rows.rows.spans = Some(Slice::new(b, 0, bytes));
        }
        Ok(Engine {
            model,
            tokenizer,
            rows,
            sequences: Vec::new(),
            next_id: 0,
            copy_staging: None,
            ahead: None,
            buffers,
        })
    }

    /// Opens the GGUF file at `path` and loads its model and tokenizer on `device`.
    pub fn load(
        device: Arc<dyn Device>,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<Engine> {
        Engine::from_gguf(device, &GgufFile::open(path)?, options)
    }

    /// Loads an opened file's model and tokenizer on `device`.
    pub fn from_gguf(
        device: Arc<dyn Device>,
        file: &GgufFile,
        options: &LoadOptions,
    ) -> Result<Engine> {
        let tokenizer = Tokenizer::from_gguf(file)?;
        let plan = super::plan(file, device.profile(), options)?;
        super::session::check_vocab(&tokenizer, plan.config.vocab)?;
        let model = Model::from_plan(device, file, plan)?;
        Engine::new(model, tokenizer)
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Sequences still generating (or processing their prompt).
    pub fn running(&self) -> usize {
        self.sequences.iter().filter(|s| s.done.is_none()).count()
    }

    /// Every sequence the engine holds, running or stopped, in the order they joined.
    pub fn sequences(&self) -> Vec<SequenceId> {
        self.sequences.iter().map(|s| s.id).collect()
    }

    /// A sequence's tokens so far: its prompt, then what it generated.
    pub fn tokens(&self, seq: SequenceId) -> Result<&[u32]> {
        Ok(&self.get(seq)?.tokens)
    }

    /// Why a sequence stopped, or None while it runs.
    pub fn stopped(&self, seq: SequenceId) -> Result<Option<&StopReason>> {
        Ok(self.get(seq)?.done.as_ref())
    }

    fn get(&self, seq: SequenceId) -> Result<&Sequence> {
        Ok(&self.sequences[self.index(seq)?])
    }

    /// A free region of the cache, or the error that says none is.
    fn free_slot(&self) -> Result<usize> {
        let n = self.model.sequences();
        (0..n)
            .find(|slot| self.sequences.iter().all(|s| s.slot != *slot))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "all {n} sequences the model was loaded for are in use \
                     (LoadOptions::sequences; remove a stopped one first)"
                ))
            })
    }

    /// Checks a sequence's tokens against the vocabulary and the context, and its options.
    fn check(&self, tokens: &[u32], options: &SequenceOptions) -> Result<()> {
        options.sampler.validate()?;
        if tokens.is_empty() {
            return Err(Error::Invalid("a sequence needs at least one token".into()));
        }
        let vocab = self.model.config().vocab;
        if let Some(&bad) = tokens
            .iter()
            .chain(&options.forced)
            .find(|&&id| id as usize >= vocab)
        {
            return Err(Error::Invalid(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let context = self.model.context();
        if tokens.len() > context {
            return Err(Error::ContextFull {
                what: format!("a sequence of {} tokens", tokens.len()),
                needed: tokens.len(),
                context,
                trained: self.model.config().context_length,
                reset_helps: false,
            });
        }
        Ok(())
    }

    fn join(
        &mut self,
        slot: usize,
        (tokens, cached, lone): (Vec<u32>, usize, Option<usize>),
        options: SequenceOptions,
    ) -> SequenceId {
        let id = SequenceId(self.next_id);
        self.next_id += 1;
        self.sequences.push(Sequence {
            id,
            slot,
            tokens,
            cached,
            lone,
            sampler: Sampler::new(options.sampler.clone()),
            options,
            produced: 0,
            done: None,
        });
        id
    }

    /// A new sequence with `prompt` (at least one token, at most the context). Its
    /// prompt is processed by the following steps, a batch per step, then it generates.
    pub fn add(&mut self, prompt: &[u32], options: SequenceOptions) -> Result<SequenceId> {
        self.check(prompt, &options)?;
        let slot = self.free_slot()?;
        Ok(self.join_prompt(slot, prompt, 0, options))
    }

    /// Joins a sequence of `prompt` in region `slot`, its first `reused` rows there
    /// already, computed as a lone prompt's.
    fn join_prompt(
        &mut self,
        slot: usize,
        prompt: &[u32],
        reused: usize,
        options: SequenceOptions,
    ) -> SequenceId {
        self.join(slot, (prompt.to_vec(), reused, Some(prompt.len())), options)
    }

    /// How many of `prompt`'s first positions a new sequence can take from `from`'s
    /// cache ([`add_reusing`](Self::add_reusing), [`replace`](Self::replace)) with the
    /// bits that processing `prompt` from its start gives them, so that its reply is
    /// the one it gets from scratch: rows of `from`'s prompt batches where `from`'s
    /// tokens are `prompt`'s.
    ///
    /// A row's bits depend on the batch it was computed in, and a prompt's batches are
    /// cut from its start ([`step`](Self::step)), so the rows taken end at a whole
    /// batch, or at `prompt`'s last token where `from`'s prompt had `prompt`'s length
    /// (then every batch was cut alike). 0 where `from` is a fork or a restored
    /// sequence (its batches were cut from elsewhere), or `from` is `prompt` less its
    /// last token: that one is fed by the decode pass, which draws the first token.
    pub fn reusable(&self, from: SequenceId, prompt: &[u32]) -> Result<usize> {
        Ok(self.reusable_rows(self.get(from)?, prompt))
    }

    fn reusable_rows(&self, from: &Sequence, prompt: &[u32]) -> usize {
        let Some(lone) = from.lone else {
            return 0;
        };
        let n = prompt.len();
        let common = from
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // Rows of its prompt batches (not of its decode passes) in the cache so far.
        let batched = from.cached.min(lone.saturating_sub(1));
        let rows = common.min(n.saturating_sub(1)).min(batched);
        let ubatch = self.model.plan().prefill.ubatch() as usize;
        match lone == n && rows + 1 == n {
            true => rows,
            false => rows / ubatch * ubatch,
        }
    }

    /// A new sequence with `prompt`, as [`add`](Self::add), whose first
    /// [`reusable`](Self::reusable)`(from, prompt)` rows are copied from `from`'s
    /// cache instead of computed (`from` goes on as it was): a prompt that begins as an
    /// earlier one did (a system prompt, a conversation's earlier turns) skips that
    /// part, and its reply is, bit for bit, the one it gets from scratch. Returns the
    /// sequence and the rows it took.
    pub fn add_reusing(
        &mut self,
        from: SequenceId,
        prompt: &[u32],
        options: SequenceOptions,
    ) -> Result<(SequenceId, usize)> {
        self.check(prompt, &options)?;
        let parent = self.get(from)?;
        let (reused, from_slot) = (self.reusable_rows(parent, prompt), parent.slot);
        let slot = self.free_slot()?;
        self.copy_rows(from_slot, slot, reused)?;
        Ok((self.join_prompt(slot, prompt, reused, options), reused))
    }

    /// A new sequence with `prompt` in `old`'s region of the cache: `old` leaves the
    /// engine (as by [`remove`](Self::remove)), and the new one keeps the
    /// [`reusable`](Self::reusable) rows where they are, with no copy; the rest of the
    /// region is written over. How a server keeps finished requests' caches for later
    /// prompts that begin as theirs did, without a region spent on copies. Returns the
    /// sequence and the rows it took; where `prompt` is refused, `old` stays.
    pub fn replace(
        &mut self,
        old: SequenceId,
        prompt: &[u32],
        options: SequenceOptions,
    ) -> Result<(SequenceId, usize)> {
        self.check(prompt, &options)?;
        let at = self.index(old)?;
        let reused = self.reusable_rows(&self.sequences[at], prompt);
        let slot = self.sequences.remove(at).slot;
        Ok((self.join_prompt(slot, prompt, reused, options), reused))
    }

    /// Copies the first `positions` K and V rows of every layer from one region of the
    /// cache to another.
    fn copy_rows(&mut self, from: usize, to: usize, positions: usize) -> Result<()> {
        let bytes = self.position_bytes() * positions as u64;
        if bytes == 0 {
            return Ok(());
        }
        let staging = match self.copy_staging {
            Some(made) => made,
            None => {
                let region = self.position_bytes() * self.model.context() as u64;
                let made = Slice::new(
                    self.buffers
                        .create("cache copy staging", region, BufferUse::Storage)?,
                    0,
                    region,
                );
                *self.copy_staging.insert(made)
            }
        };
        let mut list = CommandList::new();
        let regions = self.model.cache_regions(from);
        for (src, dst) in regions.zip(self.model.cache_regions(to)) {
            list.copy(Slice::new(src.buffer, src.offset, bytes), staging.buffer, 0);
            list.copy(Slice::new(staging.buffer, 0, bytes), dst.buffer, dst.offset);
        }
        self.model.device().submit(&list)
    }

    /// A new sequence that starts where `parent` stands, its cached rows copied (not
    /// recomputed), then goes on with `more` tokens (which may be none). A prefix many
    /// sequences share (a system prompt) is processed once this way.
    pub fn fork(
        &mut self,
        parent: SequenceId,
        more: &[u32],
        options: SequenceOptions,
    ) -> Result<SequenceId> {
        let p = self.get(parent)?;
        let tokens: Vec<u32> = p.tokens.iter().chain(more).copied().collect();
        let (from, cached) = (p.slot, p.cached);
        self.check(&tokens, &options)?;
        let slot = self.free_slot()?;
        self.copy_rows(from, slot, cached)?;
        Ok(self.join(slot, (tokens, cached, None), options))
    }

    /// Frees a sequence's region of the cache (running or stopped).
    pub fn remove(&mut self, seq: SequenceId) -> Result<()> {
        let at = self.index(seq)?;
        self.sequences.remove(at);
        Ok(())
    }

    fn index(&self, seq: SequenceId) -> Result<usize> {
        self.sequences
            .iter()
            .position(|s| s.id == seq)
            .ok_or_else(|| Error::Invalid(format!("{seq} is not in this engine")))
    }

    /// Bytes of one position's K (or V) rows in a layer.
    fn position_bytes(&self) -> u64 {
        self.model.plan().attention.launch().position_bytes()
    }

    /// One step: a batch of joining prompts (`prompt_batches`), then a token for every
    /// running sequence whose prompt is in. Returns what happened to each, in the order the
    /// sequences joined.
    ///
    /// Where every decode row is greedy and asks for no logits, the next step's pass is
    /// queued before this one returns (its ids go from each row's argmax to its input
    /// on the GPU), and the one after it before this step waits for its tokens, as
    /// `Session` queues its steps: the GPU runs pass after pass while the host reads
    /// one back and records the next. A row that stops meanwhile has its queued tokens
    /// dropped (the cache slots they wrote are past the sequence's end).
    pub fn step(&mut self) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut served = Vec::new();
        let mut in_flight = None;
        if let Some(ahead) = self.ahead.take() {
            served = ahead.rows.iter().map(|r| r.0).collect();
            in_flight = self.queue_pass(&served, 1)?;
            let results = self.model.device().finish_read(ahead.ticket)?;
            self.take_tokens(&ahead.rows, &results, &mut events)?;
        }
        self.prompt_batches()?;
        // A sequence asked for no tokens is done once its prompt is in.
        for s in &mut self.sequences {
            if s.done.is_none() && s.pending() == 1 && s.produced >= s.options.max_tokens {
                s.done = Some(StopReason::MaxTokens);
                events.push(Event::Done {
                    seq: s.id,
                    reason: StopReason::MaxTokens,
                });
            }
        }
        let ready: Vec<usize> = (0..self.sequences.len())
            .filter(|&i| {
                let s = &self.sequences[i];
                s.done.is_none() && s.pending() == 1 && !served.contains(&s.id)
            })
            .collect();
        let capacity = self.rows.rows.capacity as usize;
        let mut last = served;
        for group in ready.chunks(capacity) {
            let rows = self.decode_rows(group, &mut events);
            if rows.is_empty() {
                continue;
            }
            let results = self.run_pass(&rows)?;
            self.take_tokens(&rows, &results, &mut events)?;
            last = rows.iter().map(|r| r.0).collect();
        }
        if ready.len() > capacity {
            // Several passes: the GPU's ids are spread over them.
            last.clear();
        }
        self.ahead = match in_flight {
            // The served rows' next pass is queued already.
            Some(next) => Some(next),
            None => self.queue_pass(&last, 0)?,
        };
        Ok(events)
    }

    /// This step's prompt batches: the next batch of each sequence still feeding its
    /// prompt (all of it but the last token, cut in the plan's batches counted from
    /// where it started, as [`Model::prefill`] cuts a lone prompt), first come first
    /// served, while together they come to at most one batch's tokens (the first always
    /// goes). So no running sequence waits more than about a batch between tokens, and
    /// short prompts joining together are not each a step apart: each step's decode
    /// pass would otherwise come between them (32 clients' 128-token prompts: the
    /// last one's first token 31 prompts and 31 decode passes after its request).
    fn prompt_batches(&mut self) -> Result<()> {
        let ubatch = self.model.plan().prefill.ubatch() as usize;
        let mut budget = ubatch;
        let joining = self
            .sequences
            .iter_mut()
            .filter(|s| s.done.is_none() && s.pending() > 1);
        for (i, s) in joining.enumerate() {
            let end = (s.cached + ubatch).min(s.tokens.len() - 1);
            let tokens = end - s.cached;
            if i > 0 && tokens > budget {
                break;
            }
            self.model
                .prefill_chunk(s.slot, &s.tokens[s.cached..end], s.cached)?;
            s.cached = end;
            budget = budget.saturating_sub(tokens);
            if budget == 0 {
                break;
            }
        }
        Ok(())
    }

    /// The rows of a decode pass over the sequences at `group` (indices into
    /// `sequences`): each one's id and position. A sequence whose next token has no
    /// room stops here instead.
    fn decode_rows(
        &mut self,
        group: &[usize],
        events: &mut Vec<Event>,
    ) -> Vec<(SequenceId, usize)> {
        let context = self.model.context();
        let mut rows = Vec::new();
        for &i in group {
            let s = &mut self.sequences[i];
            if s.cached < context {
                rows.push((s.id, s.cached));
                continue;
            }
            s.done = Some(StopReason::ContextFull);
            events.push(Event::Done {
                seq: s.id,
                reason: StopReason::ContextFull,
            });
        }
        rows
    }

    /// Records and submits a decode pass over `rows` (sequence, position), each row's
    /// input id `uploaded` or else left on the GPU by the pass before (whose rows were
    /// the same), and queues the read-back of its argmax records.
    fn record_pass(
        &self,
        rows: &[(SequenceId, usize)],
        uploaded: bool,
    ) -> Result<crate::device::ReadTicket> {
        let list = self.pass_list(rows, uploaded)?;
        let records = Slice::new(
            self.rows.results.buffer,
            0,
            rows.len() as u64 * self.rows.result_stride,
        );
        self.model.device().submit_read(&list, records)
    }

    /// A decode pass over every sequence whose prompt is in (up to a pass's rows), timed
    /// per dispatch on the GPU: time summed per pipeline (name, ns, dispatches), slowest
    /// first. Where a step's time goes at a number of sequences (`compare --parallel`).
    ///
    /// The sequences do not advance: the pass feeds each its last token at the
    /// position the next step feeds it, so it writes the cache rows and argmax that
    /// pass will write, bit for bit (a pass queued ahead already wrote them).
    pub fn profile_pass(&self) -> Result<Vec<(String, f64, usize)>> {
        let context = self.model.context();
        let rows: Vec<(SequenceId, usize)> = self
            .sequences
            .iter()
            .filter(|s| s.done.is_none() && s.pending() == 1 && s.cached < context)
            .map(|s| (s.id, s.cached))
            .take(self.rows.rows.capacity as usize)
            .collect();
        if rows.is_empty() {
            return Err(Error::Invalid(
                "no sequence has its prompt in: no decode pass to profile".into(),
            ));
        }
        let list = self.pass_list(&rows, true)?;
        self.model.profile_list(&list)
    }

    /// The commands of a decode pass over `rows` (see `record_pass`).
    fn pass_list(&self, rows: &[(SequenceId, usize)], uploaded: bool) -> Result<CommandList> {
        let at: Vec<SeqAt> = rows
            .iter()
            .map(|&(id, pos)| {
                let s = self.get(id).expect("rows of present sequences");
                SeqAt {
                    seq: s.slot,
                    pos: pos as u64,
                }
            })
            .collect();
        let dev = self.model.device();
        let buffers = &self.rows;
        if uploaded {
            let ids: Vec<u32> = rows
                .iter()
                .map(|&(id, _)| {
                    *self
                        .get(id)
                        .expect("present")
                        .tokens
                        .last()
                        .expect("pending")
                })
                .collect();
            dev.upload(buffers.rows.tokens.buffer, 0, bytemuck::cast_slice(&ids))?;
        }
        let head = Head {
            logits: buffers.logits,
            stride: buffers.stride,
            scratch: buffers.scratch,
            results: buffers.results,
            result_stride: buffers.result_stride,
        };
        let n = rows.len() as u64;
        let mut list = self.model.record(
            &buffers.rows,
            Some(DecodeScratch {
                parts: buffers.parts,
                rows: buffers.att_rows,
            }),
            (n, Place::Each(&at)),
            Output::Logits(head),
            &mut Probes::default(),
        )?;
        // Each row's greedy id becomes its input of the pass after, should the engine
        // queue one ahead.
        for r in 0..n {
            let id = Slice::new(buffers.results.buffer, r * buffers.result_stride, 4);
            list.copy(id, buffers.rows.tokens.buffer, 4 * r);
        }
        Ok(list)
    }

    /// A decode pass over `rows` now, its ids uploaded: its argmax records.
    fn run_pass(&self, rows: &[(SequenceId, usize)]) -> Result<Vec<u8>> {
        let ticket = self.record_pass(rows, true)?;
        self.model.device().finish_read(ticket)
    }

    /// Records and submits the next decode pass over the sequences of the last one
    /// (`last`), with `fed` tokens of each still in flight, where each of them goes on
    /// greedily with no logits asked and no other sequence waits to decode
    /// (`rows_going_on`): its ids are already on the GPU, the argmax of the pass
    /// before. With `fed` = 1 it is queued before the host waits for the pass in
    /// flight, so the GPU runs it straight after while the host reads that one back and
    /// records the next; a row that the pass in flight ends has this pass's token
    /// dropped (it wrote only the cache slot past the sequence's end).
    fn queue_pass(&self, last: &[SequenceId], fed: usize) -> Result<Option<Ahead>> {
        let Some(rows) = self.rows_going_on(last, fed) else {
            return Ok(None);
        };
        let ticket = self.record_pass(&rows, false)?;
        Ok(Some(Ahead { rows, ticket }))
    }

    /// The rows (sequence, position) of a pass over the sequences `last` with `fed`
    /// tokens of each still in flight, where each goes on with no word from the host:
    /// greedy on the GPU, no logits asked, past its forced tokens, room for one more
    /// token by its `max_tokens` and its context; and no other sequence waits to decode.
    /// None otherwise.
    fn rows_going_on(&self, last: &[SequenceId], fed: usize) -> Option<Vec<(SequenceId, usize)>> {
        if last.is_empty() {
            return None;
        }
        let context = self.model.context();
        let mut rows = Vec::new();
        for id in last {
            let s = self.get(*id).ok()?;
            // The id the GPU left is the one fed next only where it was drawn: the
            // last token taken (`fed` = 0) or the one in flight is past the forced ones.
            let goes_on = s.done.is_none()
                && s.pending() == 1
                && s.gpu_greedy()
                && !s.options.logits
                && s.produced + fed > s.options.forced.len()
                && s.produced + fed < s.options.max_tokens
                && s.cached + fed < context;
            if !goes_on {
                return None;
            }
            rows.push((s.id, s.cached + fed));
        }
        let others = self
            .sequences
            .iter()
            .any(|s| s.done.is_none() && s.pending() == 1 && !last.contains(&s.id));
        (!others).then_some(rows)
    }

    /// Each row's token from a pass's argmax `records`, for the sequences still at that
    /// row's position (a row of a sequence removed or stopped since is dropped).
    fn take_tokens(
        &mut self,
        rows: &[(SequenceId, usize)],
        records: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let dev = self.model.device().clone();
        let vocab = self.model.config().vocab;
        for (r, &(id, pos)) in rows.iter().enumerate() {
            let Some(i) = self.sequences.iter().position(|s| s.id == id) else {
                continue;
            };
            let s = &self.sequences[i];
            if s.done.is_some() || s.cached != pos || s.pending() != 1 {
                continue;
            }
            let record = &records[r * self.rows.result_stride as usize..];
            let [greedy, non_finite]: [u32; 2] = bytemuck::pod_read_unaligned(&record[..8]);
            let forced = s.options.forced.get(s.produced).copied();
            // A forced token needs no sampler, so its logits are read only where asked.
            let sampled = forced.is_none() && !s.gpu_greedy();
            let logits = match s.options.logits || sampled || non_finite > 0 {
                true => Some(crate::device::read_f32(
                    dev.as_ref(),
                    self.rows.logits.buffer,
                    4 * self.rows.stride * r as u64,
                    vocab,
                )?),
                false => None,
            };
            let s = &mut self.sequences[i];
            s.cached += 1;
            if non_finite > 0 {
                let reason = StopReason::NonFinite(format!(
                    "{non_finite} of {vocab} logits are NaN or infinite at position {pos}"
                ));
                s.done = Some(reason.clone());
                events.push(Event::Done { seq: s.id, reason });
                continue;
            }
            let id = match (forced, &logits) {
                (Some(forced), _) => forced,
                (None, Some(l)) if sampled => s.sampler.sample(l, &s.tokens),
                _ => greedy,
            };
            s.tokens.push(id);
            s.produced += 1;
            let eog = s.options.stop_at_eog && self.tokenizer.is_eog(id);
            if eog || s.options.stop_ids.contains(&id) {
                s.done = Some(StopReason::Stop(id));
                events.push(Event::Done {
                    seq: s.id,
                    reason: StopReason::Stop(id),
                });
                continue;
            }
            events.push(Event::Token {
                seq: s.id,
                id,
                logits: logits.filter(|_| s.options.logits),
            });
            if s.produced >= s.options.max_tokens {
                s.done = Some(StopReason::MaxTokens);
                events.push(Event::Done {
                    seq: s.id,
                    reason: StopReason::MaxTokens,
                });
            }
        }
        Ok(())
    }

    /// Writes a sequence's tokens and cached K and V rows to `path`, with the model's
    /// identity and a checksum, for [`restore`](Self::restore) (in this process or
    /// another, on a model loaded from the same file with the same KV format).
    pub fn save(&self, seq: SequenceId, path: impl AsRef<Path>) -> Result<()> {
        let s = self.get(seq)?;
        let dev = self.model.device();
        let bytes = self.position_bytes() * s.cached as u64;
        let mut rows = Vec::new();
        if bytes > 0 {
            for half in self.model.cache_regions(s.slot) {
                rows.push(dev.read(half.buffer, half.offset, bytes)?);
            }
        }
        let saved = saved::Saved {
            model: self.model.plan().file,
            kv: self.model.plan().kv.name().to_string(),
            layers: self.model.config().n_layers as u32,
            position_bytes: self.position_bytes(),
            cached: s.cached as u64,
            tokens: s.tokens.clone(),
            rows,
        };
        let path = path.as_ref();
        std::fs::write(path, saved.to_bytes()).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A new sequence from a file [`save`](Self::save) wrote: its tokens, and its
    /// cached rows uploaded (nothing recomputed). Refused, with what is wrong, where the
    /// file is truncated or corrupted, or was saved from another model, KV format or
    /// shape, or holds more tokens than the context.
    pub fn restore(
        &mut self,
        path: impl AsRef<Path>,
        options: SequenceOptions,
    ) -> Result<SequenceId> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |what: String| Error::Invalid(format!("{}: {what}", path.display()));
        let saved = saved::Saved::from_bytes(&bytes).map_err(bad)?;
        let plan = self.model.plan();
        if saved.model != plan.file {
            return Err(bad(format!(
                "saved from another model (file of {} bytes, header hash {:016x}; this model's \
                 file has {} bytes, hash {:016x})",
                saved.model.0, saved.model.1, plan.file.0, plan.file.1
            )));
        }
        if saved.kv != plan.kv.name() {
            return Err(bad(format!(
                "saved with a {} KV cache; this model's is {}",
                saved.kv,
                plan.kv.name()
            )));
        }
        let layers = self.model.config().n_layers as u32;
        if saved.layers != layers || saved.position_bytes != self.position_bytes() {
            return Err(bad(format!(
                "saved for {} layers of {} bytes a position; this model has {layers} of {}",
                saved.layers,
                saved.position_bytes,
                self.position_bytes()
            )));
        }
        self.check(&saved.tokens, &options)?;
        let slot = self.free_slot()?;
        let dev = self.model.device().clone();
        for (half, rows) in self.model.cache_regions(slot).zip(&saved.rows) {
            dev.upload(half.buffer, half.offset, rows)?;
        }
        Ok(self.join(slot, (saved.tokens, saved.cached as usize, None), options))
    }
}

/// The saved-sequence file: a header, the tokens, each layer's K then V rows, and a
/// SHA-256 of all of it. Little-endian throughout.
mod saved {
    use sha2::Digest;

    const MAGIC: &[u8; 8] = b"BRASSSEQ";
    const VERSION: u32 = 1;

    pub(super) struct Saved {
        /// The model file's identity (`GgufFile::identity`).
        pub model: (u64, u64),
        pub kv: String,
        pub layers: u32,
        pub position_bytes: u64,
        pub cached: u64,
        pub tokens: Vec<u32>,
        /// K then V of each layer: `cached * position_bytes` bytes each.
        pub rows: Vec<Vec<u8>>,
    }

    impl Saved {
        pub fn to_bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&VERSION.to_le_bytes());
            out.extend_from_slice(&self.model.0.to_le_bytes());
            out.extend_from_slice(&self.model.1.to_le_bytes());
            out.extend_from_slice(&(self.kv.len() as u32).to_le_bytes());
            out.extend_from_slice(self.kv.as_bytes());
            out.extend_from_slice(&self.layers.to_le_bytes());
            out.extend_from_slice(&self.position_bytes.to_le_bytes());
            out.extend_from_slice(&self.cached.to_le_bytes());
            out.extend_from_slice(&(self.tokens.len() as u64).to_le_bytes());
            for t in &self.tokens {
                out.extend_from_slice(&t.to_le_bytes());
            }
            for rows in &self.rows {
                out.extend_from_slice(rows);
            }
            let digest = sha2::Sha256::digest(&out);
            out.extend_from_slice(&digest);
            out
        }

        /// Parses what `to_bytes` wrote, or says what is wrong.
        pub fn from_bytes(bytes: &[u8]) -> Result<Saved, String> {
            let mut r = Reader { bytes, at: 0 };
            if r.take(8)? != MAGIC {
                return Err("not a saved brass sequence (no BRASSSEQ at its start)".into());
            }
            let version = r.u32()?;
            if version != VERSION {
                return Err(format!(
                    "format version {version}; this brass reads {VERSION}"
                ));
            }
            let model = (r.u64()?, r.u64()?);
            let kv_len = r.u32()? as usize;
            if kv_len > 16 {
                return Err(format!("a KV format name of {kv_len} bytes: corrupted"));
            }
            let kv = String::from_utf8(r.take(kv_len)?.to_vec())
                .map_err(|_| "a KV format name that is not UTF-8: corrupted".to_string())?;
            let layers = r.u32()?;
            let position_bytes = r.u64()?;
            let cached = r.u64()?;
            let n_tokens = r.u64()?;
            if cached > n_tokens {
                return Err(format!("{cached} cached of {n_tokens} tokens: corrupted"));
            }
            // Sizes from the header are checked against the file before anything is
            // allocated for them.
            let rows_bytes = position_bytes
                .checked_mul(cached)
                .filter(|b| *b <= bytes.len() as u64)
                .ok_or_else(|| truncated(bytes.len()))?;
            let expected = (r.at as u64)
                .checked_add(
                    n_tokens
                        .checked_mul(4)
                        .ok_or_else(|| truncated(bytes.len()))?,
                )
                .and_then(|n| n.checked_add(rows_bytes.checked_mul(2 * layers as u64)?))
                .and_then(|n| n.checked_add(32))
                .ok_or_else(|| truncated(bytes.len()))?;
            if (bytes.len() as u64) < expected {
                return Err(format!(
                    "truncated: {} bytes where its header says {expected}",
                    bytes.len()
                ));
            }
            if bytes.len() as u64 > expected {
                return Err(format!(
                    "{} bytes where its header says {expected}: corrupted",
                    bytes.len()
                ));
            }
            let body = &bytes[..bytes.len() - 32];
            if sha2::Sha256::digest(body).as_slice() != &bytes[bytes.len() - 32..] {
                return Err("its checksum does not match its contents: corrupted".into());
            }
            let tokens = (0..n_tokens).map(|_| r.u32()).collect::<Result<_, _>>()?;
            let rows = (0..2 * layers)
                .map(|_| r.take(rows_bytes as usize).map(<[u8]>::to_vec))
                .collect::<Result<_, _>>()?;
            Ok(Saved {
                model,
                kv,
                layers,
                position_bytes,
                cached,
                tokens,
                rows,
            })
        }
    }

    fn truncated(len: usize) -> String {
        format!("truncated or corrupted: a header whose sizes pass its {len} bytes")
    }

    struct Reader<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
            let end = end.ok_or_else(|| {
                format!(
                    "truncated: {} bytes, where more follow byte {}",
                    self.bytes.len(),
                    self.at
                )
            })?;
            let out = &self.bytes[self.at..end];
            self.at = end;
            Ok(out)
        }

        fn u32(&mut self) -> Result<u32, String> {
            Ok(u32::from_le_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            ))
        }

        fn u64(&mut self) -> Result<u64, String> {
            Ok(u64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            ))
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            let _ = self.model.device().finish_read(ahead.ticket);
        }
    }
}

const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Engine>();
};
