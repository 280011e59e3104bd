//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! The checksum is the ones' complement of the ones' complement sum of the data taken as
//! big-endian 16-bit words (an odd trailing byte is padded with a zero byte).
//!
//! Sums are carried in a wide `u64` accumulator: [`sum`] adds data to it, [`pseudo_header_v4`]
//! starts one with the IPv4 pseudo-header, [`fold`] reduces it to 16 bits and [`finish`] gives
//! the value to store in a header. Any `u64` is a valid accumulator: additions into it use an
//! end-around carry, which is exact because 2^64 ≡ 1 (mod 0xffff), as is 2^16.
//!
//! To verify a received header, sum it *including* its checksum field: it is correct when the
//! folded sum is `0xffff` (equivalently, when [`finish`] gives 0).

use core::net::Ipv4Addr;

/// Adds `b` to the accumulator `a` with an end-around carry.
#[inline(always)]
fn add(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    // If the addition wrapped, `s <= u64::MAX - 1`, so adding the carry cannot overflow.
    s + carry as u64
}

/// Largest slice [`sum_block`] accepts: each 8-byte chunk adds less than 2^32 to each of its two
/// `u64` lanes, so 2^32 - 1 chunks cannot overflow them.
const BLOCK: usize = (u32::MAX as usize).saturating_mul(8);

/// Ones' complement sum of `data` (at most [`BLOCK`] bytes), as big-endian words, not folded
/// (at most 0x2fffe).
///
/// The bulk is loaded as native-endian `u64`s, split into two `u32` halves and added into two
/// `u64` lanes with no carry handling (none can be lost, see [`BLOCK`]). This is valid because:
///
/// * a `u32` made of the 16-bit words `x` and `y` equals `x * 2^16 + y ≡ x + y (mod 0xffff)`, so
///   summing 32-bit (or wider) pieces and folding gives the 16-bit ones' complement sum;
/// * byte order only swaps the two bytes of each 16-bit word, and swapping the bytes of a
///   16-bit value is multiplication by 2^8 modulo 0xffff, which commutes with the sum (RFC 1071
///   §2(B)): the folded native-endian sum is byte-swapped once at the end.
///
/// The 0-7 trailing bytes are added as a native `u32` (if 4 remain) and big-endian words, with
/// an odd last byte padded with zero on its right.
// Indexed: the form without indexing (`as_chunks`, `split_first_chunk`) made `sum_large`
// provably panic-free, and LLVM then allocated registers worse in its callers (1-4 more
// instructions a packet in ip4-input and udp-input, scripts/instructions).
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "8-byte chunks; the < 8-byte remainder is indexed below `rest.len()`, tested first"
)]
fn sum_block(data: &[u8]) -> u64 {
    let mut lo: u64 = 0;
    let mut hi: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        lo += w & 0xffff_ffff;
        hi += w >> 32;
    }
    let rest = chunks.remainder();
    let mut i = 0;
    if rest.len() >= 4 {
        lo += u64::from(u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]));
        i = 4;
    }
    // `fold` of the native-endian sum, then swap into big-endian word order (a no-op on
    // big-endian targets: `to_be` swaps exactly when the target is little-endian).
    let native = fold(add(lo, hi));
    let mut be = u64::from(native.to_be());
    if rest.len() - i >= 2 {
        be += u64::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
        i += 2;
    }
    if i < rest.len() {
        be += u64::from(rest[i]) << 8;
    }
    be
}

/// Whether a fixed-size block of whole 32-bit words (an IPv4 header without options)
/// sums to 0xffff, i.e. its checksum verifies. Sums native-endian 64-bit words with an
/// end-around carry (and a last 32-bit one): swapping the bytes of a 16-bit word is a
/// rotation modulo 0xffff that maps 0xffff to itself, so the test needs no byte swaps
/// (RFC 1071 2(B)), and 2^64 ≡ 1 (mod 0xffff), so the wide words need no splitting.
// Indexed by constants once unrolled; `as_chunks` left a loop here (ip4-input: +17
// instructions a packet, scripts/instructions).
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "`i + 8 <= N` and `i + 4 <= N` bound every index into the `[u8; N]`"
)]
pub fn verify_words<const N: usize>(d: &[u8; N]) -> bool {
    const { assert!(N.is_multiple_of(4), "verify_words takes whole 32-bit words") };
    let mut s = 0u64;
    let mut i = 0;
    while i + 8 <= N {
        let w = [
            d[i],
            d[i + 1],
            d[i + 2],
            d[i + 3],
            d[i + 4],
            d[i + 5],
            d[i + 6],
            d[i + 7],
        ];
        s = add(s, u64::from_ne_bytes(w));
        i += 8;
    }
    if i < N {
        s = add(
            s,
            u64::from(u32::from_ne_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]])),
        );
    }
    // `fold(s) == 0xffff` without folding (an end-around sum is 0 only for all-zero
    // data).
    verifies(s)
}

/// Whether an unfolded accumulator of a checksummed block (its checksum field included)
/// verifies, i.e. [`fold`] gives 0xffff, without folding: folding keeps the residue
/// modulo 0xffff and gives 0 only for 0, so the test is for a non-zero multiple of
/// 0xffff. 0xffff is odd, so `acc` is one exactly when `acc` times its inverse modulo
/// 2^64 is at most `u64::MAX / 0xffff` (a multiply and a compare, where `%` costs a wide
/// multiply).
#[inline(always)]
pub fn verifies(acc: u64) -> bool {
    const INV: u64 = 0xfffe_fffe_fffe_ffff;
    const { assert!(0xffff_u64.wrapping_mul(INV) == 1) };
    acc != 0 && acc.wrapping_mul(INV) <= u64::MAX / 0xffff
}

/// Inputs up to this length take the word-at-a-time path: for a few bytes (a UDP header
/// and a one-byte payload, sequence bytes patched by a generator) the setup of the wide
/// loop costs more than it saves.
const SMALL: usize = 16;

/// Sum of a short slice, one big-endian word at a time (at most 8 words + a byte, so no
/// overflow is possible).
// Inlined into every `sum` caller (ip4-input, udp-input, ...): the `as_chunks` and
// slice-pattern forms cost those stages 3-4 instructions a packet (scripts/instructions).
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "`chunks_exact(2)` yields two-byte chunks: `w[0]` and `w[1]` are in bounds"
)]
fn sum_small(d: &[u8]) -> u64 {
    let mut s = 0u64;
    let mut words = d.chunks_exact(2);
    for w in &mut words {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        s += u64::from(*b) << 8;
    }
    s
}

/// Sum of a fixed-size block made of whole 32-bit words (`N` a multiple of 4), e.g. an
/// IPv4 header without options (`N = 20`): the compiler unrolls it into `N / 4` loads and
/// adds, with no length checks left.
#[inline(always)]
#[expect(
    clippy::indexing_slicing,
    reason = "`i < N`, `N` a multiple of 4, bounds every index into the `[u8; N]`"
)]
pub fn sum_words<const N: usize>(d: &[u8; N]) -> u64 {
    const { assert!(N.is_multiple_of(4), "sum_words takes whole 32-bit words") };
    let mut s = 0u64;
    let mut i = 0;
    while i < N {
        s += u64::from(u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]));
        i += 4;
    }
    s
}

/// Adds the 16-bit big-endian words of `data` to the accumulator `acc` (RFC 1071).
///
/// An odd trailing byte is padded with a zero byte, so only the last slice of a multi-part sum
/// may have odd length. The result is not folded; pass it on to further `sum` calls, then to
/// [`fold`] or [`finish`].
#[inline(always)]
pub fn sum(data: &[u8], acc: u64) -> u64 {
    if data.len() <= SMALL {
        return add(acc, sum_small(data));
    }
    sum_large(data, acc)
}

/// The wide loop, kept out of line so that [`sum`]'s short path inlines at every caller.
#[inline(never)]
fn sum_large(data: &[u8], acc: u64) -> u64 {
    let mut acc = acc;
    let mut rest = data;
    while rest.len() > BLOCK {
        let (head, tail) = rest.split_at(BLOCK);
        acc = add(acc, sum_block(head));
        rest = tail;
    }
    add(acc, sum_block(rest))
}

/// Folds the carries of an accumulator into 16 bits (end-around carry).
///
/// The result is 0 only when `acc` is 0; a non-zero multiple of 0xffff folds to 0xffff.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let mut s = (acc & 0xffff_ffff) + (acc >> 32); // < 2^33
    s = (s & 0xffff) + (s >> 16); // <= 0x2fffe
    s = (s & 0xffff) + (s >> 16); // <= 0x10001
    s = (s & 0xffff) + (s >> 16); // <= 0xffff
    s as u16
}

/// The checksum for an accumulator: the ones' complement of [`fold`].
#[inline]
pub fn finish(acc: u64) -> u16 {
    !fold(acc)
}

/// The Internet checksum of `data`: the value to store in a header whose checksum field is
/// zero while summing.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data, 0))
}

/// Starts an accumulator with the IPv4 pseudo-header used by UDP and TCP (RFC 768, RFC 9293):
/// source and destination address, zero byte, protocol, and the transport length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u64 {
    let s = src.to_bits();
    let d = dst.to_bits();
    u64::from(s >> 16)
        + u64::from(s & 0xffff)
        + u64::from(d >> 16)
        + u64::from(d & 0xffff)
        + u64::from(protocol)
        + u64::from(length)
}

/// Starts an accumulator with the IPv6 pseudo-header used by upper-layer checksums (RFC 8200
/// §8.1): source and destination address, the 32-bit upper-layer packet length, three zero
/// bytes and the next header value of the upper-layer protocol (not of an extension header).
///
/// A 32-bit word is congruent to the sum of its two 16-bit halves modulo 0xffff, so the
/// addresses are added as four `u32`s each; the total stays below 2^36.
#[inline]
pub fn pseudo_header_v6(
    src: core::net::Ipv6Addr,
    dst: core::net::Ipv6Addr,
    next_header: u8,
    length: u32,
) -> u64 {
    let words = |a: core::net::Ipv6Addr| {
        let b = a.to_bits();
        u64::from(b as u32)
            + u64::from((b >> 32) as u32)
            + u64::from((b >> 64) as u32)
            + u64::from((b >> 96) as u32)
    };
    words(src) + words(dst) + u64::from(length) + u64::from(next_header)
}

/// Adds the folded sum `part` of a block that sits at an odd (`odd`) or even offset of
/// the data being summed: a block at an odd offset contributes its sum byte-swapped
/// (RFC 1071 2(B), byte-order independence). Lets the sums of pieces (the segments of a
/// GRO super-packet) combine into the sum of their concatenation.
#[inline]
pub fn add_part(acc: u64, part: u16, odd: bool) -> u64 {
    acc + u64::from(if odd { part.swap_bytes() } else { part })
}

/// Updates checksum `hc` after a 16-bit field changed from `old` to `new` (RFC 1624, eqn. 3:
/// `HC' = ~(~HC + ~m + m')`).
///
/// Unlike RFC 1141's `HC + m + ~m'`, this gives the same result as a full recomputation,
/// including 0x0000 rather than 0xffff (RFC 1624 §3-4), as long as the covered data is not
/// all zero. The field must sit at an even offset of the checksummed data.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !sum16(sum16(!hc, !old), new)
}

/// The ones' complement sum of two 16-bit words: their sum, at most 0x1fffe, needs one
/// fold (RFC 1071).
#[inline(always)]
pub fn sum16(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// Updates checksum `hc` by `add`, the ones' complement sum `Σ(~m + m')` of the changed
/// words already folded to 16 bits (RFC 1624 eqn. 3, `HC' = ~(~HC + add)`).
#[inline(always)]
pub fn add16(hc: u16, add: u16) -> u16 {
    !sum16(!hc, add)
}

/// [`update16`] for a field that decreased by `d` without wrapping (`new = old - d`, as
/// a TTL decrement does to the TTL/protocol word): `~m + m'` is then `~d` whatever `m`,
/// so the update needs neither the old value nor more than one fold.
#[inline]
pub fn update16_sub(hc: u16, d: u16) -> u16 {
    add16(hc, !d)
}

/// Updates checksum `hc` after a 32-bit field (such as an IPv4 address) changed from `old` to
/// `new`; [`update16`] applied to both halves at once.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let old = !old;
    finish(
        u64::from(!hc)
            + u64::from(old >> 16)
            + u64::from(old & 0xffff)
            + u64::from(new >> 16)
            + u64::from(new & 0xffff),
    )
}

/// Plain RFC 1071 implementation kept as the test oracle.
///
/// Sums one big-endian 16-bit word at a time with an end-around carry after each addition;
/// slow but obviously right.
pub mod reference {
    /// Ones' complement sum of `data` folded to 16 bits (0 only for all-zero data).
    pub fn ones_complement_sum(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        let mut bytes = data.iter().copied();
        while let Some(hi) = bytes.next() {
            let lo = bytes.next().unwrap_or(0);
            s += u32::from(u16::from_be_bytes([hi, lo]));
            if s > 0xffff {
                s = (s & 0xffff) + 1;
            }
        }
        s as u16
    }

    /// The Internet checksum of `data`: `!ones_complement_sum(data)`.
    pub fn checksum(data: &[u8]) -> u16 {
        !ones_complement_sum(data)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// Ones' complement addition of two folded 16-bit sums (oracle helper).
    fn oc_add(a: u16, b: u16) -> u16 {
        let s = u32::from(a) + u32::from(b);
        if s > 0xffff {
            ((s & 0xffff) + 1) as u16
        } else {
            s as u16
        }
    }

    /// Folds a u64 one 16-bit word at a time (oracle helper).
    fn oc_fold64(x: u64) -> u16 {
        let mut s = 0;
        for k in 0..4 {
            s = oc_add(s, (x >> (16 * k)) as u16);
        }
        s
    }

    proptest! {
        /// Sums of pieces, each summed on its own from an even start, combine into the
        /// sum of the whole (the reference sums the whole in one pass).
        #[test]
        fn parts_combine_into_the_whole(data in proptest::collection::vec(any::<u8>(), 0..600),
                                        cuts in proptest::collection::vec(0usize..600, 0..6)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.push(0);
            cuts.push(data.len());
            cuts.sort_unstable();
            let mut acc = 0;
            for w in cuts.windows(2) {
                acc = add_part(acc, fold(sum(&data[w[0]..w[1]], 0)), w[0] % 2 == 1);
            }
            prop_assert_eq!(
                u32::from(fold(acc)) % 0xffff,
                u32::from(reference::ones_complement_sum(&data)) % 0xffff
            );
        }
    }

    #[test]
    fn rfc1071_section3_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        assert_eq!(reference::ones_complement_sum(&data), 0xddf2);
        assert_eq!(reference::checksum(&data), 0x220d);
        // With the checksum appended, the data sums to -0.
        let mut with = data.to_vec();
        with.extend_from_slice(&[0x22, 0x0d]);
        assert_eq!(fold(sum(&with, 0)), 0xffff);
        assert_eq!(checksum(&with), 0);
    }

    /// `update16`'s chained 16-bit adds are RFC 1624 eqn. 3 with the general fold.
    #[test]
    fn update16_is_eqn3_folded() {
        proptest::proptest!(|(hc in proptest::num::u16::ANY, old in proptest::num::u16::ANY, new in proptest::num::u16::ANY)| {
            let want = finish(u64::from(!hc) + u64::from(!old) + u64::from(new));
            proptest::prop_assert_eq!(update16(hc, old, new), want);
        });
        for (hc, old, new) in [
            (0, 0, 0),
            (0xffff, 0xffff, 0xffff),
            (0, 0xffff, 0),
            (0xffff, 0, 0xffff),
        ] {
            assert_eq!(
                update16(hc, old, new),
                finish(u64::from(!hc) + u64::from(!old) + u64::from(new))
            );
        }
    }

    #[test]
    fn update16_sub_is_update16_of_a_decrease() {
        // Every checksum, against TTL/protocol words whose TTL can be decremented.
        for hc in 0..=u16::MAX {
            for old in [0x0100u16, 0x0111, 0x0206, 0x4011, 0x8001, 0xff11, 0xffff] {
                assert_eq!(
                    update16_sub(hc, 0x0100),
                    update16(hc, old, old - 0x0100),
                    "{hc:#x} {old:#x}"
                );
            }
            assert_eq!(update16_sub(hc, 7), update16(hc, 0x1234, 0x1234 - 7));
        }
    }

    #[test]
    fn verify_words_agrees_with_folding() {
        let mut h = [
            0x45u8, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(verify_words(&h));
        assert!(!verify_words(&[0u8; 20]), "all zero sums to 0, not 0xffff");
        assert!(verify_words(&[0xffu8; 20]));
        assert!(verify_words(&[0xffu8; 8]), "an end-around sum of all ones");
        assert!(!verify_words(&[0x01u8; 24]));
        for at in 0..20 {
            for x in [1u8, 0x80, 0xff] {
                h[at] ^= x;
                assert_eq!(verify_words(&h), fold(sum(&h, 0)) == 0xffff, "{at} {x}");
                h[at] ^= x;
            }
        }
    }

    /// `verifies` is folding and comparing with 0xffff, for the edges of the arithmetic
    /// (0, the multiples of 0xffff, the largest accumulators) and any accumulator.
    #[test]
    fn verifies_agrees_with_folding() {
        for acc in [
            0u64,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0xffff * 0xffff,
            0xffff_0000_0000,
            u64::MAX,
            u64::MAX - 1,
            u64::MAX / 0xffff * 0xffff,
        ] {
            assert_eq!(verifies(acc), fold(acc) == 0xffff, "{acc:#x}");
        }
        proptest::proptest!(|(acc in proptest::num::u64::ANY, k in 0u64..0x1_0001_0001)| {
            proptest::prop_assert_eq!(verifies(acc), fold(acc) == 0xffff);
            let m = k.wrapping_mul(0xffff);
            proptest::prop_assert_eq!(verifies(m), fold(m) == 0xffff);
        });
    }

    #[test]
    fn rfc1624_section4_example() {
        // Other header words sum to 0xcd7a; m = 0x5555 gives C = 0x22d0, HC = 0xdd2f.
        let (hc, m, m2) = (0xdd2f, 0x5555, 0x3285);
        assert_eq!(!oc_add(0xcd7a, m), hc);
        // Recomputing from scratch: C' = 0xcd7a + 0x3285 = 0xffff, HC' = 0x0000.
        assert_eq!(!oc_add(0xcd7a, m2), 0x0000);
        // Equation 3 agrees with the recomputation.
        assert_eq!(update16(hc, m, m2), 0x0000);
        // Equation 2 (RFC 1141), HC + m + ~m', gives the other zero, 0xffff.
        assert_eq!(oc_add(oc_add(hc, m), !m2), 0xffff);
    }

    #[test]
    fn ipv4_header_example() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(fold(sum(&hdr, 0)), 0xffff);
        assert_eq!(checksum(&hdr), 0);
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), 0xb861);
        assert_eq!(reference::checksum(&hdr), 0xb861);
    }

    #[test]
    fn fold_edges() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
        assert_eq!(fold(0x1_fffe), 0xffff);
        assert_eq!(fold(u64::MAX), 0xffff);
        assert_eq!(fold(u64::MAX - 1), 0xfffe);
        assert_eq!(finish(0), 0xffff);
    }

    #[test]
    fn small_lengths_and_padding() {
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(fold(sum(&[0xab], 0)), 0xab00);
        assert_eq!(fold(sum(&[0xab, 0xcd, 0xef], 0)), oc_add(0xabcd, 0xef00));
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(checksum(&data), reference::checksum(&data), "len {len}");
        }
    }

    #[test]
    fn pseudo_header_matches_bytes() {
        let src = Ipv4Addr::new(192, 168, 0, 1);
        let dst = Ipv4Addr::new(10, 255, 3, 4);
        let bytes = [192, 168, 0, 1, 10, 255, 3, 4, 0, 17, 0x05, 0xdc];
        assert_eq!(
            fold(pseudo_header_v4(src, dst, 17, 1500)),
            reference::ones_complement_sum(&bytes)
        );
    }

    /// The IPv6 pseudo-header written out byte by byte in the RFC 8200 §8.1 layout, summed
    /// by the reference implementation.
    #[test]
    fn pseudo_header_v6_matches_bytes() {
        use core::net::Ipv6Addr;
        let src: Ipv6Addr = "2001:db8::1:800:200e:8c6c".parse().unwrap();
        let dst: Ipv6Addr = "fe80::20c:29ff:fe0c:47d5".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&[0x00, 0x01, 0x00, 0x10, 0, 0, 0, 58]);
        assert_eq!(
            fold(pseudo_header_v6(src, dst, 58, 0x0001_0010)),
            reference::ones_complement_sum(&bytes)
        );
        let ones = Ipv6Addr::from_bits(u128::MAX);
        let mut bytes = [0xffu8; 40];
        bytes[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
        bytes[36..39].fill(0);
        assert_eq!(
            fold(pseudo_header_v6(ones, ones, 0xff, u32::MAX)),
            reference::ones_complement_sum(&bytes)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn optimised_equals_reference(
            buf in proptest::collection::vec(any::<u8>(), 0..2008),
            offset in 0usize..8,
        ) {
            let start = offset.min(buf.len());
            let data = &buf[start..];
            prop_assert_eq!(checksum(data), reference::checksum(data));
            prop_assert_eq!(fold(sum(data, 0)), reference::ones_complement_sum(data));
        }

        #[test]
        fn short_inputs_equal_reference(data in proptest::collection::vec(any::<u8>(), 0..=40)) {
            prop_assert_eq!(fold(sum(&data, 0)), reference::ones_complement_sum(&data));
        }

        #[test]
        fn verify_words_agrees_with_reference(mut h in any::<[u8; 20]>()) {
            h[10] = 0;
            h[11] = 0;
            let c = reference::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            prop_assert!(verify_words(&h));
            h[3] ^= 0x10;
            prop_assert_eq!(verify_words(&h), reference::ones_complement_sum(&h) == 0xffff);
        }

        #[test]
        fn word_blocks_equal_reference(h in any::<[u8; 20]>(), w in any::<[u8; 8]>()) {
            prop_assert_eq!(fold(sum_words(&h)), reference::ones_complement_sum(&h));
            prop_assert_eq!(fold(sum_words(&w)), reference::ones_complement_sum(&w));
        }

        #[test]
        fn accumulator_is_any_u64(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            acc in prop_oneof![any::<u64>(), (u64::MAX - 0x3_0000)..=u64::MAX],
        ) {
            let expected = oc_add(oc_fold64(acc), reference::ones_complement_sum(&data));
            // Zero has two forms; `fold` only returns 0 for an all-zero sum.
            let got = fold(sum(&data, acc));
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn sums_chain(
            a in proptest::collection::vec(any::<u16>(), 0..100),
            b in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let a: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let mut all = a.clone();
            all.extend_from_slice(&b);
            prop_assert_eq!(finish(sum(&b, sum(&a, 0))), reference::checksum(&all));
        }

        #[test]
        fn update16_equals_recomputation(
            mut data in proptest::collection::vec(any::<u8>(), 2..200),
            pos in any::<usize>(),
            new in any::<u16>(),
        ) {
            let even_len = data.len() & !1;
            let at = (pos % (even_len / 2)) * 2;
            let hc = checksum(&data);
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            // The one documented exception: all-zero data has checksum 0xffff, not 0.
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update16(hc, old, new), checksum(&data));
        }

        #[test]
        fn update32_equals_recomputation(
            mut data in proptest::collection::vec(any::<u8>(), 4..200),
            pos in any::<usize>(),
            new in any::<u32>(),
        ) {
            let words = data.len() / 2 - 1; // a 32-bit field starting at an even offset
            let at = (pos % words) * 2;
            let hc = checksum(&data);
            let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
            data[at..at + 4].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(update32(hc, old, new), checksum(&data));
        }

        #[test]
        fn update16_no_change_is_identity(hc in 0u16..0xffff, m in any::<u16>()) {
            // Holds for every checksum except 0xffff, which only all-zero data produces.
            prop_assert_eq!(update16(hc, m, m), hc);
        }
    }
}
