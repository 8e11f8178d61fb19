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
    /// The turn's text, as the template inserts it.
    pub content: String,
}

impl ChatMessage {
    /// A turn of `role`, for roles beyond the three below (`tool`, say) where the
    /// template knows them.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `system` turn: instructions the model follows for the whole conversation.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    /// A `user` turn.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    /// An `assistant` turn: a reply the model gave earlier.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// Fuel (minijinja's unit of work: one instruction, or 64 bytes of data created) any
/// render may spend. Real templates spend about 30 per message: 370 to 800 for twelve
/// messages, 31 000 to 49 000 for a thousand (measured in the tests below). A template
/// that would loop or recurse without end, or build huge strings, runs out within
/// milliseconds and tens of megabytes.
const BASE_FUEL: u64 = 200_000;
/// One more fuel per this many bytes of messages, so that long prompts are not cut off:
/// a fuel pays for 64 bytes, so this lets a template copy every message 16 times.
const INPUT_BYTES_PER_FUEL: u64 = 4;
/// The rendered prompt may be this much longer than the text put in.
const BASE_OUTPUT_BYTES: usize = 1 << 20;
/// ... and this many times the text put in.
const OUTPUT_PER_INPUT_BYTE: usize = 4;

/// Gemma's turn format, for files that carry no template but have its turn tokens
/// (Gemma-3-270M, a base model, ships none; llama.cpp's built-in `gemma` format renders
/// the same). Gemma has no system turn: the system text opens the first user turn.
/// Contents are trimmed, as Gemma's own template does.
pub(crate) const GEMMA_TURNS: &str = "{{- bos_token -}}\n\
    {%- if messages and messages[0].role == 'system' -%}\n\
    \x20 {%- set opening = messages[0].content | trim ~ '\\n\\n' -%}\n\
    \x20 {%- set turns = messages[1:] -%}\n\
    {%- else -%}\n\
    \x20 {%- set opening = '' -%}\n\
    \x20 {%- set turns = messages -%}\n\
    {%- endif -%}\n\
    {%- for m in turns -%}\n\
    \x20 {{- '<start_of_turn>' ~ ('model' if m.role == 'assistant' else m.role) ~ '\\n' -}}\n\
    \x20 {{- (opening if loop.first else '') ~ m.content | trim ~ '<end_of_turn>\\n' -}}\n\
    {%- endfor -%}\n\
    {%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

/// The template for a file without `tokenizer.chat_template`, judged from its vocabulary.
pub(crate) fn fallback_template(has_token: impl Fn(&str) -> bool) -> Option<&'static str> {
    (has_token("<start_of_turn>") && has_token("<end_of_turn>")).then_some(GEMMA_TURNS)
}

/// Renders a chat template with the variables templates expect from `transformers`:
/// `messages` (maps with `role` and `content`), `add_generation_prompt`, `bos_token`,
/// `eos_token`, and the function `raise_exception(message)`.
///
/// Like `transformers`, blocks are rendered with `trim_blocks` and `lstrip_blocks`, and
/// Python string methods (`.strip()`, `.startswith()`, `.split()`, ...) work through
/// minijinja-contrib's pycompat layer. Anything else a template calls that is not
/// defined (e.g. `strftime_now`) is undefined; the common templates test for that.
///
/// A template is untrusted input: its work and memory are bounded by a fuel budget, and
/// its output by a size limit, both of which grow with the length of the messages.
/// Running out of either is an error that names the budget.
pub fn render_chat_template(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    render_metered(
        template,
        messages,
        add_generation_prompt,
        bos_token,
        eos_token,
    )
    .map(|(text, _fuel)| text)
}

/// [`render_chat_template`], also returning the fuel the render spent.
fn render_metered(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<(String, u64)> {
    let input_bytes: usize = messages
        .iter()
        .map(|m| m.role.len() + m.content.len())
        .sum();
    let fuel = BASE_FUEL + input_bytes as u64 / INPUT_BYTES_PER_FUEL;
    let max_output =
        BASE_OUTPUT_BYTES.saturating_add(input_bytes.saturating_mul(OUTPUT_PER_INPUT_BYTE));
    let invalid = |e: minijinja::Error| {
        if e.kind() == ErrorKind::OutOfFuel {
            Error::Invalid(format!(
                "chat template ran out of its budget of {fuel} fuel (one per instruction \
                 or per 64 bytes of data, for {input_bytes} bytes of messages)"
            ))
        } else {
            Error::Invalid(format!("chat template: {e}"))
        }
    };

    let mut env = Environment::new();
    env.set_fuel(Some(fuel));
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
    let mut output = BoundedOutput {
        bytes: Vec::new(),
        limit: max_output,
        overflowed: false,
    };
    let rendered = env
        .template_from_str(template)
        .and_then(|t| t.render_captured_to(ctx, &mut output));
    if output.overflowed {
        return Err(Error::Invalid(format!(
            "chat template output passed its limit of {max_output} bytes (for {input_bytes} \
             bytes of messages)"
        )));
    }
    let spent = rendered
        .map_err(invalid)?
        .state()
        .fuel_levels()
        .map_or(0, |(spent, _)| spent);
    let text = String::from_utf8(output.bytes)
        .map_err(|e| Error::Invalid(format!("chat template: output is not UTF-8: {e}")))?;
    Ok((text, spent))
}

/// Collects output up to `limit` bytes, then fails the write so that rendering stops.
struct BoundedOutput {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_turns_fold_the_system_text_into_the_first_user_turn() {
        let conversation = [
            ChatMessage::system(" Be brief. "),
            ChatMessage::user("Hi"),
            ChatMessage::assistant("Hello!\n"),
            ChatMessage::user("Bye"),
        ];
        let out = render_chat_template(GEMMA_TURNS, &conversation, true, "<bos>", "<eos>");
        assert_eq!(
            out.unwrap(),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
             <start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        let out = render_chat_template(GEMMA_TURNS, &conversation[1..2], false, "<bos>", "");
        assert_eq!(out.unwrap(), "<bos><start_of_turn>user\nHi<end_of_turn>\n");
        assert!(fallback_template(|t| t == "<start_of_turn>").is_none());
    }

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

#[cfg(test)]
mod budget_tests {
    use super::*;

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template`, as in the default model.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// ChatML with a tools block, after Qwen2.5-Instruct's template. brass passes no
    /// `tools`, so the template defines its own, to exercise `tojson` and the loops.
    const CHATML_WITH_TOOLS: &str = r#"{%- set tools = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
] %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    /// After Gemma 3's template: a system message folded into the first user turn,
    /// alternation enforced with `raise_exception`, `trim` on every message.
    const GEMMA3_STYLE: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"#;

    /// A system message, then `turns` questions and answers of ordinary length, then a
    /// last question.
    fn conversation(turns: usize) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::system("You are a careful assistant.")];
        for turn in 0..turns {
            messages.push(ChatMessage::user(format!(
                "Question {turn}: what is the weather like in Paris today, and should I take an umbrella?"
            )));
            messages.push(ChatMessage::assistant(format!(
                "Answer {turn}: let me check the forecast for you. It looks like light rain this afternoon."
            )));
        }
        messages.push(ChatMessage::user("Thanks!"));
        messages
    }

    const TEMPLATES: [(&str, &str); 3] = [
        ("smollm2", SMOLLM2),
        ("chatml_with_tools", CHATML_WITH_TOOLS),
        ("gemma3_style", GEMMA3_STYLE),
    ];

    #[test]
    fn real_templates_use_under_a_hundredth_of_the_budget() {
        let messages = conversation(5);
        for (name, template) in TEMPLATES {
            let (text, spent) = render_metered(template, &messages, true, "<s>", "</s>")
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            eprintln!("{name}: {spent} fuel, {} bytes out", text.len());
            assert!(
                text.ends_with("Thanks!<|im_end|>\n<|im_start|>assistant\n")
                    || text.ends_with("Thanks!<end_of_turn>\n<start_of_turn>model\n"),
                "{name}: {text}"
            );
            assert!(spent * 100 < BASE_FUEL, "{name}: {spent} fuel");
        }
    }

    #[test]
    fn a_thousand_turns_fit_the_budget() {
        let messages = conversation(500);
        for (name, template) in TEMPLATES {
            let (_, spent) = render_metered(template, &messages, true, "<s>", "</s>")
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            eprintln!("{name}: {spent} fuel for {} messages", messages.len());
        }
    }
}
