//! Why a packet was dropped: a stable name and a one-line description per reason (the
//! kernel's `skb_drop_reason`, VPP's per-node error tables).
//!
//! The engine knows no protocol, so it declares only the reasons of its own and of the
//! devices it moves packets between ([`reason`]); every protocol module of the stack
//! declares its own set with [`reasons!`](crate::reasons), where the stage that drops for
//! them lives. A [`Reason`] is a reference to its declaration: copied freely, compared by
//! identity; names are unique over every set (`check_sets`, which the runtime's test of
//! its `reason_sets` runs over the engine's, the stack's and its own sets).
//!
//! Every packet that leaves the datapath without being transmitted or delivered carries
//! exactly one reason, counted per stage and per worker.

use core::fmt;

/// The declaration of one drop reason.
#[derive(Debug)]
pub struct ReasonInfo {
    /// Stable snake_case name (used in JSON and metrics).
    pub name: &'static str,
    /// One-line description, no final period.
    pub description: &'static str,
}

/// A drop reason.
#[derive(Clone, Copy)]
pub struct Reason(&'static ReasonInfo);

impl Reason {
    /// The reason declared by `info` (use [`reasons!`](crate::reasons) to declare one).
    pub const fn new(info: &'static ReasonInfo) -> Self {
        Self(info)
    }

    /// Stable snake_case name.
    #[inline]
    pub const fn name(self) -> &'static str {
        self.0.name
    }

    /// One-line description.
    #[inline]
    pub const fn description(self) -> &'static str {
        self.0.description
    }
}

impl PartialEq for Reason {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        // Every use of a declared reason points at its one static declaration (a drop
        // counter's lookup is a pointer compare, not a string compare).
        core::ptr::eq(self.0, o.0)
    }
}

impl Eq for Reason {}

impl core::hash::Hash for Reason {
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.0.name.hash(h);
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Reason {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        self.0.name.cmp(o.0.name)
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// Declares a set of drop reasons as a module: one constant per reason, named and
/// described once, and `ALL`, the set in declaration order.
///
/// ```
/// netbatch_engine::reasons! {
///     /// Why the example stage drops.
///     pub mod reason {
///         TOO_SHORT = "example_too_short": "packet shorter than the example header",
///     }
/// }
/// assert_eq!(reason::TOO_SHORT.name(), "example_too_short");
/// assert_eq!(reason::ALL, &[reason::TOO_SHORT]);
/// ```
#[macro_export]
macro_rules! reasons {
    (
        $(#[$m:meta])*
        $vis:vis mod $set:ident {
            $($(#[$cm:meta])* $c:ident = $name:literal : $desc:literal,)+
        }
    ) => {
        $(#[$m])*
        $vis mod $set {
            #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
            enum Idx { $($c,)+ }
            static INFOS: [$crate::drop::ReasonInfo; [$($name),+].len()] = [
                $($crate::drop::ReasonInfo { name: $name, description: $desc },)+
            ];
            $(
                $(#[$cm])*
                #[doc = $desc]
                #[allow(unreachable_pub, dead_code)]
                pub const $c: $crate::drop::Reason =
                    $crate::drop::Reason::new(&INFOS[Idx::$c as usize]);
            )+
            /// Every reason of the set, in declaration order.
            #[allow(unreachable_pub, dead_code)]
            pub const ALL: &[$crate::drop::Reason] = &[$($c,)+];
        }
    };
}

reasons! {
    /// The engine's own reasons and those of the devices it moves packets between.
    pub mod reason {
        STAGE_LEFTOVER = "stage_leftover": "a stage returned without consuming a packet (bug guard)",
        NO_BUFFER = "no_buffer": "packet buffer pool exhausted",
        NO_HEADROOM = "no_headroom": "no room in front of the packet for the headers to push",
        PORT_DOWN = "port_down": "output port is down or gone",
        TX_RING_FULL = "tx_ring_full": "port transmit queue full",
        FRAME_TOO_LONG = "frame_too_long": "frame longer than the port accepts",
        LINK_DOWN = "link_down": "the port's link was down (interface down or no carrier): not sent",
        KERNEL_TX_DROPPED = "kernel_tx_dropped": "handed to the kernel, which dropped it on transmit (the interface's tx_dropped)",
    }
}

/// Checks a family of reason sets: every name unique, snake_case and described (no final
/// period). Returns the first offending name.
pub fn check_sets(sets: &[&[Reason]]) -> Result<(), &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for r in sets.iter().flat_map(|s| s.iter()) {
        let n = r.name();
        let snake = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit());
        let d = r.description();
        if !snake || seen.contains(&n) || d.is_empty() || d.ends_with('.') {
            return Err(n);
        }
        seen.push(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    reasons! {
        mod twice {
            A = "stage_leftover": "the engine's name again",
        }
    }

    #[test]
    fn engine_reasons_are_unique_snake_case_and_described() {
        assert_eq!(check_sets(&[reason::ALL]), Ok(()));
        assert_eq!(
            check_sets(&[reason::ALL, twice::ALL]),
            Err("stage_leftover"),
            "a name declared twice is found"
        );
    }

    #[test]
    fn a_reason_is_equal_only_to_itself() {
        assert_eq!(reason::NO_BUFFER, reason::NO_BUFFER);
        assert_ne!(reason::NO_BUFFER, reason::PORT_DOWN);
        let copy = reason::ALL[1];
        assert!(
            core::ptr::eq(copy.0, reason::NO_BUFFER.0),
            "one declaration"
        );
        assert_eq!(format!("{}", reason::TX_RING_FULL), "tx_ring_full");
        // Two declarations are two reasons, even under one name (which `check_sets`
        // refuses).
        assert_ne!(twice::A, reason::STAGE_LEFTOVER);
    }
}
