//! A stage added from outside the stack: a toy L4 protocol, declared entirely in this
//! file, takes part in the graph through its declaration alone, as a stage of the stack
//! does (the stack's list of stages plus one line).
//!
//! The toy protocol ("experimentation", RFC 3692) is IPv4 protocol 253. Its IPv6 number
//! is 252 (unassigned): RFC 4727 gives 253 and 254 to experiments in IPv6 too, but as
//! possible extension headers (RFC 7045), which netbatch's walk of the chain refuses, so
//! they never reach an upper-layer demux. A datagram is an op byte, three zero bytes and
//! data: op 1 (echo) is answered in place with op 2 and the data, sent back to its
//! source; any other op is counted and delivered; a datagram shorter than its four
//! bytes of header is dropped (`toy_truncated`).
//!
//! Frames in and the answers expected are built with etherparse, by hand from the
//! description above, not by the datapath's code.

use netbatch_engine::{Cx, Dispatch, Mode, Out, PktList, Stage, TraceSpec};
use netbatch_runtime::setup::{StaticNeighbour, StaticNeighbour6};
use netbatch_scenarios::{Lab, LabSpec, PEER, PEER6, US, US6, VARIANTS, ip, ip6, port};
use netbatch_stack::assemble::{STAGES, build_from, node};
use netbatch_stack::declare::{self, Decl, Decode, Take, To};
use netbatch_stack::host::{Host, HostParams};
use netbatch_stack::meta::{Field, Fields, flag};
use netbatch_stack::trace::Report;
use netbatch_stack::{GraphOptions, dissect};
use netbatch_wire::ethernet::MacAddr;

/// The toy's IPv4 protocol number (RFC 3692).
const PROTO4: u8 = 253;
/// The toy's IPv6 upper-layer number.
const PROTO6: u8 = 252;
/// Op of an echo request, and of its answer.
const ECHO: u8 = 1;
const ANSWER: u8 = 2;

netbatch_engine::reasons! {
    /// Why `toy-input` drops a datagram.
    mod reason {
        TRUNCATED = "toy_truncated": "toy datagram shorter than its header",
    }
}

netbatch_engine::arcs! {
    /// Answers to IPv4 echoes, to `ip4-local-out`.
    REPLY = "reply";
    /// Answers to IPv6 echoes, to `ip6-local-out`.
    REPLY6 = "reply6";
}

/// The toy stage: its counters.
#[derive(Debug, Default)]
struct ToyInput {
    echoed: u64,
    delivered: u64,
}

/// The toy stage's declaration: all the graph needs to know of it.
const TOY: Decl = Decl {
    arcs: &[
        ("reply", To::Node(node::IP4_LOCAL_OUT)),
        ("reply6", To::Node(node::IP6_LOCAL_OUT)),
    ],
    takes: &[Take::v4(PROTO4, "toy"), Take::v6(PROTO6, "toy")],
    reasons: &[reason::ALL],
    decode: Decode::Upper(words),
    reads: Fields::of(&[Field::L3, Field::L4]),
    writes: Fields::of(&[Field::Origin, Field::OutIf]),
    ..Decl::new("toy-input", |_| Box::new(ToyInput::default()))
};

/// What the trace shows of a toy datagram after the IP header: its op (from the bytes
/// the trace kept of its header on).
fn words(b: &[u8]) -> String {
    match b.first() {
        Some(&ECHO) => "toy echo".into(),
        Some(&ANSWER) => "toy answer".into(),
        Some(op) => format!("toy op {op}"),
        None => "toy (header not kept)".into(),
    }
}

impl Stage<Host> for ToyInput {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("echoed", self.echoed), ("delivered", self.delivered)]
    }

    fn process(&mut self, _: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        for mut p in list.drain(..) {
            let mut v = cx.pool.get_mut(&mut p);
            // The packet starts at its IP header; the toy header follows the IP header
            // (and, for IPv6, the extension headers), as the dissector located it.
            let at = dissect::ihl(v.meta).unwrap_or(usize::MAX);
            let d = v.data_mut();
            if d.len() < at.saturating_add(4) {
                out.drop(p, reason::TRUNCATED);
                continue;
            }
            if d[at] != ECHO {
                self.delivered += 1;
                cx.deliver(v.meta.wire_packets());
                cx.cache.free(p);
                continue;
            }
            d[at] = ANSWER;
            let six = d[0] >> 4 == 6;
            let (addrs, hops) = if six { (8..40, 7) } else { (12..20, 8) };
            let (src, dst) = d[addrs].split_at_mut(if six { 16 } else { 4 });
            src.swap_with_slice(dst);
            d[hops] = 64;
            v.meta.flags = (v.meta.flags & flag::TRACE) | flag::ORIGINATED;
            v.meta.out_if = u16::MAX;
            self.echoed += 1;
            out.push(if six { REPLY6 } else { REPLY }, p);
        }
    }
}

/// The stack's stages with the toy's after `tcp-input`, beside the other L4 stages.
fn stages() -> Vec<Decl> {
    let mut v = STAGES.to_vec();
    let at = v.iter().position(|d| d.name == node::TCP_INPUT).unwrap() + 1;
    v.insert(at, TOY);
    v
}

/// One port, eth0: 198.51.100.1/24 and 2001:db8:100::1/64; the peer's MACs known.
fn spec() -> LabSpec {
    let mut p = port("eth0", US, "198.51.100.1/24");
    p.addrs6 = vec![format!("{US6}/64").parse().unwrap()];
    LabSpec {
        ports: vec![p],
        routes: Vec::new(),
        routes6: Vec::new(),
        neighbours: vec![StaticNeighbour {
            iface: 0,
            ip: ip(PEER4),
            mac: PEER,
        }],
        neighbours6: vec![StaticNeighbour6 {
            iface: 0,
            ip: ip6(PEER6),
            mac: PEER,
        }],
        params: HostParams::default(),
        graph: GraphOptions::default(),
    }
}

/// The peer's IPv4 address.
const PEER4: &str = "198.51.100.7";
/// Ours on eth0.
const US4: &str = "198.51.100.1";

/// An Ethernet header.
fn eth(src: MacAddr, dst: MacAddr, ethertype: etherparse::EtherType) -> [u8; 14] {
    etherparse::Ethernet2Header {
        source: src.0,
        destination: dst.0,
        ether_type: ethertype,
    }
    .to_bytes()
}

/// A toy datagram over IPv4 (DF set, identification `id`), in a frame.
fn toy4(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    ttl: u8,
    id: u16,
    data: &[u8],
) -> Vec<u8> {
    let mut h = etherparse::Ipv4Header::new(
        data.len() as u16,
        ttl,
        etherparse::IpNumber(PROTO4),
        ip(src).octets(),
        ip(dst).octets(),
    )
    .unwrap();
    h.identification = id;
    h.header_checksum = h.calc_header_checksum();
    let mut f = eth(src_mac, dst_mac, etherparse::EtherType::IPV4).to_vec();
    f.extend_from_slice(&h.to_bytes());
    f.extend_from_slice(data);
    f
}

/// A toy datagram over IPv6, in a frame.
fn toy6(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    hops: u8,
    data: &[u8],
) -> Vec<u8> {
    let h = etherparse::Ipv6Header {
        traffic_class: 0,
        flow_label: etherparse::Ipv6FlowLabel::ZERO,
        payload_length: data.len() as u16,
        next_header: etherparse::IpNumber(PROTO6),
        hop_limit: hops,
        source: ip6(src).octets(),
        destination: ip6(dst).octets(),
    };
    let mut f = eth(src_mac, dst_mac, etherparse::EtherType::IPV6).to_vec();
    f.extend_from_slice(&h.to_bytes());
    f.extend_from_slice(data);
    f
}

/// A toy datagram: `op`, three zero bytes, `data`.
fn datagram(op: u8, data: &[u8]) -> Vec<u8> {
    let mut v = vec![op, 0, 0, 0];
    v.extend_from_slice(data);
    v
}

/// A lab whose worker runs the graph of the stack's stages and the toy's.
fn lab(mode: Mode, dispatch: Dispatch) -> Lab {
    let spec = spec();
    let mut lab = Lab::new(&spec, mode, dispatch);
    let g = build_from(&stages(), &spec.graph, &["eth0"], dispatch).expect("the toy's graph");
    lab.w.replace_graph(g).expect("entries");
    lab
}

/// Counts by name.
type Counts = Vec<(&'static str, u64)>;

/// The toy's counters and drops in a worker's snapshot.
fn toy_counters(lab: &Lab) -> (Counts, Counts) {
    let s = lab.w.snapshot();
    let n = s.iter().find(|n| n.name == "toy-input").expect("toy-input");
    let drops = n.drops.iter().map(|(r, c)| (r.name(), *c)).collect();
    (n.events.clone(), drops)
}

/// Echoes are answered (the answer's bytes exactly as the protocol says, over either IP
/// version), other datagrams delivered, short ones dropped for the toy's reason; a
/// protocol nobody takes still gets its protocol unreachable; every packet is accounted
/// for. In every batch mode and dispatch.
#[test]
fn the_toy_protocol_answers_counts_and_drops_end_to_end() {
    for (mode, dispatch) in VARIANTS {
        let mut lab = lab(mode, dispatch);
        let names = lab.w.graph.node_names();
        let at = names
            .iter()
            .position(|n| *n == "toy-input")
            .expect("in the graph");
        assert_eq!(names[at - 1], "tcp-input", "where the list put it");

        let echo4: Vec<Vec<u8>> = (0..3u8).map(|i| datagram(ECHO, &[b'v', b'4', i])).collect();
        let echo6: Vec<Vec<u8>> = (0..2u8).map(|i| datagram(ECHO, &[b'v', b'6', i])).collect();
        let mut frames = Vec::new();
        for (i, d) in echo4.iter().enumerate() {
            frames.push(toy4(PEER, US, PEER4, US4, 9, 100 + i as u16, d));
        }
        for d in &echo6 {
            frames.push(toy6(PEER, US, PEER6, US6, 9, d));
        }
        frames.push(toy4(PEER, US, PEER4, US4, 9, 200, &datagram(7, b"keep")));
        frames.push(toy6(PEER, US, PEER6, US6, 9, &datagram(7, b"keep")));
        frames.push(toy4(PEER, US, PEER4, US4, 9, 201, &[ECHO, 0]));
        frames.push(toy6(PEER, US, PEER6, US6, 9, &[ECHO]));
        // IPv4 protocol 254: nobody takes it, so ICMP protocol unreachable.
        let mut unknown = toy4(PEER, US, PEER4, US4, 9, 300, &datagram(ECHO, b"x"));
        unknown[14 + 9] = 254;
        let mut h = etherparse::Ipv4HeaderSlice::from_slice(&unknown[14..])
            .unwrap()
            .to_header();
        h.header_checksum = h.calc_header_checksum();
        unknown[14..34].copy_from_slice(&h.to_bytes());
        frames.push(unknown.clone());
        let n = frames.len() as u64;
        lab.feed(0, frames);
        lab.run();

        let tx: Vec<Vec<u8>> = lab.tx(0).into_iter().map(|f| f.bytes).collect();
        let want4: Vec<Vec<u8>> = echo4
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut a = d.clone();
                a[0] = ANSWER;
                toy4(US, PEER, US4, PEER4, 64, 100 + i as u16, &a)
            })
            .collect();
        let want6: Vec<Vec<u8>> = echo6
            .iter()
            .map(|d| {
                let mut a = d.clone();
                a[0] = ANSWER;
                toy6(US, PEER, US6, PEER6, 64, &a)
            })
            .collect();
        let got4: Vec<Vec<u8>> = tx
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[14 + 9] == PROTO4)
            .cloned()
            .collect();
        let got6: Vec<Vec<u8>> = tx
            .iter()
            .filter(|f| f[12..14] == [0x86, 0xdd])
            .cloned()
            .collect();
        assert_eq!(got4, want4, "{mode:?} {dispatch:?}: IPv4 answers, in order");
        assert_eq!(got6, want6, "{mode:?} {dispatch:?}: IPv6 answers, in order");
        let icmp: Vec<&Vec<u8>> = tx
            .iter()
            .filter(|f| f[12..14] == [0x08, 0x00] && f[14 + 9] == 1)
            .collect();
        assert_eq!(icmp.len(), 1, "{mode:?} {dispatch:?}");
        let e = netbatch_scenarios::frames::icmp(icmp[0]);
        assert_eq!((e[0], e[1]), (3, 2), "protocol unreachable");
        assert_eq!(&e[8..28], &unknown[14..34], "quoting the offending header");
        assert_eq!(tx.len(), 6);

        let (events, drops) = toy_counters(&lab);
        assert_eq!(
            events,
            [("echoed", 5), ("delivered", 2)],
            "{mode:?} {dispatch:?}"
        );
        assert_eq!(drops, [("toy_truncated", 2)]);
        assert_eq!(lab.dropped(reason::TRUNCATED), 2);
        let a = lab.w.acct;
        assert_eq!((a.rx, a.tx, a.delivered, a.dropped), (n, 6, 2, 2), "{a:?}");
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

/// Without the toy's declaration the same datagram is a protocol nobody takes: the
/// stack's own graph answers it with protocol unreachable (IPv4) and parameter problem
/// code 1 (IPv6), which the toy's graph does not.
#[test]
fn without_its_declaration_the_protocol_is_unknown() {
    let mut lab = Lab::new(&spec(), Mode::List, Dispatch::Buckets);
    lab.feed(
        0,
        [
            toy4(PEER, US, PEER4, US4, 9, 1, &datagram(ECHO, b"a")),
            toy6(PEER, US, PEER6, US6, 9, &datagram(ECHO, b"a")),
        ],
    );
    lab.run();
    let tx: Vec<Vec<u8>> = lab.tx(0).into_iter().map(|f| f.bytes).collect();
    assert_eq!(tx.len(), 2);
    let v4 = tx.iter().find(|f| f[12..14] == [0x08, 0x00]).unwrap();
    let e = netbatch_scenarios::frames::icmp(v4);
    assert_eq!((e[0], e[1]), (3, 2));
    let v6 = tx.iter().find(|f| f[12..14] == [0x86, 0xdd]).unwrap();
    let e = netbatch_scenarios::frames::icmp6_of(v6);
    // Parameter problem, unrecognized next header, pointing at the fixed header's.
    assert_eq!((e[0], e[1], &e[4..8]), (4, 1, &6u32.to_be_bytes()[..]));
    lab.assert_conserved();
    lab.stop_and_check_pool();
}

/// Declaring the toy registers what it declares: its reason set joins the registry of
/// its list of stages (every name still unique; the stack's own registry does not have
/// it), the trace decodes its node as declared, and two stages cannot take one
/// protocol.
#[test]
fn the_declaration_registers_its_reasons_decoder_and_protocols() {
    let list = stages();
    let sets = declare::reason_sets_of(&list);
    assert!(sets.contains(&reason::ALL));
    assert!(!declare::reason_sets().contains(&reason::ALL));
    let mut all = vec![netbatch_engine::reason::ALL];
    all.extend(sets);
    assert_eq!(netbatch_engine::drop::check_sets(&all), Ok(()));

    build_from(
        &list,
        &GraphOptions::default(),
        &["eth0"],
        Dispatch::Buckets,
    )
    .unwrap();
    assert_eq!(declare::decode_of("toy-input"), Decode::Upper(words));

    const TWIN: Decl = Decl {
        takes: &[Take::v6(PROTO6, "twin")],
        ..Decl::new("twin-input", |_| Box::new(ToyInput::default()))
    };
    let mut twins = list.clone();
    twins.push(TWIN);
    let e = build_from(
        &twins,
        &GraphOptions::default(),
        &["eth0"],
        Dispatch::Buckets,
    )
    .expect_err("refused");
    assert_eq!(
        e.to_string(),
        "node 'twin-input' takes IPv6 protocol 252, which 'toy-input' takes"
    );
}

/// What an operator sees of the toy: the trace shows each packet at `toy-input` in the
/// toy's own words after the IP header (an echo as the stage left it, answered in place;
/// another op delivered; a short datagram dropped for the toy's reason, described), and
/// `show errors` lists the toy's drops with its reason's description. The expected
/// lines are written out by hand from the frames sent.
#[test]
fn the_trace_and_show_errors_speak_the_toys_words() {
    let mut lab = lab(Mode::List, Dispatch::Buckets);
    lab.w.graph.trace_mut().arm(TraceSpec::new(3));
    lab.feed(
        0,
        [
            toy4(PEER, US, PEER4, US4, 9, 1, &datagram(ECHO, b"abc")),
            toy6(PEER, US, PEER6, US6, 9, &datagram(7, b"keep")),
            toy4(PEER, US, PEER4, US4, 9, 2, &[ECHO, 0]),
        ],
    );
    lab.run();
    let dumps = lab.w.take_trace();
    assert_eq!(dumps.len(), 1);
    let ports = ["eth0".to_string()];
    let report = Report {
        dump: &dumps[0],
        worker: 0,
        ports: &ports,
        clock_to_utc_ns: 0,
        routes: None,
    };
    let toy_lines: Vec<String> = (1..=3)
        .map(|id| {
            report
                .path(id)
                .lines()
                .find(|l| l.starts_with("toy-input: "))
                .unwrap_or_else(|| panic!("packet {id} at toy-input:\n{}", report.text()))
                .to_string()
        })
        .collect();
    assert_eq!(
        toy_lines,
        [
            "toy-input: 198.51.100.1 -> 198.51.100.7 proto 253 ttl 64 len 27 toy answer \
             -> ip4-local-out (reply)",
            // IPv6 shows its whole length, fixed header included (40 + 8).
            "toy-input: 2001:db8:100::2 -> 2001:db8:100::1 proto 252 hlim 9 len 48 toy op 7 \
             taken (queued, delivered or sent)",
            "toy-input: 198.51.100.7 -> 198.51.100.1 proto 253 ttl 9 len 22 toy echo \
             drop toy_truncated (toy datagram shorter than its header)",
        ],
        "{}",
        report.text()
    );

    let c = serde_json::json!({ "workers": [netbatch_runtime::replay::stats(&lab.w)] });
    let errors = netbatch_runtime::control::show::errors(&c);
    assert_eq!(
        errors.data["errors"],
        serde_json::json!([{
            "count": 1, "node": "toy-input", "reason": "toy_truncated",
            "description": "toy datagram shorter than its header",
        }]),
        "{}",
        errors.text
    );
    lab.assert_conserved();
    lab.stop_and_check_pool();
}
