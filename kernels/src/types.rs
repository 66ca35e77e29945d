//! The tensor element types the kernels understand, with ggml's ids, names and block geometry,
//! and `Weights`, a checked view of one packed weight matrix.

use std::fmt;

use crate::KernelError;

/// A GGUF tensor type the kernels can dequantize and multiply.
#[allow(non_camel_case_types)] // ggml's spellings, so log lines and file dumps read the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    Q3_K,
    Q2_K,
    BF16,
}

impl GgmlType {
    /// Every supported type (the README lists them in this order).
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::Q3_K,
        GgmlType::Q2_K,
        GgmlType::BF16,
    ];

    /// Maps the `ggml_type` id stored in a GGUF tensor header; `None` for types we do not run.
    pub fn from_ggml_id(id: u32) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    pub fn ggml_id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
            GgmlType::Q3_K => 11,
            GgmlType::Q2_K => 10,
            GgmlType::BF16 => 30,
        }
    }

    /// The name as ggml spells it ("Q4_1", "F16").
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ4_XS => "IQ4_XS",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::BF16 => "BF16",
        }
    }

    /// Parses a ggml type name, ignoring ASCII case ("q4_k" and "Q4_K" both work).
    pub fn from_name(s: &str) -> Option<GgmlType> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// Elements per block: 1 for the float types, 32 for the legacy quants and IQ4_NL, 256 for
    /// K-quants and IQ4_XS.
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4_NL => 32,
            GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ4_XS
            | GgmlType::Q3_K
            | GgmlType::Q2_K => 256,
        }
    }

    /// Bytes per block, as laid out in a GGUF file.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => size_of::<crate::formats::q4_0::BlockQ4_0>(),
            GgmlType::Q4_1 => size_of::<crate::formats::q4_1::BlockQ4_1>(),
            GgmlType::Q5_0 => size_of::<crate::formats::q5_0::BlockQ5_0>(),
            GgmlType::Q5_1 => size_of::<crate::formats::q5_1::BlockQ5_1>(),
            GgmlType::Q8_0 => size_of::<crate::formats::q8_0::BlockQ8_0>(),
            GgmlType::Q4_K => size_of::<crate::formats::q4_k::BlockQ4K>(),
            GgmlType::Q5_K => size_of::<crate::formats::q5_k::BlockQ5K>(),
            GgmlType::Q6_K => size_of::<crate::formats::q6_k::BlockQ6K>(),
            GgmlType::IQ4_NL => size_of::<crate::formats::iq4_nl::BlockIq4Nl>(),
            GgmlType::IQ4_XS => size_of::<crate::formats::iq4_xs::BlockIq4Xs>(),
            GgmlType::Q3_K => size_of::<crate::formats::q3_k::BlockQ3K>(),
            GgmlType::Q2_K => size_of::<crate::formats::q2_k::BlockQ2K>(),
        }
    }

    /// Bytes of one row of `cols` elements; `None` if `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return None;
        }
        (cols / self.block_len()).checked_mul(self.block_bytes())
    }

    /// `row_bytes` as a `Result`, naming `what` in the error.
    pub(crate) fn checked_row_bytes(
        self,
        what: &'static str,
        cols: usize,
    ) -> Result<usize, KernelError> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(KernelError::PartialBlock {
                what,
                ty: self,
                len: cols,
                block_len: self.block_len(),
            });
        }
        self.row_bytes(cols).ok_or(KernelError::Overflow {
            what,
            rows: 1,
            cols,
        })
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One packed weight matrix of `rows` rows by `cols` columns, row-major, in its GGUF layout.
///
/// The fields are public so callers can destructure it; `matmul` re-checks them, so a
/// hand-built `Weights` with inconsistent fields gives an error rather than a bad read.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    pub ty: GgmlType,
    /// (rows, row_bytes(cols)) bytes.
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> Weights<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` elements of type `ty`.
    pub fn new(
        ty: GgmlType,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let w = Weights {
            ty,
            data,
            rows,
            cols,
        };
        w.check()?;
        Ok(w)
    }

    /// Bytes per row; errors if the fields disagree with each other.
    pub(crate) fn check(&self) -> Result<usize, KernelError> {
        let row_bytes = self.ty.checked_row_bytes("weights", self.cols)?;
        let total = self
            .rows
            .checked_mul(row_bytes)
            .ok_or(KernelError::Overflow {
                what: "weights",
                rows: self.rows,
                cols: self.cols,
            })?;
        if self.data.len() != total {
            return Err(KernelError::Length {
                what: "weights",
                unit: "bytes",
                expected: total,
                got: self.data.len(),
            });
        }
        Ok(row_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_geometry_match_ggml() {
        let expect = [
            (GgmlType::F32, 0, "F32", 1, 4),
            (GgmlType::F16, 1, "F16", 1, 2),
            (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
            (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
            (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
            (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
            (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
            (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
            (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
            (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
            (GgmlType::IQ4_NL, 20, "IQ4_NL", 32, 18),
            (GgmlType::IQ4_XS, 23, "IQ4_XS", 256, 136),
            (GgmlType::Q3_K, 11, "Q3_K", 256, 110),
            (GgmlType::Q2_K, 10, "Q2_K", 256, 84),
            (GgmlType::BF16, 30, "BF16", 1, 2),
        ];
        for (ty, id, name, len, bytes) in expect {
            assert_eq!(ty.ggml_id(), id);
            assert_eq!(GgmlType::from_ggml_id(id), Some(ty));
            assert_eq!(ty.name(), name);
            assert_eq!(GgmlType::from_name(name), Some(ty));
            assert_eq!(GgmlType::from_name(&name.to_lowercase()), Some(ty));
            assert_eq!(ty.block_len(), len);
            assert_eq!(ty.block_bytes(), bytes);
        }
        for id in [4, 5, 9, 15, 16, 22, u32::MAX] {
            assert_eq!(GgmlType::from_ggml_id(id), None);
        }
        assert_eq!(GgmlType::from_name("iq2_xxs"), None);
        assert_eq!(GgmlType::from_name(""), None);
    }

    #[test]
    fn row_bytes_rejects_partial_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(2 * 144));
        assert_eq!(GgmlType::F16.row_bytes(3), Some(6));
        assert_eq!(GgmlType::Q4_1.row_bytes(33), None);
        assert_eq!(GgmlType::Q6_K.row_bytes(128), None);
        assert_eq!(GgmlType::F32.row_bytes(usize::MAX), None);
        assert_eq!(GgmlType::Q8_0.row_bytes(0), Some(0));
    }

    #[test]
    fn weights_new_checks_the_byte_count() {
        let data = vec![0u8; 2 * 20];
        assert!(Weights::new(GgmlType::Q4_1, &data, 2, 32).is_ok());
        assert!(matches!(
            Weights::new(GgmlType::Q4_1, &data, 3, 32),
            Err(KernelError::Length { .. })
        ));
        assert!(matches!(
            Weights::new(GgmlType::Q4_1, &data, 2, 31),
            Err(KernelError::PartialBlock { .. })
        ));
        assert!(matches!(
            Weights::new(GgmlType::F32, &data, usize::MAX, 2),
            Err(KernelError::Overflow { .. })
        ));
        let msg = Weights::new(GgmlType::Q4_1, &data, 3, 32)
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "weights: expected 60 bytes, got 40");
    }
}
