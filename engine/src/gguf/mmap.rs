//! The one `unsafe` block of the engine crate: mapping a model file read-only.

use std::fs::File;

use memmap2::Mmap;

/// Maps all of `file` read-only.
#[allow(unsafe_code)]
pub(super) fn map_read_only(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: mapping is unsafe because the bytes behind the returned `&[u8]` would change (or,
    // if the file were truncated, fault) should anyone modify the file while it is mapped, and
    // Rust assumes shared bytes do not change. Kostant treats model files as immutable assets:
    // it maps them read-only and never writes to a file it has mapped; its own writer
    // (`GgufWriter::write_to`) writes a new file and renames it into place, which leaves existing
    // mappings of the old file intact. An outside process editing a model file in place is the
    // same hazard every mmap-based model loader accepts; every read is bounds-checked against the
    // length seen at open, so such an edit can give wrong bytes or a fault, never a read outside
    // the mapping.
    unsafe { Mmap::map(file) }
}
