//! `kostant models`: what is in the models directory and whether it runs here: architecture,
//! parameters, quantization mix, size, training context, sha256, licence (for files the
//! manifest knows) and, for a file that does not load, why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use kostant_assets::ModelManifest;
use kostant_engine::gguf::Gguf;
use kostant_engine::Model;

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// The directory to list (default: the first models directory that exists).
    ///
    /// The models directories are $KOSTANT_MODELS_DIR, ./models, then models/ beside the
    /// binary.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// One JSON object per model, one per line.
    #[arg(long)]
    pub json: bool,
    /// Print what this build runs (architectures, vocabularies, tensor types) instead.
    #[arg(long)]
    pub supported: bool,
}

pub fn run(args: ModelsArgs) -> Result<()> {
    if args.supported {
        print!("{}", kostant_engine::model::supported_summary());
        return Ok(());
    }
    let dir = match args.dir {
        Some(d) => d,
        None => crate::model_path::search_dirs()
            .into_iter()
            .find(|d| d.is_dir())
            .context("no models directory found: run scripts/setup.sh, or pass --dir")?,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    files.sort();
    if files.is_empty() && !args.json {
        println!("no .gguf files in {}", dir.display());
    }
    let manifest = ModelManifest::builtin()?;
    for path in files {
        let row = describe(&path, &manifest);
        if args.json {
            println!("{row}");
        } else {
            print_row(&row);
        }
    }
    Ok(())
}

/// Everything known about one file; a file that cannot be read says why in `supported`.
fn describe(path: &Path, manifest: &ModelManifest) -> serde_json::Value {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let size = std::fs::metadata(path).map(|m| m.len()).ok();
    let sha256 = kostant_assets::sha256_file(path).ok();
    let known = manifest
        .models
        .iter()
        .find(|m| Some(&m.sha256) == sha256.as_ref());
    let mut row = json!({
        "file": name,
        "path": path.display().to_string(),
        "size_bytes": size,
        "sha256": sha256,
        "license": known.map(|m| m.license.clone()),
        "manifest_id": known.map(|m| m.id.clone()),
    });
    let file = match Gguf::open(path) {
        Ok(f) => f,
        Err(e) => {
            row["supported"] = json!(false);
            row["why_not"] = json!(e.to_string());
            return row;
        }
    };
    let arch = file.get_str_opt("general.architecture").ok().flatten();
    let ctx = arch.and_then(|a| {
        file.get_u32_opt(&format!("{a}.context_length"))
            .ok()
            .flatten()
    });
    let mut mix: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut params = 0usize;
    for t in file.tensors() {
        let n: usize = t.dims.iter().product();
        params += n;
        *mix.entry(t.ty.name()).or_default() += n;
    }
    row["name"] = json!(file.get_str_opt("general.name").ok().flatten());
    row["architecture"] = json!(arch);
    row["parameters"] = json!(params);
    row["context_length"] = json!(ctx);
    // Share of the parameters stored in each type, largest first.
    let mut shares: Vec<(&str, usize)> = mix.into_iter().collect();
    shares.sort_by_key(|s| std::cmp::Reverse(s.1));
    row["quant_mix"] = json!(shares
        .iter()
        .map(|(ty, n)| json!({"type": ty, "share": (*n as f64 / params.max(1) as f64 * 1000.0).round() / 1000.0}))
        .collect::<Vec<_>>());
    match Model::from_gguf(file) {
        Ok(m) => {
            row["supported"] = json!(true);
            row["quantization"] = json!(m.quantization());
            // What adapters and saved contexts are matched against (Model::fingerprint).
            row["fingerprint"] = json!(kostant_app::assistant::feature_adapters::fingerprint_hex(
                &m
            ));
        }
        Err(e) => {
            row["supported"] = json!(false);
            row["why_not"] = json!(e.to_string());
        }
    }
    row
}

fn print_row(r: &serde_json::Value) {
    let s = |k: &str| r[k].as_str().unwrap_or("?").to_string();
    let mb = r["size_bytes"]
        .as_u64()
        .map_or("?".into(), |b| format!("{} MB", b.div_ceil(1 << 20)));
    println!("{}", s("file"));
    match r["supported"].as_bool() {
        Some(true) => {
            let params = r["parameters"].as_u64().unwrap_or(0) as f64 / 1e6;
            let mix: Vec<String> = r["quant_mix"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|m| {
                            format!(
                                "{} {:.0}%",
                                m["type"].as_str().unwrap_or("?"),
                                m["share"].as_f64().unwrap_or(0.0) * 100.0
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            println!(
                "  {} · {} · {params:.0}M parameters · {} · context {}",
                s("name"),
                s("architecture"),
                mb,
                r["context_length"]
                    .as_u64()
                    .map_or("?".into(), |c| c.to_string())
            );
            println!("  quantization {} ({})", s("quantization"), mix.join(", "));
        }
        _ => println!("  not supported: {} · {mb}", s("why_not")),
    }
    println!("  sha256 {}", s("sha256"));
    if let Some(l) = r["license"].as_str() {
        println!("  licence {l}");
    }
}
