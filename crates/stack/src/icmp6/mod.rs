//! ICMPv6 (RFC 4443) messages for us: `icmp6-input`. The errors netbatch sends are
//! `crate::ip6::icmp_error`'s; neighbour discovery messages go on to `crate::nd`.

pub mod input;
