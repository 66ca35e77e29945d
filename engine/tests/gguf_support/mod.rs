//! Helpers shared by the GGUF tests: a sample file with every value and tensor type, a seeded
//! byte mutator, and `touch`, which reads everything a parsed file offers (as the fuzz target does).

#![allow(dead_code)] // each test binary uses its own subset

use kostant_engine::gguf::{GgmlType, Gguf, GgufWriter, Value};

/// Deterministic bytes for tensor data, different per `seed`.
pub fn patterned(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// One key per value type, plus nested, empty and unicode cases.
pub fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("test.u8", Value::U8(255)),
        ("test.i8", Value::I8(-128)),
        ("test.u16", Value::U16(65535)),
        ("test.i16", Value::I16(-32768)),
        ("test.u32", Value::U32(u32::MAX)),
        ("test.i32", Value::I32(i32::MIN)),
        ("test.u64", Value::U64(u64::MAX)),
        ("test.i64", Value::I64(i64::MIN)),
        ("test.f32", Value::F32(-1.5e-7)),
        ("test.f64", Value::F64(std::f64::consts::PI)),
        ("test.bool_true", Value::Bool(true)),
        ("test.bool_false", Value::Bool(false)),
        ("test.string", Value::from("héllo, 世界 🦀")),
        ("test.empty_string", Value::from("")),
        ("test.strings", Value::from(vec!["<s>", "</s>", "Ġthe", ""])),
        ("test.i32s", Value::from(vec![1i32, -2, 3])),
        ("test.f32s", Value::from(vec![0.25f32, -0.5, f32::MAX])),
        ("test.u8s", Value::from(vec![0u8, 1, 255])),
        ("test.bools", Value::from(vec![true, false])),
        ("test.empty_array", Value::Array(vec![])),
        (
            "test.nested",
            Value::Array(vec![
                Value::from(vec![1u64, 2]),
                Value::from(vec![3u64]),
                Value::Array(vec![]),
            ]),
        ),
        ("general.architecture", Value::from("llama")),
    ]
}

/// Tensors of every supported type; shapes in ggml order (`[cols, rows, ...]`).
pub fn every_tensor() -> Vec<(&'static str, Vec<usize>, GgmlType)> {
    vec![
        ("f32.matrix", vec![3, 2], GgmlType::F32),
        ("f16.vector", vec![5], GgmlType::F16),
        ("q4_0.weight", vec![32, 2], GgmlType::Q4_0),
        ("q4_1.weight", vec![64, 1, 2], GgmlType::Q4_1),
        ("q5_0.weight", vec![32, 2], GgmlType::Q5_0),
        ("q5_1.weight", vec![64, 1], GgmlType::Q5_1),
        ("q8_0.weight", vec![32, 3], GgmlType::Q8_0),
        ("q4_k.weight", vec![256, 1], GgmlType::Q4_K),
        ("q5_k.weight", vec![256, 2], GgmlType::Q5_K),
        ("q6_k.weight", vec![256, 2, 1, 1], GgmlType::Q6_K),
        ("iq4_nl.weight", vec![32, 3], GgmlType::IQ4_NL),
        ("bf16.matrix", vec![3, 2], GgmlType::BF16),
        ("iq4_xs.weight", vec![256, 1], GgmlType::IQ4_XS),
        ("q3_k.weight", vec![256, 2], GgmlType::Q3_K),
        ("q2_k.weight", vec![256, 2], GgmlType::Q2_K),
    ]
}

pub fn tensor_bytes(dims: &[usize], ty: GgmlType) -> usize {
    ty.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<usize>()
}

/// A writer holding every value of [`every_value`] and every tensor of [`every_tensor`].
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.metadata(k, v);
    }
    for (i, (name, dims, ty)) in every_tensor().into_iter().enumerate() {
        w.tensor(
            name,
            &dims,
            ty,
            patterned(tensor_bytes(&dims, ty), i as u64),
        );
    }
    w
}

/// Reads everything a parsed file exposes, so a bad offset or length would show up as a panic.
pub fn touch(g: &Gguf) -> u64 {
    let mut sum = g.version() as u64 + g.file_bytes() as u64;
    for (key, value) in g.metadata() {
        sum += key.len() as u64 + value.describe().len() as u64;
        let _ = g.get_u32_opt(key);
        let _ = g.get_f32_opt(key);
        let _ = g.get_str_opt(key);
        let _ = g.get_bool_opt(key);
        let _ = g.get_str_array_opt(key);
        let _ = g.get_i32_array_opt(key);
        let _ = g.get_f32_array_opt(key);
    }
    for t in g.tensors() {
        assert_eq!(g.tensor(&t.name), Some(t));
        let data = g.tensor_data(t);
        assert_eq!(data.len(), t.size);
        assert_eq!(t.n_elements(), t.rows() * t.cols());
        sum += data.iter().map(|&b| b as u64).sum::<u64>();
    }
    sum
}

/// splitmix64: a tiny seeded generator, so mutation tests are the same on every run.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the bias is irrelevant here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Integers that tend to break length and offset arithmetic.
const INTERESTING: [u64; 12] = [
    0,
    1,
    3,
    31,
    32,
    255,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
];

/// Applies one to four random mutations at positions chosen by `pick`: bit flips, random
/// bytes, interesting little-endian integers (as u32 or u64), byte runs copied from elsewhere,
/// and occasionally a truncation.
pub fn mutate(
    bytes: &mut Vec<u8>,
    rng: &mut SplitMix64,
    pick: &mut dyn FnMut(&mut SplitMix64, usize) -> usize,
) {
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            return;
        }
        let at = pick(rng, bytes.len()).min(bytes.len() - 1);
        match rng.below(6) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = rng.next() as u8,
            2 | 3 => {
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let le = v.to_le_bytes();
                let width = if rng.below(2) == 0 { 4 } else { 8 };
                let end = (at + width).min(bytes.len());
                bytes[at..end].copy_from_slice(&le[..end - at]);
            }
            4 => {
                let from = rng.below(bytes.len());
                let len = (1 + rng.below(16))
                    .min(bytes.len() - from)
                    .min(bytes.len() - at);
                bytes.copy_within(from..from + len, at);
            }
            _ => {
                if rng.below(8) == 0 {
                    bytes.truncate(at);
                } else {
                    bytes[at] = bytes[at].wrapping_add(1);
                }
            }
        }
    }
}
