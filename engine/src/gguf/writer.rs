//! Writing GGUF files: tiny synthetic models for tests, and quantized models for the CLI.
//!
//! The writer refuses to produce what the reader would reject (bad shapes, wrong data lengths,
//! duplicate tensors, mixed-type arrays, values over the caps), so anything it writes reads back.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use super::reader::{self, MAGIC};
use super::value::{type_id, Value};
use super::{
    GgmlType, ALIGNMENT_KEY, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_NAME_LEN, MAX_STRING_LEN,
};
use super::{MAX_METADATA_COUNT, MAX_METADATA_VALUES, MAX_TENSORS};
use crate::{EngineError, Result};

/// The version this writer produces.
const VERSION: u32 = 3;

struct PendingTensor {
    name: String,
    dims: Vec<usize>,
    ty: GgmlType,
    /// `None`: the bytes come from the producer given to [`GgufWriter::write_streaming_to`].
    data: Option<Vec<u8>>,
}

/// Builds a GGUF v3 file. Metadata keys keep their first insertion order; setting a key again
/// replaces its value. Tensors are laid out in insertion order, each aligned.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

fn err(msg: String) -> EngineError {
    EngineError::Gguf(msg)
}

/// Where each tensor's data goes, computed (and everything validated) before writing.
struct Layout {
    alignment: usize,
    /// Offsets relative to the data section.
    offsets: Vec<usize>,
    /// Bytes of each tensor's data, unpadded.
    sizes: Vec<usize>,
}

impl GgufWriter {
    /// An empty v3 file with the default alignment (32; `general.alignment` is written only if
    /// [`GgufWriter::alignment`] or the key itself sets it).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn metadata(&mut self, key: &str, v: Value) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, old)) => *old = v,
            None => self.metadata.push((key.to_owned(), v)),
        }
        self
    }

    /// Sets `general.alignment` (a power of two up to [`super::MAX_ALIGNMENT`]).
    pub fn alignment(&mut self, alignment: u32) -> &mut Self {
        self.metadata(ALIGNMENT_KEY, Value::U32(alignment))
    }

    /// Adds a tensor with ggml dims (`dims[0]` is the row length) and its packed data. The
    /// data length is checked against the shape when the file is written.
    pub fn tensor(&mut self, name: &str, dims: &[usize], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data: Some(data),
        });
        self
    }

    /// Adds a tensor whose bytes are produced while the file is written, by the producer given
    /// to [`GgufWriter::write_streaming_to`], so a multi-gigabyte model never sits in memory.
    pub fn deferred_tensor(&mut self, name: &str, dims: &[usize], ty: GgmlType) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data: None,
        });
        self
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let layout = self.layout()?;
        let mut out = Vec::new();
        self.emit(&layout, &mut out, &mut no_producer)
            .map_err(|e| err(format!("writing to memory: {e}")))?;
        Ok(out)
    }

    /// Writes the file next to `path` under a temporary name, then renames it into place, so a
    /// reader (or an mmap of the old file) never sees a half-written model.
    pub fn write_to(&self, path: &Path) -> Result<()> {
        self.write_streaming_to(path, no_producer)
    }

    /// Like [`GgufWriter::write_to`], with the bytes of every deferred tensor written by
    /// `produce(name, size, out)` in file order. It must write exactly `size` bytes (checked).
    pub fn write_streaming_to(
        &self,
        path: &Path,
        mut produce: impl FnMut(&str, usize, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let layout = self.layout()?;
        let file_name = path
            .file_name()
            .ok_or_else(|| err(format!("{}: not a file path", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(".{}.tmp", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let io = |p: &Path| {
            let p = p.to_owned();
            move |source| EngineError::Io { path: p, source }
        };
        let result = (|| -> Result<()> {
            let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
            self.emit(&layout, &mut w, &mut produce).map_err(io(&tmp))?;
            let file = w.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
            file.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, path).map_err(io(path))
        })();
        if result.is_err() {
            // Best effort: the temporary file is garbage now, and the error above says why.
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Checks everything the reader checks and places the tensors.
    fn layout(&self) -> Result<Layout> {
        if self.metadata.len() > MAX_METADATA_COUNT {
            return Err(err(format!(
                "{} metadata keys exceed the cap of {MAX_METADATA_COUNT}",
                self.metadata.len()
            )));
        }
        if self.tensors.len() > MAX_TENSORS {
            return Err(err(format!(
                "{} tensors exceed the cap of {MAX_TENSORS}",
                self.tensors.len()
            )));
        }
        let mut values = 0;
        for (key, value) in &self.metadata {
            check_name(key, "metadata key")?;
            values += check_value(key, value, 0)?;
        }
        if values > MAX_METADATA_VALUES {
            return Err(err(format!(
                "the metadata holds {values} values, over the cap of {MAX_METADATA_VALUES}"
            )));
        }
        let alignment = reader::alignment_of(
            self.metadata
                .iter()
                .find(|(k, _)| k == ALIGNMENT_KEY)
                .map(|(_, v)| v),
        )?;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut sizes = Vec::with_capacity(self.tensors.len());
        let mut names = HashSet::with_capacity(self.tensors.len());
        let mut next = 0usize;
        for t in &self.tensors {
            check_name(&t.name, "tensor name")?;
            if !names.insert(t.name.as_str()) {
                return Err(err(format!("duplicate tensor name {}", t.name)));
            }
            let size = reader::tensor_size(&t.name, &t.dims, t.ty)?;
            match &t.data {
                Some(data) if data.len() != size => {
                    return Err(err(format!(
                        "tensor {}: data is {} bytes, but {} {:?} takes {size}",
                        t.name,
                        data.len(),
                        t.ty.name(),
                        t.dims
                    )));
                }
                _ => {}
            }
            sizes.push(size);
            offsets.push(next);
            next = next
                .checked_add(size.div_ceil(alignment) * alignment)
                .ok_or_else(|| err("tensor data overflows the file size".into()))?;
        }
        Ok(Layout {
            alignment,
            offsets,
            sizes,
        })
    }

    fn emit(
        &self,
        layout: &Layout,
        w: &mut impl Write,
        produce: &mut dyn FnMut(&str, usize, &mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut header = Vec::new();
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut header, key);
            header.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut header, value);
        }
        for (t, &offset) in self.tensors.iter().zip(&layout.offsets) {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                header.extend_from_slice(&(d as u64).to_le_bytes());
            }
            header.extend_from_slice(&t.ty.ggml_id().to_le_bytes());
            header.extend_from_slice(&(offset as u64).to_le_bytes());
        }
        // Every tensor, the first included, starts on a multiple of the alignment; the last one
        // is padded too, as llama.cpp's and gguf-py's writers do.
        let zeros = vec![0u8; layout.alignment];
        let padding =
            |len: usize| &zeros[..(layout.alignment - len % layout.alignment) % layout.alignment];
        w.write_all(&header)?;
        w.write_all(padding(header.len()))?;
        for (t, &size) in self.tensors.iter().zip(&layout.sizes) {
            match &t.data {
                Some(data) => w.write_all(data)?,
                None => {
                    let mut counted = Counted {
                        inner: &mut *w,
                        n: 0,
                    };
                    produce(&t.name, size, &mut counted)?;
                    if counted.n != size {
                        return Err(std::io::Error::other(format!(
                            "tensor {}: the producer wrote {} bytes, but it takes {size}",
                            t.name, counted.n
                        )));
                    }
                }
            }
            w.write_all(padding(size))?;
        }
        w.flush()
    }
}

/// The producer for files without deferred tensors.
fn no_producer(name: &str, _: usize, _: &mut dyn Write) -> std::io::Result<()> {
    Err(std::io::Error::other(format!(
        "tensor {name} is deferred, but nothing produces its bytes"
    )))
}

/// A writer that counts the bytes going through it.
struct Counted<'a, W: Write> {
    inner: &'a mut W,
    n: usize,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn check_name(name: &str, what: &str) -> Result<()> {
    if name.len() > MAX_NAME_LEN {
        return Err(err(format!(
            "{what} of {} bytes exceeds the cap of {MAX_NAME_LEN}",
            name.len()
        )));
    }
    Ok(())
}

/// Checks a value against the reader's caps; returns how many values it counts as (itself and
/// every element at any depth), as the reader counts them.
fn check_value(key: &str, v: &Value, depth: usize) -> Result<usize> {
    match v {
        Value::String(s) if s.len() > MAX_STRING_LEN => Err(err(format!(
            "metadata key {key}: string of {} bytes exceeds the cap of {MAX_STRING_LEN}",
            s.len()
        ))),
        Value::Array(items) => {
            if depth + 1 > MAX_ARRAY_DEPTH {
                return Err(err(format!(
                    "metadata key {key}: arrays nest deeper than {MAX_ARRAY_DEPTH} levels"
                )));
            }
            if items.len() > MAX_ARRAY_LEN {
                return Err(err(format!(
                    "metadata key {key}: array of {} exceeds the cap of {MAX_ARRAY_LEN}",
                    items.len()
                )));
            }
            if let Some(first) = items.first() {
                if let Some(odd) = items.iter().find(|x| x.type_id() != first.type_id()) {
                    return Err(err(format!(
                        "metadata key {key}: array mixes {} and {}",
                        first.type_name(),
                        odd.type_name()
                    )));
                }
            }
            items
                .iter()
                .try_fold(1, |n, x| Ok(n + check_value(key, x, depth + 1)?))
        }
        _ => Ok(1),
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(items) => {
            // An empty array has no element to take a type from; any type reads back as empty.
            let elem = items.first().map_or(type_id::U8, Value::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|x| put_value(out, x));
        }
    }
}
