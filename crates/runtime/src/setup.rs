//! Turns a description of ports, addresses and routes into a [`Host`]: interfaces (native
//! and VLAN sub-interfaces), connected routes, local and broadcast host routes, the
//! configured routes, and static neighbours.

use core::net::Ipv4Addr;
use std::sync::Arc;

use netbatch_stack::host::{Host, HostParams};
use netbatch_stack::iface::{Iface, Pair, Port, Tags};
use netbatch_stack::offload::Features;
use netbatch_stack::prefix::{If6Addr, IfAddr, Ipv4Prefix};
use netbatch_stack::route::{Route, RouteError, RouteKind, Routes};
use netbatch_wire::ethernet::MacAddr;

/// A (sub-)interface on a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceSetup {
    /// Name.
    pub name: String,
    /// Tags that select it.
    pub tags: Tags,
    /// Addresses.
    pub addrs: Vec<IfAddr>,
    /// IPv6 addresses (held by the kernel of a host interface pair until netbatch
    /// routes IPv6).
    pub addrs6: Vec<If6Addr>,
}

/// A port with its interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSetup {
    /// Name.
    pub name: String,
    /// MAC address.
    pub mac: MacAddr,
    /// L3 MTU.
    pub mtu: u16,
    /// Offloads.
    pub features: Features,
    /// Addresses of the untagged interface (`None`: untagged frames are refused).
    pub addrs: Option<Vec<IfAddr>>,
    /// IPv6 addresses of the untagged interface (held by the kernel of a host interface
    /// pair until netbatch routes IPv6).
    pub addrs6: Vec<If6Addr>,
    /// VLAN sub-interfaces.
    pub vlans: Vec<IfaceSetup>,
    /// Its place in a host interface pair (`[linux] pairs`).
    pub pair: Pair,
}

impl PortSetup {
    /// A plain port with one address and default MTU.
    pub fn simple(name: &str, mac: MacAddr, addr: IfAddr) -> Self {
        Self {
            name: name.into(),
            mac,
            mtu: 1500,
            features: Features::default(),
            addrs: Some(vec![addr]),
            addrs6: Vec::new(),
            vlans: Vec::new(),
            pair: Pair::None,
        }
    }
}

/// A static neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticNeighbour {
    /// Interface index.
    pub iface: u16,
    /// Address.
    pub ip: Ipv4Addr,
    /// MAC.
    pub mac: MacAddr,
}

/// Why a host could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetupError {
    /// Routes refused.
    #[error("routes: {0}")]
    Route(#[from] RouteError),
    /// Too many interfaces.
    #[error("more than 65535 interfaces")]
    TooManyIfaces,
    /// A static neighbour table entry could not be added.
    #[error("static neighbour {0} could not be added (table full)")]
    Neighbour(Ipv4Addr),
}

/// The interfaces of `ports`, in order: each port's untagged interface, then its VLANs.
pub(crate) fn interfaces(ports: &[PortSetup]) -> Result<(Vec<Port>, Vec<Iface>), SetupError> {
    let mut out_ports = Vec::new();
    let mut ifaces = Vec::new();
    for (pi, ps) in ports.iter().enumerate() {
        let pi = u16::try_from(pi).map_err(|_| SetupError::TooManyIfaces)?;
        let mut port = Port {
            name: ps.name.clone(),
            mac: ps.mac,
            mtu: ps.mtu,
            native_if: None,
            vlans: Vec::new(),
            features: ps.features,
            pair: ps.pair,
        };
        if let Some(addrs) = &ps.addrs {
            port.native_if =
                Some(u16::try_from(ifaces.len()).map_err(|_| SetupError::TooManyIfaces)?);
            ifaces.push(Iface {
                name: ps.name.clone(),
                port: pi,
                tags: Tags::None,
                mac: ps.mac,
                mtu: ps.mtu,
                addrs: addrs.clone(),
            });
        }
        for v in &ps.vlans {
            let idx = u16::try_from(ifaces.len()).map_err(|_| SetupError::TooManyIfaces)?;
            port.vlans.push((v.tags, idx));
            ifaces.push(Iface {
                name: v.name.clone(),
                port: pi,
                tags: v.tags,
                mac: ps.mac,
                mtu: ps.mtu.saturating_sub(0),
                addrs: v.addrs.clone(),
            });
        }
        out_ports.push(port);
    }
    Ok((out_ports, ifaces))
}

/// The routes implied by interface addresses: connected subnets, our addresses (local),
/// subnet broadcasts and the limited broadcast.
pub fn implied_routes(ifaces: &[Iface]) -> Vec<Route> {
    let mut r = Vec::new();
    for (i, f) in ifaces.iter().enumerate() {
        r.extend(subnet_routes(i as u16, &f.addrs));
    }
    // Local routes last so they win over a broadcast of the same address.
    for (i, f) in ifaces.iter().enumerate() {
        r.extend(local_routes(i as u16, &f.addrs));
    }
    r.push(Route::new(
        Ipv4Prefix::host(Ipv4Addr::BROADCAST),
        RouteKind::Broadcast,
        None,
        None,
    ));
    r
}

/// The connected subnets and subnet broadcasts of addresses `addrs` of interface `i`.
pub fn subnet_routes(i: u16, addrs: &[IfAddr]) -> impl Iterator<Item = Route> + '_ {
    addrs.iter().flat_map(move |a| {
        let connected =
            (a.len < 32).then(|| Route::new(a.subnet(), RouteKind::Unicast, Some(i), None));
        let broadcast = a
            .subnet()
            .broadcast()
            .map(|b| Route::new(Ipv4Prefix::host(b), RouteKind::Broadcast, Some(i), None));
        connected.into_iter().chain(broadcast)
    })
}

/// The local routes of addresses `addrs` of interface `i`.
pub fn local_routes(i: u16, addrs: &[IfAddr]) -> impl Iterator<Item = Route> + '_ {
    addrs
        .iter()
        .map(move |a| Route::new(Ipv4Prefix::host(a.addr), RouteKind::Local, Some(i), None))
}

/// Builds the route table: implied routes, then `routes` (a configured route for the same
/// prefix as an implied one replaces it, except local routes, which always win).
pub fn build_routes(ifaces: &[Iface], routes: &[Route]) -> Result<Routes, SetupError> {
    let (locals, implied): (Vec<Route>, Vec<Route>) = implied_routes(ifaces)
        .into_iter()
        .partition(|r| r.kind == RouteKind::Local);
    let mut t = Routes::new();
    t.load(
        implied
            .into_iter()
            .chain(routes.iter().cloned())
            .chain(locals),
    )?;
    Ok(t)
}

/// Builds `n` hosts (at least one) over the route table `table` (built by
/// [`build_routes`] for these ports), for the workers of one datapath: the route table,
/// the socket table and (with more than one) one stream of learned neighbours shared;
/// everything else (neighbour queues, transmit queues, counters) each worker's own.
pub(crate) fn build_hosts(
    ports: &[PortSetup],
    table: Arc<Routes>,
    neighbours: &[StaticNeighbour],
    params: HostParams,
    n: usize,
) -> Result<Vec<Host>, SetupError> {
    let (p, ifaces) = interfaces(ports)?;
    let shared = Arc::new(netbatch_stack::neigh::NeighShared::default());
    let mut hosts: Vec<Host> = Vec::with_capacity(n);
    for i in 0..n.max(1) {
        let mut h = Host::new(p.clone(), ifaces.clone(), table.clone(), params);
        for s in neighbours {
            if !h.neigh.add_static(s.iface, s.ip, s.mac) {
                return Err(SetupError::Neighbour(s.ip));
            }
        }
        if let Some(first) = hosts.first() {
            h.sockets = first.sockets.clone();
        }
        if n > 1 {
            h.neigh_shared = Some((shared.clone(), i));
        }
        hosts.push(h);
    }
    Ok(hosts)
}
