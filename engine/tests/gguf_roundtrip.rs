//! GGUF writer -> reader round trips, typed accessors, and the reader's answers to truncated,
//! corrupted and deliberately hostile files.

mod gguf_support;

use std::path::PathBuf;

use gguf_support::{
    every_tensor, every_value, mutate, patterned, sample_writer, tensor_bytes, touch, SplitMix64,
};
use kostant_engine::gguf::{GgmlType, Gguf, GgufWriter, Value, MAX_ARRAY_LEN};
use kostant_engine::EngineError;

fn sample_bytes() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

/// The message of the `EngineError::Gguf` that parsing `bytes` must give.
fn gguf_error(bytes: Vec<u8>) -> String {
    match Gguf::from_bytes(bytes) {
        Err(EngineError::Gguf(msg)) => msg,
        Err(other) => panic!("expected a gguf error, got {other:?}"),
        Ok(g) => panic!("expected an error, parsed {g:?}"),
    }
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            msg.contains(part),
            "error {msg:?} does not mention {part:?}"
        );
    }
}

#[test]
fn every_value_type_round_trips() {
    let g = Gguf::from_bytes(sample_bytes()).unwrap();
    assert_eq!(g.version(), 3);
    let expected = every_value();
    assert_eq!(g.metadata().len(), expected.len());
    for (key, value) in expected {
        assert_eq!(g.get(key), Some(&value), "key {key}");
    }
    // The default alignment is not written out.
    assert_eq!(g.get("general.alignment"), None);
    assert_eq!(g.alignment(), 32);
}

#[test]
fn tensors_round_trip_with_their_data() {
    let bytes = sample_bytes();
    let len = bytes.len();
    let g = Gguf::from_bytes(bytes).unwrap();
    assert_eq!(g.file_bytes(), len);
    let expected = every_tensor();
    assert_eq!(g.tensors().len(), expected.len());
    for (i, ((name, dims, ty), t)) in expected.into_iter().zip(g.tensors()).enumerate() {
        assert_eq!(t.name, name);
        assert_eq!(t.dims, dims);
        assert_eq!(t.ty, ty);
        assert_eq!(t.cols(), dims[0]);
        assert_eq!(t.rows(), dims[1..].iter().product::<usize>());
        assert_eq!(t.n_elements(), dims.iter().product::<usize>());
        assert_eq!(t.size, tensor_bytes(&dims, ty));
        assert_eq!(t.offset % 32, 0, "tensor {name} is not aligned");
        assert!(t.offset >= g.data_offset());
        assert_eq!(g.tensor_data(t), patterned(t.size, i as u64).as_slice());
        assert_eq!(g.tensor(name), Some(t));
    }
    assert_eq!(g.tensor("missing.weight"), None);
}

#[test]
fn custom_alignment_is_written_and_honoured() {
    for align in [1u32, 8, 64, 4096] {
        let mut w = sample_writer();
        w.alignment(align);
        let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(g.alignment(), align as usize);
        assert_eq!(g.get("general.alignment"), Some(&Value::U32(align)));
        assert_eq!(g.data_offset() % align as usize, 0);
        for t in g.tensors() {
            assert_eq!(
                t.offset % align as usize,
                0,
                "{} at alignment {align}",
                t.name
            );
        }
        touch(&g);
    }
}

#[test]
fn an_empty_file_round_trips() {
    let g = Gguf::from_bytes(GgufWriter::new().to_bytes().unwrap()).unwrap();
    assert!(g.metadata().is_empty() && g.tensors().is_empty());
}

#[test]
fn typed_getters_convert_what_fits_and_name_what_does_not() {
    let mut w = GgufWriter::new();
    w.metadata("a.u8", Value::U8(7))
        .metadata("a.i64", Value::I64(4096))
        .metadata("a.negative", Value::I32(-1))
        .metadata("a.big", Value::U64(1 << 32))
        .metadata("a.f64", Value::F64(1e-5))
        .metadata("a.f64_huge", Value::F64(1e300))
        .metadata("a.name", Value::from("llama"))
        .metadata("a.flag", Value::Bool(true))
        .metadata("a.tokens", Value::from(vec!["a", "b"]))
        .metadata("a.types", Value::from(vec![1u8, 3]))
        .metadata("a.scores", Value::from(vec![0.5f32, -1.0]))
        .metadata("a.mixed", Value::from(vec![Value::from(1u32)]))
        .metadata("a.name", Value::from("llama")); // setting a key again replaces it
    let g = Gguf::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(g.metadata().len(), 12);

    assert_eq!(g.get_u32("a.u8").unwrap(), 7);
    assert_eq!(g.get_u32("a.i64").unwrap(), 4096);
    assert_eq!(g.get_u32_opt("a.absent").unwrap(), None);
    let e = g.get_u32("a.negative").unwrap_err().to_string();
    assert_mentions(&e, &["a.negative", "u32", "i32 -1"]);
    let e = g.get_u32("a.big").unwrap_err().to_string();
    assert_mentions(&e, &["a.big", "u64 4294967296"]);
    let e = g.get_u32("a.name").unwrap_err().to_string();
    assert_mentions(&e, &["a.name", "string \"llama\""]);
    let e = g.get_u32("a.absent").unwrap_err().to_string();
    assert_mentions(&e, &["missing key a.absent"]);

    assert_eq!(g.get_f32("a.f64").unwrap(), 1e-5);
    assert_eq!(g.get_f32_opt("a.absent").unwrap(), None);
    assert_mentions(
        &g.get_f32("a.u8").unwrap_err().to_string(),
        &["a.u8", "u8 7"],
    );
    assert_mentions(
        &g.get_f32("a.f64_huge").unwrap_err().to_string(),
        &["a.f64_huge", "f32"],
    );

    assert_eq!(g.get_str("a.name").unwrap(), "llama");
    assert_eq!(g.get_str_opt("a.absent").unwrap(), None);
    assert_mentions(
        &g.get_str("a.flag").unwrap_err().to_string(),
        &["a.flag", "bool true"],
    );
    assert_eq!(g.get_bool_opt("a.flag").unwrap(), Some(true));
    assert_eq!(g.get_bool_opt("a.absent").unwrap(), None);
    assert!(g.get_bool_opt("a.u8").is_err());

    assert_eq!(g.get_str_array("a.tokens").unwrap(), ["a", "b"]);
    assert_eq!(g.get_i32_array("a.types").unwrap(), [1, 3]);
    assert_eq!(
        g.get_f32_array_opt("a.scores").unwrap(),
        Some(vec![0.5, -1.0])
    );
    assert_eq!(g.get_f32_array_opt("a.absent").unwrap(), None);
    let e = g.get_str_array("a.types").unwrap_err().to_string();
    assert_mentions(&e, &["a.types", "strings", "u8 1", "index 0"]);
    let e = g.get_i32_array("a.name").unwrap_err().to_string();
    assert_mentions(&e, &["a.name", "array", "string"]);
    assert_mentions(
        &g.get_str_array("a.absent").unwrap_err().to_string(),
        &["missing key a.absent"],
    );
    assert!(g.get_f32_array_opt("a.mixed").is_err());
}

#[test]
fn writer_refuses_what_the_reader_would_reject() {
    let write = |f: &dyn Fn(&mut GgufWriter)| {
        let mut w = GgufWriter::new();
        f(&mut w);
        w.to_bytes().unwrap_err().to_string()
    };
    let e = write(&|w| {
        w.tensor("short", &[32, 2], GgmlType::Q8_0, vec![0; 10]);
    });
    assert_mentions(&e, &["tensor short", "10 bytes", "68"]);
    let e = write(&|w| {
        w.tensor("t", &[4], GgmlType::F32, vec![0; 16]);
        w.tensor("t", &[4], GgmlType::F32, vec![0; 16]);
    });
    assert_mentions(&e, &["duplicate tensor name t"]);
    let e = write(&|w| {
        w.tensor("partial", &[33], GgmlType::Q4_0, vec![0; 18]);
    });
    assert_mentions(&e, &["tensor partial", "33", "block length 32"]);
    let e = write(&|w| {
        w.tensor("zero", &[4, 0], GgmlType::F32, vec![]);
    });
    assert_mentions(&e, &["tensor zero", "dimension 1 is 0"]);
    let e = write(&|w| {
        w.tensor("five", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4]);
    });
    assert_mentions(&e, &["tensor five", "5 dimensions"]);
    let e = write(&|w| {
        w.metadata("m", Value::Array(vec![Value::U8(1), Value::from("x")]));
    });
    assert_mentions(&e, &["metadata key m", "mixes u8 and string"]);
    let e = write(&|w| {
        w.alignment(48);
    });
    assert_mentions(&e, &["general.alignment", "u32 48"]);
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kostant-gguf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn write_to_then_open_by_mmap() {
    let dir = temp_dir("write");
    let path = dir.join("tiny.gguf");
    let w = sample_writer();
    std::fs::write(&path, b"an older file").unwrap();
    w.write_to(&path).unwrap();
    let g = Gguf::open(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
    assert_eq!(g.tensors().len(), every_tensor().len());
    touch(&g);
    // Only the renamed file is left: no temporary next to it.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["tiny.gguf"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_reports_the_path() {
    let dir = temp_dir("open");
    let missing = dir.join("missing.gguf");
    match Gguf::open(&missing) {
        Err(EngineError::Io { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected an io error, got {other:?}"),
    }
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = Gguf::open(&empty).unwrap_err().to_string();
    assert_mentions(&e, &["empty.gguf", "magic", "truncated"]);
    let text = dir.join("text.gguf");
    std::fs::write(&text, b"hello world, not a model").unwrap();
    let e = Gguf::open(&text).unwrap_err().to_string();
    assert_mentions(&e, &["text.gguf", "not a GGUF file", "hell"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn read_metadata_gives_what_open_gives_and_names_the_path() {
    let dir = temp_dir("metadata");
    let path = dir.join("tiny.gguf");
    sample_writer().write_to(&path).unwrap();
    let g = Gguf::open(&path).unwrap();
    assert_eq!(&Gguf::read_metadata(&path).unwrap(), g.metadata());
    let text = dir.join("text.gguf");
    std::fs::write(&text, b"hello world, not a model").unwrap();
    let e = Gguf::read_metadata(&text).unwrap_err().to_string();
    assert_mentions(&e, &["text.gguf", "not a GGUF file"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample_bytes();
    // The last tensor's padding is not needed to read it; everything before it is.
    let full = Gguf::from_bytes(bytes.clone()).unwrap();
    let needed = full
        .tensors()
        .iter()
        .map(|t| t.offset + t.size)
        .max()
        .unwrap();
    assert!(needed < bytes.len());
    for len in 0..bytes.len() {
        let result = Gguf::from_bytes(bytes[..len].to_vec());
        if len < needed {
            let msg = match result {
                Err(EngineError::Gguf(msg)) => msg,
                other => panic!("prefix of {len} bytes: expected a gguf error, got {other:?}"),
            };
            assert!(
                msg.contains("truncated")
                    || msg.contains("past end of file")
                    || msg.contains("cannot fit"),
                "prefix of {len} bytes: {msg}"
            );
        } else {
            touch(&result.unwrap());
        }
    }
}

#[test]
fn every_corrupted_byte_is_handled() {
    let bytes = sample_bytes();
    let mut parsed = 0;
    for at in 0..bytes.len() {
        let original = bytes[at];
        for new in [
            original ^ 0x01,
            original ^ 0x80,
            !original,
            0x00,
            0xff,
            0x20,
            0x7f,
        ] {
            if new == original {
                continue;
            }
            let mut b = bytes.clone();
            b[at] = new;
            if let Ok(g) = Gguf::from_bytes(b) {
                touch(&g);
                parsed += 1;
            }
        }
    }
    // Data bytes, padding and many metadata bytes can change without breaking the file.
    assert!(parsed > bytes.len());
}

#[test]
fn seeded_random_mutations_never_panic() {
    let original = sample_bytes();
    let mut rng = SplitMix64(0x6767_7566);
    let mut uniform = |rng: &mut SplitMix64, len: usize| rng.below(len);
    let (mut ok, mut errors) = (0, 0);
    for _ in 0..5000 {
        let mut b = original.clone();
        mutate(&mut b, &mut rng, &mut uniform);
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

/// Builds GGUF bytes field by field, for files the writer would refuse to produce.
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, n_tensors: u64, n_metadata: u64) -> Raw {
        Raw(b"GGUF".to_vec())
            .u32(version)
            .u64(n_tensors)
            .u64(n_metadata)
    }
    fn u32(mut self, v: u32) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A `u32` metadata entry (value type 4).
    fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `n` data bytes.
    fn data(mut self, n: usize) -> Raw {
        let pad = (32 - self.0.len() % 32) % 32;
        self.0.resize(self.0.len() + pad + n, 0);
        self
    }
}

/// One F32 tensor of 8 elements (32 bytes) with the given fields, in an otherwise valid file.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::new(3, 1, 0)
        .tensor("blk.3.attn_q.weight", dims, ty, offset)
        .data(data)
        .0
}

#[test]
fn raw_builder_makes_valid_files() {
    let g = Gguf::from_bytes(one_tensor(&[8], 0, 0, 32)).unwrap();
    assert_eq!(g.tensors()[0].size, 32);
    let g = Gguf::from_bytes(Raw::new(2, 0, 1).kv_u32("k", 5).0).unwrap();
    assert_eq!((g.version(), g.get_u32("k").unwrap()), (2, 5));
}

#[test]
fn bad_magic_and_versions() {
    let mut b = one_tensor(&[8], 0, 0, 32);
    b[..4].copy_from_slice(b"GGML");
    assert_mentions(&gguf_error(b), &["not a GGUF file", "GGML"]);
    assert_mentions(
        &gguf_error(Raw::new(1, 0, 0).0),
        &["version 1", "not supported"],
    );
    assert_mentions(&gguf_error(Raw::new(4, 0, 0).0), &["unsupported version 4"]);
    assert_mentions(
        &gguf_error(Raw::new(3u32.swap_bytes(), 0, 0).0),
        &["big-endian"],
    );
    assert_mentions(&gguf_error(b"GGU".to_vec()), &["magic", "truncated"]);
}

#[test]
fn hostile_counts_and_lengths() {
    let e = gguf_error(Raw::new(3, 1 << 40, 0).0);
    assert_mentions(&e, &["tensor count 1099511627776", "cap"]);
    let e = gguf_error(Raw::new(3, 0, u64::MAX).0);
    assert_mentions(&e, &["metadata count 18446744073709551615", "cap"]);
    let e = gguf_error(Raw::new(3, 1000, 1000).0);
    assert_mentions(&e, &["1000 metadata entries and 1000 tensors cannot fit"]);
    // A key whose length is absurd.
    let e = gguf_error(Raw::new(3, 0, 1).u64(u64::MAX).bytes(&[0; 16]).0);
    assert_mentions(
        &e,
        &[
            "metadata entry 0 key",
            "string length 18446744073709551615",
            "cap",
        ],
    );
    // A string value longer than the cap, and one longer than the file.
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("tokenizer.chat_template")
            .u32(8)
            .u64(1 << 40)
            .0,
    );
    assert_mentions(
        &e,
        &[
            "tokenizer.chat_template",
            "string length 1099511627776",
            "cap",
        ],
    );
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("tokenizer.chat_template")
            .u32(8)
            .u64(1000)
            .bytes(b"{{")
            .0,
    );
    assert_mentions(
        &e,
        &["tokenizer.chat_template", "needs 1000 bytes", "truncated"],
    );
    // Arrays: over the cap, and within the cap but longer than the file.
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("tokenizer.ggml.tokens")
            .u32(9)
            .u32(8)
            .u64(u64::MAX)
            .0,
    );
    assert_mentions(
        &e,
        &[
            "tokenizer.ggml.tokens",
            "array length 18446744073709551615",
            "cap",
        ],
    );
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("tokenizer.ggml.tokens")
            .u32(9)
            .u32(8)
            .u64(1 << 20)
            .0,
    );
    assert_mentions(
        &e,
        &["tokenizer.ggml.tokens", "1048576 elements cannot fit"],
    );
    // Two arrays at the per-array cap together exceed the cap on all metadata values.
    let max = MAX_ARRAY_LEN as u64;
    let mut raw = Raw::new(3, 0, 2);
    for key in ["a.first", "a.second"] {
        raw = raw
            .str(key)
            .u32(9)
            .u32(0)
            .u64(max)
            .bytes(&vec![7; max as usize]);
    }
    let e = gguf_error(raw.0);
    assert_mentions(&e, &["a.second[", "more than 4194304 values"]);
    // An element string in the middle of an array that runs off the end.
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("tokenizer.ggml.tokens")
            .u32(9)
            .u32(8)
            .u64(2)
            .str("a")
            .u64(99)
            .0,
    );
    assert_mentions(&e, &["tokenizer.ggml.tokens[1]", "truncated"]);
    // Arrays of arrays of arrays of arrays.
    let mut nested = Raw::new(3, 0, 1).str("deep");
    nested = nested.u32(9);
    for _ in 0..4 {
        nested = nested.u32(9).u64(1);
    }
    let e = gguf_error(nested.u32(4).u64(0).0);
    assert_mentions(&e, &["deep[0][0][0]", "nest deeper"]);
}

#[test]
fn hostile_metadata_values() {
    let e = gguf_error(Raw::new(3, 0, 1).str("general.name").u32(13).0);
    assert_mentions(&e, &["general.name", "unknown value type 13"]);
    let e = gguf_error(Raw::new(3, 0, 1).str("a.list").u32(9).u32(77).u64(1).0);
    assert_mentions(&e, &["a.list", "unknown array element type 77"]);
    let e = gguf_error(Raw::new(3, 0, 1).str("a.flag").u32(7).bytes(&[2]).0);
    assert_mentions(&e, &["a.flag", "bool byte is 2"]);
    let e = gguf_error(
        Raw::new(3, 0, 1)
            .str("a.text")
            .u32(8)
            .u64(2)
            .bytes(&[0xc3, 0x28])
            .0,
    );
    assert_mentions(&e, &["a.text", "UTF-8"]);
    let e = gguf_error(Raw::new(3, 0, 2).kv_u32("a.dup", 1).kv_u32("a.dup", 2).0);
    assert_mentions(&e, &["duplicate metadata key a.dup"]);
    let e = gguf_error(Raw::new(3, 0, 1).kv_u32("general.alignment", 48).0);
    assert_mentions(&e, &["general.alignment", "u32 48", "power of two"]);
    let e = gguf_error(Raw::new(3, 0, 1).kv_u32("general.alignment", 0).0);
    assert_mentions(&e, &["general.alignment", "u32 0"]);
    let e = gguf_error(Raw::new(3, 0, 1).kv_u32("general.alignment", 1 << 30).0);
    assert_mentions(&e, &["general.alignment", "power of two"]);
}

#[test]
fn hostile_tensor_infos() {
    let name = "blk.3.attn_q.weight";
    let e = gguf_error(one_tensor(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 32));
    assert_mentions(&e, &[name, "overflow"]);
    let e = gguf_error(one_tensor(&[u64::MAX], 0, 0, 32));
    assert_mentions(&e, &[name, "dimension 0 is 18446744073709551615"]);
    let e = gguf_error(one_tensor(&[8, 0], 0, 0, 32));
    assert_mentions(&e, &[name, "dimension 1 is 0"]);
    let e = gguf_error(one_tensor(&[1, 1, 1, 1, 1], 0, 0, 32));
    assert_mentions(&e, &[name, "5 dimensions"]);
    let e = gguf_error(one_tensor(&[], 0, 0, 32));
    assert_mentions(&e, &[name, "0 dimensions"]);
    let e = gguf_error(one_tensor(&[8], 0, 16, 64));
    assert_mentions(&e, &[name, "offset 16", "alignment 32"]);
    let e = gguf_error(one_tensor(&[8], 99, 0, 32));
    assert_mentions(&e, &[name, "unknown ggml type id 99"]);
    let e = gguf_error(one_tensor(&[256], 16, 0, 66));
    assert_mentions(&e, &[name, "IQ2_XXS", "16", "not supported"]);
    let e = gguf_error(one_tensor(&[48], 2, 0, 32));
    assert_mentions(&e, &[name, "row length 48", "Q4_0", "block length 32"]);
    let e = gguf_error(one_tensor(&[8], 0, 1 << 20, 32));
    assert_mentions(&e, &[name, "data ends at byte", "past end of file"]);
    let e = gguf_error(one_tensor(&[8], 0, u64::MAX - 31, 32));
    assert_mentions(&e, &[name, "past end of file"]);
    let e = gguf_error(one_tensor(&[16], 0, 0, 32));
    assert_mentions(&e, &[name, "data ends at byte 160 past end of file (128)"]);
    // Same name twice; two tensors sharing bytes.
    let b = Raw::new(3, 2, 0)
        .tensor("t", &[8], 0, 0)
        .tensor("t", &[8], 0, 32)
        .data(64)
        .0;
    assert_mentions(&gguf_error(b), &["duplicate tensor name t"]);
    let b = Raw::new(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .data(64)
        .0;
    assert_mentions(&gguf_error(b), &["tensor a", "overlaps tensor b"]);
    // A tensor name over the cap, and one that is not UTF-8.
    let b = Raw::new(3, 1, 0).u64(1 << 20).bytes(&[0; 64]).0;
    assert_mentions(&gguf_error(b), &["tensor 0 name", "cap"]);
    let b = Raw::new(3, 1, 0)
        .u64(1)
        .bytes(&[0xff])
        .u32(1)
        .u64(8)
        .u32(0)
        .u64(0)
        .data(32)
        .0;
    assert_mentions(&gguf_error(b), &["tensor 0 name", "UTF-8"]);
}
