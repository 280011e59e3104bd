//! Device offload features, named as ethtool names them. Ports declare them; the stack
//! reads them to decide GRO at receive and GSO at transmit.

/// Offloads a port accepts on transmit / performs on receive (ethtool feature names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// `rx-gro`: standard TCP GRO.
    pub rx_gro: bool,
    /// `rx-udp-gro-forwarding`: standard UDP GRO for forwarded traffic.
    pub rx_udp_gro_forwarding: bool,
    /// `rx-gro-list`: fraglist GRO.
    pub rx_gro_list: bool,
    /// `tx-tcp-segmentation`: takes TCP super-packets whole (TSO).
    pub tx_tcp_segmentation: bool,
    /// `tx-udp-segmentation`: takes UDP super-packets whole (USO).
    pub tx_udp_segmentation: bool,
    /// `tx-gso-list`: takes fraglist chains whole.
    pub tx_gso_list: bool,
    /// The device completes partial L4 checksums on transmit.
    pub tx_checksum: bool,
    /// `rx-checksum`: the device validates L4 checksums on receive (frames arrive marked
    /// as verified, as a NIC's CHECKSUM_UNNECESSARY).
    pub rx_checksum: bool,
}

impl Features {
    /// Parses an ethtool feature name and sets it; `false` for an unknown name.
    pub fn set(&mut self, name: &str, on: bool) -> bool {
        let f = match name {
            "rx-gro" => &mut self.rx_gro,
            "rx-udp-gro-forwarding" => &mut self.rx_udp_gro_forwarding,
            "rx-gro-list" => &mut self.rx_gro_list,
            "tx-tcp-segmentation" => &mut self.tx_tcp_segmentation,
            "tx-udp-segmentation" => &mut self.tx_udp_segmentation,
            "tx-gso-list" => &mut self.tx_gso_list,
            "tx-checksum" => &mut self.tx_checksum,
            "rx-checksum" => &mut self.rx_checksum,
            _ => return false,
        };
        *f = on;
        true
    }

    /// The names [`Features::set`] knows.
    pub const NAMES: &'static [&'static str] = &[
        "rx-gro",
        "rx-udp-gro-forwarding",
        "rx-gro-list",
        "tx-tcp-segmentation",
        "tx-udp-segmentation",
        "tx-gso-list",
        "tx-checksum",
        "rx-checksum",
    ];

    /// The names of the features that are on, in [`Features::NAMES`] order.
    pub fn names_on(&self) -> Vec<&'static str> {
        let mut probe = *self;
        Self::NAMES
            .iter()
            .copied()
            .filter(|n| {
                // `set` reports the name known; turning it off tells whether it was on.
                let before = probe;
                probe.set(n, false);
                before != probe
            })
            .collect()
    }

    /// Whether any GRO is on (`rx-gro`, `rx-gro-list`, `rx-udp-gro-forwarding`).
    pub fn any_rx_gro(&self) -> bool {
        self.rx_gro || self.rx_gro_list || self.rx_udp_gro_forwarding
    }
}

/// Where a device completes the partial L4 checksum of the packet whose metadata is `m`
/// (marked `L4_CSUM_PARTIAL`, located by the dissector): the L4 header's offset from the
/// packet's first byte, and the checksum field's offset in that header. `None` when the
/// packet is not marked, or its L4 header was not located or has no checksum a device
/// completes.
#[inline]
pub fn partial_checksum(m: &netbatch_engine::Meta) -> Option<(usize, usize)> {
    if m.flags & crate::meta::flag::L4_CSUM_PARTIAL == 0 || m.l4 == 0 {
        return None;
    }
    let field = crate::dissect::L4::of(m.l4_type).checksum_at()?;
    Some((usize::from(m.l4.wrapping_sub(m.data)), field))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let mut f = Features::default();
        assert!(f.names_on().is_empty());
        for n in ["tx-gso-list", "rx-gro"] {
            assert!(f.set(n, true));
        }
        assert!(!f.set("tso", true), "unknown names are refused");
        assert_eq!(f.names_on(), vec!["rx-gro", "tx-gso-list"]);
        assert!(f.any_rx_gro() && f.tx_gso_list && !f.tx_tcp_segmentation);
    }
}
