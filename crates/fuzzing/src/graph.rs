//! The whole graph over a list of frames.
//!
//! The input chooses the variant (batch mode, dispatch, each port's GRO mode and transmit
//! offloads, the pool's size, whether the sink takes GRO super-datagrams whole) and then
//! describes frames, each built from a realistic template (UDP, TCP, ICMP echo and errors,
//! ARP, IPv4 options, fragments, trains of one flow for GRO, other protocols and
//! ethertypes, VLAN and QinQ tags; IPv6 with extension headers, neighbour discovery and
//! ICMPv6) with its fields taken from the input, or taken as raw
//! bytes, or a previous frame mutated or repeated. Frames arrive in bursts on either port
//! of a router built from [`CONFIG`] as `netbatch replay` builds one (in-memory ports,
//! `runtime::build`, the route table built once and shared as the builder allows), with
//! the clock advancing between bursts by amounts the input chooses, so timers (ARP
//! retries and timeouts, rate limits) fire.
//!
//! The oracle: after every burst has been polled through, every frame fed was received,
//! `rx + originated = tx + delivered + dropped + held`, and no frame left a port shorter
//! than an Ethernet header or (unless a super-packet the port takes whole) longer after
//! its link header than the port's MTU; every frame the router built or rewrote has a
//! valid IPv4 header checksum and a TTL above 0 (IPv6: a hop limit above 0) and, when
//! every frame received had a valid L4 checksum, a valid one too; after the clock has run on
//! long enough for every ARP resolution to time out, the law holds again; after shutdown,
//! every buffer is back in the pool, and only once. Polling a burst is bounded: a burst that does not
//! drain is a finding too.

use std::collections::HashSet;

/// The tag protocols, as the wire module names them.
const C_TAG: u16 = netbatch_wire::ethernet::EtherType::VLAN.0;
const S_TAG: u16 = netbatch_wire::ethernet::EtherType::QINQ.0;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use netbatch_datapath::Worker;
use netbatch_engine::counters::drops_by_reason;
use netbatch_engine::{Dispatch, Mode, Pool};
use netbatch_ports::Port;
use netbatch_ports::mem::MemPort;
use netbatch_runtime::build::{self, Builder};
use netbatch_runtime::config::{AppConfig, Config};
use netbatch_stack::dissect::{self, L3};
use netbatch_stack::route::{Route6, RouteKind, Routes};
use netbatch_wire::checksum;
use netbatch_wire::ethernet::MacAddr;
use netbatch_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr, Icmpv4Type};
use netbatch_wire::ipv4::Ipv4Packet;
use netbatch_wire::tcp::{TcpFlags, TcpPacket, TcpRepr, TcpTimestamp};
use netbatch_wire::udp::{UdpPacket, UdpRepr};

use crate::input::Input;

/// The router every input runs through: two ports (eth0 with a VLAN and a QinQ
/// sub-interface; eth1 with a smaller MTU), a static neighbour and two next hops that
/// never answer ARP, blackhole / prohibit / unreachable routes, a filter on every hook
/// but output (one matching a mark), ingress classifier filters with every kind of
/// action (mark, police, redirect, goto, mirror, drop), a UDP sink on two ports and an
/// echo, small neighbour queues and ICMP limits so that overflow and rate limiting are
/// reached.
pub const CONFIG: &str = r#"
[datapath]
burst = 16
budget = 64

[pool]
buffers = 256
cache_size = 32

[icmp]
rate = 100
burst = 4

[neighbour]
max_entries = 8
queue_len = 3
reachable_ms = 500
retrans_ms = 100
max_probes = 2
gc_stale_ms = 2000

[[neighbour.static]]
ip = "192.0.2.254"
mac = "02:00:00:00:02:fe"
dev = "eth1"

[[port]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["198.51.100.1/24", "2001:db8:100::1/64"]
[[port.vlan]]
id = 10
addresses = ["10.10.0.1/24"]
[[port.vlan]]
qinq = [20, 30]
addresses = ["10.20.0.1/24"]

[[port]]
name = "eth1"
mac = "02:00:00:00:01:01"
mtu = 1280
addresses = ["192.0.2.1/24", "2001:db8:200::1/64"]

[[route]]
prefix = "203.0.113.0/24"
via = "192.0.2.254"

[[route]]
prefix = "10.99.0.0/16"
via = "192.0.2.253"

[[route]]
prefix = "default"
via = "198.51.100.254"

[[route]]
prefix = "10.66.0.0/16"
kind = "blackhole"

[[route]]
prefix = "10.67.0.0/16"
kind = "prohibit"

[[route]]
prefix = "10.68.0.0/16"
kind = "unreachable"

[filter.prerouting]
[[filter.prerouting.rule]]
proto = "udp"
dport = "7000-7100"
action = "drop"

[filter.input]
[[filter.input.rule]]
proto = "tcp"
dport = 23
action = "drop"
[[filter.input.rule]]
mark = "7/0xff"
proto = "udp"
sport = 53
action = "drop"

[filter.forward]
[[filter.forward.rule]]
dst = "203.0.113.128/25"
action = "drop"

[filter.postrouting]
[[filter.postrouting.rule]]
proto = 132
action = "drop"

[[classifier.filter]]
dev = "eth0"
protocol = "ip"
ip_proto = "udp"
dst_port = "5002"
actions = ["skbedit mark 7"]

[[classifier.filter]]
protocol = "ip"
ip_proto = "tcp"
tcp_flags = "0x02/0x02"
actions = ["police rate 8kbit burst 2k conform-exceed pass/drop"]

[[classifier.filter]]
protocol = "ip"
dst_ip = "203.0.113.64/26"
actions = ["mirred egress redirect dev eth1"]

[[classifier.filter]]
protocol = "802.1q"
vlan_id = 10
actions = ["goto chain 1"]

[[classifier.filter]]
chain = 1
protocol = "802.1q"
vlan_ethtype = "ip"
ip_proto = "icmp"
icmp_type = 8
actions = ["mirred egress mirror dev eth1", "pass"]

[[classifier.filter]]
protocol = "arp"
src_mac = "02:00:00:00:09:00/40"
actions = ["drop"]

[[app]]
kind = "udp-sink"
bind = "0.0.0.0:5001-5002"
queue = 8

[[app]]
kind = "udp-echo"
bind = "198.51.100.1:7"
queue = 8
"#;

/// [`CONFIG`], parsed, with its IPv6 routes and neighbour: 2001:db8:300::/48 via a
/// static neighbour on eth1, 2001:db8:301::/48 via one that never answers, a blackhole,
/// a prohibit and an unreachable /48, and a default route via eth0's peer.
fn parse() -> Config {
    let mut cfg =
        Config::parse(CONFIG, Path::new("."), "graph.toml").unwrap_or_else(|e| panic!("{e}"));
    let r = |p: &str, kind, dev: Option<u16>, via: Option<&str>| {
        Route6::new(
            p.parse().expect("prefix"),
            kind,
            dev,
            via.map(|a| a.parse().expect("address")),
        )
    };
    cfg.routes6 = vec![
        r(
            "2001:db8:300::/48",
            RouteKind::Unicast,
            Some(1),
            Some("2001:db8:200::fe"),
        ),
        r(
            "2001:db8:301::/48",
            RouteKind::Unicast,
            Some(1),
            Some("2001:db8:200::fd"),
        ),
        r("2001:db8:666::/48", RouteKind::Blackhole, None, None),
        r("2001:db8:667::/48", RouteKind::Prohibit, None, None),
        r("2001:db8:668::/48", RouteKind::Unreachable, None, None),
        r(
            "::/0",
            RouteKind::Unicast,
            Some(0),
            Some("2001:db8:100::fe"),
        ),
    ];
    cfg.neighbours6 = vec![netbatch_runtime::setup::StaticNeighbour6 {
        iface: 1,
        ip: "2001:db8:200::fe".parse().expect("address"),
        mac: MacAddr([2, 0, 0, 0, 2, 0xfe]),
    }];
    cfg
}

/// The route tables of [`CONFIG`] (as configured, and without the default route), built
/// once per process. A table does not depend on what a variant changes (offloads, modes,
/// the pool, host switches), and building one is most of a worker's cost (its direct
/// table has 2^24 entries, which the default route fills), so every worker shares one,
/// as the builder allows. The rest of the configuration is parsed for every input: the
/// classifier's policers keep their buckets in it, and one input must not see another's.
fn tables() -> &'static [Arc<Routes>; 2] {
    static T: OnceLock<[Arc<Routes>; 2]> = OnceLock::new();
    T.get_or_init(|| {
        let cfg = parse();
        let table =
            |cfg: &Config| Arc::new(build::route_table(cfg).unwrap_or_else(|e| panic!("{e}")));
        let mut no_default = cfg.clone();
        no_default.routes.retain(|r| !r.prefix.is_default());
        [table(&cfg), table(&no_default)]
    })
}

/// Frames per input at most (trains and repeats included).
const MAX_FRAMES: usize = 160;
/// Bursts per input at most.
const MAX_BURSTS: usize = 32;
/// Poll rounds a burst may take to drain.
const MAX_ROUNDS: usize = 10_000;

const US0: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const US1: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);
const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// Addresses a template picks from: ours, neighbours (known, unresolved), destinations of
/// every route kind, broadcasts, multicast and other special addresses.
const ADDRS: [[u8; 4]; 24] = [
    [198, 51, 100, 1],
    [192, 0, 2, 1],
    [10, 10, 0, 1],
    [10, 20, 0, 1],
    [198, 51, 100, 7],
    [192, 0, 2, 254],
    [192, 0, 2, 253],
    [203, 0, 113, 5],
    [203, 0, 113, 200],
    [10, 99, 1, 1],
    [8, 8, 8, 8],
    [10, 66, 1, 1],
    [10, 67, 1, 1],
    [10, 68, 1, 1],
    [255, 255, 255, 255],
    [198, 51, 100, 255],
    [224, 0, 0, 1],
    [0, 0, 0, 0],
    [127, 0, 0, 1],
    [10, 10, 0, 9],
    [10, 20, 0, 9],
    [192, 0, 2, 9],
    [240, 0, 0, 1],
    [198, 51, 100, 0],
];

/// IPv6 addresses a template picks from: ours (global, link-local from the MACs), the
/// peer's, destinations of every route kind, multicast groups we join and others, and
/// special ones.
const ADDRS6: [&str; 20] = [
    "2001:db8:100::1",
    "2001:db8:200::1",
    "fe80::ff:fe00:1",
    "fe80::ff:fe00:101",
    "2001:db8:100::7",
    "fe80::ff:fe00:2",
    "2001:db8:300::5",
    "2001:db8:301::5",
    "2001:db8:666::1",
    "2001:db8:667::1",
    "2001:db8:668::1",
    "2001:db8:999::1",
    "ff02::1",
    "ff02::2",
    "ff02::1:ff00:1",
    "ff02::5",
    "::",
    "::1",
    "fe80::1234",
    "ff05::2",
];

/// Ports a template picks from: the sink's, the echo's, the filtered range, others.
const PORTS: [u16; 7] = [5001, 5002, 7, 7050, 53, 23, 33434];

/// The variant an input chooses.
#[derive(Debug, Clone, Copy)]
struct Variant {
    mode: Mode,
    dispatch: Dispatch,
    /// Per port: 0 off, 1 standard, 2 fraglist.
    gro: [u8; 2],
    /// Per port: the transmit offload bits (TSO, USO, GSO list, checksum) and receive
    /// checksum.
    offloads: [u8; 2],
    small_pool: bool,
    sink_gro: bool,
    /// Host switches: forwarding off, source routes honoured, echo off.
    no_forwarding: bool,
    source_route: bool,
    no_echo: bool,
    no_default_route: bool,
}

impl Variant {
    fn read(i: &mut Input<'_>) -> Self {
        let (a, b, c) = (i.u8(), i.u8(), i.u8());
        Self {
            mode: if a & 1 == 0 { Mode::List } else { Mode::Packet },
            dispatch: if a & 2 == 0 {
                Dispatch::Buckets
            } else {
                Dispatch::Runs
            },
            gro: [(a >> 2) & 3, (a >> 4) & 3].map(|g| g % 3),
            offloads: [b & 0x1f, c & 0x1f],
            small_pool: a & 0x40 != 0,
            sink_gro: a & 0x80 != 0,
            no_forwarding: c & 0x20 != 0,
            source_route: c & 0x40 != 0,
            no_echo: b & 0x20 != 0,
            no_default_route: c & 0x80 != 0,
        }
    }

    /// The configuration of this variant.
    fn config(&self) -> Config {
        let mut cfg = parse();
        cfg.mode = self.mode;
        cfg.dispatch = self.dispatch;
        if self.small_pool {
            cfg.pool.buffers = 32;
            cfg.pool.cache_size = 4;
        }
        cfg.host.forwarding = !self.no_forwarding;
        cfg.host.accept_source_route = self.source_route;
        cfg.host.icmp_echo = !self.no_echo;
        if self.no_default_route {
            cfg.routes.retain(|r| !r.prefix.is_default());
        }
        for (p, port) in cfg.ports.iter_mut().enumerate() {
            let f = &mut port.setup.features;
            f.rx_gro = self.gro[p] != 0;
            f.rx_udp_gro_forwarding = self.gro[p] == 1;
            f.rx_gro_list = self.gro[p] == 2;
            let o = self.offloads[p];
            f.tx_tcp_segmentation = o & 1 != 0;
            f.tx_udp_segmentation = o & 2 != 0;
            f.tx_gso_list = o & 4 != 0;
            f.tx_checksum = o & 8 != 0;
            f.rx_checksum = o & 16 != 0;
        }
        for app in &mut cfg.apps {
            if let AppConfig::UdpSink { gro, .. } = app {
                *gro = self.sink_gro;
            }
        }
        cfg
    }
}

/// The fields of an IPv4 header a template writes.
#[derive(Debug, Clone)]
struct Ip {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ttl: u8,
    tos: u8,
    ident: u16,
    df: bool,
    mf: bool,
    frag_off: u16,
    options: Vec<u8>,
    bad_sum: bool,
    /// Added to the total length field (0: the right length).
    len_delta: i8,
}

impl Ip {
    /// An address from the table, or (index 24 and up) four bytes of the input.
    fn addr(i: &mut Input<'_>) -> Ipv4Addr {
        let k = usize::from(i.u8() % 32);
        match ADDRS.get(k) {
            Some(a) => Ipv4Addr::from(*a),
            None => Ipv4Addr::from(i.array::<4>()),
        }
    }

    /// Source, destination and a byte of flags, each flag reading its value from the
    /// input only when set.
    fn read(i: &mut Input<'_>, proto: u8) -> Self {
        let src = Self::addr(i);
        let dst = Self::addr(i);
        let f = i.u8();
        let mut ip = Self {
            src,
            dst,
            proto,
            ttl: 64,
            tos: 0,
            ident: 1,
            df: f & 0x04 != 0,
            mf: false,
            frag_off: 0,
            options: Vec::new(),
            bad_sum: f & 0x01 != 0,
            len_delta: 0,
        };
        if f & 0x02 != 0 {
            ip.ttl = i.u8() % 4;
        }
        if f & 0x08 != 0 {
            ip.tos = i.u8();
        }
        if f & 0x10 != 0 {
            ip.len_delta = i.u8() as i8;
        }
        if f & 0x20 != 0 {
            ip.ident = i.u16();
        }
        ip
    }

    /// The packet: this header (options padded with end-of-list to whole words, at most
    /// 40 bytes) and `l4`.
    fn packet(&self, l4: &[u8]) -> Vec<u8> {
        let opts = self.options.len().min(40).next_multiple_of(4);
        let hl = 20 + opts;
        let mut b = vec![0; hl + l4.len()];
        let total = (hl + l4.len()) as u16;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        p.set_header_len(hl);
        p.set_dscp_ecn(self.tos);
        p.set_total_len(total.wrapping_add_signed(i16::from(self.len_delta)));
        p.set_ident(self.ident);
        p.set_dont_frag(self.df);
        p.set_more_frags(self.mf);
        p.set_frag_offset(self.frag_off);
        p.set_ttl(self.ttl);
        p.set_protocol(self.proto.into());
        p.set_src(self.src);
        p.set_dst(self.dst);
        let n = self.options.len().min(40);
        p.options_mut()[..n].copy_from_slice(&self.options[..n]);
        p.fill_checksum();
        if self.bad_sum {
            b[10] ^= 0x5a;
        }
        b[hl..].copy_from_slice(l4);
        b
    }
}

/// A payload of a length the input chooses: mostly short, else from 1216 bytes (beyond
/// eth1's MTU) to 2096 (beyond eth0's, and beyond a buffer's room).
fn payload(i: &mut Input<'_>) -> Vec<u8> {
    let n = i.u8();
    let len = if n < 200 {
        usize::from(n)
    } else {
        usize::from(n - 199) * 16 + 1200
    };
    let fill = i.u8();
    (0..len).map(|k| fill.wrapping_add(k as u8)).collect()
}

fn udp_segment(ip: &Ip, sport: u16, dport: u16, data: &[u8], zero_sum: bool) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut b = vec![0; repr.buffer_len(data.len())];
    b[8..].copy_from_slice(data);
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        data.len(),
        ip.src,
        ip.dst,
        !zero_sum,
    );
    b
}

fn l4_port(i: &mut Input<'_>) -> u16 {
    let k = i.u8();
    match PORTS.get(usize::from(k % 8)) {
        Some(&p) => p,
        None => i.u16(),
    }
}

/// A TCP segment: ports, sequence number, control bits and options from the input.
struct Tcp {
    sport: u16,
    dport: u16,
    seq: u32,
    flags: TcpFlags,
    opts: u8,
}

impl Tcp {
    fn read(i: &mut Input<'_>) -> Self {
        Self {
            sport: l4_port(i),
            dport: l4_port(i),
            seq: i.u32(),
            flags: TcpFlags(u16::from(i.u8())),
            opts: i.u8(),
        }
    }

    fn segment(&self, ip: &Ip, data: &[u8]) -> Vec<u8> {
        let o = self.opts;
        let repr = TcpRepr {
            src_port: self.sport,
            dst_port: self.dport,
            seq_number: self.seq,
            ack_number: 1,
            flags: self.flags,
            window: 65535,
            urgent_pointer: 0,
            max_seg_size: (o & 1 != 0).then_some(1460),
            window_scale: (o & 2 != 0).then_some(7),
            sack_permitted: o & 4 != 0,
            timestamp: (o & 8 != 0).then_some(TcpTimestamp {
                tsval: 1000,
                tsecr: 0,
            }),
        };
        let mut b = vec![0; repr.buffer_len(data.len())];
        b[repr.header_len()..].copy_from_slice(data);
        repr.emit(&mut TcpPacket::new_unchecked(&mut b[..]), ip.src, ip.dst);
        if o & 0x80 != 0 {
            b[16] ^= 0xff;
        }
        b
    }
}

fn icmp_message(msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::Other {
        msg_type: Icmpv4Type(msg_type),
        code,
        rest_of_header: rest,
        data,
    };
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut b[..]));
    b
}

/// IPv4 options a template carries: Record Route, Timestamp, the source routes, Router
/// Alert, padding, or bytes of the input.
fn options(i: &mut Input<'_>) -> Vec<u8> {
    let k = i.u8();
    let ptr = 4 + (i.u8() % 12) * 4;
    match k % 8 {
        0 => vec![7, 11, ptr, 0, 0, 0, 0, 0, 0, 0, 0],
        1 => vec![68, 12, ptr + 1, i.u8() & 0x03, 0, 0, 0, 0, 0, 0, 0, 0],
        2 => vec![131, 11, ptr, 203, 0, 113, 5, 192, 0, 2, 254],
        3 => vec![137, 7, ptr, 10, 99, 1, 1],
        4 => vec![148, 4, 0, 0],
        5 => vec![1, 1, 1, 0],
        _ => {
            let n = usize::from(i.u8() % 41);
            i.bytes(n).to_vec()
        }
    }
}

/// One frame's link header: destination (ours on `port` mostly; broadcast, multicast,
/// another host, or six input bytes), source (the peer, or six input bytes), and tags.
fn ethernet(i: &mut Input<'_>, port: usize, ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let own = if port == 0 { US0 } else { US1 };
    let k = i.u8();
    let dst = match k & 7 {
        2 => MacAddr::BROADCAST,
        3 => MacAddr([1, 0, 0x5e, 0, 0, 1]),
        4 => MacAddr([2, 0, 0, 0, 9, 9]),
        5 => MacAddr(i.array()),
        _ => own,
    };
    let src = if k & 8 != 0 { MacAddr(i.array()) } else { PEER };
    let tags: Vec<(u16, u16)> = match (k >> 4) & 7 {
        1 => vec![(C_TAG, 10)],
        2 => vec![(S_TAG, 20), (C_TAG, 30)],
        3 => vec![(C_TAG, i.u16())],
        4 => vec![(S_TAG, i.u16()), (C_TAG, i.u16())],
        5 => vec![(C_TAG, 10), (C_TAG, 20), (C_TAG, 30)],
        _ => vec![],
    };
    let mut f = Vec::with_capacity(14 + 4 * tags.len() + l3.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    if k & 0x80 != 0 {
        // Padding after the packet, as a short frame gets on the wire.
        f.resize(f.len().max(60) + usize::from(i.u8() % 16), 0);
    }
    f
}

/// The fields of an IPv6 header a template writes, and the extension headers before
/// its upper layer.
#[derive(Debug, Clone)]
struct Ip6 {
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    tc_flow: u32,
    /// Extension headers (each a next header value and its bytes after the first two).
    ext: Vec<(u8, Vec<u8>)>,
    /// Added to the payload length field (0: the right length).
    len_delta: i8,
}

impl Ip6 {
    /// An address from the table, or (index 20 and up) sixteen bytes of the input.
    fn addr(i: &mut Input<'_>) -> Ipv6Addr {
        let k = usize::from(i.u8() % 24);
        match ADDRS6.get(k) {
            Some(a) => a.parse().expect("address"),
            None => Ipv6Addr::from(i.array::<16>()),
        }
    }

    fn read(i: &mut Input<'_>) -> Self {
        let (src, dst) = (Self::addr(i), Self::addr(i));
        let f = i.u8();
        let mut ip = Self {
            src,
            dst,
            hop_limit: 64,
            tc_flow: 0,
            ext: Vec::new(),
            len_delta: 0,
        };
        if f & 0x01 != 0 {
            ip.hop_limit = [0, 1, 2, 255][usize::from(i.u8() % 4)];
        }
        if f & 0x02 != 0 {
            ip.tc_flow = i.u32() & 0x0fff_ffff;
        }
        if f & 0x04 != 0 {
            ip.len_delta = i.u8() as i8;
        }
        if f & 0x08 != 0 {
            for _ in 0..1 + i.u8() % 4 {
                let (nh, body) = match i.u8() % 6 {
                    // Hop-by-hop or destination options: padding, Router Alert, an
                    // unknown option of each action, or input bytes.
                    k @ (0 | 1) => {
                        let opt: Vec<u8> = match i.u8() % 5 {
                            0 => vec![1, 4, 0, 0, 0, 0],
                            1 => vec![5, 2, 0, 0, 1, 0],
                            2 => vec![0x1e | (i.u8() & 0xc0), 2, 0, 0, 1, 0],
                            3 => vec![0xc2, 4, 0, 1, 0, 0],
                            _ => i.bytes(6).to_vec(),
                        };
                        (if k == 0 { 0 } else { 60 }, opt)
                    }
                    // Routing: type 0 or 2, segments left from the input.
                    2 => {
                        let mut b = vec![i.u8() % 4, i.u8() % 3, 0, 0, 0, 0];
                        b.extend_from_slice(&Self::addr(i).octets());
                        (43, b)
                    }
                    // Fragment: atomic, first, or later.
                    3 => {
                        let off = match i.u8() % 3 {
                            0 => 0u16,
                            1 => 1,
                            _ => i.u16() & 0xfff9,
                        };
                        let mut b = off.to_be_bytes().to_vec();
                        b.extend_from_slice(&i.u32().to_be_bytes());
                        (44, b)
                    }
                    // A header the walk refuses, or No Next Header.
                    4 => ([135, 253, 59][usize::from(i.u8() % 3)], vec![0; 6]),
                    _ => (60, i.bytes(6).to_vec()),
                };
                ip.ext.push((nh, body));
            }
        }
        ip
    }

    /// The packet: the fixed header, the extension headers (each padded to whole 8-byte
    /// units unless a fragment header), then `l4` of protocol `proto`.
    fn packet(&self, proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut chain = Vec::new();
        for (k, (nh, body)) in self.ext.iter().enumerate() {
            let next = self.ext.get(k + 1).map_or(proto, |(n, _)| *n);
            let start = chain.len();
            chain.push(next);
            if *nh == 44 {
                chain.push(0);
                chain.extend_from_slice(&body[..body.len().min(6)]);
                chain.resize(start + 8, 0);
            } else {
                let units = (2 + body.len()).div_ceil(8);
                chain.push((units - 1) as u8);
                chain.extend_from_slice(body);
                chain.resize(start + units * 8, 0);
            }
        }
        let first = self.ext.first().map_or(proto, |(n, _)| *n);
        let plen = (chain.len() + l4.len()) as u16;
        let mut v = Vec::with_capacity(40 + plen as usize);
        v.extend_from_slice(&((6u32 << 28) | self.tc_flow).to_be_bytes());
        v.extend_from_slice(
            &plen
                .wrapping_add_signed(i16::from(self.len_delta))
                .to_be_bytes(),
        );
        v.extend_from_slice(&[first, self.hop_limit]);
        v.extend_from_slice(&self.src.octets());
        v.extend_from_slice(&self.dst.octets());
        v.extend(chain);
        v.extend_from_slice(l4);
        v
    }
}

/// An upper-layer message over IPv6 with its checksum filled (over `src`, `dst`), unless
/// `bad` (then one bit off), at `at` in `msg`.
fn sum6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: u8,
    mut msg: Vec<u8>,
    at: usize,
    bad: bool,
) -> Vec<u8> {
    if msg.len() >= at + 2 {
        msg[at..at + 2].fill(0);
        let acc = checksum::pseudo_header_v6(src, dst, proto, msg.len() as u32);
        let mut c = checksum::finish(checksum::sum(&msg, acc));
        if proto == 17 && c == 0 {
            c = 0xffff;
        }
        if bad {
            c ^= 1;
        }
        msg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    msg
}

/// Reads the frames of one record (several for trains and repeats) into `out`.
fn record(i: &mut Input<'_>, port: usize, kind: u8, out: &mut Vec<Vec<u8>>) {
    match kind % 18 {
        // Raw bytes.
        0 => {
            let n = usize::from(i.u8());
            out.push(i.bytes(n).to_vec());
        }
        // UDP.
        1 => {
            let ip = Ip::read(i, 17);
            let (s, d, z) = (l4_port(i), l4_port(i), i.bool());
            let l4 = udp_segment(&ip, s, d, &payload(i), z);
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // TCP.
        2 => {
            let ip = Ip::read(i, 6);
            let t = Tcp::read(i);
            let l4 = t.segment(&ip, &payload(i));
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // ICMP echo request or reply.
        3 => {
            let ip = Ip::read(i, 1);
            let t = if i.bool() { 8 } else { 0 };
            let rest = i.u32();
            let l4 = icmp_message(t, 0, rest, &payload(i));
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // ICMP error quoting a packet (possibly one of ours).
        4 => {
            let ip = Ip::read(i, 1);
            let t = [3, 11, 12, 4, 5][usize::from(i.u8() % 5)];
            let code = i.u8() % 16;
            let proto = [17, 6, 1][usize::from(i.u8() % 3)];
            let inner = Ip::read(i, proto);
            let quoted = inner.packet(&i.array::<8>());
            let l4 = icmp_message(t, code, u32::from(i.u16()), &quoted);
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // Any ICMP type and code.
        5 => {
            let ip = Ip::read(i, 1);
            let (t, c, rest) = (i.u8(), i.u8(), i.u32());
            let l4 = icmp_message(t, c, rest, &payload(i));
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // ARP.
        6 => {
            let op = [1u16, 2, 1, 2, 3][usize::from(i.u8() % 5)];
            let sha = if i.bool() { PEER } else { MacAddr(i.array()) };
            let (spa, tpa) = (Ip::addr(i), Ip::addr(i));
            let tha = if i.bool() {
                MacAddr([0; 6])
            } else {
                MacAddr(i.array())
            };
            let mut a = Vec::with_capacity(28);
            a.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
            a.extend_from_slice(&op.to_be_bytes());
            a.extend_from_slice(&sha.0);
            a.extend_from_slice(&spa.octets());
            a.extend_from_slice(&tha.0);
            a.extend_from_slice(&tpa.octets());
            if i.bool() {
                a.resize(a.len() + usize::from(i.u8()) * 8, 0);
            }
            out.push(ethernet(i, port, 0x0806, &a));
        }
        // IPv4 options on UDP or ICMP.
        7 => {
            let udp = i.bool();
            let mut ip = Ip::read(i, if udp { 17 } else { 1 });
            ip.options = options(i);
            if i.bool() {
                ip.options.extend(options(i));
            }
            let data = payload(i);
            // A sender sums the pseudo-header with the final destination.
            let mut end = ip.clone();
            end.dst = final_destination(&ip.options, ip.dst);
            let l4 = if udp {
                udp_segment(&end, l4_port(i), l4_port(i), &data, false)
            } else {
                icmp_message(8, 0, 0x0001_0001, &data)
            };
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // A fragment: UDP or ICMP data with MF and an offset from the input.
        8 => {
            let udp = i.bool();
            let mut ip = Ip::read(i, if udp { 17 } else { 1 });
            let f = i.u16();
            ip.mf = f & 0x8000 != 0;
            ip.frag_off = (f & 0x00ff) * 8;
            let data = payload(i);
            let l4 = if ip.frag_off != 0 {
                data
            } else if udp {
                udp_segment(&ip, l4_port(i), l4_port(i), &data, false)
            } else {
                icmp_message(8, 0, 0x0002_0002, &data)
            };
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // A train of one flow: consecutive TCP segments or UDP datagrams of one length
        // (the last may be shorter), for GRO to merge.
        9 => {
            let n = 1 + usize::from(i.u8() % 16);
            let tcp = i.bool();
            let mut ip = Ip::read(i, if tcp { 6 } else { 17 });
            let mut t = Tcp::read(i);
            let data = payload(i);
            let last = usize::from(i.u8()) % (data.len() + 1);
            let link = i.u8();
            for k in 0..n {
                let d = if k + 1 == n { &data[..last] } else { &data[..] };
                let l4 = if tcp {
                    t.segment(&ip, d)
                } else {
                    udp_segment(&ip, t.sport, t.dport, d, false)
                };
                let mut e = Input::new(std::slice::from_ref(&link));
                out.push(ethernet(&mut e, port, 0x0800, &ip.packet(&l4)));
                t.seq = t.seq.wrapping_add(d.len() as u32);
                ip.ident = ip.ident.wrapping_add(1);
            }
        }
        // The previous frame with bytes changed, maybe cut short.
        10 => {
            let Some(mut f) = out.last().cloned() else {
                return;
            };
            for _ in 0..1 + i.u8() % 4 {
                let at = usize::from(i.u16());
                let b = i.u8();
                if !f.is_empty() {
                    let n = f.len();
                    f[at % n] = b;
                }
            }
            let cut = i.u16();
            if cut & 0x8000 != 0 {
                f.truncate(usize::from(cut & 0x7fff));
            }
            out.push(f);
        }
        // Another IP protocol (SCTP, UDP-Lite, GRE, IGMP, IPv6-in-IPv4, or any).
        11 => {
            let proto = match i.u8() % 8 {
                0 => 132,
                1 => 136,
                2 => 47,
                3 => 2,
                4 => 41,
                _ => i.u8(),
            };
            let ip = Ip::read(i, proto);
            let mut l4 = vec![0x13, 0x89, 0x13, 0x89, 0, 0, 0, 0];
            l4.extend(payload(i));
            out.push(ethernet(i, port, 0x0800, &ip.packet(&l4)));
        }
        // Another ethertype, or an IPv4 ethertype over something else.
        12 => {
            let et = match i.u8() % 4 {
                0 => 0x86dd,
                1 => 0x88cc,
                2 => 0x0800,
                _ => i.u16(),
            };
            let mut l3 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
            l3.extend(payload(i));
            out.push(ethernet(i, port, et, &l3));
        }
        // UDP, TCP or ICMPv6 echo over IPv6, extension headers maybe.
        14 => {
            let ip = Ip6::read(i);
            let bad = i.bool();
            let (proto, l4) = match i.u8() % 3 {
                0 => {
                    let mut u = vec![0; 8];
                    u[..2].copy_from_slice(&l4_port(i).to_be_bytes());
                    u[2..4].copy_from_slice(&l4_port(i).to_be_bytes());
                    u.extend(payload(i));
                    let n = u.len() as u16;
                    u[4..6].copy_from_slice(&n.to_be_bytes());
                    (17, sum6(ip.src, ip.dst, 17, u, 6, bad))
                }
                1 => {
                    let t = Tcp::read(i);
                    let mut b = vec![0; 20];
                    b[..2].copy_from_slice(&t.sport.to_be_bytes());
                    b[2..4].copy_from_slice(&t.dport.to_be_bytes());
                    b[4..8].copy_from_slice(&t.seq.to_be_bytes());
                    b[12] = 5 << 4;
                    b[13] = t.flags.0 as u8;
                    b[14..16].copy_from_slice(&[0xff, 0xff]);
                    b.extend(payload(i));
                    (6, sum6(ip.src, ip.dst, 6, b, 16, bad))
                }
                _ => {
                    let mut m = vec![128, 0, 0, 0];
                    m.extend_from_slice(&i.u32().to_be_bytes());
                    m.extend(payload(i));
                    (58, sum6(ip.src, ip.dst, 58, m, 2, bad))
                }
            };
            out.push(ethernet(i, port, 0x86dd, &ip.packet(proto, &l4)));
        }
        // Neighbour discovery: a solicitation or advertisement, hop limit 255 mostly,
        // with or without its link-layer address option.
        15 => {
            let mut ip = Ip6::read(i);
            ip.ext.clear();
            if i.u8() & 3 != 0 {
                ip.hop_limit = 255;
            }
            let advert = i.bool();
            let mut m = vec![if advert { 136 } else { 135 }, i.u8() % 2, 0, 0];
            m.extend_from_slice(&[i.u8() & 0xe0, 0, 0, 0]);
            m.extend_from_slice(&Ip6::addr(i).octets());
            if i.bool() {
                m.extend_from_slice(&[if advert { 2 } else { 1 }, 1]);
                m.extend_from_slice(&(if i.bool() { PEER } else { MacAddr(i.array()) }).0);
            }
            let bad = i.u8() & 7 == 0;
            let m = sum6(ip.src, ip.dst, 58, m, 2, bad);
            out.push(ethernet(i, port, 0x86dd, &ip.packet(58, &m)));
        }
        // Any ICMPv6 type and code, an error quoting a packet mostly.
        16 => {
            let ip = Ip6::read(i);
            let (t, c) = (i.u8(), i.u8() % 8);
            let mut m = vec![t, c, 0, 0];
            m.extend_from_slice(&i.u32().to_be_bytes());
            let inner = Ip6::read(i);
            m.extend(inner.packet(17, &[0x13, 0x89, 0, 53, 0, 8, 0, 0]));
            let m = sum6(ip.src, ip.dst, 58, m, 2, false);
            out.push(ethernet(i, port, 0x86dd, &ip.packet(58, &m)));
        }
        // A train of one IPv6 flow: consecutive UDP datagrams of one length.
        17 => {
            let n = 1 + usize::from(i.u8() % 16);
            let mut ip = Ip6::read(i);
            ip.ext.clear();
            let (sp, dp) = (l4_port(i), l4_port(i));
            let data = payload(i);
            let link = i.u8();
            for _ in 0..n {
                let mut u = vec![0; 8];
                u[..2].copy_from_slice(&sp.to_be_bytes());
                u[2..4].copy_from_slice(&dp.to_be_bytes());
                u.extend_from_slice(&data);
                let len = u.len() as u16;
                u[4..6].copy_from_slice(&len.to_be_bytes());
                let u = sum6(ip.src, ip.dst, 17, u, 6, false);
                let mut e = Input::new(std::slice::from_ref(&link));
                out.push(ethernet(&mut e, port, 0x86dd, &ip.packet(17, &u)));
            }
        }
        // The previous frame again, a few times.
        _ => {
            let Some(f) = out.last().cloned() else {
                return;
            };
            for _ in 0..1 + i.u8() % 8 {
                out.push(f.clone());
            }
        }
    }
}

/// A frame and where it arrives.
struct Burst {
    frames: Vec<(usize, Vec<u8>)>,
    /// Nanoseconds the clock advances before the burst.
    advance: u64,
}

/// The bursts an input describes (after its variant).
fn bursts(i: &mut Input<'_>) -> Vec<Burst> {
    let mut out = vec![Burst {
        frames: Vec::new(),
        advance: 0,
    }];
    let mut scratch: Vec<Vec<u8>> = Vec::new();
    let mut total = 0;
    while !i.is_empty() && total < MAX_FRAMES {
        let op = i.u8();
        let port = usize::from(op >> 7);
        let advance = match (op >> 5) & 3 {
            0 => None,
            1 => Some(0),
            2 => Some(u64::from(i.u8()) * 1_000_000),
            _ => Some(u64::from(i.u8()) * 50_000_000),
        };
        if let Some(advance) = advance
            && out.len() < MAX_BURSTS
            && out.last().is_some_and(|b| !b.frames.is_empty())
        {
            out.push(Burst {
                frames: Vec::new(),
                advance,
            });
        }
        let before = scratch.len();
        record(i, port, op & 0x1f, &mut scratch);
        let cur = out.last_mut().expect("one burst at least");
        for f in &scratch[before..] {
            if total < MAX_FRAMES {
                cur.frames.push((port, f.clone()));
                total += 1;
            }
        }
        // Keep only the last frame for the next record to mutate or repeat.
        if scratch.len() > 1 {
            scratch.drain(..scratch.len() - 1);
        }
    }
    out
}

/// Whether the IPv4 packet of frame `f` has a valid L4 checksum, or cannot leave the
/// router in another form than as received (not IPv4, or an IPv4 header `ip4-input`
/// refuses): `false` for a fragment, whose checksum cannot be told alone, and for any
/// TCP, UDP or ICMP message whose checksum does not verify.
fn l4_valid(f: &[u8]) -> bool {
    let r = dissect::parse(f);
    if r.l3_type == L3::Ipv6 {
        return l4_valid6(f, &r);
    }
    if r.l3_type != L3::Ipv4 || r.l4 == 0 {
        return true;
    }
    let Ok(ip) = Ipv4Packet::new_checked(&f[usize::from(r.l3)..]) else {
        return true;
    };
    let total = usize::from(ip.total_len());
    let avail = f.len() - usize::from(r.l3);
    if !ip.verify_checksum() || total < ip.header_len() || total > avail {
        return true;
    }
    if ip.is_fragment() {
        return false;
    }
    let (src, dst, pl) = (
        ip.src(),
        final_destination(ip.options(), ip.dst()),
        ip.payload(),
    );
    match ip.protocol().0 {
        17 => UdpPacket::new_checked(pl).is_ok_and(|u| {
            (8..=pl.len()).contains(&usize::from(u.len())) && u.verify_checksum(src, dst)
        }),
        6 => pl.len() >= 20 && TcpPacket::new_unchecked(pl).verify_checksum(src, dst),
        1 => pl.len() >= 8 && Icmpv4Packet::new_unchecked(pl).verify_checksum(),
        _ => true,
    }
}

/// [`l4_valid`] for an IPv6 packet: a fragment cannot tell, a packet whose upper layer the
/// dissector did not locate or whose payload length runs past the frame cannot leave as
/// anything but itself; UDP (a zero checksum being invalid over IPv6), TCP and ICMPv6
/// must verify over the pseudo-header.
fn l4_valid6(f: &[u8], r: &dissect::Dissected) -> bool {
    let l3 = usize::from(r.l3);
    let Some(h) = f.get(l3..l3 + 40) else {
        return true;
    };
    let end = l3 + 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
    if r.l4 == 0 || end > f.len() || h[0] >> 4 != 6 {
        return true;
    }
    if r.flags & netbatch_stack::meta::flag::FRAG6 != 0 {
        return false;
    }
    let (Some(msg), src, dst) = (
        f.get(usize::from(r.l4)..end),
        Ipv6Addr::from(<[u8; 16]>::try_from(&h[8..24]).unwrap_or_default()),
        Ipv6Addr::from(<[u8; 16]>::try_from(&h[24..40]).unwrap_or_default()),
    ) else {
        return true;
    };
    let ok = |at: usize| {
        msg.len() >= at + 2
            && checksum::fold(checksum::sum(
                msg,
                checksum::pseudo_header_v6(src, dst, r.l4_type, msg.len() as u32),
            )) == 0xffff
    };
    match r.l4_type {
        17 => msg.len() >= 8 && msg[6..8] != [0, 0] && ok(6),
        6 => ok(16),
        58 => ok(2),
        _ => true,
    }
}

/// The destination of the transport's pseudo-header (RFC 1122 3.2.1.8: with a source
/// route, the final destination): the last address of a loose or strict source route
/// that has addresses still to visit, else `dst`.
fn final_destination(options: &[u8], dst: Ipv4Addr) -> Ipv4Addr {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = options.get(i + 1) else {
                    break;
                };
                let len = usize::from(len);
                if len < 2 || i + len > options.len() {
                    break;
                }
                let opt = &options[i..i + len];
                if matches!(kind, 131 | 137) && len >= 7 && usize::from(opt[2]) + 3 <= len {
                    let a = &opt[len - 4..];
                    return Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                }
                i += len;
            }
        }
    }
    dst
}

/// What every frame the router builds or rewrites (not one it sends on as received)
/// must be, when it carries a whole IPv4 header: a header checksum that verifies, a TTL
/// above 0, and (when every frame received had a valid L4 checksum, `sums_valid`) a
/// valid L4 checksum unless it is a fragment.
fn made_right(f: &[u8], sums_valid: bool) -> Result<(), &'static str> {
    let r = dissect::parse(f);
    if r.l3_type == L3::Ipv6 && r.l4 != 0 {
        if f.get(usize::from(r.l3) + 7) == Some(&0) {
            return Err("hop limit 0");
        }
        if sums_valid && r.flags & netbatch_stack::meta::flag::FRAG6 == 0 && !l4_valid(f) {
            return Err("L4 checksum (IPv6)");
        }
        return Ok(());
    }
    if r.l3_type != L3::Ipv4 || r.l4 == 0 {
        return Ok(());
    }
    let ip = Ipv4Packet::new_checked(&f[usize::from(r.l3)..]).map_err(|_| "IPv4 header")?;
    if !ip.verify_checksum() {
        return Err("IPv4 header checksum");
    }
    if ip.ttl() == 0 {
        return Err("TTL 0");
    }
    if sums_valid && !ip.is_fragment() && !l4_valid(f) {
        return Err("L4 checksum");
    }
    Ok(())
}

fn mem(w: &mut Worker, i: usize) -> &mut MemPort {
    w.ports[i]
        .as_any_mut()
        .downcast_mut::<MemPort>()
        .expect("the graph check builds mem ports")
}

/// Asserts the conservation law, and that every frame fed was received.
fn conserved(w: &Worker, fed: u64, when: &str) {
    let a = w.acct;
    let held = w.held();
    assert_eq!(a.rx, fed, "{when}: frames fed but not received: {a:?}");
    assert_eq!(
        a.rx + a.originated,
        a.tx + a.delivered + a.dropped + held,
        "{when}: packets unaccounted: {a:?}, held {held}"
    );
}

/// The graph check (see the module documentation).
pub fn graph(data: &[u8]) {
    run(data);
}

/// What a run did, for the tests: the worker's counters and its drops by reason, before
/// its shutdown.
#[derive(Debug)]
#[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
struct Outcome {
    acct: netbatch_engine::Accounting,
    drops: Vec<(&'static str, u64)>,
}

/// Runs the check.
fn run(data: &[u8]) -> Outcome {
    let mut i = Input::new(data);
    let v = Variant::read(&mut i);
    let cfg = v.config();
    let bursts = bursts(&mut i);

    let pool = Pool::new(cfg.pool).expect("the pool");
    let room = pool.config().room();
    let ports: Vec<Box<dyn Port>> = cfg
        .ports
        .iter()
        .enumerate()
        .map(|(k, p)| {
            Box::new(MemPort::new(&p.setup.name, k as u16, room).with_features(p.setup.features))
                as Box<dyn Port>
        })
        .collect();
    let mut w = Builder::new(&cfg)
        .routes(tables()[usize::from(v.no_default_route)].clone())
        .worker(ports, pool.clone())
        .expect("the worker");

    let mtus: Vec<usize> = cfg.ports.iter().map(|p| usize::from(p.setup.mtu)).collect();
    // Frames as received (a classifier's redirect or mirror sends them on unchanged),
    // and whether every one has a valid L4 checksum (then so must every frame sent).
    let mut received = HashSet::new();
    let mut sums_valid = true;
    let mut now = 1_000_000_000u64;
    let mut fed = 0u64;
    for (k, b) in bursts.into_iter().enumerate() {
        now += b.advance;
        for (p, f) in b.frames {
            sums_valid &= l4_valid(&f);
            received.insert(f.clone());
            mem(&mut w, p).push_rx(now, f);
            fed += 1;
        }
        let mut drained = false;
        for _ in 0..MAX_ROUNDS {
            let pending = mem(&mut w, 0).rx_pending() + mem(&mut w, 1).rx_pending();
            w.poll(now);
            if pending == 0 {
                drained = true;
                break;
            }
        }
        assert!(
            drained,
            "burst {k} did not drain in {MAX_ROUNDS} rounds ({v:?})"
        );
        for (p, &mtu) in mtus.iter().enumerate() {
            for f in mem(&mut w, p).take_tx() {
                assert!(f.bytes.len() >= 14, "a runt frame left port {p}: {f:?}");
                if f.segs <= 1 && !received.contains(&f.bytes) {
                    let what = format!("a frame left port {p} ({v:?}): {:02x?}", f.bytes);
                    if let Err(e) = made_right(&f.bytes, sums_valid) {
                        panic!("{e}: {what}");
                    }
                }
                if f.segs <= 1 {
                    let l2 = usize::from(dissect::parse(&f.bytes).l2_len).max(14);
                    assert!(
                        f.bytes.len() - l2 <= mtu,
                        "a frame of {} bytes after its {l2}-byte link header left port {p} \
                         (MTU {mtu}): {:02x?} ({v:?})",
                        f.bytes.len() - l2,
                        &f.bytes[..f.bytes.len().min(64)]
                    );
                }
            }
        }
        conserved(&w, fed, &format!("after burst {k} ({v:?})"));
    }
    // Let every ARP resolution run out (2 probes 100 ms apart) and the GRO and
    // neighbour timers fire.
    for _ in 0..5 {
        now += 1_000_000_000;
        w.poll(now);
    }
    conserved(&w, fed, &format!("after the timers ({v:?})"));
    let out = Outcome {
        acct: w.acct,
        drops: drops_by_reason(&w.snapshot())
            .into_iter()
            .map(|(r, n)| (r.name(), n))
            .collect(),
    };
    w.shutdown();
    drop(w);
    all_back(&pool, &format!("{v:?}"));
    out
}

/// Asserts that every buffer is back in the pool, once: the free list holds as many as
/// the pool has, and allocating them all gives each buffer exactly once (a buffer freed
/// twice would come out twice, and another never).
fn all_back(pool: &Pool, variant: &str) {
    let total = pool.config().buffers as usize;
    assert_eq!(pool.free_in_pool(), total, "buffers leaked ({variant})");
    let mut cache = pool.cache();
    let mut seen = vec![false; total];
    let mut taken = Vec::with_capacity(total);
    while let Some(p) = cache.alloc() {
        let i = p.index() as usize;
        assert!(
            i < total && !seen[i],
            "buffer {i} was free twice ({variant})"
        );
        seen[i] = true;
        taken.push(p);
    }
    assert_eq!(taken.len(), total, "buffers missing ({variant})");
    for p in taken {
        cache.free(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration parses, and every variant builds a worker with both ports.
    #[test]
    fn every_variant_builds() {
        for a in 0..=255u8 {
            let v = Variant::read(&mut Input::new(&[a, a.rotate_left(3)]));
            let cfg = v.config();
            assert_eq!(cfg.ports.len(), 2);
            let pool = Pool::new(cfg.pool).unwrap();
            let room = pool.config().room();
            let ports = (0..2)
                .map(|k| Box::new(MemPort::new("p", k, room)) as Box<dyn Port>)
                .collect();
            Builder::new(&cfg)
                .routes(tables()[usize::from(v.no_default_route)].clone())
                .worker(ports, pool)
                .unwrap();
        }
    }

    /// The templates reach the stages they are for, as the counters say (independently
    /// of the oracle): a UDP datagram to the sink is delivered, one to a destination
    /// routed via the static neighbour is transmitted, an ARP request for our address is
    /// answered.
    #[test]
    fn templates_reach_their_stages() {
        // Variant: list, buckets, no GRO, no offloads. A UDP record (port 0, kind 1):
        // 198.51.100.7 (address 4) to 198.51.100.1 (0), no IP flags, ports 5001 → 5001
        // (port 0), checksum filled, 5 bytes of 0x41.., to our MAC.
        let sink = [0, 0, 0, 0x01, 4, 0, 0, 0, 0, 0, 5, 0x41, 0];
        let mut i = Input::new(&sink);
        let _ = Variant::read(&mut i);
        let b = bursts(&mut i);
        assert_eq!((b.len(), b[0].frames.len()), (1, 1));
        let f = &b[0].frames[0].1;
        assert_eq!(f.len(), 14 + 20 + 8 + 5);
        assert_eq!(&f[..6], &US0.0);
        assert_eq!(&f[26..34], &[198, 51, 100, 7, 198, 51, 100, 1]);
        assert_eq!(&f[34..38], &[0x13, 0x89, 0x13, 0x89]);
        let a = run(&sink).acct;
        assert_eq!((a.rx, a.delivered, a.dropped), (1, 1, 0), "{a:?}");
        // To 203.0.113.5 (address 7), port 53 (4): forwarded out of eth1.
        let fwd = [0, 0, 0, 0x01, 4, 7, 0, 4, 4, 0, 5, 0x41, 0];
        let a = run(&fwd).acct;
        assert_eq!((a.rx, a.tx, a.dropped), (1, 1, 0), "{a:?}");
        // ARP request (kind 6, operation 1) from the peer (198.51.100.7) for
        // 198.51.100.1, broadcast: answered.
        let arp = [0, 0, 0, 0x06, 0, 1, 4, 0, 1, 0, 2];
        let a = run(&arp).acct;
        assert_eq!((a.rx, a.tx), (1, 1), "{a:?}");
        // To 10.66.1.1 (address 11), a blackhole route; then to us on port 7050 (3),
        // which the prerouting filter drops.
        let hole = [0, 0, 0, 0x01, 4, 11, 0, 4, 4, 0, 5, 0x41, 0];
        assert_eq!(run(&hole).drops, [("route_blackhole", 1)]);
        let filtered = [0, 0, 0, 0x01, 4, 0, 0, 0, 3, 0, 5, 0x41, 0];
        assert_eq!(run(&filtered).drops, [("filter_prerouting", 1)]);
        // IPv6 (kind 14): UDP from 2001:db8:100::7 (address 4) to 2001:db8:300::5 (6), no
        // flags, checksum right, ports 5001 → 5001, 5 bytes: forwarded out of eth1 to its
        // static neighbour; to 2001:db8:666::1 (8), a blackhole.
        let six = [0, 0, 0, 0x0e, 4, 6, 0, 0, 0, 0, 0, 5, 0x41, 0];
        let a = run(&six).acct;
        assert_eq!((a.rx, a.tx, a.dropped), (1, 1, 0), "{a:?}");
        let hole6 = [0, 0, 0, 0x0e, 4, 8, 0, 0, 0, 0, 0, 5, 0x41, 0];
        assert_eq!(run(&hole6).drops, [("route_blackhole", 1)]);
    }
}
