//! Parsing and validation of a GGUF header (magic, metadata, tensor infos) from untrusted bytes.
//!
//! Every count, length, dimension and offset is checked against the caps in [`super`] and
//! against the bytes that are actually left before anything is allocated or sliced, so a hostile
//! file gets an error that names what was wrong, never a panic or a huge allocation.

use std::collections::{BTreeMap, HashMap};

use kostant_kernels::GgmlType;

use super::value::{type_id, Value};
use super::{
    TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN,
    MAX_DIMS, MAX_METADATA_COUNT, MAX_METADATA_VALUES, MAX_NAME_LEN, MAX_STRING_LEN, MAX_TENSORS,
};
use crate::{EngineError, Result};

pub(super) const MAGIC: &[u8; 4] = b"GGUF";

/// What a valid header describes. Tensor offsets are absolute and inside the file.
pub(super) struct Header {
    pub version: u32,
    pub alignment: usize,
    pub data_offset: usize,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub by_name: HashMap<String, usize>,
}

fn err(msg: String) -> EngineError {
    EngineError::Gguf(msg)
}

/// Smallest possible encodings, used to reject counts the remaining bytes cannot hold before
/// reserving memory for them.
const MIN_METADATA_ENTRY: u64 = 8 + 4 + 1; // key length, value type, one-byte value
const MIN_TENSOR_INFO: u64 = 8 + 4 + 8 + 4 + 8; // name length, n_dims, one dim, type, offset

/// A read position over the file that refuses to run past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes; `what` names the field for the error if the file ends first.
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => {
                let out = &self.bytes[self.pos..self.pos + n];
                self.pos += n;
                Ok(out)
            }
            _ => Err(err(format!(
                "{}: needs {n} bytes at offset {} but the file ends at byte {} (truncated?)",
                what(),
                self.pos,
                self.bytes.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 byte length, then that many bytes of UTF-8.
    fn str(&mut self, cap: usize, what: &dyn Fn() -> String) -> Result<&'a str> {
        let len = self.u64(&|| format!("{} (length)", what()))?;
        if len > cap as u64 {
            return Err(err(format!(
                "{}: string length {len} exceeds the cap of {cap} bytes",
                what()
            )));
        }
        let raw = self.take(len, what)?;
        std::str::from_utf8(raw).map_err(|e| {
            err(format!(
                "{}: string is not valid UTF-8 (bad byte at offset {})",
                what(),
                self.pos - raw.len() + e.valid_up_to()
            ))
        })
    }
}

/// Bytes of one value of a fixed-size type, or the smallest encoding for strings and arrays.
fn min_encoded_len(ty: u32) -> Option<u64> {
    Some(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 => 8,
        type_id::STRING => 8,
        type_id::ARRAY => 4 + 8,
        _ => return None,
    })
}

struct Parser<'a> {
    cur: Cursor<'a>,
    /// Metadata values (scalars and array elements) that may still be decoded; bounds the memory
    /// a file can make us spend on metadata, since one `Value` is bigger than its encoding.
    values_left: usize,
}

impl<'a> Parser<'a> {
    fn value(&mut self, ty: u32, depth: usize, what: &dyn Fn() -> String) -> Result<Value> {
        if self.values_left == 0 {
            return Err(err(format!(
                "{}: the metadata holds more than {MAX_METADATA_VALUES} values",
                what()
            )));
        }
        self.values_left -= 1;
        let c = &mut self.cur;
        Ok(match ty {
            type_id::U8 => Value::U8(c.array::<1>(what)?[0]),
            type_id::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
            type_id::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
            type_id::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
            type_id::U32 => Value::U32(u32::from_le_bytes(c.array(what)?)),
            type_id::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
            type_id::U64 => Value::U64(u64::from_le_bytes(c.array(what)?)),
            type_id::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
            type_id::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
            type_id::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
            type_id::BOOL => match c.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(err(format!(
                        "{}: bool byte is {b}, expected 0 or 1",
                        what()
                    )))
                }
            },
            type_id::STRING => Value::String(c.str(MAX_STRING_LEN, what)?.to_owned()),
            type_id::ARRAY => Value::Array(self.array(depth, what)?),
            other => return Err(err(format!("{}: unknown value type {other}", what()))),
        })
    }

    fn array(&mut self, depth: usize, what: &dyn Fn() -> String) -> Result<Vec<Value>> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(err(format!(
                "{}: arrays nest deeper than {MAX_ARRAY_DEPTH} levels",
                what()
            )));
        }
        let elem_ty = self
            .cur
            .u32(&|| format!("{} (array element type)", what()))?;
        let len = self.cur.u64(&|| format!("{} (array length)", what()))?;
        let Some(min_len) = min_encoded_len(elem_ty) else {
            return Err(err(format!(
                "{}: unknown array element type {elem_ty}",
                what()
            )));
        };
        if len > MAX_ARRAY_LEN as u64 {
            return Err(err(format!(
                "{}: array length {len} exceeds the cap of {MAX_ARRAY_LEN}",
                what()
            )));
        }
        // len <= 2^24 and min_len <= 12, so the product cannot overflow.
        if len * min_len > self.cur.remaining() as u64 {
            return Err(err(format!(
                "{}: array of {len} elements cannot fit in the {} bytes left in the file",
                what(),
                self.cur.remaining()
            )));
        }
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            let at = || format!("{}[{i}]", what());
            out.push(self.value(elem_ty, depth + 1, &at)?);
        }
        Ok(out)
    }
}

/// Names of ggml type ids that exist but that kostant has no kernels for, so the error can say
/// "IQ2_XXS" rather than only a number.
fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 40] = [
        "F32",
        "F16",
        "Q4_0",
        "Q4_1",
        "Q4_2",
        "Q4_3",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q8_1",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "Q8_K",
        "IQ2_XXS",
        "IQ2_XS",
        "IQ3_XXS",
        "IQ1_S",
        "IQ4_NL",
        "IQ3_S",
        "IQ2_S",
        "IQ4_XS",
        "I8",
        "I16",
        "I32",
        "I64",
        "F64",
        "IQ1_M",
        "BF16",
        "Q4_0_4_4",
        "Q4_0_4_8",
        "Q4_0_8_8",
        "TQ1_0",
        "TQ2_0",
        "IQ4_NL_4_4",
        "IQ4_NL_4_8",
        "IQ4_NL_8_8",
        "MXFP4",
    ];
    NAMES.get(id as usize).copied()
}

fn check_version(version: u32) -> Result<()> {
    match version {
        2 | 3 => Ok(()),
        1 => Err(err(
            "version 1 files (from before August 2023) are not supported; convert the model again \
             with a current llama.cpp"
                .into(),
        )),
        v if (1..=3).contains(&v.swap_bytes()) => Err(err(format!(
            "big-endian file (version {} byte-swapped); only little-endian GGUF is supported",
            v.swap_bytes()
        ))),
        v => Err(err(format!(
            "unsupported version {v} (kostant reads versions 2 and 3)"
        ))),
    }
}

/// `general.alignment` if present: an integer power of two no larger than [`MAX_ALIGNMENT`].
pub(super) fn alignment_of(value: Option<&Value>) -> Result<usize> {
    let Some(v) = value else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v.as_u64() {
        Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT as u64 => Ok(a as usize),
        _ => Err(err(format!(
            "{ALIGNMENT_KEY} is {}, expected a power of two from 1 to {MAX_ALIGNMENT}",
            v.describe()
        ))),
    }
}

/// Size in bytes of a tensor of type `ty` with ggml dims, or a message saying why it has none.
pub(super) fn tensor_size(name: &str, dims: &[usize], ty: GgmlType) -> Result<usize> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(err(format!(
            "tensor {name}: {} dimensions, expected 1 to {MAX_DIMS}",
            dims.len()
        )));
    }
    if let Some(d) = dims.iter().position(|&d| d == 0) {
        return Err(err(format!(
            "tensor {name}: dimension {d} is 0 in {dims:?}"
        )));
    }
    // ggml counts elements in i64, so the element count must fit there as well as in usize.
    let n_elements = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| {
            err(format!(
                "tensor {name}: dimensions {dims:?} overflow the element count"
            ))
        })?;
    let cols = dims[0];
    let rows = n_elements / cols;
    // `row_bytes` is `None` when the row is not a whole number of blocks.
    let Some(row_bytes) = ty.row_bytes(cols) else {
        return Err(err(format!(
            "tensor {name}: row length {cols} is not a multiple of the {} block length {}",
            ty.name(),
            ty.block_len()
        )));
    };
    row_bytes.checked_mul(rows).ok_or_else(|| {
        err(format!(
            "tensor {name}: {} data of dimensions {dims:?} overflows the byte size",
            ty.name()
        ))
    })
}

/// The header and metadata, checked as [`parse`] checks them: the version, the metadata, the
/// tensor count, and the cursor where the tensor infos start.
fn parse_metadata(bytes: &[u8]) -> Result<(u32, BTreeMap<String, Value>, u64, Cursor<'_>)> {
    let mut cur = Cursor { bytes, pos: 0 };
    let magic = cur.take(4, &|| "magic".into())?;
    if magic != MAGIC {
        return Err(err(format!(
            "not a GGUF file: magic is {:?} ({:02x?}), expected \"GGUF\"",
            String::from_utf8_lossy(magic),
            magic
        )));
    }
    let version = cur.u32(&|| "version".into())?;
    check_version(version)?;
    let n_tensors = cur.u64(&|| "tensor count".into())?;
    let n_metadata = cur.u64(&|| "metadata count".into())?;
    if n_tensors > MAX_TENSORS as u64 {
        return Err(err(format!(
            "tensor count {n_tensors} exceeds the cap of {MAX_TENSORS}"
        )));
    }
    if n_metadata > MAX_METADATA_COUNT as u64 {
        return Err(err(format!(
            "metadata count {n_metadata} exceeds the cap of {MAX_METADATA_COUNT}"
        )));
    }
    // Both counts are capped at 2^16, so these products cannot overflow.
    let least = n_metadata * MIN_METADATA_ENTRY + n_tensors * MIN_TENSOR_INFO;
    if least > cur.remaining() as u64 {
        return Err(err(format!(
            "{n_metadata} metadata entries and {n_tensors} tensors cannot fit in the {} bytes \
             left in the file (truncated?)",
            cur.remaining()
        )));
    }

    let mut p = Parser {
        cur,
        values_left: MAX_METADATA_VALUES,
    };
    let mut metadata = BTreeMap::new();
    for i in 0..n_metadata {
        let key = p
            .cur
            .str(MAX_NAME_LEN, &|| format!("metadata entry {i} key"))?;
        let what = || format!("metadata key {key}");
        let ty = p.cur.u32(&|| format!("metadata key {key} (value type)"))?;
        let value = p.value(ty, 0, &what)?;
        if metadata.insert(key.to_owned(), value).is_some() {
            return Err(err(format!("duplicate metadata key {key}")));
        }
    }
    Ok((version, metadata, n_tensors, p.cur))
}

/// The metadata alone, for a caller that needs no tensor (a tokenizer from a model whose
/// tensor types we do not read). The tensor infos are not looked at.
pub(super) fn parse_metadata_only(bytes: &[u8]) -> Result<BTreeMap<String, Value>> {
    parse_metadata(bytes).map(|(_, metadata, _, _)| metadata)
}

pub(super) fn parse(bytes: &[u8]) -> Result<Header> {
    let (version, metadata, n_tensors, cur) = parse_metadata(bytes)?;
    let alignment = alignment_of(metadata.get(ALIGNMENT_KEY))?;

    // Tensor infos: shapes, types and offsets relative to the data section.
    let mut cur = cur;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut by_name = HashMap::with_capacity(n_tensors as usize);
    let mut rel_offsets = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = cur.str(MAX_NAME_LEN, &|| format!("tensor {i} name"))?;
        let n_dims = cur.u32(&|| format!("tensor {name} (dimension count)"))?;
        if n_dims == 0 || n_dims > MAX_DIMS as u32 {
            return Err(err(format!(
                "tensor {name}: {n_dims} dimensions, expected 1 to {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            let dim = cur.u64(&|| format!("tensor {name} (dimension {d})"))?;
            match usize::try_from(dim) {
                Ok(dim) if i64::try_from(dim).is_ok() => dims.push(dim),
                _ => {
                    return Err(err(format!(
                        "tensor {name}: dimension {d} is {dim}, which overflows"
                    )))
                }
            }
        }
        let type_id = cur.u32(&|| format!("tensor {name} (type)"))?;
        let ty = GgmlType::from_ggml_id(type_id).ok_or_else(|| {
            err(match ggml_type_name(type_id) {
                Some(known) => {
                    format!("tensor {name}: type {known} (ggml type id {type_id}) is not supported")
                }
                None => format!("tensor {name}: unknown ggml type id {type_id}"),
            })
        })?;
        let size = tensor_size(name, &dims, ty)?;
        let rel = cur.u64(&|| format!("tensor {name} (data offset)"))?;
        if rel % alignment as u64 != 0 {
            return Err(err(format!(
                "tensor {name}: data offset {rel} is not a multiple of the alignment {alignment}"
            )));
        }
        if by_name.insert(name.to_owned(), tensors.len()).is_some() {
            return Err(err(format!("duplicate tensor name {name}")));
        }
        // Offsets are made absolute below, once the data section's start is known.
        rel_offsets.push(rel);
        tensors.push(TensorInfo {
            name: name.to_owned(),
            dims,
            ty,
            offset: 0,
            size,
        });
    }

    // The data section starts at the next multiple of the alignment after the tensor infos.
    let len = bytes.len();
    let data_offset = cur.pos.div_ceil(alignment) * alignment;
    if !tensors.is_empty() && data_offset > len {
        return Err(err(format!(
            "data section starts at byte {data_offset} past end of file ({len})"
        )));
    }
    for (t, rel) in tensors.iter_mut().zip(rel_offsets) {
        // In u128 nothing here can overflow, so the message always has the real numbers.
        let start = data_offset as u128 + rel as u128;
        let end = start + t.size as u128;
        if end > len as u128 {
            return Err(err(format!(
                "tensor {}: data ends at byte {end} past end of file ({len})",
                t.name
            )));
        }
        t.offset = start as usize;
    }
    check_overlap(&tensors)?;

    Ok(Header {
        version,
        alignment,
        data_offset: data_offset.min(len),
        metadata,
        tensors,
        by_name,
    })
}

/// Two tensors sharing bytes means the file is corrupt (or built to confuse), so refuse it.
fn check_overlap(tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.size > b.offset {
            return Err(err(format!(
                "tensor {} (bytes {}..{}) overlaps tensor {} (bytes {}..{})",
                a.name,
                a.offset,
                a.offset + a.size,
                b.name,
                b.offset,
                b.offset + b.size
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(check_version(2).is_ok() && check_version(3).is_ok());
        for (v, says) in [
            (1, "version 1"),
            (0, "unsupported version 0"),
            (4, "unsupported version 4"),
            (2u32.swap_bytes(), "big-endian"),
        ] {
            let msg = check_version(v).unwrap_err().to_string();
            assert!(msg.contains(says), "{v}: {msg}");
        }
    }

    #[test]
    fn alignment_must_be_a_small_power_of_two() {
        assert_eq!(alignment_of(None).unwrap(), DEFAULT_ALIGNMENT);
        assert_eq!(alignment_of(Some(&Value::U64(1))).unwrap(), 1);
        assert_eq!(alignment_of(Some(&Value::I32(64))).unwrap(), 64);
        for bad in [
            Value::U32(0),
            Value::U32(24),
            Value::I8(-8),
            Value::from("32"),
        ] {
            assert!(alignment_of(Some(&bad)).is_err(), "{bad:?}");
        }
        assert!(alignment_of(Some(&Value::U64(2 * MAX_ALIGNMENT as u64))).is_err());
    }

    #[test]
    fn cursor_never_reads_past_the_end() {
        let mut c = Cursor {
            bytes: &[1, 0, 0, 0, 9],
            pos: 0,
        };
        assert_eq!(c.u32(&|| "x".into()).unwrap(), 1);
        let msg = c.u64(&|| "field".into()).unwrap_err().to_string();
        assert!(msg.contains("field: needs 8 bytes at offset 4"), "{msg}");
        assert_eq!(c.take(1, &|| "y".into()).unwrap(), [9]);
        assert!(c.take(u64::MAX, &|| "z".into()).is_err());
    }
}
