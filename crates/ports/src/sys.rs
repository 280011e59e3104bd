//! The kernel-facing layer the real ports share: interface lookup, sockets, socket
//! options, shared-memory rings, and the errors they give.
//!
//! Every error names the port and the operation that failed; a refused privilege says
//! which capability is missing, so `netbatch run` can tell the user what to do.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// Why a kernel-backed port could not be opened or stopped working.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The interface does not exist.
    #[error("port {port}: interface {iface:?} not found")]
    NoInterface {
        /// The port's configured name.
        port: String,
        /// The kernel interface.
        iface: String,
    },
    /// A system call failed.
    #[error("port {port}: {op}: {err}{}", privilege_hint(err))]
    Sys {
        /// The port's configured name.
        port: String,
        /// What was being done.
        op: String,
        /// The kernel's answer.
        err: io::Error,
    },
    /// The interface or kernel cannot do what the configuration asks.
    #[error("port {port}: {what}")]
    Unsupported {
        /// The port's configured name.
        port: String,
        /// What is missing.
        what: String,
    },
}

/// The hint added to a refused privilege.
fn privilege_hint(err: &io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (run as root, or grant CAP_NET_RAW and CAP_NET_ADMIN; AF_XDP also needs CAP_BPF or CAP_SYS_ADMIN)"
        }
        _ => "",
    }
}

impl PortError {
    /// A failed system call on port `port`.
    pub fn sys(port: &str, op: impl Into<String>, err: io::Error) -> Self {
        Self::Sys {
            port: port.into(),
            op: op.into(),
            err,
        }
    }
}

/// A kernel interface: its index, MAC address and MTU, read when the port opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name.
    pub name: String,
    /// Index.
    pub index: u32,
    /// Hardware address.
    pub mac: [u8; 6],
    /// MTU.
    pub mtu: u32,
}

impl Interface {
    /// Looks `name` up for port `port`.
    pub fn lookup(port: &str, name: &str) -> Result<Self, PortError> {
        let missing = || PortError::NoInterface {
            port: port.into(),
            iface: name.into(),
        };
        let index = ifindex(name).ok_or_else(missing)?;
        let mac = mac_of(name).ok_or_else(missing)?;
        let mtu = mtu_of(name).ok_or_else(missing)?;
        Ok(Self {
            name: name.into(),
            index,
            mac,
            mtu,
        })
    }

    /// Whether the interface still exists under the same index (an interface that was
    /// deleted, or deleted and re-created, is gone for the sockets bound to it).
    pub fn present(&self) -> bool {
        ifindex(&self.name) == Some(self.index)
    }

    /// Receive queues the interface has (1 when the kernel does not say).
    pub fn rx_queues(&self) -> u32 {
        if self.name.contains('/') || self.name.starts_with('.') {
            return 1;
        }
        std::fs::read_dir(format!("/sys/class/net/{}/queues", self.name))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count() as u32
            })
            .unwrap_or(1)
            .max(1)
    }
}

/// How often a queue checks that its interface is still there.
pub const HEALTH_CHECK_NS: u64 = 100_000_000;

/// Whether a kernel-backed queue still works: its interface is looked for at most every
/// [`HEALTH_CHECK_NS`] (a deleted, or deleted and re-created, interface is gone for the
/// sockets bound to it), and the first fault is kept, naming the port.
#[derive(Debug, Clone)]
pub struct Health {
    port: String,
    iface: String,
    /// The interface's index; 0 when it is not looked for (it lives in another network
    /// namespace than the workers').
    ifindex: u32,
    next_ns: u64,
    fault: Option<String>,
}

impl Health {
    /// Watches interface `iface` (index `ifindex`) of port `port`.
    pub fn new(port: &str, iface: &str, ifindex: u32) -> Self {
        Self {
            port: port.into(),
            iface: iface.into(),
            ifindex,
            next_ns: 0,
            fault: None,
        }
    }

    /// Watches nothing but the queue's own errors: for an interface in another network
    /// namespace, whose name means nothing in the workers' (a device that goes away
    /// fails the queue's reads and writes instead).
    pub fn unwatched(port: &str, iface: &str) -> Self {
        Self::new(port, iface, 0)
    }

    /// Looks for the interface if a check is due at `now_ns`; true when a check ran and
    /// found it (the moment for other periodic reads, such as the kernel's drop counters).
    pub fn due(&mut self, now_ns: u64) -> bool {
        if self.fault.is_some() || now_ns < self.next_ns {
            return false;
        }
        self.next_ns = now_ns.saturating_add(HEALTH_CHECK_NS);
        if self.ifindex != 0 && ifindex(&self.iface) != Some(self.ifindex) {
            self.fail(format!("interface {} went away", self.iface));
            return false;
        }
        true
    }

    /// Records a fault (the first one is kept).
    pub fn fail(&mut self, why: impl std::fmt::Display) {
        if self.fault.is_none() {
            self.fault = Some(format!("port {}: {why}", self.port));
        }
    }

    /// The fault, once there is one.
    pub fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    /// Whether the queue has faulted.
    pub fn failed(&self) -> bool {
        self.fault.is_some()
    }
}

/// Whether the process runs with the effective user id 0 (tests that create interfaces
/// need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Bytes of a memory page (what the kernel maps, pins and DMA-maps one at a time).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; a failure (-1) is mapped to the smallest page.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(4096)
}

/// CPU time this process has used so far, user and system, in seconds (all threads).
pub fn cpu_seconds() -> (f64, f64) {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a writable rusage, which getrusage fills in; RUSAGE_SELF is valid.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if r != 0 {
        return (0.0, 0.0);
    }
    // SAFETY: getrusage succeeded, so it initialised the struct (it was zeroed anyway).
    let u = unsafe { u.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(u.ru_utime), secs(u.ru_stime))
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The credentials of the process at the other end of a connected Unix socket, as the
/// kernel recorded them when it connected (`SO_PEERCRED`): pid, uid, gid.
pub fn peer_cred(fd: RawFd) -> io::Result<(i32, u32, u32)> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is a writable ucred and `len` holds its size; the kernel writes at most
    // `len` bytes and updates `len`. A bad descriptor is an error return, not UB.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut c).cast(),
            &raw mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((c.pid, c.uid, c.gid))
}

/// The index of interface `name`.
pub fn ifindex(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; the function
    // only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// An `ifreq` naming `name` (`None` when the name does not fit).
pub fn ifreq(name: &str) -> Option<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return None;
    }
    // SAFETY: `ifreq` is a plain C struct (a name array and a union of plain values) for
    // which all-zero bytes are valid.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Some(r)
}

/// Asks the kernel about interface `name` with `SIOCGIF*` request `req` (through a
/// socket, so the answer is from the caller's network namespace, whatever `/sys` shows).
fn if_ioctl(name: &str, req: libc::c_ulong) -> Option<libc::ifreq> {
    let mut r = ifreq(name)?;
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM, 0).ok()?;
    // SAFETY: the SIOCGIF* requests used here read and write one `ifreq`, which `r` is.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), req, &mut r) };
    (rc == 0).then_some(r)
}

/// The hardware address of interface `name` (`None` when it is missing).
pub fn mac_of(name: &str) -> Option<[u8; 6]> {
    let r = if_ioctl(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *d as u8;
    }
    Some(mac)
}

/// The `IFF_*` flags of interface `name` (`IFF_UP`: administratively up; `IFF_RUNNING`:
/// operationally up, carrier and all).
pub fn flags_of(name: &str) -> Option<u32> {
    let r = if_ioctl(name, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let f = unsafe { r.ifr_ifru.ifru_flags };
    Some(u32::from(f as u16))
}

/// Whether interface `name` has its carrier now (`ETHTOOL_GLINK`: the driver's own
/// answer, at once; `IFF_RUNNING` follows it only when the kernel's link watch has run).
/// `None` when the driver cannot say.
pub fn carrier_of(name: &str) -> Option<bool> {
    /// `ETHTOOL_GLINK`: get the link status.
    const ETHTOOL_GLINK: u32 = 0x0000_000a;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut v = EthtoolValue {
        cmd: ETHTOOL_GLINK,
        data: 0,
    };
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_data = (&raw mut v).cast();
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM, 0).ok()?;
    // SAFETY: SIOCETHTOOL reads the command from, and writes the answer to, the
    // `ethtool_value` that `ifr_data` points at, which `v` is (live for the call).
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCETHTOOL, &mut r) };
    (rc == 0).then_some(v.data != 0)
}

/// The MTU of interface `name`.
pub fn mtu_of(name: &str) -> Option<u32> {
    let r = if_ioctl(name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let m = unsafe { r.ifr_ifru.ifru_mtu };
    u32::try_from(m).ok()
}

/// The last OS error as an `io::Error`.
fn last() -> io::Error {
    io::Error::last_os_error()
}

/// Moves the calling thread, and only it, into the network namespace whose file is
/// `path` (`/run/netns/NAME`, as `ip netns add` makes it): the sockets it opens from then
/// on belong to that namespace. Other threads of the process stay where they are.
pub fn enter_netns(path: &std::path::Path) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: `f` is an open descriptor for the whole call; setns only reads it and
    // changes the calling thread's namespace (the kernel refuses a file that is not a
    // network namespace with EINVAL).
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r < 0 { Err(last()) } else { Ok(()) }
}

/// Opens a socket.
pub fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets a socket option whose value is `*v`.
pub fn setsockopt<T>(fd: RawFd, level: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live `T` of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(last()) } else { Ok(()) }
}

/// Reads a socket option into a `T` (which must be valid for any bytes: a plain C
/// struct or integer).
pub fn getsockopt<T: Copy + Default>(fd: RawFd, level: i32, name: i32) -> io::Result<T> {
    let mut v = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live `T` and `len` its size; the kernel writes at most `len` bytes
    // and `T` is a plain value type for which any bytes are valid (callers pass C structs).
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut v).cast(), &mut len) };
    if r < 0 { Err(last()) } else { Ok(v) }
}

/// Binds a socket to a `sockaddr`-like value.
pub fn bind<T>(fd: RawFd, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` points to a live `T` of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::bind(
            fd,
            (addr as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(last()) } else { Ok(()) }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (a signal ends the wait
/// early too); returns whether any is readable.
pub fn wait_readable(fds: &[RawFd], timeout_ms: i32) -> bool {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a live array of `p.len()` pollfd structures the kernel may write.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    r > 0
}

/// Waits for the events each of `fds` asks for (`POLLIN`, `POLLOUT`) until one is ready
/// or `timeout_ms` passes; the kernel fills each entry's `revents`. Returns how many
/// entries have events (0 on timeout; a signal ends the wait early with 0 too).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfd structures; the
    // kernel reads `fd` and `events` and writes `revents` of each.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = last();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// An eventfd: one thread sleeps in [`wait_readable`] on it (with its ports' receive
/// descriptors), others wake it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new, non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain system call with integer arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(last());
        }
        // SAFETY: the kernel just returned `fd` as a new descriptor nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes it readable (wakes the sleeper).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, a live local. A full counter (EAGAIN)
        // already means "readable", so the result does not matter.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Makes it unreadable again.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into `v`, a live local; EAGAIN (nothing to clear)
        // is fine.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast(), 8) };
    }

    /// Its descriptor.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A shared memory mapping of a socket's rings (unmapped on drop).
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; which thread touches it is governed by the owner
// (one port, one worker).
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at page offset `offset`, shared and populated.
    pub fn of_fd(fd: &OwnedFd, len: usize, offset: i64) -> io::Result<Self> {
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), so no existing
        // memory is affected; failure is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Self { ptr, len }),
            None => Err(io::Error::other("mmap returned a null mapping")),
        }
    }

    /// Anonymous memory of `len` bytes (page aligned, zeroed).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping chosen by the kernel; failure checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Self { ptr, len }),
            None => Err(io::Error::other("mmap returned a null mapping")),
        }
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, once made).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, and nothing borrows the
        // mapping past its owner's life.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_a_missing_interface_is_named() {
        let lo = Interface::lookup("p0", "lo").expect("every Linux host has lo");
        assert_eq!(lo.index, ifindex("lo").unwrap());
        assert_eq!(lo.mac, [0; 6]);
        assert!(lo.mtu >= 1280);
        assert!(lo.present());
        let e = Interface::lookup("uplink", "nb-nosuch0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "port uplink: interface \"nb-nosuch0\" not found"
        );
        assert!(Interface::lookup("p", "../lo").is_err());
    }

    #[test]
    fn refused_privilege_says_what_is_needed() {
        let e = PortError::sys("p1", "socket", io::Error::from_raw_os_error(libc::EPERM));
        let s = e.to_string();
        assert!(s.starts_with("port p1: socket: "), "{s}");
        assert!(s.contains("CAP_NET_RAW"), "{s}");
        let e = PortError::sys("p1", "bind", io::Error::from_raw_os_error(libc::ENODEV));
        assert!(!e.to_string().contains("CAP_"), "{e}");
    }

    #[test]
    fn eventfd_wakes_a_waiter_and_clears() {
        let e = EventFd::new().unwrap();
        assert!(!wait_readable(&[e.fd()], 0), "starts unreadable");
        let fd = e.fd();
        let t = std::thread::spawn(move || wait_readable(&[fd], 5000));
        std::thread::sleep(std::time::Duration::from_millis(20));
        e.wake();
        assert!(t.join().unwrap(), "woken before the timeout");
        e.clear();
        assert!(!wait_readable(&[e.fd()], 0), "cleared");
    }

    /// A file that is no namespace is refused as the kernel refuses it (EINVAL), a
    /// missing one is not found; as root, a thread enters its own namespace again.
    #[test]
    fn entering_a_namespace_needs_a_namespace_file() {
        let e = enter_netns(std::path::Path::new("/dev/null")).unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)),
            "{e}"
        );
        let e = enter_netns(std::path::Path::new("/run/netns/nb-no-such-ns")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        if netbatch_testkit::root("entering a namespace") {
            let t = std::thread::spawn(|| enter_netns(std::path::Path::new("/proc/self/ns/net")));
            t.join().unwrap().expect("own namespace entered");
        }
    }

    #[test]
    fn anonymous_mapping_is_zeroed_and_writable() {
        let m = Mmap::anonymous(8192).unwrap();
        assert_eq!(m.len(), 8192);
        // SAFETY: the mapping is 8192 bytes long and owned here.
        let s = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len()) };
        assert!(s.iter().all(|&b| b == 0));
        s[8191] = 7;
        assert_eq!(s[8191], 7);
    }
}
