//! The `wire_ipv4` target: [`netbatch_fuzzing::wire_ipv4`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_ipv4(data));
