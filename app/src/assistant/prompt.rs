//! Prompt fitting: a conversation rendered with the model's chat template, its oldest
//! exchanges dropped until it fits the context with room for a reply. The app's responder and
//! the terminal chat share it.

use kostant_engine::{EngineError, Message, Model};

/// The conversation (`system`, then `turns` ending with the newest user message) as prompt
/// tokens, dropping the oldest exchanges while it does not fit `n_ctx` with room for a short
/// reply (`max_tokens`, at most 64); the newest message is never dropped. Returns the tokens
/// and how many of the oldest turns were left out.
pub fn fit_prompt(
    model: &Model,
    system: Option<&str>,
    turns: &[Message],
    max_tokens: usize,
    n_ctx: usize,
) -> Result<(Vec<u32>, usize), EngineError> {
    let mut dropped = 0;
    loop {
        let kept = &turns[dropped..];
        let mut messages = Vec::with_capacity(kept.len() + 1);
        if let Some(s) = system {
            messages.push(Message::new(kostant_engine::Role::System, s));
        }
        messages.extend(kept.iter().cloned());
        let rendered = model
            .chat_template
            .render(&model.tokenizer, &messages, true)?;
        let room = max_tokens.min(64);
        if rendered.tokens.len() + room <= n_ctx {
            return Ok((rendered.tokens, dropped));
        }
        if kept.len() <= 1 {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: rendered.tokens.len() + room,
                context: n_ctx,
            });
        }
        // Forget the oldest exchange (a user turn and its reply), never the newest message.
        dropped += 2.min(kept.len() - 1);
    }
}
