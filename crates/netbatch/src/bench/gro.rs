//! `udp-forward-1460` and `tcp-forward-1460`: the fraglist seed's test bed. One stream of
//! 1460-byte frames (what the interface sees, no FCS) received on `gen0` and forwarded
//! out of `gen1`, a port without offloads, with GRO `off`, `standard` or `fraglist` on
//! `gen0`. The rate is frames received per second.
//!
//! `udp6-forward-1460` is the same over IPv6 (2001:db8:1::2 to 2001:db8:2::10, a
//! connected next hop, 1398 bytes of payload): the GRO stage merges IPv6 as it merges
//! IPv4 (a test below holds the bench to it).
//!
//! `gen0` validates L4 checksums as a NIC does (`rx-checksum`), and writes each flow's
//! sequence into every frame (IPv4 ID, TCP sequence number, payload) so the stream is a
//! real one that GRO can merge. GRO modes map to the ethtool switches: `standard` is
//! `rx-gro` + `rx-udp-gro-forwarding`, `fraglist` is `rx-gro` + `rx-gro-list`.

use core::net::{Ipv4Addr, Ipv6Addr};

use anyhow::Context;
use netbatch_engine::{Dispatch, Pool};
use netbatch_ports::Port;
use netbatch_ports::generator::{FlowSpec, GenConfig, GenPort, L4};
use netbatch_runtime::build;
use netbatch_runtime::setup::{StaticNeighbour, StaticNeighbour6};
use netbatch_stack::filter::{Chain, HookPoint, PortRange, Rule, Verdict};
use netbatch_stack::offload::Features;
use netbatch_wire::ethernet::MacAddr;

use super::scenarios::{Bench, Common, Expect, Variant, WorkerBench, config, port};

/// GRO on the receiving port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GroMode {
    /// No GRO.
    Off,
    /// Payloads merged (`rx-gro`, `rx-udp-gro-forwarding`).
    Standard,
    /// Packets chained (`rx-gro`, `rx-gro-list`).
    Fraglist,
}

impl GroMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Standard => "standard",
            Self::Fraglist => "fraglist",
        }
    }

    fn features(self) -> Features {
        let mut f = Features {
            rx_checksum: true,
            ..Features::default()
        };
        match self {
            Self::Off => {}
            Self::Standard => {
                f.rx_gro = true;
                f.rx_udp_gro_forwarding = true;
            }
            Self::Fraglist => {
                f.rx_gro = true;
                f.rx_gro_list = true;
            }
        }
        f
    }
}

/// Frame size of the scenarios.
const FRAME: usize = 1460;
const GEN0_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 0]);
const GEN1_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 1, 1]);
const SENDER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 9, 9]);
/// The receiver behind `gen1` (TEST-NET-1).
const RECEIVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// The IPv6 receiver behind `gen1` and the sender (documentation prefix).
const RECEIVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10);
const SENDER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

/// Builds a `udp-forward-1460` (`tcp == false`) or `tcp-forward-1460` variant, over
/// IPv6 with `ip6` (`udp6-forward-1460`).
pub(crate) fn build_gro_forward(
    v: &Variant,
    c: &Common,
    tcp: bool,
    ip6: bool,
) -> anyhow::Result<Box<dyn Bench>> {
    let gro = v.gro.unwrap_or(GroMode::Off);
    let mut gen0 = port("gen0", GEN0_MAC, "198.51.100.1/24")?;
    // rx-checksum in every mode, so only GRO differs (the GRO stage comes with it).
    gen0.setup.features = gro.features();
    // gen1 only transmits (no worker receives from it).
    let mut gen1 = port("gen1", GEN1_MAC, "192.0.2.1/24")?;
    gen1.rx_workers.clear();
    if ip6 {
        gen0.setup.addrs6 = vec!["2001:db8:1::1/64".parse()?];
        gen1.setup.addrs6 = vec!["2001:db8:2::1/64".parse()?];
    }
    if c.tx_offload {
        gen1.setup.features.tx_tcp_segmentation = true;
        gen1.setup.features.tx_udp_segmentation = true;
        gen1.setup.features.tx_gso_list = true;
    }
    let mut cfg = config(v, c, vec![gen0, gen1], Dispatch::Buckets);
    cfg.pool.buffers = 8192;
    cfg.neighbours = vec![StaticNeighbour {
        iface: 1,
        ip: RECEIVER,
        mac: MacAddr([0x02, 0, 0, 0, 2, 1]),
    }];
    if ip6 {
        cfg.neighbours6 = vec![StaticNeighbour6 {
            iface: 1,
            ip: RECEIVER6,
            mac: MacAddr([0x02, 0, 0, 0, 2, 1]),
        }];
    }
    if c.fwd_rules > 0 {
        // Rules on other traffic (UDP/TCP to ports this stream does not use), evaluated
        // in full for every packet of it.
        let rules = (0..c.fwd_rules)
            .map(|i| {
                let mut r = Rule::any(Verdict::Drop);
                r.proto = Some(if i % 2 == 0 { 17 } else { 6 });
                let lo = 10_000 + 10 * i as u16;
                r.dport = Some(PortRange { lo, hi: lo + 5 });
                r
            })
            .collect();
        cfg.graph.chains.push((
            HookPoint::Forward,
            Chain {
                rules,
                policy: Verdict::Accept,
            },
        ));
    }
    let pool = Pool::new(cfg.pool).context("pool")?;
    let (l4, hdr) = if tcp { (L4::Tcp, 20) } else { (L4::Udp, 8) };
    let (src, dst, ip_hdr) = if ip6 {
        (SENDER6.into(), RECEIVER6.into(), 40)
    } else {
        (Ipv4Addr::new(198, 51, 100, 2).into(), RECEIVER.into(), 20)
    };
    let flow = FlowSpec {
        src_mac: SENDER_MAC,
        dst_mac: GEN0_MAC,
        vlan: None,
        src,
        dst,
        l4,
        sport: 40000,
        dport: 5001,
        payload_len: FRAME - 14 - ip_hdr - hdr,
        ttl: 64,
        dont_frag: true,
    };
    let room = pool.config().room();
    let gen_cfg = GenConfig::new(vec![flow], c.flow_order);
    let rx = GenPort::new("gen0", 0, &gen_cfg, room)?.with_features(cfg.ports[0].setup.features);
    // gen1 only transmits; without --tx-offload, GSO segments in software.
    let tx = GenPort::new("gen1", 1, &gen_cfg, room)?;
    let gens: Vec<Box<dyn Port>> = vec![Box::new(rx), Box::new(tx)];
    let w = build::worker(&cfg, gens, pool)?;
    Ok(Box::new(WorkerBench {
        w,
        expect: Expect::Forwarded,
        facts: vec![("frame_bytes".into(), FRAME as u64)],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scenarios::build_variant;
    use netbatch_engine::Mode;
    use netbatch_ports::generator::FlowOrder;

    /// What `bench --help` says of `udp6-forward-1460`: with GRO standard or fraglist the
    /// GRO stage merges the IPv6 stream (its `merged` events count frames merged into
    /// another), every frame is forwarded (the variant's own check), and with GRO off
    /// there is no GRO stage at all.
    #[test]
    fn ipv6_gro_merges_in_udp6_forward_1460() {
        let c = Common {
            burst: 64,
            flow_order: FlowOrder::Bursty { burst: 64 },
            routes: 16,
            vrfs: 1,
            vrf_routes: 2,
            fwd_rules: 0,
            policy_rules: 16,
            filters: 16,
            tx_offload: false,
            rate_pps: None,
        };
        for gro in [GroMode::Off, GroMode::Standard, GroMode::Fraglist] {
            let v = Variant {
                scenario: "udp6-forward-1460".into(),
                mode: Some(Mode::List),
                dispatch: Some(Dispatch::Buckets),
                gro: Some(gro),
                workers: 1,
                rps: None,
                fib: None,
            };
            let mut b = build_variant(&v, &c).unwrap();
            b.start();
            let n = b.run(6400);
            b.pause();
            b.verify().unwrap_or_else(|e| panic!("{gro:?}: {e:#}"));
            let stages = b.stages();
            let merged = stages.iter().find(|s| s.name == "gro").map(|s| {
                s.events
                    .iter()
                    .find(|(k, _)| *k == "merged")
                    .map_or(0, |(_, n)| *n)
            });
            match gro {
                GroMode::Off => assert_eq!(merged, None, "no GRO stage without GRO"),
                _ => assert!(
                    merged.is_some_and(|m| m * 2 > n),
                    "{gro:?}: {merged:?} of {n} frames merged"
                ),
            }
        }
    }
}
