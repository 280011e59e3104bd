//! rtnetlink sockets for the mirror: one that listens to the kernel's notifications,
//! one that asks for dumps (so dump replies and notifications never interleave).
//!
//! Invariants:
//! - Messages are framed and parsed by `netlink-packet-core`/`-route`; a datagram whose
//!   framing is wrong yields an error for its rest, a message that does not parse an
//!   error for itself, and the others are still read.
//! - A receive that the kernel could not deliver whole (`ENOBUFS`, a truncated
//!   datagram) is reported as [`RecvError::Lost`]: notifications were lost and only a
//!   dump can tell the current state.
//! - A dump ends at its `NLMSG_DONE`; one the kernel marks inconsistent
//!   (`NLM_F_DUMP_INTR`: the table changed during it) is reported so it can be redone.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NetlinkBuffer, NetlinkHeader,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// `RTNLGRP_LINK`: link changes.
pub(crate) const RTNLGRP_LINK: u32 = 1;
/// `RTNLGRP_NEIGH`: neighbour changes.
pub(crate) const RTNLGRP_NEIGH: u32 = 3;
/// `RTNLGRP_IPV4_IFADDR`: IPv4 address changes.
pub(crate) const RTNLGRP_IPV4_IFADDR: u32 = 5;
/// `RTNLGRP_IPV4_ROUTE`: IPv4 route changes.
pub(crate) const RTNLGRP_IPV4_ROUTE: u32 = 7;
/// `RTNLGRP_IPV6_IFADDR`: IPv6 address changes.
pub(crate) const RTNLGRP_IPV6_IFADDR: u32 = 9;
/// `RTNLGRP_IPV6_ROUTE`: IPv6 route changes.
pub(crate) const RTNLGRP_IPV6_ROUTE: u32 = 11;
/// `RTNLGRP_IPV4_RULE`: IPv4 policy rule changes.
pub(crate) const RTNLGRP_IPV4_RULE: u32 = 8;
/// `RTNLGRP_IPV6_RULE`: IPv6 policy rule changes.
pub(crate) const RTNLGRP_IPV6_RULE: u32 = 19;

/// The largest datagram read (the kernel's dump replies are at most 32 KiB).
const DATAGRAM: usize = 64 * 1024;

/// Why receiving failed.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// Notifications were lost (the socket overran, or a datagram was cut).
    Lost(&'static str),
    /// The socket failed.
    Io(io::Error),
}

/// Why a dump failed.
#[derive(Debug)]
pub(crate) enum DumpError {
    /// The kernel's table changed during the dump: do it again.
    Interrupted,
    /// The kernel refused the request, the socket failed, or no answer came.
    Failed(String),
}

/// One rtnetlink socket of the namespace the calling thread is in.
pub(crate) struct Rtnl {
    sock: Socket,
    buf: Vec<u8>,
    seq: u32,
}

impl Rtnl {
    /// Opens a socket joined to `groups` (`RTNLGRP_*`), with a receive buffer of
    /// `rcvbuf` bytes if non-zero (beyond `rmem_max` when the process may:
    /// `SO_RCVBUFFORCE`).
    pub(crate) fn open(groups: &[u32], rcvbuf: usize) -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        for g in groups {
            sock.add_membership(*g)?;
        }
        if rcvbuf > 0 {
            let size = i32::try_from(rcvbuf).unwrap_or(i32::MAX);
            let forced = netbatch_ports::sys::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &size,
            );
            if forced.is_err() {
                sock.set_rx_buf_sz(size)?;
            }
        }
        Ok(Self {
            sock,
            buf: Vec::with_capacity(DATAGRAM),
            seq: 0,
        })
    }

    /// The socket's descriptor (to wait on).
    pub(crate) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Receives one datagram without waiting: `None` when there is none.
    pub(crate) fn recv(&mut self) -> Result<Option<&[u8]>, RecvError> {
        loop {
            self.buf.clear();
            match self
                .sock
                .recv(&mut self.buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC)
            {
                Ok(n) if n > self.buf.len() => return Err(RecvError::Lost("datagram truncated")),
                Ok(_) => return Ok(Some(&self.buf)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    return Err(RecvError::Lost("socket overrun (ENOBUFS)"));
                }
                Err(e) => return Err(RecvError::Io(e)),
            }
        }
    }

    /// Asks the kernel for a dump of `req`'s kind and hands each message of the reply to
    /// `each` (with its header's flags); the number of messages.
    pub(crate) fn dump(
        &mut self,
        req: RouteNetlinkMessage,
        timeout: Duration,
        mut each: impl FnMut(&RouteNetlinkMessage, u16),
    ) -> Result<usize, DumpError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(req));
        m.finalize();
        let mut out = vec![0; m.buffer_len()];
        m.serialize(&mut out);
        self.sock
            .send_to(&out, &SocketAddr::new(0, 0), 0)
            .map_err(|e| DumpError::Failed(format!("dump request: {e}")))?;
        let deadline = Instant::now() + timeout;
        let (mut n, mut interrupted) = (0, false);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DumpError::Failed(format!(
                    "no end of dump within {timeout:?}"
                )));
            }
            let fd = self.fd();
            if !netbatch_ports::sys::wait_readable(&[fd], left.as_millis().clamp(1, 1000) as i32) {
                continue;
            }
            let d = match self.recv() {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(RecvError::Lost(why)) => return Err(DumpError::Failed(why.into())),
                Err(RecvError::Io(e)) => return Err(DumpError::Failed(e.to_string())),
            };
            for m in messages(d) {
                let m = m.map_err(DumpError::Failed)?;
                if m.header.sequence_number != seq {
                    continue;
                }
                interrupted |= m.header.flags & NLM_F_DUMP_INTR != 0;
                match &m.payload {
                    NetlinkPayload::Done(_) => {
                        return if interrupted {
                            Err(DumpError::Interrupted)
                        } else {
                            Ok(n)
                        };
                    }
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(DumpError::Failed(format!(
                                "the kernel refused the dump: {}",
                                io::Error::from_raw_os_error(-code.get())
                            )));
                        }
                    }
                    NetlinkPayload::InnerMessage(inner) => {
                        n += 1;
                        each(inner, m.header.flags);
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Rtnl {
    /// Sends `req` with `flags` (besides `NLM_F_REQUEST | NLM_F_ACK`) and waits for the
    /// kernel's answer to it: `Ok` on its acknowledgement, else why it refused.
    pub(crate) fn request(
        &mut self,
        req: RouteNetlinkMessage,
        flags: u16,
        timeout: Duration,
    ) -> Result<(), String> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(req));
        m.finalize();
        let mut out = vec![0; m.buffer_len()];
        m.serialize(&mut out);
        self.sock
            .send_to(&out, &SocketAddr::new(0, 0), 0)
            .map_err(|e| format!("request: {e}"))?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no answer within {timeout:?}"));
            }
            let fd = self.fd();
            if !netbatch_ports::sys::wait_readable(&[fd], left.as_millis().clamp(1, 1000) as i32) {
                continue;
            }
            let d = match self.recv() {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(RecvError::Lost(why)) => return Err(why.into()),
                Err(RecvError::Io(e)) => return Err(e.to_string()),
            };
            for m in messages(d) {
                let m = m?;
                if m.header.sequence_number != seq {
                    continue;
                }
                if let NetlinkPayload::Error(e) = &m.payload {
                    return match e.code {
                        None => Ok(()),
                        Some(code) => Err(io::Error::from_raw_os_error(-code.get()).to_string()),
                    };
                }
            }
        }
    }
}

/// The messages of datagram `d`, each parsed, or why it (or the rest of the datagram,
/// when a length is wrong) could not be.
pub(crate) fn messages(d: &[u8]) -> Vec<Result<NetlinkMessage<RouteNetlinkMessage>, String>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < d.len() {
        let rest = &d[off..];
        let len = match NetlinkBuffer::new_checked(rest) {
            Ok(b) => b.length() as usize,
            Err(e) => {
                out.push(Err(format!("bad netlink framing at byte {off}: {e}")));
                break;
            }
        };
        out.push(
            NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len])
                .map_err(|e| format!("undecodable message at byte {off}: {e}")),
        );
        // Messages are aligned to 4 bytes.
        off += len.next_multiple_of(4);
    }
    out
}
