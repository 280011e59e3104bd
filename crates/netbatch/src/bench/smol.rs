//! The peer a Rust user would pick instead: smoltcp's `Interface` with UDP sockets,
//! receiving the very frames the `gen` port writes (same buffers, same checksums to
//! verify), one poll per burst, the application draining its sockets after each poll.

use std::collections::VecDeque;

use netbatch_engine::{BufCache, Pkt, PktList, Pool};
use netbatch_ports::generator::GenPort;
use netbatch_ports::{Port, PortCx};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::udp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

/// A smoltcp device fed from pool buffers.
struct Dev {
    pool: Pool,
    rx: VecDeque<Pkt>,
    done: Vec<Pkt>,
    scratch: Vec<u8>,
    transmitted: u64,
}

struct Rx<'a> {
    p: Pkt,
    pool: &'a Pool,
    done: &'a mut Vec<Pkt>,
}

impl RxToken for Rx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(self.pool.get(&self.p).data());
        self.done.push(self.p);
        r
    }
}

struct Tx<'a> {
    buf: &'a mut Vec<u8>,
    count: &'a mut u64,
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.buf.resize(len, 0);
        *self.count += 1;
        f(self.buf)
    }
}

impl Device for Dev {
    type RxToken<'a> = Rx<'a>;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _: Instant) -> Option<(Rx<'_>, Tx<'_>)> {
        let p = self.rx.pop_front()?;
        Some((
            Rx {
                p,
                pool: &self.pool,
                done: &mut self.done,
            },
            Tx {
                buf: &mut self.scratch,
                count: &mut self.transmitted,
            },
        ))
    }

    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        Some(Tx {
            buf: &mut self.scratch,
            count: &mut self.transmitted,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c.max_burst_size = Some(64);
        c
    }
}

/// smoltcp receiving the generator's frames.
pub(crate) struct SmolBench {
    source: GenPort,
    pool: Pool,
    cache: BufCache,
    dev: Dev,
    iface: Interface,
    sockets: SocketSet<'static>,
    handles: Vec<SocketHandle>,
    burst: usize,
    list: PktList,
    /// Datagrams the application read.
    pub(crate) received: u64,
    /// Frames pulled from the generator.
    pub(crate) rx: u64,
    clock: std::time::Instant,
}

impl SmolBench {
    /// `gen` must address `mac`/`addr`, datagrams to `ports`.
    pub(crate) fn new(
        source: GenPort,
        pool: Pool,
        mac: [u8; 6],
        addr: core::net::Ipv4Addr,
        prefix: u8,
        ports: &[u16],
        burst: usize,
    ) -> anyhow::Result<Self> {
        let mut dev = Dev {
            pool: pool.clone(),
            rx: VecDeque::with_capacity(256),
            done: Vec::with_capacity(256),
            scratch: Vec::with_capacity(2048),
            transmitted: 0,
        };
        let cfg = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        let mut iface = Interface::new(cfg, &mut dev, Instant::from_millis(0));
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::Ipv4(addr), prefix));
        });
        let mut sockets = SocketSet::new(Vec::new());
        let mut handles = Vec::new();
        for &port in ports {
            let rx =
                udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 1024], vec![0; 64 * 1024]);
            let tx = udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 4], vec![0; 4096]);
            let mut s = udp::Socket::new(rx, tx);
            s.bind(port)
                .map_err(|e| anyhow::anyhow!("smoltcp bind {port}: {e}"))?;
            handles.push(sockets.add(s));
        }
        Ok(Self {
            source,
            cache: pool.cache(),
            pool,
            dev,
            iface,
            sockets,
            handles,
            burst,
            list: Vec::with_capacity(256),
            received: 0,
            rx: 0,
            clock: std::time::Instant::now(),
        })
    }

    /// Receives until `n` more frames have been pulled from the generator.
    pub(crate) fn run(&mut self, n: u64) {
        let target = self.rx + n;
        while self.rx < target {
            let want = self.burst.min((target - self.rx) as usize);
            let got = self.source.rx(
                &mut PortCx {
                    pool: &self.pool,
                    cache: &mut self.cache,
                    now_ns: 0,
                },
                &mut self.list,
                want,
            );
            self.rx += got;
            self.dev.rx.extend(self.list.drain(..));
            let now = Instant::from_micros(self.clock.elapsed().as_micros() as i64);
            self.iface.poll(now, &mut self.dev, &mut self.sockets);
            for &h in &self.handles {
                let s = self.sockets.get_mut::<udp::Socket<'_>>(h);
                while let Ok((data, _)) = s.recv() {
                    std::hint::black_box(data);
                    self.received += 1;
                }
            }
            // Frames smoltcp did not take (none, normally) are freed with the consumed ones.
            self.dev.done.extend(self.dev.rx.drain(..));
            self.cache.free_all(&mut self.dev.done);
        }
    }
}
