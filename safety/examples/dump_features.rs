//! Development aid: writes the guard features of every line of a JSONL file as raw f32 rows
//! (little-endian), for exploring head designs outside Rust. Not used by the product.
//! usage: dump_features MODEL.gguf IN.jsonl OUT.f32 TAPS(comma-separated)

use std::io::{BufRead, Write};

use kostant_safety::normalize::normalize;
use kostant_safety::reader::{FeatureSpec, Reader, Role};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let model = kostant_engine::Model::load(std::path::Path::new(&args[1]))?;
    let taps: Vec<usize> = args[4]
        .split(',')
        .map(|t| t.parse())
        .collect::<Result<_, _>>()?;
    let role = if args.get(5).map(String::as_str) == Some("output") {
        Role::Output
    } else {
        Role::Input
    };
    let spec = FeatureSpec {
        taps,
        input_preamble: "Message from the user:\n".into(),
        output_preamble: "Reply from the assistant:\n".into(),
        window: 256,
    };
    let mut reader = Reader::new(model.clone(), spec)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args[3])?);
    let t0 = std::time::Instant::now();
    let mut n = 0;
    for line in std::io::BufReader::new(std::fs::File::open(&args[2])?).lines() {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        let text = normalize(v["prompt"].as_str().unwrap_or(""));
        let mut toks = model.tokenizer.encode(&text, false)?;
        toks.truncate(256);
        if toks.is_empty() {
            toks.push(0);
        }
        reader.start(role)?;
        reader.push(&toks)?;
        for x in reader.features().unwrap_or_default() {
            out.write_all(&x.to_le_bytes())?;
        }
        n += 1;
    }
    eprintln!("{n} rows in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
