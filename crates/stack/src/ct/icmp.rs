//! ICMP and ICMPv6: queries (echo, and IPv4's timestamp, information and address mask
//! requests) tracked by their identifier (RFC 792, RFC 4443 4.1) as connections of
//! their own; errors (RFC 792's destination unreachable, source quench, redirect, time
//! exceeded, parameter problem; RFC 4443's destination unreachable, packet too big,
//! time exceeded, parameter problem) tied to the connection of the packet they quote,
//! `related` to it, and invalid when they quote none (Linux's `icmp_error_message`).
//! Neighbour discovery and MLD messages are left untracked, as Linux's
//! `nf_conntrack_proto_icmpv6` leaves them.

use netbatch_wire::bytes::get_u16;
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::ipv6::Ipv6Packet;

use super::tuple::Tuple;
use crate::dissect::L4;

/// What an ICMP message is to the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A query or its answer: tracked by identifier.
    Query,
    /// An error quoting a packet.
    Error,
    /// Left untracked (ICMPv6 neighbour discovery, MLD).
    Untracked,
    /// Anything else: cannot start a connection.
    Other,
}

/// The class of ICMP (`v6`: ICMPv6) type `t`.
pub fn class(v6: bool, t: u8) -> Class {
    if Tuple::icmp_request(v6, t) || Tuple::icmp_answer(v6, t) {
        return Class::Query;
    }
    match (v6, t) {
        (false, 3 | 4 | 5 | 11 | 12) | (true, 1..=4) => Class::Error,
        // MLD query, report, done; RS, RA, NS, NA, redirect; MLDv2 report.
        (true, 130..=137 | 143) => Class::Untracked,
        _ => Class::Other,
    }
}

/// The tuple of the packet an IPv4 ICMP error quotes (`quote`: the bytes after the
/// 8-byte ICMP header): its IP header and the first 8 bytes of its payload (RFC 792).
/// `None` when the quote is cut, a later fragment, or not IPv4.
pub fn quoted4(quote: &[u8]) -> Option<Tuple> {
    let h = quote.first_chunk::<20>()?;
    let ip = Ipv4Packet::new_unchecked(h);
    let ihl = ip.header_len();
    if ip.version() != 4 || ihl < 20 || ip.frag_offset() != 0 {
        return None;
    }
    let proto = ip.protocol().0;
    let l4 = quote.get(ihl..)?;
    let (sport, dport) = inner_ports(false, proto, l4)?;
    Some(Tuple::v4(ip.src(), ip.dst(), proto, sport, dport))
}

/// The tuple of the packet an ICMPv6 error quotes (RFC 4443 2.4 (c)): its fixed header
/// and what follows it, when the upper layer follows the fixed header directly.
pub fn quoted6(quote: &[u8]) -> Option<Tuple> {
    let h = quote.first_chunk::<40>()?;
    let ip = Ipv6Packet::new_unchecked(h);
    if ip.version() != 6 {
        return None;
    }
    let proto = ip.next_header().0;
    let l4 = quote.get(40..)?;
    let (sport, dport) = inner_ports(true, proto, l4)?;
    Some(Tuple::v6(ip.src(), ip.dst(), proto, sport, dport))
}

/// The tuple words of an inner upper-layer header `l4` of protocol `proto`: ports, or
/// an echo's identifier and type; `None` for an inner ICMP error (never tracked) or
/// a cut header.
fn inner_ports(v6: bool, proto: u8, l4: &[u8]) -> Option<(u16, u16)> {
    match L4::of(proto) {
        l if l.has_ports() => {
            let p = l4.first_chunk::<4>()?;
            Some((get_u16(p, 0), get_u16(p, 2)))
        }
        L4::Icmp | L4::Icmpv6 => {
            let h = l4.first_chunk::<8>()?;
            let (t, c) = (h[0], h[1]);
            (class(v6, t) == Class::Query)
                .then(|| (get_u16(h, 4), u16::from(t) << 8 | u16::from(c)))
        }
        _ => Some((0, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class(false, 8), Class::Query);
        assert_eq!(class(false, 0), Class::Query);
        assert_eq!(class(false, 3), Class::Error);
        assert_eq!(class(false, 9), Class::Other, "router advertisement");
        assert_eq!(class(true, 128), Class::Query);
        assert_eq!(class(true, 2), Class::Error, "packet too big");
        assert_eq!(class(true, 135), Class::Untracked, "neighbour solicitation");
    }

    /// A port unreachable's quote, built by hand: 192.0.2.1:40000 → 198.51.100.2:53 UDP.
    #[test]
    fn quoted_udp_tuple() {
        let mut q = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        q.extend([192, 0, 2, 1, 198, 51, 100, 2]);
        q.extend([0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
        assert_eq!(
            quoted4(&q),
            Some(Tuple::v4(
                "192.0.2.1".parse().unwrap(),
                "198.51.100.2".parse().unwrap(),
                17,
                40000,
                53
            ))
        );
        assert_eq!(quoted4(&q[..23]), None, "cut inside the ports");
        // A later fragment has no ports to quote.
        q[6] = 0x00;
        q[7] = 0x10;
        assert_eq!(quoted4(&q), None);
    }
}
