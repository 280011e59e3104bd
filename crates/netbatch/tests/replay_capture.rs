//! `netbatch replay` on captures as tcpdump and Wireshark write them, built here byte by
//! byte from the formats' specifications (pcap: draft-ietf-opsawg-pcap and libpcap's
//! pcap-savefile(5); pcapng: draft-ietf-opsawg-pcapng): truncated records (`tcpdump -s`),
//! frames with their FCS (the pcap link type's FCS bits, pcapng's `if_fcslen`), several
//! pcapng sections and interfaces, corrupt records named by index and offset, and a large
//! capture replayed in bounded memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn netbatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netbatch"))
}

/// A fresh directory for one test, removed when the test ends, passed or failed (the
/// large capture's is 450 MB).
struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

fn scratch(tag: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("netbatch-cap-{tag}-"))
            .tempdir()
            .unwrap(),
    )
}

/// Two ports; eth1's upstream 198.51.100.254 is a static neighbour, so forwarding needs
/// no ARP and the output depends on the input frames alone.
const ROUTER: &str = r#"
[pool]
buffers = 2048
cache_size = 64

[[neighbour.static]]
ip = "198.51.100.254"
mac = "02:00:5e:00:53:fe"
dev = "eth1"

[[port]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["192.0.2.1/24"]

[[port]]
name = "eth1"
mac = "02:00:00:00:01:01"
addresses = ["198.51.100.1/24"]

[[route]]
prefix = "default"
via = "198.51.100.254"
"#;

fn router_config(dir: &Path) -> PathBuf {
    let p = dir.join("router.toml");
    std::fs::write(&p, ROUTER).unwrap();
    p
}

/// An Ethernet/IPv4/UDP frame from 192.0.2.10 to 203.0.113.`host` (routed out of eth1),
/// addressed to eth0's MAC, with `payload` bytes of `fill`.
fn udp_frame(host: u8, payload: usize, fill: u8) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x0a], [2, 0, 0, 0, 0, 1])
        .ipv4([192, 0, 2, 10], [203, 0, 113, host], 64)
        .udp(1000, 9);
    let mut v = Vec::new();
    b.write(&mut v, &vec![fill; payload]).unwrap();
    v
}

/// The Ethernet FCS of `frame` (CRC-32 of IEEE 802.3, reflected, sent least significant
/// byte first), as a NIC that keeps it appends it.
fn fcs(frame: &[u8]) -> [u8; 4] {
    let mut crc = !0u32;
    for &b in frame {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    (!crc).to_le_bytes()
}

#[derive(Clone, Copy)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn u16(self, v: u16) -> [u8; 2] {
        match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        }
    }
    fn u32(self, v: u32) -> [u8; 4] {
        match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        }
    }
}

/// A classic pcap file as bytes: the 24-byte file header, then 16-byte record headers
/// each followed by the captured bytes.
struct Pcap {
    order: Order,
    nano: bool,
    buf: Vec<u8>,
}

impl Pcap {
    fn new(order: Order, nano: bool, linktype: u32) -> Self {
        Self::with_snaplen(order, nano, linktype, 262_144)
    }

    /// A header declaring `snaplen`, as `tcpdump -s SNAPLEN` writes it.
    fn with_snaplen(order: Order, nano: bool, linktype: u32, snaplen: u32) -> Self {
        let mut buf = Vec::new();
        let magic = if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        buf.extend(order.u32(magic));
        buf.extend(order.u16(2));
        buf.extend(order.u16(4));
        buf.extend([0; 8]); // reserved (thiszone, sigfigs)
        buf.extend(order.u32(snaplen));
        buf.extend(order.u32(linktype));
        Self { order, nano, buf }
    }

    /// A record at `ts_ns` whose header says `caplen` and `orig_len`, followed by `data`
    /// (normally `caplen` bytes).
    fn raw(&mut self, ts_ns: u64, caplen: u32, orig_len: u32, data: &[u8]) -> &mut Self {
        let (sec, ns) = (ts_ns / 1_000_000_000, ts_ns % 1_000_000_000);
        let frac = if self.nano { ns } else { ns / 1000 };
        self.buf.extend(self.order.u32(sec as u32));
        self.buf.extend(self.order.u32(frac as u32));
        self.buf.extend(self.order.u32(caplen));
        self.buf.extend(self.order.u32(orig_len));
        self.buf.extend_from_slice(data);
        self
    }

    fn record(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> &mut Self {
        self.raw(ts_ns, data.len() as u32, orig_len, data)
    }

    fn write(&self, path: &Path) {
        std::fs::write(path, &self.buf).unwrap();
    }
}

/// A pcapng file as bytes, block by block.
struct PcapNg {
    order: Order,
    buf: Vec<u8>,
}

/// Options as pcapng encodes them: code, length, value padded to 32 bits, then
/// `opt_endofopt`.
fn options(order: Order, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    if opts.is_empty() {
        return v;
    }
    for (code, val) in opts {
        v.extend(order.u16(*code));
        v.extend(order.u16(val.len() as u16));
        v.extend(val);
        v.resize(v.len().next_multiple_of(4), 0);
    }
    v.extend([0; 4]);
    v
}

impl PcapNg {
    fn new() -> Self {
        Self {
            order: Order::Little,
            buf: Vec::new(),
        }
    }

    fn block(&mut self, ty: u32, body: &[u8]) -> &mut Self {
        let mut body = body.to_vec();
        body.resize(body.len().next_multiple_of(4), 0);
        let total = 12 + body.len() as u32;
        self.buf.extend(self.order.u32(ty));
        self.buf.extend(self.order.u32(total));
        self.buf.extend(body);
        self.buf.extend(self.order.u32(total));
        self
    }

    /// A section header block: what follows is in `order`, with no interfaces yet.
    fn section(&mut self, order: Order) -> &mut Self {
        self.order = order;
        let mut body = Vec::new();
        body.extend(order.u32(0x1a2b_3c4d));
        body.extend(order.u16(1));
        body.extend(order.u16(0));
        body.extend([0xff; 8]); // section length: not specified
        self.block(0x0a0d_0d0a, &body)
    }

    fn interface(&mut self, linktype: u16, snaplen: u32, opts: &[(u16, Vec<u8>)]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.order.u16(linktype));
        body.extend([0, 0]);
        body.extend(self.order.u32(snaplen));
        body.extend(options(self.order, opts));
        self.block(1, &body)
    }

    /// An enhanced packet block; `ts` in the interface's `if_tsresol` units.
    fn epb(&mut self, iface: u32, ts: u64, data: &[u8], orig_len: u32) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.order.u32(iface));
        body.extend(self.order.u32((ts >> 32) as u32));
        body.extend(self.order.u32(ts as u32));
        body.extend(self.order.u32(data.len() as u32));
        body.extend(self.order.u32(orig_len));
        body.extend(data);
        self.block(6, &body)
    }

    /// A simple packet block (interface 0, no timestamp).
    fn spb(&mut self, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.order.u32(data.len() as u32));
        body.extend(data);
        self.block(3, &body)
    }

    fn write(&self, path: &Path) {
        std::fs::write(path, &self.buf).unwrap();
    }
}

/// What one `netbatch replay` run gave.
struct Run {
    out: Output,
    capture: PathBuf,
    stats: Option<serde_json::Value>,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// The stats of a run that must have succeeded.
    fn stats(&self) -> &serde_json::Value {
        assert!(
            self.out.status.success(),
            "replay failed: {}",
            self.stderr()
        );
        self.stats.as_ref().expect("stats written")
    }
}

/// Runs `netbatch replay` of `input` through `config`, writing `<tag>.pcapng` and
/// `<tag>.json` beside the input.
fn replay(config: &Path, input: &Path, tag: &str) -> Run {
    let dir = input.parent().unwrap();
    let (capture, stats) = (
        dir.join(format!("{tag}.pcapng")),
        dir.join(format!("{tag}.json")),
    );
    let out = netbatch()
        .args(["replay", "--config"])
        .arg(config)
        .arg("--in")
        .arg(input)
        .arg("--out")
        .arg(&capture)
        .arg("--stats-json")
        .arg(&stats)
        .output()
        .expect("run netbatch");
    let stats = std::fs::read_to_string(&stats)
        .ok()
        .map(|s| serde_json::from_str(&s).unwrap());
    Run {
        out,
        capture,
        stats,
    }
}

fn n(s: &serde_json::Value, k: &str) -> u64 {
    s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"))
}

fn conserved(s: &serde_json::Value) {
    assert_eq!(
        n(s, "rx_packets") + n(s, "originated_packets"),
        n(s, "tx_packets")
            + n(s, "delivered_packets")
            + n(s, "dropped_packets")
            + n(s, "held_packets"),
        "conservation: {s}"
    );
}

/// The counters two runs of the same frames must agree on.
fn fates(s: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "rx": s["rx_packets"], "tx": s["tx_packets"], "delivered": s["delivered_packets"],
        "dropped": s["dropped_packets"], "held": s["held_packets"], "drops": s["drops"],
        "records": s["capture_records"], "truncated": s["capture_truncated"],
    })
}

/// A record whose original length exceeds what was captured (what `tcpdump -s 96`
/// writes for every longer frame; the pcap format allows it, and tcpdump and Wireshark
/// read it) is received as captured and counted in `capture_truncated`. Cut short, the
/// datagram is shorter than its IPv4 header says, so the router drops it with a reason;
/// the frames around it are forwarded, and every frame is accounted for.
#[test]
fn truncated_records_are_received_as_captured_and_counted() {
    let dir = scratch("trunc");
    let cfg = router_config(&dir);
    let whole = udp_frame(1, 1000, 0x11);
    let mut cap = Pcap::with_snaplen(Order::Little, false, 1, 96);
    cap.record(1_000_000_000, &udp_frame(2, 20, 0x22), 62)
        .record(1_000_001_000, &whole[..96], whole.len() as u32)
        .record(1_000_002_000, &udp_frame(3, 20, 0x33), 62);
    let input = dir.join("snap96.pcap");
    cap.write(&input);
    let run = replay(&cfg, &input, "out");
    let s = run.stats();
    assert_eq!(n(s, "capture_records"), 3, "{s}");
    assert_eq!(n(s, "capture_truncated"), 1, "{s}");
    assert_eq!(n(s, "rx_packets"), 3, "{s}");
    assert_eq!(n(s, "tx_packets"), 2, "the two whole datagrams: {s}");
    assert_eq!(n(s, "dropped_packets"), 1, "the truncated one: {s}");
    conserved(s);
    let ports = s["ports"].as_array().unwrap();
    assert_eq!(
        ports[0]["rx_bytes"],
        62 + 96 + 62,
        "received as captured: {s}"
    );
}

/// A pcap whose link-type field carries the FCS bits (P set, FCS length 2 sixteen-bit
/// words: `0x24000001`, as libpcap's `LT_FCS_DATALINK_EXT(2)` marks Ethernet with its
/// 4-byte FCS) is Ethernet with 4 bytes to strip from every frame: replayed, it gives the
/// very output and counters of the same frames captured without FCS. The FCS capture is
/// big-endian with nanosecond timestamps, the plain one little-endian with microseconds,
/// so both byte orders and both magics are read to the same frames.
#[test]
fn the_fcs_of_a_pcap_link_type_with_fcs_bits_is_stripped() {
    let dir = scratch("fcs");
    let cfg = router_config(&dir);
    let frames: Vec<Vec<u8>> = (0..6u8)
        .map(|i| udp_frame(i + 1, 18 + usize::from(i) * 50, i))
        .collect();
    let mut plain = Pcap::new(Order::Little, false, 1);
    let mut with_fcs = Pcap::new(Order::Big, true, 0x2400_0001);
    for (i, f) in frames.iter().enumerate() {
        let ts = 2_000_000_000 + i as u64 * 7_000;
        plain.record(ts, f, f.len() as u32);
        let mut g = f.clone();
        g.extend(fcs(f));
        with_fcs.record(ts, &g, g.len() as u32);
    }
    let (a, b) = (dir.join("plain.pcap"), dir.join("fcs.pcap"));
    plain.write(&a);
    with_fcs.write(&b);
    let (ra, rb) = (replay(&cfg, &a, "a"), replay(&cfg, &b, "b"));
    let (sa, sb) = (ra.stats(), rb.stats());
    assert_eq!(n(sa, "tx_packets"), 6, "every frame forwarded: {sa}");
    assert_eq!(fates(sa), fates(sb));
    assert_eq!(sa["ports"], sb["ports"], "the same bytes received and sent");
    assert_eq!(
        std::fs::read(&ra.capture).unwrap(),
        std::fs::read(&rb.capture).unwrap(),
        "the same output capture"
    );
}

/// A pcapng of two sections in opposite byte orders: the first's interface keeps a
/// 4-byte FCS (`if_fcslen` = 4) and counts nanoseconds (`if_tsresol` = 9); the second
/// declares a non-Ethernet interface that carries no packet, an Ethernet one with FCS in
/// the default microseconds, and ends with a simple packet block (interface 0, no
/// timestamp: it takes the previous frame's). Read, it gives the frames a plain pcap of
/// the FCS-free frames gives: the same output and counters.
#[test]
fn pcapng_sections_interfaces_and_fcslen_are_honoured() {
    let dir = scratch("ng");
    let cfg = router_config(&dir);
    let f: Vec<Vec<u8>> = (0..4u8)
        .map(|i| udp_frame(10 + i, 30 + usize::from(i), i))
        .collect();
    let with = |v: &[u8]| {
        let mut g = v.to_vec();
        g.extend(fcs(v));
        g
    };
    let t0 = 3_000_000_000u64;
    let mut ng = PcapNg::new();
    ng.section(Order::Little)
        .interface(1, 0, &[(9, vec![9]), (13, vec![4])])
        .epb(0, t0, &with(&f[0]), f[0].len() as u32 + 4)
        .epb(0, t0 + 1_500, &with(&f[1]), f[1].len() as u32 + 4)
        .section(Order::Big)
        .interface(1, 0, &[])
        .interface(113, 0, &[])
        .interface(1, 0, &[(13, vec![4])])
        .epb(2, (t0 + 9_000) / 1000, &with(&f[2]), f[2].len() as u32 + 4)
        .spb(&f[3]);
    let mut plain = Pcap::new(Order::Little, true, 1);
    for (ts, fr) in [
        (t0, &f[0]),
        (t0 + 1_500, &f[1]),
        (t0 + 9_000, &f[2]),
        (t0 + 9_000, &f[3]),
    ] {
        plain.record(ts, fr, fr.len() as u32);
    }
    let (a, b) = (dir.join("plain.pcap"), dir.join("in.pcapng"));
    plain.write(&a);
    ng.write(&b);
    let (ra, rb) = (replay(&cfg, &a, "a"), replay(&cfg, &b, "b"));
    let (sa, sb) = (ra.stats(), rb.stats());
    assert_eq!(n(sa, "tx_packets"), 4, "{sa}");
    assert_eq!(fates(sa), fates(sb));
    assert_eq!(sa["ports"], sb["ports"]);
    assert_eq!(
        std::fs::read(&ra.capture).unwrap(),
        std::fs::read(&rb.capture).unwrap()
    );
}

/// Frames forwarded from a capture's first two records (out of eth1).
fn forwarded(capture: &Path) -> usize {
    netbatch_ports::pcap::read_frames(capture).unwrap().len()
}

/// A corrupt record is reported with its number (1-based, as tcpdump and Wireshark number
/// frames) and the byte offset of its header in the file, as tshark reports a damaged
/// capture after the packets before it: those are replayed and written, and the command
/// fails. Three cases: a captured length above the 262144-byte maximum (libpcap's and
/// Wireshark's), a file cut inside a record (tcpdump killed), and a pcapng block whose
/// trailing length disagrees with its leading one.
#[test]
fn a_corrupt_record_is_named_by_its_index_and_offset() {
    let dir = scratch("corrupt");
    let cfg = router_config(&dir);
    let (f1, f2) = (udp_frame(1, 40, 1), udp_frame(2, 50, 2));
    let third = 24 + 16 + f1.len() + 16 + f2.len();

    let mut huge = Pcap::new(Order::Little, false, 1);
    huge.record(1_000, &f1, f1.len() as u32)
        .record(2_000, &f2, f2.len() as u32)
        .raw(3_000, 300_000, 300_000, &[0; 64]);
    let input = dir.join("huge.pcap");
    huge.write(&input);
    let run = replay(&cfg, &input, "huge");
    let err = run.stderr();
    assert!(!run.out.status.success(), "{err}");
    assert!(
        err.contains(&format!("record 3 at offset {third} ")),
        "names the record and offset: {err}"
    );
    assert!(err.contains("300000") && err.contains("262144"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        forwarded(&run.capture),
        2,
        "the records before it are replayed"
    );

    let mut cut = Pcap::new(Order::Little, false, 1);
    let f3 = udp_frame(3, 60, 3);
    cut.record(1_000, &f1, f1.len() as u32)
        .record(2_000, &f2, f2.len() as u32)
        .record(3_000, &f3[..20], f3.len() as u32);
    // The header says all of f3 was captured; the file holds 20 bytes of it.
    let at = third + 8;
    cut.buf[at..at + 4].copy_from_slice(&(f3.len() as u32).to_le_bytes());
    let input = dir.join("cut.pcap");
    cut.write(&input);
    let run = replay(&cfg, &input, "cut");
    let err = run.stderr();
    assert!(!run.out.status.success(), "{err}");
    assert!(
        err.contains(&format!("record 3 at offset {third} ")),
        "{err}"
    );
    assert!(
        err.contains(&format!("needs {} bytes, has 20", f3.len())),
        "says how much is missing: {err}"
    );
    assert_eq!(forwarded(&run.capture), 2);

    let mut ng = PcapNg::new();
    ng.section(Order::Little)
        .interface(1, 0, &[])
        .epb(0, 1, &f1, f1.len() as u32);
    let bad = ng.buf.len();
    ng.epb(0, 2, &f2, f2.len() as u32);
    let end = ng.buf.len();
    ng.buf[end - 4..].copy_from_slice(&7u32.to_le_bytes());
    let input = dir.join("bad.pcapng");
    ng.write(&input);
    let run = replay(&cfg, &input, "ng");
    let err = run.stderr();
    assert!(!run.out.status.success(), "{err}");
    assert!(
        err.contains(&format!("block 4 (packet 2) at offset {bad} ")),
        "{err}"
    );
    assert_eq!(forwarded(&run.capture), 1);
}

/// Peak resident memory (KiB) of `netbatch replay` of `input`, as GNU time reports it,
/// and its stats; the output is `<tag>.pcapng` beside the input.
fn peak_kib(time: &Path, cfg: &Path, input: &Path, tag: &str) -> (u64, serde_json::Value) {
    let dir = input.parent().unwrap();
    let (stats, rss) = (
        dir.join(format!("{tag}.json")),
        dir.join(format!("{tag}.rss")),
    );
    let status = Command::new(time)
        .args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg(env!("CARGO_BIN_EXE_netbatch"))
        .args(["replay", "--config"])
        .arg(cfg)
        .arg("--in")
        .arg(input)
        .arg("--out")
        .arg(dir.join(format!("{tag}.pcapng")))
        .arg("--stats-json")
        .arg(&stats)
        .status()
        .unwrap();
    assert!(status.success());
    let s = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let kib = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (kib, s)
}

/// A capture of about 300 MB replays in memory that does not grow with it: the capture is
/// read and the output written as the replay runs. Half the frames are forwarded (150 MB
/// written), half are addressed to another host's MAC and dropped; the second half of the
/// capture shares one timestamp, as a pcapng of simple packet blocks does, so the output
/// that must be ordered among itself is large too. Peak resident memory is measured by
/// GNU time (`/usr/bin/time -f %M`, from the kernel's rusage of the child).
#[test]
fn a_large_capture_replays_in_bounded_memory() {
    let time = Path::new("/usr/bin/time");
    if !netbatch_testkit::tools(&[("/usr/bin/time", "time (GNU time)")]) {
        return;
    }
    let dir = scratch("big");
    let cfg = router_config(&dir);
    let input = dir.join("big.pcap");
    let fwd = udp_frame(7, 1472, 0x5a);
    let mut other = fwd.clone();
    other[5] = 0x99; // not our MAC: dropped on receive
    let frames = 300_000_000 / (16 + fwd.len());
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
        let mut head = Pcap::new(Order::Little, true, 1);
        w.write_all(&head.buf).unwrap();
        for i in 0..frames {
            head.buf.clear();
            let ts = 1_000_000_000 + (i.min(frames / 2) / 16) as u64 * 1_000;
            let f = if i % 2 == 0 { &fwd } else { &other };
            head.record(ts, f, f.len() as u32);
            w.write_all(&head.buf).unwrap();
        }
        w.flush().unwrap();
    }
    let mut tiny = Pcap::new(Order::Little, true, 1);
    tiny.record(1_000_000_000, &fwd, fwd.len() as u32);
    let small = dir.join("small.pcap");
    tiny.write(&small);
    let (base, _) = peak_kib(time, &cfg, &small, "small");
    let (kib, s) = peak_kib(time, &cfg, &input, "big");
    let out = dir.join("big.pcapng");
    let size = std::fs::metadata(&input).unwrap().len();
    eprintln!(
        "replayed {frames} frames ({} MB) in a peak of {} MiB; one frame takes {} MiB",
        size / 1_000_000,
        kib / 1024,
        base / 1024
    );
    assert_eq!(n(&s, "capture_records"), frames as u64);
    assert_eq!(n(&s, "rx_packets"), frames as u64);
    assert_eq!(n(&s, "tx_packets"), frames.div_ceil(2) as u64, "{s}");
    conserved(&s);
    // The output, read back one frame at a time: every forwarded frame, in time order.
    let mut last = 0;
    let mut written = 0u64;
    for f in netbatch_ports::pcap::CaptureReader::open(&out).unwrap() {
        let f = f.unwrap();
        assert!(f.ts_ns >= last, "in time order");
        assert_eq!(f.bytes.len(), fwd.len());
        last = f.ts_ns;
        written += 1;
    }
    assert_eq!(written, n(&s, "tx_packets"));
    // What the configuration itself takes (buffers, the FIB) is the same for one frame;
    // beyond it, what is held for the output's ordering (at most 8 MiB) and I/O buffers.
    assert!(
        kib < base + 32 * 1024,
        "peak RSS {kib} KiB for a {size}-byte capture, {base} KiB for one frame"
    );
}

/// What `examples/router.toml` does with an IPv6 capture, read back by tshark (a second
/// dissector, which also checks every checksum). The frames are made by etherparse, from
/// host 2001:db8:0:1::2 (02:00:5e:00:53:aa) on eth0's link: a neighbour solicitation for
/// the router's address (RFC 4861 7.2.3: the router learns the host from it and
/// answers), a ping to the router, a UDP datagram routed by `::/0` to the upstream's
/// link-local address, the same with hop limit 1, one to the `unreachable` route, one to
/// the UDP echo app, one to a closed port, and one cut short (its payload length
/// overruns the frame). Each answer is the one Linux gives (RFC 4443 codes); the cut
/// one is dropped with its reason; every frame is accounted for. Needs tshark (installed
/// by `scripts/setup`); without it the test says so and passes.
#[test]
fn an_ipv6_capture_through_the_example_router_reads_back_in_tshark() {
    if !netbatch_testkit::tools(&[("tshark", "tshark")]) {
        return;
    }
    let dir = scratch("ipv6");
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/router.toml");
    let (host_mac, router_mac) = ([2, 0, 0x5e, 0, 0x53, 0xaa], [2, 0, 0x5e, 0, 0x53, 1]);
    let a = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
    let host = a("2001:db8:0:1::2");
    let udp = |dst: &str, hop: u8, port: u16, data: &[u8]| {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2(host_mac, router_mac)
            .ipv6(host, a(dst), hop)
            .udp(1000, port)
            .write(&mut v, data)
            .unwrap();
        v
    };
    let mut ns = Vec::new();
    ns.extend_from_slice(&a("2001:db8:0:1::1"));
    ns.extend_from_slice(&[1, 1]); // source link-layer address option, 8 bytes
    ns.extend_from_slice(&host_mac);
    let mut frames = Vec::new();
    let mut w = Vec::new();
    etherparse::PacketBuilder::ethernet2(host_mac, [0x33, 0x33, 0xff, 0, 0, 1])
        .ipv6(host, a("ff02::1:ff00:1"), 255)
        .icmpv6_raw(135, 0, [0; 4])
        .write(&mut w, &ns)
        .unwrap();
    frames.push(w);
    let mut w = Vec::new();
    etherparse::PacketBuilder::ethernet2(host_mac, router_mac)
        .ipv6(host, a("2001:db8:0:1::1"), 64)
        .icmpv6_echo_request(7, 1)
        .write(&mut w, b"ping")
        .unwrap();
    frames.push(w);
    frames.push(udp("2001:db8:5::9", 64, 2000, b"forward me"));
    frames.push(udp("2001:db8:5::9", 1, 2000, b"hop limit one"));
    frames.push(udp("2001:db8:dead::9", 64, 2000, b"unreachable"));
    frames.push(udp("2001:db8:0:1::1", 64, 7, b"echo me"));
    frames.push(udp("2001:db8:0:1::1", 64, 9, b"closed port"));
    let mut cut = udp("2001:db8:5::9", 64, 2000, b"cut short");
    cut.truncate(cut.len() - 3);
    frames.push(cut);

    let mut pcap = Pcap::new(Order::Little, false, 1);
    for (i, f) in frames.iter().enumerate() {
        pcap.record(1_000_000 * (i as u64 + 1), f, f.len() as u32);
    }
    let input = dir.join("in.pcap");
    pcap.write(&input);
    let run = replay(&cfg, &input, "v6");
    assert!(run.out.status.success(), "{}", run.stderr());
    let s = run.stats.as_ref().expect("stats");
    conserved(s);
    assert_eq!(n(s, "rx_packets"), frames.len() as u64, "{s}");
    assert_eq!(n(s, "dropped_packets"), 1, "only the cut frame: {s}");
    assert_eq!(s["drops"].as_object().map(|m| m.len()), Some(1), "{s}");

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&run.capture)
        .args(["-o", "udp.check_checksum:TRUE", "-T", "fields"])
        .args([
            "-e",
            "frame.interface_name",
            "-e",
            "ipv6.dst",
            "-e",
            "ipv6.hlim",
        ])
        .args([
            "-e",
            "icmpv6.type",
            "-e",
            "icmpv6.code",
            "-e",
            "udp.dstport",
        ])
        .args(["-e", "icmpv6.checksum.status", "-e", "udp.checksum.status"])
        .output()
        .expect("tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // Interface, IPv6 destination(s) (the quoted packet's after a comma), hop limit(s),
    // ICMPv6 type and code, UDP destination port (the quoted one's), checksum statuses
    // (1: good).
    let want = [
        "eth0\t2001:db8:0:1::2\t255\t136\t0\t\t1\t", // neighbour advertisement
        "eth0\t2001:db8:0:1::2\t64\t129\t0\t\t1\t",  // echo reply
        "eth1\t2001:db8:5::9\t63\t\t\t2000\t\t1",    // forwarded, hop limit 63
        "eth0\t2001:db8:0:1::2,2001:db8:5::9\t64,1\t3\t0\t2000\t1\t1", // time exceeded
        "eth0\t2001:db8:0:1::2,2001:db8:dead::9\t64,64\t1\t0\t2000\t1\t1", // no route
        "eth0\t2001:db8:0:1::2\t64\t\t\t1000\t\t1",  // the echo app's answer
        "eth0\t2001:db8:0:1::2,2001:db8:0:1::1\t64,64\t1\t4\t9\t1\t1", // port unreachable
    ];
    assert_eq!(got, want, "tshark's reading of {}", run.capture.display());
}
