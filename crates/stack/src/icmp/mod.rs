//! ICMPv4 (RFC 792, RFC 1122 3.2.2): the input stage (echo). Errors are made by
//! `ip4-icmp-error`.

pub mod input;
