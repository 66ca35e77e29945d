//! Metadata values of a GGUF file: the thirteen GGUF value types and their wire ids.

use std::fmt;

/// One metadata value. Arrays may nest (the format allows arrays of arrays) and, as written by
/// [`GgufWriter`](super::GgufWriter), hold elements of one type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

/// Wire ids of the value types (`gguf_type` in ggml).
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

impl Value {
    /// The value as an unsigned integer: any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// The value as a signed integer: any integer type whose value fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::I8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a float: `F32` or `F64` only. Integers are not floats here, so that a key
    /// written with the wrong type is reported rather than silently reinterpreted.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of the value's type, for messages ("u32", "string", "array").
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// The wire id of the value's type.
    pub(crate) fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F32(_) => type_id::F32,
            Value::F64(_) => type_id::F64,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
        }
    }

    /// A short description for error messages: the type and, for scalars, the value
    /// (`u64 4294967296`, `string "llama"`, `array of 3`). Long strings are cut.
    pub fn describe(&self) -> String {
        match self {
            Value::String(s) => {
                const SHOWN: usize = 40;
                match s.char_indices().nth(SHOWN) {
                    Some((cut, _)) => format!("string {:?}...", &s[..cut]),
                    None => format!("string {s:?}"),
                }
            }
            Value::Array(a) => format!("array of {}", a.len()),
            scalar => format!("{} {scalar}", scalar.type_name()),
        }
    }
}

/// Scalars print as their value, strings as themselves, arrays as `[a, b, c]`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => v.fmt(f),
            Value::I8(v) => v.fmt(f),
            Value::U16(v) => v.fmt(f),
            Value::I16(v) => v.fmt(f),
            Value::U32(v) => v.fmt(f),
            Value::I32(v) => v.fmt(f),
            Value::U64(v) => v.fmt(f),
            Value::I64(v) => v.fmt(f),
            Value::F32(v) => v.fmt(f),
            Value::F64(v) => v.fmt(f),
            Value::Bool(v) => v.fmt(f),
            Value::String(s) => s.fmt(f),
            Value::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    v.fmt(f)?;
                }
                f.write_str("]")
            }
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(v)
            }
        })*
    };
}

value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

/// `vec!["a", "b"].into()` or `vec![1u32, 2].into()` makes an array value.
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_convert_when_they_fit() {
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::I8(-3).as_i64(), Some(-3));
        assert_eq!(Value::F32(1.0).as_u64(), None);
        assert_eq!(Value::U32(1).as_f64(), None);
        assert_eq!(Value::F32(0.5).as_f64(), Some(0.5));
    }

    #[test]
    fn describe_names_type_and_value() {
        assert_eq!(Value::I64(-3).describe(), "i64 -3");
        assert_eq!(Value::from("llama").describe(), "string \"llama\"");
        assert_eq!(Value::from(vec![1u32, 2, 3]).describe(), "array of 3");
        let long = "x".repeat(100);
        assert!(Value::from(long.as_str()).describe().ends_with("\"..."));
        assert_eq!(Value::from(vec![1u8, 2]).to_string(), "[1, 2]");
    }
}
