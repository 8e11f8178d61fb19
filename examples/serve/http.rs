//! The routes: each request is parsed and checked here, in full, before it takes a place
//! in the queue; then it waits for its updates and answers as one JSON object or as
//! server-sent events.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use brass::sampling::SamplerConfig;
use brass::tokenizer::{ChatMessage, Tokenizer};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::openai::{
    parse, refuse_unsupported, stop_strings, ApiError, ChatRequest, CompletionRequest, Endpoint,
    Finish, Prompt, Reply, Sampling, Usage,
};
use crate::scheduler::{Job, Load, Update};

/// What every route reads.
pub struct App {
    /// The name `/v1/models` lists and requests must ask for.
    pub model_name: String,
    pub tokenizer: Arc<Tokenizer>,
    /// Positions per sequence: prompt and reply together.
    pub context: usize,
    pub jobs: SyncSender<Job>,
    pub load: Arc<Load>,
    pub sequences: usize,
    pub queue: usize,
    pub next_id: AtomicU64,
    pub started: u64,
    pub max_body_bytes: usize,
}

pub fn router(app: Arc<App>) -> Router {
    let max_body_bytes = app.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .fallback(|| async {
            ApiError::status(StatusCode::NOT_FOUND, "no such route (see /v1/models)")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(app)
}

async fn health(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "running": app.load.running.load(Ordering::Relaxed),
        "queued": app.load.queued.load(Ordering::Relaxed),
        "served": app.load.served.load(Ordering::Relaxed),
        "held": app.load.held.load(Ordering::Relaxed),
        "sequences": app.sequences,
        "queue": app.queue,
        "context": app.context,
    }))
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.model_name,
            "object": "model",
            "created": app.started,
            "owned_by": "brass",
        }],
    }))
}

async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let request = match body_of(body, app.max_body_bytes).and_then(|b| parse::<ChatRequest>(&b)) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let sampling = request.sampling();
    let checked = (|| {
        app.check_model(&request.model)?;
        refuse_unsupported(&sampling, &[("logprobs", request.logprobs == Some(true))])?;
        if request.messages.is_empty() {
            return Err(ApiError::invalid(
                "messages must not be empty",
                Some("messages"),
            ));
        }
        let messages = request
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| Ok(ChatMessage::new(m.role.as_str(), m.text(i)?)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        let text = app
            .tokenizer
            .apply_chat_template(&messages, true)
            .map_err(|e| ApiError::invalid(format!("the chat template: {e}"), Some("messages")))?;
        let prompt = app.tokenizer.encode_chat(&text);
        let max_tokens = match (sampling.max_tokens, request.max_completion_tokens) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "max_tokens and max_completion_tokens: give one",
                    Some("max_tokens"),
                ))
            }
            (Some(n), None) | (None, Some(n)) => Some(n),
            (None, None) => None,
        };
        app.job(prompt, max_tokens, &sampling)
    })();
    match checked {
        Ok(job) => app.answer(Endpoint::Chat, job, sampling).await,
        Err(e) => e.into_response(),
    }
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let request =
        match body_of(body, app.max_body_bytes).and_then(|b| parse::<CompletionRequest>(&b)) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
    let sampling = request.sampling();
    let checked = (|| {
        app.check_model(&request.model)?;
        refuse_unsupported(
            &sampling,
            &[
                ("echo", request.echo == Some(true)),
                ("logprobs", request.logprobs.is_some()),
                ("suffix", request.suffix.is_some()),
                ("best_of", request.best_of.is_some_and(|b| b != 1)),
            ],
        )?;
        let one = |n: usize| match n {
            1 => Ok(()),
            n => Err(ApiError::invalid(
                format!("prompt holds {n} prompts; one per request is supported"),
                Some("prompt"),
            )),
        };
        let prompt = match &request.prompt {
            Prompt::Text(text) => app.tokenizer.encode(text, true, true),
            Prompt::Texts(texts) => {
                one(texts.len())?;
                app.tokenizer.encode(&texts[0], true, true)
            }
            Prompt::Ids(ids) => ids.clone(),
            Prompt::IdLists(lists) => {
                one(lists.len())?;
                lists[0].clone()
            }
        };
        let vocab = app.tokenizer.vocab_size();
        if let Some(bad) = prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::invalid(
                format!("prompt: token id {bad} is outside the vocabulary of {vocab}"),
                Some("prompt"),
            ));
        }
        // OpenAI's default for completions.
        app.job(prompt, Some(sampling.max_tokens.unwrap_or(16)), &sampling)
    })();
    match checked {
        Ok(job) => app.answer(Endpoint::Completion, job, sampling).await,
        Err(e) => e.into_response(),
    }
}

/// The body, or the error that says why there is none (413 past the limit).
fn body_of(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        let message = match status {
            StatusCode::PAYLOAD_TOO_LARGE => format!(
                "the body is larger than the {limit} bytes this server takes \
                 (serve --max-body-bytes)"
            ),
            _ => format!("the body could not be read: {}", rejection.body_text()),
        };
        ApiError::status(status, message)
    })
}

impl App {
    fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if model == self.model_name {
            return Ok(());
        }
        Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model `{model}` does not exist; this server serves `{}`",
                self.model_name
            ),
            param: Some("model".into()),
            code: Some("model_not_found"),
        })
    }

    /// A job for `prompt`, its length and `max_tokens` checked against the context
    /// (together at most the context, as OpenAI counts), its sampler from the request.
    fn job(
        &self,
        prompt: Vec<u32>,
        max_tokens: Option<u64>,
        sampling: &Sampling<'_>,
    ) -> Result<(Job, UnboundedReceiver<Update>), ApiError> {
        if prompt.is_empty() {
            return Err(ApiError::invalid("the prompt is empty", Some("prompt")));
        }
        let context = self.context;
        let room = context.saturating_sub(prompt.len());
        let too_long = |asked: String| {
            ApiError::invalid(
                format!(
                    "this server's context is {context} tokens per request; you asked for \
                     {asked}"
                ),
                Some(if asked.contains("completion") {
                    "max_tokens"
                } else {
                    "messages"
                }),
            )
            .with_code("context_length_exceeded")
        };
        let max_tokens = match max_tokens {
            Some(0) => {
                return Err(ApiError::invalid(
                    "max_tokens must be at least 1",
                    Some("max_tokens"),
                ))
            }
            Some(n) if n > room as u64 => {
                return Err(too_long(format!(
                    "{} tokens ({} in the prompt, {n} in the completion)",
                    (prompt.len() as u64).saturating_add(n),
                    prompt.len()
                )))
            }
            Some(n) => n as usize,
            None if room == 0 => {
                return Err(too_long(format!("{} tokens in the prompt", prompt.len())))
            }
            None => room,
        };
        let sampler = SamplerConfig {
            // OpenAI's defaults: temperature 1 and top_p 1, no top-k or min-p.
            temperature: sampling.temperature.unwrap_or(1.0),
            top_p: sampling.top_p.unwrap_or(1.0),
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            // Unseeded requests draw differently each time, as OpenAI's do.
            seed: sampling.seed.unwrap_or_else(|| {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                nanos.as_nanos() as u64
            }),
            ..SamplerConfig::default()
        };
        if let Some(t) = sampling.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(ApiError::invalid(
                format!("temperature = {t}: must be within 0..=2 (0 is greedy)"),
                Some("temperature"),
            ));
        }
        if let Some(p) = sampling.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(ApiError::invalid(
                format!("top_p = {p}: must be within 0..=1"),
                Some("top_p"),
            ));
        }
        let stops = stop_strings(sampling.stop)?;
        let (updates, receiver) = unbounded_channel();
        let job = Job {
            prompt,
            max_tokens,
            sampler,
            stops,
            stop_at_eog: !sampling.ignore_eos,
            updates,
        };
        Ok((job, receiver))
    }

    /// Queues the job and answers with its reply, whole or streamed.
    async fn answer(
        self: &Arc<Self>,
        endpoint: Endpoint,
        (job, mut updates): (Job, UnboundedReceiver<Update>),
        sampling: Sampling<'_>,
    ) -> Response {
        self.load.queued.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.jobs.try_send(job) {
            self.load.queued.fetch_sub(1, Ordering::Relaxed);
            let message = match e {
                TrySendError::Full(_) => format!(
                    "the server is busy: {} sequences run and {} requests wait (serve \
                     --sequences, --queue); retry later",
                    self.sequences, self.queue
                ),
                TrySendError::Disconnected(_) => "the engine has stopped".to_string(),
            };
            return ApiError::status(StatusCode::SERVICE_UNAVAILABLE, message).into_response();
        }
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let reply = Reply {
            endpoint,
            id: match endpoint {
                Endpoint::Chat => format!("chatcmpl-{n:x}"),
                Endpoint::Completion => format!("cmpl-{n:x}"),
            },
            created: now(),
            model: self.model_name.clone(),
        };
        if sampling.stream {
            let events = stream_events(reply, updates, sampling.include_usage);
            return Sse::new(events)
                .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
                .into_response();
        }
        let mut text = String::new();
        while let Some(update) = updates.recv().await {
            match update {
                Update::Token(t) | Update::Tail(t) => text.push_str(&t),
                Update::Done { finish, usage } => {
                    log_done(&reply, "", finish, usage);
                    return Json(reply.full(&text, finish, usage)).into_response();
                }
                Update::Failed(message) => {
                    return ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, message)
                        .into_response()
                }
            }
        }
        ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "the engine stopped").into_response()
    }
}

/// The reply as server-sent events: a first chunk at once (the role, for chat), a chunk
/// per piece of text, the last with its finish reason, the usage where asked, `[DONE]`.
/// A failure mid-stream is an error object, as OpenAI sends one, and the stream ends.
fn stream_events(
    reply: Reply,
    updates: UnboundedReceiver<Update>,
    include_usage: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let data = |value: &Value| Ok(Event::default().data(value.to_string()));
    // Chat's first chunk names the role, at once; completions have no such chunk.
    let first =
        (reply.endpoint == Endpoint::Chat).then(|| data(&reply.chunk(None, None, include_usage)));
    let start = stream::iter(first);
    let rest = stream::unfold(Some(updates), move |updates| {
        let reply = reply.clone();
        async move {
            let mut updates = updates?;
            let (chunks, more) = match updates.recv().await {
                Some(Update::Token(t) | Update::Tail(t)) => {
                    (vec![reply.chunk(Some(&t), None, include_usage)], true)
                }
                Some(Update::Done { finish, usage }) => {
                    log_done(&reply, " (streamed)", finish, usage);
                    let mut last = vec![reply.chunk(None, Some(finish), include_usage)];
                    if include_usage {
                        last.push(reply.usage_chunk(usage));
                    }
                    (last, false)
                }
                Some(Update::Failed(message)) => {
                    let error = ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, message);
                    return Some((stream::iter(vec![data(&error.to_json())]), None));
                }
                None => {
                    let error =
                        ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "the engine stopped");
                    return Some((stream::iter(vec![data(&error.to_json())]), None));
                }
            };
            let mut events: Vec<Result<Event, Infallible>> = chunks.iter().map(data).collect();
            if !more {
                events.push(Ok(Event::default().data("[DONE]")));
            }
            Some((stream::iter(events), more.then_some(updates)))
        }
    });
    use futures_util::StreamExt;
    start.chain(rest.flatten())
}

/// The server's line for a finished request: its id, token counts and finish reason.
fn log_done(reply: &Reply, how: &str, finish: Finish, usage: Usage) {
    eprintln!(
        "{}{how}: {} prompt + {} completion tokens, {}",
        reply.id,
        usage.prompt_tokens,
        usage.completion_tokens,
        finish.as_str()
    );
}

/// Seconds since the Unix epoch, as OpenAI's `created` fields count them.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
