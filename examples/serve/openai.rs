//! The OpenAI API's shapes: requests as parsed and checked, responses and stream chunks
//! as written, and errors as OpenAI writes them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with its
/// HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about the request's content.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: param.map(str::to_string),
            code: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// OpenAI's `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND if self.code == Some("model_not_found") => {
                "invalid_request_error"
            }
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "server_overloaded",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.to_json())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // The queue drains a sequence at a time: a second is a fair first wait.
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

/// Parses a request body, naming the field a wrong type is in.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let not_json =
        |e: &serde_json::Error| ApiError::invalid(format!("the body is not valid JSON: {e}"), None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.classify() != serde_json::error::Category::Data {
            return not_json(&inner);
        }
        let param = (path != ".").then_some(path.as_str());
        let at = param.map_or(String::new(), |p| format!("{p}: "));
        // serde's "at line 1 column 9" is noise beside the field's name.
        let what = inner.to_string();
        let what = what.split(" at line ").next().unwrap_or(&what);
        ApiError::invalid(format!("{at}{what}"), param)
    })?;
    de.end().map_err(|e| not_json(&e))?;
    Ok(value)
}

/// `stop`: one string or up to four.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// A request struct: its own fields, then the ones both endpoints share (how to sample,
/// when to stop, how to answer). Written out rather than `#[serde(flatten)]`ed, which
/// would turn off `deny_unknown_fields` and blur the field paths of type errors.
macro_rules! request {
    ($(#[$meta:meta])* $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
            pub max_tokens: Option<u64>,
            pub temperature: Option<f32>,
            pub top_p: Option<f32>,
            pub seed: Option<u64>,
            pub stop: Option<Stop>,
            pub n: Option<u64>,
            #[serde(default)]
            pub stream: bool,
            pub stream_options: Option<StreamOptions>,
            pub frequency_penalty: Option<f32>,
            pub presence_penalty: Option<f32>,
            /// Not OpenAI's: generate past the end-of-generation token, to exactly
            /// `max_tokens` (as llama-server and vLLM take it; benchmarks use it).
            #[serde(default)]
            pub ignore_eos: bool,
            /// The end user's id: OpenAI's abuse tracking; accepted and unused.
            #[allow(dead_code)]
            pub user: Option<String>,
        }

        impl $name {
            pub fn sampling(&self) -> Sampling<'_> {
                Sampling {
                    max_tokens: self.max_tokens,
                    temperature: self.temperature,
                    top_p: self.top_p,
                    seed: self.seed,
                    stop: &self.stop,
                    n: self.n,
                    stream: self.stream,
                    include_usage: self.stream_options.as_ref().is_some_and(|o| o.include_usage),
                    frequency_penalty: self.frequency_penalty,
                    presence_penalty: self.presence_penalty,
                    ignore_eos: self.ignore_eos,
                }
            }
        }
    };
}

/// The fields both endpoints share.
#[derive(Debug, Clone, Copy)]
pub struct Sampling<'r> {
    pub max_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: &'r Option<Stop>,
    pub n: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub ignore_eos: bool,
}

/// A chat message's `content`: text, or an array of text parts.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content parts")]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
    /// A participant's name: accepted, not rendered (the templates have no place for it).
    #[allow(dead_code)]
    pub name: Option<String>,
}

impl Message {
    /// The message's text: its content string, or its text parts joined.
    pub fn text(&self, index: usize) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(text)) => Ok(text.clone()),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for (p, part) in parts.iter().enumerate() {
                    let param = format!("messages[{index}].content[{p}]");
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        ("text", None) => {
                            return Err(ApiError::invalid(
                                format!("{param}: a text part needs `text`"),
                                Some(&param),
                            ))
                        }
                        (other, _) => {
                            return Err(ApiError::invalid(
                                format!(
                                    "{param}: content parts of type `{other}` are not \
                                     supported (this model reads text)"
                                ),
                                Some(&param),
                            ))
                        }
                    }
                }
                Ok(text)
            }
        }
    }
}

request! {
    /// `POST /v1/chat/completions`.
    ChatRequest {
        model: String,
        messages: Vec<Message>,
        /// The newer name of `max_tokens`.
        max_completion_tokens: Option<u64>,
        logprobs: Option<bool>,
    }
}

/// A completion's `prompt`: text or token ids, one prompt.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a string, an array of strings, or an array of token ids"
)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

request! {
    /// `POST /v1/completions`.
    CompletionRequest {
        model: String,
        prompt: Prompt,
        echo: Option<bool>,
        logprobs: Option<u32>,
        suffix: Option<String>,
        best_of: Option<u64>,
    }
}

/// Refuses what brass does not do, by name, rather than ignore it.
pub fn refuse_unsupported(sampling: &Sampling<'_>, flags: &[(&str, bool)]) -> Result<(), ApiError> {
    if let Some(n) = sampling.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid(
            format!("n = {n}: only one choice per request is supported (n = 1)"),
            Some("n"),
        ));
    }
    for (name, value) in [
        ("frequency_penalty", sampling.frequency_penalty),
        ("presence_penalty", sampling.presence_penalty),
    ] {
        if let Some(v) = value.filter(|&v| v != 0.0) {
            return Err(ApiError::invalid(
                format!("{name} = {v}: not supported (only 0)"),
                Some(name),
            ));
        }
    }
    for &(name, used) in flags {
        if used {
            return Err(ApiError::invalid(
                format!("`{name}` is not supported by this server"),
                Some(name),
            ));
        }
    }
    Ok(())
}

/// Stop strings, checked: at most four, none empty.
pub fn stop_strings(stop: &Option<Stop>) -> Result<Vec<String>, ApiError> {
    let stops = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stops.len() > 4 {
        return Err(ApiError::invalid(
            format!("stop has {} strings; at most 4", stops.len()),
            Some("stop"),
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop strings must not be empty",
            Some("stop"),
        ));
    }
    Ok(stops)
}

/// Why a choice ended, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn, or a stop string came.
    Stop,
    /// `max_tokens` came first.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose cache rows an earlier request's sequence gave (OpenAI's
    /// `prompt_tokens_details.cached_tokens`).
    pub cached_tokens: usize,
}

impl Usage {
    pub fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

/// Which endpoint answers: their objects differ in name and in where the text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// What every object of one response shares.
#[derive(Debug, Clone)]
pub struct Reply {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Reply {
    /// The whole answer of a non-streaming request.
    pub fn full(&self, text: &str, finish: Finish, usage: Usage) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish.as_str(),
            }),
            Endpoint::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": finish.as_str(),
            }),
        };
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion",
                Endpoint::Completion => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage.to_json(),
        })
    }

    /// A stream chunk: the first (the role, for chat), a piece of text, or the last (its
    /// finish reason). `usage` is null in each where the client asked for a usage chunk.
    pub fn chunk(&self, text: Option<&str>, finish: Option<Finish>, usage_field: bool) -> Value {
        let finish = finish.map(Finish::as_str);
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let delta = match text {
                    None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                    None => json!({}),
                    Some(t) => json!({"content": t}),
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => json!({
                "index": 0,
                "text": text.unwrap_or(""),
                "logprobs": null,
                "finish_reason": finish,
            }),
        };
        let mut chunk = self.chunk_base();
        chunk["choices"] = json!([choice]);
        if usage_field {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The chunk after the last choice chunk, where `stream_options.include_usage` asks:
    /// no choices, the usage.
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        let mut chunk = self.chunk_base();
        chunk["choices"] = json!([]);
        chunk["usage"] = usage.to_json();
        chunk
    }

    fn chunk_base(&self) -> Value {
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completion => "text_completion",
            },
            "created": self.created,
            "model": self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_type_names_its_field() {
        let e = parse::<ChatRequest>(br#"{"model": "m", "messages": [], "temperature": "hot"}"#)
            .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("temperature"), "{e:?}");
        assert!(
            e.message.starts_with("temperature: invalid type"),
            "{}",
            e.message
        );
        let e = parse::<ChatRequest>(
            br#"{"model": "m", "messages": [{"role": "user", "content": 3}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"), "{e:?}");
        assert!(
            e.message.contains("a string or an array of content parts"),
            "{}",
            e.message
        );
    }

    #[test]
    fn malformed_json_is_said_so() {
        for body in [
            &b"{\"model\": "[..],
            b"not json",
            br#"{"model": "m", "messages": []} {}"#,
            b"",
        ] {
            let e = parse::<ChatRequest>(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(e.message.contains("not valid JSON"), "{}", e.message);
        }
    }

    #[test]
    fn unknown_and_unsupported_fields_are_refused_by_name() {
        let e =
            parse::<ChatRequest>(br#"{"model": "m", "messages": [], "tools": []}"#).unwrap_err();
        assert!(e.message.contains("unknown field `tools`"), "{}", e.message);
        let r: ChatRequest =
            parse(br#"{"model": "m", "messages": [], "n": 2, "user": "u"}"#).unwrap();
        let e = refuse_unsupported(&r.sampling(), &[]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n"));
        let r: CompletionRequest =
            parse(br#"{"model": "m", "prompt": "x", "echo": true}"#).unwrap();
        let e = refuse_unsupported(&r.sampling(), &[("echo", r.echo == Some(true))]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("echo"));
    }

    #[test]
    fn prompts_and_stops_take_their_shapes() {
        let r: CompletionRequest =
            parse(br#"{"model": "m", "prompt": [1, 2, 3], "stop": "\n"}"#).unwrap();
        assert!(matches!(r.prompt, Prompt::Ids(ref ids) if ids == &[1, 2, 3]));
        assert_eq!(
            stop_strings(r.sampling().stop).unwrap(),
            vec!["\n".to_string()]
        );
        let r: CompletionRequest =
            parse(br#"{"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}"#).unwrap();
        assert_eq!(
            stop_strings(r.sampling().stop)
                .unwrap_err()
                .param
                .as_deref(),
            Some("stop")
        );
    }

    #[test]
    fn chunks_have_openais_shape() {
        let reply = Reply {
            endpoint: Endpoint::Chat,
            id: "chatcmpl-1".into(),
            created: 7,
            model: "m".into(),
        };
        assert_eq!(
            reply.chunk(None, None, false)["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        let last = reply.chunk(None, Some(Finish::Length), true);
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert!(last["usage"].is_null() && last.get("usage").is_some());
        let usage = reply.usage_chunk(Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 1,
        });
        assert_eq!(usage["usage"]["total_tokens"], 5);
        assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
        assert_eq!(usage["choices"], json!([]));
    }
}
