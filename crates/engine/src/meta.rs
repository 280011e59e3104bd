//! Per-buffer metadata: the hot block every stage reads, one cache line.
//!
//! Offsets (`data`, `l3`, `l4`) count bytes from the start of the buffer, so pushing or
//! pulling headers moves `data` without invalidating them. `len` is the byte count in
//! this buffer; `total_len` covers the buffer chain of a GSO super-packet (equal to `len`
//! for a plain packet). Everything is reset to the template on allocation.

use crate::pool::Pkt;

/// Per-packet flags (bit set in [`Meta::flags`]).
pub mod flag {
    /// L2 destination was one of our MAC addresses.
    pub const L2_HOST: u32 = 1 << 0;
    /// L2 destination was broadcast.
    pub const L2_BROADCAST: u32 = 1 << 1;
    /// L2 destination was a multicast group.
    pub const L2_MULTICAST: u32 = 1 << 2;
    /// The frame carried at least one VLAN tag (`Meta::vlan` holds the outer VID).
    pub const VLAN: u32 = 1 << 3;
    /// The IPv4 header checksum has been verified.
    pub const IP_CSUM_OK: u32 = 1 << 4;
    /// The L4 checksum has been verified (by us or by the device).
    pub const L4_CSUM_OK: u32 = 1 << 5;
    /// The L4 checksum is partial (only the pseudo-header sum is filled in, as a device
    /// with TX checksum offload expects); it must be completed before leaving on a port
    /// without that offload.
    pub const L4_CSUM_PARTIAL: u32 = 1 << 6;
    /// The packet is followed through the stages (opt-in trace).
    pub const TRACE: u32 = 1 << 7;
    /// The IPv4 destination is one of our addresses (set by routing).
    pub const LOCAL: u32 = 1 << 8;
    /// The packet was originated by this host (not received).
    pub const ORIGINATED: u32 = 1 << 9;
    /// The packet was routed through the forwarding path.
    pub const FORWARDED: u32 = 1 << 10;
    /// L3 destination is a broadcast address (limited or directed).
    pub const L3_BROADCAST: u32 = 1 << 11;
    /// L3 destination is a multicast group.
    pub const L3_MULTICAST: u32 = 1 << 12;
    /// The device supplied `hash`.
    pub const HASH_VALID: u32 = 1 << 13;
    /// `Meta::csum_payload` holds this buffer's payload sum (GRO recorded it).
    pub const PAYLOAD_SUM: u32 = 1 << 14;
    /// A super-packet built by GRO: every chained buffer keeps its own received headers
    /// in front of its data (at its `l3`), so GSO gives each segment its own headers
    /// back instead of building them.
    pub const GRO_CHAIN: u32 = 1 << 15;
}

/// Kinds of GSO super-packet (in [`Meta::gso_type`]).
pub mod gso {
    /// A plain packet.
    pub const NONE: u8 = 0;
    /// TCP over IPv4, payload merged (standard GRO): segment at `gso_size` bytes.
    pub const TCPV4: u8 = 1;
    /// UDP over IPv4, payload merged (standard UDP GRO / UDP_SEGMENT).
    pub const UDPV4: u8 = 2;
    /// A chain of complete packets (fraglist GRO): each buffer in the chain is one
    /// wire packet with its own headers (pulled, so the data is its payload).
    pub const FRAGLIST_TCPV4: u8 = 3;
    /// As [`FRAGLIST_TCPV4`] for UDP.
    pub const FRAGLIST_UDPV4: u8 = 4;
    /// Flag bit: the segments share one IPv4 identification (GRO saw them fixed), so GSO
    /// must not increment it.
    pub const FIXED_ID: u8 = 0x80;
    /// Mask of the kind without flag bits.
    pub const KIND: u8 = 0x7f;
}

/// The hot metadata of one buffer.
#[derive(Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Meta {
    /// Offset of the first packet byte in the buffer.
    pub data: u16,
    /// Packet bytes in this buffer.
    pub len: u16,
    /// Port the packet arrived on (or, for originated packets, `u16::MAX`).
    pub in_port: u16,
    /// Logical interface chosen for transmission (set by routing), `u16::MAX` if none.
    pub out_if: u16,
    /// Offset of the L3 header in the buffer (valid once L2 has run).
    pub l3: u16,
    /// Offset of the L4 header in the buffer (valid once L3 input has run).
    pub l4: u16,
    /// Outer VLAN id, when [`flag::VLAN`] is set.
    pub vlan: u16,
    /// Why the packet was dropped, or the ICMP error it should cause (a
    /// `DropReason` value; 0 while the packet is alive).
    pub reason: u16,
    /// [`flag`] bits.
    pub flags: u32,
    /// Flow hash (from the device, or computed for RPS/GRO).
    pub hash: u32,
    /// IPv4 next hop chosen by routing (big-endian address bits), for the neighbour stage.
    pub next_hop: u32,
    /// Firewall mark.
    pub mark: u32,
    /// Total bytes of the packet over its buffer chain.
    pub total_len: u32,
    /// GSO segment payload size (0 = not a super-packet).
    pub gso_size: u16,
    /// Number of wire packets this buffer (chain) stands for (1 for a plain packet).
    pub segs: u16,
    /// [`gso`] kind.
    pub gso_type: u8,
    /// Free byte for the stage that owns the packet right now.
    pub scratch8: u8,
    /// Logical interface the packet arrived on (port, or a VLAN sub-interface of it),
    /// set by L2 input.
    pub in_if: u16,
    /// Free word for the stage that owns the packet right now (e.g. a socket index).
    pub scratch: u32,
    /// Next buffer of a chain (payload continuation or, for fraglist, the next packet).
    pub chain: Option<Pkt>,
    /// Ones' complement sum of this buffer's L4 payload, as GRO recorded it when it
    /// validated the segment's checksum: GSO checksums a rebuilt segment from its headers
    /// and this sum without reading the payload again. Valid when [`flag::PAYLOAD_SUM`]
    /// is set.
    pub csum_payload: u32,
    /// Receive timestamp in TSC ticks (for latency measurement), 0 if not taken.
    pub rx_tsc: u64,
}

impl Meta {
    /// The template every buffer is reset to on allocation.
    #[inline(always)]
    pub const fn new(headroom: u16) -> Self {
        Self {
            data: headroom,
            len: 0,
            in_port: 0,
            out_if: u16::MAX,
            l3: 0,
            l4: 0,
            vlan: 0,
            reason: 0,
            flags: 0,
            hash: 0,
            next_hop: 0,
            mark: 0,
            total_len: 0,
            gso_size: 0,
            segs: 1,
            gso_type: gso::NONE,
            scratch8: 0,
            in_if: 0,
            scratch: 0,
            chain: None,
            csum_payload: 0,
            rx_tsc: 0,
        }
    }

    /// Resets to the template (the chain must already be empty).
    #[inline(always)]
    pub(crate) fn reset(&mut self, headroom: u16) {
        debug_assert!(self.chain.is_none());
        *self = Self::new(headroom);
    }

    /// Wire packets this buffer stands for (1 unless it is a GSO super-packet).
    #[inline(always)]
    pub fn wire_packets(&self) -> u64 {
        u64::from(self.segs.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_metadata_fits_one_cache_line() {
        assert_eq!(size_of::<Meta>(), 64);
        assert_eq!(align_of::<Meta>(), 64);
    }
}
