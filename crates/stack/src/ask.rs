//! Typed requests from the stage that finds a failure to the stage that answers it.
//!
//! A stage that finds an ICMP-worthy failure (no route, TTL expired, a bad option, too big
//! for the next hop) sends the packet on an `error` arc with a [`Request`]: the cause, and
//! the parameter the message carries (the pointer of a Parameter Problem, the MTU of
//! Fragmentation Needed or Packet Too Big, RFC 792, RFC 1191, RFC 4443 §3). The request
//! travels in the packet's `Meta::ask`; nothing else writes or reads that field (the engine
//! carries it without looking, as it carries every field the stack defines).
//!
//! Invariants: each family's causes have codes of their own (IPv4's from 1, IPv6's from
//! 0x601), so a request of one family never reads as the other's; [`Request::of`] finds
//! no request where none was made (`Ask::NONE`); a cause whose message carries no
//! parameter is made with [`Request::new`] and reads back with parameter 0.

use netbatch_engine::{Ask, Meta};

/// A family's causes of ICMP errors, as [`Request`] carries them.
pub trait Cause: Copy + PartialEq + core::fmt::Debug + 'static {
    /// Every cause of the family.
    const ALL: &'static [Self];

    /// Its code in `Meta::ask` (never 0, distinct across families).
    fn code(self) -> u16;

    /// What the request's parameter is for this cause (`"pointer"`, `"mtu"`), or `None`
    /// when the message carries none.
    fn param(self) -> Option<&'static str>;
}

/// A request for the ICMP error `cause` with its `param` (see [`Cause::param`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<C> {
    /// Why the error is sent.
    pub cause: C,
    /// The parameter its message carries (0 for a cause without one).
    pub param: u32,
}

impl<C: Cause> Request<C> {
    /// A request for a cause whose message carries no parameter.
    #[inline(always)]
    pub fn new(cause: C) -> Self {
        debug_assert!(cause.param().is_none(), "{cause:?} carries a parameter");
        Self { cause, param: 0 }
    }

    /// A request for a cause whose message carries `param` (a pointer or an MTU).
    #[inline(always)]
    pub fn with(cause: C, param: u32) -> Self {
        debug_assert!(cause.param().is_some(), "{cause:?} carries no parameter");
        Self { cause, param }
    }

    /// Puts the request in the packet's metadata, for the family's error stage.
    #[inline(always)]
    pub fn put(self, meta: &mut Meta) {
        meta.ask = Ask {
            code: self.cause.code(),
            param: self.param,
        };
    }

    /// The family's request `ask` holds, if it holds one.
    pub fn of(ask: Ask) -> Option<Self> {
        let Ask { code, param } = ask;
        C::ALL
            .iter()
            .find(|c| c.code() == code)
            .map(|&cause| Self { cause, param })
    }

    /// Takes the request out of the packet's metadata (leaving none), if it holds one of
    /// this family.
    pub fn take(meta: &mut Meta) -> Option<Self> {
        let r = Self::of(meta.ask)?;
        meta.ask = Ask::NONE;
        Some(r)
    }
}

/// Both families' request in `ask`, as the trace shows it: the cause and, where its
/// message carries one, the named parameter.
pub fn describe(ask: Ask) -> Option<String> {
    fn text<C: Cause>(r: Request<C>) -> String {
        match r.cause.param() {
            Some(name) => format!("{:?} {name} {}", r.cause, r.param),
            None => format!("{:?}", r.cause),
        }
    }
    Request::<crate::ip4::icmp_error::Cause>::of(ask)
        .map(text)
        .or_else(|| Request::<crate::ip6::Cause>::of(ask).map(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip4::icmp_error::Cause as Cause4;
    use crate::ip6::Cause as Cause6;

    /// Every cause's code is unique across both families and never 0, so a request
    /// reads back as what was put, and never as the other family's.
    #[test]
    fn requests_round_trip_and_never_cross_families() {
        let mut m = Meta::new(0);
        assert_eq!(Request::<Cause4>::of(m.ask), None, "no request by default");
        assert_eq!(Request::<Cause6>::of(m.ask), None);
        for c in Cause4::ALL {
            let r = match c.param() {
                Some(_) => Request::with(c, 1280),
                None => Request::new(c),
            };
            r.put(&mut m);
            assert_eq!(Request::<Cause4>::of(m.ask), Some(r), "{c:?}");
            assert_eq!(Request::<Cause6>::of(m.ask), None, "{c:?} is not IPv6's");
        }
        for c in Cause6::ALL {
            let r = match c.param() {
                Some(_) => Request::with(c, 42),
                None => Request::new(c),
            };
            r.put(&mut m);
            assert_eq!(Request::<Cause4>::of(m.ask), None, "{c:?} is not IPv4's");
            assert_eq!(Request::<Cause6>::take(&mut m), Some(r), "{c:?}");
            assert_eq!(m.ask, Ask::NONE, "take leaves no request");
        }
    }

    /// The parameters named by RFC 792/1191 (IPv4) and RFC 4443 §3 (IPv6): the MTU of
    /// Fragmentation Needed and Packet Too Big, the pointer of Parameter Problem, and none
    /// for the other messages.
    #[test]
    fn parameters_are_the_messages_own() {
        for c in Cause4::ALL {
            let want = match c.icmp() {
                (3, 4) => Some("mtu"),
                (12, _) => Some("pointer"),
                _ => None,
            };
            assert_eq!(c.param(), want, "{c:?}");
        }
        for c in Cause6::ALL {
            let want = match c.icmp().0 {
                2 => Some("mtu"),
                4 => Some("pointer"),
                _ => None,
            };
            assert_eq!(c.param(), want, "{c:?}");
        }
        assert_eq!(
            describe(Request::with(Cause4::FragNeeded, 1400).into_ask()).as_deref(),
            Some("FragNeeded mtu 1400")
        );
        assert_eq!(
            describe(Request::new(Cause6::NoRoute).into_ask()).as_deref(),
            Some("NoRoute")
        );
        assert_eq!(describe(Ask::NONE), None);
    }

    impl<C: Cause> Request<C> {
        fn into_ask(self) -> Ask {
            let mut m = Meta::new(0);
            self.put(&mut m);
            m.ask
        }
    }
}
