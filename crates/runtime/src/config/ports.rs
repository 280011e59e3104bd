//! `[[port]]`: each port's name, MAC, MTU, offload features and GRO mode, addresses,
//! VLANs, backend (with its kernel interface or generator settings) and workers; what the
//! backend cannot carry is refused as its ports crate module declares. Also the
//! interface names the ports define, which later sections resolve against.

use core::net::Ipv4Addr;
use std::collections::HashSet;

use netbatch_ports::Carries;
use netbatch_ports::generator::FlowOrder;
use netbatch_stack::iface::Tags;
use netbatch_stack::offload::Features;
use netbatch_stack::prefix::IfAddr;
use netbatch_stack::route::file::Resolve;
use netbatch_wire::ethernet::MacAddr;

use super::Errs;
use crate::setup::{IfaceSetup, PortSetup};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PortFile {
    name: String,
    #[serde(default = "default_kind")]
    kind: String,
    /// The port's MAC (default for af_packet and af_xdp: the interface's own).
    mac: Option<String>,
    #[serde(default = "default_mtu")]
    mtu: u16,
    addresses: Option<Vec<String>>,
    #[serde(default)]
    features: Vec<String>,
    /// GRO mode: off | standard | fraglist (sets the rx-gro features).
    gro: Option<String>,
    #[serde(default)]
    vlan: Vec<VlanFile>,
    /// Kernel interface for kernel-backed ports (af_packet, af_xdp, tap).
    interface: Option<String>,
    /// Generator settings (kind = "gen").
    generator: Option<GenFile>,
    /// Workers that receive from this port (one queue each).
    #[serde(default = "default_rx_workers")]
    rx_workers: Vec<usize>,
    /// Workers RPS spreads this port's packets over (default: all, when RPS is on).
    rps_map: Option<Vec<usize>>,
}

fn default_rx_workers() -> Vec<usize> {
    vec![0]
}
fn default_kind() -> String {
    "pcap".into()
}
fn default_mtu() -> u16 {
    1500
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VlanFile {
    id: Option<u16>,
    qinq: Option<[u16; 2]>,
    name: Option<String>,
    #[serde(default)]
    addresses: Vec<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GenFile {
    src: String,
    dst: String,
    #[serde(default = "default_proto")]
    proto: String,
    #[serde(default = "default_flows")]
    flows: u16,
    #[serde(default = "default_sport")]
    sport: u16,
    dport: u16,
    #[serde(default = "default_size")]
    payload: usize,
    dst_mac: Option<String>,
    #[serde(default)]
    order: Option<String>,
}

fn default_proto() -> String {
    "udp".into()
}
fn default_flows() -> u16 {
    1
}
fn default_sport() -> u16 {
    10000
}
fn default_size() -> usize {
    18
}

/// Where a port's frames come from and go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// Frames in memory, from a capture (`replay`), or on ports the caller supplies (the
    /// tests' `mem` ports, the benchmark's generators).
    Pcap,
    /// The in-memory traffic generator.
    Gen(GenSpec),
    /// An AF_PACKET socket on a kernel interface.
    AfPacket(String),
    /// An AF_XDP socket on a kernel interface.
    AfXdp(String),
    /// A TAP device exchanging frames with the host kernel.
    Tap(String),
}

impl PortKind {
    /// The kernel interface of a kernel-backed port.
    pub fn interface(&self) -> Option<&str> {
        match self {
            Self::AfPacket(i) | Self::AfXdp(i) | Self::Tap(i) => Some(i),
            Self::Pcap | Self::Gen(_) => None,
        }
    }
}

impl std::fmt::Display for PortKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pcap => f.write_str("pcap"),
            Self::Gen(_) => f.write_str("gen"),
            Self::AfPacket(i) => write!(f, "af_packet on {i}"),
            Self::AfXdp(i) => write!(f, "af_xdp on {i}"),
            Self::Tap(i) => write!(f, "tap {i}"),
        }
    }
}

/// Generator settings of a `gen` port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenSpec {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// UDP (false) or TCP (true).
    pub tcp: bool,
    /// Flows (source ports `sport ..`).
    pub flows: u16,
    /// First source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Payload bytes.
    pub payload: usize,
    /// Destination MAC (default: the port's own, as if sent to the datapath).
    pub dst_mac: Option<MacAddr>,
    /// Flow order.
    pub order: FlowOrder,
}

/// A configured port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Addresses and interfaces.
    pub setup: PortSetup,
    /// Backend.
    pub kind: PortKind,
    /// Workers that receive from it.
    pub rx_workers: Vec<u16>,
    /// Workers RPS spreads its packets over (empty: not steered).
    pub rps_map: Vec<u16>,
}

impl PortConfig {
    /// The port `setup` as a `[[port]]` with no other keys: its frames supplied by the
    /// caller (kind `pcap`), received by worker 0, not steered by RPS.
    pub fn new(setup: PortSetup) -> Self {
        Self {
            setup,
            kind: PortKind::Pcap,
            rx_workers: vec![0],
            rps_map: Vec::new(),
        }
    }
}

/// Whether the graph needs the GRO stage: some port does GRO.
pub(crate) fn any_gro(ports: &[PortConfig]) -> bool {
    ports.iter().any(|p| p.setup.features.any_rx_gro())
}

/// Interface names to indices, as `setup::interfaces` numbers them.
#[derive(Default)]
pub(super) struct Names {
    names: Vec<String>,
    subnets: Vec<Vec<IfAddr>>,
}

impl Resolve for Names {
    fn iface(&self, name: &str) -> Option<u16> {
        self.names.iter().position(|n| n == name).map(|i| i as u16)
    }
    fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        self.subnets
            .iter()
            .position(|s| s.iter().any(|a| a.subnet().contains(gw)))
            .map(|i| i as u16)
    }
}

/// Validates `[[port]]` against the `workers` there are (`rps`: whether RPS is on), and
/// names the interfaces the ports define, in `setup::interfaces` order.
pub(super) fn validate(
    raw: &[PortFile],
    workers: usize,
    rps: bool,
    e: &mut Errs,
) -> (Vec<PortConfig>, Names) {
    let mut ports = Vec::new();
    let mut names = Names::default();
    let mut seen_ports = HashSet::new();
    let mut seen_addrs = HashSet::new();
    if raw.is_empty() {
        e.add("port", "at least one [[port]] is needed");
    }
    for (pi, p) in raw.iter().enumerate() {
        let key = format!("port[{pi}]");
        if p.name.is_empty() || p.name.contains(char::is_whitespace) {
            e.add(
                format!("{key}.name"),
                format!("'{}' is not a usable name", p.name),
            );
        }
        if !seen_ports.insert(p.name.clone()) {
            e.add(
                format!("{key}.name"),
                format!("'{}' is used by another port", p.name),
            );
        }
        let mac = mac(p, &key, e);
        if !(68..=9000).contains(&p.mtu) {
            e.add(
                format!("{key}.mtu"),
                format!("{} is out of range (68 to 9000)", p.mtu),
            );
        }
        let features = features(p, &key, e);
        let addrs = p
            .addresses
            .as_ref()
            .map(|a| addresses(a, &format!("{key}.addresses"), e));
        for a in addrs.iter().flatten() {
            if !seen_addrs.insert(a.addr) {
                e.add(
                    format!("{key}.addresses"),
                    format!("{} is configured twice", a.addr),
                );
            }
        }
        let vlans = vlans(p, &key, e);
        let kind = kind(p, &key, e);
        if p.interface.is_some() && matches!(p.kind.as_str(), "pcap" | "gen") {
            e.add(
                format!("{key}.interface"),
                format!("a {} port has no kernel interface", p.kind),
            );
        }
        carried(p, &key, e);
        if p.generator.is_some() && p.kind != "gen" {
            e.add(
                format!("{key}.generator"),
                "only a gen port has generator settings",
            );
        }
        if let Some(a) = &addrs {
            names.names.push(p.name.clone());
            names.subnets.push(a.clone());
        }
        for v in &vlans {
            names.names.push(v.name.clone());
            names.subnets.push(v.addrs.clone());
        }
        let rx_workers = worker_list(e, &format!("{key}.rx_workers"), &p.rx_workers, workers);
        let rps_map = match &p.rps_map {
            Some(m) => {
                if m.is_empty() {
                    e.add(format!("{key}.rps_map"), "lists no worker");
                }
                worker_list(e, &format!("{key}.rps_map"), m, workers)
            }
            None => (0..workers.min(64) as u16).collect(),
        };
        if let (Some(mac), Some(kind)) = (mac, kind) {
            ports.push(PortConfig {
                setup: PortSetup {
                    name: p.name.clone(),
                    mac,
                    mtu: p.mtu,
                    features,
                    addrs,
                    vlans,
                },
                kind,
                rx_workers,
                rps_map: if rps { rps_map } else { Vec::new() },
            });
        }
    }
    let mut iface_names = HashSet::new();
    for n in &names.names {
        if !iface_names.insert(n) {
            e.add("port", format!("interface name '{n}' is used twice"));
        }
    }
    (ports, names)
}

/// The port's MAC: as given, or the kernel interface's own for af_packet and af_xdp.
fn mac(p: &PortFile, key: &str, e: &mut Errs) -> Option<MacAddr> {
    let mac_text = match (&p.mac, p.kind.as_str(), &p.interface) {
        (Some(m), _, _) => Some(m.clone()),
        (None, "af_packet" | "af_xdp", Some(i)) => match netbatch_ports::sys::mac_of(i) {
            Some(m) => Some(
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            None => {
                e.add(
                    format!("{key}.mac"),
                    format!(
                        "not given, and interface '{i}' (whose address is the default) was not found"
                    ),
                );
                None
            }
        },
        (None, _, _) => {
            e.add(
                format!("{key}.mac"),
                format!("a {} port needs a MAC address", p.kind),
            );
            None
        }
    };
    let mac = mac_text.and_then(|t| {
        e.parse::<MacAddr>(
            &format!("{key}.mac"),
            &t,
            "a MAC address (aa:bb:cc:dd:ee:ff)",
        )
    });
    if let Some(m) = mac
        && !m.is_unicast()
    {
        e.add(
            format!("{key}.mac"),
            format!("{m} is a group address; a port needs a unicast MAC"),
        );
    }
    mac
}

/// The GRO mode's features, then those listed.
fn features(p: &PortFile, key: &str, e: &mut Errs) -> Features {
    let mut features = Features::default();
    match p.gro.as_deref() {
        None | Some("off") => {}
        // The ethtool switches each mode stands for.
        Some("standard") => {
            features.rx_gro = true;
            features.rx_udp_gro_forwarding = true;
        }
        Some("fraglist") => {
            features.rx_gro = true;
            features.rx_gro_list = true;
        }
        Some(other) => e.add(
            format!("{key}.gro"),
            format!("unknown GRO mode '{other}' (off, standard, fraglist)"),
        ),
    }
    for (fi, f) in p.features.iter().enumerate() {
        if !features.set(f, true) {
            e.add(
                format!("{key}.features[{fi}]"),
                format!(
                    "unknown feature '{f}' (known: {})",
                    Features::NAMES.join(", ")
                ),
            );
        }
    }
    features
}

fn addresses(list: &[String], key: &str, e: &mut Errs) -> Vec<IfAddr> {
    list.iter()
        .enumerate()
        .filter_map(|(i, a)| {
            e.parse::<IfAddr>(
                &format!("{key}[{i}]"),
                a,
                "an interface address (a.b.c.d/len)",
            )
        })
        .collect()
}

/// The port's VLAN interfaces (named `<port>.<vid>` or `<port>.<s-vid>.<c-vid>` unless
/// given a name).
fn vlans(p: &PortFile, key: &str, e: &mut Errs) -> Vec<IfaceSetup> {
    let mut vlans = Vec::new();
    for (vi, v) in p.vlan.iter().enumerate() {
        let vkey = format!("{key}.vlan[{vi}]");
        let tags = match (v.id, v.qinq) {
            (Some(id), None) if (1..=4094).contains(&id) => Tags::Dot1q(id),
            (None, Some([s, c])) if (1..=4094).contains(&s) && (1..=4094).contains(&c) => {
                Tags::QinQ(s, c)
            }
            (Some(_), Some(_)) => {
                e.add(&vkey, "give either id or qinq, not both");
                continue;
            }
            (None, None) => {
                e.add(&vkey, "needs id = VID or qinq = [S-VID, C-VID]");
                continue;
            }
            _ => {
                e.add(&vkey, "VLAN ids must be between 1 and 4094");
                continue;
            }
        };
        if vlans.iter().any(|x: &IfaceSetup| x.tags == tags) {
            e.add(&vkey, "this VLAN is configured twice on the port");
        }
        let name = v.name.clone().unwrap_or_else(|| match tags {
            Tags::Dot1q(id) => format!("{}.{id}", p.name),
            Tags::QinQ(s, c) => format!("{}.{s}.{c}", p.name),
            Tags::None => p.name.clone(),
        });
        let addrs = addresses(&v.addresses, &format!("{vkey}.addresses"), e);
        vlans.push(IfaceSetup { name, tags, addrs });
    }
    vlans
}

/// The backend, with its kernel interface or generator settings.
fn kind(p: &PortFile, key: &str, e: &mut Errs) -> Option<PortKind> {
    match p.kind.as_str() {
        "pcap" => Some(PortKind::Pcap),
        "gen" => gen_spec(p, key, e).map(PortKind::Gen),
        "af_packet" | "af_xdp" | "tap" => match &p.interface {
            Some(i) if !i.is_empty() && i.len() < 16 => Some(match p.kind.as_str() {
                "af_packet" => PortKind::AfPacket(i.clone()),
                "af_xdp" => PortKind::AfXdp(i.clone()),
                _ => PortKind::Tap(i.clone()),
            }),
            Some(i) => {
                e.add(
                    format!("{key}.interface"),
                    format!("'{i}' is not a kernel interface name (1 to 15 characters)"),
                );
                None
            }
            None => {
                e.add(
                    format!("{key}.interface"),
                    format!("a {} port needs the kernel interface to use", p.kind),
                );
                None
            }
        },
        other => {
            e.add(
                format!("{key}.kind"),
                format!("unknown port kind '{other}' (known: pcap, gen, af_packet, af_xdp, tap)"),
            );
            None
        }
    }
}

/// Refuses what the backend declares it cannot carry: some super-packets whole on
/// transmit, or long frames.
fn carried(p: &PortFile, key: &str, e: &mut Errs) {
    let carries = netbatch_ports::carries(&p.kind).unwrap_or(Carries::ANYTHING);
    for (fi, f) in p.features.iter().enumerate() {
        if carries.refuses_tx(f) {
            e.add(
                format!("{key}.features[{fi}]"),
                format!(
                    "{} ports cannot send '{f}' super-packets whole; leave it off and \
                     the stack segments them",
                    p.kind
                ),
            );
        }
    }
    if let (Some(max), Some(frame)) = (carries.max_mtu(), carries.max_frame)
        && usize::from(p.mtu) > max
    {
        e.add(
            format!("{key}.mtu"),
            format!(
                "{} is too long for {} (at most {max}: its frames are {frame} bytes, with \
                 room for two VLAN tags)",
                p.mtu, p.kind
            ),
        );
    }
}

fn gen_spec(p: &PortFile, key: &str, e: &mut Errs) -> Option<GenSpec> {
    let Some(g) = &p.generator else {
        e.add(
            format!("{key}.generator"),
            "a gen port needs [port.generator] settings",
        );
        return None;
    };
    let gk = format!("{key}.generator");
    let src = e.parse::<Ipv4Addr>(&format!("{gk}.src"), &g.src, "an IPv4 address");
    let dst = e.parse::<Ipv4Addr>(&format!("{gk}.dst"), &g.dst, "an IPv4 address");
    let tcp = match g.proto.as_str() {
        "udp" => false,
        "tcp" => true,
        other => {
            e.add(
                format!("{gk}.proto"),
                format!("'{other}' is not udp or tcp"),
            );
            false
        }
    };
    if g.flows == 0 {
        e.add(format!("{gk}.flows"), "must be at least 1");
    }
    let dst_mac = g
        .dst_mac
        .as_ref()
        .and_then(|m| e.parse::<MacAddr>(&format!("{gk}.dst_mac"), m, "a MAC address"));
    let order = match &g.order {
        None => FlowOrder::Bursty { burst: 64 },
        Some(o) => e.parse(&format!("{gk}.order"), o, "a flow order")?,
    };
    Some(GenSpec {
        src: src?,
        dst: dst?,
        tcp,
        flows: g.flows,
        sport: g.sport,
        dport: g.dport,
        payload: g.payload,
        dst_mac,
        order,
    })
}

/// Worker indices under `key`, each checked against `workers`.
fn worker_list(e: &mut Errs, key: &str, list: &[usize], workers: usize) -> Vec<u16> {
    for (i, &w) in list.iter().enumerate() {
        if w >= workers {
            e.add(
                format!("{key}[{i}]"),
                format!("worker {w} does not exist (datapath.workers = {workers})"),
            );
        }
    }
    list.iter()
        .map(|&w| w.min(usize::from(u16::MAX)) as u16)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;

    /// A kernel backend is not configured to do what it cannot: AF_XDP has no
    /// segmentation offload and frames of 2048 - 256 bytes, and neither AF_PACKET nor TAP
    /// can send a fraglist chain whole.
    #[test]
    fn backends_refuse_offloads_and_mtus_they_cannot_carry() {
        let bad = r#"
            [[port]]
            name = "x0"
            kind = "af_xdp"
            interface = "veth0"
            mac = "02:00:00:00:00:01"
            mtu = 9000
            features = ["rx-gro", "tx-tcp-segmentation", "tx-gso-list"]
            [[port]]
            name = "p0"
            kind = "af_packet"
            interface = "veth1"
            mac = "02:00:00:00:00:02"
            features = ["tx-tcp-segmentation", "tx-gso-list"]
        "#;
        let e = parse(bad).unwrap_err();
        let keys: Vec<&str> = e.errors.iter().map(|x| x.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "port[0].features[1]",
                "port[0].features[2]",
                "port[0].mtu",
                "port[1].features[1]"
            ],
            "{e}"
        );
        // 1792-byte frames: 14 bytes of Ethernet header and 8 of VLAN tags leave 1770.
        assert!(e.to_string().contains("at most 1770"), "{e}");
        let ok = r#"
            [[port]]
            name = "x0"
            kind = "af_xdp"
            interface = "veth0"
            mac = "02:00:00:00:00:01"
            mtu = 1770
            [[port]]
            name = "p0"
            kind = "af_packet"
            interface = "veth1"
            mac = "02:00:00:00:00:02"
            features = ["tx-tcp-segmentation", "tx-udp-segmentation"]
        "#;
        if let Err(e) = parse(ok) {
            panic!("refused: {e}");
        }
    }
}
