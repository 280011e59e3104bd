//! Big-endian (network order) reads and writes at a byte offset: the one set of
//! byte-order helpers of the workspace. Each checks its range once and panics when it is
//! out of the buffer, so callers use them where the length is already known (after a
//! view's `check_len`, or on a fixed-size header).

/// Reads a big-endian `u16` at `at`.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "fixed fields inside a length the caller checked; out of range panics (documented)"
)]
pub fn get_u16(b: &[u8], at: usize) -> u16 {
    match b[at..at + 2] {
        [x, y] => u16::from_be_bytes([x, y]),
        _ => unreachable!("a two-byte range has two bytes"),
    }
}

/// Reads a big-endian `u32` at `at`.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "fixed fields inside a length the caller checked; out of range panics (documented)"
)]
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    match b[at..at + 4] {
        [w, x, y, z] => u32::from_be_bytes([w, x, y, z]),
        _ => unreachable!("a four-byte range has four bytes"),
    }
}

/// Reads an IPv4 address (four bytes, network order) at `at`.
#[inline(always)]
pub fn get_ipv4(b: &[u8], at: usize) -> core::net::Ipv4Addr {
    core::net::Ipv4Addr::from(get_u32(b, at))
}

/// Writes a big-endian `u16` at `at`.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "fixed fields inside a length the caller checked; out of range panics (documented)"
)]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `at`.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "fixed fields inside a length the caller checked; out of range panics (documented)"
)]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_order_round_trips() {
        let mut b = [0u8; 7];
        put_u16(&mut b, 1, 0x1234);
        put_u32(&mut b, 3, 0xdead_beef);
        assert_eq!(b, [0, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!((get_u16(&b, 1), get_u32(&b, 3)), (0x1234, 0xdead_beef));
    }
}
