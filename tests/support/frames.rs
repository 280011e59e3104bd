//! Frames for the tests, built with etherparse (IPv4/UDP/TCP/ICMP) or by hand (ARP), so
//! what the datapath is fed does not come from its own code.

use etherparse::PacketBuilder;
use netbatch_wire::ethernet::MacAddr;

use crate::{ip, ip6};

/// A UDP datagram in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn udp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    sport: u16,
    dport: u16,
    ttl: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv4(ip(src).octets(), ip(dst).octets(), ttl)
        .udp(sport, dport);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("udp frame");
    v
}

/// A UDP datagram in an 802.1Q-tagged frame.
#[allow(clippy::too_many_arguments)]
pub fn udp_vlan(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    vid: u16,
    src: &str,
    dst: &str,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .single_vlan(etherparse::VlanId::try_new(vid).expect("vid"))
        .ipv4(ip(src).octets(), ip(dst).octets(), 64)
        .udp(sport, dport);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("udp frame");
    v
}

/// A TCP segment (ACK set) in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    sport: u16,
    dport: u16,
    seq: u32,
    ttl: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv4(ip(src).octets(), ip(dst).octets(), ttl)
        .tcp(sport, dport, seq, 65535)
        .ack(1);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("tcp frame");
    v
}

/// A TCP segment in an Ethernet frame, from `(s, sp)` to `(d, dp)` (IPv4 or IPv6 as the
/// addresses are; TTL or hop limit 64, window 64240) with the control bits `flags`
/// names (`S`, `A`, `F`, `R`); `ack` is sent with `A`.
pub fn tcp_flags(
    (sm, dm): (MacAddr, MacAddr),
    (s, sp): (&str, u16),
    (d, dp): (&str, u16),
    flags: &str,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(sm.0, dm.0);
    let l3 = if s.contains(':') {
        eth.ipv6(ip6(s).octets(), ip6(d).octets(), 64)
    } else {
        eth.ipv4(ip(s).octets(), ip(d).octets(), 64)
    };
    let mut b = l3.tcp(sp, dp, seq, 64240);
    if flags.contains('S') {
        b = b.syn();
    }
    if flags.contains('A') {
        b = b.ack(ack);
    }
    if flags.contains('F') {
        b = b.fin();
    }
    if flags.contains('R') {
        b = b.rst();
    }
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("tcp frame");
    v
}

/// An ICMP echo request in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn echo_request(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    id: u16,
    seq: u16,
    ttl: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv4(ip(src).octets(), ip(dst).octets(), ttl)
        .icmpv4_echo_request(id, seq);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("icmp frame");
    v
}

/// An ARP packet (RFC 826 layout, written by hand) in an Ethernet frame padded to 60
/// bytes.
pub fn arp(
    oper: u16,
    sha: MacAddr,
    spa: &str,
    tha: MacAddr,
    tpa: &str,
    dst_mac: MacAddr,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(60);
    v.extend_from_slice(&dst_mac.0);
    v.extend_from_slice(&sha.0);
    v.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 6, 4]);
    v.extend_from_slice(&oper.to_be_bytes());
    v.extend_from_slice(&sha.0);
    v.extend_from_slice(&ip(spa).octets());
    v.extend_from_slice(&tha.0);
    v.extend_from_slice(&ip(tpa).octets());
    v.resize(60, 0);
    v
}

/// Recomputes the IPv4 header checksum of an Ethernet II frame (after a test edits the
/// header on purpose), with etherparse.
pub fn refresh_ip_checksum(frame: &mut [u8]) {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    frame[24] = 0;
    frame[25] = 0;
    let (h, _) = etherparse::Ipv4Header::from_slice(&frame[14..14 + ihl]).expect("ipv4 header");
    let c = h.calc_header_checksum();
    frame[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Sets the IPv4 identification of an Ethernet II frame and refreshes its header
/// checksum (with etherparse).
pub fn set_ip_ident(frame: &mut [u8], id: u16) {
    frame[18..20].copy_from_slice(&id.to_be_bytes());
    refresh_ip_checksum(frame);
}

/// The ICMP message (header and body) of an Ethernet II frame, as etherparse sees it;
/// panics if the frame is not ICMPv4.
pub fn icmp(frame: &[u8]) -> &[u8] {
    match parse(frame).transport {
        Some(etherparse::TransportSlice::Icmpv4(i)) => i.slice(),
        other => panic!("not ICMP: {other:?}"),
    }
}

/// A parsed frame for assertions (etherparse's view).
pub fn parse(frame: &[u8]) -> etherparse::SlicedPacket<'_> {
    etherparse::SlicedPacket::from_ethernet(frame).expect("a frame etherparse can parse")
}

/// The IPv4 header of an Ethernet frame, parsed by etherparse.
pub fn ipv4(frame: &[u8]) -> etherparse::Ipv4Header {
    match etherparse::SlicedPacket::from_ethernet(frame)
        .expect("frame")
        .net
    {
        Some(etherparse::NetSlice::Ipv4(i)) => i.header().to_header(),
        other => panic!("not IPv4: {other:?}"),
    }
}

/// A UDP datagram over IPv6 in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn udp6(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    sport: u16,
    dport: u16,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv6(ip6(src).octets(), ip6(dst).octets(), hop_limit)
        .udp(sport, dport);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("udp6 frame");
    v
}

/// A TCP segment (ACK set) over IPv6 in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn tcp6(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    sport: u16,
    dport: u16,
    seq: u32,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv6(ip6(src).octets(), ip6(dst).octets(), hop_limit)
        .tcp(sport, dport, seq, 65535)
        .ack(1);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("tcp6 frame");
    v
}

/// An ICMPv6 echo request in an Ethernet frame.
#[allow(clippy::too_many_arguments)]
pub fn echo_request6(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    id: u16,
    seq: u16,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(src_mac.0, dst_mac.0)
        .ipv6(ip6(src).octets(), ip6(dst).octets(), hop_limit)
        .icmpv6_echo_request(id, seq);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("icmp6 frame");
    v
}

/// A neighbour solicitation (RFC 4861 4.3) for `target` from `src` (`::` for duplicate
/// address detection: then no source link-layer address option), to `dst` (a
/// solicited-node group or the target), hop limit 255, checksummed by etherparse.
pub fn neighbor_solicit(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    target: &str,
) -> Vec<u8> {
    let mut body = vec![0u8; 4];
    body.extend_from_slice(&ip6(target).octets());
    if !ip6(src).is_unspecified() {
        body.extend_from_slice(&[1, 1]);
        body.extend_from_slice(&src_mac.0);
    }
    icmp6(src_mac, dst_mac, src, dst, 255, 135, 0, &body)
}

/// A neighbour advertisement (RFC 4861 4.4) of `target` at `mac` with flags R, S, O as
/// given, hop limit 255.
#[allow(clippy::too_many_arguments)]
pub fn neighbor_advert(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    target: &str,
    (router, solicited, override_flag): (bool, bool, bool),
    mac: Option<MacAddr>,
) -> Vec<u8> {
    let flags =
        (u8::from(router) << 7) | (u8::from(solicited) << 6) | (u8::from(override_flag) << 5);
    let mut body = vec![flags, 0, 0, 0];
    body.extend_from_slice(&ip6(target).octets());
    if let Some(m) = mac {
        body.extend_from_slice(&[2, 1]);
        body.extend_from_slice(&m.0);
    }
    icmp6(src_mac, dst_mac, src, dst, 255, 136, 0, &body)
}

/// An ICMPv6 message of `ty` and `code` with `body` after the checksum (the rest of the
/// header and the data), checksummed by etherparse's pseudo-header sum.
#[allow(clippy::too_many_arguments)]
pub fn icmp6(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    hop_limit: u8,
    ty: u8,
    code: u8,
    body: &[u8],
) -> Vec<u8> {
    let (s, d) = (ip6(src), ip6(dst));
    let mut msg = vec![ty, code, 0, 0];
    msg.extend_from_slice(body);
    let ip = etherparse::Ipv6Header {
        traffic_class: 0,
        flow_label: etherparse::Ipv6FlowLabel::ZERO,
        payload_length: msg.len() as u16,
        next_header: etherparse::IpNumber::IPV6_ICMP,
        hop_limit,
        source: s.octets(),
        destination: d.octets(),
    };
    let sum = etherparse::checksum::Sum16BitWords::new()
        .add_16bytes(s.octets())
        .add_16bytes(d.octets())
        .add_4bytes((msg.len() as u32).to_be_bytes())
        .add_2bytes([0, 58])
        .add_slice(&msg)
        .ones_complement()
        .to_be();
    msg[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut v = Vec::new();
    v.extend_from_slice(&dst_mac.0);
    v.extend_from_slice(&src_mac.0);
    v.extend_from_slice(&[0x86, 0xdd]);
    ip.write(&mut v).expect("ipv6 header");
    v.extend_from_slice(&msg);
    v
}

/// The IPv6 header of an Ethernet frame, parsed by etherparse.
pub fn ipv6(frame: &[u8]) -> etherparse::Ipv6Header {
    match etherparse::SlicedPacket::from_ethernet(frame)
        .expect("frame")
        .net
    {
        Some(etherparse::NetSlice::Ipv6(i)) => i.header().to_header(),
        other => panic!("not IPv6: {other:?}"),
    }
}

/// The ICMPv6 message (header and body) of an Ethernet II frame, as etherparse sees it;
/// panics if the frame is not ICMPv6.
pub fn icmp6_of(frame: &[u8]) -> &[u8] {
    match parse(frame).transport {
        Some(etherparse::TransportSlice::Icmpv6(i)) => i.slice(),
        other => panic!("not ICMPv6: {other:?}"),
    }
}
