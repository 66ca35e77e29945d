//! The LoRA adapters that ship with Kostant, one per feature (assets/adapters/manifest.json,
//! compiled in), loaded for the model in use. A feature's adapter applies only on the model it
//! was trained on (the manifest's base fingerprint); on any other model the feature runs on its
//! system prompt alone, and [`FeatureAdapters::get`] says why.

use std::collections::HashMap;
use std::sync::Arc;

use kostant_assets::BuiltinAdapter;
use kostant_engine::gguf::Gguf;
use kostant_engine::{ActiveAdapter, EngineError, LoraAdapter, Model};

use crate::features::Feature;

/// Why a feature runs without an adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoAdapter {
    /// No adapter ships for the feature.
    NoneShipped,
    /// The shipped adapter was trained on another model.
    OtherModel { trained_on: String },
}

impl std::fmt::Display for NoAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAdapter::NoneShipped => write!(f, "no adapter ships for this feature"),
            NoAdapter::OtherModel { trained_on } => write!(
                f,
                "its adapter was trained on {trained_on}, not on this model, so the feature runs on its prompt alone"
            ),
        }
    }
}

/// The shipped adapters for one model, each looked up and loaded the first time its feature is
/// asked for, and the outcome kept (a few MB each; a reply or a feature switch then reads no
/// manifest and reloads nothing).
pub struct FeatureAdapters {
    model: Arc<Model>,
    decided: HashMap<Feature, Result<Arc<LoraAdapter>, NoAdapter>>,
}

impl FeatureAdapters {
    pub fn new(model: Arc<Model>) -> FeatureAdapters {
        FeatureAdapters {
            model,
            decided: HashMap::new(),
        }
    }

    /// `feature`'s adapter at its trained scale, or why there is none for this model. An
    /// embedded adapter that does not load is an error (the build is damaged), never a silent
    /// fall back to the prompt alone.
    pub fn get(
        &mut self,
        feature: Feature,
    ) -> Result<Result<ActiveAdapter, NoAdapter>, EngineError> {
        if !self.decided.contains_key(&feature) {
            let outcome = self.look_up(feature)?;
            self.decided.insert(feature, outcome);
        }
        Ok(match &self.decided[&feature] {
            Ok(adapter) => Ok(ActiveAdapter {
                adapter: adapter.clone(),
                scale: 1.0,
            }),
            Err(why) => Err(why.clone()),
        })
    }

    fn look_up(
        &self,
        feature: Feature,
    ) -> Result<Result<Arc<LoraAdapter>, NoAdapter>, EngineError> {
        let Some(shipped) = builtin(feature)? else {
            return Ok(Err(NoAdapter::NoneShipped));
        };
        if shipped.entry.base_fingerprint != fingerprint_hex(&self.model) {
            return Ok(Err(NoAdapter::OtherModel {
                trained_on: shipped.entry.base.clone(),
            }));
        }
        let file = Gguf::from_bytes(shipped.bytes.to_vec())?;
        Ok(Ok(LoraAdapter::from_gguf(file, feature.id(), &self.model)?))
    }
}

/// The adapter shipped for `feature`, if any.
pub fn builtin(feature: Feature) -> Result<Option<BuiltinAdapter>, EngineError> {
    let all = kostant_assets::builtin_adapters()
        .map_err(|e| EngineError::Adapter(format!("the built-in adapters: {e}")))?;
    Ok(all.into_iter().find(|a| a.entry.feature == feature.id()))
}

/// `Model::fingerprint` in hex, as the adapter manifest names each adapter's base: an adapter
/// applies to a model only when the two are equal.
pub fn fingerprint_hex(model: &Model) -> String {
    model
        .fingerprint()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
