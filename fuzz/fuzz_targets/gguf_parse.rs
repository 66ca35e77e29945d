//! Fuzz target: any bytes given to the GGUF reader give a parsed file or an error, never a
//! panic, and a parsed file's every tensor and metadata value can be read.
#![no_main]

use kostant_engine::gguf::Gguf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sum = 0u64;
    for (key, value) in g.metadata() {
        sum += key.len() as u64 + value.describe().len() as u64;
        let _ = g.get_u32_opt(key);
        let _ = g.get_f32_opt(key);
        let _ = g.get_str_opt(key);
        let _ = g.get_bool_opt(key);
        let _ = g.get_str_array_opt(key);
        let _ = g.get_i32_array_opt(key);
        let _ = g.get_f32_array_opt(key);
    }
    for t in g.tensors() {
        assert_eq!(g.tensor(&t.name), Some(t));
        let bytes = g.tensor_data(t);
        assert_eq!(bytes.len(), t.size);
        assert!(t.offset % g.alignment() == 0 && t.offset + t.size <= g.file_bytes());
        sum += bytes.iter().map(|&b| b as u64).sum::<u64>();
    }
    std::hint::black_box(sum);
});
