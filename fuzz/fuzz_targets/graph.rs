//! The `graph` target: [`netbatch_fuzzing::graph`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::graph(data));
