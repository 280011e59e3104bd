//! `ip4-icmp-error`: turns a packet that carries a [`Request`] (the [`Cause`] of an
//! ICMP-worthy failure, and the pointer or MTU its message carries) into that ICMP error,
//! in its own buffer, and sends it to `ip4-local-out`.
//!
//! The error is built in the offending packet's own buffer (nothing is allocated), so
//! the packet continues as its answer; what caused it is counted per reason as an event
//! of this stage (`sent_<reason>`). A super-packet standing for several wire packets
//! becomes one error; the others are counted as dropped for the reason.
//!
//! No error is sent (RFC 1122 3.2.2, RFC 1812 4.3.2.7) about: an ICMP error message; a
//! datagram sent to a link-layer broadcast or multicast, or to an IP broadcast or
//! multicast address; a non-first fragment; a datagram whose source is not a unicast
//! address (this-network, loopback, multicast, class E); a packet we originated. Errors
//! are rate limited by a token bucket (RFC 1812 4.3.2.8). The error quotes as much of the
//! original as fits in 576 bytes (RFC 1812 4.3.2.3). Its source is Linux's
//! (`__icmp_send`): for a datagram to one of our addresses, that address; otherwise our
//! address toward the sender, as the output route back to it would choose it (the address
//! of its interface on the sender's or the gateway's subnet, else that interface's
//! primary), falling back to the interface the datagram arrived on.

use core::net::Ipv4Addr;

use netbatch_engine::{Cx, Out, PktList, Reason, Stage};
use netbatch_wire::checksum;
use netbatch_wire::icmpv4::{Icmpv4Packet, Icmpv4Type};
use netbatch_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};

use super::{header, header_mut};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::L4;
use crate::host::Host;
use crate::iface::Iface;
use crate::meta::{Field, Fields, flag};
use crate::prefix::class;
use crate::route::RouteKind;

netbatch_engine::reasons! {
    /// Why `ip4-icmp-error` drops a packet it has no cause for.
    pub mod reason {
        NO_CAUSE = "icmp_error_no_cause": "sent to the ICMP error stage without a cause (bug guard)",
    }
}

netbatch_engine::arcs! {
    /// Arc to `ip4-local-out`.
    pub OUT = "out";
}

/// Largest ICMP error datagram (RFC 1812 4.3.2.3).
const MAX_ERROR_LEN: usize = 576;

/// Why a packet is sent to `ip4-icmp-error` (in its [`Request`]): the error it causes, and
/// the drop reason it is counted under when no error may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Cause {
    /// TTL reached zero in transit: time exceeded (RFC 792, RFC 1812 5.3.1).
    TtlExpired = 1,
    /// No route: network unreachable.
    NoRoute,
    /// An unreachable route: host unreachable.
    RouteUnreachable,
    /// The next hop did not answer ARP: host unreachable.
    NeighFailed,
    /// No handler for the protocol: protocol unreachable.
    UnknownProtocol,
    /// No socket on the port: port unreachable.
    NoSocket,
    /// Too long for the next hop with DF set: fragmentation needed (RFC 1191), the
    /// request's parameter the next hop's MTU.
    FragNeeded,
    /// A prohibit route: communication administratively prohibited (RFC 1812 5.2.7.1).
    RouteProhibit,
    /// A malformed header option: parameter problem (RFC 792, RFC 1812 5.2.5), the
    /// request's parameter the offset of the octet in error.
    ParamProblem,
    /// A strict source route whose next hop is not on a connected network: source route
    /// failed (RFC 1812 5.2.4.1).
    SourceRouteFailed,
    /// A policy rule `unreachable`: network unreachable (Linux answers `ENETUNREACH`, as
    /// for no route).
    RuleUnreachable,
    /// A policy rule `prohibit`: communication administratively prohibited.
    RuleProhibit,
    /// A datagram for this host not whole within the reassembly timeout, its first
    /// fragment received: time exceeded, fragment reassembly time exceeded (RFC 792
    /// code 1; Linux's `ip_expire`).
    ReassemblyTimeout,
}

impl Cause {
    /// Every cause, in counter order.
    pub const ALL: [Self; 13] = [
        Self::TtlExpired,
        Self::NoRoute,
        Self::RouteUnreachable,
        Self::NeighFailed,
        Self::UnknownProtocol,
        Self::NoSocket,
        Self::FragNeeded,
        Self::RouteProhibit,
        Self::ParamProblem,
        Self::SourceRouteFailed,
        Self::RuleUnreachable,
        Self::RuleProhibit,
        Self::ReassemblyTimeout,
    ];

    /// The ICMP (type, code) it causes.
    pub const fn icmp(self) -> (u8, u8) {
        match self {
            Self::TtlExpired => (11, 0),
            Self::NoRoute | Self::RuleUnreachable => (3, 0),
            Self::RouteUnreachable | Self::NeighFailed => (3, 1),
            Self::UnknownProtocol => (3, 2),
            Self::NoSocket => (3, 3),
            Self::FragNeeded => (3, 4),
            Self::RouteProhibit | Self::RuleProhibit => (3, 13),
            Self::ParamProblem => (12, 0),
            Self::SourceRouteFailed => (3, 5),
            Self::ReassemblyTimeout => (11, 1),
        }
    }

    /// The drop reason of a packet with this cause that gets no error.
    pub const fn reason(self) -> Reason {
        match self {
            Self::TtlExpired => crate::ip4::forward::reason::TTL_EXPIRED,
            Self::NoRoute => crate::route::reason::NO_ROUTE,
            Self::RouteUnreachable => crate::route::reason::UNREACHABLE,
            Self::NeighFailed => crate::neigh::reason::FAILED,
            Self::UnknownProtocol => crate::ip4::local::reason::UNKNOWN_PROTOCOL,
            Self::NoSocket => crate::udp::input::reason::NO_SOCKET,
            Self::FragNeeded => crate::ip4::fragment::reason::FRAG_NEEDED,
            Self::RouteProhibit => crate::route::reason::PROHIBIT,
            Self::ParamProblem => crate::ip4::input::reason::BAD_OPTIONS,
            Self::SourceRouteFailed => crate::ip4::input::reason::SOURCE_ROUTE_FAILED,
            Self::RuleUnreachable => crate::route::reason::RULE_UNREACHABLE,
            Self::RuleProhibit => crate::route::reason::RULE_PROHIBIT,
            Self::ReassemblyTimeout => crate::defrag::reason::TIMEOUT,
        }
    }

    /// The name of the counter of errors sent for it.
    const fn counter(self) -> &'static str {
        match self {
            Self::TtlExpired => "sent_ttl_expired",
            Self::NoRoute => "sent_no_route",
            Self::RouteUnreachable => "sent_route_unreachable",
            Self::NeighFailed => "sent_neigh_failed",
            Self::UnknownProtocol => "sent_unknown_protocol",
            Self::NoSocket => "sent_no_socket",
            Self::FragNeeded => "sent_frag_needed",
            Self::RouteProhibit => "sent_route_prohibit",
            Self::ParamProblem => "sent_ip4_bad_options",
            Self::SourceRouteFailed => "sent_ip4_source_route_failed",
            Self::RuleUnreachable => "sent_rule_unreachable",
            Self::RuleProhibit => "sent_rule_prohibit",
            Self::ReassemblyTimeout => "sent_defrag_timeout",
        }
    }
}

impl crate::ask::Cause for Cause {
    const ALL: &'static [Self] = &Self::ALL;

    #[inline(always)]
    fn code(self) -> u16 {
        self as u16
    }

    fn param(self) -> Option<&'static str> {
        match self {
            Self::FragNeeded => Some("mtu"),
            Self::ParamProblem => Some("pointer"),
            _ => None,
        }
    }
}

/// A request for an ICMP error: a [`Cause`] and the parameter its message carries.
pub type Request = crate::ask::Request<Cause>;

/// The ICMP error generator.
#[derive(Debug, Default)]
pub struct Ip4IcmpError {
    sent: [u64; Cause::ALL.len()],
}

/// Whether an error may be sent about the datagram `d` (starting at its IP header) with
/// metadata flags `flags`.
pub(crate) fn may_answer(d: &[u8], flags: u32) -> bool {
    if flags
        & (flag::L2_BROADCAST
            | flag::L2_MULTICAST
            | flag::L3_BROADCAST
            | flag::L3_MULTICAST
            | flag::ORIGINATED)
        != 0
    {
        return false;
    }
    let Some(ip) = header(d) else {
        return false;
    };
    if ip.frag_offset() != 0 {
        return false;
    }
    let (src, dst) = (u32::from(ip.src()), u32::from(ip.dst()));
    if class::is_martian_source(src) || class::is_multicast(dst) || class::is_limited_broadcast(dst)
    {
        return false;
    }
    if L4::of(ip.protocol().0) == L4::Icmp {
        // An ICMP error (or an ICMP message too short to tell) is never answered.
        let icmp = d.get(ip.header_len()..).filter(|m| !m.is_empty());
        match icmp.map(|m| Icmpv4Packet::new_unchecked(m).msg_type()) {
            Some(t) if !t.is_error() => {}
            _ => return false,
        }
    }
    true
}

/// The source address of an error about the datagram `d` (starting at its IP header,
/// at least 20 bytes) that arrived on `in_if` with metadata flags `flags`.
///
/// Linux's `__icmp_send`: `saddr = iph->daddr` when the datagram was for us; else the
/// source is left to the output route toward the sender, whose preferred source is our
/// address on the subnet of the sender (connected) or of the gateway. RFC 1812 4.3.2.4
/// only asks for one of our addresses; this one makes traceroute show the address the
/// probe was sent to, and a multi-homed interface answer from the sender's subnet.
pub(crate) fn error_source(host: &Host, d: &[u8], flags: u32, in_if: u16) -> Option<Ipv4Addr> {
    let ip = header(d)?;
    let dst = ip.dst();
    if flags & flag::LOCAL != 0 && host.is_local(dst) {
        return Some(dst);
    }
    let sender = u32::from(ip.src());
    // Toward the sender in the VRF the packet came from.
    if let Some(hop) = host.policy.vrf_routes(&host.routes, in_if).0.lookup(sender)
        && hop.kind == RouteKind::Unicast
        && let Some(a) = host.ifaces.get(usize::from(hop.out_if)).and_then(|i| {
            i.source_for(Ipv4Addr::from(if hop.gateway == 0 {
                sender
            } else {
                hop.gateway
            }))
        })
    {
        return Some(a);
    }
    host.ifaces
        .get(usize::from(in_if))
        .and_then(Iface::primary)
        .or_else(|| host.ifaces.iter().find_map(Iface::primary))
}

/// The IPv4 header of an ICMP message we originate about another packet (an error or a
/// redirect) from `src` to `dst`, quoting `quote` bytes after its 8-byte ICMP header.
pub(crate) fn outer_header(src: Ipv4Addr, dst: Ipv4Addr, quote: usize, ident: u16) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        protocol: Protocol::ICMP,
        payload_len: 8 + quote,
        ttl: 64,
        // Precedence "internetwork control", as Linux marks ICMP errors and redirects.
        dscp_ecn: 0xc0,
        ident,
        dont_frag: false,
    }
}

/// `ip4-icmp-error`. It drops, when no error may be sent, with the reason of the failure
/// that asked for it: those sets are declared here too.
pub const DECL: Decl = Decl {
    arcs: &[("out", To::Node(node::IP4_LOCAL_OUT))],
    reasons: &[
        reason::ALL,
        crate::ip4::input::reason::ALL,
        crate::route::reason::ALL,
        crate::ip4::local::reason::ALL,
        crate::udp::input::reason::ALL,
        crate::ip4::forward::reason::ALL,
        crate::ip4::fragment::reason::ALL,
        crate::neigh::reason::ALL,
        crate::defrag::reason::ALL,
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[
        Field::Ask,
        Field::L3,
        Field::L4,
        Field::InIf,
        Field::L2Class,
        Field::Dest,
        Field::Origin,
        Field::Gso,
    ]),
    writes: Fields::of(&[Field::OutIf, Field::Origin, Field::Gso, Field::Ask]),
    ..Decl::new(node::IP4_ICMP_ERROR, |_| Box::new(Ip4IcmpError::default()))
};

impl Stage<Host> for Ip4IcmpError {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        Cause::ALL
            .iter()
            .zip(self.sent)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.counter(), n))
            .collect()
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            let Some(Request { cause, param }) = Request::take(&mut *v.meta) else {
                out.drop(p, reason::NO_CAUSE);
                continue;
            };
            let ((ty, code), reason) = (cause.icmp(), cause.reason());
            if !may_answer(v.data(), v.meta.flags) {
                host.stats.icmp_errors_suppressed += 1;
                out.drop(p, reason);
                continue;
            }
            let Some(src) = error_source(host, v.data(), v.meta.flags, v.meta.in_if) else {
                host.stats.icmp_errors_suppressed += 1;
                out.drop(p, reason);
                continue;
            };
            if !host.icmp_limit.allow(cx.now_ns) {
                host.stats.icmp_errors_rate_limited += 1;
                out.drop(p, reason);
                continue;
            }
            let wire = v.meta.wire_packets();
            if let Some(chain) = v.meta.chain.take() {
                cx.cache.free(chain);
            }
            let forwarded = v.meta.flags & flag::FORWARDED != 0;
            let Some(mut ip) = header_mut(v.data_mut()) else {
                out.drop(p, reason);
                continue;
            };
            if forwarded {
                // Quote the header as it was received: undo the TTL decrement (and its
                // checksum update) that forwarding made before the error was found.
                let old = u16::from_be_bytes([ip.ttl(), ip.protocol().0]);
                ip.set_ttl(ip.ttl().wrapping_add(1));
                ip.set_checksum(checksum::update16(
                    ip.checksum(),
                    old,
                    old.wrapping_add(0x0100),
                ));
            }
            let orig_src = ip.src();
            let quote = (v.meta.len as usize).min(MAX_ERROR_LEN - 28);
            v.truncate(quote);
            let ident = host.next_ident();
            let Some(h) = v.push(28).and_then(|h| h.get_mut(..20)) else {
                out.drop(p, reason);
                continue;
            };
            outer_header(src, orig_src, quote, ident).emit(&mut Ipv4Packet::new_unchecked(h));
            let Some(msg) = v.data_mut().get_mut(20..) else {
                out.drop(p, reason);
                continue;
            };
            let mut icmp = Icmpv4Packet::new_unchecked(msg);
            icmp.set_msg_type(Icmpv4Type(ty));
            icmp.set_code(code);
            icmp.set_rest_of_header(0);
            match cause {
                // RFC 1191: next-hop MTU in the low 16 bits of the unused word.
                Cause::FragNeeded => icmp.set_next_hop_mtu(param as u16),
                // RFC 792: the pointer in the first octet of the unused word.
                Cause::ParamProblem => icmp.set_rest_of_header((param & 0xff) << 24),
                _ => {}
            }
            icmp.fill_checksum();
            v.meta.flags = (v.meta.flags & flag::TRACE) | flag::ORIGINATED | flag::IP_CSUM_OK;
            v.meta.out_if = u16::MAX;
            v.meta.gso_size = 0;
            v.meta.gso_type = 0;
            v.meta.segs = 1;
            host.stats.icmp_errors_out += 1;
            if let Some((_, n)) = Cause::ALL
                .iter()
                .zip(&mut self.sent)
                .find(|(c, _)| **c == cause)
            {
                *n += 1;
            }
            if wire > 1 {
                out.count_drop(reason, wire - 1);
            }
            out.push(OUT, p);
        }
    }
}

impl crate::route::rule::WalkCauses for Cause {
    const NO_ROUTE: Self = Self::NoRoute;
    const RULE_UNREACHABLE: Self = Self::RuleUnreachable;
    const RULE_PROHIBIT: Self = Self::RuleProhibit;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_to(src: [u8; 4], dst: [u8; 4], frag: u16) -> Vec<u8> {
        let mut d = vec![0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0];
        d.extend_from_slice(&src);
        d.extend_from_slice(&dst);
        d[6..8].copy_from_slice(&frag.to_be_bytes());
        d.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
        d
    }

    #[test]
    fn rfc1812_suppression_rules() {
        let ok = udp_to([192, 0, 2, 1], [198, 51, 100, 1], 0);
        assert!(may_answer(&ok, flag::L2_HOST));
        assert!(!may_answer(&ok, flag::L2_BROADCAST), "link-layer broadcast");
        assert!(!may_answer(&ok, flag::L3_BROADCAST), "IP broadcast");
        assert!(!may_answer(&ok, flag::ORIGINATED), "our own packet");
        assert!(
            !may_answer(&udp_to([192, 0, 2, 1], [224, 0, 0, 9], 0), 0),
            "multicast destination"
        );
        assert!(
            !may_answer(&udp_to([192, 0, 2, 1], [255, 255, 255, 255], 0), 0),
            "limited broadcast"
        );
        assert!(
            !may_answer(&udp_to([0, 0, 0, 0], [198, 51, 100, 1], 0), 0),
            "this-network source"
        );
        assert!(
            !may_answer(&udp_to([127, 0, 0, 1], [198, 51, 100, 1], 0), 0),
            "loopback source"
        );
        assert!(
            !may_answer(&udp_to([192, 0, 2, 1], [198, 51, 100, 1], 185), 0),
            "non-first fragment"
        );
        assert!(
            may_answer(&udp_to([192, 0, 2, 1], [198, 51, 100, 1], 0x2000), 0),
            "first fragment is fine"
        );
        let mut icmp_err = udp_to([192, 0, 2, 1], [198, 51, 100, 1], 0);
        icmp_err[9] = 1;
        icmp_err[20] = 11;
        assert!(!may_answer(&icmp_err, 0), "ICMP error");
        icmp_err[20] = 8;
        assert!(may_answer(&icmp_err, 0), "ICMP echo may get an error");
    }

    #[test]
    fn error_source_follows_linux() {
        use std::sync::Arc;

        use crate::host::HostParams;
        use crate::iface::Tags;
        use crate::route::{Route, Routes};
        use netbatch_wire::ethernet::MacAddr;

        let iface = |name: &str, addrs: &[&str]| {
            Iface::new(
                name,
                0,
                Tags::None,
                MacAddr([2, 0, 0, 0, 0, 1]),
                1500,
                addrs.iter().map(|a| a.parse().expect("address")).collect(),
            )
        };
        let mut routes = Routes::new();
        for (p, kind, out_if, gw) in [
            ("192.0.2.0/24", RouteKind::Unicast, 0, None),
            ("10.9.0.0/16", RouteKind::Unicast, 0, None),
            ("198.51.100.0/24", RouteKind::Unicast, 1, None),
            ("192.0.2.1/32", RouteKind::Local, 0, None),
            ("10.9.0.1/32", RouteKind::Local, 0, None),
            ("198.51.100.1/32", RouteKind::Local, 1, None),
            ("172.16.0.0/12", RouteKind::Unicast, 0, Some("10.9.0.254")),
            ("100.64.0.0/10", RouteKind::Blackhole, 0, None),
            ("0.0.0.0/0", RouteKind::Unicast, 1, Some("198.51.100.254")),
        ] {
            routes
                .insert(Route {
                    prefix: p.parse().expect("prefix"),
                    kind,
                    out_if: Some(out_if),
                    gateway: gw.map(|g| g.parse().expect("gateway")),
                    multipath: None,
                })
                .expect("route");
        }
        let host = Host::new(
            Vec::new(),
            vec![
                iface("lan", &["192.0.2.1/24", "10.9.0.1/16"]),
                iface("wan", &["198.51.100.1/24"]),
            ],
            Arc::new(routes),
            HostParams::default(),
        );
        let a = |o: [u8; 4]| Some(Ipv4Addr::from(o));
        let src = |s, d, flags, in_if| error_source(&host, &udp_to(s, d, 0), flags, in_if);
        // For us: the address it was sent to, whichever interface it is on.
        let lan_host = [192, 0, 2, 10];
        assert_eq!(
            src(lan_host, [198, 51, 100, 1], flag::LOCAL, 0),
            a([198, 51, 100, 1])
        );
        assert_eq!(
            src(lan_host, [10, 9, 0, 1], flag::LOCAL, 0),
            a([10, 9, 0, 1])
        );
        // In transit: our address toward the sender (its subnet, or its gateway's).
        let far = [203, 0, 113, 7];
        assert_eq!(src(lan_host, far, 0, 0), a([192, 0, 2, 1]));
        assert_eq!(src([10, 9, 3, 3], far, 0, 0), a([10, 9, 0, 1]));
        assert_eq!(
            src([172, 16, 5, 5], far, 0, 1),
            a([10, 9, 0, 1]),
            "back by the route to the sender, not by the arrival interface"
        );
        assert_eq!(
            src([203, 0, 113, 9], [192, 0, 2, 10], 0, 0),
            a([198, 51, 100, 1])
        );
        // No unicast route back: the arrival interface's primary.
        assert_eq!(src([100, 64, 0, 9], far, 0, 1), a([198, 51, 100, 1]));
        assert_eq!(src([100, 64, 0, 9], far, 0, 0), a([192, 0, 2, 1]));
    }

    #[test]
    fn reasons_map_to_rfc792_codes() {
        assert_eq!(Cause::TtlExpired.icmp(), (11, 0));
        assert_eq!(Cause::NoSocket.icmp(), (3, 3));
        assert_eq!(Cause::UnknownProtocol.icmp(), (3, 2));
        assert_eq!(Cause::NoRoute.icmp(), (3, 0));
        assert_eq!(Cause::RouteUnreachable.icmp(), (3, 1));
        assert_eq!(Cause::NeighFailed.icmp(), (3, 1));
        assert_eq!(Cause::RouteProhibit.icmp(), (3, 13));
        assert_eq!(Cause::FragNeeded.icmp(), (3, 4));
        assert_eq!(Cause::ParamProblem.icmp(), (12, 0));
        assert_eq!(Cause::SourceRouteFailed.icmp(), (3, 5));
        // Linux's `ip_error`: ENETUNREACH is network unreachable, EACCES packet filtered.
        assert_eq!(Cause::RuleUnreachable.icmp(), (3, 0));
        assert_eq!(Cause::RuleProhibit.icmp(), (3, 13));
    }

    /// A cause that gets no error is counted under the drop reason its stage declares,
    /// by the names operators see (those of the drop counters before causes moved out of
    /// the reasons), and its sent-errors counter is named after that reason.
    #[test]
    fn causes_count_under_their_stages_reasons() {
        let want = [
            (Cause::TtlExpired, "ttl_expired"),
            (Cause::NoRoute, "no_route"),
            (Cause::RouteUnreachable, "route_unreachable"),
            (Cause::NeighFailed, "neigh_failed"),
            (Cause::UnknownProtocol, "unknown_protocol"),
            (Cause::NoSocket, "no_socket"),
            (Cause::FragNeeded, "frag_needed"),
            (Cause::RouteProhibit, "route_prohibit"),
            (Cause::ParamProblem, "ip4_bad_options"),
            (Cause::SourceRouteFailed, "ip4_source_route_failed"),
            (Cause::RuleUnreachable, "rule_unreachable"),
            (Cause::RuleProhibit, "rule_prohibit"),
            (Cause::ReassemblyTimeout, "defrag_timeout"),
        ];
        assert_eq!(want.len(), Cause::ALL.len());
        for (c, name) in want {
            assert_eq!(c.reason().to_string(), name, "{c:?}");
            assert_eq!(c.counter(), format!("sent_{name}"), "{c:?}");
        }
    }
}
