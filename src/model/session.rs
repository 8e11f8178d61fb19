//! A generation session: a model, its tokenizer and a position in the KV cache.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Input, LoadOptions, Model, StepTicket};
use crate::device::Device;
use crate::gguf::GgufFile;
use crate::sampling::{Sampler, SamplerConfig};
use crate::tokenizer::{ChatMessage, TokenStreamDecoder, Tokenizer};
use crate::{Error, Result};

/// One generated token and the text it completed (empty while a multi-byte character
/// is still incomplete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token's id in the vocabulary.
    pub id: u32,
    /// The text it completes, special tokens skipped: concatenated, a stream's texts
    /// are the generated text.
    pub text: String,
}

/// What to feed before generating.
#[derive(Clone, Copy, Debug)]
pub enum Prompt<'a> {
    /// Tokenized with special tokens parsed and the model's own BOS setting.
    Text(&'a str),
    /// Token ids, fed as they are (no BOS is added); each must be below the vocabulary
    /// size.
    Ids(&'a [u32]),
}

impl<'a> From<&'a str> for Prompt<'a> {
    fn from(s: &'a str) -> Self {
        Prompt::Text(s)
    }
}

impl<'a> From<&'a [u32]> for Prompt<'a> {
    fn from(ids: &'a [u32]) -> Self {
        Prompt::Ids(ids)
    }
}

impl<'a> From<&'a Vec<u32>> for Prompt<'a> {
    fn from(ids: &'a Vec<u32>) -> Self {
        Prompt::Ids(ids)
    }
}

/// What a session has done since it was created or [reset](Session::reset), summed
/// over its [`generate`](Session::generate) and [`chat`](Session::chat) calls, with
/// wall-clock times.
///
/// A call's first token comes out of the step that takes the last prompt token, so it
/// is timed with the prompt (`time_to_first_token`); decode speed is over the steps
/// after it.
///
/// # Examples
///
/// ```no_run
/// # use std::sync::Arc;
/// # use brass::device::{AdapterChoice, WgpuDevice};
/// # use brass::model::{LoadOptions, Session};
/// # use brass::sampling::{Sampler, SamplerConfig};
/// # fn main() -> brass::Result<()> {
/// # let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// # let path = brass::hub::default_model_path()?;
/// # let mut session = Session::load(device, path, &LoadOptions::default())?;
/// let greedy = Sampler::new(SamplerConfig::greedy());
/// let text: String = session
///     .generate("The capital of France is", 16, greedy)?
///     .map(|token| token.map(|t| t.text))
///     .collect::<brass::Result<_>>()?;
///
/// let stats = session.stats();
/// println!("{text}");
/// println!(
///     "prompt: {} tokens in {:.0} ms ({:.0} tok/s)",
///     stats.prompt_tokens,
///     stats.time_to_first_token.as_secs_f64() * 1e3,
///     stats.prompt_tokens_per_second().unwrap_or(0.0),
/// );
/// if let Some(rate) = stats.decode_tokens_per_second() {
///     println!("decode: {} steps at {rate:.1} tok/s", stats.decode_steps);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Tokens fed as prompts (with the token a previous call generated last, which is
    /// fed at the start of the next call).
    pub prompt_tokens: usize,
    /// From each call's first `next()` to its first token: the prompt pass.
    pub time_to_first_token: Duration,
    /// Tokens the streams yielded. The end-of-generation token that stops a stream is
    /// not yielded and not counted.
    pub generated_tokens: usize,
    /// Steps after each call's first token, each sampling one token (the last may be
    /// the end-of-generation token).
    pub decode_steps: usize,
    /// Time spent in those steps.
    pub decode_time: Duration,
}

impl Stats {
    /// Prompt tokens per second over `time_to_first_token`; `None` before any prompt.
    pub fn prompt_tokens_per_second(&self) -> Option<f64> {
        per_second(self.prompt_tokens, self.time_to_first_token)
    }

    /// Decode steps per second after the first token; `None` until a call has
    /// generated a second token.
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        per_second(self.decode_steps, self.decode_time)
    }
}

fn per_second(count: usize, time: Duration) -> Option<f64> {
    (count > 0 && !time.is_zero()).then(|| count as f64 / time.as_secs_f64())
}

/// A model with a tokenizer and a conversation state: the tokens in the model's KV
/// cache. [`generate`](Session::generate) continues from them; [`chat`](Session::chat)
/// renders a conversation with the model's chat template. The crate root has a longer
/// example.
///
/// # Examples
///
/// A conversation of two turns. Each call passes the whole conversation; where it
/// starts with the tokens already in the KV cache, only the rest is fed.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use brass::device::{AdapterChoice, WgpuDevice};
/// use brass::model::{LoadOptions, Session};
/// use brass::sampling::{Sampler, SamplerConfig};
/// use brass::tokenizer::ChatMessage;
///
/// # fn main() -> brass::Result<()> {
/// let device = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
/// let path = brass::hub::default_model_path()?;
/// let mut session = Session::load(device, path, &LoadOptions::default())?;
///
/// let mut conversation = Vec::new();
/// for question in ["Name a prime number.", "And another one?"] {
///     conversation.push(ChatMessage::user(question));
///     let sampler = Sampler::new(SamplerConfig::greedy());
///     let reply = session
///         .chat(&conversation, 64, sampler)?
///         .map(|token| token.map(|t| t.text))
///         .collect::<brass::Result<String>>()?;
///     println!("{question}\n> {reply}");
///     conversation.push(ChatMessage::assistant(reply));
/// }
/// println!("{} positions of {} in use", session.position(), session.model().context());
/// # Ok(())
/// # }
/// ```
pub struct Session {
    model: Model,
    tokenizer: Tokenizer,
    /// Tokens already in the KV cache.
    pos: usize,
    /// Every token fed or generated, for the repetition penalty.
    history: Vec<u32>,
    /// The last generated token, not yet fed to the model (it is fed first next time).
    unfed: Option<u32>,
    stats: Stats,
}

/// The tokenizer and the embedding must count the same tokens, as llama.cpp requires:
/// with fewer tokens the model can generate ids that do not decode, with more the
/// tokenizer can encode ids the model has no row for. GGUF converters pad the token
/// list to the embedding's rows, so a mismatch means the two are not from one model.
pub(super) fn check_vocab(tokenizer: &Tokenizer, embedding_rows: usize) -> Result<()> {
    let tokens = tokenizer.vocab_size();
    if tokens == embedding_rows {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "the tokenizer has {tokens} tokens but the embedding (`token_embd.weight`) has \
         {embedding_rows} rows: they must be equal (the tokenizer and the weights are not \
         from the same model)"
    )))
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("model", &self.model)
            .field("pos", &self.pos)
            .finish()
    }
}

impl Session {
    /// Fails unless the tokenizer has one token per embedding row (see `check_vocab`).
    pub fn new(model: Model, tokenizer: Tokenizer) -> Result<Session> {
        check_vocab(&tokenizer, model.config().vocab)?;
        Ok(Session {
            model,
            tokenizer,
            pos: 0,
            history: Vec::new(),
            unfed: None,
            stats: Stats::default(),
        })
    }

    /// Loads the model and its tokenizer from one GGUF file.
    pub fn load(
        device: Arc<dyn Device>,
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<Session> {
        let file = GgufFile::open(path)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let plan = super::plan(&file, device.profile(), options)?;
        // Before the upload, so a mismatched file costs nothing.
        check_vocab(&tokenizer, plan.config.vocab)?;
        let model = Model::from_plan(device, &file, plan)?;
        Session::new(model, tokenizer)
    }

    /// The model, with its config, plan and dispatch audit.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The tokenizer, read from the same file as the model.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// What the session has done since it was created or reset.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Tokens in the KV cache.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The token generated last and not yet fed to the model: the next `generate` feeds
    /// it first. It survives a step that fails, such as one past the end of the
    /// context; take it before [`Session::reset`] (which forgets it) to continue from
    /// it in a fresh context.
    pub fn pending_token(&self) -> Option<u32> {
        self.unfed
    }

    /// Forgets the conversation (the KV cache is overwritten from position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.history.clear();
        self.unfed = None;
        self.stats = Stats::default();
    }

    /// Feeds `prompt` (after any token generated last time), then yields up to
    /// `max_tokens` tokens, stopping early at end-of-generation. Each item costs one
    /// decode step; the prompt is processed on the first `next()`.
    ///
    /// Prompt ids outside the vocabulary, prompts longer than the room left in the
    /// context ([`Error::ContextFull`]) and sampler settings out of range
    /// ([`SamplerConfig::validate`]) are errors here, before anything runs. A stream
    /// that reaches the end of the context ends with [`Error::ContextFull`]: the tokens
    /// before it stand, and the session keeps the last one
    /// ([`Session::pending_token`]).
    pub fn generate<'s, 'p>(
        &'s mut self,
        prompt: impl Into<Prompt<'p>>,
        max_tokens: usize,
        sampler: Sampler,
    ) -> Result<Generate<'s>> {
        let mut ids: Vec<u32> = self.unfed.into_iter().collect();
        match prompt.into() {
            Prompt::Text(text) => ids.extend(self.tokenizer.encode(text, true, true)),
            Prompt::Ids(p) => ids.extend_from_slice(p),
        }
        if ids.is_empty() {
            return Err(Error::Invalid(
                "generate needs at least one prompt token".into(),
            ));
        }
        if let Some(&bad) = ids
            .iter()
            .find(|&&id| id as usize >= self.model.config().vocab)
        {
            return Err(Error::Invalid(format!(
                "prompt token {bad} is outside the vocabulary of {}",
                self.model.config().vocab
            )));
        }
        // Checked before anything runs, so a prompt that cannot fit leaves the session
        // as it was.
        if self.pos + ids.len() > self.model.context() {
            return Err(Error::ContextFull {
                what: format!(
                    "a prompt of {} tokens after the {} in the cache",
                    ids.len(),
                    self.pos
                ),
                needed: self.pos + ids.len(),
                context: self.model.context(),
                trained: self.model.config().context_length,
                reset_helps: self.pos > 0,
            });
        }
        sampler.config().validate()?;
        self.unfed = None;
        // Plain greedy needs only the GPU argmax; anything else samples on the CPU.
        let gpu_greedy = sampler.config().is_greedy();
        Ok(Generate {
            model: &self.model,
            tokenizer: &self.tokenizer,
            decoder: self.tokenizer.stream_decoder(true),
            pos: &mut self.pos,
            history: &mut self.history,
            unfed: &mut self.unfed,
            stats: &mut self.stats,
            prompt: ids,
            sampler,
            gpu_greedy,
            in_flight: None,
            max_tokens,
            produced: 0,
            done: max_tokens == 0,
        })
    }

    /// The assistant's reply to `messages`, rendered with the model's chat template
    /// (`tokenizer.chat_template`, ending with the assistant's turn header): a token
    /// stream as [`generate`](Session::generate) returns.
    ///
    /// Pass the whole conversation each time, with the replies so far as
    /// [`ChatMessage::assistant`] turns. When the rendered conversation starts with the
    /// tokens already in the KV cache, only the rest is fed; otherwise the conversation
    /// is fed from position 0.
    pub fn chat<'s>(
        &'s mut self,
        messages: &[ChatMessage],
        max_tokens: usize,
        sampler: Sampler,
    ) -> Result<Generate<'s>> {
        let text = self.tokenizer.apply_chat_template(messages, true)?;
        let ids = self.tokenizer.encode_chat(&text);
        if ids.len() > self.model.context() {
            return Err(Error::ContextFull {
                what: format!("a conversation of {} tokens", ids.len()),
                needed: ids.len(),
                context: self.model.context(),
                trained: self.model.config().context_length,
                reset_helps: false,
            });
        }
        let cached = &self.history[..self.pos];
        let kept = if ids.len() > cached.len() && ids.starts_with(cached) {
            cached.len()
        } else {
            0
        };
        self.pos = kept;
        self.history.truncate(kept);
        self.unfed = None;
        self.generate(&ids[kept..], max_tokens, sampler)
    }

    /// Greedy decode with the default sampler settings made explicit.
    pub fn greedy(&mut self, prompt: &[u32], max_tokens: usize) -> Result<Vec<u32>> {
        self.generate(prompt, max_tokens, Sampler::new(SamplerConfig::greedy()))?
            .map(|t| t.map(|t| t.id))
            .collect()
    }
}

/// The token stream of [`Session::generate`] and [`Session::chat`].
pub struct Generate<'s> {
    model: &'s Model,
    tokenizer: &'s Tokenizer,
    decoder: TokenStreamDecoder<'s>,
    pos: &'s mut usize,
    history: &'s mut Vec<u32>,
    unfed: &'s mut Option<u32>,
    stats: &'s mut Stats,
    /// Tokens still to feed before the first generated one.
    prompt: Vec<u32>,
    sampler: Sampler,
    gpu_greedy: bool,
    /// With GPU greedy decoding: the step for position `*pos`, queued (speculatively)
    /// before the previous token was read back.
    in_flight: Option<StepTicket>,
    max_tokens: usize,
    produced: usize,
    done: bool,
}

impl Generate<'_> {
    /// Feeds the prompt and returns the first token, or feeds the last token and
    /// returns the next.
    fn advance(&mut self) -> Result<u32> {
        let start = Instant::now();
        let input = if self.produced == 0 {
            let (last, rest) = self
                .prompt
                .split_last()
                .expect("generate checked the prompt is not empty");
            // All but the last into the cache in batches; the last runs as a decode
            // step, which gives the logits.
            self.model.prefill(rest, *self.pos)?;
            *self.pos += rest.len();
            self.history.extend_from_slice(&self.prompt);
            Input::Token(*last)
        } else {
            // Left in place until this step succeeds: a step that fails (past the end
            // of the context, say) must not lose the token.
            let last = self.unfed.expect("a produced token is unfed");
            // After a GPU argmax the id is already in the token buffer.
            if self.gpu_greedy {
                Input::Previous
            } else {
                Input::Token(last)
            }
        };
        let next = if self.gpu_greedy {
            let ticket = match self.in_flight.take() {
                Some(queued) => queued,
                None => self.model.step_read(input, *self.pos)?,
            };
            // Queue the following step before waiting for this one: the GPU takes the
            // id it just produced from the token buffer while the CPU reads it back.
            // If this token ends generation, the queued step is dropped; it only wrote
            // the cache slot that the next real token overwrites.
            let more = self.produced + 1 < self.max_tokens && *self.pos + 1 < self.model.context();
            if more {
                self.in_flight = Some(self.model.step_read(Input::Previous, *self.pos + 1)?);
            }
            self.model.token(ticket)?
        } else {
            let logits = self.model.forward_logits(input, *self.pos)?;
            self.sampler.sample(&logits, self.history)
        };
        *self.pos += 1;
        let elapsed = start.elapsed();
        if self.produced == 0 {
            self.stats.prompt_tokens += self.prompt.len();
            self.stats.time_to_first_token += elapsed;
        } else {
            self.stats.decode_steps += 1;
            self.stats.decode_time += elapsed;
        }
        Ok(next)
    }
}

impl Drop for Generate<'_> {
    /// Redeems a step queued past the end, so its staging buffer is released.
    fn drop(&mut self) {
        if let Some(ticket) = self.in_flight.take() {
            let _ = self.model.device().finish_read(ticket.read);
        }
    }
}

impl Iterator for Generate<'_> {
    type Item = Result<Token>;

    fn next(&mut self) -> Option<Result<Token>> {
        if self.done {
            return None;
        }
        let id = match self.advance() {
            Ok(id) => id,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        *self.unfed = Some(id);
        self.produced += 1;
        self.history.push(id);
        if self.tokenizer.is_eog(id) {
            self.done = true;
            return None;
        }
        self.stats.generated_tokens += 1;
        if self.produced >= self.max_tokens {
            self.done = true;
        }
        let mut text = match self.decoder.push(id) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if self.done {
            text.push_str(&self.decoder.finish());
        }
        Some(Ok(Token { id, text }))
    }
}

/// Sessions and models move between threads (the device is `Send + Sync`).
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Session>();
    assert_send::<Model>();
};
