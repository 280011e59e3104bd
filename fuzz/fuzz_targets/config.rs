//! The `config` target: [`netbatch_fuzzing::config`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::config(data));
