//! GGUF model files: a validating reader over an mmap (or owned bytes) and a writer.
//!
//! A GGUF file is a header (magic, version, counts), typed key/value metadata, tensor infos
//! (name, ggml dims, type, offset) and then the tensor data, each tensor aligned to
//! `general.alignment` (default 32). The file is untrusted input: [`Gguf::open`] and
//! [`Gguf::from_bytes`] check the whole header against the caps below and against the file's
//! length, so that afterwards every accessor is infallible in memory terms and
//! [`Gguf::tensor_data`] is a plain slice.
//!
//! Caps (each an error naming the thing, never a panic):
//! - keys and tensor names: [`MAX_NAME_LEN`] bytes (the GGUF spec's limit for keys);
//! - string values: [`MAX_STRING_LEN`] bytes; chat templates are tens of KB and some converters
//!   embed a whole `tokenizer.json` of a few MB as one string, so the cap is generous; memory
//!   stays bounded by the file size since every byte is read from the file;
//! - arrays: [`MAX_ARRAY_LEN`] elements each, nested at most [`MAX_ARRAY_DEPTH`] deep, and at most
//!   [`MAX_METADATA_VALUES`] values in all the metadata. A decoded `Value` takes 32 bytes, more
//!   than a `u8` element's encoding, so this total is what bounds memory (about 128 MiB) whatever
//!   the file claims. The largest real vocabularies (256k tokens, each with a score and a type,
//!   plus merges) need about 1.3M values;
//! - [`MAX_METADATA_COUNT`] keys, [`MAX_TENSORS`] tensors of 1 to [`MAX_DIMS`] dimensions, each
//!   dimension > 0, the element count within `i64`, the row length a multiple of the type's block;
//! - alignment a power of two up to [`MAX_ALIGNMENT`]; every tensor's offset aligned, its data
//!   inside the file and not overlapping another tensor's.

mod mmap;
mod reader;
pub mod requantize;
mod value;
mod writer;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

pub use kostant_kernels::GgmlType;
pub use value::Value;
pub use writer::GgufWriter;

use crate::{EngineError, Result};

/// Longest key or tensor name, in bytes.
pub const MAX_NAME_LEN: usize = 65_535;
/// Longest string value, in bytes.
pub const MAX_STRING_LEN: usize = 16 << 20;
/// Most elements in one array.
pub const MAX_ARRAY_LEN: usize = 1 << 21;
/// Deepest nesting of arrays in arrays (1 = arrays of scalars only).
pub const MAX_ARRAY_DEPTH: usize = 3;
/// Most values (scalars plus array elements, at any depth) in the whole metadata.
pub const MAX_METADATA_VALUES: usize = 1 << 22;
/// Most metadata keys.
pub const MAX_METADATA_COUNT: usize = 1 << 16;
/// Most tensors.
pub const MAX_TENSORS: usize = 1 << 16;
/// Most dimensions of one tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Largest `general.alignment` accepted.
pub const MAX_ALIGNMENT: usize = 1 << 16;
/// Alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The metadata key that sets the alignment of tensor data.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// One tensor of the file. Shapes are in ggml order: `dims[0]` is the innermost dimension
/// (the row length), so a matrix of `rows x cols` has `dims == [cols, rows]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: usize,
    /// Bytes of data.
    pub size: usize,
}

impl TensorInfo {
    /// Number of rows: the product of all dimensions but the first.
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product()
    }

    /// Row length in elements: the first dimension.
    pub fn cols(&self) -> usize {
        self.dims.first().copied().unwrap_or(0)
    }

    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }
}

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// A parsed and validated GGUF file. Immutable; share it behind an `Arc`.
pub struct Gguf {
    backing: Backing,
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: BTreeMap<String, Value>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl Gguf {
    /// Maps the file read-only and validates its header. Errors name the path.
    pub fn open(path: &Path) -> Result<Gguf> {
        let io = |source| EngineError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let map = mmap::map_read_only(&file).map_err(io)?;
        Gguf::new(Backing::Mmap(map)).map_err(|e| match e {
            EngineError::Gguf(msg) => EngineError::Gguf(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// The metadata of the GGUF at `path`, validated as [`Gguf::open`] does, without reading
    /// the tensor infos: for what needs only metadata (such as the tokenizer) from a model
    /// whose tensor types this crate does not read.
    pub fn read_metadata(path: &Path) -> Result<BTreeMap<String, Value>> {
        let io = |source| EngineError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let map = mmap::map_read_only(&file).map_err(io)?;
        reader::parse_metadata_only(&map).map_err(|e| match e {
            EngineError::Gguf(msg) => EngineError::Gguf(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// Validates a GGUF held in memory (tests, fuzzing, files that arrived over a pipe).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gguf> {
        Gguf::new(Backing::Owned(bytes))
    }

    fn new(backing: Backing) -> Result<Gguf> {
        let bytes = match &backing {
            Backing::Mmap(m) => &m[..],
            Backing::Owned(v) => &v[..],
        };
        let h = reader::parse(bytes)?;
        Ok(Gguf {
            backing,
            version: h.version,
            alignment: h.alignment,
            data_offset: h.data_offset,
            metadata: h.metadata,
            tensors: h.tensors,
            by_name: h.by_name,
        })
    }

    /// The format version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of tensor data within the file, in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Where the tensor data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// Hands the mapped pages of `offset..offset + size` back to the OS: for bytes that were
    /// copied out and will not be read from the file again. Owned (in-memory) files keep them.
    pub(crate) fn release(&self, offset: usize, size: usize) {
        if let Backing::Mmap(m) = &self.backing {
            mmap::release(m, offset, size);
        }
    }

    pub fn file_bytes(&self) -> usize {
        self.bytes().len()
    }

    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file. Offsets and sizes were validated at open.
    ///
    /// # Panics
    /// If `t` describes bytes outside this file, which only a `TensorInfo` made by hand or
    /// taken from another file can do.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes = self.bytes();
        let range = t.offset..t.offset.saturating_add(t.size);
        assert!(
            range.end <= bytes.len(),
            "tensor {}: bytes {range:?} are not in this {}-byte file",
            t.name,
            bytes.len()
        );
        &bytes[range]
    }

    // Typed metadata accessors. `_opt` variants return `None` for a missing key; every variant
    // fails on a value of the wrong type, naming the key and what was found.

    /// The value of `key` converted by `convert`, `None` if absent, or an error if it has the
    /// wrong type.
    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &str,
        convert: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => convert(v).map(Some).ok_or_else(|| {
                EngineError::Gguf(format!(
                    "key {key}: expected {expected}, found {}",
                    v.describe()
                ))
            }),
        }
    }

    fn required<T>(key: &str, found: Result<Option<T>>) -> Result<T> {
        found?.ok_or_else(|| EngineError::Gguf(format!("missing key {key}")))
    }

    /// A required integer key that fits `u32` (any integer type is accepted).
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        Self::required(key, self.get_u32_opt(key))
    }

    pub fn get_u32_opt(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "an integer that fits u32", |v| {
            v.as_u64().and_then(|x| u32::try_from(x).ok())
        })
    }

    /// A required float key, stored as `f32` or `f64`.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        Self::required(key, self.get_f32_opt(key))
    }

    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a float that fits f32", value_f32)
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        Self::required(key, self.get_str_opt(key))
    }

    pub fn get_str_opt(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", Value::as_str)
    }

    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", Value::as_bool)
    }

    /// A required array of strings, such as `tokenizer.ggml.tokens` or `tokenizer.ggml.merges`.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        Self::required(key, self.get_str_array_opt(key))
    }

    pub fn get_str_array_opt(&self, key: &str) -> Result<Option<Vec<&str>>> {
        self.array(key, "string", Value::as_str)
    }

    /// A required array of integers that fit `i32`, such as `tokenizer.ggml.token_type`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        Self::required(key, self.get_i32_array_opt(key))
    }

    pub fn get_i32_array_opt(&self, key: &str) -> Result<Option<Vec<i32>>> {
        self.array(key, "integer that fits i32", |v| {
            v.as_i64().and_then(|x| i32::try_from(x).ok())
        })
    }

    /// An array of floats, such as `tokenizer.ggml.scores`.
    pub fn get_f32_array_opt(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.array(key, "float that fits f32", value_f32)
    }

    fn array<'a, T>(
        &'a self,
        key: &str,
        elem: &str,
        convert: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(items) = self.typed(key, &format!("an array of {elem}s"), Value::as_array)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                convert(v).ok_or_else(|| {
                    EngineError::Gguf(format!(
                        "key {key}: expected an array of {elem}s, found {} at index {i}",
                        v.describe()
                    ))
                })
            })
            .collect::<Result<Vec<T>>>()
            .map(Some)
    }
}

/// `F32` as is, `F64` if it is within `f32`'s range.
fn value_f32(v: &Value) -> Option<f32> {
    let x = v.as_f64()?;
    let f = x as f32;
    (f.is_finite() || !x.is_finite()).then_some(f)
}

impl fmt::Debug for Gguf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("file_bytes", &self.file_bytes())
            .field("mmap", &matches!(self.backing, Backing::Mmap(_)))
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_file_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Gguf>();
    }

    #[test]
    fn value_f32_keeps_f64_within_range() {
        assert_eq!(value_f32(&Value::F64(0.5)), Some(0.5));
        assert_eq!(value_f32(&Value::F64(1e300)), None);
        assert!(value_f32(&Value::F64(f64::NAN)).unwrap().is_nan());
        assert_eq!(value_f32(&Value::U32(1)), None);
    }
}
