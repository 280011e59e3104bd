//! Host interface pairs: a kernel interface stands for each wire port in a control
//! namespace (VPP's linux-cp), so that an unmodified routing daemon there speaks through
//! netbatch's ports.
//!
//! ```text
//!   wire port r1 ──> eth-input ... ──> (what netbatch does not consume) ──> host-punt ──> tap r1
//!   tap r1 (kernel's frames) ──> host-inject ──> tx-r1 (unchanged)
//! ```
//!
//! A wire port's [`Pair::Punt`] names its tap, a tap's [`Pair::Inject`] its wire port.
//! Stages that end a received packet's path without consuming it (TCP to our addresses,
//! UDP without a netbatch socket, ICMP other than echo requests, IP protocols netbatch
//! has no stage for, fragments for us, ARP replies once learned from) send it on their
//! `host` arc when the receiving port is paired; for IPv6 as for IPv4 (upper layers
//! netbatch has no stage for, fragments for us, neighbour advertisements once learned
//! from, and the multicast groups the kernel joined); the kernel then sees the frame as it
//! arrived (its link header back in front) and answers as it would on a wire. Frames the
//! kernel sends through the tap leave by the wire port as they are: the kernel resolved
//! their neighbour and wrote their link header. Neither direction originates or copies a
//! packet: a punted packet is received on the wire port and sent on the tap, an injected
//! one received on the tap and sent on the wire port.
//!
//! Invariants:
//! - only packets received on a paired wire port are punted (`host_no_pair` otherwise:
//!   packets netbatch made itself, or from an unpaired port, never reach a kernel);
//! - the kernel receives wire packets: a super-packet is segmented on the way (the tap
//!   carries no offloads);
//! - an injected frame is at most its wire port's MTU plus its link header
//!   (`host_over_mtu`): the tap's MTU may be changed in the namespace, the wire's not.

pub mod inject;
pub mod punt;

pub use crate::iface::Pair;

netbatch_engine::reasons! {
    /// Why a host interface stage drops a packet.
    pub mod reason {
        NO_PAIR = "host_no_pair": "packet for the host kernel, but its port has no host interface pair",
        OVER_MTU = "host_over_mtu": "frame from the host kernel longer than its wire port's MTU",
        TRUNCATED = "host_truncated": "frame from the host kernel shorter than an Ethernet header",
    }
}

/// Where a stage's `host` arc goes: to `host-punt` with host interface pairs, else a drop
/// (`host_no_pair`: no port is paired then, so the stages never take the arc).
pub const TO_HOST: crate::declare::To = crate::declare::To::Pick(host_or_drop);

fn host_or_drop(o: &crate::assemble::GraphOptions) -> crate::declare::To {
    use crate::declare::To;
    if o.host_pairs {
        To::Node(crate::assemble::node::HOST_PUNT)
    } else {
        To::Drop(reason::NO_PAIR)
    }
}

/// The tap to punt a packet received on `in_port` to, if that port is paired.
#[inline]
pub fn punt_port(host: &crate::host::Host, in_port: u16) -> Option<u16> {
    match host.ports.get(usize::from(in_port)).map(|p| p.pair) {
        Some(Pair::Punt(t)) => Some(t),
        _ => None,
    }
}
