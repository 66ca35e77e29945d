//! `kostant chat`: one answer with --prompt, or an interactive conversation whose turns stay in
//! the prompt (and in the KV cache, so each turn only computes its new tokens).

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use serde_json::json;

use kostant_engine::{
    CancelHandle, EngineError, Event, GenerateRequest, Generation, Message, Model, Role,
    SamplingParams, Session,
};

use super::{load_model, peak_rss_mb, ChatArgs};

pub fn run(args: ChatArgs) -> Result<()> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: 64,
        seed: args.seed.unwrap_or_else(time_seed),
    };
    sampling.validate()?;
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    // Opened before the model loads, so a wrong key or damaged history fails fast.
    let recorder = match args.no_history {
        true => None,
        false => Some(crate::history::Recorder::open(args.data_dir.as_deref())?),
    };
    let model = load_model(&args.model)?;
    let session = Session::new(model.clone(), args.model.ctx)?;
    let mut chat = Chat {
        model,
        session: Some(session),
        history: Vec::new(),
        system: args.system.clone(),
        sampling,
        max_tokens: args.max_tokens,
        cancel: CancelHandle::new(),
        recorder,
    };
    match &args.prompt {
        Some(prompt) => one_shot(&mut chat, prompt, args.json),
        None => interactive(&mut chat),
    }
}

struct Chat {
    model: Arc<Model>,
    /// Taken while a generation runs on its thread, given back when it ends.
    session: Option<Session>,
    history: Vec<Message>,
    system: Option<String>,
    sampling: SamplingParams,
    max_tokens: usize,
    cancel: CancelHandle,
    /// Saves each exchange to the encrypted history; `None` with --no-history.
    recorder: Option<crate::history::Recorder>,
}

impl Chat {
    /// The conversation as prompt tokens. Drops the oldest turns when it no longer fits the
    /// context, keeping the newest message; fails if even that does not fit.
    fn prompt(&mut self) -> Result<Vec<u32>, EngineError> {
        let n_ctx = self.session.as_ref().map_or(0, |s| s.n_ctx());
        loop {
            let mut messages = Vec::new();
            if let Some(s) = &self.system {
                messages.push(Message::new(Role::System, s.clone()));
            }
            messages.extend(self.history.iter().cloned());
            let rendered =
                self.model
                    .chat_template
                    .render(&self.model.tokenizer, &messages, true)?;
            // Leave room for at least a short reply.
            let room = self.max_tokens.min(64);
            if rendered.tokens.len() + room <= n_ctx {
                return Ok(rendered.tokens);
            }
            if self.history.len() <= 1 {
                return Err(EngineError::ContextOverflow {
                    prompt_tokens: rendered.tokens.len() + room,
                    context: n_ctx,
                });
            }
            // Forget the oldest exchange (a user turn and its reply), never the newest message.
            let n = 2.min(self.history.len() - 1);
            self.history.drain(..n);
        }
    }

    /// Runs one reply on the generation thread, passing every event to `on_event`.
    fn reply(&mut self, user: &str, mut on_event: impl FnMut(&Event)) -> Result<Generation> {
        self.history.push(Message::new(Role::User, user));
        let prompt = match self.prompt() {
            Ok(p) => p,
            Err(e) => {
                self.history.pop();
                return Err(e.into());
            }
        };
        let session = self.session.take().context("generation already running")?;
        let budget = self
            .max_tokens
            .min(session.n_ctx().saturating_sub(prompt.len()));
        let req = GenerateRequest {
            prompt,
            max_tokens: budget.max(1),
            sampling: self.sampling.clone(),
        };
        self.cancel.reset();
        let mut running = kostant_engine::spawn(session, req, self.cancel.clone());
        let mut outcome = None;
        while let Some(ev) = running.events.blocking_recv() {
            on_event(&ev);
            match ev {
                Event::Done(g) => outcome = Some(Ok(g)),
                Event::Error(e) => outcome = Some(Err(anyhow::anyhow!(e))),
                Event::Token { .. } => {}
            }
        }
        let session = running
            .join
            .join()
            .map_err(|_| anyhow::anyhow!("the generation thread panicked"))?;
        self.session = Some(session);
        let g = match outcome {
            Some(Ok(g)) => g,
            Some(Err(e)) => {
                self.history.pop();
                return Err(e);
            }
            None => bail!("generation ended without a result"),
        };
        self.history
            .push(Message::new(Role::Assistant, g.reply.clone()));
        if let Some(r) = self.recorder.as_mut() {
            // The reply was already shown: a failed save is reported, not fatal.
            if let Err(e) = r.record(user, &g.reply) {
                eprintln!("kostant: this exchange was not saved to the history: {e}");
            }
        }
        Ok(g)
    }
}

fn stats_json(g: &Generation) -> serde_json::Value {
    let s = &g.stats;
    json!({
        "prompt_tokens": s.prompt_tokens,
        "reused_tokens": s.reused_tokens,
        "generated_tokens": s.generated_tokens,
        "ttft_ms": s.ttft_ms,
        "prefill_tok_s": s.prefill_tok_s,
        "decode_tok_s": s.decode_tok_s,
        "peak_rss_mb": peak_rss_mb(),
    })
}

fn one_shot(chat: &mut Chat, prompt: &str, as_json: bool) -> Result<()> {
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    install_ctrl_c(chat.cancel.clone(), false)?;
    let stdout = std::io::stdout();
    let g = chat.reply(prompt, |ev| {
        let mut out = stdout.lock();
        if let Event::Token { id, text } = ev {
            // A closed stdout (e.g. `| head`) is not worth a panic; generation just goes on.
            let _ = if as_json {
                writeln!(out, "{}", json!({"event": "token", "id": id, "text": text}))
            } else {
                write!(out, "{text}").and_then(|_| out.flush())
            };
        }
    })?;
    let mut out = stdout.lock();
    if as_json {
        let done = json!({
            "event": "done",
            "reply": g.reply,
            "verdict": if g.stop == kostant_engine::StopReason::Cancelled { "stopped" } else { "answered" },
            "stop_reason": g.stop,
            "model": chat.model.name(),
            "stats": stats_json(&g),
        });
        writeln!(out, "{done}")?;
    } else {
        writeln!(out)?;
    }
    Ok(())
}

fn interactive(chat: &mut Chat) -> Result<()> {
    install_ctrl_c(chat.cancel.clone(), true)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut err = std::io::stderr();
    writeln!(
        err,
        "kostant · {} ({}) · on-device · type a message, /reset to start over, Ctrl-C stops a reply, Ctrl-D quits",
        chat.model.name(),
        chat.model.quantization()
    )?;
    match &chat.recorder {
        Some(r) => writeln!(err, "{}", r.notice())?,
        None => writeln!(err, "history: off for this chat (--no-history)")?,
    }
    let mut line_no = 0usize;
    loop {
        write!(err, "\n> ")?;
        err.flush()?;
        let mut raw = Vec::new();
        if input.read_until(b'\n', &mut raw)? == 0 {
            writeln!(err)?;
            return Ok(());
        }
        line_no += 1;
        let line = match String::from_utf8(raw) {
            Ok(l) => l,
            Err(_) => bail!("stdin line {line_no} is not valid UTF-8"),
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/reset" => {
                chat.history.clear();
                if let Some(r) = chat.recorder.as_mut() {
                    r.new_conversation();
                }
                if let Some(s) = chat.session.as_mut() {
                    s.reset();
                }
                writeln!(err, "(conversation cleared)")?;
                continue;
            }
            _ => {}
        }
        let stdout = std::io::stdout();
        BUSY.store(true, std::sync::atomic::Ordering::SeqCst);
        let result = chat.reply(line, |ev| {
            if let Event::Token { text, .. } = ev {
                let mut out = stdout.lock();
                let _ = write!(out, "{text}").and_then(|_| out.flush());
            }
        });
        BUSY.store(false, std::sync::atomic::Ordering::SeqCst);
        println!();
        match result {
            Ok(g) => {
                let s = &g.stats;
                let note = if g.stop == kostant_engine::StopReason::Cancelled {
                    " · stopped"
                } else {
                    ""
                };
                writeln!(
                    err,
                    "[{} tokens · first token {:.0} ms · {:.1} tok/s{note}]",
                    s.generated_tokens, s.ttft_ms, s.decode_tok_s
                )?;
            }
            // A turn that cannot run (too long, say) is reported; the chat goes on.
            Err(e) => writeln!(err, "error: {e:#}")?,
        }
    }
}

/// Whether a reply is being generated: Ctrl-C then stops the reply instead of quitting.
static BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn install_ctrl_c(cancel: CancelHandle, interactive: bool) -> Result<()> {
    let cancel = Mutex::new(cancel);
    ctrlc::set_handler(move || {
        if !interactive || BUSY.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok(c) = cancel.lock() {
                c.cancel();
            }
        } else {
            eprintln!();
            std::process::exit(130);
        }
    })
    .context("cannot install the Ctrl-C handler")
}

/// A fresh seed per run when none is given: the clock's nanoseconds are plenty for sampling.
fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
