//! The `wire_vlan` target: [`netbatch_fuzzing::wire_vlan`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_vlan(data));
