//! ICMPv4 (RFC 792, RFC 1122 3.2.2): the input stage (echo) and the helpers shared with
//! `ip4-icmp-error`.

pub mod input;

/// ICMP types that are error messages (RFC 1122 3.2.2: never answer one with an error).
#[inline(always)]
pub const fn is_error_type(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}
