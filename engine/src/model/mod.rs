//! A loaded model: the mapped GGUF, its hyper-parameters, where each weight lives, and its
//! tokenizer. Immutable after load and shared as `Arc<Model>`; everything that changes while
//! generating lives in a [`crate::Session`].

mod arch;
mod blocks;
mod forward;
pub mod hparams;
pub(crate) mod side_path;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub(crate) use blocks::{Pass, Workspace};
pub(crate) use forward::forward;
pub use hparams::{Arch, HParams};

use crate::chat_template::ChatTemplate;
use crate::gguf::Gguf;
use crate::grammar::GrammarVocab;
use crate::kv_cache::{KvCache, KvType};
use crate::limits::PREFILL_CHUNK;
use crate::tokenizer::Tokenizer;
use crate::{EngineError, Result};
use weights::ModelWeights;

/// A model file as [`Model::inspect`] describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// [`Model::name`].
    pub name: String,
    pub architecture: &'static str,
    /// [`Model::quantization`].
    pub quantization: &'static str,
    pub n_embd: usize,
}

/// The file's `general.name`, for reports.
fn name_of(file: &Gguf) -> String {
    file.get_str_opt("general.name")
        .ok()
        .flatten()
        .unwrap_or("unnamed model")
        .to_string()
}

/// What this engine runs, as the README lists it (one table, here; the README's copy is checked
/// against it by a test and printed by `kostant models --supported`).
pub fn supported_summary() -> String {
    let archs: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
    let vocabs: Vec<String> = crate::tokenizer::SUPPORTED_MODELS
        .iter()
        .map(|(m, name)| format!("`{m}` ({name})"))
        .collect();
    let types: Vec<&str> = kostant_kernels::GgmlType::ALL
        .iter()
        .map(|t| t.name())
        .collect();
    format!(
        "- architectures (`general.architecture`): {}\n- vocabularies (`tokenizer.ggml.model`): {}\n- tensor types: {}\n",
        archs.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "),
        vocabs.join(", "),
        types.join(", ")
    )
}

/// Bytes a model will hold in memory at a given context size; see [`Model::memory_plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Mapped weights that forward passes read (they become resident as they are touched).
    pub weights: usize,
    /// The kv cache for `n_ctx` tokens.
    pub kv: usize,
    /// How the kv cache stores keys and values.
    pub kv_type: KvType,
    /// Activations and buffers of one prefill chunk.
    pub scratch: usize,
    pub n_ctx: usize,
}

impl MemoryPlan {
    pub fn total(&self) -> usize {
        self.weights + self.kv + self.scratch
    }
}

pub struct Model {
    pub hparams: HParams,
    pub tokenizer: Tokenizer,
    pub chat_template: ChatTemplate,
    pub(crate) weights: ModelWeights,
    pub(crate) rope: blocks::Rope,
    /// The rotation of sliding-window layers, for architectures that have them.
    pub(crate) rope_swa: Option<blocks::Rope>,
    pub(crate) file: Gguf,
    /// See [`Model::fingerprint`]; computed on first use.
    fingerprint: std::sync::OnceLock<[u8; 32]>,
    /// See [`Model::grammar_vocab`]; built on first use.
    grammar_vocab: std::sync::OnceLock<Arc<GrammarVocab>>,
}

/// Bytes per token a kernel thread keeps for a matmul's input: its activations quantized, about
/// a byte per value of the widest input (n_ff or the attention width), or, for float weights,
/// the normalised input rows, 4 bytes per value of n_embd.
fn act_bytes_per_token(hp: &HParams) -> usize {
    hp.n_ff.max(hp.n_head * hp.head_dim).max(4 * hp.n_embd)
}

impl Model {
    /// Maps and validates a GGUF file. Nothing is dequantized: the weights are used in place.
    pub fn load(path: &Path) -> Result<Arc<Model>> {
        if !path.exists() {
            return Err(EngineError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "model file not found"),
            });
        }
        Self::from_gguf(Gguf::open(path)?)
    }

    pub fn from_gguf(file: Gguf) -> Result<Arc<Model>> {
        let (hparams, mut weights, tokenizer, chat_template) = Model::checked(&file)?;
        weights.repack(&file)?;
        let rope = blocks::Rope::new(&hparams, weights.rope_freqs.clone());
        let rope_swa = (hparams.n_swa > 0).then(|| blocks::Rope::sliding(&hparams));
        Ok(Arc::new(Model {
            hparams,
            tokenizer,
            chat_template,
            weights,
            rope,
            rope_swa,
            file,
            fingerprint: std::sync::OnceLock::new(),
            grammar_vocab: std::sync::OnceLock::new(),
        }))
    }

    /// Everything loading checks (hyper-parameters, every weight's presence and shape, the
    /// tokenizer, the chat template), with the weights located but not repacked.
    fn checked(file: &Gguf) -> Result<(HParams, ModelWeights, Tokenizer, ChatTemplate)> {
        if file.get_str_opt("general.type")? == Some("adapter") {
            return Err(EngineError::Model(
                "this file is a LoRA adapter, not a model: load its base model and apply the \
                 adapter to it (--adapter)"
                    .into(),
            ));
        }
        let hparams = HParams::from_gguf(file)?;
        let weights = ModelWeights::located(file, &hparams)?;
        let tokenizer = Tokenizer::from_gguf(file)?;
        if tokenizer.vocab_size() != hparams.n_vocab {
            return Err(EngineError::Model(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                hparams.n_vocab
            )));
        }
        let chat_template = ChatTemplate::from_gguf(file, &tokenizer)?;
        Ok((hparams, weights, tokenizer, chat_template))
    }

    /// What [`Model::from_gguf`] would say of `file`, without loading it: the same checks
    /// and the same errors, but no matrix is repacked or read, so describing a file costs its
    /// metadata, not a second copy of its weights (a models list beside a resident model).
    pub fn inspect(file: &Gguf) -> Result<ModelInfo> {
        let (hparams, weights, _, _) = Model::checked(file)?;
        Ok(ModelInfo {
            name: name_of(file),
            architecture: hparams.arch.name(),
            quantization: weights.quantization(),
            n_embd: hparams.n_embd,
        })
    }

    /// The vocabulary as grammars see it (each token's bytes in a prefix trie), built the first
    /// time a generation asks for a grammar and shared by every later one.
    pub fn grammar_vocab(&self) -> Arc<GrammarVocab> {
        self.grammar_vocab
            .get_or_init(|| Arc::new(GrammarVocab::new(&self.tokenizer)))
            .clone()
    }

    /// What tells this model file from another, for context snapshots: the sha256 of the file's
    /// header (metadata and tensor table) and of the first 256 bytes of every tensor's data.
    /// Hashing the whole file would read every weight (seconds on a phone, and the pages the
    /// repacking gave back); two files with the same header and the same first bytes of every
    /// tensor are not told apart.
    pub fn fingerprint(&self) -> [u8; 32] {
        *self.fingerprint.get_or_init(|| {
            use sha2::{Digest, Sha256};
            let mut h = Sha256::new();
            h.update(&self.file.bytes()[..self.file.data_offset()]);
            for t in self.file.tensors() {
                let data = self.file.tensor_data(t);
                h.update(&data[..data.len().min(256)]);
            }
            h.finalize().into()
        })
    }

    /// Human-readable name from the file's metadata, for reports.
    pub fn name(&self) -> String {
        name_of(&self.file)
    }

    /// The most common weight type among the matrices, e.g. "Q4_1": what users call the
    /// model's quantization.
    pub fn quantization(&self) -> &'static str {
        self.weights.quantization()
    }

    /// Bytes of weights one decode step reads: every matrix once, plus one embedding row.
    pub fn weight_bytes_per_token(&self) -> usize {
        let w = &self.weights;
        let layers: usize = w
            .layers
            .iter()
            .map(|l| {
                l.wq.size
                    + l.wk.size
                    + l.wv.size
                    + l.wo.size
                    + l.w_gate.size
                    + l.w_up.size
                    + l.w_down.size
            })
            .sum();
        layers + w.output.size + w.token_embd.size / w.token_embd.rows
    }

    /// What running this model with a context of `n_ctx` tokens will hold in memory: the
    /// mapped weights every forward pass touches, the kv cache (allocated whole when a session
    /// starts; a sliding-window layer's only for its window and a prefill chunk) and the
    /// scratch of one prefill chunk. The cache is the default f16 one.
    pub fn memory_plan(&self, n_ctx: usize) -> MemoryPlan {
        self.memory_plan_with_kv(n_ctx, KvType::F16)
    }

    /// [`Model::memory_plan`] with the kv cache stored as `kv_type`.
    pub fn memory_plan_with_kv(&self, n_ctx: usize, kv_type: KvType) -> MemoryPlan {
        let hp = &self.hparams;
        let w = &self.weights;
        let n_ctx = n_ctx.min(hp.n_ctx_train);
        // Tied and read in place, the lm head reads all of the embedding; otherwise (untied, or
        // the lm head repacked into its own copy) the mapped embedding is read one row per token.
        let tied = w.output.offset == w.token_embd.offset && w.output.packed.is_none();
        let embd = if tied {
            0
        } else {
            w.token_embd.size / w.token_embd.rows * n_ctx.min(w.token_embd.rows)
        };
        let weights = self.weight_bytes_per_token() - w.token_embd.size / w.token_embd.rows + embd;
        let kv = KvCache::planned_bytes(&hp.windows(), hp.kv_dim(), n_ctx, kv_type);
        // The session's planned buffers for one prefill chunk, and the activations quantized
        // for the matmuls (about a byte per value, kept by each kernel thread; float weights
        // keep their normalised input rows instead, 4 bytes per value).
        let chunk = PREFILL_CHUNK.min(n_ctx);
        let threads = rayon::current_num_threads();
        let scratch =
            Workspace::planned_bytes(hp, chunk, n_ctx, threads) + chunk * act_bytes_per_token(hp);
        MemoryPlan {
            weights,
            kv,
            kv_type,
            scratch,
            n_ctx,
        }
    }

    /// Fails with [`EngineError::MemoryBudget`] when [`Model::memory_plan`] for `n_ctx` tokens
    /// exceeds `budget_bytes`.
    pub fn check_memory_budget(&self, n_ctx: usize, budget_bytes: usize) -> Result<MemoryPlan> {
        self.check_memory_budget_with_kv(n_ctx, KvType::F16, budget_bytes)
    }

    /// [`Model::check_memory_budget`] with the kv cache stored as `kv_type`.
    pub fn check_memory_budget_with_kv(
        &self,
        n_ctx: usize,
        kv_type: KvType,
        budget_bytes: usize,
    ) -> Result<MemoryPlan> {
        let plan = self.memory_plan_with_kv(n_ctx, kv_type);
        if plan.total() > budget_bytes {
            let mb = |b: usize| b.div_ceil(1 << 20);
            return Err(EngineError::MemoryBudget {
                planned_mb: mb(plan.total()),
                weights_mb: mb(plan.weights),
                kv_mb: mb(plan.kv),
                scratch_mb: mb(plan.scratch),
                n_ctx: plan.n_ctx,
                budget_mb: budget_bytes >> 20,
            });
        }
        Ok(plan)
    }

    pub fn file_bytes(&self) -> usize {
        self.file.file_bytes()
    }

    /// How many weight matrices were repacked at load for this CPU's kernels (Q4_0, Q4_1 and Q8_0
    /// on AVX2, Q4_0 on NEON); the rest are read in place from the file.
    pub fn repacked_matrices(&self) -> usize {
        self.weights.packed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_model_bytes, TinySpec};

    fn tiny() -> Arc<Model> {
        let bytes = tiny_model_bytes(&TinySpec::default()).unwrap();
        Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap()
    }

    #[test]
    fn inspect_says_what_loading_says_without_repacking() {
        let bytes = tiny_model_bytes(&TinySpec::default()).unwrap();
        let info = Model::inspect(&Gguf::from_bytes(bytes.clone()).unwrap()).unwrap();
        let model = Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap();
        assert_eq!(
            info,
            ModelInfo {
                name: model.name(),
                architecture: model.hparams.arch.name(),
                quantization: model.quantization(),
                n_embd: model.hparams.n_embd,
            }
        );
        // A file loading refuses, inspect refuses with the same words.
        let bad = tiny_model_bytes(&TinySpec {
            arch: "mamba",
            ..TinySpec::default()
        })
        .unwrap();
        let inspected = Model::inspect(&Gguf::from_bytes(bad.clone()).unwrap()).unwrap_err();
        let loaded = Model::from_gguf(Gguf::from_bytes(bad).unwrap())
            .err()
            .unwrap();
        assert_eq!(inspected.to_string(), loaded.to_string());
    }

    #[test]
    fn the_memory_plan_counts_weights_kv_cache_and_scratch() {
        let model = tiny();
        let hp = &model.hparams;
        let plan = model.memory_plan(128);
        assert_eq!(plan.n_ctx, 128);
        assert_eq!(plan.kv, 2 * hp.n_layer * 128 * hp.kv_dim() * 2);
        // Tied embedding: the lm head reads every byte of it.
        let embd = &model.weights.token_embd;
        assert_eq!(
            plan.weights,
            model.weight_bytes_per_token() - embd.size / embd.rows
        );
        // The scratch is what a session reserves, plus the matmuls' quantized activations.
        let ws = Workspace::plan(hp, 128, 128, rayon::current_num_threads());
        assert_eq!(plan.scratch, ws.bytes() + 128 * act_bytes_per_token(hp));
        assert_eq!(plan.total(), plan.weights + plan.kv + plan.scratch);
        // The context is capped at the model's training context, as a session caps it.
        assert_eq!(model.memory_plan(1 << 20).n_ctx, hp.n_ctx_train);
    }

    #[test]
    fn the_q8_0_and_q4_0_plans_count_the_smaller_cache_and_the_budget_follows_them() {
        let model = tiny();
        let f16 = model.memory_plan(128);
        let q8 = model.memory_plan_with_kv(128, KvType::Q8_0);
        let q4 = model.memory_plan_with_kv(128, KvType::Q4_0);
        assert_eq!(
            (f16.kv_type, q8.kv_type, q4.kv_type),
            (KvType::F16, KvType::Q8_0, KvType::Q4_0)
        );
        assert_eq!(q8.kv * 64, f16.kv * 34);
        assert_eq!(q4.kv * 64, f16.kv * 18);
        assert_eq!((q8.weights, q8.scratch), (f16.weights, f16.scratch));
        assert_eq!((q4.weights, q4.scratch), (f16.weights, f16.scratch));
        // A budget the q8_0 plan fits but the f16 plan does not, and one only q4_0 fits.
        for (ty, plan, bigger) in [(KvType::Q8_0, q8, f16), (KvType::Q4_0, q4, q8)] {
            let budget = plan.total();
            assert!(model
                .check_memory_budget_with_kv(128, bigger.kv_type, budget)
                .is_err());
            assert_eq!(
                model.check_memory_budget_with_kv(128, ty, budget).unwrap(),
                plan
            );
        }
    }

    #[test]
    fn a_model_over_the_memory_budget_is_refused_with_the_numbers() {
        let model = tiny();
        let plan = model.check_memory_budget(256, 64 << 20).unwrap();
        let err = model
            .check_memory_budget(256, plan.total() - 1)
            .unwrap_err();
        assert!(matches!(err, EngineError::MemoryBudget { n_ctx: 256, .. }));
        let msg = err.to_string();
        assert!(msg.contains("memory budget"), "{msg}");
        assert!(msg.contains("kv cache"), "{msg}");
    }
}
