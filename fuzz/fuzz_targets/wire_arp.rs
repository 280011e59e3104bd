//! The `wire_arp` target: [`netbatch_fuzzing::wire_arp`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_arp(data));
