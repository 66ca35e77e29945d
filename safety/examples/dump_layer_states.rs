//! Every token's hidden state after one layer, for each prompt of a labelled JSONL file, read as
//! the guard reads a message (the chat template, the default system prompt, the user's message,
//! the assistant's turn opened). For probes outside Rust (scripts/safety-probes/): they fine-tune
//! the layers above the tap on these states and compare with the shipped head's features.
//!
//! usage: dump_layer_states MODEL.gguf DATA.jsonl LAYER OUT
//! writes OUT.f16 (each prompt's tokens × n_embd states, little-endian IEEE half) and OUT.meta
//! (one line a prompt: id, tokens, where the message starts, label, category; tab-separated).

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

use kostant_engine::{Message, Model, Role, Session};
use kostant_safety::reader::message_start;

type Error = Box<dyn std::error::Error>;

/// Longest rendered prompt dumped; longer ones are skipped (the guard reads them in windows).
const MAX_TOKENS: usize = 600;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, data, layer, out] = args.as_slice() else {
        return Err("usage: dump_layer_states MODEL.gguf DATA.jsonl LAYER OUT".into());
    };
    let layer: usize = layer.parse()?;
    let model = Model::load(Path::new(model))?;
    let system = kostant_safety::policy::default_system_prompt();
    let mut session = Session::new(model.clone(), MAX_TOKENS)?;
    let mut meta = BufWriter::new(std::fs::File::create(format!("{out}.meta"))?);
    let mut states = BufWriter::new(std::fs::File::create(format!("{out}.f16"))?);
    let (mut written, mut skipped) = (0usize, 0usize);
    for line in std::io::BufReader::new(std::fs::File::open(data)?).lines() {
        let row: serde_json::Value = serde_json::from_str(&line?)?;
        let text = row["prompt"].as_str().ok_or("a line without a prompt")?;
        let conversation = [
            Message::new(Role::System, system.clone()),
            Message::new(Role::User, text),
        ];
        let tokens = model
            .chat_template
            .render(&model.tokenizer, &conversation, true)?
            .tokens;
        let start = message_start(&model, &tokens, text)?;
        let Some(start) = start.filter(|_| tokens.len() <= MAX_TOKENS) else {
            skipped += 1;
            continue;
        };
        session.reset();
        let mut out = kostant_engine::Outputs::new();
        session.decode(&kostant_engine::Batch::hidden(&tokens, &[layer]), &mut out)?;
        let tapped = out.take_states();
        for &x in &tapped[0] {
            states.write_all(&to_half(x).to_le_bytes())?;
        }
        let field = |k: &str| row[k].as_str().unwrap_or("").to_string();
        writeln!(
            meta,
            "{}\t{}\t{start}\t{}\t{}",
            field("id"),
            tokens.len(),
            field("label"),
            field("category")
        )?;
        written += 1;
    }
    eprintln!("{written} prompts written, {skipped} skipped (too long or dropped by the template)");
    Ok(())
}

/// f32 to IEEE half, rounding to nearest (ties away; states are finite and far from the
/// subnormal range, which flushes to zero here).
fn to_half(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mantissa = bits & 0x7f_ffff;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let rounded = ((exp as u32) << 10 | mantissa >> 13) + (mantissa >> 12 & 1);
    sign | rounded.min(0x7c00) as u16
}
