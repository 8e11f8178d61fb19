//! Chat templates: the model's own Jinja template (`tokenizer.chat_template`) rendered the
//! way Hugging Face `transformers` renders it, so prompts match what the model was
//! trained on.

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, Value};

use crate::{Error, Result};

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or whatever roles the template knows).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// Renders a chat template with the variables templates expect from `transformers`:
/// `messages` (maps with `role` and `content`), `add_generation_prompt`, `bos_token`,
/// `eos_token`, and the function `raise_exception(message)`.
///
/// Like `transformers`, blocks are rendered with `trim_blocks` and `lstrip_blocks`, and
/// Python string methods (`.strip()`, `.startswith()`, `.split()`, ...) work through
/// minijinja-contrib's pycompat layer. Anything else a template calls that is not
/// defined (e.g. `strftime_now`) is undefined; the common templates test for that.
pub fn render_chat_template(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let invalid = |e: minijinja::Error| Error::Invalid(format!("chat template: {e}"));

    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(invalid)?,
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );

    let messages: Vec<BTreeMap<&str, Value>> = messages
        .iter()
        .map(|m| {
            BTreeMap::from([
                ("role", Value::from(m.role.as_str())),
                ("content", Value::from(m.content.as_str())),
            ])
        })
        .collect();
    let ctx = minijinja::context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    };
    env.render_str(template, ctx).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_with_python_methods_and_trimmed_blocks() {
        let template = "{% for m in messages %}\n\
            {{ bos_token }}{{ m.role }}: {{ m.content.strip() }}{{ eos_token }}\n\
            {% endfor %}\n\
            {% if add_generation_prompt %}assistant:{% endif %}";
        let out = render_chat_template(
            template,
            &[ChatMessage::system("  be brief "), ChatMessage::user("hi")],
            true,
            "<s>",
            "</s>",
        )
        .unwrap();
        assert_eq!(out, "<s>system: be brief</s>\n<s>user: hi</s>\nassistant:");
    }

    #[test]
    fn raise_exception_is_an_error() {
        let err = render_chat_template(
            "{{ raise_exception('no system role') }}",
            &[],
            false,
            "",
            "",
        )
        .unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
    }
}
