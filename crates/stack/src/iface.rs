//! Ports (physical) and interfaces (logical: a port, or a VLAN sub-interface of it).
//!
//! Interface indices are dense (`0..ifaces.len()`); `Meta::in_if`/`out_if` hold them.
//! A port maps untagged frames to its native interface (if it has one) and tagged frames
//! to sub-interfaces by VLAN key.

use core::net::{Ipv4Addr, Ipv6Addr};

use netbatch_wire::ethernet::MacAddr;
use netbatch_wire::ipv6;

use crate::offload::Features;

use crate::prefix::{If6Addr, IfAddr};

/// A VLAN tag stack on an interface: none, one 802.1Q tag, or 802.1ad + 802.1Q.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Tags {
    /// Untagged.
    #[default]
    None,
    /// One 802.1Q tag.
    Dot1q(u16),
    /// An 802.1ad service tag, then an 802.1Q customer tag.
    QinQ(u16, u16),
}

impl Tags {
    /// Bytes these tags add to an Ethernet header.
    pub fn len(&self) -> usize {
        match self {
            Self::None => 0,
            Self::Dot1q(_) => 4,
            Self::QinQ(..) => 8,
        }
    }

    /// Whether there are no tags.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::None)
    }
}

/// A physical port as the stack sees it.
#[derive(Debug, Clone)]
pub struct Port {
    /// Name from the configuration.
    pub name: String,
    /// MAC address.
    pub mac: MacAddr,
    /// L3 MTU (bytes of IP packet).
    pub mtu: u16,
    /// Interface for untagged frames.
    pub native_if: Option<u16>,
    /// Sub-interfaces by tag stack, sorted by their tags (so that a port with a
    /// thousand VLANs finds one in ten steps, not five hundred).
    pub vlans: Vec<(Tags, u16)>,
    /// Offloads.
    pub features: Features,
    /// Its place in a host interface pair ([`crate::hostif`]), if any.
    pub pair: Pair,
}

/// A port's place in a host interface pair (VPP's linux-cp, [`crate::hostif`]): a wire
/// port and the kernel interface (a tap) that stands for it in a control namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pair {
    /// Not paired.
    #[default]
    None,
    /// A wire port: what netbatch does not consume of its traffic is punted to port
    /// `.0`, its tap.
    Punt(u16),
    /// A tap: what the kernel sends through it is injected, unchanged, into wire port
    /// `.0`.
    Inject(u16),
}

impl Port {
    /// The interface for a tag stack received on this port.
    #[inline]
    pub fn iface_for(&self, tags: Tags) -> Option<u16> {
        match tags {
            Tags::None => self.native_if,
            t => self
                .vlans
                .binary_search_by(|(k, _)| k.cmp(&t))
                .ok()
                .and_then(|i| self.vlans.get(i))
                .map(|(_, i)| *i),
        }
    }
}

/// A logical interface.
#[derive(Debug, Clone)]
pub struct Iface {
    /// Name (`eth0`, `eth0.100`).
    pub name: String,
    /// Port it sits on.
    pub port: u16,
    /// Tags pushed on transmit and expected on receive.
    pub tags: Tags,
    /// MAC address (the port's).
    pub mac: MacAddr,
    /// L3 MTU.
    pub mtu: u16,
    /// Addresses; the first is the primary (source of ARP requests, and of ICMP errors
    /// when no better address applies: see `ip4::icmp_error`).
    pub addrs: Vec<IfAddr>,
    /// IPv6 addresses of global (or unique local) scope, with their on-link prefixes.
    pub addrs6: Vec<If6Addr>,
    /// The IPv6 link-local address (RFC 4291 2.5.6): every interface has one, derived
    /// from its MAC (modified EUI-64, RFC 4291 2.5.1) unless configured. Its scope is
    /// this interface: the same address on another interface is another address.
    pub ll6: Ipv6Addr,
}

impl Iface {
    /// An interface with IPv4 addresses `addrs`, no global IPv6 address and the
    /// link-local address derived from `mac`.
    pub fn new(
        name: impl Into<String>,
        port: u16,
        tags: Tags,
        mac: MacAddr,
        mtu: u16,
        addrs: Vec<IfAddr>,
    ) -> Self {
        Self {
            name: name.into(),
            port,
            tags,
            mac,
            mtu,
            addrs,
            addrs6: Vec::new(),
            ll6: ipv6::link_local_from_mac(mac),
        }
    }

    /// Whether `a` is one of this interface's IPv6 addresses (its link-local included).
    #[inline]
    pub fn has_addr6(&self, a: Ipv6Addr) -> bool {
        a == self.ll6 || self.addrs6.iter().any(|x| x.addr == a)
    }

    /// The Subnet-Router anycast addresses of this interface (RFC 4291 2.6.1), one per
    /// on-link prefix ([`crate::prefix::If6Addr::subnet_anycast`]), and `fe80::`, that of
    /// the link-local prefix (as Linux joins it), unless an address of the interface is
    /// that address itself (then it is a unicast address of ours). A prefix two addresses
    /// share gives its anycast address twice.
    pub fn subnet_anycast6(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.addrs6
            .iter()
            .filter_map(If6Addr::subnet_anycast)
            .chain([ipv6::LINK_LOCAL_ANYCAST])
            .filter(|a| !self.has_addr6(*a))
    }

    /// Whether `a` is one of this interface's Subnet-Router anycast addresses (and not
    /// one of its unicast addresses).
    pub fn has_anycast6(&self, a: Ipv6Addr) -> bool {
        self.subnet_anycast6().any(|x| x == a)
    }

    /// The IPv6 source address toward `dst` (RFC 6724 5, in its simplest form): the
    /// link-local address for a link-local or link-scope multicast destination; else an
    /// address whose on-link prefix holds `dst`, else the first global address, else the
    /// link-local one.
    pub fn source6_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        if ipv6::is_link_local(dst)
            || ipv6::multicast_scope(dst).is_some_and(|s| s <= ipv6::scope::LINK_LOCAL)
        {
            return self.ll6;
        }
        self.addrs6
            .iter()
            .find(|a| a.subnet().contains(dst))
            .or_else(|| self.addrs6.first())
            .map_or(self.ll6, |a| a.addr)
    }
    /// The primary address, if any.
    pub fn primary(&self) -> Option<Ipv4Addr> {
        self.addrs.first().map(|a| a.addr)
    }

    /// The address to use as source toward `dst`: one whose subnet holds `dst`, else
    /// the primary.
    pub fn source_for(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        self.addrs
            .iter()
            .find(|a| a.subnet().contains(dst))
            .map(|a| a.addr)
            .or_else(|| self.primary())
    }

    /// Whether `a` is one of this interface's addresses.
    pub fn has_addr(&self, a: Ipv4Addr) -> bool {
        self.addrs.iter().any(|x| x.addr == a)
    }
}
