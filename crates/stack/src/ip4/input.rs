//! `ip4-input`: the receive checks of RFC 791 3.1, RFC 1122 3.2.1 and RFC 1812 5.2.2,
//! each failure its own drop reason.
//!
//! In order: at least 20 bytes; version 4 (RFC 1122 3.2.1.1 MUST silently discard
//! others); IHL ≥ 5 and the header inside the frame (RFC 1812 5.2.2); total length ≥ the
//! header and ≤ the frame (RFC 1812 5.2.2: "the IP datagram length is large enough to
//! hold the IP data header"; link padding beyond it is trimmed); header checksum (RFC
//! 1122 3.2.1.2 MUST discard on failure); well-formed options (RFC 791 3.1); source not
//! martian (RFC 1122 3.2.1.3, RFC 1812 5.3.7) and destination not martian.
//!
//! A packet with options then has the ones a router acts on checked
//! ([`super::options::scan`]): a malformed option is answered with a Parameter Problem
//! pointing at it (RFC 1812 5.2.5; counted `ip4_bad_options` when no error may be sent),
//! and a source-routed packet is dropped (`ip4_source_route`) unless
//! `accept_source_route` is on, as Linux does by default.

use netbatch_engine::{Cx, Out, PktList, Reason, Stage, Verdict};
use netbatch_wire::checksum;
use netbatch_wire::ipv4::Ipv4Packet;

use super::icmp_error::{Cause, Request};
use super::options;
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};
use crate::prefix::class;

netbatch_engine::reasons! {
    /// Why `ip4-input` drops a packet (RFC 791, RFC 1122 3.2.1, RFC 1812 5.2.2).
    pub mod reason {
        TRUNCATED = "ip4_truncated": "IPv4 packet shorter than its header",
        VERSION = "ip4_version": "IP version is not 4",
        HEADER_LEN = "ip4_header_len": "IPv4 header length below 20 bytes",
        TOTAL_LEN_SHORT = "ip4_total_len_short": "IPv4 total length smaller than the header",
        TOTAL_LEN_LONG = "ip4_total_len_long": "IPv4 total length larger than the frame",
        CHECKSUM = "ip4_checksum": "IPv4 header checksum wrong",
        BAD_OPTIONS = "ip4_bad_options": "IPv4 options malformed",
        MARTIAN_SOURCE = "ip4_martian_source": "IPv4 source is not a valid unicast address",
        MARTIAN_DEST = "ip4_martian_dest": "IPv4 destination is not a valid address",
        SOURCE_ROUTE = "ip4_source_route": "source-routed IPv4 packet (LSRR/SSRR) and accept_source_route is off",
        SOURCE_ROUTE_FAILED = "ip4_source_route_failed": "strict source route's next hop is not on a connected network",
    }
}

netbatch_engine::arcs! {
    /// Arc for valid packets.
    pub OK = "ok";
    /// Arc to the ICMP error stage (malformed options).
    pub ERROR = "error";
}

/// The IPv4 input stage.
#[derive(Debug, Default)]
pub struct Ip4Input;

/// Validates one header whose packet has `avail` bytes (the frame's, or a GRO
/// super-packet's over its buffer chain); `Ok(total_len, ihl)` or the drop reason.
#[inline(always)]
fn check(d: &[u8], avail: usize, accept_source_route: bool) -> Result<(usize, usize), Reason> {
    let Some(h) = d.first_chunk::<20>() else {
        return Err(reason::TRUNCATED);
    };
    let fixed = Ipv4Packet::new_unchecked(h);
    if fixed.version() != 4 {
        return Err(reason::VERSION);
    }
    let ihl = fixed.header_len();
    if ihl < 20 {
        return Err(reason::HEADER_LEN);
    }
    if d.len() < ihl {
        return Err(reason::TRUNCATED);
    }
    check_sane(d, ihl, avail, accept_source_route).map(|total| (total, ihl))
}

/// The checks of a header whose fixed part the dissector found sane (version 4, an IHL of
/// at least 5, the whole header in `d`, `ihl` bytes of it): lengths, checksum, options,
/// addresses. `Ok(total_len)` or the drop reason.
#[inline(always)]
fn check_sane(
    d: &[u8],
    ihl: usize,
    avail: usize,
    accept_source_route: bool,
) -> Result<usize, Reason> {
    let (Some(h), Some(whole)) = (d.first_chunk::<20>(), d.get(..ihl)) else {
        return Err(reason::TRUNCATED);
    };
    let (fixed, header_bytes, whole) = (
        Ipv4Packet::new_unchecked(h),
        whole,
        Ipv4Packet::new_unchecked(whole),
    );
    let total = usize::from(fixed.total_len());
    if total < ihl {
        return Err(reason::TOTAL_LEN_SHORT);
    }
    if total > avail {
        return Err(reason::TOTAL_LEN_LONG);
    }
    // The common header without options is verified as five 32-bit words.
    let ok = if ihl == 20 {
        checksum::verify_words(h)
    } else {
        whole.verify_checksum()
    };
    if !ok {
        return Err(reason::CHECKSUM);
    }
    if ihl > 20 {
        options_verdict(header_bytes, accept_source_route)?;
    }
    if class::is_martian_source(u32::from(fixed.src())) {
        return Err(reason::MARTIAN_SOURCE);
    }
    if class::is_martian_dest(u32::from(fixed.dst())) {
        return Err(reason::MARTIAN_DEST);
    }
    Ok(total)
}

/// `ip4-input`.
pub const DECL: Decl = Decl {
    arcs: &[
        ("ok", To::Via(node::IP4_DEFRAG, "ok")),
        ("error", To::Node(node::IP4_ICMP_ERROR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::L3, Field::L4, Field::Gso]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Csum, Field::Ask]),
    ..Decl::new(node::IP4_INPUT, |_| Box::new(Ip4Input))
};

impl Stage<Host> for Ip4Input {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let accept_source_route = host.params.accept_source_route;
        let pool = cx.pool;
        out.sort(
            list,
            #[inline(always)]
            move |p| {
                let mut v = pool.get_mut(p);
                let chained = v.meta.chain.is_some();
                let avail = v.meta.packet_len();
                let (m, d) = v.split();
                // Where the dissector located the L4 header, it found the fixed header sane.
                let located = m.l4 != 0 && m.l3 == m.data;
                let checked = if located {
                    check_sane(d, usize::from(m.l4 - m.l3), avail, accept_source_route)
                } else {
                    check(d, avail, accept_source_route).map(|(total, _)| total)
                };
                match checked {
                    // GRO cut a super-packet's padding already: its length must be exact.
                    Ok(total) if chained && total != avail => {
                        Verdict::Drop(reason::TOTAL_LEN_SHORT)
                    }
                    Ok(total) => {
                        m.flags |= flag::IP_CSUM_OK;
                        if !located {
                            // A packet no dissection reached (never in today's graph): the
                            // stages after this one read what the dissector records.
                            dissect::ip4_packet(&mut v);
                        }
                        v.truncate(total);
                        Verdict::To(OK)
                    }
                    Err(r) if r == reason::BAD_OPTIONS => {
                        // Point at the octet in error.
                        let pointer = options::scan(header_of(d)).err().unwrap_or(20);
                        Request::with(Cause::ParamProblem, pointer as u32).put(m);
                        Verdict::To(ERROR)
                    }
                    Err(r) => Verdict::Drop(r),
                }
            },
        );
    }
}

/// The whole header `d` starts with (its IHL says how long), cut to what `d` holds.
fn header_of(d: &[u8]) -> &[u8] {
    let ihl = d.first().map_or(0, |b| usize::from(b & 0x0f) * 4);
    d.get(..ihl).unwrap_or(d)
}

/// The verdict on the options of the whole header `h`: the walk of RFC 791 3.1, then the
/// options a router acts on ([`options::scan`]); a source route unless accepted.
#[inline(never)]
fn options_verdict(h: &[u8], accept_source_route: bool) -> Result<(), Reason> {
    if Ipv4Packet::new_unchecked(h).check_options().is_err() {
        return Err(reason::BAD_OPTIONS);
    }
    let found = options::scan(h).map_err(|_| reason::BAD_OPTIONS)?;
    if found.srr.is_some() && !accept_source_route {
        return Err(reason::SOURCE_ROUTE);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_frame(d: &[u8]) -> Result<(usize, usize), Reason> {
        check(d, d.len(), false)
    }

    /// A valid 20-byte header (the classic example, checksum 0xb861) plus 95 bytes.
    fn good() -> Vec<u8> {
        let mut v = vec![
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        v.resize(0x73, 0);
        v
    }

    fn refill(h: &mut [u8]) {
        h[10] = 0;
        h[11] = 0;
        let ihl = usize::from(h[0] & 15) * 4;
        let c = checksum::checksum(&h[..ihl]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn accepts_valid_and_reports_lengths() {
        assert_eq!(check_frame(&good()), Ok((0x73, 20)));
        let mut padded = good();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(
            check_frame(&padded),
            Ok((0x73, 20)),
            "padding is trimmed, not an error"
        );
    }

    /// The checks of a header the dissector found sane give what the full checks give.
    #[test]
    fn the_sane_header_checks_agree_with_the_full_ones() {
        let mut cases = vec![good()];
        for (at, x) in [
            (2, 0x01u8),
            (2, 0x80),
            (3, 0x20),
            (11, 1),
            (12, 0x80),
            (16, 0xff),
        ] {
            let mut c = good();
            c[at] ^= x;
            cases.push(c.clone());
            refill(&mut c);
            cases.push(c);
        }
        for c in cases {
            let full = check_frame(&c).map(|(total, _)| total);
            assert_eq!(check_sane(&c, 20, c.len(), false), full, "{c:02x?}");
        }
    }

    #[test]
    fn each_failure_has_its_reason() {
        assert_eq!(check_frame(&good()[..19]), Err(reason::TRUNCATED));
        let mut v6 = good();
        v6[0] = 0x65;
        assert_eq!(check_frame(&v6), Err(reason::VERSION));
        let mut short_ihl = good();
        short_ihl[0] = 0x44;
        assert_eq!(check_frame(&short_ihl), Err(reason::HEADER_LEN));
        let mut long_ihl = good();
        long_ihl[0] = 0x4f;
        assert_eq!(check_frame(&long_ihl[..40]), Err(reason::TRUNCATED));
        let mut tl_short = good();
        tl_short[2..4].copy_from_slice(&19u16.to_be_bytes());
        refill(&mut tl_short);
        assert_eq!(check_frame(&tl_short), Err(reason::TOTAL_LEN_SHORT));
        let mut tl_long = good();
        tl_long[2..4].copy_from_slice(&200u16.to_be_bytes());
        refill(&mut tl_long);
        assert_eq!(check_frame(&tl_long), Err(reason::TOTAL_LEN_LONG));
        let mut bad_sum = good();
        bad_sum[11] ^= 1;
        assert_eq!(check_frame(&bad_sum), Err(reason::CHECKSUM));
        let mut martian = good();
        martian[12] = 127;
        refill(&mut martian);
        assert_eq!(check_frame(&martian), Err(reason::MARTIAN_SOURCE));
        let mut mdst = good();
        mdst[16] = 0;
        refill(&mut mdst);
        assert_eq!(check_frame(&mdst), Err(reason::MARTIAN_DEST));
    }

    #[test]
    fn options_are_length_checked() {
        // IHL 6: one 4-byte option word.
        let mut h = good();
        h[0] = 0x46;
        h.splice(20..20, [0x01, 0x01, 0x01, 0x00]); // NOP NOP NOP EOL
        h[2..4].copy_from_slice(&(0x77u16).to_be_bytes());
        h.truncate(0x77);
        refill(&mut h);
        assert_eq!(check_frame(&h), Ok((0x77, 24)));
        // An option claiming 10 bytes in a 4-byte area.
        h[20..24].copy_from_slice(&[0x07, 0x0a, 0x04, 0x00]);
        refill(&mut h);
        assert_eq!(check_frame(&h), Err(reason::BAD_OPTIONS));
    }
}
