//! The vhost-user side of a port: the protocol (through `vhost-user-backend`), the
//! socket's connect/accept loop, and the state the workers' queues share with it.
//!
//! Invariants:
//! - every connection gets a new `VhostUserDaemon` with its own guest memory and vrings
//!   (the crate's owner state is per daemon; a second `SET_OWNER` would be refused);
//! - the vrings reach the workers only through [`Shared::slot`], set on the first
//!   `handle_event` of a connection and cleared when it ends; every change bumps
//!   [`Shared::generation`], which a queue reads once per call (one relaxed load);
//! - a worker holds a connection's memory only for one burst (`GuestMemoryAtomic`
//!   snapshot), so a memory table replaced or a peer gone never leaves it reading an
//!   unmapped region;
//! - the epoll thread of a daemon has an exit event, so dropping the daemon after a
//!   disconnect joins it instead of hanging;
//! - a client socket retries with a bounded backoff (100 ms doubling to 1 s), also after
//!   a session that ended in an error, and every wait checks the stop flag.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use vhost::vhost_user::Listener;
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{ShutdownHandle, VhostUserBackendMut, VhostUserDaemon, VringRwLock};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    EventConsumer, EventFlag, EventNotifier, new_event_consumer_and_notifier,
};

use crate::link::Link;

/// The guest memory as the crates share it.
pub(crate) type Mem = GuestMemoryAtomic<GuestMemoryMmap>;

/// Who opens the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// netbatch listens (QEMU's `-chardev socket` without `server=on`, testpmd
    /// `net_virtio_user` without `server=1`).
    Server,
    /// netbatch connects, and reconnects when the peer goes away.
    Client,
}

/// One connection's rings and memory.
pub(crate) struct Conn {
    /// Every vring of the device (receiveq N = 2N, transmitq N = 2N + 1).
    pub(crate) vrings: Vec<VringRwLock>,
    /// The peer's memory.
    pub(crate) mem: Mem,
}

/// A worker's wake-up: the epoll thread posts kicks of its queues here.
pub(crate) struct Wake {
    pub(crate) consumer: EventConsumer,
    notifier: EventNotifier,
    pub(crate) woken: AtomicBool,
}

impl Wake {
    fn post(&self) {
        if !self.woken.swap(true, Ordering::Relaxed) {
            let _ = self.notifier.notify();
        }
    }
}

/// State shared by a port's queues and its socket thread.
pub(crate) struct Shared {
    pub(crate) port: String,
    pub(crate) socket: PathBuf,
    pub(crate) mode: Mode,
    /// Queue pairs offered (one per worker).
    pub(crate) pairs: usize,
    pub(crate) queue_size: u16,
    /// Virtio features offered.
    pub(crate) offered: u64,
    /// Virtio features the peer acked (0 until it does).
    pub(crate) acked: AtomicU64,
    pub(crate) slot: Mutex<Option<Arc<Conn>>>,
    pub(crate) generation: AtomicU64,
    pub(crate) wake: Vec<Wake>,
    pub(crate) link: Arc<Link>,
    stop: AtomicBool,
    shutdown: Mutex<Option<ShutdownHandle>>,
    /// Connections made, in all.
    pub(crate) connections: AtomicU64,
    /// Connections that ended.
    pub(crate) disconnects: AtomicU64,
    /// Chains refused, by [`super::chain::Malformed`] reason.
    pub(crate) malformed: [AtomicU64; 7],
    /// Queue pairs with a ring not in one region (see `VhostQueue::open`).
    pub(crate) rings_unmapped: AtomicU64,
    /// Whether EVENT_IDX was negotiated.
    pub(crate) event_idx: AtomicBool,
    done: Mutex<bool>,
}

impl Shared {
    pub(crate) fn new(
        port: &str,
        socket: PathBuf,
        mode: Mode,
        pairs: usize,
        queue_size: u16,
        offered: u64,
    ) -> std::io::Result<Self> {
        let mut wake = Vec::with_capacity(pairs);
        for _ in 0..pairs {
            let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::NONBLOCK)?;
            wake.push(Wake {
                consumer,
                notifier,
                woken: AtomicBool::new(false),
            });
        }
        let link = Arc::new(Link::new(port, &socket.display().to_string(), 0));
        link.set(false, false);
        Ok(Self {
            port: port.into(),
            socket,
            mode,
            pairs,
            queue_size,
            offered,
            acked: AtomicU64::new(0),
            slot: Mutex::new(None),
            generation: AtomicU64::new(0),
            wake,
            link,
            stop: AtomicBool::new(false),
            shutdown: Mutex::new(None),
            connections: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            malformed: Default::default(),
            rings_unmapped: AtomicU64::new(0),
            event_idx: AtomicBool::new(false),
            done: Mutex::new(false),
        })
    }

    /// A port with no socket thread (tests drive its rings by hand).
    #[cfg(test)]
    pub(crate) fn detached(port: &str, pairs: usize, acked: u64, conn: Conn) -> Self {
        let s = Self::new(port, "/nonexistent".into(), Mode::Client, pairs, 256, acked)
            .expect("eventfds");
        s.acked.store(acked, Ordering::Relaxed);
        *s.slot.lock().unwrap() = Some(Arc::new(conn));
        *s.done.lock().unwrap() = true;
        s
    }

    /// The flag a stop waits for (tests with no socket thread set it).
    #[cfg(test)]
    pub(crate) fn done_for_test(&self) -> std::sync::MutexGuard<'_, bool> {
        self.done.lock().unwrap()
    }

    /// Wakes worker `w` as a kick of one of its queues would.
    pub(crate) fn wake_worker(&self, w: usize) {
        if let Some(wk) = self.wake.get(w) {
            wk.post();
        }
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        for w in &self.wake {
            w.post();
        }
    }

    fn disconnect(&self) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.acked.store(0, Ordering::Relaxed);
        self.link.set(false, false);
        self.disconnects.fetch_add(1, Ordering::Relaxed);
        self.bump();
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sleeps up to `d`, waking early when the port stops.
    fn nap(&self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while !self.stopping() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the socket thread: ends the session, unblocks an `accept`, and waits (up to
    /// two seconds) for the thread to remove the socket.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            h.shutdown();
        }
        if self.mode == Mode::Server {
            // `accept` loops inside the crate: a connection of our own ends it.
            let _ = UnixStream::connect(&self.socket);
        }
        let end = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < end {
            if *self.done.lock().unwrap_or_else(|e| e.into_inner()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The backend the crate drives: it negotiates and hands the vrings over; the workers
/// do the datapath.
struct NetBackend {
    shared: Arc<Shared>,
    mem: Mem,
    captured: bool,
}

impl VhostUserBackendMut for NetBackend {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        2 * self.shared.pairs
    }

    fn max_queue_size(&self) -> usize {
        usize::from(self.shared.queue_size)
    }

    fn features(&self) -> u64 {
        self.shared.offered
    }

    fn acked_features(&mut self, features: u64) {
        // QEMU sends it once per queue pair: idempotent.
        self.shared.acked.store(features, Ordering::Relaxed);
        self.shared.bump();
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK
    }

    fn set_event_idx(&mut self, enabled: bool) {
        self.shared.event_idx.store(enabled, Ordering::Relaxed);
    }

    fn update_memory(&mut self, _mem: Mem) -> std::io::Result<()> {
        // The daemon replaced the map inside the atomic we hold a clone of.
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        vec![(1u64 << self.num_queues()) - 1]
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK).ok()
    }

    fn handle_event(
        &mut self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> std::io::Result<()> {
        if !self.captured {
            self.captured = true;
            *self.shared.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(Conn {
                vrings: vrings.to_vec(),
                mem: self.mem.clone(),
            }));
            self.shared.link.set(true, true);
            self.shared.bump();
            return Ok(());
        }
        // A kick (or a queue enabled): wake the worker whose queue it is.
        self.shared.wake_worker(usize::from(device_event / 2));
        Ok(())
    }
}

/// Binds a server socket (a stale socket file is replaced); refuses a path whose
/// directory does not exist.
pub(crate) fn listen(shared: &Shared) -> std::io::Result<Option<Listener>> {
    if shared.mode == Mode::Server && UnixStream::connect(&shared.socket).is_ok() {
        // Binding would unlink a socket another process serves.
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another process is listening on it",
        ));
    }
    match shared.mode {
        Mode::Client => Ok(None),
        Mode::Server => Listener::new(&shared.socket, true)
            .map(Some)
            .map_err(|e| std::io::Error::other(e.to_string())),
    }
}

/// The socket thread: one session after another until the port stops.
pub(crate) fn serve(shared: Arc<Shared>, mut listener: Option<Listener>) {
    let mut backoff = Duration::from_millis(100);
    let path = shared.socket.display().to_string();
    while !shared.stopping() {
        let mem: Mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let backend = Arc::new(RwLock::new(NetBackend {
            shared: shared.clone(),
            mem: mem.clone(),
            captured: false,
        }));
        let Ok(mut daemon) = VhostUserDaemon::new(shared.port.clone(), backend, mem) else {
            shared.nap(Duration::from_secs(1));
            continue;
        };
        let started = match listener.as_mut() {
            Some(l) => daemon.start(l),
            None => daemon.start_client(&path),
        };
        if shared.stopping() {
            daemon.request_shutdown();
            let _ = daemon.wait();
            exit(&daemon);
            break;
        }
        if started.is_err() {
            exit(&daemon);
            drop(daemon);
            shared.nap(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
            continue;
        }
        *shared.shutdown.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let ended = daemon.wait();
        shared
            .shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        shared.disconnect();
        exit(&daemon);
        drop(daemon);
        if ended.is_err() {
            shared.nap(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        } else {
            backoff = Duration::from_millis(100);
        }
    }
    if shared.mode == Mode::Server {
        let _ = std::fs::remove_file(&shared.socket);
    }
    *shared.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
}

/// Tells a daemon's epoll threads to end (dropping it joins them).
fn exit(daemon: &VhostUserDaemon<Arc<RwLock<NetBackend>>>) {
    for h in daemon.get_epoll_handlers() {
        h.send_exit_event();
    }
}

/// The virtio features a port offers: `tso`: the port takes TCP super-packets whole
/// (`tx-tcp-segmentation`), so the guest may be given them (GUEST_TSO4/6).
pub(crate) fn offered_features(pairs: usize, tso: bool) -> u64 {
    use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
    use virtio_bindings::bindings::virtio_net::{
        VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4,
        VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_MQ,
        VIRTIO_NET_F_MRG_RXBUF,
    };
    use virtio_bindings::bindings::virtio_ring::{
        VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
    };
    let bit = |b: u32| 1u64 << b;
    let mut f = bit(VIRTIO_F_VERSION_1)
        | bit(VIRTIO_NET_F_MRG_RXBUF)
        | bit(VIRTIO_RING_F_INDIRECT_DESC)
        | bit(VIRTIO_RING_F_EVENT_IDX)
        | bit(VIRTIO_NET_F_CSUM)
        | bit(VIRTIO_NET_F_HOST_TSO4)
        | bit(VIRTIO_NET_F_HOST_TSO6)
        | bit(VIRTIO_NET_F_GUEST_CSUM)
        | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
    if pairs > 1 {
        f |= bit(VIRTIO_NET_F_MQ);
    }
    if tso {
        f |= bit(VIRTIO_NET_F_GUEST_TSO4) | bit(VIRTIO_NET_F_GUEST_TSO6);
    }
    f
}
