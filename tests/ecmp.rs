//! ECMP end to end: a router with a two-way multipath route (`nexthops` in `[[route]]`,
//! next hops on two ports) forwards many flows, several to each destination so that a
//! list holds packets of different flows to one address (what the route hint must not
//! merge). Checked with etherparse on the frames that leave: every flow leaves by one
//! port only, to that port's gateway, in order; both ports carry flows, in the shares the
//! weights give (within 6 standard deviations of the binomial expectation); per-packet and
//! list mode, both dispatch strategies and two workers with RPS (whose recorded flow hash
//! routing then uses) send every flow the same way; nothing is lost
//! (`rx = tx`, and the accounting law holds).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use etherparse::{NetSlice, TransportSlice};
use netbatch_datapath::rps::RpsParams;
use netbatch_engine::Mode;
use netbatch_ports::pcap::{CapturedFrame, read_frames, write_pcap};
use netbatch_runtime::config::Config;
use netbatch_runtime::replay::replay;
use netbatch_runtime::setup::StaticNeighbour;
use netbatch_scenarios::replay::tmp;
use netbatch_scenarios::{Lab, LabSpec, Team, frames, ip, port};
use netbatch_stack::GraphOptions;
use netbatch_stack::host::HostParams;
use netbatch_stack::route::{Multipath, NextHop, Route};
use netbatch_wire::ethernet::MacAddr;

/// The router's ports: eth0 receives, eth1 and eth2 lead to the two gateways.
const ETH: [MacAddr; 3] = [
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x01]),
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x02]),
    MacAddr([0x02, 0, 0x5e, 0, 0x53, 0x03]),
];
/// The sender on eth0's subnet.
const SENDER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x07]);
/// The gateways: 192.0.2.254 on eth1, 203.0.113.254 on eth2.
const GW: [MacAddr; 2] = [
    MacAddr([0x02, 0, 0, 0, 0x01, 0xfe]),
    MacAddr([0x02, 0, 0, 0, 0x02, 0xfe]),
];
const GW_IP: [&str; 2] = ["192.0.2.254", "203.0.113.254"];

/// A flow's 5-tuple: source, destination, protocol, source and destination ports.
type Flow = (Ipv4Addr, Ipv4Addr, u8, u16, u16);

/// The router, with 10.0.0.0/8 over both gateways at `weights`, in `mode`/`dispatch`.
fn config(mode: &str, dispatch: &str, weights: [u16; 2]) -> String {
    let [w1, w2] = weights;
    format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"

[[neighbour.static]]
ip = "192.0.2.254"
mac = "02:00:00:00:01:fe"
dev = "eth1"

[[neighbour.static]]
ip = "203.0.113.254"
mac = "02:00:00:00:02:fe"
dev = "eth2"

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["198.51.100.1/24"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
addresses = ["192.0.2.1/24"]

[[port]]
name = "eth2"
mac = "02:00:5e:00:53:03"
addresses = ["203.0.113.1/24"]

[[route]]
prefix = "10.0.0.0/8"
nexthops = [{{ via = "192.0.2.254", weight = {w1} }}, {{ via = "203.0.113.254", dev = "eth2", weight = {w2} }}]
"#
    )
}

/// `n` flows: UDP and TCP alternating, from 40 sources on eth0's subnet to 8
/// destinations in 10.0.0.0/8 (so that every destination has many flows), distinct
/// port pairs.
fn flows(n: u32) -> Vec<Flow> {
    (0..n)
        .map(|i| {
            (
                Ipv4Addr::new(198, 51, 100, 10 + (i % 40) as u8),
                Ipv4Addr::new(10, (i % 8) as u8, 0, 1),
                if i % 2 == 0 { 17 } else { 6 },
                1024 + (i * 7919 % 60000) as u16,
                [53, 443, 4789][(i % 3) as usize],
            )
        })
        .collect()
}

/// Packet `seq` of flow `f` as received on eth0 (the sequence number in its payload).
fn frame(f: &Flow, seq: u32) -> Vec<u8> {
    let (src, dst) = (f.0.to_string(), f.1.to_string());
    let payload = seq.to_be_bytes();
    if f.2 == 17 {
        frames::udp(SENDER, ETH[0], &src, &dst, f.3, f.4, 64, &payload)
    } else {
        frames::tcp(SENDER, ETH[0], &src, &dst, f.3, f.4, seq, 64, &payload)
    }
}

/// `per` packets of every flow, round by round, each round's flows ordered by
/// destination: packets of different flows to one destination follow each other.
fn traffic(flows: &[Flow], per: u32) -> Vec<Vec<u8>> {
    let mut order: Vec<&Flow> = flows.iter().collect();
    order.sort_by_key(|f| f.1);
    (0..per)
        .flat_map(|seq| order.iter().map(move |f| frame(f, seq)))
        .collect()
}

/// What one forwarded frame says: its flow, its sequence number, and that it left
/// correctly (from the port's MAC to its gateway's, TTL decremented); the output port
/// index (0 for eth1, 1 for eth2) is the caller's.
fn read(bytes: &[u8], out: usize) -> (Flow, u32) {
    let p = frames::parse(bytes);
    let eth = etherparse::Ethernet2HeaderSlice::from_slice(bytes).expect("Ethernet");
    assert_eq!(eth.source(), ETH[out + 1].0, "sent from its port's MAC");
    assert_eq!(
        eth.destination(),
        GW[out].0,
        "to the gateway {}",
        GW_IP[out]
    );
    let Some(NetSlice::Ipv4(v4)) = &p.net else {
        panic!("not IPv4")
    };
    let h = v4.header();
    assert_eq!(h.ttl(), 63, "TTL decremented once");
    let (proto, sport, dport, payload) = match &p.transport {
        Some(TransportSlice::Udp(u)) => (17, u.source_port(), u.destination_port(), u.payload()),
        Some(TransportSlice::Tcp(t)) => (6, t.source_port(), t.destination_port(), t.payload()),
        other => panic!("not UDP or TCP: {other:?}"),
    };
    let seq = u32::from_be_bytes(payload.try_into().expect("4-byte payload"));
    (
        (h.source_addr(), h.destination_addr(), proto, sport, dport),
        seq,
    )
}

/// Per flow, the ports (0: eth1, 1: eth2) its packets left by and their sequence
/// numbers in the order they left.
type Paths = BTreeMap<Flow, (Vec<usize>, Vec<u32>)>;

/// Adds frames that left by output `out` (0: eth1, 1: eth2) to `paths`.
fn note(paths: &mut Paths, out: usize, frames: impl IntoIterator<Item = Vec<u8>>) {
    for f in frames {
        let (flow, seq) = read(&f, out);
        let e = paths.entry(flow).or_default();
        e.0.push(out);
        e.1.push(seq);
    }
}

/// Checks every flow of `flows` left by one port only, with all its `per` packets in
/// order, and that the two ports' shares of the flows follow `weights` (each count
/// within 6 binomial standard deviations of n·w/Σw); returns each flow's port.
fn check_paths(
    what: &str,
    paths: &Paths,
    flows: &[Flow],
    per: u32,
    weights: [u16; 2],
) -> Vec<usize> {
    assert_eq!(paths.len(), flows.len(), "{what}: every flow forwarded");
    let mut count = [0u32; 2];
    let mut port_of = Vec::with_capacity(flows.len());
    for f in flows {
        let (ports, seqs) = &paths[f];
        assert!(
            ports.iter().all(|&p| p == ports[0]),
            "{what}: flow {f:?} left by more than one port: {ports:?}"
        );
        assert_eq!(
            *seqs,
            (0..per).collect::<Vec<_>>(),
            "{what}: flow {f:?} in order"
        );
        count[ports[0]] += 1;
        port_of.push(ports[0]);
    }
    let n = flows.len() as f64;
    let total = f64::from(weights[0] + weights[1]);
    for (i, &c) in count.iter().enumerate() {
        assert!(c > 0, "{what}: no flow left by eth{}", i + 1);
        let share = f64::from(weights[i]) / total;
        let (expect, sigma) = (n * share, (n * share * (1.0 - share)).sqrt());
        assert!(
            (f64::from(c) - expect).abs() <= 6.0 * sigma,
            "{what}: eth{} carried {c} of {n} flows, expected {expect:.0} ± {:.0}",
            i + 1,
            6.0 * sigma
        );
    }
    port_of
}

/// Asserts two runs sent every flow by the same port (naming how many differ).
fn assert_same(a: &[usize], b: &[usize], what: &str) {
    let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
    assert_eq!(
        (a.len(), differ),
        (b.len(), 0),
        "{what}: flows sent another way"
    );
}

/// Replays `per` packets of each of `n` flows through the router in every variant
/// (per-packet and list mode, `runs` and `buckets`); checks each variant (conservation,
/// everything forwarded, [`check_paths`]) and that every variant sends each flow the same
/// way.
fn replay_all(case: &str, n: u32, per: u32, weights: [u16; 2]) {
    let flows = flows(n);
    let input = traffic(&flows, per);
    // 64 frames at each instant: lists of many flows, several to each destination.
    let cap: Vec<CapturedFrame> = input
        .iter()
        .enumerate()
        .map(|(i, b)| CapturedFrame {
            ts_ns: 1_700_000_000_000_000_000 + (i as u64 / 64) * 10_000,
            bytes: b.clone(),
        })
        .collect();
    let dir = tmp("netbatch-ecmp");
    let inp = dir.path().join(format!("{case}.pcap"));
    write_pcap(&inp, &cap).expect("write input");
    let mut ways: Vec<(String, Vec<usize>)> = Vec::new();
    for (mode, dispatch) in [
        ("packet", "runs"),
        ("packet", "buckets"),
        ("list", "runs"),
        ("list", "buckets"),
    ] {
        let what = format!("{case} {mode}/{dispatch}");
        let cfg = Config::parse(
            &config(mode, dispatch, weights),
            std::path::Path::new("."),
            case,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join(format!("{case}-{mode}-{dispatch}.pcapng"));
        let r = replay(&cfg, &inp, &out, None).expect("replay");
        let s = &r.stats;
        let k = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("stats has no {k}"));
        assert_eq!(
            k("rx_packets") + k("originated_packets"),
            k("tx_packets") + k("delivered_packets") + k("dropped_packets") + k("held_packets"),
            "{what}: conservation"
        );
        assert_eq!(k("rx_packets"), input.len() as u64, "{what}");
        assert_eq!(
            k("tx_packets"),
            input.len() as u64,
            "{what}: every packet forwarded"
        );
        let mut paths = Paths::new();
        for f in read_frames(&out).expect("read output") {
            let out = ETH[1..]
                .iter()
                .position(|m| f.bytes[6..12] == m.0)
                .unwrap_or_else(|| panic!("{what}: a frame from {:02x?}", &f.bytes[6..12]));
            note(&mut paths, out, [f.bytes]);
        }
        ways.push((
            what.clone(),
            check_paths(&what, &paths, &flows, per, weights),
        ));
    }
    let (first, way) = &ways[0];
    for (name, w) in &ways[1..] {
        assert_same(w, way, &format!("{name} against {first}"));
    }
}

/// Equal weights: 512 flows of 4 packets (2,048 frames, 256 per destination).
#[test]
fn flows_keep_one_port_and_both_ports_are_used() {
    replay_all("equal", 512, 4, [1, 1]);
}

/// Weights 1 and 3: of 2,000 single-packet flows a quarter leave by eth1.
#[test]
fn weights_give_the_shares_of_flows() {
    replay_all("weighted", 2000, 1, [1, 3]);
}

/// The same router as a [`LabSpec`] (the route built by [`Route::multipath`]).
fn spec() -> LabSpec {
    let hop = |gw: &str, out_if, weight| NextHop {
        gateway: Some(ip(gw)),
        out_if,
        weight,
    };
    let m = Multipath::new(vec![hop(GW_IP[0], 1, 1), hop(GW_IP[1], 2, 1)]).expect("next hops");
    LabSpec {
        routes6: Vec::new(),
        neighbours6: Vec::new(),
        ports: vec![
            port("eth0", ETH[0], "198.51.100.1/24"),
            port("eth1", ETH[1], "192.0.2.1/24"),
            port("eth2", ETH[2], "203.0.113.1/24"),
        ],
        routes: vec![Route::multipath("10.0.0.0/8".parse().expect("prefix"), m)],
        neighbours: (0..2)
            .map(|i| StaticNeighbour {
                iface: i as u16 + 1,
                ip: ip(GW_IP[i]),
                mac: GW[i],
            })
            .collect(),
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

/// The lists a flow's packets come in do not matter, nor which worker routes them: one
/// worker fed everything at once, the same fed one packet a round in reverse order, and
/// two workers with RPS (which records the flow hash routing then reads) send every flow
/// by the same port.
#[test]
fn the_next_hop_does_not_depend_on_lists_or_workers() {
    let (n, per) = (300, 3);
    let flows = flows(n);
    let input = traffic(&flows, per);
    let weights = [1, 1];

    let mut lab = Lab::new(&spec(), Mode::List, netbatch_engine::Dispatch::Buckets);
    lab.feed(0, input.iter().cloned());
    lab.run();
    let mut paths = Paths::new();
    for out in 0..2 {
        note(
            &mut paths,
            out,
            lab.tx(out + 1).into_iter().map(|f| f.bytes),
        );
    }
    let at_once = check_paths("one list", &paths, &flows, per, weights);
    lab.assert_conserved();
    lab.stop_and_check_pool();

    // One packet a round, flows in reverse order (each packet alone in its list).
    let mut lab = Lab::new(&spec(), Mode::List, netbatch_engine::Dispatch::Buckets);
    let mut paths = Paths::new();
    for seq in 0..per {
        for f in flows.iter().rev() {
            lab.feed(0, [frame(f, seq)]);
            lab.run();
            for out in 0..2 {
                note(
                    &mut paths,
                    out,
                    lab.tx(out + 1).into_iter().map(|f| f.bytes),
                );
            }
        }
    }
    let alone = check_paths("one packet a list", &paths, &flows, per, weights);
    assert_same(&alone, &at_once, "one packet a list against one list");
    lab.assert_conserved();
    lab.stop_and_check_pool();

    // Two workers, RPS spreading eth0 over both: each hashes the flows it steers.
    let mut team = Team::new(
        &spec(),
        Mode::List,
        vec![vec![0], vec![]],
        vec![vec![0, 1]],
        Some(RpsParams::default()),
    );
    team.feed(0, 0, input.iter().cloned());
    team.settle();
    let mut paths = Paths::new();
    let mut per_worker = [0usize; 2];
    for (w, count) in per_worker.iter_mut().enumerate() {
        for out in 0..2 {
            let sent = team.port(w, out + 1).take_tx();
            *count += sent.len();
            note(&mut paths, out, sent.into_iter().map(|f| f.bytes));
        }
    }
    assert!(
        per_worker.iter().all(|&c| c > 0),
        "RPS gave both workers flows: {per_worker:?}"
    );
    let rps = check_paths("two workers with RPS", &paths, &flows, per, weights);
    assert_same(&rps, &at_once, "two workers with RPS against one");
    team.assert_conserved();
    team.stop_and_check_pool();
}
