//! The GGUF reader on the real SmolLM2-135M-Instruct Q4_1 file, and seeded mutations of a file
//! with its real header (metadata and tensor table) to exercise the fuzzing property on stable.
//!
//! The model comes from `scripts/setup.sh`; `KOSTANT_MODEL` overrides the path. Without it these
//! tests fail on purpose: a missing model must not look like a pass.

mod gguf_support;

use gguf_support::{mutate, touch, SplitMix64};
use kostant_engine::gguf::{GgmlType, Gguf, GgufWriter};
use kostant_engine::EngineError;

fn open_model() -> Gguf {
    let path = kostant_engine::testing::real_model_path();
    Gguf::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn real_model_header() {
    let g = open_model();
    assert_eq!(g.version(), 3);
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.alignment(), 32);

    let embd = g.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.ty, embd.dims.as_slice()),
        (GgmlType::Q8_0, &[576, 49152][..])
    );
    assert_eq!((embd.rows(), embd.cols()), (49152, 576));
    let down = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (down.ty, down.dims.as_slice()),
        (GgmlType::Q4_1, &[1536, 576][..])
    );

    assert_eq!(
        g.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(
        g.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    assert!(!g.get_str_array("tokenizer.ggml.merges").unwrap().is_empty());
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert!(g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap() > 0.0);
    assert!(g
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("im_start"));
}

#[test]
fn real_model_tensors_tile_the_data_section() {
    let g = open_model();
    let mut tensors: Vec<_> = g.tensors().iter().collect();
    tensors.sort_by_key(|t| t.offset);
    let mut end = g.data_offset();
    for t in tensors {
        assert!(
            t.offset >= end,
            "tensor {} overlaps its predecessor",
            t.name
        );
        assert!(
            t.offset - end < g.alignment(),
            "gap before tensor {}",
            t.name
        );
        assert_eq!(t.offset % g.alignment(), 0);
        assert_eq!(
            t.size,
            t.ty.row_bytes(t.cols()).unwrap() * t.rows(),
            "{}",
            t.name
        );
        assert_eq!(g.tensor_data(t).len(), t.size);
        end = t.offset + t.size;
    }
    assert!(end <= g.file_bytes() && g.file_bytes() - end < g.alignment());
}

/// The real metadata and tensor table (same names, types and ranks) with one block of data per
/// tensor, so each mutated copy is about 2 MB rather than the whole model.
fn real_header_small_data(g: &Gguf) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.metadata(k, v.clone());
    }
    for t in g.tensors() {
        let mut dims = vec![1; t.dims.len()];
        dims[0] = t.ty.block_len();
        w.tensor(&t.name, &dims, t.ty, vec![0x3c; t.ty.block_bytes()]);
    }
    w.to_bytes().unwrap()
}

#[test]
fn real_header_mutations_never_panic() {
    let original = real_header_small_data(&open_model());
    let g = Gguf::from_bytes(original.clone()).unwrap();
    assert_eq!(g.tensors().len(), 272);
    // Aim half the mutations at the structure: the scalar keys at the start (they sort before the
    // tokenizer arrays) and the tensor table (with the small data after it) at the end. The rest
    // land anywhere, mostly in the vocabulary.
    let table_len: usize = g
        .tensors()
        .iter()
        .map(|t| 8 + t.name.len() + 4 + 8 * t.dims.len() + 12)
        .sum();
    let table = g.data_offset() - table_len - g.alignment();
    let mut pick = |rng: &mut SplitMix64, len: usize| match rng.below(4) {
        0 => rng.below(4096),
        // An earlier mutation may have truncated the copy before the table.
        1 if len > table => table + rng.below(len - table),
        _ => rng.below(len),
    };
    let mut rng = SplitMix64(0x5eed_0135);
    let (mut ok, mut errors) = (0, 0);
    for _ in 0..600 {
        let mut b = original.clone();
        mutate(&mut b, &mut rng, &mut pick);
        match Gguf::from_bytes(b) {
            Ok(g) => {
                touch(&g);
                ok += 1;
            }
            Err(EngineError::Gguf(_)) => errors += 1,
            Err(other) => panic!("unexpected error kind: {other:?}"),
        }
    }
    assert!(ok > 0 && errors > 0, "{ok} parsed, {errors} rejected");
}
