//! Any byte string: `GgufFile::from_bytes` must return, never panic, and a file that
//! opens must have every tensor's bytes and every metadata value readable.

#![no_main]

use brass::gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sum = 0u64;
    for t in file.tensors() {
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes);
        assert_eq!(file.tensor(&t.name), Some(t));
        sum = bytes.iter().fold(sum, |s, &b| s.wrapping_add(u64::from(b)));
    }
    for (key, value) in file.metadata() {
        // Identity, not ==: a NaN value is not equal to itself.
        assert!(file.get(key).is_some_and(|v| std::ptr::eq(v, value)));
        sum = sum.wrapping_add(format!("{value} {value:#}").len() as u64);
    }
    std::hint::black_box(sum);
});
