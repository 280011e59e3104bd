//! `gro`: the GRO engine as the first stage of the receive graph.
//!
//! Per packet, the port's GRO features and the packet's destination decide its kind (the
//! kernel's rules, `udp_gro_receive` and `tcp4_check_fraglist_gro`):
//! - TCP: fraglist when the port has `rx-gro-list` and there is no local socket, else
//!   standard when it has `rx-gro`. netbatch terminates no TCP and keeps no TCP socket
//!   table (local TCP goes to a host port, whose kernel may have the socket), so "no
//!   local socket" is "the destination is not one of our addresses": forwarded TCP gets
//!   fraglist, TCP to us standard GRO (the kernel's `__inet_lookup_established` finds no
//!   socket for forwarded traffic either; it differs only for TCP to one of our
//!   addresses with no connection, which netbatch still gives standard GRO);
//! - UDP: fraglist when the port has `rx-gro-list` and no local socket asked for GRO
//!   (`UDP_GRO`); else standard for a socket that asked, or, with no local socket, when
//!   the port has `rx-udp-gro-forwarding`; else none. The socket is looked up in the
//!   socket table for our own addresses only: a forwarded datagram has no local socket
//!   even when a socket bound to the wildcard address has its port (the kernel's lookup,
//!   made before routing, would find that socket). And it is always looked up (the
//!   kernel looks up only once some socket enabled `UDP_GRO` or a tunnel; until then a
//!   plain local socket's traffic gets forwarding GRO and is split again before the
//!   socket, which receives the same datagrams).
//!
//! The same for IPv6 (`tcp6_check_fraglist_gro`, `udp6_gro_receive`): "one of our
//! addresses" is `Host::is_local6` (a link-local destination is ours only on the
//! interface the frame's tags name, as `eth-input` will find it), the socket lookup the
//! IPv6 table's.
//!
//! The decision is cached per list by (destination, port, protocol, tags). Packets that
//! are not TCP/UDP over IPv4 or IPv6 pass straight on; nothing is ever dropped here. Everything held is
//! handed on at the end of each poll: in list mode the list is the poll, so the stage
//! completes its flows at the end of the list and they go on with the rest of it; in
//! per-packet mode the worker flushes the stage after the poll.

use netbatch_engine::{Cx, Out, Pkt, PktList, Stage};

use super::{FlowKey, GroTable, Kind, Parsed, parse};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect::{self, Dissected, L4};
use crate::host::Host;
use crate::iface::Tags;
use crate::meta::{Field, Fields, flag};
use crate::offload::Features;

netbatch_engine::arcs! {
    /// Arc to L2 input.
    pub L2 = "l2";
}

/// The GRO stage.
#[derive(Debug, Default)]
pub struct Gro {
    table: GroTable,
    done: Vec<Pkt>,
}

impl Gro {
    /// A stage with an empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The flow table (for tests and reports).
    pub fn table(&self) -> &GroTable {
        &self.table
    }
}

/// Where a flow goes, as the GRO kind decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    /// An IPv4 destination address.
    V4(u32),
    /// An IPv6 destination address, and the interface the frame arrived on (what a
    /// link-local address is scoped to; `u16::MAX` when the port has none for its tags).
    V6(u128, u16),
}

impl Dest {
    /// The destination of flow `k`, received on a port with `port`'s interfaces.
    fn of(k: &FlowKey, port: Option<&crate::iface::Port>) -> Self {
        if !k.v6 {
            return Self::V4(k.dst4());
        }
        // The tag stack as `eth-input` reads it (a priority tag, VID 0, is untagged).
        let tags = match k.vids() {
            (Some(s), Some(c)) => Tags::QinQ(s, c),
            (Some(0) | None, _) => Tags::None,
            (Some(v), None) => Tags::Dot1q(v),
        };
        let iface = port.and_then(|p| p.iface_for(tags)).unwrap_or(u16::MAX);
        Self::V6(k.dst, iface)
    }
}

/// The GRO kind for a flow to `dst:dport` over `proto` arriving on a port with `f` (see
/// the module's rules).
fn decide(host: &Host, f: &Features, proto: u8, dst: Dest, dport: u16) -> Option<Kind> {
    let local = match dst {
        Dest::V4(a) => host.is_local(a.into()),
        Dest::V6(a, iface) => host.is_local6(a.into(), iface),
    };
    if L4::of(proto) == L4::Tcp {
        return if f.rx_gro_list && !local {
            Some(Kind::Fraglist)
        } else if f.rx_gro {
            Some(Kind::Standard)
        } else {
            None
        };
    }
    let sock = if local {
        let t = host.sockets.snapshot();
        match dst {
            Dest::V4(a) => t.lookup(a, dport),
            Dest::V6(a, _) => t.lookup6(a, dport),
        }
        .map(|id| t.get(id).is_some_and(|s| s.gro()))
    } else {
        None
    };
    let sock_gro = sock == Some(true);
    if f.rx_gro_list && !sock_gro {
        Some(Kind::Fraglist)
    } else if sock_gro || (sock.is_none() && f.rx_udp_gro_forwarding) {
        Some(Kind::Standard)
    } else {
        None
    }
}

/// `gro`, in front of the classifier or L2 input when some port does GRO.
pub const DECL: Decl = Decl {
    arcs: &[("l2", To::Via(node::CLS_INGRESS, "l2"))],
    decode: Decode::Link,
    reads: Fields::of(&[Field::InPort, Field::Csum, Field::L3, Field::L4]),
    writes: Fields::of(&[Field::L3, Field::L4, Field::Csum, Field::Gso]),
    present: |o| o.gro,
    ..Decl::new(node::GRO, |_| Box::new(Gro::new()))
};

impl Stage<Host> for Gro {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.table.stats;
        vec![
            ("merged", s.merged),
            ("merged_fast", s.merged_fast),
            ("coalesced", s.coalesced),
            ("singles", s.singles),
            ("evicted", s.evicted),
            ("passed", s.passed),
            ("peak_flows", s.peak_flows),
        ]
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let pool = cx.pool;
        let mut cur_port = u16::MAX;
        let mut feats = Features::default();
        // (port, proto, destination, dport, tags) → kind, for the rest of the list.
        type Id = (u16, u8, u128, u16, u32, bool);
        let mut last: Option<(Id, Option<Kind>)> = None;
        let whole_poll = list.len() > 1;
        // The first stage to read the frames: ask for every frame's metadata and first
        // line now, so that the misses overlap instead of stalling one by one.
        for p in list.iter() {
            pool.prefetch(p);
        }
        let mut rest = list.drain(..);
        let mut next = rest.next();
        while let Some(p) = next.take() {
            // The common case, the next full-size segments of the last train (its port
            // does GRO), takes a shortcut (IPv4's first, then IPv6's), a run at a time.
            let fast = match self
                .table
                .fast_run::<false>(pool, p, &mut rest, &mut self.done)
            {
                Err(p) => self.table.fast_run6(pool, p, &mut rest, &mut self.done),
                ok => ok,
            };
            let mut p = match fast {
                Ok(n) => {
                    if !self.done.is_empty() {
                        for q in self.done.drain(..) {
                            out.push(L2, q);
                        }
                    }
                    next = n;
                    continue;
                }
                Err(p) => p,
            };
            next = rest.next();
            let v = pool.get(&p);
            let port = v.meta.in_port;
            if port != cur_port {
                cur_port = port;
                feats = host
                    .ports
                    .get(usize::from(port))
                    .map_or_else(Features::default, |i| i.features);
            }
            if !feats.any_rx_gro() {
                out.push(L2, p);
                continue;
            }
            let csum_ok = v.meta.flags & flag::L4_CSUM_OK != 0;
            let mut v = pool.get_mut(&mut p);
            dissect::frame(&mut v);
            match parse(&Dissected::load(v.meta), v.data(), port, csum_ok) {
                Parsed::Other => out.push(L2, p),
                Parsed::Unmergeable(key) => {
                    self.table.flush_flow(pool, &key, &mut self.done);
                    self.done.push(p);
                }
                Parsed::Seg(s) => {
                    let k = s.key;
                    let id = (port, k.proto, k.dst, k.dport(), k.tags, k.v6);
                    let kind = match last {
                        Some((l, kind)) if l == id => kind,
                        _ => {
                            let dst = Dest::of(&k, host.ports.get(usize::from(port)));
                            let kind = decide(host, &feats, k.proto, dst, k.dport());
                            last = Some((id, kind));
                            kind
                        }
                    };
                    match kind {
                        Some(kind) => self.table.offer(pool, p, s, kind, &mut self.done),
                        None => {
                            self.table.flush_flow(pool, &k, &mut self.done);
                            self.table.stats.passed += 1;
                            self.done.push(p);
                        }
                    }
                }
            }
            for q in self.done.drain(..) {
                out.push(L2, q);
            }
        }
        if whole_poll {
            self.flush(host, cx, out);
        }
    }

    fn flush(&mut self, _: &mut Host, cx: &mut Cx<'_>, out: &mut Out) {
        self.table.flush_all(cx.pool, &mut self.done);
        for q in self.done.drain(..) {
            out.push(L2, q);
        }
    }

    fn holds(&self) -> bool {
        true
    }

    fn held(&self) -> u64 {
        self.table.held()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    use netbatch_wire::ethernet::MacAddr;

    use super::*;
    use crate::host::HostParams;
    use crate::iface::{Iface, Port, Tags};
    use crate::route::Routes;

    /// A host with one port (features `f`) and one address, 192.0.2.1/24.
    fn host(f: Features) -> Host {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let port = Port {
            name: "eth0".into(),
            mac,
            mtu: 1500,
            native_if: Some(0),
            vlans: Vec::new(),
            features: f,
            pair: Default::default(),
        };
        let iface = Iface::new(
            "eth0",
            0,
            Tags::None,
            mac,
            1500,
            vec!["192.0.2.1/24".parse().unwrap()],
        );
        Host::new(
            vec![port],
            vec![iface],
            Arc::new(Routes::new()),
            HostParams::default(),
        )
    }

    fn features(names: &[&str]) -> Features {
        let mut f = Features::default();
        for n in names {
            assert!(f.set(n, true));
        }
        f
    }

    /// The decision table, written from the kernel's rules (`tcp4_check_fraglist_gro`,
    /// `udp_gro_receive`), for the port configurations a `gro` key gives (standard:
    /// `rx-gro` + `rx-udp-gro-forwarding`; fraglist: `rx-gro` + `rx-gro-list`), plain
    /// `rx-gro`, and all three.
    #[test]
    fn the_gro_kind_follows_the_kernel_rules() {
        use Kind::{Fraglist as F, Standard as S};
        let us = u32::from(Ipv4Addr::new(192, 0, 2, 1));
        let fwd = u32::from(Ipv4Addr::new(198, 51, 100, 9));
        // Port 8000: a UDP_GRO socket; 8001: a plain socket; 8002: none.
        let configs: [(&str, &[&str]); 4] = [
            ("standard", &["rx-gro", "rx-udp-gro-forwarding"]),
            ("fraglist", &["rx-gro", "rx-gro-list"]),
            ("rx-gro", &["rx-gro"]),
            ("all", &["rx-gro", "rx-gro-list", "rx-udp-gro-forwarding"]),
        ];
        /// What, protocol, destination, destination port, kind per config above.
        type Row = (&'static str, u8, u32, u16, [Option<Kind>; 4]);
        let table: [Row; 6] = [
            // Forwarded TCP: fraglist wherever rx-gro-list is on.
            (
                "tcp forwarded",
                6,
                fwd,
                80,
                [Some(S), Some(F), Some(S), Some(F)],
            ),
            // TCP to us: standard, never fraglist.
            ("tcp local", 6, us, 80, [Some(S), Some(S), Some(S), Some(S)]),
            // Forwarded UDP: no socket; fraglist with rx-gro-list, standard with
            // rx-udp-gro-forwarding, else none.
            (
                "udp forwarded",
                17,
                fwd,
                8000,
                [Some(S), Some(F), None, Some(F)],
            ),
            // A socket that asked for UDP_GRO: standard, also under rx-gro-list.
            (
                "udp UDP_GRO socket",
                17,
                us,
                8000,
                [Some(S), Some(S), Some(S), Some(S)],
            ),
            // A plain socket: fraglist under rx-gro-list (split again before the
            // socket), else no UDP GRO.
            (
                "udp plain socket",
                17,
                us,
                8001,
                [None, Some(F), None, Some(F)],
            ),
            // To us, no socket: as forwarded (the lookup finds nothing).
            (
                "udp no socket",
                17,
                us,
                8002,
                [Some(S), Some(F), None, Some(F)],
            ),
        ];
        for (i, (name, names)) in configs.iter().enumerate() {
            let f = features(names);
            let h = host(f);
            let any = Ipv4Addr::UNSPECIFIED;
            let g = h.sockets.bind(any, 8000, 4).unwrap();
            h.sockets.get(g).unwrap().set_gro(true);
            h.sockets.bind(any, 8001, 4).unwrap();
            for (what, proto, dst, dport, want) in &table {
                assert_eq!(
                    decide(&h, &f, *proto, Dest::V4(*dst), *dport),
                    want[i],
                    "{what} on a port with {name}"
                );
            }
        }
    }

    /// The same rules for IPv6 (`tcp6_check_fraglist_gro`, `udp6_gro_receive`), with the
    /// address that needs no routing table to be ours: the port's link-local address,
    /// ours only on its own interface (arriving where the port has no interface for the
    /// frame's tags, it is another host's). Sockets bound to `::`.
    #[test]
    fn the_ipv6_gro_kind_follows_the_kernel_rules() {
        use Kind::{Fraglist as F, Standard as S};
        use std::net::Ipv6Addr;
        let configs: [&[&str]; 4] = [
            &["rx-gro", "rx-udp-gro-forwarding"],
            &["rx-gro", "rx-gro-list"],
            &["rx-gro"],
            &["rx-gro", "rx-gro-list", "rx-udp-gro-forwarding"],
        ];
        for (i, names) in configs.iter().enumerate() {
            let f = features(names);
            let h = host(f);
            let ll = u128::from(h.ifaces[0].ll6);
            let other = u128::from("fe80::99".parse::<Ipv6Addr>().unwrap());
            let g = h.sockets.bind(Ipv6Addr::UNSPECIFIED, 8000, 4).unwrap();
            h.sockets.get(g).unwrap().set_gro(true);
            h.sockets.bind(Ipv6Addr::UNSPECIFIED, 8001, 4).unwrap();
            type Row = (&'static str, u8, Dest, u16, [Option<Kind>; 4]);
            let rows: [Row; 6] = [
                ("tcp to us", 6, Dest::V6(ll, 0), 80, [Some(S); 4]),
                (
                    "tcp to another host",
                    6,
                    Dest::V6(other, 0),
                    80,
                    [Some(S), Some(F), Some(S), Some(F)],
                ),
                (
                    "tcp to our link-local address on no interface of ours",
                    6,
                    Dest::V6(ll, u16::MAX),
                    80,
                    [Some(S), Some(F), Some(S), Some(F)],
                ),
                (
                    "udp UDP_GRO socket",
                    17,
                    Dest::V6(ll, 0),
                    8000,
                    [Some(S); 4],
                ),
                (
                    "udp plain socket",
                    17,
                    Dest::V6(ll, 0),
                    8001,
                    [None, Some(F), None, Some(F)],
                ),
                (
                    "udp forwarded",
                    17,
                    Dest::V6(other, 0),
                    8000,
                    [Some(S), Some(F), None, Some(F)],
                ),
            ];
            for (what, proto, dst, dport, want) in rows {
                assert_eq!(
                    decide(&h, &f, proto, dst, dport),
                    want[i],
                    "{what} on a port with {names:?}"
                );
            }
        }
    }
}
