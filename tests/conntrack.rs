//! The stateful firewall through the whole graph, in all four variants: a FORWARD chain
//! `ct state established,related accept; ct state new iif eth0 accept; drop` (the
//! ruleset of nftables' "simple stateful router" wiki example) lets the inside's
//! connections and their replies through and nothing unsolicited from outside, as
//! Linux's nf_conntrack does: UDP (new until replied), TCP (a handshake, then an
//! out-of-window segment invalid and dropped), ICMP echo, ICMP errors quoting a tracked
//! connection (related) and one quoting none (invalid); a packet a rule drops leaves
//! no entry; conservation is exact.

use etherparse::PacketBuilder;
use netbatch_engine::Mode;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::{self as support, Gro, Lab, PEER, US, US2, VARIANTS, ip};
use netbatch_stack::ct::{self, TcpState};
use netbatch_stack::filter::HookPoint;
use netbatch_wire::ethernet::MacAddr;

/// The next hop on eth1 (outside).
const GW: MacAddr = MacAddr([2, 0, 0, 0, 2, 2]);
const INSIDE: &str = "198.51.100.2";
const FAR: &str = "203.0.113.7";

fn lab(mode: Mode, dispatch: netbatch_engine::Dispatch) -> Lab {
    let mut spec = support::router(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.graph.chains = vec![(HookPoint::Forward, support::stateful_forward())];
    spec.graph.conntrack = Some(ct::Config {
        max: 64,
        ..ct::Config::default()
    });
    Lab::new(&spec, mode, dispatch)
}

fn udp_in(src: &str, dst: &str, sp: u16, dp: u16) -> Vec<u8> {
    support::frames::udp(PEER, US, src, dst, sp, dp, 64, b"query")
}

fn udp_out(src: &str, dst: &str, sp: u16, dp: u16) -> Vec<u8> {
    support::frames::udp(GW, US2, src, dst, sp, dp, 64, b"answer")
}

/// A TCP segment with `flags` (etherparse builds it).
#[allow(clippy::too_many_arguments)]
fn tcp(
    from_inside: bool,
    sp: u16,
    dp: u16,
    syn: bool,
    ack: Option<u32>,
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    let (sm, dm, s, d) = if from_inside {
        (PEER, US, INSIDE, FAR)
    } else {
        (GW, US2, FAR, INSIDE)
    };
    let mut b = PacketBuilder::ethernet2(sm.0, dm.0)
        .ipv4(ip(s).octets(), ip(d).octets(), 64)
        .tcp(sp, dp, seq, 64240);
    if syn {
        b = b.syn();
    }
    if let Some(a) = ack {
        b = b.ack(a);
    }
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// An ICMP port unreachable from the far host about the datagram `quoted` (an IPv4
/// packet without its link header), built by hand (RFC 792: type 3 code 3, the quote
/// after an unused word).
fn port_unreachable(quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&quoted[..28]);
    let sum = netbatch_wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let b = PacketBuilder::ethernet2(GW.0, US2.0).ipv4(ip(FAR).octets(), ip(INSIDE).octets(), 64);
    let mut v = Vec::new();
    b.write(&mut v, etherparse::IpNumber::ICMP, &icmp).unwrap();
    v
}

fn sent(lab: &mut Lab, port: usize) -> usize {
    lab.tx(port).len()
}

#[test]
fn stateful_forwarding_in_every_variant() {
    for (mode, dispatch) in VARIANTS {
        let v = format!("{mode:?}/{dispatch:?}");
        let mut lab = lab(mode, dispatch);
        let reason = netbatch_stack::filter::hook::reason::FORWARD;

        // Unsolicited from outside: new, not from eth0: dropped, and no entry left.
        lab.feed(1, [udp_out(FAR, INSIDE, 53, 40000)]);
        lab.run();
        assert_eq!((sent(&mut lab, 0), lab.dropped(reason)), (0, 1), "{v}");
        assert_eq!(
            lab.w.host.ct.as_ref().unwrap().table.len(),
            0,
            "{v}: a dropped first packet leaves no entry"
        );

        // UDP from inside, then its answer: both forwarded.
        lab.feed(0, [udp_in(INSIDE, FAR, 40000, 53)]);
        lab.run();
        assert_eq!(sent(&mut lab, 1), 1, "{v}");
        lab.feed(1, [udp_out(FAR, INSIDE, 53, 40000)]);
        lab.run();
        assert_eq!(sent(&mut lab, 0), 1, "{v}: the reply");
        // The same answer to another port is no reply: dropped.
        lab.feed(1, [udp_out(FAR, INSIDE, 53, 40001)]);
        lab.run();
        assert_eq!((sent(&mut lab, 0), lab.dropped(reason)), (0, 2), "{v}");

        // A port unreachable quoting the tracked datagram: related, forwarded; one
        // quoting a datagram never sent: invalid, dropped.
        let q = udp_in(INSIDE, FAR, 40000, 53);
        lab.feed(1, [port_unreachable(&q[14..])]);
        lab.run();
        assert_eq!(sent(&mut lab, 0), 1, "{v}: related error");
        let q2 = udp_in(INSIDE, FAR, 40002, 53);
        lab.feed(1, [port_unreachable(&q2[14..])]);
        lab.run();
        assert_eq!((sent(&mut lab, 0), lab.dropped(reason)), (0, 3), "{v}");

        // TCP: the handshake and data both ways; then a segment far out of window
        // from outside is invalid and dropped; an unsolicited SYN/ACK too.
        lab.feed(0, [tcp(true, 41000, 80, true, None, 1000, b"")]);
        lab.run();
        lab.feed(1, [tcp(false, 80, 41000, true, Some(1001), 5000, b"")]);
        lab.run();
        lab.feed(0, [tcp(true, 41000, 80, false, Some(5001), 1001, b"GET /")]);
        lab.run();
        lab.feed(
            1,
            [tcp(false, 80, 41000, false, Some(1006), 5001, b"200 OK")],
        );
        lab.run();
        assert_eq!(
            (sent(&mut lab, 1), sent(&mut lab, 0)),
            (2, 2),
            "{v}: handshake and data"
        );
        lab.feed(
            1,
            [tcp(
                false,
                80,
                41000,
                false,
                Some(1006),
                5001 + 50_000_000,
                b"x",
            )],
        );
        lab.run();
        lab.feed(1, [tcp(false, 80, 41001, true, Some(77), 9, b"")]);
        lab.run();
        assert_eq!((sent(&mut lab, 0), lab.dropped(reason)), (0, 5), "{v}");
        let ct = lab.w.host.ct.as_ref().unwrap();
        let tcp_entry = ct
            .table
            .iter(lab.now())
            .find(|(_, e)| e.tuple[0].proto == 6)
            .map(|(_, e)| *e)
            .unwrap();
        assert_eq!(tcp_entry.tcp.state, TcpState::Established, "{v}");
        assert!(tcp_entry.has(ct::status::ASSURED), "{v}");
        assert_eq!(
            tcp_entry.packets,
            [2, 2],
            "{v}: the invalid segment is not counted"
        );
        assert_eq!(
            ct.stats.invalid[ct::Invalid::Tcp(ct::tcp::Invalid::SeqOver).slot()],
            1,
            "{v}"
        );

        // Echo from inside and its reply.
        lab.feed(
            0,
            [support::frames::echo_request(
                PEER, US, INSIDE, FAR, 9, 1, 64, b"ping",
            )],
        );
        lab.run();
        assert_eq!(sent(&mut lab, 1), 1, "{v}");
        let b = PacketBuilder::ethernet2(GW.0, US2.0)
            .ipv4(ip(FAR).octets(), ip(INSIDE).octets(), 64)
            .icmpv4_echo_reply(9, 1);
        let mut reply = Vec::new();
        b.write(&mut reply, b"ping").unwrap();
        lab.feed(1, [reply]);
        lab.run();
        assert_eq!(sent(&mut lab, 0), 1, "{v}: echo reply");

        assert_eq!(
            lab.w.host.ct.as_ref().unwrap().table.len(),
            3,
            "{v}: udp, tcp, icmp"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// A SYN flood from spoofed inside sources (1M SYNs, 2^20, each from its own address and
/// port) through the stateful router with a 1024-entry table: the table stays at its
/// bound (SYN_SENT entries are evicted for newer ones: Linux's early_drop), every SYN is
/// either forwarded or refused and counted (`ct_table_full`), and a connection
/// established before the flood keeps working during and after it.
#[test]
fn syn_flood_keeps_the_table_bounded_and_the_established_working() {
    let mut spec = support::router(Gro::Off);
    spec.neighbours.push(StaticNeighbour {
        iface: 0,
        ip: ip(INSIDE),
        mac: PEER,
    });
    spec.graph.chains = vec![(HookPoint::Forward, support::stateful_forward())];
    spec.graph.conntrack = Some(ct::Config {
        max: 1024,
        ..ct::Config::default()
    });
    let mut lab = Lab::new(&spec, Mode::List, netbatch_engine::Dispatch::Buckets);
    // The established connection.
    lab.feed(0, [tcp(true, 41000, 80, true, None, 1000, b"")]);
    lab.run();
    lab.feed(1, [tcp(false, 80, 41000, true, Some(1001), 5000, b"")]);
    lab.run();
    lab.feed(0, [tcp(true, 41000, 80, false, Some(5001), 1001, b"")]);
    lab.run();
    assert_eq!((lab.tx(1).len(), lab.tx(0).len()), (2, 1));
    // The template SYN from 10.0.0.0/8-like spoofed sources: 198.18.0.0/15 (RFC 2544's
    // benchmarking range), patched per frame with its IPv4 checksum recomputed.
    let template = {
        let b = PacketBuilder::ethernet2(PEER.0, US.0)
            .ipv4([198, 18, 0, 0], ip(FAR).octets(), 64)
            .tcp(1, 80, 7, 64240)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, b"").unwrap();
        v
    };
    const N: u32 = 1 << 20;
    const BATCH: u32 = 8192;
    let mut forwarded = 0;
    let mut sent = 0;
    while sent < N {
        let frames: Vec<Vec<u8>> = (sent..sent + BATCH)
            .map(|n| {
                let mut f = template.clone();
                let src = [198, 18 + (n >> 16 & 1) as u8, (n >> 8) as u8, n as u8];
                f[26..30].copy_from_slice(&src);
                f[34..36].copy_from_slice(&(1024 + (n >> 17) as u16).to_be_bytes());
                f[24..26].copy_from_slice(&[0, 0]);
                let c = netbatch_wire::checksum::checksum(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
                f
            })
            .collect();
        lab.feed(0, frames);
        lab.run();
        sent += BATCH;
        forwarded += lab.tx(1).len() as u64;
        if sent % (1 << 18) == 0 {
            // The established connection keeps working during the flood.
            lab.feed(1, [tcp(false, 80, 41000, false, Some(1001), 5001, b"x")]);
            lab.run();
            assert_eq!(lab.tx(0).len(), 1, "after {sent} SYNs");
        }
        assert_eq!(lab.w.host.ct.as_ref().unwrap().table.len(), 1024);
    }
    let refused = lab.dropped(ct::stage::reason::TABLE_FULL);
    let t = lab.w.host.ct.as_ref().unwrap().table.stats;
    assert_eq!(
        forwarded + refused,
        u64::from(N),
        "every SYN forwarded or refused and counted"
    );
    assert_eq!(t.refused_full, refused);
    assert_eq!(
        t.early_drop + 1023,
        forwarded,
        "each forwarded SYN past the first 1023 (the free slots) evicted one"
    );
    assert!(
        forwarded > u64::from(N) / 2,
        "early drop makes room for most: {forwarded}"
    );
    lab.feed(1, [tcp(false, 80, 41000, false, Some(1001), 5002, b"y")]);
    lab.run();
    assert_eq!(lab.tx(0).len(), 1, "the established connection still works");
    lab.assert_conserved();
    lab.stop_and_check_pool();
}
