//! The `wire_tcp` target: [`netbatch_fuzzing::wire_tcp`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_tcp(data));
