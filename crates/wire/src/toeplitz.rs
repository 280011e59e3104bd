//! The Toeplitz hash of receive-side scaling (Microsoft's RSS specification), as NICs
//! compute it over the IPv4 4-tuple: source address, destination address, source port,
//! destination port, in network byte order.
//!
//! For every set bit `i` of the input (most significant first), the result is XORed with
//! the 32 bits of the key starting at bit `i`. [`Toeplitz`] precomputes, for each input
//! byte position and byte value, the XOR of those windows, so hashing 12 bytes is 12
//! table lookups.

/// The key of the RSS verification suite, which most NICs and Linux use by default.
pub const MS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The 32 key bits starting at bit `bit` (bit 0 = the most significant bit of byte 0).
fn window(key: &[u8; 40], bit: usize) -> u32 {
    let byte = bit / 8;
    let mut w = 0u64;
    for k in 0..5 {
        w = (w << 8) | u64::from(key.get(byte + k).copied().unwrap_or(0));
    }
    (w >> (8 - bit % 8)) as u32
}

/// The hash computed bit by bit, as the specification states it (the reference for the
/// table-driven [`Toeplitz`]).
pub fn hash_bitwise(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut h = 0u32;
    for (i, &b) in input.iter().enumerate() {
        for j in 0..8 {
            if b & (0x80 >> j) != 0 {
                h ^= window(key, i * 8 + j);
            }
        }
    }
    h
}

/// Inputs up to this many bytes (the IPv6 4-tuple; the IPv4 one is 12).
pub const MAX_INPUT: usize = 36;

/// A table-driven Toeplitz hasher for inputs of up to [`MAX_INPUT`] bytes.
#[derive(Clone)]
pub struct Toeplitz {
    table: [[u32; 256]; MAX_INPUT],
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Toeplitz")
    }
}

impl Toeplitz {
    /// Precomputes the tables for `key` (36 KiB; an IPv4 hash reads the first 12 KiB).
    pub fn new(key: &[u8; 40]) -> Self {
        let mut table = [[0u32; 256]; MAX_INPUT];
        for (pos, row) in table.iter_mut().enumerate() {
            for (v, slot) in row.iter_mut().enumerate() {
                let mut h = 0;
                for j in 0..8 {
                    if v & (0x80 >> j) != 0 {
                        h ^= window(key, pos * 8 + j);
                    }
                }
                *slot = h;
            }
        }
        Self { table }
    }

    /// The hash of `input` (bytes beyond [`MAX_INPUT`] are ignored).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        let mut h = 0;
        for (row, &b) in self.table.iter().zip(input) {
            // A byte indexes a 256-entry row, so `get` always finds it.
            h ^= row.get(usize::from(b)).copied().unwrap_or(0);
        }
        h
    }

    /// The hash of an IPv4 4-tuple (`ports` None: addresses only, as for fragments and
    /// protocols without ports).
    #[inline]
    pub fn ipv4(&self, src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>) -> u32 {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&src);
        b[4..8].copy_from_slice(&dst);
        match ports {
            Some((s, d)) => {
                b[8..10].copy_from_slice(&s.to_be_bytes());
                b[10..12].copy_from_slice(&d.to_be_bytes());
                self.hash(&b)
            }
            None => self.hash(&b[..8]),
        }
    }

    /// The hash of an IPv6 4-tuple (`ports` None: addresses only), as RSS hashes it:
    /// source, destination, source port, destination port.
    #[inline]
    pub fn ipv6(&self, src: [u8; 16], dst: [u8; 16], ports: Option<(u16, u16)>) -> u32 {
        let mut b = [0u8; 36];
        b[..16].copy_from_slice(&src);
        b[16..32].copy_from_slice(&dst);
        match ports {
            Some((s, d)) => {
                b[32..34].copy_from_slice(&s.to_be_bytes());
                b[34..36].copy_from_slice(&d.to_be_bytes());
                self.hash(&b)
            }
            None => self.hash(&b[..32]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (source, source port, destination, destination port, hash with ports, hash of
    /// the addresses only).
    type Vector = ([u8; 4], u16, [u8; 4], u16, u32, u32);

    /// The IPv4 rows of the RSS verification suite.
    const VECTORS: [Vector; 5] = [
        (
            [66, 9, 149, 187],
            2794,
            [161, 142, 100, 80],
            1766,
            0x51cc_c178,
            0x323e_8fc2,
        ),
        (
            [199, 92, 111, 2],
            14230,
            [65, 69, 140, 83],
            4739,
            0xc626_b0ea,
            0xd718_262a,
        ),
        (
            [24, 19, 198, 95],
            12898,
            [12, 22, 207, 184],
            38024,
            0x5c2b_394a,
            0xd2d0_a5de,
        ),
        (
            [38, 27, 205, 30],
            48228,
            [209, 142, 163, 6],
            2217,
            0xafc7_327f,
            0x8298_9176,
        ),
        (
            [153, 39, 163, 191],
            44251,
            [202, 188, 127, 2],
            1303,
            0x10e8_28a2,
            0x5d18_09c5,
        ),
    ];

    #[test]
    fn microsoft_rss_verification_vectors() {
        let t = Toeplitz::new(&MS_KEY);
        for (src, sp, dst, dp, with_ports, addrs) in VECTORS {
            assert_eq!(t.ipv4(src, dst, Some((sp, dp))), with_ports, "{src:?}:{sp}");
            assert_eq!(t.ipv4(src, dst, None), addrs, "{src:?}");
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&src);
            b[4..8].copy_from_slice(&dst);
            b[8..10].copy_from_slice(&sp.to_be_bytes());
            b[10..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(hash_bitwise(&MS_KEY, &b), with_ports);
        }
    }

    /// The IPv6 rows of the RSS verification suite ("Verifying the RSS Hash
    /// Calculation"): (source, source port, destination, destination port, hash with
    /// ports, hash of the addresses only).
    #[test]
    fn microsoft_rss_ipv6_verification_vectors() {
        let t = Toeplitz::new(&MS_KEY);
        let rows: [(&str, u16, &str, u16, u32, u32); 3] = [
            (
                "3ffe:2501:200:1fff::7",
                2794,
                "3ffe:2501:200:3::1",
                1766,
                0x4020_7d3d,
                0x2cc1_8cd5,
            ),
            (
                "3ffe:501:8::260:97ff:fe40:efab",
                14230,
                "ff02::1",
                4739,
                0xdde5_1bbf,
                0x0f0c_461c,
            ),
            (
                "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
                44251,
                "fe80::200:f8ff:fe21:67cf",
                38024,
                0x02d1_feef,
                0x4b61_e985,
            ),
        ];
        for (src, sp, dst, dp, with_ports, addrs) in rows {
            let s = src.parse::<core::net::Ipv6Addr>().unwrap().octets();
            let d = dst.parse::<core::net::Ipv6Addr>().unwrap().octets();
            assert_eq!(t.ipv6(s, d, Some((sp, dp))), with_ports, "{src}:{sp}");
            assert_eq!(t.ipv6(s, d, None), addrs, "{src}");
            let mut b = [0u8; 36];
            b[..16].copy_from_slice(&s);
            b[16..32].copy_from_slice(&d);
            b[32..34].copy_from_slice(&sp.to_be_bytes());
            b[34..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(hash_bitwise(&MS_KEY, &b), with_ports);
        }
    }

    proptest::proptest! {
        #[test]
        fn table_equals_bitwise(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=36)) {
            let t = Toeplitz::new(&MS_KEY);
            proptest::prop_assert_eq!(t.hash(&input), hash_bitwise(&MS_KEY, &input));
        }
    }
}
