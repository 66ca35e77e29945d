//! The one error type of the kernels crate. Messages start lower case and name what was wrong.

use crate::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A slice handed to a kernel has the wrong number of elements or bytes.
    #[error("{what}: expected {expected} {unit}, got {got}")]
    Length {
        what: &'static str,
        unit: &'static str,
        expected: usize,
        got: usize,
    },
    /// A row length is not a whole number of the format's blocks.
    #[error("{what}: {len} elements is not a whole number of {ty} blocks of {block_len}")]
    PartialBlock {
        what: &'static str,
        ty: GgmlType,
        len: usize,
        block_len: usize,
    },
    /// A byte buffer that is not a whole number of the format's blocks.
    #[error("{what}: {len} bytes is not a whole number of {ty} blocks of {block_bytes} bytes")]
    PartialBlockBytes {
        what: &'static str,
        ty: GgmlType,
        len: usize,
        block_bytes: usize,
    },
    /// A shape whose byte or element count does not fit in `usize`.
    #[error("{what}: shape {rows} x {cols} overflows the address space")]
    Overflow {
        what: &'static str,
        rows: usize,
        cols: usize,
    },
    /// A matrix of a type this kernel does not take.
    #[error("{what}: type {ty} is not a float type (F32, F16, BF16)")]
    Type { what: &'static str, ty: GgmlType },
    /// The rayon thread pool could not be set up as asked.
    #[error("thread pool: {0}")]
    ThreadPool(String),
}
