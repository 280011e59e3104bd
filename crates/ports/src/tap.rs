//! `tap`: frames exchanged with the host kernel through a TAP device.
//!
//! What the kernel sends to the device (its routes through it, its ARP) is received;
//! what netbatch transmits on the port enters the kernel's stack as if from a wire. This is
//! how traffic netbatch does not terminate itself (TCP to a local address, for instance)
//! reaches the host.
//!
//! Invariants:
//! - the device is created (or attached to, when it exists) with `IFF_TAP | IFF_NO_PI |
//!   IFF_VNET_HDR`, one queue per worker (`IFF_MULTI_QUEUE` when there are several), and
//!   set up; it lives as long as its queues unless it was made persistent beforehand;
//! - every frame carries a virtio-net header: the kernel may hand over partial checksums
//!   and TCP/UDP super-frames (offloads turned on with `TUNSETOFFLOAD`), imported as
//!   [`crate::vnet`] says, and takes netbatch's the same way (`tx-checksum`,
//!   `tx-tcp-segmentation`, `tx-udp-segmentation`);
//! - the kernel picks the queue a frame goes to by flow hash, over every queue: so every
//!   worker must receive from a tap port (a queue nobody reads would strand its flows);
//! - reads and writes never block; a full device queue leaves frames to the caller.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use netbatch_engine::{Pkt, PktList};
use netbatch_wire::ethernet::MacAddr;

use crate::sys::{self, PortError};
use crate::vnet::{self, ImportError, RxInfo, VnetHdr};
use crate::{Carries, Port, PortCx, PortStats, QueueSpec};

/// What a TAP port carries: TCP and UDP super-packets go whole with their virtio-net
/// header, fraglist chains (`tx-gso-list`) have no such header form.
pub const CARRIES: Carries = Carries {
    tx_offloads_refused: &["tx-gso-list"],
    max_frame: None,
    min_buf_size: None,
};

/// The largest frame read: a 64 KiB super-frame with its link header and VLAN tag.
const READ_MAX: usize = vnet::LEN + 65_535 + 22;
/// `TUN_F_USO4` (`<linux/if_tun.h>`, not in libc): USO over IPv4.
const TUN_F_USO4: libc::c_uint = 0x20;

/// One worker's queue of a `tap` port.
#[derive(Debug)]
pub struct TapQueue {
    spec: QueueSpec,
    fd: OwnedFd,
    scratch: Vec<u8>,
    /// Transmit scratch: a frame's header and buffers (pointers live during one write).
    iov: Vec<libc::iovec>,
    stats: PortStats,
    health: sys::Health,
}

// SAFETY: the iovec scratch holds raw pointers only during one `tx` call (rebuilt each
// time); the descriptor and buffers are owned by the queue, which one worker thread uses
// at a time.
unsafe impl Send for TapQueue {}

/// Opens every worker's queue of one tap port (`specs`: one per worker).
pub fn open(specs: &[QueueSpec]) -> Result<Vec<Box<dyn Port>>, PortError> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    check_specs(specs)?;
    let multi = specs.len() > 1;
    let mut out: Vec<Box<dyn Port>> = Vec::with_capacity(specs.len());
    for s in specs {
        let mut q = TapQueue::open(s, multi, OFFLOADS)?;
        let name = first.interface.as_str();
        set_up(name).map_err(|e| PortError::sys(&s.name, format!("setting up {name}"), e))?;
        let ifindex = sys::ifindex(name).ok_or_else(|| PortError::NoInterface {
            port: s.name.clone(),
            iface: name.into(),
        })?;
        q.health = sys::Health::new(&s.name, name, ifindex);
        out.push(Box::new(q));
    }
    Ok(out)
}

/// What the tap of a host interface pair carries of its wire port (as linux-cp's pairs
/// do): the kernel sees the port's MAC and MTU on it.
#[derive(Debug, Clone)]
pub struct PairLink {
    /// The control namespace's file (`/run/netns/NAME`) the tap is made in.
    pub netns: std::path::PathBuf,
    /// The wire port's MAC.
    pub mac: MacAddr,
    /// The wire port's L3 MTU.
    pub mtu: u16,
}

/// Opens every worker's queue of the tap of a host interface pair: the device is made
/// (or attached to) in namespace `link.netns`, with `link`'s MAC and MTU, and set up. It
/// takes no offloads: the kernel hands over whole, checksummed wire frames, which leave
/// by the wire port as they are, and takes wire packets. Its name is looked for in that
/// namespace only, so the queues watch their own errors instead (a deleted device fails
/// their reads and writes).
pub fn open_paired(specs: &[QueueSpec], link: &PairLink) -> Result<Vec<Box<dyn Port>>, PortError> {
    let Some(first) = specs.first() else {
        return Ok(Vec::new());
    };
    check_specs(specs)?;
    let port = first.name.clone();
    let name = first.interface.clone();
    let opened = std::thread::scope(|s| {
        s.spawn(|| -> Result<Vec<TapQueue>, PortError> {
            // Only this thread enters the namespace; the device and the descriptors stay
            // where they were made when it ends.
            sys::enter_netns(&link.netns).map_err(|e| {
                PortError::sys(&port, format!("entering {}", link.netns.display()), e)
            })?;
            let multi = specs.len() > 1;
            let mut qs = Vec::with_capacity(specs.len());
            for sp in specs {
                let mut q = TapQueue::open(sp, multi, 0)?;
                q.health = sys::Health::unwatched(&sp.name, &name);
                qs.push(q);
            }
            let fail = |op: &str, e| PortError::sys(&port, format!("{op} {name}"), e);
            set_link(&name, link).map_err(|e| fail("setting the MAC and MTU of", e))?;
            set_up(&name).map_err(|e| fail("setting up", e))?;
            Ok(qs)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(PortError::Unsupported {
                port: port.clone(),
                what: "the thread opening the tap panicked".into(),
            })
        })
    })?;
    Ok(opened
        .into_iter()
        .map(|q| Box::new(q) as Box<dyn Port>)
        .collect())
}

/// Sets interface `name`'s MAC and MTU to `link`'s (`SIOCSIFHWADDR`, `SIOCSIFMTU`), in
/// the calling thread's namespace.
fn set_link(name: &str, link: &PairLink) -> std::io::Result<()> {
    let s = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let bad = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let mut r = sys::ifreq(name).ok_or_else(bad)?;
    // SAFETY: writing plain values into the `sockaddr` member of the union, which
    // SIOCSIFHWADDR reads.
    unsafe {
        r.ifr_ifru.ifru_hwaddr.sa_family = libc::ARPHRD_ETHER;
        for (d, b) in r.ifr_ifru.ifru_hwaddr.sa_data.iter_mut().zip(link.mac.0) {
            *d = b as libc::c_char;
        }
    }
    // SAFETY: SIOCSIFHWADDR reads one `ifreq`, which `r` is.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFHWADDR, &r) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut r = sys::ifreq(name).ok_or_else(bad)?;
    r.ifr_ifru.ifru_mtu = libc::c_int::from(link.mtu);
    // SAFETY: SIOCSIFMTU reads one `ifreq`, which `r` is.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFMTU, &r) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// What every tap port's queues must be: received from on every worker, one name.
fn check_specs(specs: &[QueueSpec]) -> Result<(), PortError> {
    let Some(first) = specs.first() else {
        return Ok(());
    };
    if let Some(s) = specs.iter().find(|s| s.rx_member.is_none()) {
        return Err(PortError::Unsupported {
            port: s.name.clone(),
            what: format!(
                "a tap port must receive on every worker (worker {} does not): the kernel \
                 spreads the host's flows over every queue",
                s.worker
            ),
        });
    }
    let name = &first.interface;
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(PortError::Unsupported {
            port: first.name.clone(),
            what: format!("interface name {name:?} must have 1 to 15 bytes"),
        });
    }
    Ok(())
}

/// Offload flags for `TUNSETOFFLOAD` of a plain tap port: checksums, TSO and USO over
/// IPv4 (without USO on kernels before 6.2).
const OFFLOADS: libc::c_uint = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | TUN_F_USO4;

impl TapQueue {
    /// Makes or attaches to the device in the calling thread's namespace, with
    /// `offloads` (`TUNSETOFFLOAD` flags). Its health is the caller's to set.
    fn open(spec: &QueueSpec, multi: bool, offloads: libc::c_uint) -> Result<Self, PortError> {
        let port = spec.name.as_str();
        let name = spec.interface.as_str();
        let fail = |op: &str, e: std::io::Error| PortError::sys(port, format!("{op} {name}"), e);
        let path = c"/dev/net/tun";
        // SAFETY: `path` is a NUL-terminated string; open only reads it.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(fail(
                "opening /dev/net/tun for",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` was just returned by open and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let Some(mut req) = sys::ifreq(name) else {
            return Err(PortError::Unsupported {
                port: port.into(),
                what: format!("interface name {name:?} must have 1 to 15 bytes"),
            });
        };
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
        if multi {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        req.ifr_ifru.ifru_flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `ifreq`, which `req` is.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            return Err(fail("creating tap", std::io::Error::last_os_error()));
        }
        let mut off = offloads;
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, off) } < 0 {
            // Kernels before 6.2 have no USO on tap.
            off &= !TUN_F_USO4;
            // SAFETY: as above.
            if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, off) } < 0 {
                return Err(fail("offloads of", std::io::Error::last_os_error()));
            }
        }
        Ok(Self {
            spec: spec.clone(),
            fd,
            scratch: vec![0; READ_MAX],
            iov: Vec::with_capacity(8),
            stats: PortStats::default(),
            health: sys::Health::unwatched(port, name),
        })
    }
}

/// Sets interface `name` up (`IFF_UP`), as `ip link set NAME up` does.
fn set_up(name: &str) -> std::io::Result<()> {
    let s = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut r = sys::ifreq(name).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: SIOCGIFFLAGS fills the flags of one `ifreq`, which `r` is.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut r) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just wrote the flags member of the union.
    let f = unsafe { r.ifr_ifru.ifru_flags };
    if f & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    r.ifr_ifru.ifru_flags = f | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads one `ifreq`, which `r` is.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &r) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Port for TapQueue {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn rx(&mut self, cx: &mut PortCx<'_>, out: &mut PktList, max: usize) -> u64 {
        self.health.due(cx.now_ns);
        if self.health.failed() {
            return 0;
        }
        let (mut n, mut got) = (0, 0);
        while n < max {
            // SAFETY: `scratch` is a live, writable buffer of `scratch.len()` bytes.
            let r = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    self.scratch.as_mut_ptr().cast(),
                    self.scratch.len(),
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {}
                    _ => self
                        .health
                        .fail(format!("read from {}: {e}", self.spec.interface)),
                }
                break;
            }
            let r = r as usize;
            let Some((h, frame)) = self.scratch[..r].split_first_chunk::<{ vnet::LEN }>() else {
                self.stats.rx_dropped += 1;
                continue;
            };
            let rx = RxInfo {
                in_port: self.spec.index,
                room: self.spec.room,
                tag: None,
                hash: 0,
            };
            match vnet::import(cx, frame, &VnetHdr::parse(h), &rx) {
                Ok((p, wire)) => {
                    self.stats.rx_packets += u64::from(wire);
                    got += u64::from(wire);
                    self.stats.rx_bytes += frame.len() as u64;
                    out.push(p);
                    n += 1;
                }
                Err(ImportError::NoBuffer) => {
                    // A frame read is out of the device: without buffers it is dropped
                    // (as a NIC drops what it has no buffer for), counted here.
                    self.stats.rx_nobuf += 1;
                    break;
                }
                Err(ImportError::Refused) => self.stats.rx_dropped += 1,
            }
        }
        got
    }

    fn tx(&mut self, cx: &mut PortCx<'_>, pkts: &mut PktList) -> u64 {
        let mut wire = 0;
        let mut taken = 0;
        while !self.health.failed() && taken < pkts.len() {
            let p: &Pkt = &pkts[taken];
            let v = cx.pool.get(p);
            let mut h = VnetHdr::for_tx(v.meta, v.data()).bytes();
            let iov = &mut self.iov;
            iov.clear();
            iov.push(libc::iovec {
                iov_base: h.as_mut_ptr().cast(),
                iov_len: h.len(),
            });
            let mut cur = Some(p);
            while let Some(q) = cur {
                let w = cx.pool.get(q);
                iov.push(libc::iovec {
                    iov_base: w.data().as_ptr() as *mut libc::c_void,
                    iov_len: w.data().len(),
                });
                cur = w.meta.chain.as_ref();
            }
            // SAFETY: the iovecs point at `h` and at the data of buffers `pkts` owns, all
            // alive and unmoved until the call returns; the kernel only reads them.
            let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as i32) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ENOBUFS) => {}
                    Some(libc::EIO) | Some(libc::EBADFD) | Some(libc::ENODEV) => {
                        self.health
                            .fail(format!("write to {}: {e}", self.spec.interface));
                    }
                    // A frame the kernel refuses (bad header): dropped by the caller.
                    _ => {}
                }
                break;
            }
            let segs = u64::from(v.meta.segs.max(1));
            self.stats.tx_packets += segs;
            self.stats.tx_bytes += (r as u64).saturating_sub(vnet::LEN as u64);
            wire += segs;
            taken += 1;
        }
        for p in pkts.drain(..taken) {
            cx.cache.free(p);
        }
        self.stats.tx_refused += pkts.len() as u64;
        wire
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn fault(&self) -> Option<&str> {
        self.health.fault()
    }

    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testnet::{is_root, serial};
    use netbatch_engine::{Pool, PoolConfig};
    use netbatch_wire::checksum;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// Runs `f` on a thread of its own inside a new network namespace (the tap, its
    /// address and the kernel sockets of the test live and die there).
    fn in_new_netns(f: impl FnOnce() + Send + 'static) {
        let t = std::thread::spawn(move || {
            // SAFETY: plain system call; it moves only this thread to a new namespace.
            let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "unshare: {}", std::io::Error::last_os_error());
            f();
        });
        if let Err(e) = t.join() {
            std::panic::resume_unwind(e);
        }
    }

    fn sh(cmd: &str) {
        let o = Command::new("sh").args(["-c", cmd]).output().unwrap();
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    fn spec(worker: usize) -> QueueSpec {
        QueueSpec {
            name: "host".into(),
            index: 2,
            interface: "nbtap0".into(),
            worker,
            rx_member: Some(worker),
            rx_members: 1,
            features: netbatch_packet::offload::Features::default(),
            room: 1920,
        }
    }

    #[test]
    fn frames_go_both_ways_between_netbatch_and_the_host_kernel() {
        let _g = serial();
        if !is_root() {
            return;
        }
        in_new_netns(|| {
            let pool = Pool::new(PoolConfig {
                buffers: 512,
                ..PoolConfig::default()
            })
            .unwrap();
            let mut q = open(&[spec(0)]).unwrap();
            sh("ip link set lo up; ip addr add 192.0.2.1/24 dev nbtap0; \
                ip neigh add 192.0.2.2 lladdr 02:00:00:00:00:02 dev nbtap0 nud permanent");
            let tap_mac = sys::mac_of("nbtap0").expect("asked through a socket of this namespace");

            // Host → netbatch: the kernel's echo request to 192.0.2.2 comes out of the tap.
            let _ = Command::new("ping")
                .args(["-c", "1", "-W", "1", "192.0.2.2"])
                .output();
            let mut cache = pool.cache();
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                let mut l = PktList::new();
                let mut cx = PortCx {
                    pool: &pool,
                    cache: &mut cache,
                    now_ns: netbatch_engine::time::mono_ns(),
                };
                q[0].rx(&mut cx, &mut l, 64);
                for p in l {
                    got.push(crate::frame_bytes(&pool, &p));
                    cache.free(p);
                }
                if got.iter().any(|f| f.get(34) == Some(&8)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let echo = got
                .iter()
                .find(|f| f.get(12..14) == Some(&[8, 0]) && f.get(23) == Some(&1))
                .expect("the kernel's echo request");
            assert_eq!(&echo[0..6], &[2, 0, 0, 0, 0, 2], "to the static neighbour");
            assert_eq!(&echo[6..12], &tap_mac, "from the tap");
            assert_eq!(
                (&echo[26..30], &echo[30..34]),
                (&[192, 0, 2, 1][..], &[192, 0, 2, 2][..])
            );
            assert_eq!(echo[34], 8, "ICMP echo request");

            // Netbatch → host: a UDP datagram whose checksum is left partial, completed by
            // the kernel from the virtio-net header, reaches a kernel socket.
            let sock = std::net::UdpSocket::bind("192.0.2.1:5555").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], tap_mac)
                .ipv4([192, 0, 2, 2], [192, 0, 2, 1], 64)
                .udp(4444, 5555);
            let mut frame = Vec::new();
            b.write(&mut frame, b"from netbatch").unwrap();
            let ps = checksum::fold(checksum::pseudo_header_v4(
                [192, 0, 2, 2].into(),
                [192, 0, 2, 1].into(),
                17,
                21,
            ));
            frame[40..42].copy_from_slice(&ps.to_be_bytes());
            let mut l = vec![crate::partial_packet(&pool, &mut cache, &frame)];
            let mut cx = PortCx {
                pool: &pool,
                cache: &mut cache,
                now_ns: 0,
            };
            assert_eq!(q[0].tx(&mut cx, &mut l), 1);
            let mut buf = [0u8; 64];
            let (n, from) = sock.recv_from(&mut buf).expect("the kernel delivered it");
            assert_eq!(&buf[..n], b"from netbatch");
            assert_eq!(from.to_string(), "192.0.2.2:4444");
            let s = q[0].stats();
            assert_eq!((s.tx_packets, s.rx_dropped), (1, 0));
            drop(q);
            cache.flush();
            assert_eq!(pool.free_in_pool(), 512);
            assert!(
                sys::ifindex("nbtap0").is_none(),
                "the tap goes with its queue"
            );
        });
    }

    #[test]
    fn a_tap_port_must_receive_on_every_worker() {
        let mut s1 = spec(1);
        s1.rx_member = None;
        let e = open(&[spec(0), s1]).err().unwrap();
        assert!(
            e.to_string().contains("must receive on every worker"),
            "{e}"
        );
    }
}
