//! Quantized matrix kernels. See ARCHITECTURE.md.
