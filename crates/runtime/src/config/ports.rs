//! `[[port]]`: each port's name, MAC, MTU, offload features and GRO mode, addresses,
//! VLANs, backend (with its kernel interface or generator settings) and workers; what the
//! backend cannot carry is refused as its ports crate module declares. Also the
//! interface names the ports define, which later sections resolve against.
//!
//! What can only be a mistake is refused, with the other party named:
//! - a MAC that is no station's: all zeros, or a group address (multicast, broadcast);
//!   and one MAC on two ports. Linux lets two interfaces share a MAC, but each netbatch
//!   port owns its MAC on its segment, and the kernel's VLAN devices, which share their
//!   parent's MAC, are `[[port.vlan]]`s here;
//! - one kernel interface under two ports (both would take every frame);
//! - an interface address that is no unicast host address: in `0.0.0.0/8` ("this
//!   network"), `127.0.0.0/8` (loopback), `224.0.0.0/4` (multicast) or `240.0.0.0/4`
//!   (reserved, with `255.255.255.255`): the classes RFC 1122 3.2.1.3 and RFC 1812 5.3.7
//!   forbid as a source and netbatch's input drops as martian (Linux drops the first three
//!   likewise in `ip_route_input_slow`; it accepts class E, netbatch does not); on a
//!   subnet of /30 or shorter, the subnet's own network or broadcast address (host number
//!   0 or all ones, RFC 1122 3.2.1.3), whose packets every neighbour would take as
//!   broadcasts or drop as martian; and a /0 subnet, whose connected route would be a
//!   default route;
//! - one address on two interfaces, or one subnet (the same prefix) on two interfaces
//!   (ports or VLANs): which interface reaches the subnet would be a coin toss. Two
//!   addresses of one subnet on one interface are fine (Linux's primary and secondary).
//!   Subnets that merely overlap (`10.0.0.0/16` here, `10.0.1.0/24` there) are allowed,
//!   as Linux allows them: the longer prefix wins, for packets as for a route's gateway;
//! - an IPv6 address (an `addresses` entry with a `:`) that is no unicast address of a
//!   wire: unspecified, loopback, multicast (`ff00::/8`), IPv4-mapped (`::ffff:0:0/96`,
//!   RFC 4291 2.5.5.2), or link-local (`fe80::/10`: each interface's is derived from
//!   its MAC, RFC 4291 2.5.1); a /0 prefix; one address or one on-link prefix on two
//!   interfaces, as for IPv4. Each address makes its prefix on-link and itself local
//!   (`setup::implied_routes6`), as an IPv4 address makes its subnet connected;
//! - a generator sending a unicast datagram in a group-addressed frame (a router
//!   discards those, RFC 1812 5.3.4, RFC 1122 3.3.6) or to an all-zero MAC, or datagrams
//!   longer than its port's MTU.
//!
//! Whether the kernel interfaces exist, and have what the workers need, is
//! [`super::machine`]'s part: a file alone does not say.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::collections::{HashMap, HashSet};

use netbatch_ports::Carries;
use netbatch_ports::generator::FlowOrder;
use netbatch_stack::iface::Tags;
use netbatch_stack::offload::Features;
use netbatch_stack::prefix::{If6Addr, IfAddr, Ipv4Prefix, Ipv6Prefix, class};
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
    /// The IPv6 link-local address (default: derived from the MAC, RFC 4291 2.5.1).
    link_local: Option<String>,
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
    /// vhost_user: the Unix socket's path.
    socket: Option<String>,
    /// vhost_user: "server" (netbatch listens; default) or "client" (it connects).
    mode: Option<String>,
    /// vhost_user: queue pairs offered (one per worker: `datapath.workers`).
    queues: Option<usize>,
    /// vhost_user: the largest ring the peer may set up (power of two, 64 to 1024).
    queue_size: Option<u16>,
    /// Workers that receive from this port (one queue each).
    #[serde(default = "default_rx_workers")]
    rx_workers: Vec<usize>,
    /// Workers RPS spreads this port's packets over (default: all, when RPS is on).
    rps_map: Option<Vec<usize>>,
    /// The VRF of the untagged interface (a `[[vrf]]`'s name; default: main).
    vrf: Option<String>,
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
    /// The VLAN interface's VRF (default: main, whatever the port's).
    vrf: Option<String>,
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
    /// A vhost-user socket: a virtual machine's or DPDK `virtio_user` peer's virtio rings.
    VhostUser(netbatch_ports::vhost_user::Endpoint),
    /// The tap of a host interface pair (`[linux] pairs`): made in the control namespace
    /// with its wire port's name, MAC and MTU. Never written in a file: derived.
    HostTap {
        /// The kernel interface (the wire port's name).
        interface: String,
        /// The control namespace's file.
        netns: std::path::PathBuf,
    },
}

impl PortKind {
    /// The kernel interface of a kernel-backed port.
    pub fn interface(&self) -> Option<&str> {
        match self {
            Self::AfPacket(i) | Self::AfXdp(i) | Self::Tap(i) => Some(i),
            Self::HostTap { interface, .. } => Some(interface),
            Self::Pcap | Self::Gen(_) | Self::VhostUser(_) => None,
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
            Self::VhostUser(v) => write!(
                f,
                "vhost_user {} {}",
                match v.mode {
                    netbatch_ports::vhost_user::Mode::Server => "server",
                    netbatch_ports::vhost_user::Mode::Client => "client",
                },
                v.socket.display()
            ),
            Self::HostTap { interface, netns } => {
                write!(f, "tap {interface} in {}", netns.display())
            }
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

/// Interface names to indices, as `setup::interfaces` numbers them, with each
/// interface's addresses (IPv4, IPv6 global, and its IPv6 link-local address).
#[derive(Default)]
pub(super) struct Names {
    names: Vec<String>,
    subnets: Vec<Vec<IfAddr>>,
    subnets6: Vec<Vec<If6Addr>>,
    ll6: Vec<Ipv6Addr>,
    /// Each interface's VRF name ("" for main), and the key that set it.
    vrfs: Vec<(String, String)>,
}

/// [`Names`] seen from one VRF: every interface by name (a route's `dev` may leak into
/// another VRF), but only the VRF's own subnets for a gateway given without `dev`.
pub(super) struct Scoped<'a> {
    /// The interfaces.
    pub names: &'a Names,
    /// The VRF's name ("" for main).
    pub vrf: &'a str,
}

impl Resolve for Scoped<'_> {
    fn iface(&self, name: &str) -> Option<u16> {
        self.names.iface(name)
    }
    fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        self.names
            .addrs()
            .filter(|&(i, a)| a.subnet().contains(gw) && self.names.vrf_of(i) == self.vrf)
            .min_by_key(|&(i, a)| (core::cmp::Reverse(a.len), i))
            .map(|(i, _)| i)
    }
    fn iface_for_gateway6(&self, gw: Ipv6Addr) -> Option<u16> {
        if netbatch_wire::ipv6::is_link_local(gw) {
            return None;
        }
        self.names
            .addrs6()
            .filter(|&(i, a)| a.subnet().contains(gw) && self.names.vrf_of(i) == self.vrf)
            .min_by_key(|&(i, a)| (core::cmp::Reverse(a.len), i))
            .map(|(i, _)| i)
    }
}

impl Names {
    /// The interfaces of validated ports, in interface order (as `setup::interfaces`
    /// numbers them).
    pub(super) fn of(ports: &[PortConfig]) -> Self {
        let mut n = Self::default();
        for p in ports {
            n.push_port(&p.setup);
        }
        n
    }

    /// The interfaces of port `s`: its untagged one (when it has addresses) with the
    /// link-local address configured or derived from its MAC, then its VLANs (whose
    /// link-local address is the MAC's, as `setup::interfaces` gives them).
    fn push_port(&mut self, s: &PortSetup) {
        let from_mac = netbatch_wire::ipv6::link_local_from_mac(s.mac);
        if let Some(a) = &s.addrs {
            self.push(&s.name, a, &s.addrs6, s.ll6.unwrap_or(from_mac));
        }
        for v in &s.vlans {
            self.push(&v.name, &v.addrs, &v.addrs6, from_mac);
        }
    }

    fn push(&mut self, name: &str, addrs: &[IfAddr], addrs6: &[If6Addr], ll6: Ipv6Addr) {
        self.vrfs.push((String::new(), String::new()));
        self.names.push(name.to_string());
        self.subnets.push(addrs.to_vec());
        self.subnets6.push(addrs6.to_vec());
        self.ll6.push(ll6);
    }

    /// The IPv6 addresses of interface `i`: its global ones and its link-local one.
    pub(super) fn get6(&self, i: u16) -> Option<(&[If6Addr], Ipv6Addr)> {
        let i = usize::from(i);
        Some((self.subnets6.get(i)?.as_slice(), *self.ll6.get(i)?))
    }

    /// Every global IPv6 interface address, with the interface's index.
    pub(super) fn addrs6(&self) -> impl Iterator<Item = (u16, &If6Addr)> {
        self.subnets6
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().map(move |a| (i as u16, a)))
    }

    /// Every interface's link-local address, with the interface's index.
    pub(super) fn link_locals(&self) -> impl Iterator<Item = (u16, Ipv6Addr)> + '_ {
        self.ll6.iter().enumerate().map(|(i, &a)| (i as u16, a))
    }

    /// Sets each interface's VRF name and the key that set it (in interface order).
    pub(super) fn with_vrfs(mut self, vrfs: Vec<(String, String)>) -> Self {
        for (slot, v) in self.vrfs.iter_mut().zip(vrfs) {
            *slot = v;
        }
        self
    }

    /// Interface `i`'s VRF name ("" for main).
    pub(super) fn vrf_of(&self, i: u16) -> &str {
        self.vrfs
            .get(usize::from(i))
            .map_or("", |(v, _)| v.as_str())
    }

    /// Each interface's VRF name ("" for main) and the key that set it ("" for none).
    pub(super) fn vrfs(&self) -> &[(String, String)] {
        &self.vrfs
    }

    /// The names, in interface order.
    pub(super) fn into_names(self) -> Vec<String> {
        self.names
    }

    /// The name and addresses of interface `i`.
    pub(super) fn get(&self, i: u16) -> Option<(&str, &[IfAddr])> {
        let i = usize::from(i);
        Some((self.names.get(i)?.as_str(), self.subnets.get(i)?.as_slice()))
    }

    /// Every interface address, with the interface's index.
    pub(super) fn addrs(&self) -> impl Iterator<Item = (u16, &IfAddr)> {
        self.subnets
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().map(move |a| (i as u16, a)))
    }
}

impl Resolve for Names {
    fn iface(&self, name: &str) -> Option<u16> {
        self.names.iter().position(|n| n == name).map(|i| i as u16)
    }
    /// The interface with the longest subnet holding `gw` (the one the route table
    /// reaches it through, when subnets overlap).
    fn iface_for_gateway(&self, gw: Ipv4Addr) -> Option<u16> {
        self.addrs()
            .filter(|(_, a)| a.subnet().contains(gw))
            .min_by_key(|&(i, a)| (core::cmp::Reverse(a.len), i))
            .map(|(i, _)| i)
    }
    /// The interface with the longest on-link prefix holding `gw` (no two interfaces
    /// share a prefix); none for a link-local `gw`, which every link has.
    fn iface_for_gateway6(&self, gw: Ipv6Addr) -> Option<u16> {
        if netbatch_wire::ipv6::is_link_local(gw) {
            return None;
        }
        self.addrs6()
            .filter(|(_, a)| a.subnet().contains(gw))
            .min_by_key(|&(i, a)| (core::cmp::Reverse(a.len), i))
            .map(|(i, _)| i)
    }
}

/// Each interface's VRF name ("" for main) and the key that sets it, in interface order
/// (as `setup::interfaces` numbers them: a port's untagged interface when it has
/// addresses, then its VLANs). A `vrf` on a port without an untagged interface is
/// refused: it would set nothing.
pub(super) fn iface_vrfs(raw: &[PortFile], e: &mut Errs) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (pi, p) in raw.iter().enumerate() {
        let key = format!("port[{pi}].vrf");
        match (&p.addresses, &p.vrf) {
            (Some(_), v) => out.push((v.clone().unwrap_or_default(), key)),
            (None, Some(v)) => e.add(
                key,
                format!(
                    "VRF '{v}' for a port without addresses (no untagged interface): give the VLANs their vrf"
                ),
            ),
            (None, None) => {}
        }
        for (vi, v) in p.vlan.iter().enumerate() {
            out.push((
                v.vrf.clone().unwrap_or_default(),
                format!("port[{pi}].vlan[{vi}].vrf"),
            ));
        }
    }
    out
}

/// The interface addresses placed so far, each address and subnet with the first
/// address's key and interface, to refuse an address on two interfaces (or twice on
/// one) and a subnet on two interfaces as they come, naming the earlier one.
#[derive(Default)]
struct Placed {
    addrs: HashMap<(String, Ipv4Addr), (String, String)>,
    subnets: HashMap<(String, Ipv4Prefix), (String, String)>,
    addrs6: HashMap<(String, Ipv6Addr), (String, String)>,
    subnets6: HashMap<(String, Ipv6Prefix), (String, String)>,
    /// The VRF of the interface being placed ("" for main): addresses and subnets may
    /// repeat across VRFs (each has its own table), not within one.
    vrf: String,
}

impl Placed {
    /// Places IPv6 address `addr`, at `key` on interface `iface` (the same rules).
    fn place6(&mut self, key: &str, iface: &str, addr: If6Addr, e: &mut Errs) {
        let vrf = self.vrf.clone();
        if let Some((first, on)) = self.addrs6.get(&(vrf.clone(), addr.addr)) {
            e.add(
                key,
                format!(
                    "{} is configured twice: it is also {first} ({on})",
                    addr.addr
                ),
            );
            return;
        }
        self.addrs6.insert(
            (vrf.clone(), addr.addr),
            (key.to_string(), iface.to_string()),
        );
        let subnet = addr.subnet();
        match self.subnets6.get(&(vrf.clone(), subnet)) {
            Some((first, on)) if on != iface => e.add(
                key,
                format!(
                    "prefix {subnet} is also on {on} ({first}): one prefix is on-link on \
                     one interface"
                ),
            ),
            Some(_) => {}
            None => {
                self.subnets6
                    .insert((vrf, subnet), (key.to_string(), iface.to_string()));
            }
        }
    }

    /// Places `addr`, at `key` on interface `iface`.
    fn place(&mut self, key: &str, iface: &str, addr: IfAddr, e: &mut Errs) {
        let vrf = self.vrf.clone();
        if let Some((first, on)) = self.addrs.get(&(vrf.clone(), addr.addr)) {
            e.add(
                key,
                format!(
                    "{} is configured twice: it is also {first} ({on})",
                    addr.addr
                ),
            );
            return;
        }
        self.addrs.insert(
            (vrf.clone(), addr.addr),
            (key.to_string(), iface.to_string()),
        );
        let subnet = addr.subnet();
        match self.subnets.get(&(vrf.clone(), subnet)) {
            Some((first, on)) if on != iface => e.add(
                key,
                format!(
                    "subnet {subnet} is also on {on} ({first}): one subnet is reached through \
                     one interface"
                ),
            ),
            Some(_) => {}
            None => {
                self.subnets
                    .insert((vrf, subnet), (key.to_string(), iface.to_string()));
            }
        }
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
    // Each MAC and kernel interface with the first port that has it.
    let mut macs: HashMap<MacAddr, usize> = HashMap::new();
    let mut kernel: HashMap<&str, usize> = HashMap::new();
    let mut placed = Placed::default();
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
        if let Some(m) = mac {
            match macs.get(&m) {
                Some(&other) => e.add(
                    format!("{key}.mac"),
                    format!(
                        "{m} is also the MAC of port[{other}] ({}): each port needs its own",
                        raw[other].name
                    ),
                ),
                None => {
                    macs.insert(m, pi);
                }
            }
        }
        if let Some(i) = &p.interface
            && matches!(p.kind.as_str(), "af_packet" | "af_xdp" | "tap")
        {
            match kernel.get(i.as_str()) {
                Some(&other) => e.add(
                    format!("{key}.interface"),
                    format!(
                        "'{i}' is also the interface of port[{other}] ({}): both would take \
                         every frame it receives",
                        raw[other].name
                    ),
                ),
                None => {
                    kernel.insert(i, pi);
                }
            }
        }
        if !(68..=9000).contains(&p.mtu) {
            e.add(
                format!("{key}.mtu"),
                format!("{} is out of range (68 to 9000)", p.mtu),
            );
        }
        let features = features(p, &key, e);
        placed.vrf = p.vrf.clone().unwrap_or_default();
        let (addrs, addrs6) = match p.addresses.as_ref() {
            Some(a) => {
                let (v4, v6) = addresses(a, &format!("{key}.addresses"), &p.name, &mut placed, e);
                (Some(v4), v6)
            }
            None => (None, Vec::new()),
        };
        let ll6 = p.link_local.as_deref().and_then(|a| link_local(a, &key, e));
        let vlans = vlans(p, &key, &mut placed, e);
        let own: Vec<IfAddr> = addrs
            .iter()
            .flatten()
            .chain(vlans.iter().flat_map(|v| &v.addrs))
            .copied()
            .collect();
        let kind = kind(p, &key, &own, workers, e);
        if p.interface.is_some() && matches!(p.kind.as_str(), "pcap" | "gen" | "vhost_user") {
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
        let from_mac = mac.map_or(
            Ipv6Addr::UNSPECIFIED,
            netbatch_wire::ipv6::link_local_from_mac,
        );
        if let Some(a) = &addrs {
            names.push(&p.name, a, &addrs6, ll6.unwrap_or(from_mac));
        }
        for v in &vlans {
            names.push(&v.name, &v.addrs, &v.addrs6, from_mac);
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
                    addrs6,
                    ll6,
                    vlans,
                    pair: Default::default(),
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

/// Why `m` cannot be a station's own address (a port's, a neighbour's), if it cannot.
pub(super) fn not_a_station(m: MacAddr) -> Option<String> {
    if m.0 == [0; 6] {
        Some(format!("{m} is no station's address"))
    } else if m.is_broadcast() {
        Some(format!("{m} is the broadcast address, not a station's"))
    } else if m.is_multicast() {
        Some(format!(
            "{m} is a group (multicast) address, not a station's: its first byte has the \
             group bit"
        ))
    } else {
        None
    }
}

/// The port's MAC: as given, or the kernel interface's own for af_packet and af_xdp.
fn mac(p: &PortFile, key: &str, e: &mut Errs) -> Option<MacAddr> {
    let mac_text = match (&p.mac, p.kind.as_str(), &p.interface) {
        (Some(m), _, _) => Some(m.clone()),
        (None, "af_packet" | "af_xdp", Some(i)) => match netbatch_ports::sys::mac_of(i) {
            Some(m) => Some(MacAddr(m).to_string()),
            None => {
                // The interface is what is missing; `mac` only defaults to its address.
                e.add(
                    format!("{key}.interface"),
                    format!(
                        "no interface '{i}' on this machine (and `mac`, not given, would \
                         be its address)"
                    ),
                );
                return None;
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
    })?;
    if let Some(why) = not_a_station(mac) {
        let from = match (&p.mac, &p.interface) {
            (None, Some(i)) => format!(" (interface '{i}' has it: give `mac`)"),
            _ => String::new(),
        };
        e.add(
            format!("{key}.mac"),
            format!("{why}{from}; a port needs a unicast MAC"),
        );
        return None;
    }
    Some(mac)
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

/// The addresses under `key` of interface `iface`, each a unicast host address of its
/// subnet, IPv4 and IPv6 (those with a `:`) apart; the usable ones are also `placed`,
/// for the checks across interfaces.
fn addresses(
    list: &[String],
    key: &str,
    iface: &str,
    placed: &mut Placed,
    e: &mut Errs,
) -> (Vec<IfAddr>, Vec<If6Addr>) {
    let mut out = Vec::with_capacity(list.len());
    let mut out6 = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let akey = format!("{key}[{i}]");
        if a.contains(':') {
            let Some(addr) = e.parse::<If6Addr>(&akey, a, "an IPv6 interface address (addr/len)")
            else {
                continue;
            };
            match not_a_host6(addr) {
                Some(why) => e.add(&akey, why),
                None => placed.place6(&akey, iface, addr, e),
            }
            out6.push(addr);
            continue;
        }
        let Some(addr) = e.parse::<IfAddr>(&akey, a, "an interface address (a.b.c.d/len)") else {
            continue;
        };
        match not_a_host(addr) {
            Some(why) => e.add(&akey, why),
            None => placed.place(&akey, iface, addr, e),
        }
        out.push(addr);
    }
    (out, out6)
}

/// The configured link-local address `a` of the port at `key`: a unicast address of
/// fe80::/64 (RFC 4291 2.5.6: link-local addresses have that prefix).
fn link_local(a: &str, key: &str, e: &mut Errs) -> Option<Ipv6Addr> {
    let k = format!("{key}.link_local");
    let addr: Ipv6Addr = e.parse(&k, a, "an IPv6 link-local address (fe80::/64, no length)")?;
    let s = addr.segments();
    if s[..4] != [0xfe80, 0, 0, 0] || s[4..] == [0; 4] {
        e.add(
            &k,
            format!("{addr} is not a link-local unicast address (fe80::/64, not fe80::)"),
        );
        return None;
    }
    Some(addr)
}

/// Why IPv6 address `a` cannot be an interface's, if it cannot (see the module's note).
fn not_a_host6(a: If6Addr) -> Option<String> {
    let s = a.addr.segments();
    let class = if a.addr.is_unspecified() {
        Some("the unspecified address (RFC 4291 2.5.2)")
    } else if a.addr.is_loopback() {
        Some("the loopback address (RFC 4291 2.5.3), which never comes from a wire")
    } else if a.addr.is_multicast() {
        Some("a multicast group (ff00::/8), not an interface's address")
    } else if s[..5] == [0; 5] && s[5] == 0xffff {
        Some("IPv4-mapped (::ffff:0:0/96, RFC 4291 2.5.5.2), which no wire carries")
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some(
            "link-local (fe80::/10): each interface's link-local address is derived from \
             its MAC (RFC 4291 2.5.1), not configured",
        )
    } else {
        None
    };
    if let Some(c) = class {
        return Some(format!("{} is {c}", a.addr));
    }
    (a.len == 0).then(|| {
        format!("{a} makes every address on-link: its prefix route would be a default route")
    })
}

/// Why `a` cannot be an interface's address, if it cannot (see the module's note).
fn not_a_host(a: IfAddr) -> Option<String> {
    let bits = u32::from(a.addr);
    let class = if a.addr.is_unspecified() {
        Some("the unspecified address")
    } else if class::is_this_network(bits) {
        Some("in 0.0.0.0/8, \"this network\" (RFC 1122 3.2.1.3)")
    } else if class::is_loopback(bits) {
        Some("a loopback address (127.0.0.0/8), which never comes from a wire")
    } else if class::is_multicast(bits) {
        Some("a multicast group (224.0.0.0/4), not a host's address")
    } else if class::is_limited_broadcast(bits) {
        Some("the limited broadcast address")
    } else if class::is_class_e(bits) {
        Some("in the reserved 240.0.0.0/4 (class E), which netbatch drops as martian")
    } else {
        None
    };
    if let Some(c) = class {
        return Some(format!(
            "{} is {c}: packets from or to it are martians, so it cannot be an interface's \
             address",
            a.addr
        ));
    }
    let subnet = a.subnet();
    if a.len == 0 {
        return Some(format!(
            "{a} makes every address on-link: its connected route would be a default route"
        ));
    }
    if a.len <= 30 {
        if a.addr == subnet.addr() {
            return Some(format!(
                "{} is the network address of {subnet} (host number 0, RFC 1122 3.2.1.3), \
                 not a host's",
                a.addr
            ));
        }
        if Some(a.addr) == subnet.broadcast() {
            return Some(format!(
                "{} is the broadcast address of {subnet}: neighbours would take packets to \
                 it as broadcasts and drop packets from it as martians",
                a.addr
            ));
        }
    }
    None
}

/// The port's VLAN interfaces (named `<port>.<vid>` or `<port>.<s-vid>.<c-vid>` unless
/// given a name).
fn vlans(p: &PortFile, key: &str, placed: &mut Placed, e: &mut Errs) -> Vec<IfaceSetup> {
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
        placed.vrf = v.vrf.clone().unwrap_or_default();
        let (addrs, addrs6) =
            addresses(&v.addresses, &format!("{vkey}.addresses"), &name, placed, e);
        vlans.push(IfaceSetup {
            name,
            tags,
            addrs,
            addrs6,
        });
    }
    vlans
}

/// The backend, with its kernel interface or generator settings (`own`: the port's
/// addresses, for the generator's destination).
fn kind(p: &PortFile, key: &str, own: &[IfAddr], workers: usize, e: &mut Errs) -> Option<PortKind> {
    if p.kind != "vhost_user" {
        for (k, given) in [
            ("socket", p.socket.is_some()),
            ("mode", p.mode.is_some()),
            ("queues", p.queues.is_some()),
            ("queue_size", p.queue_size.is_some()),
        ] {
            if given {
                e.add(
                    format!("{key}.{k}"),
                    format!("only a vhost_user port has `{k}` (this one is {})", p.kind),
                );
            }
        }
    }
    match p.kind.as_str() {
        "vhost_user" => vhost_user(p, key, workers, e).map(PortKind::VhostUser),
        "pcap" => Some(PortKind::Pcap),
        "gen" => gen_spec(p, key, own, e).map(PortKind::Gen),
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
                format!(
                    "unknown port kind '{other}' (known: pcap, gen, af_packet, af_xdp, tap, \
                     vhost_user)"
                ),
            );
            None
        }
    }
}

/// The socket, mode and rings of a `vhost_user` port: the socket's directory must exist
/// and its path fit a Unix socket address; one queue pair per worker, every worker
/// receiving (the peer picks the queue each flow arrives on).
fn vhost_user(
    p: &PortFile,
    key: &str,
    workers: usize,
    e: &mut Errs,
) -> Option<netbatch_ports::vhost_user::Endpoint> {
    use netbatch_ports::vhost_user::{Endpoint, Mode};
    let mut ok = true;
    let socket = match &p.socket {
        None => {
            e.add(
                format!("{key}.socket"),
                "a vhost_user port needs the path of its Unix socket",
            );
            None
        }
        Some(s) => {
            let path = std::path::PathBuf::from(s);
            let dir = match path.parent() {
                Some(d) if d.as_os_str().is_empty() => std::path::Path::new("."),
                Some(d) => d,
                None => std::path::Path::new("/"),
            };
            if s.is_empty() || s.ends_with('/') {
                e.add(format!("{key}.socket"), format!("'{s}' names no file"));
                None
            } else if s.len() > 107 {
                e.add(
                    format!("{key}.socket"),
                    format!(
                        "'{s}' is {} bytes long: a Unix socket's path has at most 107",
                        s.len()
                    ),
                );
                None
            } else if !dir.is_dir() {
                e.add(
                    format!("{key}.socket"),
                    format!("directory '{}' does not exist", dir.display()),
                );
                None
            } else {
                Some(path)
            }
        }
    };
    let mode = match p.mode.as_deref() {
        None | Some("server") => Mode::Server,
        Some("client") => Mode::Client,
        Some(m) => {
            e.add(
                format!("{key}.mode"),
                format!("'{m}' is not a mode: server (netbatch listens) or client (it connects)"),
            );
            ok = false;
            Mode::Server
        }
    };
    let queue_size = p.queue_size.unwrap_or(1024);
    if !(64..=1024).contains(&queue_size) || !queue_size.is_power_of_two() {
        e.add(
            format!("{key}.queue_size"),
            format!("{queue_size} is not a power of two from 64 to 1024"),
        );
        ok = false;
    }
    if let Some(q) = p.queues
        && q != workers
    {
        e.add(
            format!("{key}.queues"),
            format!(
                "{q} queue pairs, but there is one per worker (datapath.workers = {workers}): \
                 each worker polls its own pair"
            ),
        );
        ok = false;
    }
    let all: Vec<usize> = (0..workers).collect();
    let mut rx = p.rx_workers.clone();
    rx.sort_unstable();
    rx.dedup();
    if rx != all {
        e.add(
            format!("{key}.rx_workers"),
            format!(
                "a vhost_user port receives on every worker ({all:?}): the peer picks the \
                 queue pair each flow arrives on"
            ),
        );
        ok = false;
    }
    let socket = socket?;
    ok.then_some(Endpoint {
        socket,
        mode,
        queue_size,
    })
}

/// The `kind` a port's table names (for checks in other sections).
pub(super) fn kind_of(p: &PortFile) -> &str {
    &p.kind
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

/// A gen port's settings. Its frames arrive at the port as if from a wire, so they must
/// be frames a router takes: to a station's MAC, or a group MAC only with a broadcast or
/// multicast destination (`own`: the port's addresses, whose subnets' broadcasts count),
/// and datagrams within the port's MTU.
fn gen_spec(p: &PortFile, key: &str, own: &[IfAddr], e: &mut Errs) -> Option<GenSpec> {
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
    let l4 = if tcp {
        netbatch_wire::tcp::HEADER_LEN
    } else {
        netbatch_wire::udp::HEADER_LEN
    };
    let datagram = g
        .payload
        .saturating_add(netbatch_wire::ipv4::HEADER_LEN + l4);
    if datagram > usize::from(p.mtu) {
        e.add(
            format!("{gk}.payload"),
            format!(
                "{} bytes of payload make {datagram}-byte datagrams, longer than the port's \
                 MTU ({})",
                g.payload, p.mtu
            ),
        );
    }
    let dst_mac = g
        .dst_mac
        .as_ref()
        .and_then(|m| e.parse::<MacAddr>(&format!("{gk}.dst_mac"), m, "a MAC address"));
    if let Some(m) = dst_mac {
        if m.0 == [0; 6] {
            e.add(
                format!("{gk}.dst_mac"),
                format!("{m} is no station's address"),
            );
        } else if let Some(d) = dst
            && m.is_multicast()
            && !group_destination(d, own)
        {
            e.add(
                format!("{gk}.dst_mac"),
                format!(
                    "{m} is a group address, and {d} is no broadcast or multicast \
                     destination: a router discards a unicast datagram in a group-addressed \
                     frame (RFC 1812 5.3.4)"
                ),
            );
        }
    }
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

/// Whether `d` is a destination a group-addressed frame may carry: the limited
/// broadcast, a multicast group, or the broadcast of a subnet in `own`.
fn group_destination(d: Ipv4Addr, own: &[IfAddr]) -> bool {
    let bits = u32::from(d);
    class::is_limited_broadcast(bits)
        || class::is_multicast(bits)
        || own.iter().any(|a| a.subnet().broadcast() == Some(d))
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

    /// A vhost_user port names its socket (in a directory that exists), a mode, a ring
    /// size the virtio rings allow, and one queue pair per worker, every worker
    /// receiving; no other kind takes those keys, and it takes no kernel interface.
    #[test]
    fn vhost_user_ports_are_refused_key_by_key() {
        let text = r#"
            [datapath]
            workers = 2
            [[port]]
            name = "v1"
            kind = "vhost_user"
            mac = "02:00:00:00:00:01"
            mode = "both"
            queue_size = 100
            queues = 3
            [[port]]
            name = "v2"
            kind = "vhost_user"
            mac = "02:00:00:00:00:02"
            socket = "/nonexistent-dir/v2.sock"
            interface = "eth0"
            rx_workers = [0, 1]
            features = ["tx-udp-segmentation"]
            [[port]]
            name = "t"
            kind = "tap"
            interface = "tap0"
            mac = "02:00:00:00:00:03"
            socket = "/tmp/t.sock"
            rx_workers = [0, 1]
            [[port]]
            name = "ok"
            kind = "vhost_user"
            mac = "02:00:00:00:00:04"
            socket = "/tmp/ok.sock"
            mode = "client"
            queue_size = 256
            queues = 2
            rx_workers = [1, 0]
            features = ["tx-checksum", "tx-tcp-segmentation"]
        "#;
        assert_errors(
            &errors(text),
            &[
                ("port[0].socket", "needs the path of its Unix socket"),
                ("port[0].mode", "'both' is not a mode"),
                (
                    "port[0].queue_size",
                    "100 is not a power of two from 64 to 1024",
                ),
                ("port[0].queues", "one per worker (datapath.workers = 2)"),
                ("port[0].rx_workers", "receives on every worker ([0, 1])"),
                (
                    "port[1].socket",
                    "directory '/nonexistent-dir' does not exist",
                ),
                (
                    "port[1].interface",
                    "a vhost_user port has no kernel interface",
                ),
                ("port[1].features[0]", "cannot send 'tx-udp-segmentation'"),
                ("port[2].socket", "only a vhost_user port has `socket`"),
            ],
        );
        let ok = text.split("[[port]]").last().unwrap();
        let cfg = parse(&format!("[datapath]\nworkers = 2\n[[port]]{ok}")).unwrap();
        assert_eq!(
            cfg.ports[0].kind,
            super::PortKind::VhostUser(netbatch_ports::vhost_user::Endpoint {
                socket: "/tmp/ok.sock".into(),
                mode: netbatch_ports::vhost_user::Mode::Client,
                queue_size: 256,
            })
        );
    }

    /// The errors of `text`, as (key, reason).
    fn errors(text: &str) -> Vec<(String, String)> {
        match parse(text) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|x| (x.key, x.reason)).collect(),
        }
    }

    /// Asserts `got` holds exactly the `want`ed keys, in order, each with its reason's
    /// words.
    fn assert_errors(got: &[(String, String)], want: &[(&str, &str)]) {
        let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        let want_keys: Vec<&str> = want.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, want_keys, "{got:#?}");
        for ((k, reason), (_, words)) in got.iter().zip(want) {
            assert!(reason.contains(words), "{k}: «{reason}» lacks «{words}»");
        }
    }

    fn port(name: &str, mac: &str, addresses: &str) -> String {
        format!("[[port]]\nname = \"{name}\"\nmac = \"{mac}\"\naddresses = [{addresses}]\n")
    }

    /// A port's MAC is a station's (not all zeros, not a group address: the group bit is
    /// the low bit of the first byte, IEEE 802), and no two ports share one.
    #[test]
    fn macs_that_are_no_station_and_shared_macs_are_refused() {
        let text = [
            port("a", "02:00:00:00:00:01", ""),
            port("b", "00:00:00:00:00:00", ""),
            port("c", "ff:ff:ff:ff:ff:ff", ""),
            port("d", "33:33:00:00:00:01", ""),
            port("e", "02:00:00:00:00:01", ""),
            port("f", "02:00:00:00:00:06", ""),
        ]
        .concat();
        assert_errors(
            &errors(&text),
            &[
                ("port[1].mac", "00:00:00:00:00:00 is no station's address"),
                ("port[2].mac", "the broadcast address"),
                ("port[3].mac", "group (multicast) address"),
                ("port[4].mac", "also the MAC of port[0] (a)"),
            ],
        );
    }

    /// Two ports on one kernel interface would each take every frame it receives.
    #[test]
    fn one_kernel_interface_under_two_ports_is_refused() {
        let text = r#"
            [[port]]
            name = "a"
            kind = "af_packet"
            interface = "veth0"
            mac = "02:00:00:00:00:01"
            [[port]]
            name = "b"
            kind = "tap"
            interface = "veth0"
            mac = "02:00:00:00:00:02"
            [[port]]
            name = "c"
            kind = "af_packet"
            interface = "veth1"
            mac = "02:00:00:00:00:03"
        "#;
        assert_errors(
            &errors(text),
            &[(
                "port[1].interface",
                "'veth0' is also the interface of port[0] (a)",
            )],
        );
    }

    /// An interface address is a unicast host address of its subnet: not in 0/8, 127/8,
    /// 224/4 or 240/4 (RFC 1122 3.2.1.3), not the network or broadcast address of a /30
    /// or shorter, not on a /0. A /31's two addresses (RFC 3021) and a /32 are fine.
    #[test]
    fn interface_addresses_must_be_unicast_host_addresses() {
        let bad = [
            ("0.0.0.0/8", "the unspecified address"),
            ("0.1.2.3/8", "this network"),
            ("127.0.0.1/8", "loopback"),
            ("224.0.0.1/24", "multicast"),
            ("240.0.0.1/24", "class E"),
            ("255.255.255.255/32", "limited broadcast"),
            ("192.0.2.0/24", "network address of 192.0.2.0/24"),
            ("192.0.2.255/24", "broadcast address of 192.0.2.0/24"),
            ("198.51.100.4/30", "network address of 198.51.100.4/30"),
            ("198.51.100.7/30", "broadcast address of 198.51.100.4/30"),
            ("10.0.0.1/0", "every address on-link"),
        ];
        let good = ["198.51.100.8/31", "198.51.100.9/31", "203.0.113.255/32"];
        let list: Vec<String> = bad
            .iter()
            .map(|(a, _)| a)
            .chain(&good)
            .map(|a| format!("\"{a}\""))
            .collect();
        let got = errors(&port("a", "02:00:00:00:00:01", &list.join(", ")));
        let want: Vec<(String, &str)> = bad
            .iter()
            .enumerate()
            .map(|(i, (_, why))| (format!("port[0].addresses[{i}]"), *why))
            .collect();
        let want: Vec<(&str, &str)> = want.iter().map(|(k, w)| (k.as_str(), *w)).collect();
        assert_errors(&got, &want);
    }

    /// One address on two interfaces, or one subnet on two interfaces (ports or VLANs),
    /// is refused at the later one, naming the earlier; two addresses of a subnet on one
    /// interface and merely overlapping subnets are not. With overlapping subnets a
    /// gateway resolves to the longer one, as the route table would reach it.
    #[test]
    fn one_address_or_subnet_on_two_interfaces_is_refused() {
        let text = format!(
            "{}{}[[port.vlan]]\nid = 7\naddresses = [\"10.1.0.1/16\"]\n",
            port(
                "a",
                "02:00:00:00:00:01",
                r#""192.0.2.1/24", "192.0.2.3/24", "10.1.9.9/16""#
            ),
            port(
                "b",
                "02:00:00:00:00:02",
                r#""192.0.2.2/24", "192.0.2.1/32""#
            ),
        );
        assert_errors(
            &errors(&text),
            &[
                ("port[1].addresses[0]", "subnet 192.0.2.0/24 is also on a"),
                (
                    "port[1].addresses[1]",
                    "192.0.2.1 is configured twice: it is also port[0].addresses[0] (a)",
                ),
                (
                    "port[1].vlan[0].addresses[0]",
                    "subnet 10.1.0.0/16 is also on a",
                ),
            ],
        );
        let overlapping = format!(
            "{}{}{}",
            port("a", "02:00:00:00:00:01", r#""10.0.0.1/16""#),
            port("b", "02:00:00:00:00:02", r#""10.0.1.1/24""#),
            "[[route]]\nprefix = \"198.51.100.0/24\"\nvia = \"10.0.1.254\"\n\
             [[route]]\nprefix = \"203.0.113.0/24\"\nvia = \"10.0.2.254\"\n"
        );
        let c = parse(&overlapping).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.routes[0].out_if, Some(1), "10.0.1.254 is in b's /24");
        assert_eq!(c.routes[1].out_if, Some(0), "10.0.2.254 only in a's /16");
    }

    /// A generator's frames arrive as if from a wire: a unicast datagram in a
    /// group-addressed frame is one a router discards (RFC 1812 5.3.4), a broadcast one
    /// is not; an all-zero destination MAC is nobody's; a datagram longer than the port's
    /// MTU could not have arrived.
    #[test]
    fn a_generator_sends_what_a_router_takes() {
        let gen_port = |i: usize, dst: &str, dst_mac: &str, payload: usize| {
            format!(
                "[[port]]\nname = \"g{i}\"\nkind = \"gen\"\nmac = \"02:00:00:00:00:0{i}\"\n\
                 addresses = [\"10.{i}.0.1/24\"]\n[port.generator]\nsrc = \"10.{i}.0.2\"\n\
                 dst = \"{dst}\"\ndport = 9\npayload = {payload}\ndst_mac = \"{dst_mac}\"\n"
            )
        };
        let text = [
            gen_port(0, "198.51.100.1", "ff:ff:ff:ff:ff:ff", 18),
            gen_port(1, "255.255.255.255", "ff:ff:ff:ff:ff:ff", 18),
            gen_port(2, "10.2.0.255", "ff:ff:ff:ff:ff:ff", 18),
            gen_port(3, "10.3.0.1", "00:00:00:00:00:00", 18),
            // 1473 + 8 + 20 = 1501 bytes; 1472 fit 1500.
            gen_port(4, "10.4.0.1", "02:00:00:00:00:04", 1473),
            gen_port(5, "10.5.0.1", "02:00:00:00:00:05", 1472),
        ]
        .concat();
        assert_errors(
            &errors(&text),
            &[
                (
                    "port[0].generator.dst_mac",
                    "198.51.100.1 is no broadcast or multicast destination",
                ),
                ("port[3].generator.dst_mac", "no station's address"),
                ("port[4].generator.payload", "1501-byte datagrams"),
            ],
        );
    }
}
