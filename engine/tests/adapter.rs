//! LoRA adapters on tiny random models: the side path computes what merged weights would
//! (`W + scale * alpha / r * B A`), per architecture; a session switches adapters without
//! reusing rows computed under another; snapshots name their adapter; hostile adapter files
//! and PEFT directories are refused with a reason a person can act on.

use std::sync::Arc;

use kostant_engine::adapter::peft::import;
use kostant_engine::adapter::synth::{random_adapter, SynthAdapter};
use kostant_engine::gguf::{GgmlType, Gguf, GgufWriter, Value};
use kostant_engine::testing::{prefill, tiny_model_bytes, TinySpec};
use kostant_engine::{ActiveAdapter, EngineError, LoraAdapter, Model, Session};

fn tiny(spec: &TinySpec) -> (Arc<Model>, Vec<u8>) {
    let bytes = tiny_model_bytes(spec).unwrap();
    let model = Model::from_gguf(Gguf::from_bytes(bytes.clone()).unwrap()).unwrap();
    (model, bytes)
}

fn f32_spec(arch: &'static str) -> TinySpec {
    TinySpec {
        arch,
        matrix_type: GgmlType::F32,
        embd_type: GgmlType::F32,
        head_dim: (arch != "llama").then_some(32),
        qkv_bias: arch == "qwen2",
        sliding_window: if arch == "gemma3" { 4 } else { 0 },
        ..TinySpec::default()
    }
}

fn load(bytes: Vec<u8>, model: &Model) -> kostant_engine::Result<Arc<LoraAdapter>> {
    LoraAdapter::from_gguf(Gguf::from_bytes(bytes)?, "test", model)
}

fn active(adapter: &Arc<LoraAdapter>, scale: f32) -> Option<ActiveAdapter> {
    Some(ActiveAdapter {
        adapter: adapter.clone(),
        scale,
    })
}

fn logits(model: &Arc<Model>, adapter: Option<ActiveAdapter>, prompt: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 64).unwrap();
    s.set_adapter(adapter).unwrap();
    prefill(&mut s, prompt).unwrap().0
}

fn f32s(bytes: &[u8], ty: GgmlType) -> Vec<f32> {
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => panic!("test adapters are F32 or F16"),
    }
}

/// The base file with every adapted matrix replaced by `W + scale * alpha / r * B A`, in f32
/// (the base matrices are F32).
fn merged(base: &[u8], adapter: &[u8], scale: f32) -> Vec<u8> {
    let (b, a) = (
        Gguf::from_bytes(base.to_vec()).unwrap(),
        Gguf::from_bytes(adapter.to_vec()).unwrap(),
    );
    let alpha = a.get_f32_opt("adapter.lora.alpha").unwrap().unwrap_or(0.0);
    let mut w = GgufWriter::new();
    for (k, v) in b.metadata() {
        w.metadata(k, v.clone());
    }
    for t in b.tensors() {
        let mut data = b.tensor_data(t).to_vec();
        if let (Some(la), Some(lb)) = (
            a.tensor(&format!("{}.lora_a", t.name)),
            a.tensor(&format!("{}.lora_b", t.name)),
        ) {
            assert_eq!(t.ty, GgmlType::F32);
            let (rows, cols, r) = (t.rows(), t.cols(), la.rows());
            let (av, bv) = (
                f32s(a.tensor_data(la), la.ty),
                f32s(a.tensor_data(lb), lb.ty),
            );
            let s = if alpha != 0.0 {
                scale * alpha / r as f32
            } else {
                scale
            };
            let mut wv = f32s(&data, GgmlType::F32);
            for i in 0..rows {
                for j in 0..cols {
                    let d: f32 = (0..r).map(|k| bv[i * r + k] * av[k * cols + j]).sum();
                    wv[i * cols + j] += s * d;
                }
            }
            data = wv.iter().flat_map(|v| v.to_le_bytes()).collect();
        }
        w.tensor(&t.name, &t.dims, t.ty, data);
    }
    w.to_bytes().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn side_paths_compute_what_merged_weights_would_in_every_architecture() {
    let prompt: Vec<u32> = (0..12).map(|i| 3 + (i * 37) % 250).collect();
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        let (model, base_bytes) = tiny(&f32_spec(arch));
        for (ty, scale) in [(GgmlType::F32, 1.0), (GgmlType::F16, 0.5)] {
            let spec = SynthAdapter {
                ty,
                strength: 0.5,
                ..SynthAdapter::new(8, 3)
            };
            let file = random_adapter(&model, &spec).unwrap().to_bytes().unwrap();
            let adapter = load(file.clone(), &model).unwrap();
            let with = logits(&model, active(&adapter, scale), &prompt);
            let base = logits(&model, None, &prompt);
            let merged_model =
                Model::from_gguf(Gguf::from_bytes(merged(&base_bytes, &file, scale)).unwrap())
                    .unwrap();
            let reference = logits(&merged_model, None, &prompt);
            let moved = max_diff(&with, &base);
            let off = max_diff(&with, &reference);
            assert!(
                moved > 0.05,
                "{arch} {ty:?}: the adapter moved the logits by only {moved}"
            );
            assert!(off < 2e-3 * moved.max(1.0), "{arch} {ty:?}: {off} from the merged model's logits (the adapter moved them {moved})");
        }
    }
}

#[test]
fn a_zero_scale_gives_the_base_models_bits() {
    let (model, _) = tiny(&TinySpec::default());
    let adapter = load(
        random_adapter(&model, &SynthAdapter::new(4, 9))
            .unwrap()
            .to_bytes()
            .unwrap(),
        &model,
    )
    .unwrap();
    let prompt = [5, 9, 40, 41, 200];
    assert_eq!(
        logits(&model, active(&adapter, 0.0), &prompt),
        logits(&model, None, &prompt)
    );
    assert_ne!(
        logits(&model, active(&adapter, 1.0), &prompt),
        logits(&model, None, &prompt)
    );
}

#[test]
fn switching_adapters_never_reuses_rows_computed_under_another() {
    let (model, _) = tiny(&TinySpec::default());
    let mk = |seed| {
        load(
            random_adapter(
                &model,
                &SynthAdapter {
                    strength: 0.5,
                    ..SynthAdapter::new(4, seed)
                },
            )
            .unwrap()
            .to_bytes()
            .unwrap(),
            &model,
        )
        .unwrap()
    };
    let (x, y) = (mk(1), mk(2));
    let first = [5u32, 9, 40, 41, 200, 7];
    let second = [5u32, 9, 40, 41, 200, 7, 8, 9];
    let mut s = Session::new(model.clone(), 64).unwrap();
    // The same turns alternating between adapters give what fresh sessions give.
    for (adapter, prompt) in [
        (&x, &first[..]),
        (&y, &second[..]),
        (&x, &second[..]),
        (&x, &first[..]),
    ] {
        s.set_adapter(active(adapter, 1.0)).unwrap();
        let (got, _) = prefill(&mut s, prompt).unwrap();
        assert_eq!(got, logits(&model, active(adapter, 1.0), prompt));
    }
    // Setting the same adapter and scale keeps the cache; another scale or none does not.
    assert_eq!(s.tokens(), &first);
    s.set_adapter(active(&x, 1.0)).unwrap();
    assert_eq!(s.tokens(), &first);
    s.set_adapter(active(&x, 0.5)).unwrap();
    assert!(s.tokens().is_empty());
    prefill(&mut s, &first).unwrap();
    s.set_adapter(None).unwrap();
    assert!(s.tokens().is_empty());
}

#[test]
fn an_adapter_loaded_for_another_model_is_refused() {
    let (a, _) = tiny(&TinySpec::default());
    let (b, _) = tiny(&TinySpec {
        seed: 2,
        ..TinySpec::default()
    });
    let adapter = load(
        random_adapter(&a, &SynthAdapter::new(4, 1))
            .unwrap()
            .to_bytes()
            .unwrap(),
        &a,
    )
    .unwrap();
    let mut s = Session::new(b.clone(), 32).unwrap();
    prefill(&mut s, &[5, 6, 7]).unwrap();
    let err = s
        .set_adapter(active(&adapter, 1.0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("another model"), "{err}");
    assert_eq!(s.tokens(), &[5, 6, 7], "a refused adapter changes nothing");
    assert!(s.adapter().is_none());
    // On its own model, a scale that is not a number is refused.
    let mut own = Session::new(a.clone(), 32).unwrap();
    let err = own
        .set_adapter(Some(ActiveAdapter {
            adapter: adapter.clone(),
            scale: f32::NAN,
        }))
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::Adapter(_) | EngineError::InvalidRequest(_)
    ));
}

#[test]
fn snapshots_name_their_adapter_and_restore_only_under_it() {
    let (model, _) = tiny(&TinySpec::default());
    let adapter = load(
        random_adapter(&model, &SynthAdapter::new(4, 1))
            .unwrap()
            .to_bytes()
            .unwrap(),
        &model,
    )
    .unwrap();
    let mut s = Session::new(model.clone(), 64).unwrap();
    s.set_adapter(active(&adapter, 1.0)).unwrap();
    prefill(&mut s, &[5, 6, 7, 8]).unwrap();
    let header = s.snapshot_header();
    assert!(
        header.adapter.as_deref().unwrap().starts_with("synth-r4@"),
        "{:?}",
        header.adapter
    );
    let (h, piece) = (header.to_bytes(), s.snapshot_piece(0).unwrap());
    let mut plain = Session::new(model.clone(), 64).unwrap();
    let err = plain.restore(&h, &[&piece]).unwrap_err().to_string();
    assert!(err.contains("adapter"), "{err}");
    let mut same = Session::new(model.clone(), 64).unwrap();
    same.set_adapter(active(&adapter, 1.0)).unwrap();
    assert_eq!(same.restore(&h, &[&piece]).unwrap(), 4);
}

#[test]
fn a_model_loader_refuses_an_adapter_file_and_says_what_it_is() {
    let (model, _) = tiny(&TinySpec::default());
    let bytes = random_adapter(&model, &SynthAdapter::new(4, 1))
        .unwrap()
        .to_bytes()
        .unwrap();
    let err = Model::from_gguf(Gguf::from_bytes(bytes).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("LoRA adapter, not a model"), "{err}");
}

type Meta = Vec<(String, Value)>;
type Tensors = Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>;
/// One hostile edit of an adapter's tensors (a named function, so a table of them reads simply).
type TensorEdit = fn(&mut Tensors);

/// A valid adapter's writer with `edit` applied to its metadata and tensors.
fn edited(model: &Model, edit: impl Fn(&mut Meta, &mut Tensors)) -> Vec<u8> {
    let g = Gguf::from_bytes(
        random_adapter(model, &SynthAdapter::new(4, 1))
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap();
    let mut meta: Meta = g
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut tensors: Tensors = g
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.dims.clone(),
                t.ty,
                g.tensor_data(t).to_vec(),
            )
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.metadata(&k, v);
    }
    for (n, d, ty, data) in tensors {
        w.tensor(&n, &d, ty, data);
    }
    w.to_bytes().unwrap()
}

fn tensor<'t>(t: &'t mut Tensors, name: &str) -> &'t mut (String, Vec<usize>, GgmlType, Vec<u8>) {
    t.iter_mut().find(|x| x.0 == name).unwrap()
}

fn rename_all(t: &mut Tensors, from: &str, to: &str) {
    for x in t.iter_mut() {
        x.0 = x.0.replace(from, to);
    }
}

/// A rank-4 A for q paired with the k pair's B: shapes disagree.
fn q_with_k_b(t: &mut Tensors) {
    let kb = tensor(t, "blk.0.attn_k.weight.lora_b").clone();
    let qb = tensor(t, "blk.0.attn_q.weight.lora_b");
    (qb.1, qb.3) = (kb.1, kb.3);
}

/// An A of type Q8_0 (sized as Q8_0, so the file itself is well formed).
fn q8_0_a(t: &mut Tensors) {
    let a = tensor(t, "blk.0.attn_q.weight.lora_a");
    let cols = a.1[0];
    a.2 = GgmlType::Q8_0;
    a.3 = vec![0u8; cols / 32 * 34 * a.1[1]];
}

#[test]
fn hostile_or_foreign_adapter_files_are_refused_with_the_reason() {
    let (model, _) = tiny(&TinySpec::default());
    let refused = |want: &str, bytes: Vec<u8>| {
        let err = load(bytes, &model).unwrap_err();
        assert!(matches!(err, EngineError::Adapter(_)), "{want}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains(want), "wanted {want:?} in: {msg}");
    };
    let metadata: [(&str, &str, Value); 4] = [
        (
            "not an adapter",
            "general.type",
            Value::String("model".into()),
        ),
        ("only \"lora\"", "adapter.type", Value::String("ia3".into())),
        (
            "architecture \"qwen3\"",
            "general.architecture",
            Value::String("qwen3".into()),
        ),
        ("alpha is NaN", "adapter.lora.alpha", Value::F32(f32::NAN)),
    ];
    for (want, key, value) in metadata {
        refused(
            want,
            edited(&model, |m, _| {
                m.retain(|(k, _)| k != key);
                m.push((key.to_string(), value.clone()));
            }),
        );
    }
    let tensors: [(&str, TensorEdit); 8] = [
        ("must both be present", |t| {
            t.retain(|x| x.0 != "blk.1.ffn_up.weight.lora_b")
        }),
        ("not a LoRA tensor", |t| {
            t[0].0 = "blk.0.attn_q.weight.lora_c".into()
        }),
        ("not a matrix of the model", |t| {
            rename_all(t, "blk.1.", "blk.7.")
        }),
        ("token embedding", |t| {
            rename_all(t, "blk.0.attn_q.weight", "token_embd.weight")
        }),
        ("do not fit", q_with_k_b),
        ("type Q8_0", q8_0_a),
        ("holds NaN", |t| {
            tensor(t, "blk.1.attn_v.weight.lora_b").3[6..8]
                .copy_from_slice(&half::f16::NAN.to_le_bytes())
        }),
        ("holds no LoRA tensors", |t| t.clear()),
    ];
    for (want, edit) in tensors {
        refused(want, edited(&model, |_, t| edit(t)));
    }
    // Every cut of a valid file is refused without a panic.
    let good = random_adapter(&model, &SynthAdapter::new(2, 1))
        .unwrap()
        .to_bytes()
        .unwrap();
    for cut in (0..good.len()).step_by(97) {
        assert!(Gguf::from_bytes(good[..cut].to_vec())
            .and_then(|g| LoraAdapter::from_gguf(g, "cut", &model))
            .is_err());
    }
}

/// A PEFT directory with `config` and the named f32 tensors.
fn peft_dir(config: &str, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> tempdir::Dir {
    let dir = tempdir::Dir::new();
    std::fs::write(dir.path().join("adapter_config.json"), config).unwrap();
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, shape, _), b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("adapter_model.safetensors"))
        .unwrap();
    dir
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "kostant-peft-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

const CONFIG: &str = r#"{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "bias": "none", "fan_in_fan_out": false,
  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "task_type": "CAUSAL_LM"}"#;

/// Random PEFT tensors (A: (r, in), B: (out, r)) for every projection of `model`.
fn peft_tensors(model: &Model, r: usize) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let hp = &model.hparams;
    let (e, ff, q, kv) = (
        hp.n_embd,
        hp.n_ff,
        hp.n_head * hp.head_dim,
        hp.n_head_kv * hp.head_dim,
    );
    let mods = [
        ("self_attn.q_proj", q, e),
        ("self_attn.k_proj", kv, e),
        ("self_attn.v_proj", kv, e),
        ("self_attn.o_proj", e, q),
        ("mlp.gate_proj", ff, e),
        ("mlp.up_proj", ff, e),
        ("mlp.down_proj", e, ff),
    ];
    let mut seed = 1u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let mut out = Vec::new();
    for l in 0..hp.n_layer {
        for (m, rows, cols) in mods {
            let p = format!("base_model.model.model.layers.{l}.{m}");
            out.push((
                format!("{p}.lora_A.weight"),
                vec![r, cols],
                (0..r * cols).map(|_| next()).collect(),
            ));
            out.push((
                format!("{p}.lora_B.weight"),
                vec![rows, r],
                (0..rows * r).map(|_| next()).collect(),
            ));
        }
    }
    out
}

#[test]
fn a_peft_adapter_imports_to_the_same_side_paths() {
    let (model, _) = tiny(&TinySpec::default());
    let tensors = peft_tensors(&model, 4);
    let dir = peft_dir(CONFIG, &tensors);
    let imported = import(dir.path(), &model, Some("proofread"), None).unwrap();
    assert_eq!(
        (imported.rank, imported.alpha, imported.name.as_str()),
        (4, 8.0, "proofread")
    );
    assert_eq!(imported.targets.len(), 14);
    let g = Gguf::from_bytes(imported.writer.to_bytes().unwrap()).unwrap();
    // A keeps PEFT's bytes; a llama q's B has the converter's rows: HF row j * half + i of a
    // head becomes row 2 * i + j (head width 16 here, so HF row 1 is GGUF row 2).
    let a = g.tensor("blk.1.ffn_down.weight.lora_a").unwrap();
    assert_eq!(a.dims, vec![128, 4]);
    let want: Vec<u8> = tensors
        .iter()
        .find(|t| t.0.ends_with("layers.1.mlp.down_proj.lora_A.weight"))
        .unwrap()
        .2
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(g.tensor_data(a), &want[..]);
    let qb = g.tensor("blk.0.attn_q.weight.lora_b").unwrap();
    let hf = &tensors
        .iter()
        .find(|t| t.0.ends_with("layers.0.self_attn.q_proj.lora_B.weight"))
        .unwrap()
        .2;
    let gguf = f32s(g.tensor_data(qb), GgmlType::F32);
    let row = |v: &[f32], i: usize| v[i * 4..(i + 1) * 4].to_vec();
    assert_eq!(row(&gguf, 0), row(hf, 0));
    assert_eq!(row(&gguf, 2), row(hf, 1));
    assert_eq!(row(&gguf, 1), row(hf, 8));
    assert_eq!(row(&gguf, 16 + 3), row(hf, 16 + 9));
    let v_b = g.tensor("blk.0.attn_v.weight.lora_b").unwrap();
    let hf_v = &tensors
        .iter()
        .find(|t| t.0.ends_with("layers.0.self_attn.v_proj.lora_B.weight"))
        .unwrap()
        .2;
    assert_eq!(
        f32s(g.tensor_data(v_b), GgmlType::F32),
        *hf_v,
        "v is not permuted"
    );
    let adapter = LoraAdapter::from_gguf(g, "x", &model).unwrap();
    assert_eq!(
        (adapter.name(), adapter.rank(), adapter.alpha()),
        ("proofread", 4, 8.0)
    );
}

#[test]
fn an_import_as_f16_rounds_every_value_and_refuses_what_f16_cannot_hold() {
    let (model, _) = tiny(&TinySpec::default());
    let tensors = peft_tensors(&model, 4);
    let imported = import(
        peft_dir(CONFIG, &tensors).path(),
        &model,
        None,
        Some(GgmlType::F16),
    )
    .unwrap();
    let g = Gguf::from_bytes(imported.writer.to_bytes().unwrap()).unwrap();
    let a = g.tensor("blk.1.ffn_down.weight.lora_a").unwrap();
    assert_eq!(a.ty, GgmlType::F16);
    let peft_a = &tensors
        .iter()
        .find(|t| t.0.ends_with("layers.1.mlp.down_proj.lora_A.weight"))
        .unwrap()
        .2;
    let rounded: Vec<f32> = peft_a
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32())
        .collect();
    assert_eq!(f32s(g.tensor_data(a), GgmlType::F16), rounded);
    assert_ne!(rounded, *peft_a, "the test values must need rounding");
    // Half the bytes of the F32 import, and it loads as an adapter.
    let f32_bytes = import(peft_dir(CONFIG, &tensors).path(), &model, None, None)
        .unwrap()
        .writer
        .to_bytes()
        .unwrap()
        .len();
    let f16_bytes = imported.writer.to_bytes().unwrap().len();
    assert!(f16_bytes * 10 < f32_bytes * 6, "{f16_bytes} vs {f32_bytes}");
    LoraAdapter::from_gguf(g, "x", &model).unwrap();
    let mut huge = tensors.clone();
    huge[2].2[7] = 1e6;
    let err = import(
        peft_dir(CONFIG, &huge).path(),
        &model,
        None,
        Some(GgmlType::F16),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("element 7 is 1000000") && err.contains("F32"),
        "{err}"
    );
    let err = import(
        peft_dir(CONFIG, &tensors).path(),
        &model,
        None,
        Some(GgmlType::Q8_0),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("F32 or F16"), "{err}");
}

#[test]
fn bad_peft_directories_are_refused_with_the_reason() {
    let (model, _) = tiny(&TinySpec::default());
    let good = peft_tensors(&model, 4);
    // The reason a PEFT directory of `config` and `tensors` is refused.
    let refusal = |config: &str, tensors: &[(String, Vec<usize>, Vec<f32>)]| {
        import(peft_dir(config, tensors).path(), &model, None, None)
            .err()
            .unwrap()
            .to_string()
    };
    let with_config = |c: &str| refusal(c, &good);
    assert!(with_config(&CONFIG.replace("\"r\": 4", "\"r\": 8")).contains("expected [8,"));
    assert!(
        with_config(&CONFIG.replace("\"lora_alpha\": 8,", "")).contains("lora_alpha is missing")
    );
    assert!(with_config(&CONFIG.replace("\"LORA\"", "\"IA3\"")).contains("only LORA"));
    assert!(
        with_config(&CONFIG.replace("\"bias\": \"none\"", "\"use_dora\": true")).contains("DoRA")
    );
    assert!(with_config("{not json").contains("adapter_config.json"));
    let mut missing = good.clone();
    missing.retain(|t| !t.0.ends_with("layers.1.mlp.up_proj.lora_B.weight"));
    assert!(refusal(CONFIG, &missing).contains("must both be present"));
    let mut nan = good.clone();
    nan[3].2[5] = f32::INFINITY;
    assert!(refusal(CONFIG, &nan).contains("element 5 is inf"));
    let mut far = good.clone();
    far[0].0 = far[0].0.replace("layers.0.", "layers.9.");
    assert!(refusal(CONFIG, &far).contains("layer 9"));
    let mut odd = good.clone();
    odd[0].0 = odd[0].0.replace("q_proj", "qkv_proj");
    assert!(refusal(CONFIG, &odd).contains("not a LoRA weight"));
    let empty = tempdir::Dir::new();
    let err = import(empty.path(), &model, None, None).err().unwrap();
    assert!(matches!(err, EngineError::Io { .. }), "{err:?}");
    std::fs::write(empty.path().join("adapter_config.json"), CONFIG).unwrap();
    std::fs::write(empty.path().join("adapter_model.bin"), b"pickle").unwrap();
    assert!(import(empty.path(), &model, None, None)
        .err()
        .unwrap()
        .to_string()
        .contains("safetensors"));
    std::fs::write(
        empty.path().join("adapter_model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{}",
    )
    .unwrap();
    assert!(import(empty.path(), &model, None, None).is_err());
}
