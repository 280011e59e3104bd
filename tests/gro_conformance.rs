//! The Linux kernel's GRO selftest (`tools/testing/selftests/net/gro.c`), IPv4 cases, as
//! captures replayed through a two-port router: eth0 receives with GRO on, eth1 sends
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
//! UDP GRO (the `udpgro_fwd.sh` cases) is checked the same way: one datagram train
//! forwarded with `rx-udp-gro-forwarding` arrives as one frame on a port with
//! `tx-udp-segmentation`, with `rx-gro-list` as one frame on a port with `tx-gso-list`,
//! and on a port with no offload as the original datagrams.

use std::path::PathBuf;

use netbatch_ports::pcap::{CapturedFrame, read_frames, write_pcap};
use netbatch_runtime::config::Config;
use netbatch_runtime::replay::replay;
use serde_json::Value;

const ETH0: [u8; 6] = [0x02, 0, 0x5e, 0, 0x53, 0x01];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const SRC: [u8; 4] = [192, 0, 2, 200];
const DST: [u8; 4] = [198, 51, 100, 100];
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
        }
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
            u.extend_from_slice(&((8 + self.len) as u16).to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u
        };
        let l4_len = (l4.len() + self.len) as u16;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&SRC);
        pseudo.extend_from_slice(&DST);
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
        ip.extend_from_slice(&DST);
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

/// The router: eth0 receives with `gro` (its `gro` key), eth1 sends with `tx`.
fn config(v: &Variant, gro: &str, tx: &[&str]) -> Config {
    let (mode, dispatch) = (v.mode, v.dispatch);
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
addresses = ["192.0.2.1/24"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
mtu = {MTU}
features = [{tx}]
addresses = ["198.51.100.1/24"]
"#
    );
    Config::parse(&text, std::path::Path::new("."), "gro.toml")
        .unwrap_or_else(|e| panic!("config: {e}\n{text}"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("netbatch-gro-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
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
    let input = tmp(&format!("{case}.pcap"));
    let output = tmp(&format!("{case}.pcapng"));
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
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    Outcome { frames: out, stats }
}

/// Payload bytes of each TCP frame sent, up to the FIN (not counted, as in the selftest).
fn tcp_lengths(case: &str, frames: &[Vec<u8>]) -> Vec<usize> {
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
        if case != "tcp_csum" {
            assert_eq!(csum(&[&pseudo, tcp]), 0, "{case}: TCP checksum");
        }
        out.push(total - ihl - doff);
    }
    out
}

/// Replays `cap` (a FIN is appended) in every mode and checks the length list.
fn check(case: &str, mut cap: Capture, want: &[usize]) -> Value {
    let last = cap.last().map_or(0, |(t, _)| *t);
    let fin_seq = cap
        .iter()
        .filter(|(_, s)| s.flags & (SYN | RST) == 0)
        .map(|(_, s)| s.seq - 100 + s.len as u32)
        .max()
        .unwrap_or(0);
    cap.push((last, Seg::tcp(fin_seq, 0).flags(FIN)));
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

case!(ip_ecn, second_changed(|s| s.tos = 0x01), [100, 100]);
case!(ip_tos, second_changed(|s| s.tos = 0x10), [100, 100]);
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

#[test]
fn capacity() {
    // Eight flows: every first segment, then every second segment (PSH).
    let flows = 8u16;
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
        let o = run(
            "capacity",
            &c,
            &config(&v, "standard", &["tx-tcp-segmentation"]),
        );
        let mut per_flow: Vec<(u16, usize)> = o
            .frames
            .iter()
            .map(|f| {
                let sport = u16::from_be_bytes([f[34], f[35]]);
                (sport, tcp_lengths("capacity", std::slice::from_ref(f))[0])
            })
            .collect();
        per_flow.sort_unstable();
        let want: Vec<(u16, usize)> = (0..flows).map(|i| (1500 + i, 400)).collect();
        assert_eq!(per_flow, want, "capacity in {v:?}");
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
