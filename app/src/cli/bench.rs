//! `kostant bench`: prefill and decode speed, time to first token and peak memory, measured
//! the way llama-bench measures (random prompt tokens for prefill; decode from an empty
//! context, one token at a time; with `--depth N`, each after N random tokens of context, as
//! llama-bench's `-d N`) so the two can be compared on the same file.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde_json::json;

use kostant_engine::sampling::argmax;
use kostant_engine::{Batch, Model, Outputs, Session};

use super::{load_model_kv, peak_rss_mb, BenchArgs};

pub fn run(args: BenchArgs) -> Result<()> {
    // The documents benchmarks run the sentence encoder, not the chat model.
    if args.documents.is_set() {
        return super::bench_documents::run(&args);
    }
    anyhow::ensure!(
        args.prompt_tokens >= 1,
        "--prompt-tokens must be at least 1"
    );
    anyhow::ensure!(args.gen_tokens >= 1, "--gen-tokens must be at least 1");
    anyhow::ensure!(args.repetitions >= 1, "--repetitions must be at least 1");
    let load_start = Instant::now();
    let kv_type = args.kv.kv_type;
    let model = load_model_kv(&args.model, kv_type)?;
    if args.speculative.is_some() || args.verify_cost {
        return speculative(&args, &model);
    }
    if args.snapshot {
        return snapshot(&args, &model);
    }
    if args.grammar.is_set() {
        return super::bench_grammar::run(&args, &model);
    }
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    let mut session = Session::with_kv_type(model.clone(), args.model.ctx, kv_type)?;
    // Loading an adapter (mapping it, checking every pair and value, hashing it) is what a
    // switch to one not yet resident costs; switching between resident ones costs nothing but
    // the prefill the forgotten rows need.
    let adapter_start = Instant::now();
    let adapter = args.adapter.apply(&mut session)?;
    let adapter_load_ms = adapter
        .is_some()
        .then(|| adapter_start.elapsed().as_secs_f64() * 1e3);
    let timings = time_prefill_and_decode(&args, &model, &mut session)?;
    let decode_tok_s = args.gen_tokens as f64 * 1e3 / timings.decode_ms;
    let gb_s = model.weight_bytes_per_token() as f64 * decode_tok_s / 1e9;
    let peak_rss_mb = peak_rss_mb();
    // Measured after the model's runs so its peak above is the model's own.
    let read_gb_s = args
        .bandwidth
        .then(|| kostant_kernels::bandwidth::read_bandwidth(1 << 30, 10).best_gb_s);
    let guard = match args.guard {
        true => Some(measure_guard(&args, &model)?),
        false => None,
    };
    let speed = Speed {
        load_ms,
        adapter,
        adapter_load_ms,
        prefill_tok_s: args.prompt_tokens as f64 * 1e3 / timings.prefill_ms,
        decode_tok_s,
        ttft_ms: timings.ttft_ms,
        gb_s,
        peak_rss_mb,
        read_gb_s,
        guard,
    };
    if args.json {
        println!("{}", speed_json(&args, &model, &session, &speed));
    } else {
        print_speed(&args, &model, &session, &speed);
    }
    Ok(())
}

/// Mean times of one measurement's runs, in ms.
struct Timings {
    prefill_ms: f64,
    ttft_ms: f64,
    decode_ms: f64,
}

/// What a speed run measured, for its report.
struct Speed {
    load_ms: f64,
    adapter: Option<String>,
    adapter_load_ms: Option<f64>,
    prefill_tok_s: f64,
    decode_tok_s: f64,
    ttft_ms: f64,
    /// The weights decoding reads, in GB/s.
    gb_s: f64,
    peak_rss_mb: Option<f64>,
    /// The machine's read bandwidth (`--bandwidth`), in GB/s.
    read_gb_s: Option<f64>,
    /// What the guard costs (`--guard`): see `bench_guard`.
    guard: Option<serde_json::Value>,
}

/// Prefill, time to first token and decode, each `--repetitions` times after `--depth` random
/// tokens of context, as llama-bench runs its pp and tg tests.
fn time_prefill_and_decode(
    args: &BenchArgs,
    model: &Model,
    session: &mut Session,
) -> Result<Timings> {
    let n_vocab = model.hparams.n_vocab as u32;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1234);
    let prompt: Vec<u32> = (0..args.prompt_tokens)
        .map(|_| rng.gen_range(0..n_vocab))
        .collect();
    let context: Vec<u32> = (0..args.depth).map(|_| rng.gen_range(0..n_vocab)).collect();
    let longest = args.depth + args.prompt_tokens.max(args.gen_tokens);
    anyhow::ensure!(
        longest <= session.n_ctx(),
        "--depth plus the longer of --prompt-tokens and --gen-tokens ({longest}) exceeds the context of {} tokens (raise --ctx)",
        session.n_ctx()
    );
    // The context every measurement starts from: empty, or --depth tokens already read.
    let mut out = Outputs::new();
    let start = |session: &mut Session, out: &mut Outputs| -> Result<()> {
        session.reset();
        if !context.is_empty() {
            session.decode(&Batch::prompt(&context), out)?;
        }
        Ok(())
    };

    // Warm-up, as llama-bench warms up with the whole prompt: pages the weights and every kv
    // cache row the prefill will write in, and lets the thread pool spin up, so the first
    // measured run does not pay first-touch page faults the others do not.
    start(session, &mut out)?;
    session.decode(&Batch::prompt(&prompt), &mut out)?;

    let mut prefill_ms = Vec::new();
    let mut ttft_ms = Vec::new();
    let mut decode_ms = Vec::new();
    for _ in 0..args.repetitions {
        start(session, &mut out)?;
        let t = Instant::now();
        session.decode(&Batch::prompt(&prompt), &mut out)?;
        prefill_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let _first = argmax(out.last_logits());
        ttft_ms.push(t.elapsed().as_secs_f64() * 1e3);

        // Decode from the starting context, like llama-bench's tg test.
        start(session, &mut out)?;
        let mut token = prompt[0];
        let t = Instant::now();
        for _ in 0..args.gen_tokens {
            session.decode(&Batch::step(&token), &mut out)?;
            token = argmax(out.last_logits());
        }
        decode_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    Ok(Timings {
        prefill_ms: mean(&prefill_ms),
        ttft_ms: mean(&ttft_ms),
        decode_ms: mean(&decode_ms),
    })
}

/// `--guard`: see `bench_guard`.
fn measure_guard(args: &BenchArgs, model: &Arc<Model>) -> Result<serde_json::Value> {
    let path = crate::model_path::resolve(args.model.model.as_deref())?;
    super::bench_guard::measure(
        model,
        &path,
        &args.guard_args,
        &args.adapter,
        Session::with_kv_type(model.clone(), args.model.ctx, args.kv.kv_type)?,
        args.gen_tokens,
        args.repetitions,
    )
}

/// Megabytes (MiB) of `b` bytes.
fn mb(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// `--json`'s report of a speed run.
fn speed_json(args: &BenchArgs, model: &Model, session: &Session, s: &Speed) -> serde_json::Value {
    let kv_type = args.kv.kv_type;
    let plan = model.memory_plan_with_kv(session.n_ctx(), kv_type);
    json!({
        "model": model.name(),
        "adapter": s.adapter,
        "adapter_load_ms": s.adapter_load_ms,
        "adapter_mb": session.adapter().map(|a| a.adapter.file_bytes() as f64 / (1024.0 * 1024.0)),
        "quantization": model.quantization(),
        "file_mb": model.file_bytes() as f64 / (1024.0 * 1024.0),
        "threads": super::threads(),
        "cpu": kostant_kernels::cpu_features().to_string(),
        "repacked_matrices": model.repacked_matrices(),
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "depth": args.depth,
        "repetitions": args.repetitions,
        "load_ms": s.load_ms,
        "prefill_tok_s": s.prefill_tok_s,
        "decode_tok_s": s.decode_tok_s,
        "ttft_ms": s.ttft_ms,
        "decode_weight_gb_s": s.gb_s,
        "n_ctx": session.n_ctx(),
        "kv_type": kv_type.name(),
        "kv_cache_mb": session.kv_bytes() as f64 / (1024.0 * 1024.0),
        "planned_mb": mb(plan.total()),
        "planned_weights_mb": mb(plan.weights),
        "planned_kv_mb": mb(plan.kv),
        "planned_scratch_mb": mb(plan.scratch),
        "peak_rss_mb": s.peak_rss_mb,
        "read_bandwidth_gb_s": s.read_gb_s,
        "decode_bandwidth_fraction": s.read_gb_s.map(|b| s.gb_s / b),
        "guard": s.guard,
    })
}

/// The text report of a speed run, one measurement a line.
fn print_speed(args: &BenchArgs, model: &Model, session: &Session, s: &Speed) {
    let plan = model.memory_plan_with_kv(session.n_ctx(), args.kv.kv_type);
    println!(
        "model        {} ({}, {:.1} MB)",
        model.name(),
        model.quantization(),
        model.file_bytes() as f64 / 1048576.0
    );
    println!(
        "cpu          {} · {} threads · {} matrices repacked at load",
        kostant_kernels::cpu_features(),
        super::threads(),
        model.repacked_matrices()
    );
    let after = match args.depth {
        0 => String::new(),
        d => format!(", after {d}"),
    };
    println!(
        "prefill      {:>8.1} tok/s  ({} tokens{after})",
        s.prefill_tok_s, args.prompt_tokens
    );
    println!(
        "decode       {:>8.1} tok/s  ({} tokens{after}, {:.1} GB/s of weights)",
        s.decode_tok_s, args.gen_tokens, s.gb_s
    );
    println!(
        "ttft         {:>8.1} ms     (prompt of {} tokens)",
        s.ttft_ms, args.prompt_tokens
    );
    println!(
        "memory plan  {:>8.1} MiB    (weights {:.1}, kv cache {:.1} as {} for {} tokens, scratch {:.1})",
        mb(plan.total()),
        mb(plan.weights),
        mb(plan.kv),
        args.kv.kv_type,
        session.n_ctx(),
        mb(plan.scratch)
    );
    match s.peak_rss_mb {
        Some(mb) => println!("peak rss     {mb:>8.1} MiB"),
        None => println!("peak rss     unavailable on this OS"),
    }
    if let Some(b) = s.read_gb_s {
        println!(
            "bandwidth    {:>8.2} GB/s   (read, best of 10 over 1 GiB); decode streams {:.0}% of it",
            b,
            100.0 * s.gb_s / b
        );
    }
    if let Some(g) = &s.guard {
        print_guard_cost(g);
    }
}

/// The text report's guard lines (`--guard`).
fn print_guard_cost(g: &serde_json::Value) {
    let f = |k: &str| g[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "guard ttft   {:>8.1} ms     (plain {:.1} ms, {:+.1}%; {} prompt tokens; screening {:.2} ms)",
        f("ttft_ms_guarded"),
        f("ttft_ms_plain"),
        100.0 * f("input_overhead_fraction"),
        g["prompt_tokens"],
        f("input_screen_ms")
    );
    println!(
        "guard decode {:>8.1} tok/s  (plain {:.1} tok/s, {:+.1}% time; screening {:.2} ms a reply)",
        f("decode_tok_s_guarded"),
        f("decode_tok_s_plain"),
        100.0 * f("output_overhead_fraction"),
        f("output_screen_ms")
    );
    println!(
        "guard check  {:>8.3} ms     ({:.1} checks a reply; judging every token would add {:.1}% to a decode step)",
        f("output_check_ms"),
        f("output_checks"),
        100.0 * f("per_token_check_fraction")
    );
    println!(
        "guard shown  {:>8.1} ms     (first text shown, once judged; at most {} tokens held back)",
        f("first_shown_ms_guarded"),
        g["max_held_tokens"]
    );
}

/// `--snapshot`: see `bench_snapshot`.
fn snapshot(args: &BenchArgs, model: &std::sync::Arc<kostant_engine::Model>) -> Result<()> {
    let v =
        super::bench_snapshot::measure(model, args.model.ctx, args.kv.kv_type, args.repetitions)?;
    if args.json {
        let report = json!({
            "model": model.name(),
            "quantization": model.quantization(),
            "threads": super::threads(),
            "cpu": kostant_kernels::cpu_features().to_string(),
            "snapshot": v,
        });
        println!("{report}");
        return Ok(());
    }
    println!(
        "{} ({}), {} kv cache, {} threads",
        model.name(),
        model.quantization(),
        args.kv.kv_type,
        super::threads()
    );
    println!(
        "{:>6} {:>11} {:>11} {:>8} {:>12} {:>11}",
        "tokens", "prefill ms", "restore ms", "speedup", "snapshot MB", "bytes/tok"
    );
    for r in v["depths"].as_array().into_iter().flatten() {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:>6} {:>11.1} {:>11.2} {:>7.1}x {:>12.2} {:>11.0}",
            r["depth"],
            f("prefill_ms"),
            f("restore_ms"),
            f("speedup"),
            f("snapshot_bytes") / 1e6,
            f("bytes_per_token")
        );
    }
    let a = &v["after_reply"];
    println!(
        "after a reply: {} new positions ({:.2} MB) sealed and saved in {:.1} ms",
        a["positions"],
        a["piece_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6,
        a["ms"].as_f64().unwrap_or(f64::NAN)
    );
    Ok(())
}

/// `--speculative` and `--verify-cost`: see `bench_speculative`.
fn speculative(args: &BenchArgs, model: &std::sync::Arc<kostant_engine::Model>) -> Result<()> {
    let mut report = serde_json::Map::new();
    report.insert("model".into(), json!(model.name()));
    report.insert("quantization".into(), json!(model.quantization()));
    report.insert("threads".into(), json!(super::threads()));
    report.insert(
        "cpu".into(),
        json!(kostant_kernels::cpu_features().to_string()),
    );
    if args.verify_cost {
        let v = super::bench_speculative::verify_cost(
            model,
            args.model.ctx,
            args.depth,
            args.repetitions,
        )?;
        if !args.json {
            println!(
                "verify cost after {} tokens: one step {:.2} ms",
                args.depth,
                v["step_ms"].as_f64().unwrap_or(f64::NAN)
            );
            for r in v["verify"].as_array().into_iter().flatten() {
                println!(
                    "  1 + {:>2} tokens  {:>7.2} ms  {:>5.2}x a step",
                    r["k"],
                    r["ms"].as_f64().unwrap_or(f64::NAN),
                    r["relative_to_step"].as_f64().unwrap_or(f64::NAN)
                );
            }
        }
        report.insert("verify_cost".into(), v);
    }
    if let Some(spec) = args.speculative {
        let sets = match &args.prompt_set {
            Some(p) => p.clone(),
            None => super::bench_speculative::default_sets()?,
        };
        let v = super::bench_speculative::measure(
            model,
            args.model.ctx,
            spec,
            &sets,
            args.limit,
            args.gen_tokens,
            args.dump_prompts.as_deref(),
        )?;
        if !args.json {
            println!(
                "{:<10} {:>7} {:>9} {:>9} {:>9} {:>7} {:>10} {:>9}",
                "set",
                "prompts",
                "prompt",
                "plain",
                spec.name(),
                "speedup",
                "accepted",
                "tok/pass"
            );
            for s in v["sets"].as_array().into_iter().flatten() {
                let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
                println!(
                    "{:<10} {:>7} {:>9.0} {:>9.1} {:>9.1} {:>6.2}x {:>9.1}% {:>9.2}",
                    s["set"].as_str().unwrap_or(""),
                    s["prompts"],
                    f("mean_prompt_tokens"),
                    f("plain_tok_s"),
                    f("speculative_tok_s"),
                    f("speedup"),
                    100.0 * f("acceptance"),
                    f("tokens_per_pass")
                );
            }
        }
        report.insert("speculation".into(), v);
    }
    if args.json {
        println!("{}", serde_json::Value::Object(report));
    }
    Ok(())
}
