//! `show conntrack [FILTER...]` and `conntrack flush [FILTER...]`: the workers'
//! connection tables, listed as `conntrack -L` lists the kernel's (one line per
//! connection: protocol, seconds left, TCP state, the original tuple with its
//! counters, `[UNREPLIED]` until a reply, the reply tuple, `[ASSURED]`, the mark, and the
//! worker whose table holds it), filtered as `conntrack -L` filters: `-p|proto P`,
//! `-s|src A`, `-d|dst A` (the original direction's addresses), `--sport|sport N`,
//! `--dport|dport N`, `--state|state S` (a TCP state), `-m|mark V[/M]`.

use core::net::IpAddr;
use std::fmt::Write as _;

use netbatch_stack::ct::{Entry, TcpState, status, tuple};
use netbatch_stack::dissect::L4;
use serde_json::{Value, json};

use super::Reply;

/// What `show conntrack` and `conntrack flush` select.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    proto: Option<u8>,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    state: Option<TcpState>,
    mark: Option<(u32, u32)>,
}

fn num(t: &str) -> Option<u32> {
    match t.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

impl Filter {
    /// The filter of `words` (`KEY VALUE` pairs), or what is wrong with them.
    pub fn parse(words: &[&str]) -> Result<Self, String> {
        let mut f = Self::default();
        let mut it = words.iter();
        while let Some(&k) = it.next() {
            let Some(&v) = it.next() else {
                return Err(format!("'{k}' has no value"));
            };
            let bad = |what: &str| format!("'{v}' is not {what} (for {k})");
            match k {
                "-p" | "--proto" | "proto" => {
                    f.proto = Some(match v {
                        "tcp" => 6,
                        "udp" => 17,
                        "icmp" => 1,
                        "icmpv6" => 58,
                        "sctp" => 132,
                        "udplite" => 136,
                        n => n.parse().map_err(|_| bad("a protocol"))?,
                    });
                }
                "-s" | "--src" | "src" => f.src = Some(v.parse().map_err(|_| bad("an address"))?),
                "-d" | "--dst" | "dst" => f.dst = Some(v.parse().map_err(|_| bad("an address"))?),
                "--sport" | "sport" => f.sport = Some(v.parse().map_err(|_| bad("a port"))?),
                "--dport" | "dport" => f.dport = Some(v.parse().map_err(|_| bad("a port"))?),
                "--state" | "state" => {
                    f.state = Some(TcpState::parse(v).ok_or_else(|| bad("a TCP state"))?);
                }
                "-m" | "--mark" | "mark" => {
                    let (a, m) = v.split_once('/').unwrap_or((v, "0xffffffff"));
                    f.mark = Some((
                        num(a).ok_or_else(|| bad("a mark"))?,
                        num(m).ok_or_else(|| bad("a mark"))?,
                    ));
                }
                other => {
                    return Err(format!(
                        "unknown filter '{other}' (proto, src, dst, sport, dport, state, mark)"
                    ));
                }
            }
        }
        Ok(f)
    }

    /// Whether entry `e` is selected.
    pub fn matches(&self, e: &Entry) -> bool {
        let o = &e.tuple[0];
        let ports = L4::of(o.proto).has_ports();
        self.proto.is_none_or(|p| p == o.proto)
            && self.src.is_none_or(|a| a == o.src_ip())
            && self.dst.is_none_or(|a| a == o.dst_ip())
            && self.sport.is_none_or(|p| ports && p == o.sport)
            && self.dport.is_none_or(|p| ports && p == o.dport)
            && self
                .state
                .is_none_or(|s| L4::of(o.proto) == L4::Tcp && e.tcp.state == s)
            && self.mark.is_none_or(|(v, m)| e.mark & m == v & m)
    }
}

/// One entry as `conntrack -L` prints it, with its worker.
pub fn line(e: &Entry, now: u64, worker: usize) -> String {
    let o = &e.tuple[0];
    let left = e.expires.saturating_sub(now) / 1_000_000_000;
    let mut s = format!("{:<8} {:<3} {left} ", tuple::proto_name(o.proto), o.proto);
    if L4::of(o.proto) == L4::Tcp {
        let _ = write!(s, "{} ", e.tcp.state.name());
    }
    let _ = write!(s, "{} packets={} bytes={} ", o, e.packets[0], e.bytes[0]);
    if !e.has(status::SEEN_REPLY) {
        s += "[UNREPLIED] ";
    }
    let _ = write!(
        s,
        "{} packets={} bytes={} ",
        e.tuple[1], e.packets[1], e.bytes[1]
    );
    if e.has(status::ASSURED) {
        s += "[ASSURED] ";
    }
    let _ = write!(s, "mark={} worker={worker}", e.mark);
    s
}

/// One entry as data.
pub fn data(e: &Entry, now: u64, worker: usize) -> Value {
    let dir = |d: usize| {
        let t = &e.tuple[d];
        json!({
            "src": t.src_ip().to_string(), "dst": t.dst_ip().to_string(),
            "sport": t.sport, "dport": t.dport,
            "packets": e.packets[d], "bytes": e.bytes[d],
        })
    };
    let o = &e.tuple[0];
    json!({
        "proto": tuple::proto_name(o.proto),
        "timeout": e.expires.saturating_sub(now) / 1_000_000_000,
        "state": (L4::of(o.proto) == L4::Tcp).then(|| e.tcp.state.name()),
        "original": dir(0),
        "reply": dir(1),
        "seen_reply": e.has(status::SEEN_REPLY),
        "assured": e.has(status::ASSURED),
        "snat": e.has(status::SRC_NAT),
        "dnat": e.has(status::DST_NAT),
        "mark": e.mark,
        "worker": worker,
    })
}

/// `show conntrack`'s reply from each worker's lines and data.
pub fn show(per: Vec<Vec<(String, Value)>>) -> Reply {
    let mut text = String::new();
    let mut rows = Vec::new();
    for (l, d) in per.into_iter().flatten() {
        text += &l;
        text.push('\n');
        rows.push(d);
    }
    let _ = writeln!(
        text,
        "conntrack: {} flow entries have been shown.",
        rows.len()
    );
    Reply::ok(text, json!({ "entries": rows }))
}

/// A worker's tracking counters for the counters document (`conntrack` of a worker):
/// gauges end in `_len` (the metrics' naming rule).
pub fn counters(ct: &netbatch_stack::ct::ConnTrack) -> Value {
    let t = &ct.table.stats;
    let s = &ct.stats;
    let mut m = serde_json::Map::new();
    for (k, v) in [
        ("entries_len", ct.table.len() as u64),
        ("max_len", ct.table.max() as u64),
        ("unconfirmed_len", ct.table.unconfirmed() as u64),
        ("inserted", t.inserted),
        ("early_drop", t.early_drop),
        ("refused_full", t.refused_full),
        ("expired", t.expired),
        ("clash", t.clash),
        ("unconfirmed_discarded", t.unconfirmed_discarded),
        ("deleted", t.deleted),
        ("tcp_ignored", s.tcp_ignored),
        ("tcp_reopened", s.tcp_reopened),
        ("run_hits", s.run_hits),
    ] {
        m.insert(k.into(), json!(v));
    }
    for (name, n) in netbatch_stack::ct::state_bit::NAMES.iter().zip(s.by_state) {
        m.insert(format!("state_{name}"), json!(n));
    }
    for (name, n) in netbatch_stack::ct::Invalid::NAMES.iter().zip(s.invalid) {
        m.insert(format!("invalid_{name}"), json!(n));
    }
    // NAT's: translations made, ports kept or searched, refusals by reason.
    for (name, n) in ct.nat.named() {
        m.insert(format!("nat_{name}"), json!(n));
    }
    // Flow offload's (a FORWARD rule's `offload`).
    for (name, n) in ct.offload.stats.named() {
        m.insert(name.into(), json!(n));
    }
    // Endpoint-independent UDP mappings (RFC 4787), where configured.
    if let Some(maps) = &ct.mappings {
        let st = maps.stats;
        for (k, v) in [
            ("nat_mappings_len", maps.len() as u64),
            ("nat_mappings_created", st.created),
            ("nat_mappings_reused", st.reused),
            ("nat_mappings_filtered_in", st.filtered_in),
            ("nat_mappings_expired", st.expired),
        ] {
            m.insert(k.into(), json!(v));
        }
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netbatch_stack::ct::Tuple;

    #[test]
    fn filters_and_lines_as_conntrack_prints() {
        let t = Tuple::v4(
            "192.0.2.1".parse().unwrap(),
            "198.51.100.1".parse().unwrap(),
            17,
            40000,
            53,
        );
        let e = Entry {
            tuple: [t, t.invert()],
            status: status::CONFIRMED,
            expires: 30_000_000_000,
            packets: [1, 0],
            bytes: [60, 0],
            ..Entry::default()
        };
        assert_eq!(
            line(&e, 0, 1),
            "udp      17  30 src=192.0.2.1 dst=198.51.100.1 sport=40000 dport=53 packets=1 bytes=60 [UNREPLIED] src=198.51.100.1 dst=192.0.2.1 sport=53 dport=40000 packets=0 bytes=0 mark=0 worker=1"
        );
        let f = |w: &[&str]| Filter::parse(w).unwrap().matches(&e);
        assert!(f(&["-p", "udp", "--dport", "53"]));
        assert!(f(&["src", "192.0.2.1"]));
        assert!(
            !f(&["dst", "192.0.2.1"]),
            "the original direction's destination"
        );
        assert!(
            !f(&["state", "ESTABLISHED"]),
            "a TCP state never selects UDP"
        );
        assert!(!f(&["mark", "1"]));
        assert!(Filter::parse(&["sport"]).unwrap_err().contains("no value"));
        assert!(
            Filter::parse(&["colour", "red"])
                .unwrap_err()
                .contains("unknown filter")
        );
    }
}
