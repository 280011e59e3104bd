//! The `wire_icmpv6` target: [`netbatch_fuzzing::wire_icmpv6`] on each input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netbatch_fuzzing::wire_icmpv6(data));
