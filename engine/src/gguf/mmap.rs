//! The engine crate's `unsafe`: mapping a model file read-only, and handing pages back.

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

/// Tells the OS this process will not read `map[offset..offset + len]` again (the weights it
/// holds were copied out, repacked), so those pages leave the resident set. Only whole pages
/// inside the range are released. A failure only means the pages stay resident, so it is
/// ignored.
#[allow(unsafe_code)]
pub(super) fn release(map: &Mmap, offset: usize, len: usize) {
    #[cfg(unix)]
    {
        // The smallest page size in use; where pages are larger (16 KiB on some arm64 Android
        // devices) a misaligned call fails and the pages simply stay resident.
        const PAGE: usize = 4096;
        let start = offset.div_ceil(PAGE) * PAGE;
        let end = (offset + len) / PAGE * PAGE;
        if end > start && end <= map.len() {
            // SAFETY: MADV_DONTNEED on a read-only, file-backed mapping only drops this
            // process's page-table entries: a later read faults the same bytes back in from
            // the file (the mapping is never written, so nothing can be lost), and the range
            // lies inside the mapping. The only cost of being wrong about "never read again" is
            // a page fault.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
    #[cfg(not(unix))]
    let _ = (map, offset, len);
}
