//! The Settings screen's logic: the model (name, quantization, size, sha256 checked against the
//! asset manifest off the UI thread, memory in use), generation settings, the memory budget
//! that caps the context, the history key's status, the models one can switch to, the feature
//! adapters, and licences.

use std::path::Path;
use std::sync::mpsc;

use kostant_assets::{AdapterEntry, ModelEntry, ModelManifest};
use kostant_engine::KvType;

use super::Notify;
use crate::assistant::installed_models::InstalledModel;
use crate::assistant::notices::kv_words;
use crate::assistant::responder::{GenerationSettings, ModelSummary};
use crate::features::Feature;

/// The sha256 check of the model file against the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verification {
    NotStarted,
    Checking,
    Verified {
        sha256: String,
    },
    Mismatch(String),
    /// A model passed with --model that the manifest does not list: nothing to check against.
    NotInManifest,
}

impl Verification {
    pub fn text(&self) -> String {
        match self {
            Verification::NotStarted => "not checked yet".into(),
            Verification::Checking => "checking sha256…".into(),
            Verification::Verified { sha256 } => format!("sha256 verified · {sha256}"),
            Verification::Mismatch(e) => format!("does NOT match the manifest: {e}"),
            Verification::NotInManifest => "not in the manifest (nothing to verify against)".into(),
        }
    }
}

/// A licence line: what it covers and its licence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Licence {
    pub what: String,
    pub licence: String,
}

/// A context-memory choice as Settings offers it: the cache type, what it means for the
/// replies, and the memory plan under the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvChoice {
    pub kv_type: KvType,
    /// "Exact", "Compact", "Smallest".
    pub label: &'static str,
    /// What it does to the replies, and the context it fits in the budget with its cache's
    /// size.
    pub detail: String,
    pub chosen: bool,
}

/// A shipped feature adapter as Settings lists it: the feature and a line about the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterLine {
    pub feature: String,
    pub detail: String,
}

pub struct SettingsController {
    model: Option<ModelSummary>,
    entry: Option<ModelEntry>,
    verification: Verification,
    verify_rx: Option<mpsc::Receiver<Verification>>,
    generation: GenerationSettings,
    memory_budget_mb: u32,
    history: Result<String, String>,
    /// The models directory's files (read on a thread: each is opened as the engine opens it).
    installed: Vec<InstalledModel>,
    installed_rx: Option<mpsc::Receiver<Vec<InstalledModel>>>,
}

/// Budgets offered on the Settings screen, in MiB.
pub const BUDGET_MIN_MB: u32 = 256;
pub const BUDGET_MAX_MB: u32 = 4096;

impl SettingsController {
    /// `history` is the key's description when the history opened, or why it did not.
    pub fn new(generation: GenerationSettings, history: Result<String, String>) -> Self {
        SettingsController {
            model: None,
            entry: None,
            verification: Verification::NotStarted,
            verify_rx: None,
            generation,
            memory_budget_mb: 1024,
            history,
            installed: Vec::new(),
            installed_rx: None,
        }
    }

    /// Lists the models beside `current` (else in the first models directory) on a thread;
    /// [`SettingsController::pump`] takes the list.
    pub fn list_models(&mut self, current: Option<&Path>, notify: Notify) {
        let Some(dir) = crate::assistant::installed_models::models_dir(current) else {
            return;
        };
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("kostant-models".into())
            .spawn(move || {
                // The receiver is gone only when the app is closing.
                let _ = tx.send(crate::assistant::installed_models::list(&dir));
                notify();
            });
        if spawned.is_ok() {
            self.installed_rx = Some(rx);
        }
    }

    /// The models directory's files, once listed.
    pub fn installed(&self) -> &[InstalledModel] {
        &self.installed
    }

    /// Another model is loading: until it has, there is none to show.
    pub fn model_switching(&mut self) {
        self.model = None;
        self.entry = None;
        self.verify_rx = None;
        self.verification = Verification::NotStarted;
    }

    /// The model has loaded: start checking its file against the manifest on a worker thread.
    pub fn model_loaded(&mut self, model: ModelSummary, notify: Notify) {
        let entry = manifest_entry(&model.path);
        self.entry = entry.clone();
        self.verification = match entry {
            None => Verification::NotInManifest,
            Some(entry) => {
                let (tx, rx) = mpsc::channel();
                let path = model.path.clone();
                let spawned = std::thread::Builder::new()
                    .name("kostant-verify".into())
                    .spawn(move || {
                        let v = match kostant_assets::verify_model_file(&path, &entry) {
                            Ok(()) => Verification::Verified {
                                sha256: entry.sha256.clone(),
                            },
                            Err(e) => Verification::Mismatch(e.to_string()),
                        };
                        // The receiver is gone only when the app is closing.
                        let _ = tx.send(v);
                        notify();
                    });
                match spawned {
                    Ok(_) => {
                        self.verify_rx = Some(rx);
                        Verification::Checking
                    }
                    Err(e) => Verification::Mismatch(format!("cannot start the check: {e}")),
                }
            }
        };
        self.model = Some(model);
        // A model whose heads the chosen cache type cannot hold falls back to the exact one.
        if !self.offered_kv_types().contains(&self.generation.kv_type) {
            self.generation.kv_type = KvType::F16;
        }
        self.clamp_context();
    }

    /// Takes the verification result and the models list if they have arrived. Returns
    /// whether anything changed.
    pub fn pump(&mut self) -> bool {
        let mut changed = false;
        if let Some(rx) = &self.installed_rx {
            match rx.try_recv() {
                Ok(list) => {
                    self.installed = list;
                    self.installed_rx = None;
                    changed = true;
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.installed_rx = None,
            }
        }
        changed | self.pump_verification()
    }

    fn pump_verification(&mut self) -> bool {
        let Some(rx) = &self.verify_rx else {
            return false;
        };
        match rx.try_recv() {
            Ok(v) => {
                self.verification = v;
                self.verify_rx = None;
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
            Err(mpsc::TryRecvError::Disconnected) => {
                self.verification = Verification::Mismatch("the check stopped".into());
                self.verify_rx = None;
                true
            }
        }
    }

    /// Blocks until the sha256 check has finished (tests).
    pub fn wait_verified(&mut self) -> &Verification {
        if let Some(rx) = self.verify_rx.take() {
            self.verification = rx
                .recv()
                .unwrap_or_else(|_| Verification::Mismatch("the check stopped".into()));
        }
        &self.verification
    }

    pub fn verification(&self) -> &Verification {
        &self.verification
    }

    pub fn model(&self) -> Option<&ModelSummary> {
        self.model.as_ref()
    }

    pub fn generation(&self) -> &GenerationSettings {
        &self.generation
    }

    pub fn set_temperature(&mut self, t: f32) {
        self.generation.temperature = if t.is_finite() {
            t.clamp(0.0, 2.0)
        } else {
            0.0
        };
    }

    pub fn set_max_tokens(&mut self, n: usize) {
        self.generation.max_tokens = n.clamp(16, 4096);
    }

    pub fn set_top_p(&mut self, p: f32) {
        self.generation.top_p = if p.is_finite() {
            p.clamp(0.05, 1.0)
        } else {
            1.0
        };
    }

    pub fn memory_budget_mb(&self) -> u32 {
        self.memory_budget_mb
    }

    /// Sets the memory budget; the context window becomes the largest that fits it.
    pub fn set_memory_budget_mb(&mut self, mb: u32) {
        self.memory_budget_mb = mb.clamp(BUDGET_MIN_MB, BUDGET_MAX_MB);
        self.clamp_context();
    }

    /// The largest context, in steps of 256 tokens, whose planned footprint (the engine's
    /// `memory_plan_with_kv` for the chosen cache type, as the CLI's `--memory-budget` checks
    /// it) fits the budget; at least 256.
    pub fn context_for_budget(&self) -> usize {
        match &self.model {
            None => self.generation.n_ctx,
            Some(_) => self
                .plan_for_budget(self.generation.kv_type)
                .map_or(256, |p| p.n_ctx),
        }
    }

    /// The largest planned context of `kv_type` that fits the budget.
    fn plan_for_budget(&self, kv_type: KvType) -> Option<crate::assistant::responder::ContextPlan> {
        let budget = u64::from(self.memory_budget_mb) * 1024 * 1024;
        self.model
            .as_ref()?
            .memory_plans
            .iter()
            .filter(|p| p.kv_type == kv_type && p.total <= budget)
            .max_by_key(|p| p.n_ctx)
            .copied()
    }

    /// The cache types the model's heads allow (all of them before a model has loaded).
    fn offered_kv_types(&self) -> Vec<KvType> {
        match &self.model {
            None => KvType::ALL.to_vec(),
            Some(m) => KvType::ALL
                .into_iter()
                .filter(|t| m.memory_plans.iter().any(|p| p.kv_type == *t))
                .collect(),
        }
    }

    /// Chooses how the context is stored; the context becomes the largest that fits the budget
    /// with it. A type the model cannot use is ignored (it is not offered).
    pub fn set_kv_type(&mut self, kv_type: KvType) {
        if self.offered_kv_types().contains(&kv_type) {
            self.generation.kv_type = kv_type;
            self.clamp_context();
        }
    }

    /// The context-memory choices for this model, with the memory plan of each under the
    /// budget.
    pub fn kv_choices(&self) -> Vec<KvChoice> {
        self.offered_kv_types()
            .into_iter()
            .map(|kv_type| {
                let (label, words) = kv_words(kv_type);
                let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
                let fits = match self.plan_for_budget(kv_type) {
                    Some(p) if p.guard > 0 => format!(
                        "{} tokens fit the budget, using {:.1} MiB for the context and {:.1} MiB for the safety guard",
                        p.n_ctx,
                        mib(p.kv),
                        mib(p.guard)
                    ),
                    Some(p) => format!(
                        "{} tokens fit the budget, using {:.1} MiB for the context",
                        p.n_ctx,
                        mib(p.kv)
                    ),
                    None if self.model.is_some() => {
                        "not even 256 tokens fit the budget".to_string()
                    }
                    None => String::new(),
                };
                let detail = match fits.is_empty() {
                    true => format!("{kv_type} · {words}"),
                    false => format!("{kv_type} · {words} · {fits}"),
                };
                KvChoice {
                    kv_type,
                    label,
                    detail,
                    chosen: kv_type == self.generation.kv_type,
                }
            })
            .collect()
    }

    fn clamp_context(&mut self) {
        self.generation.n_ctx = self.context_for_budget();
    }

    /// Resident memory of this process now, "123.4 MiB".
    pub fn memory_in_use(&self) -> String {
        match kostant_platform::memory::current_rss_bytes() {
            Some(b) => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
            None => "unknown on this OS".into(),
        }
    }

    pub fn history_status(&self) -> String {
        match &self.history {
            Ok(key) => format!("on, encrypted (ChaCha20-Poly1305) · {key}"),
            Err(e) => format!("off: {e}"),
        }
    }

    /// One line per shipped feature adapter: what it is, and whether the chips use it with the
    /// model in use (an adapter applies only to the model it was trained on).
    pub fn adapters(&self) -> Vec<AdapterLine> {
        match kostant_assets::builtin_adapters() {
            Ok(all) => all
                .iter()
                .map(|a| adapter_line(&a.entry, self.model.as_ref()))
                .collect(),
            Err(e) => vec![AdapterLine {
                feature: "Adapters".into(),
                detail: format!("could not be read from this build: {e}"),
            }],
        }
    }

    /// The model's licence (from the manifest), the datasets', the UI toolkit's.
    pub fn licences(&self) -> Vec<Licence> {
        let mut out = Vec::new();
        match (&self.entry, &self.model) {
            (Some(e), _) => out.push(Licence {
                what: format!("Model: {}", e.upstream),
                licence: e.license.clone(),
            }),
            (None, Some(m)) => out.push(Licence {
                what: format!("Model: {} (not in the manifest)", m.name),
                licence: "unknown: see the model's own card".into(),
            }),
            (None, None) => {}
        }
        out.push(Licence {
            what: "Safety eval datasets".into(),
            licence: "CC-BY-4.0, MIT and Apache-2.0 by source (assets/evals/MANIFEST.md)".into(),
        });
        out.push(Licence {
            what: "UI toolkit: Slint".into(),
            licence: "Slint Royalty-free 2.0 (attribution below)".into(),
        });
        out
    }
}

/// `entry` as Settings shows it, with `model` (None before the model has loaded).
fn adapter_line(entry: &AdapterEntry, model: Option<&ModelSummary>) -> AdapterLine {
    let feature = Feature::parse(&entry.feature)
        .map(|f| f.label().to_string())
        .unwrap_or_else(|_| entry.feature.clone());
    let about = format!(
        "rank {} · layers {}–{} · {:.1} MB · sha256 {}…",
        entry.rank,
        entry.layers[0],
        entry.layers[1],
        entry.size as f64 / 1e6,
        entry.sha256.get(..12).unwrap_or(&entry.sha256)
    );
    let status = match model {
        None => String::new(),
        Some(m) if m.fingerprint == entry.base_fingerprint => " · in use with this model".into(),
        Some(_) => format!(
            " · not used: trained on {}, so the feature runs on its prompt alone",
            entry.base
        ),
    };
    AdapterLine {
        feature,
        detail: format!("{about}{status}"),
    }
}

/// The manifest entry for a model file, matched by file name.
fn manifest_entry(path: &Path) -> Option<ModelEntry> {
    let manifest = ModelManifest::builtin().ok()?;
    let name = path.file_name()?.to_str()?;
    manifest.models.into_iter().find(|m| m.file == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assistant::responder::ContextPlan;

    fn summary() -> ModelSummary {
        const MIB: u64 = 1024 * 1024;
        ModelSummary {
            name: "m".into(),
            quantization: "Q4_1".into(),
            path: "/nonexistent/custom.gguf".into(),
            file_bytes: 100 * MIB,
            // 100 MiB plus 1 MiB per token (f16), 1/2 (q8_0), 1/4 (q4_0) keeps the arithmetic
            // readable.
            memory_plans: [(KvType::F16, 4), (KvType::Q8_0, 2), (KvType::Q4_0, 1)]
                .into_iter()
                .flat_map(|(kv_type, quarters)| {
                    (1..=32).map(move |i| {
                        let kv = 256 * i as u64 * quarters * MIB / 4;
                        ContextPlan {
                            kv_type,
                            n_ctx: 256 * i,
                            total: 100 * MIB + kv,
                            kv,
                            guard: 0,
                        }
                    })
                })
                .collect(),
            n_ctx_train: 8192,
            fingerprint: "not-a-shipped-base".into(),
        }
    }

    #[test]
    fn every_shipped_adapter_is_listed_with_whether_it_applies() {
        let shipped = kostant_assets::builtin_adapters().unwrap();
        assert_eq!(shipped.len(), 5);
        let mut s = SettingsController::new(GenerationSettings::default(), Ok("k".into()));
        let before = s.adapters();
        assert_eq!(before.len(), 5, "{before:?}");
        assert!(before
            .iter()
            .all(|l| l.detail.starts_with("rank 16 · layers 21–29")));
        for feature in ["Proofread", "Chat"] {
            assert!(before.iter().any(|l| l.feature == feature), "{before:?}");
        }
        // Another model: every adapter says it is not used, and why.
        s.model_loaded(summary(), super::super::no_notify());
        for l in s.adapters() {
            assert!(l.detail.contains("not used: trained on"), "{l:?}");
        }
        // The model the adapters were trained on: in use.
        let mut base = summary();
        base.fingerprint = shipped[0].entry.base_fingerprint.clone();
        s.model_loaded(base, super::super::no_notify());
        for l in s.adapters() {
            assert!(l.detail.ends_with("in use with this model"), "{l:?}");
        }
    }

    #[test]
    fn the_memory_budget_caps_the_context() {
        let mut s = SettingsController::new(GenerationSettings::default(), Ok("k".into()));
        s.model_loaded(summary(), super::super::no_notify());
        assert_eq!(s.verification(), &Verification::NotInManifest);
        s.set_memory_budget_mb(1124); // 1024 MiB left for the tokens.
        assert_eq!(s.generation().n_ctx, 1024);
        s.set_memory_budget_mb(100_000); // clamped to the largest budget, then the training ctx
        assert_eq!(s.memory_budget_mb(), BUDGET_MAX_MB);
        assert_eq!(s.generation().n_ctx, 3840);
        s.set_memory_budget_mb(0);
        assert_eq!(s.generation().n_ctx, 256);
    }

    #[test]
    fn a_smaller_cache_fits_a_longer_context_in_the_same_budget() {
        let mut s = SettingsController::new(GenerationSettings::default(), Ok("k".into()));
        s.model_loaded(summary(), super::super::no_notify());
        s.set_memory_budget_mb(1124);
        let choices = s.kv_choices();
        let labels: Vec<_> = choices.iter().map(|c| (c.label, c.chosen)).collect();
        assert_eq!(
            labels,
            [("Exact", true), ("Compact", false), ("Smallest", false)]
        );
        assert!(
            choices[0]
                .detail
                .ends_with("1024 tokens fit the budget, using 1024.0 MiB for the context"),
            "{choices:?}"
        );
        assert!(choices[1].detail.contains("2048 tokens fit"), "{choices:?}");
        assert!(choices[2].detail.contains("4096 tokens fit"), "{choices:?}");
        s.set_kv_type(KvType::Q4_0);
        assert_eq!(s.generation().kv_type, KvType::Q4_0);
        assert_eq!(s.generation().n_ctx, 4096);
        assert!(s.kv_choices()[2].chosen);
        s.set_kv_type(KvType::Q8_0);
        assert_eq!(s.generation().n_ctx, 2048);

        // A model whose heads only the f16 cache holds: the chosen q8_0 falls back, and the
        // others are neither offered nor taken.
        let mut narrow = summary();
        narrow.memory_plans.retain(|p| p.kv_type == KvType::F16);
        s.model_loaded(narrow, super::super::no_notify());
        assert_eq!(s.generation().kv_type, KvType::F16);
        assert_eq!(s.generation().n_ctx, 1024);
        s.set_kv_type(KvType::Q4_0);
        assert_eq!(s.generation().kv_type, KvType::F16);
        assert_eq!(s.kv_choices().len(), 1);
    }

    #[test]
    fn the_safety_guards_share_comes_out_of_the_budget_and_is_named() {
        const MIB: u64 = 1024 * 1024;
        // A chat model the guard does not read: its own model and session take 124 MiB.
        let mut guarded = summary();
        for p in &mut guarded.memory_plans {
            p.guard = 124 * MIB;
            p.total += p.guard;
        }
        let mut s = SettingsController::new(GenerationSettings::default(), Ok("k".into()));
        s.model_loaded(guarded, super::super::no_notify());
        s.set_memory_budget_mb(1124 + 124);
        assert_eq!(s.generation().n_ctx, 1024);
        let exact = &s.kv_choices()[0].detail;
        assert!(
            exact.ends_with(
                "1024 tokens fit the budget, using 1024.0 MiB for the context and 124.0 MiB for the safety guard"
            ),
            "{exact}"
        );
        for jargon in ["kv", "session", "weights", "head"] {
            assert!(!exact.contains(jargon), "{jargon}: {exact}");
        }
    }

    #[test]
    fn settings_are_clamped_and_licences_listed() {
        let mut s = SettingsController::new(GenerationSettings::default(), Err("no key".into()));
        s.set_temperature(f32::NAN);
        assert_eq!(s.generation().temperature, 0.0);
        s.set_temperature(9.0);
        assert_eq!(s.generation().temperature, 2.0);
        s.set_max_tokens(1);
        assert_eq!(s.generation().max_tokens, 16);
        assert!(s.history_status().starts_with("off: no key"));
        s.model_loaded(summary(), super::super::no_notify());
        let l = s.licences();
        assert!(l[0].what.contains("not in the manifest"), "{l:?}");
        assert!(l.iter().any(|l| l.what.contains("Slint")));
    }
}
