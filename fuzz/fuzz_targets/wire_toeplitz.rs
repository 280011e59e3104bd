//! The `wire_toeplitz` target: [`netbatch_fuzzing::wire_toeplitz`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_toeplitz(data));
