//! The crate's one error type.

/// What went wrong in the OS glue; messages name the thing that failed.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// The seccomp filter could not be built (a bug, or a rule the library rejects).
    #[error("network denial: cannot build the seccomp filter: {0}")]
    NetguardFilter(String),
    /// The kernel refused the filter (no seccomp support, or a thread could not be synced).
    #[error("network denial: the kernel refused the seccomp filter: {0}")]
    NetguardApply(String),
    /// The filter has no syscall table for this CPU architecture.
    #[error("network denial: no seccomp filter for the {0} architecture")]
    NetguardUnsupportedArch(&'static str),
}
