//! `af_packet`: a kernel interface through packet sockets.
//!
//! Each worker has one socket per port. A receiving worker's socket has a TPACKET_V3
//! ring (blocks of 256 KiB the kernel fills and hands over whole, or when the retire
//! timeout of 1 ms passes); several receiving workers join one fanout group, which
//! spreads flows over them by the kernel's flow hash; that hash (`TP_FT_REQ_FILL_RXHASH`)
//! is stamped on each frame for RPS. Every socket transmits with `sendmmsg`, bypassing
//! the qdisc layer (`PACKET_QDISC_BYPASS`) as a NIC driver's queue would be fed.
//!
//! Invariants:
//! - a block is read only after its status says the user owns it (acquire) and handed
//!   back (release) only when every frame in it has been copied out;
//! - the socket is created with protocol 0 and bound to the interface with `ETH_P_ALL`
//!   only once its ring exists, so it never sees another interface's frames;
//! - frames arrive with a virtio-net header (`PACKET_VNET_HDR`): partial checksums are
//!   completed and super-frames become GSO super-packets ([`crate::vnet`]); frames sent
//!   carry one too, which is how `tx-checksum` and `tx-{tcp,udp}-segmentation` reach
//!   the kernel;
//! - the socket does not see its own transmissions (`PACKET_IGNORE_OUTGOING`);
//! - the interface is put in promiscuous mode for the socket's life (the membership is
//!   the socket's: the kernel drops it when the socket closes, even on a crash);
//! - a frame that cannot be taken (no buffer) stays in the ring for the next call; one
//!   the kernel could not fit (ring full) is counted from `PACKET_STATISTICS`;
//! - when the interface disappears the port records a fault and moves nothing more;
//! - while the link is down (the shared [`Link`] state, or a send refused with the
//!   interface found down) frames are freed and counted `link_down`, not sent.
#![allow(unsafe_code)]

use netbatch_wire::ethernet::EtherType;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use netbatch_engine::{Pkt, PktList};

use crate::link::Link;
use crate::sys::{self, Interface, Mmap, PortError};
use crate::vnet::{self, ImportError, RxInfo, StrippedTag, VnetHdr};
use crate::{Carries, Port, PortCx, PortStats, QueueSpec, TxDrops};

/// What an AF_PACKET port carries: TCP and UDP super-packets go whole with their
/// virtio-net header, fraglist chains (`tx-gso-list`) have no such header form.
pub const CARRIES: Carries = Carries {
    tx_offloads_refused: &["tx-gso-list"],
    max_frame: None,
    min_buf_size: None,
};

/// Bytes per ring block.
pub const BLOCK_SIZE: usize = 1 << 18;
/// Blocks per ring (4 MiB).
pub const BLOCKS: usize = 16;
/// The kernel's nominal frame slot (V3 packs frames tightly; this only sizes the request).
const FRAME_SLOT: usize = 2048;
/// A block is handed over at the latest this many milliseconds after its first frame.
const RETIRE_MS: u32 = 1;
/// Frames per `sendmmsg`.
const TX_BATCH: usize = 64;

// Offsets in a block (`tpacket_block_desc` with its `tpacket_hdr_v1`).
const BLK_STATUS: usize = 8;
const BLK_NUM_PKTS: usize = 12;
const BLK_FIRST: usize = 16;
// Offsets in a frame header (`tpacket3_hdr`, then the `sockaddr_ll`).
const H_NEXT: usize = 0;
const H_SNAPLEN: usize = 12;
const H_LEN: usize = 16;
const H_STATUS: usize = 20;
const H_MAC: usize = 24;
const H_RXHASH: usize = 28;
const H_VLAN_TCI: usize = 32;
const H_VLAN_TPID: usize = 36;
const H_PKTTYPE: usize = 48 + 10;

fn rd32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn rd16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// `tpacket_stats_v3`: what `PACKET_STATISTICS` reports (and resets).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Stats3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// Where reading stands in the block being read.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// Frames left in the block.
    left: u32,
    /// Offset of the next frame header in the block.
    off: usize,
}

/// A receive ring.
#[derive(Debug)]
struct Ring {
    map: Mmap,
    /// The block read next.
    block: usize,
    /// The open block, once its status said it is ours.
    cur: Option<Cursor>,
}

impl Ring {
    /// The status word of block `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < BLOCKS);
        // SAFETY: block `i` lies inside the mapping (BLOCKS × BLOCK_SIZE bytes), the
        // status word is 4-byte aligned at offset 8 of a page-aligned block, and the kernel
        // accesses it atomically too: an `AtomicU32` view is how both sides share it.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(i * BLOCK_SIZE + BLK_STATUS).cast()) }
    }

    /// The bytes of block `i`, once its status says the user owns it.
    fn block(&self, i: usize) -> &[u8] {
        // SAFETY: inside the mapping (see `status`); the caller has seen the block's
        // status with TP_STATUS_USER (acquire), after which the kernel does not write the
        // block until its status is set back to TP_STATUS_KERNEL, which only `release`
        // does and which ends every use of this slice (the borrow of `self`).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(i * BLOCK_SIZE), BLOCK_SIZE) }
    }

    /// Hands the current block back to the kernel and moves to the next.
    fn release(&mut self) {
        self.status(self.block)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % BLOCKS;
        self.cur = None;
    }
}

/// One worker's queue of an `af_packet` port.
#[derive(Debug)]
pub struct AfPacketQueue {
    spec: QueueSpec,
    iface: Interface,
    fd: OwnedFd,
    ring: Option<Ring>,
    stats: PortStats,
    /// Frames the kernel dropped for want of ring space (`PACKET_STATISTICS`, which
    /// resets on every read: each read adds here).
    kernel_drops: core::cell::Cell<u64>,
    health: sys::Health,
    /// The interface's link state, shared by the port's queues.
    link: std::sync::Arc<Link>,
    /// Frames not sent because the link was down, not yet reported.
    link_down: u64,
    // Transmit scratch, kept to avoid allocating per call.
    hdrs: Vec<[u8; vnet::LEN]>,
    iov: Vec<libc::iovec>,
    /// Per message: (first iovec, count).
    msg_iov: Vec<(usize, usize)>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the iovec and message scratch hold raw pointers only during one `tx` call
// (rebuilt each time); the socket, the mapping and everything else are owned by the queue, which one
// worker thread uses at a time.
unsafe impl Send for AfPacketQueue {}

/// Opens every worker's queue of one port (`specs`: one per worker, in worker order).
pub fn open(specs: &[QueueSpec]) -> Result<Vec<Box<dyn Port>>, PortError> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    let iface = Interface::lookup(&first.name, &first.interface)?;
    // One fanout group per port and process.
    let group = ((std::process::id() ^ iface.index.wrapping_mul(0x9e37)) & 0xffff) as u16;
    let link = std::sync::Arc::new(Link::new(&first.name, &iface.name, iface.index));
    let mut out: Vec<Box<dyn Port>> = Vec::with_capacity(specs.len());
    for s in specs {
        out.push(Box::new(AfPacketQueue::open(
            s,
            &iface,
            group,
            link.clone(),
        )?));
    }
    Ok(out)
}

impl AfPacketQueue {
    fn open(
        spec: &QueueSpec,
        iface: &Interface,
        group: u16,
        link: std::sync::Arc<Link>,
    ) -> Result<Self, PortError> {
        let port = spec.name.as_str();
        let err = |op: &str| {
            let op = format!("{op} on {}", iface.name);
            move |x: std::io::Error| PortError::sys(port, op, x)
        };
        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
            .map_err(|e| PortError::sys(port, "AF_PACKET socket", e))?;
        let raw = fd.as_raw_fd();
        let one: libc::c_int = 1;
        sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(err("PACKET_VNET_HDR"))?;
        sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
            .map_err(err("PACKET_QDISC_BYPASS"))?;
        let mut ring = None;
        let proto = if spec.rx_member.is_some() {
            let v = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
            sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_VERSION, &v)
                .map_err(err("PACKET_VERSION"))?;
            let req = libc::tpacket_req3 {
                tp_block_size: BLOCK_SIZE as u32,
                tp_block_nr: BLOCKS as u32,
                tp_frame_size: FRAME_SLOT as u32,
                tp_frame_nr: (BLOCK_SIZE / FRAME_SLOT * BLOCKS) as u32,
                tp_retire_blk_tov: RETIRE_MS,
                tp_sizeof_priv: 0,
                tp_feature_req_word: libc::TP_FT_REQ_FILL_RXHASH,
            };
            sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                .map_err(err("PACKET_RX_RING"))?;
            let map = Mmap::of_fd(&fd, BLOCK_SIZE * BLOCKS, 0).map_err(err("mmap of the ring"))?;
            sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
                .map_err(err("PACKET_IGNORE_OUTGOING"))?;
            ring = Some(Ring {
                map,
                block: 0,
                cur: None,
            });
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            0
        };
        let sll = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as u16,
            sll_protocol: proto,
            sll_ifindex: iface.index as i32,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        sys::bind(raw, &sll).map_err(err("bind"))?;
        if spec.rx_member.is_some() {
            let mreq = libc::packet_mreq {
                mr_ifindex: iface.index as i32,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(err("promiscuous mode"))?;
            if spec.rx_members > 1 {
                let arg = libc::c_int::from(group) | ((libc::PACKET_FANOUT_HASH as i32) << 16);
                sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                    .map_err(err("PACKET_FANOUT"))?;
            }
        }
        Ok(Self {
            spec: spec.clone(),
            iface: iface.clone(),
            fd,
            ring,
            stats: PortStats::default(),
            kernel_drops: core::cell::Cell::new(0),
            health: sys::Health::new(&spec.name, &iface.name, iface.index),
            link,
            link_down: 0,
            hdrs: Vec::with_capacity(TX_BATCH),
            iov: Vec::with_capacity(TX_BATCH * 4),
            msg_iov: Vec::with_capacity(TX_BATCH),
            msgs: Vec::with_capacity(TX_BATCH),
        })
    }

    /// Frees `pkts`, counted as not sent for a down link.
    fn drop_link_down(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) {
        let w: u64 = pkts
            .iter()
            .map(|p| cx.pool.get(p).meta.wire_packets())
            .sum();
        self.link_down += w;
        self.stats.tx_link_down += w;
        cx.cache.free_all(pkts);
    }

    /// The interface the queue is on.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Every ~100 ms: is the interface still there, and what did the kernel drop?
    fn check(&mut self, now_ns: u64) {
        if self.health.due(now_ns) {
            self.read_kernel_drops();
        }
    }

    /// Adds what the kernel dropped since the last read (reading resets its counter).
    fn read_kernel_drops(&self) {
        if self.ring.is_none() {
            return;
        }
        if let Ok(s) = sys::getsockopt::<Stats3>(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
        ) {
            self.kernel_drops
                .set(self.kernel_drops.get() + u64::from(s.drops));
        }
    }
}

impl Port for AfPacketQueue {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        self.check(cx.now_ns);
        if self.health.failed() {
            return 0;
        }
        let Some(ring) = self.ring.as_mut() else {
            return 0;
        };
        let (index, room) = (self.spec.index, self.spec.room);
        let (mut n, mut got) = (0, 0);
        while n < max {
            let cur = match ring.cur {
                Some(c) => c,
                None => {
                    if ring.status(ring.block).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                        break;
                    }
                    let b = ring.block(ring.block);
                    let c = Cursor {
                        left: rd32(b, BLK_NUM_PKTS).unwrap_or(0),
                        off: rd32(b, BLK_FIRST).unwrap_or(0) as usize,
                    };
                    ring.cur = Some(c);
                    c
                }
            };
            if cur.left == 0 {
                ring.release();
                continue;
            }
            let b = ring.block(ring.block);
            let Some(h) = b.get(cur.off..) else {
                // A header outside the block: nothing more in it can be trusted.
                self.stats.rx_dropped += u64::from(cur.left);
                ring.release();
                continue;
            };
            let field = |at| rd32(h, at).unwrap_or(0);
            let (next, snap, len, status) = (
                field(H_NEXT),
                field(H_SNAPLEN),
                field(H_LEN),
                field(H_STATUS),
            );
            let mac = usize::from(rd16(h, H_MAC).unwrap_or(0));
            let frame = h.get(mac..mac + snap as usize);
            let vh = mac
                .checked_sub(vnet::LEN)
                .and_then(|at| h.get(at..mac))
                .and_then(|s| <&[u8; vnet::LEN]>::try_from(s).ok());
            let outgoing = h.get(H_PKTTYPE) == Some(&libc::PACKET_OUTGOING);
            let advance = |ring: &mut Ring| {
                ring.cur = Some(Cursor {
                    left: cur.left - 1,
                    off: cur.off + next as usize,
                });
                if next == 0 && cur.left > 1 {
                    // The kernel links every frame but the last.
                    ring.cur = Some(Cursor { left: 0, off: 0 });
                }
            };
            // A frame larger than a block (the kernel kept only its start, `snap < len`)
            // or with offsets outside the block is dropped; our own transmissions skipped.
            let (Some(frame), Some(vh), false, true) = (frame, vh, outgoing, snap >= len) else {
                if !outgoing {
                    self.stats.rx_dropped += 1;
                }
                advance(ring);
                continue;
            };
            let tag = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| StrippedTag {
                tpid: if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                    rd16(h, H_VLAN_TPID).unwrap_or(EtherType::VLAN.0)
                } else {
                    EtherType::VLAN.0
                },
                tci: rd32(h, H_VLAN_TCI).unwrap_or(0) as u16,
            });
            let rx = RxInfo {
                in_port: index,
                room,
                tag,
                hash: field(H_RXHASH),
            };
            match vnet::import(cx, frame, &VnetHdr::parse(vh), &rx) {
                Ok((p, wire)) => {
                    self.stats.rx_packets += u64::from(wire);
                    got += u64::from(wire);
                    self.stats.rx_bytes += u64::from(len);
                    out.push(p);
                    n += 1;
                    advance(ring);
                }
                Err(ImportError::NoBuffer) => {
                    // Stays in the ring: taken when buffers are back (or the ring fills
                    // and the kernel counts the drops).
                    self.stats.rx_nobuf += 1;
                    break;
                }
                Err(ImportError::Refused) => {
                    self.stats.rx_dropped += 1;
                    advance(ring);
                }
            }
        }
        // Hand a finished block back now, not on the next call.
        if let Some(Cursor { left: 0, .. }) = ring.cur {
            ring.release();
        }
        got
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        if !self.link.up() {
            self.drop_link_down(cx, pkts);
            return 0;
        }
        let mut wire = 0;
        let mut retried = false;
        while !self.health.failed() && !pkts.is_empty() {
            let batch = pkts.len().min(TX_BATCH);
            self.hdrs.clear();
            self.iov.clear();
            self.msg_iov.clear();
            for p in pkts.iter().take(batch) {
                let v = cx.pool.get(p);
                let h = VnetHdr::for_tx(v.meta, v.data());
                self.hdrs.push(h.bytes());
                let first = self.iov.len();
                // The header's iovec is filled in once `hdrs` stops moving.
                self.iov.push(libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: vnet::LEN,
                });
                let mut cur: Option<&Pkt> = Some(p);
                while let Some(q) = cur {
                    let w = cx.pool.get(q);
                    let d = w.data();
                    self.iov.push(libc::iovec {
                        iov_base: d.as_ptr() as *mut libc::c_void,
                        iov_len: d.len(),
                    });
                    cur = w.meta.chain.as_ref();
                }
                self.msg_iov.push((first, self.iov.len() - first));
            }
            for (i, &(first, _)) in self.msg_iov.iter().enumerate() {
                self.iov[first].iov_base = self.hdrs[i].as_mut_ptr().cast();
            }
            self.msgs.clear();
            for &(first, count) in &self.msg_iov {
                // SAFETY: `mmsghdr` is a plain C struct for which all-zero bytes are a
                // valid value (null pointers, zero lengths).
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = self.iov[first..].as_mut_ptr();
                m.msg_hdr.msg_iovlen = count;
                self.msgs.push(m);
            }
            let msgs = &mut self.msgs;
            // SAFETY: every message points at live iovecs in `self.iov`, which point at
            // `self.hdrs` and at the data of buffers owned by `pkts`; none of them moves or
            // is freed before the call returns. The kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENXIO) | Some(libc::ENODEV) => {
                        self.health
                            .fail(format!("transmit on {}: {e}", self.iface.name));
                    }
                    // Down (or without carrier) before the link watch said so, or without
                    // one: asked of the kernel on this error path only, so the frames get
                    // the right reason.
                    Some(libc::ENETDOWN) | Some(libc::ENOBUFS)
                        if sys::flags_of(&self.iface.name)
                            .is_some_and(|f| f & libc::IFF_UP as u32 == 0)
                            || sys::carrier_of(&self.iface.name) == Some(false) =>
                    {
                        self.drop_link_down(cx, pkts);
                    }
                    // The link is up again: the socket's error is the one the kernel left
                    // on it when the link went down, reported (and cleared) by this call.
                    // Once more, for the frames' own answer.
                    Some(libc::ENETDOWN) if !retried => {
                        retried = true;
                        continue;
                    }
                    // Queue full, link down, a frame the device refuses: the caller
                    // counts what is left.
                    _ => {}
                }
                break;
            }
            let sent = r as usize;
            for p in pkts.drain(..sent) {
                let v = cx.pool.get(&p);
                let segs = u64::from(v.meta.segs.max(1));
                self.stats.tx_packets += segs;
                self.stats.tx_bytes += u64::from(v.meta.total_len.max(u32::from(v.meta.len)));
                wire += segs;
                cx.cache.free(p);
            }
            if sent == 0 {
                break;
            }
            // A batch sent in part: the next call sends the rest or says why not (the
            // kernel reports a message's error only when it is the first of a call).
        }
        self.stats.tx_refused += pkts.len() as u64;
        wire
    }

    fn tx_drops(&mut self, _cx: &mut PortCx<'_>) -> TxDrops {
        // The kernel answers each send at once (a drop is an error here, not a silent
        // loss), so its `tx_dropped` is not booked as this port's.
        TxDrops {
            link_down: core::mem::take(&mut self.link_down),
            ..TxDrops::default()
        }
    }

    fn link(&self) -> Option<std::sync::Arc<Link>> {
        Some(self.link.clone())
    }

    fn stats(&self) -> PortStats {
        // Up to date at any time, the final report at stop included.
        self.read_kernel_drops();
        let mut s = self.stats;
        s.rx_dropped += self.kernel_drops.get();
        s
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn fault(&self) -> Option<&str> {
        self.health.fault()
    }

    /// The worker is not named: whoever shows the line knows it (`show ports`, the
    /// start log).
    fn describe(&self) -> String {
        match self.spec.rx_member {
            Some(_) => format!(
                "TPACKET_V3 ring {} MiB{}",
                (BLOCK_SIZE * BLOCKS) >> 20,
                if self.spec.rx_members > 1 {
                    format!(", fanout by hash over {} workers", self.spec.rx_members)
                } else {
                    String::new()
                }
            ),
            None => "transmit only".to_string(),
        }
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.ring.as_ref().map(|_| self.fd.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testnet::{Netns, Veth, is_root, serial};
    use netbatch_engine::{Pool, PoolConfig};
    use netbatch_packet::meta::flag;
    use std::time::{Duration, Instant};

    fn spec(iface: &str, worker: usize, rx_member: Option<usize>, rx_members: usize) -> QueueSpec {
        QueueSpec {
            name: "p0".into(),
            index: 1,
            interface: iface.into(),
            worker,
            rx_member,
            rx_members,
            features: netbatch_packet::offload::Features::default(),
            room: 1920,
        }
    }

    fn pool() -> Pool {
        Pool::new(PoolConfig {
            buffers: 4096,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// Receives until `want` frames arrived on `q` or 3 s passed.
    fn receive(q: &mut dyn Port, pool: &Pool, want: usize) -> Vec<(Vec<u8>, u32, u32)> {
        let mut cache = pool.cache();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        while got.len() < want && Instant::now() < deadline {
            let mut l = PktList::new();
            let mut cx = PortCx {
                pool,
                cache: &mut cache,
                now_ns: netbatch_engine::time::mono_ns(),
            };
            q.rx(&mut cx, &mut l, 64);
            for p in l {
                let m = pool.get(&p).meta;
                got.push((crate::frame_bytes(pool, &p), m.flags, m.hash));
                cache.free(p);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cache.flush();
        got
    }

    /// An Ethernet/IPv4/UDP frame from 192.0.2.1:`sport` with a full checksum.
    fn udp_frame(sport: u16, payload: &[u8]) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
            .udp(sport, 7);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    fn send(q: &mut dyn Port, pool: &Pool, frames: &[Vec<u8>]) -> u64 {
        let mut cache = pool.cache();
        let mut l = PktList::new();
        for f in frames {
            let mut p = cache.alloc().unwrap();
            pool.get_mut(&mut p)
                .append(f.len())
                .unwrap()
                .copy_from_slice(f);
            l.push(p);
        }
        let mut cx = PortCx {
            pool,
            cache: &mut cache,
            now_ns: 0,
        };
        let n = q.tx(&mut cx, &mut l);
        assert!(l.is_empty(), "every frame taken");
        cache.flush();
        n
    }

    #[test]
    fn frames_cross_a_veth_both_ways_in_order_with_the_kernel_hash() {
        let _g = serial();
        if !is_root() {
            return;
        }
        let v = Veth::new("ap1");
        let pool = pool();
        let mut a = open(&[spec(&v.a, 0, Some(0), 1)]).unwrap();
        let mut b = open(&[spec(&v.b, 0, Some(0), 1)]).unwrap();
        let frames: Vec<Vec<u8>> = (0..40u16)
            .map(|i| udp_frame(1000 + i % 4, &i.to_be_bytes()))
            .collect();
        assert_eq!(send(b[0].as_mut(), &pool, &frames), 40);
        let got: Vec<_> = receive(a[0].as_mut(), &pool, 40)
            .into_iter()
            .filter(|g| g.0.get(12..14) == Some(&[8, 0]))
            .collect();
        let bytes: Vec<Vec<u8>> = got.iter().map(|g| g.0.clone()).collect();
        assert_eq!(bytes, frames, "same bytes, same order");
        // The kernel's flow hash: one value per flow, four flows.
        let mut hashes: Vec<u32> = got.iter().map(|g| g.2).collect();
        assert!(got.iter().all(|g| g.1 & flag::HASH_VALID != 0));
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), 4);
        // And back.
        assert_eq!(send(a[0].as_mut(), &pool, &frames[..5]), 5);
        let back: Vec<Vec<u8>> = receive(b[0].as_mut(), &pool, 5)
            .into_iter()
            .map(|g| g.0)
            .collect();
        assert_eq!(back, frames[..5].to_vec());
        let s = a[0].stats();
        assert_eq!((s.rx_packets, s.tx_packets, s.rx_dropped), (40, 5, 0));
        drop((a, b));
        assert_eq!(pool.free_in_pool(), 4096, "every buffer back");
    }

    #[test]
    fn partial_checksums_from_the_kernel_are_completed() {
        let _g = serial();
        if !is_root() {
            return;
        }
        let v = Veth::new("ap2");
        let ns = Netns::new("ap2");
        ns.take(&v.b, "192.0.2.1/24");
        // The kernel in the namespace sends UDP to 192.0.2.2 (resolved statically to our
        // end), with the checksum left to the device: veth offloads it.
        ns.run(&format!(
            "ip neigh add 192.0.2.2 lladdr {} dev {} nud permanent",
            v.mac_a(),
            v.b
        ));
        let pool = pool();
        let mut a = open(&[spec(&v.a, 0, Some(0), 1)]).unwrap();
        ns.run("python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b'netbatch %d' % i, ('192.0.2.2', 7)) for i in range(3)]\"");
        let got = receive(a[0].as_mut(), &pool, 3);
        let udp: Vec<_> = got.iter().filter(|g| g.0.get(23) == Some(&17)).collect();
        assert_eq!(udp.len(), 3, "three datagrams");
        for (i, g) in udp.iter().enumerate() {
            let f = &g.0;
            let ip = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
            let u = etherparse::UdpHeaderSlice::from_slice(&f[34..]).unwrap();
            let want = u
                .to_header()
                .calc_checksum_ipv4(&ip.to_header(), &f[42..])
                .unwrap();
            assert_eq!(u.checksum(), want, "datagram {i}: checksum completed");
            assert_eq!(&f[42..], format!("netbatch {i}").as_bytes());
            assert_ne!(g.1 & flag::L4_CSUM_OK, 0);
        }
    }

    #[test]
    fn fanout_gives_each_flow_to_one_worker() {
        let _g = serial();
        if !is_root() {
            return;
        }
        let v = Veth::new("ap3");
        let pool = pool();
        let mut rx = open(&[spec(&v.a, 0, Some(0), 2), spec(&v.a, 1, Some(1), 2)]).unwrap();
        let mut tx = open(&[spec(&v.b, 0, None, 0)]).unwrap();
        assert!(tx[0].rx_fd().is_none(), "a transmit-only queue has no ring");
        let frames: Vec<Vec<u8>> = (0..64u16).map(|i| udp_frame(2000 + i % 16, &[1])).collect();
        assert_eq!(send(tx[0].as_mut(), &pool, &frames), 64);
        std::thread::sleep(Duration::from_millis(20));
        let (r0, r1) = rx.split_at_mut(1);
        let g0 = receive(r0[0].as_mut(), &pool, 64);
        let g1 = receive(r1[0].as_mut(), &pool, 64 - g0.len());
        assert_eq!(g0.len() + g1.len(), 64, "nothing lost");
        let port = |g: &(Vec<u8>, u32, u32)| u16::from_be_bytes([g.0[34], g.0[35]]);
        for g in &g0 {
            assert!(!g1.iter().any(|h| port(h) == port(g)), "flow split");
        }
    }

    #[test]
    fn a_missing_interface_is_named_and_one_that_goes_away_is_a_fault() {
        let _g = serial();
        if !is_root() {
            return;
        }
        let e = open(&[spec("nb-nosuch1", 0, Some(0), 1)]).err().unwrap();
        assert!(matches!(e, PortError::NoInterface { .. }), "{e}");
        let v = Veth::new("ap4");
        let pool = pool();
        let mut a = open(&[spec(&v.a, 0, Some(0), 1)]).unwrap();
        let name = v.a.clone();
        drop(v);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut cache = pool.cache();
        while a[0].fault().is_none() && Instant::now() < deadline {
            let mut l = PktList::new();
            let mut cx = PortCx {
                pool: &pool,
                cache: &mut cache,
                now_ns: netbatch_engine::time::mono_ns(),
            };
            a[0].rx(&mut cx, &mut l, 64);
            cache.free_all(&mut l);
            std::thread::sleep(Duration::from_millis(10));
        }
        let f = a[0].fault().expect("fault seen").to_string();
        assert_eq!(f, format!("port p0: interface {name} went away"));
    }
}
