//! The `wire_ethernet` target: [`netbatch_fuzzing::wire_ethernet`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_ethernet(data));
