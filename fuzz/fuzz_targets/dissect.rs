//! The `dissect` target: [`netbatch_fuzzing::dissect`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::dissect(data));
