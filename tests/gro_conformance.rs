//! The Linux kernel's GRO selftest (`tools/testing/selftests/net/gro.c`), IPv4 cases and
//! (below, dual-stack) its IPv6 ones, as captures replayed through a two-port router: eth0 receives with GRO on, eth1 sends
//! with `tx-tcp-segmentation`, so each frame on eth1 is exactly what GRO built. The
//! payload-length list of the frames on eth1 must be the kernel's expected list.
//!
//! Frames are made by hand here, field by field, with a checksum routine of this file
//! (not the datapath's). As in the selftest: sport 1500 → dport 8000, ACK set, sequence
//! and acknowledgement start at 100, 100-byte payloads, TTL 8, DF, ID 0; every case ends
//! with a FIN; frames of one case share a timestamp (one GRO window) unless the case has
//! a gap. The selftest's receiver is a packet socket ahead of IP input, this one is a
//! router's output: the one difference is `ip_csum`, whose corrupt packet the router
//! must drop (RFC 1122 3.2.1.2), so that case expects the kernel's list without it and
//! the drop counted.
//!
//! The same way, with the expected lists written from the kernel's rules (the selftest
//! has no such cases):
//! - fraglist TCP (`rx-gro-list`, forwarded), `flist_*`: each chain is one frame on a
//!   port with `tx-gso-list` (its head's headers, every member's payload), and the
//!   original segments on a port without offloads; and TCP to one of our addresses
//!   getting standard GRO instead;
//! - the 64-segment cap, `tcp_max_segs` and `flist_max_segs`;
//! - UDP standard GRO for forwarding (`rx-udp-gro-forwarding`, `udp_gro_receive_segment`),
//!   `udp_*`: each super-packet one frame on a port with `tx-udp-segmentation`;
//! - `capacity` beyond 8 flows (the 8 × 8 table's overflow).
//!
//! The IPv6 half (cases named `…6…`) runs the same kinds of case over IPv6: the
//! selftest's `-6` cases (data, ack, flags, tcp, ip: traffic class, a Fragment header,
//! extension headers with equal and different bytes, large with its IPv6 geometry), the
//! hop limit and flow label, Routing and Destination Options headers, the 64-segment cap,
//! fraglist TCP, UDP merge rules and `udpgro_fwd.sh` trains, and local TCP getting
//! standard GRO.
//!
//! UDP trains as in `udpgro_fwd.sh` are also checked end to end: one datagram train
//! forwarded with `rx-udp-gro-forwarding` arrives as one frame on a port with
//! `tx-udp-segmentation`, with `rx-gro-list` as one frame on a port with `tx-gso-list`,
//! and on a port with no offload as the original datagrams.

use netbatch_ports::pcap::{CapturedFrame, read_frames, write_pcap};
use netbatch_runtime::config::Config;
use netbatch_runtime::replay::replay;
use serde_json::Value;

const ETH0: [u8; 6] = [0x02, 0, 0x5e, 0, 0x53, 0x01];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const SRC: [u8; 4] = [192, 0, 2, 200];
const DST: [u8; 4] = [198, 51, 100, 100];
/// IPv6 source (on eth0's subnet) and forwarded destination (on eth1's).
const SRC6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0];
const DST6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const MTU: usize = 4096;
/// MSS for the large cases: the MTU less IPv4 and TCP headers.
const MSS: usize = MTU - 40;

/// RFC 1071 checksum, written out here as the test's own oracle.
fn csum(parts: &[&[u8]]) -> u16 {
    let mut s: u32 = 0;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in *p {
            match odd.take() {
                Some(hi) => s += u32::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        s += u32::from(hi) << 8;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// One IPv4 segment to build.
#[derive(Clone)]
struct Seg {
    proto: u8,
    seq: u32,
    ack: u32,
    flags: u8,
    len: usize,
    tcp_opts: Vec<u8>,
    ip_opts: Vec<u8>,
    tos: u8,
    ttl: u8,
    id: u16,
    /// Flags and fragment offset word.
    frag: u16,
    sport: u16,
    bad_ip_csum: bool,
    bad_l4_csum: bool,
    /// Destination address (default `DST`, forwarded).
    dst: [u8; 4],
    /// UDP: a length field that disagrees with the IP payload (`None`: the right one).
    ulen: Option<u16>,
    /// UDP: no checksum (a zero checksum field).
    zero_csum: bool,
    /// IPv6 (from `SRC6` to `dst6`; `tos` is the traffic class, `ttl` the hop limit, the
    /// IPv4-only fields are unused).
    v6: bool,
    /// IPv6 destination (default `DST6`, forwarded).
    dst6: [u8; 16],
    /// IPv6 flow label.
    flow: u32,
    /// IPv6 extension headers, in order: each one's first byte is its kind (written over
    /// with the next header when the frame is built), its second its length in 8-byte
    /// units beyond the first (a Fragment header's is 0).
    exts: Vec<Vec<u8>>,
}

const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const URG: u8 = 0x20;
const CWR: u8 = 0x80;

impl Seg {
    fn tcp(seq_off: u32, len: usize) -> Self {
        Self {
            proto: 6,
            seq: 100 + seq_off,
            ack: 100,
            flags: ACK,
            len,
            tcp_opts: Vec::new(),
            ip_opts: Vec::new(),
            tos: 0,
            ttl: 8,
            id: 0,
            frag: 0x4000,
            sport: 1500,
            bad_ip_csum: false,
            bad_l4_csum: false,
            dst: DST,
            ulen: None,
            zero_csum: false,
            v6: false,
            dst6: DST6,
            flow: 0,
            exts: Vec::new(),
        }
    }

    /// This segment over IPv6 (hop limit 8, as the selftest's; traffic class 0, flow
    /// label 0).
    fn v6(mut self) -> Self {
        self.v6 = true;
        self
    }

    fn udp(n: u32, len: usize) -> Self {
        Self {
            proto: 17,
            seq: n,
            id: n as u16,
            ..Self::tcp(0, len)
        }
    }

    fn flags(mut self, f: u8) -> Self {
        self.flags |= f;
        self
    }

    fn frame(&self) -> Vec<u8> {
        if self.v6 {
            return self.frame6();
        }
        let payload: Vec<u8> = (0..self.len)
            .map(|i| (self.seq as usize + i) as u8)
            .collect();
        let l4 = if self.proto == 6 {
            let doff = 20 + self.tcp_opts.len();
            let mut t = Vec::with_capacity(doff);
            t.extend_from_slice(&self.sport.to_be_bytes());
            t.extend_from_slice(&8000u16.to_be_bytes());
            t.extend_from_slice(&self.seq.to_be_bytes());
            t.extend_from_slice(&self.ack.to_be_bytes());
            t.push(((doff / 4) as u8) << 4);
            t.push(self.flags);
            t.extend_from_slice(&1024u16.to_be_bytes());
            t.extend_from_slice(&[0, 0, 0, 0]);
            t.extend_from_slice(&self.tcp_opts);
            t
        } else {
            let mut u = Vec::new();
            u.extend_from_slice(&self.sport.to_be_bytes());
            u.extend_from_slice(&8000u16.to_be_bytes());
            let ulen = self.ulen.unwrap_or((8 + self.len) as u16);
            u.extend_from_slice(&ulen.to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u
        };
        let l4_len = (l4.len() + self.len) as u16;
        // The pseudo-header carries the IP payload length (what GRO validates the
        // checksum with, `inet_gro_compute_pseudo`), also when the UDP length field
        // disagrees with it on purpose.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&SRC);
        pseudo.extend_from_slice(&self.dst);
        pseudo.extend_from_slice(&[0, self.proto]);
        pseudo.extend_from_slice(&l4_len.to_be_bytes());
        let mut l4 = l4;
        let at = if self.proto == 6 { 16 } else { 6 };
        let mut c = csum(&[&pseudo, &l4, &payload]);
        if self.proto == 17 && c == 0 {
            c = 0xffff;
        }
        if self.bad_l4_csum {
            c ^= 0x5a5a;
        }
        if self.zero_csum {
            c = 0;
        }
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        let ihl = 20 + self.ip_opts.len();
        let mut ip = Vec::with_capacity(ihl);
        ip.push(0x40 | (ihl / 4) as u8);
        ip.push(self.tos);
        ip.extend_from_slice(&((ihl + usize::from(l4_len)) as u16).to_be_bytes());
        ip.extend_from_slice(&self.id.to_be_bytes());
        ip.extend_from_slice(&self.frag.to_be_bytes());
        ip.push(self.ttl);
        ip.push(self.proto);
        ip.extend_from_slice(&[0, 0]);
        ip.extend_from_slice(&SRC);
        ip.extend_from_slice(&self.dst);
        ip.extend_from_slice(&self.ip_opts);
        let mut c = csum(&[&ip]);
        if self.bad_ip_csum {
            c ^= 0x0101;
        }
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut f = Vec::new();
        f.extend_from_slice(&ETH0);
        f.extend_from_slice(&PEER);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&l4);
        f.extend_from_slice(&payload);
        // Ethernet minimum frame: short frames are padded, as on a wire.
        if f.len() < 60 {
            f.resize(60, 0);
        }
        f
    }
}

/// How a case is replayed: batch mode, dispatch, and whether eth0 validates L4 checksums
/// as a NIC does (then GRO takes its fast path for trains).
#[derive(Debug, Clone, Copy)]
struct Variant {
    mode: &'static str,
    dispatch: &'static str,
    rx_checksum: bool,
}

/// Every variant a case runs in.
fn variants() -> Vec<Variant> {
    let mut v = Vec::new();
    for (mode, dispatch) in [
        ("list", "buckets"),
        ("list", "runs"),
        ("packet", "buckets"),
        ("packet", "runs"),
    ] {
        for rx_checksum in [false, true] {
            v.push(Variant {
                mode,
                dispatch,
                rx_checksum,
            });
        }
    }
    v
}

/// The router: eth0 receives with `gro` (its `gro` key), eth1 sends with `tx`. A poll
/// takes up to 256 frames, so every case (at most 144 frames per timestamp) is one GRO
/// window, as the selftest's `SO_TXTIME` burst is one NAPI window.
fn config(v: &Variant, gro: &str, tx: &[&str]) -> Config {
    config_with(v, gro, tx, false)
}

/// [`config`], dual-stack when `v6`: eth0 also has 2001:db8:1::1/64, eth1
/// 2001:db8:2::1/64, and `DST6` (on eth1's subnet) is a static neighbour.
fn config_with(v: &Variant, gro: &str, tx: &[&str], v6: bool) -> Config {
    let (mode, dispatch) = (v.mode, v.dispatch);
    let (a0, a1) = if v6 {
        (", \"2001:db8:1::1/64\"", ", \"2001:db8:2::1/64\"")
    } else {
        ("", "")
    };
    let list = |fs: &[&str]| {
        fs.iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let tx = list(tx);
    let rx = list(if v.rx_checksum { &["rx-checksum"] } else { &[] });
    let text = format!(
        r#"
[datapath]
mode = "{mode}"
dispatch = "{dispatch}"
burst = 256
budget = 1024

[pool]
buffers = 4096
buf_size = 8192

[[neighbour.static]]
ip = "198.51.100.100"
mac = "02:00:00:00:00:64"
dev = "eth1"

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
mtu = {MTU}
gro = "{gro}"
features = [{rx}]
addresses = ["192.0.2.1/24"{a0}]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
mtu = {MTU}
features = [{tx}]
addresses = ["198.51.100.1/24"{a1}]
"#
    );
    let mut cfg = Config::parse(&text, std::path::Path::new("."), "gro.toml")
        .unwrap_or_else(|e| panic!("config: {e}\n{text}"));
    if v6 {
        cfg.neighbours6 = vec![netbatch_runtime::setup::StaticNeighbour6 {
            iface: 1,
            ip: DST6.into(),
            mac: netbatch_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0x64]),
        }];
    }
    cfg
}

/// A fresh temporary directory, removed with its files when dropped (passed or panicked).
fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("netbatch-gro-")
        .tempdir()
        .unwrap()
}

/// Frames with their send time in milliseconds (a gap splits GRO windows).
type Capture = Vec<(u64, Seg)>;

/// What a replay gave: the frames sent on eth1 and the stats document.
struct Outcome {
    frames: Vec<Vec<u8>>,
    stats: Value,
}

fn run(case: &str, cap: &Capture, cfg: &Config) -> Outcome {
    let frames: Vec<CapturedFrame> = cap
        .iter()
        .map(|(ms, s)| CapturedFrame {
            ts_ns: 1_000_000_000 + ms * 1_000_000,
            bytes: s.frame(),
        })
        .collect();
    let dir = tmp();
    let input = dir.path().join(format!("{case}.pcap"));
    let output = dir.path().join(format!("{case}.pcapng"));
    write_pcap(&input, &frames).unwrap();
    let r = replay(cfg, &input, &output, None).unwrap_or_else(|e| panic!("{case}: {e}"));
    let stats = r.stats;
    let conserved = stats["rx_packets"].as_u64().unwrap()
        + stats["originated_packets"].as_u64().unwrap()
        == stats["tx_packets"].as_u64().unwrap()
            + stats["delivered_packets"].as_u64().unwrap()
            + stats["dropped_packets"].as_u64().unwrap()
            + stats["held_packets"].as_u64().unwrap();
    assert!(conserved, "{case}: packets unaccounted: {stats}");
    let out = read_frames(&output)
        .unwrap()
        .into_iter()
        .map(|f| f.bytes)
        .collect();
    Outcome { frames: out, stats }
}

/// Payload bytes of each TCP frame sent, up to the FIN (not counted, as in the selftest).
fn tcp_lengths(case: &str, frames: &[Vec<u8>]) -> Vec<usize> {
    tcp_lengths_in(case, frames, true)
}

/// As [`tcp_lengths`]; TCP checksums are checked only with `l4_csum`. A fraglist chain
/// taken whole is its head's headers (lengths grown, the head's own checksum kept) and
/// every member's payload: its checksum is not one over the whole.
fn tcp_lengths_in(case: &str, frames: &[Vec<u8>], l4_csum: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for f in frames {
        assert_eq!(&f[12..14], &[8, 0], "{case}: IPv4 frames only");
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(
            f.len(),
            14 + total,
            "{case}: a frame is exactly its IP packet"
        );
        assert_eq!(csum(&[&ip[..ihl]]), 0, "{case}: IP header checksum");
        let tcp = &ip[ihl..total];
        let doff = usize::from(tcp[12] >> 4) * 4;
        if tcp[13] & FIN != 0 {
            break;
        }
        // Every frame, merged or not, carries a valid TCP checksum (the capture shows
        // what the device's checksum offload puts on the wire), except the one the
        // `tcp_csum` case corrupts on purpose.
        let mut pseudo = Vec::from(&ip[12..20]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((total - ihl) as u16).to_be_bytes());
        if case != "tcp_csum" && l4_csum {
            assert_eq!(csum(&[&pseudo, tcp]), 0, "{case}: TCP checksum");
        }
        out.push(total - ihl - doff);
    }
    out
}

/// `cap` with the closing FIN appended (after the highest sequence number sent; over
/// IPv6 when the capture is).
fn with_fin(mut cap: Capture) -> Capture {
    let last = cap.last().map_or(0, |(t, _)| *t);
    let v6 = cap.first().is_some_and(|(_, s)| s.v6);
    let fin_seq = cap
        .iter()
        .filter(|(_, s)| s.flags & (SYN | RST) == 0)
        .map(|(_, s)| s.seq - 100 + s.len as u32)
        .max()
        .unwrap_or(0);
    let mut fin = Seg::tcp(fin_seq, 0).flags(FIN);
    fin.v6 = v6;
    cap.push((last, fin));
    cap
}

/// Replays `cap` (a FIN is appended) in every mode and checks the length list.
fn check(case: &str, cap: Capture, want: &[usize]) -> Value {
    let cap = with_fin(cap);
    let mut stats = Value::Null;
    for v in variants() {
        let o = run(
            case,
            &cap,
            &config(&v, "standard", &["tx-tcp-segmentation"]),
        );
        assert_eq!(tcp_lengths(case, &o.frames), want, "{case} in {v:?}");
        stats = o.stats;
    }
    stats
}

/// The TCP payload bytes of `frames` up to the FIN, concatenated.
fn tcp_payload(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp = &ip[ihl..total];
        if tcp[13] & FIN != 0 {
            break;
        }
        out.extend_from_slice(&tcp[usize::from(tcp[12] >> 4) * 4..]);
    }
    out
}

/// As [`check`] with fraglist GRO (forwarded TCP: no local socket) and an output port
/// that takes fraglist chains whole (`tx-gso-list` with `tx-tcp-segmentation`), so each
/// chain is one frame: its head's headers and every member's payload. The same capture
/// sent to a port without offloads must come out as the original segments (GSO gives
/// every member back its own headers, checksums valid), carrying the same bytes as the
/// chains.
fn check_fraglist(case: &str, cap: Capture, want: &[usize]) -> Value {
    let originals: Vec<usize> = cap.iter().map(|(_, s)| s.len).collect();
    let cap = with_fin(cap);
    let mut stats = Value::Null;
    for v in variants() {
        let whole = &["tx-tcp-segmentation", "tx-gso-list"][..];
        let o = run(case, &cap, &config(&v, "fraglist", whole));
        assert_eq!(
            tcp_lengths_in(case, &o.frames, false),
            want,
            "{case} (fraglist, chains whole) in {v:?}"
        );
        stats = o.stats;
        let chained = tcp_payload(&o.frames);
        let o = run(case, &cap, &config(&v, "fraglist", &[]));
        assert_eq!(
            tcp_lengths(case, &o.frames),
            originals,
            "{case} (fraglist, segmented at transmit) in {v:?}"
        );
        assert!(
            chained == tcp_payload(&o.frames),
            "{case} in {v:?}: the chains carry the segments' bytes"
        );
    }
    stats
}

/// Segments of `len` bytes at consecutive sequence numbers, all at time 0.
fn train(lens: &[usize]) -> Capture {
    let mut off = 0u32;
    lens.iter()
        .map(|&l| {
            let s = Seg::tcp(off, l);
            off += l as u32;
            (0, s)
        })
        .collect()
}

/// Declares one test per selftest case: `case!(name, capture, expected lengths)`.
macro_rules! case {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check(stringify!($name), $cap, &$want);
        }
    };
}

case!(data_same, train(&[100, 100]), [200]);
case!(data_lrg_sml, train(&[100, 50]), [150]);
case!(data_lrg_1byte, train(&[100, 1]), [101]);
case!(data_sml_lrg, train(&[50, 100]), [50, 100]);
case!(
    data_burst,
    {
        let mut c = train(&[100, 100, 100, 100]);
        // 100 ms later: another GRO window.
        c[2].0 = 100;
        c[3].0 = 100;
        c
    },
    [200, 200]
);
case!(single, train(&[100]), [100]);
case!(
    ack,
    {
        let a = Seg::tcp(0, 0);
        let mut a2 = a.clone();
        a2.ack += 1;
        vec![(0, a.clone()), (0, a), (0, a2)]
    },
    [0, 0, 0]
);
case!(
    flags_psh,
    {
        let mut c = train(&[100; 5]);
        c[2].1.flags |= PSH;
        c
    },
    [300, 200]
);

/// Two segments, a zero-length segment with `flag`, two more.
fn flag_train(flag: u8) -> Capture {
    let mut c = train(&[100, 100]);
    c.push((0, Seg::tcp(200, 0).flags(flag)));
    let mut rest = train(&[100, 100]);
    for (_, s) in &mut rest {
        s.seq += 200;
    }
    c.extend(rest);
    c
}

case!(flags_syn, flag_train(SYN), [200, 0, 200]);
case!(flags_rst, flag_train(RST), [200, 0, 200]);
case!(flags_urg, flag_train(URG), [200, 0, 200]);
case!(
    flags_cwr,
    {
        let mut c = train(&[100; 5]);
        c[1].1.flags |= CWR;
        c[2].1.flags |= CWR;
        c
    },
    [100, 200, 200]
);
case!(
    tcp_csum,
    {
        let mut c = train(&[100, 100]);
        c[1].1.bad_l4_csum = true;
        c
    },
    [100, 100]
);
case!(
    tcp_seq,
    {
        let mut c = train(&[100, 100]);
        c[1].1.seq += 1;
        c
    },
    [100, 100]
);

/// TCP options: NOP, NOP and a timestamp (kind 8, length 10, `v`, echo 0) in one of
/// three orders.
fn ts(v: u32, order: u8) -> Vec<u8> {
    let mut t = vec![8u8, 10];
    t.extend_from_slice(&v.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    match order {
        0 => [vec![1, 1], t].concat(),
        1 => [vec![1], t, vec![1]].concat(),
        _ => [t, vec![1, 1]].concat(),
    }
}

case!(
    tcp_ts,
    {
        let mut c = train(&[100; 5]);
        for (i, (_, s)) in c.iter_mut().enumerate() {
            s.tcp_opts = match i {
                0 | 1 => ts(0, 0),
                2 => ts(100, 0),
                3 => ts(100, 1),
                _ => ts(100, 2),
            };
        }
        c
    },
    [200, 100, 100, 100]
);
case!(
    tcp_opt,
    {
        let mut c = train(&[100; 3]);
        c[0].1.tcp_opts = ts(0, 0);
        c[1].1.tcp_opts = ts(0, 0);
        // NOP + window scale (kind 3, length 3, shift 14): another set and length.
        c[2].1.tcp_opts = vec![1, 3, 3, 14];
        c
    },
    [200, 100]
);

/// Two segments, the second changed by `f`.
fn second_changed(f: fn(&mut Seg)) -> Capture {
    let mut c = train(&[100, 100]);
    f(&mut c[1].1);
    c
}

// As the selftest: `ip_ecn` flips ECN to 10 (`buf[ETH_HLEN + 1] ^= 0x2`), `ip_tos` sets
// the whole TOS byte to 1 (`iph->tos = 1`). Either way TOS differs: not merged.
case!(ip_ecn, second_changed(|s| s.tos ^= 0x02), [100, 100]);
case!(ip_tos, second_changed(|s| s.tos = 1), [100, 100]);
case!(ip_ttl, second_changed(|s| s.ttl = 7), [100, 100]);
// DF and MF: the first fragment of a datagram.
case!(ip_frag4, second_changed(|s| s.frag = 0x6000), [100, 100]);
case!(
    ip_opt,
    {
        // A timestamp option (type 68, length 12, pointer 5, two empty slots).
        let mut c = train(&[100; 3]);
        c[1].1.ip_opts = vec![68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c
    },
    [100, 100, 100]
);

#[test]
fn ip_csum() {
    let mut c = train(&[100; 3]);
    c[1].1.bad_ip_csum = true;
    // The selftest expects [100, 100, 100]; the middle one is dropped by IP input here.
    let stats = check("ip_csum", c, &[100, 100]);
    assert_eq!(
        stats["drops"]["ip4_checksum"], 1,
        "the corrupt packet is dropped"
    );
}

/// Segments with IP IDs `ids`, DF set or not.
fn ids(df: bool, ids: &[u16]) -> Capture {
    let mut c = train(&vec![100; ids.len()]);
    for ((_, s), &id) in c.iter_mut().zip(ids) {
        s.id = id;
        s.frag = if df { 0x4000 } else { 0 };
    }
    c
}

case!(ip_id_df1_inc, ids(true, &[8, 9]), [200]);
case!(ip_id_df1_fixed, ids(true, &[8, 8]), [200]);
case!(ip_id_df0_inc, ids(false, &[8, 9]), [200]);
// Since 2025 (fixed IDs no longer need DF) the kernel coalesces this too.
case!(ip_id_df0_fixed, ids(false, &[8, 8]), [200]);
case!(ip_id_df1_inc_fixed, ids(true, &[8, 9, 9]), [200, 100]);
case!(ip_id_df1_fixed_inc, ids(true, &[8, 8, 9]), [200, 100]);

/// What the 16 full segments leave of a 65,535-byte IP packet.
const REM: usize = 65535 - 40 - 16 * MSS;

#[test]
fn large_max() {
    assert_eq!(REM, 599, "the selftest's geometry");
    let mut lens = vec![MSS; 16];
    lens.push(REM);
    let mut c = train(&lens);
    c.push((0, Seg::tcp(16 * MSS as u32 + REM as u32 + 1, REM)));
    check("large_max", c, &[16 * MSS + REM, REM]);
}

#[test]
fn large_rem() {
    let mut lens = vec![MSS; 16];
    lens.push(REM + 1);
    let mut c = train(&lens);
    c.push((0, Seg::tcp(16 * MSS as u32 + REM as u32 + 2, REM + 1)));
    check("large_rem", c, &[16 * MSS, REM + 1, REM + 1]);
}

/// The stats document's event counter `name` of the `gro` stage.
fn gro_event(stats: &Value, name: &str) -> u64 {
    stats["stages"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "gro"))
        .and_then(|s| s["events"][name].as_u64())
        .unwrap_or(0)
}

/// The selftest's `capacity` case with `flows` flows (sport 1500 + i), in one GRO window:
/// every flow's first segment (200 bytes), then every flow's second (200 bytes, PSH).
///
/// Expected, from the kernel's rules (8 buckets × 8 flows; a new flow in a full bucket
/// completes the bucket's oldest; a PSH segment merges and ends its train, and alone it
/// is never held):
/// - a flow still held when its second segment comes is one 400-byte frame, sent as the
///   second segment arrives, so those frames follow the flows' order;
/// - a flow evicted before its second segment came is two 200-byte frames: the first
///   when it is evicted (during the first round, so before every frame of the second),
///   the second alone (PSH, nothing held) at its place in the second round;
/// - each eviction splits exactly one flow (the evicted flows hold one segment), and
///   with more than 64 flows at least `flows - 64` must be evicted (pigeonhole: 64 fit).
///
/// Which flows share a bucket depends on the flow hash (the kernel's is the NIC's RSS
/// hash; with none, as on the selftest's veth, every flow is in bucket 0, so 16 flows
/// already overflow, which is why `gro.py` doubles the flow count until failure); the
/// unit test `gro::tests::a_full_bucket_completes_its_oldest_flow` picks flows of one
/// bucket to check that it is the oldest that goes.
fn check_capacity(flows: u16) {
    let case = format!("capacity_{flows}");
    let mut c = Capture::new();
    for i in 0..flows {
        let mut s = Seg::tcp(0, 200);
        s.sport = 1500 + i;
        c.push((0, s));
    }
    for i in 0..flows {
        let mut s = Seg::tcp(200, 200).flags(PSH);
        s.sport = 1500 + i;
        c.push((0, s));
    }
    for v in variants() {
        let o = run(&case, &c, &config(&v, "standard", &["tx-tcp-segmentation"]));
        // (sport, sequence offset, payload) of every frame, in the order sent.
        let got: Vec<(u16, u32, usize)> = o
            .frames
            .iter()
            .map(|f| {
                let sport = u16::from_be_bytes([f[34], f[35]]);
                let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]) - 100;
                (sport, seq, tcp_lengths(&case, std::slice::from_ref(f))[0])
            })
            .collect();
        let split: Vec<u16> = got
            .iter()
            .filter(|&&(_, seq, len)| seq == 0 && len == 200)
            .map(|&(sport, _, _)| sport)
            .collect();
        let k = split.len();
        // Evicted flows' first segments come first, then one frame per flow in flow
        // order: the merged 400 bytes, or an evicted flow's second segment.
        let want_rest: Vec<(u16, u32, usize)> = (0..flows)
            .map(|i| {
                if split.contains(&(1500 + i)) {
                    (1500 + i, 200, 200)
                } else {
                    (1500 + i, 0, 400)
                }
            })
            .collect();
        assert_eq!(
            got.len(),
            k + usize::from(flows),
            "{case} in {v:?}: {got:?}"
        );
        assert_eq!(&got[k..], &want_rest[..], "{case} in {v:?}: order");
        assert_eq!(
            gro_event(&o.stats, "evicted"),
            k as u64,
            "{case} in {v:?}: one split flow per eviction"
        );
        assert!(
            k >= usize::from(flows.saturating_sub(64)),
            "{case} in {v:?}: at most 64 flows are held"
        );
        if flows <= 8 {
            assert_eq!(k, 0, "{case} in {v:?}: 8 flows always fit");
        }
        assert!(gro_event(&o.stats, "peak_flows") <= 64, "{case} in {v:?}");
    }
}

#[test]
fn capacity() {
    // The selftest's default and gro.py's first step: every flow coalesced.
    check_capacity(8);
}

#[test]
fn capacity_beyond_8_flows() {
    // gro.py doubles the flow count; past 64 some flows must be evicted.
    for flows in [16, 32, 64, 72] {
        check_capacity(flows);
    }
}

/// UDP: ten 1300-byte datagrams of one forwarded flow (the `udpgro_fwd.sh` train).
#[test]
fn udp_forwarding_cases() {
    let cap: Capture = (0..10).map(|n| (0, Seg::udp(n, 1300))).collect();
    let originals: Vec<Vec<u8>> = cap.iter().map(|(_, s)| s.frame()).collect();
    for v in variants() {
        for (gro, tx, frames) in [
            ("standard", &["tx-udp-segmentation"][..], 1),
            ("fraglist", &["tx-udp-segmentation", "tx-gso-list"][..], 1),
            ("off", &["tx-udp-segmentation"][..], 10),
            ("standard", &[][..], 10),
            ("fraglist", &[][..], 10),
        ] {
            let o = run("udp", &cap, &config(&v, gro, tx));
            let what = format!("udp {gro} to {tx:?} in {v:?}");
            assert_eq!(o.frames.len(), frames, "{what}");
            let total: usize = o.frames.iter().map(|f| f.len() - 14 - 28).sum();
            assert_eq!(total, 13000, "{what}: payload bytes");
            if frames == 10 {
                // Segmented again: the originals, forwarded (TTL 8 → 7, header checksum
                // updated, MACs rewritten).
                for (got, orig) in o.frames.iter().zip(&originals) {
                    assert_eq!(got[22], 7, "{what}: TTL");
                    assert_eq!(csum(&[&got[14..34]]), 0, "{what}: IP checksum");
                    assert_eq!(&got[34..], &orig[34..], "{what}: UDP header and payload");
                    assert_eq!(&got[14..22], &orig[14..22], "{what}: IP header start");
                }
            } else {
                let f = &o.frames[0];
                assert_eq!(
                    u16::from_be_bytes([f[16], f[17]]),
                    13028,
                    "{what}: IP length"
                );
                assert_eq!(
                    u16::from_be_bytes([f[38], f[39]]),
                    13008,
                    "{what}: UDP length"
                );
            }
        }
    }
}

/// TCP's 64-segment cap: 70 segments of 100 bytes in one window. `tcp_gro_receive` puts a
/// 64-segment cap on fraglist flows only (standard TCP is bounded by 64 KB alone, which
/// would give [7000] here); netbatch caps standard trains at 64 segments too (the rule
/// of its GRO issue, the kernel's for UDP and fraglist TCP; it bounds the buffers one
/// flow holds, as the kernel's cap bounds truesize), so the list is the fraglist one:
/// 64 segments, completed, then a new train of the last 6.
#[test]
fn tcp_max_segs() {
    let stats = check("tcp_max_segs", train(&[100; 70]), &[6400, 600]);
    assert_eq!(gro_event(&stats, "coalesced"), 2, "two super-packets");
    assert_eq!(
        gro_event(&stats, "merged"),
        63 + 5,
        "segments merged into a head"
    );
}

/// Declares one fraglist TCP test: `flist_case!(name, capture, expected lengths)`.
macro_rules! flist_case {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check_fraglist(stringify!($name), $cap, &$want);
        }
    };
}

// Fraglist TCP (`rx-gro-list`, forwarded: `tcp4_check_fraglist_gro` finds no local
// socket). `tcp_gro_receive` adds for fraglist flows: the flag word fully equal (PSH
// and FIN included), the same checksum state, fewer than 64 segments; chaining fails past
// 64 KB counting the new member whole (`skb_gro_receive_list`: `p->len + skb->len`).
// The size and sequence rules are the standard ones.

// Every flag equal: one chain.
flist_case!(flist_data_same, train(&[100; 5]), [500]);
// A shorter segment is chained and ends the chain.
flist_case!(flist_data_lrg_sml, train(&[100, 100, 50]), [250]);
// A segment larger than the first is never chained.
flist_case!(flist_data_sml_lrg, train(&[50, 100]), [50, 100]);
// PSH in the middle: standard merges it and ends the train ([300, 200], `flags_psh`);
// fraglist does not chain it (its flags differ), completes the chain, and alone a PSH
// segment is not held, so the next two start a new chain.
flist_case!(
    flist_flags_psh,
    {
        let mut c = train(&[100; 5]);
        c[2].1.flags |= PSH;
        c
    },
    [200, 100, 200]
);
// PSH on the last segment: standard gives [300]; fraglist leaves it out of the chain.
flist_case!(
    flist_flags_psh_last,
    {
        let mut c = train(&[100; 3]);
        c[2].1.flags |= PSH;
        c
    },
    [200, 100]
);
// CWR on the second and third: flags differ from the first, equal between them.
flist_case!(
    flist_flags_cwr,
    {
        let mut c = train(&[100; 5]);
        c[1].1.flags |= CWR;
        c[2].1.flags |= CWR;
        c
    },
    [100, 200, 200]
);
// Every segment with PSH: none is held, so none is chained (as standard).
flist_case!(
    flist_flags_psh_all,
    {
        let mut c = train(&[100; 3]);
        for (_, s) in &mut c {
            s.flags |= PSH;
        }
        c
    },
    [100, 100, 100]
);
// A sequence gap ends the chain.
flist_case!(
    flist_tcp_seq,
    {
        let mut c = train(&[100; 4]);
        c[2].1.seq += 1;
        c[3].1.seq += 1;
        c
    },
    [200, 200]
);
// The 64-segment cap (`count >= 64` flushes): 64 chained, then a new chain of 6.
flist_case!(flist_max_segs, train(&[100; 70]), [6400, 600]);

/// The largest remainder that still chains behind 16 full segments: the head packet
/// (40 + 16 MSS bytes) plus the new member whole (40 + R bytes) must stay below 65,536.
const FLIST_REM: usize = 65535 - 80 - 16 * MSS;

// 16 × MSS then the largest member that fits: one chain; then one more with a gap.
flist_case!(
    flist_large_max,
    {
        let mut lens = vec![MSS; 16];
        lens.push(FLIST_REM);
        let mut c = train(&lens);
        c.push((0, Seg::tcp((16 * MSS + FLIST_REM + 1) as u32, FLIST_REM)));
        c
    },
    [16 * MSS + FLIST_REM, FLIST_REM]
);
// One byte more does not chain (the standard path would still merge it, `large_max`):
// the chain is completed and the member starts its own, which the next (a gap) ends.
flist_case!(
    flist_large_rem,
    {
        let mut lens = vec![MSS; 16];
        lens.push(FLIST_REM + 1);
        let mut c = train(&lens);
        c.push((
            0,
            Seg::tcp((16 * MSS + FLIST_REM + 2) as u32, FLIST_REM + 1),
        ));
        c
    },
    [16 * MSS, FLIST_REM + 1, FLIST_REM + 1]
);

/// UDP datagrams of `lens` payload bytes, one forwarded flow (1500 → 8000), IP IDs 0, 1,
/// 2… (a sender's incrementing IDs), all at time 0.
fn udp_train(lens: &[usize]) -> Capture {
    lens.iter()
        .enumerate()
        .map(|(n, &l)| (0, Seg::udp(n as u32, l)))
        .collect()
}

/// A UDP frame sent on eth1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UdpOut {
    /// Payload bytes, by the IP length.
    len: usize,
    /// The UDP length field agrees with the IP payload.
    ulen_ok: bool,
    /// The checksum field is zero (no checksum).
    zero_csum: bool,
}

/// Reads each UDP frame sent; checks it is exactly its IP packet with a valid header
/// checksum, and its UDP checksum (when it has one and its length field is right).
fn udp_frames(case: &str, frames: &[Vec<u8>]) -> Vec<UdpOut> {
    frames
        .iter()
        .map(|f| {
            assert_eq!(&f[12..14], &[8, 0], "{case}: IPv4 frames only");
            let ip = &f[14..];
            assert_eq!((ip[0], ip[9]), (0x45, 17), "{case}: IPv4/UDP");
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(f.len(), 14 + total, "{case}: a frame is its IP packet");
            assert_eq!(csum(&[&ip[..20]]), 0, "{case}: IP header checksum");
            let udp = &ip[20..total];
            let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
            let c = u16::from_be_bytes([udp[6], udp[7]]);
            let ulen_ok = ulen == udp.len();
            if ulen_ok && c != 0 {
                let mut pseudo = Vec::from(&ip[12..20]);
                pseudo.extend_from_slice(&[0, 17]);
                pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
                assert_eq!(csum(&[&pseudo, udp]), 0, "{case}: UDP checksum");
            }
            UdpOut {
                len: udp.len() - 8,
                ulen_ok,
                zero_csum: c == 0,
            }
        })
        .collect()
}

/// Replays UDP capture `cap` in every mode with standard UDP GRO for forwarding
/// (`rx-udp-gro-forwarding`) and an output port that takes UDP super-packets whole
/// (`tx-udp-segmentation`); checks the payload-length list and that every datagram
/// left. Returns the frames and stats of the last variant (every variant must give the
/// same frames).
fn check_udp(case: &str, cap: &Capture, want: &[usize]) -> (Vec<UdpOut>, Value) {
    let mut last: Option<(Vec<UdpOut>, Value)> = None;
    for v in variants() {
        let o = run(case, cap, &config(&v, "standard", &["tx-udp-segmentation"]));
        let got = udp_frames(case, &o.frames);
        let lens: Vec<usize> = got.iter().map(|u| u.len).collect();
        assert_eq!(lens, want, "{case} in {v:?}");
        assert_eq!(
            o.stats["tx_packets"].as_u64(),
            Some(cap.len() as u64),
            "{case} in {v:?}: every datagram forwarded"
        );
        if let Some((prev, _)) = &last {
            assert_eq!(&got, prev, "{case} in {v:?}: same frames in every variant");
        }
        last = Some((got, o.stats));
    }
    last.expect("variants")
}

/// Declares one UDP test: `udp_case!(name, capture, expected lengths)`.
macro_rules! udp_case {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check_udp(stringify!($name), &$cap, &$want);
        }
    };
}

// UDP standard GRO (`udp_gro_receive_segment`): datagrams of a flow merge while they are
// as long as the first; a shorter one merges and ends the train; a longer one is not
// merged (the train is completed and it starts the next); no checksum, or a length field
// that is not the IP payload, is never merged; at most 64 datagrams, and 64 KB.

// Same-length datagrams merge.
udp_case!(udp_data_same, udp_train(&[100; 4]), [400]);
// A longer datagram after the first is not merged: it starts a new train, which the
// next datagram of its length joins.
udp_case!(udp_data_sml_lrg, udp_train(&[100, 200, 200]), [100, 400]);
// A shorter datagram merges and ends the train; the next same-flow datagram starts a
// new one.
udp_case!(
    udp_data_lrg_sml,
    udp_train(&[100, 100, 50, 100, 100]),
    [250, 200]
);

/// A zero checksum (no checksum) is never merged, into a train or as the start of one
/// (`udp_gro_receive_segment`: "requires non zero csum"), and the datagram is forwarded
/// as it came. Window 1: a datagram, then one without a checksum. Window 2 (100 ms later):
/// one without a checksum, then two that merge.
#[test]
fn udp_csum_zero() {
    let mut c = udp_train(&[100; 5]);
    c[1].1.zero_csum = true;
    c[2].1.zero_csum = true;
    for e in &mut c[2..] {
        e.0 = 100;
    }
    // (The kernel passes the unmergeable datagram before the held one, netbatch after:
    // it never reorders a flow. The lengths are the same.)
    let (got, _) = check_udp("udp_csum_zero", &c, &[100, 100, 100, 200]);
    let zero: Vec<usize> = got.iter().filter(|u| u.zero_csum).map(|u| u.len).collect();
    assert_eq!(
        zero,
        [100, 100],
        "the two datagrams without checksum, unchanged"
    );
}

/// A UDP length field that disagrees with the IP payload is never merged
/// (`udp_gro_receive_segment`: `ulen != skb_gro_len(skb)` flushes). Forwarded, such a
/// datagram is not the router's to judge (the kernel's `ip_forward` does not read UDP
/// either): it leaves unchanged, nothing is dropped. Window 1: a datagram, then one whose
/// length field is 4 bytes too long. Window 2: one whose field is 50 bytes short, then
/// two that merge.
#[test]
fn udp_bad_len() {
    let mut c = udp_train(&[100; 5]);
    c[1].1.ulen = Some(8 + 100 + 4);
    c[2].1.ulen = Some(8 + 50);
    for e in &mut c[2..] {
        e.0 = 100;
    }
    let (got, stats) = check_udp("udp_bad_len", &c, &[100, 100, 100, 200]);
    let bad: Vec<usize> = got.iter().filter(|u| !u.ulen_ok).map(|u| u.len).collect();
    assert_eq!(
        bad,
        [100, 100],
        "the two datagrams with a wrong length, unmerged"
    );
    assert_eq!(stats["dropped_packets"], 0, "forwarded, not dropped");
}

/// The 64-datagram cap (`UDP_GRO_CNT_MAX`): 70 datagrams of 100 bytes are a super-packet
/// of 64 datagrams (completed when the 64th merges) and one of the remaining 6.
#[test]
fn udp_max_segs() {
    let (_, stats) = check_udp("udp_max_segs", &udp_train(&[100; 70]), &[6400, 600]);
    assert_eq!(gro_event(&stats, "coalesced"), 2, "two super-packets");
    assert_eq!(
        gro_event(&stats, "merged"),
        63 + 5,
        "datagrams merged into a head"
    );
}

/// The 64 KB limit: datagrams of the largest size the MTU allows (4,068 bytes); 16 make
/// an IP packet of 28 + 65,088 bytes, a 17th would pass 65,535 (`skb_gro_receive`
/// refuses it), so it is not merged and starts the next train.
#[test]
fn udp_large() {
    let d = MTU - 28;
    check_udp("udp_large", &udp_train(&[d; 17]), &[16 * d, d]);
}

/// The GRO kind decision for TCP (`tcp4_check_fraglist_gro`): under `rx-gro-list`,
/// fraglist only for TCP with no local socket; TCP to one of our addresses gets standard
/// GRO. netbatch terminates no TCP and keeps no TCP socket table, so "no local socket"
/// is "the destination is not one of our addresses". The same train, [100, 100,
/// 100 + PSH], to our address (198.51.100.1, eth1's) and to a forwarded one:
/// - local, standard: PSH merges and ends the train: one super-packet [300] of 3
///   segments, PSH set, its checksum completed as a TSO device would;
/// - forwarded, fraglist: PSH is a differing flag: [200, 100].
///
/// Local TCP is handed to eth1's transmit node (where a host port would take it), so
/// what GRO built for it can be seen; it arrives there without its link header.
#[test]
fn flist_local_tcp_gets_standard_gro() {
    use netbatch_engine::Dispatch;
    use netbatch_runtime::setup::StaticNeighbour;
    use netbatch_scenarios::{Gro, Lab, LabSpec, VARIANTS, port};
    use netbatch_stack::GraphOptions;
    use netbatch_wire::ethernet::MacAddr;

    let local = [198, 51, 100, 1];
    let tcp_train = |dst: [u8; 4]| -> Vec<Vec<u8>> {
        let mut c = train(&[100; 3]);
        c[2].1.flags |= PSH;
        c.into_iter()
            .map(|(_, mut s)| {
                s.dst = dst;
                s.frame()
            })
            .collect()
    };
    for (mode, dispatch) in VARIANTS {
        let _: Dispatch = dispatch;
        let mut eth0 = port("eth0", MacAddr(ETH0), "192.0.2.1/24");
        Gro::Fraglist.apply(&mut eth0);
        let mut eth1 = port("eth1", MacAddr([2, 0, 0x5e, 0, 0x53, 2]), "198.51.100.1/24");
        for f in ["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"] {
            assert!(eth1.features.set(f, true));
        }
        let spec = LabSpec {
            routes6: Vec::new(),
            neighbours6: Vec::new(),
            ports: vec![eth0, eth1],
            routes: Vec::new(),
            neighbours: vec![StaticNeighbour {
                iface: 1,
                ip: DST.into(),
                mac: MacAddr([2, 0, 0, 0, 0, 0x64]),
            }],
            params: Default::default(),
            graph: GraphOptions {
                gro: true,
                tcp_to: Some("tx-eth1"),
                ..GraphOptions::default()
            },
        };
        let mut lab = Lab::new(&spec, mode, dispatch);
        lab.feed(0, tcp_train(local));
        lab.run();
        let got = lab.tx(1);
        let what = format!("local TCP in {mode:?}/{dispatch:?}");
        assert_eq!(got.len(), 1, "{what}: one super-packet");
        let (f, ip) = (&got[0], &got[0].bytes[..]);
        assert_eq!(ip[0], 0x45, "{what}: from the IP header on");
        assert_eq!((f.segs, f.gso_size), (3, 100), "{what}");
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(
            (total, ip.len()),
            (340, 340),
            "{what}: 300 bytes of payload"
        );
        assert_ne!(ip[33] & PSH, 0, "{what}: PSH inherited");
        let mut pseudo = Vec::from(&ip[12..20]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&320u16.to_be_bytes());
        assert_eq!(csum(&[&pseudo, &ip[20..]]), 0, "{what}: TCP checksum");

        lab.feed(0, tcp_train(DST));
        lab.run();
        let got: Vec<(u16, usize)> = lab
            .tx(1)
            .iter()
            .map(|f| (f.segs, f.bytes.len() - 14 - 40))
            .collect();
        assert_eq!(
            got,
            [(2, 200), (1, 100)],
            "forwarded TCP in {mode:?}/{dispatch:?}"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}

// IPv6: the kernel GRO selftest's IPv6 cases (`gro.c -6`), and the same merge rules for
// UDP and fraglist over IPv6, through the same router, dual-stack: from 2001:db8:1::200
// on eth0's subnet to 2001:db8:2::100 on eth1's (a static neighbour). Frames are built by
// hand, field by field (RFC 8200 3, its pseudo-header for TCP and UDP, 8.1), checked with
// this file's checksum routine; the payload-length lists are the selftest's expected ones
// (or, where it has no such case, worked out from the kernel's rules).

impl Seg {
    /// The frame of an IPv6 segment.
    fn frame6(&self) -> Vec<u8> {
        let payload: Vec<u8> = (0..self.len)
            .map(|i| (self.seq as usize + i) as u8)
            .collect();
        let mut l4 = if self.proto == 6 {
            let doff = 20 + self.tcp_opts.len();
            let mut t = Vec::with_capacity(doff);
            t.extend_from_slice(&self.sport.to_be_bytes());
            t.extend_from_slice(&8000u16.to_be_bytes());
            t.extend_from_slice(&self.seq.to_be_bytes());
            t.extend_from_slice(&self.ack.to_be_bytes());
            t.push(((doff / 4) as u8) << 4);
            t.push(self.flags);
            t.extend_from_slice(&1024u16.to_be_bytes());
            t.extend_from_slice(&[0, 0, 0, 0]);
            t.extend_from_slice(&self.tcp_opts);
            t
        } else {
            let mut u = Vec::new();
            u.extend_from_slice(&self.sport.to_be_bytes());
            u.extend_from_slice(&8000u16.to_be_bytes());
            let ulen = self.ulen.unwrap_or((8 + self.len) as u16);
            u.extend_from_slice(&ulen.to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u
        };
        let l4_len = (l4.len() + self.len) as u32;
        // RFC 8200 8.1: addresses, the upper-layer length (32 bits), three zero bytes and
        // the upper-layer next header.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&SRC6);
        pseudo.extend_from_slice(&self.dst6);
        pseudo.extend_from_slice(&l4_len.to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, self.proto]);
        let at = if self.proto == 6 { 16 } else { 6 };
        let mut c = csum(&[&pseudo, &l4, &payload]);
        if self.proto == 17 && c == 0 {
            c = 0xffff;
        }
        if self.bad_l4_csum {
            c ^= 0x5a5a;
        }
        if self.zero_csum {
            c = 0;
        }
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        // The extension headers, each naming the next; the fixed header names the first.
        let mut exts: Vec<u8> = Vec::new();
        for (k, e) in self.exts.iter().enumerate() {
            let mut e = e.clone();
            e[0] = self.exts.get(k + 1).map_or(self.proto, |n| n[0]);
            exts.extend_from_slice(&e);
        }
        let first = self.exts.first().map_or(self.proto, |e| e[0]);
        let plen = (exts.len() as u32 + l4_len) as u16;
        let (tc, fl) = (u32::from(self.tos), self.flow & 0xf_ffff);
        let word = (6u32 << 28) | (tc << 20) | fl;
        let mut f = Vec::new();
        f.extend_from_slice(&ETH0);
        f.extend_from_slice(&PEER);
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        f.extend_from_slice(&word.to_be_bytes());
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[first, self.ttl]);
        f.extend_from_slice(&SRC6);
        f.extend_from_slice(&self.dst6);
        f.extend_from_slice(&exts);
        f.extend_from_slice(&l4);
        f.extend_from_slice(&payload);
        f
    }
}

/// An IPv6 frame sent on eth1, read: its upper-layer header and payload (up to the
/// payload length) and its upper-layer next header, after checking that the frame is
/// exactly its packet. The extension headers are walked by their kinds (RFC 8200 4).
fn upper6<'a>(case: &str, f: &'a [u8]) -> (&'a [u8], u8) {
    assert_eq!(&f[12..14], &[0x86, 0xdd], "{case}: IPv6 frames only");
    let ip = &f[14..];
    assert_eq!(ip[0] >> 4, 6, "{case}: version");
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    assert_eq!(
        f.len(),
        14 + 40 + plen,
        "{case}: a frame is exactly its packet"
    );
    let (mut next, mut at) = (ip[6], 40);
    while matches!(next, 0 | 43 | 44 | 60) {
        let len = if next == 44 {
            8
        } else {
            (usize::from(ip[at + 1]) + 1) * 8
        };
        next = ip[at];
        at += len;
    }
    (&ip[at..40 + plen], next)
}

/// The IPv6 pseudo-header of the packet in frame `f` for `l4_len` bytes of protocol
/// `proto`.
fn pseudo6(f: &[u8], l4_len: usize, proto: u8) -> Vec<u8> {
    let mut p = Vec::from(&f[14 + 8..14 + 40]);
    p.extend_from_slice(&(l4_len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, proto]);
    p
}

/// [`tcp_lengths_in`] over IPv6: payload bytes of each TCP frame up to the FIN, each
/// checked to be exactly its IPv6 packet, and its TCP checksum when `l4_csum`.
fn tcp6_lengths_in(case: &str, frames: &[Vec<u8>], l4_csum: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for f in frames {
        let (tcp, next) = upper6(case, f);
        assert_eq!(next, 6, "{case}: TCP");
        let doff = usize::from(tcp[12] >> 4) * 4;
        if tcp[13] & FIN != 0 {
            break;
        }
        if case != "tcp6_csum" && l4_csum {
            let pseudo = pseudo6(f, tcp.len(), 6);
            assert_eq!(csum(&[&pseudo, tcp]), 0, "{case}: TCP checksum");
        }
        out.push(tcp.len() - doff);
    }
    out
}

/// The TCP payload bytes of IPv6 `frames` up to the FIN, concatenated.
fn tcp6_payload(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let (tcp, _) = upper6("payload", f);
        if tcp[13] & FIN != 0 {
            break;
        }
        out.extend_from_slice(&tcp[usize::from(tcp[12] >> 4) * 4..]);
    }
    out
}

/// [`check`] over IPv6 (a FIN is appended): standard GRO, an output port with
/// `tx-tcp-segmentation`.
fn check6(case: &str, cap: Capture, want: &[usize]) -> Value {
    let cap = with_fin(cap);
    let mut stats = Value::Null;
    for v in variants() {
        let cfg = config_with(&v, "standard", &["tx-tcp-segmentation"], true);
        let o = run(case, &cap, &cfg);
        assert_eq!(
            tcp6_lengths_in(case, &o.frames, true),
            want,
            "{case} in {v:?}"
        );
        stats = o.stats;
    }
    stats
}

/// [`check_fraglist`] over IPv6: fraglist GRO, chains seen whole on a `tx-gso-list`
/// port, the original segments (and their bytes) on a port without offloads.
fn check_fraglist6(case: &str, cap: Capture, want: &[usize]) -> Value {
    let originals: Vec<usize> = cap.iter().map(|(_, s)| s.len).collect();
    let cap = with_fin(cap);
    let mut stats = Value::Null;
    for v in variants() {
        let whole = &["tx-tcp-segmentation", "tx-gso-list"][..];
        let o = run(case, &cap, &config_with(&v, "fraglist", whole, true));
        assert_eq!(
            tcp6_lengths_in(case, &o.frames, false),
            want,
            "{case} (fraglist, chains whole) in {v:?}"
        );
        stats = o.stats;
        let chained = tcp6_payload(&o.frames);
        let o = run(case, &cap, &config_with(&v, "fraglist", &[], true));
        assert_eq!(
            tcp6_lengths_in(case, &o.frames, true),
            originals,
            "{case} (fraglist, segmented at transmit) in {v:?}"
        );
        assert!(
            chained == tcp6_payload(&o.frames),
            "{case} in {v:?}: the chains carry the segments' bytes"
        );
    }
    stats
}

/// IPv6 segments of `len` bytes at consecutive sequence numbers, all at time 0.
fn train6(lens: &[usize]) -> Capture {
    train(lens).into_iter().map(|(t, s)| (t, s.v6())).collect()
}

/// Declares one IPv6 test: `case6!(name, capture, expected lengths)`.
macro_rules! case6 {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check6(stringify!($name), $cap, &$want);
        }
    };
}

/// A capture made IPv6.
fn six(cap: Capture) -> Capture {
    cap.into_iter().map(|(t, s)| (t, s.v6())).collect()
}

case6!(data6_same, train6(&[100, 100]), [200]);
case6!(data6_lrg_sml, train6(&[100, 50]), [150]);
case6!(data6_sml_lrg, train6(&[50, 100]), [50, 100]);
case6!(
    data6_burst,
    {
        let mut c = train6(&[100, 100, 100, 100]);
        c[2].0 = 100;
        c[3].0 = 100;
        c
    },
    [200, 200]
);
case6!(
    ack6,
    {
        let a = Seg::tcp(0, 0).v6();
        let mut a2 = a.clone();
        a2.ack += 1;
        vec![(0, a.clone()), (0, a), (0, a2)]
    },
    [0, 0, 0]
);
case6!(
    flags6_psh,
    {
        let mut c = train6(&[100; 5]);
        c[2].1.flags |= PSH;
        c
    },
    [300, 200]
);
case6!(flags6_syn, six(flag_train(SYN)), [200, 0, 200]);
case6!(flags6_rst, six(flag_train(RST)), [200, 0, 200]);
case6!(flags6_urg, six(flag_train(URG)), [200, 0, 200]);
case6!(
    tcp6_csum,
    {
        let mut c = train6(&[100, 100]);
        c[1].1.bad_l4_csum = true;
        c
    },
    [100, 100]
);
case6!(
    tcp6_seq,
    {
        let mut c = train6(&[100, 100]);
        c[1].1.seq += 1;
        c
    },
    [100, 100]
);
case6!(
    tcp6_ts,
    {
        let mut c = train6(&[100; 5]);
        for (i, (_, s)) in c.iter_mut().enumerate() {
            s.tcp_opts = match i {
                0 | 1 => ts(0, 0),
                2 => ts(100, 0),
                3 => ts(100, 1),
                _ => ts(100, 2),
            };
        }
        c
    },
    [200, 100, 100, 100]
);
case6!(
    tcp6_opt,
    {
        let mut c = train6(&[100; 3]);
        c[0].1.tcp_opts = ts(0, 0);
        c[1].1.tcp_opts = ts(0, 0);
        c[2].1.tcp_opts = vec![1, 3, 3, 14];
        c
    },
    [200, 100]
);

/// Two IPv6 segments, the second changed by `f`.
fn second_changed6(f: fn(&mut Seg)) -> Capture {
    let mut c = train6(&[100, 100]);
    f(&mut c[1].1);
    c
}

// As the selftest: `ip_ecn` flips the traffic class's ECN bits to 10
// (`buf[ETH_HLEN + 1] ^= 0x20`), `ip_tos` sets its high four bits (`priority = 0xf`).
case6!(ip6_ecn, second_changed6(|s| s.tos ^= 0x02), [100, 100]);
case6!(ip6_tos, second_changed6(|s| s.tos |= 0xf0), [100, 100]);
// The kernel's `ipv6_gro_flush` compares the hop limit (the selftest's comment that GRO
// does not, and its missing case, predate it): not merged.
case6!(ip6_hop_limit, second_changed6(|s| s.ttl = 7), [100, 100]);
// Another flow label: another flow for the kernel, its held packet completed here;
// either way not merged.
case6!(ip6_flow_label, second_changed6(|s| s.flow = 1), [100, 100]);

/// An options header (Hop-by-Hop or Destination Options, by `kind`) of 8 bytes whose six
/// option bytes are `b` (the selftest's `EXT_PAYLOAD_1` is zeros, `EXT_PAYLOAD_2` 0x11).
fn opts_hdr(kind: u8, b: u8) -> Vec<u8> {
    vec![kind, 0, b, b, b, b, b, b]
}

/// `send_fragment6`: two segments (merged), then in the next window a segment with a
/// Fragment header (all zero but its next header: an atomic fragment, never merged) and
/// one without (alone: the one before it was not held).
#[test]
fn ip6_frag() {
    let mut c = train6(&[100; 4]);
    c[2].1.exts = vec![vec![44, 0, 0, 0, 0, 0, 0, 0]];
    c[2].0 = 100;
    c[3].0 = 100;
    check6("ip6_frag", c, &[200, 100, 100]);
}

// `send_ipv6_exthdr`: a Hop-by-Hop header on both; the same bytes merge, other bytes
// do not.
case6!(
    ip6_ext_same,
    {
        let mut c = train6(&[100, 100]);
        for (_, s) in &mut c {
            s.exts = vec![opts_hdr(0, 0)];
        }
        c
    },
    [200]
);
case6!(
    ip6_ext_diff,
    {
        let mut c = train6(&[100, 100]);
        c[0].1.exts = vec![opts_hdr(0, 0)];
        c[1].1.exts = vec![opts_hdr(0, 0x11)];
        c
    },
    [100, 100]
);
// Destination Options after Hop-by-Hop: merged too (`ipv6_gro_pull_exthdrs` crosses
// both).
case6!(
    ip6_ext_hbh_dstopts,
    {
        let mut c = train6(&[100; 3]);
        for (_, s) in &mut c {
            s.exts = vec![opts_hdr(0, 0), opts_hdr(60, 0)];
        }
        c
    },
    [300]
);
// A Routing header with segments left: netbatch does not merge it (the kernel does):
// every segment alone, none lost or reordered.
case6!(
    ip6_routing_segments_left,
    {
        let mut c = train6(&[100; 3]);
        for (_, s) in &mut c {
            let mut rh = vec![43, 2, 0, 1, 0, 0, 0, 0];
            rh.extend_from_slice(&DST6);
            s.exts = vec![rh];
        }
        c
    },
    [100, 100, 100]
);

/// The selftest's IPv6 geometry: MSS = 4096 less the IPv6 and TCP headers; 16 of them
/// and the remainder make a 65,535-byte packet (`skb_gro_receive` counts the IPv6 header
/// in: the payload length stays at most 65,495).
const MSS6: usize = MTU - 60;
const REM6: usize = 65535 - 60 - 16 * MSS6;

#[test]
fn large6_max() {
    assert_eq!(REM6, 899, "the selftest's remainder, (65535 - 60) % MSS");
    let mut lens = vec![MSS6; 16];
    lens.push(REM6);
    let mut c = train6(&lens);
    c.push((0, Seg::tcp((16 * MSS6 + REM6 + 1) as u32, REM6).v6()));
    check6("large6_max", c, &[16 * MSS6 + REM6, REM6]);
}

#[test]
fn large6_rem() {
    let mut lens = vec![MSS6; 16];
    lens.push(REM6 + 1);
    let mut c = train6(&lens);
    c.push((0, Seg::tcp((16 * MSS6 + REM6 + 2) as u32, REM6 + 1).v6()));
    check6("large6_rem", c, &[16 * MSS6, REM6 + 1, REM6 + 1]);
}

/// The 64-segment cap over IPv6, as [`tcp_max_segs`].
#[test]
fn tcp6_max_segs() {
    let stats = check6("tcp6_max_segs", train6(&[100; 70]), &[6400, 600]);
    assert_eq!(gro_event(&stats, "coalesced"), 2, "two super-packets");
}

/// Declares one IPv6 fraglist TCP test.
macro_rules! flist6_case {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check_fraglist6(stringify!($name), $cap, &$want);
        }
    };
}

// Fraglist TCP over IPv6 (`tcp6_check_fraglist_gro`: forwarded, no local socket), the
// IPv4 lists (`tcp_gro_receive`'s rules are the same).
flist6_case!(flist6_data_same, train6(&[100; 5]), [500]);
flist6_case!(flist6_data_lrg_sml, train6(&[100, 100, 50]), [250]);
flist6_case!(flist6_data_sml_lrg, train6(&[50, 100]), [50, 100]);
flist6_case!(
    flist6_flags_psh,
    {
        let mut c = train6(&[100; 5]);
        c[2].1.flags |= PSH;
        c
    },
    [200, 100, 200]
);
flist6_case!(
    flist6_tcp_seq,
    {
        let mut c = train6(&[100; 4]);
        c[2].1.seq += 1;
        c[3].1.seq += 1;
        c
    },
    [200, 200]
);
flist6_case!(
    flist6_ext_hbh,
    {
        let mut c = train6(&[100; 4]);
        for (_, s) in &mut c {
            s.exts = vec![opts_hdr(0, 0)];
        }
        c
    },
    [400]
);
flist6_case!(flist6_max_segs, train6(&[100; 70]), [6400, 600]);

/// The largest remainder a fraglist chain of 16 full IPv6 segments takes: the head
/// packet (60 + 16 MSS bytes) and the new member whole (60 + R bytes) stay below 65,536.
const FLIST_REM6: usize = 65535 - 120 - 16 * MSS6;

flist6_case!(
    flist6_large_max,
    {
        let mut lens = vec![MSS6; 16];
        lens.push(FLIST_REM6);
        let mut c = train6(&lens);
        c.push((
            0,
            Seg::tcp((16 * MSS6 + FLIST_REM6 + 1) as u32, FLIST_REM6).v6(),
        ));
        c
    },
    [16 * MSS6 + FLIST_REM6, FLIST_REM6]
);
flist6_case!(
    flist6_large_rem,
    {
        let mut lens = vec![MSS6; 16];
        lens.push(FLIST_REM6 + 1);
        let mut c = train6(&lens);
        c.push((
            0,
            Seg::tcp((16 * MSS6 + FLIST_REM6 + 2) as u32, FLIST_REM6 + 1).v6(),
        ));
        c
    },
    [16 * MSS6, FLIST_REM6 + 1, FLIST_REM6 + 1]
);

/// UDP datagrams over IPv6 of `lens` payload bytes, one forwarded flow, all at time 0.
fn udp6_train(lens: &[usize]) -> Capture {
    six(udp_train(lens))
}

/// [`udp_frames`] over IPv6: each frame exactly its packet, its UDP checksum valid when
/// its length field is right (over IPv6 it always has one, RFC 8200 8.1).
fn udp6_frames(case: &str, frames: &[Vec<u8>]) -> Vec<UdpOut> {
    frames
        .iter()
        .map(|f| {
            let (udp, next) = upper6(case, f);
            assert_eq!(next, 17, "{case}: UDP");
            let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
            let c = u16::from_be_bytes([udp[6], udp[7]]);
            let ulen_ok = ulen == udp.len();
            if ulen_ok && c != 0 {
                let pseudo = pseudo6(f, udp.len(), 17);
                assert_eq!(csum(&[&pseudo, udp]), 0, "{case}: UDP checksum");
            }
            UdpOut {
                len: udp.len() - 8,
                ulen_ok,
                zero_csum: c == 0,
            }
        })
        .collect()
}

/// [`check_udp`] over IPv6.
fn check_udp6(case: &str, cap: &Capture, want: &[usize]) -> (Vec<UdpOut>, Value) {
    let mut last: Option<(Vec<UdpOut>, Value)> = None;
    for v in variants() {
        let cfg = config_with(&v, "standard", &["tx-udp-segmentation"], true);
        let o = run(case, cap, &cfg);
        let got = udp6_frames(case, &o.frames);
        let lens: Vec<usize> = got.iter().map(|u| u.len).collect();
        assert_eq!(lens, want, "{case} in {v:?}");
        assert_eq!(
            o.stats["tx_packets"].as_u64(),
            Some(cap.len() as u64),
            "{case} in {v:?}: every datagram forwarded"
        );
        if let Some((prev, _)) = &last {
            assert_eq!(&got, prev, "{case} in {v:?}: same frames in every variant");
        }
        last = Some((got, o.stats));
    }
    last.expect("variants")
}

/// Declares one IPv6 UDP test.
macro_rules! udp6_case {
    ($name:ident, $cap:expr, $want:expr) => {
        #[test]
        fn $name() {
            check_udp6(stringify!($name), &$cap, &$want);
        }
    };
}

// `udp6_gro_receive` → `udp_gro_receive_segment`: the IPv4 rules, over IPv6.
udp6_case!(udp6_data_same, udp6_train(&[100; 4]), [400]);
udp6_case!(udp6_data_sml_lrg, udp6_train(&[100, 200, 200]), [100, 400]);
udp6_case!(
    udp6_data_lrg_sml,
    udp6_train(&[100, 100, 50, 100, 100]),
    [250, 200]
);

/// A zero checksum is never merged; over IPv6 it is invalid (RFC 8200 8.1), but a router
/// forwards it as it came (not its to judge): window 1, a datagram then one without a
/// checksum; window 2, one without, then two that merge.
#[test]
fn udp6_csum_zero() {
    let mut c = udp6_train(&[100; 5]);
    c[1].1.zero_csum = true;
    c[2].1.zero_csum = true;
    for e in &mut c[2..] {
        e.0 = 100;
    }
    let (got, _) = check_udp6("udp6_csum_zero", &c, &[100, 100, 100, 200]);
    let zero: Vec<usize> = got.iter().filter(|u| u.zero_csum).map(|u| u.len).collect();
    assert_eq!(zero, [100, 100], "forwarded unchanged");
}

/// A UDP length field that disagrees with the payload length: never merged, forwarded.
#[test]
fn udp6_bad_len() {
    let mut c = udp6_train(&[100; 5]);
    c[1].1.ulen = Some(8 + 100 + 4);
    c[2].1.ulen = Some(8 + 50);
    for e in &mut c[2..] {
        e.0 = 100;
    }
    let (got, stats) = check_udp6("udp6_bad_len", &c, &[100, 100, 100, 200]);
    let bad: Vec<usize> = got.iter().filter(|u| !u.ulen_ok).map(|u| u.len).collect();
    assert_eq!(bad, [100, 100], "unmerged");
    assert_eq!(stats["dropped_packets"], 0, "forwarded, not dropped");
}

#[test]
fn udp6_max_segs() {
    let (_, stats) = check_udp6("udp6_max_segs", &udp6_train(&[100; 70]), &[6400, 600]);
    assert_eq!(gro_event(&stats, "coalesced"), 2, "two super-packets");
}

/// The 64 KB limit over IPv6: datagrams of the largest size the MTU allows (4,048
/// bytes); 16 make a packet of 40 + 8 + 64,768 bytes, a 17th would pass 65,535.
#[test]
fn udp6_large() {
    let d = MTU - 48;
    check_udp6("udp6_large", &udp6_train(&[d; 17]), &[16 * d, d]);
}

/// `udpgro_fwd.sh` over IPv6: ten 1300-byte datagrams of one forwarded flow arrive as one
/// frame on a port that takes the super-packet whole, and as the originals (hop limit
/// 8 → 7, MACs rewritten, nothing else changed) on a port without offloads.
#[test]
fn udp6_forwarding_cases() {
    let cap: Capture = (0..10).map(|n| (0, Seg::udp(n, 1300).v6())).collect();
    let originals: Vec<Vec<u8>> = cap.iter().map(|(_, s)| s.frame()).collect();
    for v in variants() {
        for (gro, tx, frames) in [
            ("standard", &["tx-udp-segmentation"][..], 1),
            ("fraglist", &["tx-udp-segmentation", "tx-gso-list"][..], 1),
            ("off", &["tx-udp-segmentation"][..], 10),
            ("standard", &[][..], 10),
            ("fraglist", &[][..], 10),
        ] {
            let o = run("udp6", &cap, &config_with(&v, gro, tx, true));
            let what = format!("udp6 {gro} to {tx:?} in {v:?}");
            assert_eq!(o.frames.len(), frames, "{what}");
            let total: usize = o.frames.iter().map(|f| f.len() - 14 - 48).sum();
            assert_eq!(total, 13000, "{what}: payload bytes");
            if frames == 10 {
                for (got, orig) in o.frames.iter().zip(&originals) {
                    assert_eq!(got[14 + 7], 7, "{what}: hop limit");
                    assert_eq!(&got[14..21], &orig[14..21], "{what}: IPv6 header start");
                    assert_eq!(&got[22..], &orig[22..], "{what}: addresses, UDP, payload");
                }
                udp6_frames(&what, &o.frames);
            } else {
                let f = &o.frames[0];
                assert_eq!(u16::from_be_bytes([f[18], f[19]]), 13008, "{what}: length");
                assert_eq!(u16::from_be_bytes([f[58], f[59]]), 13008, "{what}: UDP");
            }
        }
    }
}

/// The GRO kind decision for TCP over IPv6 (`tcp6_check_fraglist_gro`): under
/// `rx-gro-list`, TCP to one of our addresses gets standard GRO, forwarded TCP fraglist.
/// The train [100, 100, 100 + PSH] to 2001:db8:100::1 (eth0's) and to 2001:db8:300::5
/// (forwarded via eth1): one standard super-packet of 3 segments, PSH set, its checksum
/// completed as a TSO device would; [2, 1] chained.
#[test]
fn flist6_local_tcp_gets_standard_gro() {
    use etherparse::PacketBuilder;
    use netbatch_scenarios::{Gro, Lab, PEER, PEER6, US, US6, VARIANTS, ip6, router6};
    let frames = |dst: &str| -> Vec<Vec<u8>> {
        (0..3u32)
            .map(|k| {
                let b = PacketBuilder::ethernet2(PEER.0, US.0)
                    .ipv6(ip6(PEER6).octets(), ip6(dst).octets(), 64)
                    .tcp(1500, 8000, 1 + 100 * k, 1000)
                    .ack(1);
                let b = if k == 2 { b.psh() } else { b };
                let mut v = Vec::new();
                b.write(&mut v, &[k as u8; 100]).unwrap();
                v
            })
            .collect()
    };
    for (mode, dispatch) in VARIANTS {
        let mut spec = router6(Gro::Fraglist);
        for f in ["tx-tcp-segmentation", "tx-udp-segmentation", "tx-gso-list"] {
            assert!(spec.ports[1].features.set(f, true));
        }
        spec.graph.tcp_to = Some("tx-eth1");
        let mut lab = Lab::new(&spec, mode, dispatch);
        lab.feed(0, frames(US6));
        lab.run();
        let got = lab.tx(1);
        let what = format!("local TCP over IPv6 in {mode:?}/{dispatch:?}");
        assert_eq!(got.len(), 1, "{what}: one super-packet");
        let (f, ip) = (&got[0], &got[0].bytes[..]);
        assert_eq!(ip[0] >> 4, 6, "{what}: from the IPv6 header on");
        assert_eq!((f.segs, f.gso_size), (3, 100), "{what}");
        let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        assert_eq!((plen, ip.len()), (320, 360), "{what}: 300 bytes of payload");
        assert_ne!(ip[40 + 13] & PSH, 0, "{what}: PSH inherited");
        let mut pseudo = Vec::from(&ip[8..40]);
        pseudo.extend_from_slice(&320u32.to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 6]);
        assert_eq!(csum(&[&pseudo, &ip[40..]]), 0, "{what}: TCP checksum");

        lab.feed(0, frames("2001:db8:300::5"));
        lab.run();
        let got: Vec<(u16, usize)> = lab
            .tx(1)
            .iter()
            .map(|f| (f.segs, f.bytes.len() - 14 - 60))
            .collect();
        assert_eq!(
            got,
            [(2, 200), (1, 100)],
            "forwarded TCP over IPv6 in {mode:?}/{dispatch:?}"
        );
        lab.assert_conserved();
        lab.stop_and_check_pool();
    }
}
