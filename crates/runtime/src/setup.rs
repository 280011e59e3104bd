//! Turns a description of ports, addresses and routes into a [`Host`]: interfaces (native
//! and VLAN sub-interfaces), connected routes, local and broadcast host routes, the
//! configured routes, and static neighbours.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use netbatch_stack::host::{Host, HostParams};
use netbatch_stack::iface::{Iface, Pair, Port, Tags};
use netbatch_stack::offload::Features;
use netbatch_stack::prefix::{If6Addr, IfAddr, Ipv4Prefix, Ipv6Prefix};
use netbatch_stack::route::{Route, Route6, RouteError, RouteKind, Routes, Routes6};
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
    /// IPv6 addresses (global scope).
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
    /// IPv6 addresses of the untagged interface (global scope).
    pub addrs6: Vec<If6Addr>,
    /// The link-local address of the untagged interface, when configured (else derived
    /// from the MAC).
    pub ll6: Option<Ipv6Addr>,
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
            ll6: None,
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

/// A static IPv6 neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticNeighbour6 {
    /// Interface index.
    pub iface: u16,
    /// Address.
    pub ip: Ipv6Addr,
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
    Neighbour(core::net::IpAddr),
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
            let mut f = Iface::new(
                ps.name.clone(),
                pi,
                Tags::None,
                ps.mac,
                ps.mtu,
                addrs.clone(),
            );
            f.addrs6 = ps.addrs6.clone();
            if let Some(ll) = ps.ll6 {
                f.ll6 = ll;
            }
            ifaces.push(f);
        }
        for v in &ps.vlans {
            let idx = u16::try_from(ifaces.len()).map_err(|_| SetupError::TooManyIfaces)?;
            port.vlans.push((v.tags, idx));
            let mut f = Iface::new(v.name.clone(), pi, v.tags, ps.mac, ps.mtu, v.addrs.clone());
            f.addrs6 = v.addrs6.clone();
            ifaces.push(f);
        }
        // Sorted by tags, as `Port::iface_for` searches them.
        port.vlans.sort_unstable();
        out_ports.push(port);
    }
    Ok((out_ports, ifaces))
}

/// The routes implied by interface addresses: connected subnets, our addresses (local),
/// subnet broadcasts and the limited broadcast.
pub fn implied_routes(ifaces: &[Iface]) -> Vec<Route> {
    implied_routes_in(ifaces, |_| true)
}

/// [`implied_routes`] of the interfaces `i` for which `of(i)` holds (a VRF's: each VRF's
/// table has its interfaces' routes, and the limited broadcast).
pub fn implied_routes_in(ifaces: &[Iface], of: impl Fn(u16) -> bool) -> Vec<Route> {
    let mut r = Vec::new();
    let mine = || (0u16..).zip(ifaces).filter(|&(i, _)| of(i));
    for (i, f) in mine() {
        r.extend(subnet_routes(i, &f.addrs));
    }
    // Local routes last so they win over a broadcast of the same address.
    for (i, f) in mine() {
        r.extend(local_routes(i, &f.addrs));
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

/// The IPv6 routes implied by interface addresses: each global address's on-link prefix
/// (connected, unless /128), its Subnet-Router anycast address and the address itself
/// (local). Link-local addresses are not
/// routed: `ip6-route` knows each interface's own (they are scoped to it).
pub fn implied_routes6(ifaces: &[Iface]) -> Vec<Route6> {
    implied_routes6_in(ifaces, |_| true)
}

/// [`implied_routes6`] of the interfaces `i` for which `of(i)` holds.
pub fn implied_routes6_in(ifaces: &[Iface], of: impl Fn(u16) -> bool) -> Vec<Route6> {
    let mut r = Vec::new();
    let mine = || (0u16..).zip(ifaces).filter(|&(i, _)| of(i));
    for (i, f) in mine() {
        r.extend(subnet_routes6(i, &f.addrs6));
    }
    for (i, f) in mine() {
        r.extend(local_routes6(i, &f.addrs6));
    }
    r
}

/// The on-link prefixes of IPv6 addresses `addrs` of interface `i`.
pub fn subnet_routes6(i: u16, addrs: &[If6Addr]) -> impl Iterator<Item = Route6> + '_ {
    addrs
        .iter()
        .filter(|a| a.len < 128)
        .map(move |a| Route6::new(a.subnet(), RouteKind::Unicast, Some(i), None))
}

/// The local routes of IPv6 addresses `addrs` of interface `i`: the Subnet-Router anycast
/// address of each on-link prefix (RFC 4291 2.6.1, a router's; Linux's `anycast` routes of
/// its local table), then each address (so that an address that is its prefix's
/// all-zero one stays unicast: a later route for a prefix replaces an earlier one).
pub fn local_routes6(i: u16, addrs: &[If6Addr]) -> impl Iterator<Item = Route6> + '_ {
    addrs
        .iter()
        .filter_map(If6Addr::subnet_anycast)
        .chain(addrs.iter().map(|a| a.addr))
        .map(move |a| Route6::new(Ipv6Prefix::host(a), RouteKind::Local, Some(i), None))
}

/// Builds the IPv6 route table as [`build_routes`] builds the IPv4 one.
pub fn build_routes6(ifaces: &[Iface], routes: &[Route6]) -> Result<Routes6, SetupError> {
    build_routes6_in(ifaces, routes, |_| true)
}

/// [`build_routes6`] over the interfaces `i` for which `of(i)` holds (a VRF's table).
pub fn build_routes6_in(
    ifaces: &[Iface],
    routes: &[Route6],
    of: impl Fn(u16) -> bool,
) -> Result<Routes6, SetupError> {
    build_into6(Routes6::new(), ifaces, routes, of)
}

/// Fills `t` with the routes of the interfaces `i` for which `of(i)` holds, then
/// `routes` (as [`build_routes6`]).
pub fn build_into6(
    mut t: Routes6,
    ifaces: &[Iface],
    routes: &[Route6],
    of: impl Fn(u16) -> bool,
) -> Result<Routes6, SetupError> {
    let (locals, implied): (Vec<Route6>, Vec<Route6>) = implied_routes6_in(ifaces, of)
        .into_iter()
        .partition(|r| r.kind == RouteKind::Local);
    t.load(
        implied
            .into_iter()
            .chain(routes.iter().cloned())
            .chain(locals),
    )?;
    Ok(t)
}

/// Builds the route table: implied routes, then `routes` (a configured route for the same
/// prefix as an implied one replaces it, except local routes, which always win).
pub fn build_routes(ifaces: &[Iface], routes: &[Route]) -> Result<Routes, SetupError> {
    build_routes_in(ifaces, routes, |_| true)
}

/// [`build_routes`] over the interfaces `i` for which `of(i)` holds (a VRF's table).
pub fn build_routes_in(
    ifaces: &[Iface],
    routes: &[Route],
    of: impl Fn(u16) -> bool,
) -> Result<Routes, SetupError> {
    build_into(Routes::new(), ifaces, routes, of)
}

/// Fills `t` with the routes of the interfaces `i` for which `of(i)` holds, then
/// `routes` (as [`build_routes`]): a VRF's table is a compact one
/// ([`Routes::compact`]).
pub fn build_into(
    mut t: Routes,
    ifaces: &[Iface],
    routes: &[Route],
    of: impl Fn(u16) -> bool,
) -> Result<Routes, SetupError> {
    let (locals, implied): (Vec<Route>, Vec<Route>) = implied_routes_in(ifaces, of)
        .into_iter()
        .partition(|r| r.kind == RouteKind::Local);
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
    (table, table6): (Arc<Routes>, Arc<Routes6>),
    (neighbours, neighbours6): (&[StaticNeighbour], &[StaticNeighbour6]),
    params: HostParams,
    n: usize,
) -> Result<Vec<Host>, SetupError> {
    let (p, ifaces) = interfaces(ports)?;
    let shared = Arc::new(netbatch_stack::neigh::NeighShared::default());
    let shared6 = Arc::new(netbatch_stack::neigh::NeighShared6::default());
    let mut hosts: Vec<Host> = Vec::with_capacity(n);
    for i in 0..n.max(1) {
        let mut h = Host::new(p.clone(), ifaces.clone(), table.clone(), params);
        h.routes6 = table6.clone();
        for s in neighbours {
            if !h.neigh.add_static(s.iface, s.ip, s.mac) {
                return Err(SetupError::Neighbour(s.ip.into()));
            }
        }
        for s in neighbours6 {
            if !h.neigh6.add_static(s.iface, s.ip, s.mac) {
                return Err(SetupError::Neighbour(s.ip.into()));
            }
        }
        if let Some(first) = hosts.first() {
            h.sockets = first.sockets.clone();
        }
        if n > 1 {
            h.neigh_shared = Some((shared.clone(), i));
            h.neigh6_shared = Some((shared6.clone(), i));
        }
        hosts.push(h);
    }
    Ok(hosts)
}
