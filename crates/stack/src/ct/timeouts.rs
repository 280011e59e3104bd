//! How long an idle connection is kept, per protocol and state: Linux's defaults
//! (`nf_conntrack_tcp_timeout_*`, `nf_conntrack_udp_timeout{,_stream}`,
//! `nf_conntrack_icmp{,v6}_timeout`, `nf_conntrack_generic_timeout`, as
//! Documentation/networking/nf_conntrack-sysctl.rst lists them), each configurable.

use super::tcp::TcpState;

/// Seconds an idle connection lives, by protocol and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP: SYN sent, no answer (`tcp_timeout_syn_sent`, 120 s).
    pub tcp_syn_sent: u32,
    /// TCP: SYN/ACK seen, waiting for the final ACK (`tcp_timeout_syn_recv`, 60 s).
    pub tcp_syn_recv: u32,
    /// TCP: established (`tcp_timeout_established`, 5 days).
    pub tcp_established: u32,
    /// TCP: a FIN seen (`tcp_timeout_fin_wait`, 120 s).
    pub tcp_fin_wait: u32,
    /// TCP: a FIN acknowledged, the other side still open (`tcp_timeout_close_wait`, 60 s).
    pub tcp_close_wait: u32,
    /// TCP: both FINs seen, the last not acknowledged (`tcp_timeout_last_ack`, 30 s).
    pub tcp_last_ack: u32,
    /// TCP: closed both ways (`tcp_timeout_time_wait`, 120 s).
    pub tcp_time_wait: u32,
    /// TCP: reset (`tcp_timeout_close`, 10 s).
    pub tcp_close: u32,
    /// TCP: retransmissions beyond `tcp_max_retrans` without an acceptable ACK
    /// (`tcp_timeout_max_retrans`, 300 s).
    pub tcp_max_retrans: u32,
    /// TCP: data sent and not acknowledged (`tcp_timeout_unacknowledged`, 300 s).
    pub tcp_unacknowledged: u32,
    /// UDP: no reply seen yet (`udp_timeout`, 30 s).
    pub udp: u32,
    /// UDP: replied, a stream (`udp_timeout_stream`, 120 s).
    pub udp_stream: u32,
    /// ICMP and ICMPv6 echo (`icmp_timeout`, `icmpv6_timeout`, 30 s).
    pub icmp: u32,
    /// Other protocols (`generic_timeout`, 600 s).
    pub generic: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        const MIN: u32 = 60;
        Self {
            tcp_syn_sent: 2 * MIN,
            tcp_syn_recv: 60,
            tcp_established: 5 * 24 * 60 * MIN,
            tcp_fin_wait: 2 * MIN,
            tcp_close_wait: 60,
            tcp_last_ack: 30,
            tcp_time_wait: 2 * MIN,
            tcp_close: 10,
            tcp_max_retrans: 5 * MIN,
            tcp_unacknowledged: 5 * MIN,
            udp: 30,
            udp_stream: 120,
            icmp: 30,
            generic: 600,
        }
    }
}

impl Timeouts {
    /// The configurable names (the `[conntrack.timeouts]` keys) and a setter for each.
    pub const KEYS: [&'static str; 14] = [
        "tcp_syn_sent",
        "tcp_syn_recv",
        "tcp_established",
        "tcp_fin_wait",
        "tcp_close_wait",
        "tcp_last_ack",
        "tcp_time_wait",
        "tcp_close",
        "tcp_max_retrans",
        "tcp_unacknowledged",
        "udp",
        "udp_stream",
        "icmp",
        "generic",
    ];

    /// The field named `key` (one of [`Self::KEYS`]).
    pub fn field(&mut self, key: &str) -> Option<&mut u32> {
        Some(match key {
            "tcp_syn_sent" => &mut self.tcp_syn_sent,
            "tcp_syn_recv" => &mut self.tcp_syn_recv,
            "tcp_established" => &mut self.tcp_established,
            "tcp_fin_wait" => &mut self.tcp_fin_wait,
            "tcp_close_wait" => &mut self.tcp_close_wait,
            "tcp_last_ack" => &mut self.tcp_last_ack,
            "tcp_time_wait" => &mut self.tcp_time_wait,
            "tcp_close" => &mut self.tcp_close,
            "tcp_max_retrans" => &mut self.tcp_max_retrans,
            "tcp_unacknowledged" => &mut self.tcp_unacknowledged,
            "udp" => &mut self.udp,
            "udp_stream" => &mut self.udp_stream,
            "icmp" => &mut self.icmp,
            "generic" => &mut self.generic,
            _ => return None,
        })
    }

    /// The timeout of a TCP connection in `state`, in seconds.
    pub fn tcp(&self, state: TcpState) -> u32 {
        match state {
            TcpState::None | TcpState::SynSent | TcpState::SynSent2 => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
        }
    }
}

/// Nanoseconds in `s` seconds.
#[inline(always)]
pub const fn ns(s: u32) -> u64 {
    s as u64 * 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's defaults as nf_conntrack-sysctl.rst states them.
    #[test]
    fn defaults_are_linux_defaults() {
        let t = Timeouts::default();
        assert_eq!(t.tcp_established, 432_000);
        assert_eq!(t.tcp_syn_sent, 120);
        assert_eq!(t.tcp_syn_recv, 60);
        assert_eq!(t.tcp_time_wait, 120);
        assert_eq!(t.tcp_close, 10);
        assert_eq!((t.udp, t.udp_stream, t.icmp, t.generic), (30, 120, 30, 600));
        let mut t = t;
        for k in Timeouts::KEYS {
            assert!(t.field(k).is_some(), "{k}");
        }
        assert!(t.field("tcp_listen").is_none());
    }
}
