//! The taps of host interface pairs (`[linux] pairs`) carry their wire ports' addresses
//! in the control namespace, as linux-cp's pairs do: the kernel there then owns the
//! same addresses as netbatch, answers what netbatch hands it for them and sources its
//! daemons' traffic from them.
//!
//! The ports backend made each tap (name, MAC, MTU, up) when the ports opened; here, on
//! the mirror's thread, inside the namespace, each address is added with
//! `RTM_NEWADDR` (`NLM_F_REPLACE`: an address the tap kept from an earlier run is no
//! error), before the first sync, so that the connected routes the kernel derives are
//! in the first dump. IPv6 addresses are added without duplicate address detection
//! (`IFA_F_NODAD`): netbatch owns them on the wire already, and answers the neighbour
//! solicitations for them; the tap's link-local address is the kernel's own.

use std::net::IpAddr;
use std::time::Duration;

use netbatch_stack::prefix::{If6Addr, IfAddr};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::netlink::Rtnl;

/// How long the kernel may take to answer one address change.
const ANSWER: Duration = Duration::from_secs(5);

/// The `RTM_NEWADDR` of `a` on interface `index`.
fn new_address(index: u32, a: &IfAddr) -> RouteNetlinkMessage {
    let mut m = AddressMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.prefix_len = a.len;
    m.header.scope = AddressScope::Universe;
    m.header.index = index;
    m.attributes
        .push(AddressAttribute::Local(IpAddr::V4(a.addr)));
    m.attributes
        .push(AddressAttribute::Address(IpAddr::V4(a.addr)));
    if let Some(b) = a.subnet().broadcast() {
        m.attributes.push(AddressAttribute::Broadcast(b));
    }
    RouteNetlinkMessage::NewAddress(m)
}

/// The `RTM_NEWADDR` of IPv6 `a` on interface `index`, without duplicate address
/// detection.
fn new_address6(index: u32, a: &If6Addr) -> RouteNetlinkMessage {
    let mut m = AddressMessage::default();
    m.header.family = AddressFamily::Inet6;
    m.header.prefix_len = a.len;
    m.header.scope = AddressScope::Universe;
    m.header.flags = AddressHeaderFlags::Nodad;
    m.header.index = index;
    m.attributes
        .push(AddressAttribute::Address(IpAddr::V6(a.addr)));
    m.attributes
        .push(AddressAttribute::Flags(AddressFlags::Nodad));
    RouteNetlinkMessage::NewAddress(m)
}

/// Gives each tap `(name, addresses, IPv6 addresses)` its addresses, through `rtnl` (a
/// socket of the namespace the calling thread is in).
pub(crate) fn assign(
    rtnl: &mut Rtnl,
    taps: &[(String, Vec<IfAddr>, Vec<If6Addr>)],
) -> Result<(), String> {
    for (name, addrs, addrs6) in taps {
        let index = netbatch_ports::sys::ifindex(name)
            .ok_or_else(|| format!("the tap {name} is not in the namespace"))?;
        for a in addrs {
            rtnl.request(new_address(index, a), NLM_F_CREATE | NLM_F_REPLACE, ANSWER)
                .map_err(|e| format!("adding {}/{} to {name}: {e}", a.addr, a.len))?;
        }
        for a in addrs6 {
            rtnl.request(new_address6(index, a), NLM_F_CREATE | NLM_F_REPLACE, ANSWER)
                .map_err(|e| format!("adding {a} to {name}: {e}"))?;
        }
    }
    Ok(())
}
