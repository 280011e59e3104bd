//! IPv4 prefixes (`10.0.0.0/8`) as used by routes, rules and interface addresses.

use core::fmt;
use core::net::Ipv4Addr;
use core::str::FromStr;

pub use crate::fib6::{If6Addr, Ipv6Prefix};

/// An IPv4 or IPv6 prefix (a filter rule's address match): written `a.b.c.d/len` or
/// `x:y::/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPrefix {
    /// IPv4.
    V4(Ipv4Prefix),
    /// IPv6.
    V6(Ipv6Prefix),
}

impl IpPrefix {
    /// Whether the address of a packet of family `v6` with bits `a` (an IPv4 address in
    /// the low 32 bits) is in the prefix; never for the other family.
    #[inline]
    pub fn contains_bits(&self, v6: bool, a: u128) -> bool {
        match self {
            Self::V4(p) => !v6 && p.contains_bits(a as u32),
            Self::V6(p) => v6 && p.contains_bits(a),
        }
    }

    /// Whether it is an IPv6 prefix.
    pub fn is_v6(&self) -> bool {
        matches!(self, Self::V6(_))
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(p) => p.fmt(f),
            Self::V6(p) => p.fmt(f),
        }
    }
}

impl FromStr for IpPrefix {
    type Err = String;
    /// An IPv6 prefix when it has a `:`, else IPv4; a bare address is a host prefix.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains(':') {
            s.parse()
                .map(Self::V6)
                .map_err(|e: crate::fib6::Prefix6Error| e.to_string())
        } else {
            s.parse()
                .map(Self::V4)
                .map_err(|e: PrefixError| e.to_string())
        }
    }
}

impl From<Ipv4Prefix> for IpPrefix {
    fn from(p: Ipv4Prefix) -> Self {
        Self::V4(p)
    }
}

/// An IPv4 prefix: address bits and a length; host bits beyond the length are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    addr: u32,
    len: u8,
}

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixError {
    /// Not `a.b.c.d/len` or `a.b.c.d`.
    Syntax(String),
    /// Length above 32.
    Length(u8),
    /// Bits set beyond the length (e.g. `10.0.0.1/8`).
    HostBits(String),
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(s) => write!(f, "'{s}' is not an IPv4 prefix (a.b.c.d/len)"),
            Self::Length(l) => write!(f, "prefix length {l} is above 32"),
            Self::HostBits(s) => write!(f, "'{s}' has host bits set beyond its length"),
        }
    }
}

impl std::error::Error for PrefixError {}

/// The netmask of a prefix length (`len` ≤ 32).
#[inline(always)]
pub const fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

impl Ipv4Prefix {
    /// The prefix `addr/len`, refusing host bits.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self, PrefixError> {
        if len > 32 {
            return Err(PrefixError::Length(len));
        }
        let a = u32::from(addr);
        if a & !mask(len) != 0 {
            return Err(PrefixError::HostBits(format!("{addr}/{len}")));
        }
        Ok(Self { addr: a, len })
    }

    /// The prefix of `addr/len` with host bits cleared (for interface addresses).
    pub fn truncating(addr: Ipv4Addr, len: u8) -> Self {
        let len = len.min(32);
        Self {
            addr: u32::from(addr) & mask(len),
            len,
        }
    }

    /// A host route.
    pub fn host(addr: Ipv4Addr) -> Self {
        Self {
            addr: u32::from(addr),
            len: 32,
        }
    }

    /// Network address bits.
    #[inline(always)]
    pub fn bits(&self) -> u32 {
        self.addr
    }

    /// Network address.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }

    /// Prefix length.
    #[inline(always)]
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether this is the default route `0.0.0.0/0` (the prefix covering everything).
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// Whether `a` (address bits) is inside the prefix.
    #[inline(always)]
    pub fn contains_bits(&self, a: u32) -> bool {
        a & mask(self.len) == self.addr
    }

    /// Whether `a` is inside the prefix.
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        self.contains_bits(u32::from(a))
    }

    /// The subnet's directed broadcast address (for lengths below 31).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        (self.len < 31).then(|| Ipv4Addr::from(self.addr | !mask(self.len)))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = PrefixError;
    /// Parses `a.b.c.d/len`, or `a.b.c.d` as a /32; refuses host bits.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (
                a,
                l.parse::<u8>().map_err(|_| PrefixError::Syntax(s.into()))?,
            ),
            None => (s, 32),
        };
        let addr: Ipv4Addr = a.parse().map_err(|_| PrefixError::Syntax(s.into()))?;
        Self::new(addr, l)
    }
}

/// An interface address: `a.b.c.d/len`, host bits allowed (`10.0.0.1/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: Ipv4Addr,
    /// The length of the connected subnet.
    pub len: u8,
}

impl IfAddr {
    /// The connected subnet.
    pub fn subnet(&self) -> Ipv4Prefix {
        Ipv4Prefix::truncating(self.addr, self.len)
    }
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for IfAddr {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| PrefixError::Syntax(s.into()))?;
        let addr: Ipv4Addr = a.parse().map_err(|_| PrefixError::Syntax(s.into()))?;
        let len: u8 = l.parse().map_err(|_| PrefixError::Syntax(s.into()))?;
        if len > 32 {
            return Err(PrefixError::Length(len));
        }
        Ok(Self { addr, len })
    }
}

/// Address classes that matter to input checks (RFC 1122 3.2.1.3, RFC 1812 5.3.7).
pub mod class {
    /// `0.0.0.0/8`: "this network".
    #[inline(always)]
    pub const fn is_this_network(a: u32) -> bool {
        a >> 24 == 0
    }
    /// `127.0.0.0/8`: loopback.
    #[inline(always)]
    pub const fn is_loopback(a: u32) -> bool {
        a >> 24 == 127
    }
    /// `224.0.0.0/4`: multicast.
    #[inline(always)]
    pub const fn is_multicast(a: u32) -> bool {
        a >> 28 == 0xe
    }
    /// `240.0.0.0/4`: reserved class E, which includes the limited broadcast.
    #[inline(always)]
    pub const fn is_class_e(a: u32) -> bool {
        a >> 28 == 0xf
    }
    /// `255.255.255.255`: limited broadcast.
    #[inline(always)]
    pub const fn is_limited_broadcast(a: u32) -> bool {
        a == u32::MAX
    }
    /// Per first octet: not a valid source (0, 127, 224-255).
    #[expect(
        clippy::indexing_slicing,
        reason = "evaluated when compiling, `i < 256` the table's length"
    )]
    const MARTIAN_SRC: [bool; 256] = {
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = i == 0 || i == 127 || i >= 224;
            i += 1;
        }
        t
    };

    /// Per first octet: not a valid destination, except the limited broadcast (0, 127,
    /// 240-255).
    #[expect(
        clippy::indexing_slicing,
        reason = "evaluated when compiling, `i < 256` the table's length"
    )]
    const MARTIAN_DST: [bool; 256] = {
        let mut t = [false; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = i == 0 || i == 127 || i >= 240;
            i += 1;
        }
        t
    };

    /// Not usable as the source of a datagram from the wire: this-network, loopback,
    /// multicast, class E and broadcast (RFC 1122 3.2.1.3 (a)-(e), RFC 1812 5.3.7). One
    /// table lookup by first octet.
    #[inline(always)]
    #[expect(
        clippy::indexing_slicing,
        reason = "`a >> 24` of a `u32` is below 256, the table's length"
    )]
    pub const fn is_martian_source(a: u32) -> bool {
        MARTIAN_SRC[(a >> 24) as usize]
    }

    /// Not usable as a destination from the wire: this-network, loopback, and class E
    /// other than the limited broadcast.
    #[inline(always)]
    #[expect(
        clippy::indexing_slicing,
        reason = "`a >> 24` of a `u32` is below 256, the table's length"
    )]
    pub const fn is_martian_dest(a: u32) -> bool {
        MARTIAN_DST[(a >> 24) as usize] && !is_limited_broadcast(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_host_bits() {
        let p: Ipv4Prefix = "10.1.0.0/16".parse().unwrap();
        assert_eq!((p.bits(), p.prefix_len()), (0x0a01_0000, 16));
        assert!(p.contains("10.1.255.3".parse().unwrap()));
        assert!(!p.contains("10.2.0.0".parse().unwrap()));
        assert_eq!(
            "10.1.0.1/16".parse::<Ipv4Prefix>(),
            Err(PrefixError::HostBits("10.1.0.1/16".into()))
        );
        assert_eq!(
            "10.0.0.0/33".parse::<Ipv4Prefix>(),
            Err(PrefixError::Length(33))
        );
        assert!(matches!(
            "10.0.0/8".parse::<Ipv4Prefix>(),
            Err(PrefixError::Syntax(_))
        ));
        assert_eq!("0.0.0.0/0".parse::<Ipv4Prefix>().unwrap().bits(), 0);
        assert_eq!("1.2.3.4".parse::<Ipv4Prefix>().unwrap().prefix_len(), 32);
        assert_eq!(p.broadcast(), Some("10.1.255.255".parse().unwrap()));
    }

    #[test]
    fn interface_address_keeps_host_bits() {
        let a: IfAddr = "192.0.2.1/24".parse().unwrap();
        assert_eq!(a.subnet().to_string(), "192.0.2.0/24");
    }

    #[test]
    fn martians_follow_rfc1122() {
        use class::*;
        let a = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
        for m in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(is_martian_source(a(m)), "{m}");
        }
        for ok in ["1.0.0.1", "192.0.2.1", "223.255.255.255", "126.255.255.255"] {
            assert!(!is_martian_source(a(ok)), "{ok}");
        }
        assert!(!is_martian_dest(a("255.255.255.255")));
        assert!(!is_martian_dest(a("224.0.0.5")));
        assert!(is_martian_dest(a("240.0.0.1")));
        assert!(is_martian_dest(a("0.0.0.0")));
        // The tables agree with the class definitions for every first octet.
        for o in 0u32..=255 {
            let x = (o << 24) | 0x0001_0203;
            let by_class = is_this_network(x) || is_loopback(x) || is_multicast(x) || is_class_e(x);
            assert_eq!(is_martian_source(x), by_class, "{o}");
            assert_eq!(
                is_martian_dest(x),
                is_this_network(x) || is_loopback(x) || is_class_e(x),
                "{o}"
            );
        }
    }
}
