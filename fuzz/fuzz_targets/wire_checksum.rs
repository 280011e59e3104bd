//! The `wire_checksum` target: [`netbatch_fuzzing::wire_checksum`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_checksum(data));
