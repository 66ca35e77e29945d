//! One module per tensor format: weight formats (f32, f16, q4_0, q4_1, q8_0, q4_k, q6_k) and
//! the activation formats they are dotted against (q8_1, q8_k).

pub(crate) mod f16;
pub(crate) mod f32;
pub(crate) mod q4_0;
pub(crate) mod q4_1;
pub(crate) mod q4_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;
pub(crate) mod q8_1;
pub(crate) mod q8_k;
