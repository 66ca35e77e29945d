//! `kostant chat`: one answer with --prompt, or an interactive conversation whose turns stay in
//! the prompt (and in the KV cache, so each turn only computes its new tokens).

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use serde_json::json;

use kostant_engine::{
    CancelHandle, EngineError, GenerateRequest, Generation, Message, Model, Role, SamplingParams,
    Session, Speculation,
};
use kostant_safety::pipeline::{self, Reply, ReplyEvent, StreamEvent};
use kostant_safety::{policy, Guard};

use kostant_app::assistant::choices::Shape;
use kostant_app::assistant::proofread;
use kostant_app::features::Feature;

use super::guard::HeadId;
use super::{load_model_kv, peak_rss_mb, ChatArgs};

pub fn run(args: ChatArgs) -> Result<()> {
    let shape = shape_of(&args)?;
    let grammar = match shape {
        Some(s) => Some(s.grammar()?),
        None => args.grammar.load()?,
    };
    let sampling = SamplingParams {
        temperature: args.sampling.temperature,
        top_k: args.sampling.top_k,
        top_p: args.sampling.top_p,
        min_p: args.sampling.min_p,
        repeat_penalty: args.sampling.repeat_penalty,
        repeat_last_n: 64,
        seed: args.sampling.seed.unwrap_or_else(time_seed),
        grammar,
    };
    sampling.validate()?;
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    // Opened before the model loads, so a wrong key or damaged history fails fast.
    let recorder = match args.no_history || args.temporary {
        true => None,
        false => Some(crate::history::Recorder::open(args.data_dir.as_deref())?),
    };
    let model = load_model_kv(&args.model, args.kv.kv_type)?;
    let path = crate::model_path::resolve(args.model.model.as_deref())?;
    let (guard, head) = super::guard::load_guard_named(&args.guard, &model, &path)?;
    let mut session = Session::with_kv_type(model.clone(), args.model.ctx, args.kv.kv_type)?;
    // The feature's shipped adapter, plain chat's included, unless the caller brings their
    // own adapter or system prompt (chat's adapter learned under the default prompt).
    let own = args.no_adapter || args.adapter.adapter.is_some() || args.system.is_some();
    let adapter = if own {
        args.adapter.apply(&mut session)?
    } else {
        super::adapter::apply_feature(args.feature.unwrap_or(Feature::Chat), &mut session)?
    };
    let draft_model = match &args.draft_model {
        Some(path) => {
            let draft = super::load_draft(path, &model, &args.model)?;
            let name = draft.model_name();
            session.set_drafter(Some(Box::new(draft)));
            Some(name)
        }
        None => None,
    };
    // The tone rules ride along with any system prompt, the user's own included.
    let system = match (&args.system, args.feature) {
        (Some(s), _) => format!("{s}\n\n{}", policy::TONE_RULES),
        (None, Some(f)) => shape.map_or_else(|| f.system_prompt(), Shape::system_prompt),
        (None, None) => policy::default_system_prompt(),
    };
    let mut chat = Chat {
        model,
        session: Some(session),
        keeper: crate::history::context::ContextKeeper::new(),
        restored_tokens: 0,
        guard: Some(guard),
        head,
        adapter,
        feature: args.feature.unwrap_or(Feature::Chat),
        shape,
        draft_model,
        history: Vec::new(),
        system: Some(system),
        sampling,
        speculation: args.speculative,
        max_tokens: args.max_tokens,
        cancel: CancelHandle::new(),
        recorder,
        temporary: args.temporary,
        changes: None,
    };
    if let Some(id) = args.continue_id {
        chat.continue_conversation(id)?;
    }
    match &args.prompt {
        Some(prompt) => one_shot(&mut chat, prompt, args.json),
        None => interactive(&mut chat),
    }
}

struct Chat {
    model: Arc<Model>,
    /// Taken while a generation runs on its thread, given back when it ends.
    session: Option<Session>,
    /// Screens every message and reply; taken with the session while a reply runs.
    guard: Option<Guard>,
    /// Which head the guard runs (built in, or swapped with --guard-head), named to the user.
    head: HeadId,
    /// The adapter's name, when one is on (`--adapter`, or `--feature`'s own).
    adapter: Option<String>,
    /// The feature whose prompt the chat runs under (`--feature`; chat by default).
    feature: Feature,
    /// The shape a grammar holds the feature's reply to (`--feature reply`, `--length`,
    /// `--tone`).
    shape: Option<Shape>,
    /// The draft model's name, when one drafts (`--draft-model`).
    draft_model: Option<String>,
    history: Vec<Message>,
    system: Option<String>,
    sampling: SamplingParams,
    speculation: Speculation,
    max_tokens: usize,
    cancel: CancelHandle,
    /// Saves each exchange to the encrypted history; `None` with --no-history.
    recorder: Option<crate::history::Recorder>,
    /// `--temporary`: the banner says so (there is no recorder either).
    temporary: bool,
    /// The last proofread reply's changes (`--feature proofread`).
    changes: Option<proofread::Proofread>,
    /// Saves the session's context beside the conversation after each reply.
    keeper: crate::history::context::ContextKeeper,
    /// Tokens the session got from a saved context (`--continue`), not from a forward pass.
    restored_tokens: usize,
}

impl Chat {
    /// Goes on with history conversation `id`: its saved context restored into the session
    /// when there is one that fits this model and cache, else its messages read again on the
    /// first reply (with a notice saying why).
    fn continue_conversation(&mut self, id: i64) -> Result<()> {
        let recorder = self
            .recorder
            .as_mut()
            .context("--continue needs the history")?;
        let messages = recorder.continue_conversation(id)?;
        let session = self
            .session
            .as_mut()
            .context("generation already running")?;
        match self.keeper.restore(recorder.store_mut(), id, session) {
            Ok(Some(context)) => {
                self.restored_tokens = session.tokens().len();
                self.history = context;
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => eprintln!(
                "kostant: the saved context of conversation {id} was not restored ({e}); reading the conversation again"
            ),
        }
        // No usable snapshot: the conversation as shown, every exchange (the messages do not
        // say which ones the guard kept out of the model's context).
        self.history.clear();
        for m in messages {
            let text = m.text?;
            let role = match m.role {
                Some(crate::history::Role::User) => Role::User,
                Some(crate::history::Role::Assistant) => Role::Assistant,
                _ => continue,
            };
            self.history.push(Message::new(role, text));
        }
        Ok(())
    }

    /// `/reset`: a new conversation, in the history too, on an empty context.
    fn start_over(&mut self) {
        self.history.clear();
        self.keeper.forget();
        self.restored_tokens = 0;
        if let Some(r) = self.recorder.as_mut() {
            r.new_conversation();
        }
        if let Some(s) = self.session.as_mut() {
            s.reset();
        }
    }

    /// The conversation as prompt tokens. Drops the oldest turns when it no longer fits the
    /// context, keeping the newest message; fails if even that does not fit.
    fn prompt(&mut self) -> Result<Vec<u32>, EngineError> {
        let n_ctx = self.session.as_ref().map_or(0, |s| s.n_ctx());
        let (tokens, dropped) = kostant_app::assistant::prompt::fit_prompt(
            &self.model,
            self.system.as_deref(),
            &self.history,
            self.max_tokens,
            n_ctx,
        )?;
        self.history.drain(..dropped);
        Ok(tokens)
    }

    /// Runs one guarded reply on the generation thread, passing what the user should see to
    /// `on_event`.
    fn reply(&mut self, user: &str, mut on_event: impl FnMut(&ReplyEvent)) -> Result<Reply> {
        if self.feature == Feature::Proofread {
            return self.proofread(user, on_event);
        }
        self.history.push(Message::new(Role::User, user));
        let prompt = match self.prompt() {
            Ok(p) => p,
            Err(e) => {
                self.history.pop();
                return Err(e.into());
            }
        };
        let session = self.session.take().context("generation already running")?;
        let Some(guard) = self.guard.take() else {
            self.session = Some(session);
            bail!("generation already running");
        };
        let budget = self
            .max_tokens
            .min(session.n_ctx().saturating_sub(prompt.len()));
        let req = GenerateRequest {
            prompt,
            max_tokens: budget.max(1),
            sampling: self.sampling.clone(),
            speculation: self.speculation,
        };
        self.cancel.reset();
        let mut running =
            pipeline::spawn(session, guard, req, user.to_string(), self.cancel.clone());
        let mut outcome = None;
        while let Some(ev) = running.events.blocking_recv() {
            match ev {
                StreamEvent::Reply(e) => on_event(&e),
                StreamEvent::Done(r) => outcome = Some(Ok(*r)),
                StreamEvent::Error(e) => outcome = Some(Err(anyhow::anyhow!(e))),
            }
        }
        let (session, guard) = running
            .join
            .join()
            .map_err(|_| anyhow::anyhow!("the generation thread panicked"))?;
        self.session = Some(session);
        self.guard = Some(guard);
        let g = match outcome {
            Some(Ok(g)) => g,
            Some(Err(e)) => {
                self.history.pop();
                return Err(e);
            }
            None => bail!("generation ended without a result"),
        };
        // The conversation goes on with what the user saw; an exchange the guard refused or
        // withdrew is shown and saved but leaves the model's context.
        kostant_safety::close_exchange(&mut self.history, g.text.clone(), g.verdict);
        if let Some(r) = self.recorder.as_mut() {
            // The reply was already shown: a failed save is reported, not fatal.
            match r.record(user, &g.text) {
                Err(e) => eprintln!("kostant: this exchange was not saved to the history: {e}"),
                Ok(id) => {
                    // The context is a convenience: a failed save costs the next open a
                    // re-read, nothing else.
                    if let Some(session) = self.session.as_ref() {
                        if let Err(e) = self.keeper.save(r.store_mut(), id, session, &self.history)
                        {
                            eprintln!("kostant: this conversation's context was not saved: {e}");
                        }
                    }
                }
            }
        }
        Ok(g)
    }
}

impl Chat {
    /// A proofread reply ([`proofread::respond`], as the app's): the text a sentence at a
    /// time, shown once whole, its changes kept for the report after it. Each sentence is read
    /// on its own, so no context is saved beside the conversation.
    fn proofread(&mut self, user: &str, mut on_event: impl FnMut(&ReplyEvent)) -> Result<Reply> {
        let mut session = self.session.take().context("generation already running")?;
        let Some(mut guard) = self.guard.take() else {
            self.session = Some(session);
            bail!("generation already running");
        };
        self.cancel.reset();
        let system = self
            .system
            .clone()
            .unwrap_or_else(|| self.feature.system_prompt());
        let result = proofread::respond(
            &mut session,
            &mut guard,
            &system,
            &self.sampling,
            user,
            &self.cancel,
        );
        self.session = Some(session);
        self.guard = Some(guard);
        let done = result?;
        on_event(&ReplyEvent::Token(done.reply.text.clone()));
        self.changes = done.proofread;
        self.history.push(Message::new(Role::User, user));
        kostant_safety::close_exchange(
            &mut self.history,
            done.reply.text.clone(),
            done.reply.verdict,
        );
        if let Some(r) = self.recorder.as_mut() {
            if let Err(e) = r.record(user, &done.reply.text) {
                eprintln!("kostant: this exchange was not saved to the history: {e}");
            }
        }
        Ok(done.reply)
    }
}

/// A proofread reply's changes for the terminal, one a line: "sunday → Sunday".
fn print_changes(err: &mut impl Write, changes: &[proofread::Change]) -> std::io::Result<()> {
    match changes.len() {
        0 => writeln!(err, "No changes."),
        1 => writeln!(err, "1 change:"),
        n => writeln!(err, "{n} changes:"),
    }?;
    for c in changes {
        let (was, now) = (c.removed.trim(), c.inserted.trim());
        match (was.is_empty(), now.is_empty()) {
            (true, _) => writeln!(err, "  + {now}"),
            (_, true) => writeln!(err, "  - {was}"),
            _ => writeln!(err, "  {was} → {now}"),
        }?;
    }
    Ok(())
}

/// The shape the feature's reply is held to. `--length` and `--tone` belong to their
/// features, and a shaped feature brings its own grammar, so a grammar of the user's goes with
/// the others.
fn shape_of(args: &ChatArgs) -> Result<Option<Shape>> {
    let feature = args.feature.unwrap_or(Feature::Chat);
    if args.length.is_some() && feature != Feature::Summarize {
        bail!("--length goes with --feature summarize");
    }
    if args.tone.is_some() && feature != Feature::Rewrite {
        bail!("--tone goes with --feature rewrite");
    }
    let shape = Shape::of(feature, args.length, args.tone);
    if shape.is_some() && args.grammar.is_set() {
        bail!(
            "--feature {} holds the reply to a grammar of its own; --grammar-file and --json-schema go with other features",
            feature.id()
        );
    }
    Ok(shape)
}

fn stats_json(
    g: Option<&Generation>,
    head: &HeadId,
    speculation: Speculation,
    draft_model: Option<&str>,
    restored_tokens: usize,
) -> serde_json::Value {
    let Some(g) = g else {
        return json!({
            "generated_tokens": 0,
            "peak_rss_mb": peak_rss_mb(),
            "guard_head": head.json(),
        });
    };
    let s = &g.stats;
    json!({
        "guard_head": head.json(),
        "prompt_tokens": s.prompt_tokens,
        "reused_tokens": s.reused_tokens,
        // Of the reused tokens, those a saved context put in the cache (`--continue`); the
        // prompt's tokens that went through a forward pass.
        "restored_tokens": restored_tokens.min(s.reused_tokens),
        "prefill_tokens": s.prompt_tokens - s.reused_tokens,
        "generated_tokens": s.generated_tokens,
        "ttft_ms": s.ttft_ms,
        "first_shown_ms": s.first_shown_ms,
        "max_held_tokens": s.max_held_tokens,
        "prefill_tok_s": s.prefill_tok_s,
        "decode_tok_s": s.decode_tok_s,
        "speculative": match (speculation, draft_model) {
            (Speculation::Lookup, Some(_)) => "draft-model",
            _ => speculation.name(),
        },
        "draft_model": draft_model,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "passes": s.passes,
        "peak_rss_mb": peak_rss_mb(),
    })
}

fn one_shot(chat: &mut Chat, prompt: &str, as_json: bool) -> Result<()> {
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    install_ctrl_c(chat.cancel.clone(), false)?;
    let stdout = std::io::stdout();
    let tty = std::io::IsTerminal::is_terminal(&stdout);
    if tty && !as_json {
        // Save the cursor where the reply starts, so a withdrawn reply can be erased.
        print!("\x1b7");
    }
    let r = chat.reply(prompt, |ev| {
        let mut out = stdout.lock();
        // A closed stdout (e.g. `| head`) is not worth a panic; generation just goes on.
        let _ = match ev {
            ReplyEvent::Token(text) if as_json => {
                writeln!(out, "{}", json!({"event": "token", "text": text}))
            }
            ReplyEvent::Withdraw { from, to, notice } if as_json => writeln!(
                out,
                "{}",
                json!({"event": "withdraw", "from": from, "to": to, "notice": notice})
            ),
            // Text written to a pipe or file cannot be taken back: there the reply is written
            // once it has ended, as the user is meant to see it.
            _ if !tty => Ok(()),
            ReplyEvent::Token(text) => write!(out, "{text}").and_then(|_| out.flush()),
            ReplyEvent::Withdraw { notice, .. } => withdraw_on_terminal(&mut out, notice),
        };
    })?;
    let mut out = stdout.lock();
    if !as_json && !tty {
        write!(out, "{}", r.text)?;
    }
    if as_json {
        let done = json!({
            "event": "done",
            "reply": r.text,
            "verdict": r.verdict,
            "category": r.verdict.category(),
            "stopped_by": r.verdict.stopped_by(),
            "guard": guard_json(&r),
            "stop_reason": r.generation.as_ref().map(|g| g.stop),
            "model": chat.model.name(),
            "feature": chat.feature.id(),
            "adapter": chat.adapter,
            "stats": stats_json(
                r.generation.as_ref(),
                &chat.head,
                chat.speculation,
                chat.draft_model.as_deref(),
                chat.restored_tokens
            ),
        });
        let mut done = done;
        if let Some(p) = &chat.changes {
            done["changes"] = json!(p.changes);
        }
        // A shaped reply's items, or null when it has none (refused, withdrawn, cut off).
        match chat.shape {
            Some(s @ Shape::Choices) => done["choices"] = json!(s.items(&r.text, r.verdict)),
            Some(s @ Shape::Bullets(_)) => done["bullets"] = json!(s.items(&r.text, r.verdict)),
            Some(Shape::Rewrite(_)) | None => {}
        }
        writeln!(out, "{done}")?;
    } else {
        writeln!(out)?;
        out.flush()?;
        if let Some(p) = &chat.changes {
            print_changes(&mut std::io::stderr(), &p.changes)?;
        }
    }
    Ok(())
}

fn interactive(chat: &mut Chat) -> Result<()> {
    install_ctrl_c(chat.cancel.clone(), true)?;
    let mut input = std::io::stdin().lock();
    let mut err = std::io::stderr();
    print_banner(chat, &mut err)?;
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
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/reset" => {
                chat.start_over();
                writeln!(err, "(conversation cleared)")?;
            }
            line => {
                let result = reply_to_line(chat, line);
                if let (Ok(_), Some(p)) = (&result, chat.changes.take()) {
                    print_changes(&mut err, &p.changes)?;
                }
                report_turn(&mut err, result)?;
            }
        }
    }
}

/// The interactive chat's opening lines: the model, the guard's head, and what else is on.
fn print_banner(chat: &Chat, err: &mut impl Write) -> Result<()> {
    writeln!(
        err,
        "kostant · {} ({}) · on-device · type a message, /reset to start over, Ctrl-C stops a reply, Ctrl-D quits",
        chat.model.name(),
        chat.model.quantization()
    )?;
    writeln!(err, "guard: {}", chat.head)?;
    if chat.feature != Feature::Chat {
        writeln!(err, "feature: {}", chat.feature.label())?;
    }
    if let Some(a) = &chat.adapter {
        writeln!(err, "adapter: {a}")?;
    }
    if let Some(d) = &chat.draft_model {
        writeln!(
            err,
            "draft model: {d} (the reply is the one {} writes alone)",
            chat.model.name()
        )?;
    }
    match (&chat.recorder, chat.temporary) {
        (Some(r), _) => writeln!(err, "{}", r.notice())?,
        (None, true) => writeln!(err, "{}", crate::history::TEMPORARY_NOTICE)?,
        (None, false) => writeln!(err, "history: off for this chat (--no-history)")?,
    }
    Ok(())
}

/// One interactive turn's reply on stdout: token by token on a terminal (a withdrawn reply
/// erased for its notice), whole once it has ended elsewhere. Ctrl-C stops it meanwhile.
fn reply_to_line(chat: &mut Chat, line: &str) -> Result<Reply> {
    let stdout = std::io::stdout();
    BUSY.store(true, std::sync::atomic::Ordering::SeqCst);
    let tty = std::io::IsTerminal::is_terminal(&stdout);
    // Save the cursor where the reply starts, so a withdrawn reply can be erased.
    if tty {
        print!("\x1b7");
    }
    let result = chat.reply(line, |ev| {
        let mut out = stdout.lock();
        let _ = match ev {
            // Off a terminal the reply is written once it has ended (it cannot be erased).
            _ if !tty => Ok(()),
            ReplyEvent::Token(text) => write!(out, "{text}").and_then(|_| out.flush()),
            ReplyEvent::Withdraw { notice, .. } => withdraw_on_terminal(&mut out, notice),
        };
    });
    BUSY.store(false, std::sync::atomic::Ordering::SeqCst);
    if let (false, Ok(r)) = (tty, &result) {
        print!("{}", r.text);
    }
    println!();
    result
}

/// The line after an interactive reply: its speed and the guard's time, or why it stopped.
fn report_turn(err: &mut impl Write, result: Result<Reply>) -> Result<()> {
    match result {
        Ok(r) => {
            let guard_ms = r.guard.input_ms + r.guard.output_ms;
            match (&r.generation, r.verdict) {
                (_, pipeline::Verdict::Refused { .. }) => {
                    writeln!(err, "[refused by the guard · {guard_ms:.0} ms]")?
                }
                (Some(g), verdict) => {
                    let s = &g.stats;
                    let note = match verdict.stopped_by() {
                        Some(pipeline::StoppedBy::Guard) => " · withdrawn by the guard",
                        Some(pipeline::StoppedBy::User) => " · stopped",
                        None => "",
                    };
                    writeln!(
                        err,
                        "[{} tokens · first token {:.0} ms · {:.1} tok/s · guard {guard_ms:.0} ms{note}]",
                        s.generated_tokens, s.ttft_ms, s.decode_tok_s
                    )?;
                }
                (None, _) => {}
            }
        }
        // A turn that cannot run (too long, say) is reported; the chat goes on.
        Err(e) => writeln!(err, "error: {e:#}")?,
    }
    Ok(())
}

fn guard_json(r: &Reply) -> serde_json::Value {
    json!({
        "input_score": r.guard.input_score,
        "output_score": r.guard.output_score,
        "ms": r.guard.input_ms + r.guard.output_ms,
        "input_ms": r.guard.input_ms,
        "output_ms": r.guard.output_ms,
        "output_checks": r.guard.output_checks,
        // The head's top category when it refused or withdrew, confident or not: for
        // diagnosis only (the category the user was shown is the reply's `category`).
        "category_guess": r.guard.category_guess,
    })
}

/// Replaces a withdrawn reply on the terminal with the notice: the text since the saved cursor
/// is erased first (it may have scrolled off; then the notice follows it).
fn withdraw_on_terminal(out: &mut impl Write, notice: &str) -> std::io::Result<()> {
    write!(out, "\x1b8\x1b[J{notice}")?;
    out.flush()
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
