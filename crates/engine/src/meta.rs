//! Per-buffer metadata: the hot block every stage reads, one cache line.
//!
//! Offsets (`data`, `l3`, `l4`) count bytes from the start of the buffer, so pushing or
//! pulling headers moves `data` without invalidating them. `len` is the byte count in
//! this buffer; `total_len` covers the buffer chain of a super-packet (equal to `len`
//! for a plain packet). Everything is reset to the template on allocation.

use crate::pool::Pkt;

/// The flag bits the engine and the ports define (in [`Meta::flags`]). The engine keeps
/// the top byte; the stack defines what the other bits mean (its protocol state).
pub mod flag {
    /// Bits reserved for the engine and the ports; the stack's own flags use the rest.
    pub const RESERVED: u32 = 0xff00_0000;
    /// The packet is followed through the stages (opt-in trace).
    pub const TRACE: u32 = 1 << 31;
    /// The device supplied `hash`.
    pub const HASH_VALID: u32 = 1 << 30;
    /// The L4 checksum has been verified (by the stack or by the device).
    pub const L4_CSUM_OK: u32 = 1 << 29;
    /// The L4 checksum is partial (only the pseudo-header sum is filled in, as a device
    /// with transmit checksum offload expects); it must be completed before leaving on a
    /// port without that offload. The packet's `l4` and `l4_type` are recorded (the
    /// dissector's): a port reads there which checksum to complete.
    pub const L4_CSUM_PARTIAL: u32 = 1 << 28;
}

/// A request one stage makes of a later one about a packet, carried in [`Meta::ask`]: a
/// code the stack defines (0: no request) and the request's parameter. The engine never
/// reads it; the stack writes and reads it only through its typed requests (the ICMP
/// error a failure should cause, with the pointer or MTU the message carries), so that a
/// code of one kind is never read as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(2))]
pub struct Ask {
    /// What is asked (a code the stack defines; 0: nothing).
    pub code: u16,
    /// Its parameter (the request's kind says what it means).
    pub param: u32,
}

impl Ask {
    /// No request.
    pub const NONE: Self = Self { code: 0, param: 0 };
}

/// The hot metadata of one buffer.
///
/// The engine reads `data`, `len`, `chain`, `segs` and the trace flag; every other field
/// is written and read by the stack and the ports, which say what the codes in them mean
/// (`l3_type`, `l4_type`, `ask`, `adj`, `gso_type`, the flag bits below the reserved
/// byte). Offsets count bytes from the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Meta {
    /// Offset of the first packet byte in the buffer.
    pub data: u16,
    /// Packet bytes in this buffer.
    pub len: u16,
    /// Port the packet arrived on (or, for originated packets, `u16::MAX`).
    pub in_port: u16,
    /// Logical interface the packet arrived on (a port, or a sub-interface of it).
    pub in_if: u16,
    /// Logical interface chosen for transmission, `u16::MAX` if none.
    pub out_if: u16,
    /// Offset of the L3 header in the buffer (set by the dissector).
    pub l3: u16,
    /// Offset of the L4 header in the buffer (set by the dissector).
    pub l4: u16,
    /// A stage's request to a later stage about this packet (what the stack needs carried
    /// along an arc, e.g. the error message a failure should cause); [`Ask::NONE`] when
    /// none.
    pub ask: Ask,
    /// [`flag`] bits and the stack's own.
    pub flags: u32,
    /// Flow hash (from the device, or computed when steering or coalescing needs one).
    pub hash: u32,
    /// Adjacency chosen by routing (an index the stack defines), for the output stages.
    pub adj: u32,
    /// Firewall mark.
    pub mark: u32,
    /// Total bytes of the packet over its buffer chain.
    pub total_len: u32,
    /// Segment payload size of a super-packet (0 = not a super-packet).
    pub gso_size: u16,
    /// Number of wire packets this buffer (chain) stands for (1 for a plain packet).
    pub segs: u16,
    /// Kind of super-packet (a code the stack defines; 0 for a plain packet).
    pub gso_type: u8,
    /// What the dissector found at `l3` (a code the stack defines; 0: not dissected).
    pub l3_type: u8,
    /// The protocol number the dissector found at `l4`.
    pub l4_type: u8,
    /// Bytes of link-layer header the frame arrived with (set by the dissector).
    pub l2_len: u8,
    /// Next buffer of a chain (payload continuation or, for fraglist, the next packet).
    pub chain: Option<Pkt>,
    /// Ones' complement sum of this buffer's L4 payload, as coalescing recorded it when it
    /// validated the segment's checksum, so that segmentation can checksum a rebuilt
    /// segment from its headers and this sum without reading the payload again (valid
    /// when the stack's flag says so).
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
            in_if: 0,
            out_if: u16::MAX,
            l3: 0,
            l4: 0,
            ask: Ask::NONE,
            flags: 0,
            hash: 0,
            adj: 0,
            mark: 0,
            total_len: 0,
            gso_size: 0,
            segs: 1,
            gso_type: 0,
            l3_type: 0,
            l4_type: 0,
            l2_len: 0,
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

    /// Wire packets this buffer stands for (1 unless it is a super-packet).
    #[inline(always)]
    pub fn wire_packets(&self) -> u64 {
        u64::from(self.segs.max(1))
    }

    /// Bytes of the packet from its first byte on: over its buffer chain when it has
    /// one (`total_len`), else in this buffer (`len`).
    #[inline(always)]
    pub fn packet_len(&self) -> usize {
        if self.chain.is_some() {
            self.total_len as usize
        } else {
            usize::from(self.len)
        }
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
