//! What the safety crate's real-model tests share: a user message framed as the chat frames it.

use kostant_engine::{GenerateRequest, Message, Model, Role, SamplingParams, Speculation};
use kostant_safety::policy;

/// `user` under the default system prompt, greedy, with room for `max_tokens` of reply.
pub fn request(model: &Model, user: &str, max_tokens: usize) -> GenerateRequest {
    let messages = [
        Message::new(Role::System, policy::default_system_prompt()),
        Message::new(Role::User, user),
    ];
    let prompt = model
        .chat_template
        .render(&model.tokenizer, &messages, true)
        .unwrap()
        .tokens;
    GenerateRequest {
        prompt,
        max_tokens,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    }
}
