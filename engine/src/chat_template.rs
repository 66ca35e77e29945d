//! Turns a conversation into prompt tokens with the chat template stored in the GGUF
//! (`tokenizer.chat_template`, a Jinja template), rendered by minijinja.
//!
//! Message contents never pass through special-token parsing: a user who types
//! "<|im_start|>system" gets those characters as text, not a forged system turn. The template
//! is rendered with placeholders where contents go; the template's own text is tokenized with
//! special tokens recognized and each content is tokenized as plain text.

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};
use serde::Serialize;

use crate::gguf::Gguf;
use crate::tokenizer::Tokenizer;
use crate::{EngineError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// Gemma's turns, for Gemma files that carry no template: roles "user" and "model", a system
/// message folded into the first user turn (Gemma has no system role).
const GEMMA: &str = "{% set ns = namespace(system='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\n\n' %}{% else %}{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' }}{% if message['role'] == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}{{ message['content'] + '<end_of_turn>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/// ChatML, for other models whose file carries no template.
const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Private-use characters cannot come out of a template by accident, so a placeholder built
/// from them marks exactly where a message's content was inserted.
const MARK_OPEN: char = '\u{F8F0}';
const MARK_CLOSE: char = '\u{F8F1}';

pub struct ChatTemplate {
    source: String,
    bos_text: String,
    eos_text: String,
    bos_id: Option<u32>,
    add_bos: bool,
}

/// A rendered prompt: the text (for display and debugging) and its tokens.
pub struct RenderedPrompt {
    pub text: String,
    pub tokens: Vec<u32>,
}

impl ChatTemplate {
    pub fn from_gguf(g: &Gguf, tok: &Tokenizer) -> Result<ChatTemplate> {
        let fallback = match g.get_str_opt("general.architecture")? {
            Some("gemma3") => GEMMA,
            _ => CHATML,
        };
        let source = g
            .get_str_opt("tokenizer.chat_template")?
            .unwrap_or(fallback)
            .to_string();
        let text_of = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(&tok.token_bytes(i)).into_owned())
                .unwrap_or_default()
        };
        let t = ChatTemplate {
            source,
            bos_text: text_of(tok.bos_id()),
            eos_text: text_of(tok.eos_id()),
            bos_id: tok.bos_id(),
            add_bos: tok.add_bos(),
        };
        // Fail at load, not at the first message, if the template cannot even be parsed.
        t.environment()?;
        Ok(t)
    }

    fn environment(&self) -> Result<Environment<'_>> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template("chat", &self.source)
            .map_err(|e| EngineError::Template(e.to_string()))?;
        Ok(env)
    }

    /// Renders the conversation; with `add_generation_prompt` the text ends where the
    /// assistant's reply begins.
    pub fn render(
        &self,
        tok: &Tokenizer,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<RenderedPrompt> {
        #[derive(Serialize)]
        struct Msg<'a> {
            role: Role,
            content: &'a str,
        }
        let marks: Vec<String> = (0..messages.len())
            .map(|i| format!("{MARK_OPEN}{i}{MARK_CLOSE}"))
            .collect();
        let msgs: Vec<Msg> = messages
            .iter()
            .zip(&marks)
            .map(|(m, mark)| Msg {
                role: m.role,
                content: mark,
            })
            .collect();
        let env = self.environment()?;
        let skeleton = env
            .get_template("chat")
            .and_then(|t| {
                t.render(context! {
                    messages => msgs,
                    add_generation_prompt => add_generation_prompt,
                    bos_token => self.bos_text,
                    eos_token => self.eos_text,
                })
            })
            .map_err(|e| EngineError::Template(e.to_string()))?;

        let mut text = String::new();
        let mut tokens = Vec::new();
        let mut rest = skeleton.as_str();
        while let Some(start) = rest.find(MARK_OPEN) {
            let (literal, after) = rest.split_at(start);
            let close = after.find(MARK_CLOSE).ok_or_else(|| {
                EngineError::Template("template cut a message placeholder in half".into())
            })?;
            let index: usize = after[MARK_OPEN.len_utf8()..close]
                .parse()
                .map_err(|_| EngineError::Template("template altered a message".into()))?;
            let content = messages
                .get(index)
                .ok_or_else(|| EngineError::Template("template altered a message".into()))?
                .content
                .trim();
            text.push_str(literal);
            tokens.extend(tok.encode(literal, true)?);
            text.push_str(content);
            tokens.extend(tok.encode(content, false)?);
            rest = &after[close + MARK_CLOSE.len_utf8()..];
        }
        text.push_str(rest);
        tokens.extend(tok.encode(rest, true)?);

        if self.add_bos {
            if let Some(bos) = self.bos_id {
                if tokens.first() != Some(&bos) {
                    tokens.insert(0, bos);
                }
            }
        }
        Ok(RenderedPrompt { text, tokens })
    }
}
