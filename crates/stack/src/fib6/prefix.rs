//! IPv6 prefixes (`2001:db8::/32`) as used by IPv6 routes.
//!
//! Invariant: an [`Ipv6Prefix`] has `len <= 128` and no bit set beyond its first `len`
//! bits; every constructor either refuses or clears such bits, so code that holds one
//! never checks again.

use core::fmt;
use core::net::Ipv6Addr;
use core::str::FromStr;

/// An IPv6 prefix: address bits (most significant bit first, as `u128::from(Ipv6Addr)`)
/// and a length; host bits beyond the length are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Prefix {
    addr: u128,
    len: u8,
}

/// Why an IPv6 prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prefix6Error {
    /// Not `addr/len` or `addr`.
    Syntax(String),
    /// Length above 128.
    Length(u8),
    /// Bits set beyond the length (e.g. `2001:db8::1/32`).
    HostBits(String),
}

impl fmt::Display for Prefix6Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(s) => write!(f, "'{s}' is not an IPv6 prefix (addr/len)"),
            Self::Length(l) => write!(f, "prefix length {l} is above 128"),
            Self::HostBits(s) => write!(f, "'{s}' has host bits set beyond its length"),
        }
    }
}

impl std::error::Error for Prefix6Error {}

/// The netmask of a prefix length (`len` ≤ 128; longer lengths give the /128 mask).
#[inline(always)]
pub const fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else if len >= 128 {
        u128::MAX
    } else {
        u128::MAX << (128 - len as u32)
    }
}

impl Ipv6Prefix {
    /// The default route `::/0`.
    pub const DEFAULT: Self = Self { addr: 0, len: 0 };

    /// The prefix `addr/len`, refusing a length above 128 and host bits.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Self, Prefix6Error> {
        if len > 128 {
            return Err(Prefix6Error::Length(len));
        }
        Self::from_bits(u128::from(addr), len)
    }

    /// The prefix of address bits `addr` and length `len`, refusing a length above 128
    /// and host bits.
    pub fn from_bits(addr: u128, len: u8) -> Result<Self, Prefix6Error> {
        if len > 128 {
            return Err(Prefix6Error::Length(len));
        }
        if addr & !mask6(len) != 0 {
            return Err(Prefix6Error::HostBits(format!(
                "{}/{len}",
                Ipv6Addr::from(addr)
            )));
        }
        Ok(Self { addr, len })
    }

    /// The prefix of `addr/len` with host bits cleared (for interface addresses); a
    /// length above 128 is taken as 128.
    pub fn truncating(addr: Ipv6Addr, len: u8) -> Self {
        let len = len.min(128);
        Self {
            addr: u128::from(addr) & mask6(len),
            len,
        }
    }

    /// A host route (`/128`).
    pub fn host(addr: Ipv6Addr) -> Self {
        Self {
            addr: u128::from(addr),
            len: 128,
        }
    }

    /// Network address bits.
    #[inline(always)]
    pub fn bits(&self) -> u128 {
        self.addr
    }

    /// Network address.
    pub fn addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }

    /// Prefix length.
    #[inline(always)]
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether this is the default route `::/0`.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// Whether address bits `a` are inside the prefix.
    #[inline(always)]
    pub fn contains_bits(&self, a: u128) -> bool {
        a & mask6(self.len) == self.addr
    }

    /// Whether `a` is inside the prefix.
    pub fn contains(&self, a: Ipv6Addr) -> bool {
        self.contains_bits(u128::from(a))
    }

    /// Whether every address of `other` is inside this prefix.
    pub fn covers(&self, other: &Self) -> bool {
        self.len <= other.len && self.contains_bits(other.addr)
    }
}

impl fmt::Display for Ipv6Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

impl FromStr for Ipv6Prefix {
    type Err = Prefix6Error;
    /// Parses `addr/len`, or `addr` as a /128; refuses host bits.
    fn from_str(s: &str) -> Result<Self, Prefix6Error> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (
                a,
                l.parse::<u8>()
                    .map_err(|_| Prefix6Error::Syntax(s.into()))?,
            ),
            None => (s, 128),
        };
        let addr: Ipv6Addr = a.parse().map_err(|_| Prefix6Error::Syntax(s.into()))?;
        Self::new(addr, l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsing and formatting follow RFC 4291 2.3 (`address/length`) and RFC 5952 text.
    #[test]
    fn parses_formats_and_refuses_host_bits() {
        let p: Ipv6Prefix = "2001:db8::/32".parse().unwrap();
        assert_eq!(p.bits(), 0x2001_0db8 << 96);
        assert_eq!(p.prefix_len(), 32);
        assert_eq!(p.to_string(), "2001:db8::/32");
        assert!(p.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!p.contains("2001:db9::".parse().unwrap()));
        assert_eq!(
            "2001:db8::1/32".parse::<Ipv6Prefix>(),
            Err(Prefix6Error::HostBits("2001:db8::1/32".into()))
        );
        assert_eq!(
            "2001:db8::/129".parse::<Ipv6Prefix>(),
            Err(Prefix6Error::Length(129))
        );
        assert!(matches!(
            "2001:db8:/32".parse::<Ipv6Prefix>(),
            Err(Prefix6Error::Syntax(_))
        ));
        assert!(matches!(
            "10.0.0.0/8".parse::<Ipv6Prefix>(),
            Err(Prefix6Error::Syntax(_))
        ));
        let h: Ipv6Prefix = "::1".parse().unwrap();
        assert_eq!((h.bits(), h.prefix_len()), (1, 128));
        assert_eq!(h, Ipv6Prefix::host(Ipv6Addr::LOCALHOST));
        assert!("::/0".parse::<Ipv6Prefix>().unwrap().is_default());
        assert_eq!(
            Ipv6Prefix::from_bits(u128::MAX, 128).unwrap().to_string(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"
        );
        assert_eq!(Ipv6Prefix::from_bits(1, 127), {
            Err(Prefix6Error::HostBits("::1/127".into()))
        });
        assert!(!Prefix6Error::Length(200).to_string().is_empty());
    }

    #[test]
    fn masks_truncation_and_cover() {
        assert_eq!(mask6(0), 0);
        assert_eq!(mask6(1), 1 << 127);
        assert_eq!(mask6(64), u128::from(u64::MAX) << 64);
        assert_eq!(mask6(128), u128::MAX);
        assert_eq!(mask6(200), u128::MAX);
        let a: Ipv6Addr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        let t = Ipv6Prefix::truncating(a, 48);
        assert_eq!(t.to_string(), "2001:db8:1::/48");
        assert_eq!(Ipv6Prefix::truncating(a, 255), Ipv6Prefix::host(a));
        let p48: Ipv6Prefix = "2001:db8:1::/48".parse().unwrap();
        let p64: Ipv6Prefix = "2001:db8:1:2::/64".parse().unwrap();
        assert!(p48.covers(&p64) && p48.covers(&p48) && !p64.covers(&p48));
        assert!(Ipv6Prefix::DEFAULT.covers(&p64));
        assert!(
            !"2001:db8:2::/48"
                .parse::<Ipv6Prefix>()
                .unwrap()
                .covers(&p64)
        );
    }
}

/// An interface's IPv6 address with the length of its on-link prefix (`2001:db8::1/64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct If6Addr {
    /// The address.
    pub addr: Ipv6Addr,
    /// The length of its on-link prefix (RFC 4861 2.1).
    pub len: u8,
}

impl If6Addr {
    /// The on-link prefix.
    pub fn subnet(&self) -> Ipv6Prefix {
        Ipv6Prefix::truncating(self.addr, self.len)
    }

    /// The Subnet-Router anycast address of the on-link prefix (RFC 4291 2.6.1: the
    /// prefix with an all-zero interface identifier), which a router answers for on the
    /// interface. None for a /127 or /128 (RFC 6164 6: a point-to-point /127 has no
    /// Subnet-Router anycast address, both of its addresses being the two ends'), nor for
    /// a prefix whose all-zero address is `::`; Linux's `addrconf_join_anycast` makes the
    /// same choices.
    pub fn subnet_anycast(&self) -> Option<Ipv6Addr> {
        let a = self.subnet().addr();
        (self.len < 127 && !a.is_unspecified()).then_some(a)
    }
}

impl fmt::Display for If6Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for If6Addr {
    type Err = Prefix6Error;
    /// Parses `addr/len` (host bits are the point: they are the address).
    fn from_str(s: &str) -> Result<Self, Prefix6Error> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| Prefix6Error::Syntax(s.into()))?;
        let addr: Ipv6Addr = a.parse().map_err(|_| Prefix6Error::Syntax(s.into()))?;
        let len: u8 = l.parse().map_err(|_| Prefix6Error::Syntax(s.into()))?;
        if len > 128 {
            return Err(Prefix6Error::Length(len));
        }
        Ok(Self { addr, len })
    }
}

#[cfg(test)]
mod if6_tests {
    use super::*;

    /// `addr/len` with host bits, its on-link prefix truncated; a missing length, a
    /// length above 128 or an IPv4 address refused.
    #[test]
    fn interface_addresses_parse_with_their_prefix() {
        let a: If6Addr = "2001:db8:1:2::9/64".parse().expect("valid");
        assert_eq!(a.addr, "2001:db8:1:2::9".parse::<Ipv6Addr>().unwrap());
        assert_eq!(a.subnet().to_string(), "2001:db8:1:2::/64");
        assert_eq!(a.to_string(), "2001:db8:1:2::9/64");
        assert_eq!(
            "2001:db8::1/129".parse::<If6Addr>(),
            Err(Prefix6Error::Length(129))
        );
        for bad in ["2001:db8::1", "192.0.2.1/24", "2001:db8::1/x"] {
            assert!(
                matches!(bad.parse::<If6Addr>(), Err(Prefix6Error::Syntax(_))),
                "{bad}"
            );
        }
    }
}
