//! Why a packet was dropped: one enum for the whole datapath, each reason with a stable
//! name and a one-line description (the kernel's `skb_drop_reason`, VPP's error tables).
//!
//! Every packet that leaves the datapath without being transmitted or delivered carries
//! exactly one reason, counted per stage and per worker.

macro_rules! drop_reasons {
    ($($variant:ident = $name:literal : $desc:literal,)*) => {
        /// A drop reason. `#[repr(u16)]`, dense from 0 (`Unspecified` is 0), so it indexes
        /// counter arrays.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum DropReason {
            $(
                #[doc = $desc]
                $variant,
            )*
        }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)*];
            /// Number of reasons (size of a per-reason counter array).
            pub const COUNT: usize = Self::ALL.len();

            /// Stable snake_case name (used in JSON and metrics).
            pub const fn name(self) -> &'static str {
                match self { $(Self::$variant => $name,)* }
            }

            /// One-line description.
            pub const fn description(self) -> &'static str {
                match self { $(Self::$variant => $desc,)* }
            }
        }
    };
}

drop_reasons! {
    Unspecified = "unspecified" : "dropped without a more specific reason",
    StageLeftover = "stage_leftover" : "a stage returned without consuming a packet (bug guard)",
    NoBuffer = "no_buffer" : "packet buffer pool exhausted",
    NoHeadroom = "no_headroom" : "no room in front of the packet for the headers to push",
    PortDown = "port_down" : "output port is down or gone",
    TxRingFull = "tx_ring_full" : "port transmit queue full",
    TxError = "tx_error" : "port refused the frame",
    FrameTooLong = "frame_too_long" : "frame longer than the port accepts",
    BacklogFull = "backlog_full" : "RPS backlog of the target worker full",
    Shutdown = "shutdown" : "still queued when the datapath stopped",
    // L2
    L2Truncated = "l2_truncated" : "frame shorter than an Ethernet header",
    L2OtherHost = "l2_other_host" : "destination MAC is another host's",
    L2UnknownEtherType = "l2_unknown_ethertype" : "no handler for the ethertype",
    L2VlanTruncated = "l2_vlan_truncated" : "VLAN tag cut short",
    L2VlanTooDeep = "l2_vlan_too_deep" : "more than two VLAN tags",
    L2VlanUnknown = "l2_vlan_unknown" : "VLAN not configured on the port",
    L2SourceMulticast = "l2_source_multicast" : "source MAC is multicast or broadcast",
    Ip6Unsupported = "ip6_unsupported" : "IPv6 is not enabled",
    // ARP and neighbours
    ArpMalformed = "arp_malformed" : "ARP packet truncated or with an unknown operation",
    ArpUnsupported = "arp_unsupported" : "ARP for a hardware/protocol pair other than Ethernet/IPv4",
    ArpNotForUs = "arp_not_for_us" : "ARP request for an address that is not ours",
    ArpBadSender = "arp_bad_sender" : "ARP sender address is invalid (multicast, broadcast, ours)",
    NeighQueueFull = "neigh_queue_full" : "too many packets waiting for one unresolved neighbour",
    NeighFailed = "neigh_failed" : "neighbour did not answer ARP",
    NeighTableFull = "neigh_table_full" : "neighbour table full",
    // IPv4 input (RFC 791, RFC 1122 3.2.1, RFC 1812 5.2.2)
    Ip4Truncated = "ip4_truncated" : "IPv4 packet shorter than its header",
    Ip4Version = "ip4_version" : "IP version is not 4",
    Ip4HeaderLen = "ip4_header_len" : "IPv4 header length below 20 bytes",
    Ip4TotalLenShort = "ip4_total_len_short" : "IPv4 total length smaller than the header",
    Ip4TotalLenLong = "ip4_total_len_long" : "IPv4 total length larger than the frame",
    Ip4Checksum = "ip4_checksum" : "IPv4 header checksum wrong",
    Ip4BadOptions = "ip4_bad_options" : "IPv4 options malformed",
    Ip4MartianSource = "ip4_martian_source" : "IPv4 source is not a valid unicast address",
    Ip4MartianDest = "ip4_martian_dest" : "IPv4 destination is not a valid address",
    Ip4FragReassembly = "ip4_frag_reassembly" : "fragment for local delivery (no reassembly)",
    // Netfilter-like hooks
    FilterPrerouting = "filter_prerouting" : "dropped by a PREROUTING rule",
    FilterInput = "filter_input" : "dropped by an INPUT rule",
    FilterForward = "filter_forward" : "dropped by a FORWARD rule",
    FilterOutput = "filter_output" : "dropped by an OUTPUT rule",
    FilterPostrouting = "filter_postrouting" : "dropped by a POSTROUTING rule",
    // Routing and forwarding
    NoRoute = "no_route" : "no route to the destination",
    RouteBlackhole = "route_blackhole" : "route is a blackhole",
    RouteUnreachable = "route_unreachable" : "route is unreachable",
    RouteProhibit = "route_prohibit" : "route is administratively prohibited",
    ForwardingDisabled = "forwarding_disabled" : "not for us and forwarding is off",
    ForwardL2Broadcast = "forward_l2_broadcast" : "unicast IP in a link-layer broadcast or multicast frame is not forwarded",
    TtlExpired = "ttl_expired" : "TTL reached zero in transit",
    FragNeeded = "frag_needed" : "packet larger than the output MTU with DF set",
    FragUnsupported = "frag_unsupported" : "packet larger than the output MTU (no fragmentation)",
    // Local delivery
    UnknownProtocol = "unknown_protocol" : "no handler for the IP protocol",
    UdpTruncated = "udp_truncated" : "UDP header cut short",
    UdpBadLength = "udp_bad_length" : "UDP length field inconsistent with the IP payload",
    UdpChecksum = "udp_checksum" : "UDP checksum wrong",
    NoSocket = "no_socket" : "no socket bound to the UDP destination port",
    SocketQueueFull = "socket_queue_full" : "socket receive queue full",
    TcpNoHandler = "tcp_no_handler" : "TCP to a local address and no host port to hand it to",
    IcmpTruncated = "icmp_truncated" : "ICMP message cut short",
    IcmpChecksum = "icmp_checksum" : "ICMP checksum wrong",
    IcmpBroadcastEcho = "icmp_broadcast_echo" : "echo request to a broadcast or multicast address ignored",
    // GRO/GSO
    GsoFailed = "gso_failed" : "super-packet could not be segmented",
}

impl DropReason {
    /// The reason stored in packet metadata (`Meta::reason`), if any.
    #[inline]
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }

    /// Index into per-reason counter arrays.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_described() {
        let mut names = std::collections::HashSet::new();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(DropReason::from_u16(i as u16), Some(*r));
            assert!(names.insert(r.name()), "duplicate name {}", r.name());
            assert!(
                r.name()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            );
            assert!(!r.description().is_empty() && !r.description().ends_with('.'));
        }
        assert_eq!(DropReason::from_u16(DropReason::COUNT as u16), None);
        // 0 is what `Meta::reason` holds while a packet is alive: no specific reason.
        assert_eq!(DropReason::from_u16(0), Some(DropReason::Unspecified));
    }
}
