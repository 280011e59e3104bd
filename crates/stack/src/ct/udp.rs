//! UDP (and other datagram protocols with ports: UDP-Lite, SCTP as a datagram flow):
//! unreplied until the first datagram of the reply direction, then assured and kept for
//! the stream timeout (Linux's `nf_conntrack_udp_packet`: `udp_timeout` 30 s while
//! unreplied, `udp_timeout_stream` 120 s once replied).

use super::timeouts::Timeouts;

/// The timeout in seconds of a datagram flow, replied or not, and whether it is assured.
pub fn timeout(t: &Timeouts, replied: bool) -> (u32, bool) {
    if replied {
        (t.udp_stream, true)
    } else {
        (t.udp, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replied_flows_are_assured_streams() {
        let t = Timeouts::default();
        assert_eq!(timeout(&t, false), (30, false));
        assert_eq!(timeout(&t, true), (120, true));
    }
}
