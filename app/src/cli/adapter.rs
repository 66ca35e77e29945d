//! `kostant adapter`: LoRA adapters for the model. `import` converts a PEFT adapter directory
//! to the GGUF adapter format llama.cpp also reads; `info` describes GGUF adapters and checks
//! them against the model; `synth` writes a random-weight adapter of a given rank, for speed and
//! memory measurements and for comparing against llama.cpp (it answers nothing well). And
//! `--adapter FILE[:SCALE]`, which the commands that run one conversation take.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use kostant_engine::adapter::peft;
use kostant_engine::adapter::synth::{random_adapter, SynthAdapter};
use kostant_engine::gguf::GgmlType;
use kostant_engine::{ActiveAdapter, LoraAdapter, Model, Session};

use kostant_app::assistant::feature_adapters::{FeatureAdapters, NoAdapter};
use kostant_app::features::Feature;

use super::{load_model, ModelArgs};

/// A LoRA adapter over the model, for chat, complete and bench.
#[derive(Args, Debug, Clone, Default)]
pub struct AdapterArgs {
    /// Apply this GGUF LoRA adapter over the model, scaled by SCALE (default 1).
    ///
    /// The adapter is in llama.cpp's format (`kostant adapter import` converts PEFT ones); its
    /// side paths are scaled by SCALE, 1 as trained.
    #[arg(long, value_name = "FILE[:SCALE]")]
    pub adapter: Option<String>,
}

impl AdapterArgs {
    /// Loads the adapter, if one was given, for `model`.
    pub fn load(&self, model: &Model) -> Result<Option<ActiveAdapter>> {
        let Some(spec) = &self.adapter else {
            return Ok(None);
        };
        let (path, scale) = split_scale(spec)?;
        let adapter = LoraAdapter::load(&path, model)
            .with_context(|| format!("cannot use the adapter {}", path.display()))?;
        Ok(Some(ActiveAdapter { adapter, scale }))
    }

    /// Loads the adapter, if one was given, and sets it on `session`. Returns its name.
    pub fn apply(&self, session: &mut Session) -> Result<Option<String>> {
        let active = self.load(session.model())?;
        let name = active.as_ref().map(|a| a.adapter.name().to_string());
        session.set_adapter(active)?;
        Ok(name)
    }
}

/// Sets `feature`'s shipped adapter on `session` when the model is the one it was trained on,
/// and returns its name; otherwise the feature runs on its prompt alone (saying why on stderr
/// when an adapter ships for it).
pub fn apply_feature(feature: Feature, session: &mut Session) -> Result<Option<String>> {
    let mut adapters = FeatureAdapters::new(session.model().clone());
    match adapters.get(feature)? {
        Ok(active) => {
            let name = active.adapter.name().to_string();
            session.set_adapter(Some(active))?;
            Ok(Some(name))
        }
        Err(NoAdapter::NoneShipped) => Ok(None),
        Err(why) => {
            eprintln!("kostant: {}: {why}", feature.id());
            Ok(None)
        }
    }
}

/// `FILE` or `FILE:SCALE`; a colon whose tail is not a number belongs to the path.
fn split_scale(spec: &str) -> Result<(PathBuf, f32)> {
    if let Some((path, tail)) = spec.rsplit_once(':') {
        if let Ok(scale) = tail.parse::<f32>() {
            if !scale.is_finite() {
                bail!("--adapter {spec}: the scale must be a finite number");
            }
            return Ok((PathBuf::from(path), scale));
        }
    }
    Ok((PathBuf::from(spec), 1.0))
}

#[derive(Args, Debug)]
pub struct AdapterCommandArgs {
    #[command(subcommand)]
    pub command: AdapterCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdapterCommand {
    /// Convert a PEFT LoRA directory into a GGUF adapter for the model.
    ///
    /// The directory holds adapter_config.json and adapter_model.safetensors.
    Import(ImportArgs),
    /// Describe GGUF adapters and check each against the model.
    ///
    /// Each with its name, rank, alpha, targets, size and sha256.
    Info(InfoArgs),
    /// Write a GGUF adapter with random weights for the model.
    ///
    /// For measuring what an adapter costs and for comparing with llama.cpp's --lora. Its
    /// replies mean nothing.
    Synth(SynthArgs),
    /// List the feature adapters built in and whether each applies to the model.
    ///
    /// Each with its feature, rank, layers, size, sha256 and the model it was trained on.
    List(ListArgs),
    /// Score each feature with its prompt alone and with its adapter.
    ///
    /// Each feature's test split runs through the guarded pipeline; docs/adapters-report.md is
    /// its output.
    Eval(super::adapter_eval::AdapterEvalArgs),
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// One JSON object per adapter, one per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The PEFT adapter directory.
    pub peft_dir: PathBuf,
    /// Where to write the GGUF adapter.
    #[arg(long)]
    pub out: PathBuf,
    /// Its name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// The matrices' type: F16, F32, or auto.
    ///
    /// F16 is half the size of F32 and llama.cpp's converter's default; auto keeps each as the
    /// PEFT file stores it.
    #[arg(long, default_value = "F16")]
    pub r#type: String,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// GGUF adapter files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// One JSON object per file, one per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Rank of every pair.
    #[arg(long, default_value_t = 16)]
    pub rank: usize,
    /// Element type of A and B: F16 (llama.cpp's converter's default), F32 or BF16.
    #[arg(long, default_value = "F16")]
    pub r#type: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Each side path's output RMS for unit inputs, before the alpha / rank scale.
    #[arg(long, default_value_t = 0.05)]
    pub strength: f32,
    /// Also adapt the lm head (only for a model with one of its own).
    #[arg(long)]
    pub lm_head: bool,
    /// Where to write the GGUF adapter.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(args: AdapterCommandArgs) -> Result<()> {
    match args.command {
        AdapterCommand::Import(a) => import(a),
        AdapterCommand::Info(a) => info(a),
        AdapterCommand::Synth(a) => synth(a),
        AdapterCommand::List(a) => list(a),
        AdapterCommand::Eval(a) => super::adapter_eval::run(a),
    }
}

fn list(args: ListArgs) -> Result<()> {
    let model = load_model(&args.model)?;
    let mut adapters = FeatureAdapters::new(model.clone());
    for feature in Feature::ALL {
        let Some(shipped) = kostant_app::assistant::feature_adapters::builtin(feature)? else {
            continue;
        };
        let e = &shipped.entry;
        let loaded = adapters.get(feature)?;
        let applies = loaded.as_ref().err().map(ToString::to_string);
        let targets = loaded.as_ref().map_or(0, |a| a.adapter.targets().len());
        if args.json {
            let v = json!({
                "feature": e.feature,
                "name": loaded.as_ref().map_or(e.feature.as_str(), |a| a.adapter.name()),
                "rank": e.rank,
                "alpha": e.alpha,
                "layers": e.layers,
                "targets": targets,
                "bytes": e.size,
                "sha256": e.sha256,
                "base": e.base,
                "applies": applies.is_none(),
                "why_not": applies,
                "license": e.license,
            });
            println!("{v}");
        } else {
            println!(
                "{}: rank {}, alpha {}, layers {}-{}, {} KB, sha256 {}, trained on {}{}",
                e.feature,
                e.rank,
                e.alpha,
                e.layers[0],
                e.layers[1],
                e.size >> 10,
                &e.sha256[..16],
                e.base,
                applies.map_or(String::new(), |why| format!(
                    " (not for {}: {why})",
                    model.name()
                ))
            );
        }
    }
    Ok(())
}

fn import(args: ImportArgs) -> Result<()> {
    let model = load_model(&args.model)?;
    let out_type = match args.r#type.to_ascii_uppercase().as_str() {
        "F16" => Some(GgmlType::F16),
        "F32" => Some(GgmlType::F32),
        "AUTO" => None,
        other => bail!("--type {other}: use F16, F32 or auto (each tensor's own type)"),
    };
    let imported = peft::import(&args.peft_dir, &model, args.name.as_deref(), out_type)
        .with_context(|| format!("cannot import {}", args.peft_dir.display()))?;
    write_checked(&imported.writer.to_bytes()?, &args.out, &model)?;
    println!(
        "wrote {}: adapter {:?}, rank {}, alpha {}, {} matrices adapted",
        args.out.display(),
        imported.name,
        imported.rank,
        imported.alpha,
        imported.targets.len()
    );
    Ok(())
}

fn synth(args: SynthArgs) -> Result<()> {
    let model = load_model(&args.model)?;
    let ty = match args.r#type.to_ascii_uppercase().as_str() {
        "F16" => GgmlType::F16,
        "F32" => GgmlType::F32,
        "BF16" => GgmlType::BF16,
        other => bail!("--type {other}: use F16, F32 or BF16"),
    };
    let spec = SynthAdapter {
        ty,
        strength: args.strength,
        seed: args.seed,
        lm_head: args.lm_head,
        ..SynthAdapter::new(args.rank, args.seed)
    };
    let bytes = random_adapter(&model, &spec)?.to_bytes()?;
    write_checked(&bytes, &args.out, &model)?;
    println!(
        "wrote {}: random rank-{} adapter for {}, {} MB",
        args.out.display(),
        args.rank,
        model.name(),
        bytes.len() >> 20
    );
    Ok(())
}

/// Writes `bytes` to `out` through a temporary file, once they load as an adapter for `model`:
/// a failed write leaves no half file where an adapter is expected.
fn write_checked(bytes: &[u8], out: &Path, model: &Model) -> Result<()> {
    let parsed = kostant_engine::gguf::Gguf::from_bytes(bytes.to_vec())?;
    LoraAdapter::from_gguf(parsed, "check", model)
        .context("the converted adapter does not load")?;
    let tmp = out.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}

fn info(args: InfoArgs) -> Result<()> {
    let model = load_model(&args.model)?;
    let mut failed = 0;
    for file in &args.files {
        match describe(file, &model) {
            Ok(v) if args.json => println!("{v}"),
            Ok(v) => {
                println!(
                    "{}: {} (rank {}, alpha {}, {} matrices from layer {}, {} KB, sha256 {})",
                    file.display(),
                    v["name"].as_str().unwrap_or(""),
                    v["rank"],
                    v["alpha"],
                    v["targets"].as_array().map_or(0, Vec::len),
                    v["first_layer"],
                    v["bytes"].as_u64().unwrap_or(0) >> 10,
                    v["sha256"].as_str().unwrap_or("")
                );
            }
            Err(e) => {
                failed += 1;
                match args.json {
                    true => println!("{}", json!({"file": file, "error": format!("{e:#}")})),
                    false => eprintln!("{}: {e:#}", file.display()),
                }
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} adapters do not fit {}",
            args.files.len(),
            model.name()
        );
    }
    Ok(())
}

fn describe(file: &Path, model: &Arc<Model>) -> Result<serde_json::Value> {
    let a = LoraAdapter::load(file, model)?;
    let hex: String = a.fingerprint().iter().map(|b| format!("{b:02x}")).collect();
    Ok(json!({
        "file": file,
        "name": a.name(),
        "rank": a.rank(),
        "alpha": a.alpha(),
        "targets": a.targets(),
        "first_layer": a.first_layer(),
        "ignored": a.ignored(),
        "bytes": a.file_bytes(),
        "sha256": hex,
        "base": model.name(),
    }))
}
