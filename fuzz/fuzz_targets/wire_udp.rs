//! The `wire_udp` target: [`netbatch_fuzzing::wire_udp`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_udp(data));
